"""Loading PLDR-LLM weights safely: upstream ``.pth`` (weights only) and safetensors.

Parameters are a plain ``dict`` keyed by the upstream state-dict names (SPEC §2) holding
NumPy arrays as stored (float32 for released checkpoints). Nothing here ever runs an
unrestricted pickle: ``.pth`` files go through ``torch.load(weights_only=True)``; safetensors
need no torch at all.

This module is also the one home of the *collapsed* checkpoint format (SPEC §3, inference
collapse) and of writing model folders (:func:`save_safetensors`). A collapsed checkpoint is a
folder with ``model.safetensors`` and ``config.json``:

* ``model.safetensors`` holds every tensor of the original checkpoint **except** each layer's
  metric learner and power stage (keys containing :data:`LEARNER_MARKERS`), plus the constant
  operators :data:`COLLAPSED_KEY` [layers, heads, d, d];
* ``config.json`` is the upstream hyperparameter dict (:meth:`PLDRConfig.to_upstream`) plus
  ``"collapsed": true``.

:func:`load_collapsed` reads it (the float64 reference decodes it as PLGA with a constant G per
layer; ``plga.kernels.PLDRModel.from_pretrained`` loads it as a collapsed model);
:func:`load_checkpoint` refuses it, since it requires the metric-learner tensors.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from .config import PLDRConfig, infer_config
from .numerics import Array

#: Optional buffers of the Transformers port that carry no learned weight.
OPTIONAL_BUFFERS = ("decoder.past_G_values", "decoder.past_G_values_status")
#: State-dict key of the constant operators [layers, heads, d, d] of a collapsed checkpoint.
COLLAPSED_KEY = "decoder.collapsed_G"
#: Key fragments of the metric-learner / power-stage tensors a collapsed checkpoint drops.
LEARNER_MARKERS = (".mha1.reslayerAs.", ".mha1.plgatt_layer.", ".mha1.layernorm1.")
#: The one safetensors metadata entry every written file carries. A single entry keeps the
#: header reproducible: safetensors writes several entries in a random (hash-map) order.
FILE_METADATA = {"format": "pt"}




def expected_shapes(config: PLDRConfig) -> dict[str, tuple[int, ...]]:
    """Every state-dict key of a v510 decoder with ``config``, mapped to its shape."""
    c = config
    d, h = c.depth, c.num_heads
    shapes: dict[str, tuple[int, ...]] = {"decoder.embedding.weight": (c.input_vocab_size, c.d_model)}
    for i in range(c.num_layers):
        p = f"decoder.dec_layers.{i}."
        for name in ("wq", "wk", "wv", "dense"):
            shapes[f"{p}mha1.{name}.weight"] = (c.d_model, c.d_model)
            shapes[f"{p}mha1.{name}.bias"] = (c.d_model,)
        for name in ("Wlst", "blst", "pwlst", "alst", "balst"):
            shapes[f"{p}mha1.plgatt_layer.{name}"] = (h, d, d)
        for j in range(c.num_reslayerA):
            for k in range(c.num_denseA):
                q = f"{p}mha1.reslayerAs.{j}.denseAs.{k}."
                shapes[q + "gluw1.weight"] = (c.A_dff, d)
                shapes[q + "gluw1.bias"] = (c.A_dff,)
                shapes[q + "gluw2.weight"] = (c.A_dff, d)
                shapes[q + "gluw2.bias"] = (c.A_dff,)
                shapes[q + "gluw3.weight"] = (d, c.A_dff)
                shapes[q + "gluw3.bias"] = (d,)
            shapes[f"{p}mha1.reslayerAs.{j}.layernormA.weight"] = (d,)
            shapes[f"{p}mha1.reslayerAs.{j}.layernormA.bias"] = (d,)
        shapes[f"{p}mha1.layernorm1.weight"] = (d,)
        shapes[f"{p}mha1.layernorm1.bias"] = (d,)
        shapes[f"{p}ffn.gluw1.weight"] = (c.dff, c.d_model)
        shapes[f"{p}ffn.gluw1.bias"] = (c.dff,)
        shapes[f"{p}ffn.gluw2.weight"] = (c.dff, c.d_model)
        shapes[f"{p}ffn.gluw2.bias"] = (c.dff,)
        shapes[f"{p}ffn.gluw3.weight"] = (c.d_model, c.dff)
        shapes[f"{p}ffn.gluw3.bias"] = (c.d_model,)
        for ln in ("layernorm1", "layernorm2"):
            shapes[f"{p}{ln}.weight"] = (c.d_model,)
            shapes[f"{p}{ln}.bias"] = (c.d_model,)
    shapes["decoder.layernorm1.weight"] = (c.d_model,)
    shapes["decoder.layernorm1.bias"] = (c.d_model,)
    shapes["final_layer.weight"] = (c.input_vocab_size, c.d_model)
    shapes["final_layer.bias"] = (c.input_vocab_size,)
    return shapes


#: At most this many keys are named per kind of problem; the rest are counted.
MAX_KEYS_NAMED = 20


def _named(keys: list[str]) -> str:
    """``keys`` as a list literal, cut to :data:`MAX_KEYS_NAMED` entries with the rest counted."""
    if len(keys) <= MAX_KEYS_NAMED:
        return str(keys)
    return f"{keys[:MAX_KEYS_NAMED]} and {len(keys) - MAX_KEYS_NAMED} more"


def expected_count(config: PLDRConfig) -> int:
    """The number of state-dict keys of a v510 decoder with ``config`` (without building them)."""
    c = config
    per_unit = 6 * c.num_denseA + 2
    per_layer = 8 + 5 + c.num_reslayerA * per_unit + 2 + 6 + 4
    return 1 + c.num_layers * per_layer + 2 + 2


def is_learner_key(key: str) -> bool:
    """True for the metric-learner / power-stage tensors a collapsed checkpoint drops."""
    return any(m in key for m in LEARNER_MARKERS)


def collapsed_shapes(config: PLDRConfig) -> dict[str, tuple[int, ...]]:
    """Every state-dict key of a collapsed v510 decoder with ``config``, mapped to its shape."""
    shapes = {k: v for k, v in expected_shapes(config).items() if not is_learner_key(k)}
    shapes[COLLAPSED_KEY] = (config.num_layers, config.num_heads, config.depth, config.depth)
    return shapes


def collapsed_count(config: PLDRConfig) -> int:
    """The number of state-dict keys of a collapsed decoder with ``config`` (without building them)."""
    c = config
    learner_per_layer = 2 + 5 + c.num_reslayerA * (6 * c.num_denseA + 2)
    return expected_count(c) - c.num_layers * learner_per_layer + 1


def _check_tensors(
    have: Mapping[str, Any], want_shapes: Callable[[], Mapping[str, tuple[int, ...]]], n_want: int,
    source: str, what: str,
) -> None:
    """Raise one :class:`CheckpointError` listing every missing, unexpected, mis-shaped,
    non-float and non-finite tensor of ``have`` against ``want_shapes()`` (``what`` says against
    what). ``n_want`` is checked first, so a config implying millions of tensors is refused
    before their shapes are ever listed."""
    if n_want > 2 * len(have) + 1000:
        raise CheckpointError(f"{source} {what}: it implies {n_want} tensors, the file holds {len(have)}")
    want = want_shapes()
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - set(want))
    misshaped = sorted(
        f"{k}: expected {want[k]}, got {tuple(np.shape(have[k]))}"
        for k in set(want) & set(have)
        if tuple(np.shape(have[k])) != want[k]
    )
    problems = []
    if missing:
        problems.append(f"missing keys {_named(missing)}")
    if unexpected:
        problems.append(f"unexpected keys {_named(unexpected)}")
    if misshaped:
        problems.append(f"mis-shaped tensors {_named(misshaped)}")
    if problems:
        raise CheckpointError(f"{source} {what}: " + "; ".join(problems))
    not_float = sorted(f"{k}: {np.asarray(v).dtype}" for k, v in have.items() if np.asarray(v).dtype.kind != "f")
    if not_float:
        raise CheckpointError(f"{source} has tensors that are not floating point (weights must be float): {_named(not_float)}")
    nonfinite = sorted(k for k, v in have.items() if not np.all(np.isfinite(v)))
    if nonfinite:
        raise CheckpointError(f"{source} has non-finite values (NaN or inf) in {_named(nonfinite)}")


def validate_state_dict(
    state: Mapping[str, Array], config: PLDRConfig, source: str = "state dict"
) -> dict[str, Array]:
    """Check keys, shapes, dtypes and finiteness; return the state without optional buffers.

    Raises :class:`CheckpointError` listing every missing, unexpected, mis-shaped,
    non-floating and non-finite key at once (long lists are cut, the rest counted). A
    configuration that implies far more tensors than the file holds is refused before the
    expected keys are enumerated, so a hostile ``num_layers`` cannot exhaust memory.
    """
    have = {k: v for k, v in state.items() if k not in OPTIONAL_BUFFERS}
    _check_tensors(have, lambda: expected_shapes(config), expected_count(config), source,
                   f"does not match the configuration {config}")
    return dict(have)


def _to_numpy(value: Any, key: str, source: str) -> Array:
    if isinstance(value, np.ndarray):
        return value
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is present whenever a .pth was read
        raise CheckpointError(f"{source}: tensor {key!r} needs torch to convert") from None
    if not isinstance(value, torch.Tensor):
        raise CheckpointError(f"{source}: entry {key!r} is a {type(value).__name__}, not a tensor")
    if value.device.type != "cpu":
        value = value.to("cpu")
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.detach().numpy().copy()


def read_pth(path: Path) -> dict[str, Array]:
    """Read an upstream ``.pth`` with ``torch.load(weights_only=True)``; never a full unpickle."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path}: reading a .pth checkpoint needs torch (pip install 'plga[torch]'), "
            "or convert it to safetensors with `plga convert` on a machine that has torch"
        ) from None
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path} is not a torch zip checkpoint (truncated, corrupt, or a legacy/raw pickle such as "
            "the upstream predefined-G ablation files of CUDA tensors); refusing to unpickle it. "
            "Convert such a file only on a trusted machine with torch, e.g. "
            "torch.load(p, map_location='cpu', weights_only=False) then safetensors.torch.save_file"
        )
    _check_zip_members(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refused a global: never executed
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"{path} could not be loaded safely (weights_only=True): {text}. "
            "Only plain tensors are accepted; pickles of arbitrary objects are refused. "
            "A predefined-G pickle of CUDA tensors from the upstream ablations must be converted "
            "with torch on a trusted machine, e.g. torch.load(p, map_location='cpu') then "
            "safetensors.torch.save_file({...}, out)."
        ) from exc
    except Exception as exc:  # torch raises RuntimeError, EOFError, ValueError, ... on corrupt archives
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(
            f"{path} could not be loaded safely (weights_only=True): the archive is corrupt or not a "
            f"torch checkpoint: {text}"
        ) from exc
    if isinstance(obj, Mapping) and "model_state_dict" in obj:
        obj = obj["model_state_dict"]
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a state dict")
    return {str(k): _to_numpy(v, str(k), str(path)) for k, v in obj.items()}


