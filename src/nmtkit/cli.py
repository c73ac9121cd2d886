"""nmtkit: attention-based neural machine translation.

Commands: prepare, train, translate, evaluate, backtranslate, distill, average, plot, serve,
export.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .io import OutputError, refuse_overwriting_inputs, write_or_keep

if TYPE_CHECKING:
    from .checkpoint import Bundle
    from .config import DataConfig
    from .data.multilingual import Direction
    from .decode.translator import TextTranslator, Translation, Translator
    from .serve.app import ServedBundle


class InputError(ValueError):
    """Input text that cannot be read (the message names where)."""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def cmd_train(a: argparse.Namespace) -> int:
    from .config import check_trainable, load
    from .train.loop import train

    sets = [*a.set, *(["train.fast=false", "decode.fast=false"] if a.no_fast else [])]
    if a.report_splits:
        sets.append(f"train.forgetting_splits={json.dumps(a.report_splits)}")
    cfg = load(a.config, sets)
    check_trainable(cfg, a.config)
    run_dir = Path(a.run_dir) if a.run_dir else Path("runs") / cfg.name
    result = train(cfg, run_dir, resume=a.resume, overwrite=a.overwrite,
                   on_validation=_curves_callback(), init_from=a.init_from,
                   vocab_from=a.vocab_from)
    from .train.distributed import world_info

    if world_info()[0] == 0:  # under torchrun every rank returns the same summary: print it once
        print(json.dumps({"run_dir": str(run_dir), **result}))
    return 0


def _curves_callback() -> Callable[[str | Path], None] | None:
    """``curves.png`` redrawn after each validation when matplotlib is installed, else None."""
    try:
        from .viz.curves import redraw_curves
    except ImportError:
        return None
    return redraw_curves


def _read_input(path: str | None) -> list[str]:
    if path and path != "-":
        from .data.corpora import read_lines

        return read_lines(path)
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"<stdin>:{line}: invalid UTF-8") from None
    # Split on "\n" only: str.splitlines() would also break at \x1c, \x85, \u2028 and friends,
    # and one input line must always give exactly one output line.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _one_line(text: str) -> str:
    """A translation never spans lines (output line i answers input line i)."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def _decode_overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The decoding options translate/evaluate flags give (``None``: the checkpoint's); they
    are resolved, as the server's, by :func:`nmtkit.decode.translator.decode_options`."""
    n_samples = getattr(a, "n_samples", None)
    if n_samples is not None and not a.sampling:
        raise ValueError("--n-samples needs --sampling")
    return {"beam": a.beam, "n_best": n_samples or getattr(a, "n_best", None),
            "length_penalty": a.length_penalty, "max_len_a": a.max_len_a,
            "max_len_b": a.max_len_b,
            "batch_size": a.batch_size, "fast": False if a.no_fast else None,
            "early_stop": True if a.early_stop else None,
            "sampling": True if a.sampling else None, "sampling_temperature": a.temperature,
            "sampling_top_k": a.top_k, "sampling_top_p": a.top_p, "sampling_seed": a.seed,
            "sampling_epsilon": a.epsilon,
            "mbr": a.mbr, "mbr_utility": a.mbr_utility, "mbr_scale": a.mbr_scale,
            "rerank": getattr(a, "rerank", None),
            "reverse_weight": getattr(a, "reverse_weight", None),
            "r2l_weight": getattr(a, "r2l_weight", None),
            "alignment_layer": getattr(a, "alignment_layer", None),
            "alignment_head": getattr(a, "alignment_head", None)}


