"""Training that starts from another model: ``nmtkit train NEW.yaml --init-from PARENT.pt``.

The child run takes the parent's weights, tokenizers and vocabularies (the new corpus is
encoded with them, so a word the parent never saw becomes ``<unk>``: the rate is logged),
and starts a fresh optimizer and schedule (its own warmup). ``train.freeze`` keeps groups of
parameters fixed; ``train.forgetting_splits`` scores named splits before training and at
its end, so that what the model gained on the new data can be set against what it lost on
the old (``forgetting.json``).

``nmtkit train NEW.yaml --vocab-from OTHER.pt`` takes only the tokenizers and vocabularies
(fresh weights, any model size): runs that must share one vocabulary, such as a distilled
student that is to join its teachers' ensemble.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..checkpoint import Bundle
from ..config import FREEZE_GROUPS, Config, ConfigError, DataConfig, split_direction_name
from ..data.batching import ParallelIds
from ..data.corpora import load_parallel
from ..data.vocab import UNK
from ..decode.translator import Translator
from ..evaluate import score
from ..io import atomic_write_text

log = logging.getLogger(__name__)

TOKENIZER_KEYS = ("tokenizer", "spm_model_type", "vocab_size", "joint_vocab", "min_freq",
                  "tokenizer_sample", "lowercase")
"""``data`` keys that shape the tokenizers and vocabularies: a child run takes its parent's."""


def check_parent(parent_config: dict[str, Any], cfg: Config, parent: str | Path) -> Config:
    """The child's ``model`` section must be the parent's (the weights are loaded as they
    are); differences in how text became tokens are reported, not refused (the parent's
    tokenizers are used). Returns the parent's config."""
    try:
        pcfg = Config.from_dict(parent_config, str(parent))  # old checkpoints: defaults filled in
    except ConfigError as e:
        raise ConfigError(f"{parent}: stored config is invalid: {e}") from None
    shown = config_differences("model", pcfg.to_dict()["model"], cfg.to_dict()["model"],
                               "the parent")
    if shown:
        raise ConfigError(f"--init-from {parent}: the model section must match the parent's: "
                          f"{shown}")
    warn_tokenizer_differences(pcfg, cfg, "--init-from")
    return pcfg


def config_differences(section: str, theirs: dict[str, Any], mine: dict[str, Any],
                       whose: str) -> str:
    """Each key of a config section whose value differs between a checkpoint's (``theirs``)
    and this run's, with both values: ``model.d_model = 32 in the parent, 64 here`` (keys of
    either side, comma-separated; "" when the sections are equal). What a refusal to build
    on a checkpoint (``--init-from``, ``--resume``) shows, so that the key can be put back."""
    keys = [*theirs, *(k for k in mine if k not in theirs)]
    return ", ".join(f"{section}.{k} = {theirs.get(k)!r} in {whose}, {mine.get(k)!r} here"
                     for k in keys if theirs.get(k) != mine.get(k))


def check_vocab_source(source_config: dict[str, Any], cfg: Config, source: str | Path) -> None:
    """``nmtkit train --vocab-from CKPT``: a fresh model (any ``model`` section) that encodes
    its corpus with CKPT's tokenizers and vocabularies, e.g. a distilled student that can
    join its teachers' ensemble (:mod:`nmtkit.decode.ensemble` needs one vocabulary). As for
    a parent, differences in how text became tokens are reported, not refused."""
    try:
        scfg = Config.from_dict(source_config, str(source))
    except ConfigError as e:
        raise ConfigError(f"{source}: stored config is invalid: {e}") from None
    warn_tokenizer_differences(scfg, cfg, "--vocab-from")


def warn_tokenizer_differences(given: Config, cfg: Config, flag: str) -> None:
    """Log the ``data`` keys that shaped ``given``'s tokenizers and differ in ``cfg``: the
    given checkpoint's tokenizers and vocabularies are used whatever they say."""
    ignored = [k for k in TOKENIZER_KEYS if getattr(cfg.data, k) != getattr(given.data, k)]
    if ignored:
        log.warning("%s: data.%s differ from the checkpoint's and are ignored: its tokenizers "
                    "and vocabularies encode the new corpus", flag, ", data.".join(ignored))
    if cfg.data.reverse_source != given.data.reverse_source:
        log.warning("%s: data.reverse_source differs from the checkpoint's (it read its sources "
                    "%s)", flag, "reversed" if given.data.reverse_source else "in order")


UNK_WARNING = 0.05
"""The share of ``<unk>`` (on either side) above which fine-tuning data is reported as a
warning: the parent's vocabulary misses a word in 20 of this data, which the model can then
neither read nor write."""


def report_unknown_rates(ids: ParallelIds, given: dict[str, Any]) -> None:
    """Log the share of ``<unk>`` in the training data under ``given``'s vocabularies (the
    checkpoint of ``--init-from`` or ``--vocab-from``): INFO, or above :data:`UNK_WARNING` a
    warning that says which vocabulary would cover the data."""
    src_unk, tgt_unk = unknown_rates(ids)
    rates = (f"the training data under the given vocabularies: {100 * src_unk:.2f}% of source "
             f"and {100 * tgt_unk:.2f}% of target tokens are <unk>")
    if max(src_unk, tgt_unk) <= UNK_WARNING:
        log.info("%s", rates)
        return
    tokenizer = given.get("config", {}).get("data", {}).get("tokenizer", "?")
    log.warning("%s, more than 1 in %d: words the vocabulary of --init-from/--vocab-from "
                "(data.tokenizer: %s) never saw, which the model reads and writes as one "
                "unknown token. Use a vocabulary that covers this data: a parent (or "
                "--vocab-from checkpoint) whose subword vocabulary (data.tokenizer: "
                "sentencepiece) was learnt on text like it; or train without --init-from/"
                "--vocab-from, so that the run learns one from this data",
                rates, round(1 / UNK_WARNING), tokenizer)


