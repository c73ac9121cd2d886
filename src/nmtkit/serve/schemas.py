"""Request and response bodies of the HTTP API (pydantic models; they make ``/openapi.json``).

The request bodies carry the server's limits (:class:`~nmtkit.serve.limits.ServeLimits`) in
their fields, so that the JSON schema states them: :func:`request_models` builds them for
one set of limits and the default beam.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from .limits import ServeLimits

Kind = Literal["encoder", "decoder_self", "decoder_src"]

STRICT = ConfigDict(strict=True, extra="forbid")
"""No type coercion ("5" is not a beam), no unknown fields."""


def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` includes 2.0: take integral floats as ints (2.5 stays an error)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]


class TranslateResponse(BaseModel):
    translations: list[str]


class ErrorResponse(BaseModel):
    detail: str


@dataclass(frozen=True)
class RequestModels:
    """The request bodies of one app."""

    translate: type[BaseModel]
    attention: type[BaseModel]


def request_models(limits: ServeLimits, default_beam: int) -> RequestModels:
    """``TranslateRequest`` and ``AttentionRequest`` bounded by ``limits``; a request without
    ``beam`` gets ``default_beam``."""
    Text = Annotated[str, Field(max_length=limits.max_chars)]
    # The bounds go on the int itself: on ``int | None`` they would not reach the JSON schema.
    MaxLength = Annotated[int, Field(ge=1, le=limits.max_length), BeforeValidator(_integral)]

    def beam_field() -> Any:
        return Field(default_beam, ge=1, le=limits.max_beam, description="beam size (1 = greedy)")

    def max_length_field() -> Any:
        return Field(None, description="cap on output tokens (on top of the model's own length cap)")

    class TranslateRequest(BaseModel):
        model_config = ConfigDict(**STRICT, json_schema_extra={
            "examples": [{"texts": ["Ein Mann fährt Fahrrad."], "beam": default_beam}]})
        texts: list[Text] = Field(..., min_length=1, max_length=limits.max_texts,
                                  description="sentences to translate (one per item)")
        beam: Integer = beam_field()
        max_length: MaxLength | None = max_length_field()

    class AttentionRequest(BaseModel):
        model_config = STRICT
        text: Text = Field(..., description="one sentence")
        beam: Integer = beam_field()
        max_length: MaxLength | None = max_length_field()
        kinds: list[Kind] | None = Field(
            None, description="only these kinds of maps; default all the model has")

        @field_validator("text")
        @classmethod
        def not_blank(cls, v: str) -> str:
            if not v.strip():
                raise ValueError("must not be empty")
            return v

    return RequestModels(TranslateRequest, AttentionRequest)
