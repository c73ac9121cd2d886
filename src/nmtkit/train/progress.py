"""What a run shows while it trains: a bar of the updates (tqdm) with the training loss,
rate and target tokens per second of the last ``train.log_every`` updates; where there is
no terminal (a log file, a batch job) the same figures as a log line instead."""

from __future__ import annotations

import logging

from tqdm import tqdm

from ..config import TrainConfig

log = logging.getLogger(__name__)


class ProgressBar:
    """The updates done out of ``train.max_steps``."""

    def __init__(self, t: TrainConfig, step: int):
        self.bar = tqdm(total=t.max_steps, initial=step, desc="train", unit="step",
                        dynamic_ncols=True, disable=None)

    def update(self) -> None:
        self.bar.update(1)

    def show(self, step: int, epoch: int, loss: float, lr: float, tokens_per_s: float,
             loss_scale: float | None) -> None:
        """The figures of the last ``log_every`` updates (``loss_scale``: fp16's, or None)."""
        stats = {"loss": f"{loss:.3f}", "lr": f"{lr:.2e}", "tok_s": f"{tokens_per_s:.0f}"}
        if loss_scale is not None:
            stats["scale"] = f"{loss_scale:g}"
        self.bar.set_postfix(stats)
        if self.bar.disable:  # no terminal: the same numbers go to the log
            log.info("step %d epoch %d loss %s lr %s tgt tok/s %s", step, epoch, stats["loss"],
                     stats["lr"], stats["tok_s"])
            if "scale" in stats:
                log.info("step %d fp16 loss scale %s", step, stats["scale"])

    def close(self) -> None:
        self.bar.close()
