"""Minimum Bayes risk decoding or reranking against beam search, chosen on val and then
scored on test.

One model (or an ensemble: ``--model`` repeated) translates the validation split once per
decoding setting (``--setting``, each a comma-separated list of ``decode.*`` options, the
first one the baseline: by default the recipe's beam search, then MBR over 10 and 20 beam
candidates with BLEU+1 and equal weights, with the model's posterior as weights, with chrF,
and over 20 epsilon samples; with ``--reverse-model``, settings such as
``rerank=20,reverse_weight=1`` rerank a beam's n best with that model of the reverse
direction). Every setting is scored with sacreBLEU, ``bleu_lc_tok`` and, on Multi30k, BLEU against the
official lowercased tokenized references; the setting with the best validation ``--metric``
is chosen. Only then is the test split translated, with the baseline and with the chosen
setting, for the record: the test split never chooses anything.

    NMTKIT_DATA=... python experiments/mbr.py --model runs/x/best.pt --metric bleu_lc_tok \\
        --out benchmarks/results/mbr_X.json

Prints one JSON object; ``--out`` keeps it (``benchmarks/report.py`` makes its table).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_common.py

from _common import emit, gemm_peaks_gflops, machine
from seeds import commit

from nmtkit.config import TUNE_METRICS, DecodeConfig, build_section, parse_override
from nmtkit.decode.options import TranslateOptions

DEFAULT_SETTINGS = ["", "mbr=10", "mbr=20", "mbr=20,mbr_scale=1", "mbr=20,mbr_utility=chrf",
                    "mbr=20,sampling=true,sampling_epsilon=0.02"]
"""The baseline (the checkpoint's own decoding options), then MBR variants: over a beam's n
best (all weighing the same, the default, or weighted by the model's posterior), with chrF,
and over epsilon samples (Freitag et al. 2023)."""


def parse_setting(text: str) -> dict[str, Any]:
    """``"mbr=20,mbr_scale=0"`` -> ``{"mbr": 20, "mbr_scale": 0.0}``: each item read as a
    ``--set`` value is (:func:`nmtkit.config.parse_override`), then typed and checked as a
    config's ``decode`` section (``""``: no change)."""
    given: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        path, value = parse_override(item)
        given[".".join(path)] = value
    typed = build_section(DecodeConfig, given, "--setting", "")
    return {k: getattr(typed, k) for k in given}


def label(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "the checkpoint's decoding"


def run_split(tr: Any, base: DecodeConfig, setting: dict[str, Any], sources: list[str],
              references: list[str], official: Any, tgt_lang: str | None,
              searches: dict[str, tuple[list[Any], float]] | None = None) -> dict[str, Any]:
    """Scores of one setting on one split (``official``: the reference file of
    ``bleu_official_tok`` and its split and language, or ``None``). ``searches``: the
    reranked settings' candidate lists already searched on this split, by the search's
    options; settings that differ only in their weights (and MBR among the reranking's best)
    choose from one search, as ``nmtkit tune`` does ("seconds": that search's)."""
    from dataclasses import replace

    from nmtkit.decode.choice import choose, reranking_search
    from nmtkit.decode.text_translator import decode_options

    cfg = decode_options(base, **setting)
    if cfg.rerank and searches is not None:
        search = reranking_search(cfg)
        key = repr(search)  # every option of the search (a DecodeConfig is not hashable)
        if key not in searches:
            tr.decode_cfg = search
            start = time.perf_counter()
            results = tr.translate(sources, TranslateOptions(tgt_lang=tgt_lang))
            searches[key] = (results, time.perf_counter() - start)
        results, seconds = searches[key]
        hyps = [choose(r, replace(cfg, n_best=1))[0].text for r in results]
    else:
        tr.decode_cfg = cfg
        start = time.perf_counter()
        hyps = tr.translate_lines(sources, tgt_lang=tgt_lang)
        seconds = time.perf_counter() - start
    return {**score_lines(hyps, references, official), "seconds": round(seconds, 2)}


def score_lines(hyps: list[str], references: list[str], official: Any) -> dict[str, Any]:
    """sacreBLEU, chrF, ``bleu_lc_tok`` and the length ratio of ``hyps`` against
    ``references``, and BLEU against the official lowercased tokenized references where
    ``official`` (their file, split and language) is given."""
    from nmtkit.evaluate import multi30k_tok_bleu, score

    s = score(hyps, references)
    out = {"bleu": s["bleu"], "chrf": s["chrf"], "bleu_lc_tok": s["bleu_lc_tok"],
           "length_ratio": s["length_ratio"]}
    if official is not None:
        path, split, lang = official
        out["bleu_official_tok"] = multi30k_tok_bleu(hyps, split, lang, path)[0]
    return out


def load_split(data: Any, name: str) -> tuple[list[str], list[str], Any]:
    """Split ``name`` of the data section ``data``: its source lines, its references, and on
    Multi30k the official lowercased tokenized reference (file, split, language) or ``None``."""
    from nmtkit.data.corpora import load_parallel
    from nmtkit.evaluate import official_reference

    par = load_parallel(data, name)
    official = None
    if data.corpus == "multi30k":
        path = official_reference(name, data.tgt_lang)
        official = None if path is None else (path, name, data.tgt_lang)
    return par.src, par.tgt, official


def load_translator(models: list[str], batch_size: int | None = None, src_lang: str | None = None,
                    tgt_lang: str | None = None) -> tuple[Any, Any, Any, str | None]:
    """The checkpoints ``models`` as one translator (an ensemble where several), the data
    section and direction it is evaluated in, and the target language to ask a model of
    several directions for (``None`` for a model of one)."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.data.directions import evaluation_direction
    from nmtkit.decode.ensemble import ensemble_translator

    bundles = [load_bundle(m) for m in models]
    tr = ensemble_translator(bundles, models, batch_size=batch_size)
    data, direction = evaluation_direction(bundles[0].cfg.data, src_lang, tgt_lang)
    return tr, data, direction, direction.tgt if bundles[0].cfg.data.directions else None


def compare(models: list[str], settings: list[str], metric: str, valid: str | None = None,
            test: str | None = None, batch_size: int | None = None,
            reverse_models: list[str] | None = None, src_lang: str | None = None,
            tgt_lang: str | None = None, r2l_models: list[str] | None = None) -> dict[str, Any]:
    """Every setting on the validation split, the best by ``metric``, then the baseline and
    it on the test split. ``reverse_models``: checkpoints of the reverse direction, for the
    settings that rerank (``rerank=N,reverse_weight=W``): a model of several directions may be
    one, the forward model itself included. ``r2l_models``: right-to-left checkpoints of the
    forward direction (``data.reverse_target``) for settings with ``r2l_weight``.
    ``src_lang``/``tgt_lang``: the direction a model of several directions translates (as
    ``nmtkit evaluate``'s)."""
    from nmtkit.checkpoint import load_bundle

    if metric not in TUNE_METRICS:
        raise ValueError(f"--metric must be one of {', '.join(TUNE_METRICS)}")
    parsed = [parse_setting(s) for s in settings]
    tr, data, direction, ask = load_translator(models, batch_size, src_lang, tgt_lang)
    if reverse_models or r2l_models:
        from nmtkit.decode.reverse_models import reverse_scorer

        tr.reverse = reverse_scorer([load_bundle(m) for m in reverse_models or []], direction,
                                    reverse_models or [],
                                    r2l=[load_bundle(m) for m in r2l_models or []],
                                    r2l_names=r2l_models or [])
    base = tr.decode_cfg
    valid, test = valid or data.valid, test or data.test

    src, ref, official = load_split(data, valid)
    searches: dict[str, Any] = {}
    rows = [{"setting": label(p), "options": p,
             "val": run_split(tr, base, p, src, ref, official, ask, searches)} for p in parsed]
    best = max(range(len(rows)), key=lambda i: (rows[i]["val"][metric], -i))
    src, ref, official = load_split(data, test)
    searches = {}
    for i in sorted({0, best}):
        rows[i]["test"] = run_split(tr, base, parsed[i], src, ref, official, ask, searches)
    protocol = (f"{len(models)} model{'s as one ensemble' if len(models) > 1 else ''} "
                f"({', '.join(models)}) translated {valid} once per decoding setting; the "
                f"setting with the best val {metric} was chosen; {test} was then translated "
                "with the baseline (the first row) and with the chosen setting only, after the "
                "choice. MBR (nmtkit.decode.mbr): decode.mbr candidates (the n best of a beam "
                "at least that wide), the expected sentence-level utility (mbr_utility: BLEU+1 "
                "or chrF) against the candidates weighted by P(y|x)^mbr_scale renormalised.")
    if reverse_models:
        protocol += (" Reranking (nmtkit.decode.rerank): decode.rerank candidates (the n best of "
                     "a beam at least that wide) ordered by their beam score plus reverse_weight "
                     "times the reverse model's log P(source | candidate) per source token "
                     f"(reverse model{'s, their mean' if len(reverse_models) > 1 else ''}: "
                     f"{', '.join(reverse_models)}).")
    if r2l_models:
        protocol += (" Right-to-left models (data.reverse_target) add r2l_weight times their "
                     "log P(candidate | source) per token, read from the candidate's end "
                     f"({', '.join(r2l_models)}).")
    if any(p.get("rerank") for p in parsed):
        protocol += (" Reranked settings that differ only in their weights (or MBR among the "
                     "reranking's best) choose from one search of the split.")
    return {"models": models, "direction": direction.name, "metric": metric, "valid": valid,
            "test": test,
            "reverse_models": reverse_models or [], "r2l_models": r2l_models or [],
            "protocol": protocol,
            "decode": {"beam": base.beam, "length_penalty": base.length_penalty},
            "chosen": best, "rows": rows}


def add_run_args(p: argparse.ArgumentParser, title: str) -> None:
    """The options every choose-on-val benchmark takes: the splits, batch size, threads, and
    the title, note and file of its JSON."""
    p.add_argument("--valid", help="validation split (default: the checkpoint's data.valid)")
    p.add_argument("--test", help="test split (default: the checkpoint's data.test)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--title", default=title)
    p.add_argument("--note", default="")
    p.add_argument("--out", help="also write the JSON here")


def add_direction_args(p: argparse.ArgumentParser) -> None:
    """``--tgt-lang``/``--src-lang``: the direction a model of several directions
    (``data.directions``) is evaluated in (:func:`load_translator`)."""
    p.add_argument("--tgt-lang", help="a model of several directions (data.directions): the "
                   "language to translate into")
    p.add_argument("--src-lang", help="... and the source language, where several directions "
                   "go into --tgt-lang")


def use_threads(threads: int) -> dict[str, float]:
    """Set torch's threads (0: its default) and measure the matrix-product rates at that
    count, for the JSON."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    return gemm_peaks_gflops(torch.get_num_threads())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True,
                   help="a checkpoint (repeat for an ensemble)")
    p.add_argument("--reverse-model", action="append", default=None,
                   help="a checkpoint of the reverse direction for settings with rerank=N "
                   "(repeat to average several)")
    p.add_argument("--r2l-model", action="append", default=None,
                   help="a right-to-left checkpoint of the forward direction (data.reverse_target) "
                   "for settings with rerank=N and r2l_weight=V (repeat to average several)")
    p.add_argument("--setting", action="append", default=None,
                   help="decode.* options, comma-separated KEY=VALUE (repeat; the first is the "
                   f"baseline; default: {' | '.join(repr(s) for s in DEFAULT_SETTINGS)})")
    p.add_argument("--metric", choices=TUNE_METRICS, default="bleu",
                   help="the validation score that chooses (bleu_lc_tok for a lowercased model)")
    add_direction_args(p)
    add_run_args(p, "Minimum Bayes risk decoding against beam search")
    a = p.parse_args(argv)
    import torch

    rates = use_threads(a.threads)
    result = compare(a.model, a.setting or DEFAULT_SETTINGS, a.metric, a.valid, a.test,
                     a.batch_size, a.reverse_model, a.src_lang, a.tgt_lang, a.r2l_model)
    emit({"benchmark": "mbr", "machine": machine(), "torch": torch.__version__,
          "nmtkit_commit": commit(),
          "threads": torch.get_num_threads(), "matmul_gflops": rates, "title": a.title,
          "note": a.note,
          **result}, a.out)


if __name__ == "__main__":
    main()
