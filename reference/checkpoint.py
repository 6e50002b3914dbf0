"""Loading PLDR-LLM weights safely: upstream ``.pth`` (weights only) and safetensors.

Parameters are a plain ``dict`` keyed by the upstream state-dict names (docs/spec.md §2) holding
NumPy arrays as stored (float32 for released checkpoints). Nothing here ever runs an
unrestricted pickle: ``.pth`` files go through ``torch.load(weights_only=True)``; safetensors
need no torch at all.

Hostile files cost at most their own size: only regular files are opened; a ``.pth`` is
checked from its zip directory (stored members, sizes, CRC-32s) and its pickle's opcodes
before ``torch.load``, and its tensors (kinds, views that repeat data) before any is copied;
keys and shapes are checked against the configuration (:class:`PLDRConfig` bounds every field)
before the weights are converted. Every refusal is one :class:`CheckpointError` naming the file.

This module is also the one home of the *collapsed* checkpoint format (docs/spec.md §3, inference
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
import warnings
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
    """``keys`` as a list literal, cut to :data:`MAX_KEYS_NAMED` entries (each to 100
    characters: a hostile key may be a megabyte long) with the rest counted."""
    shown = [k if len(k) <= 100 else f"{k[:97]}..." for k in keys[:MAX_KEYS_NAMED]]
    return str(shown) if len(keys) <= MAX_KEYS_NAMED else f"{shown} and {len(keys) - MAX_KEYS_NAMED} more"


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


def _check_structure(
    shapes: Mapping[str, tuple[int, ...]], want_shapes: Callable[[], Mapping[str, tuple[int, ...]]],
    n_want: int, source: str, what: str,
) -> None:
    """Raise one :class:`CheckpointError` listing every missing, unexpected and mis-shaped
    tensor of ``shapes`` against ``want_shapes()`` (``what`` says against what). Needs only
    the shapes, so it runs before any tensor is read. ``n_want`` is checked first, so a config
    implying millions of tensors is refused before their shapes are ever listed."""
    if n_want > 2 * len(shapes) + 1000:
        raise CheckpointError(f"{source} {what}: it implies {n_want} tensors, the file holds {len(shapes)}")
    want = want_shapes()
    missing = sorted(set(want) - set(shapes))
    unexpected = sorted(set(shapes) - set(want))
    misshaped = sorted(
        f"{k}: expected {want[k]}, got {tuple(shapes[k])}" for k in set(want) & set(shapes) if tuple(shapes[k]) != want[k]
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


def _check_values(have: Mapping[str, Array], source: str) -> None:
    """Raise one :class:`CheckpointError` naming every non-float, then every non-finite tensor."""
    not_float = sorted(f"{k}: {np.asarray(v).dtype}" for k, v in have.items() if np.asarray(v).dtype.kind != "f")
    if not_float:
        raise CheckpointError(f"{source} has tensors that are not floating point (weights must be float): {_named(not_float)}")
    nonfinite = sorted(k for k, v in have.items() if not np.all(np.isfinite(v)))
    if nonfinite:
        raise CheckpointError(f"{source} has non-finite values (NaN or inf) in {_named(nonfinite)}")


def _check_tensors(
    have: Mapping[str, Array], want_shapes: Callable[[], Mapping[str, tuple[int, ...]]], n_want: int,
    source: str, what: str,
) -> None:
    """:func:`_check_structure` then :func:`_check_values` of in-memory arrays."""
    _check_structure({k: tuple(np.shape(v)) for k, v in have.items()}, want_shapes, n_want, source, what)
    _check_values(have, source)


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


#: The most members a ``.pth`` archive may list (one per storage, plus five).
MAX_CHECKPOINT_ENTRIES = 1 << 20
#: The largest ``data.pkl`` of a ``.pth`` that is unpickled (the 110M model's is ~60 KB).
MAX_PICKLE_BYTES = 32 << 20
#: The torch dtypes read from a ``.pth`` (NumPy has them; bfloat16 is widened to float32).
#: Others (float8, quantized, complex32, …) are refused naming the tensor.
_READABLE_DTYPES = (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
    "complex64", "complex128",
)


def _describe_non_zip(head: bytes) -> str:
    """What a file that is not a zip archive looks like, from its first bytes, and what to do."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return ("a raw pickle (a legacy torch.save file, or an upstream predefined-G ablation file of CUDA "
                "tensors); refusing to unpickle it. Convert it only on a trusted machine with torch: "
                "torch.load(p, map_location='cpu', weights_only=False) then safetensors.torch.save_file")
    if head.startswith(b"PK"):
        return "a damaged zip archive (truncated, or its directory is missing): download or save it again"
    if len(head) >= 9 and head[8:9] == b"{":
        return "it looks like a safetensors file: name it .safetensors"
    if head.startswith(b"\x93NUMPY"):
        return "it is a NumPy .npy array, not a checkpoint"
    if head.lstrip()[:1] in (b"{", b"["):
        return "it looks like JSON text, not a checkpoint (a config goes beside the weights or in --config)"
    return "it is damaged or not a checkpoint"


