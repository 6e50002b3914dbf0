"""Collapsed checkpoints in the project's one format: that of :meth:`plga.kernels.PLDRModel.save_collapsed`.

A collapsed checkpoint is a folder with ``model.safetensors`` and ``config.json``:

* ``model.safetensors`` holds every tensor of the original checkpoint **except** each layer's
  metric learner and power stage (``mha1.layernorm1.*``, ``mha1.reslayerAs.*``,
  ``mha1.plgatt_layer.*``), plus the constant operators ``decoder.collapsed_G``
  [layers, heads, d, d]; every tensor in the dtype of the stored weights (float32 when those
  are float16: ``PLDRModel.to_reference`` widens half precision); file metadata
  ``{"format": "pt", "collapsed": "true"}`` (safetensors writes the two entries in either
  order, so two writes of one model may differ in those header bytes, never in content);
* ``config.json`` is the upstream hyperparameter dict (:meth:`PLDRConfig.to_upstream`) plus
  ``"collapsed": true``.

:func:`write_collapsed` writes it through ``PLDRModel.collapse(G).save_collapsed(folder)``
when torch is importable and with NumPy + safetensors otherwise; the two writers produce the
same bytes (``tests/audit/test_audit_collapsed.py``), so ``PLDRModel.from_pretrained`` loads
either. :func:`read_collapsed` reads it for the float64 reference, which decodes it as PLGA
with a constant G per layer (``plga.reference.decoder.generate(..., mode="constant",
constant_g=G)``): ``plga.reference.checkpoint.load_checkpoint`` does not read collapsed
folders (it requires the metric-learner tensors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..reference.checkpoint import CheckpointError, expected_shapes, read_safetensors
from ..reference.config import PLDRConfig

#: State-dict key of the constant operators (``plga.kernels.COLLAPSED_KEY``).
COLLAPSED_KEY = "decoder.collapsed_G"
#: Key fragments of the tensors a collapsed checkpoint drops (as ``plga.kernels.model``).
LEARNER_MARKERS = (".mha1.reslayerAs.", ".mha1.plgatt_layer.", ".mha1.layernorm1.")
#: safetensors file metadata written by ``PLDRModel.save_pretrained`` for a collapsed model.
FILE_METADATA = {"format": "pt", "collapsed": "true"}
#: How the audit record names the format.
FORMAT_NAME = "plga.kernels collapsed (decoder.collapsed_G + config.json 'collapsed': true)"
WRITERS = ("auto", "kernels", "numpy")


def is_learner_key(key: str) -> bool:
    """True for the metric-learner / power-stage tensors a collapsed model drops."""
    return any(m in key for m in LEARNER_MARKERS)


def collapsed_shapes(config: PLDRConfig) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a collapsed checkpoint for ``config`` (``plga.kernels.model.collapsed_shapes``)."""
    shapes = {k: v for k, v in expected_shapes(config).items() if not is_learner_key(k)}
    shapes[COLLAPSED_KEY] = (config.num_layers, config.num_heads, config.depth, config.depth)
    return shapes


def is_collapsed_folder(path: str | Path) -> bool:
    """True when ``path`` (a folder, or a ``.safetensors`` file beside a ``config.json``) is marked
    ``"collapsed": true`` (the rule of ``PLDRModel.from_pretrained``)."""
    path = Path(path)
    if not (path.is_dir() or path.suffix == ".safetensors"):
        return False
    cfg = (path if path.is_dir() else path.parent) / "config.json"
    try:
        raw = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and bool(raw.get("collapsed"))


def _store_dtype(params: Mapping[str, Any]) -> np.dtype:
    dtype = np.asarray(params["decoder.embedding.weight"]).dtype
    if dtype not in (np.float16, np.float32, np.float64):
        raise ValueError(f"cannot write a collapsed checkpoint of {dtype} weights (float16/32/64 only)")
    return dtype


