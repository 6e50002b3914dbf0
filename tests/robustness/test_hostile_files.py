"""Hostile and damaged files: bounded memory and time, one line naming the file.

Every hostile file is built here, in the test (nothing large is stored in the repository).
The memory cases run the loader in a child process under ``RLIMIT_AS`` (:data:`MEMORY_LIMIT`)
and a timeout, and require a one-line ``plga.errors`` refusal; each has a negative control:
the unguarded call (``torch.load``, ``np.load``, ``Path.read_text``) on the same file fails
under the same limit, so the test can tell a guard from luck.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy

from plga import inputs
from plga.errors import CheckpointError, DataFileError
from plga.reference.checkpoint import load_checkpoint, random_params, save_safetensors
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch", reason="the hostile .pth files are written with torch")
pytest.importorskip("safetensors")

CONFIG = PLDRConfig.from_name("tiny")  # 1 layer, 2 heads of d = 8, vocab 37, context 64
PARAMS = random_params(CONFIG, seed=0)
#: Address-space cap of the child processes: torch + plga take ~0.7 GiB of it, so ~1.3 GiB are
#: left; without torch, NumPy + plga take ~0.15 GiB of :data:`MEMORY_LIMIT_NUMPY`.
MEMORY_LIMIT = 2 << 30
MEMORY_LIMIT_NUMPY = 1 << 30
#: Zeros a decompression bomb expands to: more than the child has left under MEMORY_LIMIT.
BOMB_BYTES = 1536 << 20
TIMEOUT_S = 60


# --- child processes -------------------------------------------------------------------------


def run_limited(body: str, *, with_torch: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter capped at :data:`MEMORY_LIMIT` bytes of address space
    (:data:`MEMORY_LIMIT_NUMPY` without torch).

    ``body`` sets ``call`` to a zero-argument function; a ``PlgaError`` it raises is printed as
    ``REFUSED <class>: <message>`` (exit 0); anything else escapes as a traceback (exit 1).
    ``with_torch`` imports torch first (under the cap, as the CLI would).
    """
    code = textwrap.dedent("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        import numpy as np
        {torch}
        from plga.errors import PlgaError
    """).format(limit=MEMORY_LIMIT if with_torch else MEMORY_LIMIT_NUMPY, torch="import torch" if with_torch else "") + textwrap.dedent(body) + textwrap.dedent("""
        try:
            result = call()
        except PlgaError as exc:
            print(f"REFUSED {type(exc).__name__}: {exc}")
        else:
            print(f"RETURNED {type(result).__name__}")
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)


def assert_refused(result: subprocess.CompletedProcess[str], error: str, *needles: str) -> str:
    """The child refused with one line of class ``error`` holding every needle."""
    assert result.returncode == 0, f"the loader did not refuse cleanly (exit {result.returncode}):\n{result.stderr[-3000:]}"
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"REFUSED {error}: "), result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def assert_unguarded_fails(result: subprocess.CompletedProcess[str]) -> None:
    """Negative control: the unguarded reader ran out of memory (or was killed) under the cap."""
    assert result.returncode != 0, f"the unguarded call survived the memory cap: {result.stdout}"
    assert "REFUSED" not in result.stdout
    assert "MemoryError" in result.stderr or "memory" in result.stderr.lower() or result.returncode < 0, result.stderr[-2000:]


# --- hostile file builders -------------------------------------------------------------------


def _state(params=PARAMS) -> dict:
    return {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}


def _pth(path: Path, state: dict) -> Path:
    torch.save({"model_state_dict": state}, path)
    return path


def _deflated_zeros(archive: zipfile.ZipFile, name: str, head: bytes, n: int) -> None:
    """Write member ``name``: ``head`` then ``n`` zero bytes, deflated (a ~1000:1 bomb)."""
    with archive.open(name, "w", force_zip64=True) as fh:  # the archive's deflate, level 1
        fh.write(head)
        chunk = bytes(16 << 20)
        left = n
        while left:
            fh.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))


class _Storage:
    pass


_STORAGE = _Storage()


class _Tensor:
    """Pickles as a float32 tensor of ``n`` elements over :data:`_STORAGE` (a torch rebuild)."""

    def __init__(self, n):
        self.n = n

    def __reduce__(self):
        import collections

        return (torch._utils._rebuild_tensor_v2, (_STORAGE, 0, (self.n,), (1,), False, collections.OrderedDict()))


class _Pickler(pickle.Pickler):
    def __init__(self, fh, n):
        super().__init__(fh, protocol=2)
        self.n = n

    def persistent_id(self, obj):
        return ("storage", torch.FloatStorage, "0", "cpu", self.n) if obj is _STORAGE else None


