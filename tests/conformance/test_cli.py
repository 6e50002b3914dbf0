"""``plga conformance``: exit codes, verdict and coverage, seeds, isolation from the working
folder, verdicts a kernel cannot forge, time limits, vectors, and the docs' numbers."""

import hashlib
import json
import math
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from plga.conformance import profiles
from plga.conformance.cli import conformance_main, read_xfails
from plga.conformance.vectors import check_vector
from plga.errors import UsageError

DOCS = Path(__file__).resolve().parents[2] / "docs"
PLGA = str(Path(sys.executable).parent / "plga")  # the console script: the working folder is not on sys.path

KERNELS = textwrap.dedent('''
    import os, sys, time
    import plga.kernels as K

    def good(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
        return K.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    def variadic(*args, **kwargs):  # a (*args, **kwargs) callable is attention, not a factory
        return K.plga_attention(*args, **kwargs)

    def raises(q, k, v, G, **kw):
        raise RuntimeError("this kernel always fails")

    def exits(q, k, v, G, **kw):
        sys.exit(0)

    def interrupts(q, k, v, G, **kw):
        raise KeyboardInterrupt

    def marks(q, k, v, G, **kw):  # slow, and leaves a file once it runs: a test then stops the run
        open("RAN", "w").close()
        time.sleep(0.05)
        return good(q, k, v, G, **kw)

    def spins(q, k, v, G, **kw):
        while True:
            pass

    def sleeps(q, k, v, G, **kw):
        time.sleep(10**6)

    def swallows(q, k, v, G, **kw):
        while True:
            try:
                time.sleep(10**6)
            except BaseException:
                pass

    from plga.conformance import Adapter

    class Nothing(Adapter):
        name = "nothing"  # declares no capability: every check skips

    nothing = Nothing()
''')


@pytest.fixture
def kernel_dir(tmp_path):
    (tmp_path / "mykern.py").write_text(KERNELS)
    return tmp_path


def _plga(*argv, cwd, timeout=300):
    return subprocess.run([PLGA, "conformance", *argv], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**__import__("os").environ, "PLGA_NO_PROGRESS": "1"})


def test_verdict_first_then_coverage_and_exit_codes(kernel_dir):
    ok = _plga("--impl", "mykern:good", "-k", "attention_padding and float32", cwd=kernel_dir)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    first = ok.stdout.splitlines()[0]
    assert first.startswith("plga conformance: PASS") and "seed 20260" in first
    assert "Coverage" in ok.stdout and "full_rows" in ok.stdout and "129–256, 257–512, 513–1024, 1025+" in ok.stdout
    bad = _plga("--impl", "plga.conformance.broken:transposed_g", "-k", "sentinel_g and float32", cwd=kernel_dir)
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert bad.stdout.splitlines()[0].startswith("plga conformance: FAIL")
    assert "closest mix-up: Q Gᵀ Kᵀ (G transposed)" in bad.stdout
    assert "--seed 20260" in bad.stdout and "PYTHONPATH" in bad.stdout


@pytest.mark.parametrize("impl, fragment", [
    ("no_such_module_xyz:thing", "cannot import module"),
    ("mykern:no_such_object", "has no attribute"),
    ("mykern", "give the object as"),
])
def test_bad_impl_is_one_line_exit_2(kernel_dir, impl, fragment):
    r = _plga("--impl", impl, cwd=kernel_dir)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.stderr


def test_json_report_records_verdict_and_coverage(kernel_dir):
    r = _plga("--impl", "mykern:good", "-k", "attention_unmasked and float64", "--json", cwd=kernel_dir)
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["verdict"] == "PASS" and data["seed"] == profiles.DEFAULT_SEED
    axes = data["coverage"]["attention"]
    assert {"1", "33–64", "129–256", "257–512", "513–1024", "1025+"} <= set(axes["T (keys)"]) and {"S<T", "S=T", "S=1", "S>T"} <= set(axes["S vs T"])
    assert {"None (1/√d)", "tiny (<0.01)", "large (>1)"} <= set(axes["scale"])
    assert {"2–8 odd", "257–512 odd"} <= set(axes["d"]) and {"1–4096", "4097–65535", "65536+"} <= set(axes["query rows (B·H·S)"])