def _set_threads(threads: int) -> None:
    """``--threads``: torch's intra-op threads for this process (0 = PyTorch's default, one per
    core). Two jobs that each use every core of a small CPU slow each other far more than
    twofold (threads wait on each other's time slices), so a job beside another takes fewer."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def _translator(a: argparse.Namespace, overrides: dict[str, Any] | None = None
                ) -> tuple[Bundle, Translator]:
    """(the first checkpoint's bundle, a translator of the one or more ``--model`` given);
    ``overrides`` (default: :func:`_decode_overrides`) replace some decoding options."""
    from .checkpoint import load_bundle
    from .decode.ensemble import ensemble_translator

    if overrides is None:
        overrides = _decode_overrides(a)
    _set_threads(a.threads)
    bundles = [load_bundle(m, a.device, verify=not a.no_verify) for m in a.model]
    tr = ensemble_translator(bundles, a.model, **overrides)
    if getattr(a, "reverse_model", None) or getattr(a, "r2l_model", None):
        from .data.multilingual import evaluation_direction

        _, forward = evaluation_direction(bundles[0].cfg.data, getattr(a, "src_lang", None),
                                          getattr(a, "tgt_lang", None))
        _attach_reverse(a, tr, forward)
    return bundles[0], tr


def _attach_reverse(a: argparse.Namespace, tr: Translator, forward: Direction) -> None:
    """``tr.reverse``: the ``--reverse-model`` and ``--r2l-model`` checkpoints that rerank
    ``tr``'s candidates, checked against ``forward``, the direction ``tr`` translates."""
    from .checkpoint import load_bundle
    from .decode.rerank import reverse_scorer

    reverse, r2l = a.reverse_model or [], getattr(a, "r2l_model", None) or []
    if not tr.decode_cfg.rerank and a.command != "tune":  # tune tries --rerank sizes
        raise ValueError(f"{'--reverse-model' if reverse else '--r2l-model'} scores the "
                         "candidates of decode.rerank: add --rerank N (e.g. --rerank 10)")
    tr.reverse = reverse_scorer(
        [load_bundle(m, a.device, verify=not a.no_verify) for m in reverse], forward, reverse,
        r2l=[load_bundle(m, a.device, verify=not a.no_verify) for m in r2l], r2l_names=r2l)


def _output_line(i: int, h: Translation, n_best: bool, scores: bool, alignments: bool) -> str:
    """One output line: ``[i<TAB>][score<TAB>][token log-probs<TAB>]text[<TAB>alignment]``."""
    from .decode.translator import pharaoh

    cols = [str(i)] if n_best else []
    if n_best or scores:
        cols.append(f"{h.ranking_score:.4f}")  # the order of an n-best list follows it
    if scores:
        cols.append(" ".join(f"{x:.4f}" for x in h.token_log_probs or []))
    cols.append(_one_line(h.text))
    if alignments:
        cols.append(pharaoh(h.alignment))
    return "\t".join(cols) + "\n"


def _per_line_files(a: argparse.Namespace) -> tuple[list[str] | None, list[list[str]] | None]:
    """(the ``--prefix-file`` lines, the ``--constraints-file`` lines split at tabs)."""
    from .data.corpora import read_lines

    prefixes = read_lines(a.prefix_file) if a.prefix_file else None
    constraints = ([[p for p in line.split("\t") if p.strip()] for line in read_lines(a.constraints_file)]
                   if a.constraints_file else None)
    return prefixes, constraints


def _answer(i: int, hs: list[Translation], a: argparse.Namespace, n_best: bool) -> str:
    """The output lines of input line ``i`` (from 0): its best translation, and with N best
    the others that contain every phrase of its ``--constraints-file`` line (one that lacks
    some is left out). A best translation that lacks some (only the output cap can cause it)
    is written with a warning that names the line."""
    if not hs[0].constraints_met:
        where = a.input or "<stdin>"
        logging.getLogger(__name__).warning(
            "%s:%d: the translation lacks some phrases of %s:%d: they did not fit under the "
            "output cap", where, i + 1, a.constraints_file, i + 1)
    shown = [h for j, h in enumerate(hs) if j == 0 or h.constraints_met] if n_best else hs[:1]
    return "".join(_output_line(i, h, n_best, a.scores, a.alignments) for h in shown)


def _translate_lines_of_files(a: argparse.Namespace, tr: Translator, lines: list[str],
                              prefixes: list[str] | None, constraints: list[list[str]] | None,
                              first: int) -> list[list[Translation]]:
    """``tr.translate`` of input lines ``first``, ``first + 1``, ... (from 1) with their
    ``--prefix-file`` / ``--constraints-file`` lines; a prefix or constraint that cannot be
    used is an error naming its file and line."""
    from .decode.translator import TargetTextError

    try:
        return tr.translate(lines, prefixes=prefixes, constraints=constraints,
                            token_scores=a.scores, alignments=a.alignments, tgt_lang=a.tgt_lang)
    except TargetTextError as e:
        path = a.prefix_file if e.field == "prefixes" else a.constraints_file
        raise InputError(f"{path}:{first + e.index}: {e.problem}") from None


def _check_lines(path: str | None, given: list[Any] | None, n: int) -> None:
    if given is not None and len(given) != n:
        raise InputError(f"{path} has {len(given)} lines but the input has {n}: give one line per "
                         "input line (empty for none)")


def _stream(a: argparse.Namespace, tr: Translator, prefixes: list[str] | None,
            constraints: list[list[str]] | None) -> int:
    """``translate --stream``: answer each stdin line as soon as it has arrived (one line per
    model call), flushing stdout after each, until the end of the input."""
    n_best = tr.decode_cfg.n_best > 1
    for n, raw in enumerate(iter(sys.stdin.buffer.readline, b""), 1):
        try:
            line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise InputError(f"<stdin>:{n}: invalid UTF-8") from None
        for path, given in ((a.prefix_file, prefixes), (a.constraints_file, constraints)):
            if given is not None and n > len(given):
                raise InputError(f"{path} has {len(given)} lines but the input has more")
        (hs,) = _translate_lines_of_files(
            a, tr, [line], None if prefixes is None else [prefixes[n - 1]],
            None if constraints is None else [constraints[n - 1]], n)
        sys.stdout.write(_answer(n - 1, hs, a, n_best))
        sys.stdout.flush()
    return 0


def cmd_translate(a: argparse.Namespace) -> int:
    if (a.alignment_layer is not None or a.alignment_head is not None) and not a.alignments:
        raise ValueError("--alignment-layer/--alignment-head choose the attention that "
                         "--alignments reads: add --alignments")
    refuse_overwriting_inputs([a.output], [a.input, a.prefix_file, a.constraints_file, *a.model],
                              "-o")
    bundle, tr = _translator(a)
    tr.target_tag(a.tgt_lang)  # a multilingual model needs --tgt-lang: say so before reading input
    if a.src_lang:  # read for reranking only, but a language the model does not know is a mistake
        from .data.multilingual import evaluation_direction

        evaluation_direction(bundle.cfg.data, a.src_lang, a.tgt_lang)
    prefixes, constraints = _per_line_files(a)
    if a.stream or (a.stream is None and not a.input and not a.output and sys.stdin.isatty()):
        if a.input or a.output:
            raise ValueError("--stream reads stdin and writes stdout: drop -i/-o")
        return _stream(a, tr, prefixes, constraints)
    lines = _read_input(a.input)
    _check_lines(a.prefix_file, prefixes, len(lines))
    _check_lines(a.constraints_file, constraints, len(lines))
    results = _translate_lines_of_files(a, tr, lines, prefixes, constraints, 1)
    n_best = tr.decode_cfg.n_best > 1
    out = "".join(_answer(i, hs, a, n_best) for i, hs in enumerate(results))
    if a.output:
        write_or_keep(a.output, out, "translations")
    else:
        sys.stdout.write(out)
    return 0


def _scored_text(a: argparse.Namespace, bundle: Bundle, command: str
                 ) -> tuple[list[str], list[str], str, DataConfig, str | None]:
    """(sources, references, their name, the data section they come from, the target
    language to ask for) of ``--split NAME`` (a corpus split, one direction of a multilingual
    model) or of ``--src FILE --ref FILE``."""
    from .data.corpora import load_parallel, read_lines

    data = bundle.cfg.data
    if a.split and (a.src or a.ref):
        raise InputError(f"{command} takes --split NAME or --src FILE --ref FILE, not both")
    if a.split:  # one direction of a multilingual model (data.directions): its files
        from .data.multilingual import evaluation_direction

        data, direction = evaluation_direction(data, a.src_lang, a.tgt_lang)
        tgt_lang = direction.tgt if bundle.cfg.data.directions else a.tgt_lang
        par = load_parallel(data, a.split)
        return par.src, par.tgt, a.split, data, tgt_lang
    if a.src and a.ref:
        if a.src_lang:  # not needed to translate --src, but a wrong one is a mistake: say so
            from .data.multilingual import evaluation_direction

            evaluation_direction(data, a.src_lang, a.tgt_lang)
        src, ref = read_lines(a.src), read_lines(a.ref)
        if len(src) != len(ref):
            raise InputError(f"{a.src} has {len(src)} lines but {a.ref} has {len(ref)}: "
                             "give one reference line per source line")
        return src, ref, a.src, data, a.tgt_lang
    raise InputError(f"{command} needs --split NAME or --src FILE --ref FILE")


def cmd_evaluate(a: argparse.Namespace) -> int:
    from .evaluate import score

    refuse_overwriting_inputs([a.output], [a.src, a.ref, *a.model], "-o")
    bundle, tr = _translator(a)
    src, ref, name, data, tgt_lang = _scored_text(a, bundle, "evaluate")
    official = None  # the literature's number, official references: found (or warned) first
    if a.split and data.corpus == "multi30k":
        from .evaluate import official_reference

        official = official_reference(a.split, data.tgt_lang)
    hyps = tr.translate_lines(src, tgt_lang=tgt_lang)
    if a.output:
        write_or_keep(a.output, "".join(h + "\n" for h in hyps), "hypotheses")
    result = score(hyps, ref)
    if official is not None:
        from .evaluate import multi30k_tok_bleu

        tok_bleu, tok_sig = multi30k_tok_bleu(hyps, a.split, data.tgt_lang, official)
        result["bleu_official_tok"] = tok_bleu
        result["signature"]["bleu_official_tok"] = tok_sig
    d = tr.decode_cfg
    result.update({"split": name, "beam": d.beam, "length_penalty": d.length_penalty,
                   "model": a.model[0] if len(a.model) == 1 else a.model})
    if d.mbr:  # how the output was chosen among the candidates, where not the beam's best
        result.update({"mbr": d.mbr, "mbr_utility": d.mbr_utility, "mbr_scale": d.mbr_scale})
    if d.rerank:
        result.update({"rerank": d.rerank, "reverse_weight": d.reverse_weight,
                       "reverse_model": a.reverse_model})
        if a.r2l_model:
            result.update({"r2l_weight": d.r2l_weight, "r2l_model": a.r2l_model})
    if bundle.cfg.data.directions:
        result.update({"src_lang": data.src_lang if a.split else a.src_lang, "tgt_lang": tgt_lang})
    print(json.dumps(result))
    return 0


def cmd_tune(a: argparse.Namespace) -> int:
    from .decode.tune import Trial, at_the_edge, best_trial, tune_search

    def refuse_a_test_split(valid: str, test: str) -> None:
        if a.split and (a.split == test or a.split.startswith("test")):
            raise ValueError(f"--split {a.split} is a test set: choose decoding options on "
                             f"{valid}, never on a test set")

    refuse_a_test_split("the validation split", "test")  # before loading the models
    refuse_overwriting_inputs([a.output], [a.src, a.ref, *a.model], "-o")
    bundle, tr = _translator(a, {"batch_size": a.batch_size,
                                 "fast": False if a.no_fast else None})
    if a.split is None and not (a.src or a.ref):
        a.split = bundle.cfg.data.valid
    refuse_a_test_split(f"the validation split ({bundle.cfg.data.valid})", bundle.cfg.data.test)
    if bundle.cfg.data.lowercase and a.metric == "bleu":
        print("nmtkit tune: the model was trained on lowercased text (data.lowercase), and "
              "cased BLEU counts every capital of the references against it: consider "
              "--metric bleu_lc_tok", file=sys.stderr)
    src, ref, name, _, tgt_lang = _scored_text(a, bundle, "tune")

    def report(t: Trial) -> None:
        print(json.dumps({"split": name, **t.as_dict()}), flush=True)

    if any(a.rerank) and not (a.reverse_model or a.r2l_model):
        raise ValueError("--rerank scores candidates with a model of the reverse direction: "
                         "give one (--reverse-model), or a right-to-left model (--r2l-model)")
    trials = tune_search(tr, src, ref, a.beam, a.length_penalty, tgt_lang=tgt_lang,
                         on_trial=report, mbr=a.mbr, rerank=a.rerank,
                         reverse_weights=a.reverse_weight if a.reverse_model else [0.0],
                         r2l_weights=a.r2l_weight if a.r2l_model else [0.0])
    best = best_trial(trials, a.metric)
    edge = at_the_edge(best, a.length_penalty)
    if edge:  # the optimum may lie beyond the grid
        print(f"nmtkit tune: the best length penalty is the {edge} tried "
              f"({best.length_penalty:g}): try values {'above' if edge == 'largest' else 'below'} "
              "it too", file=sys.stderr)
    summary = {"split": name, "model": a.model[0] if len(a.model) == 1 else a.model,
               "metric": a.metric, "best": best.as_dict(), "flags": best.flags(), "edge": edge,
               "trials": [t.as_dict() for t in trials]}
    print(json.dumps({"split": name, "metric": a.metric, "best": best.as_dict(),
                      "flags": best.flags(), "edge": edge}))
    if a.output:
        write_or_keep(a.output, json.dumps(summary, indent=1) + "\n", "results")
    return 0


def cmd_backtranslate(a: argparse.Namespace) -> int:
    from .data.multilingual import evaluation_direction
    from .train.backtranslate import backtranslate, synthetic_files

    bundle, tr = _translator(a)
    # The direction the model is asked for (a model of data.directions: --tgt-lang, and
    # --src-lang where several go into it): its languages name the two files.
    reverse, direction = evaluation_direction(bundle.cfg.data, a.src_lang, a.tgt_lang)
    refuse_overwriting_inputs(synthetic_files(reverse, a.output),
                              [None if a.input == "-" else a.input, *a.model], "-o PREFIX")
    tgt_lang = direction.tgt if bundle.cfg.data.directions else a.tgt_lang
    result = backtranslate(tr, reverse, _read_input(a.input), a.output, tgt_lang=tgt_lang)
    print(json.dumps({"src": str(result.src_file), "tgt": str(result.tgt_file),
                      "pairs": result.pairs, "dropped_empty": result.dropped_empty,
                      "empty_translations": result.empty_translations,
                      "beam": None if tr.decode_cfg.sampling else tr.decode_cfg.beam,
                      "sampling": tr.decode_cfg.sampling}))
    return 0


def cmd_distill(a: argparse.Namespace) -> int:
    from .train.distill import distill

    bundle, tr = _translator(a)
    result = distill(tr, bundle.cfg.data, a.output, split=a.split)
    print(json.dumps({"src": str(result.src_file), "tgt": str(result.tgt_file),
                      "pairs": result.pairs, "empty_translations": result.empty_translations,
                      "beam": tr.decode_cfg.beam, "models": a.model}))
    return 0


def cmd_prepare(a: argparse.Namespace) -> int:
    from .data.recipes import prepare, prepared_text_dir

    counts = prepare(a.corpus, a.splits or None)
    print(json.dumps({"prepared": str(prepared_text_dir(a.corpus)), "pairs": counts}))
    return 0


def cmd_average(a: argparse.Namespace) -> int:
    from .train.average import average_checkpoints

    refuse_overwriting_inputs([a.out], a.checkpoints, "--out")
    average_checkpoints(a.checkpoints, a.out)
    print(json.dumps({"out": a.out, "averaged": a.checkpoints}))
    return 0


def cmd_serve(a: argparse.Namespace) -> int:
    from .serve.limits import ServeLimits
    from .serve.security import (
        check_bindable,
        check_keep_alive,
        default_allowed_hosts,
        parse_allowed_hosts,
    )

    # Every option checked before the model is loaded (ValueError -> "nmtkit: error: ...", 2).
    limits = ServeLimits(max_texts=a.max_texts, max_chars=a.max_chars, max_beam=a.max_beam,
                         max_length=a.max_length, max_body_bytes=a.max_body_bytes,
                         timeout_s=a.timeout, max_batch=a.max_batch, max_wait_ms=a.max_wait_ms)
    hosts = (parse_allowed_hosts(a.allowed_hosts) if a.allowed_hosts is not None
             else default_allowed_hosts(a.host))
    keep_alive = check_keep_alive(a.timeout_keep_alive)
    check_bindable(a.host, a.port)
    try:
        import uvicorn

        from .serve.app import create_app
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: serving needs the 'serve' extra "
                         f"(pip install 'nmtkit[serve]'): {e}") from None
    bundle, translator = _serve_bundle(a)
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("nmtkit.serve").warning(
            "listening on %s: the service is reachable from other machines", a.host)
    uvicorn.run(create_app(bundle, limits, translator, allowed_hosts=hosts), host=a.host, port=a.port,
                log_level="debug" if a.verbose else "info",
                timeout_keep_alive=math.ceil(keep_alive))  # uvicorn takes whole seconds
    return 0


