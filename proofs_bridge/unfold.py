"""Definitions written in the Lean subset, for evaluation by unfolding.

``UPSTREAM`` transcribes the published definitions of ``PldrLlm`` (PLDR-LLM-Math-Foundations,
as stated in formal/Plga/*.lean) that bridge theorems such as
``sigmoid u = PldrLlm.sigmoid u`` refer to; they are independent of ``reference/spec.py``, so a
bridge theorem checks the reference against the published definition. ``MIRRORS`` gives a
subset body for a project definition whose Lean body is outside the subset, so that the sympy
prover can unfold it (each mirror is checked against the reference by the gates).
"""

from __future__ import annotations

#: Published definitions: name → (header without name, body).
UPSTREAM: dict[str, tuple[str, str]] = {
    "PldrLlm.sigmoid": ("(u : ℝ) : ℝ", "1 / (1 + Real.exp (-u))"),
    "PldrLlm.iswiglu": ("(u : ℝ) : ℝ", "u ^ 2 * PldrLlm.sigmoid u"),
    "PldrLlm.softmax": ("{n : ℕ} (x : Fin n → ℝ) : Fin n → ℝ", "fun i => Real.exp (x i) / ∑ j, Real.exp (x j)"),
    "PldrLlm.maskedSoftmax": (
        "{n : ℕ} (J : Finset (Fin n)) (x : Fin n → ℝ) : Fin n → ℝ",
        "fun i => if i ∈ J then Real.exp (x i) / ∑ j ∈ J, Real.exp (x j) else 0",
    ),
    "PldrLlm.hadPow": ("{m n : ℕ} (A P : Matrix (Fin m) (Fin n) ℝ) : Matrix (Fin m) (Fin n) ℝ", "fun i j => A i j ^ P i j"),
    "PldrLlm.rowClone": ("{d : ℕ} (α : Fin d → ℝ) : Matrix (Fin d) (Fin d) ℝ", "fun _ j => α j"),
    "PldrLlm.rowMean": ("{d : ℕ} (r : Fin d → ℝ) : ℝ", "(∑ i, r i) / d"),
    "PldrLlm.rowVar": ("{d : ℕ} (r : Fin d → ℝ) : ℝ", "(∑ i, (r i - PldrLlm.rowMean r) ^ 2) / d"),
    "PldrLlm.lnEps": (
        "{d : ℕ} (ε : ℝ) (γ β r : Fin d → ℝ) : Fin d → ℝ",
        "fun i => γ i * ((r i - PldrLlm.rowMean r) / Real.sqrt (PldrLlm.rowVar r + ε)) + β i",
    ),
    "PldrLlm.rot": (
        "(θ : ℝ) : Matrix (Fin 2) (Fin 2) ℝ",
        "fun i j => if i = 0 then (if j = 0 then Real.cos θ else -Real.sin θ) else (if j = 0 then Real.sin θ else Real.cos θ)",
    ),
    "PldrLlm.rotJ": (": Matrix (Fin 2) (Fin 2) ℝ", "fun i j => if i = 0 then (if j = 0 then 0 else -1) else (if j = 0 then 1 else 0)"),
}

#: Subset bodies of project definitions whose Lean body is outside the subset.
MIRRORS: dict[str, str] = {
    # `!![a, b; c, d]` matrix literals are outside the subset
    "rot": "fun i j => if i = 0 then (if j = 0 then Real.cos θ else -Real.sin θ) else (if j = 0 then Real.sin θ else Real.cos θ)",
    "rotJ": "fun i j => if i = 0 then (if j = 0 then 0 else -1) else (if j = 0 then 1 else 0)",
}
