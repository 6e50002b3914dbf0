"""How the process's C allocator treats the large CPU tensors of a prefill.

glibc serves every block above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and
unmaps it on free. A prefill allocates and frees activations of that size in every layer
(paper-110m, batch 8 × 1024 tokens: 29–157 MB each), so each one is paid again in page faults:
on the bench machine a float32 prefill takes 5.54 s instead of 5.00, bfloat16 2.30 instead of
2.17, and the eager path (S×S scores) 14.7 instead of 8.9.

:func:`keep_freed_blocks` asks glibc to serve large blocks from its heap and to keep freed heap
memory for reuse (``mallopt(M_MMAP_MAX, 0)`` and ``M_TRIM_THRESHOLD`` at its maximum), which is
what jemalloc and tcmalloc do by default. The price: the process's resident memory stays at its
peak until it exits. It changes the whole process, so importing plga never calls it: the
``plga`` console script (every subcommand) and the bench's case processes do, and a program
that imports plga may call it itself. ``PLGA_SYSTEM_MALLOC=1`` in the environment opts out.
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
#: The largest trim threshold mallopt takes (an int): freed heap memory is kept up to 2 GiB.
TRIM_THRESHOLD_MAX = 2**31 - 1
#: Set (to anything non-empty) to keep the system allocator's behaviour.
OPT_OUT_ENV = "PLGA_SYSTEM_MALLOC"

_kept = False


def keep_freed_blocks() -> bool:
    """Keep large freed blocks for reuse instead of unmapping them (see the module docstring).
    True when the setting is in effect (glibc, not opted out); idempotent."""
    global _kept
    if _kept:
        return True
    if os.environ.get(OPT_OUT_ENV) or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    _kept = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_MAX) == 1
    return _kept


def freed_blocks_kept() -> bool:
    """Whether :func:`keep_freed_blocks` is in effect in this process."""
    return _kept


__all__ = ["M_MMAP_MAX", "M_TRIM_THRESHOLD", "OPT_OUT_ENV", "TRIM_THRESHOLD_MAX", "freed_blocks_kept", "keep_freed_blocks"]
