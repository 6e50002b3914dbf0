"""The audit's figures, built for a paper: one builder per figure, each returning a matplotlib Figure.

Every figure uses constrained layout, is saved at :data:`DPI` (≥ 150), labels both axes with
their units, centres every diverging colour map on 0 (symmetric limits, so the zeros of an
operator read as white, not as a colour), and uses a log scale where one large value would
flatten the rest. ``tests/audit/test_audit_figures.py`` renders each one and checks the layout
(no overlapping text, all text inside the canvas). What each panel shows is in ``docs/audit.md``.

Heatmaps show every head when a layer has at most :data:`MAX_HEADS_SHOWN` heads; otherwise
that many heads evenly spaced from the first to the last (the selection is in the title).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_path
from .stats import EPS_F32, NUMRANK_FACTOR

#: Resolution of every saved PNG (dots per inch).
DPI = 200
#: At most this many heads per layer in a heatmap figure (evenly spaced when there are more).
MAX_HEADS_SHOWN = 8
#: Diverging colour map of the heatmaps (centred on 0 by a symmetric norm).
DIVERGING = "RdBu_r"
#: Matplotlib settings of every figure: small serif-free fonts sized for a two-column paper.
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
         "legend.fontsize": 7, "figure.constrained_layout.use": True}
_NUMRANK_TOL = NUMRANK_FACTOR * EPS_F32


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: A heatmap switches to a symmetric-log colour scale when max|G| exceeds this many times the 99th
#: percentile of |G| (one outlier would otherwise wash every other entry out to white).
OUTLIER_RATIO = 10.0


def centred_norm(values: np.ndarray) -> Any:
    """A diverging norm centred on 0 with symmetric limits ±max|values| (±1 for an all-zero array).

    Linear, or symmetric-log (linear within ±the 99th percentile of |values|) when the maximum
    exceeds :data:`OUTLIER_RATIO` times that percentile.
    """
    from matplotlib.colors import CenteredNorm, SymLogNorm

    mag = np.abs(values[np.isfinite(values)])
    half = float(mag.max()) if mag.size else 0.0
    if half <= 0:
        return CenteredNorm(vcenter=0.0, halfrange=1.0)
    p99 = float(np.percentile(mag, 99))
    if p99 > 0 and half > OUTLIER_RATIO * p99:
        return SymLogNorm(linthresh=p99, vmin=-half, vmax=half, base=10)
    return CenteredNorm(vcenter=0.0, halfrange=half)


def heads_shown(n_heads: int) -> list[int]:
    """Every head, or :data:`MAX_HEADS_SHOWN` evenly spaced ones (first and last included)."""
    if n_heads <= MAX_HEADS_SHOWN:
        return list(range(n_heads))
    return sorted({round(float(x)) for x in np.linspace(0, n_heads - 1, MAX_HEADS_SHOWN)})


def _layer_colours(n: int) -> list[Any]:
    plt = pyplot()
    cmap = plt.get_cmap("viridis")
    return [cmap(x) for x in np.linspace(0.0, 0.85, max(n, 1))]


def _spectra_panel(ax: Any, per_layer: list[np.ndarray], colours: list[Any]) -> float:
    """Draw s_i/s_1 of every row of each layer's [n, d] singular values; returns the smallest positive ratio."""
    lowest = _NUMRANK_TOL
    for li, rows in enumerate(per_layer):
        idx = np.arange(1, rows.shape[-1] + 1)
        s1 = np.where(rows[:, :1] > 0, rows[:, :1], 1.0)
        ratio = np.where(rows > 0, rows / s1, np.nan)  # zeros cannot sit on a log axis
        ax.plot(idx, ratio.T, color=colours[li], lw=0.6, alpha=0.6)
        finite = ratio[np.isfinite(ratio) & (ratio > 0)]
        if finite.size:
            lowest = min(lowest, float(finite.min()))
    ax.axhline(_NUMRANK_TOL, color="k", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("singular value index i")
    return lowest


def _spectra_legend(fig: Any, colours: list[Any]) -> None:
    plt = pyplot()
    handles = [plt.Line2D([], [], color=c, lw=1.2, label=f"layer {li}") for li, c in enumerate(colours)]
    handles.append(plt.Line2D([], [], color="k", ls="--", lw=0.8, label=r"rank cut $64\,\epsilon_{f32}$"))
    fig.legend(handles=handles, loc="outside right center", frameon=False)


def spectra_figure(raw: Mapping[str, np.ndarray]) -> Any:
    """Normalized singular spectra s_i/s_1 of A, A_LM and G_LM: every (prompt, head), coloured by layer."""
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(7.0, 2.6), sharey=True)
        colours = _layer_colours(raw["A_sv"].shape[1])
        lowest = _NUMRANK_TOL
        for ax, key, title in zip(axes, ("A_sv", "ALM_sv", "GLM_sv"), ("$A$", "$A_{LM}$", "$G_{LM}$"), strict=True):
            sv = raw[key]  # [P, L, H, d]
            per_layer = [sv[:, li].reshape(-1, sv.shape[-1]) for li in range(sv.shape[1])]
            lowest = min(lowest, _spectra_panel(ax, per_layer, colours))
            ax.set_title(title)
        axes[0].set_ylabel(r"$s_i / s_1$ (relative)")
        axes[0].set_ylim(max(lowest / 3, 1e-300), 3.0)
        _spectra_legend(fig, colours)
    return _finish(fig)


