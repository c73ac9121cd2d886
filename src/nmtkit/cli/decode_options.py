"""The decoding flags, declared once, and the one function that turns them into a
:class:`~nmtkit.config.DecodeConfig`.

translate, evaluate, backtranslate and distill take every flag (:func:`add_decode_args`);
tune its model flags (it searches the others: its grids have their own destinations), serve
its ``--no-fast`` and reranking flags. :func:`decode_config_from_args` reads whichever of
them the command declared; a flag not given (``None``) keeps the checkpoint's value, and the
options are resolved as the server's and the Python API's are
(:func:`nmtkit.decode.text_translator.decode_options`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..config import MAX_LENGTH_PENALTY, MBR_UTILITIES
from ..errors import UserError
from .options import (
    NO_FAST_HELP,
    THREADS_HELP,
    add_quiet_arg,
    device,
    finite_float,
    thread_count,
)

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from ..decode.text_translator import LoadedModel, TextTranslator

ENGINES = ("torch", "ctranslate2")
COMPUTE_TYPES = ("default", "auto", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16", "float32")
"""CTranslate2's compute types (``--compute-type``)."""


def add_model_args(q: argparse.ArgumentParser) -> None:
    """``--model`` (one, or several for an ensemble) and how to load and run it; ``--quiet``
    (no progress bar)."""
    q.add_argument("--model", required=True, action="append",
                   help="checkpoint (.pt); repeat it for an ensemble, which averages the "
                   "models' probabilities at each step (same vocabularies required)")
    q.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    q.add_argument("--device", type=device, default="cpu",
                   help="torch device: cpu, cuda, cuda:1 ...")
    q.add_argument("--no-verify", action="store_true",
                   help="load a checkpoint whose weights do not match their stored checksum")
    q.add_argument("--no-fast", action="store_true", help=NO_FAST_HELP)
    q.add_argument("--threads", type=thread_count, default=0, help=THREADS_HELP)
    add_quiet_arg(q)


def add_engine_args(q: argparse.ArgumentParser, numpy: bool = False) -> None:
    """``--engine`` (what runs the search) and ``--compute-type`` (CTranslate2's).
    ``numpy``: also the checkpoint's Transformer in numpy (``nmtkit translate``), and no
    default: numpy for a few lines where it can, else PyTorch (:mod:`nmtkit.lite`)."""
    from ..lite import MAX_LINES  # (a constant: the package imports nothing)

    engines = ("torch", "numpy", "ctranslate2") if numpy else ENGINES
    q.add_argument("--engine", choices=engines, default=None if numpy else "torch",
                   help="what runs the search: torch (nmtkit's own, on a checkpoint; attention "
                   "maps, every option)"
                   + (", numpy (the checkpoint's Transformer without importing PyTorch: a "
                      "one-sentence translate starts in a fraction of a second; what it does "
                      f"not do goes to torch; the default for up to {MAX_LINES} sentences where it "
                      "can, else torch; --no-fast turns it off)" if numpy else "")
                   + " or ctranslate2 (--model is a directory written by `nmtkit export "
                   "--format ctranslate2`: faster, starts without importing PyTorch, no "
                   "lexical constraints; needs [export])")
    q.add_argument("--compute-type", default=None, choices=COMPUTE_TYPES,
                   help="--engine ctranslate2: CTranslate2's compute type (default: int8 on "
                   "cpu, float16 on cuda; 'default': the type the export stores)")


def model_files(a: argparse.Namespace) -> list[str]:
    """Every checkpoint the command reads (``--model``, ``--reverse-model``, ``--r2l-model``):
    inputs that no output may land on (:func:`nmtkit.io.refuse_overwriting_inputs`)."""
    return [*a.model, *(getattr(a, "reverse_model", None) or []),
            *(getattr(a, "r2l_model", None) or [])]


def add_reverse_model_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--reverse-model", action="append", default=None, metavar="CKPT",
                   help="a checkpoint of the reverse direction (target -> source) that "
                   "reranks the candidates (--rerank), or a model of several directions "
                   "that has it (a model trained both ways can be its own); repeat it to "
                   "average several")


def add_r2l_model_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--r2l-model", action="append", default=None, metavar="CKPT",
                   help="a right-to-left checkpoint of the same direction (trained with "
                   "data.reverse_target: true) that also scores the candidates of --rerank, "
                   "reading each from its end; repeat it to average several")


