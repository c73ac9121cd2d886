"""The architecture figures: the paper's Figure 1 and the homework's encoder-decoder diagram.

Drawn from a :class:`nmtkit.config.ModelConfig`, so the boxes carry the real numbers of a
recipe (layers, d_model, heads, d_ff, pre/post norm; for the RNN its sizes, attention score
and temperature), and labelled with the module names of :mod:`nmtkit.models.transformer`
and :mod:`nmtkit.models.rnn`. :func:`transformer_blocks` and :func:`rnn_blocks` are the pure
data (the boxes, bottom to top, of each column); the ``*_figure`` functions draw them.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ..config import ModelConfig, dec_layers, enc_layers
from ..errors import UserError
from ._common import new_figure

ARCHITECTURES = ("transformer", "rnn")
BOX_WIDTH = 5.0
LEFT, RIGHT = 2.8, 9.9  # the columns' centres
SEED_RNN = ModelConfig(arch="rnn", layers=2, emb_dim=256, rnn_hidden=512, dropout=0.5,
                       teacher_forcing=0.5, tie_output=False, tie_all=False)
"""The recurrent model of seed 003 (its ENC/DEC sizes, 2 layers, dropout 0.5, ratio 0.5)."""

COLORS = {"embed": "#f6d6d6", "attention": "#fbe3b5", "norm": "#f4f1b8", "ffn": "#cde4f7",
          "output": "#d9ead3", "rnn": "#dcd3ee", "plain": "white"}


@dataclass(frozen=True)
class Block:
    """One box: the module it is (``name``, as in the code), a line of detail, a colour kind,
    and whether it sits inside the repeated layer (``in_layer``)."""

    name: str
    detail: str
    kind: str
    in_layer: bool = False

    @property
    def label(self) -> str:
        return f"{self.name}\n{self.detail}" if self.detail else self.name


def _sublayer(cfg: ModelConfig) -> Block:
    rule = ("LayerNorm(x + Dropout(Sublayer(x)))" if cfg.norm == "post"
            else "x + Dropout(Sublayer(LayerNorm(x)))")
    return Block("SublayerConnection", rule, "norm", True)


def transformer_blocks(cfg: ModelConfig) -> dict[str, list[Block]]:
    """The boxes of Figure 1 for ``cfg``: ``encoder`` and ``decoder`` columns, bottom to top."""
    d, h = cfg.d_model, cfg.heads
    dk = d // h if h else d
    embed = Block("Embeddings", f"lookup x sqrt(d_model = {d})", "embed")
    position = {  # model.positional: what is added to the embeddings
        "sinusoidal": Block("PositionalEncoding", f"+ sin/cos table, dropout {cfg.dropout:g}", "embed"),
        "learned": Block("LearnedPositionalEmbedding",
                         f"+ learned table ({cfg.max_positions} x {d}), dropout {cfg.dropout:g}", "embed"),
        "rope": Block("EmbeddingDropout", f"dropout {cfg.dropout:g} (RoPE: no table)", "embed"),
    }[cfg.positional]
    rope = ", RoPE" if cfg.positional == "rope" else ""  # rotary queries and keys
    ffn = Block("PositionwiseFeedForward", f"ReLU: {d} -> {cfg.d_ff} -> {d}", "ffn", True)
    encoder = [embed, position,
               Block("MultiHeadAttention", f"self-attention, h = {h}, d_k = {dk}{rope}", "attention", True),
               _sublayer(cfg), ffn, _sublayer(cfg)]
    decoder = [embed, position,
               Block("MultiHeadAttention", f"masked self-attention, h = {h}, d_k = {dk}{rope}",
                     "attention", True),
               _sublayer(cfg),
               Block("MultiHeadAttention", f"source attention (memory), h = {h}", "attention",
                     True),
               _sublayer(cfg), ffn, _sublayer(cfg)]
    if cfg.norm == "pre":  # a pre-norm stack ends with a layer norm
        encoder.append(Block("LayerNorm", "encoder_norm", "norm"))
        decoder.append(Block("LayerNorm", "decoder_norm", "norm"))
    tied = ", tied to Embeddings" if cfg.tie_output else ""
    decoder += [Block("generator", f"Linear {d} -> vocabulary{tied}", "output"),
                Block("log_softmax", "output probabilities", "output")]
    return {"encoder": encoder, "decoder": decoder}


def rnn_blocks(cfg: ModelConfig) -> dict[str, list[Block]]:
    """The boxes of the homework's encoder-decoder for ``cfg``: ``encoder`` and ``decoder``
    columns, bottom to top (the decoder's boxes are one step t)."""
    e, hid = cfg.emb_dim, cfg.rnn_hidden
    dirs = 2 if cfg.bidirectional else 1
    lstm = (f"biLSTM x {enc_layers(cfg)}: {hid // 2} fwd + {hid // 2} bwd = {hid}"
            if cfg.bidirectional else f"LSTM x {enc_layers(cfg)}, {hid}")
    score = {"concat": "v^T tanh(W [h_j; s])", "general": "h_j^T W s", "dot": "h_j^T s"}[cfg.attention]
    encoder = [Block("RNNEncoder.embed", f"Embedding {e}, dropout {cfg.dropout:g}", "embed"),
               Block("RNNEncoder.rnn", lstm, "rnn"),
               Block("RNNEncoder.bridge", f"s_0 = tanh(W [h_fwd; h_bwd]): {dirs * (hid // dirs)} -> {hid}",
                     "rnn")]
    out = f"{e + 2 * hid} -> {e} -> vocabulary (tied)" if cfg.tie_output else (
        f"{e + 2 * hid} -> vocabulary")
    decoder = [Block("tgt_embed", f"y_t = Embedding {e} of the previous token", "embed"),
               Block("RNNAttention", f"{cfg.attention}: a_t = softmax({score} / T)", "attention"),
               Block("attention_context", f"w_t = sum_j a_tj h_j  ({hid})", "attention"),
               Block("decoder_rnn: GRU", f"s_t = GRU([y_t; w_t], s_{{t-1}}), {dec_layers(cfg)} x {hid}",
                     "rnn"),
               Block("generator", f"f([y; w; s]): {out}", "output"),
               Block("log_softmax", "P(y_{t+1} | y_<=t, x)", "output")]
    return {"encoder": encoder, "decoder": decoder}


def _box(ax: Axes, x: float, y: float, w: float, h: float, block: Block) -> None:
    ax.add_patch(FancyBboxPatch((x - w / 2, y), w, h, boxstyle="round,pad=0,rounding_size=0.12",
                                fc=COLORS[block.kind], ec="black", lw=0.8))
    ax.text(x, y + h / 2, block.label, ha="center", va="center", fontsize=7.5, clip_on=False)


def _arrow(ax: Axes, x0: float, y0: float, x1: float, y1: float, **kw: object) -> None:
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops={"arrowstyle": "-|>", "lw": 0.9, "color": "black", **kw})


