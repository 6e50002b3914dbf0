"""plga.allocator: large freed blocks are reused (no page faults on reallocation), the console
script turns it on, and the environment can turn it off. Each case runs in a fresh interpreter:
the setting is process-wide and cannot be undone."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the allocator setting is glibc's"
)

#: Allocate, touch and free a 64 MiB array five times; print the minor page faults of the last four.
_FAULTS = """
import json, resource, sys
import numpy as np
from plga.allocator import keep_freed_blocks
kept = keep_freed_blocks() if sys.argv[1] == "keep" else False
np.ones(16 * 2**20, dtype=np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    np.ones(16 * 2**20, dtype=np.float32)
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


#: Page faults of four fresh 64 MiB mappings at the least: one per 2 MiB page (transparent huge
#: pages on); with 4 KiB pages there are 16 384 per mapping.
_FRESH_MAPPINGS = 4 * 32


def test_freed_blocks_are_reused_without_page_faults():
    system = _faults("system")
    kept = _faults("keep")
    assert kept["kept"] is True
    # negative control: glibc unmaps each 64 MiB block, so every reallocation faults its pages in again
    assert system["faults"] >= _FRESH_MAPPINGS, system
    assert kept["faults"] < 0.05 * system["faults"], (kept, system)


def test_the_environment_opts_out():
    got = _faults("keep", env={"PLGA_SYSTEM_MALLOC": "1"})
    assert got["kept"] is False
    assert got["faults"] >= _FRESH_MAPPINGS


def test_the_console_script_keeps_freed_blocks(tmp_path):
    script = ("import sys; from plga.cli import main; from plga.allocator import freed_blocks_kept; "
              "code = main(sys.argv[1:]); print('kept', freed_blocks_kept(), code)")
    missing = str(tmp_path / "missing.json")
    out = subprocess.run([sys.executable, "-c", script, "forward", missing, "--tokens", missing,
                          "--out", str(tmp_path / "out.npz")],
                         capture_output=True, text=True, check=False)
    assert out.stdout.strip().splitlines()[-1] == "kept True 2", (out.stdout, out.stderr)


def test_the_bench_keeps_freed_blocks_from_any_entry_point():
    """benchmarks/run_bench.py calls bench_main without the console script: the header's
    allocator line must still describe what its case processes do (they keep freed blocks)."""
    script = ("from plga.allocator import freed_blocks_kept; from plga.bench import add_bench_arguments, bench_main; "
              "import argparse; args = add_bench_arguments(argparse.ArgumentParser()).parse_args(['--runs', '0']); "
              "from plga.errors import UsageError\n"
              "try:\n    bench_main(args)\nexcept UsageError:\n    pass\n"
              "print('kept', freed_blocks_kept())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.stdout.strip().splitlines()[-1] == "kept True", (out.stdout, out.stderr)
