"""No bare ``except:`` anywhere in the project's Python sources (it would swallow KeyboardInterrupt,
SystemExit and the errors this suite promises to report)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".lake", "node_modules"}


def _sources() -> list[Path]:
    return [p for p in REPO.rglob("*.py") if not SKIP & set(p.relative_to(REPO).parts)]


def test_no_bare_except():
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.type is None]
    assert len(_sources()) > 20
    assert not found, f"bare `except:` in {found}"