def _symlog_ticks(linthresh: float, top: float) -> list[float]:
    """Colour-bar ticks of a symmetric-log scale: 0 and ±the largest power of ten within the range."""
    k = 10.0 ** np.floor(np.log10(top))
    return [-k, 0.0, k] if k > linthresh else [0.0]


def heatmaps_figure(g: np.ndarray, title: str) -> Any:
    """Heatmaps of operators g [L, H, d, d]: one row per layer, one colour bar per layer, centred on 0."""
    from matplotlib.colors import SymLogNorm
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    g = np.asarray(g, dtype=np.float64)
    n_layers, n_heads = g.shape[0], g.shape[1]
    heads = heads_shown(n_heads)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(n_layers, len(heads), figsize=(1.45 * len(heads) + 1.3, 1.45 * n_layers + 0.6),
                                 squeeze=False, sharex=True, sharey=True)
        for li in range(n_layers):
            norm = centred_norm(g[li, heads])
            for col, h in enumerate(heads):
                ax = axes[li, col]
                # aspect "auto": the panel fills its grid cell (fixed-aspect images defeat constrained
                # layout's colour-bar placement); the figure size keeps the cells close to square
                im = ax.imshow(g[li, h], cmap=DIVERGING, norm=norm, interpolation="nearest", aspect="auto")
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))
                ax.yaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))
                ax.set_title(f"layer {li}, head {h}")
                if col == 0:
                    ax.set_ylabel("row index")
                if li == n_layers - 1:
                    ax.set_xlabel("column index")
            cb = fig.colorbar(im, ax=axes[li, :], shrink=0.9, fraction=min(0.15, 0.3 / len(heads)), pad=0.02)
            if isinstance(norm, SymLogNorm):
                cb.set_ticks(_symlog_ticks(norm.linthresh, norm.vmax))
                cb.minorticks_off()
                cb.set_label("entry (symmetric log)")
            else:
                cb.set_label("entry")
        shown = "all heads" if len(heads) == n_heads else f"{len(heads)} of {n_heads} heads, evenly spaced"
        fig.suptitle(f"{title}, {shown}")
    return _finish(fig)


def _zero_floor(*series: np.ndarray) -> float:
    """Where exact zeros are drawn on a log axis: a decade below the smallest positive value (1e-17 if none)."""
    pos = np.concatenate([np.ravel(x) for x in series])
    pos = pos[np.isfinite(pos) & (pos > 0)]
    return float(pos.min()) / 10 if pos.size else 1e-17


