/-
# Softmax, the ideal masked softmax and the finite additive mask (paper Prop. 3.12, 5.2(iii))

Definitions (Python mirror in `reference/spec.py`):

* `softmax x`                    ↔ `softmax(x)`: e^{x_i} / Σ_j e^{x_j};
* `maskedSoftmax x J`            ↔ `masked_softmax(x, support)`: the ideal (−∞) mask over the
  allowed set `J` (Python: a boolean `support` row); exactly 0 off `J`.
  Argument order follows Python (`x` first); the published `PldrLlm.maskedSoftmax J x`
  takes `J` first (bridge `maskedSoftmax_eq_pldr`);
* `finiteMaskSoftmax x J fill`   ↔ `finite_mask_softmax(x, support, fill)`: the published
  implementation's additive mask, softmax(x + fill·[i ∉ J]) (`fill` explicit; −1e9 upstream).

Restated from `PldrLlm` (`PldrLlmMathFoundations/Softmax.lean`), each proved by citing it:
`softmax_denom_pos`, `softmax_pos`, `softmax_sum_one`, `softmax_shift`, `softmax_avg_le`,
`softmax_eq_iff_shift`, `maskedSoftmax_denom_pos`, `maskedSoftmax_nonneg`,
`maskedSoftmax_pos`, `maskedSoftmax_eq_zero`, `maskedSoftmax_sum_one`,
`maskedSoftmax_shift`, `maskedSoftmax_eq_iff_shift` (13 statements).

New: `softmax_eq_pldr`, `maskedSoftmax_eq_pldr` (bridges), `finiteMaskSoftmax_univ` (with
nothing masked the finite mask is plain softmax), `finiteMaskSoftmax_shift` (shift
invariance survives the finite mask), `finiteMaskSoftmax_le` (an off-support weight of the
finite mask is at most e^{x_i + fill − x_j} for any allowed j: the finite mask realises
the ideal one only up to this, i.e. through underflow at fill = −1e9).

Not claimed: a model-level converse of Prop. 5.2(iii); `softmax_shift` says nothing about a
coordinate-dependent additive mask.
-/
import Mathlib
import PldrLlmMathFoundations.Softmax

noncomputable section

namespace Plga



/-- Softmax of a row: `softmax x i = e^{x_i} / Σ_j e^{x_j}`. Python: `softmax(x)` (which
subtracts the row maximum first; exact by `softmax_shift`). -/
def softmax {n : ℕ} (x : Fin n → ℝ) : Fin n → ℝ :=
  fun i => Real.exp (x i) / ∑ j, Real.exp (x j)

/-- The ideal masked softmax over the allowed set `J`: normalised over `J`, exactly 0 off
`J`. Python: `masked_softmax(x, support)` with `support` the indicator of `J`. -/
def maskedSoftmax {n : ℕ} (x : Fin n → ℝ) (J : Finset (Fin n)) : Fin n → ℝ :=
  fun i => if i ∈ J then Real.exp (x i) / ∑ j ∈ J, Real.exp (x j) else 0

/-- The finite additive mask of the published implementation: softmax(x + fill·[i ∉ J]).
Python: `finite_mask_softmax(x, support, fill)` (default fill = −1e9). -/
def finiteMaskSoftmax {n : ℕ} (x : Fin n → ℝ) (J : Finset (Fin n)) (fill : ℝ) :
    Fin n → ℝ :=
  softmax (fun i => x i + if i ∈ J then 0 else fill)

/-- Paper: new. Bridge: our `softmax` is definitionally the published `PldrLlm.softmax`. -/
theorem softmax_eq_pldr {n : ℕ} (x : Fin n → ℝ) : softmax x = PldrLlm.softmax x := rfl

/-- Paper: new. Bridge: our `maskedSoftmax x J` is definitionally the published
`PldrLlm.maskedSoftmax J x` (arguments in Python order). -/
theorem maskedSoftmax_eq_pldr {n : ℕ} (x : Fin n → ℝ) (J : Finset (Fin n)) :
    maskedSoftmax x J = PldrLlm.maskedSoftmax J x := rfl

