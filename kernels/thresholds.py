"""The size thresholds at which :mod:`plga.kernels` changes its computation path, listed in one
place, and :func:`smallest`, which lowers all of them for a block of code.

The kernels choose a path by the size of the work: a product of enough multiply-adds runs on
oneDNN (:data:`.gemm.MIN_MACS`), a prompt's feed-forward gate runs inside its GEMMs
(:data:`.packed.PACKED_SMALL_M`), a long bfloat16 attention runs by blocks of queries
(:data:`.functional.BLOCKED_MIN_QUERIES`), and so on. Each threshold stays defined beside the
code it steers, with the measurements behind its value; :data:`THRESHOLDS` only names them.

The conformance suite draws small models (d_model up to 80, a few dozen tokens), so at the
shipped values it never reaches the paths a 110M-parameter model runs. Under :func:`smallest`
every threshold takes its lowest value and the suite's inputs run those paths: the suite's
``kernels-at-scale`` implementation (:func:`plga.conformance.adapters.kernels_at_scale`)
calls every operation under it. Lowering a threshold changes which path runs, never what a
path computes, so a correct kernel passes at any setting.

Not lowered: the native library's own choice between its blocks (C++ constants in
``csrc/rows_linear.cpp``: the broadcast blocks for a float32 W of 16 MiB or more and more than
4 rows). No product the suite draws reaches it; ``tests/kernels/test_native.py`` checks those
blocks directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A module-level size threshold (``module.name``), its lowest value and what that value
    sends small inputs to."""

    module: str
    name: str
    lowest: int
    path: str


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("plga.kernels.gemm", "MIN_MACS", 0,
              "every float32 and bfloat16 product outside compiled code and autograd on oneDNN; "
              "the SwiGLU gates with their silu and product as oneDNN post-operations"),
    Threshold("plga.kernels.gemm", "WIDEN_MIN_ROWS", 0,
              "low-precision products of any number of rows widened to float32 on a CPU without their arithmetic"),
    Threshold("plga.kernels.packed", "PACKED_SMALL_M", 2,
              "products of 3 rows or more (prompts, batches of 3) on the prefill GEMM and the feed-forward "
              "gate on gemm.gated; 1 and 2 rows stay on the decoding kernels"),
    Threshold("plga.kernels.packed", "NATIVE_ONE_ROW_MIN", 0,
              "every one-row product inside captured steps on the native kernel (where it serves the dtype)"),
    Threshold("plga.kernels.finite", "SPLIT_MIN_ROW", 0, "row extremes of the finiteness guard by amin and amax"),
    Threshold("plga.kernels.functional", "BLOCKED_MIN_QUERIES", 1,
              "bfloat16 attention by blocks of queries (CPU without AMX) from one query"),
    Threshold("plga.kernels.functional", "BLOCKED_MIN_SCORES", 0, "the same, at any number of scores"),
    Threshold("plga.kernels.functional", "BLOCKED_QUERY_ROWS", 3,
              "blocks of 3 queries: several blocks per head and a shorter last one"),
    Threshold("plga.kernels.functional", "BLOCKED_WORKSPACE", 1, "one head per block"),
)


@contextlib.contextmanager
def smallest() -> Iterator[None]:
    """Every threshold of :data:`THRESHOLDS` at its lowest value inside the block; the values
    before it are restored on exit (also after an error). Process-wide: for one thread's use,
    as the conformance suite runs its checks."""
    saved = []
    try:
        for t in THRESHOLDS:
            module = importlib.import_module(t.module)
            saved.append((module, t.name, getattr(module, t.name)))
            setattr(module, t.name, t.lowest)
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


__all__ = ["THRESHOLDS", "Threshold", "smallest"]