def test_hostile_working_folder_has_no_effect(kernel_dir):
    (kernel_dir / "conftest.py").write_text("open('CONFTEST_RAN', 'w').write('x')\nraise SystemExit(0)\n")
    (kernel_dir / "pytest.ini").write_text("[pytest]\naddopts = --co -p no:plga\n")
    (kernel_dir / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '--co'\n")
    r = _plga("--impl", "mykern:raises", "-k", "attention_unmasked and float32", cwd=kernel_dir)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "RuntimeError: this kernel always fails" in r.stdout
    assert not (kernel_dir / "CONFTEST_RAN").exists()
    assert not (kernel_dir / ".hypothesis").exists() and not (kernel_dir / ".pytest_cache").exists()


@pytest.mark.parametrize("impl, fragment", [("mykern:exits", "SystemExit(0)"), ("mykern:interrupts", "KeyboardInterrupt")])
def test_a_kernel_cannot_exit_plga(kernel_dir, impl, fragment):
    r = _plga("--impl", impl, "-k", "attention_causal and float32", cwd=kernel_dir)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.splitlines()[0].startswith("plga conformance: FAIL") and fragment in r.stdout


_SLOW_OR_HUNG = "a hang, or a machine too slow or too busy for the limit: --check-timeout raises it)"


@pytest.mark.parametrize(("impl", "reason"), [("mykern:spins", _SLOW_OR_HUNG), ("mykern:sleeps", _SLOW_OR_HUNG),
                                              ("mykern:swallows", "swallows interrupts or never returns to Python")])
def test_a_hanging_kernel_fails_within_the_limit(kernel_dir, impl, reason):
    t0 = time.monotonic()
    r = _plga("--impl", impl, "-k", "attention_unmasked and float32", "--check-timeout", "2", cwd=kernel_dir, timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "attention_unmasked[float32]" in r.stdout and "time limit of 2 s" in r.stdout
    assert reason in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize(("policy", "hinted"), [(None, True), ("ACTIVE", True), ("PASSIVE", False)])
def test_a_timeout_names_spinning_openmp_threads_where_they_spin(monkeypatch, policy, hinted):
    from plga.conformance.runner import _timeout_hint

    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    assert ("OMP_WAIT_POLICY=PASSIVE before torch loads" in _timeout_hint()) is hinted


def test_a_run_stopped_by_sigterm_reports_what_finished_without_a_verdict(kernel_dir):
    """``timeout`` and job schedulers stop a run with SIGTERM, often twice: the checks that
    finished are reported, the verdict is INTERRUPTED (exit 130), never PASS."""
    import os
    import signal

    proc = subprocess.Popen([PLGA, "conformance", "--impl", "mykern:marks", "-k", "attention and float32"],
                            cwd=kernel_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PLGA_NO_PROGRESS": "1"})
    deadline = time.monotonic() + 120
    while not (kernel_dir / "RAN").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)  # some checks finish (each case takes 0.05 s)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)  # as `timeout` does (the command, then its process group): ignored
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # while it reports or exits: ignored too
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    first = out.splitlines()[0]
    assert first.startswith("plga conformance: INTERRUPTED — mykern.marks has no verdict"), first
    n, planned = map(int, re.search(r"(\d+) of (\d+) checks ran before the stop", first).groups())
    assert n < planned
    checks = [line for line in out.splitlines() if line.startswith("  ") and "[float32] (" in line]
    assert len(checks) == n and all(line.split()[0] == "PASSED" for line in checks), out


def test_a_run_stopped_while_its_implementation_loads_says_so(tmp_path):
    """A stop during the (slow) import of the implementation: INTERRUPTED, exit 130, one line
    (before, the default SIGTERM action killed the process without a word: under a loaded CI host
    a capped part of benchmarks/cuda_check.sh reported nothing)."""
    import os
    import signal

    (tmp_path / "slowload.py").write_text(textwrap.dedent("""
        import pathlib, time
        pathlib.Path("LOADING").write_text("")
        time.sleep(60)
        def fn(q, k, v, G, **kw):
            raise AssertionError("never called")
    """))
    proc = subprocess.Popen([PLGA, "conformance", "--impl", "slowload:fn"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PLGA_NO_PROGRESS": "1"})
    deadline = time.monotonic() + 120
    while not (tmp_path / "LOADING").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)  # as `timeout` does: ignored
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert out.splitlines() == ["plga conformance: INTERRUPTED — stopped while loading slowload:fn, before any check ran: "
                                "no verdict"], out + err


def test_verify_stopped_by_sigterm_says_so(tmp_path):
    """``timeout plga verify``: before, SIGTERM killed it without a word (exit −15)."""
    import os
    import signal

    (tmp_path / "loaded.py").write_text(textwrap.dedent("""
        import pathlib
        from plga.kernels import plga_attention as fn
        pathlib.Path("LOADED").write_text("")
    """))
    proc = subprocess.Popen([PLGA, "verify", "--impl", "loaded:fn"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PLGA_NO_PROGRESS": "1"})
    deadline = time.monotonic() + 120
    while not (tmp_path / "LOADED").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into its parts
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)  # as `timeout` does: ignored
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "plga verify: interrupted", out[-2000:] + err[-2000:]


def test_a_nested_watch_keeps_a_stop_the_outer_one_recorded():
    """A stop whose KeyboardInterrupt was swallowed (in CI: by a gc callback during plga verify's
    theorem part) stays recorded when check_kernel opens its own watch (before: cleared, and
    plga verify ran on to PASS, exit 0)."""
    import os
    import signal

    from plga.conformance.guard import user_interrupted, watch_user_interrupt

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with watch_user_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                pass  # swallowed
            with watch_user_interrupt():
                assert user_interrupted()
        with watch_user_interrupt():  # a new outermost watch starts afresh
            assert not user_interrupted()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_repeated_stop_signal_is_ignored_while_the_run_stops():
    """The first SIGTERM stops the run (KeyboardInterrupt); one more while it stops and reports
    is ignored, where it would have raised again mid-report (or, after the watch, killed the
    process); the handlers are restored after the watch, and a stopped command ignores them
    while it exits."""
    import os
    import signal

    from plga.conformance.guard import user_interrupted, watch_user_interrupt

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for ignore_after_stop in (False, True):
            with watch_user_interrupt(ignore_after_stop=ignore_after_stop):
                with pytest.raises(KeyboardInterrupt):
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)
                assert user_interrupted()
                os.kill(os.getpid(), signal.SIGTERM)  # handled at once, on this thread: ignored
                time.sleep(0.01)
            after = {sig: signal.getsignal(sig) for sig in before}
            assert after == (dict.fromkeys(before, signal.SIG_IGN) if ignore_after_stop else before)
        for sig, handler in before.items():  # a watch without a stop hands back what it found
            signal.signal(sig, handler)
        with watch_user_interrupt(ignore_after_stop=True):
            pass
        assert {sig: signal.getsignal(sig) for sig in before} == before
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_stop_whose_interrupt_was_swallowed_still_stops_the_run():
    """The KeyboardInterrupt of a SIGTERM can land where it is swallowed (a gc callback, a kernel
    that catches it) and later signals are ignored: the run stops before its next check, with
    the checks that finished, and never returns a verdict as if nothing were asked."""
    import os
    import signal

    import plga.kernels as K
    from plga.conformance import check_kernel
    from plga.conformance.runner import ConformanceInterrupted

    calls = [0]

    def swallows_the_stop(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
        calls[0] += 1
        if calls[0] == 3:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                pass
        return K.plga_attention(q, k, v, G, causal=causal, key_padding_mask=key_padding_mask, scale=scale)

    with pytest.raises(ConformanceInterrupted) as stop:
        check_kernel(swallows_the_stop, keyword="attention and float32", profile="quick")
    report = stop.value.report
    assert report.verdict == "INTERRUPTED" and report.exit_code == 130
    assert len(report.results) == 1 < report.planned  # the check that swallowed it finished; none after


def test_a_stopped_run_keeps_a_failure_and_never_passes():
    """The verdict of a run stopped early: FAIL if a check failed (final), else INTERRUPTED —
    also when every check that ran passed or none ran."""
    from plga.conformance.runner import VERDICTS, CheckResult, ConformanceReport

    ok, bad = (CheckResult("attention_causal", "float32", "attention", s) for s in ("passed", "failed"))
    assert ConformanceReport("k", "quick", [ok]).verdict == "PASS"  # the same results, not stopped
    for results, verdict in (([ok], "INTERRUPTED"), ([], "INTERRUPTED"), ([ok, bad], "FAIL")):
        report = ConformanceReport("k", "quick", results, planned=9)
        assert report.verdict == verdict and report.exit_code == VERDICTS[verdict] and not report.passed
        assert f"{len(results)} of 9 checks ran before the stop" in report.verdict_line()
    assert VERDICTS["INTERRUPTED"] == 130


def test_nothing_verified_is_not_a_pass(kernel_dir):
    r = _plga("--impl", "mykern:nothing", cwd=kernel_dir)
    assert r.returncode == 1, r.stdout[-2000:]
    assert r.stdout.splitlines()[0].startswith("plga conformance: NOTHING VERIFIED") and "no check ran" in r.stdout


def test_same_seed_same_verdict_and_the_seed_is_printed(kernel_dir):
    args = ("--impl", "plga.conformance.broken:causal_off_by_one", "-k", "attention_causal and float32", "--no-shrink")
    a, b = (_plga(*args, "--seed", "7", cwd=kernel_dir) for _ in range(2))
    c = _plga(*args, "--seed", "8", cwd=kernel_dir)
    assert a.returncode == b.returncode == c.returncode == 1
    strip = lambda out: [ln for ln in out.splitlines() if " s)" not in ln and "s, " not in ln]  # noqa: E731 — drop timings
    assert strip(a.stdout) == strip(b.stdout)
    assert "seed 7" in a.stdout.splitlines()[0] and "seed 8" in c.stdout.splitlines()[0]


def test_usage_errors_of_the_options(kernel_dir, capsys):
    assert conformance_main(["--impl", "reference", "-k", "no_check_has_this_name"]) == 2
    assert "no check matches" in capsys.readouterr().err
    assert conformance_main(["--impl", "reference", "--check-timeout", "-1"]) == 2


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("vectors")
    assert conformance_main(["--write-vectors", str(out)]) == 0
    return out


def test_vectors_are_complete_and_self_consistent(vectors):
    index = json.loads((vectors / "index.json").read_text())
    assert index["format"] == "plga-conformance-vectors" and index["format_version"] == 2
    entries = [c for c in index["cases"] if "skipped" not in c]
    assert {c["case"] for c in entries} >= {"sdpa_identity", "sentinel_g", "finite_mask_empty_rows", "chain_small"}
    for c in entries:
        meta = json.loads((vectors / c["json"]).read_text())
        blob = (vectors / meta["tensors"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == meta["sha256"]
        for key in ("spec_version", "dtype", "tolerance", "seed", "outputs", "expected_source"):
            assert key in meta
        if meta["dtype"] == "bfloat16":
            q = load_file(str(vectors / meta["tensors"]))["q" if meta["kind"] == "attention" else "q_rot"]
            assert np.array_equal(torch.from_numpy(q).bfloat16().float().numpy(), q)  # exactly representable
    assert not list(vectors.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_kernels_reproduce_the_attention_vectors(vectors):
    import plga.kernels as K

    for js in sorted(vectors.glob("*.json")):
        meta = json.loads(js.read_text())
        if meta.get("kind") != "attention":
            continue
        t = load_file(str(vectors / meta["tensors"]))
        dt = getattr(torch, meta["dtype"])
        q, k, v, g = (torch.from_numpy(t[n]).to(dt) if n in t else None for n in ("q", "k", "v", "G"))
        pad = torch.from_numpy(t["key_padding_mask"]) if "key_padding_mask" in t else None
        inp = meta["inputs"]
        out = K.plga_attention(q, k, v, g, causal=inp["causal"], key_padding_mask=pad,
                               scale=inp["scale"], finite_mask=inp["finite_mask"])
        check_vector(js, {"expected": out.double().numpy()})


def _vector_inputs(vectors, stem):
    js = vectors / f"{stem}.json"
    meta = json.loads(js.read_text())
    t = load_file(str(vectors / meta["tensors"]))
    q, k, v, g = (torch.from_numpy(t[n]).double() if n in t else None for n in ("q", "k", "v", "G"))
    pad = torch.from_numpy(t["key_padding_mask"]) if "key_padding_mask" in t else None
    return js, meta, (q, k, v, g), pad


@pytest.mark.parametrize("dclass", ["float32", "bfloat16"])
def test_a_vector_rejects_a_wrong_shape_and_judges_rows_without_a_key_apart(vectors, dclass):
    """An outside audit: a one-element output passed finite_mask_empty_rows (no shape check,
    the difference broadcast), and with one bound for the whole case — of the order of the
    outputs, set by the rows without a key, uniform below float64 where the float64 truth kept
    softmax(s) — G transposed, the ideal mask and a 10 % scale passed too. Those rows' queries
    are now zero (uniform in every precision) and judged against their own bound."""
    import plga.kernels as K

    js, meta, (q, k, v, g), pad = _vector_inputs(vectors, f"finite_mask_empty_rows.{dclass}")
    tol = meta["tolerance"]
    expected = load_file(str(vectors / meta["tensors"]))["expected"]
    # those rows' queries are zero (equal scores: uniform in every precision), so their bound is
    # a rounding bound too, not one of the order of the outputs
    assert tol["rows_without_key"]["bound"] < 0.1 * np.abs(expected).max()
    inp = meta["inputs"]
    kw = dict(causal=inp["causal"], key_padding_mask=pad, scale=inp["scale"])
    dt = getattr(torch, dclass)
    right = K.plga_attention(q.to(dt), k.to(dt), v.to(dt), g.to(dt), finite_mask=True, **kw).double().numpy()
    check_vector(js, {"expected": right})
    with pytest.raises(AssertionError, match="shape"):
        check_vector(js, {"expected": right[:1, :1, :1, :1]})
    wrong = {
        "G transposed": K.plga_attention(q, k, v, g.transpose(-1, -2), finite_mask=True, **kw),
        "ideal mask": K.plga_attention(q, k, v, g, finite_mask=False, **kw),
    }
    if dclass == "float32":  # below bfloat16's resolution of these outputs (its bound is 4 % of them)
        wrong["scale 10 % off"] = K.plga_attention(q, k, v, g, finite_mask=True, **{**kw, "scale": 1.1 / math.sqrt(q.shape[-1])})
    for what, out in wrong.items():
        with pytest.raises(AssertionError, match="max error"):
            check_vector(js, {"expected": out.double().numpy()})
            pytest.fail(f"{what} passed the {dclass} vector")


def test_docs_state_the_code_numbers():
    text = (DOCS / "conformance.md").read_text()
    assert f"| `quick` | {profiles.PROFILES['quick']} " in text
    assert f"| `ci` | {profiles.PROFILES['ci']} " in text
    assert f"| `thorough` | {profiles.PROFILES['thorough']} " in text
    assert f"seed {profiles.DEFAULT_SEED}" in text
    for name, limit in profiles.CHECK_TIMEOUT.items():
        assert f"{name} {limit:g} s" in text
    from plga.conformance.broken import BROKEN
    from plga.conformance.controls import CONTROLS

    for name, b in BROKEN.items():
        assert f"| `{name}` |" in text and f"`{b.expected_check}` |" in text
    for name in CONTROLS:
        assert f"`{name}`" in text, f"docs/conformance.md does not list the control {name}"
    wrong, right = sum(not c.correct for c in CONTROLS.values()), sum(c.correct for c in CONTROLS.values())
    readme = (DOCS.parent / "README.md").read_text()
    assert f"on {wrong} deliberately\nwrong kernels" in readme and f"on {right} correct" in readme, "README's control counts"
    from plga.conformance.checks import CHECKS

    for name in CHECKS:
        assert f"`{name}`" in text, f"docs/conformance.md does not list the check {name}"
    assert "../shared" not in text
    assert (DOCS / "vectors.md").exists()


def test_xfails_file_needs_reasons(tmp_path):
    good = tmp_path / "xfails.txt"
    good.write_text("# comment\ntest_chain[operator_chain-bfloat16]  # bf16 chain not tuned yet\n\n")
    assert read_xfails(str(good)) == [("test_chain[operator_chain-bfloat16]", "bf16 chain not tuned yet")]
    bad = tmp_path / "bad.txt"
    bad.write_text("test_chain\n")
    with pytest.raises(UsageError, match="needs a reason"):
        read_xfails(str(bad))


def test_verify_counts_nothing_verified_as_a_failure(kernel_dir, monkeypatch, capsys):
    import argparse

    import plga.proofs_bridge as pb
    from plga.conformance.verify import add_verify_arguments, verify_main

    monkeypatch.syspath_prepend(str(kernel_dir))
    monkeypatch.setattr(pb, "run_all", lambda max_examples: [])  # the theorem part is not under test here
    monkeypatch.setattr(pb, "summary", lambda results: {"passed": 0, "theorems": 0, "derived": 0, "proved_symbolically": 0,
                                                       "algebraic_identities": 0})
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    assert verify_main(parser.parse_args(["--impl", "mykern:nothing", "--json"])) == 1
    rows = {r["check"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["conformance"]["ok"] is False and "nothing verified" in rows["conformance"]["detail"]


def test_verify_shows_a_group_where_nothing_ran_as_skipped(monkeypatch, capsys, theorem_part_passes):
    """An attention-only kernel: its chain group ran nothing, which is a SKIP row, never a PASS
    (negative control: before, a row passed whenever nothing had failed)."""
    import argparse

    from plga.conformance.verify import add_verify_arguments, verify_main

    rows = [{"group": "attention", "implementation": "k", "passed": 5, "failed": 0, "errors": 0, "skipped": 0, "seconds": 1.0, "failures": [], "raised": []},
            {"group": "chain", "implementation": "k", "passed": 0, "failed": 0, "errors": 0, "skipped": 1, "seconds": 0.0, "failures": [], "raised": []}]
    from plga.conformance import runner

    # the at-scale part (groups given) finds nothing to run
    monkeypatch.setattr(runner, "quick_summary", lambda adapter, groups=None, **kw: rows if groups is None else [])
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    assert verify_main(parser.parse_args(["--jobs", "2"])) == 0
    out = capsys.readouterr().out.splitlines()
    chain = next(line for line in out if line.startswith("conformance: chain"))
    assert " SKIP " in chain and " PASS " not in chain
    assert out[0].startswith("plga verify: PASS") and "1 skipped: nothing ran" in out[0]
    # the seconds of checks run side by side add up to more than the wall time: the table says so
    assert "(a conformance row's seconds are its checks' times added up; they ran side by side in 2 worker processes)" in out
    assert verify_main(parser.parse_args(["--jobs", "0"])) == 0
    assert not any("side by side" in line for line in capsys.readouterr().out.splitlines())
