"""Reading the files a user names: the one home of every reader of a user file.

Token files, prompt files, constant-operator files, JSON configs and checksums of checkpoints
all go through here, so every one of them gets the same guarantees:

* **regular files only**, after resolving links (:func:`regular_file`): a link to
  ``/dev/zero``, a pipe or a folder is refused before it is opened;
* **sizes bounded before anything is allocated**: text and JSON are read up to
  :data:`MAX_TEXT_BYTES`; ``.npy`` / ``.npz`` headers are read first and the declared shape is
  checked against the file (or zip member) size and against what the caller needs, so a header
  declaring 10^12 elements or a deflate bomb is refused before a byte of data is read;
* content is recognised by its first bytes, not its suffix (an ``.npz`` named ``.npy`` reads);
* **one line** per failure: a :class:`plga.errors.DataFileError` (or the ``error`` class a
  caller passes, e.g. :class:`~plga.errors.CheckpointError` for configs) naming the file.
  ``allow_pickle`` is never used; JSON ``NaN`` / ``Infinity`` are refused.

The limits (documented in ``docs/robustness.md``): :data:`MAX_TEXT_BYTES` for every text or
JSON file, :data:`MAX_TOKEN_IDS` ids in a token file, and for an operator file exactly the
[layers, heads, d, d] the model needs plus :data:`MAX_EXTRA_BYTES` of other content.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import struct
import warnings
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DataFileError, PlgaError

if TYPE_CHECKING:
    from .reference.config import PLDRConfig

#: The most bytes read from any text or JSON file (config, token list, prompt file).
MAX_TEXT_BYTES = 16 << 20
#: The most token ids a token or prompt file may hold (an int64 ``.npy`` of 16 MiB).
MAX_TOKEN_IDS = 1 << 21
#: The most prompts a prompt file may hold (the audit runs the model on each).
MAX_PROMPTS = 10_000
#: Bytes an ``.npz`` may hold besides the array that is read (headers, other arrays).
MAX_EXTRA_BYTES = 16 << 20
#: The most members an ``.npz`` (or a ``.pth`` zip) directory may list before it is parsed.
MAX_ZIP_ENTRIES = 1 << 16

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"

ErrorType = type[PlgaError]


# --- files -----------------------------------------------------------------------------------


def regular_file(path: str | os.PathLike[str], what: str, error: ErrorType = DataFileError) -> tuple[Path, int]:
    """``(path, size)`` of a regular file (links resolved), else ``error`` naming it.

    Devices (a link to ``/dev/zero`` reads forever), pipes, sockets and folders are refused
    without being opened.
    """
    p = Path(path)
    try:
        info = os.stat(p)  # follows links: a link to /dev/zero is seen as the device it is
    except FileNotFoundError:
        raise error(f"{what} {p} does not exist") from None
    except (OSError, ValueError) as exc:  # permission, a loop of links, a NUL in the name
        raise error(f"{what} {p} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{what} {p} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{what} {p} is not a regular file (a device, pipe or socket, or a link to one)")
    return p, info.st_size


def read_bytes(path: str | os.PathLike[str], what: str, error: ErrorType = DataFileError,
               max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (checked before and while reading)."""
    p, size = regular_file(path, what, error)
    if size > max_bytes:
        raise error(f"{what} {p} is {size} bytes; at most {max_bytes} are read")
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # it grew after the stat
        raise error(f"{what} {p} is more than {max_bytes} bytes; at most {max_bytes} are read")
    return data


