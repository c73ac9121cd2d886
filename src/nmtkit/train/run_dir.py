"""The run directory of a training run, and the state a checkpoint keeps to resume it.

- One run writes a directory at a time (:class:`RunDirLock`), and a path that cannot hold
  a run is named before any work (:func:`check_run_dir_path`).
- A fresh run never mixes with an earlier run's files (:func:`check_fresh`); with
  ``--overwrite`` the earlier run is set aside until the new run's first checkpoint
  (:class:`EarlierRun`).
- What a run writes: ``last.pt`` (the state to resume from), ``best.pt`` and ``step_*.pt``
  (release checkpoints: weights, no optimizer state) (:func:`save_checkpoints`),
  ``metrics.csv`` and ``losses.csv`` (:func:`write_metrics`, :class:`LossLog`),
  ``samples.txt`` (:func:`append_samples`).
- Where training stands (:class:`Progress`) and the random generators' state
  (:func:`rng_state`): what ``--resume`` restores so that it continues exactly.
- The directory as a trainer holds it (:class:`RunDirectory`): lock, the earlier run set
  aside, the last save.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..checkpoint import release_payload, save_checkpoint
from ..config import Config, TrainConfig
from ..data.prepare import Vocabularies, vocab_state
from ..errors import UserError
from ..io import atomic_write_text, errors_naming
from .ema import WeightAverage
from .schedule import Schedule

try:  # advisory locks: POSIX only (elsewhere runs are not serialised, as in nmtkit.io)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


class RunDirBusy(UserError):
    """Another training process holds the run directory (:class:`RunDirLock`)."""


@dataclass
class _HeldRunLock:
    """This process's lock on one run directory, shared by its :class:`RunDirLock` holders."""

    path: Path  # RUN/.lock
    file: Any  # the open lock file (None where flock is unavailable)
    created: list[Path]  # directories made to hold the lock, outermost first
    holders: int = 1


class RunDirLock:
    """An exclusive advisory lock (``flock``) on ``RUN/.lock`` for the whole of a training run.

    Two ``nmtkit train`` processes writing one run directory would interleave their
    checkpoints and metrics (``last.pt`` of one, ``best.pt`` of the other); the second is
    refused at once instead (:class:`RunDirBusy`, naming the directory and the holder's
    process id), before it reads any data or touches the first run's files. The lock is
    taken before the data so that the refusal comes first; if it had to create the run
    directory and the set-up then fails, that directory goes again (a data error leaves no
    run directory behind).

    - Under torchrun only rank 0 locks: it alone writes the run directory, and one lock per
      run (not per node) is what keeps two jobs apart on a shared file system.
    - The lock belongs to the process: several :class:`Trainer` of one process on one
      directory share it (a library caller runs them in turn, e.g. a run then its resume),
      and it ends with its last holder: :meth:`release`, or when a holder is garbage
      collected (a trainer set up but never run), or at exit. A process killed hard loses
      its lock with it (the kernel drops it); the stale file is reused.
    - The file is removed when released, so it is never mistaken for part of a run (and is
      not one of :func:`run_files`). A process that locked a file its last holder
      had just unlinked notices (another inode at the path) and tries again.
    - Where ``flock`` is unavailable (not POSIX, or a file system without locks), runs are
      not serialised (a warning on such a file system)."""

    NAME = ".lock"
    _held: ClassVar[dict[Path, _HeldRunLock]] = {}  # by the run directory's real path

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        created = [d for d in (run_dir, *run_dir.parents) if not d.exists()][::-1]
        run_dir.mkdir(parents=True, exist_ok=True)
        key = Path(os.path.realpath(run_dir))
        held = self._held.get(key)
        if held is not None:
            held.holders += 1
        else:
            held = self._held[key] = _HeldRunLock(run_dir / self.NAME, None, created)
            try:
                held.file = self._lock(run_dir, held.path)
            except BaseException:
                del self._held[key]
                self._remove(held, created_too=True)
                raise
        self._key = key
        # A holder dropped without release() (never run) lets go of its share with it.
        self._finalizer = weakref.finalize(self, RunDirLock._drop, key, False)

    @staticmethod
    def _lock(run_dir: Path, path: Path) -> Any:
        """The open lock file, locked by this process and still the one at ``path``."""
        if fcntl is None:
            return None
        while True:
            f = open(path, "a+b")  # noqa: SIM115 (held open until release)
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                pid = f.read(32).decode("ascii", "replace").strip()
                f.close()
                holder = f"process {pid}, " if pid else ""
                raise RunDirBusy(f"{run_dir}: another training run holds this run directory "
                                 f"({holder}lock file {path}); wait for it to end, or choose "
                                 "another --run-dir") from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    f.close()
                    raise
                log.warning("%s: the file system refuses locks (%s): a second training run "
                            "started on this run directory would not be refused", run_dir, e)
                return f
            try:
                same = os.path.samestat(os.fstat(f.fileno()), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                try:  # a full disk: ENOSPC names no file, so the error gets the lock's
                    with errors_naming(path):
                        f.seek(0)
                        f.truncate()
                        f.write(f"{os.getpid()}\n".encode())
                        f.flush()
                except OSError:  # the file is locked by this process: it goes, nobody waits on it
                    path.unlink(missing_ok=True)
                    with contextlib.suppress(OSError):  # (close flushes the same bytes again)
                        f.close()
                    raise
                return f
            f.close()  # its last holder unlinked it meanwhile: lock the new one

    def release(self, failed_set_up: bool = False) -> None:
        """This holder is done (again: nothing). The last holder removes the lock file, and
        with ``failed_set_up`` the directories that were made to hold it, where empty."""
        if self._finalizer.detach() is not None:
            RunDirLock._drop(self._key, failed_set_up)

    @classmethod
    def _drop(cls, key: Path, created_too: bool) -> None:
        held = cls._held.get(key)
        if held is None:
            return
        held.holders -= 1
        if held.holders == 0:
            del cls._held[key]
            cls._remove(held, created_too)

    @staticmethod
    def _remove(held: _HeldRunLock, created_too: bool) -> None:
        """Unlink the lock file (ours while locked), unlock, and remove the empty directories
        made for it when ``created_too``."""
        if held.file is not None:
            held.path.unlink(missing_ok=True)
            held.file.close()
        if created_too:
            for d in reversed(held.created):
                try:
                    d.rmdir()
                except OSError:  # not empty (or not ours to remove): kept
                    break


def check_run_dir_path(run_dir: Path) -> None:
    """A run directory path that cannot hold a run is named before anything is read or
    written: a file, a dangling symbolic link or a symbolic link loop (where ``mkdir`` would
    only say "File exists", after the data work)."""
    if run_dir.is_symlink() and not run_dir.exists():
        try:
            os.stat(run_dir)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UserError(f"{run_dir}: run directory is a symbolic link loop") from None
        raise UserError(f"{run_dir}: run directory is a dangling symbolic link (to "
                         f"{os.readlink(run_dir)}, which does not exist)")
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir}: run directory is a file")