def _column(ax: Axes, x: float, blocks: list[Block], layers: int, layer_name: str,
            bottom_text: str, frame_side: float) -> dict[str, float]:
    """Stack ``blocks`` upwards from y = 0, the ``in_layer`` ones inside a frame labelled
    ``<layer_name> x N = <layers>``. Returns the middle y of each box (``<index>:<name>``)
    and the ``top`` of the last."""
    w, h, gap = BOX_WIDTH, 0.72, 0.32
    ax.text(x, 0.0, bottom_text, ha="center", va="center", fontsize=8, style="italic")
    y, prev_top = 0.45, 0.2
    mids: dict[str, float] = {}
    inside: list[float] = []  # bottoms and tops of the boxes in the repeated layer
    for i, block in enumerate(blocks):
        if i > 0 and block.in_layer != blocks[i - 1].in_layer:
            y += 0.25  # room for the frame's edge
        _arrow(ax, x, prev_top, x, y)
        _box(ax, x, y, w, h, block)
        if block.in_layer:
            inside += [y, y + h]
        mids[f"{i}:{block.name}"] = y + h / 2
        prev_top = y + h
        y += h + gap
    if inside:
        lo, hi = min(inside) - 0.2, max(inside) + 0.2
        ax.add_patch(FancyBboxPatch((x - w / 2 - 0.25, lo), w + 0.5, hi - lo,
                                    boxstyle="round,pad=0,rounding_size=0.2", fc="#f2f2f2",
                                    ec="grey", lw=1.0, zorder=0))
        ax.text(x + frame_side * (w / 2 + 0.4), (lo + hi) / 2, f"{layer_name}\nx N = {layers}",
                ha="left" if frame_side > 0 else "right", va="center", fontsize=9, weight="bold")
    mids["top"] = prev_top
    return mids


def _axes(fig: Figure) -> Axes:
    ax = fig.add_subplot()
    ax.axis("off")
    return ax


def _fit(fig: Figure, ax: Axes, top: float) -> None:
    """Limits around what was drawn (up to ``top``), and a figure of matching proportions."""
    ax.set_xlim(-1.6, 14.3)
    ax.set_ylim(-0.4, top + 0.3)
    ax.set_aspect("equal")
    fig.set_size_inches(10, 10 * (top + 0.9) / 15.9)


