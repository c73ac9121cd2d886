"""Run configuration: the dataclasses are the only place defaults live.

A YAML recipe is read into :class:`Config` (:mod:`~nmtkit.config.recipe`); every key must
name a field and every value is checked against the field's type
(:mod:`~nmtkit.config.coerce`), and ``--set section.key=value`` overrides are applied
before validation, so an impossible run fails before any work starts.

One module per section, each holding its dataclass, its allowed values (``CORPORA``,
``ARCHS`` ...; the modules that use a value import them) and its own checks
(``DataConfig.validate`` ...): :mod:`~nmtkit.config.data`, :mod:`~nmtkit.config.model`,
:mod:`~nmtkit.config.train`, :mod:`~nmtkit.config.decode`. :class:`Config`
(:mod:`~nmtkit.config.run`) holds the sections and the checks between them;
:func:`validate` runs every section's checks, then those.
"""

from .checks import MAX_SEED, Checks, ConfigError
from .coerce import LEGACY_BOOLEANS, build_section
from .data import (
    CORPORA,
    DIRECTION_CORPORA,
    LANGUAGE_CODE,
    PREPARED_CORPORA,
    SPM_MODEL_TYPES,
    TOKENIZERS,
    TSV_COLUMNS,
    TSV_SPLITS,
    VOCAB_SPECIALS,
    DataConfig,
    ExtraCorpus,
)
from .decode import (
    MAX_BEAM,
    MAX_LEN_A,
    MAX_LENGTH_PENALTY,
    MBR_UTILITIES,
    TEMPERATURE_RANGE,
    TUNE_BEAMS,
    TUNE_LENGTH_PENALTIES,
    TUNE_METRICS,
    TUNE_R2L_WEIGHTS,
    TUNE_REVERSE_WEIGHTS,
    DecodeConfig,
    alignment_choice_checks,
    check_alignment_choice,
)
from .model import (
    ARCHS,
    MAX_POSITIONS,
    NORMS,
    POSITIONAL_ENCODINGS,
    RNN_ATTENTIONS,
    RNN_INITS,
    ModelConfig,
    dec_layers,
    enc_layers,
)
from .recipe import (
    apply_overrides,
    describe_recipes,
    find_recipe,
    load,
    packaged_recipes,
    parse_override,
)
from .run import Config, check_installed, check_trainable, validate
from .train import (
    AMP_MODES,
    DEVICES,
    EARLY_STOP_METRICS,
    FREEZE_GROUPS,
    LR_SCHEDULES,
    MAX_MINUTES,
    OPTIMIZERS,
    TrainConfig,
    split_direction_name,
)

__all__ = [
    "AMP_MODES", "ARCHS", "CORPORA", "DEVICES", "DIRECTION_CORPORA", "PREPARED_CORPORA", "EARLY_STOP_METRICS",
    "FREEZE_GROUPS", "LANGUAGE_CODE", "LEGACY_BOOLEANS", "LR_SCHEDULES", "MAX_BEAM",
    "MAX_LEN_A", "MAX_LENGTH_PENALTY", "MAX_MINUTES", "MAX_POSITIONS", "MAX_SEED",
    "MBR_UTILITIES", "NORMS",
    "OPTIMIZERS", "POSITIONAL_ENCODINGS", "RNN_ATTENTIONS", "RNN_INITS", "SPM_MODEL_TYPES",
    "TEMPERATURE_RANGE", "TOKENIZERS", "TSV_COLUMNS", "TSV_SPLITS", "TUNE_BEAMS",
    "TUNE_LENGTH_PENALTIES", "TUNE_METRICS", "TUNE_R2L_WEIGHTS", "TUNE_REVERSE_WEIGHTS",
    "VOCAB_SPECIALS", "Checks", "Config", "ConfigError", "DataConfig", "DecodeConfig",
    "ExtraCorpus", "ModelConfig", "TrainConfig", "alignment_choice_checks", "apply_overrides",
    "build_section", "check_alignment_choice", "check_installed", "check_trainable",
    "dec_layers", "describe_recipes", "enc_layers", "find_recipe", "load", "packaged_recipes",
    "parse_override", "split_direction_name", "validate",
]
