/-
# The metric learner Φ_res (docs/spec.md §1.3; paper Prop. 5.12, stage "shared row map")

Definitions (Python mirror in `reference/spec.py`). Each stage acts on the rows of the d×d
density operator independently; Lean states the row map and applies it per row.

* `swiglu x W₁ b₁ W₂ b₂ W₃ b₃` ↔ `swiglu(x, w1, b1, w2, b2, w3, b3)`:
  W₃ (silu(W₁ x + b₁) ⊙ (W₂ x + b₂)) + b₃ on one row x (weights in the torch `Linear`
  layout `[out, in]`, so `W *ᵥ x` is Python's `x @ w.T`);
* `resUnit x blocks γ β ε`       ↔ `res_unit(x, blocks, gamma, beta, eps)`:
  LN(glu_k ∘ … ∘ glu_1(x) + x), `blocks` a list of 6-tuples (W₁, b₁, W₂, b₂, W₃, b₃)
  (Python `GluParams`), applied first to last;
* `metricLearner D γ β units ε`  ↔ `metric_learner(density, ln_gamma, ln_beta, units, eps)`:
  A = Φ_res(LN(D)) row by row, `units` a list of (blocks, γ, β), applied first to last.

New results (no published counterpart):

* `swiglu_identity_eq_iswiglu` : with W₁ = W₂ = W₃ = I and zero biases SwiGLU is iSwiGLU
  (the implementation's description of iSwiGLU);
* `metricLearner_row_eq`       : output row i depends only on input row i — the learner is
  one shared row map φ (the structural premise of Prop. 5.12);
* `metricLearner_identical_rows` : identical input rows give identical output rows, so a
  rank-one identical-rows density stays identical-rows (Prop. 3.9 configuration).

Not claimed: any contraction constant of the trained units (see `Contraction.lean` for the
Lipschitz bookkeeping), and nothing about training.
-/
import Mathlib
import Plga.Iswiglu
import Plga.LayerNorm

noncomputable section

namespace Plga

open Matrix

/-- One SwiGLU block on a row x: W₃ (silu(W₁ x + b₁) ⊙ (W₂ x + b₂)) + b₃.
Python: `swiglu(x, w1, b1, w2, b2, w3, b3)`. -/
def swiglu {d F e : ℕ} (x : Fin d → ℝ) (W1 : Matrix (Fin F) (Fin d) ℝ) (b1 : Fin F → ℝ)
    (W2 : Matrix (Fin F) (Fin d) ℝ) (b2 : Fin F → ℝ) (W3 : Matrix (Fin e) (Fin F) ℝ)
    (b3 : Fin e → ℝ) : Fin e → ℝ :=
  W3 *ᵥ (fun f => silu ((W1 *ᵥ x) f + b1 f) * ((W2 *ᵥ x) f + b2 f)) + b3

/-- One residual unit of Φ_res on a row: LN(glu_k ∘ … ∘ glu_1(x) + x), blocks applied in
list order. Python: `res_unit(x, blocks, gamma, beta, eps)`. -/
def resUnit {d F : ℕ} (x : Fin d → ℝ)
    (blocks : List (Matrix (Fin F) (Fin d) ℝ × (Fin F → ℝ) × Matrix (Fin F) (Fin d) ℝ ×
      (Fin F → ℝ) × Matrix (Fin d) (Fin F) ℝ × (Fin d → ℝ)))
    (γ β : Fin d → ℝ) (ε : ℝ) : Fin d → ℝ :=
  layerNorm
    (blocks.foldl (fun y p => swiglu y p.1 p.2.1 p.2.2.1 p.2.2.2.1 p.2.2.2.2.1 p.2.2.2.2.2) x
      + x) γ β ε

/-- The metric learner A = Φ_res(LN(D)): the input LayerNorm, then every residual unit in
list order, on each row of D. Python: `metric_learner(density, ln_gamma, ln_beta, units,
eps)`. -/
def metricLearner {d F : ℕ} (D : Matrix (Fin d) (Fin d) ℝ) (γ β : Fin d → ℝ)
    (units : List (List (Matrix (Fin F) (Fin d) ℝ × (Fin F → ℝ) × Matrix (Fin F) (Fin d) ℝ ×
      (Fin F → ℝ) × Matrix (Fin d) (Fin F) ℝ × (Fin d → ℝ)) × (Fin d → ℝ) × (Fin d → ℝ)))
    (ε : ℝ) : Matrix (Fin d) (Fin d) ℝ :=
  Matrix.of fun i =>
    units.foldl (fun a u => resUnit a u.1 u.2.1 u.2.2 ε) (layerNorm (D i) γ β ε)

/-- Paper: Def. 3.1. With identity weights and zero biases SwiGLU is iSwiGLU entrywise:
silu(x) ⊙ x = x² σ(x) ("SwiGLU with W, V = identity and no bias"). -/
theorem swiglu_identity_eq_iswiglu {d : ℕ} (x : Fin d → ℝ) :
    swiglu x (1 : Matrix (Fin d) (Fin d) ℝ) 0 (1 : Matrix (Fin d) (Fin d) ℝ) 0
      (1 : Matrix (Fin d) (Fin d) ℝ) 0 = fun i => iswiglu (x i) := by
  funext i
  -- Unfolds to `silu (x i) * x i` (identity weights, zero biases); iSwiGLU is `x i * silu (x i)`.
  simp only [swiglu, Matrix.one_mulVec, Pi.add_apply, Pi.zero_apply, add_zero]
  rw [iswiglu_eq_mul_silu, mul_comm]

/-- Paper: Prop. 5.12. The metric learner is one shared row map: output row i depends only
on input row i (equal input rows, in the same or different matrices, give equal output
rows). -/
theorem metricLearner_row_eq {d F : ℕ} (D D' : Matrix (Fin d) (Fin d) ℝ) (γ β : Fin d → ℝ)
    (units : List (List (Matrix (Fin F) (Fin d) ℝ × (Fin F → ℝ) × Matrix (Fin F) (Fin d) ℝ ×
      (Fin F → ℝ) × Matrix (Fin d) (Fin F) ℝ × (Fin d → ℝ)) × (Fin d → ℝ) × (Fin d → ℝ)))
    (ε : ℝ) (i j : Fin d) (h : D i = D' j) :
    metricLearner D γ β units ε i = metricLearner D' γ β units ε j := by
  funext k
  simp only [metricLearner, Matrix.of_apply]
  rw [h]

/-- Paper: Prop. 3.9. Identical input rows give identical output rows: a density operator
with identical rows yields a generator A = 1 αᵀ with identical rows (the learned
singularity configuration). -/
theorem metricLearner_identical_rows {d F : ℕ} (D : Matrix (Fin d) (Fin d) ℝ)
    (γ β : Fin d → ℝ)
    (units : List (List (Matrix (Fin F) (Fin d) ℝ × (Fin F → ℝ) × Matrix (Fin F) (Fin d) ℝ ×
      (Fin F → ℝ) × Matrix (Fin d) (Fin F) ℝ × (Fin d → ℝ)) × (Fin d → ℝ) × (Fin d → ℝ)))
    (ε : ℝ) (h : ∀ i j, D i = D j) :
    ∀ i j, metricLearner D γ β units ε i = metricLearner D γ β units ε j :=
  fun i j => metricLearner_row_eq D D γ β units ε i j (h i j)

end Plga

end
