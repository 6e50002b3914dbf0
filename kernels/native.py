"""The native CPU kernels of the decoding products, ``torch.ops.plga.rows_linear``, of the greedy
choice, ``torch.ops.plga.rows_argmax`` (csrc/rows_linear.cpp), and of the power stage's
elementwise power, ``torch.ops.plga.positive_pow`` (csrc/positive_pow.cpp): one library.

``rows_linear(x, w, b)`` = b + x Wᵀ for x [M, K] and a row-layout weight W [N, K]
(:func:`~plga.kernels.packed.pack_rows`), float32 or bfloat16, accumulated in float32 and rounded
once. :func:`~plga.kernels.packed.packed_linear` runs it for products of up to
:data:`~plga.kernels.packed.PACKED_SMALL_M` rows (decoding steps): plain, and inside a captured
step for two rows or more, and for one row over a large low-precision weight (an opaque call
there: the schema and its shape function are defined here; other one-row products keep the GEMV
fused into the graph).

Why native: at batch 1 and 8 a decoding step streams every weight once, and the generic paths
are instruction-bound well below the memory bandwidth — torch's bfloat16 GEMV and Inductor's
generated reduction convert every element before multiplying, and at 8 rows every row of x
re-reads W. The kernel loads each block of 4 rows of W once per 4 rows of x and multiplies
bfloat16 pairs with AVX512-BF16 (``VDPBF16PS``); on a CPU without AVX-512 it runs the same
blocks with AVX2 and FMA, bfloat16 widened exactly to float32; ``plga bench`` measures the result.

It is built on first use with ``torch.utils.cpp_extension`` (about 10 s, once per machine and
source version; the library is cached in torch's extension folder, ``TORCH_EXTENSIONS_DIR``) and
loaded in milliseconds afterwards. It is used where it was measured faster (:func:`served_dtypes`):
float32 on a CPU with AVX512F, bfloat16 with AVX512-BF16 or with AVX2 only; products of two rows
or more also in float32 on a CPU with AVX2 only. On an AMD EPYC with AVX2 only (2 threads) the
AVX2 blocks against torch's bfloat16 ``F.linear``: one row of 3072 × 768 0.26 against 0.33 ms,
of 32000 × 768 3.3 against 4.9 ms, eight rows 0.76 against 2.9 ms. In float32 there the
column-block GEMV (:func:`~plga.kernels.packed.pack_linear`) streamed the 32000 × 768
vocabulary faster at one row (5.1–5.3 against 5.7–7.4 ms), and inside a captured step the GEMV
fused into the graph streamed the 32000 × 896 one faster (paper-110m kvg steps 13.2 against
14.6 ms), so one-row float32 products keep those paths; at eight rows the blocks win everywhere
(32000 × 256: 2.7 ms against 4.0 for Inductor's product — which it lowers to an extern batched
GEMM — 5.0 for the column blocks and 6.3 for ``F.linear``; captured float32 kvg steps at batch
8: ``small`` 7.2 → 4.6–5.0 ms, paper-110m 40.7 → 27.5 ms). Past 4 rows the AVX2 blocks take x
transposed and broadcast each element of W to one lane per row of x (no spills, no lane sums,
one pass over W per 16 rows): 32000 × 256 at 8 rows 2.6 → 1.4 ms, at 16 rows 4.1 → 2.2 ms;
captured kvg steps at batch 8: ``small`` 4.6–5.0 → 2.7–3.4 ms, paper-110m 27.5 → 17.2 ms.
With AVX-512 the dot-product blocks stay faster where W is cached; where a float32 W of 16 MiB
or more streams from memory the broadcast blocks take over while their working set fits L1
(K < 512) and, at any K, past 6 rows (on an AMD EPYC with AVX-512, 32000 × 256 at 8 rows:
1.81–1.84 → 1.11–1.17 ms; 32000 × 896 at 16 rows: 7.7–8.2 → 6.1–6.3 ms; captured float32
``small`` steps at batch 8, interleaved in one process: kvg 2.9–3.2 → 2.3–2.5 ms, kv 3.5–3.9 →
3.1–3.3 ms; on 16 lanes, which read a streamed W at the memory's rate, 7 and 8 rows moved to
them: 32182 × 896 at 8 rows 2.70 → 1.68 ms, on an AMD EPYC Zen 5).
At one row the AVX2 blocks also pass over 4 rows of W at a time: one row of W per pass left a
single FMA chain per output, bound by the FMA's latency (bfloat16 2688 × 896 0.33–0.39 → 0.11–0.13
ms); bfloat16 kvg steps at batch 1, plain paper-110m 16.5–18.1 → 11.3 ms, captured ``small``
1.86–1.97 → 1.05–1.30 ms. The AVX-512 blocks keep one row of W per pass at one row, read in
order: 4 rows of W made a bfloat16 product alone (its W warm in L3) faster, but captured
bfloat16 steps, whose weights stream from memory, slower (paper-110m kvg 4.4 → 6.1 ms).
``rows_argmax(x)`` is ``torch.argmax(x, -1)`` for float32 or bfloat16 logits [B, V] — the same
index, NaN included — read twice from cache with AVX2 (the maximum, then its first index):
torch's reads about one element a nanosecond, eagerly and inside a captured step alike.
:func:`greedy` runs it wherever the library is loaded.
``positive_pow(x, p)`` is ``torch.pow(x, p)`` for float32 x and a p whose shape ends x's (the
power stage's A_LM^{⊙P}, recomputed at every ``kv`` step), within 0.51 ulp of the exact power
(torch's Sleef powf: 1 ulp): a positive normal x and a finite p in double precision with a
division-based logarithm and a short exponential series, every other element on ``std::pow``.
On the AMD EPYC (AVX2, 2.45 GHz) torch's took 16–22 cycles an element and this one 6–8 (the
power stage of ``small`` at batch 8, 131 072 elements, 2 threads: 0.51–0.60 against 0.20–0.22
ms). :func:`power` runs it wherever the library is loaded.
Without them, with ``PLGA_NATIVE=0``, or when the build fails (no C++ compiler: one note on
stderr), the products run on the portable paths and the greedy choice on ``torch.argmax``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import threading
from pathlib import Path

import torch

#: Environment switch: ``PLGA_NATIVE=0`` keeps every product on the portable paths (A/B runs).
ENV_SWITCH = "PLGA_NATIVE"
_SOURCES = tuple(Path(__file__).with_name("csrc") / name for name in ("rows_linear.cpp", "positive_pow.cpp"))
#: The library's name carries torch's version: a library built against another torch is never loaded.
_NAME = "plga_rows_linear_torch" + "".join(c if c.isalnum() else "_" for c in torch.__version__)


def served_dtypes(flags: set[str], rows: int = 1) -> frozenset[torch.dtype]:
    """The dtypes the kernel serves for products of ``rows`` rows on a CPU with these flags
    (``/proc/cpuinfo``): where it was measured faster than the portable paths (see the module
    docstring). It runs on any CPU with AVX2 and FMA, choosing its widest blocks itself.
    float32: AVX512F, and for two rows or more also AVX2 and FMA without AVX-512. bfloat16:
    AVX512-BF16, or AVX2 and FMA without AVX-512 at all (an AVX-512 CPU without its BF16
    extension was not measured; oneDNN's bfloat16 GEMV keeps serving it)."""
    out = set()
    avx2_only = {"avx2", "fma"} <= flags and "avx512f" not in flags
    if "avx512f" in flags or (rows > 1 and avx2_only):
        out.add(torch.float32)
    if {"avx512f", "avx512bw", "avx512_bf16"} <= flags or avx2_only:
        out.add(torch.bfloat16)
    return frozenset(out)


def _rows_linear_shape(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[0])  # [M, N]


def _rows_argmax_shape(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], dtype=torch.long)  # [M]