@pytest.fixture(scope="module")
def pth_bomb(tmp_path_factory) -> Path:
    """A torch zip whose one tensor is 1.5 GiB of zeros stored deflated: a ~7 MB file."""
    import io

    folder = tmp_path_factory.mktemp("bomb")
    small = _pth(folder / "small.pth", {"w": torch.zeros(4)})
    n = BOMB_BYTES // 4
    pkl = io.BytesIO()
    _Pickler(pkl, n).dump({"model_state_dict": {"w": _Tensor(n)}})
    path = folder / "bomb.pth"
    with zipfile.ZipFile(small) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
        for info in zin.infolist():
            if info.filename.endswith("/data/0"):
                _deflated_zeros(zout, info.filename, b"", BOMB_BYTES)
            elif info.filename.endswith("data.pkl"):
                zout.writestr(info.filename, pkl.getvalue())
            else:
                zout.writestr(info.filename, zin.read(info))
    assert path.stat().st_size < 16 << 20
    return path


@pytest.fixture(scope="module")
def npz_bomb(tmp_path_factory) -> Path:
    """An .npz whose one int64 array declares and expands to 1.5 GiB of zeros (deflated)."""
    import io

    path = tmp_path_factory.mktemp("npzbomb") / "tokens.npz"
    head = io.BytesIO()
    npy.write_array_header_1_0(head, {"descr": "<i8", "fortran_order": False, "shape": (BOMB_BYTES // 8,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        _deflated_zeros(archive, "tokens.npy", head.getvalue(), BOMB_BYTES)
    return path


def _npy_declaring(path: Path, shape, descr="<i8", data=b"") -> Path:
    """A .npy whose header declares ``shape`` but that holds only ``data``."""
    with open(path, "wb") as fh:
        npy.write_array_header_1_0(fh, {"descr": descr, "fortran_order": False, "shape": shape})
        fh.write(data)
    return path


# --- 1. memory before validation -------------------------------------------------------------


def test_stride_zero_view_in_a_pth_is_refused_before_it_is_copied(tmp_path):
    """A 1.5 KB .pth holding ``torch.zeros(1).expand(2**31)``: 8 GiB once copied."""
    state = _state() | {"final_layer.bias": torch.zeros(1).expand(2**31)}
    path = _pth(tmp_path / "model.pth", state)
    assert path.stat().st_size < 1 << 20
    result = run_limited(f"""
        from plga.reference.checkpoint import load_checkpoint
        call = lambda: load_checkpoint({str(path)!r}, max_seq_len=64)
    """, with_torch=True)
    assert_refused(result, "CheckpointError", "model.pth", "final_layer.bias", "view repeating its data")
    control = run_limited(f"""
        def call():
            t = torch.load({str(path)!r}, weights_only=True)["model_state_dict"]["final_layer.bias"]
            return t.numpy().copy()
    """, with_torch=True)
    assert_unguarded_fails(control)


def test_overlapping_and_shared_views_are_bounded(tmp_path):
    """Views that overlap their storage, or many tensors over one storage, are refused; one
    tied pair (two tensors on one storage) is within the bound and loads."""
    base = torch.arange(16.0)
    state = _state() | {"final_layer.bias": base.as_strided((37,), (0,))}
    with pytest.raises(CheckpointError, match=r"model\.pth: 'final_layer\.bias' .* view repeating its data"):
        load_checkpoint(_pth(tmp_path / "model.pth", state))
    overlap = torch.arange(64.0).as_strided((37, 16), (1, 1))  # 592 floats over 64 stored
    with pytest.raises(CheckpointError, match="view repeating its data"):
        load_checkpoint(_pth(tmp_path / "o.pth", _state() | {"final_layer.weight": overlap}))
    shared = torch.randn(37, 16)
    many = {f"extra.{i}": shared for i in range(400)}
    with pytest.raises(CheckpointError, match="tensors share data"):
        load_checkpoint(_pth(tmp_path / "many.pth", _state() | many))
    tied = _state()
    tied["final_layer.weight"] = tied["decoder.embedding.weight"]
    params, _ = load_checkpoint(_pth(tmp_path / "tied.pth", tied), max_seq_len=64)
    np.testing.assert_array_equal(params["final_layer.weight"], params["decoder.embedding.weight"])


def test_deflate_bomb_pth_is_refused_unread(pth_bomb):
    result = run_limited(f"""
        from plga.reference.checkpoint import load_checkpoint
        call = lambda: load_checkpoint({str(pth_bomb)!r})
    """, with_torch=True)
    assert_refused(result, "CheckpointError", "bomb.pth", "is compressed", "torch.save never compresses")
    control = run_limited(f"""
        call = lambda: torch.load({str(pth_bomb)!r}, weights_only=True)
    """, with_torch=True)
    assert_unguarded_fails(control)


def test_deflate_bomb_npz_token_file_is_refused_unread(npz_bomb):
    result = run_limited(f"""
        from plga.inputs import load_tokens
        call = lambda: load_tokens({str(npz_bomb)!r})
    """)
    assert_refused(result, "DataFileError", "tokens.npz", "declares 1610612864 bytes of arrays", "decompression bomb")
    control = run_limited(f"""
        call = lambda: np.load({str(npz_bomb)!r})["tokens"]
    """)
    assert_unguarded_fails(control)


@pytest.mark.parametrize("shape", [(10**12,), (2**40,), (2**20, 2**20)], ids=["1e12", "2^40", "2^20-squared"])
def test_npy_header_declaring_a_huge_array_is_refused_unread(tmp_path, shape):
    path = _npy_declaring(tmp_path / "tokens.npy", shape, data=bytes(64))
    with pytest.raises(DataFileError, match=r"tokens\.npy declares \d+ ids; at most"):
        inputs.load_tokens(path)
    with pytest.raises(DataFileError, match=r"prompt file .*tokens\.npy declares"):
        inputs.load_prompts(path)
    result = run_limited(f"call = lambda: np.load({str(path)!r})")
    assert_unguarded_fails(result)


def test_npy_header_declaring_more_than_the_file_holds(tmp_path):
    """Within the id limit but longer than the file: refused before the data is read."""
    path = _npy_declaring(tmp_path / "tokens.npy", (1, 1000), data=np.arange(10, dtype="<i8").tobytes())
    with pytest.raises(DataFileError, match=r"declares \(1, 1000\) int64 \(8000 bytes\) but holds only 80"):
        inputs.load_tokens(path)


def test_npz_member_declaring_a_huge_operator_array(tmp_path):
    """An operator .npz whose G_LM declares 2^40 floats: refused by the shape the model needs."""
    path = tmp_path / "g.npz"
    with zipfile.ZipFile(path, "w") as archive, archive.open("G_LM.npy", "w") as fh:
        npy.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    with pytest.raises(DataFileError, match=r"g\.npz .*operators of shape \(1099511627776,\); the model needs \(1, 2, 8, 8\)"):
        inputs.load_operators(str(path), CONFIG)


def _devzero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_links_to_dev_zero_are_refused_unread(tmp_path):
    """Every reader of a user file: a link to /dev/zero is refused without reading it."""
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    (folder / "config.json").unlink()
    _devzero_link(folder / "config.json")
    zero = _devzero_link(tmp_path / "zero.json")
    body = f"""
        from plga import inputs
        from plga.reference.checkpoint import load_checkpoint, load_collapsed
        from plga.reference.config import PLDRConfig
        calls = [
            lambda: load_checkpoint({str(folder)!r}),
            lambda: load_collapsed({str(folder)!r}),
            lambda: load_checkpoint({str(_devzero_link(tmp_path / 'w.safetensors'))!r}),
            lambda: load_checkpoint({str(_devzero_link(tmp_path / 'w.pth'))!r}),
            lambda: PLDRConfig.from_json({str(zero)!r}),
            lambda: inputs.load_tokens({str(zero)!r}),
            lambda: inputs.load_prompts({str(zero)!r}),
            lambda: inputs.load_operators({str(_devzero_link(tmp_path / 'g.npz'))!r}, PLDRConfig.from_name("tiny")),
            lambda: inputs.sha256_file({str(zero)!r}),
        ]
        def call():
            for c in calls:
                try:
                    c()
                except PlgaError as exc:
                    assert "not a regular file" in str(exc), exc
                    print("refused:", exc, file=sys.stderr)
                else:
                    raise AssertionError("accepted a link to /dev/zero")
            raise PlgaError("all refused")
    """
    result = run_limited(body, with_torch=True)
    assert_refused(result, "PlgaError", "all refused")
    assert result.stderr.count("refused:") == 9, result.stderr
    control = run_limited(f"""
        from pathlib import Path
        call = lambda: Path({str(zero)!r}).read_text()
    """)
    assert_unguarded_fails(control)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    """Opening a FIFO with no writer blocks forever; it is refused from its stat alone."""
    pipe = tmp_path / "config.json"
    os.mkfifo(pipe)
    with pytest.raises(CheckpointError, match="not a regular file"):
        PLDRConfig.from_json(pipe)
    with pytest.raises(DataFileError, match="not a regular file"):
        inputs.load_tokens(pipe)


def test_text_files_larger_than_the_cap_are_refused_unread(tmp_path):
    """A sparse 17 MiB file: the size is refused from the stat, nothing is read."""
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(inputs.MAX_TEXT_BYTES + 1)
    with pytest.raises(CheckpointError, match=r"big\.json is 16777217 bytes; at most 16777216"):
        PLDRConfig.from_json(big)
    for reader in (inputs.load_tokens, inputs.load_prompts):
        with pytest.raises(DataFileError, match="at most 16777216"):
            reader(big)
    ok = tmp_path / "ok.json"
    with open(ok, "w") as fh:  # negative control: a file of exactly the cap is read
        fh.write("[[1]]" + " " * (inputs.MAX_TEXT_BYTES - 5))
    assert inputs.load_tokens(ok).tolist() == [[1]]


def test_the_audit_checksum_reads_only_regular_files(tmp_path):
    """The audit hashes every .json beside the weights: a link to /dev/zero never ended."""
    from plga.audit.runner import _resolve_model

    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    _devzero_link(folder / "notes.json")
    with pytest.raises(CheckpointError, match=r"notes\.json is not a regular file"):
        _resolve_model(folder, 0)
    (folder / "notes.json").unlink()
    _, _, meta = _resolve_model(folder, 0)  # negative control: without the link the audit hashes
    assert set(meta["sha256"]) == {"model.safetensors", "config.json"}


def test_zip_directories_listing_too_many_members_are_refused_unparsed(tmp_path):
    path = tmp_path / "many.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(inputs.MAX_ZIP_ENTRIES + 1):
            archive.writestr(f"a{i}.npy", b"")
    assert inputs.zip_entry_count(path, path.stat().st_size) == inputs.MAX_ZIP_ENTRIES + 1
    with pytest.raises(DataFileError, match=rf"zip archive of {inputs.MAX_ZIP_ENTRIES + 1} members"):
        inputs.load_tokens(path)


def test_too_many_ids_or_prompts_are_refused(tmp_path):
    """JSON within the 16 MiB cap can still list millions of ids or prompts: both are bounded."""
    n = inputs.MAX_TOKEN_IDS + 1
    (tmp_path / "ids.json").write_text("[" + ",".join(["1"] * n) + "]")
    with pytest.raises(DataFileError, match=rf"holds {n} ids; at most {inputs.MAX_TOKEN_IDS}"):
        inputs.load_tokens(tmp_path / "ids.json")
    (tmp_path / "prompts.txt").write_text("a\n" * (inputs.MAX_PROMPTS + 1))
    with pytest.raises(DataFileError, match=rf"holds {inputs.MAX_PROMPTS + 1} prompts; at most {inputs.MAX_PROMPTS}"):
        inputs.load_prompts(tmp_path / "prompts.txt")
    (tmp_path / "prompts.txt").write_text("a\n" * inputs.MAX_PROMPTS)  # negative control
    assert len(inputs.load_prompts(tmp_path / "prompts.txt")[1]) == inputs.MAX_PROMPTS


class _OrderedItems:
    """Pickles as ``collections.OrderedDict(items)`` without building (hashing) it here."""

    def __init__(self, items):
        self.items = items

    def __reduce__(self):
        import collections

        return (collections.OrderedDict, (self.items,))


def test_exponential_pickled_keys_are_refused_unbuilt(tmp_path):
    """A state-dict key that is a tuple of pairs shared 200 levels deep pickles in a few KB and
    expands to 2^200 nodes: building the dict hashes it whole, so ``torch.load`` never returns
    (observed: 2^22 nodes take 65 ms, doubling per level). The pickle's opcodes are walked
    first and the file refused; a key that is merely not a string is refused by type."""
    key = ()
    for _ in range(200):
        key = (key, key)
    items = [*_state().items(), (key, torch.zeros(1))]
    torch.save({"model_state_dict": _OrderedItems(items)}, tmp_path / "model.pth")
    assert (tmp_path / "model.pth").stat().st_size < 1 << 20
    result = run_limited(f"""
        from plga.reference.checkpoint import load_checkpoint
        call = lambda: load_checkpoint({str(tmp_path / "model.pth")!r})
    """, with_torch=True)
    assert_refused(result, "CheckpointError", "model.pth", "builds a tuple of more than 1048576 nodes")
    control = f"import torch; torch.load({str(tmp_path / 'model.pth')!r}, weights_only=True)"
    with pytest.raises(subprocess.TimeoutExpired):  # negative control: unguarded, it never returns
        subprocess.run([sys.executable, "-c", control], capture_output=True, timeout=10)
    small = [*_state().items(), ((1, 2), torch.zeros(1))]
    torch.save({"model_state_dict": _OrderedItems(small)}, tmp_path / "tuple_key.pth")
    with pytest.raises(CheckpointError, match=r"tuple_key\.pth: the state dict has 1 keys that are not strings \(a tuple\)"):
        load_checkpoint(tmp_path / "tuple_key.pth")


def test_operator_audit_files_are_read_within_bounds(tmp_path, npz_bomb):
    """The reader for ``plga audit --operators``: every operator array, or one by name; a bomb
    and arrays that are not operator stacks are refused before their data is read."""
    g = np.random.default_rng(1).standard_normal((2, 3, 4, 4))
    np.savez_compressed(tmp_path / "ops.npz", G_LM=g, eye=np.broadcast_to(np.eye(4), (1, 3, 4, 4)))
    got = inputs.load_operator_arrays(tmp_path / "ops.npz")
    with np.load(tmp_path / "ops.npz") as z:  # negative control: the same arrays as NumPy reads them
        assert set(got) == set(z.files) and all(np.array_equal(got[k], z[k]) for k in z.files)
    assert set(inputs.load_operator_arrays(tmp_path / "ops.npz", key="eye")) == {"eye"}
    with pytest.raises(DataFileError, match=r"has no array 'G'; it holds \['G_LM', 'eye'\]"):
        inputs.load_operator_arrays(tmp_path / "ops.npz", key="G")
    np.save(tmp_path / "one.npy", g[0])
    assert np.array_equal(inputs.load_operator_arrays(tmp_path / "one.npy")["G"], g[0])
    np.savez(tmp_path / "flat.npz", G=np.zeros(5))
    with pytest.raises(DataFileError, match=r"shape \(5,\); operators are"):
        inputs.load_operator_arrays(tmp_path / "flat.npz")
    with pytest.raises(DataFileError, match=r"tokens\.npz declares \d+ bytes of arrays .* decompression bomb"):
        inputs.load_operator_arrays(npz_bomb)


# --- 3. one line instead of a traceback ------------------------------------------------------


def test_deeply_nested_json_is_one_error(tmp_path):
    deep = "[" * 10**6 + "]" * 10**6
    (tmp_path / "tokens.json").write_text(deep)
    (tmp_path / "config.json").write_text('{"config": ' + deep + "}")
    with pytest.raises(DataFileError, match="nested too deeply"):
        inputs.load_tokens(tmp_path / "tokens.json")
    with pytest.raises(CheckpointError, match=r"config\.json is nested too deeply"):
        PLDRConfig.from_json(tmp_path / "config.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[1, 100000000000000000000000000000]]", r"must lie in \[0, 16777216\), got 1000"),
        ("[[1, -3]]", r"must lie in \[0, 16777216\), got -3"),
        ("[[1, " + "9" * 5000 + "]]", "nor valid JSON: Exceeds the limit"),
        ("[[1, NaN]]", "NaN is not a JSON number"),
        ("[[1, 2.0]]", "every id must be an integer, got float"),
        ("[[1, true]]", "every id must be an integer, got bool"),
        ("[[[1]]]", "every id must be an integer, got list"),
        ("[]", "list of ids or a non-empty list of lists"),
        ("[[]]", "holds no token ids"),
        ('{"a": 1}', "list of ids or a non-empty list of lists"),
    ],
    ids=["1e29", "negative", "5000-digits", "NaN", "float", "bool", "3-deep", "empty", "empty-row", "object"],
)
def test_bad_json_token_ids_are_one_error(tmp_path, text, message):
    path = tmp_path / "tokens.json"
    path.write_text(text)
    with pytest.raises(DataFileError, match=message):
        inputs.load_tokens(path)


def test_array_files_are_recognised_by_content(tmp_path):
    """An .npz named .npy (and a .npy named .json) reads as what it is; an .npz of several
    arrays without the expected name is one error listing them."""
    ids = np.array([[3, 4, 5]])
    np.savez(tmp_path / "t.npz", ids)
    (tmp_path / "t.npz").rename(tmp_path / "tokens.npy")
    assert inputs.load_tokens(tmp_path / "tokens.npy").tolist() == [[3, 4, 5]]
    assert inputs.load_prompts(tmp_path / "tokens.npy") == ([[3, 4, 5]], None)
    np.save(tmp_path / "p.npy", ids)
    (tmp_path / "p.npy").rename(tmp_path / "prompts.json")
    assert inputs.load_prompts(tmp_path / "prompts.json") == ([[3, 4, 5]], None)
    np.savez(tmp_path / "two.npz", a=ids, b=ids)
    (tmp_path / "two.npz").rename(tmp_path / "two.npy")
    with pytest.raises(DataFileError, match=r"two\.npy must hold an array named tokens, or exactly one array; it holds \['a', 'b'\]"):
        inputs.load_tokens(tmp_path / "two.npy")


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.array([[1.5, 2.0]]), "must hold integer token ids, got float64"),
        (np.array([[True]]), "must hold integer token ids, got bool"),
        (np.ones((1, 2, 3), dtype=np.int64), r"shape \[seq\] or \[batch, seq\], got \(1, 2, 3\)"),
        (np.array([[1, 2**40]]), r"must lie in \[0, 16777216\)"),
        (np.array([[1, 2**63 + 5]], dtype=np.uint64), r"must lie in \[0, 16777216\)"),
        (np.zeros((0, 3), dtype=np.int64), "holds no token ids"),
        (np.array([{"a": 1}], dtype=object), "only plain numeric arrays are read"),
        (np.zeros(2, dtype=[("a", "<i8")]), "only plain numeric arrays are read"),
    ],
    ids=["float", "bool", "rank-3", "huge-id", "uint64", "empty", "object", "structured"],
)
def test_bad_npy_token_arrays_are_one_error(tmp_path, array, message):
    path = tmp_path / "tokens.npy"
    np.save(path, array, allow_pickle=True)
    with pytest.raises(DataFileError, match=message):
        inputs.load_tokens(path)