def _route(ax: Axes, points: list[tuple[float, float]], color: str, **kw: object) -> None:
    """A line through ``points`` ending in an arrow head."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs[:-1], ys[:-1], color=color, lw=1.2, **kw)  # type: ignore[arg-type]
    _arrow(ax, xs[-2], ys[-2], xs[-1], ys[-1], color=color, lw=1.2)


def transformer_figure(cfg: ModelConfig | None = None) -> Figure:
    """Figure 1 of Vaswani et al. (2017) for ``cfg`` (default: the base model)."""
    cfg = cfg or ModelConfig()
    blocks = transformer_blocks(cfg)
    fig = new_figure(10, 10)
    ax = _axes(fig)
    enc = _column(ax, LEFT, blocks["encoder"], enc_layers(cfg), "EncoderLayer", "source ids", -1)
    dec = _column(ax, RIGHT, blocks["decoder"], dec_layers(cfg), "DecoderLayer",
                  "target ids (shifted right)", +1)
    # The encoder's output (the memory) feeds the source attention of every decoder layer.
    src_attn = dec[f"4:{blocks['decoder'][4].name}"]
    mid_x, above = (LEFT + RIGHT) / 2, enc["top"] + 0.45
    _route(ax, [(LEFT, enc["top"]), (LEFT, above), (mid_x, above), (mid_x, src_attn),
                (RIGHT - BOX_WIDTH / 2, src_attn)], "C3")
    ax.text(mid_x - 0.15, above + 0.12, "memory: to every DecoderLayer", color="C3", fontsize=8,
            va="bottom", ha="right")
    norm = ("post-norm (the paper)" if cfg.norm == "post" else "pre-norm") + f", dropout {cfg.dropout:g}"
    ax.set_title(f"Transformer (nmtkit.models.transformer): d_model {cfg.d_model}, d_ff {cfg.d_ff}, "
                 f"h {cfg.heads}, N {enc_layers(cfg)}/{dec_layers(cfg)}, {norm}", fontsize=10)
    _fit(fig, ax, max(dec["top"], enc["top"] + 1.2))
    return fig


def rnn_figure(cfg: ModelConfig | None = None) -> Figure:
    """The homework's encoder-decoder with attention (nmtkit.models.rnn) for ``cfg`` (default:
    :data:`SEED_RNN`, the seed's sizes)."""
    cfg = cfg or SEED_RNN
    blocks = rnn_blocks(cfg)
    fig = new_figure(10, 10)
    ax = _axes(fig)
    enc = _column(ax, LEFT, blocks["encoder"], enc_layers(cfg), "RNNEncoder",
                  "source ids (reversed: data.reverse_source)", -1)
    dec = _column(ax, RIGHT, blocks["decoder"], dec_layers(cfg), "decoder step t",
                  "previous target token", +1)
    mid_x = (LEFT + RIGHT) / 2
    states, attn = enc["1:RNNEncoder.rnn"], dec["1:RNNAttention"]
    _route(ax, [(LEFT + BOX_WIDTH / 2, states), (mid_x, states), (mid_x, attn),
                (RIGHT - BOX_WIDTH / 2, attn)], "C3")
    ax.text(LEFT + BOX_WIDTH / 2 + 0.1, states + 0.1, "H = h_1 .. h_S", color="C3", fontsize=8,
            va="bottom")
    bridge, gru = enc["2:RNNEncoder.bridge"], dec["3:decoder_rnn: GRU"]
    _route(ax, [(LEFT + BOX_WIDTH / 2, bridge), (mid_x + 0.4, bridge), (mid_x + 0.4, gru),
                (RIGHT - BOX_WIDTH / 2, gru)], "C0", ls="--")
    ax.text(mid_x + 0.5, (bridge + gru) / 2, "s_0", color="C0", fontsize=8)
    tf = (f"teacher forcing {cfg.teacher_forcing:g}" if not cfg.teacher_forcing_anneal_steps else
          f"teacher forcing {cfg.teacher_forcing:g} -> {cfg.teacher_forcing_min:g}")
    ax.set_title(f"RNN encoder-decoder (nmtkit.models.rnn): emb {cfg.emb_dim}, hidden "
                 f"{cfg.rnn_hidden}, {cfg.attention} attention, T = {cfg.attention_temperature:g}, "
                 f"dropout {cfg.dropout:g}, {tf}", fontsize=9)
    _fit(fig, ax, dec["top"])
    return fig


def architecture_figure(cfg: ModelConfig | None = None, arch: str | None = None) -> Figure:
    """The diagram of ``arch`` (default: ``cfg.arch``, else the Transformer)."""
    arch = arch or (cfg.arch if cfg is not None else "transformer")
    if arch not in ARCHITECTURES:
        raise UserError(f"no architecture figure for {arch!r} (choose from {', '.join(ARCHITECTURES)})")
    if cfg is not None and cfg.arch != arch:
        cfg = None  # a Transformer recipe has no RNN sizes to show, and the other way round
    return transformer_figure(cfg) if arch == "transformer" else rnn_figure(cfg)
