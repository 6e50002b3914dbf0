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
* (c) not stated here yet: that a Gram-dependent generator breaks prefix consistency for some
  weights and input. The witness is worked out (G = D, one layer, one head, d = 2, identity
  projections, input [0, v, R(−1) v]: row 1's score gains (q₁·q₂)² when the third row is
  appended) but its proof evaluates softmax sums on explicit lists and was not written without
  a compiler to check it; the failure is measured on the reference decoder instead
  (`tests/bridge/test_concrete_decoder.py`);
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
  rw [List.getElem?_take, List.getElem?_take]
  split_ifs with hi
  · apply rowMapDecoder_rowLocal f x y i
    have h' := congrArg (List.take (i + 1)) h
    have hle : i + 1 ≤ n := hi
    simpa [List.take_take, Nat.min_eq_left hle, Nat.min_eq_right hle] using h'
  · rfl

private theorem rowLocal_of_prefixLocal {σ ρ : Type*} {F : List σ → List ρ}
    (h : PrefixLocal F) : RowLocal F := by
  intro x y r hxy
  have e := h x y (r + 1) hxy
  rw [← List.getElem?_take_of_lt (Nat.lt_succ_self r), e, List.getElem?_take_of_lt (Nat.lt_succ_self r)]

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
  rw [funext (generatedDecoder_eq_frozen _ _ Wq Wk Wv base post hgen)]
  exact frozenDecoder_prefixConsistentShaped _ Wq Wk Wv base post

end Plga

end
