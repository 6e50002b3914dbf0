"""No bare ``except:`` anywhere in the project's Python sources (it would swallow KeyboardInterrupt,
SystemExit and the errors this suite promises to report)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".lake", "node_modules"}


def _sources() -> list[Path]:
    """The project's Python files: what git tracks or would track (not ignored), so a virtual
    environment of any name inside the checkout is never scanned; outside a git checkout, every
    file not under SKIP or a venv."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return [REPO / line for line in listed.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        venvs = {p.parent for p in REPO.glob("*/pyvenv.cfg")}
        return [p for p in REPO.rglob("*.py")
                if not SKIP & set(p.relative_to(REPO).parts) and not any(v in p.parents for v in venvs)]


def test_no_bare_except():
    sources = _sources()
    found = []
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.type is None]
    assert len(sources) > 20
    assert not found, f"bare `except:` in {found}"