def read_text(path: str | os.PathLike[str], what: str, error: ErrorType = DataFileError,
              max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file of at most ``max_bytes``."""
    data = read_bytes(path, what, error, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, where: str, error: ErrorType = DataFileError, other_format: str = "") -> Any:
    """JSON text → value; invalid JSON, ``NaN`` / ``Infinity`` and deep nesting → ``error``
    (the message names ``other_format`` when the file could also have been one)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{where} is nested too deeply to be read as JSON") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers of more than 4300 digits
        neither = f"neither {other_format} nor" if other_format else "not"
        raise error(f"{where} is {neither} valid JSON: {' '.join(str(exc).split())[:200]}") from None


def read_json(path: str | os.PathLike[str], what: str, error: ErrorType = DataFileError,
              max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """A JSON file of at most ``max_bytes`` (see :func:`parse_json`)."""
    return parse_json(read_text(path, what, error, max_bytes), f"{what} {path}", error)


def sha256_file(path: str | os.PathLike[str], what: str = "file", error: ErrorType = DataFileError) -> str:
    """SHA-256 of a regular file, read in 1 MiB chunks up to the size it had when checked."""
    p, size = regular_file(path, what, error)
    h = hashlib.sha256()
    left = size
    with open(p, "rb") as fh:
        while left > 0:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def file_head(path: Path, n: int = 16, what: str = "file", error: ErrorType = DataFileError) -> bytes:
    """The first ``n`` bytes of a file already checked by :func:`regular_file`."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


# --- zip directories ---------------------------------------------------------------------------


def zip_entry_count(path: Path, size: int) -> int | None:
    """The member count a zip's end record declares (read before ``zipfile`` parses the whole
    directory), or None when there is no end record."""
    tail_len = min(size, 22 + 0xFFFF)
    with open(path, "rb") as fh:
        fh.seek(size - tail_len)
        tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    count = struct.unpack("<H", tail[at + 10 : at + 12])[0]
    if count == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":  # zip64
        offset = struct.unpack("<Q", tail[at - 12 : at - 4])[0]
        with open(path, "rb") as fh:
            fh.seek(offset)
            record = fh.read(56)
        if record[:4] == b"PK\x06\x06" and len(record) == 56:
            count = struct.unpack("<Q", record[32:40])[0]
    return count


def open_zip(path: Path, size: int, what: str, error: ErrorType, max_entries: int = MAX_ZIP_ENTRIES) -> zipfile.ZipFile:
    """A ``ZipFile`` on ``path`` once its end record lists at most ``max_entries`` members."""
    count = zip_entry_count(path, size)
    if count is not None and count > max_entries:
        raise error(f"{what} {path} is a zip archive of {count} members; at most {max_entries} are read")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise error(f"{what} {path} is a damaged zip archive: {' '.join(str(exc).split()) or type(exc).__name__}") from None


# --- arrays ----------------------------------------------------------------------------------

#: ``check(shape, dtype)`` raises when a declared array is not what the caller needs.
ArrayCheck = Callable[[tuple[int, ...], np.dtype], None]


def _read_npy(fh: Any, available: int, where: str, error: ErrorType, check: ArrayCheck) -> np.ndarray:
    """One ``.npy`` stream of ``available`` bytes: header read and checked, then exactly its data."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unknown .npy format version {version}")
        header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        with warnings.catch_warnings():  # a damaged header ('\d' in a key) warns as Python compiles it:
            warnings.simplefilter("ignore")  # the refusal below is the one line the user sees
            shape, fortran, dtype = header(fh)
    except Exception as exc:  # NumPy parses the header with tokenize and ast: TokenError, SyntaxError, …
        raise error(f"{where} is not a readable .npy array: {' '.join(str(exc).split())[:200]}") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise error(f"{where} holds {dtype} values; only plain numeric arrays are read (never pickled objects)")
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise error(f"{where} declares the negative shape {shape}")
    check(shape, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    header_end = fh.tell()
    if header_end + nbytes > available:
        raise error(f"{where} declares {shape} {dtype} ({nbytes} bytes) but holds only {max(0, available - header_end)}")
    try:
        data = fh.read(nbytes)
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise error(f"{where} is damaged: {' '.join(str(exc).split())[:200]}") from None
    if len(data) != nbytes:
        raise error(f"{where} is truncated: {len(data)} of {nbytes} data bytes")
    flat = np.frombuffer(data, dtype=dtype, count=math.prod(shape))
    return flat.reshape(shape, order="F" if fortran else "C").copy()


#: The most bytes that the compressed members of an ``.npz`` may inflate to, in all, beyond
#: the file's own size (a stack of identity operators compresses ~50:1, a deflate bomb ~1000:1).
MAX_INFLATED_BYTES = 256 << 20


def _arrays(path: str | os.PathLike[str], what: str, check: ArrayCheck, error: ErrorType,
            select: Callable[[list[str]], list[str]], max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of a ``.npy`` (one, named ``""``) or of an ``.npz`` (the members ``select``
    picks from the names it lists), recognised by content, each vetted by ``check`` before its
    data is read. The file may be at most ``max_bytes``; the picked members may declare at most
    the file's size plus :data:`MAX_INFLATED_BYTES`."""
    p, size = regular_file(path, what, error)
    if max_bytes is not None and size > max_bytes:
        raise error(f"{what} {p} is {size} bytes; at most {max_bytes} are read for it")
    head = file_head(p, 8, what, error)
    if head.startswith(NPY_MAGIC):
        with open(p, "rb") as fh:
            return {"": _read_npy(fh, size, f"{what} {p}", error, check)}
    if not head.startswith(ZIP_MAGIC):
        raise error(f"{what} {p} is neither a .npy nor a .npz array file")
    out: dict[str, np.ndarray] = {}
    with open_zip(p, size, what, error) as archive:
        members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
        infos = [members[name] for name in select(sorted(members))]
        declared = sum(i.file_size for i in infos)
        if declared > size + MAX_INFLATED_BYTES:
            raise error(f"{what} {p} declares {declared} bytes of arrays in {size} bytes; at most "
                        f"{MAX_INFLATED_BYTES} more than the file are read (a decompression bomb?)")
        for info in infos:
            where = f"{what} {p} (array {info.filename[:-4]!r})"
            try:
                with archive.open(info) as fh:
                    out[info.filename[:-4]] = _read_npy(fh, info.file_size, where, error, check)
            except PlgaError:
                raise
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, ValueError) as exc:
                raise error(f"{where} is damaged: {' '.join(str(exc).split())[:200]}") from None
    if not out:
        raise error(f"{what} {p} holds no arrays")
    return out


def read_array(path: str | os.PathLike[str], what: str, check: ArrayCheck, *, keys: Sequence[str] = (),
               error: ErrorType = DataFileError, max_bytes: int) -> np.ndarray:
    """One array of a ``.npy`` or ``.npz`` file of at most ``max_bytes`` (see :func:`_arrays`):
    of an ``.npz``, the first of ``keys`` it holds, else its only array."""
    def one(names: list[str]) -> list[str]:
        chosen = next((k for k in keys if k in names), names[0] if len(names) == 1 else None)
        if chosen is None:
            wanted = f"an array named {' or '.join(keys)}, or " if keys else ""
            raise error(f"{what} {path} must hold {wanted}exactly one array; it holds {names[:20]}")
        return [chosen]

    (array,) = _arrays(path, what, check, error, one, max_bytes).values()
    return array


def read_arrays(path: str | os.PathLike[str], what: str, check: ArrayCheck, *, only: str | None = None,
                error: ErrorType = DataFileError) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (or just ``only``), or the one array of a ``.npy`` (named
    ``""``), each vetted by ``check(shape, dtype)`` before its data is read (see :func:`_arrays`)."""
    def pick(names: list[str]) -> list[str]:
        if only is not None and only not in names:
            raise error(f"{what} {path} has no array {only!r}; it holds {names[:20]}")
        return names if only is None else [only]

    return _arrays(path, what, check, error, pick)


def load_operator_arrays(path: str | os.PathLike[str], key: str | None = None) -> dict[str, np.ndarray]:
    """The operator stacks of ``plga audit --operators``: every array of an ``.npz`` (or
    ``key``), or a ``.npy`` (named ``G``); each real [layers, heads, d, d] or [heads, d, d]."""
    where = f"operator file {path}"

    def check(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if dtype.kind not in "fiu":
            raise DataFileError(f"{where} holds {dtype} values; operators must be real numbers")
        if len(shape) not in (3, 4) or shape[-1] != shape[-2] or 0 in shape:
            raise DataFileError(f"{where} holds an array of shape {shape}; operators are [layers, heads, d, d]")
        if shape[-1] % 2:
            raise DataFileError(f"{where} holds operators of size d = {shape[-1]}; RoPE rotates coordinate pairs, so d must be even")

    arrays = read_arrays(path, "operator file", check, only=key)
    return {name or "G": a for name, a in arrays.items()}


# --- token and prompt files ------------------------------------------------------------------


def _id_bound() -> int:
    from .reference.config import LIMITS

    return LIMITS["input_vocab_size"]


def _token_check(where: str, error: ErrorType) -> ArrayCheck:
    def check(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if dtype.kind not in "iu":
            raise error(f"{where} must hold integer token ids, got {dtype}")
        if len(shape) not in (1, 2):
            raise error(f"{where} must hold ids of shape [seq] or [batch, seq], got {shape}")
        if math.prod(shape) > MAX_TOKEN_IDS:
            raise error(f"{where} declares {math.prod(shape)} ids; at most {MAX_TOKEN_IDS} are read")
    return check


def _ids_in_range(arr: np.ndarray, where: str, error: ErrorType) -> np.ndarray:
    """``arr`` as int64 [B, S] once every id lies in [0, vocabulary limit) and none is empty."""
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.size == 0:
        raise error(f"{where} holds no token ids")
    bound = _id_bound()
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= bound:
        raise error(f"{where}: token ids must lie in [0, {bound}), got the range [{lo}, {hi}]")
    return arr.astype(np.int64)


def _ids_from_json(data: Any, where: str, error: ErrorType) -> np.ndarray:
    """A JSON list of ids, or a list of equally long lists of ids → int64 [B, S]."""
    rows = [data] if isinstance(data, list) and data and not isinstance(data[0], list) else data
    if not (isinstance(rows, list) and rows and all(isinstance(r, list) for r in rows)):
        raise error(f"{where} must hold a JSON list of ids or a non-empty list of lists of ids")
    if len({len(r) for r in rows}) != 1:
        raise error(f"{where}: rows have different lengths; pad them with id 0")
    if len(rows) * len(rows[0]) > MAX_TOKEN_IDS:
        raise error(f"{where} holds {len(rows) * len(rows[0])} ids; at most {MAX_TOKEN_IDS} are read")
    bound = _id_bound()
    for row in rows:
        for t in row:
            if not isinstance(t, int) or isinstance(t, bool):
                raise error(f"{where}: every id must be an integer, got {type(t).__name__} {str(t)[:40]}")
            if not 0 <= t < bound:
                raise error(f"{where}: token ids must lie in [0, {bound}), got {str(t)[:40]}")
    return _ids_in_range(np.asarray(rows, dtype=np.int64), where, error)


def load_tokens(path: str | os.PathLike[str]) -> np.ndarray:
    """Token ids → int64 [batch, seq] from a ``.npy`` / ``.npz`` (integer array) or a JSON file.

    A 1-D array or a flat JSON list is one row; a JSON list of lists is one row per list (all
    equally long: pad with id 0). Ids must lie in [0, 2^24) here; the model checks them against
    its vocabulary. At most :data:`MAX_TOKEN_IDS` ids (``.npy``) or :data:`MAX_TEXT_BYTES` (JSON).
    """
    what = "token file"
    p, _ = regular_file(path, what)
    where = f"{what} {p}"
    if file_head(p, 8, what).startswith((NPY_MAGIC, ZIP_MAGIC)):
        arr = read_array(p, what, _token_check(where, DataFileError), keys=("tokens",),
                         max_bytes=MAX_TOKEN_IDS * 8 + MAX_EXTRA_BYTES)
        return _ids_in_range(arr, where, DataFileError)
    return _ids_from_json(parse_json(read_text(p, what), where, other_format=".npy"), where, DataFileError)


def load_prompts(path: str | os.PathLike[str]) -> tuple[list[list[int]] | None, list[str] | None]:
    """Prompts → ``(token ids, None)`` or ``(None, texts)``.

    ``.npy`` / ``.npz`` (by content): integer ids [prompts, tokens] or [tokens], 0 = padding
    (stripped). ``.json``: a list of lists of ids, a list of ids (one prompt), or a list of
    strings. Anything else: UTF-8 text, one prompt a line. Size limits as :func:`load_tokens`,
    and at most :data:`MAX_PROMPTS` prompts.
    """
    ids, texts = _read_prompts(path)
    n = len(ids if ids is not None else texts or [])
    if n > MAX_PROMPTS:
        raise DataFileError(f"prompt file {path} holds {n} prompts; at most {MAX_PROMPTS} are read")
    return ids, texts


def _read_prompts(path: str | os.PathLike[str]) -> tuple[list[list[int]] | None, list[str] | None]:
    what = "prompt file"
    p, _ = regular_file(path, what)
    where = f"{what} {p}"
    if file_head(p, 8, what).startswith((NPY_MAGIC, ZIP_MAGIC)):
        arr = read_array(p, what, _token_check(where, DataFileError), keys=("prompts", "tokens"),
                         max_bytes=MAX_TOKEN_IDS * 8 + MAX_EXTRA_BYTES)
        arr = _ids_in_range(arr, where, DataFileError)
        return [[int(t) for t in row if t != 0] for row in arr], None
    if p.suffix == ".json":
        data = read_json(p, what)
        if isinstance(data, list) and data and all(isinstance(x, str) for x in data):
            return None, list(data)
        if isinstance(data, list) and data and all(isinstance(r, list) for r in data):
            bad = [i for i, r in enumerate(data) if not r]
            if bad:
                raise DataFileError(f"{where}: prompts {bad[:10]} are empty")
            rows = [_ids_from_json([r], where, DataFileError)[0].tolist() for r in data]  # each prompt one flat list of ids
            return rows, None
        return [_ids_from_json(data, where, DataFileError)[0].tolist()], None
    texts = [line for line in read_text(p, what).splitlines() if line.strip()]
    if not texts:
        raise DataFileError(f"{where} holds no prompts")
    return None, texts


# --- constant operators ----------------------------------------------------------------------

#: The ``.npz`` key of the constant operators (the upstream G_LM files and ``plga`` exports).
OPERATORS_KEY = "G_LM"


def random_operators(config: PLDRConfig, seed: int) -> np.ndarray:
    """The seeded random operators of ``random:SEED``: float64 [L, H, d, d] holding the float32
    values of :func:`plga.kernels.random_G` (standard normal from a seeded ``torch.Generator``).
    Needs torch: NumPy cannot reproduce torch's generator, and one name must mean one set of numbers."""
    try:
        from .kernels import random_G
    except ImportError:
        raise DataFileError("--constant-g random needs torch (its numbers are torch.randn's); "
                            "pip install 'plga[torch]' or pass an .npz") from None
    return random_G(config, seed).double().numpy()  # [L, H, d, d]


def _operator_check(want: tuple[int, ...], where: str) -> ArrayCheck:
    def check(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if shape != want:
            raise DataFileError(f"{where} holds operators of shape {shape}; the model needs {want} [layers, heads, d, d]")
        if dtype.kind != "f":
            raise DataFileError(f"{where} holds {dtype} operators; they must be floating point")
    return check


def load_operators(spec: str, config: PLDRConfig) -> list[np.ndarray]:
    """The constant operators named by ``spec`` → one float64 [H, d, d] per layer.

    ``spec`` is ``identity``, ``random`` / ``random:SEED`` (seed 0 by default; see
    :func:`random_operators`), or a file: an ``.npz`` (key ``G_LM``, or its only array) or an
    ``.npy`` holding [layers, heads, d, d] finite floating-point values for ``config``.
    """
    want = (config.num_layers, config.num_heads, config.depth, config.depth)
    if spec == "identity":
        return [np.broadcast_to(np.eye(config.depth), want[1:]).copy() for _ in range(config.num_layers)]
    if spec == "random" or spec.startswith("random:"):
        seed_text = spec.partition(":")[2] or "0"
        if not seed_text.isdigit() or len(seed_text) > 19 or int(seed_text) >= 2**63:
            raise DataFileError(f"--constant-g {spec!r}: the seed must be an integer in [0, 2^63)")
        g = random_operators(config, int(seed_text))
    else:
        what = "constant-operator file"
        where = f"{what} {spec}"
        if not os.path.lexists(spec):
            raise DataFileError(f"{where} does not exist (give an .npz or .npy file, identity, or random[:SEED])")
        g = read_array(spec, what, _operator_check(want, where), keys=(OPERATORS_KEY,),
                       max_bytes=math.prod(want) * 16 + MAX_EXTRA_BYTES)
        if not np.all(np.isfinite(g)):
            raise DataFileError(f"{where} holds non-finite operator entries (NaN or inf)")
    g = g.astype(np.float64)
    return [g[i] for i in range(config.num_layers)]


__all__ = [
    "MAX_EXTRA_BYTES", "MAX_INFLATED_BYTES", "MAX_PROMPTS", "MAX_TEXT_BYTES", "MAX_TOKEN_IDS", "MAX_ZIP_ENTRIES",
    "OPERATORS_KEY", "file_head", "load_operator_arrays", "load_operators", "load_prompts", "load_tokens", "open_zip", "parse_json",
    "random_operators", "read_array", "read_arrays", "read_bytes", "read_json", "read_text", "regular_file",
    "sha256_file", "zip_entry_count",
]
