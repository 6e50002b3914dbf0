"""Where the shipped data files are: one resolver for the tests, the suite and the audit.

The repository keeps them in ``tests/data`` (provenance and licence in its README); a
wheel installs the same files as ``plga/_data``. ``$PLGA_SHARED_DATA`` (a folder holding
``golden/`` and ``upstream/``) overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

#: Paths (relative to the data folder) of the shipped files.
GOLDEN_CHECKPOINT = "golden/small_seed0.pth"
GOLDEN_CONFIG = "golden/small_seed0_golden.json"
GOLDEN_ARRAYS = "golden/small_seed0_golden.npz"
TRAINED_G_LM = "upstream/pldrv51_110m_1_G_LM.npz"
TOKENIZER = "upstream/refinedweb-tokenizer-pldrllm-kvg-cache-paper.model"


def data_dir() -> Path:
    """``$PLGA_SHARED_DATA``, else the installed ``plga/_data``, else the checkout's ``tests/data``."""
    env = os.environ.get("PLGA_SHARED_DATA")
    if env:
        return Path(env)
    installed = _PACKAGE / "_data"
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / "tests" / "data"


def data_file(relative: str) -> Path | None:
    """The file ``relative`` under :func:`data_dir`, or None when it is not there."""
    path = data_dir() / relative
    return path if path.is_file() else None


def missing_reason(relative: str) -> str:
    """Why a data file is missing, for a skip message."""
    return (f"data file {relative} not found under {data_dir()} "
            "(set PLGA_SHARED_DATA to a folder holding golden/ and upstream/)")


__all__ = [
    "GOLDEN_ARRAYS", "GOLDEN_CHECKPOINT", "GOLDEN_CONFIG", "TOKENIZER", "TRAINED_G_LM", "data_dir",
    "data_file", "missing_reason",
]
