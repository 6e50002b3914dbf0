/-
# The quantitative RoPE twirl bound (paper Lem. 5.9, analytic core)

No new definitions. Restated from `PldrLlm` (`PldrLlmMathFoundations/TwirlBound.lean`),
each proved by citing it:

* `norm_one_sub_exp` : ‖1 − e^{iω}‖ = 2 |sin(ω/2)| (chord length);
* `geom_orbit_bound` : ‖Σ_{n=1}^{S} e^{iωn}‖ ≤ 1 / |sin(ω/2)| when sin(ω/2) ≠ 0 (the sum runs
  over `n ∈ Finset.range S` of z^{n+1}; S = 0 is the empty sum).

Dividing by S gives the C_Θ/S decay of every off-commutant component of the averaged density
operator, C_Θ = max_ω 1/|sin(ω/2)| over the difference frequencies 2θ_a, θ_a ± θ_b. The
Python check is the exact multiplier |sin(Sω/2)| / |sin(ω/2)|.
-/
import Mathlib
import PldrLlmMathFoundations.TwirlBound

namespace Plga

/-- Paper: Lem. 5.9. Restates `PldrLlm.norm_one_sub_exp`: the chord length of the unit
circle, ‖1 − e^{iω}‖ = 2 |sin(ω/2)|. -/
theorem norm_one_sub_exp (ω : ℝ) :
    ‖1 - Complex.exp (ω * Complex.I)‖ = 2 * |Real.sin (ω / 2)| :=
  PldrLlm.norm_one_sub_exp ω

/-- Paper: Lem. 5.9. Restates `PldrLlm.geom_orbit_bound`: at a nonresonant frequency the
ergodic position sum is bounded, ‖Σ_{n=1}^{S} e^{iωn}‖ ≤ 1/|sin(ω/2)|, uniformly in S. -/
theorem geom_orbit_bound {ω : ℝ} (hω : Real.sin (ω / 2) ≠ 0) (S : ℕ) :
    ‖∑ n ∈ Finset.range S, Complex.exp (ω * Complex.I) ^ (n + 1)‖
      ≤ 1 / |Real.sin (ω / 2)| :=
  PldrLlm.geom_orbit_bound hω S

end Plga
