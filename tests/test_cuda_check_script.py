"""``benchmarks/cuda_check.sh`` runs only where a GPU is lent, so its logic is tested here: the
conformance parts it runs side by side report in order, each with its verdict, and a time cap
still gets every part's report of the checks it finished."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cuda_check.sh"


SLOW_KERNEL = """
import time
import plga.kernels as K

def good(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):  # right, and slow
    time.sleep(0.5)
    return K.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)
"""


def _parts(tmp_path: Path, *parts: str, cap_s: int | None = None) -> subprocess.CompletedProcess[str]:
    """The script's ``conformance_parts`` function run on the CPU with ``parts``."""
    text = SCRIPT.read_text()
    func = text[text.index("conformance_parts() {") : text.index("export -f conformance_parts")]
    quoted = " ".join("'" + p.replace("'", "'\\''") + "'" for p in parts)
    cmd = ["bash", "-c", f'{func}\nconformance_parts cpu "$PY" "$TMP" {quoted}']
    if cap_s is not None:
        cmd = ["timeout", "--kill-after=20", str(cap_s), *cmd]
    (tmp_path / "slowkern.py").write_text(SLOW_KERNEL)
    env = {**os.environ, "PY": sys.executable, "TMP": str(tmp_path), "PYTHONPATH": str(tmp_path)}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _reports(out: str) -> dict[str, str]:
    """Each part's header → its first verdict line."""
    reports: dict[str, str] = {}
    head = None
    for line in out.splitlines():
        if line.startswith("--- plga conformance "):
            head = line.removeprefix("--- plga conformance ").removesuffix(" ---")
        elif line.startswith("plga conformance: ") and head is not None and head not in reports:
            reports[head] = line
    return reports


def test_every_part_reports_in_order_with_its_verdict(tmp_path):
    r = _parts(tmp_path, "-k 'sdpa_identity and float64'", "--group chain")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    reports = _reports(r.stdout)
    assert list(reports) == ["-k 'sdpa_identity and float64'", "--group chain"]
    assert all(v.startswith("plga conformance: PASS") for v in reports.values()), reports
    assert "(1 passed;" in reports["-k 'sdpa_identity and float64'"] and "(3 passed;" in reports["--group chain"]


def test_a_time_cap_gets_every_part_s_report(tmp_path):
    """A slow kernel (0.5 s a call, minutes for its checks) outlasts the cap: it reports
    INTERRUPTED with what it finished, the other part reports too, and the step fails (124, the
    cap's status). A part the cap stops while it still loads its implementation says so (on a
    loaded CI host the slow part once reported nothing at all: it had no SIGTERM handler before
    its checks began)."""
    slow = "--impl slowkern:good -k 'attention and float32'"
    r = _parts(tmp_path, slow, "-k 'sdpa_identity and float64'", cap_s=40)
    assert r.returncode == 124, r.stdout[-3000:] + r.stderr[-2000:]
    reports = _reports(r.stdout)
    assert list(reports) == [slow, "-k 'sdpa_identity and float64'"], r.stdout[-3000:]
    stopped = reports[slow]
    assert stopped.startswith("plga conformance: INTERRUPTED"), stopped
    assert re.search(r"\d+ of \d+ checks ran before the stop|stopped while loading slowkern:good", stopped), stopped
    assert reports["-k 'sdpa_identity and float64'"].startswith(("plga conformance: PASS", "plga conformance: INTERRUPTED"))
