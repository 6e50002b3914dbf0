"""``PLDRConfig``: the hyperparameters of a PLDR-LLM v510 decoder (SPEC §2)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Upstream hyperparameter keys, in the order the published hyperparameter files list them.
UPSTREAM_KEYS = (
    "num_layers",
    "d_model",
    "num_heads",
    "dff",
    "A_dff",
    "num_reslayerA",
    "num_denseA",
    "input_vocab_size",
    "max_seq_len",
)

#: Transformers-port ``config.json`` field → upstream key.
HF_FIELDS = {
    "num_hidden_layers": "num_layers",
    "hidden_size": "d_model",
    "num_attention_heads": "num_heads",
    "intermediate_size": "dff",
    "A_dff": "A_dff",
    "num_reslayerA": "num_reslayerA",
    "num_denseA": "num_denseA",
    "vocab_size": "input_vocab_size",
    "max_position_embeddings": "max_seq_len",
}


@dataclasses.dataclass(frozen=True)
class PLDRConfig:
    """Hyperparameters of the decoder; field names are the upstream hyperparameter keys."""

    num_layers: int
    d_model: int
    num_heads: int
    dff: int
    A_dff: int
    num_reslayerA: int
    num_denseA: int
    input_vocab_size: int
    max_seq_len: int = 1024
    rope_style: str = "interleaved"  # v51 checkpoints; "rotate_half" for v52
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for key in UPSTREAM_KEYS:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"PLDRConfig.{key} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.depth % 2:
            raise ValueError(f"head dimension d_model/num_heads = {self.depth} must be even for RoPE")
        if self.rope_style not in ("interleaved", "rotate_half"):
            raise ValueError(f"rope_style must be 'interleaved' or 'rotate_half', got {self.rope_style!r}")

    @property
    def depth(self) -> int:
        """Head dimension d = d_model / num_heads."""
        return self.d_model // self.num_heads

    @classmethod
    def from_name(cls, name: str) -> PLDRConfig:
        """A preset: ``tiny``, ``small`` or ``paper-110m`` (the released v51 110M shape)."""
        try:
            return cls(**PRESETS[name])
        except KeyError:
            raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None

    @classmethod
    def from_upstream(cls, hp: Mapping[str, Any]) -> PLDRConfig:
        """From an upstream hyperparameter dict (extra training keys are ignored)."""
        missing = [k for k in UPSTREAM_KEYS[:-1] if k not in hp]
        if missing:
            raise ValueError(f"hyperparameter dict lacks {missing}")
        kwargs = {k: hp[k] for k in (*UPSTREAM_KEYS, "rope_style", "rope_base") if k in hp}
        return cls(**kwargs)

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> PLDRConfig:
        """From a Transformers-port ``config.json`` mapping (``model_type: pldrllm``)."""
        kwargs: dict[str, Any] = {}
        for field, key in HF_FIELDS.items():
            if field in cfg and cfg[field] is not None:
                kwargs[key] = cfg[field]
        if "d_model" not in kwargs and "head_dim" in cfg and "num_heads" in kwargs:
            kwargs["d_model"] = cfg["head_dim"] * kwargs["num_heads"]
        missing = [k for k in UPSTREAM_KEYS[:-1] if k not in kwargs]
        if missing:
            raise ValueError(f"config.json lacks the fields for {missing}")
        if cfg.get("reference_rope") is False:
            kwargs["rope_style"] = "rotate_half"
        if cfg.get("rope_theta") is not None:
            kwargs["rope_base"] = float(cfg["rope_theta"])
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path: str | Path) -> PLDRConfig:
        """From a JSON file: an upstream dict, a ``{"config": {...}}`` wrapper, or an HF config."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:  # ValueError covers JSONDecodeError and UnicodeDecodeError
            raise ValueError(f"cannot read config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"config {path} must hold a JSON object")
        if "config" in data and isinstance(data["config"], dict):
            data = data["config"]
        if "num_layers" in data:
            return cls.from_upstream(data)
        return cls.from_hf(data)

    def to_upstream(self) -> dict[str, Any]:
        """The upstream hyperparameter dict, plus the RoPE convention."""
        return {k: getattr(self, k) for k in (*UPSTREAM_KEYS, "rope_style", "rope_base")}


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        num_layers=1, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1,
        num_denseA=2, input_vocab_size=37, max_seq_len=64,
    ),
    "small": dict(
        num_layers=2, d_model=256, num_heads=4, dff=683, A_dff=64, num_reslayerA=2,
        num_denseA=2, input_vocab_size=32000, max_seq_len=1024,
    ),
    "paper-110m": dict(
        num_layers=5, d_model=896, num_heads=14, dff=2389, A_dff=170, num_reslayerA=8,
        num_denseA=2, input_vocab_size=32000, max_seq_len=1024,
    ),
}

_LAYER_KEY = re.compile(r"^decoder\.dec_layers\.(\d+)\.")
_UNIT_KEY = re.compile(r"\.mha1\.reslayerAs\.(\d+)\.denseAs\.(\d+)\.")


def infer_config(shapes: Mapping[str, tuple[int, ...]], max_seq_len: int = 1024) -> PLDRConfig:
    """Infer the configuration from state-dict key names and tensor shapes.

    Every field but the context length is fixed by the shapes and key counts.
    """
    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise ValueError(f"cannot infer the configuration: the state dict has no {key!r}")
        return tuple(shapes[key])

    vocab, d_model = need("decoder.embedding.weight")
    layers = {int(m.group(1)) for k in shapes if (m := _LAYER_KEY.match(k))}
    if not layers:
        raise ValueError("cannot infer the configuration: the state dict has no decoder.dec_layers.* keys")
    num_heads = need("decoder.dec_layers.0.mha1.plgatt_layer.Wlst")[0]
    dff = need("decoder.dec_layers.0.ffn.gluw1.weight")[0]
    units = {(int(m.group(1)), int(m.group(2))) for k in shapes if (m := _UNIT_KEY.search(k))}
    if not units:
        raise ValueError("cannot infer the configuration: no mha1.reslayerAs.* keys (a custom-G model?)")
    a_dff = need("decoder.dec_layers.0.mha1.reslayerAs.0.denseAs.0.gluw1.weight")[0]
    return PLDRConfig(
        num_layers=max(layers) + 1,
        d_model=d_model,
        num_heads=num_heads,
        dff=dff,
        A_dff=a_dff,
        num_reslayerA=max(u for u, _ in units) + 1,
        num_denseA=max(k for _, k in units) + 1,
        input_vocab_size=vocab,
        max_seq_len=max_seq_len,
    )