def unknown_rates(ids: ParallelIds) -> tuple[float, float]:
    """Fraction of ``<unk>`` among the source and target tokens (source EOS not counted)."""
    n_src = len(ids.src_tokens) - len(ids)
    src_unk = int(np.count_nonzero(np.asarray(ids.src_tokens) == UNK))
    tgt_unk = int(np.count_nonzero(np.asarray(ids.tgt_tokens) == UNK))
    return src_unk / max(n_src, 1), tgt_unk / max(len(ids.tgt_tokens), 1)


def parameter_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Every distinct parameter of a model, in exactly one of :data:`FREEZE_GROUPS`.

    ``embeddings``: the weights of the ``nn.Embedding`` tables, and anything tied to them
    (a tied pre-softmax projection *is* the target embedding). ``encoder``: the rest of
    the modules whose name starts with ``encoder`` (the Transformer's ``encoder_layers``
    and ``encoder_norm``, the RNN's ``encoder``). ``decoder``: everything else (decoder
    layers or GRU, the RNN's attention, the output projection's bias or untied weight).
    """
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    groups: dict[str, list[nn.Parameter]] = {g: [] for g in FREEZE_GROUPS}
    for name, p in model.named_parameters():  # each shared parameter once
        if id(p) in embedding_ids:
            groups["embeddings"].append(p)
        elif name.startswith("encoder"):
            groups["encoder"].append(p)
        else:
            groups["decoder"].append(p)
    return groups


def freeze(model: nn.Module, names: tuple[str, ...]) -> int:
    """Turn off ``requires_grad`` for the named groups; returns how many weights are frozen."""
    groups = parameter_groups(model)
    n = 0
    for g in names:
        for p in groups[g]:
            p.requires_grad_(False)
            n += p.numel()
    return n


def split_direction(name: str, data: DataConfig) -> tuple[DataConfig, str, str | None]:
    """A ``train.forgetting_splits`` entry -> (the data config to read it with, the split,
    the target language to ask the translator for).

    ``SRC-TGT:SPLIT`` (e.g. ``de-en:test_2016_flickr``) reads the split of the same corpus in
    that direction (:func:`nmtkit.config.split_direction_name`), so a model fine-tuned on the
    other direction can be scored on its parent's; a plain name is read in the run's own
    direction. The language is ``TGT`` for a model of ``data.directions`` (its ``<2xx>``
    token picks the output), ``None`` for a model of one direction (it has one output
    language: what it writes for the other direction's sources is what is scored)."""
    direction, split = split_direction_name(name)
    if direction is None:
        return data, name, None
    src, tgt = direction
    read = dataclasses.replace(data, src_lang=src, tgt_lang=tgt, directions=())
    return read, split, tgt if data.directions else None


def score_splits(bundle: Bundle, data: DataConfig, splits: tuple[str, ...]) -> dict[str, Any]:
    """BLEU and chrF (sacreBLEU) of the bundle's model on each split, with the config's
    search (no reranking: there is no reverse model here), under the names as written; a
    ``SRC-TGT:SPLIT`` entry is read in that direction (:func:`split_direction`)."""
    out: dict[str, Any] = {}
    was_training = bundle.model.training
    bundle.model.eval()
    try:
        translator = Translator.from_bundle(bundle, fast=False, rerank=0)  # (no reverse model here)
        for name in splits:
            split_data, split, tgt_lang = split_direction(name, data)
            par = load_parallel(split_data, split)
            with torch.no_grad():
                hyps = translator.translate_lines(par.src, tgt_lang=tgt_lang)
            s = score(hyps, par.tgt)
            out[name] = {"bleu": s["bleu"], "chrf": s["chrf"], "n": s["n"]}
            log.info("%s: BLEU %.2f chrF %.2f (%d sentences)", name, s["bleu"], s["chrf"], s["n"])
    finally:
        bundle.model.train(was_training)
    return out


def forgetting_report(before: dict[str, Any], after: dict[str, Any],
                      parent: str | None, step: int) -> dict[str, Any]:
    """``{"parent", "step", "splits": {name: {"before", "after", "delta"}}}``; delta = after -
    before for BLEU and chrF (negative on the old data: what was forgotten)."""
    splits: dict[str, Any] = {}
    for name in after:
        b, a = before.get(name), after[name]
        delta = ({k: round(a[k] - b[k], 2) for k in ("bleu", "chrf")} if b is not None else None)
        splits[name] = {"before": b, "after": a, "delta": delta}
    return {"parent": parent, "step": step, "splits": splits}


def write_forgetting_report(path: Path, report: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")


def report_forgetting(bundle: Bundle, data: DataConfig, splits: tuple[str, ...],
                      before: dict[str, Any], parent: str | None, step: int, path: Path) -> None:
    """At the end of training: ``splits`` scored again (:func:`score_splits`), against
    ``before``, into ``path`` (``<run>/forgetting.json``, :func:`forgetting_report`)."""
    after = score_splits(bundle, data, splits)
    write_forgetting_report(path, forgetting_report(before, after, parent, step))
    log.info("forgetting report: %s", path)
