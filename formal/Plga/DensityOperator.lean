/-
# The density operator D = Qᵀ Q (paper Prop. 3.6)

Definition (Python mirror in `reference/spec.py`):

* `densityOperator Q` ↔ `density_operator(q)`: D = Qᵀ Q for Q ∈ ℝ^{S×d} (the rotated queries
  of one head; the upstream code uses every query row, padding included).

Restated from `PldrLlm` (`PldrLlmMathFoundations/DensityOperator.lean`), each proved by
citing it: `density_isSymm`, `density_posSemidef`, `density_quadratic_nonneg`,
`density_rank`, `density_rank_le`.

New: `densityOperator_apply` — D_ij = Σ_s Q_si Q_sj, a sum over *every* row s. This is why
a global Gram breaks prefix consistency of historical rows unless the downstream operator
is invariant (see `Collapse.lean`).

Not claimed: anything about the 1/S normalisation the paper idealises (the code has none).
-/
import Mathlib
import PldrLlmMathFoundations.DensityOperator

noncomputable section

namespace Plga

open Matrix

/-- The density operator D = Qᵀ Q ∈ ℝ^{d×d} of a query block Q ∈ ℝ^{S×d}.
Python: `density_operator(q)`. -/
def densityOperator {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) : Matrix (Fin d) (Fin d) ℝ :=
  Qᵀ * Q

/-- Paper: Prop. 3.6. Restates `PldrLlm.density_isSymm`: the density operator is
symmetric. -/
theorem density_isSymm {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) :
    Matrix.IsSymm (densityOperator Q) :=
  PldrLlm.density_isSymm Q

/-- Paper: Prop. 3.6. Restates `PldrLlm.density_posSemidef`: the density operator is
positive semidefinite. -/
theorem density_posSemidef {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) :
    Matrix.PosSemidef (densityOperator Q) :=
  PldrLlm.density_posSemidef Q

/-- Paper: Prop. 3.6. Restates `PldrLlm.density_quadratic_nonneg`: the quadratic form
vᵀ D v (= ‖Q v‖²) is nonnegative. -/
theorem density_quadratic_nonneg {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (v : Fin d → ℝ) :
    0 ≤ v ⬝ᵥ (densityOperator Q *ᵥ v) :=
  PldrLlm.density_quadratic_nonneg Q v

/-- Paper: Prop. 3.6. Restates `PldrLlm.density_rank`: rank(Qᵀ Q) = rank(Q). -/
theorem density_rank {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) :
    Matrix.rank (densityOperator Q) = Matrix.rank Q :=
  PldrLlm.density_rank Q

/-- Paper: Prop. 3.6. Restates `PldrLlm.density_rank_le`: rank(Qᵀ Q) ≤ min(S, d), so short
contexts (S < d) give a rank-deficient density operator. -/
theorem density_rank_le {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) :
    Matrix.rank (densityOperator Q) ≤ min S d :=
  PldrLlm.density_rank_le Q

/-- Paper: Prop. 3.6. Entry formula D_ij = Σ_s Q_si Q_sj: every query row s contributes,
so appending a row changes D (the global Gram of docs/spec.md §3). -/
theorem densityOperator_apply {S d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (i j : Fin d) :
    densityOperator Q i j = ∑ s, Q s i * Q s j := by
  simp only [densityOperator, Matrix.mul_apply, Matrix.transpose_apply]

end Plga

end
