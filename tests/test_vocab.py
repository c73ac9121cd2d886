import json

import pytest

from nmtkit.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab


def test_special_ids_are_fixed():
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert SPECIALS == ["<pad>", "<unk>", "<s>", "</s>"]
    v = Vocab.build([["a", "b"]])
    assert v.itos[:4] == SPECIALS
    assert [v.stoi[s] for s in SPECIALS] == [0, 1, 2, 3]


def test_build_orders_by_frequency_then_string():
    data = [["b", "a", "c"], ["c", "b"], ["c", "d", "a"]]
    v = Vocab.build(data)
    # c: 3, a: 2, b: 2 (tie: string order), d: 1
    assert v.itos[4:] == ["c", "a", "b", "d"]
    assert len(v) == 8
    # deterministic whatever the input order
    assert Vocab.build(list(reversed(data))) == v


def test_min_freq_and_max_size():
    data = [["x", "x", "x", "y", "y", "z"]]
    assert Vocab.build(data, min_freq=2).itos[4:] == ["x", "y"]
    assert Vocab.build(data, min_freq=3).itos[4:] == ["x"]
    assert Vocab.build(data, min_freq=4).itos == SPECIALS
    # max_size counts the specials
    assert Vocab.build(data, max_size=5).itos[4:] == ["x"]
    assert len(Vocab.build(data, max_size=100)) == 7
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(data, min_freq=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocab.build(data, max_size=3)


def test_specials_in_data_are_not_duplicated():
    v = Vocab.build([["<unk>", "<s>", "a", "</s>", "<pad>"]])
    assert v.itos == SPECIALS + ["a"]


def test_encode_decode_round_trip():
    v = Vocab.build([["ein", "mann", "läuft", "."]])
    toks = ["ein", "mann", "läuft", "."]
    ids = v.encode(toks)
    assert ids[-1] == EOS and ids[0] != BOS
    assert v.decode(ids) == toks
    ids_bos = v.encode(toks, add_bos=True)
    assert ids_bos[0] == BOS and ids_bos[1:] == ids
    assert v.encode(toks, add_eos=False) == ids[:-1]
    assert v.decode(ids_bos) == toks


def test_unknown_tokens_map_to_unk():
    v = Vocab.build([["a"]])
    assert v.encode(["a", "zzz"], add_eos=False) == [v.stoi["a"], UNK]
    assert v.decode([UNK]) == ["<unk>"]
    assert "a" in v and "zzz" not in v


def test_decode_stops_at_eos_and_drops_pad_bos():
    v = Vocab.build([["a", "b"]])
    a, b = v.stoi["a"], v.stoi["b"]
    ids = [BOS, a, PAD, b, EOS, a, PAD, PAD]
    assert v.decode(ids) == ["a", "b"]
    assert v.decode(ids, strip_special=False) == [
        "<s>",
        "a",
        "<pad>",
        "b",
        "</s>",
        "a",
        "<pad>",
        "<pad>",
    ]
    with pytest.raises(ValueError, match="out of range"):
        v.decode([len(v)])


def test_decode_accepts_tensor_like_ints():
    torch = pytest.importorskip("torch")
    v = Vocab.build([["a", "b"]])
    ids = torch.tensor(v.encode(["b", "a"], add_bos=True))
    assert v.decode(ids) == ["b", "a"]


def test_dict_round_trip_and_validation():
    v = Vocab.build([["a", "b", "b"]])
    d = v.to_dict()
    assert d == {"itos": SPECIALS + ["b", "a"]}
    json.dumps(d)  # plain JSON
    assert Vocab.from_dict(d) == v
    with pytest.raises(ValueError, match="specials"):
        Vocab.from_dict({"itos": ["<unk>", "<pad>", "<s>", "</s>", "a"]})
    with pytest.raises(ValueError, match="specials"):
        Vocab.from_dict({"itos": ["a"]})
    with pytest.raises(ValueError, match="duplicate"):
        Vocab.from_dict({"itos": SPECIALS + ["a", "a"]})
    with pytest.raises(ValueError, match="itos"):
        Vocab.from_dict({"tokens": SPECIALS})
    with pytest.raises(ValueError, match="not a string"):
        Vocab.from_dict({"itos": SPECIALS + [3]})


def test_json_round_trip(tmp_path):
    v = Vocab.build([["Straße", "„", "ein", "ein"]])
    path = tmp_path / "sub" / "vocab.json"
    v.save_json(path)
    assert Vocab.load_json(path) == v
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temp file left


def test_load_json_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"itos": [', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.json.*invalid vocabulary JSON"):
        Vocab.load_json(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"itos": ["a", "b"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="wrong.json"):
        Vocab.load_json(wrong)
    with pytest.raises(ValueError, match="missing.json.*not found"):
        Vocab.load_json(tmp_path / "missing.json")


def test_equality():
    assert Vocab.build([["a"]]) == Vocab.build([["a"]])
    assert Vocab.build([["a"]]) != Vocab.build([["b"]])
    assert Vocab.build([["a"]]) != ["<pad>"]