def _check_zip_members(path: Path) -> None:
    """Verify the CRC-32 of every member of a torch zip archive before loading it.

    ``torch.load`` does not check the checksums the archive carries, so a bit flip in a tensor
    would load as silently wrong weights; this reads every member once and compares.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(f"{path} is a corrupt zip archive: {text}") from exc
    if bad is not None:
        raise CheckpointError(f"{path} is corrupt: archive member {bad!r} fails its CRC-32 check")


def read_safetensors(path: Path) -> dict[str, Array]:
    """Read a safetensors file with NumPy (no torch needed)."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise CheckpointError(f"{path}: reading safetensors needs the 'safetensors' package") from None
    try:
        return dict(load_file(str(path)))
    except Exception as exc:  # safetensors raises SafetensorError / OSError on corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from exc


def load_checkpoint(
    path: str | Path, config: PLDRConfig | None = None, max_seq_len: int = 1024
) -> tuple[dict[str, Array], PLDRConfig]:
    """Load weights and configuration from a ``.pth``, a ``.safetensors`` or a model folder.

    A folder (or a safetensors file) may carry a ``config.json`` beside it (upstream dict or
    Transformers port). Without a config, it is inferred from the tensor shapes, with the
    context length ``max_seq_len``. The state is validated against the config.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if is_collapsed(path):
        raise CheckpointError(
            f"{path} is a collapsed checkpoint (no metric learner; config.json has \"collapsed\": true): "
            "load it with plga.reference.checkpoint.load_collapsed or plga.kernels.PLDRModel.from_pretrained"
        )
    config_path: Path | None = None
    if path.is_dir():
        candidates = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.pth"))
        if not candidates:
            raise CheckpointError(f"folder {path} holds no .safetensors or .pth file")
        if len(candidates) > 1:
            raise CheckpointError(f"folder {path} holds several weight files: {[c.name for c in candidates]}")
        config_path = path / "config.json"
        path = candidates[0]
    else:
        config_path = path.parent / "config.json"
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    if path.suffix == ".safetensors":
        state = read_safetensors(path)
    else:
        state = read_pth(path)
    if config is None and config_path is not None and config_path.exists() and path.suffix == ".safetensors":
        try:
            config = PLDRConfig.from_json(config_path)
        except (ValueError, TypeError) as exc:
            text = " ".join(str(exc).split())
            raise CheckpointError(text if str(config_path) in text else f"config {config_path}: {text}") from exc
    if config is None:
        try:
            config = infer_config({k: tuple(v.shape) for k, v in state.items()}, max_seq_len)
        except ValueError as exc:
            raise CheckpointError(f"{path}: {exc}") from exc
    return validate_state_dict(state, config, str(path)), config


def is_collapsed(path: str | Path) -> bool:
    """True when ``path`` (a folder, or a ``.safetensors`` file beside a ``config.json``) is a
    collapsed checkpoint: its ``config.json`` holds ``"collapsed": true``."""
    path = Path(path)
    if not (path.is_dir() or path.suffix == ".safetensors"):
        return False
    cfg = (path if path.is_dir() else path.parent) / "config.json"
    try:
        raw = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("collapsed") is True


def load_collapsed(path: str | Path) -> tuple[dict[str, Array], PLDRConfig, list[Array]]:
    """Read a collapsed checkpoint → (params without G, config, per-layer G [H, d, d]).

    ``path`` is a collapsed folder or its ``.safetensors`` file. Checks the ``"collapsed": true``
    flag, that a folder holds exactly one ``.safetensors`` file, and the keys, shapes, floating
    dtypes and finiteness of every tensor; errors are :class:`CheckpointError` naming the file
    and the keys. The tensors keep their stored dtype.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"collapsed checkpoint {path} does not exist")
    if not (path.is_dir() or path.suffix == ".safetensors"):
        raise CheckpointError(f"collapsed checkpoint {path} is neither a folder nor a .safetensors file")
    folder = path if path.is_dir() else path.parent
    cfg_path = folder / "config.json"
    try:
        raw = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable config.json: {exc}") from exc
    if not (isinstance(raw, dict) and raw.get("collapsed") is True):
        raise CheckpointError(f'{path} is not a collapsed checkpoint ({cfg_path} lacks "collapsed": true)')
    try:
        config = PLDRConfig.from_json(cfg_path)
    except (ValueError, TypeError) as exc:
        text = " ".join(str(exc).split())
        raise CheckpointError(text if str(cfg_path) in text else f"config {cfg_path}: {text}") from exc
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if len(files) != 1:
            raise CheckpointError(
                f"collapsed folder {path} must hold exactly one .safetensors file, got {[f.name for f in files]}"
            )
        path = files[0]
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    state = read_safetensors(path)
    source = str(path)
    _check_tensors(state, lambda: collapsed_shapes(config), collapsed_count(config), source,
                   f"is not a collapsed model for {config}")
    g = state.pop(COLLAPSED_KEY)
    return state, config, [g[i] for i in range(config.num_layers)]