def _serve_bundle(a: argparse.Namespace) -> tuple[ServedBundle, TextTranslator | None]:
    """What ``nmtkit serve`` serves: a checkpoint run by PyTorch (``--engine torch``), or an
    ``nmtkit export --format ctranslate2`` directory run by CTranslate2 (``--engine
    ctranslate2``); and the translator, where the flags ask for other than the default one."""
    if a.engine == "ctranslate2":
        if a.no_fast or a.no_verify:
            raise ValueError("--no-fast and --no-verify apply to --engine torch (a checkpoint) only")
        if (a.reverse_model or a.r2l_model or a.rerank or a.reverse_weight is not None
                or a.r2l_weight is not None):
            raise ValueError("--reverse-model, --r2l-model, --rerank and their weights: the "
                             "server reranks "
                             "with --engine torch (a checkpoint) only")
        try:
            from .export.ctranslate2 import load_export_bundle
        except ImportError as e:
            raise SystemExit(f"nmtkit: error: --engine ctranslate2 needs the 'export' extra "
                             f"(pip install 'nmtkit[export]'): {e}") from None
        return load_export_bundle(a.model, a.device, a.compute_type, a.threads), None
    if a.compute_type is not None:
        raise ValueError("--compute-type applies to --engine ctranslate2 only")
    if (Path(a.model) / "nmtkit.json").is_file():
        raise ValueError(f"{a.model}: a CTranslate2 export directory; serve it with "
                         "--engine ctranslate2 (or serve the checkpoint it was exported from)")
    from .checkpoint import load_bundle

    _set_threads(a.threads)
    bundle = load_bundle(a.model, a.device, verify=not a.no_verify)
    reranking = {k: v for k, v in (("rerank", a.rerank), ("reverse_weight", a.reverse_weight),
                                   ("r2l_weight", a.r2l_weight)) if v is not None}
    if not (a.no_fast or reranking or a.reverse_model or a.r2l_model):
        return bundle, None
    tr = bundle.translator(**({"fast": False} if a.no_fast else {}), **reranking)
    if tr.decode_cfg.rerank and not (a.reverse_model or a.r2l_model):
        raise ValueError("--rerank needs the model(s) of the reverse direction that score the "
                         "candidates: give --reverse-model CKPT (or a right-to-left model, "
                         "--r2l-model CKPT)")
    if a.reverse_model or a.r2l_model:
        data = bundle.cfg.data
        if data.directions:
            raise ValueError(f"{a.model} translates {', '.join(data.directions)}: the server "
                             "reranks a model of one direction (each request's tgt_lang would "
                             "need reverse models of its own)")
        from .data.multilingual import Direction

        _attach_reverse(a, tr, Direction(data.src_lang, data.tgt_lang))
    return bundle, tr


