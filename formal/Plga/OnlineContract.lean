/-
# The online generation contract and historical-row prefix consistency
# (paper Rem. 4.7, Def. 4.8, Rem. 4.9)

Wrapper-level statements over an abstract decoder `F : List σ → List ρ` (the full PLDR-LLM
decoder is not formalized). List indexing is zero-based; `x.take t` is the length-t prefix;
`l[r]?` is `none` out of range.

Definitions (Python mirrors in `reference/online.py`), identical in content to the
published ones:

* `onlineOut F x t`          ↔ `online_out(F, x, t)`: the last row of F(x.take t);
* `PrefixConsistent F`       ↔ `prefix_consistent(F, ...)`: row r of F(x) equals row r of
  F(x.take (r+1)) (Option-valued);
* `LengthPreserving F`       ↔ `length_preserving(F, ...)`: |F x| = |x|;
* `PrefixConsistentShaped F` ↔ `prefix_consistent_shaped(F, ...)`: both (Def. 4.8);
* `RowLocal F`               ↔ `row_local(F, ...)`: row r depends only on x.take (r+1);
* `rowMapDecoder f x`        ↔ `row_map_decoder(f, x)`: [f(x.take 1), …, f(x.take |x|)];
* `globalSumDecoder x`       ↔ `global_sum_decoder(x)`: [a + Σx for a in x] over ℤ.

Restated from `PldrLlm` (`PldrLlmMathFoundations/OnlineContract.lean`), each proved by
citing it: `online_causal`, `prefixConsistentShaped_getElem` (stated with `Option` reads
`∃ y, F(x)[r]? = some y ∧ F(x.take (r+1))[r]? = some y` instead of proof-carrying
indices), `constNil_prefixConsistent`, `constNil_not_prefixConsistentShaped`,
`prefixConsistent_of_rowLocal`, `prefixConsistentShaped_of_rowLocal`,
`rowMapDecoder_rowLocal`, `rowMapDecoder_lengthPreserving`,
`rowMapDecoder_prefixConsistent`, `rowMapDecoder_prefixConsistentShaped`,
`rowMapDecoder_block_eq_online`, `globalSumDecoder_lengthPreserving`,
`globalSumDecoder_not_prefixConsistent`, `globalSumDecoder_not_prefixConsistentShaped`.
-/
import Mathlib
import PldrLlmMathFoundations.OnlineContract

namespace Plga

/-- The online step-t output of a decoder F: apply F to the length-t prefix and read the
final row (`none` for an empty call). Python: `online_out(F, x, t)`. -/
def onlineOut {σ ρ : Type*} (F : List σ → List ρ) (x : List σ) (t : ℕ) : Option ρ :=
  (F (x.take t)).getLast?

/-- Historical-row prefix consistency (zero-based, Option-valued): row r of F(x) equals row r
of F(x.take (r+1)). Python: `prefix_consistent`. -/
def PrefixConsistent {σ ρ : Type*} (F : List σ → List ρ) : Prop :=
  ∀ (x : List σ) (r : ℕ), r < x.length →
    (F x)[r]? = (F (x.take (r + 1)))[r]?

/-- Length preservation: one output row per input row. Python: `length_preserving`. -/
def LengthPreserving {σ ρ : Type*} (F : List σ → List ρ) : Prop :=
  ∀ x : List σ, (F x).length = x.length

/-- Definition 4.8: prefix consistency as a well-shaped map. Python:
`prefix_consistent_shaped`. -/
def PrefixConsistentShaped {σ ρ : Type*} (F : List σ → List ρ) : Prop :=
  LengthPreserving F ∧ PrefixConsistent F

/-- Row-locality: row r of the output depends only on the first r+1 input tokens. Python:
`row_local`. -/
def RowLocal {σ ρ : Type*} (F : List σ → List ρ) : Prop :=
  ∀ (x y : List σ) (r : ℕ), x.take (r + 1) = y.take (r + 1) →
    (F x)[r]? = (F y)[r]?

/-- The row-map decoder: row r is f applied to the row's own prefix x.take (r+1) (the shape
of causal masked attention). Python: `row_map_decoder(f, x)`. -/
def rowMapDecoder {σ ρ : Type*} (f : List σ → ρ) (x : List σ) : List ρ :=
  (List.range x.length).map fun r => f (x.take (r + 1))

/-- A global-aggregation decoder on integer lists: every row adds the sum of the whole input
(the scalar shadow of a global query Gram). Python: `global_sum_decoder(x)`. -/
def globalSumDecoder (x : List ℤ) : List ℤ :=
  x.map fun a => a + x.sum

/-- Paper: Rem. 4.7. Restates `PldrLlm.online_causal`: the step-t online output depends only
on the length-t prefix, for any decoder map. -/
theorem online_causal {σ ρ : Type*} (F : List σ → List ρ) {x y : List σ} (t : ℕ)
    (h : x.take t = y.take t) : onlineOut F x t = onlineOut F y t :=
  PldrLlm.online_causal F t h

/-- Paper: Def. 4.8. Restates `PldrLlm.prefixConsistentShaped_getElem`: under Def. 4.8 both
calls have a row r and the two rows are equal (total rows, not only Option reads). -/
theorem prefixConsistentShaped_getElem {σ ρ : Type*} {F : List σ → List ρ}
    (h : PrefixConsistentShaped F) (x : List σ) (r : ℕ) (hr : r < List.length x) :
    ∃ y, (F x)[r]? = some y ∧ (F (x.take (r + 1)))[r]? = some y := by
  have hx : r < (F x).length := by rw [h.1]; exact hr
  have hp : r < (F (x.take (r + 1))).length := by
    rw [h.1, List.length_take]; omega
  refine ⟨(F x)[r], List.getElem?_eq_getElem hx, ?_⟩
  rw [List.getElem?_eq_getElem hp]
  exact congrArg some (PldrLlm.prefixConsistentShaped_getElem h x r hr).symm

