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


def power_stage_w_zero(seed: int = 3) -> dict[str, np.ndarray]:
    """Collapsed by construction: W = 0 makes A_LM = iSwiGLU(b) + 1e-9, hence A_P and G_LM, input-independent."""
    params = random_params(CONFIG, seed=seed)
    for i in range(CONFIG.num_layers):
        params[PLGA.format(i) + "Wlst"] = np.zeros_like(params[PLGA.format(i) + "Wlst"])
    return params
