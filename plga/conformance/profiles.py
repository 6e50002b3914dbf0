"""Hypothesis profiles of the suite: ``quick`` (the main job), ``ci`` and ``thorough``.

Registered under Hypothesis as ``plga-quick``, ``plga-ci`` (derived from Hypothesis's built-in
``ci``) and ``plga-thorough``; all with ``deadline=None`` (mpmath ground truth and CUDA warm-up
have no meaningful per-example time), no example database (nothing is written to the working
folder) and blobs printed. Every profile is **seeded**: each check's Hypothesis seed is a
function of the run's seed (:data:`DEFAULT_SEED` unless ``--seed N``) and the check id, so the
same seed draws the same cases and gives the same verdict; a different seed draws new ones.
Every profile also runs every check's explicit boundary cases first (:mod:`.strategies`).

:data:`CHECK_TIMEOUT` is the time limit of one check (foreign code that never returns is a
failure of that check, not a hung run); :data:`GROUPS` names the check groups (this module
imports no torch, so the console script's parser stays light).
Selection: an explicit name, else ``$PLGA_PROFILE``, else ``ci`` when ``$CI`` is set, else
``quick``. The suite applies the profile to its own properties only, so it never changes the
global Hypothesis settings of a host test session.

The suite draws under :func:`plga.draws.seed_alone_decides`, so what else the process has
imported does not change the cases.

``examples(profile, factor)`` scales the budget for expensive checks (decoder, mpmath), as
array-api-tests gives unvectorized tests a tenth of the examples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from ..errors import InputError

PROFILES: dict[str, int] = {"quick": 6, "ci": 25, "thorough": 400}

#: The check groups, in the order a run reports them (``--group`` selects among them).
GROUPS = ("attention", "structure", "chain", "decoder", "cache")

#: The seed of a run without ``--seed``.
DEFAULT_SEED = 20260

#: Seconds one check may run (``--check-timeout`` overrides; 0 disables).
CHECK_TIMEOUT: dict[str, float] = {"quick": 150.0, "ci": 300.0, "thorough": 3600.0}
#: The environment variable of the suite's thread count (default 1): torch's intra-op threads in
#: every check (:func:`~.checks.run_check`) and NumPy's OpenBLAS threads in a worker
#: (:mod:`.workers`).
SUITE_THREADS_ENV = "PLGA_NUM_THREADS"

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.function_scoped_fixture]


def register_profiles() -> None:
    """Register ``plga-quick``, ``plga-ci`` and ``plga-thorough`` with Hypothesis (idempotent)."""
    settings.register_profile(
        "plga-quick", max_examples=PROFILES["quick"], deadline=None, print_blob=True, database=None,
        suppress_health_check=_SUPPRESS,
    )
    settings.register_profile(
        "plga-ci", parent=settings.get_profile("ci"), max_examples=PROFILES["ci"], deadline=None, print_blob=True,
        derandomize=False, database=None, suppress_health_check=_SUPPRESS,
    )
    settings.register_profile(
        "plga-thorough", parent=settings.get_profile("plga-ci"), max_examples=PROFILES["thorough"],
    )


register_profiles()


def selected(name: str | None = None) -> str:
    name = name or os.environ.get("PLGA_PROFILE") or ("ci" if os.environ.get("CI") else "quick")
    if name not in PROFILES:
        raise InputError(f"unknown conformance profile {name!r}; known: {', '.join(PROFILES)}")
    return name


def hypothesis_settings(name: str, factor: float = 1.0, *, shrink: bool = True) -> settings:
    """The Hypothesis settings of profile ``name`` with the example budget scaled by ``factor``."""
    base = settings.get_profile(f"plga-{name}")
    n = max(2, round(base.max_examples * factor))
    phases = tuple(base.phases) if shrink else tuple(p for p in base.phases if p not in (Phase.shrink, Phase.explain))
    return settings(base, max_examples=n, phases=phases)


__all__ = ["CHECK_TIMEOUT", "DEFAULT_SEED", "PROFILES", "SUITE_THREADS_ENV", "hypothesis_settings", "register_profiles", "selected"]
