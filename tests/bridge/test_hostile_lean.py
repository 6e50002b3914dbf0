"""Hostile Lean input (issue #17): huge, deep or oddly spelled statements end in one located
LeanSubsetError or an ordinary result — nothing else escapes the parser and the passes after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plga.errors import LeanSubsetError
from plga.proofs_bridge.catalog import Catalog
from plga.proofs_bridge.elaborate import Outside
from plga.proofs_bridge.library import load_sigs
from plga.proofs_bridge.parser import (
    MAX_HEADER_CHARS,
    MAX_TERM_DEPTH,
    parse_header,
    parse_term,
    scan_source,
)
from plga.proofs_bridge.statement import Statement

SIGS = load_sigs(Catalog.load().declarations)


def _build(text: str) -> None:
    h = parse_header(text, "Hostile.lean", 5)
    try:
        Statement.build("t", h.binders, h.type, SIGS)
    except Outside:
        pass


def test_a_true_thousand_term_sum_is_refused_in_one_line():
    text = "theorem t (x : ℝ) : " + " + ".join(["x"] * 1000) + " = 1000 * x"
    with pytest.raises(LeanSubsetError) as info:
        parse_header(text, "Sum.lean", 12)
    msg = str(info.value)
    assert msg.startswith("Sum.lean:12:") and "nested" in msg and "\n" not in msg


def test_a_sum_just_under_the_bound_goes_through_every_pass():
    n = MAX_TERM_DEPTH - 5
    _build("theorem t (x : ℝ) : " + " + ".join(["x"] * n) + f" = {n} * x")


def test_an_overlong_statement_is_refused():
    with pytest.raises(LeanSubsetError, match="characters"):
        parse_term("x" * (MAX_HEADER_CHARS + 1))


WRAPPERS = [
    lambda t: f"({t} + 1)", lambda t: f"{t} * 2", lambda t: f"-{t}", lambda t: f"|{t}|",
    lambda t: f"(fun y => {t}) 0", lambda t: f"Real.exp ({t})", lambda t: f"({t})⁻¹", lambda t: f"[{t}]",
    lambda t: f"if 0 < x then {t} else 0", lambda t: f"∑ i : Fin 3, {t}",
]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(layers=st.lists(st.integers(0, len(WRAPPERS) - 1), min_size=1, max_size=3 * MAX_TERM_DEPTH))
def test_random_nesting_never_escapes(layers):
    term = "x"
    for k in layers:
        term = WRAPPERS[k](term)
    for text in (f"theorem t (x : ℝ) : {term} = x", f"theorem t (x : ℝ) : 0 ≤ {term}"):
        try:
            _build(text)
        except LeanSubsetError as exc:
            assert str(exc).startswith("Hostile.lean:") and "\n" not in str(exc)
        try:
            scan_source(f"namespace Plga\n/-- Paper: new. -/\n{text} := by\n  simp\nend Plga\n", "Scan.lean")
        except LeanSubsetError as exc:
            assert str(exc).startswith("Scan.lean:")


@pytest.mark.parametrize("proof", ["by exact (sorry)", "by exact «sorry»", "by\n  first | sorry | rfl",
                                   "by exact sorryAx _ false", "by\n  admit"])
def test_hidden_sorry_is_flagged_in_the_json(tmp_path: Path, proof: str):
    src = Path(__file__).with_name("fixtures") / "good"
    import shutil

    tree = tmp_path / "formal"
    shutil.copytree(src, tree)
    f = tree / "Plga" / "Fixture.lean"
    text = f.read_text(encoding="utf-8")
    assert "by\n  positivity" in text
    f.write_text(text.replace("by\n  positivity", proof, 1), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "plga.cli", "theorems", "--json", "--no-progress", "--no-symbolic",
                          "--max-examples", "3", "--formal-dir", str(tree)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    data = json.loads(out.stdout)
    flagged = [r for r in data["results"] if r["kernel"].startswith("forbidden")]
    assert len(flagged) == 1 and flagged[0]["status"] == "fail"
    assert data["summary"]["forbidden_in_proof"] == 1