#: The most nodes a tuple of the pickle may expand to. Tuples that share sub-tuples expand
#: exponentially (200 nested pairs pickle in a few KB); a dict keyed by one hashes it whole,
#: so ``torch.load`` itself would never return. Shapes and storage ids have a handful.
MAX_TUPLE_NODES = 1 << 20


def _check_pickle_shape(data: bytes, path: Path) -> None:
    """Walk the pickle's opcodes (never executing them) tracking how many nodes each tuple
    expands to, through the memo; refuse the file past :data:`MAX_TUPLE_NODES`."""
    import pickletools

    stack: list[int] = []  # expanded node count of each stack item (1 for all but tuples)
    marks: list[int] = []
    memo: dict[int, int] = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name == "MARK":
                marks.append(len(stack))
                continue
            if name in ("TUPLE", "FROZENSET"):
                start = marks.pop()
                node = 1 + sum(stack[start:])
                del stack[start:]
                stack.append(node)
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                node = 1 + sum(stack[len(stack) - k:])
                del stack[len(stack) - k:]
                stack.append(node)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo.get(int(arg), 1))
            elif name == "DUP":
                stack.append(stack[-1])
            else:  # any other opcode: pops its inputs (a mark's slice, then what lies below the
                # mark), pushes plain objects
                before = op.stack_before
                if pickletools.markobject in before:
                    del stack[marks.pop():]
                    before = before[: before.index(pickletools.markobject)]
                del stack[len(stack) - len(before):]
                stack.extend(1 for _ in op.stack_after)
            if stack and stack[-1] > MAX_TUPLE_NODES:
                raise CheckpointError(
                    f"{path}: its pickle builds a tuple of more than {MAX_TUPLE_NODES} nodes from shared parts "
                    "(hashing it would never end); refusing to load it"
                )
    except CheckpointError:
        raise
    except (ValueError, IndexError) as exc:  # not a pickle torch.load could read either
        raise CheckpointError(f"{path} is corrupt: its pickle is malformed ({' '.join(str(exc).split())[:100]})") from None


def _check_zip_members(path: Path, archive: zipfile.ZipFile, size: int) -> None:
    """Refuse what ``torch.save`` never writes, then verify every member's CRC-32.

    Members must be stored (torch.save never compresses, and a deflate bomb would expand in
    memory before any check), declare no more bytes than the file holds, and ``data.pkl`` be at
    most :data:`MAX_PICKLE_BYTES`; so ``torch.load`` reads at most the file's size. The pickle is
    then walked by :func:`_check_pickle_shape`. ``torch.load`` does not check
    the checksums the archive carries, so a bit flip in a tensor would load as silently wrong
    weights; reading every member once (bounded by the file size) catches it.
    """
    total = 0
    for info in archive.infolist():
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{path}: archive member {info.filename!r} is compressed; torch.save never compresses, "
                "so this is not a torch checkpoint as saved (save it again with torch.save)"
            )
        total += info.file_size
        if info.filename.endswith("data.pkl") and info.file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"{path}: its pickle {info.filename!r} is {info.file_size} bytes; at most {MAX_PICKLE_BYTES} are read")
    if total > size:
        raise CheckpointError(f"{path} is damaged: its members declare {total} bytes, the file has {size}")
    try:
        bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(f"{path} is a corrupt zip archive: {text}") from exc
    if bad is not None:
        raise CheckpointError(f"{path} is corrupt: archive member {bad!r} fails its CRC-32 check")
    for info in archive.infolist():
        if info.filename.endswith("data.pkl"):
            _check_pickle_shape(archive.read(info), path)


