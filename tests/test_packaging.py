"""Every package of the tree is in pyproject's explicit package list (a non-editable install
would silently lose one that is not), and the shipped data is declared as package data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _setuptools_table() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python ≥ 3.11")
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


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
