"""How the process's OpenMP threads wait for work: asleep, so that a busy machine cannot stall them.

torch's CPU operations run their parallel regions on OpenMP (the wheel's libgomp). A thread that
finishes its share of a region spins, by default, before it sleeps, waiting for the others. When
the threads of the running processes outnumber the cores — two pytest-xdist workers on two cores,
one of them running a check at two intra-op threads, or a conformance run beside a build — the
thread waited for is often descheduled while its sibling spins, and each parallel region then
costs a scheduler time slice instead of microseconds.

Measured on a 2-core host (2026-12-06), the conformance suite's ``decoder_thread_counts`` check
on the at-scale kernels, all three dtypes: 7 s alone; 76 s beside one process doing 2-thread
matrix products; 13 s beside it with ``OMP_WAIT_POLICY=PASSIVE``. In CI that check once passed
its 60 s limit on a correct kernel: the suite said FAIL for a slow machine, not a wrong kernel.

:func:`passive_waits` sets ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep as soon as they wait). It
changes no result, only how idle threads wait. libgomp reads the variable once, when torch loads
it, so it acts only before ``import torch``; a value already in the environment is kept. The
conformance commands (``plga conformance``, ``plga verify``), the pytest plugin in a session that
runs the shipped suite, and the project's own test suite call it; ``plga bench`` never does, as
it measures the setting users get. A check that runs past its limit where waits are not passive
(:func:`waits_are_passive`) says so in its failure message.
"""

from __future__ import annotations

import os
import sys

#: The variable libgomp (and LLVM's libomp) reads at load: ``PASSIVE`` makes waiting threads sleep.
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


def passive_waits() -> bool:
    """Ask OpenMP's waiting threads to sleep rather than spin (see the module docstring).

    True when the process's OpenMP will wait passively: torch is not imported yet (the variable
    is set unless the environment already names a policy, which is kept) and the policy is
    ``PASSIVE``. False when the environment names another policy, or torch is already loaded
    with none named (too late: the variable is then left unset rather than shown as in effect).
    """
    if WAIT_POLICY_ENV not in os.environ and "torch" not in sys.modules:
        os.environ[WAIT_POLICY_ENV] = "PASSIVE"
    return waits_are_passive()


def waits_are_passive() -> bool:
    """Whether the environment asks OpenMP to wait passively (it took effect if set before torch loaded)."""
    return os.environ.get(WAIT_POLICY_ENV, "").strip().upper() == "PASSIVE"


__all__ = ["WAIT_POLICY_ENV", "passive_waits", "waits_are_passive"]