def _check_tensor_kinds(tensors: Mapping[str, Any], path: Path, size: int) -> None:
    """Refuse tensors that cannot be read as plain arrays, and views whose copy would exceed
    the data the file holds (a stride-0 ``expand`` of one float declares 2^31 of them)."""
    import torch

    total = 0
    for key, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{path}: entry {_named([key])[1:-1]} is a {type(t).__name__}, not a tensor")
        kind = ("a meta tensor (no data)" if t.is_meta else "a nested tensor" if t.is_nested
                else f"a {t.layout} tensor" if t.layout != torch.strided
                else "a quantized tensor" if t.is_quantized else None)
        if kind is None and str(t.dtype).removeprefix("torch.") not in _READABLE_DTYPES:
            kind = f"a {str(t.dtype).removeprefix('torch.')} tensor"
        if kind is not None:
            raise CheckpointError(f"{path}: {_named([key])[1:-1]} is {kind}; weights must be dense float tensors with their data")
        nbytes = t.numel() * t.element_size()
        stored = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        if nbytes > stored or any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape, strict=True)):
            raise CheckpointError(
                f"{path}: {_named([key])[1:-1]} of shape {tuple(t.shape)} is a view repeating its data "
                f"({nbytes} bytes from {max(stored, 0)} stored); weights must hold their own data"
            )
        total += nbytes
    if total > 2 * size:
        raise CheckpointError(f"{path}: its tensors view {total} bytes of the {size} the file holds (tensors share data)")


def _weights_file(path: Path) -> tuple[Path, int]:
    """``(path, size)`` of a non-empty regular weight file (never a link to a device)."""
    from ..inputs import regular_file

    path, size = regular_file(path, "checkpoint", CheckpointError)
    if size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    return path, size


def _torch_load(path: Path, size: int, torch: Any) -> Any:
    """The zip checks of :func:`_check_zip_members`, then ``torch.load(weights_only=True)``;
    every failure a :class:`CheckpointError` naming the file."""
    from ..inputs import open_zip

    with open_zip(path, size, "checkpoint", CheckpointError, max_entries=MAX_CHECKPOINT_ENTRIES) as archive:
        _check_zip_members(path, archive, size)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refused a global: never executed
        text = " ".join(str(exc).split()[:12]) if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"{path} could not be loaded safely: it holds objects other than tensors, which are never "
            f"unpickled (weights_only=True refused: {text} …)"
        ) from exc
    except Exception as exc:  # torch raises RuntimeError, EOFError, ValueError, ... on corrupt archives
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise CheckpointError(
            f"{path} could not be loaded safely (weights_only=True): the archive is corrupt or not a "
            f"torch checkpoint: {text}"
        ) from exc


def open_pth(path: Path) -> dict[str, Any]:
    """The tensors of an upstream ``.pth``, vetted, none copied out yet.

    ``torch.load(weights_only=True)`` after the archive checks of :func:`_check_zip_members`;
    never a full unpickle. Every entry is checked by :func:`_check_tensor_kinds` before a view
    is copied. Not ``mmap=True``: torch then skips its check that each storage's record holds
    the bytes the pickle declares, and a truncated member silently reads its neighbour's bytes.
    :func:`read_pth` copies the tensors out as NumPy arrays.
    """
    from ..inputs import file_head

    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path}: reading a .pth checkpoint needs torch (pip install 'plga[torch]'), "
            "or convert it to safetensors with `plga convert` on a machine that has torch"
        ) from None
    path, size = _weights_file(path)
    if not zipfile.is_zipfile(path):
        head = file_head(path, 16, "checkpoint", CheckpointError)
        raise CheckpointError(f"{path} is not a torch zip checkpoint: {_describe_non_zip(head)}")
    with warnings.catch_warnings():  # a damaged pickle warns (pickletools, torch) before it fails:
        warnings.simplefilter("ignore")  # the refusal below is the one line the user sees
        obj = _torch_load(path, size, torch)
    if isinstance(obj, Mapping) and "model_state_dict" in obj:
        obj = obj["model_state_dict"]
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a state dict")
    keys = [k for k in obj if not isinstance(k, str)]
    if keys:  # never str() them: a pickled key can be a shared structure of exponential repr
        raise CheckpointError(f"{path}: the state dict has {len(keys)} keys that are not strings (a {type(keys[0]).__name__})")
    tensors = dict(obj.items())
    _check_tensor_kinds(tensors, path, size)
    return tensors