# --- where training stands --------------------------------------------------------------------


@dataclass
class Progress:
    """Everything about where training stands that a checkpoint must restore."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the current epoch already consumed
    tgt_tokens: int = 0
    elapsed_s: float = 0.0  # training wall time accumulated over all sessions
    best: float | None = None
    bad_validations: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None  # --init-from: the checkpoint this run started from
    forgetting_before: dict[str, Any] = field(default_factory=dict)  # train.forgetting_splits
    train_log: list[list[float]] = field(default_factory=list)  # [step, epoch, loss, lr] per log_every
    plans: list[dict[str, Any]] = field(default_factory=list)  # train.budget_schedule's plans, as made

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rng_state() -> dict[str, Any]:
    """The random generators' state, for the checkpoint: a resumed run draws what the
    uninterrupted one would have (dropout masks, word dropout, subword sampling)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def checkpoint_payload(cfg: Config, vocabs: Vocabularies, model: nn.Module,
                       ema: WeightAverage | None, optimizer: torch.optim.Optimizer,
                       schedule: Schedule, scaler: torch.amp.GradScaler,
                       p: Progress) -> dict[str, Any]:
    """What a checkpoint holds: the config, tokenizers and vocabularies, the weights (with
    ``train.ema``, every reader (translate, evaluate, average, best.pt) gets the average in
    ``model``; the weights trained are kept in ``train_model``), and the state ``--resume``
    continues from (``last.pt`` only: :data:`~nmtkit.checkpoint.TRAINING_STATE`)."""
    return {
        "config": cfg.to_dict(),
        **vocab_state(vocabs),
        "model": model.state_dict() if ema is None else ema.state_dict(),
        **({"train_model": model.state_dict()} if ema is not None else {}),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "progress": p.to_dict(),
        "scaler": scaler.state_dict(),  # {} unless fp16
        "rng": rng_state(),
    }


def restore_rng(rng: dict[str, Any]) -> None:
    """Put back the state :func:`rng_state` stored."""
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if torch.cuda.is_available() and rng.get("cuda") is not None:
        torch.cuda.set_rng_state_all(rng["cuda"])


# --- what a run writes ------------------------------------------------------------------------

