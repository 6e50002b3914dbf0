"""Programmatic layout checks of a rendered matplotlib figure (used by ``test_audit_figures.py``).

:func:`layout_problems` draws the figure and returns a list of problems, empty when the layout
is clean: a visible text (titles, axis labels, tick labels, colour-bar labels, suptitle, legend
boxes) that leaves the canvas, or two such texts whose boxes overlap. :func:`norm_problems`
lists diverging colour maps whose norm is not centred on 0.
"""

from __future__ import annotations

from typing import Any

#: Colour maps that diverge from a centre value (their norm must be centred on 0).
DIVERGING_CMAPS = {"RdBu", "RdBu_r", "coolwarm", "bwr", "seismic", "PuOr", "PuOr_r", "PiYG", "BrBG", "RdYlBu", "RdYlBu_r"}
#: Slack in display pixels: boxes that merely touch are not an overlap.
PAD_PX = 0.5


def _drawn_ticks(axis: Any) -> list[Any]:
    # Axis._update_ticks() returns exactly the ticks the last draw rendered (inside the view limits).
    return list(axis._update_ticks())


def _texts(fig: Any) -> list[tuple[str, Any]]:
    """(description, artist) of every visible, non-empty text of ``fig``, legends as one box each."""
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()  # the suptitle is also one of fig.texts: count each artist once

    def add(desc: str, artist: Any) -> None:
        if artist is None or id(artist) in seen or not artist.get_visible():
            return
        if hasattr(artist, "get_text") and not artist.get_text().strip():
            return
        seen.add(id(artist))
        out.append((desc, artist))

    for i, ax in enumerate(fig.axes):
        name = f"axes {i} ({ax.get_label() or ax.get_title() or 'untitled'})"
        for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
                  ax.xaxis.offsetText, ax.yaxis.offsetText):
            add(f"{name} {t.get_text()!r}", t)
        for axis, which in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            for tick in _drawn_ticks(axis):
                for lab in (tick.label1, tick.label2):
                    add(f"{name} {which}-tick {lab.get_text()!r}", lab)
        if ax.get_legend() is not None:
            add(f"{name} legend", ax.get_legend())
        for t in ax.texts:
            add(f"{name} text {t.get_text()!r}", t)
    if fig._suptitle is not None:
        add(f"suptitle {fig._suptitle.get_text()!r}", fig._suptitle)
    for t in fig.texts:
        add(f"figure text {t.get_text()!r}", t)
    for lg in fig.legends:
        add("figure legend", lg)
    return out


def layout_problems(fig: Any) -> list[str]:
    """Texts outside the canvas, and pairs of overlapping texts, after drawing ``fig``."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = [(d, a.get_window_extent(renderer)) for d, a in _texts(fig)]
    problems = []
    for d, b in boxes:
        if b.x0 < canvas.x0 - PAD_PX or b.y0 < canvas.y0 - PAD_PX or b.x1 > canvas.x1 + PAD_PX or b.y1 > canvas.y1 + PAD_PX:
            problems.append(f"outside the canvas: {d} at {tuple(round(v) for v in b.extents)} of {tuple(round(v) for v in canvas.extents)}")
    for i, (da, a) in enumerate(boxes):
        for db, b in boxes[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > PAD_PX and h > PAD_PX:
                problems.append(f"overlap: {da} and {db}")
    return problems


def norm_problems(fig: Any) -> list[str]:
    """Images (and colour bars' mappables) with a diverging colour map whose norm is not centred on 0."""
    from matplotlib.colors import CenteredNorm, TwoSlopeNorm

    problems = []
    for i, ax in enumerate(fig.axes):
        for im in ax.images:
            if im.get_cmap().name not in DIVERGING_CMAPS:
                continue
            norm = im.norm
            if isinstance(norm, TwoSlopeNorm | CenteredNorm):
                if norm.vcenter != 0:
                    problems.append(f"axes {i}: diverging norm centred on {norm.vcenter}, not 0")
                continue
            lo, hi = norm.vmin, norm.vmax
            if lo is None or hi is None or abs(lo + hi) > 1e-12 * max(abs(lo), abs(hi)):
                problems.append(f"axes {i}: diverging colour map with limits [{lo}, {hi}], not symmetric about 0")
    return problems