def add_rerank_args(q: argparse.ArgumentParser) -> None:
    """The reranking models and flags (:mod:`nmtkit.decode.rerank`)."""
    add_reverse_model_arg(q)
    add_r2l_model_arg(q)
    q.add_argument("--rerank", type=int, default=None, metavar="N",
                   help="rerank N candidates (the N best of a beam at least N wide) by their "
                   "beam score plus --reverse-weight times the --reverse-model's log P(source "
                   "| candidate) per source token (and --r2l-weight times the --r2l-model's "
                   "per-token score; default: the checkpoint's decode.rerank, 0 = off)")
    q.add_argument("--reverse-weight", type=finite_float, default=None, metavar="W",
                   help="reranking: the weight of the reverse model's score (default: the "
                   "checkpoint's decode.reverse_weight; `nmtkit tune` chooses it on val)")
    q.add_argument("--r2l-weight", type=finite_float, default=None, metavar="V",
                   help="reranking: the weight of the --r2l-model's score, its log P("
                   "candidate | source) per token (default: the checkpoint's "
                   "decode.r2l_weight; `nmtkit tune` chooses it on val)")


def add_decode_args(q: argparse.ArgumentParser) -> None:
    """The model flags, the search flags (beam, length, sampling, MBR) and reranking."""
    add_model_args(q)
    q.add_argument("--beam", type=int, default=None, help="beam size (1 = greedy)")
    q.add_argument("--length-penalty", type=finite_float, default=None, metavar="ALPHA",
                   help="beam search ranks by log-prob / ((5 + length) / 6)^ALPHA "
                   f"(GNMT; 0 = raw log-prob, larger favours longer outputs, at most "
                   f"{MAX_LENGTH_PENALTY:g}; default: the "
                   "checkpoint's decode.length_penalty; `nmtkit tune` chooses it on val)")
    q.add_argument("--max-len-a", type=finite_float, default=None, metavar="A",
                   help="outputs stop at A * source length + B tokens (default: the "
                   "checkpoint's decode.max_len_a)")
    q.add_argument("--max-len-b", type=int, default=None, metavar="B",
                   help="... see --max-len-a (default: the checkpoint's decode.max_len_b)")
    q.add_argument("--early-stop", action="store_true",
                   help="beam search: stop a sentence once its best hypotheses have ended")
    q.add_argument("--sampling", action="store_true",
                   help="draw each token from the model's distribution instead of searching "
                   "(back-translation, diversity); the beam is not used")
    q.add_argument("--temperature", type=finite_float, default=None,
                   help="sampling: divide the log-probs by T (< 1 sharper, > 1 flatter; default 1)")
    q.add_argument("--top-k", type=int, default=None,
                   help="sampling: only among the K most probable tokens (default 0 = all)")
    q.add_argument("--top-p", type=finite_float, default=None,
                   help="sampling: only among the most probable tokens whose mass reaches P "
                   "(nucleus; default 1 = all)")
    q.add_argument("--epsilon", type=finite_float, default=None,
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
    q.add_argument("--mbr-scale", type=finite_float, default=None, metavar="S",
                   help="MBR over a beam's N best: each candidate weighs its probability "
                   "to the power S (default 0: the same for each; 1: the model's posterior)")
    add_rerank_args(q)
    add_text_args(q)


def add_text_args(q: argparse.ArgumentParser) -> None:
    """What is done to the text around the search: sentence splitting, protected spans."""
    q.add_argument("--split-sentences", action=argparse.BooleanOptionalAction, default=None,
                   help="cut each line into sentences (pysbd's rules for the model's source "
                   "language), translate them in one batch and join each line's translations "
                   "into one output line; with --n-best the k-th joins every sentence's k-th, "
                   "--scores sum the sentences', --alignments count positions in the line "
                   "(default: the checkpoint's decode.split_sentences, on)")
    q.add_argument("--protect-spans", action=argparse.BooleanOptionalAction, default=None,
                   help="carry characters the vocabulary lacks (emoji, signs, with the "
                   "numbers beside them), URLs and e-mail addresses over into the output: cut "
                   "from what the model reads, put back next to the words aligned to them; "
                   "never write <unk> (default: the checkpoint's decode.protect_spans, on)")


def add_n_best_args(q: argparse.ArgumentParser) -> None:
    """``--n-best`` and ``--n-samples``: several translations of each line (translate). They
    set one thing, ``decode.n_best``: one or the other, never both (one would be dropped)."""
    one = q.add_mutually_exclusive_group()
    one.add_argument("--n-best", type=int, default=None,
                     help="print N best as 'i<TAB>score<TAB>text', the score that orders them: "
                     "the search's, with --rerank the reranking score, with --mbr the expected "
                     "utility (default: the checkpoint's decode.n_best, 1 unless set)")
    one.add_argument("--n-samples", type=int, default=None,
                     help="with --sampling: draw N translations per line, printed as with "
                     "--n-best (in the order drawn; --n-best N with --sampling is the same)")


def add_alignment_choice_args(q: argparse.ArgumentParser) -> None:
    """The attention that alignments read (translate ``--alignments``)."""
    q.add_argument("--alignment-layer", type=int, default=None, metavar="L",
                   help="--alignments from decoder layer L's source attention, counted from 0 "
                   "(default: the checkpoint's decode.alignment_layer, -1 = the last layer); "
                   "Transformer only")
    q.add_argument("--alignment-head", type=int, default=None, metavar="H",
                   help="--alignments from head H of that layer, counted from 0 (default: the "
                   "checkpoint's decode.alignment_head, -1 = the heads' mean); Transformer only")


def decode_overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~nmtkit.config.DecodeConfig` fields that the flags of ``a`` give (``None``:
    not given, or not a flag of this command: the checkpoint's). ``ValueError`` for flags
    that do not go together."""
    def given(dest: str) -> Any:
        return getattr(a, dest, None)

    n_samples = given("n_samples")
    if n_samples is not None and not given("sampling"):
        raise UserError("--n-samples needs --sampling")
    return {"beam": given("beam"), "n_best": n_samples or given("n_best"),
            "length_penalty": given("length_penalty"), "max_len_a": given("max_len_a"),
            "max_len_b": given("max_len_b"), "batch_size": given("batch_size"),
            "fast": False if given("no_fast") else None,
            "early_stop": True if given("early_stop") else None,
            "sampling": True if given("sampling") else None,
            "sampling_temperature": given("temperature"), "sampling_top_k": given("top_k"),
            "sampling_top_p": given("top_p"), "sampling_seed": given("seed"),
            "sampling_epsilon": given("epsilon"),
            "mbr": given("mbr"), "mbr_utility": given("mbr_utility"),
            "mbr_scale": given("mbr_scale"),
            "rerank": given("rerank"), "reverse_weight": given("reverse_weight"),
            "r2l_weight": given("r2l_weight"),
            "alignment_layer": given("alignment_layer"),
            "alignment_head": given("alignment_head"),
            "split_sentences": given("split_sentences"), "protect_spans": given("protect_spans")}


def decode_config_from_args(a: argparse.Namespace, base: DecodeConfig) -> DecodeConfig:
    """``base`` (a checkpoint's ``decode`` section) with the decoding flags of ``a`` applied:
    the one place a command's flags become decoding options
    (:func:`nmtkit.decode.text_translator.decode_options` resolves and checks them)."""
    from ..decode.text_translator import decode_options

    return decode_options(base, **decode_overrides(a))


def translator_from_args(a: argparse.Namespace, *, tuning: bool = False,
                         engine: str = "torch") -> tuple[LoadedModel, TextTranslator]:
    """(what the translator was loaded from, the translator) of the ``--model`` flags with
    the decoding options of the others: the library's
    :func:`~nmtkit.decode.load.load_translator`, which chooses the engine (``engine``:
    ``--engine``, "auto" where the command lets the library choose); with
    ``--reverse-model``/``--r2l-model``, the models that rerank its candidates (``tuning``:
    also without ``decode.rerank``, whose sizes tune tries)."""
    from ..decode.load import load_translator

    overrides = decode_overrides(a)  # flags that do not go together: said before loading anything
    tr = load_translator(a.model, engine, device=a.device, verify=not a.no_verify,
                         compute_type=getattr(a, "compute_type", None), threads=a.threads,
                         reverse_models=getattr(a, "reverse_model", None) or (),
                         r2l_models=getattr(a, "r2l_model", None) or (),
                         src_lang=getattr(a, "src_lang", None),
                         tgt_lang=getattr(a, "tgt_lang", None), rerank_given=not tuning,
                         **overrides)
    assert tr.bundle is not None  # (load_translator records it)
    return tr.bundle, tr