METRIC_FIELDS = ["step", "epoch", "train_loss", "train_ppl", "valid_loss", "valid_ppl",
                 "valid_bleu", "lr", "tgt_tokens", "elapsed_s"]


def metric_fields(cfg: Config) -> list[str]:
    """The columns of ``metrics.csv``: :data:`METRIC_FIELDS`, with ``data.directions`` one
    ``bleu_<src>-<tgt>`` column per direction after ``valid_bleu`` (which is their mean)."""
    at = METRIC_FIELDS.index("valid_bleu") + 1
    per_direction = [f"bleu_{d}" for d in cfg.data.directions]
    return [*METRIC_FIELDS[:at], *per_direction, *METRIC_FIELDS[at:]]


LOSS_FIELDS = ["step", "epoch", "train_loss", "lr"]
"""Columns of ``losses.csv``: the training loss of each ``log_every`` window."""
SAMPLES_TXT = "samples.txt"


RUN_FILE_NAMES = ("last.pt", "best.pt", "metrics.csv", "budget_plans.json", "curves.png",
                  "forgetting.json", "losses.csv", SAMPLES_TXT)
"""The files of a run (beside ``step_*.pt`` and ``tensorboard/``), by name."""


def run_files(run_dir: Path) -> list[Path]:
    """What a run writes into its directory (and a fresh run would mix with)."""
    return [*(run_dir / n for n in RUN_FILE_NAMES if (run_dir / n).exists()),
            *sorted(run_dir.glob("step_*.pt")),
            *sorted(run_dir.glob("tensorboard/events.out.tfevents.*"))]


def prepare_run_dir(run_dir: Path) -> None:
    """Create the directory; remove writes cut short by a kill (``.*.tmp``: never renamed).
    (A folder set aside by --overwrite, ``.overwritten.<random>``, never matches: its random
    part has no dot, so it cannot end in ".tmp".)"""
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in run_dir.glob(".*.tmp"):
        stale.unlink(missing_ok=True)


def save_checkpoints(run_dir: Path, payload: dict[str, Any], step: int, best: bool,
                     keep_last: int) -> None:
    """``last.pt``, the whole ``payload`` (what ``--resume`` continues from); ``best.pt``
    when ``best`` and, with ``train.keep_last`` k > 0, ``step_<step>.pt`` (the k newest kept,
    for ``nmtkit average``): release checkpoints, without the optimizer state
    (:func:`~nmtkit.checkpoint.release_payload`). One INFO line names each file written
    and its size."""
    written = [run_dir / "last.pt"]
    save_checkpoint(written[0], payload)
    release = release_payload(payload)
    if best:
        written.append(run_dir / "best.pt")
        save_checkpoint(written[-1], release)
    if keep_last > 0:
        written.append(run_dir / f"step_{step:08d}.pt")
        save_checkpoint(written[-1], release)
        steps = sorted(run_dir.glob("step_*.pt"))
        for old in steps[:-keep_last]:
            old.unlink()
    log.info("saved %s", ", ".join(f"{p.name} {p.stat().st_size / 1e6:.2f} MB" for p in written))


def write_metrics(run_dir: Path, cfg: Config, p: Progress) -> None:
    """``metrics.csv`` (a row per validation), ``losses.csv`` (a row per ``log_every``
    updates) and, with ``train.budget_schedule``, ``budget_plans.json`` (every plan and
    revision as made: :class:`~nmtkit.train.schedule.BudgetPlan`'s fields and the training
    time), rewritten whole and atomically."""
    buf = io.StringIO()
    fields = metric_fields(cfg)
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for row in p.history:
        w.writerow({k: row.get(k, "") for k in fields})
    atomic_write_text(run_dir / "metrics.csv", buf.getvalue())
    buf = io.StringIO()
    csv.writer(buf).writerows([LOSS_FIELDS, *p.train_log])
    atomic_write_text(run_dir / "losses.csv", buf.getvalue())
    if p.plans:
        atomic_write_text(run_dir / "budget_plans.json", json.dumps(p.plans, indent=1) + "\n")


class LossLog:
    """The per-batch training loss panel of curves.png."""

    def __init__(self, t: TrainConfig):
        self.t = t
        self.interval: tuple[float, int] = (0.0, 0)  # loss sum and target tokens since the last log

    def note(self, p: Progress, loss_sum: float, n_tok: int, lr: float) -> None:
        """Every ``log_every`` updates, the mean loss per target token over them goes into
        ``progress.train_log`` (written to ``losses.csv`` beside metrics.csv, whose rows
        average a whole validation interval)."""
        total, tok = self.interval
        total, tok = total + loss_sum, tok + n_tok
        if p.step % self.t.log_every == 0:
            p.train_log.append([p.step, p.epoch, round(total / max(tok, 1), 4), float(f"{lr:.6g}")])
            total, tok = 0.0, 0
        self.interval = (total, tok)


