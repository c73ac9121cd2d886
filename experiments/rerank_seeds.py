"""What right-to-left models add to reranking, one seed at a time, chosen on val: the
ablation issue 17 asks for where an ingredient's gain is under 0.5 BLEU ("2-3 seeds").

1. The forward model (or ensemble: ``--model`` repeated) searches the validation split once
   per length penalty (``--length-penalty``), keeping the ``--rerank`` best of a beam that
   wide (:func:`nmtkit.decode.choice.reranking_search`); the reverse models
   (``--reverse-model``) score every candidate, and so does each right-to-left model
   (``--r2l-model``, one per seed, ``data.reverse_target``) on its own.
2. Arms: the beam alone (the search's best), the reverse model alone, the reverse model with
   each right-to-left seed, and with all the seeds as one (their mean log-probability, as
   ``--r2l-model`` repeated in ``nmtkit evaluate``). Each arm chooses its setting (length
   penalty x ``--reverse-weight`` x ``--r2l-weight``) by the validation ``--metric``
   (ties: the first in that order).
3. Only then is the test split searched (once per length penalty an arm chose) and each arm
   scored with its own choice. The test split never chooses anything.

Per seed: the gain of its arm over the reverse model alone, on val and on test; then their
mean and standard deviation. The same searches and scores serve every arm, so the arms
differ only in the models that rerank. Prints one JSON object; ``--out`` keeps it
(``benchmarks/report.py`` makes its table in ``docs/results.md``). A model of several
directions (``data.directions``) is studied in the one ``--tgt-lang`` (and ``--src-lang``)
names; as a reverse model it is asked for the source language, so a model trained both ways
can rerank its own candidates.

    NMTKIT_DATA=... python experiments/rerank_seeds.py --model runs/fwd/best.pt \\
        --reverse-model runs/rev/best.pt --r2l-model runs/r2l1/best.pt \\
        --r2l-model runs/r2l2/best.pt --metric bleu_official_tok --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_common.py

from _common import emit, machine
from mbr import add_direction_args, add_run_args, load_split, load_translator, score_lines, use_threads
from seeds import commit

from nmtkit.config import TUNE_METRICS
from nmtkit.decode.options import TranslateOptions

METRICS = (*TUNE_METRICS, "bleu_official_tok")
"""The scores an arm may choose by: ``nmtkit tune``'s, or BLEU against the official
lowercased tokenized Multi30k references."""


def candidate_lists(tr: Any, base: Any, sources: list[str], alpha: float,
                    tgt_lang: str | None) -> tuple[list[list[Any]], float]:
    """Every line's ``base.rerank`` best candidates of one search at length penalty
    ``alpha``, scored by ``tr.reverse`` (the reverse models), and the search's seconds."""
    from nmtkit.decode.choice import reranking_search

    tr.decode_cfg = reranking_search(replace(base, length_penalty=alpha))
    start = time.perf_counter()
    results = tr.translate(sources, TranslateOptions(tgt_lang=tgt_lang))
    return results, time.perf_counter() - start


def r2l_scores(results: list[list[Any]], sources: list[str], scorer: Any) -> list[list[Any]]:
    """One right-to-left scorer's per-token log-probability of every candidate (``None`` for
    a line without candidate tokens, which reranking leaves alone)."""
    from nmtkit.decode.rerank import with_reverse_scores

    return [[c.r2l_log_prob for c in cs] for cs in with_reverse_scores(results, sources, scorer)]


def with_r2l(results: list[list[Any]], per_seed: list[list[list[Any]]]) -> list[list[Any]]:
    """The candidates with the mean of the seeds' right-to-left scores (none: unscored)."""
    if not per_seed:
        return [[replace(c, r2l_log_prob=None) for c in cs] for cs in results]
    out = []
    for i, cs in enumerate(results):
        row = []
        for j, c in enumerate(cs):
            values = [seed[i][j] for seed in per_seed]
            mean = None if None in values else sum(values) / len(values)
            row.append(replace(c, r2l_log_prob=mean))
        out.append(row)
    return out


