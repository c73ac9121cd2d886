"""Training throughput of peer NMT toolkits, re-measured on this machine beside the seed's reference.

Each peer is installed into its own throwaway virtual environment (``python3.11 -m venv``
in a temporary directory, deleted afterwards; nothing goes into nmtkit's own venv), with
the CPU torch wheel installed first. The setup is the one of ../shared/bench/PEERS.md:
Multi30k de->en tokenized with the regex ``\\w+|[^\\w\\s]`` on both sides (the same
``regex_tokenized_corpus`` as train_speed.py), vocabulary min_freq 2, 3+3 layers,
d_model 256, 4 heads, d_ff 1024, dropout 0.1, batches of 4096 tokens, label smoothing
0.1, 2 threads (``OMP_NUM_THREADS``/``MKL_NUM_THREADS``), no data-loader workers, tied
decoder input/output embeddings. The reference (``reference_speed.py``, same dims) runs
in the same invocation, so the ratios compare runs on the same machine at the same time.

Measured: real (non-pad) target tokens per second over ``--steps`` optimizer updates that
follow ``--warmup`` untimed ones. Both peers log one line per update (report/logging
frequency 1) with a millisecond timestamp; the timed span is the timestamp of the last
timed step minus that of the last warm-up step (so model building, corpus loading and the
first, slow steps are excluded). Target tokens: OpenNMT-py logs each update's target token
count (``bsz: src/tgt/sents`` with one batch per update), summed exactly; JoeyNMT logs only a
per-update rate (``Tokens per Sec``, measured by itself since the previous log line), so its
tokens are that rate times the timestamp interval, summed. The toolkit's own rate averaged
over the timed updates is reported beside it. Peak RSS is the training process's maximum
resident set (``os.wait4`` rusage of that child alone).

Install workarounds (see PEERS.md):
  * OpenNMT-py 3.5.1 pins torch<2.3: installed ``--no-deps`` plus its real dependencies
    (configargparse, pyyaml, sacrebleu, six, tensorboard, rapidfuzz, pyahocorasick,
    pyonmttok; spacy and fasttext-wheel are imported by onmt_build_vocab's transforms);
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` so its checkpoints load on torch 2.13.
  * JoeyNMT 2.3.0 installs with its dependencies plus ``importlib_metadata``; its stopping
    key is ``training.updates`` (not ``max_updates``), and ``--skip-test`` avoids loading a
    best checkpoint that a run without validation never writes.
  * fairseq 0.12.2 is not measured: it does not import on Python 3.11 without patches.

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/peers.py --out results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from _common import add_peer_setup_args, emit, machine  # benchmarks/ is the script's directory
from train_speed import regex_tokenized_corpus

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PEERS = ("onmt", "joey")
ONMT_DEPS = ["configargparse", "pyyaml", "sacrebleu", "six", "tensorboard", "rapidfuzz",
             "pyahocorasick", "pyonmttok", "spacy", "fasttext-wheel"]
ONMT_STEP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO\] Step\s+(\d+)/\s*\d+;.*?"
                       r"bsz:\s*(\d+)/\s*(\d+)/\s*(\d+);\s*([\d.]+)/\s*([\d.]+) tok/s")
JOEY_STEP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - joeynmt\.training - "
                       r"Epoch\s+\d+, Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")


class PeerError(RuntimeError):
    pass


def stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def run_logged(cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None,
               timeout: float = 3600) -> dict:
    """Run ``cmd`` with stdout+stderr into ``log``; its exit code, wall time and peak RSS."""
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1),
            "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3)}


def check(res: dict, what: str, log: Path) -> None:
    if res["rc"] != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise PeerError(f"{what} exited {res['rc']}:\n" + "\n".join(tail))


def make_venv(where: Path, python: str, torch_version: str, packages: list[list[str]]) -> Path:
    """A fresh venv at ``where`` with the CPU torch first, then each pip argument list in turn."""
    subprocess.run([python, "-m", "venv", str(where)], check=True)
    py = where / "bin" / "python"
    for i, args in enumerate([[f"torch=={torch_version}"], *packages]):
        log = where / f"pip{i}.log"
        check(run_logged([str(py), "-m", "pip", "install", "-q", *args], log), "pip " + " ".join(args), log)
    cuda = subprocess.run([str(py), "-c", "import torch; print(torch.version.cuda)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if cuda != "None":
        raise PeerError(f"a CUDA torch was installed ({cuda}); refusing to measure with it")
    return py


def versions(py: Path, names: list[str]) -> dict:
    code = ("import json, importlib.metadata as m, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    out = subprocess.run([str(py), "-c", code, *names], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def thread_env(threads: int) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    return env


def timed_window(rows: list[tuple], warmup: int, steps: int, what: str, log: Path) -> list[tuple]:
    """The rows of steps warmup..warmup+steps (the first one only anchors the clock)."""
    by_step = {r[1]: r for r in rows}
    need = range(warmup, warmup + steps + 1)
    missing = [s for s in need if s not in by_step]
    if missing:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise PeerError(f"{what}: no log line for steps {missing[:5]}:\n" + "\n".join(tail))
    return [by_step[s] for s in need]


def model_dims(a: argparse.Namespace) -> dict:
    return {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "d_ff": a.d_ff,
            "dropout": 0.1, "max_tokens": a.max_tokens, "label_smoothing": 0.1}


def onmt(a: argparse.Namespace, corpus: Path, tmp: Path) -> dict:
    t0 = time.perf_counter()
    wheel_dir = tmp / "wheel"
    py = make_venv(tmp / "venv", a.python, a.torch, [])
    dl = tmp / "pip_download.log"
    check(run_logged([str(py), "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheel_dir),
                      f"OpenNMT-py=={a.onmt_version}"], dl), "pip download OpenNMT-py", dl)
    wheel = next(wheel_dir.iterdir())
    for i, args in enumerate([["--no-deps", str(wheel)], ONMT_DEPS]):
        log = tmp / f"pip_onmt{i}.log"
        check(run_logged([str(py), "-m", "pip", "install", "-q", *args], log), "pip install", log)
    install_s = time.perf_counter() - t0
    run = tmp / "run"
    run.mkdir()
    total = a.warmup + a.steps
    cfg = {
        "save_data": str(run / "data"), "overwrite": True,
        "src_vocab": str(run / "vocab.src"), "tgt_vocab": str(run / "vocab.tgt"),
        "data": {"corpus_1": {"path_src": str(corpus / "train.de"), "path_tgt": str(corpus / "train.en")},
                 "valid": {"path_src": str(corpus / "val.de"), "path_tgt": str(corpus / "val.en")}},
        "src_words_min_frequency": 2, "tgt_words_min_frequency": 2,
        "save_model": str(run / "model"),
        "encoder_type": "transformer", "decoder_type": "transformer",
        "enc_layers": a.layers, "dec_layers": a.layers, "hidden_size": a.d_model,
        "word_vec_size": a.d_model, "heads": a.heads, "transformer_ff": a.d_ff,
        "dropout": [0.1], "attention_dropout": [0.1], "position_encoding": True,
        "share_decoder_embeddings": True,
        "batch_type": "tokens", "batch_size": a.max_tokens, "valid_batch_size": a.max_tokens,
        "label_smoothing": 0.1, "optim": "adam", "adam_beta2": 0.98, "decay_method": "noam",
        "warmup_steps": 300, "learning_rate": 2.0, "max_grad_norm": 0, "param_init": 0,
        "param_init_glorot": True, "normalization": "tokens",
        "train_steps": total, "valid_steps": 10**6, "save_checkpoint_steps": 10**6,
        "report_every": 1, "num_workers": 0, "seed": 1,
    }
    cfg_path = run / "config.yaml"
    cfg_path.write_text(json.dumps(cfg, indent=1), encoding="utf-8")  # JSON is YAML
    env = thread_env(a.threads)
    bin_dir = py.parent
    vlog = tmp / "build_vocab.log"
    check(run_logged([str(bin_dir / "onmt_build_vocab"), "-config", str(cfg_path), "-n_sample", "-1"],
                     vlog, env=env, cwd=run), "onmt_build_vocab", vlog)
    log = tmp / "train.log"
    res = run_logged([str(bin_dir / "onmt_train"), "-config", str(cfg_path)], log, env=env, cwd=run)
    check(res, "onmt_train", log)
    rows = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = ONMT_STEP.match(line)
        if m:
            rows.append((stamp(m[1]), int(m[2]), int(m[4]), float(m[7])))
    win = timed_window(rows, a.warmup, a.steps, "OpenNMT-py", log)
    seconds = win[-1][0] - win[0][0]
    tokens = sum(r[2] for r in win[1:])
    own_seconds = sum(r[2] / r[3] for r in win[1:])  # each step's tokens over its own rate
    return {
        "version": versions(py, ["OpenNMT-py", "torch"]),
        "tgt_tokens_per_s": round(tokens / seconds, 1),
        "self_reported_tgt_tokens_per_s": round(tokens / own_seconds, 1),
        "warmup_steps": a.warmup, "timed_steps": a.steps, "tokens": tokens,
        "tokens_per_step": round(tokens / a.steps), "seconds": round(seconds, 3),
        "peak_rss_gb": res["peak_rss_gb"], "train_process_wall_s": res["wall_s"],
        "install_s": round(install_s, 1),
        "method": "log timestamps of the steps' report lines (report_every 1); target tokens "
                  "summed from each step's logged bsz tgt count (one batch per update)",
        "install": "OpenNMT-py --no-deps + " + " ".join(ONMT_DEPS),
    }


def joey(a: argparse.Namespace, corpus: Path, tmp: Path) -> dict:
    t0 = time.perf_counter()
    py = make_venv(tmp / "venv", a.python, a.torch, [[f"joeynmt=={a.joey_version}", "importlib_metadata"]])
    install_s = time.perf_counter() - t0
    run = tmp / "run"
    run.mkdir()
    side = {"level": "word", "lowercase": False, "voc_min_freq": 2, "max_length": 200}
    layer = {"type": "transformer", "num_layers": a.layers, "num_heads": a.heads,
             "embeddings": {"embedding_dim": a.d_model, "scale": True},
             "hidden_size": a.d_model, "ff_size": a.d_ff, "dropout": 0.1}
    cfg = {
        "name": "peers", "joeynmt_version": a.joey_version,
        "data": {"train": str(corpus / "train"), "dev": str(corpus / "val"), "dataset_type": "plain",
                 "src": {"lang": "de", **side}, "trg": {"lang": "en", **side}},
        "training": {
            "random_seed": 1, "optimizer": "adam", "adam_betas": [0.9, 0.98],
            "learning_rate": 0.001, "scheduling": "warmupinversesquareroot",
            "learning_rate_warmup": 300, "label_smoothing": 0.1, "loss": "crossentropy",
            "normalization": "tokens", "batch_size": a.max_tokens, "batch_type": "token",
            "eval_batch_size": a.max_tokens, "eval_batch_type": "token",
            "updates": a.warmup + a.steps, "epochs": 1, "logging_freq": 1,
            "validation_freq": 10**6, "model_dir": str(run / "model"), "overwrite": True,
            "use_cuda": False, "num_workers": 0, "shuffle": True, "keep_best_ckpts": 0,
        },
        "testing": {"n_best": 1, "beam_size": 1, "batch_size": 1024, "batch_type": "token",
                    "max_output_length": 100, "eval_metrics": ["bleu"]},
        "model": {"initializer": "xavier_uniform", "embed_initializer": "xavier_uniform",
                  "tied_softmax": True, "encoder": layer, "decoder": layer},
    }
    cfg_path = run / "config.yaml"
    cfg_path.write_text(json.dumps(cfg, indent=1), encoding="utf-8")
    log = tmp / "train.log"
    res = run_logged([str(py), "-m", "joeynmt", "train", str(cfg_path), "--skip-test"], log,
                     env=thread_env(a.threads), cwd=run)
    check(res, "joeynmt train", log)
    rows = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = JOEY_STEP.match(line)
        if m:
            rows.append((stamp(m[1]), int(m[2]), float(m[3])))
    win = timed_window(rows, a.warmup, a.steps, "JoeyNMT", log)
    seconds = win[-1][0] - win[0][0]
    tokens = sum(r[2] * (r[0] - prev[0]) for prev, r in zip(win[:-1], win[1:], strict=True))
    return {
        "version": versions(py, ["joeynmt", "torch"]),
        "tgt_tokens_per_s": round(tokens / seconds, 1),
        "self_reported_tgt_tokens_per_s_mean": round(sum(r[2] for r in win[1:]) / a.steps, 1),
        "warmup_steps": a.warmup, "timed_steps": a.steps, "tokens_estimated": round(tokens),
        "tokens_per_step": round(tokens / a.steps), "seconds": round(seconds, 3),
        "peak_rss_gb": res["peak_rss_gb"], "train_process_wall_s": res["wall_s"],
        "install_s": round(install_s, 1),
        "method": "log timestamps of the steps' log lines (logging_freq 1); target tokens = "
                  "each step's logged 'Tokens per Sec' x its timestamp interval (JoeyNMT logs "
                  "no per-step count)",
        "install": "joeynmt + importlib_metadata (all declared dependencies)",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {PEERS}")
    p.add_argument("--steps", type=int, default=12, help="timed optimizer updates per peer")
    p.add_argument("--warmup", type=int, default=3, help="untimed updates before them")
    p.add_argument("--ref-steps", type=int, default=8)
    add_peer_setup_args(p)
    p.add_argument("--python", default="python3.11", help="interpreter for the peers' venvs")
    p.add_argument("--torch", default="2.13.0", help="torch version installed first (CPU wheel)")
    p.add_argument("--onmt-version", default="3.5.1")
    p.add_argument("--joey-version", default="2.3.0")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args()
    peers = [x for x in a.peers.split(",") if x]
    if unknown := set(peers) - set(PEERS):
        p.error(f"unknown peers {sorted(unknown)}")
    if not shutil.which(a.python):
        p.error(f"{a.python} not found")
    data = Path(os.environ.get("NMTKIT_DATA", SHARED / "data"))
    names = {"onmt": "OpenNMT-py", "joey": "JoeyNMT"}
    measured, failed = {}, {}
    with tempfile.TemporaryDirectory(prefix="nmtkit-peers-") as tmp_str:
        tmp = Path(tmp_str)
        corpus = regex_tokenized_corpus(data, tmp / "regex")
        dims = ["--layers", str(a.layers), "--d-model", str(a.d_model), "--d-ff", str(a.d_ff),
                "--heads", str(a.heads), "--threads", str(a.threads)]
        rlog = tmp / "reference.log"
        rres = run_logged([sys.executable, str(SHARED / "bench" / "reference_speed.py"), *dims,
                           "--steps", str(a.ref_steps), "--decode-n", "1"], rlog)
        check(rres, "reference_speed.py", rlog)
        ref = json.loads(rlog.read_text(encoding="utf-8").strip().splitlines()[-1])
        ref.update(peak_rss_gb=rres["peak_rss_gb"], process_wall_s=rres["wall_s"])
        for peer in peers:
            peer_tmp = tmp / peer
            peer_tmp.mkdir()
            try:
                res = (onmt if peer == "onmt" else joey)(a, corpus, peer_tmp)
            except (PeerError, subprocess.CalledProcessError, OSError, StopIteration) as e:
                failed[names[peer]] = f"{type(e).__name__}: {e}"
                print(f"{names[peer]} failed: {e}", file=sys.stderr)
                continue
            finally:
                shutil.rmtree(peer_tmp / "venv", ignore_errors=True)
            res["ratio_to_reference"] = round(res["tgt_tokens_per_s"] / ref["train_tgt_tokens_per_s"], 2)
            measured[names[peer]] = res
    result = {
        "benchmark": "peers_train_speed", "machine": machine(),
        "processor": platform.processor() or None, "threads": a.threads, "model": model_dims(a),
        "corpus": "Multi30k de->en, regex \\w+|[^\\w\\s] both sides, vocab min_freq 2",
        "reference": ref, "peers": measured, "failed": failed,
        "not_measured": {"fairseq 0.12.2": "does not import on Python 3.11 without patches"},
        "peers_md_tgt_tokens_per_s_same_machine_kind": {
            "OpenNMT-py": 2217, "JoeyNMT": 768, "fairseq": 2244, "reference": 305,
            "source": "shared/bench/PEERS.md"},
    }
    emit(result, a.out)
    if failed and not measured:
        sys.exit(1)


if __name__ == "__main__":
    main()