def _stack_g(constant_g: Sequence[Any] | np.ndarray, config: PLDRConfig) -> np.ndarray:
    g = np.stack([np.asarray(x) for x in constant_g]) if not isinstance(constant_g, np.ndarray) else constant_g
    want = (config.num_layers, config.num_heads, config.depth, config.depth)
    if g.shape != want:
        raise ValueError(f"the constant operators must have shape {want} (one [H, d, d] per layer), got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError("the constant operators hold non-finite values")
    return g


def collapsed_state(params: Mapping[str, Any], config: PLDRConfig, constant_g: Sequence[Any] | np.ndarray) -> dict[str, np.ndarray]:
    """The collapsed state dict: non-learner tensors in the weights' dtype + ``decoder.collapsed_G``."""
    store = _store_dtype(params)
    g = _stack_g(constant_g, config)
    want = {k: v for k, v in expected_shapes(config).items() if not is_learner_key(k)}
    missing = sorted(set(want) - set(params))
    if missing:
        raise ValueError(f"the parameters lack {missing}")
    out = np.float32 if store == np.float16 else store  # as PLDRModel.to_reference
    state = {k: np.ascontiguousarray(np.asarray(params[k]).astype(store, copy=False).astype(out, copy=False)) for k in want}
    state[COLLAPSED_KEY] = np.ascontiguousarray(g.astype(out))
    return state


def _write_numpy(params: Mapping[str, Any], config: PLDRConfig, g: np.ndarray, folder: Path) -> Path:
    from safetensors.numpy import save_file

    from ..atomic import atomic_path

    state = collapsed_state(params, config, g)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "model.safetensors"
    with atomic_path(out) as tmp:
        save_file(state, str(tmp), metadata=dict(FILE_METADATA))
    cfg = {**config.to_upstream(), "collapsed": True}
    with atomic_path(folder / "config.json") as tmp:
        tmp.write_text(json.dumps(cfg, indent=1))
    return out


def _write_kernels(params: Mapping[str, Any], config: PLDRConfig, g: np.ndarray, folder: Path) -> Path:
    import torch

    from ..kernels import PLDRModel

    store = _store_dtype(params)
    tdtype = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[np.dtype(store)]
    g_store = g.astype(np.float32 if store == np.float16 else store)
    model = PLDRModel.from_reference(params, config, dtype=tdtype, device="cpu")
    return model.collapse(g_store).save_collapsed(folder)


def write_collapsed(
    params: Mapping[str, Any], config: PLDRConfig, constant_g: Sequence[Any] | np.ndarray, folder: str | Path,
    writer: str = "auto",
) -> tuple[Path, str]:
    """Write the collapsed checkpoint of ``params`` with constant operators ``constant_g`` [L, H, d, d].

    ``writer``: ``kernels`` (``PLDRModel.collapse(G).save_collapsed``, needs torch), ``numpy``
    (safetensors.numpy, same bytes) or ``auto`` (kernels when torch is importable).
    ``constant_g`` is rounded to the weights' dtype. Returns (the ``.safetensors`` path, the
    writer used: ``"plga.kernels.PLDRModel.save_collapsed"`` or ``"plga.audit.collapsed (numpy)"``).
    """
    if writer not in WRITERS:
        raise ValueError(f"unknown writer {writer!r}; use one of {WRITERS}")
    if writer == "auto":
        from .backend import torch_available

        writer = "kernels" if torch_available() else "numpy"
    g = _stack_g(constant_g, config)
    folder = Path(folder)
    if writer == "kernels":
        return _write_kernels(params, config, g, folder), "plga.kernels.PLDRModel.save_collapsed"
    return _write_numpy(params, config, g, folder), "plga.audit.collapsed (numpy)"


def read_collapsed(folder: str | Path) -> tuple[dict[str, np.ndarray], PLDRConfig, list[np.ndarray]]:
    """Read a collapsed folder for the reference → (non-learner params, config, per-layer G [H, d, d]).

    Checks the ``"collapsed": true`` flag, keys, shapes and finiteness as
    ``PLDRModel.from_pretrained`` does; errors are :class:`CheckpointError` (a ``ValueError``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"collapsed checkpoint {folder} is not a folder")
    cfg_path = folder / "config.json"
    try:
        raw = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder}: unreadable config.json: {exc}") from exc
    if not (isinstance(raw, dict) and raw.get("collapsed") is True):
        raise CheckpointError(f"{folder} is not a collapsed checkpoint (config.json lacks \"collapsed\": true)")
    config = PLDRConfig.from_json(cfg_path)
    files = sorted(folder.glob("*.safetensors"))
    if len(files) != 1:
        raise CheckpointError(f"collapsed folder {folder} must hold exactly one .safetensors file, got {[f.name for f in files]}")
    state = read_safetensors(files[0])
    want = collapsed_shapes(config)
    missing = sorted(set(want) - set(state))
    unexpected = sorted(set(state) - set(want))
    bad = sorted(k for k in set(want) & set(state) if tuple(state[k].shape) != want[k])
    if missing or unexpected or bad:
        raise CheckpointError(
            f"{files[0]} is not a collapsed model for {config}: missing {missing}, unexpected {unexpected}, mis-shaped {bad}"
        )
    not_float = sorted(k for k, v in state.items() if v.dtype.kind != "f")
    if not_float:
        raise CheckpointError(f"{files[0]} has tensors that are not floating point: {not_float}")
    nonfinite = sorted(k for k, v in state.items() if not np.all(np.isfinite(v)))
    if nonfinite:
        raise CheckpointError(f"{files[0]} has non-finite values in {nonfinite}")
    g = state.pop(COLLAPSED_KEY)
    return state, config, [g[i] for i in range(config.num_layers)]


__all__ = [
    "COLLAPSED_KEY", "FILE_METADATA", "FORMAT_NAME", "LEARNER_MARKERS", "collapsed_shapes", "collapsed_state",
    "is_collapsed_folder", "is_learner_key", "read_collapsed", "write_collapsed",
]
