"""b + x Wᵀ on the fastest GEMM torch offers on the CPU: oneDNN's, where torch would call MKL.

``torch.nn.functional.linear`` sends a float32 product on the CPU to MKL's SGEMM, and MKL runs
its AVX2 code on AMD processors: on the bench machine (AMD EPYC with AVX-512) a 2048² float32
product ran at 158 GFLOP/s through ``torch.mm`` and at 399 GFLOP/s through oneDNN's AVX-512
kernel (``brg_matmul:avx512_core``, float32 throughout). torch reaches oneDNN's inner product
through ``torch.ops.mkldnn._linear_pointwise`` — the op Inductor emits for linear layers on the
CPU — which takes plain ``nn.Linear`` weights [N, K] and any leading batch axes.

:func:`linear` calls it for float32 and bfloat16 products on the CPU of at least
:data:`MIN_MACS` multiply-adds on x86-64 when torch has oneDNN (and ``torch.backends.mkldnn.enabled``),
outside autograd (the op has no derivative) and outside compiled code (Inductor chooses there). bfloat16 products already ran on oneDNN through
``F.linear``, with the bias added by a second pass over the output; the fused bias gives the
same bits 7–13 % faster. float32 results differ from MKL's in rounding only (both accumulate in
float32; the order of the sums differs). ``PLGA_ONEDNN=0`` in the environment keeps
``F.linear`` (A/B runs).

:func:`gated` is the gate of a SwiGLU unit, silu(b₁ + x W₁ᵀ) ⊙ (b₂ + x W₂ᵀ), with the activation
and the product as oneDNN post-operations of the two GEMMs (``"swish"``, then the ``"mul"``
binary post-op): no pass of its own over the hidden activations, whose silu took 24 ms of a
paper-110m layer at b8 s1024 (8192 × 2392 floats; the product in place 4 ms more). Bench
machine, float32, 2 threads: the feed-forward's gate 405 → 381 ms a layer at that shape; the
metric learner's [8, 14, 64, 64] → 170 2.42 → 2.38 ms (its chain runs in float32 in every
model; the same product in bfloat16 took 1.37 → 1.20 ms). The results are
float32 products rounded once, as before; oneDNN's silu differs from torch's in the last bits
(relative 1e-7 in float32).

bfloat16 and float16 products need the CPU's own low-precision arithmetic (bfloat16: AVX-512 or
AMX; float16: AVX512-FP16 or AMX-FP16; :func:`cpu_has_low_precision_gemm`, oneDNN's own check).
Without it oneDNN refuses the product (no primitive for it), and torch's fallback GEMM converts
every element in scalar code: on an AMD EPYC with AVX2 only, 2 threads, a 1024 × 768 → 768
bfloat16 product ran in 78 ms against 18 ms for the same product in float32 on widened
operands, a batched 128 × 1024 → 64 product 14× slower. There, products of more than
:data:`WIDEN_MIN_ROWS` rows run widened: the operands converted to float32, one float32 product
with the bias, rounded once — ``F.linear``'s contract (float32 products and sums, one rounding),
so only the order of the sums differs. Fewer rows (decoding) keep torch's low-precision GEMV,
which is vectorized and reads half the bytes (one row of 3072 × 768: 0.36 ms against 4.2 ms
widened).
"""

from __future__ import annotations

import functools
import os
import platform

import torch
import torch.nn.functional as F
from torch import Tensor

#: Environment switch: ``PLGA_ONEDNN=0`` keeps every product on ``F.linear``.
ENV_SWITCH = "PLGA_ONEDNN"
#: Products of fewer multiply-adds (M·N·K) stay on ``F.linear``: a oneDNN call costs ~15–45 µs
#: even with its primitive cached (~0.5 ms for a new shape). Bench machine, float32, 2 threads:
#: 64 × 64 → 170 (0.7 M) 41 against 13 µs, 128 × 64 → 170 (1.4 M) 44 against 42, 256 × 64 → 170
#: (2.8 M) 49 against 80, 64 × 128 → 384 (3.1 M) 52 against 82.
MIN_MACS = 1 << 21
_DTYPES = (torch.float32, torch.bfloat16)
_LOW_PRECISION = (torch.bfloat16, torch.float16)
#: On a CPU without low-precision arithmetic, low-precision products of more rows than this run
#: widened to float32. Same machine, 3072 × 768 weight: 16 rows 4.9 ms either way, 24 rows 9.3
#: against 3.9 ms widened, 4 rows 1.5 against 5.4 ms.
WIDEN_MIN_ROWS = 16


