"""Fixtures of the proofs-bridge tests: the fixture formal/ tree and the real one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
def good_tree(tmp_path: Path) -> Path:
    """A writable copy of fixtures/good (a formal/-like tree with Plga/Fixture.lean)."""
    dst = tmp_path / "formal"
    shutil.copytree(FIXTURES / "good", dst)
    return dst


@pytest.fixture(scope="session")
def real_bridge():
    """The bridge over the real formal/ (skipped while formal/Plga holds no .lean files)."""
    from plga.proofs_bridge.catalog import formal_dir, lean_files
    from plga.proofs_bridge.runner import Bridge

    if not lean_files(formal_dir()):
        pytest.skip("formal/Plga/*.lean not present yet")
    return Bridge()