def _positive_pow_shape(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)  # x's shape


def _define() -> None:
    """The ops' schemas and shape functions, once per process (a reloaded module finds them)."""
    try:
        torch.ops.plga.rows_linear  # noqa: B018 - raises while undefined
        return
    except (AttributeError, RuntimeError):
        pass
    torch.library.define("plga::rows_linear", "(Tensor x, Tensor w, Tensor b) -> Tensor")
    torch.library.register_fake("plga::rows_linear")(_rows_linear_shape)
    torch.library.define("plga::rows_argmax", "(Tensor x) -> Tensor")
    torch.library.register_fake("plga::rows_argmax")(_rows_argmax_shape)
    torch.library.define("plga::positive_pow", "(Tensor x, Tensor p) -> Tensor")
    torch.library.register_fake("plga::positive_pow")(_positive_pow_shape)


_define()

_lock = threading.Lock()
_state: dict[str, object] = {"tried": False, "serves": (frozenset(), frozenset())}
#: The dtypes the loaded kernel serves on this CPU for one row and for two rows or more (read by
#: ``packed_linear``; empty until :func:`prepare`).
READY: frozenset[torch.dtype] = frozenset()
READY_ROWS: frozenset[torch.dtype] = frozenset()
#: The logits dtypes ``plga::rows_argmax`` reads (:func:`greedy`).
_ARGMAX_DTYPES = (torch.float32, torch.bfloat16)


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cached_library() -> bool:
    """Whether a built library is already in torch's extension folder (no build note then)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    return bool(glob.glob(os.path.join(root, "**", f"{_NAME}*", f"{_NAME}*.so"), recursive=True))


@contextlib.contextmanager
def _ninja_on_path():
    """The ``ninja`` of the ``ninja`` wheel on PATH for the build (the venv may not be activated)."""
    old = os.environ.get("PATH", "")
    try:
        import ninja  # type: ignore[import-untyped]

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + old
    except ImportError:
        pass
    try:
        yield
    finally:
        os.environ["PATH"] = old


def _build() -> None:
    from torch.utils.cpp_extension import load

    from ..progress import enabled

    if enabled() and not _cached_library():
        print("plga: building the native CPU kernels (decoding products, the power stage; once per machine, about 10 s)",
              file=sys.stderr, flush=True)
    with _ninja_on_path():
        load(name=_NAME, sources=[str(path) for path in _SOURCES], extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"],
             is_python_module=False, verbose=False)


def prepare(dtype: torch.dtype, rows: int = 1) -> bool:
    """Load (building once if needed) the kernel and say whether it serves ``dtype`` products
    of ``rows`` rows here. Call outside compiled code (building the packed weights does): it
    sets :data:`READY` and :data:`READY_ROWS`."""
    global READY, READY_ROWS
    if os.environ.get(ENV_SWITCH, "1") == "0":
        READY = READY_ROWS = frozenset()
        return False
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                _state["serves"] = _load()
                _state["tried"] = True
    READY, READY_ROWS = _state["serves"]  # type: ignore[misc]
    return ready(dtype, rows)


def _load() -> tuple[frozenset[torch.dtype], frozenset[torch.dtype]]:
    """The dtypes served on this CPU for one row and for more, once the library is loaded;
    empty when it cannot be."""
    flags = _cpu_flags()
    served = (served_dtypes(flags), served_dtypes(flags, rows=2))
    if not served[1]:
        return frozenset(), frozenset()
    try:
        _build()
    except Exception as exc:  # no compiler, no ninja, a read-only cache: the portable paths serve
        reason = " ".join(str(exc).split())[:200]
        print(f"plga: note: the native CPU kernel is unavailable ({type(exc).__name__}: {reason}); "
              "decoding products use the portable paths", file=sys.stderr, flush=True)
        return frozenset(), frozenset()
    return served


def loaded() -> bool:
    """Whether the kernel is loaded on this CPU (loading it if needed): it then computes float32
    and bfloat16 products whichever dtypes :func:`served_dtypes` sends it (the bench's bandwidth
    probe reads float32 weights through it on every such CPU)."""
    prepare(torch.float32)
    return bool(READY_ROWS)


def ready(dtype: torch.dtype, rows: int = 1) -> bool:
    """Whether the last :func:`prepare` left the kernel serving ``dtype`` products of ``rows``
    rows (no side effect: safe in compiled code, where Dynamo guards on :data:`READY` and
    :data:`READY_ROWS`)."""
    return dtype in (READY if rows <= 1 else READY_ROWS)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``torch.argmax(logits, -1)`` for the logits of a decoding step [B, V] (the same answer:
    the first maximal index, the first NaN of a row that has one), on the kernel's
    ``plga::rows_argmax`` where the library is loaded: torch's argmax reads about one element a
    nanosecond (eager, and Inductor's reduction inside a captured step: 0.27 ms of a `small`
    step at batch 8). No side effect: safe in compiled code (Dynamo guards on :data:`READY_ROWS`)."""
    if READY_ROWS and logits.ndim == 2 and logits.device.type == "cpu" and logits.dtype in _ARGMAX_DTYPES:
        return torch.ops.plga.rows_argmax(logits)
    return torch.argmax(logits, dim=-1)


def power(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``torch.pow(x, p)`` for the power stage (x [..., H, d, d], p [H, d, d]; within 0.51 ulp of
    the exact power), on the kernel's ``plga::positive_pow`` for float32 CPU tensors without a
    gradient to record, where the library is loaded — an eager call of that kind loads it first,
    so its answer does not depend on what ran before; other calls never load it. No side effect
    in compiled code (Dynamo guards on :data:`READY_ROWS`)."""
    if (
        x.dtype == p.dtype == torch.float32
        and x.device.type == p.device.type == "cpu"
        and tuple(x.shape[x.ndim - p.ndim :]) == tuple(p.shape)
        and not (torch.is_grad_enabled() and (x.requires_grad or p.requires_grad))
    ):
        if not torch.compiler.is_compiling() and not _state["tried"]:
            prepare(torch.float32)
        if READY_ROWS:
            return torch.ops.plga.positive_pow(x, p)
    return torch.pow(x, p)


__all__ = ["ENV_SWITCH", "READY", "READY_ROWS", "greedy", "loaded", "power", "prepare", "ready", "served_dtypes"]
