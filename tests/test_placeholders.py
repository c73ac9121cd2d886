"""What the vocabulary cannot say, carried over (nmtkit.data.placeholders, the restore step of
nmtkit.decode.lines) and SentencePiece's byte fallback (data.byte_fallback)."""


import numpy as np
import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.config import DataConfig
from nmtkit.data.placeholders import (
    Group,
    Protected,
    find_spans,
    group_spans,
    protect,
    restore,
    source_anchor,
    unknown_spans,
)
from nmtkit.data.prepare import build_vocabularies
from nmtkit.data.tokenizers import BYTE_PIECES, SentencePieceTokenizer
from nmtkit.data.vocab import UNK, Vocab
from nmtkit.decode.lines import restore_translation
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator

from .helpers import SENTENCE_WORDS

DOG, PRICE = "Ein Hund 🐕 läuft über die Wiese.", "Der Preis ist 5 € für Ø 3 cm."


def kinds(text, unknown=None):
    return [(s.kind, s.text) for s in find_spans(text, unknown)]


# --- finding spans -----------------------------------------------------------------------------

def test_numbers_with_decimals_thousands_and_times():
    assert kinds("Er zahlte 1.000,50 € für 3,5 kg um 10:30 Uhr am 3. Mai.") == [
        ("number", "1.000,50"), ("number", "3,5"), ("number", "10:30"), ("number", "3")]
    assert kinds("H2O und 1\u00a0000 Leute") == [("number", "1\u00a0000")]  # not inside a word


def test_urls_emails_and_emoji():
    line = "Siehe https://example.com/a?b=1, schreib an a.b@c.de! 👩‍👩‍👧 und 👍🏽 (www.x.org)."
    assert kinds(line) == [("url", "https://example.com/a?b=1"), ("email", "a.b@c.de"),
                           ("emoji", "👩‍👩‍👧"), ("emoji", "👍🏽"), ("url", "www.x.org")]


def test_what_the_vocabulary_lacks_wins_over_its_kind():
    lacks = lambda text: [(i, i + 1) for i, c in enumerate(text) if c in "€Ø🐕5"]  # noqa: E731
    assert kinds(PRICE, lacks) == [("unknown", "5"), ("unknown", "€"), ("unknown", "Ø"),
                                   ("number", "3")]
    assert kinds(DOG, lacks) == [("unknown", "🐕")]


def test_groups_and_what_the_model_reads():
    lacks = lambda text: [(i, i + 1) for i, c in enumerate(text) if c in "€Ø🐕"]  # noqa: E731
    assert group_spans(PRICE, find_spans(PRICE, lacks)) == [(14, 17), (22, 25)]
    p = protect(PRICE, lacks)
    assert p.text == "Der Preis ist für cm."
    assert [(g.text, g.before) for g in p.groups] == [("5 €", "Der Preis ist"),
                                                      ("Ø 3", "Der Preis ist für")]
    # numbers and emoji the vocabulary has are the model's to read and translate
    line = 'Ein Kind mit der Nummer "93" fährt 👍 Ski.'
    assert protect(line, lacks) == protect(line, None) == Protected(line)
    # URLs and e-mail addresses are left out; what is left keeps its spacing
    p = protect("Siehe (https://x.org) oder a@b.de.", None)
    assert p.text == "Siehe () oder." and [g.text for g in p.groups] == ["https://x.org", "a@b.de"]
    assert protect("Hund🐕läuft", lacks).text == "Hund läuft"
    assert protect("🐕 🐕", lacks) == Protected("", (Group("🐕 🐕", ""),))


def test_a_number_glued_to_letters_stays_whole():
    # issue 74 item 5: a number search that began at the second digit cut "80" out of "A380"
    assert kinds("Ein Airbus A380 und XR41 fliegen, H2O auch.") == []
    lacks = lambda text: [(i, i + 1) for i, c in enumerate(text) if c in "€<>"]  # noqa: E731
    line = "Ein Airbus A380€ fliegt."
    assert protect(line, lacks) == Protected("Ein Airbus fliegt.", (Group("A380€", "Ein Airbus"),))
    assert [g.text for g in protect("Nur XR41€ heute.", lacks).groups] == ["XR41€"]
    # a model without digits: the digits and € are one unknown span, widened to the word
    digits = lambda text: [(a, b) for a, b in [(text.find("380€"), text.find("380€") + 4)]]  # noqa: E731
    assert [g.text for g in protect(line, digits).groups] == ["A380€"]
    # text that looks like a byte piece: "<" and ">" unknown, carried over with what they hold
    assert protect("Ein Mann <0x41> fährt.", lacks) == Protected(
        "Ein Mann fährt.", (Group("<0x41>", "Ein Mann"),))
    # words without digits keep their own: an emoji between them is cut alone
    assert protect("Hund🐕läuft", lambda t: [(4, 5)]).text == "Hund läuft"
    # a price and a glued code beside each other are one group
    assert [g.text for g in protect("Er zahlt 5 € für A380€ heute.", lacks).groups] == [
        "5 €", "A380€"]


