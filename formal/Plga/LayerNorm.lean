/-
# ε-LayerNorm with affine γ, β (paper Lem. 5.11)

Definitions (Python mirror in `reference/spec.py`; Lean acts on one row, Python on the last
axis of an array, i.e. on every row of a matrix):

* `rowMean r`          ↔ `row_mean(r)`: (Σ_i r_i) / d (0 for d = 0, Lean's x/0 = 0);
* `rowVar r`           ↔ `row_var(r)`: the biased variance (Σ_i (r_i − mean r)²) / d;
* `layerNorm r γ β ε`  ↔ `layer_norm(r, gamma, beta, eps)`:
  γ_i (r_i − mean r) / √(var r + ε) + β_i (`eps` explicit; 1e-6 in the model). A zero
  denominator gives β, as Python does.

The published `PldrLlm.lnEps ε γ β r` is the same map with arguments in another order (bridge
`layerNorm_eq_lnEps`).

Restated from `PldrLlm` (`PldrLlmMathFoundations/LayerNorm.lean`), each proved by citing it:
`rowVar_nonneg`, `rowMean_shift`, `rowVar_shift`, `lnEps_shift`, `rowMean_smul`,
`rowVar_smul`, `lnEps_scale_eps_zero`, `sum_sq_normalized`.

Not claimed: the quantitative scale-error inequality Lem. 5.11(ii) and the claim that no
ε > 0 map is scale invariant.
-/
import Mathlib
import PldrLlmMathFoundations.LayerNorm

noncomputable section

namespace Plga



/-- Mean of a row, (Σ_i r_i) / d. Python: `row_mean(r)`. -/
def rowMean {d : ℕ} (r : Fin d → ℝ) : ℝ := (∑ i, r i) / (d : ℝ)

/-- Biased variance of a row, (Σ_i (r_i − mean r)²) / d. Python: `row_var(r)`. -/
def rowVar {d : ℕ} (r : Fin d → ℝ) : ℝ := (∑ i, (r i - rowMean r) ^ 2) / (d : ℝ)

/-- ε-LayerNorm of a row with affine weight γ and bias β:
γ_i (r_i − mean r) / √(var r + ε) + β_i. Python: `layer_norm(r, gamma, beta, eps)`. -/
def layerNorm {d : ℕ} (r γ β : Fin d → ℝ) (ε : ℝ) : Fin d → ℝ :=
  fun i => γ i * ((r i - rowMean r) / Real.sqrt (rowVar r + ε)) + β i

/-- Paper: new. Bridge: our `layerNorm r γ β ε` is definitionally the published
`PldrLlm.lnEps ε γ β r` (same affine map, arguments in Python order). -/
theorem layerNorm_eq_lnEps {d : ℕ} (r γ β : Fin d → ℝ) (ε : ℝ) :
    layerNorm r γ β ε = PldrLlm.lnEps ε γ β r := rfl

/-- Paper: Lem. 5.11. Restates `PldrLlm.rowVar_nonneg`: the row variance is nonnegative. -/
theorem rowVar_nonneg {d : ℕ} (r : Fin d → ℝ) : 0 ≤ rowVar r :=
  PldrLlm.rowVar_nonneg r

/-- Paper: Lem. 5.11. Restates `PldrLlm.rowMean_shift`: mean(r + c·1) = mean(r) + c. -/
theorem rowMean_shift {d : ℕ} [NeZero d] (r : Fin d → ℝ) (c : ℝ) :
    rowMean (fun i => r i + c) = rowMean r + c :=
  PldrLlm.rowMean_shift r c

/-- Paper: Lem. 5.11. Restates `PldrLlm.rowVar_shift`: var(r + c·1) = var(r). -/
theorem rowVar_shift {d : ℕ} [NeZero d] (r : Fin d → ℝ) (c : ℝ) :
    rowVar (fun i => r i + c) = rowVar r :=
  PldrLlm.rowVar_shift r c

/-- Paper: Lem. 5.11. Restates `PldrLlm.lnEps_shift`: exact shift invariance
LN_ε(r + c·1) = LN_ε(r) for every ε, the one invariance that survives ε > 0. -/
theorem lnEps_shift {d : ℕ} [NeZero d] (ε : ℝ) (γ β : Fin d → ℝ) (r : Fin d → ℝ) (c : ℝ) :
    layerNorm (fun i => r i + c) γ β ε = layerNorm r γ β ε :=
  PldrLlm.lnEps_shift ε γ β r c

/-- Paper: Lem. 5.11. Restates `PldrLlm.rowMean_smul`: mean(c r) = c mean(r). -/
theorem rowMean_smul {d : ℕ} [NeZero d] (r : Fin d → ℝ) (c : ℝ) :
    rowMean (fun i => c * r i) = c * rowMean r :=
  PldrLlm.rowMean_smul r c

/-- Paper: Lem. 5.11. Restates `PldrLlm.rowVar_smul`: var(c r) = c² var(r). -/
theorem rowVar_smul {d : ℕ} [NeZero d] (r : Fin d → ℝ) (c : ℝ) :
    rowVar (fun i => c * r i) = c ^ 2 * rowVar r :=
  PldrLlm.rowVar_smul r c

/-- Paper: Lem. 5.11. Restates `PldrLlm.lnEps_scale_eps_zero`: exact positive-scale
invariance LN_0(c r) = LN_0(r) holds at ε = 0 on rows of positive variance (only there). -/
theorem lnEps_scale_eps_zero {d : ℕ} [NeZero d] (γ β : Fin d → ℝ) (r : Fin d → ℝ) {c : ℝ}
    (hc : 0 < c) (hv : 0 < rowVar r) :
    layerNorm (fun i => c * r i) γ β 0 = layerNorm r γ β 0 :=
  PldrLlm.lnEps_scale_eps_zero γ β r hc hv

/-- Paper: Lem. 5.11. Restates `PldrLlm.sum_sq_normalized`: the normalised row has squared
norm d·var/(var + ε) < d for ε > 0, so the range is a ball, not the ε = 0 sphere. -/
theorem sum_sq_normalized {d : ℕ} [NeZero d] (r : Fin d → ℝ) {ε : ℝ} (hε : 0 < ε) :
    ∑ i, ((r i - rowMean r) / Real.sqrt (rowVar r + ε)) ^ 2
      = (d : ℝ) * rowVar r / (rowVar r + ε) :=
  PldrLlm.sum_sq_normalized r hε

end Plga

end
