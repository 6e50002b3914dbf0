"""The bridge's gates: coverage, name correspondence, paper references, manifest freshness.

Modelled on Book-Companion's ``check_lean.py`` (statement manifest with hashes). The Lake
workspace, imports and forbidden tokens are :mod:`.workspace`'s gates. Each gate returns a
list of problems; an empty list is green.
"""

from __future__ import annotations

from pathlib import Path

from .handwritten import HANDWRITTEN
from .library import reference_names
from .runner import MANIFEST_PATH, Bridge, load_manifest


def check_coverage(bridge: Bridge) -> list[str]:
    """Every theorem has exactly one check; every hand-written check names a theorem."""
    problems = []
    names = {e.name for e in bridge.catalog.theorems()}
    for e in bridge.catalog.theorems():
        kind = bridge.kind(e)
        if kind == "none":
            problems.append(f"{e.file}:{e.line}: {e.name} has no check (outside the fragment, no @check)")
        elif kind == "derived" and e.name in HANDWRITTEN:
            problems.append(f"{e.name} has both a derived and a hand-written check")
    for name in HANDWRITTEN:
        if name not in names:
            problems.append(f"@check({name!r}) names no theorem of formal/")
    return problems


def check_papers(bridge: Bridge) -> list[str]:
    """Every theorem's docstring starts with ``Paper: …``."""
    return [f"{e.file}:{e.line}: {e.name} has no 'Paper:' reference on its docstring's first line"
            for e in bridge.catalog.theorems() if not e.paper]


def check_names(bridge: Bridge) -> list[str]:
    """Public Lean definitions ↔ reference functions (spec.LEAN_NAMES ∪ online.LEAN_NAMES)."""
    refs = reference_names()
    defs = {e.name for e in bridge.catalog.definitions() if not e.private}
    problems = [f"Lean definition {n} has no reference function in LEAN_NAMES" for n in sorted(defs - set(refs))]
    problems += [f"LEAN_NAMES entry {n} names no definition of formal/" for n in sorted(set(refs) - defs)]
    return problems


def check_manifest(bridge: Bridge, path: Path = MANIFEST_PATH) -> list[str]:
    """The approved fingerprint and check kind of every theorem are current."""
    manifest = load_manifest(path)
    problems = []
    names = set()
    for e in bridge.catalog.theorems():
        names.add(e.name)
        m = manifest.get(e.name)
        hint = f"re-approve with `python -m plga.proofs_bridge approve {e.name}`"
        if m is None:
            problems.append(f"{e.name} is not in the manifest; {hint}")
        elif m.get("fingerprint") != e.fingerprint:
            problems.append(f"{e.name}: statement changed since approval (fingerprint); {hint}")
        elif m.get("check") != bridge.kind(e):
            problems.append(f"{e.name}: check kind is {bridge.kind(e)}, approved {m.get('check')}; {hint}")
    problems += [f"manifest entry {n} names no theorem" for n in sorted(set(manifest) - names)]
    return problems


def all_gates(bridge: Bridge, manifest: Path = MANIFEST_PATH) -> dict[str, list[str]]:
    return {
        "coverage": check_coverage(bridge),
        "paper references": check_papers(bridge),
        "definitions ↔ reference": check_names(bridge),
        "manifest": check_manifest(bridge, manifest),
    }
