"""Where a training run starts: one value, :class:`Start`.

A run starts in one of four ways, which exclude each other:

- **scratch**: tokenizers and vocabularies learnt from the training data, fresh weights;
- **resume**: the run's own ``last.pt`` (weights, optimizer, schedule, data position,
  random generators), so that it continues exactly where it stopped;
- **fine-tune** from a checkpoint: its weights, tokenizers and vocabularies, with a fresh
  optimizer and schedule (:mod:`nmtkit.train.finetune`; the model section must match);
- **vocabulary from** a checkpoint: its tokenizers and vocabularies only, fresh weights of
  any model size (e.g. a distilled student that is to join its teachers' ensemble).

Every start but resume begins a new run, and a new run never mixes with an earlier one in
its directory: ``overwrite`` sets that one aside (:class:`~nmtkit.train.run_dir.EarlierRun`),
which resuming, which continues the earlier run, cannot do.

The command line builds its start from ``--resume``, ``--init-from``, ``--vocab-from`` and
``--overwrite``, refusing contradictory flags as they are parsed
(:func:`nmtkit.cli.train.start_of`); Python code calls a constructor::

    Trainer(cfg, "runs/x")                                    # Start.scratch()
    Trainer(cfg, "runs/x", Start.resume())
    Trainer(cfg, "runs/x", Start.scratch(overwrite=True))
    Trainer(cfg, "runs/child", Start.fine_tune("runs/x/best.pt"))
    Trainer(cfg, "runs/student", Start.vocabulary_from("runs/x/best.pt"))

This module imports nothing of nmtkit (the command line reads it before any PyTorch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

Kind = Literal["scratch", "resume", "fine_tune", "vocabulary_from"]
READS_A_CHECKPOINT: tuple[Kind, ...] = ("fine_tune", "vocabulary_from")
"""The kinds that name another run's checkpoint (:attr:`Start.checkpoint`)."""


@dataclass(frozen=True)
class Start:
    """How a run starts: its ``kind``, the ``checkpoint`` that a fine-tune or a vocabulary
    comes from (None for the others), and, for a new run, ``overwrite``: set aside an earlier
    run in the run directory instead of refusing to mix with it. Build one with a
    constructor (:meth:`scratch`, :meth:`resume`, :meth:`fine_tune`,
    :meth:`vocabulary_from`); a combination that means nothing (a resume that overwrites, a
    fine-tune without a checkpoint) is a programming error (``ValueError``)."""

    kind: Kind = "scratch"
    checkpoint: Path | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.kind not in get_args(Kind):
            raise ValueError(f"Start.kind must be one of {get_args(Kind)}, got {self.kind!r}")
        if (self.kind in READS_A_CHECKPOINT) != (self.checkpoint is not None):
            raise ValueError(f"Start {self.kind!r}: a checkpoint is named by "
                             f"{' and '.join(READS_A_CHECKPOINT)} starts, and only by them")
        if self.resumes and self.overwrite:
            raise ValueError("Start.resume() continues the run in its directory: it cannot "
                             "overwrite it")

    @classmethod
    def scratch(cls, overwrite: bool = False) -> Start:
        """Tokenizers, vocabularies and weights of the run's own."""
        return cls("scratch", overwrite=overwrite)

    @classmethod
    def resume(cls) -> Start:
        """Continue the run from its directory's ``last.pt``."""
        return cls("resume")

    @classmethod
    def fine_tune(cls, checkpoint: str | Path, overwrite: bool = False) -> Start:
        """Start from ``checkpoint``'s weights, tokenizers and vocabularies (``--init-from``)."""
        return cls("fine_tune", Path(checkpoint), overwrite)

    @classmethod
    def vocabulary_from(cls, checkpoint: str | Path, overwrite: bool = False) -> Start:
        """Encode the corpus with ``checkpoint``'s tokenizers and vocabularies, fresh
        weights (``--vocab-from``)."""
        return cls("vocabulary_from", Path(checkpoint), overwrite)

    @property
    def resumes(self) -> bool:
        """The run continues from its own ``last.pt``."""
        return self.kind == "resume"

    @property
    def parent(self) -> Path | None:
        """The checkpoint a fine-tune starts from (its weights are loaded), else None."""
        return self.checkpoint if self.kind == "fine_tune" else None


SCRATCH = Start.scratch()
"""The default start: tokenizers, vocabularies and weights of the run's own."""
