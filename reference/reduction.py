"""The SDPA special case on the reference: PLGA at G = I is scaled dot-product attention.

Paper Thm. 5.4(i); Lean ``plga_attention_sdpa_special_case`` (``formal/Plga/Attention.lean``).
In float64 the two sides evaluate the same arithmetic, so the difference must be exactly 0; in
mpmath it must vanish to the working precision. ``plga check-sdpa`` and ``plga verify`` run this.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import spec
from .numerics import mp_eval

#: The mpmath verdict: |PLGA(G = I) − SDPA| ≤ this at any supported precision.
MP_BOUND = 1e-40


def sdpa_reduction(seed: int = 0, dps: int = 50) -> tuple[list[tuple[str, str, str, float]], bool]:
    """PLGA at G = I against SDPA on seeded inputs → (rows (backend, shape, mask, max diff), verdict).

    The verdict requires exactly 0 in float64 (the same arithmetic) and ≤ :data:`MP_BOUND` in
    mpmath at ``dps`` digits, over causal supports with S ≤ T, the ideal and the finite mask.
    """
    if isinstance(dps, bool) or not isinstance(dps, int) or not 16 <= dps <= 1000:
        raise InputError(f"dps (mpmath digits) must be an integer in [16, 1000], got {dps!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    rows = []
    for s, t, d in [(1, 1, 2), (5, 7, 4), (16, 16, 8), (33, 40, 16), (64, 64, 64)]:
        q, k, v = (rng.standard_normal((2, 3, n, d)) for n in (s, t, t))  # [B, H, ·, d]
        support = spec.causal_support(s, t)  # [S, T]
        eye = np.eye(d)
        for fill in (None, spec.MASK_FILL):
            plga = spec.plga_attention(q, eye, k, v, support, None, fill)
            sdpa = spec.sdpa_attention(q, k, v, support, None, fill)
            rows.append(("float64", f"S={s} T={t} d={d}", "ideal" if fill is None else "finite", float(np.max(np.abs(plga - sdpa)))))
    for s, d in [(3, 2), (4, 4)]:
        q, k, v = (rng.standard_normal((s, d)) for _ in range(3))
        support = spec.causal_support(s, s)
        plga = mp_eval(spec.plga_attention, q, np.eye(d), k, v, support, dps=dps)
        sdpa = mp_eval(spec.sdpa_attention, q, k, v, support, dps=dps)
        diff = max(abs(a - b) for a, b in zip(plga.flat, sdpa.flat, strict=True))
        rows.append((f"mpmath {dps} digits", f"S={s} d={d}", "ideal", float(diff)))
    worst64 = max(r[3] for r in rows if r[0] == "float64")
    worstmp = max(r[3] for r in rows if r[0] != "float64")
    return rows, worst64 == 0.0 and worstmp <= MP_BOUND


__all__ = ["MP_BOUND", "sdpa_reduction"]
