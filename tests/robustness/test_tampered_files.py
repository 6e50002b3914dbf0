"""Tampered, corrupt and wrong-format weight files: one clear error naming the file, nothing run.

Complements tests/reference/test_checkpoint.py (missing / extra / mis-shaped keys, NaN
weights, truncated and empty files, code-executing pickles, corrupt safetensors headers).
Every case goes through both loaders: ``plga.reference.checkpoint.load_checkpoint`` and
``plga.kernels.PLDRModel.from_pretrained``.
"""

from __future__ import annotations

import json
import pickle
import struct
import time
import zipfile

import numpy as np
import pytest

from plga.reference.checkpoint import (
    CheckpointError,
    load_checkpoint,
    random_params,
    save_safetensors,
)
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch", reason="writing .pth fixtures needs torch")
pytest.importorskip("safetensors")

CONFIG = PLDRConfig.from_name("tiny")
PARAMS = random_params(CONFIG, seed=0)


def _load_reference(path):
    return load_checkpoint(path, max_seq_len=64)


def _load_kernels(path):
    from plga.kernels import PLDRModel

    return PLDRModel.from_pretrained(path, max_seq_len=64)


LOADERS = [pytest.param(_load_reference, id="reference"), pytest.param(_load_kernels, id="kernels")]


def _pth(path, params=PARAMS, **extra):
    torch.save({"model_state_dict": {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}, **extra}, path)
    return path


def _rewrite_zip(src, dst, change):
    """Copy a torch zip archive member by member, passing each member's bytes through ``change``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            zout.writestr(name, change(name, zin.read(name)))
    return dst


def _member_offset(path, suffix):
    """Byte offset of the data of the first archive member whose name ends with ``suffix``."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(suffix))
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len


def _safetensors_with_header(tmp_path, mutate):
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    raw = (folder / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    header, data = mutate(header, data)
    blob = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return folder / "model.safetensors"


# --- safetensors whose header lies --------------------------------------------------------------


def _offsets_past_the_end(header, data):
    header["final_layer.weight"]["data_offsets"][1] += 4_000_000
    return header, data


def _shape_disagrees_with_offsets(header, data):
    header["final_layer.weight"]["shape"] = [37, 17]
    return header, data


def _overlapping_tensors(header, data):
    a, b = header["final_layer.bias"]["data_offsets"]
    header["final_layer.weight"]["data_offsets"] = [a, a + (b - a)]
    return header, data


def _truncated_data(header, data):
    return header, data[: len(data) // 2]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    "mutate",
    [_offsets_past_the_end, _shape_disagrees_with_offsets, _overlapping_tensors, _truncated_data],
    ids=["offsets-past-end", "shape-vs-offsets", "overlapping", "truncated-data"],
)
def test_safetensors_header_lying_about_sizes(tmp_path, loader, mutate):
    path = _safetensors_with_header(tmp_path, mutate)
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
def test_safetensors_header_length_larger_than_the_file(tmp_path, loader):
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    raw = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + raw[8:])
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        loader(folder)


# --- .pth archives ------------------------------------------------------------------------------


