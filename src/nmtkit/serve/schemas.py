"""Request and response bodies of the HTTP API (pydantic models; they make ``/openapi.json``).

The request bodies carry the server's limits (:class:`~nmtkit.serve.limits.ServeLimits`) in
their fields, so that the JSON schema states them: :func:`request_models` builds them for
one set of limits and the default beam.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ..decode.confidence import LOW_COVERAGE, LOW_PROBABILITY
from ..decode.limits import MAX_PHRASES  # per text in POST /v1/translate, as everywhere
from .limits import ServeLimits

Kind = Literal["encoder", "decoder_self", "decoder_src"]

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
"""No type coercion ("5" is not a beam), no unknown fields, and every float finite: JSON's
``Infinity``, ``NaN`` and ``1e999`` (which Python's parser takes as inf) get a 422 naming the
field (an infinite threshold was answered as ``null`` where the schema promises a number)."""


def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` includes 2.0: take integral floats as ints (2.5 stays an error)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]


MAX_LANG_CHARS = 32
"""Length of a request's ``tgt_lang`` (a language code)."""


class ConfidenceOut(BaseModel):
    """The confidence view of one translation (:mod:`nmtkit.decode.confidence`)."""

    token_probs: list[float] = Field(
        description="probability of each output token and of </s> (exp of its log-probability)")
    low_probability: list[bool] = Field(
        description="per output token and </s>: its probability is below low_probability_threshold")
    coverage: list[float] = Field(
        description="per source token: the attention it received over the output (the alignment "
        "layer's source attention, summed over the output tokens), 1 = an even share")
    possible_omissions: list[bool] = Field(
        description="per source token: its coverage is below low_coverage_threshold (hardly "
        "attended to: maybe left untranslated)")
    low_probability_threshold: float
    low_coverage_threshold: float


class Candidate(BaseModel):
    """One of a text's n best translations (``"n_best"`` above 1): the fields of
    :class:`TranslateResponse` for this one translation, those the request asked for."""

    translation: str
    score: float | None = Field(default=None, description='with "scores"')
    token_log_probs: list[float] | None = Field(default=None, description='with "scores"')
    tokens: list[str] | None = Field(
        default=None, description='with "scores", "alignments" or "confidence"')
    alignment: str | None = Field(default=None, description='with "alignments": Pharaoh "i-j"')
    confidence: ConfidenceOut | None = Field(default=None, description='with "confidence"')


class TranslateResponse(BaseModel):
    """``translations``; the other fields only when the request asked for them (a field not
    asked for is left out of the JSON). The per-text fields (``translations``, ``scores``,
    ``alignments``, ...) are of each text's best translation, also with ``"n_best"``, whose
    list adds the others."""

    translations: list[str]
    scores: list[float] | None = Field(
        default=None, description='with "scores": each translation\'s score (length-normalised '
        "log-probability for beam search)")
    token_log_probs: list[list[float]] | None = Field(
        default=None, description='with "scores": log-probability of each output token and of </s> '
        "(they sum to the sentence log-probability)")
    tokens: list[list[str]] | None = Field(
        default=None, description='with "scores" or "alignments": the output tokens they refer to')
    src_tokens: list[list[str]] | None = Field(
        default=None, description='with "alignments": the source tokens they refer to')
    alignments: list[str] | None = Field(
        default=None, description='with "alignments": Pharaoh "i-j" pairs (source token i, target token '
        "j), each target token with the source token it attends to most")
    confidence: list[ConfidenceOut] | None = Field(
        default=None, description='with "confidence": per translation, token probabilities with '
        "low ones marked and source tokens that received little attention flagged (also adds "
        "tokens and src_tokens)")
    n_best: list[list[Candidate]] | None = Field(
        default=None, description='with "n_best" above 1: per text, its n best translations, the '
        "best first (as nmtkit translate --n-best: where constraints were given, those that miss "
        "one are left out, but the first), each with the fields asked for")
    constraints_met: list[bool] | None = Field(
        default=None, description='with "constraints": per translation, whether it contains '
        "every constraint phrase of its text (phrases that cannot fit in the output cap are "
        "refused with a 422 naming constraints.N)")


class ErrorResponse(BaseModel):
    detail: str


@dataclass(frozen=True)
class RequestModels:
    """The request bodies of one app."""

    translate: type[BaseModel]
    attention: type[BaseModel]


def request_models(limits: ServeLimits, default_beam: int,
                   attention_shape: tuple[int, int] | None = None) -> RequestModels:
    """``TranslateRequest`` and ``AttentionRequest`` bounded by ``limits``; a request without
    ``beam`` gets ``default_beam``. ``attention_shape``: (decoder layers, heads) that
    ``alignment_layer``/``alignment_head`` may name, (0, 0) for none but -1 (the RNN);
    ``None``: unbounded (the engine refuses them anyway)."""
    options = confidence_options(attention_shape)
    return RequestModels(translate_request(limits, default_beam, options),
                         attention_request(limits, default_beam, options))


# The fields both requests have, each built anew for each model that declares it.

def beam_field(default_beam: int, limits: ServeLimits) -> Any:
    return Field(default_beam, ge=1, le=limits.max_beam, description="beam size (1 = greedy)")


def max_length_field() -> Any:
    return Field(None, description="cap on output tokens (on top of the model's own length "
                 "rule; default and largest: the server's --max-length)")


def tgt_lang_field() -> Any:
    return Field(None, max_length=MAX_LANG_CHARS, description="the language to translate "
                 "into, for a model of several directions (data.directions; required when "
                 "it has several target languages, see /health's tgt_langs)")


def mbr_field() -> Any:
    return Field(None, description="minimum Bayes risk decoding: of this many candidates "
                 "(the n best of a beam at least as wide) the one with the highest expected "
                 "sentence BLEU against the others (0 = off; default: the model's decode.mbr)")


def confidence_options(attention_shape: tuple[int, int] | None) -> type[BaseModel]:
    """The fields of both requests that ask for the confidence view and choose the attention
    it reads, the layer and head bounded by ``attention_shape`` (see :func:`request_models`)."""
    n_layers, n_heads = attention_shape or (None, None)
    # The bounds go on the int itself: on ``int | None`` they would not reach the JSON schema.
    LayerIndex = Annotated[int, Field(ge=-1, le=None if n_layers is None else n_layers - 1),
                           BeforeValidator(_integral)]
    HeadIndex = Annotated[int, Field(ge=-1, le=None if n_heads is None else n_heads - 1),
                          BeforeValidator(_integral)]
    Probability = Annotated[float, Field(gt=0.0, le=1.0)]
    Coverage = Annotated[float, Field(ge=0.0)]

    class ConfidenceOptions(BaseModel):
        """Fields of both requests: the confidence view and the attention it reads."""

        model_config = STRICT
        confidence: bool = Field(
            False, description="also return the confidence view: token probabilities (low ones "
            "marked) and source coverage (possible omissions flagged)")
        low_probability: Probability | None = Field(
            None, description=f"confidence: mark output tokens with a probability below this "
            f"(default {LOW_PROBABILITY})")
        low_coverage: Coverage | None = Field(
            None, description=f"confidence: flag source tokens whose coverage (1 = an even share of "
            f"the attention) is below this (default {LOW_COVERAGE})")
        alignment_layer: LayerIndex | None = Field(
            None, description="decoder layer whose source attention gives alignments and coverage, "
            "from 0 (-1: the last); default the model's decode.alignment_layer")
        alignment_head: HeadIndex | None = Field(
            None, description="head of that layer, from 0 (-1: the heads' mean); default the "
            "model's decode.alignment_head")

    return ConfidenceOptions


def translate_request(limits: ServeLimits, default_beam: int,
                      options: type[BaseModel]) -> type[BaseModel]:
    """The body of ``POST /v1/translate``: ``options`` (:func:`confidence_options`) and the
    texts with what each may ask for, bounded by ``limits``."""
    Text = Annotated[str, Field(max_length=limits.max_chars)]
    Phrases = Annotated[list[Text], Field(max_length=MAX_PHRASES)]
    MaxLength = Annotated[int, Field(ge=1, le=limits.max_length), BeforeValidator(_integral)]
    Candidates = Annotated[int, Field(ge=0, le=limits.max_beam), BeforeValidator(_integral)]

    # ``options`` is a class built at run time: no static type to check it against.
    class TranslateRequest(options):  # type: ignore[misc,valid-type]
        model_config = ConfigDict(**STRICT, json_schema_extra={
            "examples": [{"texts": ["Ein Mann fährt Fahrrad."], "beam": default_beam}]})
        texts: list[Text] = Field(..., min_length=1, max_length=limits.max_texts,
                                  description="sentences to translate (one per item)")
        beam: Integer = beam_field(default_beam, limits)
        max_length: MaxLength | None = max_length_field()
        tgt_lang: str | None = tgt_lang_field()
        prefixes: list[Text] | None = Field(
            None, max_length=limits.max_texts,
            description="forced target prefixes, one per text (\"\" for none): each translation "
            "starts with its prefix and decoding continues after it")
        constraints: list[Phrases] | None = Field(
            None, max_length=limits.max_texts,
            description="per text, target phrases its translation must contain ([] for none)")
        scores: bool = Field(False, description="also return scores and per-token log-probabilities")
        alignments: bool = Field(False, description="also return source-target alignments")
        split_sentences: bool | None = Field(
            None, description="cut each text into sentences, translate them in one batch and "
            "join each text's translations (default: the model's decode.split_sentences, on); "
            "scores are then sums over the sentences and alignments count positions in the text")
        mbr: Candidates | None = mbr_field()
        n_best: Integer = Field(
            1, ge=1, le=limits.max_beam, description="also return each text's n best "
            "translations (\"n_best\" in the answer), as nmtkit translate --n-best: at most the "
            "beam (MBR's candidates with \"mbr\")")

        @model_validator(mode="after")
        def one_prefix_per_text(self) -> Any:
            for name in ("prefixes", "constraints"):
                given = getattr(self, name)
                if given is not None and len(given) != len(self.texts):
                    raise ValueError(f"{name}: {len(given)} given for {len(self.texts)} texts: "
                                     "give one per text (an empty one for none)")
            return self

    return TranslateRequest


def attention_request(limits: ServeLimits, default_beam: int,
                      options: type[BaseModel]) -> type[BaseModel]:
    """The body of ``POST /v1/attention``: ``options`` (:func:`confidence_options`) and one
    sentence with what it may ask for, bounded by ``limits``."""
    Text = Annotated[str, Field(max_length=limits.max_chars)]
    MaxLength = Annotated[int, Field(ge=1, le=limits.max_length), BeforeValidator(_integral)]
    Candidates = Annotated[int, Field(ge=0, le=limits.max_beam), BeforeValidator(_integral)]

    # ``options`` is a class built at run time: no static type to check it against.
    class AttentionRequest(options):  # type: ignore[misc,valid-type]
        model_config = STRICT
        text: Text = Field(..., description="one sentence")
        beam: Integer = beam_field(default_beam, limits)
        max_length: MaxLength | None = max_length_field()
        tgt_lang: str | None = tgt_lang_field()
        prefix: Text | None = Field(
            None, description="a forced target prefix: the translation starts with it and "
            "decoding continues after it")
        mbr: Candidates | None = mbr_field()  # the maps of the translation /v1/translate gives
        kinds: list[Kind] | None = Field(
            None, description="only these kinds of maps; default all the model has")

        @field_validator("text")
        @classmethod
        def not_blank(cls, v: str) -> str:
            if not v.strip():
                raise ValueError("must not be empty")
            return v

    return AttentionRequest
