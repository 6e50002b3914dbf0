"""The Lean 4 + Mathlib formalization, shipped as data so the proofs bridge can read it."""

from pathlib import Path

#: Folder holding ``lakefile.toml`` and ``Plga/*.lean``.
FORMAL_DIR = Path(__file__).resolve().parent