def _npy_with_header(path: Path, body: str, version: bytes = b"\x01\x00") -> Path:
    """A .npy of the given header dictionary text (no data), padded as NumPy pads it."""
    import struct

    head = body.encode() + b" " * ((64 - (len(body) + 11) % 64) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY" + version + struct.pack("<H", len(head)) + head)
    return path


@pytest.mark.parametrize(
    ("body", "version", "message"),
    [
        ("{'descr': '<i8', 'fortran_order': False, 'shape': (-5,)}", b"\x01\x00", r"declares the negative shape \(-5,\)"),
        ("{'descr': '<i8', 'fortran_order': False, 'shape': (1.5,)}", b"\x01\x00", "not a readable .npy array"),
        ("{'descr': '<i8', 'fortran_order': False, 'shape': " + "(" * 3000 + ")" * 3000 + "}", b"\x01\x00", "not a readable .npy array"),
        ("{'descr': '|V99999999999', 'fortran_order': False, 'shape': (1,)}", b"\x01\x00", "not a readable .npy array"),
        ("{'descr': [('a', '<i8')], 'fortran_order': False, 'shape': (1,)}", b"\x01\x00", "only plain numeric arrays"),
        ("{'descr': '<U4', 'fortran_order': False, 'shape': (1,)}", b"\x01\x00", "must hold integer token ids, got <U4"),
        ("{'descr': '<i8', 'fortran_order': False, 'shape': (1,)}", b"\x09\x00", "unknown .npy format version"),
        ("not a dict", b"\x01\x00", "not a readable .npy array"),
        ("{'\\descr': '<i8', 'fortran_order': False, 'shape': (1,)}", b"\x01\x00", "not a readable .npy array"),
    ],
    ids=["negative", "float-dim", "nested-3000", "void-huge", "structured", "unicode", "version-9", "not-a-dict",
         "bad-escape"],
)
def test_hostile_npy_headers_are_one_error(tmp_path, body, version, message):
    """One error and nothing else: a warning would be a second line on the command line (the
    'bad-escape' header made Python warn "invalid escape sequence '\\d'" while NumPy parsed it)."""
    path = _npy_with_header(tmp_path / "tokens.npy", body, version)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DataFileError, match=message):
            inputs.load_tokens(path)
        with pytest.raises(DataFileError, match=r"tokens\.npy"):
            inputs.load_operators(str(path), CONFIG)
    assert not caught, [str(w.message) for w in caught]


