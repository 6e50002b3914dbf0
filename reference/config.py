"""``PLDRConfig``: the hyperparameters of a PLDR-LLM v510 decoder (docs/spec.md §2)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, InputError

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


#: Upper bound of every size field. Far beyond any published PLDR-LLM (110M: 5 layers, d_model
#: 896, 14 heads, vocab 32000, context 1024), low enough that no configuration can make a
#: backend allocate unbounded tables before the weights are checked against it.
LIMITS = {
    "num_layers": 1024,
    "d_model": 1 << 16,
    "num_heads": 1024,
    "dff": 1 << 18,
    "A_dff": 1 << 16,
    "num_reslayerA": 64,
    "num_denseA": 16,
    "input_vocab_size": 1 << 24,
    "max_seq_len": 1 << 20,
}
#: The most weights a configuration may describe (2^35 ≈ 3.4e10: 128 GiB in float32).
MAX_PARAMETERS = 1 << 35
#: The most RoPE table entries, ``max_seq_len × depth`` (the cos/sin tables are [max_seq_len, d/2]
#: each; 2^26 entries are 512 MiB in float64), e.g. a context of 2^20 at d = 64.
MAX_ROPE_ENTRIES = 1 << 26
#: The RoPE pairings: v51 checkpoints interleave (2a, 2a+1); v52 rotates halves (a, a + d/2).
ROPE_STYLES = ("interleaved", "rotate_half")


@dataclasses.dataclass(frozen=True)
class PLDRConfig:
    """Hyperparameters of the decoder; field names are the upstream hyperparameter keys.

    Construction validates every field, whatever the source (preset, JSON file, inferred from
    tensor shapes, a caller), so every backend sees the same checked values: sizes are
    integers in [1, :data:`LIMITS`], ``d_model = num_heads × depth`` with ``depth`` even,
    the weights at most :data:`MAX_PARAMETERS`, ``max_seq_len × depth`` at most
    :data:`MAX_ROPE_ENTRIES`, ``rope_style`` one of :data:`ROPE_STYLES`, ``rope_base`` a finite
    number > 0. A violation raises :class:`plga.errors.InputError` naming the field.
    """

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
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise InputError(f"PLDRConfig.{key} must be an integer, got {_shown(value)}")
            if not 1 <= value <= LIMITS[key]:
                raise InputError(f"PLDRConfig.{key} must lie in [1, {LIMITS[key]}], got {value}")
            object.__setattr__(self, key, int(value))  # numpy integers become plain ints
        if self.d_model % self.num_heads:
            raise InputError(f"PLDRConfig: d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        if self.depth % 2:
            raise InputError(f"PLDRConfig: head dimension d_model/num_heads = {self.depth} must be even for RoPE")
        if not isinstance(self.rope_style, str) or self.rope_style not in ROPE_STYLES:
            raise InputError(f"PLDRConfig.rope_style must be one of {ROPE_STYLES}, got {_shown(self.rope_style)}")
        base = self.rope_base
        try:
            value = float(base) if isinstance(base, numbers.Real) and not isinstance(base, bool) else math.nan
        except OverflowError:  # an integer of hundreds of digits
            value = math.inf
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"PLDRConfig.rope_base must be a finite number > 0, got {_shown(base)}")
        object.__setattr__(self, "rope_base", value)
        if self.max_seq_len * self.depth > MAX_ROPE_ENTRIES:
            raise InputError(
                f"PLDRConfig: max_seq_len × depth = {self.max_seq_len} × {self.depth} exceeds {MAX_ROPE_ENTRIES} RoPE entries"
            )
        if self.parameter_count > MAX_PARAMETERS:
            raise InputError(f"PLDRConfig describes {self.parameter_count} weights; at most {MAX_PARAMETERS} are supported")

    @property
    def parameter_count(self) -> int:
        """The number of weights of a v510 decoder with this configuration (closed form)."""
        d, h, n, v = self.depth, self.num_heads, self.d_model, self.input_vocab_size
        glu_a = 3 * self.A_dff * d + 2 * self.A_dff + d  # one gluw1/2/3 unit of the metric learner
        learner = self.num_reslayerA * (self.num_denseA * glu_a + 2 * d) + 5 * h * d * d + 2 * d
        layer = 4 * (n * n + n) + learner + 3 * self.dff * n + 2 * self.dff + n + 4 * n
        return 2 * v * n + v + self.num_layers * layer + 2 * n

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
            raise InputError(f"unknown preset {_shown(name)}; known: {', '.join(PRESETS)}") from None

    @classmethod
    def from_upstream(cls, hp: Mapping[str, Any]) -> PLDRConfig:
        """From an upstream hyperparameter dict (extra training keys are ignored)."""
        missing = [k for k in UPSTREAM_KEYS[:-1] if k not in hp]
        if missing:
            raise InputError(f"hyperparameter dict lacks {missing}")
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
            head_dim, heads = cfg["head_dim"], kwargs["num_heads"]
            for name, value in (("head_dim", head_dim), ("num_attention_heads", heads)):
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LIMITS["d_model"]:
                    raise InputError(f"config {name} must be an integer in [1, {LIMITS['d_model']}], got {_shown(value)}")
            kwargs["d_model"] = head_dim * heads
        missing = [k for k in UPSTREAM_KEYS[:-1] if k not in kwargs]
        if missing:
            raise InputError(f"config.json lacks the fields for {missing}")
        reference_rope = cfg.get("reference_rope")
        if reference_rope is not None and not isinstance(reference_rope, bool):
            raise InputError(f"config reference_rope must be true or false, got {_shown(reference_rope)}")
        if reference_rope is False:
            kwargs["rope_style"] = "rotate_half"
        if cfg.get("rope_theta") is not None:
            kwargs["rope_base"] = cfg["rope_theta"]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path: str | Path) -> PLDRConfig:
        """From a JSON file: an upstream dict, a ``{"config": {...}}`` wrapper, or an HF config.

        The file must be a regular file of at most :data:`plga.inputs.MAX_TEXT_BYTES`; every
        problem (unreadable, not JSON, not an object, an invalid value) is a
        :class:`plga.errors.CheckpointError` naming the file.
        """
        from ..inputs import read_json

        data = read_json(path, "config", CheckpointError)
        if not isinstance(data, dict):
            raise CheckpointError(f"config {path} must hold a JSON object, got {type(data).__name__}")
        if "config" in data and isinstance(data["config"], dict):
            data = data["config"]
        try:
            if "num_layers" in data:
                return cls.from_upstream(data)
            return cls.from_hf(data)
        except InputError as exc:
            raise CheckpointError(f"config {path}: {exc}") from None

    def to_upstream(self) -> dict[str, Any]:
        """The upstream hyperparameter dict, plus the RoPE convention."""
        return {k: getattr(self, k) for k in (*UPSTREAM_KEYS, "rope_style", "rope_base")}


def _shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters (a hostile value may be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


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
    def need(key: str, rank: int) -> tuple[int, ...]:
        if key not in shapes:
            raise InputError(f"cannot infer the configuration: the state dict has no {key!r}")
        shape = tuple(shapes[key])
        if len(shape) != rank:
            raise InputError(f"cannot infer the configuration: {key!r} has shape {shape}, expected {rank} dimensions")
        return shape

    def index(text: str) -> int:
        if len(text) > 9:  # a layer or unit index beyond every limit: refused by PLDRConfig anyway
            return 10**9
        return int(text)

    vocab, d_model = need("decoder.embedding.weight", 2)
    layers = {index(m.group(1)) for k in shapes if (m := _LAYER_KEY.match(k))}
    if not layers:
        raise InputError("cannot infer the configuration: the state dict has no decoder.dec_layers.* keys")
    num_heads = need("decoder.dec_layers.0.mha1.plgatt_layer.Wlst", 3)[0]
    dff = need("decoder.dec_layers.0.ffn.gluw1.weight", 2)[0]
    units = {(index(m.group(1)), index(m.group(2))) for k in shapes if (m := _UNIT_KEY.search(k))}
    if not units:
        raise InputError("cannot infer the configuration: no mha1.reslayerAs.* keys (a custom-G model?)")
    a_dff = need("decoder.dec_layers.0.mha1.reslayerAs.0.denseAs.0.gluw1.weight", 2)[0]
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
