"""Ground truth for the suite: the float64 / mpmath reference, shared data and seeded weights.

Everything here goes through :mod:`plga.reference` (``spec`` and ``decoder``); the suite never
re-derives the mathematics. ``mp=True`` evaluates in mpmath at :data:`TRUTH_DPS` digits, used
when the kernel computes in float64 (a float64 truth would carry as much rounding as the kernel).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..datafiles import GOLDEN_ARRAYS, GOLDEN_CHECKPOINT, TRAINED_G_LM, data_file
from ..reference import spec
from ..reference.numerics import mp_eval
from . import memo

#: mpmath digits for ground truth: 40 digits leave 24 digits over float64, far more than the
#: sums of a few hundred terms in the suite's shapes can lose.
TRUTH_DPS = 40


def to_np(x: Any) -> np.ndarray | None:
    """float64 numpy copy of a tensor / array (None stays None; bool stays bool)."""
    if x is None:
        return None
    if hasattr(x, "detach"):
        import torch

        t = x.detach().to("cpu")
        return t.numpy().copy() if t.dtype == torch.bool else t.double().numpy()
    a = np.asarray(x)
    return a if a.dtype == bool else a.astype(np.float64)


def support_np(b: int, s: int, t: int, *, causal: bool, key_padding_mask: Any) -> np.ndarray | None:
    """Allowed (query, key) pairs [B or 1, 1, S, T] bool (bottom-right causal), or None."""
    allowed = None
    if causal:
        allowed = spec.causal_support(s, t)[None, None]
    if key_padding_mask is not None:
        keys = ~to_np(key_padding_mask).astype(bool)[:, None, None, :]  # [B, 1, 1, T]
        allowed = keys if allowed is None else allowed & keys
    return allowed


def truth_attention(
    q: Any, k: Any, v: Any, G: Any, *, causal: bool = False, key_padding_mask: Any = None,
    scale: float | None = None, finite_mask: bool = False, mp: bool = False,
) -> np.ndarray:
    """Reference PLGA attention (spec.plga_scores + masked/finite softmax) → float64 or mpf array."""
    qn, kn, vn = to_np(q), to_np(k), to_np(v)
    d = qn.shape[-1]
    gn = np.eye(d) if G is None else to_np(G)
    if gn.ndim == 3:
        gn = gn[None]  # [1, H, d, d]
    support = support_np(qn.shape[0], qn.shape[2], kn.shape[2], causal=causal, key_padding_mask=key_padding_mask)

    def fn(q_: Any, g_: Any, k_: Any, v_: Any, scale_: Any) -> Any:
        if scale_ is None:
            scores = spec.plga_scores(q_, g_, k_)  # exact √d in the backend
        else:
            scores = spec.plga_scores(q_, g_, k_, sqrt_d=1.0) * scale_
        if support is None:
            w = spec.softmax(scores)
        elif finite_mask:
            w = spec.finite_mask_softmax(scores, support, spec.MASK_FILL)
        else:
            w = spec.masked_softmax(scores, support)
        return w @ v_

    if mp:
        return mp_eval(fn, qn, gn, kn, vn, None if scale is None else float(scale), dps=TRUTH_DPS)
    return fn(qn, gn, kn, vn, None if scale is None else float(scale))


def _weights_np(w: Mapping[str, Any]) -> dict[str, Any]:
    units = [([tuple(to_np(x) for x in blk) for blk in blocks], to_np(g), to_np(bt)) for blocks, g, bt in w["units"]]
    out: dict[str, Any] = {key: to_np(w[key]) for key in ("ln_weight", "ln_bias", "W", "b", "P", "a", "b_a")}
    out["units"] = units
    return out


def truth_chain(q_rot: Any, layer_weights: Mapping[str, Any], *, mp: bool = False) -> tuple[Any, Any, Any, Any]:
    """Reference (A, A_LM, A_P, G_LM) from rotated queries [B,H,S,d] and the chain weights dict."""
    w = _weights_np(layer_weights)

    def fn(q_: Any, ln_w: Any, ln_b: Any, units: Any, W: Any, b: Any, P: Any, a: Any, b_a: Any) -> Any:
        A = spec.metric_learner(spec.density_operator(q_), ln_w, ln_b, units)
        a_lm = spec.metric_tensor(A, W, b)
        a_p = spec.hadamard_power(a_lm, P)
        return A, a_lm, a_p, spec.energy_curvature(a_p, a, b_a)

    args = (to_np(q_rot), w["ln_weight"], w["ln_bias"], w["units"], w["W"], w["b"], w["P"], w["a"], w["b_a"])
    if mp:
        return mp_eval(fn, *args, dps=TRUTH_DPS)
    return fn(*args)


def state_to_np(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: to_np(v) for k, v in state.items()}


def truth_forward(state: Mapping[str, Any], config: Any, tokens: Any, constant_g: Sequence[Any] | None = None) -> Any:
    """Reference decoder forward (float64) → :class:`plga.reference.decoder.ForwardResult`."""
    from ..reference import decoder

    def compute() -> Any:
        g = None if constant_g is None else [to_np(x) for x in constant_g]
        return decoder.forward(state_to_np(state), config, np.asarray(to_np(tokens), dtype=np.int64), constant_g=g)

    return memo.remembered(compute, "truth_forward", state, config, tokens, constant_g)


def truth_generate(state: Mapping[str, Any], config: Any, prompt: Any, n: int, mode: str, constant_g: Sequence[Any] | None = None) -> Any:
    """Reference greedy decoding (float64) in ``mode`` (the same mode names as the protocol)."""
    from ..reference import decoder

    def compute() -> Any:
        g = None if constant_g is None else [to_np(x) for x in constant_g]
        return decoder.generate(state_to_np(state), config, np.asarray(to_np(prompt), dtype=np.int64), n, mode, constant_g=g)

    return memo.remembered(compute, "truth_generate", state, config, prompt, n, mode, constant_g)


# --- Seeded weights -------------------------------------------------------------------------


def random_layer_weights(d: int, a_dff: int, num_units: int, num_dense: int, heads: int, seed: int,
                         p_scale: float = 0.3, ba_scale: float = 0.5, b_shift: float = 0.0) -> dict[str, Any]:
    """Chain weights (float64 numpy) with every parameter non-trivial (b_a ≠ 0, P of both signs).

    ``b_shift`` moves the power stage's bias b: at −27, u = W A + b lies near −27, where
    iSwiGLU(u) = u² σ(u) ≈ 1e-9 and the floor ε = 1e-9 of A_LM carries about half of it.
    """
    rng = np.random.default_rng(seed)
    n = lambda *shape, s=1.0: rng.standard_normal(shape) * s  # noqa: E731
    units = []
    for _ in range(num_units):
        blocks = [
            (n(a_dff, d, s=d**-0.5), n(a_dff, s=0.1), n(a_dff, d, s=d**-0.5), n(a_dff, s=0.1), n(d, a_dff, s=a_dff**-0.5), n(d, s=0.1))
            for _ in range(num_dense)
        ]
        units.append((blocks, 1.0 + n(d, s=0.1), n(d, s=0.1)))
    return {
        "ln_weight": 1.0 + n(d, s=0.1), "ln_bias": n(d, s=0.1), "units": units,
        "W": n(heads, d, d, s=d**-0.5), "b": n(heads, d, d, s=0.1) + b_shift, "P": n(heads, d, d, s=p_scale),
        "a": n(heads, d, d, s=d**-0.5), "b_a": n(heads, d, d, s=ba_scale),
    }


def random_state_dict(config: Any, seed: int, q_scale: float = 1.0, w_scale: float = 1.0, b_shift: float = 0.0,
                      p_scale: float = 0.15) -> dict[str, np.ndarray]:
    """A float32 upstream-named state dict for ``config`` with well-scaled random weights.

    The power stage is kept well-conditioned (u = W A + b ≈ 3 ± 0.5, |P| ~ ``p_scale``) so
    decoder-level checks measure the decoder. ``b_shift`` moves the power stage's bias b, and u
    with it: at :data:`~.strategies.DECODER_FLOOR_B_SHIFT` every entry of A_LM = iSwiGLU(u) + 1e-9
    is its floor to within 5e-4 (see there), where A_LM's rounding is relative (the conditioning
    rule of the decoder checks) and a decoder without the floor has A_LM thousands of times too small.
    ``q_scale`` multiplies every layer's query projection (weight and bias): the Gram D = Q̃ᵀQ̃
    scales by its square and the variance of D's rows, which the metric learner's LayerNorm
    divides by √(var + ε), by its fourth power — 0.02 brings it to ~1e-6, where ε counts. G_LM's
    parameters a and b_a are divided by it, so that the scores (q G) kᵀ, and with them G's
    effect on the logits, keep their usual size. ``w_scale`` multiplies the power stage's W: with
    14 heads of 64 (57 344 entries of u) the tails of 3 ± 0.5 reach 0, where A_LM is small and
    every dtype's rounding is amplified (at bfloat16 such a case is always rejected); 0.5 keeps
    u ≈ 3 ± 0.25.
    """
    from ..reference.checkpoint import expected_shapes

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for key, shape in expected_shapes(config).items():
        if key.endswith("layernorm1.weight") or key.endswith("layernorm2.weight") or key.endswith("layernormA.weight"):
            x = 1.0 + 0.1 * rng.standard_normal(shape)
        elif key.endswith("blst"):  # u = W A + b ≈ 3 ± 0.5 keeps A_LM off its 1e-9 floor (unshifted)
            x = 3.0 + b_shift + 0.1 * rng.standard_normal(shape)
        elif key.endswith("Wlst"):
            x = 0.5 * w_scale * rng.standard_normal(shape) / np.sqrt(shape[-1])
        elif key.endswith(".bias"):
            x = 0.1 * rng.standard_normal(shape)
        elif key.endswith("balst"):
            x = 0.5 * rng.standard_normal(shape)
        elif key.endswith("pwlst"):  # |P| ~ 0.15 by default: the chain stays well-conditioned even in bf16
            x = p_scale * rng.standard_normal(shape)
        elif key == "decoder.embedding.weight":
            x = rng.standard_normal(shape)
        else:  # weight matrices [out, in] and W, a [H, d, d]: fan-in scaling
            x = rng.standard_normal(shape) / np.sqrt(shape[-1])
        if key.endswith(("mha1.wq.weight", "mha1.wq.bias")):
            x = q_scale * x
        elif key.endswith(("alst", "balst")):  # G_LM = a A_P + b_a grows as q shrinks: q G keeps its size
            x = x / q_scale
        out[key] = np.ascontiguousarray(x, dtype=np.float32)
    return out


# --- Shipped data (plga.datafiles) ---------------------------------------------------------


@functools.lru_cache(maxsize=1)
def trained_g_lm() -> np.ndarray | None:
    """The real G_LM of PLDR-LLM-v51-110M-1, float32 [5, 14, 64, 64], or None when absent."""
    path = data_file(TRAINED_G_LM)
    if path is None:
        return None
    with np.load(path) as z:
        return np.asarray(z["G_LM"])


@functools.lru_cache(maxsize=1)
def golden_small() -> tuple[dict[str, np.ndarray], Any, dict[str, np.ndarray]] | None:
    """(float32 params, config, golden arrays) of ``golden/small_seed0``, or None when absent."""
    ckpt = data_file(GOLDEN_CHECKPOINT)
    arrays = data_file(GOLDEN_ARRAYS)
    if ckpt is None or arrays is None:
        return None
    import json

    from ..reference.checkpoint import load_checkpoint
    from ..reference.config import PLDRConfig

    meta = json.loads((ckpt.parent / "small_seed0_golden.json").read_text())
    config = PLDRConfig.from_upstream(meta["config"])
    params, config = load_checkpoint(ckpt, config)
    with np.load(arrays) as z:
        gold = {k: np.asarray(z[k]) for k in z.files}
    return params, config, gold


__all__ = [
    "TRUTH_DPS", "golden_small", "random_layer_weights", "random_state_dict",
    "state_to_np", "support_np", "to_np", "trained_g_lm", "truth_attention", "truth_chain",
    "truth_forward", "truth_generate",
]