def test_damaged_array_files_are_one_error(tmp_path):
    good = tmp_path / "g.npz"
    np.savez_compressed(good, G_LM=np.ones((1, 2, 8, 8)))
    raw = bytearray(good.read_bytes())
    raw[60] ^= 0xFF  # inside the deflated data: a CRC or inflate error
    (tmp_path / "bad.npz").write_bytes(bytes(raw))
    with pytest.raises(DataFileError, match=r"bad\.npz"):
        inputs.load_operators(str(tmp_path / "bad.npz"), CONFIG)
    (tmp_path / "cut.npz").write_bytes(good.read_bytes()[:100])
    with pytest.raises(DataFileError, match=r"cut\.npz is a damaged zip archive"):
        inputs.load_operators(str(tmp_path / "cut.npz"), CONFIG)
    np.save(tmp_path / "g.npy", np.ones((1, 2, 8, 8)))
    (tmp_path / "short.npy").write_bytes((tmp_path / "g.npy").read_bytes()[:-8])
    with pytest.raises(DataFileError, match=r"short\.npy declares .* but holds only"):
        inputs.load_operators(str(tmp_path / "short.npy"), CONFIG)
    (tmp_path / "text.npz").write_text("not an array")
    with pytest.raises(DataFileError, match=r"text\.npz is neither a \.npy nor a \.npz"):
        inputs.load_operators(str(tmp_path / "text.npz"), CONFIG)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torch.zeros(37, device="meta"), r"a meta tensor \(no data\)"),
        (lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]), "a nested tensor"),
        (lambda: torch.zeros(37, dtype=torch.float8_e4m3fn), "a float8_e4m3fn tensor"),
        (lambda: torch.zeros(37).to_sparse(), "a torch.sparse_coo tensor"),
        (lambda: torch.zeros(37, dtype=torch.complex32), "a complex32 tensor"),
    ],
    ids=["meta", "nested", "float8", "sparse", "complex32"],
)
def test_tensor_kinds_numpy_cannot_hold_are_one_error(tmp_path, make, message):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype API
        state = _state() | {"final_layer.bias": make()}
    path = _pth(tmp_path / "model.pth", state)
    with pytest.raises(CheckpointError, match=rf"model\.pth: 'final_layer\.bias' is {message}; weights must be dense"):
        load_checkpoint(path)