def append_samples(run_dir: Path, lines: list[str]) -> None:
    """Append ``lines`` and a blank line to ``samples.txt`` (rewritten atomically)."""
    path = run_dir / SAMPLES_TXT
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    atomic_write_text(path, before + "\n".join(lines) + "\n\n")


# --- a fresh run, a resumed one ---------------------------------------------------------------


def newest_step_checkpoint(run_dir: Path) -> Path | None:
    """The run's ``step_*.pt`` of the latest update (``train.keep_last``), if any."""
    steps = sorted(run_dir.glob("step_*.pt"))
    return steps[-1] if steps else None


def weights_left(run_dir: Path) -> Path | None:
    """The release checkpoint (weights without optimizer state) a run without ``last.pt`` can
    be trained on from: its newest ``step_*.pt``, else its ``best.pt``; None if neither."""
    best = run_dir / "best.pt"
    return newest_step_checkpoint(run_dir) or (best if best.exists() else None)


def check_fresh(run_dir: Path, overwrite: bool) -> None:
    """A new run never silently mixes with an earlier run's checkpoints and metrics. The
    way to continue the earlier run is named only where there is one: ``--resume`` reads
    ``last.pt``; without it, the newest ``step_*.pt`` or ``best.pt`` (weights only) can
    start a new run (as :func:`nothing_to_resume` says)."""
    files = run_files(run_dir) if run_dir.is_dir() and not overwrite else []
    if not files:
        return
    weights = weights_left(run_dir)
    if (run_dir / "last.pt").exists():
        how = "continue it with --resume, or pass --overwrite to start afresh"
    elif weights is not None:
        how = (f"it has no last.pt to resume: to train on from the weights of {weights.name}, "
               f"start a new run with --init-from {weights} and another --run-dir; or pass "
               "--overwrite to start afresh")
    else:
        how = "pass --overwrite to start afresh, or choose another --run-dir"
    raise UserError(f"{run_dir}: holds an earlier run ({files[0].name}); {how}")


def nothing_to_resume(run_dir: Path) -> str:
    """``--resume`` without ``last.pt`` (the resume state: weights, optimizer, data position):
    where the run's weights are left (:func:`weights_left`: release checkpoints, without
    optimizer state), how to train on from them in a new run."""
    last = run_dir / "last.pt"
    weights = weights_left(run_dir)
    if weights is None:
        return f"{last}: nothing to resume"
    if weights.name == "best.pt":
        return (f"{last}: nothing to resume: the run has no resume state (last.pt); {weights} "
                "holds its best weights, without optimizer state: to fine-tune from them, "
                f"start a new run with --init-from {weights} and another --run-dir")
    return (f"{last}: nothing to resume; {weights} is a release checkpoint of this run without "
            "optimizer state: to train on from its weights, start a new run with --init-from "
            f"{weights} and another --run-dir")


# --- --overwrite: the earlier run is set aside until this run's first checkpoint --------------

SET_ASIDE_PREFIX = ".overwritten."