def decode_figure(raw: Mapping[str, np.ndarray]) -> Any:
    """Cached vs recomputed decoding per step: ε_G (max over layers) and margin against 2B, per prompt.

    Log y axes; exact zeros (ε_G at step 0, every step of a collapsed model) are drawn on a
    dotted floor line a decade below the smallest positive value, named in the legend.
    """
    plt = pyplot()
    eg = raw["epsG_steps"].max(axis=-1)  # [P, max T]; NaN past a prompt's own steps
    margin, two_b = raw["margin_steps"], 2 * raw["dlogit_steps"]  # [P, max T]
    n_steps = raw["decode_T"] if "decode_T" in raw else np.full(eg.shape[0], eg.shape[1])
    steps = np.arange(eg.shape[1])
    floors = (_zero_floor(eg), _zero_floor(margin, two_b))
    with plt.rc_context(STYLE):
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(7.0, 2.7))
        colours = plt.get_cmap("tab10")
        for p, t in enumerate(int(n) for n in n_steps):
            c, x = colours(p % 10), steps[:t]
            ax0.plot(x, np.where(eg[p, :t] > 0, eg[p, :t], floors[0]), color=c, lw=1.0, marker="o", ms=2)
            ax1.plot(x, np.where(margin[p, :t] > 0, margin[p, :t], floors[1]), color=c, lw=1.0)
            ax1.plot(x, np.where(two_b[p, :t] > 0, two_b[p, :t], floors[1]), color=c, lw=1.0, ls="--")
        for ax, floor, series in ((ax0, floors[0], eg), (ax1, floors[1], margin)):
            ax.set_xlabel("decoding step")
            if not np.any(series > 0):  # nothing positive to put on a log axis: say so instead
                ax.cla()
                ax.set_xlabel("decoding step")
                ax.set_yticks([])
                ax.set_xlim(steps[0] - 0.5, steps[-1] + 0.5)
                ax.text(0.5, 0.5, "exactly 0 at every step\nof every prompt", transform=ax.transAxes, ha="center", va="center")
                continue
            ax.set_yscale("log")
            ax.axhline(floor, color="0.5", lw=0.8, ls=":")
        ax0.set_ylabel(r"$\varepsilon_G$ (relative RMS, max over layers)")
        ax0.set_title(r"cached vs recomputed $G_{LM}$")
        ax1.set_ylabel("logit difference (logits)")
        ax1.set_title("top-2 margin (solid) against 2B (dashed)")
        handles = [plt.Line2D([], [], color=colours(p % 10), lw=1.2, label=f"prompt {p}") for p in range(eg.shape[0])]
        handles += [plt.Line2D([], [], color="0.3", lw=1.0, label="margin"),
                    plt.Line2D([], [], color="0.3", lw=1.0, ls="--", label=r"$2B = 2\,\max|\Delta \mathrm{logit}|$"),
                    plt.Line2D([], [], color="0.5", lw=0.8, ls=":", label="exact 0 (drawn here)")]
        fig.legend(handles=handles, loc="outside right center", frameon=False)
    return _finish(fig)


def operator_spectra_figure(g: np.ndarray, name: str) -> Any:
    """Normalized singular spectra of constant operators g [L, H, d, d], every head, coloured by layer."""
    plt = pyplot()
    sv = np.linalg.svd(np.asarray(g, dtype=np.float64), compute_uv=False)  # [L, H, d]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.2, 2.8))
        colours = _layer_colours(sv.shape[0])
        lowest = _spectra_panel(ax, list(sv), colours)
        ax.set_ylim(max(lowest / 3, 1e-300), 3.0)
        ax.set_ylabel(r"$s_i / s_1$ (relative)")
        ax.set_title(f"{name}: singular spectra, every head")
        _spectra_legend(fig, colours)
    return _finish(fig)


def _finish(fig: Any) -> Any:
    """Tick labels at the style's size (ticks are created at draw time, outside the style context)."""
    for ax in fig.axes:
        ax.tick_params(labelsize=STYLE["xtick.labelsize"])
    return fig


def save(fig: Any, path: Path) -> str:
    """Write ``fig`` as PNG at :data:`DPI` (atomically), close it, return the file name."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    pyplot().close(fig)
    return path.name


def audit_figures(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{file name: Figure}`` of a model audit (G_LM heatmaps of the first prompt)."""
    return {
        "spectra.png": spectra_figure(raw),
        "G_heatmaps.png": heatmaps_figure(raw["G_LM"][0], "$G_{LM}$ of prompt 0"),
        "decode_epsG_margin.png": decode_figure(raw),
    }


def operator_figures(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{file name: Figure}`` of an operator audit: heatmaps and spectra of each array."""
    out = {}
    for name, g in arrays.items():
        g = np.asarray(g, dtype=np.float64)
        g = g[None] if g.ndim == 3 else g
        out[f"operators_{name}.png"] = heatmaps_figure(g, name)
        out[f"operators_{name}_spectra.png"] = operator_spectra_figure(g, name)
    return out


def _write(build: Any, data: Any, out: Path) -> list[str]:
    try:
        figs = build(data)
    except ImportError:  # matplotlib is optional: no figures, the rest of the audit stands
        return []
    return [save(fig, out / name) for name, fig in figs.items()]


def write_plots(raw: Mapping[str, np.ndarray], out: Path) -> list[str]:
    """Save the model audit's figures into ``out``; returns the file names ([] without matplotlib)."""
    return _write(audit_figures, raw, out)


def write_operator_plots(arrays: Mapping[str, np.ndarray], out: Path) -> list[str]:
    """Save the operator audit's figures into ``out``; returns the file names ([] without matplotlib)."""
    return _write(operator_figures, arrays, out)


__all__ = ["DPI", "MAX_HEADS_SHOWN", "audit_figures", "centred_norm", "heads_shown", "operator_figures",
           "write_operator_plots", "write_plots"]
