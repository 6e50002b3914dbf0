"""Models and prompts for the audit: the built-in small model and prompt sets.

Collapsed checkpoints are written by :func:`plga.audit.collapsed.write_collapsed` and read by
:func:`plga.reference.checkpoint.load_collapsed`, in the project's one format (that of
``plga.kernels.PLDRModel.save_collapsed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataFileError, InputError, UsageError
from ..inputs import load_prompts as read_prompt_file  # noqa: F401  (re-exported: plga.inputs reads every prompt file)
from ..reference.checkpoint import expected_shapes
from ..reference.config import PLDRConfig

#: The built-in model: seeded random weights of a small PLDR-LLM (head dim 64 as in the paper).
BUILTIN_CONFIG = dict(
    num_layers=2, d_model=128, num_heads=2, dff=256, A_dff=48, num_reslayerA=2,
    num_denseA=2, input_vocab_size=32000, max_seq_len=256,
)

#: The default English prompt set (8 fixed prompts, used when a tokenizer is given).
DEFAULT_PROMPTS = (
    "The history of the city begins with a small settlement on the banks of the river, where",
    "In mathematics, a group is a set equipped with an operation that combines any two elements",
    "The recipe calls for two cups of flour, a pinch of salt, and a spoonful of honey, which",
    "When the storm finally passed, the villagers walked down to the harbor to see whether",
    "Photosynthesis is the process by which green plants use sunlight to turn water and carbon",
    "The committee met on Tuesday to discuss the budget for the coming year and agreed that",
    "She opened the old letter carefully, because the paper was thin and the ink had faded",
    "A computer program is a sequence of instructions that a machine can execute in order to",
)


def builtin_config(**overrides: Any) -> PLDRConfig:
    """The built-in model's configuration (``BUILTIN_CONFIG`` with ``overrides``)."""
    return PLDRConfig(**{**BUILTIN_CONFIG, **overrides})


def random_params(config: PLDRConfig, seed: int = 0, collapsed_g: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
    """Seeded random float32 weights for ``config`` (a reproducible, uncollapsed model).

    Linear weights N(0, 1/fan_in), biases N(0, 0.02²), LayerNorm γ = 1 + N(0, 0.1²),
    β = N(0, 0.1²); PLGA: W N(0, 1/d), b N(0, 0.5²), P N(0, 0.2²), a N(0, 1/d), b_a N(0, 0.1²).
    With ``collapsed_g`` (one [H, d, d] per layer) the model is collapsed by construction:
    a = 0 and b_a = G*, so G_LM = 0·A_P + G* = G* exactly for every input.
    """
    rng = np.random.default_rng(seed)
    d = config.depth
    out: dict[str, np.ndarray] = {}
    for key, shape in expected_shapes(config).items():
        if key.endswith("plgatt_layer.Wlst") or key.endswith("plgatt_layer.alst"):
            v = rng.normal(0.0, 1.0 / np.sqrt(d), shape)
        elif key.endswith("plgatt_layer.blst"):
            v = rng.normal(0.0, 0.5, shape)
        elif key.endswith("plgatt_layer.pwlst"):
            v = rng.normal(0.0, 0.2, shape)
        elif key.endswith("plgatt_layer.balst"):
            v = rng.normal(0.0, 0.1, shape)
        elif "layernorm" in key and key.endswith(".weight"):
            v = 1.0 + rng.normal(0.0, 0.1, shape)
        elif "layernorm" in key and key.endswith(".bias"):
            v = rng.normal(0.0, 0.1, shape)
        elif key.endswith(".bias"):
            v = rng.normal(0.0, 0.02, shape)
        elif key == "decoder.embedding.weight":
            v = rng.normal(0.0, 1.0, shape)
        else:
            v = rng.normal(0.0, 1.0 / np.sqrt(shape[-1]), shape)
        out[key] = v.astype(np.float32)
    if collapsed_g is not None:
        if len(collapsed_g) != config.num_layers:
            raise InputError(f"collapsed_g needs {config.num_layers} operators, got {len(collapsed_g)}")
        for i, g in enumerate(collapsed_g):
            p = f"decoder.dec_layers.{i}.mha1.plgatt_layer."
            out[p + "alst"] = np.zeros_like(out[p + "alst"])
            out[p + "balst"] = np.broadcast_to(np.asarray(g, dtype=np.float32), out[p + "balst"].shape).copy()
    return out


def builtin_prompt_ids(vocab: int, n: int = 8, seed: int = 1234) -> list[list[int]]:
    """The built-in deterministic token-id prompt set: ``n`` prompts of 10–17 ids in [4, vocab).

    Ids 0 (pad) and 3 (EOS) never occur (nor 1, 2), so the set is valid for any vocabulary ≥ 5.
    """
    if vocab < 5:
        raise InputError(f"the built-in prompt set needs a vocabulary of at least 5 ids, got {vocab}")
    rng = np.random.default_rng(seed)
    lengths = [12, 14, 16, 13, 15, 11, 17, 10][:n] + [12] * max(0, n - 8)
    return [[int(x) for x in rng.integers(4, vocab, size=s)] for s in lengths]


def load_tokenizer(path: str | Path) -> Any:
    """A SentencePiece processor from a ``.model`` file (one-line error when unreadable)."""
    try:
        import sentencepiece as spm
    except ImportError:
        raise UsageError("tokenizing text prompts needs the 'sentencepiece' package (pip install 'plga[audit]')") from None
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"tokenizer {path} does not exist")
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(str(path))
    except Exception as exc:  # sentencepiece raises OSError/RuntimeError on a bad file
        raise DataFileError(f"tokenizer {path} is not a SentencePiece model: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return sp


def encode_prompts(texts: Sequence[str], tokenizer: Any) -> list[list[int]]:
    """Encode text prompts without BOS or EOS (the v51 convention); empty encodings are an error."""
    ids = [list(map(int, tokenizer.EncodeAsIds(t))) for t in texts]
    empty = [i for i, x in enumerate(ids) if not x]
    if empty:
        raise InputError(f"prompts {empty} encode to no tokens")
    return ids


def validate_prompts(prompts: Sequence[Sequence[int]], config: PLDRConfig) -> list[list[int]]:
    """Check ids lie in [1, vocab) and lengths fit the context; return plain lists."""
    out = []
    for i, p in enumerate(prompts):
        p = [int(t) for t in p]
        if not p:
            raise InputError(f"prompt {i} is empty")
        if min(p) < 1 or max(p) >= config.input_vocab_size:
            raise InputError(f"prompt {i} has token ids outside [1, {config.input_vocab_size}): range [{min(p)}, {max(p)}]")
        if len(p) >= config.max_seq_len:
            raise InputError(f"prompt {i} has {len(p)} tokens, the context is {config.max_seq_len}")
        out.append(p)
    if not out:
        raise InputError("no prompts")
    return out
