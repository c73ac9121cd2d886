"""Load test of ``nmtkit serve`` on loopback: requests/s and latency at several concurrencies.

Starts the server as a subprocess on a free 127.0.0.1 port, sends ``--requests`` requests of
one sentence each at every ``--concurrency`` level (threads + urllib, so no client library is
needed), and writes JSON (also printed) to ``benchmarks/results/serve_load_<date>.json``:

    python benchmarks/serve_load.py --model runs/multi30k_transformer_small/best.pt

Each level reports requests/s, p50/p95/max latency, failed requests, and the server's
batching counters for that level (model calls, mean sentences per call).

``--engine`` picks what the server runs: ``torch`` (the checkpoint, the default),
``ctranslate2`` (``--model`` is then an ``nmtkit export --format ctranslate2`` directory), or
``both``: the checkpoint and its CTranslate2 export (``--ct2-model DIR``, or exported here into
a temporary directory) are served side by side on two ports and, at each concurrency level,
measured one after the other (the idle one waits), so that both see the same machine; the
JSON then holds one result per engine and the ratios CTranslate2 / PyTorch:

    python benchmarks/serve_load.py --model runs/x/best.pt --engine both --beam 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import itertools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Multi30k-like German sentences (written for this benchmark), cycled over the requests.
SENTENCES = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau sitzt auf einer Bank und liest ein Buch.",
    "Kinder spielen am Strand mit einem Ball.",
    "Ein Junge springt in einen See.",
    "Eine Gruppe von Menschen steht vor einem Gebäude.",
    "Ein Mädchen in einem roten Kleid läuft über die Wiese.",
    "Ein alter Mann verkauft Obst auf dem Markt.",
    "Zwei Männer arbeiten auf einer Baustelle.",
    "Ein schwarzer Hund rennt durch das hohe Gras.",
    "Eine Frau mit Hut fotografiert die Berge.",
    "Ein Musiker spielt Gitarre auf der Straße.",
    "Drei Kinder sitzen an einem Tisch und essen.",
    "Ein Radfahrer fährt eine steile Straße hinauf.",
    "Ein Mann in einem blauen Hemd kocht in einer Küche.",
    "Leute warten an einer Bushaltestelle im Regen.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def start_server(model: str, port: int, extra: list[str], log_path: Path,
                 engine: str = "torch") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "nmtkit.cli", "serve", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--engine", engine, *extra]
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    proc.log_file = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise SystemExit(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            get_json(f"http://127.0.0.1:{port}/health", timeout=1.0)
            return proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    stop_server(proc)
    raise SystemExit(f"server did not answer /health within 120 s (log: {log_path})")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.log_file.close()  # type: ignore[attr-defined]


def one_request(url: str, text: str, beam: int | None, timeout: float
                ) -> tuple[float, str | None]:
    payload: dict = {"texts": [text]}
    if beam is not None:
        payload["beam"] = beam
    body = json.dumps(payload).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.loads(r.read())
        err = None if len(out.get("translations", [])) == 1 else f"bad answer: {out}"
    except urllib.error.HTTPError as e:
        err = f"HTTP {e.code}: {e.read()[:200]!r}"
    except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the run
        err = f"{type(e).__name__}: {e}"
    return time.perf_counter() - t0, err


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_level(base: str, n: int, concurrency: int, beam: int | None, timeout: float,
              sentences: list[str]) -> dict:
    url = base + "/v1/translate"
    counter = itertools.count()
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []

    def worker():
        while True:
            with lock:
                i = next(counter)
            if i >= n:
                return
            lat, err = one_request(url, sentences[i % len(sentences)], beam, timeout)
            with lock:
                latencies.append(lat)
                if err:
                    errors.append(err)

    before = get_json(base + "/health")["batching"]
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = get_json(base + "/health")["batching"]
    calls = after["model_calls"] - before["model_calls"]
    ms = [x * 1000 for x in latencies]
    return {
        "concurrency": concurrency, "requests": n, "failed": len(errors),
        "errors": sorted(set(errors))[:5], "wall_s": round(wall, 3),
        "requests_per_s": round(n / wall, 2),
        "latency_ms": {"p50": round(percentile(ms, 0.5), 1), "p95": round(percentile(ms, 0.95), 1),
                       "mean": round(statistics.fmean(ms), 1), "max": round(max(ms), 1)},
        "model_calls": calls,
        "sentences_per_call": round((after["sentences"] - before["sentences"]) / calls, 2)
        if calls else None,
    }


def export_for_ct2(checkpoint: str, tmp: Path) -> str:
    """``checkpoint`` exported to CTranslate2 (float32 weights; the server's ``--compute-type``
    decides what it computes in) in ``tmp``."""
    from nmtkit.export.ctranslate2 import export_ctranslate2

    return str(export_ctranslate2(checkpoint, tmp / "ct2"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="checkpoint (.pt) to serve; with --engine "
                   "ctranslate2 an export directory")
    p.add_argument("--engine", choices=["torch", "ctranslate2", "both"], default="torch",
                   help="server engine; both: the checkpoint and its CTranslate2 export, "
                   "measured alternately at each level")
    p.add_argument("--ct2-model", metavar="DIR", help="--engine both: the export of --model to "
                   "serve (default: export it now into a temporary directory)")
    p.add_argument("--compute-type", default=None,
                   help="passed to the CTranslate2 server (default: its own, int8 on cpu)")
    p.add_argument("--requests", type=int, default=500, help="requests per concurrency level")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--beam", type=int, default=None,
                   help="beam size of every request (default: the model's, as the server says)")
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request (s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed requests before the first level")
    p.add_argument("--sentences", help="file with one source sentence per line "
                   "(default: 16 built-in German sentences)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="passed to `nmtkit serve` (repeatable), e.g. --server-arg=--max-wait-ms=10")
    p.add_argument("--out", help="JSON output (default benchmarks/results/serve_load_<date>.json)")
    a = p.parse_args(argv)
    if a.requests < 1 or min(a.concurrency) < 1 or (a.beam is not None and a.beam < 1):
        p.error("--requests, --concurrency and --beam must be >= 1")
    if a.ct2_model and a.engine != "both":
        p.error("--ct2-model goes with --engine both (--engine ctranslate2 serves --model)")

    sentences = SENTENCES
    if a.sentences:
        sentences = [s for s in Path(a.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]
        if not sentences:
            p.error(f"{a.sentences}: no sentences")
    out = Path(a.out) if a.out else (ROOT / "benchmarks" / "results" /
                                     f"serve_load_{dt.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    server_args = list(a.server_arg)
    if a.beam is not None and a.beam > 10:  # the server's default --max-beam is 10
        server_args += ["--max-beam", str(a.beam)]
    ct2_args = ["--compute-type", a.compute_type] if a.compute_type else []

    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        if a.engine == "both":
            served = {"torch": a.model, "ctranslate2": a.ct2_model or export_for_ct2(a.model, Path(tmp))}
        else:
            served = {a.engine: a.model}
        procs: dict[str, subprocess.Popen] = {}
        bases: dict[str, str] = {}
        try:
            for engine, model in served.items():
                port = free_port()
                log_path = out.with_suffix(".server.log" if len(served) == 1 else f".{engine}.server.log")
                procs[engine] = start_server(model, port, server_args + (ct2_args if engine ==
                                             "ctranslate2" else []), log_path, engine)
                bases[engine] = f"http://127.0.0.1:{port}"
            health = {e: get_json(b + "/health") for e, b in bases.items()}
            for base in bases.values():
                for i in range(a.warmup):
                    one_request(base + "/v1/translate", sentences[i % len(sentences)], a.beam, a.timeout)
            runs: dict[str, list[dict]] = {e: [] for e in bases}
            for c in a.concurrency:
                for engine, base in bases.items():  # engines alternate: the same machine drift
                    r = run_level(base, a.requests, c, a.beam, a.timeout, sentences)
                    print(f"{engine:>11} concurrency {c:>3}: {r['requests_per_s']:8.2f} req/s  "
                          f"p50 {r['latency_ms']['p50']:7.1f} ms  p95 {r['latency_ms']['p95']:7.1f} ms"
                          f"  failed {r['failed']}  sentences/call {r['sentences_per_call']}",
                          file=sys.stderr)
                    runs[engine].append(r)
        finally:
            for proc in procs.values():
                stop_server(proc)

    def engine_result(engine: str) -> dict:
        h = health[engine]
        return {
            "engine": engine, "served": served[engine],
            "model": {k: h.get(k) for k in ("model", "name", "architecture", "src_lang", "tgt_lang",
                                            "device", "parameters")},
            "server": {"args": server_args + (ct2_args if engine == "ctranslate2" else []),
                       "limits": h["limits"]},
            "beam": a.beam if a.beam is not None else h["default_beam"],
            "runs": runs[engine],
        }

    result: dict = {
        "benchmark": "serve_load",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "torch": importlib.metadata.version("torch"),
                    **({"ctranslate2": importlib.metadata.version("ctranslate2")}
                       if "ctranslate2" in served else {})},
        "requests_per_level": a.requests,
    }
    if len(served) == 1:
        result.update(engine_result(a.engine))
        result.pop("served")
    else:
        result["engines"] = {e: engine_result(e) for e in served}
        result["ctranslate2_vs_torch"] = [
            {"concurrency": t["concurrency"],
             "requests_per_s_ratio": round(c["requests_per_s"] / t["requests_per_s"], 2),
             "p50_latency_ratio": round(c["latency_ms"]["p50"] / t["latency_ms"]["p50"], 2),
             "p95_latency_ratio": round(c["latency_ms"]["p95"] / t["latency_ms"]["p95"], 2)}
            for t, c in zip(runs["torch"], runs["ctranslate2"], strict=True)]
    result["failed_total"] = sum(r["failed"] for rs in runs.values() for r in rs)
    text = json.dumps(result, indent=2)
    out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if result["failed_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
