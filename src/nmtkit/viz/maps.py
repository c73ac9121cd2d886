"""The attention of one translated sentence as plain data (:class:`AttentionMaps`): what the
figures of :mod:`nmtkit.viz.attention` draw and the page of :mod:`nmtkit.viz.html` embeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KIND_TITLES = {
    "encoder": "Encoder self-attention",
    "decoder_self": "Decoder self-attention (masked)",
    "decoder_src": "Decoder source attention (encoder-decoder)",
}


@dataclass
class AttentionMaps:
    """The attention of one translated sentence, ready to plot or serialise."""

    source: str
    translation: str
    src_tokens: list[str]
    """Source positions in reading order: the subwords, then ``</s>``."""
    tgt_in_tokens: list[str]
    """Decoder inputs: ``<s>`` then the translation's subwords."""
    tgt_out_tokens: list[str]
    """What each decoder position predicts: the translation's subwords, then ``</s>``."""
    maps: dict[str, np.ndarray]
    """kind -> (layers, heads, queries, keys); every row is a probability distribution."""
    search_attention: np.ndarray | None = None
    """(T, S) source attention recorded by the search (last layer, mean over heads)."""

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a kind's maps."""
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "decoder_self":
            return self.tgt_out_tokens, self.tgt_in_tokens
        return self.tgt_out_tokens, self.src_tokens

    def axis_names(self, kind: str) -> tuple[str, str]:
        if kind == "encoder":
            return "query: source position", "key: source position"
        if kind == "decoder_self":
            return "query: target position (token it predicts)", "key: target token read"
        return "query: target position (token it predicts)", "key: source position"

    @staticmethod
    def causal(kind: str) -> bool:
        """Whether a kind hides later positions (its upper triangle is masked, not learned)."""
        return kind == "decoder_self"

    def to_dict(self, decimals: int = 4) -> dict[str, Any]:
        """Plain JSON-ready data (what the HTML page embeds)."""
        kinds: dict[str, dict[str, Any]] = {}
        for kind, arr in self.maps.items():
            rows, cols = self.labels(kind)
            row_axis, col_axis = self.axis_names(kind)
            kinds[kind] = {"title": KIND_TITLES.get(kind, kind), "rows": rows, "cols": cols,
                           "row_axis": row_axis, "col_axis": col_axis, "causal": self.causal(kind),
                           "weights": np.round(arr.astype(np.float64), decimals).tolist()}
        return {"source": self.source, "translation": self.translation, "kinds": kinds}
