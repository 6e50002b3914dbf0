"""Loading weights: safe formats only, one clear error listing every problem (docs/spec.md §2)."""

from __future__ import annotations

import json
import pickle
import re

import numpy as np
import pytest

from plga.reference.checkpoint import (
    COLLAPSED_KEY,
    CheckpointError,
    collapsed_shapes,
    expected_shapes,
    is_collapsed,
    is_learner_key,
    load_checkpoint,
    load_collapsed,
    random_params,
    save_safetensors,
    validate_state_dict,
)
from plga.reference.config import PLDRConfig, infer_config

CONFIG = PLDRConfig.from_name("tiny")


@pytest.fixture
def params():
    return random_params(CONFIG, seed=0)


def test_safetensors_round_trip_with_config(tmp_path, params):
    pytest.importorskip("safetensors")
    save_safetensors(params, CONFIG, tmp_path)
    loaded, config = load_checkpoint(tmp_path)
    assert config == CONFIG
    assert loaded.keys() == params.keys()
    for k in params:
        np.testing.assert_array_equal(loaded[k], params[k])


def test_config_is_inferred_from_shapes(params):
    inferred = infer_config({k: v.shape for k, v in params.items()}, max_seq_len=64)
    assert inferred == CONFIG


def test_golden_config_is_inferred(golden):
    _, config, _ = golden
    assert (config.num_layers, config.d_model, config.num_heads, config.dff, config.A_dff) == (2, 64, 4, 96, 24)
    assert (config.num_reslayerA, config.num_denseA, config.input_vocab_size) == (2, 2, 101)


def test_presets_have_the_documented_shapes():
    small, paper = PLDRConfig.from_name("small"), PLDRConfig.from_name("paper-110m")
    assert (small.num_layers, small.d_model, small.num_heads, small.dff, small.A_dff) == (2, 256, 4, 683, 64)
    assert (paper.depth, paper.num_reslayerA, paper.input_vocab_size) == (64, 8, 32000)
    n = sum(int(np.prod(s)) for s in expected_shapes(paper).values())
    assert n == 109_689_362  # the parameter count of the released v51 110M models


def test_hf_config_json_is_understood(tmp_path):
    cfg = {
        "model_type": "pldrllm", "num_hidden_layers": 5, "hidden_size": 896, "num_attention_heads": 14,
        "intermediate_size": 2389, "A_dff": 170, "num_reslayerA": 8, "num_denseA": 2,
        "vocab_size": 32000, "max_position_embeddings": 1024, "reference_rope": True, "rope_theta": 10000.0,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert PLDRConfig.from_json(path) == PLDRConfig.from_name("paper-110m")
    cfg["reference_rope"] = False
    path.write_text(json.dumps(cfg))
    assert PLDRConfig.from_json(path).rope_style == "rotate_half"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p.pop("final_layer.bias"), "missing keys \\['final_layer.bias'\\]"),
        (lambda p: p.update(extra=np.zeros(3, np.float32)), "unexpected keys \\['extra'\\]"),
        (lambda p: p.update({"final_layer.bias": np.zeros(5, np.float32)}), "mis-shaped tensors .*final_layer.bias: expected \\(37,\\), got \\(5,\\)"),
        (lambda p: p["decoder.embedding.weight"].__setitem__((0, 0), np.nan), "non-finite .*decoder.embedding.weight"),
    ],
)
def test_bad_state_dicts_are_refused_with_the_keys_named(params, mutate, message):
    mutate(params)
    with pytest.raises(CheckpointError, match=message):
        validate_state_dict(params, CONFIG, "model.pth")


def test_every_problem_is_listed_at_once(params):
    params.pop("final_layer.bias")
    params["surplus"] = np.zeros(1, np.float32)
    with pytest.raises(CheckpointError, match=r"missing keys .*; unexpected keys"):
        validate_state_dict(params, CONFIG)


def _save_pth(tmp_path, params, name="model.pth"):
    torch = pytest.importorskip("torch")
    path = tmp_path / name
    torch.save({"model_state_dict": {k: torch.from_numpy(v) for k, v in params.items()}, "loss": 1.0}, path)
    return path


def test_upstream_pth_loads(tmp_path, params):
    path = _save_pth(tmp_path, params)
    loaded, config = load_checkpoint(path, max_seq_len=64)
    assert config == CONFIG
    np.testing.assert_array_equal(loaded["final_layer.weight"], params["final_layer.weight"])


def test_a_model_folder_configures_its_pth(tmp_path, params):
    """A folder holding a ``.pth`` and a ``config.json`` is configured by that file (here a context
    and a RoPE convention no shape can tell); the ``.pth`` named as a file is not (downloads gather
    in folders), and neither is a folder without one."""
    import dataclasses

    config = dataclasses.replace(CONFIG, max_seq_len=96, rope_style="rotate_half")
    folder = tmp_path / "model"
    folder.mkdir()
    _save_pth(folder, params)
    _, inferred = load_checkpoint(folder)
    assert inferred.max_seq_len == 1024 and inferred.rope_style != "rotate_half", "negative control: no config.json"
    (folder / "config.json").write_text(json.dumps(config.to_upstream()))
    assert load_checkpoint(folder)[1] == config
    assert load_checkpoint(folder / "model.pth")[1] == inferred


