/-
# Lipschitz diameter bounds for the metric-learner row map (paper Prop. 5.12(i))

No new definitions. Restated from `PldrLlm` (`PldrLlmMathFoundations/Contraction.lean`),
each proved by citing it, over pseudo-extended-metric spaces:

* `diam_comp_le`    : ediam((g ∘ f)(s)) ≤ K_g K_f ediam(s) for K_f-, K_g-Lipschitz f, g;
* `diam_iterate_le` : ediam(f^[N](s)) ≤ K^N ediam(s) for K-Lipschitz f.

Notation in the statements: `Set.image (fun x => g (f x)) s` is `(g ∘ f) '' s`,
`Nat.iterate f N` is `f^[N]`, and `ENNReal.ofNNReal K` is the coercion `(K : ℝ≥0∞)`.

Not claimed: a fixed point or any Banach dynamics (the trained units are distinct maps; use
`diam_comp_le` step by step).
-/
import Mathlib
import PldrLlmMathFoundations.Contraction

namespace Plga

/-- Paper: Prop. 5.12(i). Restates `PldrLlm.diam_comp_le`: diameters compose
multiplicatively under Lipschitz maps, ediam((g ∘ f)(s)) ≤ K_g K_f ediam(s). -/
theorem diam_comp_le {α β γ : Type*} [PseudoEMetricSpace α] [PseudoEMetricSpace β]
    [PseudoEMetricSpace γ] {f : α → β} {g : β → γ} {Kf Kg : NNReal}
    (hf : LipschitzWith Kf f) (hg : LipschitzWith Kg g) (s : Set α) :
    Metric.ediam (Set.image (fun x => g (f x)) s)
      ≤ ENNReal.ofNNReal (Kg * Kf) * Metric.ediam s :=
  PldrLlm.diam_comp_le hf hg s

/-- Paper: Prop. 5.12(i). Restates `PldrLlm.diam_iterate_le`: an N-fold iterated K-Lipschitz
map shrinks diameters by K^N (exponential decay in depth for K < 1). -/
theorem diam_iterate_le {α : Type*} [PseudoEMetricSpace α] {f : α → α} {K : NNReal}
    (hf : LipschitzWith K f) (s : Set α) (N : ℕ) :
    Metric.ediam (Set.image (Nat.iterate f N) s) ≤ ENNReal.ofNNReal K ^ N * Metric.ediam s :=
  PldrLlm.diam_iterate_le hf s N

end Plga
