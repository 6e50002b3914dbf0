"""Checks in worker processes (``plga.conformance.workers``): a kernel that ends its process
fails the check it was running instead of ending the run, what it prints stays off the report,
and the workers give the results one process gives."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from plga.conformance import check_kernel
from plga.errors import InputError

PLGA = str(Path(sys.executable).parent / "plga")  # the console script: the working folder is not on sys.path

KERNELS = textwrap.dedent('''
    import ctypes, os, signal
    import plga.kernels as K

    def good(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
        return K.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    def exits_when_causal(q, k, v, G, *, causal=False, **kw):  # os._exit: no exception, no cleanup
        if causal:
            os._exit(0)
        return good(q, k, v, G, causal=causal, **kw)

    def segfaults(q, k, v, G, **kw):
        os.kill(os.getpid(), signal.SIGSEGV)

    def chatty(q, k, v, G, **kw):
        print("plga conformance: PASS (printed by the kernel)")
        print("OPENBLAS_NUM_THREADS =", os.environ.get("OPENBLAS_NUM_THREADS"))
        return good(q, k, v, G, **kw)

    def holds_the_interpreter(q, k, v, G, **kw):  # C code that never returns nor releases the GIL: a
        libc = ctypes.PyDLL(None)                   # mutex locked twice (signals do not end the wait)
        mutex = ctypes.create_string_buffer(64)     # zeroed: PTHREAD_MUTEX_INITIALIZER
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)

    def off_by_a_bit(q, k, v, G, **kw):
        return good(q, k, v, G, **kw) * 1.01
''')


@pytest.fixture
def kernel_dir(tmp_path):
    (tmp_path / "wkern.py").write_text(KERNELS)
    return tmp_path


def _plga(*argv, cwd, timeout=300, **env):
    return subprocess.run([PLGA, "conformance", *argv], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "PLGA_NO_PROGRESS": "1", **env})


CAUSAL_AND_UNMASKED = "(attention_causal or attention_unmasked) and float32"


def test_a_kernel_ending_its_process_fails_that_check_and_the_run_goes_on(kernel_dir):
    r = _plga("--impl", "wkern:exits_when_causal", "-k", CAUSAL_AND_UNMASKED, "--json", cwd=kernel_dir)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(r.stdout)
    status = {x["id"]: x["status"] for x in report["results"]}
    assert report["verdict"] == "FAIL" and status == {"attention_causal[float32]": "failed", "attention_unmasked[float32]": "passed"}
    causal = next(x for x in report["results"] if x["id"] == "attention_causal[float32]")
    assert "the implementation ended the process it ran in during this check (exit status 0)" in causal["message"]


def test_in_one_process_the_same_kernel_ends_the_run_with_status_0(kernel_dir):
    """Negative control: what the workers prevent. In one process (``--jobs 0``) the kernel's
    ``os._exit(0)`` ends ``plga conformance`` with status 0 and no verdict."""
    r = _plga("--impl", "wkern:exits_when_causal", "-k", CAUSAL_AND_UNMASKED, "--jobs", "0", cwd=kernel_dir)
    assert r.returncode == 0 and "PASS" not in r.stdout and "FAIL" not in r.stdout, r.stdout[-2000:]


def test_a_crash_in_native_code_fails_the_check(kernel_dir):
    r = _plga("--impl", "wkern:segfaults", "-k", "attention_causal and float32", cwd=kernel_dir)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.splitlines()[0].startswith("plga conformance: FAIL") and "killed by signal SIGSEGV" in r.stdout


def test_ending_the_process_while_loading_is_a_load_error(tmp_path):
    (tmp_path / "exits_on_import.py").write_text("import os\nos._exit(0)\n")
    r = _plga("--impl", "exits_on_import:fn", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].endswith("'exits_on_import:fn': loading it ended the process (exit status 0)")


def test_what_a_kernel_prints_stays_off_the_report(kernel_dir):
    r = _plga("--impl", "wkern:chatty", "-k", "attention_causal and float32", "--json", cwd=kernel_dir,
              OPENBLAS_NUM_THREADS="2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(r.stdout)["verdict"] == "PASS"  # one JSON document: the kernel's line went to stderr
    assert "printed by the kernel" in r.stderr
    # the worker's OpenBLAS runs at the suite's one thread, whatever the environment says
    assert "OPENBLAS_NUM_THREADS = 1" in r.stderr and "OPENBLAS_NUM_THREADS = 2" not in r.stderr


def test_a_worker_that_holds_the_interpreter_is_ended_from_outside(kernel_dir):
    """C code holding the GIL: the worker's own watchdog cannot run, so its time limit cannot
    act; the process that gives the verdict ends it after the limit, the grace and BACKSTOP_S."""
    t0 = time.monotonic()
    r = _plga("--impl", "wkern:holds_the_interpreter", "-k", "attention_causal and float32", "--check-timeout", "1",
              cwd=kernel_dir, timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "did not return within 16 s" in r.stdout and "killed by signal" not in r.stdout


def _outcomes(report):
    return [(r["id"], r["status"], r["cases"], r["coverage"], r["left_out"], r["message"].splitlines()[:1])
            for r in report["results"]]


@pytest.mark.parametrize("impl", ["wkern:good", "wkern:off_by_a_bit"])
def test_workers_give_the_results_of_one_process(kernel_dir, impl):
    keyword = "(attention_causal or attention_padding or sentinel_g) and float32"
    runs = [_plga("--impl", impl, "-k", keyword, "--json", "--jobs", jobs, cwd=kernel_dir) for jobs in ("0", "2")]
    one, two = (json.loads(r.stdout) for r in runs)
    assert one["verdict"] == two["verdict"] == ("PASS" if impl == "wkern:good" else "FAIL")
    assert _outcomes(one) == _outcomes(two) and len(one["results"]) == 3


def test_exitfirst_stops_the_workers_after_a_failure(kernel_dir):
    r = _plga("--impl", "wkern:off_by_a_bit", "-k", "attention and float32", "-x", "--json", "--jobs", "2", cwd=kernel_dir)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["verdict"] == "FAIL"
    assert 1 <= len(report["results"]) <= 2 and any(x["status"] == "failed" for x in report["results"])


def test_jobs_needs_a_named_implementation_and_a_count(kernel_dir):
    from plga.kernels import plga_attention

    with pytest.raises(InputError, match="name it as 'module:object'"):
        check_kernel(plga_attention, jobs=2)
    for jobs in ("-1", "65"):
        r = _plga("--impl", "wkern:good", "--jobs", jobs, cwd=kernel_dir)
        assert r.returncode == 2 and "--jobs must be between 0 (0: run in this process) and 64" in r.stderr


def test_workers_that_keep_ending_outside_the_checks_fail_the_run(tmp_path):
    """The first worker loads the implementation and ends in its first check; every later one
    ends while importing it: restarts stop after one per check (plus one per job), and the
    checks left fail unrun, never pass nor wait forever."""
    (tmp_path / "doomed.py").write_text(textwrap.dedent("""
        import os, pathlib
        if pathlib.Path("FIRST").exists():
            os._exit(0)
        pathlib.Path("FIRST").write_text("")

        def fn(q, k, v, G, **kw):
            os._exit(0)
    """))
    r = _plga("--impl", "doomed:fn", "-k", "attention and float32", "--json", "--jobs", "2", cwd=tmp_path, timeout=600)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["verdict"] == "FAIL", r.stdout[-2000:] + r.stderr[-2000:]
    ran = [x for x in report["results"] if x["status"] != "skipped"]  # (the capabilities it does not declare)
    assert ran and all(x["status"] == "failed" for x in ran)
    assert "ended the process it ran in during this check" in ran[0]["message"]
    assert "not run: the implementation's worker processes kept ending outside any check" in ran[-1]["message"]
