/-
# RoPE rotations, the block rotation R(p) and the commutant (paper Prop. 4.1, Cor. 7.1,
# Thm. 5.4(ii) mechanism)

Definitions (Python mirror in `reference/spec.py`):

* `rot θ`                  ↔ `rot(theta)`: [[cos θ, −sin θ], [sin θ, cos θ]];
* `rotJ`                   ↔ `rot_j()`: J = [[0, −1], [1, 0]] (= rot(π/2), `rotJ_eq_rot`);
* `ropeFrequencies d base` ↔ `rope_frequencies(d, base)`: θ_j = base^{−2j/d}. Lean returns
  the whole sequence `ℕ → ℝ`; Python returns its first d/2 terms (and rejects odd d);
* `ropeMatrix p θ`         ↔ `rope_matrix(position, theta)`: R(p) = ⊕_j rot(p θ_j);
* `rope X pos base`        ↔ `rope(x, positions, base, style="interleaved")`: row s of X is
  rotated by R(pos s) with θ = `ropeFrequencies (2m) base`; Lean fixes the interleaved
  style (`rotate_half` is not formalized) and takes real positions (Python: integers).

Index convention. A head of dimension d = 2m is indexed by `Fin 2 × Fin m`: the Lean index
`(c, j)` is the Python column `2 j + c` (interleaved pairs (2j, 2j+1), plane j). This is
Mathlib's `Matrix.blockDiagonal` layout, so `ropeMatrix p θ` is block diagonal with block j
equal to `rot (p * θ j)`.

Restated from `PldrLlm` (`PldrLlmMathFoundations/Rope.lean`), each proved by citing it:
`rot_zero`, `rot_mul`, `rot_transpose`, `rot_orthogonal`,
`smul_one_add_smul_rotJ_commute`, `commute_rot_iff`, `relative_position_of_commute`.

New (multi-block, sufficiency direction only): `rotJ_eq_rot`, `ropeMatrix_zero`,
`ropeMatrix_mul`, `ropeMatrix_transpose`, `ropeMatrix_orthogonal` (p ↦ R(p) is a group
homomorphism into orthogonal matrices), `blockScalar_commute_ropeMatrix` (block-diagonal
complex scalars ⊕_j (a_j I + b_j J) commute with every R(p)),
`ropeMatrix_relative_position` (an operator commuting with every R(p) gives
R(u)ᵀ G R(v) = G R(v − u)), `rope_scores_relative` (so its RoPE scores depend on positions
only through the offset), `rope_zero_positions`.

Not claimed: the multi-block commutant characterisation under nonresonance (the "only if"
of Prop. 4.1) and the necessity direction of Thm. 5.4(ii) with RoPE.
-/
import Mathlib
import PldrLlmMathFoundations.Rope

noncomputable section

namespace Plga

open Matrix

/-- The 2×2 RoPE rotation block at angle θ. Python: `rot(theta)`. -/
def rot (θ : ℝ) : Matrix (Fin 2) (Fin 2) ℝ :=
  !![Real.cos θ, -Real.sin θ; Real.sin θ, Real.cos θ]

/-- The complex structure J = [[0, −1], [1, 0]] of a rotation plane. Python: `rot_j()`. -/
def rotJ : Matrix (Fin 2) (Fin 2) ℝ := !![0, -1; 1, 0]

/-- RoPE frequencies θ_j = base^{−2j/d} (real power), as a sequence in j. Python:
`rope_frequencies(d, base)` returns θ_0, …, θ_{d/2−1}. -/
def ropeFrequencies (d : ℕ) (base : ℝ) : ℕ → ℝ :=
  fun j => base ^ (-(2 * (j : ℝ)) / (d : ℝ))

/-- The block rotation R(p) = ⊕_j rot(p θ_j) on `Fin 2 × Fin m` ((c, j) ↔ column 2j + c).
Python: `rope_matrix(position, theta)`. -/
def ropeMatrix {m : ℕ} (p : ℝ) (θ : Fin m → ℝ) : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ :=
  Matrix.blockDiagonal fun j => rot (p * θ j)

/-- Interleaved RoPE on the rows of X: row s becomes R(pos s) X_s with θ_j = base^{−2j/(2m)}.
Python: `rope(x, positions, base, style="interleaved")`. -/
def rope {S m : ℕ} (X : Matrix (Fin S) (Fin 2 × Fin m) ℝ) (pos : Fin S → ℝ) (base : ℝ) :
    Matrix (Fin S) (Fin 2 × Fin m) ℝ :=
  Matrix.of fun s => ropeMatrix (pos s) (fun j => ropeFrequencies (2 * m) base j) *ᵥ X s