def _onednn_available() -> bool:
    """torch has oneDNN's linear op, on x86-64 (elsewhere oneDNN may be a slower path than the
    platform BLAS torch uses; not measured), and the switch is not off."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    return getattr(torch.ops.mkldnn, "_linear_pointwise", None) is not None and os.environ.get(ENV_SWITCH, "1") != "0"


_AVAILABLE = _onednn_available()


@functools.cache
def cpu_has_low_precision_gemm(dtype: torch.dtype) -> bool:
    """Whether this CPU computes ``dtype`` products with its own instructions, as oneDNN judges
    it (``torch.ops.mkldnn._is_mkldnn_bf16_supported`` / ``_fp16_``): always for float32 and
    float64; asked once per dtype, at its first product, never at import. Where torch offers no
    such check, the products run as torch runs them (True)."""
    if dtype not in _LOW_PRECISION:
        return True
    name = "_is_mkldnn_bf16_supported" if dtype == torch.bfloat16 else "_is_mkldnn_fp16_supported"
    probe = getattr(torch.ops.mkldnn, name, None)
    return True if probe is None else bool(probe())


def serves(x: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether :func:`linear` runs oneDNN for these operands (see the module docstring)."""
    return (
        _AVAILABLE
        and torch.backends.mkldnn.enabled
        and x.device.type == "cpu"
        and x.dtype in _DTYPES
        and w.dtype == x.dtype
        and w.device.type == "cpu"
        and (b is None or (b.dtype == x.dtype and b.device.type == "cpu"))
        and x.numel() * w.shape[0] >= MIN_MACS
        and not torch.compiler.is_compiling()
        and not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, w, b)))
        and cpu_has_low_precision_gemm(x.dtype)
    )


def widens(x: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether :func:`linear` runs a low-precision product in float32 on widened operands: on a
    CPU without the dtype's arithmetic, more than :data:`WIDEN_MIN_ROWS` rows, outside compiled
    code (see the module docstring)."""
    return (
        x.device.type == "cpu"
        and x.dtype in _LOW_PRECISION
        and w.dtype == x.dtype
        and (b is None or b.dtype == x.dtype)
        and x.shape[-1] > 0
        and x.numel() // x.shape[-1] > WIDEN_MIN_ROWS
        and not torch.compiler.is_compiling()
        and not cpu_has_low_precision_gemm(x.dtype)
    )


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """b + x Wᵀ for x [..., K], W [N, K], b [N] or None → [..., N], as ``F.linear`` computes it."""
    if serves(x, w, b):
        return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    if widens(x, w, b):
        return F.linear(x.float(), w.float(), None if b is None else b.float()).to(x.dtype)
    return F.linear(x, w, b)


def gated(x: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, b2: Tensor | None) -> Tensor:
    """silu(b₁ + x W₁ᵀ) ⊙ (b₂ + x W₂ᵀ) for x [..., K], W₁ and W₂ [N, K] → [..., N]: the gate of a
    SwiGLU block, glu(x) = gate · W₃ᵀ + b₃ (docs/spec.md §1.3; Lean ``swiglu``; upstream
    ``GLUVariant``). Where :func:`linear` runs oneDNN for both products, the silu and the
    product are their post-operations; else two :func:`linear` products, silu and the product."""
    if serves(x, w1, b1) and serves(x, w2, b2):
        gate = torch.ops.mkldnn._linear_pointwise(x, w1, b1, "swish", [], "")  # silu(b₁ + x W₁ᵀ) [..., N]
        return torch.ops.mkldnn._linear_pointwise.binary(x, gate, w2, b2, "mul")  # (b₂ + x W₂ᵀ) ⊙ gate
    a, g = F.silu(linear(x, w1, b1)), linear(x, w2, b2)
    return a * g if a.requires_grad or g.requires_grad else a.mul_(g)


__all__ = ["ENV_SWITCH", "MIN_MACS", "WIDEN_MIN_ROWS", "cpu_has_low_precision_gemm", "gated", "linear", "serves", "widens"]