def test_bfloat16_safetensors_are_widened_exactly(tmp_path, params):
    """NumPy has no bfloat16: such tensors are widened to float32 bit for bit as torch widens them,
    beside tensors of other dtypes in the same file."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = {k: torch.from_numpy(v) for k, v in params.items()}
    tensors["final_layer.weight"] = tensors["final_layer.weight"].bfloat16()
    tensors["final_layer.bias"] = tensors["final_layer.bias"].half()
    safetensors_torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_upstream()))
    loaded, config = load_checkpoint(tmp_path)
    assert config == CONFIG
    want = tensors["final_layer.weight"].float().numpy()
    assert loaded["final_layer.weight"].dtype == np.float32
    np.testing.assert_array_equal(loaded["final_layer.weight"], want)
    assert not np.array_equal(want, params["final_layer.weight"]), "negative control: bfloat16 rounded the weights"
    assert loaded["final_layer.bias"].dtype == np.float16
    np.testing.assert_array_equal(loaded["decoder.embedding.weight"], params["decoder.embedding.weight"])


def test_truncated_pth_is_refused(tmp_path, params):
    path = _save_pth(tmp_path, params)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.pth"):
        load_checkpoint(path)


def test_empty_and_missing_files_are_refused(tmp_path):
    empty = tmp_path / "empty.pth"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load_checkpoint(empty)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "absent.pth")


class _Payload:
    """Unpickling this would create the marker file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_code_executing_pickle_in_a_torch_zip_is_refused_and_never_runs(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"model_state_dict": {"x": _Payload(marker)}}, path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="could not be loaded safely"):
        load_checkpoint(path)
    assert not marker.exists(), "the pickle payload ran"


def test_raw_pickle_is_refused_without_unpickling(tmp_path):
    pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    path.write_bytes(pickle.dumps({"model_state_dict": _Payload(marker)}))
    with pytest.raises(CheckpointError, match="not a torch zip checkpoint"):
        load_checkpoint(path)
    assert not marker.exists(), "the pickle payload ran"


