"""plga: the executable specification of Power Law Graph Attention and the PLDR-LLM decoder.

Subpackages: :mod:`plga.reference` (float64 + mpmath reference, no torch needed),
:mod:`plga.kernels` (torch CPU/CUDA), :mod:`plga.proofs_bridge` (Lean statements → checks).
"""

__version__ = "0.1.0"
