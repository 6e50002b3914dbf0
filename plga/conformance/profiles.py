"""Hypothesis profiles of the suite: ``quick`` (the main job), ``ci`` and ``thorough``.

Registered under Hypothesis as ``plga-quick``, ``plga-ci`` (derived from Hypothesis's built-in
``ci``: derandomized, no database, blobs printed) and ``plga-thorough``; all with
``deadline=None`` (mpmath ground truth and CUDA warm-up have no meaningful per-example time).
Selection: an explicit name, else ``$PLGA_PROFILE``, else ``ci`` when ``$CI`` is set, else
``quick``. The suite applies the profile to its own properties only, so it never changes the
global Hypothesis settings of a host test session.

``examples(profile, factor)`` scales the budget for expensive checks (decoder, mpmath), as
array-api-tests gives unvectorized tests a tenth of the examples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILES: dict[str, int] = {"quick": 8, "ci": 25, "thorough": 400}

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
        derandomize=True, database=None, suppress_health_check=_SUPPRESS,
    )
    settings.register_profile(
        "plga-thorough", parent=settings.get_profile("plga-ci"), max_examples=PROFILES["thorough"],
    )


register_profiles()


def selected(name: str | None = None) -> str:
    name = name or os.environ.get("PLGA_PROFILE") or ("ci" if os.environ.get("CI") else "quick")
    if name not in PROFILES:
        raise ValueError(f"unknown conformance profile {name!r}; known: {', '.join(PROFILES)}")
    return name


def hypothesis_settings(name: str, factor: float = 1.0, *, shrink: bool = True) -> settings:
    """The Hypothesis settings of profile ``name`` with the example budget scaled by ``factor``."""
    base = settings.get_profile(f"plga-{name}")
    n = max(2, round(base.max_examples * factor))
    phases = tuple(base.phases) if shrink else tuple(p for p in base.phases if p not in (Phase.shrink, Phase.explain))
    return settings(base, max_examples=n, phases=phases)


__all__ = ["PROFILES", "hypothesis_settings", "register_profiles", "selected"]