def cmd_plot(a: argparse.Namespace) -> int:
    try:
        from .viz.commands import plot
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: figures need the 'viz' extra "
                         f"(pip install 'nmtkit[viz]'): {e}") from None
    runs = a.run or []
    if len(runs) > 1 and a.figure != "compare":
        raise SystemExit(f"nmtkit: error: plot {a.figure} takes one --run (several: plot compare)")
    if a.label and a.figure != "compare":
        raise SystemExit("nmtkit: error: --label names the runs of plot compare")
    written = plot(a.figure, out_dir=a.out, output=a.output, run=runs[0] if runs else None,
                   model=a.model, text=a.text, beam=a.beam, html=a.html, device=a.device,
                   dpi=a.dpi, config=a.config, overrides=a.set, arch=a.arch, runs=runs,
                   labels=a.label or None, tgt_lang=a.tgt_lang)
    print(json.dumps({"figure": a.figure, "written": [str(w) for w in written]}))
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    try:
        from .export.ctranslate2 import export_ctranslate2
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: exporting to CTranslate2 needs the 'export' extra "
                         f"(pip install 'nmtkit[export]'): {e}") from None
    out = export_ctranslate2(a.model, a.out, quantization=a.quantization, force=a.force)
    print(json.dumps({"format": a.format, "out": str(out), "quantization": a.quantization,
                      "files": sorted(p.name for p in out.iterdir())}))
    return 0


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown after each help text (unless it already speaks of its default, or there
    is none to show); descriptions wrapped by paragraph; the indented lines of an example
    epilog kept as they are."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in text.strip("\n").split("\n\n"):
            if para.startswith("  "):  # example commands: verbatim
                paragraphs.append("\n".join(indent + line for line in para.splitlines()))
            else:
                paragraphs.append(super()._fill_text(para, width, indent))
        return "\n\n".join(paragraphs)