/-- Paper: Prop. 3.12. Restates `PldrLlm.softmax_denom_pos`: the softmax denominator is
positive on a nonempty row. -/
theorem softmax_denom_pos {n : ℕ} [NeZero n] (x : Fin n → ℝ) :
    0 < ∑ j, Real.exp (x j) :=
  PldrLlm.softmax_denom_pos x

/-- Paper: Prop. 3.12. Restates `PldrLlm.softmax_pos`: every softmax weight is strictly
positive. -/
theorem softmax_pos {n : ℕ} [NeZero n] (x : Fin n → ℝ) (i : Fin n) : 0 < softmax x i :=
  PldrLlm.softmax_pos x i

/-- Paper: Prop. 3.12. Restates `PldrLlm.softmax_sum_one`: each softmax row sums to one
(attention is row-stochastic, a Markov operator). -/
theorem softmax_sum_one {n : ℕ} [NeZero n] (x : Fin n → ℝ) : ∑ i, softmax x i = 1 :=
  PldrLlm.softmax_sum_one x

/-- Paper: Prop. 3.12. Restates `PldrLlm.softmax_shift`: softmax is invariant under adding
a common constant to every score. -/
theorem softmax_shift {n : ℕ} [NeZero n] (x : Fin n → ℝ) (c : ℝ) :
    softmax (fun i => x i + c) = softmax x :=
  PldrLlm.softmax_shift x c

/-- Paper: Prop. 3.12(ii). Restates `PldrLlm.softmax_avg_le`: a softmax average of values
never exceeds their maximum (the output lies in the convex hull of the values). -/
theorem softmax_avg_le {n : ℕ} [NeZero n] (x v : Fin n → ℝ) (M : ℝ) (hv : ∀ i, v i ≤ M) :
    ∑ i, softmax x i * v i ≤ M :=
  PldrLlm.softmax_avg_le x v hv

/-- Paper: Prop. 5.2(iii). Restates `PldrLlm.softmax_eq_iff_shift`: two score rows give the
same softmax iff they differ by a common additive constant (row level only). -/
theorem softmax_eq_iff_shift {n : ℕ} [NeZero n] (x y : Fin n → ℝ) :
    softmax x = softmax y ↔ ∃ c : ℝ, ∀ i, y i = x i + c :=
  PldrLlm.softmax_eq_iff_shift x y

/-- Paper: unnumbered Prop. (the ideal attention operator is Markov). Restates
`PldrLlm.maskedSoftmax_denom_pos`: the masked denominator is positive for nonempty `J`. -/
theorem maskedSoftmax_denom_pos {n : ℕ} {J : Finset (Fin n)} (hJ : Finset.Nonempty J)
    (x : Fin n → ℝ) : 0 < ∑ j ∈ J, Real.exp (x j) :=
  PldrLlm.maskedSoftmax_denom_pos hJ x

/-- Paper: unnumbered Prop. (the ideal attention operator is Markov). Restates
`PldrLlm.maskedSoftmax_nonneg`: masked-softmax entries are nonnegative. -/
theorem maskedSoftmax_nonneg {n : ℕ} {J : Finset (Fin n)} (hJ : Finset.Nonempty J)
    (x : Fin n → ℝ) (i : Fin n) : 0 ≤ maskedSoftmax x J i :=
  PldrLlm.maskedSoftmax_nonneg hJ x i

/-- Paper: unnumbered Prop. (the ideal attention operator is Markov). Restates
`PldrLlm.maskedSoftmax_pos`: masked-softmax entries are strictly positive on `J`. -/
theorem maskedSoftmax_pos {n : ℕ} {J : Finset (Fin n)} (hJ : Finset.Nonempty J)
    (x : Fin n → ℝ) {i : Fin n} (hi : i ∈ J) : 0 < maskedSoftmax x J i :=
  PldrLlm.maskedSoftmax_pos hJ x hi

/-- Paper: unnumbered Prop. (the ideal attention operator is Markov). Restates
`PldrLlm.maskedSoftmax_eq_zero`: exact causal support, the masked softmax is exactly 0 off
the allowed set. -/
theorem maskedSoftmax_eq_zero {n : ℕ} {J : Finset (Fin n)} (x : Fin n → ℝ) {i : Fin n}
    (hi : i ∉ J) : maskedSoftmax x J i = 0 :=
  PldrLlm.maskedSoftmax_eq_zero x hi

