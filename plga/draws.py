"""Hypothesis draws that depend on the seed alone, not on what the process has imported.

Hypothesis (≥ 6.131) draws about one number in twenty from a pool of the constants written in
every *local* module the process has imported so far. The pool grows as the process imports
modules, so the same seed drew other cases in a pytest session after other tests had imported
more of plga, or beside an adapter module full of numbers: a conformance verdict, or a theorem
check of ``plga verify``, could differ between two runs at one seed.
:func:`seed_alone_decides` leaves that pool out while a block runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def seed_alone_decides() -> Iterator[None]:
    """Draw without Hypothesis's pool of local-module constants while the block runs, so that a
    seeded (or derandomized) test draws the same cases whatever the process has imported.

    The pool is private to Hypothesis (``providers._get_local_constants`` and its cache
    ``CONSTANTS_CACHE``, cleared on entry and exit so that no pool computed outside leaks in and
    the empty one never leaks out); a Hypothesis without it draws from no such pool.
    ``tests/test_draws.py`` fails if a later Hypothesis moves it elsewhere.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # a Hypothesis before the pool
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None:
        yield
        return
    providers._get_local_constants = Constants
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


__all__ = ["seed_alone_decides"]