def chosen_lines(results: list[list[Any]], base: Any, setting: dict[str, Any]) -> list[str]:
    """Each line's output under ``setting`` (its reverse and right-to-left weights)."""
    from nmtkit.decode.choice import choose

    cfg = replace(base, **setting, n_best=1)
    return [choose(cs, cfg)[0].text if cs else "" for cs in results]


def arm_settings(arm: dict[str, Any], alphas: list[float], reverse_weights: list[float],
                 r2l_weights: list[float]) -> list[dict[str, Any]]:
    """The settings an arm chooses among, in the order ties fall."""
    ws = [0.0] if arm["kind"] == "beam" else reverse_weights
    vs = r2l_weights if arm["r2l_models"] else [0.0]
    return [{"length_penalty": a, "reverse_weight": w, "r2l_weight": v}
            for a in alphas for w in ws for v in vs]


def study(models: list[str], reverse_models: list[str], r2l_models: list[str], metric: str,
          alphas: list[float], reverse_weights: list[float], r2l_weights: list[float],
          rerank: int = 20, valid: str | None = None, test: str | None = None,
          batch_size: int | None = None, src_lang: str | None = None,
          tgt_lang: str | None = None) -> dict[str, Any]:
    """Steps 1-3 of the module's description; the result's ``arms`` (each with every val
    trial, its choice and the choice's test scores) and ``gains`` (per seed, then
    ``gain_mean``/``gain_sd``). ``src_lang``/``tgt_lang``: the direction that forward models
    of several directions (``data.directions``) are evaluated in; a reverse model of several
    directions is then asked for ``src_lang``."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.decode.reverse_models import reverse_scorer
    from nmtkit.decode.text_translator import decode_options

    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}")
    if not reverse_models or not r2l_models:
        raise ValueError("the study needs a reverse model and at least one right-to-left model")
    tr, data, direction, ask = load_translator(models, batch_size, src_lang, tgt_lang)
    tr.reverse = reverse_scorer([load_bundle(m) for m in reverse_models], direction,
                                reverse_models)
    seeds = [reverse_scorer([], direction, r2l=[load_bundle(m)], r2l_names=[m])
             for m in r2l_models]
    base = decode_options(tr.decode_cfg, rerank=rerank, mbr=0)
    valid, test = valid or data.valid, test or data.test
    arms = ([{"name": f"beam {rerank} alone", "kind": "beam", "r2l_models": []},
             {"name": "reverse model", "kind": "reverse", "r2l_models": []}]
            + [{"name": f"reverse + right-to-left {m}", "kind": "seed", "r2l_models": [m]}
               for m in r2l_models])
    if len(r2l_models) > 1:
        arms.append({"name": "reverse + all right-to-left seeds (mean)", "kind": "all",
                     "r2l_models": list(r2l_models)})
    seconds: dict[str, float] = {}

    def scored_split(name: str, wanted: list[float]) -> dict[float, tuple[list, list, Any]]:
        """Per length penalty: the candidates, each seed's right-to-left scores, and the
        split's references and official reference file."""
        src, ref, official = load_split(data, name)
        out = {}
        for a in wanted:
            results, took = candidate_lists(tr, base, src, a, ask)
            seconds[f"{name} search, length penalty {a:g}"] = round(took, 1)
            start = time.perf_counter()
            per_seed = [r2l_scores(results, src, s) for s in seeds]
            seconds[f"{name} right-to-left scores, length penalty {a:g}"] = round(
                time.perf_counter() - start, 1)
            out[a] = (results, per_seed, (ref, official))
        return out

    def arm_lines(split: dict[float, tuple[list, list, Any]], arm: dict[str, Any],
                  setting: dict[str, Any]) -> tuple[list[str], Any]:
        results, per_seed, refs = split[setting["length_penalty"]]
        picked = [per_seed[r2l_models.index(m)] for m in arm["r2l_models"]]
        return chosen_lines(with_r2l(results, picked), base, setting), refs

    val = scored_split(valid, alphas)
    for arm in arms:
        arm["trials"] = []
        for setting in arm_settings(arm, alphas, reverse_weights, r2l_weights):
            hyps, (ref, official) = arm_lines(val, arm, setting)
            arm["trials"].append({**setting, **score_lines(hyps, ref, official)})
        if metric not in arm["trials"][0]:
            raise ValueError(f"{metric}: {valid} has no official tokenized reference")
        best = max(range(len(arm["trials"])), key=lambda i: (arm["trials"][i][metric], -i))
        arm["chosen"] = {k: arm["trials"][best][k]
                         for k in ("length_penalty", "reverse_weight", "r2l_weight")}
        arm["val"] = arm["trials"][best]
    tst = scored_split(test, sorted({arm["chosen"]["length_penalty"] for arm in arms}))
    for arm in arms:
        hyps, (ref, official) = arm_lines(tst, arm, arm["chosen"])
        arm["test"] = score_lines(hyps, ref, official)
    reverse_arm = arms[1]
    gains = [{"r2l_model": arm["r2l_models"][0],
              "val": round(arm["val"][metric] - reverse_arm["val"][metric], 2),
              "test": round(arm["test"][metric] - reverse_arm["test"][metric], 2)}
             for arm in arms if arm["kind"] == "seed"]

    def spread(key: str) -> tuple[float, float | None]:
        values = [g[key] for g in gains]
        return (round(statistics.mean(values), 2),
                round(statistics.stdev(values), 2) if len(values) > 1 else None)

    spreads = {k: spread(k) for k in ("val", "test")}

    protocol = (f"{len(models)} model{'s as one ensemble' if len(models) > 1 else ''} "
                f"({', '.join(models)}, {direction.src}->{direction.tgt}) searched {valid} once "
                "per length penalty "
                f"({', '.join(f'{a:g}' for a in alphas)}), keeping the {rerank} best of a beam "
                f"that wide; the reverse model ({', '.join(reverse_models)}) and each "
                f"right-to-left model ({', '.join(r2l_models)}) scored every candidate "
                "(per-token log-probabilities). Each arm chose its length penalty, reverse "
                f"weight ({', '.join(f'{w:g}' for w in reverse_weights)}) and right-to-left "
                f"weight ({', '.join(f'{v:g}' for v in r2l_weights)}) by val {metric}; {test} "
                "was searched after every choice and scored once per arm with its choice. "
                "A seed's gain: its arm minus the reverse model's arm.")
    return {"models": models, "reverse_models": reverse_models, "r2l_models": r2l_models,
            "direction": direction.name, "metric": metric, "valid": valid, "test": test,
            "rerank": rerank, "grid": {"length_penalty": alphas,
                                       "reverse_weight": reverse_weights,
                                       "r2l_weight": r2l_weights},
            "protocol": protocol, "arms": arms, "gains": gains,
            "gain_mean": {k: v[0] for k, v in spreads.items()},
            "gain_sd": {k: v[1] for k, v in spreads.items()}, "seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True,
                   help="the forward checkpoint (repeat for an ensemble)")
    p.add_argument("--reverse-model", action="append", required=True,
                   help="a checkpoint of the reverse direction (repeat: their mean)")
    p.add_argument("--r2l-model", action="append", required=True,
                   help="a right-to-left checkpoint (data.reverse_target): one per seed")
    p.add_argument("--metric", choices=METRICS, default="bleu",
                   help="the validation score each arm chooses by")
    p.add_argument("--length-penalty", type=float, nargs="+", default=[0.6, 1.0])
    p.add_argument("--reverse-weight", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    p.add_argument("--r2l-weight", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--rerank", type=int, default=20, help="candidates (a beam that wide)")
    add_direction_args(p)
    add_run_args(p, "What right-to-left models add to reranking, seed by seed")
    a = p.parse_args(argv)
    import torch

    rates = use_threads(a.threads)
    result = study(a.model, a.reverse_model, a.r2l_model, a.metric, a.length_penalty,
                   a.reverse_weight, a.r2l_weight, a.rerank, a.valid, a.test, a.batch_size,
                   a.src_lang, a.tgt_lang)
    emit({"benchmark": "rerank_seeds", "machine": machine(), "torch": torch.__version__,
          "nmtkit_commit": commit(), "threads": torch.get_num_threads(),
          "matmul_gflops": rates, "title": a.title, "note": a.note, **result}, a.out)


if __name__ == "__main__":
    main()
