"""Gates: coverage, names, manifest freshness and forbidden tokens (with negative controls)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from plga.proofs_bridge import gates
from plga.proofs_bridge.handwritten import HANDWRITTEN
from plga.proofs_bridge.runner import Bridge, approve
from plga.proofs_bridge.workspace import check_forbidden


def test_every_theorem_has_exactly_one_check(real_bridge):
    assert gates.check_coverage(real_bridge) == []


def test_every_handwritten_check_names_a_theorem(real_bridge):
    names = {e.name for e in real_bridge.catalog.theorems()}
    assert set(HANDWRITTEN) <= names


def test_definitions_match_reference_names(real_bridge):
    assert gates.check_names(real_bridge) == []


def test_paper_references_present(real_bridge):
    assert gates.check_papers(real_bridge) == []


def test_manifest_is_current(real_bridge):
    assert gates.check_manifest(real_bridge) == []


def test_injected_sorry_is_reported(good_tree: Path):
    f = good_tree / "Plga" / "Fixture.lean"
    assert check_forbidden(good_tree) == []
    f.write_text(f.read_text(encoding="utf-8").replace("by\n  positivity", "by\n  sorry", 1), encoding="utf-8")
    problems = check_forbidden(good_tree)
    assert len(problems) == 1 and "Fixture.lean" in problems[0] and "'sorry'" in problems[0]


def test_injected_axiom_in_a_comment_is_reported(good_tree: Path):
    f = good_tree / "Plga" / "Fixture.lean"
    f.write_text(f.read_text(encoding="utf-8") + "\n-- uses an axiom\n", encoding="utf-8")
    assert any("'axiom'" in p for p in check_forbidden(good_tree))


def test_changed_fingerprint_fails_until_reapproved(good_tree: Path, tmp_path: Path):
    manifest = tmp_path / "manifest.json"
    approve(None, manifest, good_tree)
    assert gates.check_manifest(Bridge(good_tree), manifest) == []
    f = good_tree / "Plga" / "Fixture.lean"
    f.write_text(f.read_text(encoding="utf-8").replace("0 < iswiglu (M i j) + ε", "0 < iswiglu (M i j) + 2 * ε"),
                 encoding="utf-8")
    problems = gates.check_manifest(Bridge(good_tree), manifest)
    assert problems and "metric_entry_pos" in problems[0] and "fingerprint" in problems[0]
    approve(["metric_entry_pos"], manifest, good_tree)
    assert gates.check_manifest(Bridge(good_tree), manifest) == []
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["metric_entry_pos"]["check"] == "derived"


def test_unchecked_theorem_is_a_coverage_problem(good_tree: Path):
    f = good_tree / "Plga" / "Fixture.lean"
    f.write_text(f.read_text(encoding="utf-8").replace(
        "end Plga", "/-- Paper: new. -/\ntheorem exotic (x : ℝ) : Matrix.rank (1 : Matrix (Fin 2) (Fin 2) ℝ) = 2 := by\n  simp\n\nend Plga"),
        encoding="utf-8")
    problems = gates.check_coverage(Bridge(good_tree))
    assert any("exotic has no check" in p for p in problems)


def test_cli_catalog_json(good_tree: Path):
    out = subprocess.run([sys.executable, "-m", "plga.proofs_bridge", "--formal-dir", str(good_tree), "catalog", "--json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    entry = next(e for e in data if e["name"] == "score_sdpa_special_case")
    assert entry["kind"] == "theorem" and entry["paper"] == "Thm. 5.4(i)" and len(entry["fingerprint"]) == 64
    assert entry["statement"].startswith("theorem score_sdpa_special_case {S T d : ℕ}")