/-- Paper: Prop. 4.1. Restates `PldrLlm.rot_zero`: rot(0) = I. -/
theorem rot_zero : rot 0 = 1 :=
  PldrLlm.rot_zero

/-- Paper: Prop. 4.1. Restates `PldrLlm.rot_mul`: rot(θ) rot(φ) = rot(θ + φ), so
n ↦ rot(n θ) is a group homomorphism. -/
theorem rot_mul (θ φ : ℝ) : rot θ * rot φ = rot (θ + φ) :=
  PldrLlm.rot_mul θ φ

/-- Paper: Prop. 4.1. Restates `PldrLlm.rot_transpose`: rot(θ)ᵀ = rot(−θ). -/
theorem rot_transpose (θ : ℝ) : (rot θ)ᵀ = rot (-θ) :=
  PldrLlm.rot_transpose θ

/-- Paper: Prop. 4.1. Restates `PldrLlm.rot_orthogonal`: rot(θ)ᵀ rot(θ) = I. -/
theorem rot_orthogonal (θ : ℝ) : (rot θ)ᵀ * rot θ = 1 :=
  PldrLlm.rot_orthogonal θ

/-- Paper: Prop. 4.1. Restates `PldrLlm.smul_one_add_smul_rotJ_commute`: a I + b J commutes
with every rotation (the commutant contains the complex scalars of the plane). -/
theorem smul_one_add_smul_rotJ_commute (a b θ : ℝ) :
    (a • (1 : Matrix (Fin 2) (Fin 2) ℝ) + b • rotJ) * rot θ
      = rot θ * (a • (1 : Matrix (Fin 2) (Fin 2) ℝ) + b • rotJ) :=
  PldrLlm.smul_one_add_smul_rotJ_commute a b θ

/-- Paper: Prop. 4.1 (single-plane core), Cor. 7.1. Restates `PldrLlm.commute_rot_iff`: for
sin θ ≠ 0 a 2×2 matrix commutes with rot(θ) iff it is M₀₀ I + M₁₀ J (2 of 4 real
dimensions per plane). -/
theorem commute_rot_iff {θ : ℝ} (hθ : Real.sin θ ≠ 0) (M : Matrix (Fin 2) (Fin 2) ℝ) :
    M * rot θ = rot θ * M ↔ M = M 0 0 • (1 : Matrix (Fin 2) (Fin 2) ℝ) + M 1 0 • rotJ :=
  PldrLlm.commute_rot_iff hθ M

/-- Paper: Prop. 4.1 ("if" direction). Restates `PldrLlm.relative_position_of_commute`: an
operator commuting with every rotation gives rot(−u) G rot(v) = G rot(v − u), scores that
depend only on the offset. -/
theorem relative_position_of_commute (G : Matrix (Fin 2) (Fin 2) ℝ)
    (hG : ∀ t : ℝ, G * rot t = rot t * G) (u v : ℝ) :
    rot (-u) * G * rot v = G * rot (v - u) :=
  PldrLlm.relative_position_of_commute G hG u v

/-- Paper: Prop. 4.1. J is the quarter-turn rotation: rotJ = rot(π/2). -/
theorem rotJ_eq_rot : rotJ = rot (Real.pi / 2) := by
  ext i j
  fin_cases i <;> fin_cases j <;> simp [rotJ, rot, Real.cos_pi_div_two, Real.sin_pi_div_two]

/-- Paper: Prop. 4.1. R(0) = I. -/
theorem ropeMatrix_zero {m : ℕ} (θ : Fin m → ℝ) : ropeMatrix 0 θ = 1 := by
  have h : (fun j => rot (0 * θ j)) = (1 : Fin m → Matrix (Fin 2) (Fin 2) ℝ) := by
    funext j
    rw [zero_mul, rot_zero, Pi.one_apply]
  unfold ropeMatrix
  rw [h, Matrix.blockDiagonal_one]

/-- Paper: Prop. 4.1. R(p) R(q) = R(p + q): positions add, on every plane at once. -/
theorem ropeMatrix_mul {m : ℕ} (p q : ℝ) (θ : Fin m → ℝ) :
    ropeMatrix p θ * ropeMatrix q θ = ropeMatrix (p + q) θ := by
  unfold ropeMatrix
  rw [← Matrix.blockDiagonal_mul]
  congr 1
  funext j
  rw [rot_mul, add_mul]

