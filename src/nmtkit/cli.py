"""nmtkit: attention-based neural machine translation.

Commands: prepare, train, translate, evaluate, average, plot, serve, export.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__


class InputError(ValueError):
    """Input text that cannot be read (the message names where)."""


def _write_output(path: str, text: str, what: str) -> None:
    """Write a finished result to ``path``; if that fails, keep it in a temporary file and say
    where, so that a long translation is never lost to a mistyped or unwritable path."""
    from .io import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as e:
        import tempfile

        fd, kept = tempfile.mkstemp(prefix="nmtkit-", suffix=".txt")
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        reason = e.strerror or str(e)
        raise OutputError(f"{path}: cannot write the {what} ({reason}); they were kept in "
                          f"{kept}") from None


class OutputError(OSError):
    """An output that could not be written where asked (the message says where it went)."""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def cmd_train(a: argparse.Namespace) -> int:
    from .config import load
    from .train.loop import train

    cfg = load(a.config, [*a.set, *(["train.fast=false", "decode.fast=false"] if a.no_fast else [])])
    run_dir = Path(a.run_dir) if a.run_dir else Path("runs") / cfg.name
    result = train(cfg, run_dir, resume=a.resume, overwrite=a.overwrite,
                   on_validation=_curves_callback())
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
    return {"beam": a.beam, "n_best": getattr(a, "n_best", None), "batch_size": a.batch_size,
            "fast": False if a.no_fast else None,
            "early_stop": True if a.early_stop else None}


def cmd_translate(a: argparse.Namespace) -> int:
    from .checkpoint import load_bundle

    bundle = load_bundle(a.model, a.device, verify=not a.no_verify)
    lines = _read_input(a.input)
    tr = bundle.translator(**_decode_overrides(a))
    results = tr.translate(lines)
    if tr.decode_cfg.n_best > 1:
        out = "".join(f"{i}\t{h.score:.4f}\t{_one_line(h.text)}\n"
                      for i, hs in enumerate(results) for h in hs)
    else:
        out = "".join(_one_line(hs[0].text) + "\n" for hs in results)
    if a.output:
        _write_output(a.output, out, "translations")
    else:
        sys.stdout.write(out)
    return 0


def cmd_evaluate(a: argparse.Namespace) -> int:
    from .checkpoint import load_bundle
    from .data.corpora import load_parallel, read_lines
    from .evaluate import score

    bundle = load_bundle(a.model, a.device, verify=not a.no_verify)
    if a.split:
        par = load_parallel(bundle.cfg.data, a.split)
        src, ref, name = par.src, par.tgt, a.split
    elif a.src and a.ref:
        src, ref, name = read_lines(a.src), read_lines(a.ref), a.src
        if len(src) != len(ref):
            raise SystemExit(f"nmtkit: error: {a.src} has {len(src)} lines but {a.ref} has "
                             f"{len(ref)}")
    else:
        raise SystemExit("nmtkit: error: evaluate needs --split NAME or --src FILE --ref FILE")
    tr = bundle.translator(**_decode_overrides(a))
    hyps = tr.translate_lines(src)
    if a.output:
        _write_output(a.output, "".join(h + "\n" for h in hyps), "hypotheses")
    result = score(hyps, ref)
    result.update({"split": name, "beam": tr.decode_cfg.beam, "model": a.model})
    print(json.dumps(result))
    return 0


def cmd_prepare(a: argparse.Namespace) -> int:
    from .data.recipes import prepare, prepared_text_dir

    counts = prepare(a.corpus, a.splits or None)
    print(json.dumps({"prepared": str(prepared_text_dir(a.corpus)), "pairs": counts}))
    return 0


def cmd_average(a: argparse.Namespace) -> int:
    from .train.average import average_checkpoints

    average_checkpoints(a.checkpoints, a.out)
    print(json.dumps({"out": a.out, "averaged": a.checkpoints}))
    return 0


def cmd_serve(a: argparse.Namespace) -> int:
    from .serve.limits import ServeLimits

    try:
        import uvicorn

        from .serve.app import create_app
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: serving needs the 'serve' extra "
                         f"(pip install 'nmtkit[serve]'): {e}") from None
    import torch

    from .checkpoint import load_bundle

    limits = ServeLimits(max_texts=a.max_texts, max_chars=a.max_chars, max_beam=a.max_beam,
                         max_length=a.max_length, max_body_bytes=a.max_body_bytes,
                         timeout_s=a.timeout, max_batch=a.max_batch, max_wait_ms=a.max_wait_ms)
    if a.threads:
        torch.set_num_threads(a.threads)
    bundle = load_bundle(a.model, a.device, verify=not a.no_verify)
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("nmtkit.serve").warning(
            "listening on %s: the service is reachable from other machines", a.host)
    from .serve.security import default_allowed_hosts

    hosts = a.allowed_hosts.split(",") if a.allowed_hosts else default_allowed_hosts(a.host)
    translator = bundle.translator(fast=False) if a.no_fast else None
    uvicorn.run(create_app(bundle, limits, translator, allowed_hosts=hosts), host=a.host, port=a.port,
                log_level="debug" if a.verbose else "info",
                timeout_keep_alive=a.timeout_keep_alive)
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    try:
        from .viz.commands import plot
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: figures need the 'viz' extra "
                         f"(pip install 'nmtkit[viz]'): {e}") from None
    written = plot(a.figure, out_dir=a.out, output=a.output, run=a.run, model=a.model,
                   text=a.text, beam=a.beam, html=a.html, device=a.device, dpi=a.dpi)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nmtkit", description=__doc__)
    p.add_argument("--version", action="version", version=f"nmtkit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    from .data.recipes import RECIPES

    pr = sub.add_parser("prepare", help="fetch and prepare a corpus recipe (IWSLT14, WMT14); "
                        "training does it on first use",
                        description="Downloads (sha256-checked, or from the NMTKIT_DATA mirror) and "
                        "prepares the named splits once into $NMTKIT_CACHE; prints the pair counts.")
    pr.add_argument("corpus", choices=sorted(RECIPES))
    pr.add_argument("splits", nargs="*", help="splits to prepare (default: all)")
    pr.set_defaults(func=cmd_prepare)

    t = sub.add_parser("train", help="train a model from a YAML recipe")
    t.add_argument("config")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (repeatable)")
    t.add_argument("--run-dir", help="output directory (default runs/<config name>)")
    no_fast = ("run the readable model as written: no nmtkit.fast speed-ups "
               "(same results within float tolerance)")
    t.add_argument("--no-fast", action="store_true", help=no_fast + "; sets train.fast and decode.fast")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue from RUN_DIR/last.pt")
    mode.add_argument("--overwrite", action="store_true",
                      help="start afresh in a RUN_DIR that holds an earlier run (its checkpoints "
                      "and metrics are removed)")
    t.set_defaults(func=cmd_train)

    def decode_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--model", required=True, help="checkpoint (.pt)")
        q.add_argument("--beam", type=int, default=None, help="beam size (1 = greedy)")
        q.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
        q.add_argument("--early-stop", action="store_true",
                       help="beam search: stop a sentence once its best hypotheses have ended")
        q.add_argument("--device", default="cpu")
        q.add_argument("--no-verify", action="store_true",
                       help="load a checkpoint whose weights do not match their stored checksum")
        q.add_argument("--no-fast", action="store_true", help=no_fast)

    def port(text: str) -> int:
        value = int(text)
        if not 0 <= value <= 65535:
            raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {value}")
        return value

    tr = sub.add_parser("translate", help="translate lines (stdin/stdout by default)")
    decode_args(tr)
    tr.add_argument("-i", "--input", help="input file (default stdin)")
    tr.add_argument("-o", "--output", help="output file (default stdout)")
    tr.add_argument("--n-best", type=int, default=None,
                    help="print N best as 'i<TAB>score<TAB>text' (default: the checkpoint's "
                    "decode.n_best, 1 unless set)")
    tr.set_defaults(func=cmd_translate)

    ev = sub.add_parser("evaluate", help="translate a test set and print sacreBLEU JSON")
    decode_args(ev)
    ev.add_argument("--split", help="corpus split name (e.g. test_2016_flickr)")
    ev.add_argument("--src", help="source file")
    ev.add_argument("--ref", help="reference file")
    ev.add_argument("-o", "--output", help="also write the hypotheses here")
    ev.set_defaults(func=cmd_evaluate)

    av = sub.add_parser("average", help="average the weights of checkpoints")
    av.add_argument("--out", required=True)
    av.add_argument("checkpoints", nargs="+")
    av.set_defaults(func=cmd_average)

    from .serve.limits import ServeLimits as L

    sv = sub.add_parser("serve", help="HTTP API and web page for a checkpoint (needs [serve])")
    sv.add_argument("--model", required=True, help="checkpoint (.pt)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    sv.add_argument("--port", type=port, default=8000)
    sv.add_argument("--device", default="cpu")
    sv.add_argument("--no-verify", action="store_true",
                    help="load a checkpoint whose weights do not match their stored checksum")
    sv.add_argument("--no-fast", action="store_true", help=no_fast)
    sv.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    sv.add_argument("--max-texts", type=int, default=L.max_texts, help="texts per request")
    sv.add_argument("--max-chars", type=int, default=L.max_chars, help="characters per text")
    sv.add_argument("--max-beam", type=int, default=L.max_beam)
    sv.add_argument("--max-length", type=int, default=L.max_length,
                    help="largest max_length (output tokens) a request may ask for")
    sv.add_argument("--max-body-bytes", type=int, default=L.max_body_bytes)
    sv.add_argument("--timeout", type=float, default=L.timeout_s,
                    help="seconds per request before a 503")
    sv.add_argument("--max-batch", type=int, default=L.max_batch,
                    help="sentences merged into one model call")
    sv.add_argument("--allowed-hosts", metavar="H1,H2",
                    help="Host header names accepted, comma-separated ('*' = any; default: the "
                    "bind address, 127.0.0.1, localhost, ::1)")
    sv.add_argument("--timeout-keep-alive", type=float, default=5.0,
                    help="seconds an idle keep-alive connection is held open (default 5)")
    sv.add_argument("--max-wait-ms", type=float, default=L.max_wait_ms,
                    help="how long a request waits for others to batch with")
    sv.set_defaults(func=cmd_serve)

    pl = sub.add_parser("plot", help="draw the figures of the guide (needs [viz])",
                        description="mask | positional | lr-schedule | label-smoothing: concepts of "
                        "the paper; curves: a run's metrics.csv; attention: every attention map "
                        "of a checkpoint for one sentence; all: every figure that the given "
                        "options allow.")
    pl.add_argument("figure", choices=["mask", "positional", "lr-schedule", "label-smoothing",
                                       "curves", "attention", "all"])
    where = pl.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="output directory (default: current directory)")
    where.add_argument("-o", "--output", metavar="FILE",
                       help="output file of one figure (attention: the stem of STEM_<kind>.png)")
    pl.add_argument("--run", metavar="DIR", help="run directory (or its metrics.csv), for curves")
    pl.add_argument("--model", metavar="CKPT", help="checkpoint, for attention")
    pl.add_argument("--text", help="source sentence to translate, for attention")
    pl.add_argument("--beam", type=int, default=None, help="beam size for that translation")
    pl.add_argument("--html", action="store_true",
                    help="attention: also write a self-contained interactive HTML page")
    pl.add_argument("--device", default="cpu")
    pl.add_argument("--dpi", type=int, default=100)
    pl.set_defaults(func=cmd_plot)

    ex = sub.add_parser("export", help="convert a Transformer checkpoint for another inference "
                        "engine (needs [export])",
                        description="ctranslate2: a CTranslate2 model directory (weights, "
                        "vocabularies, tokenizer model, nmtkit.json, README.txt), written "
                        "atomically; serve it with ctranslate2.Translator or "
                        "nmtkit.export.ctranslate2.CTranslate2Translator.")
    ex.add_argument("--format", required=True, choices=["ctranslate2"])
    ex.add_argument("--model", required=True, metavar="CKPT", help="checkpoint (.pt)")
    ex.add_argument("--out", required=True, metavar="DIR", help="output directory")
    ex.add_argument("--quantization", default="float32",
                    choices=["float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                             "int16", "float16", "bfloat16"],
                    help="weight type (default float32; int8 for fast CPU inference)")
    ex.add_argument("--force", action="store_true", help="replace DIR if it exists")
    ex.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .data.fetch import CorpusError
    from .train.loop import TrainingError

    if getattr(args, "beam", None) is not None and args.beam < 1:
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
