"""``benchmarks/cuda_check.sh`` runs only where a GPU is lent, so its logic is tested here: the
conformance parts it runs side by side report in order, each with its verdict, and a time cap
still gets every part's report of the checks it finished."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cuda_check.sh"


SLOW_KERNEL = """
import time
import plga.kernels as K

def good(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):  # right, and slow
    time.sleep(0.5)
    return K.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

def slow_to_stop(q, k, v, G, **kw):  # right, and takes 2 s to unwind a stop (a device sync, say)
    try:
        return good(q, k, v, G, **kw)
    except KeyboardInterrupt:
        time.sleep(2)
        raise
"""


def _command(tmp_path: Path, parts: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run the script's ``conformance_parts`` on the CPU."""
    text = SCRIPT.read_text()
    func = text[text.index("conformance_parts() {") : text.index("export -f conformance_parts")]
    quoted = " ".join("'" + p.replace("'", "'\\''") + "'" for p in parts)
    (tmp_path / "slowkern.py").write_text(SLOW_KERNEL)
    env = {**os.environ, "PY": sys.executable, "TMP": str(tmp_path), "PYTHONPATH": str(tmp_path)}
    return ["bash", "-c", f'{func}\nconformance_parts cpu "$PY" "$TMP" {quoted}'], env


def _parts(tmp_path: Path, *parts: str, cap_s: int | None = None) -> subprocess.CompletedProcess[str]:
    """The script's ``conformance_parts`` function run on the CPU with ``parts``, under
    ``timeout`` when ``cap_s`` is given."""
    cmd, env = _command(tmp_path, parts)
    if cap_s is not None:
        cmd = ["timeout", "--kill-after=20", str(cap_s), *cmd]
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


def test_a_second_term_does_not_print_a_part_before_its_report(tmp_path):
    """``timeout`` signals bash and then its whole group: two TERMs, each of which ends a
    ``wait`` early. Sent apart (as a loaded host delivers them), the parts still report: the
    script printed the slow part's empty log while it was still writing its report (a kernel
    that takes 2 s to unwind the stop makes that certain)."""
    slow = "--impl slowkern:slow_to_stop -k 'attention and float32'"
    cmd, env = _command(tmp_path, (slow, "-k 'sdpa_identity and float64'"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        time.sleep(15)  # both parts loaded; the slow one inside its checks (or still loading)
        assert proc.poll() is None, "the slow part finished before the stop"
        os.kill(proc.pid, signal.SIGTERM)  # timeout's first TERM: the monitored command
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)  # its second: the process group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert out.count("(time cap: the parts report what they finished)") == 2, out[-3000:] + err[-2000:]
    reports = _reports(out)
    assert list(reports) == [slow, "-k 'sdpa_identity and float64'"], out[-3000:] + err[-2000:]
    assert reports[slow].startswith("plga conformance: INTERRUPTED"), reports[slow]
    assert proc.returncode == 1, proc.returncode
