/-
# PLGA and SDPA attention; the SDPA special case, absorption, cache sufficiency
# (paper Thm. 5.4(i)–(ii), Prop. 5.2(i), 5.2(iii))

Definitions (Python mirror in `reference/spec.py`). `Q : S×d`, `G : d×d`, `K : T×d`,
`V : T×dv`; `J t` is the allowed key set of query row t (Python: row t of the boolean
`support` matrix).

* `plgaScores Q G K`        ↔ `plga_scores(q, g, k, sqrt_d)`: E = (Q G) Kᵀ / √d;
* `sdpaScores Q K`          ↔ `sdpa_scores(q, k, sqrt_d)`: Q Kᵀ / √d;
* `plgaAttention Q G K V J` ↔ `plga_attention(q, g, k, v, support, sqrt_d, fill)`:
  softmax_J(Q G Kᵀ / √d) V with the *ideal* masked softmax;
* `sdpaAttention Q K V J`   ↔ `sdpa_attention(q, k, v, support, sqrt_d, fill)`.

Lean fixes the optional Python arguments: `sqrt_d = None` (the scale is exactly √d, with
d = the head dimension), `fill = None` (the ideal mask `maskedSoftmax`), and a `support`
is always given (an all-true support is `J t = Finset.univ`).

The published `PldrLlm` statements carry no 1/√d factor; `plgaScores_eq_smul` is the
bridge, and the scaled results below are proved from the unscaled ones.

Restated from `PldrLlm` (`PldrLlmMathFoundations/InferenceCollapse.lean`), each proved by
citing it: `score_sdpa_special_case`, `absorb_operator`, `absorb_operator_affine`,
`cache_sufficiency_scores`, `cache_sufficiency_rows`.

