"""Fuzz the ``plga`` console script with Hypothesis-generated argument vectors.

Subcommands are discovered from ``plga.cli.build_parser()``; each one's arguments (options,
positionals, types, choices) drive the strategies, so new subcommands are fuzzed as soon as
they exist. Contract checked on every example:

- nothing but ``SystemExit`` escapes ``plga.cli.main``;
- a non-zero exit prints exactly one line on stderr (Python warnings included, as a real
  process would print them).

Only the fast subcommands (:data:`RUN`) are run to completion, on a tiny checkpoint and junk
files. Every other subcommand (audit, theorems, and whatever is added later: conformance,
verify, bench) gets at least one invalid argument in every example, so only its argument
parsing is fuzzed and no long run can start. A SIGALRM guard fails an example that runs past
:data:`LIMIT_S` seconds. Budget: ≤ 40 examples per subcommand (~10 s on two cores).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from plga import cli

#: Subcommands that finish in well under a second on the tiny model: run to completion.
RUN = ("check-sdpa", "forward", "generate")
#: Wall-clock guard of one example.
LIMIT_S = 30
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand of ``plga`` (aliases collapsed) → its parser."""
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen: dict[int, str] = {}
    for name, sub in action.choices.items():
        seen.setdefault(id(sub), name)
    return {name: action.choices[name] for name in seen.values()}


SUBCOMMANDS = subcommands()


# --- the file pool ---------------------------------------------------------------------------


