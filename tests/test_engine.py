"""decode/engine.py: the one seam between the text pipeline and an engine. An engine that
writes only ``search`` translates lines end to end (sentences, spans, length order, batches,
n best, scores, attention, alignments, joined lines), and no engine of nmtkit orders the
pipeline's steps itself."""

import importlib

import numpy as np
import pytest

from nmtkit.config import DecodeConfig
from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.data.vocab import SPECIALS, Vocab
from nmtkit.decode.engine import Found, SearchRequest, Source
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.text_translator import TextTranslator
from nmtkit.errors import UserError

WORDS = ["A", "The", "dog", "cat", "runs", "sleeps", "."]


class Shouting(TextTranslator):
    """An engine that writes each source word in capitals: nothing but ``search``."""

    engine = "shouting"

    def __init__(self, **decode: object) -> None:
        super().__init__(WhitespaceTokenizer(), WhitespaceTokenizer(), DecodeConfig(**decode))
        self.src_vocab = Vocab([*SPECIALS, *WORDS])
        self.tgt_vocab = Vocab([*SPECIALS, *(w.upper() for w in WORDS)])
        self.batches_seen: list[list[int]] = []
        self.requests: list[SearchRequest] = []

    def search(self, sources: list[Source], request: SearchRequest) -> list[list[Found]]:
        self.batches_seen.append([len(s.ids) for s in sources])
        self.requests.append(request)
        out = []
        for s in sources:
            toks = [t.upper() for t in s.model_tokens]
            n = len(toks)
            attention = np.eye(n + 1, len(s.ids), dtype=np.float32) if request.attention else None
            scores = [-0.5] * (n + 1) if request.token_scores else None
            out.append([Found(toks, -0.5 * (n + 1) - k, -0.5 * (n + 1) - k, scores, attention)
                        for k in range(request.cfg.n_best)])
        return out


def test_an_engine_of_one_method_translates_lines_end_to_end():
    tr = Shouting(batch_size=2)
    lines = ["A dog runs. The cat sleeps.", "", "The dog 🐕 sleeps.", "A cat."]
    assert tr.translate_lines(lines) == ["A DOG RUNS. THE CAT SLEEPS.", "", "THE DOG 🐕 SLEEPS.",
                                         "A CAT."]
    # the sentence with a span the vocabulary lacks is searched with the attention that puts
    # it back, in a search of its own (first); the others without, the sentences of all
    # lines in one length order, in batches of two (the empty line not searched)
    assert [r.attention for r in tr.requests] == [True, False, False]
    assert tr.batches_seen[0] == [4]  # "The dog sleeps." and </s>: the span left out
    rest = [n for batch in tr.batches_seen[1:] for n in batch]
    assert rest == sorted(rest) == [3, 4, 4] and [len(b) for b in tr.batches_seen[1:]] == [2, 1]


def test_n_best_scores_attention_and_alignments_come_through_the_pipeline():
    tr = Shouting(beam=3, n_best=2)
    (first, second), = tr.translate(["A dog runs. The cat sleeps."], TranslateOptions(
        n_best=2, token_scores=True, need_attention=True, alignments=True))
    assert first.text == second.text == "A DOG RUNS. THE CAT SLEEPS."
    assert first.score == pytest.approx(-4.0) and second.score == pytest.approx(-6.0)  # summed
    assert first.tokens == ["A", "DOG", "RUNS.", "THE", "CAT", "SLEEPS."]
    assert len(first.token_log_probs) == len(first.tokens) + 1
    assert first.alignment == [(i, i) for i in range(6)]
    assert isinstance(first.attention, np.ndarray) and first.attention.shape == (7, 7)
    assert np.array_equal(first.attention, np.eye(7, dtype=np.float32))  # block-diagonal, joined


def test_a_refused_call_goes_to_the_fallback_or_is_an_error():
    class Partial(Shouting):
        def refuses(self, options, cfg, n_lines):
            return "attention" if options.need_attention else None

    tr = Partial()
    with pytest.raises(UserError, match="the shouting engine cannot do this: attention"):
        tr.translate(["A dog."], TranslateOptions(need_attention=True))
    assert tr.unsupported(TranslateOptions(need_attention=True)) == "attention"
    full = Shouting()
    tr.fallback = lambda: full
    assert tr.translate(["A dog."], TranslateOptions(need_attention=True))[0][0].text == "A DOG."
    assert full.requests and not tr.requests  # the fallback searched it
    assert tr.unsupported(TranslateOptions(need_attention=True)) is None


@pytest.mark.parametrize("module, name", [
    ("nmtkit.decode.translator", "Translator"),
    ("nmtkit.decode.lite_translator", "LiteTranslator"),
    ("nmtkit.export.ctranslate2_engine", "CTranslate2Translator"),
])
def test_no_engine_orders_the_pipeline_steps_itself(module, name):
    if module.startswith("nmtkit.export"):
        pytest.importorskip("ctranslate2")
    engine = getattr(importlib.import_module(module), name)
    assert issubclass(engine, TextTranslator)
    assert "search" in vars(engine)  # what an engine writes
    for step in ("translate", "translate_sentences", "search_sentences", "source",
                 "translation_of", "restored", "in_length_order"):
        assert step not in vars(engine), f"{name} overrides the pipeline's {step}"
