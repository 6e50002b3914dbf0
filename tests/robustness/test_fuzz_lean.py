"""Fuzz the Lean header parser of the proofs bridge (``plga.proofs_bridge.parser``).

Entry points: ``parse_header(text, file, line0, col0)``, ``parse_term(text, ...)`` and
``scan_source(src, file)``. Their documented error is :class:`LeanSubsetError` (a
``ValueError``) whose message starts ``file:line:column:``; nothing else may escape, on random
text or on mutations of the real headers and files of ``formal/Plga/*.lean``. Budget: a few
hundred parses per test (well under 10 s).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

P = pytest.importorskip("plga.proofs_bridge.parser", reason="the proofs bridge needs lark (the bridge extra)")

FORMAL = Path(__file__).resolve().parents[2] / "formal" / "Plga"
FILES = sorted(FORMAL.glob("*.lean"))
SOURCES = {f.name: f.read_text(encoding="utf-8") for f in FILES}
HEADERS = [(d.file, d.line, d.header.text) for src_name, src in SOURCES.items()
           for d in P.scan_source(src, src_name).declarations]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

#: Pieces of Lean notation, in and out of the subset, to splice into headers.
PIECES = [
    "(", ")", "{", "}", "[", "]", "⦃", "⦄", ":", ":=", ",", "→", "↔", "∀", "∃", "fun", "=>", "λ", "∑", "∏",
    "∈", "Finset.univ", "‖", "|", "⁻¹", "ᵀ", "⬝ᵥ", "•", "^", "*", "/", "+", "-", "≤", "<", "≠", "¬", "∧", "∨",
    "ℝ", "ℕ", "Matrix", "(Fin d)", "Real.exp", "theorem", "def", "lemma", "where", "|", "--", "/-", "-/",
    "\n", "  ", "«x»", "x.1", "@", "%", "#check", "sorry", "0", "1e9", "(1 : ℝ)", "⟨", "⟩", "\"", "'",
]


def _assert_located(exc: Exception, file: str, line0: int, text: str) -> None:
    assert isinstance(exc, P.LeanSubsetError), f"{type(exc).__name__} escaped: {exc}"
    assert isinstance(exc, ValueError)
    m = re.match(rf"{re.escape(file)}:(\d+):(-?\d+): ", str(exc))
    assert m, f"error does not start with '{file}:line:column:': {exc}"
    assert line0 <= int(m.group(1)) <= line0 + text.count("\n"), f"line out of range: {exc}"
    assert exc.file == file and exc.line == int(m.group(1))


def _parse_or_located(fn, text: str, file: str = "Fuzz.lean", line0: int = 7) -> None:
    try:
        fn(text, file, line0, 1)
    except P.LeanSubsetError as exc:
        _assert_located(exc, file, line0, text)
    except Exception as exc:  # anything else is a parser defect
        pytest.fail(f"{fn.__name__}({text!r}) raised {type(exc).__name__}: {exc}")


def test_the_real_headers_parse():
    assert len(HEADERS) > 50
    for file, line, text in HEADERS:
        P.parse_header(text, file, line)


@FUZZ
@given(text=st.text(max_size=80))
def test_random_text(text):
    _parse_or_located(P.parse_header, text)
    _parse_or_located(P.parse_term, text)


@FUZZ
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=12))
def test_random_notation(pieces):
    text = " ".join(pieces)
    _parse_or_located(P.parse_header, "theorem t " + text)
    _parse_or_located(P.parse_term, text)


@st.composite
def mutated_headers(draw):
    file, line, text = draw(st.sampled_from(HEADERS))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "truncate"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(PIECES) | st.text(max_size=3)) + text[i:]
        elif kind == "replace":
            text = text[:i] + draw(st.sampled_from(PIECES)) + text[j:]
        elif kind == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i]
    return file, line, text


@FUZZ
@given(case=mutated_headers())
def test_mutated_real_headers(case):
    file, line, text = case
    _parse_or_located(P.parse_header, text, file, line)


@st.composite
def mutated_files(draw):
    name = draw(st.sampled_from(sorted(SOURCES)))
    src = SOURCES[name]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(src)))
        j = draw(st.integers(i, min(len(src), i + 40)))
        piece = draw(st.sampled_from(PIECES) | st.just(""))
        src = src[:i] + piece + src[j:]
    return name, src


@settings(FUZZ, max_examples=25)
@given(case=mutated_files())
def test_mutated_real_files(case):
    name, src = case
    try:
        P.scan_source(src, name)
    except P.LeanSubsetError as exc:
        _assert_located(exc, name, 1, src)
    except Exception as exc:
        pytest.fail(f"scan_source on a mutated {name} raised {type(exc).__name__}: {exc}")
