"""Every package of the tree is in pyproject's explicit package list (a non-editable install
would silently lose one that is not), and the shipped data is declared as package data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python ≥ 3.11")
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _setuptools_table() -> dict:
    return _pyproject()["tool"]["setuptools"]


def _packages_on_disk(package_dir: dict[str, str]) -> set[str]:
    found = set()
    for name, folder in package_dir.items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    return found


def test_every_package_is_listed():
    """Negative control: the check flags a package dropped from the list."""
    table = _setuptools_table()
    assert "plga.conformance.controls" in _packages_on_disk(table["package-dir"]) - (set(table["packages"]) - {"plga.conformance.controls"})
    listed = set(table["packages"])
    on_disk = _packages_on_disk(table["package-dir"])
    assert on_disk - listed == set(), f"packages missing from pyproject's list: {sorted(on_disk - listed)}"
    assert listed - on_disk <= {"plga._data"}, f"listed packages that do not exist: {sorted(listed - on_disk - {'plga._data'})}"


def test_the_data_folder_ships():
    table = _setuptools_table()
    assert table["package-dir"]["plga._data"] == "tests/data"
    patterns = table["package-data"]["plga._data"]
    for f in (REPO / "tests" / "data").rglob("*"):
        if f.is_file():
            rel = f.relative_to(REPO / "tests" / "data").as_posix()
            assert any(Path(rel).match(p) for p in patterns), f"tests/data/{rel} is not package data"


def test_the_native_kernel_source_ships():
    """The native CPU kernel is built from its source at first use: a non-editable install
    must carry every kernels/csrc file (negative control: a file outside the pattern is flagged)."""
    table = _setuptools_table()
    patterns = table["package-data"]["plga.kernels"]
    sources = [f.relative_to(REPO / "kernels").as_posix() for f in (REPO / "kernels" / "csrc").iterdir() if f.is_file()]
    assert {"csrc/rows_linear.cpp", "csrc/positive_pow.cpp"} <= set(sources)
    for rel in sources:
        assert any(Path(rel).match(p) for p in patterns), f"kernels/{rel} is not package data"
    assert not any(Path("csrc/helper.h").match(p) for p in patterns)


#: What the main job imports, as `plga verify` runs it: the command line, the theorem checks and
#: the conformance suite with the project's kernels.
_MAIN_JOB = """
import plga.cli, plga.proofs_bridge.runner, plga.proofs_bridge.symbolic, plga.proofs_bridge.parser
import plga.conformance.verify, plga.conformance.runner, plga.conformance.checks, plga.conformance.adapters
import plga.kernels
plga.cli.build_parser()
"""


def _imports_with_only(allowed: set[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run :data:`_MAIN_JOB` where no installed distribution can be imported but ``allowed``,
    torch (installed apart) and what they require."""
    blocker = f"""
import re, sys, importlib.abc, importlib.metadata as md
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
allowed, todo = set(), list({sorted(allowed | {"torch"})!r})
while todo:  # the allowed distributions and what they require (extras aside)
    name = norm(todo.pop())
    if name in allowed:
        continue
    allowed.add(name)
    try:
        reqs = md.requires(name) or []
    except md.PackageNotFoundError:
        continue
    todo.extend(re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in reqs if "extra ==" not in r)

def tops(dist):
    listed = (dist.read_text("top_level.txt") or "").split()
    if listed:
        return listed
    return {{f.parts[0].split(".")[0] for f in dist.files or [] if not f.parts[0].endswith((".dist-info", ".data", ".pth"))
            and f.parts[0] != "__pycache__"}}
mine = ("plga", "reference", "kernels", "proofs_bridge", "formal")
blocked = {{t for d in md.distributions() if norm(d.metadata["Name"]) not in allowed for t in tops(d) if t not in mine}}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"blocked: {{name}} (not a core dependency)")
        return None
sys.meta_path.insert(0, Block())
"""
    # run elsewhere than the checkout: its top-level folders would shadow the installed mapping
    return subprocess.run([sys.executable, "-c", blocker + _MAIN_JOB], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_main_job_needs_only_the_core_dependencies(tmp_path):
    """`pip install -e .` (no extra) and torch must run `plga verify`: its imports stay inside
    the core dependencies (before: Hypothesis was in the test extra only, and every `plga`
    command, `--help` included, ended in a traceback). Negative control: without Hypothesis among
    them the same imports fail."""
    deps = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in _pyproject()["project"]["dependencies"]}
    assert {"hypothesis", "lark", "sympy"} <= deps
    ok = _imports_with_only(deps, tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    control = _imports_with_only(deps - {"hypothesis"}, tmp_path)
    assert control.returncode != 0 and "blocked: hypothesis" in control.stderr