New (scaled, at score and attention level):
`plga_scores_sdpa_special_case`, `plga_attention_sdpa_special_case` (Thm. 5.4(i));
`plgaScores_absorb`, `plgaAttention_absorb` (a constant G is SDPA on Q' = Q G) and
`plgaAttention_absorb_bias` (the affine query projection absorbs G into weight and bias,
no RoPE; Thm. 5.4(ii)); `plgaScores_cache`, `plgaScores_cache_rows`,
`plgaAttention_cache` (cache sufficiency, Prop. 5.2(i)); `plgaAttention_eq_of_row_shift`
(rows equal up to a per-row constant give equal attention, Prop. 5.2(iii) ⇐).

Not claimed: the converse of cache sufficiency (false; see `energyCurvature_const`), and the
RoPE-aware iff of Thm. 5.4(ii) (only sufficiency per plane / per block, in `Rope.lean`).
-/
import Mathlib
import PldrLlmMathFoundations.InferenceCollapse
import Plga.Softmax

noncomputable section

namespace Plga

open Matrix

/-- PLGA scores E = (Q G) Kᵀ / √d. Python: `plga_scores(q, g, k, sqrt_d=None)`. -/
def plgaScores {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (G : Matrix (Fin d) (Fin d) ℝ)
    (K : Matrix (Fin T) (Fin d) ℝ) : Matrix (Fin S) (Fin T) ℝ :=
  (Real.sqrt (d : ℝ))⁻¹ • (Q * G * Kᵀ)

/-- Scaled dot-product scores Q Kᵀ / √d. Python: `sdpa_scores(q, k, sqrt_d=None)`. -/
def sdpaScores {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ) :
    Matrix (Fin S) (Fin T) ℝ :=
  (Real.sqrt (d : ℝ))⁻¹ • (Q * Kᵀ)

/-- PLGA attention softmax_J(Q G Kᵀ / √d) V with the ideal masked softmax on each query row.
Python: `plga_attention(q, g, k, v, support, sqrt_d=None, fill=None)`. -/
def plgaAttention {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (G : Matrix (Fin d) (Fin d) ℝ)
    (K : Matrix (Fin T) (Fin d) ℝ) (V : Matrix (Fin T) (Fin dv) ℝ)
    (J : Fin S → Finset (Fin T)) : Matrix (Fin S) (Fin dv) ℝ :=
  Matrix.of (fun t => maskedSoftmax (plgaScores Q G K t) (J t)) * V

/-- Scaled dot-product attention softmax_J(Q Kᵀ / √d) V with the ideal masked softmax.
Python: `sdpa_attention(q, k, v, support, sqrt_d=None, fill=None)`. -/
def sdpaAttention {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ)
    (V : Matrix (Fin T) (Fin dv) ℝ) (J : Fin S → Finset (Fin T)) : Matrix (Fin S) (Fin dv) ℝ :=
  Matrix.of (fun t => maskedSoftmax (sdpaScores Q K t) (J t)) * V

/-- Paper: new. Bridge for the score scale: our scores are the published unscaled
`Q G Kᵀ` times 1/√d. -/
theorem plgaScores_eq_smul {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (G : Matrix (Fin d) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ) :
    plgaScores Q G K = (Real.sqrt (d : ℝ))⁻¹ • (Q * G * Kᵀ) := rfl

/-- Paper: Thm. 5.4(i). Restates `PldrLlm.score_sdpa_special_case`: with G = I the
(unscaled) PLGA score matrix is exactly the SDPA score matrix. -/
theorem score_sdpa_special_case {S d : ℕ} (Q K : Matrix (Fin S) (Fin d) ℝ) :
    Q * (1 : Matrix (Fin d) (Fin d) ℝ) * Kᵀ = Q * Kᵀ :=
  PldrLlm.score_sdpa_special_case Q K

/-- Paper: Thm. 5.4(ii). Restates `PldrLlm.absorb_operator`: a constant operator is absorbed
into the query projection, (X W) G = X (W G). -/
theorem absorb_operator {S d : ℕ} (X : Matrix (Fin S) (Fin d) ℝ)
    (W G : Matrix (Fin d) (Fin d) ℝ) : X * W * G = X * (W * G) :=
  PldrLlm.absorb_operator X W G

/-- Paper: Thm. 5.4(ii). Restates `PldrLlm.absorb_operator_affine`: the affine query
projection absorbs G into weight and bias together,
(X W + 1 b) G = X (W G) + 1 (b G). -/
theorem absorb_operator_affine {S d : ℕ} (X : Matrix (Fin S) (Fin d) ℝ)
    (W G : Matrix (Fin d) (Fin d) ℝ) (ones : Matrix (Fin S) (Fin 1) ℝ)
    (b : Matrix (Fin 1) (Fin d) ℝ) :
    (X * W + ones * b) * G = X * (W * G) + ones * (b * G) :=
  PldrLlm.absorb_operator_affine X W G ones b

/-- Paper: Prop. 5.2(i). Restates `PldrLlm.cache_sufficiency_scores`: if the recomputed
operator equals the cached one, the (unscaled) score matrices coincide. -/
theorem cache_sufficiency_scores {S d : ℕ} (Q K : Matrix (Fin S) (Fin d) ℝ)
    {G Gc : Matrix (Fin d) (Fin d) ℝ} (h : G = Gc) : Q * G * Kᵀ = Q * Gc * Kᵀ :=
  PldrLlm.cache_sufficiency_scores Q K h

/-- Paper: Prop. 5.2(i). Restates `PldrLlm.cache_sufficiency_rows`: equal operators give
equal ideal masked attention rows (unscaled scores). -/
theorem cache_sufficiency_rows {S d : ℕ} (Q K : Matrix (Fin S) (Fin d) ℝ)
    {G Gc : Matrix (Fin d) (Fin d) ℝ} (h : G = Gc) (J : Finset (Fin S)) (t : Fin S) :
    maskedSoftmax (fun j => (Q * G * Kᵀ) t j) J
      = maskedSoftmax (fun j => (Q * Gc * Kᵀ) t j) J :=
  PldrLlm.cache_sufficiency_rows Q K h J t

/-- Paper: Thm. 5.4(i). SDPA special case at score level, with the 1/√d scale: PLGA scores
with G = I are exactly the SDPA scores. -/
theorem plga_scores_sdpa_special_case {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (K : Matrix (Fin T) (Fin d) ℝ) : plgaScores Q 1 K = sdpaScores Q K := by
  unfold plgaScores sdpaScores
  rw [Matrix.mul_one]

/-- Paper: Thm. 5.4(i). SDPA special case at attention level: PLGA attention with G = I is
exactly scaled dot-product attention, for every mask. -/
theorem plga_attention_sdpa_special_case {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (K : Matrix (Fin T) (Fin d) ℝ) (V : Matrix (Fin T) (Fin dv) ℝ)
    (J : Fin S → Finset (Fin T)) : plgaAttention Q 1 K V J = sdpaAttention Q K V J := by
  unfold plgaAttention sdpaAttention
  rw [plga_scores_sdpa_special_case]

/-- Paper: Thm. 5.4(ii). Absorption at score level: PLGA scores with a constant operator G
are SDPA scores of the queries Q' = Q G. -/
theorem plgaScores_absorb {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (G : Matrix (Fin d) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ) :
    plgaScores Q G K = sdpaScores (Q * G) K := rfl

/-- Paper: Thm. 5.4(ii). Absorption at attention level: PLGA attention with a constant
operator G is SDPA attention on the queries Q' = Q G (so it can run on fused SDPA
kernels). -/
theorem plgaAttention_absorb {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (G : Matrix (Fin d) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ)
    (V : Matrix (Fin T) (Fin dv) ℝ) (J : Fin S → Finset (Fin T)) :
    plgaAttention Q G K V J = sdpaAttention (Q * G) K V J := rfl

/-- Paper: Thm. 5.4(ii). Absorption with bias, without RoPE: for the affine query projection
Q = X W + 1 b (any input width m), PLGA attention with a constant G is SDPA attention with
the reparametrised projection W' = W G, b' = b G. -/
theorem plgaAttention_absorb_bias {S T m d dv : ℕ} (X : Matrix (Fin S) (Fin m) ℝ)
    (W : Matrix (Fin m) (Fin d) ℝ) (ones : Matrix (Fin S) (Fin 1) ℝ)
    (b : Matrix (Fin 1) (Fin d) ℝ) (G : Matrix (Fin d) (Fin d) ℝ)
    (K : Matrix (Fin T) (Fin d) ℝ) (V : Matrix (Fin T) (Fin dv) ℝ)
    (J : Fin S → Finset (Fin T)) :
    plgaAttention (X * W + ones * b) G K V J
      = sdpaAttention (X * (W * G) + ones * (b * G)) K V J := by
  rw [plgaAttention_absorb, Matrix.add_mul, Matrix.mul_assoc, Matrix.mul_assoc]

/-- Paper: Prop. 5.2(i). Cache sufficiency at score level (scaled): if the recomputed
operator equals the cached one, the scores coincide. -/
theorem plgaScores_cache {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    {G Gc : Matrix (Fin d) (Fin d) ℝ} (K : Matrix (Fin T) (Fin d) ℝ) (h : G = Gc) :
    plgaScores Q G K = plgaScores Q Gc K := by
  rw [h]

/-- Paper: Prop. 5.2(i). Cache sufficiency at masked-row level (scaled): equal operators
give equal ideal masked attention rows, for every row t and allowed set J. -/
theorem plgaScores_cache_rows {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    {G Gc : Matrix (Fin d) (Fin d) ℝ} (K : Matrix (Fin T) (Fin d) ℝ) (h : G = Gc)
    (J : Finset (Fin T)) (t : Fin S) :
    maskedSoftmax (plgaScores Q G K t) J = maskedSoftmax (plgaScores Q Gc K t) J := by
  rw [h]

/-- Paper: Prop. 5.2(i). Cache sufficiency at attention level: equal operators give equal
attention outputs. -/
theorem plgaAttention_cache {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    {G Gc : Matrix (Fin d) (Fin d) ℝ} (K : Matrix (Fin T) (Fin d) ℝ)
    (V : Matrix (Fin T) (Fin dv) ℝ) (J : Fin S → Finset (Fin T)) (h : G = Gc) :
    plgaAttention Q G K V J = plgaAttention Q Gc K V J := by
  rw [h]

/-- Paper: Prop. 5.2(iii). If every score row under G' equals the row under G plus a
per-row constant c t, the attention outputs coincide (for every mask): exact functional
cache equivalence needs only row-wise shifts, not G' = G. -/
theorem plgaAttention_eq_of_row_shift {S T d dv : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ)
    (G G' : Matrix (Fin d) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ)
    (V : Matrix (Fin T) (Fin dv) ℝ) (J : Fin S → Finset (Fin T)) (c : Fin S → ℝ)
    (h : ∀ t j, plgaScores Q G' K t j = plgaScores Q G K t j + c t) :
    plgaAttention Q G' K V J = plgaAttention Q G K V J := by
  have hrow : ∀ t, maskedSoftmax (plgaScores Q G' K t) (J t)
      = maskedSoftmax (plgaScores Q G K t) (J t) := by
    intro t
    have ht : plgaScores Q G' K t = fun j => plgaScores Q G K t j + c t := funext (h t)
    rw [ht, maskedSoftmax_shift]
  unfold plgaAttention
  simp only [hrow]

end Plga

end