class EarlierRun:
    """``--overwrite``: the earlier run's files (:func:`run_files`), moved into a hidden
    folder ``<run>/.overwritten.<random>/`` (same file system: renames, no copies), so that
    the new run starts in a clean directory yet, until it has a checkpoint of its own, the
    earlier run is not lost:

    - the new run's first successful checkpoint deletes the folder (:meth:`drop`);
    - any exception before that (Ctrl-C included) out of the set-up's last step or out of
      the loop removes the new run's files and moves the earlier ones back (:meth:`put_back`);
    - a process killed hard (SIGKILL, power loss) in between leaves the earlier run in the
      folder. Nothing deletes it automatically: later runs in the directory (fresh,
      ``--overwrite`` or ``--resume``) ignore it (it is neither a run file nor a ``.*.tmp``
      leftover) and name it in a WARNING (:func:`warn_of_set_aside_runs`); moving its
      files back into the run directory recovers the earlier run.

    Rank 0 only: the other ranks never touch the run directory's files."""

    def __init__(self, run_dir: Path, aside: Path):
        self.run_dir, self.aside = run_dir, aside

    @classmethod
    def set_aside(cls, run_dir: Path) -> EarlierRun | None:
        """Move the earlier run's files aside (None: there were none)."""
        files = run_files(run_dir)
        if not files:
            return None
        aside = Path(tempfile.mkdtemp(prefix=SET_ASIDE_PREFIX, dir=run_dir))
        moved: list[Path] = []
        try:
            for old in files:
                rel = old.relative_to(run_dir)
                (aside / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, aside / rel)
                moved.append(rel)
        except BaseException:  # half moved: move those back, the run stops here
            for rel in moved:
                os.replace(aside / rel, run_dir / rel)
            shutil.rmtree(aside, ignore_errors=True)
            raise
        log.info("--overwrite: the earlier run's %d files set aside in %s until this run's "
                 "first checkpoint", len(files), aside)
        return cls(run_dir, aside)

    def drop(self) -> None:
        """This run has a checkpoint: the earlier run set aside is deleted."""
        try:
            shutil.rmtree(self.aside)
        except OSError as e:  # this run goes on; the leftover is named by the next run's warning
            log.warning("could not delete the earlier run set aside in %s: %s", self.aside, e)
        else:
            log.info("first checkpoint saved: the earlier run (%s) deleted", self.aside.name)

    def put_back(self) -> None:
        """This run failed before its first checkpoint: its files go, the earlier run's come
        back. Never raises (the run's own exception is what the caller reports): a file that
        cannot be moved back stays in the folder, named in an ERROR."""
        try:
            for new in run_files(self.run_dir):
                new.unlink(missing_ok=True)
            for old in sorted(f for f in self.aside.rglob("*") if not f.is_dir()):
                rel = old.relative_to(self.aside)
                (self.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, self.run_dir / rel)
            shutil.rmtree(self.aside)
        except OSError as e:
            log.error("could not put back the earlier run from %s (move its files back into %s "
                      "by hand): %s", self.aside, self.run_dir, e)
            return
        log.info("this run failed before its first checkpoint: the earlier run was put back "
                 "in %s", self.run_dir)


def warn_of_set_aside_runs(run_dir: Path) -> None:
    """A WARNING for each folder of an earlier run set aside by an --overwrite that was
    killed before its first checkpoint: left for the user to recover or delete."""
    if not run_dir.is_dir():
        return
    for aside in sorted(run_dir.glob(SET_ASIDE_PREFIX + "*")):
        if aside.is_dir():
            log.warning("%s holds an earlier run set aside by an --overwrite that stopped "
                        "before its first checkpoint (killed?): move its files back into %s "
                        "to recover it, or delete it", aside, run_dir)


# --- the run directory as a trainer holds it ----------------------------------------------------


class RunDirectory:
    """One run's directory as a trainer holds it (rank 0 writes it; the other ranks keep only
    the path): its path, checked before any work (:func:`check_run_dir_path`); the lock
    (:class:`RunDirLock`) from the set-up until the run ends; the earlier run that
    ``overwrite`` set aside until this run's first checkpoint (:class:`EarlierRun`); and
    where the last checkpoint was saved."""

    def __init__(self, path: Path):
        check_run_dir_path(path)
        self.path = path
        self.lock: RunDirLock | None = None
        self.earlier: EarlierRun | None = None  # --overwrite: until this run's first checkpoint
        self.saved_at: tuple[int, int, int] | None = None  # (step, epoch, batch) of the last save

    def hold(self) -> None:
        """Lock the directory (again after :meth:`release`: a trainer run a second time)."""
        if self.lock is None:
            self.lock = RunDirLock(self.path)

    def release(self, failed_set_up: bool = False) -> None:
        """Let go of the lock (see :meth:`RunDirLock.release`)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release(failed_set_up)

    def set_aside_earlier(self) -> None:
        """``--overwrite``: move the earlier run aside (:meth:`EarlierRun.set_aside`)."""
        self.earlier = EarlierRun.set_aside(self.path)

    def save(self, payload: dict[str, Any], p: Progress, best: bool, keep_last: int) -> None:
        """The checkpoints of update ``p.step`` (:func:`save_checkpoints`); the first one of
        this run deletes the earlier run set aside."""
        save_checkpoints(self.path, payload, p.step, best, keep_last)
        self.saved_at = (p.step, p.epoch, p.batch_in_epoch)
        earlier, self.earlier = self.earlier, None
        if earlier is not None:
            earlier.drop()

    @contextlib.contextmanager
    def put_back_on_failure(self, close: Callable[[], None]) -> Iterator[None]:
        """Any exception out of the block (KeyboardInterrupt included) while an earlier run is
        set aside calls ``close()`` (this run's open files, e.g. TensorBoard's events), puts
        the earlier run back (:meth:`EarlierRun.put_back`), then goes on."""
        try:
            yield
        except BaseException:
            earlier, self.earlier = self.earlier, None
            if earlier is not None:
                close()
                earlier.put_back()
            raise