def test_megabyte_key_names_are_cut_in_messages(tmp_path):
    long_key = "decoder." + "x" * 10**6
    extra = _pth(tmp_path / "extra.pth", _state() | {long_key: torch.zeros(1)})
    with pytest.raises(CheckpointError, match=r"unexpected keys \['decoder\.x+\.\.\.'\]") as info:
        load_checkpoint(extra, max_seq_len=64)
    assert len(str(info.value)) < 1000
    meta = _pth(tmp_path / "meta.pth", _state() | {long_key: torch.zeros(1, device="meta")})
    with pytest.raises(CheckpointError, match=r"'decoder\.x+\.\.\.' is a meta tensor") as info:
        load_checkpoint(meta)
    assert len(str(info.value)) < 1000


# --- 4. errors a user can act on -------------------------------------------------------------


def _truncated(tmp_path):
    path = _pth(tmp_path / "model.pth", _state())
    path.write_bytes(path.read_bytes()[:2000])
    return path


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_truncated, "damaged zip archive (truncated"),
        (lambda p: (p / "model.pth").write_text(json.dumps(CONFIG.to_upstream())) and p / "model.pth", "looks like JSON text"),
        (lambda p: _npy_declaring(p / "model.pth", (3,), "<f4", bytes(12)), "NumPy .npy array"),
        (lambda p: (p / "model.pth").write_bytes(b"\x00junk" * 20) and p / "model.pth", "damaged or not a checkpoint"),
    ],
    ids=["truncated", "json", "npy", "junk"],
)
def test_damaged_or_foreign_pth_says_so_without_unpickling_advice(tmp_path, make, says):
    """Advice to run ``weights_only=False`` is for genuine raw pickles only (see
    test_tampered_files.py::test_upstream_style_predefined_g_pickle_is_refused_with_conversion_advice)."""
    path = make(tmp_path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "model.pth is not a torch zip checkpoint" in message and says in message
    assert "weights_only=False" not in message and len(message) < 250


def test_one_row_token_files_are_the_same_in_json_and_npy(tmp_path):
    (tmp_path / "flat.json").write_text("[3, 4, 5]")
    (tmp_path / "rows.json").write_text("[[3, 4, 5]]")
    np.save(tmp_path / "flat.npy", np.array([3, 4, 5]))
    np.save(tmp_path / "rows.npy", np.array([[3, 4, 5]], dtype=np.int32))
    loaded = [inputs.load_tokens(tmp_path / n) for n in ("flat.json", "rows.json", "flat.npy", "rows.npy")]
    for arr in loaded:
        assert arr.dtype == np.int64 and arr.tolist() == [[3, 4, 5]]
    (tmp_path / "ragged.json").write_text("[[1, 2], [3]]")
    with pytest.raises(DataFileError, match="different lengths"):
        inputs.load_tokens(tmp_path / "ragged.json")


def test_constant_operators_by_name(tmp_path):
    from plga.kernels import random_G

    eye = inputs.load_operators("identity", CONFIG)
    assert len(eye) == 1 and eye[0].shape == (2, 8, 8) and np.array_equal(eye[0], np.broadcast_to(np.eye(8), (2, 8, 8)))
    for spec, seed in (("random", 0), ("random:0", 0), ("random:7", 7)):
        got = np.stack(inputs.load_operators(spec, CONFIG))
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, random_G(CONFIG, seed).double().numpy())
    assert not np.array_equal(inputs.load_operators("random:1", CONFIG)[0], inputs.load_operators("random:2", CONFIG)[0])
    for bad in ("random:-1", "random:x", "random:1.5", "random:99999999999999999999"):
        with pytest.raises(DataFileError, match="seed must be an integer"):
            inputs.load_operators(bad, CONFIG)
    with pytest.raises(DataFileError, match=r"identiti does not exist \(give an \.npz or \.npy file, identity, or random\[:SEED\]\)"):
        inputs.load_operators("identiti", CONFIG)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((1, 2, 0, 0)), r"shape \(1, 2, 0, 0\); the model needs \(1, 2, 8, 8\)"),
        (np.zeros((2, 2, 8, 8)), r"shape \(2, 2, 8, 8\)"),
        (np.zeros((1, 2, 8, 8), dtype=np.int64), "int64 operators; they must be floating point"),
        (np.zeros((1, 2, 8, 8), dtype=np.complex128), "complex128 operators"),
        (np.full((1, 2, 8, 8), np.inf), "non-finite operator entries"),
    ],
    ids=["1x2x0x0", "layers", "int", "complex", "inf"],
)
@pytest.mark.parametrize("fmt", ["npz", "npy"])
def test_bad_constant_operator_files_are_one_error(tmp_path, array, message, fmt):
    path = tmp_path / f"g.{fmt}"
    if fmt == "npz":
        np.savez(path, G_LM=array)
    else:
        np.save(path, array)
    with pytest.raises(DataFileError, match=message):
        inputs.load_operators(str(path), CONFIG)


