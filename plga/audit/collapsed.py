"""The audit's collapsed checkpoint: the project's one format, written for in-memory weights.

The format, its reader and its writer live in :mod:`plga.reference.checkpoint`
(:data:`~plga.reference.checkpoint.COLLAPSED_KEY`,
:func:`~plga.reference.checkpoint.load_collapsed`,
:func:`~plga.reference.checkpoint.save_safetensors` with ``collapsed=True``), the same code
``plga.kernels.PLDRModel.save_collapsed`` / ``from_pretrained`` use. Only what is specific to
the audit is here: :func:`write_collapsed` builds the collapsed state from NumPy weights and an
audited constant operator, without torch, and writes it through that one writer, so the files
are byte-identical to ``PLDRModel.from_reference(params).collapse(G).save_collapsed(folder)``
(``tests/audit/test_audit_collapsed.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..reference.checkpoint import COLLAPSED_KEY, expected_shapes, is_learner_key, save_safetensors
from ..reference.config import PLDRConfig

#: How the audit record names the format.
FORMAT_NAME = "plga.reference.checkpoint collapsed (decoder.collapsed_G + config.json 'collapsed': true)"


def _store_dtype(params: Mapping[str, Any]) -> np.dtype:
    dtype = np.asarray(params["decoder.embedding.weight"]).dtype
    if dtype not in (np.float16, np.float32, np.float64):
        raise InputError(f"cannot write a collapsed checkpoint of {dtype} weights (float16/32/64 only)")
    return dtype


def _stack_g(constant_g: Sequence[Any] | np.ndarray, config: PLDRConfig) -> np.ndarray:
    g = np.stack([np.asarray(x) for x in constant_g]) if not isinstance(constant_g, np.ndarray) else constant_g
    want = (config.num_layers, config.num_heads, config.depth, config.depth)
    if g.shape != want:
        raise InputError(f"the constant operators must have shape {want} (one [H, d, d] per layer), got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise InputError("the constant operators hold non-finite values")
    return g


def write_collapsed(
    params: Mapping[str, Any], config: PLDRConfig, constant_g: Sequence[Any] | np.ndarray, folder: str | Path
) -> Path:
    """Write the collapsed checkpoint of ``params`` with constant operators ``constant_g`` [L, H, d, d].

    The state holds every non-learner tensor in the weights' dtype (float16 widened to float32,
    as ``PLDRModel.to_reference`` does) and ``constant_g`` rounded to that (widened) dtype as
    :data:`~plga.reference.checkpoint.COLLAPSED_KEY`; it is written by
    :func:`plga.reference.checkpoint.save_safetensors` (``collapsed=True``). Returns the
    ``.safetensors`` path.
    """
    store = _store_dtype(params)
    g = _stack_g(constant_g, config)
    want = [k for k in expected_shapes(config) if not is_learner_key(k)]
    missing = sorted(set(want) - set(params))
    if missing:
        raise InputError(f"the parameters lack {missing}")
    out = np.float32 if store == np.float16 else store  # as PLDRModel.to_reference
    state = {k: np.asarray(params[k]).astype(store, copy=False).astype(out, copy=False) for k in want}
    state[COLLAPSED_KEY] = g.astype(out)  # as PLDRModel.collapse: float32 for half-precision models
    return save_safetensors(state, config, folder, collapsed=True)


__all__ = ["FORMAT_NAME", "write_collapsed"]
