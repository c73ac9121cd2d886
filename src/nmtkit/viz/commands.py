"""What ``nmtkit plot FIGURE`` does: pick the figure, draw it, write the files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

from ..config import ModelConfig
from ..errors import UserError
from . import concepts, homework
from ._common import save_figure

CONCEPTS: dict[str, tuple[str, Callable[[], Figure]]] = {
    "mask": ("mask.png", concepts.mask_figure),
    "positional": ("positional.png", concepts.positional_figure),
    "lr-schedule": ("lr_schedule.png", concepts.lr_schedule_figure),
    "label-smoothing": ("label_smoothing.png", concepts.label_smoothing_figure),
}
"""Figures that need no model or run: name -> (default file name, builder)."""

CONFIGURED = ("architecture", "temperature", "teacher-forcing")
"""Figures that need no model or run but may be drawn from a recipe (``--config``)."""

FIGURES = (*CONCEPTS, *CONFIGURED, "curves", "compare", "attention", "all")


def configured_figures(figure: str, model_cfg: ModelConfig | None, name: str,
                       arch: str | None) -> list[tuple[str, Figure]]:
    """(default file name, figure) of ``architecture``, ``temperature``, ``teacher-forcing``,
    or of all three (``figure == "all"``). ``model_cfg``: the model section of ``--config``
    (called ``name``); ``arch``: ``transformer`` or ``rnn`` for the architecture figure
    (default: the config's, else both)."""
    from .architecture import architecture_figure

    out: list[tuple[str, Figure]] = []
    if figure in ("architecture", "all"):
        both = ["transformer", "rnn"] if figure == "all" else ["transformer"]
        archs = [arch] if arch else [model_cfg.arch] if model_cfg else both
        for a in archs:
            filename = "architecture.png" if a == "transformer" else f"architecture_{a}.png"
            out.append((filename, architecture_figure(model_cfg, a)))
    if figure in ("temperature", "all"):
        temps = homework.TEMPERATURES
        if model_cfg is not None and model_cfg.attention_temperature not in temps:
            temps = tuple(sorted({*temps, model_cfg.attention_temperature}))
        out.append(("temperature.png", homework.temperature_figure(temperatures=temps)))
    if figure in ("teacher-forcing", "all"):
        tf = ({f"{name}: {homework.teacher_forcing_label(model_cfg)}": model_cfg}
              if model_cfg is not None else None)
        out.append(("teacher_forcing.png", homework.teacher_forcing_figure(tf)))
    return out


def plot(figure: str, out_dir: str | Path | None = None, output: str | Path | None = None,
         run: str | Path | None = None, model: str | Path | None = None, text: str | None = None,
         beam: int | None = None, html: bool = False, device: str = "cpu",
         dpi: int = 100, config: str | Path | None = None, overrides: list[str] | None = None,
         arch: str | None = None, runs: list[str | Path] | None = None,
         labels: list[str] | None = None, tgt_lang: str | None = None) -> list[Path]:
    """Write one figure (or ``all``) and return the paths written.

    ``output`` names the file of a single figure (for ``attention``: the stem of
    ``<stem>_<kind>.png`` and ``<stem>.html``); otherwise files go to ``out_dir`` (default:
    the current directory) under their default names. ``all`` writes every figure that
    needs no model, plus ``curves`` with ``run`` and ``attention`` with ``model``.
    ``config`` (a YAML recipe, with ``overrides`` as ``--set``) gives the numbers of
    ``architecture`` and ``teacher-forcing`` (and adds its temperature to ``temperature``);
    ``arch`` picks the ``architecture`` diagram (``transformer`` or ``rnn``).
    ``compare`` draws the validation curves of several ``runs`` (named by ``labels``) in one
    figure. ``tgt_lang``: the language ``attention`` translates into (a model of
    ``data.directions``).
    """
    if figure not in FIGURES:
        raise UserError(f"plot: unknown figure {figure!r} (choose from {', '.join(FIGURES)})")
    if output is not None and figure == "all":
        raise UserError("plot all writes several files: give --out DIR, not -o FILE")
    out = Path(out_dir) if out_dir is not None else Path(".")
    if figure == "curves" and run is None:
        raise UserError("plot curves needs --run RUN_DIR (a directory with metrics.csv)")
    if figure == "compare" and len(runs or []) < 2:
        raise UserError("plot compare needs two or more --run RUN_DIR (each with metrics.csv)")
    if figure == "attention" and (model is None or not text):
        raise UserError('plot attention needs --model CKPT and --text "source sentence"')
    if figure == "all" and model is not None and not text:
        raise UserError('plot all --model CKPT also needs --text "source sentence"')
    if overrides and config is None:
        raise UserError("plot: --set needs --config RECIPE.yaml")
    written: list[Path] = []
    for name, (filename, build) in CONCEPTS.items():
        if figure in (name, "all"):
            written.append(save_figure(build(), output or out / filename, dpi=dpi))
    if figure in (*CONFIGURED, "all"):
        from ..config import load

        cfg = load(config, overrides) if config is not None else None
        for filename, fig in configured_figures(figure, cfg.model if cfg else None,
                                                cfg.name if cfg else "", arch):
            written.append(save_figure(fig, output or out / filename, dpi=dpi))
    if figure == "curves" or (figure == "all" and run is not None):
        from .curves import write_curves

        assert run is not None  # checked above
        run_path = Path(run)
        run_dir = run_path.parent if run_path.is_file() else run_path
        written.append(write_curves(run_dir, output or out / "curves.png", dpi=dpi))
    if figure == "compare":
        from .curves import COMPARE_PNG, write_comparison

        written.append(write_comparison(list(runs or []), output or out / COMPARE_PNG,
                                        labels=labels, dpi=dpi))
    if figure == "attention" or (figure == "all" and model is not None):
        from ..checkpoint import load_bundle
        from .attention import attention_for_text, write_attention

        assert model is not None and text is not None  # checked above
        att = attention_for_text(load_bundle(model, device), text, beam, tgt_lang)
        stem = Path(output).with_suffix("") if output else out / "attention"
        written += write_attention(att, stem, html=html, dpi=dpi)
    return written