def _to_numpy(value: Any) -> Array:
    """A vetted CPU tensor (see :func:`_check_tensor_kinds`) copied out as a NumPy array."""
    import torch

    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.detach().numpy().copy()


def read_pth(path: Path) -> dict[str, Array]:
    """Every tensor of an upstream ``.pth`` as NumPy arrays (:func:`open_pth`, then copied)."""
    return {k: _to_numpy(v) for k, v in open_pth(Path(path)).items()}


def read_safetensors(path: Path) -> dict[str, Array]:
    """Read a safetensors file with NumPy (no torch needed). The library checks that the
    header's offsets tile the file, so the arrays never exceed the file's size. NumPy has no
    bfloat16: a file holding bfloat16 tensors is read through the library's framework-free
    parser and those tensors widened to float32 (exactly, as a ``.pth``'s are)."""
    path, size = _weights_file(path)
    try:
        from safetensors import deserialize
        from safetensors.numpy import load_file
    except ImportError:
        raise CheckpointError(f"{path}: reading safetensors needs the 'safetensors' package") from None
    try:
        if "BF16" not in _safetensors_dtypes(path, size):
            return dict(load_file(str(path)))
        return {name: _safetensors_array(name, view, path) for name, view in deserialize(path.read_bytes())}
    except CheckpointError:
        raise
    except Exception as exc:  # safetensors raises SafetensorError / OSError on corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file: {' '.join(str(exc).split())[:300]}") from exc


