"""The PLDR-LLM v510 decoder built from the spec functions, with its caches (docs/spec.md §2–3).

Readable and exact, not fast: float64 NumPy by default, mpmath when the parameters are
object arrays of ``mpf`` (see :func:`to_backend`). Mirrors the published implementation
(``burcgokden/PLDR-LLM-with-KVG-cache``, ``pldr_model_v510``) including its rounding details:
both square roots are taken in float32, masked scores get −1e9 added, and the density
operator sums over every query row (padding and future rows included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, InputTypeError, NonFiniteError
from . import spec
from .config import PLDRConfig
from .numerics import DEFAULT_DPS, Array, float32_sqrt, is_mp, scalar, to_mp
from .sampling import check_sampling, check_seed, sample_next

#: Generation modes (docs/spec.md §3), the same names and meanings in the reference and the kernels:
#: ``nocache`` full recompute every step; ``kv`` K, V and the prompt's generator A cached;
#: ``kvg`` A_LM and G_LM frozen too; ``collapsed`` one constant operator per layer (the metric
#: learner never runs) with K, V cached — under a constant operator kv and kvg coincide.
MODES = ("nocache", "kv", "kvg", "collapsed")
#: The modes that cache what the metric learner computed from the prompt.
LEARNER_CACHE_MODES = ("kv", "kvg")


@dataclasses.dataclass
class LayerCache:
    """What one layer keeps between decoding steps (upstream ``kvcache`` and ``Gcache``)."""

    k: Array  # [B, H, T, d] rotated keys
    v: Array  # [B, H, T, d] values
    A: Array | None  # [B, H, d, d] metric-learner output of the prompt (None under constant G)
    A_LM: Array | None  # [B, H, d, d] metric tensor of the prompt
    G_LM: Array  # [B, H, d, d] energy-curvature operator used for new tokens
    key_allowed: Array  # [B, T] False for the prompt's padding keys


@dataclasses.dataclass
class ForwardResult:
    """Logits, the last hidden state, per-layer deductive tensors and caches."""

    logits: Array  # [B, S, V]
    hidden: Array  # [B, S, D] decoder output before the final layer
    deductive: list[dict[str, Array]]  # per layer: A, A_LM, A_P, G_LM, scores
    caches: list[LayerCache]


@dataclasses.dataclass
class GenerationResult:
    """Tokens (prompt + new) and the last-position logits of every step."""

    tokens: Array  # [B, S + N] int64
    step_logits: Array  # [B, N, V]


def to_backend(params: Mapping[str, Array], dps: int | None = None) -> dict[str, Array]:
    """Parameters as float64 (``dps=None``) or as exact mpf object arrays at ``dps`` digits."""
    if dps is None:
        return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    return {k: to_mp(np.asarray(v, dtype=np.float64), dps) for k, v in params.items()}


def _linear(x: Array, params: Mapping[str, Array], name: str) -> Array:
    """torch ``Linear``: x Wᵀ + b with W stored ``[out, in]``."""
    return x @ params[name + ".weight"].T + params[name + ".bias"]


def _glu(x: Array, params: Mapping[str, Array], prefix: str) -> Array:
    return spec.swiglu(x, *_glu_params(params, prefix))


def _glu_params(params: Mapping[str, Array], prefix: str) -> spec.GluParams:
    return tuple(params[f"{prefix}gluw{n}.{kind}"] for n in (1, 2, 3) for kind in ("weight", "bias"))  # type: ignore[return-value]


def _ln(x: Array, params: Mapping[str, Array], name: str) -> Array:
    return spec.layer_norm(x, params[name + ".weight"], params[name + ".bias"])


def embed(params: Mapping[str, Array], config: PLDRConfig, tokens: Array) -> Array:
    """h = LN(Emb[x] · √d_model), √ taken in float32 as upstream → [B, S, D]."""
    emb = params["decoder.embedding.weight"][tokens]  # [B, S, D]
    scaled = emb * scalar(float32_sqrt(config.d_model), emb)
    check_activation("the scaled embedding", scaled, 0)  # before the LayerNorm, which maps inf/NaN rows to β
    return _ln(scaled, params, "decoder.layernorm1")


def metric_learner_units(params: Mapping[str, Array], config: PLDRConfig, layer: int) -> list[Any]:
    """The residual units of layer ``layer`` as ``(blocks, gamma, beta)`` for spec.metric_learner."""
    p = f"decoder.dec_layers.{layer}.mha1.reslayerAs."
    return [
        (
            [_glu_params(params, f"{p}{j}.denseAs.{k}.") for k in range(config.num_denseA)],
            params[f"{p}{j}.layernormA.weight"],
            params[f"{p}{j}.layernormA.bias"],
        )
        for j in range(config.num_reslayerA)
    ]


def generator(params: Mapping[str, Array], config: PLDRConfig, layer: int, q_rot: Array) -> Array:
    """A = Φ_res(LN(Q̃ᵀQ̃)) per head from the rotated queries q_rot [B, H, S, d] → [B, H, d, d]."""
    p = f"decoder.dec_layers.{layer}.mha1."
    density = spec.density_operator(q_rot)  # [B, H, d, d]
    check_finite("the density operator", density, layer)  # LayerNorm would map inf/NaN rows to β
    return spec.metric_learner(
        density, params[p + "layernorm1.weight"], params[p + "layernorm1.bias"],
        metric_learner_units(params, config, layer),
    )




def check_finite(name: str, tensor: Array, layer: int) -> None:
    """Raise :class:`NonFiniteError` naming ``layer`` and the heads where ``tensor`` [B, H, …] is not finite."""
    if is_mp(tensor):
        return  # mpmath has an unbounded exponent range
    bad = ~np.isfinite(tensor)
    if bad.any():
        heads = sorted({int(h) for h in np.argwhere(bad)[:, 1]}) if tensor.ndim >= 2 else []
        hint = spec.POWER_OVERFLOW_HINT if name in ("A_P", "G_LM") else ""
        raise NonFiniteError(f"layer {layer}: {name} is not finite in heads {heads}{hint}")


def check_activation(name: str, x: Array, layer: int | None) -> None:
    """Raise :class:`NonFiniteError` naming ``layer`` and the positions where ``x`` [B, S, …] is not finite."""
    if is_mp(x):
        return
    bad = ~np.isfinite(x)
    if bad.any():
        positions = sorted({int(p) for p in np.argwhere(bad)[:, 1]}) if x.ndim >= 2 else []
        where = "the final layer" if layer is None else f"layer {layer}"
        raise NonFiniteError(
            f"{where}: {name} is not finite at positions {positions} (activations overflowed or the weights are not finite)"
        )


def backend_params(params: Mapping[str, Array]) -> Mapping[str, Array]:
    """``params`` with every float16 / float32 array upcast to float64 (the reference never computes
    in low precision: ``A_LM``'s 1e-9 floor would underflow in float16). float64 and mpmath
    (object) arrays and non-floating entries (buffers) pass unchanged.
    """
    if not isinstance(params, Mapping):
        raise InputTypeError(f"params must be a mapping of upstream key → array, got {type(params).__name__}")
    out: dict[str, Array] | None = None
    for key, value in params.items():
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.kind != "f" or arr.dtype == np.float64:
            continue
        if out is None:
            out = dict(params)
        out[key] = arr.astype(np.float64)
    return params if out is None else out


def power_stage(params: Mapping[str, Array], layer: int, a: Array) -> tuple[Array, Array, Array]:
    """(A_LM, A_P, G_LM) from the generator A [B, H, d, d] with the layer's W, b, P, a, b_a.

    Non-finite results (overflow of A_LM ** P) raise :class:`NonFiniteError` with layer and heads.
    """
    p = f"decoder.dec_layers.{layer}.mha1.plgatt_layer."
    check_finite("A", a, layer)
    a_lm = spec.metric_tensor(a, params[p + "Wlst"], params[p + "blst"])  # [B, H, d, d]
    with np.errstate(over="ignore", invalid="ignore"):
        a_p = spec.hadamard_power(a_lm, params[p + "pwlst"])  # [B, H, d, d]
        g_lm = spec.energy_curvature(a_p, params[p + "alst"], params[p + "balst"])  # [B, H, d, d]
    check_finite("A_LM", a_lm, layer)
    check_finite("A_P", a_p, layer)
    check_finite("G_LM", g_lm, layer)
    return a_lm, a_p, g_lm


def _heads(x: Array, config: PLDRConfig) -> Array:
    b, s, _ = x.shape
    return x.reshape(b, s, config.num_heads, config.depth).transpose(0, 2, 1, 3)  # [B, H, S, d]


def _merge(x: Array) -> Array:
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)  # [B, S, D]


def attention_support(tokens: Array, key_padding: Array | None = None) -> Array:
    """Allowed (query, key) pairs of a full pass: causal, padding keys ignored → [B, S, S].

    The padding keys are ``key_padding`` [B, S] (True = padding) when given, else the ids 0.
    """
    s = tokens.shape[1]
    pad = tokens == 0 if key_padding is None else check_key_padding(key_padding, tokens.shape)
    return np.broadcast_to(spec.attention_support(s, s, causal=True, key_padding=pad), (tokens.shape[0], s, s))


def check_key_padding(key_padding: Any, shape: tuple[int, ...]) -> Array:
    """An explicit key padding mask as a bool array of the tokens' ``shape`` [B, S], or one input error."""
    pad = np.asarray(key_padding)
    if pad.dtype != np.bool_ or pad.shape != tuple(shape):
        raise InputError(f"key_padding must be a bool array of the tokens' shape {tuple(shape)}, got {pad.dtype} {pad.shape}")
    return pad


def _check_tokens(tokens: Array, config: PLDRConfig, offset: int = 0) -> Array:
    tokens = np.asarray(tokens)
    if tokens.dtype == object:
        raise InputTypeError("token ids must be an integer array, got an object array (ragged rows or non-numbers?)")
    if tokens.ndim != 2:
        raise InputError(f"token ids must have shape [batch, seq], got {tokens.shape}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise InputError(f"token ids must be non-empty, got shape {tokens.shape}")
    if tokens.dtype.kind not in "iu":  # bool, float, complex, str: never token ids
        raise InputTypeError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.min() < 0 or tokens.max() >= config.input_vocab_size:
        raise InputError(
            f"token ids must lie in [0, {config.input_vocab_size}), got range "
            f"[{tokens.min()}, {tokens.max()}]"
        )
    if offset + tokens.shape[1] > config.max_seq_len:
        raise InputError(
            f"sequence length {offset + tokens.shape[1]} exceeds the context max_seq_len={config.max_seq_len}"
        )
    return tokens.astype(np.int64)


def _constant_operators(g: Sequence[Array] | str | None, config: PLDRConfig) -> Sequence[Array] | None:
    """``constant_g`` checked: one [H, d, d] (or [B, H, d, d]) operator per layer, or
    ``"identity"`` (SDPA in every layer), or None (the metric learner runs)."""
    if g is None:
        return None
    if isinstance(g, str):
        if g != "identity":
            raise InputError(f"unknown constant_g {g!r}; use 'identity', plga.inputs.load_operators(spec, config), "
                             "or one [H, d, d] array per layer")
        eye = np.broadcast_to(np.eye(config.depth), (config.num_heads, config.depth, config.depth))
        return [eye] * config.num_layers
    if len(g) != config.num_layers:
        raise InputError(f"constant G needs one operator per layer ({config.num_layers}), got {len(g)}")
    want = (config.num_heads, config.depth, config.depth)
    for i, gi in enumerate(g):
        if tuple(np.shape(gi))[-3:] != want:
            raise InputError(f"constant G of layer {i} must end in shape {want}, got {np.shape(gi)}")
        if not is_mp(gi):
            arr = np.asarray(gi)
            if arr.dtype.kind != "f":
                raise InputTypeError(f"constant G of layer {i} must be floating point, got dtype {arr.dtype}")
            if not np.all(np.isfinite(arr)):
                raise InputError(f"constant G of layer {i} has non-finite entries (NaN or inf)")
    return g


def decoder_layer(
    params: Mapping[str, Array],
    config: PLDRConfig,
    layer: int,
    h: Array,
    positions: Array,
    support: Array | None,
    cache: LayerCache | None = None,
    mode: str = "nocache",
    constant_g: Array | None = None,
) -> tuple[Array, dict[str, Array], LayerCache]:
    """One post-LN decoder layer: PLGA attention, residual + LN, gated FFN, residual + LN.

    Without ``cache`` this is the full (prompt or no-cache) pass; with ``cache`` it is a
    cached step whose new rows attend to the cached keys (docs/spec.md §3). Returns the new hidden
    state [B, S, D], the deductive tensors and the updated cache.
    """
    p = f"decoder.dec_layers.{layer}."
    q = spec.rope(_heads(_linear(h, params, p + "mha1.wq"), config), positions, config.rope_base, config.rope_style)
    k = spec.rope(_heads(_linear(h, params, p + "mha1.wk"), config), positions, config.rope_base, config.rope_style)
    v = _heads(_linear(h, params, p + "mha1.wv"), config)  # [B, H, S, d]
    deductive: dict[str, Array] = {}
    a = a_lm = None
    if constant_g is not None:
        g_lm = np.broadcast_to(constant_g, (h.shape[0], *np.shape(constant_g)[-3:]))
    elif cache is None:
        a = generator(params, config, layer, q)  # [B, H, d, d]
        a_lm, a_p, g_lm = power_stage(params, layer, a)
        deductive.update(A=a, A_LM=a_lm, A_P=a_p)
    elif mode == "kv":
        assert cache.A is not None
        a = cache.A  # the prompt's generator, frozen
        a_lm, a_p, g_lm = power_stage(params, layer, a)
        deductive.update(A=a, A_LM=a_lm, A_P=a_p)
    elif mode == "kvg":
        a, a_lm, g_lm = cache.A, cache.A_LM, cache.G_LM  # frozen prompt operator
    else:
        raise ValueError(f"unknown cached mode {mode!r}")
    deductive["G_LM"] = g_lm
    if cache is not None:
        k = np.concatenate([cache.k, k], axis=2)  # [B, H, T+S, d]
        v = np.concatenate([cache.v, v], axis=2)
        new_allowed = np.ones((h.shape[0], h.shape[1]), dtype=bool)  # generated keys: never masked
        key_allowed = np.concatenate([cache.key_allowed, new_allowed], axis=1)  # [B, T]
        support = spec.attention_support(h.shape[1], k.shape[2], causal=True, key_padding=~key_allowed)  # [B, S, T]
    else:
        if support is None:
            raise ValueError("a full (uncached) pass needs the attention support")
        key_allowed = support[:, -1, :]  # the last query sees every non-padding key
    scores = spec.plga_scores(q, g_lm, k, sqrt_d=float32_sqrt(config.depth))  # [B, H, S, T]
    deductive["scores"] = scores
    weights = spec.finite_mask_softmax(scores, support[:, None, :, :], spec.MASK_FILL)  # [B, H, S, T]
    attn = _linear(_merge(weights @ v), params, p + "mha1.dense")  # [B, S, D]
    # spec.layer_norm follows Lean (√ of a non-positive radicand is 0, x/0 = 0): it would map a
    # row holding inf/NaN to β silently, so the inputs of both LayerNorms are checked first.
    check_activation("the attention output", attn + h, layer)
    h1 = _ln(attn + h, params, p + "layernorm1")
    ffn = _glu(h1, params, p + "ffn.") + h1
    check_activation("the feed-forward output", ffn, layer)
    out = _ln(ffn, params, p + "layernorm2")
    new_cache = LayerCache(k=k, v=v, A=a, A_LM=a_lm, G_LM=g_lm, key_allowed=key_allowed)
    return out, deductive, new_cache


def forward(
    params: Mapping[str, Array],
    config: PLDRConfig,
    tokens: Array,
    *,
    constant_g: Sequence[Array] | None = None,
    key_padding: Array | None = None,
) -> ForwardResult:
    """The full forward pass on token ids [B, S] (id 0 is padding) → logits [B, S, V].

    ``constant_g`` (one [H, d, d] or [B, H, d, d] operator per layer) replaces the metric
    learner: the collapsed / custom-G model of docs/spec.md §3. ``key_padding`` [B, S] bool
    names the padding keys instead of the ids 0: all False scores a generated id 0 as the
    token it is, the way a cached decoding step attends to it.
    """
    tokens = _check_tokens(tokens, config)
    constant_g = _constant_operators(constant_g, config)
    params = backend_params(params)
    support = attention_support(tokens, key_padding)  # [B, S, S]
    positions = np.arange(tokens.shape[1])
    h = embed(params, config, tokens)
    check_activation("the embedding output", h, 0)
    deductive, caches = [], []
    for i in range(config.num_layers):
        g = None if constant_g is None else constant_g[i]
        h, ded, cache = decoder_layer(params, config, i, h, positions, support, constant_g=g)
        check_activation("the hidden state", h, i)
        deductive.append(ded)
        caches.append(cache)
    logits = _linear(h, params, "final_layer")  # [B, S, V]
    check_activation("the logits", logits, None)
    return ForwardResult(logits=logits, hidden=h, deductive=deductive, caches=caches)


def step(
    params: Mapping[str, Array],
    config: PLDRConfig,
    tokens: Array,
    caches: list[LayerCache],
    mode: str,
    constant_g: Sequence[Array] | None = None,
) -> tuple[Array, list[LayerCache]]:
    """A cached decoding step: new token ids [B, S_new] at positions after the cache → logits."""
    if mode not in ("kv", "kvg", "collapsed"):
        raise InputError(f"cached steps need mode 'kv', 'kvg' or 'collapsed', got {mode!r}")
    if (mode == "collapsed") != (constant_g is not None):
        raise InputError("mode 'collapsed' goes with constant_g, and constant_g with mode 'collapsed'")
    if len(caches) != config.num_layers or not all(isinstance(c, LayerCache) for c in caches):
        raise InputError(f"caches must be {config.num_layers} LayerCache objects (from forward), got {len(caches)}")
    offset = caches[0].k.shape[2]
    tokens = _check_tokens(tokens, config, offset)
    if tokens.shape[0] != caches[0].k.shape[0]:
        raise InputError(f"step has batch {tokens.shape[0]} but the cache holds batch {caches[0].k.shape[0]}")
    constant_g = _constant_operators(constant_g, config)
    params = backend_params(params)
    positions = np.arange(offset, offset + tokens.shape[1])
    h = embed(params, config, tokens)
    new_caches = []
    for i in range(config.num_layers):
        g = None if constant_g is None else constant_g[i]
        h, _, cache = decoder_layer(params, config, i, h, positions, None, caches[i], mode, g)
        check_activation("the hidden state", h, i)
        new_caches.append(cache)
    logits = _linear(h, params, "final_layer")
    check_activation("the logits", logits, None)
    return logits, new_caches


def steps_of(n: int, show: bool) -> Any:
    """``range(n)``, with a progress bar of the decoding steps when ``show`` (and stderr is a terminal)."""
    from ..progress import progress

    return progress(range(n), "generate", show=show, total=n)


def check_generation(mode: str, constant: bool, max_new_tokens: int) -> None:
    """The mode and length rules shared by the reference and the kernels (one home).

    ``mode`` one of :data:`MODES`; constant operators go with ``collapsed`` (cached) or
    ``nocache`` (recomputed), never with ``kv``/``kvg``, which cache what the metric learner
    computed from the prompt; ``collapsed`` needs constant operators; ``max_new_tokens`` ≥ 0.
    """
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "collapsed" and not constant:
        raise InputError("mode 'collapsed' needs constant operators (a collapsed model, or constant G per layer)")
    if mode in LEARNER_CACHE_MODES and constant:
        raise InputError(
            f"mode {mode!r} caches the metric learner's prompt operators; with constant operators use mode 'collapsed'"
        )
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise InputTypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be ≥ 0, got {max_new_tokens}")


def generate(
    params: Mapping[str, Array],
    config: PLDRConfig,
    prompt: Array,
    max_new_tokens: int,
    mode: str = "kv",
    *,
    constant_g: Sequence[Array] | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    progress: bool = False,
) -> GenerationResult:
    """Decode ``max_new_tokens`` tokens after ``prompt`` [B, S] (greedy unless temperature > 0).

    Modes (:data:`MODES`, docs/spec.md §3): ``nocache`` recomputes the whole forward (so G) every step;
    ``kv`` caches rotated K, V and the prompt's generator A and recomputes G_LM from that frozen
    A; ``kvg`` also freezes A_LM and G_LM; ``collapsed`` uses ``constant_g`` on the prompt and
    every step and never runs the learner. ``constant_g`` goes with ``collapsed`` or ``nocache``
    (full recompute under the constant operators). Cached steps attend to every cached key except
    the prompt's padding keys. Sampling (:mod:`plga.reference.sampling`) is seeded by ``seed``
    (default :data:`~plga.reference.sampling.DEFAULT_SEED`). ``progress`` shows a bar per
    generated token on a terminal (:mod:`plga.progress`).
    """
    check_generation(mode, constant_g is not None, max_new_tokens)
    check_sampling(temperature, top_k, top_p)
    seed = check_seed(seed)
    constant_g = _constant_operators(constant_g, config)
    tokens = _check_tokens(prompt, config)
    if tokens.shape[1] + max_new_tokens > config.max_seq_len:
        raise InputError(
            f"prompt length {tokens.shape[1]} + {max_new_tokens} new tokens exceeds max_seq_len={config.max_seq_len}"
        )
    rng = np.random.default_rng(seed)
    steps: list[Array] = []
    if mode == "nocache":
        for _ in steps_of(max_new_tokens, progress):
            logits = forward(params, config, tokens, constant_g=constant_g).logits[:, -1]  # [B, V]
            steps.append(logits)
            nxt = sample_next(logits, rng, temperature, top_k, top_p)
            tokens = np.concatenate([tokens, nxt[:, None]], axis=1)
    elif max_new_tokens:
        result = forward(params, config, tokens, constant_g=constant_g)
        caches, logits = result.caches, result.logits[:, -1]
        cached_mode = "collapsed" if constant_g is not None else mode
        for n in steps_of(max_new_tokens, progress):
            steps.append(logits)
            nxt = sample_next(logits, rng, temperature, top_k, top_p)
            tokens = np.concatenate([tokens, nxt[:, None]], axis=1)
            if n + 1 < max_new_tokens:
                out, caches = step(params, config, nxt[:, None], caches, cached_mode, constant_g)
                logits = out[:, -1]
    vocab = config.input_vocab_size
    step_logits = np.stack(steps, axis=1) if steps else np.zeros((tokens.shape[0], 0, vocab))
    return GenerationResult(tokens=tokens, step_logits=step_logits)


__all__ = [
    "DEFAULT_DPS",
    "MODES",
    "ForwardResult",
    "GenerationResult",
    "LayerCache",
    "attention_support",
    "backend_params",
    "check_activation",
    "check_finite", "check_generation", "check_sampling",
    "decoder_layer",
    "embed",
    "forward",
    "generate",
    "generator",
    "is_mp",
    "metric_learner_units",
    "power_stage",
    "sample_next",
    "step",
    "to_backend",
]