def test_constant_operator_files_in_every_accepted_form(tmp_path):
    g = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "named.npz", other=np.zeros(3), G_LM=g)
    np.savez(tmp_path / "only.npz", g)
    np.save(tmp_path / "plain.npy", g)
    for name in ("named.npz", "only.npz", "plain.npy"):
        got = inputs.load_operators(str(tmp_path / name), CONFIG)
        assert got[0].dtype == np.float64
        np.testing.assert_array_equal(np.stack(got), g.astype(np.float64))


# --- the command line: one line, exit 2 (or success where the file is fine) -------------------


def _constant_mode() -> str:
    """The generation mode that runs a constant operator (``collapsed``; ``constant`` before the rename)."""
    import argparse

    from plga.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["generate"]
    modes = next(a for a in sub._actions if a.dest == "mode").choices
    return "collapsed" if "collapsed" in modes else "constant"


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    save_safetensors(PARAMS, CONFIG, root / "tiny")
    deep = "[" * 10**6 + "]" * 10**6
    (root / "deep.json").write_text(deep)
    (root / "deep_config.json").write_text('{"config": ' + deep + "}")
    (root / "huge_id.json").write_text("[[1, 100000000000000000000000000000]]")
    (root / "tokens.json").write_text("[3, 17, 5]")
    np.savez(root / "z.npz", np.array([[3, 17, 5]]))
    (root / "z.npz").rename(root / "npz_named.npy")
    np.save(root / "g_empty.npy", np.zeros((1, 2, 0, 0)))
    np.save(root / "g.npy", np.broadcast_to(np.eye(8), (1, 2, 8, 8)))
    _pth(root / "meta.pth", _state() | {"final_layer.bias": torch.zeros(37, device="meta")})
    (root / "config_as_weights.pth").write_text(json.dumps(CONFIG.to_upstream()))
    _devzero_link(root / "zero_tokens.json")
    return {p.name: str(p) for p in root.iterdir()}