@pytest.mark.parametrize("loader", LOADERS)
def test_pth_with_a_truncated_zip_member(tmp_path, loader):
    good = _pth(tmp_path / "good.pth")
    bad = _rewrite_zip(good, tmp_path / "model.pth", lambda n, b: b[: len(b) // 2] if n.endswith("/data/0") else b)
    with pytest.raises(CheckpointError, match=r"model\.pth .*corrupt"):
        loader(bad)


@pytest.mark.parametrize("loader", LOADERS)
def test_pth_with_a_bit_flip_in_a_tensor(tmp_path, loader):
    """torch.load does not verify the archive's CRC-32s: without the check this loads a wrong weight."""
    path = _pth(tmp_path / "model.pth")
    raw = bytearray(path.read_bytes())
    raw[_member_offset(path, "/data/0") + 3] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"model\.pth is corrupt: archive member '.*data/0' fails its CRC-32"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
def test_pth_with_a_corrupted_pickle_member(tmp_path, loader):
    good = _pth(tmp_path / "good.pth")
    bad = _rewrite_zip(good, tmp_path / "model.pth", lambda n, b: b"\x80\x02garbage" if n.endswith("data.pkl") else b)
    with pytest.raises(CheckpointError, match=r"model\.pth"):
        loader(bad)


@pytest.mark.parametrize("loader", LOADERS)
def test_a_zip_that_is_not_a_checkpoint(tmp_path, loader):
    path = tmp_path / "model.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "not weights")
        z.writestr("archive/data.pkl", b"not a pickle")
    with pytest.raises(CheckpointError, match=r"model\.pth .*(corrupt|not a torch checkpoint)"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("dtype", "name"),
    [(np.int64, "int64"), (np.int32, "int32"), (np.bool_, "bool"), (np.complex64, "complex64")],
)
def test_pth_holding_a_non_float_tensor(tmp_path, loader, dtype, name):
    params = dict(PARAMS)
    params["final_layer.bias"] = np.ones(37, dtype=dtype)
    path = _pth(tmp_path / "model.pth", params)
    with pytest.raises(CheckpointError, match=rf"model\.pth has tensors that are not floating point.*final_layer\.bias: {name}"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
def test_pth_holding_non_tensor_entries(tmp_path, loader):
    path = tmp_path / "model.pth"
    state = {k: torch.as_tensor(v) for k, v in PARAMS.items()}
    state["final_layer.bias"] = "a string"
    torch.save({"model_state_dict": state}, path)
    with pytest.raises(CheckpointError, match=r"model\.pth: entry 'final_layer\.bias' is a str, not a tensor"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
def test_pth_holding_a_list(tmp_path, loader):
    path = tmp_path / "model.pth"
    torch.save([torch.zeros(2)], path)
    with pytest.raises(CheckpointError, match=r"model\.pth holds a list, not a state dict"):
        loader(path)


class _Marker:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("loader", LOADERS)
def test_upstream_style_predefined_g_pickle_is_refused_with_conversion_advice(tmp_path, loader):
    """The upstream ablation files are raw pickles (protocol 5) of lists of tensors whose storages
    are rebuilt by ``torch.storage._load_from_bytes`` (saved on cuda:0). Simulated here with a CPU
    tensor and a code-running marker; the loader never unpickles it and says how to convert."""
    marker = tmp_path / "pwned"
    path = tmp_path / "predefined_G_LM_cache_list_IDENTITY_5layer_14head_64x64_paper.pkl"
    blob = pickle.dumps([torch.eye(4).expand(1, 2, 4, 4).clone(), _Marker(marker)], protocol=5)
    assert b"_load_from_bytes" in blob or b"_rebuild_tensor" in blob
    path.write_bytes(blob)
    with pytest.raises(CheckpointError) as info:
        loader(path)
    message = str(info.value)
    assert path.name in message and "CUDA" in message and "map_location='cpu'" in message
    assert "safetensors" in message and "trusted machine" in message
    assert not marker.exists(), "the pickle payload ran"


@pytest.mark.parametrize("loader", LOADERS)
def test_legacy_non_zip_torch_save_is_refused(tmp_path, loader):
    path = tmp_path / "legacy.pth"
    torch.save({"model_state_dict": {k: torch.as_tensor(v) for k, v in PARAMS.items()}}, path,
               _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=r"legacy\.pth is not a torch zip checkpoint"):
        loader(path)


@pytest.mark.parametrize("loader", LOADERS)
def test_wrong_extension(tmp_path, loader):
    folder = tmp_path / "m"
    save_safetensors(PARAMS, CONFIG, folder)
    renamed = tmp_path / "model.pth"
    renamed.write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match=r"model\.pth is not a torch zip checkpoint"):
        loader(renamed)
    zipped = tmp_path / "other" / "model.safetensors"
    zipped.parent.mkdir()
    _pth(zipped)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a readable safetensors"):
        loader(zipped)


@pytest.mark.parametrize("loader", LOADERS)
def test_folders_without_or_with_several_weight_files(tmp_path, loader):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"holds no \.safetensors or \.pth"):
        loader(tmp_path / "empty")
    two = tmp_path / "two"
    save_safetensors(PARAMS, CONFIG, two)
    (two / "other.safetensors").write_bytes((two / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="several weight files"):
        loader(two)


# --- config.json ---------------------------------------------------------------------------------


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    "text",
    ["[1, 2, 3]", '"a string"', "null", "42", "{not json", "", '{"num_layers": 1}', '{"config": [1]}'],
    ids=["list", "string", "null", "number", "invalid-json", "empty", "incomplete", "wrapped-list"],
)
def test_config_that_is_not_a_usable_object(tmp_path, loader, text):
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError, match="config"):
        loader(folder)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_layers": 10**9}, r"config .*config\.json: PLDRConfig\.num_layers must lie in \[1, 1024\]"),
        ({"num_reslayerA": 10**8}, r"config .*config\.json: PLDRConfig\.num_reslayerA must lie in \[1, 64\]"),
        ({"num_layers": 1024}, r"model\.safetensors does not match the configuration .* implies \d+ tensors"),
        ({"num_layers": 1024, "num_reslayerA": 64, "num_denseA": 16}, r"implies \d+ tensors, the file holds"),
    ],
    ids=["layers-1e9", "reslayerA-1e8", "layers-1024", "every-count-at-its-limit"],
)
def test_config_implying_a_huge_model_is_refused_quickly(tmp_path, loader, changes, message):
    """Before the fix, num_layers = 1e5 took 18 s and a 200 MB error message; 1e9 never finished.
    Values beyond the config limits are refused by PLDRConfig; within them, by the tensor count."""
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    (folder / "config.json").write_text(json.dumps(CONFIG.to_upstream() | changes))
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=message):
        loader(folder)
    assert time.perf_counter() - start < 5


def test_long_key_lists_are_cut(tmp_path):
    folder = tmp_path / "model"
    save_safetensors(PARAMS, CONFIG, folder)
    (folder / "config.json").write_text(json.dumps(CONFIG.to_upstream() | {"num_layers": 3}))
    with pytest.raises(CheckpointError, match=r"missing keys \[.*\] and \d+ more") as info:
        load_checkpoint(folder)
    assert len(str(info.value)) < 5000


@pytest.mark.parametrize("loader", LOADERS)
def test_hostile_key_names_do_not_explode(tmp_path, loader):
    """A .pth whose key names claim layer 10^9: the inferred config is refused without enumerating it."""
    params = dict(PARAMS)
    params["decoder.dec_layers.999999999.mha1.wq.bias"] = np.zeros(16, np.float32)
    path = _pth(tmp_path / "model.pth", params)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"model\.pth"):
        loader(path)
    assert time.perf_counter() - start < 5


def test_kernels_from_reference_refuses_bad_dicts():
    from plga.kernels import PLDRModel

    params = dict(PARAMS)
    params.pop("final_layer.bias")
    with pytest.raises(CheckpointError, match=r"final_layer\.bias"):
        PLDRModel.from_reference(params, CONFIG)
    params = dict(PARAMS) | {"final_layer.bias": np.arange(37)}
    with pytest.raises(CheckpointError, match="floating point"):
        PLDRModel.from_reference(params, CONFIG)
