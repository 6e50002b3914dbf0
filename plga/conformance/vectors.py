"""Conformance vectors for implementations outside Python (format: docs/vectors.md).

``write_vectors(DIR)`` writes, for every named case of :data:`ATTENTION_CASES` and
:data:`CHAIN_CASES` and every dtype class of :data:`DTYPE_CLASSES`, a safetensors file of
inputs and expected outputs plus a JSON file of metadata, and ``index.json`` listing them.
Inputs are stored in the case dtype (bfloat16 as float32 values exactly representable in
bfloat16, since NumPy has no bfloat16); expected outputs are float64, computed from the stored
inputs by the reference (mpmath for the float64 class). Each JSON carries the tolerance the
implementation must meet, already evaluated: ``bound = k · baseline_error + floor`` with the
baseline error measured here by eager torch in that dtype (the policy of
:mod:`plga.conformance.tolerance`). Every file is written atomically.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..atomic import atomic_path
from ..datafiles import TRAINED_G_LM, missing_reason
from . import eager as eg
from . import oracle
from .strategies import AttentionCase, ChainCase
from .tolerance import DEFAULT_K, compare, k_for

FORMAT = "plga-conformance-vectors"
FORMAT_VERSION = 2  # 2: the finite mask's rows without a key judged apart; output shapes checked
#: dtype classes written: (name, storage dtype of the inputs)
DTYPE_CLASSES = (("float64", "float64"), ("float32", "float32"), ("bfloat16", "float32"))

#: name → (B, H, S, T, d, dv, G family, G per batch, causal, padding, scale, finite_mask)
ATTENTION_CASES: dict[str, tuple[Any, ...]] = {
    "sdpa_identity": (2, 2, 5, 5, 8, 4, "identity", False, False, "none", None, False),
    "g_none_causal": (1, 2, 7, 7, 8, 8, "none", False, True, "none", None, False),
    "random_g": (2, 3, 5, 7, 8, 6, "random", False, False, "none", None, False),
    "random_g_scale": (1, 2, 4, 4, 16, 4, "random", False, False, "none", 0.3, False),
    "sentinel_g": (2, 3, 6, 6, 4, 4, "sentinel", False, False, "none", None, False),
    "batched_g": (2, 2, 5, 5, 4, 3, "random", True, True, "none", None, False),
    "rank_one_g": (1, 2, 6, 6, 8, 4, "rank_one", False, True, "none", None, False),
    "ill_conditioned_g": (1, 2, 6, 6, 8, 4, "ill_conditioned", False, False, "none", None, False),
    "causal_rectangular": (1, 2, 3, 11, 8, 4, "random", False, True, "none", None, False),
    "padding_right_causal": (2, 2, 9, 9, 8, 4, "random", False, True, "right", None, False),
    "padding_random": (2, 2, 7, 13, 4, 4, "sentinel", False, False, "random", None, False),
    "finite_mask_empty_rows": (2, 2, 6, 6, 8, 4, "random", False, True, "left", None, True),
    "single_query_key": (1, 1, 1, 1, 2, 1, "random", False, True, "none", None, False),
    "trained_g": (1, 2, 9, 9, 64, 8, "trained", False, True, "none", None, False),
}

#: name → (B, H, S, d, A_dff, units, dense, q_scale)
CHAIN_CASES: dict[str, tuple[Any, ...]] = {
    "chain_small": (1, 2, 5, 4, 6, 1, 2, 1.0),
    "chain_two_units": (2, 3, 7, 8, 8, 2, 2, 1.0),
}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _np(x: Any) -> np.ndarray:
    return np.ascontiguousarray(oracle.to_np(x))


def _attention_case(name: str, spec: tuple[Any, ...], seed: int) -> AttentionCase:
    b, h, s, t, d, dv, fam, gb, causal, pad, scale, _finite = spec
    return AttentionCase(b, h, s, t, d, dv, fam, gb, causal, pad, scale, seed)


def _attention_vector(name: str, spec: tuple[Any, ...], dclass: str, storage: str, seed: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    case = _attention_case(name, spec, seed)
    finite = bool(spec[-1])
    if finite:  # left padding under causal: rows with no allowed key, the finite mask's regime
        case.pad[:, :] = False
        case.pad[:, :2] = True
        case.zero_queries_without_key()  # else the bound there would be of the order of the outputs
    t = case.tensors(dclass)
    kw = dict(causal=case.causal, key_padding_mask=t["key_padding_mask"], scale=case.scale, finite_mask=finite)
    truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=dclass == "float64", **kw)
    base = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], order=o, **kw) for o in eg.ATTENTION_ORDERS]
    from .checks import attention_magnitude

    magnitude = attention_magnitude(t, case.causal, case.scale)
    k = DEFAULT_K
    empty = None
    if finite:  # the rows with no allowed key apart: below float64 they are uniform where the truth keeps softmax(s)
        allowed = oracle.support_np(case.b, case.s, case.t, causal=case.causal, key_padding_mask=case.pad)  # [B, 1, S, T]
        empty = ~np.broadcast_to(allowed, (case.b, 1, case.s, case.t)).any(axis=-1)[:, 0]  # [B, S]

    def bound(judged: Any) -> dict[str, Any]:
        b_err = max(compare(b, [], truth, dtype=dclass, judged=judged).kernel_error for b in base)
        floor = compare(base[0], [], truth, dtype=dclass, magnitude=magnitude, judged=judged).floor
        return {"baseline_error": b_err, "floor": floor, "bound": k * b_err + floor}

    tolerance = {"class": "baseline-relative", "k": k, **bound(None if empty is None else ~empty[:, None, :, None])}
    if empty is not None:
        tolerance["rows_without_key"] = {"k": k, **bound(empty[:, None, :, None])}
    tensors = {n: _np(t[n]).astype(storage) for n in ("q", "k", "v")}
    if t["G"] is not None:
        tensors["G"] = _np(t["G"]).astype(storage)
    if t["key_padding_mask"] is not None:
        tensors["key_padding_mask"] = _np(t["key_padding_mask"]).astype(bool)
    tensors["expected"] = np.vectorize(float, otypes=[np.float64])(truth) if truth.dtype == object else truth.astype(np.float64)
    if empty is not None:
        tensors["query_rows_without_key"] = empty
    meta = {
        "kind": "attention",
        "inputs": {"causal": case.causal, "scale": case.scale, "finite_mask": finite, "G": "stored" if t["G"] is not None else "identity (absent)",
                   "key_padding_mask": "stored (True = padding)" if t["key_padding_mask"] is not None else "absent (no padding)"},
        "shapes": {n: list(a.shape) for n, a in tensors.items()},
        "outputs": ["expected"],
        "tolerance": tolerance,
        "description": case.describe(),
    }
    return tensors, meta


def _chain_vector(name: str, spec: tuple[Any, ...], dclass: str, storage: str, seed: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from .checks import _chain_inputs

    case = ChainCase(*spec, seed=seed)
    q, w = _chain_inputs(case, _torch_dtype(dclass), "cpu")
    out_dtype = _torch_dtype("float32" if dclass == "bfloat16" else dclass)  # chains run in float32 or wider
    qb, wb = q.to(out_dtype), eg.cast_layer_weights(w, out_dtype)
    truth = oracle.truth_chain(q, w, mp=dclass == "float64")
    base = [eg.operator_chain(qb, wb, order=o) for o in eg.ORDERS]
    tensors: dict[str, np.ndarray] = {"q_rot": _np(q).astype(storage)}
    for key in ("ln_weight", "ln_bias", "W", "b", "P", "a", "b_a"):
        tensors[key] = _np(w[key]).astype(storage)
    for j, (blocks, g, bt) in enumerate(w["units"]):
        tensors[f"units.{j}.gamma"], tensors[f"units.{j}.beta"] = _np(g).astype(storage), _np(bt).astype(storage)
        for kk, blk in enumerate(blocks):
            for nm, x in zip(("w1", "b1", "w2", "b2", "w3", "b3"), blk, strict=True):
                tensors[f"units.{j}.blocks.{kk}.{nm}"] = _np(x).astype(storage)
    tol = {}
    k = k_for("operator_chain")
    for i, nm in enumerate(("A", "A_LM", "A_P", "G_LM")):
        tr = truth[i]
        tensors[nm] = np.vectorize(float, otypes=[np.float64])(tr) if tr.dtype == object else tr.astype(np.float64)
        b_err = max(compare(b[i], [], tr, dtype=str(out_dtype).replace("torch.", "")).kernel_error for b in base)
        floor = compare(base[0][i], [], tr, dtype=str(out_dtype).replace("torch.", "")).floor
        tol[nm] = {"class": "baseline-relative", "k": k, "baseline_error": b_err, "floor": floor, "bound": k * b_err + floor}
    meta = {
        "kind": "chain",
        "inputs": {"units": case.units, "blocks_per_unit": case.dense, "A_dff": case.a_dff,
                   "compute_dtype": str(out_dtype).replace("torch.", "")},
        "shapes": {n: list(a.shape) for n, a in tensors.items()},
        "outputs": ["A", "A_LM", "A_P", "G_LM"],
        "tolerance": tol,
        "description": case.describe(),
    }
    return tensors, meta


def write_vectors(directory: str | Path, *, seed: int = 0) -> list[Path]:
    """Write every case × dtype class to ``directory``; returns the written paths (index last)."""
    from safetensors.numpy import save_file

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index = []
    cases: list[tuple[str, Any, Any]] = [(n, s, _attention_vector) for n, s in ATTENTION_CASES.items()]
    cases += [(n, s, _chain_vector) for n, s in CHAIN_CASES.items()]
    for i, (name, spec, make) in enumerate(cases):
        if spec[6:7] == ("trained",) and oracle.trained_g_lm() is None:
            index.append({"case": name, "skipped": missing_reason(TRAINED_G_LM)})
            continue
        for dclass, storage in DTYPE_CLASSES:
            case_seed = seed * 1000 + i
            tensors, meta = make(name, spec, dclass, storage, case_seed)
            stem = f"{name}.{dclass}"
            st_path = out_dir / f"{stem}.safetensors"
            header = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "spec_version": __version__,
                      "case": name, "dtype": dclass, "tolerance_class": "baseline-relative", "seed": str(case_seed)}
            with atomic_path(st_path) as tmp:
                save_file(tensors, str(tmp), metadata=header)
            digest = hashlib.sha256(st_path.read_bytes()).hexdigest()
            full = {"format": FORMAT, "format_version": FORMAT_VERSION, "spec_version": __version__, "case": name,
                    "dtype": dclass, "storage_dtype": storage, "seed": case_seed,
                    "expected_source": f"mpmath {oracle.TRUTH_DPS} digits" if dclass == "float64" else "float64 reference",
                    "tensors": st_path.name, "sha256": digest, **meta}
            js_path = out_dir / f"{stem}.json"
            with atomic_path(js_path) as tmp:
                tmp.write_text(json.dumps(full, indent=1, sort_keys=True))
            written += [st_path, js_path]
            index.append({"case": name, "dtype": dclass, "kind": meta["kind"], "json": js_path.name, "tensors": st_path.name})
    idx = out_dir / "index.json"
    with atomic_path(idx) as tmp:
        tmp.write_text(json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, "spec_version": __version__,
                                   "seed": seed, "cases": index}, indent=1))
    written.append(idx)
    return written


def check_vector(json_path: str | Path, outputs: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Check ``outputs`` (name → array) against one vector; raises AssertionError with the numbers.

    The rule foreign implementations apply, in Python: each output has the expected shape and
    ``max|out − expected| ≤ bound``; where the vector lists query rows without an allowed key
    (the finite mask's), those rows against their own bound and the others against ``bound``.
    """
    from safetensors.numpy import load_file

    from ..errors import DataFileError
    from ..inputs import read_json, regular_file

    meta = read_json(json_path, "vector file")
    folder = Path(json_path).resolve().parent
    tensor_path = (folder / str(meta.get("tensors", ""))).resolve()
    if folder not in tensor_path.parents:
        raise DataFileError(f"vector file {json_path} points outside its folder: {meta.get('tensors')!r}")
    regular_file(tensor_path, "vector tensors")
    tensors = load_file(str(tensor_path))
    tol = meta["tolerance"]
    report = {}
    for name in meta["outputs"]:
        expected = tensors[name]
        out = np.asarray(outputs[name], dtype=np.float64)
        if out.shape != expected.shape:  # a broadcast would compare a scalar with every element
            raise AssertionError(f"{meta['case']}.{meta['dtype']} {name}: shape {out.shape} != expected {expected.shape}")
        t = tol if "bound" in tol else tol[name]
        parts = [("", t, None)]
        if "rows_without_key" in t:
            empty = tensors["query_rows_without_key"][:, None, :, None]  # [B, 1, S, 1]
            parts = [("", t, ~empty), (" (query rows without a key)", t["rows_without_key"], empty)]
        for label, part, rows in parts:
            diff = np.abs(out - expected) if rows is None else np.abs(out - expected)[np.broadcast_to(rows, out.shape)]
            err = float(np.max(diff)) if diff.size else 0.0
            report[name + label] = {"error": err, "bound": part["bound"]}
            if not (err <= part["bound"]):
                raise AssertionError(f"{meta['case']}.{meta['dtype']} {name}{label}: max error {err:.3e} > bound "
                                     f"{part['bound']:.3e} (= {part['k']}·{part['baseline_error']:.3e} + {part['floor']:.3e})")
    return report


__all__ = ["ATTENTION_CASES", "CHAIN_CASES", "DTYPE_CLASSES", "FORMAT", "FORMAT_VERSION", "check_vector", "write_vectors"]
