"""The proofs bridge: Lean statements of ``formal/`` → executable checks on the reference.

Parse every declaration header of ``formal/Plga/*.lean`` with a narrow lark grammar
(:mod:`.parser`), catalog and fingerprint the statements (:mod:`.catalog`), translate the
statements in the fragment into checks over the reference in float64 and mpmath with
Hypothesis inputs built to satisfy the hypotheses (:mod:`.statement`, :mod:`.derived`), prove
the algebraic identities with sympy at small sizes (:mod:`.symbolic`), check the rest by
hand (:mod:`.handwritten`, each with a negative control) and the concrete-decoder theorems on
the real reference decoder (:mod:`.concrete`). Gates (:mod:`.gates`) keep checks, theorems,
definitions and the approved manifest in step; :mod:`.workspace` checks the Lake workspace
(pins, package names, imports, proof escapes) without Lean. Learned from LeanDojo (statement spans) and array-api-tests
(properties derived from a specification, meta-tests that the suite has teeth).
"""

from .catalog import Catalog
from .parser import LeanSubsetError, parse_header
from .runner import CheckResult, approve, render_formalized_table, render_table, run_all, summary

__all__ = ["Catalog", "CheckResult", "LeanSubsetError", "approve", "parse_header", "render_formalized_table",
           "render_table", "run_all", "summary"]
