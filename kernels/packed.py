"""Packed weight copies for the fused inference path of :class:`~plga.kernels.model.PLDRModel`.

Without autograd, ``backend="sdpa"`` passes run their projections on derived copies of the
weights instead of the ``nn.Linear`` modules: one QKV product (Wq | Wk | Wv), one gluw1 | gluw2
product (its gate, silu(gluw1) ⊙ gluw2, by :func:`packed_gated`), and the vocabulary projection.

On the CPU the copies keep the ``nn.Linear`` row layout W [N, K] (:func:`pack_rows`) wherever
the native kernel (:mod:`.native`) serves the dtype, in bfloat16 / float16, and in every dtype
with the opt-in ``compile_decode``. Up to :data:`PACKED_SMALL_M` rows (decoding) run the native
kernel where it serves the dtype for that many rows (:func:`.native.ready`; on a CPU with AVX2
only, float32 from two rows): a product of a few rows over rows of W is a contiguous dot
product per output, and torch's GEMV re-reads or converts W (bench machine, 2 threads, 32000 × 896 float32, one row:
2.1 ms against 3.6 for the column blocks below and 10.6 for ``F.linear``; eight rows 3.8
against 10.2 and 14.2). One row inside a captured step runs the GEMV fused into the graph
instead, unless W has at least :data:`NATIVE_ONE_ROW_MIN` elements, where the native kernel
streams faster than Inductor's reduction; without the native kernel, one row runs the compiled
GEMV (:func:`rows_gemv`). More rows (prefill) run the GEMM of :func:`.gemm.linear` (oneDNN).

Elsewhere (float32 without the native kernel, float64, CUDA) the copies are the transposed
weights split into one column block per intra-op thread, so that a batch-1 decoding GEMV
streams on every core (the CPU BLAS runs a GEMV on one core).

The copies are never in the state dict; they are rebuilt when a parameter changes (storage or
in-place version counter) and dropped when the model is moved or cast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import gemm, native
from .capture import CPU_OPTIONS, RECOMPILE_LIMIT

#: A packed product: column blocks [P, K, N'/P] and bias [P, 1, N'/P] (:func:`pack_linear`), or
#: rows [N', K] and bias [N'] (:func:`pack_rows`, low precision on the CPU); the true width N.
Packed = tuple[Tensor, Tensor, int]
_LOW_PRECISION = (torch.bfloat16, torch.float16)
#: Row counts up to this use one batched product over the column blocks (decoding).
PACKED_SMALL_M = 16
#: Inside a captured step, a one-row product over a W of at least this many elements runs the
#: native kernel (where it serves the dtype for one row) instead of the fused GEMV; smaller
#: products stay fused, where the opaque call costs about what it saves. Variants alternating in
#: one process, median ms per step:
#: - bfloat16 (bench machine, 2026-12-02): paper-110m kvg (products 0.8–28.7 M elements) fused 4.55,
#:   native everywhere 3.62, this rule 3.95; collapsed 5.04 / 4.36 / 4.13; small kvg (0.07–0.35 M,
#:   vocabulary 8.2 M) 0.583 / 0.609 / 0.588, kv 0.732 / 0.767 / 0.728.
#: - float32 (an Intel Xeon with AVX-512, 2026-12-06; 8 pairs of 63 steps, b1), fused against
#:   this rule: paper-110m collapsed 16.9 / 14.7 (1.15× per pair), kvg 18.5 / 16.5 (1.12×), kv
#:   16.6 / 15.6 (1.09×); small kv 1.52 / 1.46 (1.05×), collapsed 1.36 / 1.27 (1.05×). This rule
#:   against native everywhere: paper-110m kvg 1.02×, small kv 1.00×.
NATIVE_ONE_ROW_MIN = 1 << 20


def packed_parts(device: torch.device, threads: int | None = None) -> int:
    """Column blocks of a packed product on ``device``: one per intra-op thread (``threads``, or
    the current setting; at most 8) on the CPU, where the BLAS runs a GEMV on one core; one
    elsewhere."""
    return max(1, min(threads or torch.get_num_threads(), 8)) if device.type == "cpu" else 1


@contextlib.contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block (None or the current value: no
    change); the previous setting is restored on exit."""
    old = torch.get_num_threads()
    if n is None or n == old:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def pack_linear(wt: Tensor, b: Tensor, parts: int, align: int = 16) -> Packed:
    """Wᵀ [K, N] and b [N] as ``parts`` contiguous column blocks: ([P, K, N'/P], [P, 1, N'/P], N),
    N' = N rounded up to a multiple of ``align · parts`` with zero columns.

    One batched product over P blocks runs the blocks on P threads (bench machine,
    32000 × 256: 30 → 54 GB/s at one row; 8 rows: 8 → 14 GB/s).
    """
    k, n = wt.shape
    width = -(-n // (align * parts)) * align * parts
    w = wt.new_zeros(k, width)
    w[:, :n] = wt
    bb = b.new_zeros(width)
    bb[:n] = b
    h = width // parts
    return w.view(k, parts, h).transpose(0, 1).contiguous(), bb.view(parts, 1, h).clone(), n


def uses_rows(device: torch.device, dtype: torch.dtype, compiled: bool = False) -> bool:
    """Whether packed copies on ``device`` in ``dtype`` use the row layout (:func:`pack_rows`):
    on the CPU in float32 where the native kernel serves it, in bfloat16 / float16, and in every
    dtype with ``compiled`` (one-row products then run the compiled GEMV: float32 paper-110m
    vocabulary 76 GB/s against 49 GB/s for the column blocks; few-row products the native
    kernel). Loads the native kernel when it does (:func:`.native.prepare`)."""
    if device.type != "cpu":
        return False
    if compiled or dtype in _LOW_PRECISION:
        native.prepare(dtype)
        return True
    return dtype == torch.float32 and native.prepare(dtype)


def pack_rows(w: Tensor, b: Tensor, align: int = 16) -> Packed:
    """W [N, K] and b [N] with N rounded up to a multiple of ``align`` by zero rows:
    ([N', K] contiguous, [N'], N)."""
    n, k = w.shape
    width = -(-n // align) * align
    rows = w.new_zeros(width, k)
    rows[:n] = w
    bb = b.new_zeros(width)
    bb[:n] = b
    return rows, bb, n


def _gemv(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """b + x Wᵀ for a few rows x [M, K] and rows W [N, K], accumulated in float32 or wider and
    rounded once: one pass over W, each row of W used for all M rows of x while it is in cache."""
    acc = torch.promote_types(x.dtype, torch.float32)
    out = (w.to(acc)[:, None, :] * x.to(acc)[None]).sum(-1) + b.to(acc)[:, None]  # [N, M]
    return out.to(x.dtype).t()  # [M, N]


_compiled_gemv: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None
_gemv_shapes: set[tuple[Any, ...]] = set()


def _guarded(t: Tensor) -> tuple[Any, ...]:
    """What Dynamo's guards on a tensor argument check (a change means a new compiled entry):
    shape, strides, dtype, device, autograd, and whether it is an inference tensor (the packed
    copies are, when first built inside ``inference_mode``)."""
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad, t.is_inference())


def rows_gemv(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """:func:`_gemv` under ``torch.compile`` (built on first use; one compilation per weight
    shape and tensor variant (:func:`_guarded`), cached on disk by Inductor across processes):
    the load–convert–multiply–add chain fuses into one vectorized reduction over contiguous
    rows, on every intra-op thread."""
    global _compiled_gemv
    if _compiled_gemv is None:
        _compiled_gemv = torch.compile(_gemv, dynamic=False, options=CPU_OPTIONS)
    key = tuple(_guarded(t) for t in (x, w, b))
    if key in _gemv_shapes:
        return _compiled_gemv(x, w, b)
    # a new variant compiles: past Dynamo's default limit (8 entries) it would run eagerly, with a warning
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        out = _compiled_gemv(x, w, b)
    _gemv_shapes.add(key)
    return out


def packed_linear(x: Tensor, w: Tensor, b: Tensor, n: int, *, compiled: bool = False) -> Tensor:
    """b + x Wᵀ for x [M, K] and a :func:`pack_linear` or :func:`pack_rows` layout → [M, N] (no autograd).

    Column blocks, up to :data:`PACKED_SMALL_M` rows: one ``baddbmm`` over the blocks (a free
    view when M = 1); more rows: one GEMM per block, each written in place into its columns of
    the output. Rows, up to :data:`PACKED_SMALL_M` of them: the native kernel (:mod:`.native`)
    where it serves the dtype for that many rows, but for one row inside a captured step over a W
    of fewer than :data:`NATIVE_ONE_ROW_MIN` elements, where the GEMV fused into the graph is as
    fast; else the fused GEMV in a captured step, or for one row with ``compiled`` the compiled
    :func:`rows_gemv`. More rows: :func:`.gemm.linear`.
    """
    if w.ndim == 2:
        m = x.shape[0]
        capturing = torch.compiler.is_compiling()
        fused_one_row = capturing and m == 1 and w.numel() < NATIVE_ONE_ROW_MIN
        if m <= PACKED_SMALL_M and native.ready(w.dtype, m) and not fused_one_row:
            out = torch.ops.plga.rows_linear(x, w, b)  # an opaque call inside a captured step
        elif capturing and m <= PACKED_SMALL_M:  # fused into the captured step
            out = _gemv(x, w, b)
        elif compiled and m == 1:
            out = rows_gemv(x.reshape(-1)[None], w, b)  # strides (K, 1): one compilation per weight shape
        else:
            out = gemm.linear(x, w, b)
        return out if out.shape[1] == n else out[:, :n]
    parts, k, h = w.shape
    m = x.shape[0]
    if parts == 1:
        out = torch.addmm(b[0, 0], x, w[0])
    elif m <= PACKED_SMALL_M:
        out = torch.baddbmm(b, x.expand(parts, m, k), w)  # [P, M, N'/P]
        out = out.view(m, parts * h) if m == 1 else out.transpose(0, 1).reshape(m, parts * h)
    else:
        out = x.new_empty(m, parts * h)
        for p in range(parts):
            torch.addmm(b[p, 0], x, w[p], out=out[:, p * h : (p + 1) * h])
    return out if out.shape[1] == n else out[:, :n]


def packed_gated(x: Tensor, w: Tensor, b: Tensor, n: int, *, compiled: bool = False) -> Tensor:
    """silu(first half) ⊙ second half of the gluw1 | gluw2 product (:meth:`PackedWeights.layer`:
    two gates of F = n / 2 columns each) for x [M, K] → [M, F] (no autograd). More than
    :data:`PACKED_SMALL_M` rows in the row layout (prefill): the two halves of W on
    :func:`.gemm.gated` (the silu and the product fused into the GEMMs where oneDNN serves them);
    else :func:`packed_linear`, then silu and the product in place."""
    if w.ndim == 2 and x.shape[0] > PACKED_SMALL_M:
        f = n // 2
        return gemm.gated(x, w[:f], b[:f], w[f:n], b[f:n])
    a1, a2 = packed_linear(x, w, b, n, compiled=compiled).chunk(2, dim=-1)  # gluw1, gluw2 [M, F]
    return F.silu(a1).mul_(a2)


def _hooks_registered(linears: Sequence[nn.Module]) -> bool:
    """Whether a forward hook would fire on one of ``linears``. Global hooks are read from
    ``torch.nn.modules.module._global_forward_hooks``: torch offers a public way to register
    them (``register_module_forward_hook``) but none to list them."""
    g = nn.modules.module
    if g._global_forward_hooks or g._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in linears)


class PackedWeights:
    """The packed copies of one model, keyed by layer (and ``"final"``), with their stamps."""

    def __init__(self) -> None:
        self._copies: dict[Any, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def clear(self) -> None:
        self._copies = {}

    def __bool__(self) -> bool:
        return bool(self._copies)

    def all_tensors(self) -> list[Tensor]:
        """Every packed tensor held (for tests and memory accounting)."""
        out = []
        for _, packs in self._copies.values():
            for p in packs:
                out += [t for t in p if isinstance(t, Tensor)]
        return out

    @staticmethod
    def usable(backend: str, linears: Sequence[nn.Module]) -> bool:
        """Whether a pass runs on the packed copies: only ``backend="sdpa"`` (the eager backend
        is the published algorithm, module by module), only without autograd (the copies carry
        none), and only when no forward hook is registered on the projections (a hook — an audit
        probe, a user's activation capture — keeps the module path, where it fires)."""
        return backend == "sdpa" and not torch.is_grad_enabled() and not _hooks_registered(linears)

    def get(self, key: Any, params: Sequence[Tensor], build: Callable[[], tuple[Any, ...]], tag: Any = None) -> tuple[Any, ...] | None:
        """The copies for ``key``, rebuilt when any of ``params`` changed (storage or in-place
        version) or ``tag`` did; None when versions are not tracked (inference-mode parameters)."""
        try:
            stamp = (tag, *((p.data_ptr(), p._version, p.dtype) for p in params))
        except RuntimeError:
            return None
        hit = self._copies.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        with torch.no_grad():
            out = build()
        self._copies[key] = (stamp, out)
        return out

    def layer(self, i: int, mha: nn.Module, ffn: nn.Module, device: torch.device, compiled: bool = False) -> tuple[Packed, ...] | None:
        """Packed products of layer ``i``: QKV (Wq | Wk | Wv), dense, gluw1 | gluw2 and gluw3.

        Each gate is zero-padded to F = dff rounded up to 8·P columns, so the two halves of the
        packed output are the two gates, and gluw3 gets zero rows past dff: silu(0)·0 = 0 meets
        zero rows, the sum is the same, and the GEMMs run on aligned widths (paper-110m's dff
        2389: 127 → 180 GFLOP/s)."""
        lins = (mha.wq, mha.wk, mha.wv, mha.dense, ffn.gluw1, ffn.gluw2, ffn.gluw3)
        params = [t for m in lins for t in (m.weight, m.bias)]
        rows = uses_rows(device, mha.wq.weight.dtype, compiled)
        parts = 1 if rows else packed_parts(device)

        def build() -> tuple[Packed, ...]:
            dff, dm = ffn.gluw1.weight.shape
            fp = -(-dff // (8 * parts)) * 8 * parts
            w12t = ffn.gluw1.weight.new_zeros(dm, 2 * fp)  # [D, 2F]
            b12 = ffn.gluw1.bias.new_zeros(2 * fp)
            w12t[:, :dff], w12t[:, fp : fp + dff] = ffn.gluw1.weight.t(), ffn.gluw2.weight.t()
            b12[:dff], b12[fp : fp + dff] = ffn.gluw1.bias, ffn.gluw2.bias
            w3t = ffn.gluw3.weight.new_zeros(fp, dm)  # [F, D]
            w3t[:dff] = ffn.gluw3.weight.t()
            if rows:
                return (
                    pack_rows(torch.cat([mha.wq.weight, mha.wk.weight, mha.wv.weight]),
                              torch.cat([mha.wq.bias, mha.wk.bias, mha.wv.bias])),
                    pack_rows(mha.dense.weight, mha.dense.bias),
                    pack_rows(w12t.t(), b12),
                    pack_rows(w3t.t(), ffn.gluw3.bias),
                )
            return (
                pack_linear(torch.cat([mha.wq.weight, mha.wk.weight, mha.wv.weight]).t(),
                            torch.cat([mha.wq.bias, mha.wk.bias, mha.wv.bias]), parts),
                pack_linear(mha.dense.weight.t(), mha.dense.bias, parts),
                pack_linear(w12t, b12, parts),
                pack_linear(w3t, ffn.gluw3.bias, parts),
            )

        return self.get(i, params, build, (parts, rows))  # type: ignore[return-value]

    def final(self, final_layer: nn.Linear, device: torch.device, compiled: bool = False, threads: int | None = None) -> Packed | None:
        """The vocabulary projection, packed (a GEMV when decoding); column blocks for ``threads``
        intra-op threads (None: the current setting)."""
        fl = final_layer
        rows = uses_rows(device, fl.weight.dtype, compiled)
        parts = 1 if rows else packed_parts(device, threads)

        def build() -> tuple[Packed]:
            return (pack_rows(fl.weight, fl.bias) if rows else pack_linear(fl.weight.t(), fl.bias, parts),)

        out = self.get("final", (fl.weight, fl.bias), build, (parts, rows))
        return None if out is None else out[0]


__all__ = [
    "PACKED_SMALL_M", "Packed", "PackedWeights", "intra_op_threads", "pack_linear", "pack_rows", "packed_gated", "packed_linear", "packed_parts",
    "rows_gemv",
    "uses_rows",
]
