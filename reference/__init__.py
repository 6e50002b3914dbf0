"""The slow, exact reference of PLGA and PLDR-LLM: float64 NumPy and mpmath, no torch needed.

:mod:`.spec` mirrors the Lean definitions one function each; :mod:`.decoder` builds the
PLDR-LLM v510 decoder with its caches from them; :mod:`.checkpoint` loads weights safely.
"""

from .spec import *  # noqa: F403  (the spec functions are the package's public names)
