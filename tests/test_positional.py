"""model.positional: the sinusoid, a learned table and rotary embeddings (nmtkit.models.positions).

Each option learns a tiny copy task, the learned table trains, RoPE's scores depend on relative
positions only, decoding step by step equals the teacher-forced pass, checkpoints round-trip,
and the config refuses what cannot work. (Step-vs-forward for every option and norm is also in
tests/test_transformer.py; fast on/off in tests/test_fast.py; export in tests/test_export.py.)
"""

import math

import pytest
import torch
import torch.nn.functional as F

from nmtkit.checkpoint import load_bundle, load_checkpoint
from nmtkit.config import POSITIONAL_ENCODINGS, Config, ConfigError, ModelConfig
from nmtkit.data.vocab import BOS, EOS, PAD
from nmtkit.decode.translator import Translator
from nmtkit.models import build_model
from nmtkit.models.attention import MultiHeadAttention
from nmtkit.models.positions import (
    EmbeddingDropout,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    apply_rotary,
    rotary_angles,
)
from nmtkit.models.transformer import PositionalEncoding, Transformer
from nmtkit.train.loop import Trainer

from .helpers import ROOT, make_cfg, padded_batch
from .helpers import make_transformer as make_model

V = 14  # <pad> <unk> <s> </s> and 10 symbols


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models: one thread is fastest, and does not fight other work for the cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(positional: str, seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0, norm="pre",
                      tie_output=False, tie_all=False, max_positions=32, positional=positional, **kw)
    model = build_model(cfg, V, V)
    assert isinstance(model, Transformer)
    return model


def copy_batch(g: torch.Generator, n: int = 32, max_len: int = 8) -> tuple[torch.Tensor, ...]:
    """Random symbol sequences: source ``x </s>``, target in ``<s> x``, target out ``x </s>``."""
    lens = torch.randint(2, max_len + 1, (n,), generator=g).tolist()
    src = torch.full((n, max_len + 1), PAD)
    tgt_in, tgt_out = src.clone(), src.clone()
    for i, k in enumerate(lens):
        sym = torch.randint(4, V, (k,), generator=g)
        src[i, :k], src[i, k] = sym, EOS
        tgt_in[i, 0], tgt_in[i, 1:k + 1] = BOS, sym
        tgt_out[i, :k], tgt_out[i, k] = sym, EOS
    return src, tgt_in, tgt_out


