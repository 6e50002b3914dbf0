"""Tiny models shared by the audit tests: one configuration, smoke-test sizes, known-answer builders."""

from __future__ import annotations

import numpy as np

from plga.audit import AuditSizes
from plga.audit.model import random_params
from plga.reference.config import PLDRConfig

CONFIG = PLDRConfig(num_layers=2, d_model=32, num_heads=2, dff=48, A_dff=16, num_reslayerA=2, num_denseA=2, input_vocab_size=64, max_seq_len=64)
SIZES = AuditSizes(n_decode_prompts=2, n_decode_steps=4, n_order_prompts=2, n_order_tokens=4, n_pool_rows=8,
                   n_pairs=20, o3_prompts=1, o4_contexts=1, o4_cand_len=2)
PLGA = "decoder.dec_layers.{}.mha1.plgatt_layer."
MHA = "decoder.dec_layers.{}.mha1."


def power_stage_w_zero(seed: int = 3) -> dict[str, np.ndarray]:
    """Collapsed by construction: W = 0 makes A_LM = iSwiGLU(b) + 1e-9, hence A_P and G_LM, input-independent."""
    params = random_params(CONFIG, seed=seed)
    for i in range(CONFIG.num_layers):
        params[PLGA.format(i) + "Wlst"] = np.zeros_like(params[PLGA.format(i) + "Wlst"])
    return params


def moves_past(n: int, config: PLDRConfig) -> dict[str, np.ndarray]:
    """Layer 0: q is the same row at every position (wq = 0, a bias in the slowest RoPE pair), so
    D and G_LM depend on the length S only; its one residual unit cancels its input exactly and
    adds a gate silu(K (LN(D)[15] − t)) that switches on near length n (for n = 150: one G_LM,
    to float64 rounding, from 12 to 100 tokens; another past ~110). Layer 1: collapsed
    (metric-learner LayerNorm γ = 0)."""
    d = config.depth
    p = random_params(config, seed=3)
    m0 = MHA.format(0)
    p[m0 + "wq.weight"] = np.zeros_like(p[m0 + "wq.weight"])
    bq = np.zeros(config.d_model, np.float32)
    bq[d - 2] = bq[2 * d - 2] = 1.0
    p[m0 + "wq.bias"] = bq
    p[m0 + "layernorm1.weight"] = np.ones_like(p[m0 + "layernorm1.weight"])
    p[m0 + "layernorm1.bias"] = np.zeros_like(p[m0 + "layernorm1.bias"])

    def ln15(s: int) -> float:  # LN(D) row 14, entry 15, of a length-s input
        th = config.rope_base ** (-(d - 2) / d)
        x = np.arange(s) * th
        r = np.zeros(d)
        r[d - 2], r[d - 1] = np.sum(np.cos(x) ** 2), np.sum(np.cos(x) * np.sin(x))
        return float((r[d - 1] - r.mean()) / np.sqrt(r.var() + 1e-6))

    t = ln15(n)
    k = 800.0 / (ln15(n) - ln15(int(n * 0.9)))
    a = config.A_dff
    w1, b1, w2 = np.zeros((a, d)), np.zeros(a), np.zeros((a, d))
    b2, w3 = np.zeros(a), np.zeros((d, a))
    rng = np.random.default_rng(3)
    b3 = rng.normal(size=d)
    for j in range(d):  # silu(64)·x_j·(−1/64) = −x_j: the unit's residual cancels
        b1[j], w2[j, j], w3[j, j] = 64.0, 1.0, -1.0 / 64
    for j in range(d, a):  # the gate: exactly 0 while LN(D)[15] < t
        w1[j, d - 1], b1[j], b2[j] = k, -k * t, 1.0
        w3[:, j] = rng.normal(size=d)
    u = m0 + "reslayerAs.0.denseAs.0."
    for name, v in (("gluw1.weight", w1), ("gluw1.bias", b1), ("gluw2.weight", w2), ("gluw2.bias", b2),
                    ("gluw3.weight", w3), ("gluw3.bias", b3)):
        p[u + name] = v.astype(np.float32)
    p[MHA.format(1) + "layernorm1.weight"] = np.zeros_like(p[MHA.format(1) + "layernorm1.weight"])
    return p
