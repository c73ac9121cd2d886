"""Validation: how good the model is now, and whether it is the best so far.

Every ``train.valid_every`` updates the loop asks for:

- the validation loss and perplexity with teacher forcing, and the BLEU of greedy
  translations (:func:`validation_scores`; per direction with ``data.directions``);
- the row of ``metrics.csv`` those make with the training loss since the last validation
  (:class:`Window`, :func:`metrics_row`), and its log line (:func:`log_validation`);
- whether it improved on the best so far, which chooses ``best.pt`` and counts towards
  early stopping (``train.patience``; :func:`improved`);
- every ``train.sample_every`` validations, a few sentences translated, to read
  (:func:`sample_translations`).

Whatever stops a run (a budget, early stopping, Ctrl-C), the run ends with a validation of
the update it stopped at, unless its last one was of that update (:func:`due`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import fast
from ..checkpoint import Bundle
from ..config import TrainConfig
from ..data.batching import ParallelIds
from ..data.multilingual import DirectedSplit
from ..decode.translator import Translator
from ..evaluate import perplexity, score
from ..models.loss import label_smoothed_cross_entropy
from .run_dir import Progress, restore_rng, rng_state

log = logging.getLogger(__name__)


@torch.no_grad()
def validation_scores(bundle: Bundle, valid_ids: ParallelIds, valid_sets: list[DirectedSplit],
                      device: torch.device,
                      autocast: Callable[[], torch.autocast]) -> dict[str, float]:
    """Validation loss and perplexity (teacher forcing), and greedy BLEU, of ``bundle.model``.
    With ``data.directions``: the loss over every direction, BLEU per direction
    (``bleu_<src>-<tgt>``) and ``valid_bleu`` their mean (what ``early_stop_metric``
    reads). A model trained on lowercased text (``data.lowercase``) writes no capitals:
    its BLEU is ``bleu_lc_tok`` (lowercased, tokenized), not cased sacreBLEU, so that
    ``best.pt`` is chosen for its words rather than for the case it never learnt."""
    model = bundle.model
    was_training = model.training
    model.eval()
    try:  # (a Ctrl-C inside leaves the model in the mode it was in: last.pt is saved after)
        return _scores(bundle, valid_ids, valid_sets, device, autocast)
    finally:
        model.train(was_training)


def _scores(bundle: Bundle, valid_ids: ParallelIds, valid_sets: list[DirectedSplit],
            device: torch.device, autocast: Callable[[], torch.autocast]) -> dict[str, float]:
    """:func:`validation_scores` of the model in eval mode."""
    model, cfg = bundle.model, bundle.cfg
    t = cfg.train
    loss_sum, nll_sum, n_tok = 0.0, 0.0, 0
    for idx in valid_ids.batches(t.max_tokens, shuffle=False):
        b = valid_ids.collate(idx).to(device)
        with autocast():
            logits = model.logits(b.src, b.src_mask, b.tgt_in)
        loss, nll, n = label_smoothed_cross_entropy(logits, b.tgt_out, t.label_smoothing)
        loss_sum += float(loss)
        nll_sum += float(nll)
        n_tok += int(n)
    out = {"valid_loss": loss_sum / max(n_tok, 1), "valid_ppl": perplexity(nll_sum, n_tok)}
    if t.valid_bleu:
        bleus: dict[str | None, float] = {}
        metric = "bleu_lc_tok" if cfg.data.lowercase else "bleu"
        # Packed weights for the decoding only (nmtkit.fast), unpacked before training goes on.
        with fast.inference(model, enabled=cfg.decode.fast):
            translator = Translator.from_bundle(bundle, fast=False, mbr=0, rerank=0)  # greedy: no MBR
            for vs in valid_sets:
                n = t.valid_max_sents or len(vs.text.src)
                hyps = translator.translate_lines(vs.text.src[:n], beam=1, tgt_lang=vs.tgt_lang)
                bleus[vs.name] = score(hyps, vs.text.tgt[:n])[metric]
        out["valid_bleu"] = round(sum(bleus.values()) / len(bleus), 2)
        out.update({f"bleu_{name}": b for name, b in bleus.items() if name is not None})
    return out


def _compared(t: TrainConfig, metrics: dict[str, float]) -> tuple[float, bool]:
    """The figure of ``metrics`` that ``train.early_stop_metric`` compares (higher BLEU, or
    lower loss where there is no BLEU or it is asked for), and whether higher is better."""
    if t.early_stop_metric == "bleu" and "valid_bleu" in metrics:
        return metrics["valid_bleu"], True
    return metrics["valid_loss"], False


def beats(t: TrainConfig, best: float | None, metrics: dict[str, float]) -> bool:
    """Whether ``metrics`` beat ``best``, the best validation so far (None: there was none)."""
    value, higher = _compared(t, metrics)
    return best is None or (value > best if higher else value < best)


def improved(t: TrainConfig, p: Progress, metrics: dict[str, float]) -> bool:
    """Whether ``metrics`` beat the best validation so far (:func:`beats`), which then
    becomes ``metrics``; counts the validations without improvement that
    ``train.patience`` stops after."""
    if beats(t, p.best, metrics):
        p.best, p.bad_validations = _compared(t, metrics)[0], 0
        return True
    p.bad_validations += 1
    return False


def due(p: Progress) -> bool:
    """Whether a run that stops now (whatever stops it) has a validation left to do: it
    has, unless its last validation was of this very update (early stopping's, or one
    every ``train.valid_every`` that fell on the stop) or nothing has been trained."""
    return p.step > 0 and (not p.history or p.history[-1]["step"] != p.step)


@contextmanager
def rng_untouched() -> Iterator[None]:
    """The random generators as they were before the block, after it: a validation that
    the run does not go on from (Ctrl-C's) leaves no trace in what a resumed run draws."""
    state = rng_state()
    try:
        yield
    finally:
        restore_rng(state)


@dataclass
class Window:
    """The updates since the last validation: their training loss, NLL and target tokens,
    when they began (``t0``, on the loop's clock) and the rate of the latest (``lr``)."""

    lr: float
    t0: float
    loss: float = 0.0
    nll: float = 0.0
    tok: int = 0

    def add(self, loss: float, nll: float, tok: int, lr: float) -> None:
        """One more update's loss and NLL sums over its ``tok`` target tokens, at rate ``lr``."""
        self.loss, self.nll, self.tok, self.lr = self.loss + loss, self.nll + nll, self.tok + tok, lr


def metrics_row(p: Progress, window: Window, metrics: dict[str, float],
                elapsed_s: float) -> dict[str, Any]:
    """The row of ``metrics.csv``: the training loss and perplexity over ``window`` (the
    updates since the last validation) and its latest rate, then the validation's ``metrics``."""
    tok = max(window.tok, 1)
    return {"step": p.step, "epoch": p.epoch, "train_loss": round(window.loss / tok, 4),
            "train_ppl": round(perplexity(window.nll, tok), 3),
            "valid_loss": round(metrics["valid_loss"], 4),
            "valid_ppl": round(metrics["valid_ppl"], 3),
            "valid_bleu": metrics.get("valid_bleu", ""), "lr": f"{window.lr:.6g}",
            "tgt_tokens": p.tgt_tokens, "elapsed_s": round(elapsed_s, 1),
            **{k: v for k, v in metrics.items() if k.startswith("bleu_")}}  # per direction


def notify(on_validation: Callable[[Path], None] | None, run_dir: Path) -> None:
    """Call ``on_validation(run_dir)`` after a validation has written ``metrics.csv`` (e.g.
    the CLI's curves.png redraw); a failing callback is a warning, never the end of training."""
    if on_validation is None:
        return
    try:
        on_validation(run_dir)
    except Exception as e:  # noqa: BLE001 (a figure must never stop training)
        log.warning("after-validation callback failed: %s", e)


def log_validation(logger: logging.Logger, step: int, metrics: dict[str, float],
                   best: bool) -> None:
    """One line: loss, perplexity, BLEU (and each direction's), whether it is the best."""
    per_direction = "".join(f" {k.removeprefix('bleu_')} {v}" for k, v in metrics.items()
                            if k.startswith("bleu_"))
    logger.info("step %d: valid loss %.4f ppl %.2f bleu %s%s%s", step, metrics["valid_loss"],
                metrics["valid_ppl"], metrics.get("valid_bleu", "-"),
                f" (mean of{per_direction})" if per_direction else "", " (best)" if best else "")


@torch.no_grad()
def sample_translations(bundle: Bundle, valid_sets: list[DirectedSplit], p: Progress,
                        append: Callable[[list[str]], None]) -> list[tuple[str, str, str]]:
    """Every ``train.sample_every`` validations: the first ``train.samples`` validation
    sentences, greedy-translated, as (source, reference, hypothesis) into the log and
    through ``append`` (:func:`~nmtkit.train.run_dir.append_samples`: ``<run>/samples.txt``)
    under a step header. Returns them ([] when it is not the time)."""
    t, model = bundle.cfg.train, bundle.model
    if not t.sample_every or len(p.history) % t.sample_every:
        return []
    # data.directions: the first sentences of each direction, labelled with it
    shown = [(vs.name, vs.tgt_lang, vs.text.src[:t.samples], vs.text.tgt[:t.samples])
             for vs in valid_sets]
    if not any(src for _, _, src, _ in shown):
        return []
    was_training = model.training
    model.eval()
    try:
        with fast.inference(model, enabled=bundle.cfg.decode.fast):
            translator = Translator.from_bundle(bundle, fast=False, mbr=0, rerank=0)  # greedy, as said
            hyps = [translator.translate_lines(src, beam=1, tgt_lang=lang)
                    for _, lang, src, _ in shown]
    finally:
        model.train(was_training)
    samples: list[tuple[str, str, str]] = []
    body: list[str] = []
    for (name, _, src, ref), hs in zip(shown, hyps, strict=True):
        where = f" {name}" if name else ""
        for s, r, h in zip(src, ref, hs, strict=True):
            i = len(samples) + 1
            samples.append((s, r, h))
            body += [f"[{i}]{where} src: {s}", f"[{i}]{where} ref: {r}", f"[{i}]{where} hyp: {h}"]
    lines = [f"== step {p.step}, epoch {p.epoch}: {len(samples)} validation sentences, greedy ==",
             *body]
    for line in lines:
        log.info("%s", line)
    append(lines)
    return samples