def copy_loss(model: Transformer, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    src, tgt_in, tgt_out = batch
    log_probs = model(src, (src != PAD).unsqueeze(-2), tgt_in)
    return F.nll_loss(log_probs.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)


# --- every option learns ----------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONAL_ENCODINGS)
def test_each_option_learns_the_copy_task(positional):
    model = tiny(positional).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    held_out = copy_batch(torch.Generator().manual_seed(99), n=64)
    with torch.no_grad():
        before = copy_loss(model.eval(), held_out).item()
    model.train()
    for _ in range(40):
        loss = copy_loss(model, copy_batch(g))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = copy_loss(model.eval(), held_out).item()
    assert before > math.log(V) - 1.0  # starts near uniform
    assert after < 0.6 * before, (positional, before, after)


def test_the_option_picks_the_module():
    kinds = {p: type(tiny(p).position) for p in POSITIONAL_ENCODINGS}
    assert kinds == {"sinusoidal": PositionalEncoding, "learned": LearnedPositionalEmbedding,
                     "rope": EmbeddingDropout}
    for p in ("sinusoidal", "learned"):
        model = tiny(p)
        assert all(layer.self_attn.rotary is None for layer in model.encoder_layers)
    rope = tiny("rope")
    rotary = rope.encoder_layers[0].self_attn.rotary
    assert isinstance(rotary, RotaryEmbedding) and rotary.d_k == 8
    for layer in rope.encoder_layers:
        assert layer.self_attn.rotary is rotary  # one table of angles for the whole model
    for layer in rope.decoder_layers:
        assert layer.self_attn.rotary is rotary
        assert layer.src_attn.rotary is None  # the source attention is not rotated
    # Neither the sinusoid nor RoPE's angles are weights: the same state_dict keys.
    assert rope.state_dict().keys() == tiny("sinusoidal").state_dict().keys()


# --- the learned table ------------------------------------------------------------------------


def test_learned_table_is_a_trained_parameter():
    model = tiny("learned")
    table = model.position.table.weight
    assert table.shape == (32, 32)
    assert any(p is table for p in model.parameters())
    assert "position.table.weight" in model.state_dict()
    assert table[PAD].abs().sum() > 0  # a position row, not a padding row: not zeroed
    assert 0.1 < table.std().item() * math.sqrt(32) < 2.0  # N(0, d^-1/2), as the embeddings
    batch = copy_batch(torch.Generator().manual_seed(0), n=8, max_len=6)  # 7 positions
    copy_loss(model.train(), batch).backward()
    assert table.grad is not None
    assert (table.grad[:7].abs().sum(-1) > 0).all()  # every position read gets a gradient
    assert (table.grad[7:] == 0).all()  # positions never read get none


def test_learned_table_is_added_to_the_scaled_embeddings():
    model = tiny("learned").eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert torch.equal(model.position(x), x + model.position.table.weight[:5])
        assert torch.equal(model.position(x[:, :1], offset=3), x[:, :1] + model.position.table.weight[3])


@pytest.mark.parametrize("positional", POSITIONAL_ENCODINGS)
def test_positions_beyond_max_positions_are_an_error(positional):
    model = tiny(positional).eval()
    src = torch.full((1, 33), 5)
    with pytest.raises(ValueError, match=r"33 positions exceeds max_positions \(32\)"):
        model.encode(src, (src != PAD).unsqueeze(-2))


# --- RoPE -------------------------------------------------------------------------------------


def test_rotary_is_eq_34_a_rotation_of_each_pair():
    """Eq. 34 equals the block-diagonal rotation matrix of Eq. 15 with theta_i = 10000^(-2i/d)."""
    d, m = 6, 7
    cos, sin = rotary_angles(16, d)
    x = torch.randn(d)
    rotated = apply_rotary(x, cos[m], sin[m])
    blocks = []
    for i in range(d // 2):
        a = m * 10000 ** (-2 * i / d)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]))
    assert torch.allclose(rotated, torch.block_diag(*blocks) @ x, atol=1e-6)
    assert torch.allclose(rotated.norm(), x.norm(), atol=1e-6)  # a rotation keeps lengths
    assert torch.equal(apply_rotary(x, cos[0], sin[0]), x)  # position 0: no rotation


def test_rotary_scores_depend_only_on_the_relative_position():
    torch.manual_seed(0)
    rope = RotaryEmbedding(d_k=16, max_len=64)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)  # (batch, heads, time, d_k)

    def score(m: int, n: int) -> float:
        return (rope(q, offset=m) * rope(k, offset=n)).sum().item()

    for m, n, s in [(0, 3, 5), (7, 2, 11), (4, 4, 20), (1, 9, 40)]:
        assert score(m + s, n + s) == pytest.approx(score(m, n), abs=1e-4)
    assert abs(score(0, 3) - score(0, 5)) > 1e-3  # other distances: other scores
    plain = (q * k).sum().item()
    assert abs(score(0, 3) - plain) > 1e-3 and score(5, 5) == pytest.approx(plain, abs=1e-5)


def test_rotary_self_attention_sees_no_absolute_position():
    """Shifting every position of a sequence by s leaves a RoPE self-attention's
    probabilities as they are; the same attention without RoPE is not even position-aware."""
    torch.manual_seed(1)
    mha = MultiHeadAttention(32, 4, rotary=RotaryEmbedding(8, 64)).eval()
    x = torch.randn(2, 6, 32)

    def probs(offset: int) -> torch.Tensor:
        q, k, v = mha.project_qkv(x, offset)
        return mha.attend(q, k, v, need_attention=True)[1]

    assert torch.allclose(probs(0), probs(13), atol=1e-5)
    q, k, _ = mha.project_qkv(x, 0)
    mha.rotary = None
    q0, k0, _ = mha.project_qkv(x, 0)
    assert torch.equal(q[:, :, 0], q0[:, :, 0])  # position 0 is not rotated
    assert not torch.allclose(q[:, :, 1:], q0[:, :, 1:], atol=1e-3)


