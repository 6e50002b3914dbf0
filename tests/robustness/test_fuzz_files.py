"""Fuzz every reader of a user file with damaged copies of good files.

Each example takes a good file (a ``.pth``, a ``.safetensors`` folder, a ``config.json``, token
files in JSON, ``.npy`` and ``.npz``, operator files) and damages it: flipped bytes, a cut, an
inserted run, a region overwritten with a byte repeated. The contract: the reader returns, or
raises a :class:`plga.errors.PlgaError` whose message names the file; nothing else escapes
(no ``IndexError``, ``OverflowError``, ``RecursionError``, torch or zip errors), and every
example finishes within :data:`LIMIT_S` seconds (a SIGALRM guard).
"""

from __future__ import annotations

import io
import json
import signal
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plga import inputs
from plga.errors import PlgaError
from plga.reference.checkpoint import (
    load_checkpoint,
    load_collapsed,
    random_params,
    save_safetensors,
)
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch", reason="the .pth seeds are written with torch")
pytest.importorskip("safetensors")

CONFIG = PLDRConfig.from_name("tiny")
PARAMS = random_params(CONFIG, seed=0)
LIMIT_S = 20
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def _pth_bytes() -> bytes:
    buf = io.BytesIO()
    torch.save({"model_state_dict": {k: torch.as_tensor(v) for k, v in PARAMS.items()}}, buf)
    return buf.getvalue()


def _npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy_bytes(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


G = np.broadcast_to(np.eye(8), (1, 2, 8, 8)).copy()
SEEDS = {
    "model.pth": _pth_bytes(),
    "config.json": json.dumps(CONFIG.to_upstream()).encode(),
    "tokens.json": b"[[3, 17, 5, 29, 8], [1, 2, 3, 4, 5]]",
    "tokens.npy": _npy_bytes(np.array([[3, 17, 5]])),
    "tokens.npz": _npz_bytes(tokens=np.array([[3, 17, 5]])),
    "g.npz": _npz_bytes(G_LM=G),
    "g.npy": _npy_bytes(G),
}


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """``data`` with one to three damages."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "smear"]))
        at = draw(st.integers(0, max(0, len(out) - 1)))
        if kind == "flip":
            if out:
                out[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            out = out[:at] + out[at + draw(st.integers(1, 64)):] if draw(st.booleans()) else out[:at]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=32))
        else:
            byte = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80]))
            n = draw(st.integers(1, 16))
            out[at:at + n] = bytes([byte]) * n
    return bytes(out)


class _TooSlow(BaseException):
    pass


def _alarm(signum, frame):
    raise _TooSlow


def check_reader(path: Path, read) -> None:
    """``read(path)`` returns or raises a PlgaError naming the file, within LIMIT_S seconds and
    without a warning (the CLI would print it as a second line)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            read(path)
        except PlgaError as exc:
            message = str(exc)
            assert path.name in message and "\n" not in message.strip(), message
        except _TooSlow:
            pytest.fail(f"reading a damaged {path.name} ran longer than {LIMIT_S} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    assert not caught, [str(w.message) for w in caught]


READERS = {
    "model.pth": lambda p: load_checkpoint(p, max_seq_len=64),
    "config.json": PLDRConfig.from_json,
    "tokens.json": inputs.load_tokens,
    "tokens.npy": inputs.load_tokens,
    "tokens.npz": inputs.load_prompts,
    "g.npz": lambda p: inputs.load_operators(str(p), CONFIG),
    "g.npy": lambda p: inputs.load_operators(str(p), CONFIG),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_damaged_copies_of_good_files(tmp_path, name):
    read = READERS[name]
    path = tmp_path / name
    path.write_bytes(SEEDS[name])
    read(path)  # negative control: the undamaged seed reads

    @FUZZ
    @given(data=damaged(SEEDS[name]))
    def fuzz(data):
        path.write_bytes(data)
        check_reader(path, read)

    fuzz()


@pytest.mark.parametrize("collapsed", [False, True], ids=["model", "collapsed"])
def test_damaged_safetensors_folders(tmp_path, collapsed):
    from plga.reference.checkpoint import COLLAPSED_KEY, is_learner_key

    folder = tmp_path / "model"
    if collapsed:
        state = {k: v for k, v in PARAMS.items() if not is_learner_key(k)} | {COLLAPSED_KEY: G.astype(np.float32)}
        save_safetensors(state, CONFIG, folder, collapsed=True)
    else:
        save_safetensors(PARAMS, CONFIG, folder)
    read = load_collapsed if collapsed else load_checkpoint
    read(folder)  # negative control
    seeds = {name: (folder / name).read_bytes() for name in ("model.safetensors", "config.json")}

    @FUZZ
    @given(name=st.sampled_from(sorted(seeds)), data=st.data())
    def fuzz(name, data):
        for other, raw in seeds.items():
            (folder / other).write_bytes(raw)
        (folder / name).write_bytes(data.draw(damaged(seeds[name])))
        check_reader(folder / name, lambda _: read(folder))

    fuzz()


def test_damaged_zip_directories(tmp_path):
    """Zip-level damage aimed at the directory: the end record's counts and offsets."""
    seed = SEEDS["model.pth"]
    end = seed.rfind(b"PK\x05\x06")
    assert end > 0 and zipfile.is_zipfile(io.BytesIO(seed))

    @FUZZ
    @given(offset=st.integers(0, 21), value=st.integers(0, 255), cut=st.booleans())
    def fuzz(offset, value, cut):
        raw = bytearray(seed)
        raw[end + offset] = value
        path = tmp_path / "model.pth"
        path.write_bytes(bytes(raw[: end + offset + 1]) if cut else bytes(raw))
        check_reader(path, lambda p: load_checkpoint(p, max_seq_len=64))

    fuzz()


def test_damaged_pickles_in_valid_archives(tmp_path):
    """Damage inside ``data.pkl`` with the archive rewritten around it (valid CRC-32s), so the
    pickle scan and ``torch.load(weights_only=True)`` see it rather than the CRC check."""
    with zipfile.ZipFile(io.BytesIO(SEEDS["model.pth"])) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    pkl = next(name for name in members if name.endswith("data.pkl"))
    path = tmp_path / "model.pth"

    @FUZZ
    @given(data=damaged(members[pkl]))
    def fuzz(data):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for name, raw in members.items():
                z.writestr(name, data if name == pkl else raw)
        check_reader(path, lambda p: load_checkpoint(p, max_seq_len=64))

    fuzz()


def test_the_fuzz_harness_has_teeth(tmp_path):
    """Negative controls: check_reader fails on a stray exception, an unnamed file, a warning."""
    import warnings as w

    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(IndexError):
        check_reader(path, lambda p: [][0])
    with pytest.raises(AssertionError):
        check_reader(path, lambda p: (_ for _ in ()).throw(PlgaError("no file named")))
    with pytest.raises(AssertionError):
        check_reader(path, lambda p: w.warn("a second line", stacklevel=1))
    check_reader(path, lambda p: None)