#: safetensors dtype names → NumPy (BF16 is widened by :func:`_safetensors_array`).
_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _safetensors_dtypes(path: Path, size: int) -> set[str]:
    """The dtypes a safetensors header names; empty when the header cannot be read (the library
    then says why)."""
    try:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 0 < n <= size - 8:
                return set()
            header = json.loads(fh.read(n))
        return {str(v.get("dtype")) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return set()


def _safetensors_array(name: str, view: Mapping[str, Any], path: Path) -> Array:
    """One tensor of :func:`safetensors.deserialize` as a NumPy array; bfloat16 widened to float32."""
    dtype, shape, data = view["dtype"], view["shape"], view["data"]
    if dtype == "BF16":
        return (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype not in _SAFETENSORS_DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype}, which plga does not read")
    return np.frombuffer(data, dtype=np.dtype(_SAFETENSORS_DTYPES[dtype]).newbyteorder("<")).reshape(shape)


def load_checkpoint(
    path: str | Path, config: PLDRConfig | None = None, max_seq_len: int = 1024
) -> tuple[dict[str, Array], PLDRConfig]:
    """Load weights and configuration from a ``.pth``, a ``.safetensors`` or a model folder.

    A folder (holding a ``.safetensors`` or a ``.pth``), or a safetensors file, may carry a
    ``config.json`` beside the weights (upstream dict or Transformers port; :func:`config_beside`). Without a config, it is inferred from the tensor shapes, with the
    context length ``max_seq_len``. Keys and shapes are validated against the config before
    any ``.pth`` tensor is copied into memory; dtypes and finiteness after.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if is_collapsed(path):
        raise CheckpointError(
            f"{path} is a collapsed checkpoint (no metric learner; config.json has \"collapsed\": true): "
            "load it with plga.reference.checkpoint.load_collapsed or plga.kernels.PLDRModel.from_pretrained"
        )
    folder = path.is_dir()
    if folder:
        candidates = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.pth"))
        if not candidates:
            raise CheckpointError(f"folder {path} holds no .safetensors or .pth file")
        if len(candidates) > 1:
            raise CheckpointError(f"folder {path} holds several weight files: {[c.name for c in candidates][:20]}")
        path = candidates[0]
    config_path = config_beside(path, folder)
    tensors: Mapping[str, Any]
    if path.suffix == ".safetensors":
        tensors = read_safetensors(path)
    else:
        tensors = open_pth(path)  # storages read (≤ the file size), no view copied yet
    if config is None and config_path is not None:
        config = PLDRConfig.from_json(config_path)
    have = {k: v for k, v in tensors.items() if k not in OPTIONAL_BUFFERS}
    shapes = {k: tuple(v.shape) for k, v in have.items()}
    if config is None:
        try:
            config = infer_config(shapes, max_seq_len)
        except ValueError as exc:
            raise CheckpointError(f"{path}: {exc}") from exc
    _check_structure(shapes, lambda: expected_shapes(config), expected_count(config), str(path),
                     f"does not match the configuration {config}")
    state = {k: v if isinstance(v, np.ndarray) else _to_numpy(v) for k, v in have.items()}
    _check_values(state, str(path))
    return state, config


def config_beside(weights: Path, folder: bool) -> Path | None:
    """The ``config.json`` that configures ``weights``, or None: the one in a model folder given
    as the checkpoint (whatever the weights' format), or the one beside a ``.safetensors`` file.
    A ``.pth`` named as a file takes no config from its folder (downloads gather there)."""
    cfg = weights.parent / "config.json"
    return cfg if cfg.exists() and (folder or weights.suffix == ".safetensors") else None


def _collapsed_flag(config_path: Path) -> bool:
    """The ``"collapsed"`` flag of a ``config.json`` (False when absent); a flag that is not
    true or false is a :class:`CheckpointError`."""
    from ..inputs import read_json

    raw = read_json(config_path, "config", CheckpointError)
    flag = raw.get("collapsed", False) if isinstance(raw, dict) else False
    if not isinstance(flag, bool):
        raise CheckpointError(f'config {config_path}: "collapsed" must be true or false, got {str(flag)[:40]!r}')
    return flag


def is_collapsed(path: str | Path) -> bool:
    """True when ``path`` (a folder, or a ``.safetensors`` file beside a ``config.json``) is a
    collapsed checkpoint: its ``config.json`` holds ``"collapsed": true``. An unreadable
    ``config.json`` counts as not collapsed (the loader then reports it)."""
    path = Path(path)
    if not (path.is_dir() or path.suffix == ".safetensors"):
        return False
    cfg = (path if path.is_dir() else path.parent) / "config.json"
    if not cfg.exists():
        return False
    try:
        return _collapsed_flag(cfg)
    except CheckpointError:
        return False


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
    if not _collapsed_flag(cfg_path):
        raise CheckpointError(f'{path} is not a collapsed checkpoint ({cfg_path} lacks "collapsed": true)')
    config = PLDRConfig.from_json(cfg_path)
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if len(files) != 1:
            raise CheckpointError(
                f"collapsed folder {path} must hold exactly one .safetensors file, got {[f.name for f in files][:20]}"
            )
        path = files[0]
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
    """Seeded float32 weights of every key, scaled so the model is well-conditioned at every size.

    LayerNorm gains near 1; the metric tensor's pre-activation u = W A + b ≈ 3 ± 0.5 (b near 3,
    W ~ N(0, 0.25/fan_in)), so A_LM = iSwiGLU(u) + ε ≈ 8 stays far above its ε floor; exponents
    P ~ N(0, 0.15²); other tensors ~ N(0, 1/fan_in). A_LM at the floor meeting a negative P
    would make A_P = A_LM^P ≈ 1e5 and G_LM as large: rounding then grows ~10⁴× per layer
    (paper-110m, before 2026-12-01: float64 kernels and reference agreed to 1e-11 in layer 0 and
    differed by O(1) in the logits). For tests and benchmarks; not a trained model.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for key, shape in expected_shapes(config).items():
        if key.endswith(".weight") and len(shape) == 1:  # LayerNorm gains
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif key.endswith("blst"):
            value = 3 + 0.1 * rng.standard_normal(shape)
        elif key.endswith("Wlst"):
            value = 0.5 * rng.standard_normal(shape) / np.sqrt(shape[-1])
        elif key.endswith("pwlst"):
            value = 0.15 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[-1])
        params[key] = value.astype(np.float32)
    return params
