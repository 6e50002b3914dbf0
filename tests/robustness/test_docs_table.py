"""docs/robustness.md stays true: every test it names exists (file and function)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "robustness.md"


def _named_tests() -> set[tuple[str, str]]:
    return set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)", DOC.read_text(encoding="utf-8")))


def test_every_named_test_exists():
    named = _named_tests()
    assert len(named) > 60
    missing = []
    for file, name in sorted(named):
        path = REPO / file
        if not path.exists():
            missing.append(f"{file} (no such file)")
            continue
        defined = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.FunctionDef)}
        if name not in defined:
            missing.append(f"{file}::{name}")
    assert not missing, f"docs/robustness.md names tests that do not exist: {missing}"


def test_every_robustness_test_is_in_the_table():
    named = {name for file, name in _named_tests() if file.startswith("tests/robustness/")}
    for path in sorted((REPO / "tests" / "robustness").glob("test_*.py")):
        if path.name == "test_docs_table.py":
            continue
        tests = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
                 if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
        assert tests <= named, f"{path.name}: not in docs/robustness.md: {sorted(tests - named)}"
