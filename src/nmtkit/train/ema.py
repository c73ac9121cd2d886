"""An exponential moving average of the weights (``train.ema``; Polyak & Juditsky 1992).

After optimizer step t the average moves towards the weights:
``avg <- d_t * avg + (1 - d_t) * w`` with ``d_t = min(decay, (1 + t) / (10 + t))``, the
warm-up of TensorFlow's ``ExponentialMovingAverage(num_updates=t)``: early averages do not
hold on to the random initialisation. ``d_t`` depends on the step only, so resuming needs
no state beyond the averaged weights themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


class WeightAverage:
    """The averaged copy of ``model``'s parameters (each shared parameter once)."""

    def __init__(self, model: nn.Module, decay: float):
        self.model, self.decay = model, decay
        self.params = [p for _, p in model.named_parameters()]
        self.shadow = [p.detach().clone() for p in self.params]

    def rate(self, step: int) -> float:
        """``d_t`` of step ``step`` (1-based)."""
        return min(self.decay, (1 + step) / (10 + step))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Move the average towards the weights after optimizer step ``step``."""
        weight = 1.0 - self.rate(step)
        for avg, p in zip(self.shadow, self.params, strict=True):
            avg.lerp_(p.detach(), weight)

    def state_dict(self) -> dict[str, Tensor]:
        """The model's state dict with the averaged parameters in place of the weights (a
        tied matrix under each of its names, as ``model.state_dict()`` has it)."""
        by_id = {id(p): avg for p, avg in zip(self.params, self.shadow, strict=True)}
        averaged = {name: by_id[id(p)]
                    for name, p in self.model.named_parameters(remove_duplicate=False)}
        return {k: averaged.get(k, v) for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Take the averaged parameters from a checkpoint's ``model`` entry."""
        for (name, _), avg in zip(self.model.named_parameters(), self.shadow, strict=True):
            avg.copy_(state[name])

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the averaged weights inside the block, its own weights after."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, avg in zip(self.params, self.shadow, strict=True):
                p.copy_(avg)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, raw, strict=True):
                    p.copy_(r)
