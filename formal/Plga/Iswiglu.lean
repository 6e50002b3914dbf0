/-
# iSwiGLU and the metric tensor (paper Def. 3.1, Prop. 3.7)

Definitions (Python mirror in `reference/spec.py`, table `LEAN_NAMES`):

* `sigmoid u`               ↔ `sigmoid(u)`: σ(u) = 1 / (1 + e^{−u});
* `silu u`                  ↔ `silu(u)`: SiLU(u) = u σ(u);
* `iswiglu u`               ↔ `iswiglu(u)`: iSwiGLU(u) = u² σ(u) (= u · SiLU(u));
* `metricTensor A W B ε`    ↔ `metric_tensor(a, w, b, eps)`: A_LM = iSwiGLU(W A + B) + ε,
  a matrix product `W A` followed by entrywise iSwiGLU (all four arguments explicit).

Restated from `PldrLlm` (`PldrLlmMathFoundations/Iswiglu.lean`), each proved by citing it:

* `sigmoid_pos`, `sigmoid_lt_one` : 0 < σ(u) < 1;
* `iswiglu_nonneg`                : iSwiGLU(u) ≥ 0 (Def. 3.1);
* `iswiglu_pos`                   : iSwiGLU(u) > 0 for u ≠ 0 (Prop. 3.7);
* `metric_entry_ge`, `metric_entry_pos` : every entry iSwiGLU(M_ij) + ε is ≥ ε, and > 0 for
  ε > 0 (Prop. 3.7: the power law A_LM^{⊙P} is well posed).

Bridges and new results:

* `sigmoid_eq_pldr`, `iswiglu_eq_pldr` : our definitions are the published ones;
* `iswiglu_eq_mul_silu`                : iSwiGLU(u) = u · SiLU(u), the form Python computes;
* `metricTensor_ge`, `metricTensor_pos`: the same bounds for the assembled `metricTensor`.

Not claimed: anything about the learned W, B beyond their shapes.
-/
import Mathlib
import PldrLlmMathFoundations.Iswiglu

noncomputable section

namespace Plga

open Matrix

/-- The logistic sigmoid σ(u) = 1 / (1 + e^{−u}). Python: `sigmoid(u)`. -/
def sigmoid (u : ℝ) : ℝ := 1 / (1 + Real.exp (-u))

/-- SiLU(u) = u σ(u). Python: `silu(u)`. -/
def silu (u : ℝ) : ℝ := u * sigmoid u

/-- iSwiGLU(u) = u² σ(u), the activation producing the metric tensor. Python: `iswiglu(u)`,
computed there as `u · silu(u)` (see `iswiglu_eq_mul_silu`). -/
def iswiglu (u : ℝ) : ℝ := u ^ 2 * sigmoid u

/-- The metric tensor A_LM = iSwiGLU(W A + B) + ε (entrywise after the matrix product W A).
Python: `metric_tensor(a, w, b, eps)`; all four arguments are explicit here. -/
def metricTensor {d : ℕ} (A W B : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) :
    Matrix (Fin d) (Fin d) ℝ :=
  Matrix.of fun i j => iswiglu ((W * A + B) i j) + ε

/-- Paper: new. Bridge: our `sigmoid` is definitionally the published `PldrLlm.sigmoid`. -/
theorem sigmoid_eq_pldr (u : ℝ) : sigmoid u = PldrLlm.sigmoid u := rfl

/-- Paper: new. Bridge: our `iswiglu` is definitionally the published `PldrLlm.iswiglu`. -/
theorem iswiglu_eq_pldr (u : ℝ) : iswiglu u = PldrLlm.iswiglu u := rfl

/-- Paper: Def. 3.1. iSwiGLU(u) = u · SiLU(u): the implementation's form (x · silu(x))
agrees with the paper's u² σ(u). -/
theorem iswiglu_eq_mul_silu (u : ℝ) : iswiglu u = u * silu u := by
  unfold iswiglu silu
  ring

/-- Paper: Prop. 3.7. Restates `PldrLlm.sigmoid_pos`: the sigmoid is strictly positive. -/
theorem sigmoid_pos (u : ℝ) : 0 < sigmoid u :=
  PldrLlm.sigmoid_pos u

/-- Paper: Prop. 3.7. Restates `PldrLlm.sigmoid_lt_one`: the sigmoid is below one. -/
theorem sigmoid_lt_one (u : ℝ) : sigmoid u < 1 :=
  PldrLlm.sigmoid_lt_one u

/-- Paper: Def. 3.1. Restates `PldrLlm.iswiglu_nonneg`: iSwiGLU is nonnegative everywhere
(unlike SiLU, which goes negative). -/
theorem iswiglu_nonneg (u : ℝ) : 0 ≤ iswiglu u :=
  PldrLlm.iswiglu_nonneg u

/-- Paper: Prop. 3.7. Restates `PldrLlm.iswiglu_pos`: iSwiGLU is strictly positive away
from zero. -/
theorem iswiglu_pos {u : ℝ} (hu : u ≠ 0) : 0 < iswiglu u :=
  PldrLlm.iswiglu_pos hu

/-- Paper: Prop. 3.7. Restates `PldrLlm.metric_entry_ge`: every metric-tensor entry
iSwiGLU(M_ij) + ε is at least ε, for any real ε. -/
theorem metric_entry_ge {d : ℕ} (M : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) (i j : Fin d) :
    ε ≤ iswiglu (M i j) + ε :=
  PldrLlm.metric_entry_ge M ε i j

/-- Paper: Prop. 3.7. Restates `PldrLlm.metric_entry_pos`: for ε > 0 every metric-tensor
entry is strictly positive, so the elementwise power A_LM^{⊙P} is well defined. -/
theorem metric_entry_pos {d : ℕ} (M : Matrix (Fin d) (Fin d) ℝ) {ε : ℝ} (hε : 0 < ε)
    (i j : Fin d) : 0 < iswiglu (M i j) + ε :=
  PldrLlm.metric_entry_pos M hε i j

/-- Paper: Prop. 3.7. Every entry of the assembled metric tensor iSwiGLU(W A + B) + ε is at
least ε. -/
theorem metricTensor_ge {d : ℕ} (A W B : Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) (i j : Fin d) :
    ε ≤ metricTensor A W B ε i j := by
  simp only [metricTensor, Matrix.of_apply]
  exact PldrLlm.metric_entry_ge (W * A + B) ε i j

/-- Paper: Prop. 3.7. For ε > 0 every entry of the assembled metric tensor is strictly
positive (the implementation's ε = 1e-9). -/
theorem metricTensor_pos {d : ℕ} (A W B : Matrix (Fin d) (Fin d) ℝ) {ε : ℝ} (hε : 0 < ε)
    (i j : Fin d) : 0 < metricTensor A W B ε i j := by
  simp only [metricTensor, Matrix.of_apply]
  exact PldrLlm.metric_entry_pos (W * A + B) hε i j

end Plga

end