CLI_CASES = [
    (["forward", "{tiny}", "--tokens", "{deep.json}"], 2, "nested too deeply"),
    (["forward", "{tiny}", "--tokens", "{tokens.json}", "--config", "{deep_config.json}"], 2, "nested too deeply"),
    (["forward", "{tiny}", "--tokens", "{huge_id.json}"], 2, "token ids must lie in"),
    (["forward", "{tiny}", "--tokens", "{zero_tokens.json}"], 2, "not a regular file"),
    (["forward", "{meta.pth}", "--tokens", "{tokens.json}"], 2, "is a meta tensor"),
    (["forward", "{config_as_weights.pth}", "--tokens", "{tokens.json}"], 2, "looks like JSON text"),
    (["forward", "{tiny}", "--tokens", "{npz_named.npy}"], 0, ""),
    (["generate", "{tiny}", "--tokens", "{tokens.json}", "--max-new-tokens", "2", "--constant-g", "{g_empty.npy}"], 2, r"\(1, 2, 0, 0\)"),
    (["generate", "{tiny}", "--tokens", "{tokens.json}", "--max-new-tokens", "2", "--constant-g", "{g.npy}"], 0, ""),
    (["generate", "{tiny}", "--tokens", "{tokens.json}", "--max-new-tokens", "2", "--constant-g", "identity"], 0, ""),
    (["generate", "{tiny}", "--tokens", "{tokens.json}", "--max-new-tokens", "2", "--constant-g", "random:3"], 0, ""),
]


@pytest.mark.parametrize(("argv", "code", "message"), CLI_CASES, ids=lambda v: " ".join(v).replace("{", "")[:50] if isinstance(v, list) else None)
def test_hostile_files_on_the_command_line(cli_files, tmp_path, argv, code, message):
    import contextlib
    import io
    import re

    from plga.cli import main

    argv = [cli_files[a[1:-1]] if a.startswith("{") else a for a in argv] + ["--out", str(tmp_path / "o.npz")]
    if argv[0] == "generate":
        argv += ["--mode", _constant_mode(), "--max-seq-len", "64"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        got = main(argv)
    lines = err.getvalue().strip().splitlines()
    assert got == code, err.getvalue()
    if code:
        assert len(lines) == 1 and re.search(message, lines[0]), lines
        assert not (tmp_path / "o.npz").exists()
    else:
        assert (tmp_path / "o.npz").exists()
