/-
# Inference collapse at model level (paper Thm. 5.4, Prop. 5.2(i); docs/spec.md §3)

No new definitions. A decoder "parameterised by an operator generator" is modelled as

* `F : (Fin L → Matrix (Fin d) (Fin d) ℝ) → List ℕ → List (Fin V → ℝ)` — the forward pass
  given one operator G per slot (a slot is a layer–head pair, L = layers × heads), mapping
  token ids to logit rows; any architecture, PLGA or not;
* `gen : List ℕ → Fin L → Matrix (Fin d) (Fin d) ℝ` — the operator generator (density →
  metric learner → metric tensor → power → energy curvature, per slot);
* the full (uncached) decoder is `fun x => F (gen x) x`; the cached (KVG / collapsed) decoder
  with frozen operators `Gstar` is `F Gstar`.

Results (all new; the published formalization stops at the score and row level):

* `inference_collapse` : if the generator is constant (= Gstar) on a set of inputs, the
  decoder equals the cached decoder on that set (one-way);
* `generator_collapse` : if the metric-learner output A is constant on a set, so is the whole
  PLGA operator G_LM = a (iSwiGLU(W A + B) + ε)^{⊙P} + b_a, hence the decoder collapses;
* `collapse_prefixConsistent` : if the generator is globally constant and the cached decoder
  is prefix consistent (e.g. causal attention with fixed G, a row-map decoder), the full
  decoder is prefix consistent (Def. 4.8 via Thm. 5.4);
* `collapse_converse_false` : the converse fails — with a = 0, b_a = G* the operator is
  constant (exact caching) for two different upstream tensors (the paper's counterexample,
  see also `energyCurvature_const`).

Not claimed: the full PLDR-LLM forward pass (F is abstract), and any converse.
-/
import Mathlib
import Plga.Attention
import Plga.HadamardPower
import Plga.OnlineContract

noncomputable section

namespace Plga

open Matrix

/-- Paper: Thm. 5.4 (model level), Prop. 5.2(i). Inference collapse: if the operator
generator equals the constant Gstar on every input of a set s, then on s the decoder
x ↦ F (gen x) x equals the cached decoder F Gstar. One-way only. -/
theorem inference_collapse {L d V : ℕ}
    (F : (Fin L → Matrix (Fin d) (Fin d) ℝ) → List ℕ → List (Fin V → ℝ))
    (gen : List ℕ → Fin L → Matrix (Fin d) (Fin d) ℝ)
    (Gstar : Fin L → Matrix (Fin d) (Fin d) ℝ) (s : List ℕ → Prop)
    (h : ∀ x, s x → gen x = Gstar) :
    ∀ x, s x → F (gen x) x = F Gstar x := by
  intro x hx
  rw [h x hx]

/-- Paper: Thm. 5.4 (model level). If the metric-learner output A (one per slot) is constant
on a set of inputs, the whole PLGA operator
G_LM = a (iSwiGLU(W A + B) + ε)^{⊙P} + b_a is constant on that set: a collapsed generator
gives a collapsed operator, so `inference_collapse` applies. -/
theorem generator_collapse {L d : ℕ} (A : List ℕ → Fin L → Matrix (Fin d) (Fin d) ℝ)
    (Astar W B P a ba : Fin L → Matrix (Fin d) (Fin d) ℝ) (ε : ℝ) (s : List ℕ → Prop)
    (h : ∀ x, s x → A x = Astar) :
    ∀ x, s x →
      (fun l => energyCurvature (hadamardPower (metricTensor (A x l) (W l) (B l) ε) (P l))
        (a l) (ba l))
      = (fun l => energyCurvature (hadamardPower (metricTensor (Astar l) (W l) (B l) ε) (P l))
        (a l) (ba l)) := by
  intro x hx
  rw [h x hx]

/-- Paper: Thm. 5.4, Def. 4.8. If the generator is constant on all inputs and the cached
decoder F Gstar is prefix consistent, the full decoder x ↦ F (gen x) x is prefix
consistent: a collapsed PLGA decoder behaves like causal SDPA. -/
theorem collapse_prefixConsistent {L d V : ℕ}
    (F : (Fin L → Matrix (Fin d) (Fin d) ℝ) → List ℕ → List (Fin V → ℝ))
    (gen : List ℕ → Fin L → Matrix (Fin d) (Fin d) ℝ)
    (Gstar : Fin L → Matrix (Fin d) (Fin d) ℝ) (h : ∀ x, gen x = Gstar)
    (hF : PrefixConsistent (F Gstar)) :
    PrefixConsistent (fun x => F (gen x) x) := by
  have hfun : (fun x => F (gen x) x) = F Gstar := by
    funext x
    rw [h x]
  rw [hfun]
  exact hF

/-- Paper: Rem. (counterexample to the converse of Prop. 5.2(i)). Exact caching does not
force invariant upstream tensors: with a = 0 and b_a = G*, two different power tensors
(0 and the all-ones matrix) give the same operator G*. -/
theorem collapse_converse_false {d : ℕ} [NeZero d] (Gstar : Matrix (Fin d) (Fin d) ℝ) :
    ∃ A1 : Matrix (Fin d) (Fin d) ℝ, ∃ A2 : Matrix (Fin d) (Fin d) ℝ,
      A1 ≠ A2 ∧ energyCurvature A1 0 Gstar = Gstar ∧ energyCurvature A2 0 Gstar = Gstar := by
  refine ⟨0, Matrix.of (fun i j => (1 : ℝ)), ?_, energyCurvature_const 0 Gstar,
    energyCurvature_const (Matrix.of (fun i j => (1 : ℝ))) Gstar⟩
  intro h
  have h00 := congrArg (fun M : Matrix (Fin d) (Fin d) ℝ => M 0 0) h
  simp at h00

end Plga

end
