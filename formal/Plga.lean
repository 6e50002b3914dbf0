/-
# Plga: formalization of Power Law Graph Attention (umbrella module)

This file only imports. See `README.md` for the file map (File | Paper result | Content |
Python check), the build commands and what is not formalized. Every declaration lives in
`namespace Plga`; the published formalization `PldrLlmMathFoundations` (namespace `PldrLlm`)
is a pinned dependency whose theorems are restated in our notation and cited.
-/
import Plga.Iswiglu
import Plga.Softmax
import Plga.DensityOperator
import Plga.HadamardPower
import Plga.RankOne
import Plga.LayerNorm
import Plga.MetricLearner
import Plga.Rope
import Plga.TwirlBound
import Plga.DagLoss
import Plga.Contraction
import Plga.Attention
import Plga.OnlineContract
import Plga.Collapse
import Plga.Decoder