def test_corrupt_safetensors_is_refused(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(path)


def test_config_that_disagrees_with_the_weights_is_refused(tmp_path, params):
    pytest.importorskip("safetensors")
    save_safetensors(params, CONFIG, tmp_path)
    wrong = json.loads((tmp_path / "config.json").read_text()) | {"num_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(wrong))
    with pytest.raises(CheckpointError, match="mis-shaped"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("field", "value"), [("num_layers", 0), ("d_model", 15), ("num_heads", "2"), ("d_model", 18)]
)
def test_invalid_configs_are_refused(field, value):
    kwargs = CONFIG.to_upstream() | {field: value}
    with pytest.raises(ValueError, match=r"PLDRConfig|divisible|even"):
        PLDRConfig.from_upstream(kwargs)


# --- collapsed checkpoints and the one writer -------------------------------------------------


def _collapsed_state(params, g=None):
    """The collapsed state of ``params``: non-learner tensors + a constant G [L, H, d, d]."""
    state = {k: v for k, v in params.items() if not is_learner_key(k)}
    shape = (CONFIG.num_layers, CONFIG.num_heads, CONFIG.depth, CONFIG.depth)
    state[COLLAPSED_KEY] = np.random.default_rng(3).normal(size=shape).astype(np.float32) if g is None else g
    return state


def test_save_safetensors_is_byte_reproducible(tmp_path, params):
    """Two writes of one model give identical files (one metadata entry: no random header order)."""
    pytest.importorskip("safetensors")
    for name in ("a", "b"):
        save_safetensors(params, CONFIG, tmp_path / name)
        save_safetensors(_collapsed_state(params), CONFIG, tmp_path / f"c{name}", collapsed=True)
    for a, b in (("a", "b"), ("ca", "cb")):
        for f in ("model.safetensors", "config.json"):
            assert (tmp_path / a / f).read_bytes() == (tmp_path / b / f).read_bytes(), (a, f)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "ca" / "model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}
    assert json.loads((tmp_path / "ca" / "config.json").read_text()) == {**CONFIG.to_upstream(), "collapsed": True}
    assert "collapsed" not in json.loads((tmp_path / "a" / "config.json").read_text())
    with pytest.raises(ValueError, match=COLLAPSED_KEY):
        save_safetensors(params, CONFIG, tmp_path / "x", collapsed=True)
    with pytest.raises(ValueError, match=COLLAPSED_KEY):
        save_safetensors(_collapsed_state(params), CONFIG, tmp_path / "y")


def test_collapsed_round_trip(tmp_path, params):
    pytest.importorskip("safetensors")
    state = _collapsed_state(params)
    out = save_safetensors(state, CONFIG, tmp_path, collapsed=True)
    assert is_collapsed(tmp_path) and is_collapsed(out) and not is_collapsed(tmp_path / "config.json")
    for path in (tmp_path, out):
        loaded, config, gs = load_collapsed(path)
        assert config == CONFIG and set(loaded) == set(collapsed_shapes(CONFIG)) - {COLLAPSED_KEY}
        assert all(np.array_equal(loaded[k], state[k]) for k in loaded)
        assert len(gs) == CONFIG.num_layers
        assert np.array_equal(np.stack(gs), state[COLLAPSED_KEY])


def test_load_checkpoint_refuses_a_collapsed_folder(tmp_path, params):
    pytest.importorskip("safetensors")
    out = save_safetensors(_collapsed_state(params), CONFIG, tmp_path, collapsed=True)
    for path in (tmp_path, out):
        with pytest.raises(CheckpointError, match=r"collapsed checkpoint.*load_collapsed.*PLDRModel.from_pretrained"):
            load_checkpoint(path)


def _tamper(folder, **changes):
    from safetensors.numpy import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    for k, v in changes.items():
        if v is None:
            state.pop(k)
        else:
            state[k] = v
    save_file(state, str(folder / "model.safetensors"))


G_SHAPE = (CONFIG.num_layers, CONFIG.num_heads, CONFIG.depth, CONFIG.depth)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({COLLAPSED_KEY: None}, "model.safetensors is not a collapsed model .*missing keys " + re.escape(f"['{COLLAPSED_KEY}']")),
        (
            {COLLAPSED_KEY: np.zeros((1, 2, 8, 4), np.float32)},
            "model.safetensors is not a collapsed model .*mis-shaped tensors .*"
            + re.escape(f"{COLLAPSED_KEY}: expected {G_SHAPE}, got (1, 2, 8, 4)"),
        ),
        ({COLLAPSED_KEY: np.full(G_SHAPE, np.nan, np.float32)}, f"model.safetensors has non-finite values .*{COLLAPSED_KEY}"),
        ({COLLAPSED_KEY: np.zeros(G_SHAPE, np.int32)}, f"model.safetensors has tensors that are not floating point.*{COLLAPSED_KEY}"),
        (
            {"decoder.dec_layers.0.mha1.layernorm1.weight": np.ones(CONFIG.depth, np.float32)},
            "model.safetensors is not a collapsed model .*unexpected keys .*mha1.layernorm1.weight",
        ),
    ],
    ids=["missing-G", "misshaped-G", "nonfinite-G", "integer-G", "learner-key"],
)
def test_load_collapsed_refuses_bad_files_naming_file_and_keys(tmp_path, params, change, message):
    pytest.importorskip("safetensors")
    save_safetensors(_collapsed_state(params), CONFIG, tmp_path, collapsed=True)
    _tamper(tmp_path, **change)
    with pytest.raises(CheckpointError, match=message):
        load_collapsed(tmp_path)


def test_load_collapsed_refuses_what_is_not_collapsed(tmp_path, params):
    pytest.importorskip("safetensors")
    save_safetensors(params, CONFIG, tmp_path / "full")
    assert not is_collapsed(tmp_path / "full")
    with pytest.raises(CheckpointError, match=r'not a collapsed checkpoint .*"collapsed": true'):
        load_collapsed(tmp_path / "full")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_collapsed(tmp_path / "absent")
    save_safetensors(_collapsed_state(params), CONFIG, tmp_path / "two", collapsed=True)
    (tmp_path / "two" / "other.safetensors").write_bytes((tmp_path / "two" / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match=r"exactly one \.safetensors"):
        load_collapsed(tmp_path / "two")


def test_bfloat16_pth_is_widened_exactly_beyond_float16s_range(tmp_path, params):
    """A bfloat16 ``.pth`` keeps float32's exponent range: values past float16's 65 504 and below
    its normal range (~6e-5) must come back bit for bit (a widening through float16 gave inf and
    rounded subnormals)."""
    torch = pytest.importorskip("torch")
    weight = params["final_layer.weight"].copy()
    weight.flat[:4] = [3.0, 1e-6, 1e5, -2.5e-7]
    params = {**params, "final_layer.weight": weight}
    path = tmp_path / "model.pth"
    state = {k: torch.from_numpy(v) for k, v in params.items()}
    state["final_layer.weight"] = state["final_layer.weight"].bfloat16()
    torch.save({"model_state_dict": state}, path)
    loaded, _ = load_checkpoint(path, max_seq_len=64)
    want = state["final_layer.weight"].float().numpy()  # torch's own widening: exact
    np.testing.assert_array_equal(loaded["final_layer.weight"], want)
    assert np.isfinite(want).all() and want.flat[2] > 65504 and 0 < want.flat[1] < 6e-5  # the ranges are exercised
    assert not np.isfinite(want.flat[:4].astype(np.float16)).all(), "negative control: float16 cannot hold them"
