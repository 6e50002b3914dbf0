"""The seed alone decides a seeded Hypothesis draw of the suite and the theorem checks
(:func:`plga.draws.seed_alone_decides`), whatever else the process has imported."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import hypothesis
from hypothesis import strategies as st

from plga.draws import seed_alone_decides


def _seeded_draws(under: Any) -> list[int]:
    """500 integers a seeded Hypothesis test draws in [0, 2**20], run inside ``under()``."""
    out: list[int] = []

    @hypothesis.seed(11)
    @hypothesis.settings(max_examples=500, database=None, phases=[hypothesis.Phase.generate], deadline=None)
    @hypothesis.given(st.integers(0, 2**20))
    def draw(x: int) -> None:
        out.append(x)

    with under():
        draw()
    return out


def test_imported_modules_do_not_change_the_cases_a_seed_draws(tmp_path, monkeypatch):
    # Hypothesis draws ~1 in 20 numbers from the constants of the local modules imported so far; a
    # module of many constants in range, imported between two runs, changes the draws without
    # seed_alone_decides (the negative control) and not with it
    def import_module_of_constants(name: str, first: int) -> set[int]:
        numbers = {first + 977 * i for i in range(900)}
        (tmp_path / f"{name}.py").write_text(f"NUMBERS = ({', '.join(map(str, sorted(numbers)))})\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.import_module(name)
        return numbers

    before = _seeded_draws(seed_alone_decides)
    import_module_of_constants("plga_constants_a", 100_003)
    assert _seeded_draws(seed_alone_decides) == before
    before = _seeded_draws(contextlib.nullcontext)
    numbers = import_module_of_constants("plga_constants_b", 100_501)
    after = _seeded_draws(contextlib.nullcontext)
    assert after != before and set(after) & numbers
