"""Fixtures for the kernel tests: thread count, golden data (skipped when absent), CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="plga.kernels needs the torch extra (pip install 'plga[torch]')")

torch.set_num_threads(int(os.environ.get("PLGA_TORCH_THREADS", "2")))

from plga.datafiles import data_dir  # noqa: E402

DATA = data_dir()
GOLDEN = DATA / "golden"
UPSTREAM = DATA / "upstream"


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    if not (GOLDEN / "small_seed0.pth").exists():
        pytest.skip(f"golden vectors absent: {GOLDEN} (PLGA_SHARED_DATA points at a folder without them)")
    return GOLDEN


@pytest.fixture(scope="session")
def golden(golden_dir):
    import numpy as np

    return dict(np.load(golden_dir / "small_seed0_golden.npz"))


@pytest.fixture(scope="session")
def golden_checkpoint(golden_dir):
    from plga.reference.checkpoint import load_checkpoint

    params, config = load_checkpoint(golden_dir / "small_seed0.pth", max_seq_len=64)
    return params, config


@pytest.fixture(scope="session")
def real_G():
    import numpy as np

    path = UPSTREAM / "pldrv51_110m_1_G_LM.npz"
    if not path.exists():
        pytest.skip(f"the trained G_LM of PLDR-LLM-v51-110M-1 is absent: {path}")
    return np.load(path)["G_LM"]


@pytest.fixture
def cuda_device():
    """A CUDA device, or a clean skip (queried here, never at import)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device available")
    return torch.device("cuda")