def save_safetensors(
    state: Mapping[str, Array], config: PLDRConfig, folder: str | Path, *, collapsed: bool = False
) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into ``folder``, each atomically; return the former.

    ``config.json`` is the upstream dict (:meth:`PLDRConfig.to_upstream`), plus
    ``"collapsed": true`` when ``collapsed`` (``state`` then holds :data:`COLLAPSED_KEY`, and
    only a collapsed state may). The file carries the single metadata entry
    :data:`FILE_METADATA`, so two writes of the same state are byte-identical.
    """
    from safetensors.numpy import save_file

    from ..atomic import atomic_path

    if collapsed != (COLLAPSED_KEY in state):
        raise ValueError(
            f"a collapsed state holds {COLLAPSED_KEY!r} and only a collapsed one may: "
            f"collapsed={collapsed}, {COLLAPSED_KEY!r} {'present' if COLLAPSED_KEY in state else 'absent'}"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "model.safetensors"
    with atomic_path(out) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(tmp), metadata=dict(FILE_METADATA))
    cfg = config.to_upstream()
    if collapsed:
        cfg["collapsed"] = True
    with atomic_path(folder / "config.json") as tmp:
        tmp.write_text(json.dumps(cfg, indent=1))
    return out


def random_params(config: PLDRConfig, seed: int = 0) -> dict[str, Array]:
    """Seeded float32 weights of every key, scaled so the model is well-conditioned.

    LayerNorm gains near 1, exponents P small (A_P stays moderate), other tensors
    ~ N(0, 1/fan_in). For tests, benchmarks and the built-in audit model; not a trained model.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for key, shape in expected_shapes(config).items():
        if key.endswith(".weight") and len(shape) == 1:  # LayerNorm gains
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif key.endswith("pwlst"):
            value = 0.3 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[-1])
        params[key] = value.astype(np.float32)
    return params
