/-
# The DAG (NOTEARS) loss: closed-walk weights, tr exp N ≥ d, the positivity floor
# (paper Thm. 4.4 walk side; the DAG-loss positivity remark)

Definition (Python mirror in `reference/spec.py`):

* `dagLoss M` ↔ `dag_loss(m)`: DL(M) = |log(tr exp(M ⊙ M) / d)|, with `NormedSpace.exp` the
  matrix exponential (power series).

`NormedSpace.exp` only needs a topology on matrices; as in the published file the L∞
operator-norm instances are made local so that the Banach-algebra lemmas apply (the value of
exp does not depend on that choice). The restatements below are elaborated under exactly the
same local instances as the published ones, so citing them is a one-liner.

Restated from `PldrLlm` (`PldrLlmMathFoundations/DagLoss.lean`), each proved by citing it:
`pow_entry_nonneg`, `trace_pow_nonneg`, `trace_exp_ge_card`,
`trace_exp_ge_card_add_trace`, `trace_exp_ge_of_diag_bound`.

New: `dagLoss_nonneg`, `dagLoss_log_nonneg` and `dagLoss_eq_log` (the absolute value in DL is
analytically redundant: tr exp(M ⊙ M)/d ≥ 1), `dagLoss_ge_of_diag` (if every M_ii² ≥ ε ≥ 0
then DL(M) ≥ log(1 + ε): exact acyclicity is unattainable on strictly positive deductive
tensors; at ε₀ = 1e-9, ε = 1e-18 is below float64 resolution of log near 1).

Not claimed: the NOTEARS equivalence "tr exp(M ⊙ M) = d iff acyclic".
-/
import Mathlib
import PldrLlmMathFoundations.DagLoss

noncomputable section

namespace Plga

open Matrix

/-- Paper: Thm. 4.4. Restates `PldrLlm.pow_entry_nonneg`: powers of an entrywise-nonnegative
matrix are entrywise nonnegative (closed-walk weights are nonnegative). -/
theorem pow_entry_nonneg {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ) (hN : ∀ i j, 0 ≤ N i j)
    (k : ℕ) : ∀ i j, 0 ≤ (N ^ k) i j :=
  PldrLlm.pow_entry_nonneg N hN k

/-- Paper: Thm. 4.4. Restates `PldrLlm.trace_pow_nonneg`: tr(N^k) ≥ 0 for entrywise
nonnegative N. -/
theorem trace_pow_nonneg {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ) (hN : ∀ i j, 0 ≤ N i j)
    (k : ℕ) : 0 ≤ Matrix.trace (N ^ k) :=
  PldrLlm.trace_pow_nonneg N hN k

-- The matrix exponential's Banach-algebra lemmas need a norm; the same local choice as the
-- published file (the L∞ operator norm).
attribute [local instance] Matrix.linftyOpNormedAddCommGroup Matrix.linftyOpNormedRing
  Matrix.linftyOpNormedAlgebra

/-- The DAG loss DL(M) = |log(tr exp(M ⊙ M) / d)|. Python: `dag_loss(m)`. -/
def dagLoss {d : ℕ} (M : Matrix (Fin d) (Fin d) ℝ) : ℝ :=
  |Real.log (Matrix.trace (NormedSpace.exp (M ⊙ M)) / (d : ℝ))|

/-- Paper: Thm. 4.4. Restates `PldrLlm.trace_exp_ge_card`: tr(exp N) ≥ d for entrywise
nonnegative N. -/
theorem trace_exp_ge_card {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ) (hN : ∀ i j, 0 ≤ N i j) :
    (d : ℝ) ≤ Matrix.trace (NormedSpace.exp N) :=
  PldrLlm.trace_exp_ge_card N hN

/-- Paper: Thm. 4.4. Restates `PldrLlm.trace_exp_ge_card_add_trace`: tr(exp N) ≥ d + tr N
for entrywise nonnegative N. -/
theorem trace_exp_ge_card_add_trace {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ)
    (hN : ∀ i j, 0 ≤ N i j) : (d : ℝ) + Matrix.trace N ≤ Matrix.trace (NormedSpace.exp N) :=
  PldrLlm.trace_exp_ge_card_add_trace N hN