def test_text_that_looks_like_a_byte_piece_is_text(german_sp):
    # without byte fallback SentencePiece passes "<0x41>" on as one unknown piece of that text
    tok = german_sp[False]
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[p for p in tok.pieces() if p != "<unk>"]])
    line = "Ein Mann <0x41> fährt."
    assert "<0x41>" in tok.encode(line)
    assert [line[a:b] for a, b in unknown_spans(line, tok, vocab)] == ["<0x41>"]
    # with byte fallback its characters are byte pieces: one span all the same
    tok = german_sp[True]
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>",
                   *[p for p in tok.pieces() if p not in BYTE_PIECES and p != "<unk>"], *BYTE_PIECES])
    assert [line[a:b] for a, b in unknown_spans(line, tok, vocab)] == ["<0x41>"]


# --- unknown spans from a real tokenizer and vocabulary -----------------------------------------

@pytest.fixture(scope="module")
def german_sp():
    lines = [" ".join(SENTENCE_WORDS[i:i + 6]) + "." for i in range(len(SENTENCE_WORDS))] * 3
    return {bf: SentencePieceTokenizer.train(lines, vocab_size=120, byte_fallback=bf)
            for bf in (False, True)}


def test_unknown_spans_without_and_with_byte_fallback(german_sp):
    for tok in german_sp.values():
        vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>",
                       *[p for p in tok.pieces() if p not in BYTE_PIECES and p != "<unk>"],
                       *BYTE_PIECES])
        found = [PRICE[a:b] for a, b in unknown_spans(PRICE, tok, vocab)]
        assert "".join(found) == "5€Ø3"
        assert [DOG[a:b] for a, b in unknown_spans(DOG, tok, vocab)] == ["🐕"]
        assert unknown_spans("Ein Mann läuft.", tok, vocab) == []


def test_byte_fallback_adds_256_pieces_and_keeps_the_rest(german_sp):
    plain, bytes_ = german_sp[False], german_sp[True]
    assert bytes_.byte_pieces() == list(BYTE_PIECES) and plain.byte_pieces() == []
    assert set(bytes_.pieces()) - set(plain.pieces()) == set(BYTE_PIECES)
    line = "Ein Mann fährt über die Wiese."
    assert bytes_.encode(line) == plain.encode(line)  # same segmentation of known text
    assert "<0xF0>" in bytes_.encode(DOG) and bytes_.decode(bytes_.encode(DOG)) == DOG
    assert "🐕" in plain.encode(DOG) and "🐕" not in plain.pieces()  # a vocabulary's <unk>
    assert DataConfig().byte_fallback


def test_new_vocabularies_keep_the_byte_pieces():
    lines = [" ".join(SENTENCE_WORDS[i:i + 6]) for i in range(len(SENTENCE_WORDS))] * 3

    def vocabularies(**kw):
        cfg = DataConfig(corpus="parallel", tokenizer="sentencepiece", vocab_size=120, **kw)
        return build_vocabularies(cfg, lambda: zip(lines, lines, strict=True))

    v, off = vocabularies(), vocabularies(byte_fallback=False)
    assert all(p in v.src_vocab for p in BYTE_PIECES)
    assert UNK not in v.src_vocab.encode(v.src_tok.encode(DOG), add_eos=False)
    assert UNK in off.src_vocab.encode(off.src_tok.encode(DOG), add_eos=False)
    assert len(v.src_vocab) == len(off.src_vocab) + 256
    assert v.src_vocab.itos[:len(off.src_vocab)] == off.src_vocab.itos  # the same ids before


# --- putting groups back: hand-made outputs and attention ---------------------------------------

def words(_j):
    return True


def test_an_unk_takes_the_group_it_attends_to_most():
    # output: "A <unk> and <unk>"; groups anchored at source 1 and 3
    attention = [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]]
    r = restore(["A", "<unk>", "and", "<unk>"], [(1, True), (3, True)], attention,
                lambda t: t == "<unk>", words)
    assert r.items == (("token", 0), ("group", 1), ("token", 2), ("group", 0))
    assert r.replaced == {1: 1, 3: 0}


def test_missing_groups_go_next_to_the_word_aligned_to_their_neighbour():
    tokens = ["A", "dog", "runs", "."]
    attention = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    # after the word aligned to the token before the group; before the first for a group
    # that began the sentence
    r = restore(tokens, [(1, True), (0, False)], attention, lambda t: False, words)
    assert r.items == (("group", 1), ("token", 0), ("token", 1), ("group", 0), ("token", 2),
                       ("token", 3))
    # without attention: the same relative position
    r = restore(tokens, [(3, True)], None, lambda t: False, words)
    assert r.items[-1] == ("group", 0)


def test_never_inside_a_word_and_no_unk_left():
    tokens = ["▁A", "▁wal", "king", "▁dog"]
    attention = [[0, 1], [1, 0], [0, 1], [0, 1]]
    r = restore(tokens, [(0, True)], attention, lambda t: False,
                lambda j: tokens[j].startswith("▁"))
    # aligned to "▁wal": the group goes after "walking", not between "wal" and "king"
    assert r.items == (("token", 0), ("token", 1), ("token", 2), ("group", 0), ("token", 3))
    r = restore(["x", "<unk>"], [], None, lambda t: t == "<unk>", words)
    assert r.items == (("token", 0),)  # an unk with no group to fill is dropped