/-- Paper: unnumbered Prop. (the ideal attention operator is Markov). Restates
`PldrLlm.maskedSoftmax_sum_one`: each masked row sums to one. -/
theorem maskedSoftmax_sum_one {n : ℕ} {J : Finset (Fin n)} (hJ : Finset.Nonempty J)
    (x : Fin n → ℝ) : ∑ i, maskedSoftmax x J i = 1 :=
  PldrLlm.maskedSoftmax_sum_one hJ x

/-- Paper: Prop. 5.2(iii). Restates `PldrLlm.maskedSoftmax_shift`: the masked softmax is
invariant under a common shift of the scores (any `J`). -/
theorem maskedSoftmax_shift {n : ℕ} (J : Finset (Fin n)) (x : Fin n → ℝ) (c : ℝ) :
    maskedSoftmax (fun i => x i + c) J = maskedSoftmax x J :=
  PldrLlm.maskedSoftmax_shift J x c

/-- Paper: Prop. 5.2(iii). Restates `PldrLlm.maskedSoftmax_eq_iff_shift`: two score rows
give the same masked softmax iff they differ by a common constant on the allowed set
(entries off `J` are unconstrained). -/
theorem maskedSoftmax_eq_iff_shift {n : ℕ} {J : Finset (Fin n)} (hJ : Finset.Nonempty J)
    (x y : Fin n → ℝ) :
    maskedSoftmax x J = maskedSoftmax y J ↔ ∃ c : ℝ, ∀ i ∈ J, y i = x i + c :=
  PldrLlm.maskedSoftmax_eq_iff_shift hJ x y

/-- Paper: new. With nothing masked (J = all positions) the finite additive mask is plain
softmax, whatever the fill value. -/
theorem finiteMaskSoftmax_univ {n : ℕ} (x : Fin n → ℝ) (fill : ℝ) :
    finiteMaskSoftmax x Finset.univ fill = softmax x := by
  unfold finiteMaskSoftmax
  simp

/-- Paper: new. Shift invariance survives the finite additive mask: adding a common
constant to every score leaves `finiteMaskSoftmax` unchanged. -/
theorem finiteMaskSoftmax_shift {n : ℕ} [NeZero n] (x : Fin n → ℝ) (J : Finset (Fin n))
    (fill c : ℝ) :
    finiteMaskSoftmax (fun i => x i + c) J fill = finiteMaskSoftmax x J fill := by
  have h : (fun i => (x i + c) + if i ∈ J then 0 else fill)
      = fun i => (x i + if i ∈ J then 0 else fill) + c := by
    funext i
    ring
  show softmax (fun i => (x i + c) + if i ∈ J then 0 else fill)
      = softmax (fun i => x i + if i ∈ J then 0 else fill)
  rw [h, softmax_shift]

/-- Paper: new. Quantifies the published remark that the finite mask realises the ideal one
only through underflow: for a masked position `i ∉ J` and any allowed `j ∈ J`, the finite-mask
weight is at most e^{x_i + fill − x_j}; at fill = −1e9 this is below every float64
subnormal, which is why the implementation's outputs are exactly 0 there. -/
theorem finiteMaskSoftmax_le {n : ℕ} (x : Fin n → ℝ) (J : Finset (Fin n)) (fill : ℝ)
    {i j : Fin n} (hi : i ∉ J) (hj : j ∈ J) :
    finiteMaskSoftmax x J fill i ≤ Real.exp (x i + fill - x j) := by
  have hden : Real.exp (x j + if j ∈ J then 0 else fill)
      ≤ ∑ k, Real.exp (x k + if k ∈ J then 0 else fill) :=
    Finset.single_le_sum (f := fun k => Real.exp (x k + if k ∈ J then 0 else fill))
      (fun k _ => (Real.exp_pos _).le) (Finset.mem_univ j)
  rw [if_pos hj, add_zero] at hden
  simp only [finiteMaskSoftmax, softmax]
  rw [if_neg hi, Real.exp_sub]
  exact div_le_div_of_nonneg_left (Real.exp_pos _).le (Real.exp_pos _) hden

end Plga

end