/-- Paper: Rem. (DAG-loss positivity obstruction). Restates
`PldrLlm.trace_exp_ge_of_diag_bound`: if every diagonal entry of the entrywise-nonnegative N
is at least ε, then tr(exp N) ≥ d + d ε. -/
theorem trace_exp_ge_of_diag_bound {d : ℕ} (N : Matrix (Fin d) (Fin d) ℝ)
    (hN : ∀ i j, 0 ≤ N i j) (ε : ℝ) (hdiag : ∀ i, ε ≤ N i i) :
    (d : ℝ) + (d : ℝ) * ε ≤ Matrix.trace (NormedSpace.exp N) :=
  PldrLlm.trace_exp_ge_of_diag_bound N hN ε hdiag

/-- Paper: Thm. 4.4. The DAG loss is nonnegative. -/
theorem dagLoss_nonneg {d : ℕ} (M : Matrix (Fin d) (Fin d) ℝ) : 0 ≤ dagLoss M :=
  abs_nonneg _

/-- Paper: Thm. 4.4. For d ≥ 1 the logarithm inside the DAG loss is already nonnegative,
since tr exp(M ⊙ M) / d ≥ 1. -/
theorem dagLoss_log_nonneg {d : ℕ} [NeZero d] (M : Matrix (Fin d) (Fin d) ℝ) :
    0 ≤ Real.log (Matrix.trace (NormedSpace.exp (M ⊙ M)) / (d : ℝ)) := by
  have hN : ∀ i j, 0 ≤ (M ⊙ M) i j := fun i j => by
    rw [Matrix.hadamard_apply]
    exact mul_self_nonneg (M i j)
  have hd : (0 : ℝ) < (d : ℝ) := Nat.cast_pos.mpr (Nat.pos_of_ne_zero (NeZero.ne d))
  apply Real.log_nonneg
  rw [le_div_iff₀ hd, one_mul]
  exact trace_exp_ge_card (M ⊙ M) hN

/-- Paper: Thm. 4.4. The absolute value in the implemented DAG loss is redundant:
DL(M) = log(tr exp(M ⊙ M) / d) for d ≥ 1. -/
theorem dagLoss_eq_log {d : ℕ} [NeZero d] (M : Matrix (Fin d) (Fin d) ℝ) :
    dagLoss M = Real.log (Matrix.trace (NormedSpace.exp (M ⊙ M)) / (d : ℝ)) := by
  unfold dagLoss
  exact abs_of_nonneg (dagLoss_log_nonneg M)

/-- Paper: Rem. (DAG-loss positivity obstruction). If every squared diagonal entry M_ii² is
at least ε ≥ 0, then DL(M) ≥ log(1 + ε) > 0 for ε > 0: the DAG loss has a positive floor on
strictly positive tensors, and a reported 0 is floating-point underflow. -/
theorem dagLoss_ge_of_diag {d : ℕ} [NeZero d] (M : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ)
    (hε : 0 ≤ ε) (hdiag : ∀ i, ε ≤ M i i * M i i) : Real.log (1 + ε) ≤ dagLoss M := by
  have hN : ∀ i j, 0 ≤ (M ⊙ M) i j := fun i j => by
    rw [Matrix.hadamard_apply]
    exact mul_self_nonneg (M i j)
  have hdiag' : ∀ i, ε ≤ (M ⊙ M) i i := fun i => by
    rw [Matrix.hadamard_apply]
    exact hdiag i
  have hd : (0 : ℝ) < (d : ℝ) := Nat.cast_pos.mpr (Nat.pos_of_ne_zero (NeZero.ne d))
  have htr := trace_exp_ge_of_diag_bound (M ⊙ M) hN ε hdiag'
  have h1 : 0 < 1 + ε := by linarith
  have h2 : 1 + ε ≤ Matrix.trace (NormedSpace.exp (M ⊙ M)) / (d : ℝ) := by
    rw [le_div_iff₀ hd]
    have hring : (1 + ε) * (d : ℝ) = (d : ℝ) + (d : ℝ) * ε := by ring
    rw [hring]
    exact htr
  rw [dagLoss_eq_log]
  exact Real.log_le_log h1 h2

end Plga

end
