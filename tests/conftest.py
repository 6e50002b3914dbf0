"""Shared fixtures and Hypothesis profiles of the plga test suite.

The golden vectors, the real trained G_LM and the tokenizer ship in ``tests/data``
(:mod:`plga.datafiles`; ``$PLGA_SHARED_DATA`` overrides the folder, and a test whose file is
then missing skips with a reason naming the path).
Hypothesis profiles: ``dev`` (default), ``ci`` (derandomized; chosen when ``CI`` is set),
``thorough``; override with ``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from plga.datafiles import data_dir
from plga.openmp import passive_waits

# Two xdist workers share two cores, and the thread-count checks run at two threads: OpenMP
# threads that spin while a sibling is descheduled once timed a correct kernel out (plga.openmp).
if not passive_waits():
    import warnings

    warnings.warn("OpenMP waits are not passive in this test run (torch was imported before tests/conftest.py, "
                  "or OMP_WAIT_POLICY names another policy): the thread-count checks may time out on a busy machine",
                  stacklevel=1)

REPO = Path(__file__).resolve().parents[1]

settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def shared_file(*parts: str) -> Path:
    """Path of a shipped data file (:func:`plga.datafiles.data_dir`), skipping with a reason when absent."""
    path = data_dir().joinpath(*parts)
    if not path.exists():
        pytest.skip(f"data file not available: {path} (PLGA_SHARED_DATA points at a folder without it)")
    return path


@pytest.fixture(scope="session")
def golden():
    """The golden checkpoint (params, config) and arrays of the published v510 code."""
    import numpy as np

    from plga.reference.checkpoint import load_checkpoint

    ckpt = shared_file("golden", "small_seed0.pth")
    pytest.importorskip("torch", reason="reading the upstream .pth golden checkpoint needs torch")
    params, config = load_checkpoint(ckpt, max_seq_len=64)
    with np.load(shared_file("golden", "small_seed0_golden.npz")) as z:
        arrays = {k: z[k] for k in z.files}
    return params, config, arrays


@pytest.fixture(scope="session")
def trained_g():
    """The real trained G_LM of PLDR-LLM-v51-110M-1, float32 [5, 14, 64, 64]."""
    import numpy as np

    with np.load(shared_file("upstream", "pldrv51_110m_1_G_LM.npz")) as z:
        return z["G_LM"]