/-- Paper: Prop. 4.1. R(p)ᵀ = R(−p). -/
theorem ropeMatrix_transpose {m : ℕ} (p : ℝ) (θ : Fin m → ℝ) :
    (ropeMatrix p θ)ᵀ = ropeMatrix (-p) θ := by
  unfold ropeMatrix
  rw [Matrix.blockDiagonal_transpose]
  congr 1
  funext j
  rw [rot_transpose, neg_mul]

/-- Paper: Prop. 4.1. RoPE block rotations are orthogonal: R(p)ᵀ R(p) = I. -/
theorem ropeMatrix_orthogonal {m : ℕ} (p : ℝ) (θ : Fin m → ℝ) :
    (ropeMatrix p θ)ᵀ * ropeMatrix p θ = 1 := by
  rw [ropeMatrix_transpose, ropeMatrix_mul, neg_add_cancel, ropeMatrix_zero]

/-- Paper: Prop. 4.1, Cor. 7.1 (sufficiency, all planes). A block-diagonal operator whose
block j is a_j I + b_j J commutes with every RoPE rotation R(p). -/
theorem blockScalar_commute_ropeMatrix {m : ℕ} (a b : Fin m → ℝ) (p : ℝ) (θ : Fin m → ℝ) :
    Matrix.blockDiagonal (fun j => a j • (1 : Matrix (Fin 2) (Fin 2) ℝ) + b j • rotJ)
        * ropeMatrix p θ
      = ropeMatrix p θ
        * Matrix.blockDiagonal (fun j => a j • (1 : Matrix (Fin 2) (Fin 2) ℝ) + b j • rotJ) := by
  unfold ropeMatrix
  rw [← Matrix.blockDiagonal_mul, ← Matrix.blockDiagonal_mul]
  congr 1
  funext j
  exact smul_one_add_smul_rotJ_commute (a j) (b j) (p * θ j)

/-- Paper: Prop. 4.1 ("if" direction, all planes). If G commutes with every R(t) then
R(u)ᵀ G R(v) = G R(v − u): the PLGA score between positions u and v depends only on v − u. -/
theorem ropeMatrix_relative_position {m : ℕ} (θ : Fin m → ℝ)
    (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (hG : ∀ t : ℝ, G * ropeMatrix t θ = ropeMatrix t θ * G) (u v : ℝ) :
    (ropeMatrix u θ)ᵀ * G * ropeMatrix v θ = G * ropeMatrix (v - u) θ := by
  rw [ropeMatrix_transpose, ← hG (-u), Matrix.mul_assoc, ropeMatrix_mul, neg_add_eq_sub]

/-- Paper: Thm. 5.4(ii) (mechanism), Prop. 4.1. For G commuting with every R(t), the score
of a query q at position p against a key k at position p' after RoPE is
q · (G R(p' − p) k): it depends on the positions only through the offset p' − p. -/
theorem rope_scores_relative {m : ℕ} (θ : Fin m → ℝ)
    (G : Matrix (Fin 2 × Fin m) (Fin 2 × Fin m) ℝ)
    (hG : ∀ t : ℝ, G * ropeMatrix t θ = ropeMatrix t θ * G) (p p' : ℝ)
    (q k : Fin 2 × Fin m → ℝ) :
    (ropeMatrix p θ *ᵥ q) ⬝ᵥ (G *ᵥ (ropeMatrix p' θ *ᵥ k))
      = q ⬝ᵥ ((G * ropeMatrix (p' - p) θ) *ᵥ k) := by
  rw [← Matrix.vecMul_transpose (ropeMatrix p θ) q, ← Matrix.dotProduct_mulVec]
  simp only [Matrix.mulVec_mulVec, ← Matrix.mul_assoc]
  rw [ropeMatrix_relative_position θ G hG p p']

/-- Paper: Prop. 4.1. RoPE at position 0 on every row is the identity. -/
theorem rope_zero_positions {S m : ℕ} (X : Matrix (Fin S) (Fin 2 × Fin m) ℝ) (base : ℝ) :
    rope X (fun s => 0) base = X := by
  ext s c
  simp [rope, ropeMatrix_zero, Matrix.one_mulVec]

end Plga

end
