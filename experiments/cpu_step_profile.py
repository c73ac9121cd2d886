"""Where a CPU training update's time goes, on train_speed.py's batch (3+3 layers, d_model 256,
4096-token batches of Multi30k de->en, regex-tokenized): torch.profiler over a few updates
after a warm-up, operators by CPU time; then, over one more update, every copy (``copy_``,
``clone``, ``cat``, ``index_copy``...) with its bytes and where it comes from: the line of
nmtkit that called it, or in the backward pass the autograd node. The tables are appended to
``--out``. A profile says where the time goes, not how fast the step is: that is
benchmarks/train_speed.py.

    NMTKIT_DATA=../shared/data python experiments/cpu_step_profile.py --out profile.txt [--no-fast]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # train_speed.py

from _common import add_peer_setup_args  # noqa: E402
from train_speed import ROOT, SHARED, batches_for, peer_config, regex_tokenized_corpus  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_peer_setup_args(p)
    p.add_argument("--updates", type=int, default=10)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--no-fast", action="store_true")
    p.add_argument("--rows", type=int, default=30)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import torch

    from nmtkit.config import Config
    from nmtkit.train.loop import Trainer

    torch.set_num_threads(a.threads)
    tmp = Path(tempfile.mkdtemp())
    corpus = regex_tokenized_corpus(SHARED / "data", tmp / "corpus")
    cfg = Config.from_dict(peer_config(corpus, a, **({"fast": False} if a.no_fast else {})))
    tr = Trainer(cfg, tmp / "run")
    batches = batches_for(tr.data.train_ids, a.max_tokens, a.warmup + a.updates + 1)
    for i in range(a.warmup):
        tr.schedule.set_step(i + 1)
        tr._update([batches[i]])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(a.warmup, a.warmup + a.updates):
            tr._update([batches[i]])
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    lines = [f"\n### fast={not a.no_fast} threads={a.threads} max_tokens={a.max_tokens}: "
             f"{total / a.updates / 1e3:.1f} ms of operator self time per update"]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:a.rows]:
        lines.append(f"{e.key:45s} {100 * e.self_cpu_time_total / total:5.1f}%  "
                     f"{e.count // a.updates:6d} calls/update")
    lines += copies(tr, batches[a.warmup + a.updates])
    text = "\n".join(lines) + "\n"
    with open(a.out, "a", encoding="utf-8") as f:
        f.write(text)
    print(text)


def copies(tr, batch) -> list[str]:  # noqa: ANN001
    """One update's copies by bytes: (operator, caller) -> lines of the table."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    nbytes: collections.Counter[tuple[str, str]] = collections.Counter()
    src = str(ROOT / "src") + "/"

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            name = str(func)
            if "copy" in name or "clone" in name or name.startswith("aten.cat"):
                ours = [f for f in traceback.extract_stack() if f.filename.startswith(src)]
                where = (f"{ours[-1].filename[len(src):]}:{ours[-1].lineno} {ours[-1].name}"
                         if ours else "?")
                node = torch._C._current_autograd_node()
                if node is not None:
                    where = f"backward of {node.name()}"
                key = (name, where)
                calls[key] += 1
                nbytes[key] += out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0
            return out

    with Copies():
        tr._update([batch])
    total = sum(nbytes.values())
    lines = [f"-- copies in one update: {total / 1e6:.1f} MB in {sum(calls.values())} calls"]
    for key, b in nbytes.most_common(15):
        lines.append(f"   {b / 1e6:7.1f} MB {calls[key]:4d}x  {key[0]:28s} {key[1]}")
    return lines


if __name__ == "__main__":
    main()
