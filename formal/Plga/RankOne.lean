/-
# The rank-one singularity condition A = 1 αᵀ (paper Prop. 3.9)

Definition (Python mirror in `reference/spec.py`):

* `rowClone α n` ↔ `row_clone(alpha, n)`: the n×d matrix 1 αᵀ whose every row is α.
  The published `PldrLlm.rowClone α` is the square case n = d (bridge `rowClone_eq_pldr`).

Restated from `PldrLlm` (`PldrLlmMathFoundations/RankOne.lean`) for `rowClone α d`, each
proved by rewriting with the bridge and citing it: `rowClone_apply`, `rowClone_rank_le_one`,
`rowClone_eq_zero_iff`, `rowClone_rank_eq_one`, `rowClone_det_eq_zero`,
`rowClone_mulVec_one`, `rowClone_mul_self`, `rowClone_pow`, `rowClone_sq_eq_zero`.

Not claimed: Prop. 3.9(iv) (the singular-value determinant bound) and any eigenvalue
perturbation statement for 1 αᵀ + Δ.
-/
import Mathlib
import PldrLlmMathFoundations.RankOne

noncomputable section

namespace Plga

open Matrix

/-- The n×d matrix 1 αᵀ: every row equals α. Python: `row_clone(alpha, n)`. -/
def rowClone {d : ℕ} (α : Fin d → ℝ) (n : ℕ) : Matrix (Fin n) (Fin d) ℝ :=
  Matrix.of fun _ j => α j

/-- Paper: new. Bridge: in the square case our `rowClone α d` is the published
`PldrLlm.rowClone α` (= `vecMulVec 1 α`). -/
theorem rowClone_eq_pldr {d : ℕ} (α : Fin d → ℝ) : rowClone α d = PldrLlm.rowClone α := by
  ext i j
  simp [rowClone, PldrLlm.rowClone_apply]

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_apply`: (1 αᵀ)_ij = α_j. -/
theorem rowClone_apply {d : ℕ} (α : Fin d → ℝ) (i j : Fin d) : rowClone α d i j = α j := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_apply α i j

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_rank_le_one`: 1 αᵀ has rank at most one. -/
theorem rowClone_rank_le_one {d : ℕ} (α : Fin d → ℝ) : Matrix.rank (rowClone α d) ≤ 1 := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_rank_le_one α

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_eq_zero_iff`: 1 αᵀ = 0 iff α = 0. -/
theorem rowClone_eq_zero_iff {d : ℕ} (α : Fin d → ℝ) : rowClone α d = 0 ↔ α = 0 := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_eq_zero_iff α

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_rank_eq_one`: 1 αᵀ has rank exactly one
when α ≠ 0 (it fails at α = 0). -/
theorem rowClone_rank_eq_one {d : ℕ} {α : Fin d → ℝ} (hα : α ≠ 0) :
    Matrix.rank (rowClone α d) = 1 := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_rank_eq_one hα

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_det_eq_zero`: det(1 αᵀ) = 0 for d ≥ 2. -/
theorem rowClone_det_eq_zero {d : ℕ} (hd : 2 ≤ d) (α : Fin d → ℝ) :
    Matrix.det (rowClone α d) = 0 := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_det_eq_zero hd α

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_mulVec_one`: the all-ones vector is an
eigenvector of 1 αᵀ with eigenvalue the row sum s = Σ_j α_j. -/
theorem rowClone_mulVec_one {d : ℕ} (α : Fin d → ℝ) :
    rowClone α d *ᵥ (fun i => 1) = fun i => ∑ j, α j := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_mulVec_one α

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_mul_self`: (1 αᵀ)² = s (1 αᵀ) with
s = Σ_j α_j. -/
theorem rowClone_mul_self {d : ℕ} (α : Fin d → ℝ) :
    rowClone α d * rowClone α d = (∑ k, α k) • rowClone α d := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_mul_self α

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_pow`: (1 αᵀ)^{k+1} = s^k (1 αᵀ). -/
theorem rowClone_pow {d : ℕ} (α : Fin d → ℝ) (k : ℕ) :
    rowClone α d ^ (k + 1) = (∑ j, α j) ^ k • rowClone α d := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_pow α k

/-- Paper: Prop. 3.9. Restates `PldrLlm.rowClone_sq_eq_zero`: if the row sum vanishes,
1 αᵀ is nilpotent, (1 αᵀ)² = 0. -/
theorem rowClone_sq_eq_zero {d : ℕ} {α : Fin d → ℝ} (h : ∑ j, α j = 0) :
    rowClone α d * rowClone α d = 0 := by
  rw [rowClone_eq_pldr]
  exact PldrLlm.rowClone_sq_eq_zero h

end Plga

end