# --- decoding step by step ----------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_steps_after_a_beam_reorder_equal_the_teacher_forced_pass(positional):
    """Two steps, a reorder of the cache (beam search), a third step: the numbers of
    ``forward`` on the reordered prefix (RoPE's cache holds rotated keys; the new query and
    key are rotated by the step's absolute position)."""
    model = make_model(positional=positional)
    src, src_mask, tgt = padded_batch()
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        state = model.start(model.encode(src, src_mask), src_mask)
        for t in range(2):
            _, state, _ = model.step(state, tgt[:, t])
        state = model.reorder(state, index)
        lp, state, _ = model.step(state, tgt[index, 2])
        ref = model(src[index], src_mask[index], tgt[index, :3], None)[:, 2]
    assert state.pos == 3
    assert torch.allclose(lp, ref, atol=1e-5)


# --- checkpoints --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_checkpoint_round_trip_translates_identically(tmp_path, positional):
    trainer = Trainer(make_cfg(10, [f"model.positional={positional}", "train.retain_freed_memory=false"]),
                      tmp_path)
    trainer.run()
    ckpt = load_checkpoint(tmp_path / "last.pt")
    assert ckpt["config"]["model"]["positional"] == positional
    assert ("position.table.weight" in ckpt["model"]) is (positional == "learned")
    bundle = load_bundle(tmp_path / "last.pt")
    assert bundle.cfg.model.positional == positional
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, bundle.model.state_dict()[k]), k
    lines = ["1 2 3 4 5", "7 7 8", "9"]
    expected = Translator.from_bundle(trainer.bundle(), fast=False).translate_lines(lines, beam=2)
    assert Translator.from_bundle(bundle, fast=False).translate_lines(lines, beam=2) == expected


def test_a_checkpoint_without_the_key_loads_as_sinusoidal():
    path = ROOT / "tests" / "data" / "copy_task_v1_b02ce64.pt"
    assert "positional" not in load_checkpoint(path)["config"]["model"]  # written before the key
    bundle = load_bundle(path)
    assert bundle.cfg.model.positional == "sinusoidal"
    assert isinstance(bundle.model.position, PositionalEncoding)


# --- configuration ------------------------------------------------------------------------------


def test_config_accepts_each_option_and_defaults_to_the_sinusoid():
    assert ModelConfig().positional == "sinusoidal"
    assert Config.from_dict({"model": {}}).model.positional == "sinusoidal"
    for p in POSITIONAL_ENCODINGS:
        assert Config.from_dict({"model": {"positional": p}}).model.positional == p
    cfg = make_cfg(1, ["model.positional=rope"])
    assert cfg.model.positional == "rope"


RNN_ONLY_SINUSOID = r"model\.positional other than sinusoidal needs model\.arch: transformer .*, got "


@pytest.mark.parametrize("model, message", [
    ({"positional": "absolute"}, r"model\.positional must be sinusoidal\|learned\|rope, got 'absolute'"),
    ({"positional": "alibi"}, r"model\.positional must be sinusoidal\|learned\|rope"),
    ({"arch": "rnn", "positional": "learned"}, RNN_ONLY_SINUSOID + "'learned'"),
    ({"arch": "rnn", "positional": "rope"}, RNN_ONLY_SINUSOID + "'rope'"),
    ({"positional": "rope", "d_model": 30, "heads": 10}, r"d_model / heads must be even, got 30 / 10"),
])
def test_config_refuses_what_cannot_work(model, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_dict({"model": model}, "recipe.yaml")


def test_rnn_keeps_working_with_the_default():
    cfg = Config.from_dict({"model": {"arch": "rnn"}})
    assert cfg.model.positional == "sinusoidal"


# --- figures ------------------------------------------------------------------------------------


def test_architecture_diagram_names_the_positional_module():
    from nmtkit.viz.architecture import transformer_blocks

    def labels(p: str) -> str:
        cfg = ModelConfig(d_model=64, heads=4, max_positions=128, positional=p)
        return "\n".join(b.label for col in transformer_blocks(cfg).values() for b in col)

    assert "PositionalEncoding\n+ sin/cos table" in labels("sinusoidal")
    assert "LearnedPositionalEmbedding\n+ learned table (128 x 64)" in labels("learned")
    rope = labels("rope")
    assert "PositionalEncoding" not in rope and "d_k = 16, RoPE" in rope
    assert "source attention (memory), h = 4\n" in rope + "\n"  # not rotated