EXAMPLES: dict[str, str] = {
    "prepare": "  nmtkit prepare iwslt14\n  nmtkit prepare wmt14 train valid",
    "train": "  nmtkit train configs/copy_task.yaml\n"
             "  nmtkit train configs/multi30k_transformer_small.yaml --set train.max_minutes=60\n"
             "  nmtkit train configs/multi30k_transformer_small.yaml --resume\n"
             "  nmtkit train NEW.yaml --init-from runs/NAME/best.pt --report-splits val test_2016_flickr",
    "translate": '  echo "Ein Hund läuft." | nmtkit translate --model runs/NAME/best.pt\n'
                 "  nmtkit translate --model runs/NAME/best.pt --beam 5 -i in.de -o out.en\n"
                 "  nmtkit translate --model runs/DE_EN_DE/best.pt --tgt-lang de -i in.en -o out.de\n"
                 "  nmtkit translate --model runs/EN_DE/best.pt --rerank 20 "
                 "--reverse-model runs/DE_EN/best.pt -i in.en -o out.de",
    "evaluate": "  nmtkit evaluate --model runs/NAME/best.pt --split test_2016_flickr\n"
                "  nmtkit evaluate --model runs/NAME/best.pt --src test.de --ref test.en --beam 4\n"
                "  nmtkit evaluate --model runs/DE_EN_DE/best.pt --split test_2016_flickr --tgt-lang de",
    "backtranslate": "  nmtkit backtranslate --model runs/EN_DE/best.pt -i mono.en -o synth --beam 5\n"
                     "  nmtkit backtranslate --model runs/EN_DE/best.pt -i mono.en -o synth "
                     "--sampling --seed 1\n"
                     "  nmtkit backtranslate --model runs/DE_EN_DE/best.pt --tgt-lang de -i mono.en "
                     "-o synth\n"
                     "  nmtkit train de_en.yaml --set 'data.extra=[{path: synth, weight: 1, tag: \"<bt>\"}]'",
    "distill": "  nmtkit distill --model runs/A/best.pt --model runs/B/best.pt --beam 5 -o distilled\n"
               "  nmtkit train student.yaml --set 'data.extra=[{path: distilled, weight: 1, tag: \"\"}]'",
    "average": "  nmtkit average --out runs/NAME/avg.pt runs/NAME/step_*.pt",
    "tune": "  nmtkit tune --model runs/NAME/best.pt\n"
            "  nmtkit tune --model runs/A/best.pt --model runs/B/best.pt --beam 4 5 8 "
            "--length-penalty 0.6 1.0 -o tune.json\n"
            "  nmtkit tune --model runs/EN_DE/best.pt --reverse-model runs/DE_EN/best.pt "
            "--rerank 0 20\n"
            "  nmtkit evaluate --model runs/NAME/best.pt --split test_2016_flickr --beam 5 "
            "--length-penalty 1.0",
    "serve": "  nmtkit serve --model runs/NAME/best.pt --port 8000\n"
             "  curl -s localhost:8000/v1/translate -H 'content-type: application/json' "
             "-d '{\"texts\": [\"Ein Hund.\"]}'\n"
             "  nmtkit serve --model runs/DE_EN/best.pt --reverse-model runs/EN_DE/best.pt "
             "--rerank 20 --reverse-weight 2",
    "plot": "  nmtkit plot all --out figures\n"
            "  nmtkit plot architecture --config configs/multi30k_transformer_base.yaml -o arch.png\n"
            "  nmtkit plot curves --run runs/NAME\n"
            "  nmtkit plot compare --run runs/rnn --run runs/transformer --label RNN --label Transformer\n"
            '  nmtkit plot attention --model runs/NAME/best.pt --text "Ein Hund läuft." --html',
    "export": "  nmtkit export --format ctranslate2 --model runs/NAME/best.pt --out ct2 "
              "--quantization int8",
}
"""The example epilog of each subcommand's ``--help``."""


