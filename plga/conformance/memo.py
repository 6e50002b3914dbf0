"""The suite's own results, kept for one run: the float64 truth and the eager baselines.

Every decoder check of a dtype starts from the same explicit boundary cases (the same seeded
weights, prompts and token counts: :func:`plga.conformance.checks._decoder_boundary`), and each
used to recompute the float64 truth and the baseline decoders of every one of them: in the
quick profile, most of the cache group's time went to the suite's own computations, not to the
implementation under test. Those computations are pure functions of their inputs, so a run
keeps their results, keyed by a digest of the inputs' contents (values, dtypes, shapes, the
config), and hands out deep copies.

Only inside :func:`scope` (one :func:`~plga.conformance.runner.check_kernel` run, or one module
of the shipped suite under pytest: the plugin's ``plga_suite_memo`` fixture); elsewhere every
call computes afresh. Nothing the implementation returns is kept: the keys are the
suite's own inputs, and the implementation only ever sees copies of them
(:mod:`plga.conformance.guard`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

#: The most results one run keeps (least recently used dropped first): a quick run asks for a
#: few hundred distinct ones, each at most a few MB for the suite's small configs.
MAX_ENTRIES = 1024

_store: OrderedDict[bytes, Any] | None = None
_tensor_digests: dict[int, tuple[Any, int, bytes]] = {}  # id → (weak reference, version, digest)
#: The state dicts whose digests a run keeps (a case's few, a few MB at most each).
MAX_STATES = 64
#: The bytes of a state dict's values hashed in one update (small tensors concatenated).
CHUNK_BYTES = 1 << 24
_state_digests: OrderedDict[int, tuple[Any, tuple[Any, ...], bytes]] = OrderedDict()  # id → (state, fingerprint, digest)


def _feed(h: Any, x: Any) -> None:
    """Feed ``x``'s content, with its type, dtype and shape, to the hash ``h``."""
    if x is None or isinstance(x, (bool, int, float, str)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
    elif isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        h.update(f"nd:{a.dtype.str}:{a.shape};".encode())
        h.update(a.view(np.uint8).tobytes())
    elif _is_tensor(x):
        h.update(_tensor_digest(x))
    elif isinstance(x, Mapping) and x and all(_is_tensor(v) for v in x.values()):
        h.update(_state_digest(x))
    elif isinstance(x, Mapping):
        h.update(f"map:{len(x)};".encode())
        for k in sorted(x, key=str):
            _feed(h, k)
            _feed(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(f"seq:{len(x)};".encode())
        for item in x:
            _feed(h, item)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        h.update(f"dc:{type(x).__qualname__};".encode())
        _feed(h, {f.name: getattr(x, f.name) for f in dataclasses.fields(x)})
    else:
        raise TypeError(f"memo: no content digest for a {type(x).__name__}")


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _state_digest(state: Mapping[str, Any]) -> bytes:
    """The digest of a mapping of tensors (a state dict: up to ~1400 tensors, the first part of
    every key of its case, and the key of a model the kernels adapter keeps). Inside
    :func:`scope` it is recomputed only when the entries changed: the same names, the same tensor
    objects at the same versions give the digest kept for the mapping. The names, dtypes and
    shapes are hashed first, then the values, concatenated per dtype and device into updates of
    up to :data:`CHUNK_BYTES`: a hash and five tensor operations per tensor took three times as
    long for a state dict of small tensors."""
    import torch

    fingerprint = tuple((k, id(v), v._version) for k, v in state.items())
    entry = _state_digests.get(id(state))
    if entry is not None and entry[0] is state and entry[1] == fingerprint:
        _state_digests.move_to_end(id(state))
        return entry[2]
    names = sorted(state, key=str)
    h = hashlib.blake2b(f"state:{len(state)};".encode(), digest_size=32)
    h.update("".join(f"{k!r}:{state[k].dtype}:{tuple(state[k].shape)};" for k in names).encode())
    chunk: list[Any] = []  # consecutive tensors of one dtype and device, flattened
    size = 0
    with torch.no_grad():
        for i, k in enumerate(names):
            t = state[k]
            chunk.append(t.reshape(-1))
            size += t.numel() * t.element_size()
            last = i == len(names) - 1
            if last or size >= CHUNK_BYTES or (state[names[i + 1]].dtype, state[names[i + 1]].device) != (t.dtype, t.device):
                flat = chunk[0] if len(chunk) == 1 else torch.cat(chunk)  # [values]
                h.update(flat.cpu().contiguous().view(torch.uint8).numpy())
                chunk, size = [], 0
    out = h.digest()
    if _store is not None:  # held, so its id is not reused while kept
        _state_digests[id(state)] = (state, fingerprint, out)
        if len(_state_digests) > MAX_STATES:
            _state_digests.popitem(last=False)
    return out


def _tensor_digest(x: Any) -> bytes:
    """The digest of a tensor's dtype, shape and values, computed once per tensor object and
    version (a state dict of a few hundred tensors is a key of every call of its case; an
    in-place change bumps ``_version``, so a changed tensor is digested again)."""
    import torch

    entry = _tensor_digests.get(id(x))
    if entry is not None and entry[0]() is x and entry[1] == x._version:
        return entry[2]
    t = x.detach().to("cpu").contiguous()
    h = hashlib.blake2b(f"t:{t.dtype}:{tuple(t.shape)};".encode(), digest_size=32)
    if t.numel():
        h.update(t.view(torch.uint8).numpy())
    out = h.digest()
    if _store is not None:  # kept while a run keeps results; dropped with the tensor
        key = id(x)

        def forget(ref: Any) -> None:
            if _tensor_digests.get(key, (None,))[0] is ref:
                del _tensor_digests[key]

        _tensor_digests[key] = (weakref.ref(x, forget), x._version, out)
    return out


def digest(*parts: Any) -> bytes:
    """A digest of ``parts``' contents (equal contents, equal digests; any value, dtype or shape
    that differs, another)."""
    h = hashlib.blake2b(digest_size=32)
    for p in parts:
        _feed(h, p)
    return h.digest()


def remembered(compute: Callable[[], T], *key: Any) -> T:
    """``compute()``, or inside :func:`scope` a deep copy of the result kept for the same
    ``key`` contents (``key`` names the computation and gives all its inputs)."""
    if _store is None:
        return compute()
    k = digest(*key)
    if k in _store:
        _store.move_to_end(k)
    else:
        _store[k] = compute()
        if len(_store) > MAX_ENTRIES:
            _store.popitem(last=False)
    return copy.deepcopy(_store[k])


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Keep results for the duration of the block (nested: the outer block's store is used)."""
    global _store
    if _store is not None:
        yield
        return
    _store = OrderedDict()
    try:
        yield
    finally:
        _store = None
        _tensor_digests.clear()
        _state_digests.clear()


__all__ = ["MAX_ENTRIES", "MAX_STATES", "digest", "remembered", "scope"]
