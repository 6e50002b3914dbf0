"""The Lake workspace gate (no Lean needed), each rule with a fixture it must reject."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tomllib", reason="the workspace gate reads lakefile.toml with Python ≥ 3.11's tomllib")

from plga.errors import DataFileError
from plga.proofs_bridge.catalog import formal_dir
from plga.proofs_bridge.parser import read_lean_source
from plga.proofs_bridge.workspace import (
    check_forbidden,
    check_imports,
    check_pins,
    check_workspace,
    is_name_literal,
    lake_package_name,
)

FORMAL = formal_dir()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dst = tmp_path / "formal"
    dst.mkdir()
    for name in ("lakefile.toml", "lake-manifest.json", "lean-toolchain", "dependencies.json", "Plga.lean"):
        shutil.copy(FORMAL / name, dst / name)
    shutil.copytree(FORMAL / "Plga", dst / "Plga")
    return dst


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_real_workspace_passes():
    assert check_workspace(FORMAL) == {k: [] for k in check_workspace(FORMAL)}


@pytest.mark.parametrize("name,legal", [
    ("mathlib", True), ("Qq", True), ("importGraph", True), ("«PLDR-LLM-Math-Foundations»", True),
    ("a.b", True), ("x₁", True), ("PLDR-LLM-Math-Foundations", False), ("", False), ("a..b", False),
    ("«open", False), ("1a", False), ("a.", False),
])
def test_name_literals_follow_lean(name, legal):
    assert is_name_literal(name) is legal


def test_lake_escapes_a_toml_name_that_is_no_identifier():
    assert lake_package_name("PLDR-LLM-Math-Foundations") == "«PLDR-LLM-Math-Foundations»"
    assert lake_package_name("mathlib") == "mathlib"


def test_hyphenated_manifest_name_is_rejected(tree: Path):
    _edit(tree / "lake-manifest.json", '"«PLDR-LLM-Math-Foundations»"', '"PLDR-LLM-Math-Foundations"')
    problems = check_pins(tree)
    assert any("not a Lean name literal" in p for p in problems)
    assert any("no package" in p for p in problems)  # the require no longer finds its entry


def test_moved_lakefile_rev_is_rejected(tree: Path):
    _edit(tree / "lakefile.toml", 'rev = "78ba3fb0f48ab5438cd61a4082d550723e76b06c"',
          'rev = "0000000000000000000000000000000000000000"')
    problems = check_pins(tree)
    assert any("≠ lakefile rev" in p for p in problems)
    assert any("re-record its modules" in p for p in problems)


def test_branch_instead_of_commit_is_rejected(tree: Path):
    _edit(tree / "lakefile.toml", 'rev = "9c0c555bde5a8277cd36dc4dc6dfe2a5a77a2b11"', 'rev = "master"')
    assert any("not pinned to a 40-hex commit" in p for p in check_pins(tree))


def test_toolchain_out_of_step_is_rejected(tree: Path):
    (tree / "lean-toolchain").write_text("leanprover/lean4:v4.30.0\n", encoding="utf-8")
    assert any("Cli is tagged" in p for p in check_pins(tree))
    (tree / "lean-toolchain").write_text("nightly\n", encoding="utf-8")
    assert any("lean-toolchain" in p for p in check_pins(tree))


def test_direct_manifest_entry_without_require_is_rejected(tree: Path):
    data = json.loads((tree / "lake-manifest.json").read_text(encoding="utf-8"))
    next(p for p in data["packages"] if p["name"] == "batteries")["inherited"] = False
    (tree / "lake-manifest.json").write_text(json.dumps(data), encoding="utf-8")
    assert any("has no [[require]]" in p for p in check_pins(tree))


@pytest.mark.parametrize("imp", ["Mathlib.Not.A.Recorded.File", "PldrLlmMathFoundations.Nope", "Plga.Missing", "Aesop"])
def test_unresolved_import_is_rejected(tree: Path, imp: str):
    _edit(tree / "Plga" / "Decoder.lean", "import Mathlib\n", f"import Mathlib\nimport {imp}\n")
    problems = check_imports(tree)
    assert len(problems) == 1 and imp in problems[0]


def test_every_import_of_the_real_tree_resolves():
    assert check_imports(FORMAL) == []


@pytest.mark.parametrize("escape", [
    "by\n  sorry", "by exact (sorry)", "by exact «sorry»", "sorryAx _ false", "by\n  admit", "by native_decide",
    "by\n  exact _root_.sorryAx _ true",
])
def test_proof_escapes_are_rejected(tree: Path, escape: str):
    _edit(tree / "Plga" / "Decoder.lean", "  simp only [frozenLayer, sdpaLayer, headRow_eq_sdpa]",
          "  " + escape.replace("\n", "\n  ") if not escape.startswith("by") else "  " + escape.split("\n")[-1].strip())
    assert check_forbidden(tree), f"{escape!r} not caught"


@pytest.mark.parametrize("line", [
    "axiom cheat : False", "@[implemented_by id] def f (x : ℕ) : ℕ := x", "unsafe def g : ℕ := 0",
    "set_option debug.skipKernelTC true in", "set_option linter.unusedVariables false", "@[extern \"f\"] def h : ℕ := 0",
])
def test_declaration_escapes_are_rejected(tree: Path, line: str):
    _edit(tree / "Plga" / "Decoder.lean", "namespace Plga\n", f"namespace Plga\n\n{line}\n")
    assert check_forbidden(tree), f"{line!r} not caught"


def test_axiom_audit_file_names_the_collapse_theorems():
    text = (FORMAL / "Plga" / "Axioms.lean").read_text(encoding="utf-8")
    from plga.proofs_bridge.catalog import Catalog

    names = {e.name for e in Catalog.load(FORMAL).theorems()}
    printed = [ln.split()[-1].removeprefix("Plga.") for ln in text.splitlines() if ln.startswith("#print axioms")]
    assert set(printed) <= names, set(printed) - names
    assert {"frozenDecoder_eq_sdpaDecoder", "frozenDecoder_prefixConsistentShaped",
            "collapsed_prefixConsistentShaped", "inference_collapse"} <= set(printed)


# --- hostile files (issue #17) ----------------------------------------------------------------


def test_link_to_dev_zero_is_refused_before_reading(tmp_path: Path):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    link = tmp_path / "Zero.lean"
    os.symlink("/dev/zero", link)
    with pytest.raises(DataFileError, match="not a regular file"):
        read_lean_source(link, "Zero.lean")


def test_oversized_lean_file_is_refused(tmp_path: Path):
    big = tmp_path / "Big.lean"
    with open(big, "wb") as fh:
        fh.truncate(2 << 20)  # sparse: 2 MiB declared, nothing written
    with pytest.raises(DataFileError, match="at most 1048576 are read"):
        read_lean_source(big, "Big.lean")


def test_a_normal_file_is_read(tmp_path: Path):
    f = tmp_path / "Ok.lean"
    f.write_text("theorem t : 1 = 1 := rfl\n", encoding="utf-8")
    assert read_lean_source(f).startswith("theorem t")


def test_cli_refuses_a_dev_zero_link_with_one_line(tree: Path):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    os.symlink("/dev/zero", tree / "Plga" / "Zero.lean")
    out = subprocess.run([sys.executable, "-m", "plga.cli", "theorems", "--formal-dir", str(tree), "--no-progress"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Zero.lean" in lines[0] and "not a regular file" in lines[0]
