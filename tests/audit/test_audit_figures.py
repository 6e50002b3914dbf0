"""The audit's figures are rendered here and their layout is checked programmatically.

For every figure of a model audit and of an operator audit: no two texts overlap (titles,
axis labels, tick labels, colour-bar labels, legends), every text lies inside the canvas,
diverging colour maps are centred on 0, the PNGs are saved at ≥ 150 dpi. Negative controls
show each check catches a deliberately broken figure.
"""

from __future__ import annotations

import numpy as np
import pytest

from plga.audit import AuditSizes, run_audit
from plga.audit.figures import (
    DPI,
    MAX_HEADS_SHOWN,
    audit_figures,
    heads_shown,
    heatmaps_figure,
    operator_figures,
    pyplot,
)
from plga.audit.model import random_params

from .figure_layout import layout_problems, norm_problems
from .tiny import CONFIG, power_stage_w_zero

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

SIZES = AuditSizes(n_decode_prompts=3, n_decode_steps=5, n_order_prompts=2, n_order_tokens=4, n_pool_rows=8,
                   n_pairs=20, o3_prompts=1, o4_contexts=1, o4_cand_len=2)
MIN_DPI = 150


@pytest.fixture(scope="module", params=["random", "collapsed"])
def audited(request, tmp_path_factory):
    """(raw arrays, output folder) of an audit with plots: a random and a collapsed (W = 0) model."""
    params = random_params(CONFIG, seed=3) if request.param == "random" else power_stage_w_zero()
    out = tmp_path_factory.mktemp(request.param)
    rec = run_audit(checkpoint=(params, CONFIG), out_dir=out, sizes=SIZES, progress=False, plots=True)
    with np.load(out / "audit_raw.npz") as z:
        raw = {k: z[k] for k in z.files}
    return raw, out, rec


def _png_dpi(path) -> float:
    with Image.open(path) as im:
        return float(min(im.info["dpi"]))


def test_model_audit_figures_have_a_clean_layout(audited):
    raw, _, _ = audited
    figs = audit_figures(raw)
    for name, fig in figs.items():
        assert layout_problems(fig) == [], name
        assert norm_problems(fig) == [], name
        pyplot().close(fig)


def test_saved_pngs_are_high_resolution(audited):
    _, out, rec = audited
    assert rec["plots"] == ["spectra.png", "G_heatmaps.png", "decode_epsG_margin.png"]
    assert DPI >= MIN_DPI
    for name in rec["plots"]:
        assert _png_dpi(out / name) >= MIN_DPI, name


def test_heatmaps_show_every_head_or_a_documented_selection():
    """14 heads × 5 layers (the published shape): 8 evenly spaced heads, named in the title."""
    assert heads_shown(4) == [0, 1, 2, 3]
    sel = heads_shown(14)
    assert len(sel) == MAX_HEADS_SHOWN and sel[0] == 0 and sel[-1] == 13 and sel == sorted(set(sel))
    g = np.random.default_rng(0).normal(size=(5, 14, 16, 16))
    g[4, 3, 2, 2] = 1e4  # one outlier: the layer switches to a symmetric-log scale, still centred
    fig = heatmaps_figure(g, "G")
    assert "8 of 14 heads, evenly spaced" in fig._suptitle.get_text()
    titles = {ax.get_title() for ax in fig.axes}
    assert {f"layer 0, head {h}" for h in sel} <= titles and "layer 0, head 1" not in titles
    assert layout_problems(fig) == [] and norm_problems(fig) == []
    pyplot().close(fig)


def test_operator_audit_figures_have_a_clean_layout():
    g = np.random.default_rng(1).normal(size=(3, 4, 16, 16))
    for name, fig in operator_figures({"G_LM": g, "single": g[0]}).items():
        assert layout_problems(fig) == [], name
        assert norm_problems(fig) == [], name
        pyplot().close(fig)


def test_trained_g_lm_figures_have_a_clean_layout():
    """The shipped trained G_LM (PLDRv51-110M-1, [5, 14, 64, 64]): the published shape, real magnitudes."""
    from plga.datafiles import TRAINED_G_LM, data_file

    path = data_file(TRAINED_G_LM)
    if path is None:
        pytest.skip(f"{TRAINED_G_LM} not shipped in this checkout")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    for name, fig in operator_figures(arrays).items():
        assert layout_problems(fig) == [], name
        assert norm_problems(fig) == [], name
        pyplot().close(fig)


# --- negative controls: each check catches a broken figure -----------------------------------


def test_overlap_is_caught_without_constrained_layout():
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(3, 2), layout=None)
    for ax in axes:
        ax.plot([0, 1e6], [0, 1e6])
        ax.set_ylabel("a very long axis label that cannot fit")
        ax.set_yticks([0, 5e5, 1e6], ["zero", "five hundred thousand", "one million"])
    problems = layout_problems(fig)
    plt.close(fig)
    assert any(p.startswith("overlap:") for p in problems), problems
    assert any(p.startswith("outside the canvas:") for p in problems), problems


def test_text_off_the_canvas_is_caught():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.plot([0, 1], [0, 1])
    assert layout_problems(fig) == [], "the control figure itself is clean"
    fig.suptitle("a title far too long to fit across a figure only three inches wide, so it is cut")
    problems = layout_problems(fig)
    plt.close(fig)
    assert any("outside the canvas: suptitle" in p for p in problems), problems


def test_off_centre_diverging_norm_is_caught():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.imshow(np.eye(4) + 0.1, cmap="RdBu_r")  # default norm: [0.1, 1.1], so the zeros are not white
    problems = norm_problems(fig)
    plt.close(fig)
    assert problems and "not symmetric about 0" in problems[0]


def test_low_resolution_png_is_caught(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    fig.savefig(tmp_path / "low.png", dpi=90)
    plt.close(fig)
    assert _png_dpi(tmp_path / "low.png") < MIN_DPI
