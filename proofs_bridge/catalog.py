"""The catalog of every declaration of ``formal/``: name, kind, file, line, paper reference,
normalized statement text and its sha256 fingerprint (LeanDojo's statement span; the
fingerprint is what the manifest approves, as Book-Companion's statement manifest does)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .parser import Declaration, LeanFile, paper_reference, scan_file


def formal_dir() -> Path:
    from plga.formal import FORMAL_DIR

    return Path(FORMAL_DIR)


def lean_files(root: Path | None = None) -> list[Path]:
    """``Plga/*.lean`` (sorted) plus the umbrella ``Plga.lean`` when present."""
    root = Path(root) if root is not None else formal_dir()
    files = sorted((root / "Plga").glob("*.lean")) if (root / "Plga").is_dir() else sorted(root.glob("*.lean"))
    umbrella = root / "Plga.lean"
    if umbrella.exists() and umbrella not in files:
        files.append(umbrella)
    return files


@dataclass
class Entry:
    name: str
    full_name: str
    kind: str
    file: str
    line: int
    paper: str | None
    statement: str
    fingerprint: str
    private: bool
    decl: Declaration

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "full_name", "kind", "file", "line", "paper", "statement",
                                              "fingerprint", "private")}


def fingerprint(decl: Declaration) -> str:
    """sha256 of the normalized statement (and of the section variables it uses)."""
    text = decl.statement
    if decl.variables:
        from .syntax import show_binder

        text = "variable " + " ".join(show_binder(b) for b in decl.variables) + " ⊢ " + text
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Catalog:
    """All declarations of a formal/ tree."""

    def __init__(self, files: list[LeanFile]):
        self.files = files
        self.entries: list[Entry] = []
        for lf in files:
            for d in lf.declarations:
                self.entries.append(Entry(d.name, d.full_name, d.kind, d.file, d.line, paper_reference(d.docstring),
                                          d.statement, fingerprint(d), d.private, d))

    @classmethod
    def load(cls, root: Path | str | None = None) -> Catalog:
        root = Path(root) if root is not None else formal_dir()
        return cls([scan_file(p, str(p.relative_to(root))) for p in lean_files(root)])

    @property
    def declarations(self) -> list[Declaration]:
        return [e.decl for e in self.entries]

    def theorems(self) -> list[Entry]:
        """The public theorems (private ones are proof helpers, not statements the project makes)."""
        return [e for e in self.entries if e.kind in ("theorem", "lemma") and not e.private]

    def definitions(self) -> list[Entry]:
        return [e for e in self.entries if e.kind in ("def", "abbrev")]

    def get(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name or e.full_name == name), None)

    def to_json(self) -> str:
        return json.dumps([e.to_json() for e in self.entries], ensure_ascii=False, indent=2)
