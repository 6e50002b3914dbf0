/-
# Axiom audit of the main theorems (not part of the default build target)

Run after `lake build`, from `formal/`:

    lake env lean Plga/Axioms.lean

Each line prints the axioms a theorem depends on. The expected answer for every one of them
is `[propext, Classical.choice, Quot.sound]` (or a subset): anything else (the placeholder
of an unfinished proof above all) means a proof is not what it claims. Never run here: no Lean toolchain is available
to this project's CI.
-/
import Plga

#print axioms Plga.inference_collapse
#print axioms Plga.generator_collapse
#print axioms Plga.collapse_prefixConsistent
#print axioms Plga.collapse_converse_false
#print axioms Plga.headRow_eq_sdpa
#print axioms Plga.frozenLayer_eq_sdpaLayer
#print axioms Plga.frozenDecoder_eq_sdpaDecoder
#print axioms Plga.frozenDecoder_prefixConsistentShaped
#print axioms Plga.generatedDecoder_eq_frozen
#print axioms Plga.plgaGenerator_const
#print axioms Plga.collapsed_prefixConsistentShaped
#print axioms Plga.generatedLayer_not_prefixConsistent
#print axioms Plga.plga_attention_sdpa_special_case
#print axioms Plga.plgaAttention_absorb_bias
#print axioms Plga.plgaAttention_eq_of_row_shift
#print axioms Plga.ropeMatrix_relative_position
#print axioms Plga.rope_scores_relative
#print axioms Plga.metricLearner_row_eq
#print axioms Plga.powerTensor_pos
#print axioms Plga.densityOperator_apply