def _make_pool(root: Path) -> dict[str, str]:
    """Inputs, good and bad, written once; outputs are relative names in the working folder."""
    from plga.reference.checkpoint import random_params, save_safetensors
    from plga.reference.config import PLDRConfig

    config = PLDRConfig.from_name("tiny")  # vocab 37, context 64
    params = random_params(config, seed=0)
    files: dict[str, str] = {}

    def put(name: str, data: bytes | str) -> None:
        path = root / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        files[name] = str(path)

    save_safetensors(params, config, root / "tiny")
    files["tiny"] = str(root / "tiny")
    files["tiny.safetensors"] = str(root / "tiny" / "model.safetensors")
    put("empty.pth", b"")
    put("junk.bin", bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8)))
    put("tokens.json", "[[3, 17, 5, 29, 8]]")
    put("tokens_bad.json", "[[1, 2")
    put("tokens_ragged.json", "[[1, 2], [3]]")
    put("tokens_oob.json", "[[1, 999]]")
    put("tokens_neg.json", "[[-4, 1]]")
    put("tokens_float.json", "[[1.5, 2]]")
    put("tokens_empty.json", "[[]]")
    put("tokens_obj.json", '{"a": 1}')
    put("tokens_long.json", json.dumps([[1] * 100]))
    put("tokens_pad.json", "[[0, 0, 0], [0, 4, 5]]")
    put("text.txt", "hello world\nsecond line\n")
    put("config_list.json", "[1, 2]")
    put("config_tiny.json", json.dumps(config.to_upstream()))
    put("config_other.json", json.dumps(config.to_upstream() | {"num_heads": 4}))
    np.save(root / "tokens.npy", np.array([[3, 4, 5]]))
    files["tokens.npy"] = str(root / "tokens.npy")
    np.save(root / "tokens_f.npy", np.array([[3.0, 4.0]]))
    files["tokens_f.npy"] = str(root / "tokens_f.npy")
    np.save(root / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files["objects.npy"] = str(root / "objects.npy")
    np.savez(root / "g.npz", G_LM=np.broadcast_to(np.eye(8), (1, 2, 8, 8)))
    files["g.npz"] = str(root / "g.npz")
    np.savez(root / "g_bad.npz", G_LM=np.zeros((3, 3)))
    files["g_bad.npz"] = str(root / "g_bad.npz")
    np.savez(root / "g_nan.npz", G_LM=np.full((1, 2, 8, 8), np.nan))
    files["g_nan.npz"] = str(root / "g_nan.npz")
    put("tokens_deep.json", "[" * 10**5 + "]" * 10**5)
    put("tokens_huge_id.json", "[[1, 100000000000000000000000000000]]")
    with open(root / "huge_header.npy", "wb") as fh:  # declares 10^12 ids, holds none
        np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
    files["huge_header.npy"] = str(root / "huge_header.npy")
    np.savez(root / "npz_named.npz", np.array([[3, 4, 5]]))
    (root / "npz_named.npz").rename(root / "npz_named.npy")
    files["npz_named.npy"] = str(root / "npz_named.npy")
    np.save(root / "g_empty.npy", np.zeros((1, 2, 0, 0)))
    files["g_empty.npy"] = str(root / "g_empty.npy")
    if Path("/dev/zero").exists():
        (root / "zero_link.json").symlink_to("/dev/zero")
        files["zero_link.json"] = str(root / "zero_link.json")
    (root / "a_dir").mkdir()
    files["a_dir"] = str(root / "a_dir")
    files["missing"] = str(root / "does_not_exist.pth")
    return files


_ROOT = Path(tempfile.mkdtemp(prefix="plga-fuzz-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
POOL = _make_pool(_ROOT)
INPUTS = sorted(POOL.values())
OUTPUTS = ["out.npz", "sub/out.npz", "", POOL["a_dir"], "/nonexistent-dir/out.npz", POOL["tiny"] + "/out.npz"]

#: Free text values: relative names only (no separators or parent links), never a flag.
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\\\x00"), max_size=12
).filter(lambda t: t not in (".", "..") and not t.startswith("-"))


#: Plausible values by destination, so that most examples of the run subcommands get past
#: argument parsing and exercise the loaders, the models and the writers.
SANE: dict[str, st.SearchStrategy[str]] = {
    "checkpoint": st.sampled_from([POOL["tiny"], POOL["tiny.safetensors"]]),
    "tokens": st.sampled_from([POOL["tokens.json"], POOL["tokens.npy"], POOL["tokens_pad.json"]]),
    "config": st.sampled_from([POOL["config_tiny.json"]]),
    "constant_g": st.sampled_from([POOL["g.npz"], "identity", "random:1"]),
    "max_new_tokens": st.integers(0, 6).map(str),
    "max_seq_len": st.just("64"),
    "seed": st.integers(0, 3).map(str),
    "top_k": st.integers(0, 5).map(str),
    "dps": st.integers(16, 40).map(str),
    "temperature": st.sampled_from(["0", "0.7", "1.0", "1.5"]),
    "top_p": st.sampled_from(["1.0", "0.9", "0.5", "1e-6"]),
    "out": st.sampled_from(["out.npz", "sub/out.npz"]),
}


def _value(action: argparse.Action, sane: bool) -> st.SearchStrategy[str]:
    """One command-line value for ``action``: plausible when ``sane``, else valid and invalid mixed."""
    if action.dest == "device":
        return st.just("cpu")  # other devices: test_bad_torch_device_is_one_line (a known defect)
    if sane and action.choices is not None:
        return st.sampled_from(list(map(str, action.choices)))
    if sane and action.dest in SANE:
        return SANE[action.dest]
    if action.choices is not None:
        return st.sampled_from([*map(str, action.choices), "", "not-a-choice"])
    if action.type is int:
        return st.one_of(
            st.integers(-3, 70).map(str),
            st.sampled_from(["-1", "0", "1e3", "x", "", "1.5", "99999999999999999999"]),
        )
    if action.type is float:
        return st.one_of(
            st.floats(-1e3, 1e3).map(repr),
            st.sampled_from(["nan", "inf", "-inf", "0", "1", "1e308", "abc", ""]),
        )
    if action.dest in ("out", "output", "out_dir"):
        return st.sampled_from(OUTPUTS)
    return st.one_of(st.sampled_from(INPUTS), TEXT)


def _nargs(action: argparse.Action) -> st.SearchStrategy[int]:
    n = action.nargs
    if n is None:
        return st.just(1)
    if isinstance(n, int):
        return st.just(n)
    return {"?": st.integers(0, 1), "*": st.integers(0, 2), "+": st.integers(1, 2)}.get(n, st.just(1))


def _usable(action: argparse.Action) -> bool:
    return not isinstance(action, (argparse._HelpAction, argparse._VersionAction))


def _invalid_tokens(sub: argparse.ArgumentParser) -> list[list[str]]:
    """Arguments that argparse must reject for ``sub``: one is added to every heavy example."""
    out = [["--zz-no-such-option"], ["--zz-no-such-option", "1"]]
    for a in sub._actions:
        if a.option_strings and a.type in (int, float):
            out.append([a.option_strings[-1], "not-a-number"])
        if a.option_strings and a.choices is not None:
            out.append([a.option_strings[-1], "not-a-choice"])
    return out


#: True three times in four (and True when shrunk): keeps most examples well-formed.
MOSTLY = st.sampled_from([True, True, True, False])


@st.composite
def argvs(draw, name: str) -> list[str]:
    sub = SUBCOMMANDS[name]
    actions = [a for a in sub._actions if _usable(a)]
    argv = [name]
    def value(a: argparse.Action) -> str:
        return draw(_value(a, sane=draw(MOSTLY)))

    for a in actions:
        if not a.option_strings:  # positional
            for _ in range(draw(_nargs(a))):
                argv.append(value(a))
    options = [a for a in actions if a.option_strings]
    chosen = draw(st.lists(st.sampled_from(options), unique_by=id, max_size=len(options))) if options else []
    for a in options:  # required options: present in most examples so the run gets past parsing
        if a.required and a not in chosen and draw(MOSTLY):
            chosen.append(a)
    for a in chosen:
        argv.append(draw(st.sampled_from(a.option_strings)))
        for _ in range(draw(_nargs(a))):
            argv.append(value(a))
    if name not in RUN:
        bad = draw(st.sampled_from(_invalid_tokens(sub)))
        position = draw(st.integers(1, len(argv)))  # anywhere after the subcommand
        argv[position:position] = bad
    elif not draw(MOSTLY):
        argv.append(draw(st.sampled_from(["--zz-no-such-option", "extra", "-", "--"])))
    return argv


# --- running main in-process -----------------------------------------------------------------


class _TooSlow(BaseException):
    """Raised by the SIGALRM guard; a BaseException so no ``except Exception`` swallows it."""


def _alarm(signum, frame):
    raise _TooSlow


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """``plga.cli.main(argv)`` in the fuzz folder → (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        os.chdir(_ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(m, c, f, n, line)
            )
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code
    except _TooSlow:
        pytest.fail(f"plga {' '.join(argv)!r} ran longer than {LIMIT_S} s (a long run started)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message") prints the message, exits 1
        err.write(f"{code}\n")
        code = 1
    return code, out.getvalue(), err.getvalue()


def check_contract(argv: list[str]) -> int:
    code, _, err = run_main(argv)
    if code != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1, f"plga {argv!r} exited {code} with stderr of {len(lines)} lines:\n{err}"
        assert lines[0].strip(), f"plga {argv!r} exited {code} with an empty error line"
    return code


@pytest.fixture(scope="module", autouse=True)
def _warm_imports():
    """Import the heavy modules once so that no example pays (or is interrupted in) an import."""
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401

        import plga.kernels  # noqa: F401
    yield


def test_every_subcommand_is_discovered():
    assert {"check-sdpa", "forward", "generate", "audit"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_fuzz_subcommand(name):
    @FUZZ
    @given(argv=argvs(name))
    def fuzz(argv):
        code = check_contract(argv)
        event(f"exit {code}")
        if name not in RUN:
            assert code != 0 or "-h" in argv or "--help" in argv, f"plga {argv!r} was expected to fail parsing"

    fuzz()


@FUZZ
@given(argv=st.lists(st.one_of(TEXT, st.sampled_from(["-h", "--version", "--zz", "-", *SUBCOMMANDS])), max_size=4))
def test_fuzz_top_level(argv):
    """Top-level argv ("--" is left out: it would turn any later token into a subcommand run)."""
    if any(a in SUBCOMMANDS for a in argv):
        argv = [*argv, "--zz-no-such-option"]  # parse errors only: no subcommand runs from here
    check_contract(argv)


# --- directed cases --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["forward", "{tiny}", "--tokens", "{tokens_oob.json}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{tokens_long.json}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{tokens_empty.json}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{tokens_float.json}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{objects.npy}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{tokens_f.npy}", "--out", "o.npz"],
        ["forward", "{junk.bin}", "--tokens", "{tokens.json}", "--out", "o.npz"],
        ["forward", "{empty.pth}", "--tokens", "{tokens.json}", "--out", "o.npz"],
        ["forward", "{tiny}", "--tokens", "{tokens.json}", "--out", "{a_dir}"],
        ["forward", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--config", "{config_list.json}"],
        ["forward", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--config", "{config_other.json}"],
        ["generate", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--max-new-tokens", "2", "--temperature", "nan", "--seed", "1"],
        ["generate", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--max-new-tokens", "2", "--temperature", "1", "--seed", "-1"],
        ["generate", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--max-new-tokens", "2", "--mode", "constant", "--constant-g", "{g_nan.npz}"],
        ["generate", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--max-new-tokens", "2", "--mode", "constant", "--constant-g", "{g_bad.npz}"],
        ["generate", "{tiny}", "--tokens", "{tokens.json}", "--out", "o.npz", "--max-new-tokens", "200"],
        ["generate", "{tiny}", "--tokens", "{tokens_pad.json}", "--out", "o.npz", "--max-new-tokens", "3", "--backend", "torch", "--top-p", "0"],
        ["audit", "{junk.bin}", "--out", "ao", "--no-plots", "--no-progress"],
        ["audit", "{missing}", "--out", "ao", "--no-plots", "--no-progress"],
        ["audit", "--operators", "{junk.bin}", "--out", "ao", "--no-plots"],
        ["audit", "--operators", "{g_bad.npz}", "--out", "ao", "--no-plots"],
    ],
    ids=lambda argv: " ".join(a.strip("{}") for a in argv)[:60],
)
def test_directed_errors_are_one_line(argv):
    argv = [POOL[a[1:-1]] if a.startswith("{") else a for a in argv]
    if argv[0] not in SUBCOMMANDS:
        pytest.skip(f"no subcommand {argv[0]}")
    code = check_contract(argv)
    assert code != 0, f"plga {argv!r} succeeded on a bad input"


@pytest.mark.parametrize("device", ["nonsense", "cuda:99"])
def test_bad_torch_device_is_one_line(device):
    pytest.importorskip("torch")
    argv = ["forward", POOL["tiny"], "--tokens", POOL["tokens.json"], "--out", "o.npz", "--backend", "torch",
            "--device", device]
    check_contract(argv)


def test_theorems_refuses_a_vacuous_success(tmp_path):
    assert check_contract(["theorems", "--formal-dir", str(tmp_path)]) == 2
    (tmp_path / "Plga").mkdir()
    assert check_contract(["theorems", "--formal-dir", str(tmp_path)]) == 2


def test_undecodable_config_names_the_file(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\xff\xfe\x00garbage")
    argv = ["forward", POOL["tiny"], "--tokens", POOL["tokens.json"], "--out", str(tmp_path / "o.npz"), "--config", str(junk)]
    assert check_contract(argv) == 2
