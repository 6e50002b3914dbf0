/-
# A concrete PLGA decoder and its collapse (paper Thm. 5.4, Prop. 5.2(i), Def. 4.8)

The model-level results of `Collapse.lean` quantify over an abstract decoder. This file builds
the decoder the reference implements (`reference/decoder.py`) and proves the collapse theorems
about it, for every input and every length.

Concrete pieces. A hidden row is `δ → ℝ` (any finite index type δ); a head vector is
`Fin 2 × Fin m → ℝ` (head dimension d = 2m, RoPE's interleaved layout, see `Rope.lean`).

* `ropeRow W base p x`     : R(p) (W x), the rotated query or key of row x at position p
  (torch `Linear` weight layout `[out, in]`, no bias);
* `opScore G q k`          : q · (G k) / √d — the per-head operator G acts *after* RoPE;
* `attendRow G q ks vs`    : Σ_s e^{score_s} v_s / Σ_s e^{score_s} over the given keys (the
  ideal softmax; the causal mask gives a row exactly the keys of its own prefix);
* `headRow G Wq Wk Wv base p` : the last row of one head on the prefix p: its query at
  position |p| − 1 against every key of p at positions 0, 1, …;
* `frozenLayer Gs … post x` : one decoder layer with per-head operators Gs frozen: row t is
  `post x_t (heads on x.take (t+1))`, where `post` is the rest of the layer as one row map
  (head concatenation, W_O, residual, LayerNorm, gated feed-forward, residual, LayerNorm —
  kept abstract);
* `gramOf Wq base x`       : D = Σ_s q_s q_sᵀ over the rotated queries of the *whole* input
  (`densityOperator` of the query block, `DensityOperator.lean`);
* `generatedLayer gen …`   : the PLGA layer — the same layer with Gs = gen(D) computed from the
  whole input's Gram, as `decoder.decoder_layer` does;
* `plgaGenerator learner W B P a ba ε D` : the concrete generator Gram → G_LM: metric learner
  (any map, `metricLearner` with its weights is the intended one), then
  a (iSwiGLU(W A + B) + ε)^{⊙P} + b_a, in the interleaved column order of Python;
* `frozenDecoder`, `sdpaDecoder`, `generatedDecoder` : L such layers applied in order.

Results (all new):

* (a) `headRow_eq_sdpa`, `frozenLayer_eq_sdpaLayer`, `frozenDecoder_eq_sdpaDecoder`: with
  frozen operators the decoder is, head by head and layer by layer, the SDPA decoder (operator
  I) fed the queries rope(q)·G* (generalized SDPA);
* (b) `frozenDecoder_prefixConsistentShaped`: a frozen-operator decoder satisfies Def. 4.8,
  so KV caching (recomputing only the new row from its prefix) is exact;
* (c) `generatedLayer_not_prefixConsistent`: with a Gram-dependent generator, weights and an
  input exist for which the layer (a one-layer decoder) is not prefix consistent. The witness
  generator is the simplest Gram-dependent one, G = D itself (one head, d = 2, identity
  projections, input [0, v, R(−1) v] with v = (1, 1)): appending the third row doubles the Gram,
  so row 1's score q·(G q)/√2 doubles and its softmax weight moves. It is not the trained
  metric-learner chain; that failure is measured on the reference decoder by the bridge
  (`uncollapsed_drift`, reported by the check of `collapsed_prefixConsistentShaped`);
* (d) `generatedDecoder_eq_frozen`, `plgaGenerator_const`, `collapsed_prefixConsistentShaped`:
  if the generator (in particular the metric learner's output) is constant on the Grams the
  decoder reaches, the PLGA decoder is the frozen-operator decoder, hence (a) and (b) hold.

Not claimed: the embedding, the final projection, padding masks, the finite −1e9 mask
(`finiteMaskSoftmax_le` bounds it) and float32 square roots; `post` is abstract.
-/
import Mathlib
import Plga.DensityOperator
import Plga.HadamardPower
import Plga.MetricLearner
import Plga.OnlineContract
import Plga.Rope

noncomputable section

namespace Plga

open Matrix

/-- The rotated query or key R(p) (W x) of hidden row x at position p.
Python: row p of `spec.rope(_heads(_linear(h, params, "wq")), positions, base)`. -/
def ropeRow {δ : Type*} [Fintype δ] {m : ℕ} (W : Matrix (Fin 2 × Fin m) δ ℝ) (base p : ℝ)
    (x : δ → ℝ) : Fin 2 × Fin m → ℝ :=
  ropeMatrix p (fun j => ropeFrequencies (2 * m) base j) *ᵥ (W *ᵥ x)

/-- The PLGA score q · (G k) / √d of a rotated query against a rotated key (d = 2m).
Python: `spec.plga_scores(q, g_lm, k)`, one entry. -/
def opScore {m : ℕ} (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (q k : Fin 2 × Fin m → ℝ) : ℝ :=
  q ⬝ᵥ (G *ᵥ k) / Real.sqrt (2 * m : ℝ)

/-- Ideal-softmax attention of one query over the keys ks and values vs:
Σ_s e^{score_s} v_s / Σ_s e^{score_s}. Python: one row of `spec.plga_attention`. -/
def attendRow {m : ℕ} (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ) (q : Fin 2 × Fin m → ℝ)
    (ks vs : List (Fin 2 × Fin m → ℝ)) : Fin 2 × Fin m → ℝ :=
  ((ks.map fun k => Real.exp (opScore G q k)).sum)⁻¹ •
    (List.zipWith (fun k v => Real.exp (opScore G q k) • v) ks vs).sum

/-- The keys R(s) Wk x_s of a prefix, at positions 0, 1, …. -/
def prefixKeys {δ : Type*} [Fintype δ] {m : ℕ} (Wk : Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (p : List (δ → ℝ)) : List (Fin 2 × Fin m → ℝ) :=
  p.mapIdx fun s x => ropeRow Wk base s x

/-- The last row of one head on the prefix p (the causal mask's view of row |p| − 1): its
query at position |p| − 1 attends to every key of p. Python: one head, one row of
`decoder.decoder_layer`. -/
def headRow {δ : Type*} [Fintype δ] {m : ℕ} (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ) (p : List (δ → ℝ)) : Fin 2 × Fin m → ℝ :=
  attendRow G (ropeRow Wq base ((p.length : ℝ) - 1) (p.getLastD 0)) (prefixKeys Wk base p)
    (p.map fun x => Wv *ᵥ x)

/-- One decoder layer with frozen per-head operators Gs: row t is `post` of the input row and
of every head's row on the prefix x.take (t+1). Python: `decoder.decoder_layer(…,
constant_g=Gs)`. -/
def frozenLayer {δ : Type*} [Fintype δ] {H m : ℕ}
    (Gs : Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  rowMapDecoder (fun p => post (p.getLastD 0) (fun h => headRow (Gs h) (Wq h) (Wk h) (Wv h) base p)) x

/-- The SDPA layer (operator I) fed the queries rope(q)·Gq: the generalized SDPA of Thm. 5.4.
Python: `spec.sdpa_attention(q_rot @ g, k_rot, v, support)` per head. -/
def sdpaLayer {δ : Type*} [Fintype δ] {H m : ℕ}
    (Gq : Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  rowMapDecoder (fun p => post (p.getLastD 0) (fun h =>
    attendRow 1 (ropeRow (Wq h) base ((p.length : ℝ) - 1) (p.getLastD 0) ᵥ* Gq h)
      (prefixKeys (Wk h) base p) (p.map fun x => Wv h *ᵥ x))) x

/-- The Gram D = Σ_s q_s q_sᵀ of the rotated queries of the whole input (the density operator
of the query block). Python: `spec.density_operator(q_rot)`. -/
def gramOf {δ : Type*} [Fintype δ] {m : ℕ} (Wq : Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (x : List (δ → ℝ)) : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ :=
  ((x.mapIdx fun s r => ropeRow Wq base s r).map fun q => vecMulVec q q).sum

/-- The PLGA layer: the operators are generated from the whole input's Gram, G_h = gen h (D_h),
and every row uses them. Python: `decoder.decoder_layer` without cache. -/
def generatedLayer {δ : Type*} [Fintype δ] {H m : ℕ}
    (gen : Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  frozenLayer (fun h => gen h (gramOf (Wq h) base x)) Wq Wk Wv base post x

/-- Python's interleaved column order, the equivalence Fin 2 × Fin m ≃ Fin (m * 2),
(c, j) ↦ 2j + c (its type is left to Lean: the bridge's header grammar has no `≃`). -/
def interleave (m : ℕ) :=
  (Equiv.prodComm (Fin 2) (Fin m)).trans (finProdFinEquiv : Fin m × Fin 2 ≃ Fin (m * 2))

/-- The concrete generator Gram → G_LM: A = learner(D) (the metric learner with its weights),
then G_LM = a (iSwiGLU(W A + B) + ε)^{⊙P} + b_a, all in Python's column order.
Python: `decoder.generator` then `decoder.power_stage`. -/
def plgaGenerator {m : ℕ}
    (learner : Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ → Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ)
    (W B P a ba : Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ) (ε : ℝ)
    (D : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ) : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ :=
  Matrix.reindex (interleave m).symm (interleave m).symm
    (energyCurvature
      (hadamardPower (metricTensor (learner (Matrix.reindex (interleave m) (interleave m) D)) W B ε) P)
      a ba)

/-- L frozen-operator layers applied in order. Python: `decoder.forward(…, constant_g=Gs)`
without embedding and final projection. -/
def frozenDecoder {δ : Type*} [Fintype δ] {L H m : ℕ}
    (Gs : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  (List.finRange L).foldl (fun y l => frozenLayer (Gs l) (Wq l) (Wk l) (Wv l) base (post l) y) x

/-- L generalized-SDPA layers applied in order. -/
def sdpaDecoder {δ : Type*} [Fintype δ] {L H m : ℕ}
    (Gq : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  (List.finRange L).foldl (fun y l => sdpaLayer (Gq l) (Wq l) (Wk l) (Wv l) base (post l) y) x

/-- L PLGA layers applied in order, each generating its operators from its own input.
Python: `decoder.forward` without embedding and final projection. -/
def generatedDecoder {δ : Type*} [Fintype δ] {L H m : ℕ}
    (gen : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ →
      Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    List (δ → ℝ) :=
  (List.finRange L).foldl (fun y l => generatedLayer (gen l) (Wq l) (Wk l) (Wv l) base (post l) y) x

/-- Prefix locality: equal length-n prefixes of the input give equal length-n prefixes of the
output. It composes, and it implies row-locality. -/
private def PrefixLocal {σ ρ : Type*} (F : List σ → List ρ) : Prop :=
  ∀ (x y : List σ) (n : ℕ), x.take n = y.take n → (F x).take n = (F y).take n

private theorem rowMapDecoder_prefixLocal {σ ρ : Type*} (f : List σ → ρ) :
    PrefixLocal (rowMapDecoder f) := by
  intro x y n h
  apply List.ext_getElem?
  intro i
  by_cases hi : i < n
  · -- row i < n: both inputs agree on their first i+1 rows, and row i sees only those
    have hle : i + 1 ≤ n := hi
    have hxy : x.take (i + 1) = y.take (i + 1) := by
      have h' := congrArg (List.take (i + 1)) h
      simpa [List.take_take, Nat.min_eq_left hle, Nat.min_eq_right hle] using h'
    have e := rowMapDecoder_rowLocal f x y i hxy
    simpa [List.getElem?_take, hi] using e
  · -- row i ≥ n: both truncated outputs have no row i
    simp [List.getElem?_take, hi]

private theorem rowLocal_of_prefixLocal {σ ρ : Type*} {F : List σ → List ρ}
    (h : PrefixLocal F) : RowLocal F := by
  intro x y r hxy
  -- read row r of the two equal length-(r+1) prefixes of the outputs
  have e := congrArg (fun l => l[r]?) (h x y (r + 1) hxy)
  simpa [List.getElem?_take] using e

private theorem foldl_prefixLocal {ι σ : Type*} (ls : List ι) (layer : ι → List σ → List σ)
    (h : ∀ l, PrefixLocal (layer l)) :
    PrefixLocal (fun x => ls.foldl (fun y l => layer l y) x) := by
  induction ls with
  | nil => exact fun x y n hxy => hxy
  | cons l ls ih => exact fun x y n hxy => ih (layer l x) (layer l y) n (h l x y n hxy)

private theorem foldl_lengthPreserving {ι σ : Type*} (ls : List ι) (layer : ι → List σ → List σ)
    (h : ∀ l, LengthPreserving (layer l)) :
    LengthPreserving (fun x => ls.foldl (fun y l => layer l y) x) := by
  induction ls with
  | nil => exact fun x => rfl
  | cons l ls ih => exact fun x => (ih (layer l x)).trans (h l x)

/-- Paper: Thm. 5.4(ii). One head with a frozen operator G is SDPA (operator I) fed the
rotated queries times G: q · (G k) = (q G) · k on every key of every prefix. -/
theorem headRow_eq_sdpa {δ : Type*} [Fintype δ] {m : ℕ}
    (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ) (Wq Wk Wv : Matrix (Fin 2 × Fin m) δ ℝ)
    (base : ℝ) (p : List (δ → ℝ)) :
    headRow G Wq Wk Wv base p
      = attendRow 1 (ropeRow Wq base ((p.length : ℝ) - 1) (p.getLastD 0) ᵥ* G)
          (prefixKeys Wk base p) (p.map fun x => Wv *ᵥ x) := by
  simp only [headRow, attendRow, opScore, Matrix.dotProduct_mulVec, Matrix.one_mulVec,
    Matrix.vecMul_one]

/-- Paper: Thm. 5.4(ii). Layer level: a layer with frozen operators Gs equals the SDPA layer
fed rope(q)·Gs, head by head, for every input and every length. -/
theorem frozenLayer_eq_sdpaLayer {δ : Type*} [Fintype δ] {H m : ℕ}
    (Gs : Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    frozenLayer Gs Wq Wk Wv base post x = sdpaLayer Gs Wq Wk Wv base post x := by
  simp only [frozenLayer, sdpaLayer, headRow_eq_sdpa]

/-- Paper: Thm. 5.4(ii). Model level: a decoder whose operators are frozen at G* is the
SDPA decoder fed rope(q)·G*, layer by layer, for every input and every length. -/
theorem frozenDecoder_eq_sdpaDecoder {δ : Type*} [Fintype δ] {L H m : ℕ}
    (Gs : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) (x : List (δ → ℝ)) :
    frozenDecoder Gs Wq Wk Wv base post x = sdpaDecoder Gs Wq Wk Wv base post x := by
  simp only [frozenDecoder, sdpaDecoder, frozenLayer_eq_sdpaLayer]

/-- Paper: Def. 4.8, Thm. 5.4. A frozen-operator decoder is prefix consistent as a
well-shaped map: row r of the full pass equals row r recomputed from the first r+1 rows, so
KV caching is exact. -/
theorem frozenDecoder_prefixConsistentShaped {δ : Type*} [Fintype δ] {L H m : ℕ}
    (Gs : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ) :
    PrefixConsistentShaped (frozenDecoder Gs Wq Wk Wv base post) := by
  have hL : ∀ l : Fin L, LengthPreserving (frozenLayer (Gs l) (Wq l) (Wk l) (Wv l) base (post l)) :=
    fun l => rowMapDecoder_lengthPreserving _
  have hP : ∀ l : Fin L, PrefixLocal (frozenLayer (Gs l) (Wq l) (Wk l) (Wv l) base (post l)) :=
    fun l => rowMapDecoder_prefixLocal _
  exact prefixConsistentShaped_of_rowLocal (foldl_lengthPreserving (List.finRange L) _ hL)
    (rowLocal_of_prefixLocal (foldl_prefixLocal (List.finRange L) _ hP))

/-- Paper: Thm. 5.4, Prop. 5.2(i). If every layer's generator returns G* on the Gram of every
input that layer can receive, the PLGA decoder is the frozen-operator decoder. -/
theorem generatedDecoder_eq_frozen {δ : Type*} [Fintype δ] {L H m : ℕ}
    (gen : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ →
      Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Gstar : Fin L → Fin H → Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ)
    (h : ∀ l hd y, gen l hd (gramOf (Wq l hd) base y) = Gstar l hd) (x : List (δ → ℝ)) :
    generatedDecoder gen Wq Wk Wv base post x = frozenDecoder Gstar Wq Wk Wv base post x := by
  simp only [generatedDecoder, frozenDecoder, generatedLayer, h]

/-- Paper: Thm. 5.4 (model level). If the metric learner's output is A* on every Gram of a
set s, the concrete generator returns the same G_LM on all of s: a collapsed learner gives a
collapsed operator. -/
theorem plgaGenerator_const {m : ℕ}
    (learner : Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ → Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ)
    (Astar W B P a ba : Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ) (ε : ℝ)
    (s : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ → Prop)
    (h : ∀ D, s D → learner (Matrix.reindex (interleave m) (interleave m) D) = Astar) :
    ∀ D, s D → plgaGenerator learner W B P a ba ε D
      = Matrix.reindex (interleave m).symm (interleave m).symm
          (energyCurvature (hadamardPower (metricTensor Astar W B ε) P) a ba) := by
  intro D hD
  simp only [plgaGenerator, h D hD]

/-- Paper: Thm. 5.4, Def. 4.8. Composition: if the metric learner's output is constant on the
Grams every layer reaches, the PLGA decoder with the concrete generator is prefix consistent
(and, by `frozenDecoder_eq_sdpaDecoder`, a generalized SDPA decoder). -/
theorem collapsed_prefixConsistentShaped {δ : Type*} [Fintype δ] {L H m : ℕ}
    (learner : Fin L → Fin H → Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ →
      Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ)
    (Astar W B P a ba : Fin L → Fin H → Matrix (Fin (m * 2)) (Fin (m * 2)) ℝ) (ε : ℝ)
    (Wq Wk Wv : Fin L → Fin H → Matrix (Fin 2 × Fin m) δ ℝ) (base : ℝ)
    (post : Fin L → (δ → ℝ) → (Fin H → Fin 2 × Fin m → ℝ) → δ → ℝ)
    (h : ∀ l hd y, learner l hd (Matrix.reindex (interleave m) (interleave m)
      (gramOf (Wq l hd) base y)) = Astar l hd) :
    PrefixConsistentShaped (generatedDecoder
      (fun l hd => plgaGenerator (learner l hd) (W l hd) (B l hd) (P l hd) (a l hd) (ba l hd) ε)
      Wq Wk Wv base post) := by
  have hgen : ∀ l hd y, plgaGenerator (learner l hd) (W l hd) (B l hd) (P l hd) (a l hd) (ba l hd) ε
      (gramOf (Wq l hd) base y) = Matrix.reindex (interleave m).symm (interleave m).symm
        (energyCurvature (hadamardPower (metricTensor (Astar l hd) (W l hd) (B l hd) ε) (P l hd))
          (a l hd) (ba l hd)) := by
    intro l hd y
    refine plgaGenerator_const (learner l hd) (Astar l hd) (W l hd) (B l hd) (P l hd) (a l hd)
      (ba l hd) ε (fun D => ∃ y', D = gramOf (Wq l hd) base y') ?_ _ ⟨y, rfl⟩
    intro D hD
    obtain ⟨y', rfl⟩ := hD
    exact h l hd y'
  rw [funext (generatedDecoder_eq_frozen
    (fun l hd => plgaGenerator (learner l hd) (W l hd) (B l hd) (P l hd) (a l hd) (ba l hd) ε)
    (fun l hd => Matrix.reindex (interleave m).symm (interleave m).symm
      (energyCurvature (hadamardPower (metricTensor (Astar l hd) (W l hd) (B l hd) ε) (P l hd))
        (a l hd) (ba l hd)))
    Wq Wk Wv base post hgen)]
  exact frozenDecoder_prefixConsistentShaped _ Wq Wk Wv base post

/-! ### (c) The counterexample: a Gram-dependent operator breaks prefix consistency -/

/-- The identity head projection of the counterexample (d = 2, one RoPE plane). -/
private abbrev I2 : Matrix (Fin 2 × Fin 1) (Fin 2 × Fin 1) ℝ := 1

/-- The row v = (1, 1) of the counterexample. -/
private def vOnes : Fin 2 × Fin 1 → ℝ := fun _ => 1

/-- The appended row R(−1) v: at position 2 its rotated key is v's key at position 1. -/
private def backRow (base : ℝ) (v : Fin 2 × Fin 1 → ℝ) : Fin 2 × Fin 1 → ℝ :=
  ropeMatrix (-1) (fun j => ropeFrequencies (2 * 1) base j) *ᵥ v

private theorem rowMapDecoder_getElem? {σ ρ : Type*} (f : List σ → ρ) (x : List σ) (r : ℕ)
    (hr : r < x.length) : (rowMapDecoder f x)[r]? = some (f (x.take (r + 1))) := by
  simp [rowMapDecoder, List.getElem?_range, hr]

private theorem vecMulVec_self_mulVec {ι : Type*} [Fintype ι] (u : ι → ℝ) :
    vecMulVec u u *ᵥ u = (u ⬝ᵥ u) • u := by
  funext i
  simp only [Matrix.mulVec, dotProduct, Matrix.vecMulVec_apply, Pi.smul_apply, smul_eq_mul]
  rw [Finset.sum_mul]
  exact Finset.sum_congr rfl fun j _ => by ring

private theorem vecMulVec_zero_zero : vecMulVec (0 : Fin 2 × Fin 1 → ℝ) 0 = 0 := by
  ext i j
  simp [Matrix.vecMulVec_apply]

private theorem ropeRow_zero (base p : ℝ) : ropeRow I2 base p 0 = 0 := by
  simp [ropeRow, Matrix.mulVec_zero]

private theorem ropeRow_backRow (base : ℝ) (v : Fin 2 × Fin 1 → ℝ) :
    ropeRow I2 base 2 (backRow base v) = ropeRow I2 base 1 v := by
  simp only [ropeRow, backRow, Matrix.one_mulVec, Matrix.mulVec_mulVec, ropeMatrix_mul]
  norm_num

/-- RoPE keeps lengths: the rotated v has the squared norm of v. -/
private theorem ropeRow_dot_self (base p : ℝ) (v : Fin 2 × Fin 1 → ℝ) :
    ropeRow I2 base p v ⬝ᵥ ropeRow I2 base p v = v ⬝ᵥ v := by
  simp only [ropeRow, Matrix.one_mulVec]
  nth_rewrite 1 [← Matrix.vecMul_transpose]
  rw [← Matrix.dotProduct_mulVec, Matrix.mulVec_mulVec, ropeMatrix_orthogonal, Matrix.one_mulVec]

/-- One head on the two-row prefix [0, v] (identity projections): the zero row has score 0 and
value 0, so the output is e^s / (1 + e^s) · v with s the score of v's own key. -/
private theorem headRow_two (G : Matrix (Fin 2 × Fin 1) (Fin 2 × Fin 1) ℝ) (base : ℝ)
    (v : Fin 2 × Fin 1 → ℝ) :
    headRow G I2 I2 I2 base [0, v]
      = ((1 + Real.exp (opScore G (ropeRow I2 base 1 v) (ropeRow I2 base 1 v)))⁻¹ *
          Real.exp (opScore G (ropeRow I2 base 1 v) (ropeRow I2 base 1 v))) • v := by
  have hpos : ((([0, v] : List (Fin 2 × Fin 1 → ℝ)).length : ℝ) - 1) = 1 := by norm_num
  have hlast : ([0, v] : List (Fin 2 × Fin 1 → ℝ)).getLastD 0 = v := rfl
  have hkeys : prefixKeys I2 base [0, v] = [0, ropeRow I2 base 1 v] := by
    simp [prefixKeys, List.mapIdx_cons, List.mapIdx_nil, ropeRow_zero]
  have hzero : opScore G (ropeRow I2 base 1 v) 0 = 0 := by
    simp [opScore, Matrix.mulVec_zero]
  have hweights : ([0, ropeRow I2 base 1 v].map fun k => Real.exp (opScore G (ropeRow I2 base 1 v) k))
      = [1, Real.exp (opScore G (ropeRow I2 base 1 v) (ropeRow I2 base 1 v))] := by
    simp [hzero]
  have hvalues : ([0, v].map fun x => I2 *ᵥ x) = [0, v] := by
    simp [Matrix.mulVec_zero]
  have hterms : List.zipWith (fun k w => Real.exp (opScore G (ropeRow I2 base 1 v) k) • w)
      [0, ropeRow I2 base 1 v] [0, v]
      = [0, Real.exp (opScore G (ropeRow I2 base 1 v) (ropeRow I2 base 1 v)) • v] := by
    simp
  simp only [headRow, hpos, hlast, hkeys, attendRow, hweights, hvalues, hterms, List.sum_cons,
    List.sum_nil, add_zero, zero_add, smul_smul]

private theorem gramOf_two (base : ℝ) (v : Fin 2 × Fin 1 → ℝ) :
    gramOf I2 base [0, v] = vecMulVec (ropeRow I2 base 1 v) (ropeRow I2 base 1 v) := by
  simp [gramOf, List.mapIdx_cons, List.mapIdx_nil, ropeRow_zero, vecMulVec_zero_zero]

private theorem gramOf_three (base : ℝ) (v : Fin 2 × Fin 1 → ℝ) :
    gramOf I2 base [0, v, backRow base v]
      = vecMulVec (ropeRow I2 base 1 v) (ropeRow I2 base 1 v)
        + vecMulVec (ropeRow I2 base 1 v) (ropeRow I2 base 1 v) := by
  simp [gramOf, List.mapIdx_cons, List.mapIdx_nil, ropeRow_zero, vecMulVec_zero_zero,
    ropeRow_backRow]

/-- e^t / (1 + e^t) is injective. -/
private theorem softWeight_injective {t t' : ℝ}
    (h : (1 + Real.exp t)⁻¹ * Real.exp t = (1 + Real.exp t')⁻¹ * Real.exp t') : t = t' := by
  have h1 : (0 : ℝ) < 1 + Real.exp t := by positivity
  have h2 : (0 : ℝ) < 1 + Real.exp t' := by positivity
  rw [inv_mul_eq_div, inv_mul_eq_div, div_eq_div_iff h1.ne' h2.ne'] at h
  have he : Real.exp t = Real.exp t' := by linear_combination h
  exact Real.exp_injective he

/-- The score of q against itself under the rank-one Gram q qᵀ is (q·q)²/√2 > 0. -/
private theorem opScore_gram_pos (base : ℝ) (v : Fin 2 × Fin 1 → ℝ) (hv : 0 < v ⬝ᵥ v) :
    0 < opScore (vecMulVec (ropeRow I2 base 1 v) (ropeRow I2 base 1 v))
      (ropeRow I2 base 1 v) (ropeRow I2 base 1 v) := by
  rw [opScore, vecMulVec_self_mulVec, dotProduct_smul, smul_eq_mul, ropeRow_dot_self]
  exact div_pos (mul_pos hv hv) (by positivity)

private theorem opScore_add_self {m : ℕ} (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (q : Fin 2 × Fin m → ℝ) : opScore (G + G) q q = 2 * opScore G q q := by
  simp only [opScore, Matrix.add_mulVec, dotProduct_add]
  ring

/-- Paper: Rem. 4.9, Prop. 5.2(i). A generated operator breaks prefix consistency: with the
whole input's Gram as operator (G = D), one head, d = 2 and identity projections, the PLGA
layer is not prefix consistent — appending R(−1) v to [0, v] doubles the Gram, doubles row 1's
score and moves row 1. -/
theorem generatedLayer_not_prefixConsistent :
    ∃ (gen : Fin 1 → Matrix (Fin 2 × Fin 1) (Fin 2 × Fin 1) ℝ → Matrix (Fin 2 × Fin 1) (Fin 2 × Fin 1) ℝ)
      (W : Fin 1 → Matrix (Fin 2 × Fin 1) (Fin 2 × Fin 1) ℝ)
      (post : (Fin 2 × Fin 1 → ℝ) → (Fin 1 → Fin 2 × Fin 1 → ℝ) → Fin 2 × Fin 1 → ℝ) (base : ℝ),
      ¬ PrefixConsistent (generatedLayer gen W W W base post) := by
  refine ⟨fun _ D => D, fun _ => I2, fun _ a => a 0, 10000, ?_⟩
  intro hpc
  have key := hpc [0, vOnes, backRow 10000 vOnes] 1 (by simp)
  have htake : ([0, vOnes, backRow 10000 vOnes] : List (Fin 2 × Fin 1 → ℝ)).take (1 + 1)
      = [0, vOnes] := rfl
  rw [htake] at key
  unfold generatedLayer frozenLayer at key
  rw [rowMapDecoder_getElem? _ _ 1
      (by simp : 1 < ([0, vOnes, backRow 10000 vOnes] : List (Fin 2 × Fin 1 → ℝ)).length),
    rowMapDecoder_getElem? _ _ 1 (by simp : 1 < ([0, vOnes] : List (Fin 2 × Fin 1 → ℝ)).length)]
    at key
  have hrows : headRow (gramOf I2 10000 [0, vOnes, backRow 10000 vOnes]) I2 I2 I2 10000 [0, vOnes]
      = headRow (gramOf I2 10000 [0, vOnes]) I2 I2 I2 10000 [0, vOnes] := Option.some.inj key
  rw [headRow_two, headRow_two, gramOf_three, gramOf_two] at hrows
  have hv : vOnes ≠ 0 := fun h => by simpa [vOnes] using congrFun h (0, 0)
  have hs := softWeight_injective (smul_left_injective ℝ hv hrows)
  have hvv : (0 : ℝ) < vOnes ⬝ᵥ vOnes := by
    simp only [vOnes, dotProduct, mul_one, Finset.sum_const, Finset.card_univ, Fintype.card_prod,
      Fintype.card_fin, nsmul_eq_mul]
    norm_num
  rw [opScore_add_self] at hs
  linarith [opScore_gram_pos 10000 vOnes hvv]

end Plga

end