def test_source_anchor():
    assert source_anchor(3, 5) == (2, True)  # after the token before it
    assert source_anchor(0, 5) == (0, False)  # before the first
    assert source_anchor(9, 5) == (4, True)  # a source cut to the position table
    assert source_anchor(0, 0) == (-1, True)  # nothing but groups


def test_restored_translation_keeps_tokens_scores_and_attention_in_step():
    lacks = lambda text: [(i, i + 1) for i, c in enumerate(text) if c == "🐕"]  # noqa: E731
    p = protect(DOG, lacks)
    src = ["Ein", "Hund", "läuft", "über", "die", "Wiese", "."]
    out = ["A", "dog", "runs", "over", "the", "<unk>", "meadow", "."]
    # (T + 1, S + 1): each output token's source (the <unk> looks at "Wiese"), </s> last
    attn = np.eye(8, dtype=np.float32)[[0, 1, 2, 3, 4, 5, 5, 6, 7]]
    t = Translation("A dog runs over the ⁇ meadow.", out, src, -1.0, attn,
                    token_log_probs=[-0.1] * 9, alignment=[(j, j) for j in range(8)])
    r = restore_translation(t, p, [2], lambda toks: " ".join(toks).replace(" .", "."))
    # the model's <unk> (attending to "Wiese", not to the group's anchor "Hund") still takes
    # the only group: every group comes back once, no <unk> stays
    assert r.text == "A dog runs over the 🐕 meadow."
    assert r.src_tokens == ["Ein", "Hund", "🐕", "läuft", "über", "die", "Wiese", "."]
    assert r.tokens == ["A", "dog", "runs", "over", "the", "🐕", "meadow", "."]
    assert r.attention.shape == (9, 9) and r.attention[5].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0]
    assert r.alignment[5] == (2, 5) and r.alignment[1] == (1, 1) and r.alignment[2] == (3, 2)
    assert len(r.token_log_probs) == 9 and r.attention.dtype == np.float32  # as every engine gives it
    # a group the model dropped is inserted after the word aligned to its neighbour
    dropped = Translation("A dog runs.", ["A", "dog", "runs", "."], src[:3] + ["."], -1.0,
                          np.eye(5, dtype=np.float32), token_log_probs=[-0.5] * 5)
    r = restore_translation(dropped, p, [2], lambda toks: " ".join(toks).replace(" .", "."))
    assert r.text == "A dog 🐕 runs." and r.token_log_probs == [-0.5, -0.5, 0.0, -0.5, -0.5, -0.5]


# --- on a trained model -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def copier(sp_copy_checkpoint):
    return Translator.from_bundle(load_bundle(sp_copy_checkpoint))


@pytest.mark.slow
def test_emoji_numbers_and_unknown_characters_survive(copier):
    lines = [DOG, PRICE, "Ein Mann 🐕 fährt 12,5 km. Zwei Kinder spielen im Sand 🐕!"]
    out = copier.translate_lines(lines)
    for text in out:
        assert "⁇" not in text and "<unk>" not in text
    assert "🐕" in out[0]
    for piece in ("5", "€", "Ø", "3"):
        assert piece in out[1]
    assert out == lines  # a copy model: each back where it stood
    off = copier.translate(lines, TranslateOptions(protect_spans=False))
    assert "🐕" not in off[0][0].text and "Ø" not in off[1][0].text  # the vocabulary lacks them


@pytest.mark.slow
def test_scores_and_alignments_name_the_carried_spans(copier):
    h = copier.translate([PRICE], TranslateOptions(token_scores=True, alignments=True))[0][0]
    assert h.tokens[3] == "5 €" and h.src_tokens[3] == "5 €" and (3, 3) in h.alignment
    assert len(h.token_log_probs) == len(h.tokens) + 1
    assert h.attention is None  # only on request


@pytest.mark.slow
def test_a_sentence_of_nothing_but_groups(copier):
    h = copier.translate(["🐕", "Ein Hund läuft. 🐕 🐕"],
                         TranslateOptions(token_scores=True, need_attention=True))
    assert h[0][0].text == "🐕" and h[0][0].tokens == h[0][0].src_tokens == ["🐕"]
    assert h[0][0].token_log_probs == [0.0, 0.0] and h[0][0].attention.tolist() == [[1, 0], [0, 1]]
    assert h[1][0].text == "Ein Hund läuft. 🐕 🐕"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "numpy"])
def test_glued_numbers_and_byte_piece_text_come_out_whole(sp_copy_checkpoint, engine):
    # issue 74 item 5, through the text pipeline both engines share (the copy model knows no
    # digit, no €, no "<", no "A")
    from nmtkit.decode.load import load_translator

    tr = load_translator(sp_copy_checkpoint, engine=engine)
    assert tr.engine == engine
    lines = ["Ein Mann A380€ fährt.", "Ein Mann <0x41> fährt.", "Zwei Kinder XR41€ spielen."]
    assert tr.translate_lines(lines) == lines
