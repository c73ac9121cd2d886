"""``train``: optimisation, budgets, validation and checkpoints (paper Sec. 5)."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import MAX_SEED, Checks
from .data import LANGUAGE_CODE
from .limits import MAX_BATCH_TOKENS, MAX_THREADS, brief

LR_SCHEDULES = ("noam", "constant", "plateau", "inverse_sqrt", "cosine")
OPTIMIZERS = ("adam", "adamw")
"""``train.optimizer``: Adam with L2 in the gradient (Kingma & Ba 2015; the paper's), or AdamW
with decoupled weight decay (Loshchilov & Hutter 2019)."""
EARLY_STOP_METRICS = ("bleu", "loss")
DEVICES = ("auto", "cpu", "cuda")
AMP_MODES = ("off", "bf16", "fp16")
FREEZE_GROUPS = ("encoder", "embeddings", "decoder")
"""What ``train.freeze`` may name (see :mod:`nmtkit.train.finetune` for which parameters
each group holds)."""


MAX_MINUTES = 365 * 24 * 60.0
"""The largest ``train.max_minutes``, a year: any real budget, and far from where the
budget schedule's arithmetic (``max_minutes * 60`` seconds, updates counted in them)
overflows."""


def split_direction_name(entry: str) -> tuple[tuple[str, str] | None, str]:
    """A ``train.forgetting_splits`` entry -> ((source, target language) or ``None``, split).

    ``SRC-TGT:SPLIT`` (``de-en:test_2016_flickr``) names the direction to read the split in:
    the part before the first ``:`` holds a ``-`` and no path separator. Anything else is a
    plain split name or path prefix (``None``: the run's direction). The parts are checked by
    :meth:`TrainConfig.validate`."""
    head, sep, split = entry.partition(":")
    if not sep or "-" not in head or "/" in head or "\\" in head:
        return None, entry
    src, _, tgt = head.partition("-")
    return (src, tgt), split


@dataclass
class TrainConfig:
    """Optimisation, budgets, validation and checkpoints (paper Sec. 5)."""

    seed: int = 1234
    max_tokens: int = 4096
    """Token budget per batch, padding counted, on the larger of the two sides."""
    accum: int = 1
    """Gradient accumulation: batches per optimizer step."""
    max_steps: int = 100000
    max_epochs: int = 0
    """0 = no epoch limit."""
    max_minutes: float = 0.0
    """Wall-clock budget for training; 0 = none; at most :data:`MAX_MINUTES` (a year)."""
    lr_schedule: str = "noam"
    """``noam``: lr * d^-0.5 * min(s^-0.5, s * warmup^-1.5) (Eq. 3); ``constant``; ``plateau``
    (lowered when validation loss stalls); ``inverse_sqrt``: linear warmup to lr, then
    lr * sqrt(warmup / s) (fairseq's); ``cosine``: linear warmup to lr, then a half cosine
    from lr down to ``min_lr`` at step ``cosine_steps`` (Loshchilov & Hutter 2017), min_lr after."""
    lr: float = 1.0
    """What it means depends on ``lr_schedule``: the Noam factor (``noam``: the rate peaks at
    lr * d_model^-0.5 * warmup^-0.5); the rate itself for ``constant`` and the initial rate of
    ``plateau``; the peak rate, reached at step ``warmup``, of ``inverse_sqrt`` and ``cosine``."""
    warmup: int = 4000
    """Steps of linear warmup (``noam``, ``inverse_sqrt``: >= 1; ``cosine``: 0 = none)."""
    min_lr: float = 0.0
    """``cosine`` and ``budget_schedule``: the rate at the end of the decay (and after it);
    below ``lr`` (cosine) or the peak rate (budget)."""
    cosine_steps: int = 0
    """``cosine``: the step at which the decay reaches ``min_lr`` (0 = ``max_steps``; with the
    default max_steps of 100000 and a run ended earlier by ``max_minutes``/``max_epochs`` the
    rate never gets far down: give the run's real length). Must exceed ``warmup``."""
    budget_schedule: bool = False
    """With ``max_minutes``: fit the schedule to the time budget. After
    ``budget_probe_steps`` updates (at the configured warmup's rate) the run measures its
    seconds per update, plans how many updates the remaining minutes allow, and from then on
    warms up over ``budget_warmup`` of them to the configured schedule's peak rate and decays
    linearly to ``min_lr`` at the last one (:func:`nmtkit.train.schedule.budget_rate`); the
    run ends there or when the time is up. The plan is revised at each validation (with its
    cost), while the run is in its warmup every ``budget_probe_steps`` updates (warmup
    included: a slow start must not fix it), and after it every ``budget_revise_every`` of
    its updates (a machine that gets faster or slower later must not leave the plan wrong),
    each time from the latest updates' time; logged and kept in the checkpoint
    (``--resume`` follows it). Needs ``noam``, ``inverse_sqrt`` or ``cosine`` (for the peak)."""
    budget_probe_steps: int = 20
    """``budget_schedule``: updates timed before planning (the first one, which warms up
    caches, is not counted)."""
    budget_warmup: float = 0.1
    """``budget_schedule``: the warmup's share of the planned updates (never more than
    ``warmup`` updates)."""
    budget_revise_every: float = 0.05
    """``budget_schedule``: after the plan's warmup, the share of its updates between two
    revisions (at least ``budget_probe_steps`` updates; validations revise it as well)."""
    budget_valid_share: float = 0.0
    """``budget_schedule``: the most of the time that validations may take; once the first
    validation is timed, later ones come every ``valid_every`` updates or more, as many as
    that share allows (0 = every ``valid_every`` updates, whatever they cost)."""
    budget_reserve: float = 0.05
    """``budget_schedule``: share of the remaining time left out of the plan (the plan counts
    updates in the rest, after the last validation's time; each revision counts again)."""
    optimizer: str = "adam"
    """``adam``: Adam, ``weight_decay`` added to the gradient as L2 (on every weight, as
    before; the paper uses none); ``adamw``: AdamW, weights shrunk by lr * ``weight_decay``
    at each step apart from the gradient (Loshchilov & Hutter 2019), on matrices and
    embeddings only: 1-D tensors (biases, LayerNorm gains and shifts) are not decayed."""
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    """Adam: L2 coefficient; AdamW: decoupled decay rate (e.g. 0.01). 0 = none."""
    label_smoothing: float = 0.1
    word_dropout: float = 0.0
    """Replace each ordinary token of a training batch's source and decoder input by
    ``<unk>`` with this probability (0 = off; special tokens and tags never):
    :func:`nmtkit.train.regularize.word_dropout`."""
    rdrop: float = 0.0
    """R-Drop's weight alpha (Liang et al. 2021): each batch goes through the model twice
    and the symmetric KL of the two outputs is added to the loss (0 = off; the paper uses
    5 for a Transformer on IWSLT). An update costs about twice as much:
    :func:`nmtkit.train.regularize.rdrop_loss`."""
    clip_norm: float = 0.0
    """Clip the global gradient norm to this value; 0 = off."""
    valid_every: int = 1000
    """Validate every this many optimizer steps (also at the end)."""
    valid_bleu: bool = True
    """Greedy-decode the validation set and report BLEU at each validation."""
    valid_max_sents: int = 0
    """Use only the first N validation pairs for BLEU (0 = all)."""
    sample_every: int = 1
    """Every this many validations (0 = never), greedy-translate the first ``samples``
    validation sentences and print source / reference / hypothesis into the log and
    ``<run>/samples.txt`` (appended under a step header): the model's progress, read."""
    samples: int = 3
    """How many fixed validation sentences (the first ones) ``sample_every`` shows."""
    early_stop_metric: str = "bleu"
    """``bleu`` (higher is better) or ``loss`` (lower is better); selects ``best.pt``."""
    patience: int = 0
    """Stop after this many validations without improvement; 0 = never."""
    plateau_factor: float = 0.5
    """``plateau`` schedule: multiply the rate by this when validation loss stalls."""
    plateau_patience: int = 1
    """``plateau`` schedule: validations without a lower loss tolerated before lowering it
    (the rate drops on the next one)."""
    keep_last: int = 5
    """Keep the last k step checkpoints (for ``nmtkit average``)."""
    log_every: int = 50
    threads: int = 0
    """torch intra-op threads; 0 = PyTorch's default."""
    device: str = "auto"
    """``auto`` (cuda if available), ``cpu`` or ``cuda``."""
    amp: str = "off"
    """Mixed precision: ``off`` (fp32); ``bf16``: bfloat16 autocast on CUDA, and on a CPU
    with bfloat16 in hardware (Intel AMX: products at 3-8x the float32 rate; AVX512-BF16 as
    on AMD Zen 4/5: about 4.5x, whole steps 1.65x); ignored, with a log line, on other CPUs,
    where it is slower than fp32; ``fp16``:
    float16 autocast with a dynamic loss scale (``torch.amp.GradScaler``) for GPUs without
    bf16 (V100, T4); it also runs on a CPU, to test the code path. The loss scale goes to
    the log and into the checkpoint. Older recipes and checkpoints wrote a boolean:
    ``true`` reads as ``bf16``, ``false`` as ``off`` (YAML 1.1 also reads an unquoted
    ``off`` as ``false``)."""
    compile: bool = False
    """``torch.compile`` the training forward (dynamic shapes; pays off on GPUs). With
    ``cuda_graphs``: the whole loss of a batch (forward, loss sums and their backward) is
    compiled once for symbolic shapes, and each fixed shape's graph replays the compiled
    kernels (fused elementwise work: layer norms, dropout, residuals, casts)."""
    cuda_graphs: bool = False
    """Replay each update's forward + backward from CUDA graphs (:mod:`nmtkit.fast.cuda_graphs`):
    batches are padded to a few fixed shapes (:func:`nmtkit.data.batching.static_batches`,
    up to ``max_tokens`` padded tokens each) and each shape is captured once. For
    Transformers on one GPU, where short sentences make training launch-bound; not with
    ``rdrop``, ``word_dropout``, ``amp: fp16`` or several processes (with ``compile`` the
    graphs replay compiled kernels). On a CPU the same fixed shapes and buffers run without
    graphs."""
    fast: bool = True
    """Apply :mod:`nmtkit.fast` to the built model for training: CPU kernels for dropout and
    attention, and (with ``retain_freed_memory``) the allocator setting. Off: the model of
    :mod:`nmtkit.models` runs as written (same numbers within float tolerance; the dropout
    masks are drawn differently)."""
    retain_freed_memory: bool = True
    """With ``fast``: keep memory freed by one step in the process for the next (glibc
    malloc, see :mod:`nmtkit.fast.allocator`): no page faults on the step's large tensors.
    Off: freed memory goes back to the system at once."""
    max_nonfinite: int = 5
    """Stop after this many consecutive steps with a NaN/inf loss (each is skipped)."""
    freeze: tuple[str, ...] = ()
    """Parameter groups kept fixed (``requires_grad`` off), any of ``encoder``, ``embeddings``,
    ``decoder``; meant for fine-tuning (``nmtkit train --init-from``). A tied embedding
    matrix (``model.tie_output``/``tie_all``) is one parameter: it belongs to ``embeddings``
    only, so freezing ``embeddings`` also fixes the tied output projection (and the source
    embedding), and freezing ``decoder`` leaves it trainable."""
    forgetting_splits: tuple[str, ...] = ()
    """Splits of ``data.corpus`` (names, or path prefixes for ``parallel``) scored with BLEU
    and chrF before training and at its end, into ``<run>/forgetting.json`` (before, after,
    delta): how much a fine-tuned model forgot of its parent's data (the ``--report-splits``
    option of ``nmtkit train``). ``SRC-TGT:SPLIT`` (e.g. ``de-en:test_2016_flickr``) scores a
    split in another direction than the run's: a parent's direction after fine-tuning on the
    other one. With ``data.directions`` every entry names its direction this way."""
    tensorboard: bool = False
    """Also write TensorBoard event files (training loss, rate, tokens/s, validation metrics)
    into ``<run>/tensorboard/`` (needs the ``tensorboard`` extra)."""
    ema: float = 0.0
    """Decay of an exponential moving average of the weights, updated after every step
    (e.g. 0.999; 0 = off). Validation, ``best.pt`` and every checkpoint's weights are then
    the average (the raw weights are kept beside it, for ``--resume``)."""

    def validate(self, source: str) -> None:
        c = Checks(self, "train", source)
        c.finite()
        c.within(MAX_BATCH_TOKENS, "max_tokens")
        c.within(MAX_THREADS, "threads")
        c.one_of("lr_schedule", LR_SCHEDULES)
        c.one_of("optimizer", OPTIMIZERS)
        c.one_of("early_stop_metric", EARLY_STOP_METRICS)
        c.one_of("device", DEVICES)
        c.positive("max_tokens", "lr", "adam_eps")
        c.at_least(1, "accum", "max_steps", "valid_every", "log_every", "max_nonfinite")
        c.at_least(0, "seed", "max_epochs", "max_minutes", "warmup", "weight_decay", "clip_norm",
                   "patience", "plateau_patience", "keep_last", "valid_max_sents", "threads")
        c.at_most(MAX_SEED, "seed")
        c.at_most(MAX_MINUTES, "max_minutes")
        c.at_least(0, "sample_every")
        c.at_least(1, "samples")
        c.require(not self.cuda_graphs or not (self.rdrop or self.word_dropout
                                               or self.amp == "fp16"),
                  "train.cuda_graphs replays fixed kernels: not with train.rdrop, "
                  "train.word_dropout or train.amp: fp16")
        c.require(self.lr_schedule not in ("noam", "inverse_sqrt") or self.warmup >= 1,
                  "train.warmup must be >= 1 for noam and inverse_sqrt")
        self._validate_cosine(c)
        self._validate_budget(c)
        c.fraction("label_smoothing", "word_dropout")
        c.at_least(0, "rdrop")
        c.require(all(0.0 <= b < 1.0 for b in self.adam_betas),
                  f"train.adam_betas must each be in [0, 1), got {brief(self.adam_betas)}")
        c.require(0.0 < self.plateau_factor < 1.0,
                  f"train.plateau_factor must be in (0, 1), got {self.plateau_factor}")
        c.one_of("amp", AMP_MODES)
        c.fraction("ema")
        c.require(all(g in FREEZE_GROUPS for g in self.freeze),
                  f"train.freeze may list {', '.join(FREEZE_GROUPS)}, got {brief(list(self.freeze))}")
        c.require(len(set(self.freeze)) < len(FREEZE_GROUPS),
                  f"train.freeze must leave a group to train, got {brief(list(self.freeze))}")
        c.require(all(s.strip() for s in self.forgetting_splits),
                  f"train.forgetting_splits must name splits, got {brief(list(self.forgetting_splits))}")
        named = [(e, *split_direction_name(e)) for e in self.forgetting_splits]
        bad = [e for e, d, split in named if d is not None and not (
            all(LANGUAGE_CODE.fullmatch(x) for x in d) and d[0] != d[1] and split.strip())]
        c.require(not bad, "train.forgetting_splits must write a direction as SRC-TGT:SPLIT with "
                  "two different language codes (letters, digits, _), e.g. "
                  f"de-en:test_2016_flickr, got {brief(bad)}")

    def _validate_budget(self, c: Checks) -> None:
        """``budget_schedule`` and its settings."""
        c.at_least(2, "budget_probe_steps")
        c.fraction("budget_reserve")
        c.require(0.0 <= self.budget_valid_share < 1.0,
                  f"train.budget_valid_share must be in [0, 1), got {self.budget_valid_share}")
        c.require(0.0 < self.budget_revise_every <= 1.0,
                  f"train.budget_revise_every must be in (0, 1], got {self.budget_revise_every}")
        c.require(0.0 < self.budget_warmup < 1.0,
                  f"train.budget_warmup must be in (0, 1), got {self.budget_warmup}")
        on = self.budget_schedule
        c.require(not on or self.max_minutes > 0, "train.budget_schedule fits the schedule to "
                  "train.max_minutes: set it (> 0), or turn budget_schedule off")
        c.require(not on or self.lr_schedule in ("noam", "inverse_sqrt", "cosine"),
                  "train.budget_schedule takes its peak rate from lr_schedule noam, "
                  f"inverse_sqrt or cosine, got {brief(self.lr_schedule)}")

    def _validate_cosine(self, c: Checks) -> None:
        """``min_lr`` and ``cosine_steps`` (used by the ``cosine`` schedule only)."""
        c.at_least(0, "min_lr", "cosine_steps")
        cosine, horizon = self.lr_schedule == "cosine", self.cosine_steps or self.max_steps
        c.require(not cosine or self.min_lr < self.lr, "train.min_lr must be below train.lr for "
                  f"cosine, got min_lr {self.min_lr}, lr {self.lr}")
        c.require(not cosine or horizon > self.warmup, "train.cosine_steps (0 = train.max_steps) "
                  f"must exceed train.warmup for cosine, got {horizon}, warmup {self.warmup}")