/-- Paper: Def. 4.8. Restates `PldrLlm.constNil_prefixConsistent`: the constant-empty
decoder is (vacuously) prefix consistent, which is why Def. 4.8 adds the shape conjunct. -/
theorem constNil_prefixConsistent {σ ρ : Type*} :
    PrefixConsistent (fun (x : List σ) => (List.nil : List ρ)) :=
  PldrLlm.constNil_prefixConsistent

/-- Paper: Def. 4.8. Restates `PldrLlm.constNil_not_prefixConsistentShaped`: the
constant-empty decoder is not prefix consistent as a well-shaped map. -/
theorem constNil_not_prefixConsistentShaped :
    ¬ PrefixConsistentShaped (fun (x : List ℤ) => (List.nil : List ℤ)) :=
  PldrLlm.constNil_not_prefixConsistentShaped

/-- Paper: Rem. 4.9(i). Restates `PldrLlm.prefixConsistent_of_rowLocal`: row-locality
implies prefix consistency. -/
theorem prefixConsistent_of_rowLocal {σ ρ : Type*} {F : List σ → List ρ} (h : RowLocal F) :
    PrefixConsistent F :=
  PldrLlm.prefixConsistent_of_rowLocal h

/-- Paper: Rem. 4.9. Restates `PldrLlm.prefixConsistentShaped_of_rowLocal`: a row-local,
length-preserving decoder satisfies Def. 4.8. -/
theorem prefixConsistentShaped_of_rowLocal {σ ρ : Type*} {F : List σ → List ρ}
    (hL : LengthPreserving F) (h : RowLocal F) : PrefixConsistentShaped F :=
  PldrLlm.prefixConsistentShaped_of_rowLocal hL h

/-- Paper: Rem. 4.9(i). Restates `PldrLlm.rowMapDecoder_rowLocal`: the row-map decoder is
row-local. -/
theorem rowMapDecoder_rowLocal {σ ρ : Type*} (f : List σ → ρ) : RowLocal (rowMapDecoder f) :=
  PldrLlm.rowMapDecoder_rowLocal f

/-- Paper: Def. 4.8. Restates `PldrLlm.rowMapDecoder_lengthPreserving`: the row-map decoder
returns one row per input row. -/
theorem rowMapDecoder_lengthPreserving {σ ρ : Type*} (f : List σ → ρ) :
    LengthPreserving (rowMapDecoder f) :=
  PldrLlm.rowMapDecoder_lengthPreserving f

/-- Paper: Rem. 4.9(i). Restates `PldrLlm.rowMapDecoder_prefixConsistent`: causal masked
attention, read as a row-map decoder, is prefix consistent. -/
theorem rowMapDecoder_prefixConsistent {σ ρ : Type*} (f : List σ → ρ) :
    PrefixConsistent (rowMapDecoder f) :=
  PldrLlm.rowMapDecoder_prefixConsistent f

/-- Paper: Def. 4.8. Restates `PldrLlm.rowMapDecoder_prefixConsistentShaped`: the row-map
decoder satisfies the full Def. 4.8 bundle. -/
theorem rowMapDecoder_prefixConsistentShaped {σ ρ : Type*} (f : List σ → ρ) :
    PrefixConsistentShaped (rowMapDecoder f) :=
  PldrLlm.rowMapDecoder_prefixConsistentShaped f

/-- Paper: Rem. 4.9. Restates `PldrLlm.rowMapDecoder_block_eq_online`: row r of one parallel
(block) call is the online step-(r+1) output — block and sequential scoring coincide. -/
theorem rowMapDecoder_block_eq_online {σ ρ : Type*} (f : List σ → ρ) (x : List σ) (r : ℕ)
    (hr : r < List.length x) :
    (rowMapDecoder f x)[r]? = onlineOut (rowMapDecoder f) x (r + 1) :=
  PldrLlm.rowMapDecoder_block_eq_online f x r hr

/-- Paper: Rem. 4.9. Restates `PldrLlm.globalSumDecoder_lengthPreserving`: the
global-aggregation decoder is length preserving. -/
theorem globalSumDecoder_lengthPreserving : LengthPreserving globalSumDecoder :=
  PldrLlm.globalSumDecoder_lengthPreserving

/-- Paper: Rem. 4.9. Restates `PldrLlm.globalSumDecoder_not_prefixConsistent`: the
global-aggregation decoder is not prefix consistent (witness x = [0, 1], r = 0). -/
theorem globalSumDecoder_not_prefixConsistent : ¬ PrefixConsistent globalSumDecoder :=
  PldrLlm.globalSumDecoder_not_prefixConsistent

/-- Paper: Rem. 4.9. Restates `PldrLlm.globalSumDecoder_not_prefixConsistentShaped`: a
fortiori it fails Def. 4.8. -/
theorem globalSumDecoder_not_prefixConsistentShaped :
    ¬ PrefixConsistentShaped globalSumDecoder :=
  PldrLlm.globalSumDecoder_not_prefixConsistentShaped

end Plga
