"""Every configuration value is validated in one place, ``PLDRConfig`` construction, whatever
the source (keywords, upstream dict, Transformers ``config.json``, a JSON file, inferred
shapes), so every backend sees the same checked values and no configuration can ask a backend
for unbounded tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from plga.errors import CheckpointError, InputError
from plga.reference.checkpoint import (
    expected_shapes,
    load_checkpoint,
    random_params,
    save_safetensors,
)
from plga.reference.config import LIMITS, MAX_PARAMETERS, MAX_ROPE_ENTRIES, PLDRConfig

TINY = PLDRConfig.from_name("tiny").to_upstream()  # 1 layer, d_model 16, 2 heads of d = 8

BAD_VALUES = [
    ("rope_base", -10000.0, r"rope_base must be a finite number > 0, got -10000\.0"),
    ("rope_base", 0, "rope_base must be a finite number > 0"),
    ("rope_base", float("nan"), "rope_base must be a finite number > 0, got nan"),
    ("rope_base", float("inf"), "rope_base must be a finite number > 0, got inf"),
    ("rope_base", "10000", "rope_base must be a finite number > 0, got '10000'"),
    ("rope_base", True, "rope_base must be a finite number > 0, got True"),
    ("rope_base", None, "rope_base must be a finite number > 0, got None"),
    ("rope_base", 10**400, r"rope_base must be a finite number > 0, got 1000000.*\.\.\.$"),
    ("rope_style", "neox", r"rope_style must be one of \('interleaved', 'rotate_half'\), got 'neox'"),
    ("rope_style", 1, "rope_style must be one of"),
    ("d_model", 15, r"d_model \(15\) must be divisible by num_heads \(2\)"),
    ("d_model", 18, "head dimension d_model/num_heads = 9 must be even"),
    ("num_layers", 0, r"num_layers must lie in \[1, 1024\], got 0"),
    ("num_layers", -1, r"num_layers must lie in \[1, 1024\]"),
    ("num_layers", 1025, r"num_layers must lie in \[1, 1024\], got 1025"),
    ("num_layers", 2.0, "num_layers must be an integer, got 2.0"),
    ("num_layers", True, "num_layers must be an integer, got True"),
    ("num_layers", "2", "num_layers must be an integer, got '2'"),
    ("num_layers", "x" * 10**6, r"num_layers must be an integer, got 'xxxx.*\.\.\.$"),
    ("num_heads", 2048, r"num_heads must lie in \[1, 1024\]"),
    ("dff", 10**12, r"dff must lie in \[1, 262144\]"),
    ("A_dff", 0, "A_dff must lie in"),
    ("num_reslayerA", 65, r"num_reslayerA must lie in \[1, 64\]"),
    ("num_denseA", 17, r"num_denseA must lie in \[1, 16\]"),
    ("input_vocab_size", 2**24 + 1, r"input_vocab_size must lie in \[1, 16777216\]"),
    ("max_seq_len", 2**20 + 1, r"max_seq_len must lie in \[1, 1048576\]"),
    ("max_seq_len", 10**18, r"max_seq_len must lie in"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_VALUES, ids=[f"{f}={str(v)[:12]}" for f, v, _ in BAD_VALUES])
def test_every_invalid_value_is_refused_by_every_constructor(tmp_path, field, value, message):
    bad = TINY | {field: value}
    with pytest.raises(InputError, match=message):
        PLDRConfig(**bad)
    with pytest.raises(InputError, match=message):
        PLDRConfig.from_upstream(bad)
    if isinstance(value, float) and not math.isfinite(value):
        return  # JSON has no NaN / inf: refused by the reader (test_json_non_numbers_are_refused)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(CheckpointError, match=rf"config .*config\.json: .*{message}"):
        PLDRConfig.from_json(path)


def test_values_at_the_limits_are_accepted():
    """Negative control: the limits themselves construct (each on the tiny model)."""
    for field in ("num_layers", "num_heads", "dff", "A_dff", "num_reslayerA", "num_denseA", "input_vocab_size", "max_seq_len"):
        changes = {field: LIMITS[field]}
        if field == "num_heads":
            changes["d_model"] = 2 * LIMITS["num_heads"]
        PLDRConfig(**(TINY | changes))
    PLDRConfig(**(TINY | {"d_model": LIMITS["d_model"], "num_heads": 1024}))
    assert PLDRConfig(**(TINY | {"rope_base": 1e-3, "rope_style": "rotate_half"})).rope_base == 1e-3


def test_derived_bounds_rope_tables_and_weight_count():
    at_rope_limit = PLDRConfig(**(TINY | {"d_model": 128, "max_seq_len": LIMITS["max_seq_len"]}))  # depth 64
    assert at_rope_limit.max_seq_len * at_rope_limit.depth == MAX_ROPE_ENTRIES
    with pytest.raises(InputError, match=r"max_seq_len × depth = 1048576 × 128 exceeds 67108864 RoPE entries"):
        PLDRConfig(**(TINY | {"d_model": 256, "num_heads": 2, "max_seq_len": 2**20}))
    with pytest.raises(InputError, match=rf"describes \d+ weights; at most {MAX_PARAMETERS}"):
        PLDRConfig(**(TINY | {"d_model": 2**16, "num_heads": 1024, "num_layers": 3}))


@pytest.mark.parametrize("name", ["tiny", "small", "paper-110m"])
def test_parameter_count_matches_the_tensor_shapes(name):
    """The closed form behind MAX_PARAMETERS, against the shapes the loaders check."""
    c = PLDRConfig.from_name(name)
    assert c.parameter_count == sum(math.prod(s) for s in expected_shapes(c).values())
    odd = PLDRConfig(num_layers=3, d_model=24, num_heads=3, dff=10, A_dff=7, num_reslayerA=2, num_denseA=3, input_vocab_size=11)
    assert odd.parameter_count == sum(math.prod(s) for s in expected_shapes(odd).values())


def test_numpy_integers_are_plain_ints():
    c = PLDRConfig(**(TINY | {"num_layers": np.int64(1), "rope_base": np.float32(500.0)}))
    assert type(c.num_layers) is int and type(c.rope_base) is float and c.rope_base == 500.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reference_rope": "false"}, "reference_rope must be true or false, got 'false'"),
        ({"rope_theta": "1e4"}, "rope_base must be a finite number > 0, got '1e4'"),
        ({"rope_theta": -1}, "rope_base must be a finite number > 0, got -1"),
        ({"hidden_size": None, "head_dim": "8"}, "head_dim must be an integer"),
        ({"hidden_size": None, "head_dim": "x" * 1000, "num_attention_heads": 10**6}, "head_dim must be an integer"),
        ({"hidden_size": None, "head_dim": 8, "num_attention_heads": 10**9}, "num_attention_heads must be an integer in"),
    ],
    ids=["reference_rope-string", "rope_theta-string", "rope_theta-negative", "head_dim-string", "head_dim-string-times-1e6", "heads-1e9"],
)
def test_transformers_config_fields_are_validated(tmp_path, changes, message):
    hf = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24, "A_dff": 12,
          "num_reslayerA": 1, "num_denseA": 2, "vocab_size": 37, "max_position_embeddings": 64}
    assert PLDRConfig.from_hf(hf) == PLDRConfig.from_name("tiny")  # negative control
    with pytest.raises(InputError, match=message):
        PLDRConfig.from_hf(hf | changes)
    (tmp_path / "config.json").write_text(json.dumps(hf | changes))
    with pytest.raises(CheckpointError, match=message):
        PLDRConfig.from_json(tmp_path / "config.json")


@pytest.mark.parametrize("text", ['{"num_layers": NaN}', '{"rope_base": Infinity}', '{"rope_base": -Infinity}'])
def test_json_non_numbers_are_refused(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match="is not a JSON number"):
        PLDRConfig.from_json(tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps(TINY)[:-1] + ', "rope_base": 1e400}')  # overflows to inf
    with pytest.raises(CheckpointError, match="rope_base must be a finite number > 0, got inf"):
        PLDRConfig.from_json(tmp_path / "config.json")


def test_negative_rope_base_is_refused_by_every_backend(tmp_path):
    """Before: the reference ran rope_base = -10000 to finite (wrong) logits; torch refused.
    Now the config cannot be built, so both loaders refuse it with the same message."""
    pytest.importorskip("safetensors")
    torch = pytest.importorskip("torch")
    from plga.kernels import PLDRModel

    config = PLDRConfig.from_name("tiny")
    save_safetensors(random_params(config), config, tmp_path)
    good = json.loads((tmp_path / "config.json").read_text())
    assert PLDRModel.from_pretrained(tmp_path, dtype=torch.float64).config.rope_base == 10000.0  # control
    (tmp_path / "config.json").write_text(json.dumps(good | {"rope_base": -10000.0}))
    for load in (load_checkpoint, PLDRModel.from_pretrained):
        with pytest.raises(CheckpointError, match=r"config\.json: PLDRConfig\.rope_base must be a finite number > 0, got -10000\.0"):
            load(tmp_path)


def test_collapsed_flag_must_be_a_boolean(tmp_path):
    from plga.reference.checkpoint import is_collapsed, load_collapsed

    pytest.importorskip("safetensors")
    config = PLDRConfig.from_name("tiny")
    save_safetensors(random_params(config), config, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | {"collapsed": "yes"}))
    assert not is_collapsed(tmp_path)
    with pytest.raises(CheckpointError, match=r'"collapsed" must be true or false, got \'yes\''):
        load_collapsed(tmp_path)
