/-
# The power law stage: A_P = A_LM^{⊙P} and G_LM = a A_P + b_a (paper Prop. 3.7, docs/spec.md §1.6–1.7)

Definitions (Python mirror in `reference/spec.py`):

* `hadamardPower A P`       ↔ `hadamard_power(a_lm, p)`: (A^{⊙P})_ij = A_ij^{P_ij} with the
  real power `Real.rpow` (the published `PldrLlm.hadPow`);
* `energyCurvature AP a ba` ↔ `energy_curvature(a_p, a, b_a)`: G_LM = a A_P + b_a (a left
  matrix product).

Restated from `PldrLlm` (`PldrLlmMathFoundations/HadamardPower.lean`), each proved by citing
it: `hadPow_apply`, `hadPow_zero`, `hadPow_add` (stated for `hadamardPower`).

New: `hadamardPower_eq_pldr` (bridge), `hadamardPower_pos` (positive base ⇒ positive power
tensor, any exponent), `powerTensor_pos` (A_P = (iSwiGLU(W A + B) + ε)^{⊙P} is entrywise
positive for ε > 0), `energyCurvature_const` (a = 0, b_a = G* gives G_LM = G* for every A_P:
the paper's counterexample to the converse of cacheability), `energyCurvature_sdpa`
(a = 0, b_a = I gives the SDPA operator).

Rpow conventions (x^0 = 1 for every x, 0^y = 0 for y ≠ 0, negative bases via cos) differ from
IEEE; the Python mirror uses |A|^P only where A > 0.
-/
import Mathlib
import PldrLlmMathFoundations.HadamardPower
import Plga.Iswiglu

noncomputable section

namespace Plga

open Matrix

/-- Elementwise (Hadamard) real power (A^{⊙P})_ij = A_ij^{P_ij}. Python:
`hadamard_power(a_lm, p)`. -/
def hadamardPower {d : ℕ} (A P : Matrix (Fin d) (Fin d) ℝ) : Matrix (Fin d) (Fin d) ℝ :=
  Matrix.of fun i j => A i j ^ P i j

/-- The energy-curvature operator G_LM = a A_P + b_a (matrix product a A_P). Python:
`energy_curvature(a_p, a, b_a)`. -/
def energyCurvature {d : ℕ} (AP a ba : Matrix (Fin d) (Fin d) ℝ) : Matrix (Fin d) (Fin d) ℝ :=
  a * AP + ba

/-- Paper: new. Bridge: our `hadamardPower` is definitionally the published
`PldrLlm.hadPow`. -/
theorem hadamardPower_eq_pldr {d : ℕ} (A P : Matrix (Fin d) (Fin d) ℝ) :
    hadamardPower A P = PldrLlm.hadPow A P := rfl

/-- Paper: Prop. 3.7. Restates `PldrLlm.hadPow_apply`: the entry formula
(A^{⊙P})_ij = A_ij^{P_ij}. -/
theorem hadPow_apply {d : ℕ} (A P : Matrix (Fin d) (Fin d) ℝ) (i j : Fin d) :
    hadamardPower A P i j = A i j ^ P i j :=
  PldrLlm.hadPow_apply A P i j

/-- Paper: Prop. 3.7. Restates `PldrLlm.hadPow_zero`: the zero exponent gives the all-ones
matrix, for every A (rpow has x^0 = 1 for all real x). -/
theorem hadPow_zero {d : ℕ} (A : Matrix (Fin d) (Fin d) ℝ) :
    hadamardPower A 0 = Matrix.of (fun i j => (1 : ℝ)) :=
  PldrLlm.hadPow_zero A

/-- Paper: Prop. 3.7. Restates `PldrLlm.hadPow_add`: for entrywise-positive A,
A^{⊙(s+t)P} = A^{⊙sP} ⊙ A^{⊙tP} (a one-parameter multiplicative group). -/
theorem hadPow_add {d : ℕ} (A P : Matrix (Fin d) (Fin d) ℝ) (hA : ∀ i j, 0 < A i j)
    (s t : ℝ) :
    hadamardPower A ((s + t) • P) = hadamardPower A (s • P) ⊙ hadamardPower A (t • P) :=
  PldrLlm.hadPow_add A P hA s t

/-- Paper: Prop. 3.7. An entrywise-positive base gives an entrywise-positive power tensor,
whatever the (signed) exponent matrix. -/
theorem hadamardPower_pos {d : ℕ} (A P : Matrix (Fin d) (Fin d) ℝ) (hA : ∀ i j, 0 < A i j)
    (i j : Fin d) : 0 < hadamardPower A P i j := by
  have h := hA i j
  simp only [hadamardPower, Matrix.of_apply]
  positivity

/-- Paper: Prop. 3.7. The power tensor A_P = (iSwiGLU(W A + B) + ε)^{⊙P} of the PLGA chain is
entrywise strictly positive for ε > 0: the power law is well posed. -/
theorem powerTensor_pos {d : ℕ} (A W B P : Matrix (Fin d) (Fin d) ℝ) {ε : ℝ} (hε : 0 < ε)
    (i j : Fin d) : 0 < hadamardPower (metricTensor A W B ε) P i j :=
  hadamardPower_pos (metricTensor A W B ε) P (fun k l => metricTensor_pos A W B hε k l) i j

/-- Paper: Rem. (counterexample to the converse of Prop. 5.2(i)). With a = 0 and b_a = G*,
the energy-curvature operator is the constant G* whatever A_P is: caching is exact while the
upstream tensors A, A_LM, A_P vary. -/
theorem energyCurvature_const {d : ℕ} (AP Gstar : Matrix (Fin d) (Fin d) ℝ) :
    energyCurvature AP 0 Gstar = Gstar := by
  simp [energyCurvature]

/-- Paper: Thm. 5.4(i). With a = 0 and b_a = I the energy-curvature operator is the
identity, the SDPA point of the PLGA family. -/
theorem energyCurvature_sdpa {d : ℕ} (AP : Matrix (Fin d) (Fin d) ℝ) :
    energyCurvature AP 0 1 = 1 :=
  energyCurvature_const AP 1

end Plga

end