def _finish_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every parser shows defaults (:class:`HelpFormatter`); each subcommand ends its help
    with examples (:data:`EXAMPLES`)."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sub.formatter_class = HelpFormatter
                if name in EXAMPLES:
                    sub.epilog = "examples:\n\n" + EXAMPLES[name]
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nmtkit", description=__doc__)
    p.add_argument("--version", action="version", version=f"nmtkit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug-level logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of the commands below; nmtkit COMMAND --help for its options")

    from .config import (
        MBR_UTILITIES,
        TUNE_BEAMS,
        TUNE_LENGTH_PENALTIES,
        TUNE_METRICS,
        TUNE_R2L_WEIGHTS,
        TUNE_REVERSE_WEIGHTS,
    )
    from .data.recipes import RECIPES
    from .decode.limits import MAX_PHRASES

    pr = sub.add_parser("prepare", help="fetch and prepare a corpus recipe (IWSLT14, WMT14); "
                        "training does it on first use",
                        description="Downloads (sha256-checked, or from the NMTKIT_DATA mirror) and "
                        "prepares the named splits once into $NMTKIT_CACHE; prints the pair counts.")
    pr.add_argument("corpus", choices=sorted(RECIPES), help="the corpus recipe")
    pr.add_argument("splits", nargs="*", help="splits to prepare (default: all)")
    pr.set_defaults(func=cmd_prepare)

    t = sub.add_parser("train", help="train a model from a YAML recipe")
    t.add_argument("config", help="YAML recipe (see configs/)")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (repeatable)")
    t.add_argument("--run-dir", help="output directory (default runs/<config name>)")
    no_fast = ("run the readable model as written: no nmtkit.fast speed-ups "
               "(same results within float tolerance)")
    threads_help = ("torch threads (0 = PyTorch's default, one per core); beside another job "
                    "take fewer: two jobs that each use every core slow each other far more "
                    "than twofold (training: train.threads)")

    def thread_count(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"threads must be 0 (the default) or more, got {value}")
        return value

    def device(text: str) -> str:
        """A torch device this machine has (refused at the command line, not as a traceback
        from deep inside the first tensor moved there: :func:`nmtkit.checkpoint.check_device`)."""
        from .checkpoint import check_device

        try:
            check_device(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    t.add_argument("--no-fast", action="store_true", help=no_fast + "; sets train.fast and decode.fast")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue from RUN_DIR/last.pt")
    mode.add_argument("--overwrite", action="store_true",
                      help="start afresh in a RUN_DIR that holds an earlier run: its checkpoints "
                      "and metrics are moved aside to RUN_DIR/.overwritten.*/ and deleted once the "
                      "new run saves its first checkpoint (put back if the new run fails or is "
                      "interrupted before then)")
    t.add_argument("--init-from", metavar="CKPT",
                   help="fine-tune: start from this checkpoint's weights, tokenizers and "
                   "vocabularies (its model section must match), with a fresh optimizer and "
                   "schedule; see train.freeze")
    t.add_argument("--vocab-from", metavar="CKPT",
                   help="encode the corpus with this checkpoint's tokenizers and vocabularies "
                   "instead of learning new ones (fresh weights, any model section): e.g. a "
                   "distilled student that is to join its teachers' ensemble")
    t.add_argument("--report-splits", nargs="+", metavar="SPLIT",
                   help="score these splits (BLEU, chrF) before training and at its end into "
                   "RUN_DIR/forgetting.json (sets train.forgetting_splits); SRC-TGT:SPLIT "
                   "scores a split in another direction, e.g. de-en:test_2016_flickr")
    t.set_defaults(func=cmd_train)

    def model_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--model", required=True, action="append",
                       help="checkpoint (.pt); repeat it for an ensemble, which averages the "
                       "models' probabilities at each step (same vocabularies required)")
        q.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
        q.add_argument("--device", type=device, default="cpu",
                       help="torch device: cpu, cuda, cuda:1 ...")
        q.add_argument("--no-verify", action="store_true",
                       help="load a checkpoint whose weights do not match their stored checksum")
        q.add_argument("--no-fast", action="store_true", help=no_fast)
        q.add_argument("--threads", type=thread_count, default=0, help=threads_help)

    def reverse_model_arg(q: argparse.ArgumentParser) -> None:
        q.add_argument("--reverse-model", action="append", default=None, metavar="CKPT",
                       help="a checkpoint of the reverse direction (target -> source) that "
                       "reranks the candidates (--rerank), or a model of several directions "
                       "that has it (a model trained both ways can be its own); repeat it to "
                       "average several")

    def r2l_model_arg(q: argparse.ArgumentParser) -> None:
        q.add_argument("--r2l-model", action="append", default=None, metavar="CKPT",
                       help="a right-to-left checkpoint of the same direction (trained with "
                       "data.reverse_target: true) that also scores the candidates of --rerank, "
                       "reading each from its end; repeat it to average several")

    def rerank_args(q: argparse.ArgumentParser) -> None:
        reverse_model_arg(q)
        r2l_model_arg(q)
        q.add_argument("--rerank", type=int, default=None, metavar="N",
                       help="rerank N candidates (the N best of a beam at least N wide) by their "
                       "beam score plus --reverse-weight times the --reverse-model's log P(source "
                       "| candidate) per source token (and --r2l-weight times the --r2l-model's "
                       "per-token score; default: the checkpoint's decode.rerank, 0 = off)")
        q.add_argument("--reverse-weight", type=float, default=None, metavar="W",
                       help="reranking: the weight of the reverse model's score (default: the "
                       "checkpoint's decode.reverse_weight; `nmtkit tune` chooses it on val)")
        q.add_argument("--r2l-weight", type=float, default=None, metavar="V",
                       help="reranking: the weight of the --r2l-model's score, its log P("
                       "candidate | source) per token (default: the checkpoint's "
                       "decode.r2l_weight; `nmtkit tune` chooses it on val)")

    def decode_args(q: argparse.ArgumentParser) -> None:
        model_args(q)
        q.add_argument("--beam", type=int, default=None, help="beam size (1 = greedy)")
        q.add_argument("--length-penalty", type=float, default=None, metavar="ALPHA",
                       help="beam search ranks by log-prob / ((5 + length) / 6)^ALPHA "
                       "(GNMT; 0 = raw log-prob, larger favours longer outputs; default: the "
                       "checkpoint's decode.length_penalty; `nmtkit tune` chooses it on val)")
        q.add_argument("--max-len-a", type=float, default=None, metavar="A",
                       help="outputs stop at A * source length + B tokens (default: the "
                       "checkpoint's decode.max_len_a)")
        q.add_argument("--max-len-b", type=int, default=None, metavar="B",
                       help="... see --max-len-a (default: the checkpoint's decode.max_len_b)")
        q.add_argument("--early-stop", action="store_true",
                       help="beam search: stop a sentence once its best hypotheses have ended")
        q.add_argument("--sampling", action="store_true",
                       help="draw each token from the model's distribution instead of searching "
                       "(back-translation, diversity); the beam is not used")
        q.add_argument("--temperature", type=float, default=None,
                       help="sampling: divide the log-probs by T (< 1 sharper, > 1 flatter; default 1)")
        q.add_argument("--top-k", type=int, default=None,
                       help="sampling: only among the K most probable tokens (default 0 = all)")
        q.add_argument("--top-p", type=float, default=None,
                       help="sampling: only among the most probable tokens whose mass reaches P "
                       "(nucleus; default 1 = all)")
        q.add_argument("--epsilon", type=float, default=None,
                       help="sampling: only among tokens of probability >= E (epsilon sampling; "
                       "default 0 = all; e.g. 0.02 for MBR's candidates)")
        q.add_argument("--seed", type=int, default=None,
                       help="sampling: random seed (default 0); the same seed, input and batch "
                       "size give the same samples")
        q.add_argument("--mbr", type=int, default=None, metavar="N",
                       help="minimum Bayes risk decoding: of N candidates (the N best of a beam "
                       "at least N wide, or N samples with --sampling) output the one with the "
                       "highest expected --mbr-utility against the others (default: the "
                       "checkpoint's decode.mbr, 0 = off); with --rerank M (M > N): among the "
                       "N best of the reranking")
        q.add_argument("--mbr-utility", choices=MBR_UTILITIES, default=None,
                       help="MBR: sentence BLEU+1 on words, or chrF on characters (default bleu)")
        q.add_argument("--mbr-scale", type=float, default=None, metavar="S",
                       help="MBR over a beam's N best: each candidate weighs its probability "
                       "to the power S (default 0: the same for each; 1: the model's posterior)")
        rerank_args(q)

    def port(text: str) -> int:
        value = int(text)
        if not 0 <= value <= 65535:
            raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {value}")
        return value

    tr = sub.add_parser("translate", help="translate lines (stdin/stdout by default)")
    decode_args(tr)
    tr.add_argument("-i", "--input", help="input file (default stdin)")
    tr.add_argument("-o", "--output", help="output file (default stdout)")
    tr.add_argument("--tgt-lang", metavar="LANG",
                    help="the language to translate into, for a model of several directions "
                    "(data.directions; required when it has several target languages)")
    tr.add_argument("--src-lang", metavar="LANG",
                    help="a model of several directions reranking with --reverse-model: the "
                    "language of the input (needed when several directions go into --tgt-lang)")
    tr.add_argument("--n-best", type=int, default=None,
                    help="print N best as 'i<TAB>score<TAB>text', the score that orders them: "
                    "the search's, with --rerank the reranking score, with --mbr the expected "
                    "utility (default: the checkpoint's decode.n_best, 1 unless set)")
    tr.add_argument("--n-samples", type=int, default=None,
                    help="with --sampling: draw N translations per line, printed as with --n-best "
                    "(in the order drawn)")
    tr.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                    help="answer each stdin line as soon as it arrives (one line per batch) "
                    "instead of reading all input first; the default when stdin is a terminal")
    tr.add_argument("--prefix-file", metavar="FILE",
                    help="forced target prefixes, one per input line (an empty line for none): "
                    "each translation starts with its prefix, and decoding continues after it")
    tr.add_argument("--constraints-file", metavar="FILE",
                    help="terminology: per input line, tab-separated target phrases that the "
                    f"translation must contain (an empty line for none; at most {MAX_PHRASES} a "
                    "line, of words the model knows); lexically constrained beam search (dynamic "
                    "beam allocation, Post & Vilar 2018). Only the output cap can keep a phrase "
                    "out (one longer than the cap is cut to it): that line gets a warning; N best "
                    "lists only translations with every phrase (and the best one always)")
    tr.add_argument("--scores", action="store_true",
                    help="write 'score<TAB>token log-probs<TAB>text' ('i<TAB>' first with N best): "
                    "the ranking score, then the log-probability of each output token and of </s> "
                    "(they sum to the sentence log-probability)")
    tr.add_argument("--alignments", action="store_true",
                    help="append '<TAB>i-j ...' (Pharaoh): each target token j with the source "
                    "token i it attends to most (last layer, heads averaged, unless "
                    "--alignment-layer/--alignment-head; token positions)")
    tr.add_argument("--alignment-layer", type=int, default=None, metavar="L",
                    help="--alignments from decoder layer L's source attention, counted from 0 "
                    "(default: the checkpoint's decode.alignment_layer, -1 = the last layer); "
                    "Transformer only")
    tr.add_argument("--alignment-head", type=int, default=None, metavar="H",
                    help="--alignments from head H of that layer, counted from 0 (default: the "
                    "checkpoint's decode.alignment_head, -1 = the heads' mean); Transformer only")
    tr.set_defaults(func=cmd_translate)

    def scored_text_args(q: argparse.ArgumentParser, split_help: str) -> None:
        q.add_argument("--split", help=split_help)
        q.add_argument("--src", help="source file")
        q.add_argument("--ref", help="reference file")
        q.add_argument("--src-lang", metavar="LANG",
                       help="a model of several directions (data.directions): the source "
                       "language of --split (needed when several directions go into --tgt-lang)")
        q.add_argument("--tgt-lang", metavar="LANG",
                       help="a model of several directions: the direction's target language "
                       "(needed when it has several)")

    ev = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU JSON")
    decode_args(ev)
    scored_text_args(ev, "corpus split name (e.g. test_2016_flickr)")
    ev.add_argument("-o", "--output", help="also write the hypotheses here")
    ev.set_defaults(func=cmd_evaluate)

    tu = sub.add_parser("tune", help="choose beam size and length penalty on the validation "
                        "split (sacreBLEU of every setting, JSON lines, then the best)")
    model_args(tu)
    scored_text_args(tu, "a validation split (default: the checkpoint's data.valid); test "
                     "splits are refused")
    tu.add_argument("--beam", type=int, nargs="+", default=list(TUNE_BEAMS), metavar="K",
                    help=f"beam sizes to try (default {' '.join(map(str, TUNE_BEAMS))}; 1 = "
                    "greedy, tried once)")
    tu.add_argument("--length-penalty", type=float, nargs="+", default=list(TUNE_LENGTH_PENALTIES),
                    metavar="ALPHA", help="length penalties to try with each beam (default "
                    f"{' '.join(map(str, TUNE_LENGTH_PENALTIES))})")
    tu.add_argument("--mbr", type=int, nargs="+", default=[0], metavar="N",
                    help="minimum Bayes risk decoding over N candidates to try with each beam "
                    "above 1 and penalty (default 0 = off; e.g. --mbr 0 20; see translate "
                    "--mbr)")
    reverse_model_arg(tu)
    tu.add_argument("--rerank", type=int, nargs="+", default=[0], metavar="N",
                    help="reranking of N candidates with --reverse-model to try with each beam "
                    "above 1 and penalty (default 0 = off; e.g. --rerank 0 10; see translate "
                    "--rerank); each --mbr size below N is also tried among the reranking's best")
    tu.add_argument("--reverse-weight", type=float, nargs="+", default=list(TUNE_REVERSE_WEIGHTS),
                    metavar="W", help="reranking: the reverse model's weights to try (one search "
                    "for them all)")
    r2l_model_arg(tu)
    tu.add_argument("--r2l-weight", type=float, nargs="+", default=list(TUNE_R2L_WEIGHTS),
                    metavar="V", help="reranking with --r2l-model: its weights to try, each with "
                    "every --reverse-weight (one search for them all)")
    tu.add_argument("--metric", choices=TUNE_METRICS, default="bleu",
                    help="the score that chooses (default bleu: cased sacreBLEU; bleu_lc_tok for "
                    "a model trained on lowercased text, data.lowercase)")
    tu.add_argument("-o", "--output", help="also write every trial and the best as JSON here")
    tu.set_defaults(func=cmd_tune)

    bt = sub.add_parser("backtranslate", help="synthetic training pairs from monolingual "
                        "target-language text and a reverse-direction model",
                        description="Translates a monolingual file of the target language with a "
                        "model trained in the reverse direction (target -> source) and writes the "
                        "synthetic pairs, line-aligned and atomically, as PREFIX.<src_lang> (the "
                        "translations) and PREFIX.<tgt_lang> (the input lines); the languages come "
                        "from the model's config (a model of several directions: the one that "
                        "--tgt-lang asks for), blank lines are dropped. Train on them beside the "
                        "real data with data.extra: [{path: PREFIX, weight: W, tag: \"<bt>\"}].")
    decode_args(bt)
    bt.add_argument("-i", "--input", required=True,
                    help="monolingual target-language text, one sentence a line ('-' = stdin)")
    bt.add_argument("-o", "--output", required=True, metavar="PREFIX",
                    help="output prefix: writes PREFIX.<src_lang> and PREFIX.<tgt_lang>")
    bt.add_argument("--tgt-lang", metavar="LANG",
                    help="a model of several directions (data.directions): the language to "
                    "translate into, the forward source language (needed when it has several)")
    bt.add_argument("--src-lang", metavar="LANG",
                    help="a model of several directions: the language of the input (needed "
                    "when several of its directions go into --tgt-lang)")
    bt.set_defaults(func=cmd_backtranslate)

    ds = sub.add_parser("distill", help="sequence-level knowledge distillation: the teacher's "
                        "translations of the training sources",
                        description="Translates the source side of the teacher's training split "
                        "(or --split) with the teacher (one model, or an ensemble of several "
                        "--model) and writes the pairs, line-aligned and atomically, as "
                        "PREFIX.<src_lang> (the sources) and PREFIX.<tgt_lang> (the translations), "
                        "for a student trained on them (Kim & Rush 2016): beside the real data "
                        "with data.extra: [{path: PREFIX, weight: W, tag: \"\"}], or as its "
                        "training data with data.corpus: parallel, data.train: PREFIX.")
    decode_args(ds)
    ds.add_argument("-o", "--output", required=True, metavar="PREFIX",
                    help="output prefix: writes PREFIX.<src_lang> and PREFIX.<tgt_lang>")
    ds.add_argument("--split", help="the split to translate (default: the teacher's data.train)")
    ds.set_defaults(func=cmd_distill)

    av = sub.add_parser("average", help="average the weights of checkpoints")
    av.add_argument("--out", required=True, metavar="CKPT", help="the averaged checkpoint to write")
    av.add_argument("checkpoints", nargs="+", help="checkpoints of one run (e.g. RUN/step_*.pt)")
    av.set_defaults(func=cmd_average)

    from .serve.limits import ServeLimits as L

    sv = sub.add_parser("serve", help="HTTP API and web page for a checkpoint or a CTranslate2 "
                        "export (needs [serve])")
    sv.add_argument("--model", required=True,
                    help="checkpoint (.pt); with --engine ctranslate2 an export directory")
    sv.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch",
                    help="what runs the search: torch (nmtkit's model, the default; attention "
                    "maps on the page) or ctranslate2 (a directory written by `nmtkit export "
                    "--format ctranslate2`; faster, no attention maps; needs [export])")
    sv.add_argument("--compute-type", default=None,
                    choices=["default", "auto", "int8", "int8_float32", "int8_float16",
                             "int8_bfloat16", "int16", "float16", "bfloat16", "float32"],
                    help="--engine ctranslate2: CTranslate2's compute type (default: int8 on "
                    "cpu, float16 on cuda; 'default': the type the export stores)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    sv.add_argument("--port", type=port, default=8000, help="TCP port (0 = any free port)")
    sv.add_argument("--device", type=device, default="cpu", help="torch device: cpu, cuda ...")
    sv.add_argument("--no-verify", action="store_true",
                    help="load a checkpoint whose weights do not match their stored checksum")
    sv.add_argument("--no-fast", action="store_true", help=no_fast)
    sv.add_argument("--threads", type=thread_count, default=0,
                    help="torch threads, or CTranslate2's intra-op threads (0 = default)")
    sv.add_argument("--max-texts", type=int, default=L.max_texts, help="texts per request")
    sv.add_argument("--max-chars", type=int, default=L.max_chars, help="characters per text")
    sv.add_argument("--max-beam", type=int, default=L.max_beam, help="largest beam a request may ask for")
    sv.add_argument("--max-length", type=int, default=L.max_length,
                    help="the most output tokens of any answer (a request's max_length may "
                    "ask for fewer)")
    sv.add_argument("--max-body-bytes", type=int, default=L.max_body_bytes,
                    help="largest request body accepted (413 above)")
    sv.add_argument("--timeout", type=float, default=L.timeout_s,
                    help="seconds per request before a 503")
    sv.add_argument("--max-batch", type=int, default=L.max_batch,
                    help="sentences merged into one model call")
    sv.add_argument("--allowed-hosts", metavar="H1,H2",
                    help="Host header names accepted, comma-separated ('*' = any; default: the "
                    "bind address, 127.0.0.1, localhost, ::1)")
    sv.add_argument("--timeout-keep-alive", type=float, default=5.0,
                    help="seconds an idle keep-alive connection is held open (default 5; "
                    "rounded up to whole seconds)")
    sv.add_argument("--max-wait-ms", type=float, default=L.max_wait_ms,
                    help="how long a request waits for others to batch with")
    rerank_args(sv)  # every answer reranked (--engine torch, a model of one direction)
    sv.set_defaults(func=cmd_serve)

    pl = sub.add_parser("plot", help="draw the figures of the guide (needs [viz])",
                        description="mask | positional | lr-schedule | label-smoothing: concepts of "
                        "the paper; architecture: the model diagram (Figure 1, or the RNN's with "
                        "--arch rnn) with a recipe's numbers (--config); temperature | "
                        "teacher-forcing: the homework's softmax temperature and teacher-forcing "
                        "schedule; curves: a run's metrics.csv; compare: the validation curves of several "
                        "runs; attention: every attention map "
                        "of a checkpoint for one sentence; all: every figure that the given "
                        "options allow.")
    pl.add_argument("figure", choices=["mask", "positional", "lr-schedule", "label-smoothing",
                                       "architecture", "temperature", "teacher-forcing",
                                       "curves", "compare", "attention", "all"],
                    help="which figure")
    where = pl.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="output directory (default: current directory)")
    where.add_argument("-o", "--output", metavar="FILE",
                       help="output file of one figure (attention: the stem of STEM_<kind>.png)")
    pl.add_argument("--run", metavar="DIR", action="append",
                    help="run directory (or its metrics.csv), for curves; repeat for compare")
    pl.add_argument("--label", action="append", metavar="NAME",
                    help="compare: the name of each --run, in order (default: directory names)")
    pl.add_argument("--model", metavar="CKPT", help="checkpoint, for attention")
    pl.add_argument("--text", help="source sentence to translate, for attention")
    pl.add_argument("--beam", type=int, default=None, help="beam size for that translation")
    pl.add_argument("--tgt-lang", metavar="LANG",
                    help="attention: the language to translate into, for a model of several "
                    "directions (data.directions; needed when it has several)")
    pl.add_argument("--html", action="store_true",
                    help="attention: also write a self-contained interactive HTML page")
    pl.add_argument("--config", metavar="RECIPE",
                    help="YAML recipe whose model section architecture and teacher-forcing draw")
    pl.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a value of --config (repeatable)")
    pl.add_argument("--arch", choices=["transformer", "rnn"],
                    help="architecture: which diagram (default: the recipe's, else transformer)")
    pl.add_argument("--device", type=device, default="cpu", help="torch device for attention")

    def dpi(text: str) -> int:
        value = int(text)
        if not 10 <= value <= 1200:  # a figure of a few inches at 1e5 dpi is gigapixels
            raise argparse.ArgumentTypeError(f"dpi must be in 10..1200, got {value}")
        return value

    pl.add_argument("--dpi", type=dpi, default=100, help="resolution of the PNG files (10-1200)")
    pl.set_defaults(func=cmd_plot)

    ex = sub.add_parser("export", help="convert a Transformer checkpoint for another inference "
                        "engine (needs [export])",
                        description="ctranslate2: a CTranslate2 model directory (weights, "
                        "vocabularies, tokenizer model, nmtkit.json, README.txt), written "
                        "atomically; serve it with ctranslate2.Translator or "
                        "nmtkit.export.ctranslate2.CTranslate2Translator.")
    ex.add_argument("--format", required=True, choices=["ctranslate2"], help="the target engine")
    ex.add_argument("--model", required=True, metavar="CKPT", help="checkpoint (.pt)")
    ex.add_argument("--out", required=True, metavar="DIR", help="output directory")
    ex.add_argument("--quantization", default="float32",
                    choices=["float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                             "int16", "float16", "bfloat16"],
                    help="weight type (default float32; int8 for fast CPU inference)")
    ex.add_argument("--force", action="store_true",
                    help="replace DIR if it holds an earlier export (only the files an export "
                    "writes, or nothing); any other directory, a file or a link is refused")
    ex.set_defaults(func=cmd_export)
    return _finish_help(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .data.fetch import CorpusError
    from .train.loop import TrainingError

    if isinstance(getattr(args, "beam", None), int) and args.beam < 1:
        print(f"nmtkit: error: --beam must be >= 1, got {args.beam}", file=sys.stderr)
        return 2
    try:
        rc: int = args.func(args)
        return rc
    except (ConfigError, CorpusError, CheckpointError, TrainingError, FileNotFoundError,
            ValueError, OutputError) as e:
        print(f"nmtkit: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable output, run directory or export directory
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"nmtkit: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
