"""``PLDRModel``: the PLDR-LLM v510 decoder in torch, with static caches and generation.

The module tree and its upstream state-dict names are in :mod:`.modules`. Every layer attends
through :func:`plga.kernels.functional.plga_attention` — the function the conformance suite
certifies — with ``backend="sdpa"`` (fused) or ``"eager"`` (the published algorithm: the
S×T scores materialized, module by module).

Semantics follow :mod:`plga.reference.decoder` exactly (docs/spec.md §2–3): float32-rounded
√d_model and √d, the additive −1e9 mask, the density operator over every query row (padding
included), cached steps attending to every cached key except the prompt's padding keys. The
operator chain (Gram, metric learner, power stage, G_LM, ``collapsed_G``) runs in float32 or
wider whatever the model dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ..errors import CheckpointError, InputError, InputTypeError
from ..reference.checkpoint import (
    COLLAPSED_KEY,
    is_collapsed,
    is_learner_key,
    load_checkpoint,
    load_collapsed,
    save_safetensors,
)
from ..reference.config import PLDRConfig
from ..reference.decoder import MODES, check_generation, steps_of
from ..reference.numerics import float32_sqrt
from ..reference.sampling import check_sampling, check_seed, sample_next
from . import capture, native
from . import functional as KF
from .cache import DecodeCache, LayerCache, RopeTables
from .collapse import CollapseReport, collapse_statistics
from .finite import DEDUCTIVE, FiniteGuard
from .modules import LOW_PRECISION, PLDRDecoder
from .packed import Packed, PackedWeights, intra_op_threads, packed_gated, packed_linear

GLike = Any  # None | "identity" | tensor/array [L, H, d, d] or [L, B, H, d, d] | list of [H, d, d] / [B, H, d, d]


# --- results and caches ---------------------------------------------------------------------


@dataclasses.dataclass
class ModelOutput:
    """``logits``: [B, S, V] ("all"), [B, V] ("last"), [B, n, V] (index) or None.

    ``deductive`` (on request): per layer a dict with A, A_LM, A_P (absent under a constant G),
    G_LM [B, H, d, d] and the unmasked scaled scores [B, H, S, T] (upstream ``Ep``).
    """

    logits: Tensor | None
    hidden: Tensor  # [B, S, D] decoder output before final_layer ([B, 1, D] for logits="last", fused backend)
    deductive: list[dict[str, Tensor]] | None = None


@dataclasses.dataclass
class GenerationOutput:
    tokens: Tensor  # [B, S + N] prompt and new tokens
    step_logits: Tensor | None  # [B, N, V] last-position logits of every step (on request)


@dataclasses.dataclass
class LoglikOutput:
    token_logprobs: Tensor  # [B, S-1] log p(x_{t+1} | x_{≤t}), float64
    mask: Tensor  # [B, S-1] True where the target is a real token (id ≠ 0)
    total: Tensor  # [B] sum over the mask


@dataclasses.dataclass
class _Pass:
    """What every layer of one forward pass or decoding step shares."""

    start: int  # position of the first new row
    operators: list[Tensor] | None  # constant per-layer G [H, d, d] / [B, H, d, d], or None
    mode: str | None  # None: a full pass (fills ``cache`` if given); kv / kvg / collapsed: a cached step
    cache: DecodeCache | None
    key_padding: Tensor | None  # [B, T] True at padding keys, None when there is none
    backend: str  # "sdpa" | "eager"
    rope: tuple[Tensor, ...] | None  # rotation tables of the packed path; None: the module path
    weights: list[tuple[Packed, ...]] | None = None  # each layer's packed products (the packed path)
    final: Packed | None = None  # the packed vocabulary projection (the packed path)
    position: Tensor | None = None  # [1] a captured step's position (static shapes: the whole cache, later keys masked)
    deductive: bool = False
    guard: FiniteGuard | None = None
    guard_last_only: bool = False  # generate's own steps: only the last layer's hidden state


class _NoRandomFills(TorchFunctionMode):
    """Random fills as no-ops, for building on the meta device: a meta tensor holds no values,
    but torch runs its random fill through a Python reference kernel whose first call imports
    torch._dynamo (0.8 s of every fresh process's model load). Thread-local, like every mode."""

    _FILLS = frozenset((Tensor.normal_, Tensor.uniform_))

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self._FILLS or getattr(func, "__module__", None) == "torch.nn.init":  # nn.init.*_(tensor, ...)
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


class PLDRModel(nn.Module):
    """The PLDR-LLM v510 decoder (docs/spec.md §2) with fused PLGA attention and static caches.

    Non-finite values are never returned silently: every forward and step checks the deductive
    tensors (A, A_LM, A_P, G_LM) and the hidden state of every layer (of a pass returning the
    last logits, the last layer's computed row) and raises
    :class:`~plga.errors.NonFiniteError` naming the layer and heads (one device sync per call;
    the captured steps of a generation are checked together after the last one, so that no
    sync stalls a CUDA graph's replays).
    Set ``model.check_finite = False`` to skip the check.
    """

    #: Check deductive tensors and hidden states for NaN / inf after every forward and step.
    check_finite: bool = True
    #: Opt-in: :meth:`generate`'s cached steps run captured (:mod:`plga.kernels.capture`: the
    #: whole step one compiled graph on static shapes; a CUDA graph on CUDA), and one-row
    #: products on the CPU run the compiled row GEMV (:func:`plga.kernels.packed.rows_gemv`).
    #: Costs one compilation per (batch, cache capacity, mode) — tens of seconds, cached on disk
    #: across processes (a later process compiles in a few seconds) — so it pays off on long
    #: generations (``plga bench`` measures both compile times and the break-even). The
    #: captured step is certified like the rest: ``plga conformance --impl kernels-captured``.
    compile_decode: bool = False
    #: Intra-op threads of the vocabulary projection (None: the process setting). A caller that
    #: runs the model's many small operations on fewer threads than the machine has (the
    #: audit's cap for small models, where a parallel region lasts microseconds) keeps this
    #: product — the largest of a step, milliseconds long — on every core. Ignored inside a
    #: captured step.
    vocab_threads: int | None = None

    def __init__(self, config: PLDRConfig, *, collapsed: bool = False) -> None:
        super().__init__()
        self.config = config
        self.collapsed = collapsed
        self.decoder = PLDRDecoder(config, collapsed)
        self.final_layer = nn.Linear(config.d_model, config.input_vocab_size)
        self.collapse_report: CollapseReport | None = None
        self._emb_scale = float32_sqrt(config.d_model)  # √d_model in float32, as upstream
        self._scale = 1.0 / float32_sqrt(config.depth)  # 1/√d with √d in float32
        self._rope = RopeTables(config)
        self._packed = PackedWeights()
        self._step_buffers = capture.BufferPool()  # captured generations' in-place tensors (kept on CUDA)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    # -- construction / conversion ----------------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.embedding.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.decoder.embedding.weight.device

    @classmethod
    def from_reference(
        cls, params: Mapping[str, Any], config: PLDRConfig, *, dtype: torch.dtype = torch.float32, device: Any = None
    ) -> PLDRModel:
        """From a numpy parameter dict keyed by upstream names (``load_checkpoint``'s output).

        A dict holding ``decoder.collapsed_G`` (and no metric-learner keys) gives a collapsed model.
        """
        if not isinstance(params, Mapping):
            raise InputTypeError(f"params must be a mapping of upstream key → array, got {type(params).__name__}")
        collapsed = COLLAPSED_KEY in params
        arrays = {k: np.asarray(v) for k, v in params.items()}
        not_float = sorted(f"{k}: {v.dtype}" for k, v in arrays.items() if v.dtype.kind != "f")
        if not_float:
            raise CheckpointError(f"weights must be floating point; got {not_float[:20]}")
        nonfinite = sorted(k for k, v in arrays.items() if not np.all(np.isfinite(v)))
        if nonfinite:
            raise CheckpointError(f"weights have non-finite values (NaN or inf) in {nonfinite[:20]}")
        model = cls._uninitialized(config, collapsed, dtype=dtype, device=device)
        state = {k: torch.as_tensor(v) for k, v in arrays.items()}
        try:
            model.load_state_dict(state, strict=True)  # copies into the (possibly wider) parameters
        except RuntimeError as exc:  # missing / unexpected / mis-shaped keys
            raise CheckpointError(" ".join(str(exc).split())) from exc
        return model

    @classmethod
    def _uninitialized(cls, config: PLDRConfig, collapsed: bool, *, dtype: torch.dtype, device: Any) -> PLDRModel:
        """Allocated but uninitialized parameters (built on the meta device: no random init),
        for a strict ``load_state_dict`` to fill."""
        target = torch.empty(()).device if device is None else torch.device(device)
        with torch.device("meta"), _NoRandomFills():
            model = cls(config, collapsed=collapsed)
        model.to(dtype=dtype)  # free on meta; keeps the float32 chain parameters float32
        # to_empty's empty_like of a meta tensor runs torch's Python kernel (imports sympy, 0.2 s)
        return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=target))

    def to_reference(self) -> dict[str, np.ndarray]:
        """The parameters as numpy arrays by upstream key (bf16/fp16 are widened to float32)."""
        out = {}
        for k, v in self.state_dict().items():
            t = v.detach().to("cpu")
            out[k] = (t.float() if t.dtype in LOW_PRECISION else t).numpy().copy()
        return out

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, dtype: torch.dtype = torch.float32, device: Any = None, max_seq_len: int = 1024
    ) -> PLDRModel:
        """Load an upstream ``.pth`` (weights only), a safetensors file/folder (+ ``config.json``),
        or a collapsed checkpoint (:func:`plga.reference.checkpoint.load_collapsed`)."""
        path = Path(path)
        if is_collapsed(path):
            state, config, gs = load_collapsed(path)
            return cls.from_reference(state | {COLLAPSED_KEY: np.stack(gs)}, config, dtype=dtype, device=device)
        params, config = load_checkpoint(path, max_seq_len=max_seq_len)
        return cls.from_reference(params, config, dtype=dtype, device=device)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write ``model.safetensors`` + ``config.json`` (collapsed models get ``"collapsed": true``)."""
        return save_safetensors(self.to_reference(), self.config, folder, collapsed=self.collapsed)

    def save_collapsed(self, folder: str | Path) -> Path:
        """Save a collapsed model (no metric-learner weights, ``decoder.collapsed_G``, config flag)."""
        if not self.collapsed:
            raise InputError("save_collapsed needs a collapsed model: call model.collapse(G) or collapse_from(prompts)")
        return self.save_pretrained(folder)

    def collapse(self, G_star: GLike) -> PLDRModel:
        """A collapsed copy whose every layer uses the constant operator ``G_star`` [L, H, d, d].

        The copy's parameters are ordinary tensors even under ``torch.inference_mode()``
        (inference tensors carry no version counter, so the packed path could not track them).
        """
        G = self._normalize_G(G_star, batch=None)
        assert G is not None
        with torch.inference_mode(False), torch.no_grad():
            stack = torch.stack([g if g.ndim == 3 else _squeeze_batch(g) for g in G])  # [L, H, d, d]
            model = PLDRModel(self.config, collapsed=True)
            state = {k: v.clone() for k, v in self.state_dict().items() if not is_learner_key(k) and k != COLLAPSED_KEY}
            state[COLLAPSED_KEY] = stack.detach().to(torch.float32 if self.dtype in LOW_PRECISION else self.dtype).clone()
            model.to(device=self.device, dtype=self.dtype)
            model.load_state_dict(state, strict=True)
        return model

    @torch.no_grad()
    def collapse_from(self, prompts: Tensor | Sequence[Sequence[int]]) -> PLDRModel:
        """Collapse onto the mean G_LM over ``prompts`` ([N, S] tensor, run batched, or a list of
        sequences, run one by one); the spread is in ``returned.collapse_report``."""
        if self.collapsed:
            raise InputError("the model is already collapsed")
        if isinstance(prompts, Tensor):
            out = self.forward(prompts.to(self.device), logits=None, deductive=True)
            gs = torch.stack([d["G_LM"] for d in out.deductive or []], dim=1)  # [N, L, H, d, d]
        else:
            per = []
            for p in prompts:
                t = torch.as_tensor(list(p), dtype=torch.long, device=self.device)[None]
                out = self.forward(t, logits=None, deductive=True)
                per.append(torch.stack([d["G_LM"][0] for d in out.deductive or []]))  # [L, H, d, d]
            gs = torch.stack(per)
        report = collapse_statistics(gs)
        model = self.collapse(report.G_star)
        model.collapse_report = report
        return model

    def _apply(self, fn: Any, recurse: bool = True) -> Any:  # type: ignore[override]
        self._packed.clear()
        self._rope.clear()
        self._step_buffers.clear()
        return super()._apply(fn, recurse)

    # -- inputs -----------------------------------------------------------------------------

    def _check_tokens(self, tokens: Any, offset: int = 0) -> tuple[Tensor, int]:
        """(token ids [B, S] as int64 on the model device, their smallest id), or one clear
        input error.

        Refused: a rank other than 2, an empty batch or sequence, non-integer dtypes (float,
        bool, complex), ids outside [0, vocab), and sequences past ``max_seq_len``.
        """
        if not isinstance(tokens, Tensor):
            arr = np.asarray(tokens)
            if arr.dtype == object:
                raise InputTypeError("token ids must be an integer array, got an object array (ragged rows or non-numbers?)")
            if arr.dtype.kind not in "iu":
                raise InputTypeError(f"token ids must be integers, got {arr.dtype}")
            if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:  # would wrap below
                raise InputError(
                    f"token ids must lie in [0, {self.config.input_vocab_size}), got range [{arr.min()}, {arr.max()}]"
                )
            tokens = torch.as_tensor(arr)
        if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise InputError(f"token ids must have non-empty shape [batch, seq], got {tuple(tokens.shape)}")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise InputTypeError(f"token ids must be integers, got {tokens.dtype}")
        if offset + tokens.shape[1] > self.config.max_seq_len:
            raise InputError(
                f"sequence length {offset + tokens.shape[1]} exceeds the context max_seq_len={self.config.max_seq_len}"
            )
        if tokens.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch reduces no unsigned type but uint8
            tokens = tokens.to(torch.int64)  # exact below 2**63; a uint64 id above wraps negative and is refused
        lo, hi = torch.stack(torch.aminmax(tokens)).tolist()  # one device sync: an id ≥ vocab is a device assert on CUDA
        if lo < 0 or hi >= self.config.input_vocab_size:
            raise InputError(f"token ids must lie in [0, {self.config.input_vocab_size}), got range [{lo}, {hi}]")
        return tokens.to(device=self.device, dtype=torch.long), lo

    def _check_key_padding(self, key_padding: Any, shape: torch.Size) -> Tensor:
        """An explicit key padding mask: a bool tensor of the tokens' shape [B, S], on the model device."""
        if not isinstance(key_padding, Tensor) or key_padding.dtype != torch.bool or key_padding.shape != shape:
            got = f"{key_padding.dtype} {tuple(key_padding.shape)}" if isinstance(key_padding, Tensor) else type(key_padding).__name__
            raise InputError(f"key_padding must be a bool tensor of the tokens' shape {tuple(shape)}, got {got}")
        return key_padding.to(self.device)

    def _normalize_G(self, G: GLike, batch: int | None) -> list[Tensor] | None:
        """Per-layer operators [H, d, d] or [B, H, d, d] in the chain dtype on the model device."""
        c = self.config
        if G is None:
            return None
        ct = KF.chain_dtype(self.dtype)
        if isinstance(G, str):
            if G == "identity":
                eye = torch.eye(c.depth, dtype=ct, device=self.device)
                return [eye.expand(c.num_heads, c.depth, c.depth) for _ in range(c.num_layers)]
            raise InputError(f"unknown G {G!r}; use 'identity', random_G(config, seed), or arrays [L, H, d, d]")
        if isinstance(G, (list, tuple)):
            gs = [torch.as_tensor(np.asarray(g) if not isinstance(g, Tensor) else g) for g in G]
        else:
            t = torch.as_tensor(np.asarray(G) if not isinstance(G, Tensor) else G)
            gs = list(t.unbind(0)) if t.ndim else []
        if len(gs) != c.num_layers:
            raise InputError(f"G needs one operator per layer ({c.num_layers}), got {len(gs)}")
        out = []
        for i, g in enumerate(gs):
            ok = g.ndim in (3, 4) and tuple(g.shape[-3:]) == (c.num_heads, c.depth, c.depth)
            if ok and g.ndim == 4 and batch is not None and g.shape[0] not in (1, batch):
                ok = False
            if not ok:
                raise InputError(
                    f"G of layer {i} must be [H, d, d] or [B, H, d, d] with H={c.num_heads}, d={c.depth}; got {tuple(g.shape)}"
                )
            if not (g.is_floating_point() or g.dtype in (torch.int32, torch.int64)):
                raise InputTypeError(f"G of layer {i} must be real floating point, got {g.dtype}")
            if not bool(torch.isfinite(g).all()):
                raise InputError(f"G of layer {i} has non-finite entries (NaN or inf)")
            out.append(g.to(device=self.device, dtype=ct))
        return out

    def _operators(self, G: GLike, batch: int) -> list[Tensor] | None:
        """The constant operators of a pass: ``G``, else a collapsed model's stored ones, else None."""
        if G is None and self.collapsed:
            return list(self.decoder.collapsed_G.unbind(0))
        return self._normalize_G(G, batch)

    def _check_cache(self, cache: DecodeCache, batch: int) -> None:
        if not isinstance(cache, DecodeCache):
            raise InputTypeError(f"cache must be a DecodeCache from new_cache(), got {type(cache).__name__}")
        if len(cache.layers) != self.config.num_layers:
            raise InputError(f"the cache has {len(cache.layers)} layers, the model {self.config.num_layers}")
        have = cache.layers[0].k.shape[0]
        if have != batch:
            raise InputError(f"the tokens have batch {batch} but the cache was made for batch {have}")

    @staticmethod
    def _check_backend(backend: str) -> None:
        if backend not in ("sdpa", "eager"):
            raise InputError(f"unknown backend {backend!r}; use 'sdpa' or 'eager'")

    # -- the layer, stage by stage ----------------------------------------------------------

    def _linears(self) -> list[nn.Module]:
        out: list[nn.Module] = [self.final_layer]
        for layer in self.decoder.dec_layers:
            mha, ffn = layer.mha1, layer.ffn
            out += [mha.wq, mha.wk, mha.wv, mha.dense, ffn.gluw1, ffn.gluw2, ffn.gluw3]
        return out

    def _packed_fields(self, backend: str, start: int, s: int, batch: int, real: bool = False) -> dict[str, Any]:
        """The packed path's fields of a pass over positions start … start + s − 1 (rotation
        tables, every layer's packed products, looked up once per pass), or none: the modules.

        With ``compile_decode`` a batch of one uses the row layout on the CPU (its one-row
        products are the compiled GEMV); so do larger batches where the native kernel serves the
        dtype's products of that many rows; otherwise they keep the column blocks, whose few-row
        products are then faster (switching rebuilds the copies)."""
        rope = None
        if self._packed.usable(backend, self._linears()):
            rope = self._rope_tables(start, s, self.dtype, real)
        if rope is None:
            return {"rope": None}
        rows = self.compile_decode and (batch == 1 or (self.device.type == "cpu" and native.prepare(self.dtype, batch)))
        weights = [self._packed.layer(i, layer.mha1, layer.ffn, self.device, rows) for i, layer in enumerate(self.decoder.dec_layers)]
        if any(w is None for w in weights):  # inference-mode parameters: no version to track
            return {"rope": None}
        return {"rope": rope, "weights": weights, "final": self._packed.final(self.final_layer, self.device, rows, self.vocab_threads)}

    def _rope_tables(self, start: int, s: int, dtype: torch.dtype, real: bool = False) -> tuple[Tensor, ...]:
        """The rotation of the packed path for rows [B, S, 2, H, d/2]: interleaved pairs as one
        complex table [S, 1, 1, d/2] (one complex product instead of eight real ops; ``real``:
        as (cos, sin) too), rotate-half as (cos, sin) [S, 1, 1, d/2]; in the chain dtype."""
        if self.config.rope_style == "interleaved" and not real:
            return (self._rope.complex(start, s, self.device, dtype)[:, None, None, :],)
        cos, sin = self._rope.slice(start, s, self.device, dtype)
        return cos[:, None, None, :], sin[:, None, None, :]

    def _qkv(self, i: int, h: Tensor, p: _Pass, packed: tuple[Any, ...] | None) -> tuple[Tensor, Tensor, Tensor]:
        """Rotated q, k and v [B, H, S, d] of layer ``i`` (the packed QKV product, or the modules)."""
        c = self.config
        b, s, dm = h.shape
        layer = self.decoder.dec_layers[i]
        if packed is None:
            cos, sin = self._rope.slice(p.start, s, h.device, h.dtype)
            heads = lambda x: x.view(b, s, c.num_heads, c.depth).transpose(1, 2)  # noqa: E731 [B, H, S, d]
            mha = layer.mha1
            q = KF.apply_rope(heads(mha.wq(h)), cos, sin, c.rope_style)
            k = KF.apply_rope(heads(mha.wk(h)), cos, sin, c.rope_style)
            return q, k, heads(mha.wv(h))
        qkv = packed_linear(h.reshape(b * s, dm), *packed[0], compiled=self.compile_decode).reshape(b, s, 3, c.num_heads, c.depth)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]
        ct = KF.chain_dtype(h.dtype)
        if c.rope_style == "interleaved" and len(p.rope) == 1:  # type: ignore[arg-type]
            (cis,) = p.rope  # type: ignore[misc]
            # rotated in place: qkv is this pass's own product, and a low-precision qk is widened
            # into a contiguous buffer (a strided widening copy and a second product cost 2.3×)
            rot = qk if qk.dtype == ct else torch.empty(qk.shape, dtype=ct, device=qk.device).copy_(qk)  # [B, S, 2, H, d]
            torch.view_as_complex(rot.unflatten(-1, (c.depth // 2, 2))).mul_(cis)
        elif c.rope_style == "interleaved":  # real tables (a captured step: Inductor generates no complex code)
            cos, sin = p.rope  # type: ignore[misc]
            pairs = qk.to(ct).unflatten(-1, (c.depth // 2, 2))
            x0, x1 = pairs[..., 0], pairs[..., 1]
            rot = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        else:
            cos, sin = p.rope  # type: ignore[misc]
            x = qk.to(ct)
            x0, x1 = x[..., : c.depth // 2], x[..., c.depth // 2 :]
            rot = torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
        rot = rot.to(h.dtype)
        # q contiguous [B, H, S, d]: the Gram, q G and the attention each copied the strided view
        return rot[:, :, 0].transpose(1, 2).contiguous(), rot[:, :, 1].transpose(1, 2), v.transpose(1, 2)

    def _operator(self, i: int, q: Tensor, p: _Pass) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
        """(A, A_LM, A_P, G) of layer ``i``: constant, from the metric learner on ``q`` (a full
        pass), from the cached prompt A (kv) or the cached prompt G_LM (kvg). A captured kv step
        forms no G (None): its one query takes q G_LM as (q a) A_P + q b_a (:meth:`_layer`)."""
        if p.operators is not None:
            return None, None, None, p.operators[i]
        mha = self.decoder.dec_layers[i].mha1
        if p.mode is None:
            return mha.chain(q)
        assert p.cache is not None
        lc = p.cache.layers[i]
        if p.mode == "kv":
            assert lc.A is not None
            if p.position is not None:  # a captured step
                return (lc.A, *mha.power_parts(lc.A), None)
            a_lm, a_p, g = mha.power(lc.A)
            return lc.A, a_lm, a_p, g
        assert lc.G_LM is not None  # kvg
        return lc.A, lc.A_LM, None, lc.G_LM

    def _keys_values(self, i: int, k: Tensor, v: Tensor, ops: tuple[Any, ...], p: _Pass) -> tuple[Tensor, Tensor]:
        """Append the new rows to the cache (a full pass also stores the prompt's operators) and
        return every key and value to attend to [B, H, T, d]."""
        if p.cache is None:
            return k, v
        if p.position is not None:  # a captured step: static shapes, the whole cache
            lc = p.cache.layers[i]
            lc.k.index_copy_(2, p.position, k)
            lc.v.index_copy_(2, p.position, v)
            return lc.k, lc.v
        lc, t0, s = p.cache.layers[i], p.cache.length, k.shape[2]
        lc.k[:, :, t0 : t0 + s].copy_(k)
        lc.v[:, :, t0 : t0 + s].copy_(v)
        if p.mode is None:
            lc.A, lc.A_LM, _, lc.G_LM = ops
        return lc.k[:, :, : t0 + s], lc.v[:, :, : t0 + s]

    def _attend(self, q: Tensor, keys: Tensor, vals: Tensor, g: Tensor | None, p: _Pass) -> Tensor:
        """softmax((q G) kᵀ/√d + mask) v [B, H, S, d] through :func:`~plga.kernels.functional.plga_attention`:
        causal over the cached keys, padding keys ignored, the published finite −1e9 mask. A
        captured step's one query sees every written key: the keys not yet written are in
        ``key_padding`` and causality adds nothing."""
        pad = None if p.key_padding is None else p.key_padding[:, : keys.shape[2]]
        return KF.plga_attention(
            q, keys, vals, g, causal=p.position is None, key_padding_mask=pad, scale=self._scale, finite_mask=True,
            backend=p.backend, validate=False,
        )

    def _feed_forward(self, i: int, attn: Tensor, h: Tensor, w: tuple[Any, ...] | None) -> Tensor:
        """Output projection, residual + LayerNorm, gated feed-forward, residual + LayerNorm
        (the packed products ``w`` of the layer, or the modules)."""
        layer = self.decoder.dec_layers[i]
        b, s, dm = h.shape
        merged = attn.transpose(1, 2).reshape(b, s, dm)  # [B, S, D]
        if w is None:
            h1 = layer.layernorm1(layer.mha1.dense(merged) + h)
            return layer.layernorm2(layer.ffn(h1) + h1)
        lin = functools.partial(packed_linear, compiled=self.compile_decode)
        h1 = layer.layernorm1(lin(merged.reshape(b * s, dm), *w[1]).reshape(b, s, dm) + h)
        gate = packed_gated(h1.reshape(b * s, dm), *w[2], compiled=self.compile_decode)  # silu(gluw1) ⊙ gluw2 [B*S, F]
        f = lin(gate, *w[3]).reshape(b, s, dm)
        return layer.layernorm2(f + h1)

    def _layer(self, i: int, h: Tensor, p: _Pass, last_row_only: bool = False) -> tuple[Tensor, dict[str, Tensor] | None]:
        """One post-LN layer: q, k, v → operator G → cache → attention → feed-forward.

        ``last_row_only`` (the last layer of a pass whose only output is the last position's
        logits, :meth:`_run`): q, k, v, the operator and the cache entries are formed from every
        row, as the Gram and the keys need, and only the last row attends and is fed forward —
        no other row of the last layer reaches an output (at paper-110m, b8 × 1024 tokens, 15 %
        of a prefill's products)."""
        packed = None if p.weights is None else p.weights[i]
        q, k, v = self._qkv(i, h, p, packed)
        ops = self._operator(i, q, p)
        g = ops[3]
        guard = p.guard if not p.guard_last_only or i == self.config.num_layers - 1 else None
        if guard is not None and p.operators is None and p.mode in (None, "kv"):
            for name, t in zip(DEDUCTIVE, ops, strict=True):
                guard.add(i, name, t)
        keys, vals = self._keys_values(i, k, v, ops, p)
        q_rows, h_rows = q, h  # the rows attending and fed forward
        if last_row_only and h.shape[1] > 1:
            q_rows, h_rows = q[:, :, -1:], h[:, -1:]  # [B, H, 1, d], [B, 1, D]: all the last logits read
        if g is None:  # a captured kv step: q G_LM without G_LM (a d³ product per matrix saved)
            assert ops[2] is not None and guard is None and not p.deductive
            attn = self._attend(self.decoder.dec_layers[i].mha1.apply_power_g(q_rows, ops[2]), keys, vals, None, p)
        else:
            attn = self._attend(q_rows, keys, vals, g, p)
        out = self._feed_forward(i, attn, h_rows, packed)
        if guard is not None:
            guard.add(i, "the hidden state", out)
        if not p.deductive:
            return out, None
        ded = {"G_LM": g.expand(h.shape[0], *g.shape[-3:]) if g.ndim == 3 else g}
        ded.update({n: t for n, t in zip(("A", "A_LM", "A_P"), ops[:3], strict=True) if t is not None})
        ded["scores"] = KF.plga_scores(q, keys, g, scale=self._scale)  # [B, H, S, T]
        return out, ded

    def _embed(self, tokens: Tensor) -> Tensor:
        x = self.decoder.embedding(tokens) * self._emb_scale  # √d_model rounded to float32
        return self.decoder.layernorm1(x)

    def _project(self, h: Tensor, logits: Any, final: Packed | None = None) -> Tensor | None:
        """Logits of ``h`` [B, S, D] at the positions ``logits`` selects, on :attr:`vocab_threads`."""
        if logits is None:
            return None
        if torch.compiler.is_compiling():
            return self._project_on(h, logits, final)
        with intra_op_threads(self.vocab_threads):
            return self._project_on(h, logits, final)

    def _project_on(self, h: Tensor, logits: Any, final: Packed | None) -> Tensor | None:
        if isinstance(logits, str):
            if logits == "all":
                return self.final_layer(h)
            if logits == "last":
                return self.final_layer(h[:, -1]) if final is None else packed_linear(h[:, -1], *final, compiled=self.compile_decode)
            raise InputError(f"logits must be 'all', 'last', an index tensor or None; got {logits!r}")
        idx = torch.as_tensor(logits, device=h.device)
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise InputTypeError(f"logits index must hold integer positions, got {idx.dtype}")
        idx = idx.long()
        if idx.numel() and (int(idx.min()) < -h.shape[1] or int(idx.max()) >= h.shape[1]):
            raise InputError(f"logits index out of range for sequence length {h.shape[1]}")
        if idx.ndim == 2 and idx.numel() and int(idx.min()) < 0:
            raise InputError("a [B, n] logits index must hold non-negative positions")
        if idx.ndim == 1:
            return self.final_layer(h[:, idx])
        if idx.ndim == 2 and idx.shape[0] == h.shape[0]:
            return self.final_layer(h.gather(1, idx[..., None].expand(-1, -1, h.shape[-1])))  # [B, n, V]
        raise InputError(f"logits index must be [n] or [B, n], got {tuple(idx.shape)}")

    def _run(self, tokens: Tensor, p: _Pass, logits: Any) -> tuple[Tensor | None, Tensor, list[dict[str, Tensor]]]:
        """Every layer, then the logits ``logits`` selects. A fused pass returning only the last
        logits trims its last layer to the last row (:meth:`_layer`); the published eager
        backend computes every row."""
        h = self._embed(tokens)
        ded_all: list[dict[str, Tensor]] = []
        trim = isinstance(logits, str) and logits == "last" and p.backend == "sdpa"
        last = self.config.num_layers - 1
        for i in range(self.config.num_layers):
            h, ded = self._layer(i, h, p, last_row_only=trim and i == last)
            if ded is not None:
                ded_all.append(ded)
        if p.guard is not None:
            p.guard.check()
        return self._project(h, logits, p.final), h, ded_all

    # -- forward and cached steps -------------------------------------------------------------

    def forward(
        self,
        tokens: Tensor,
        *,
        logits: Any = "all",
        deductive: bool = False,
        G: GLike = None,
        backend: str = "sdpa",
        cache: DecodeCache | None = None,
        key_padding: Tensor | None = None,
    ) -> ModelOutput:
        """Full forward on token ids [B, S] (id 0 = padding, unless ``key_padding`` says otherwise).

        ``logits``: "all" → [B, S, V]; "last" → [B, V]; an index tensor [n] or [B, n] → [B, n, V];
        None → no vocab projection. With "last" on the fused backend the last layer attends and
        feeds forward at the last position only (no other row of it reaches the logits), so
        ``hidden`` is then [B, 1, D]; the deductive tensors and the cache are those of every
        position. ``deductive=True`` also returns per-layer A, A_LM, A_P,
        G_LM and the unmasked scores. ``G`` (per-layer constant operators, or "identity")
        replaces the metric learner; a collapsed model uses its stored G. ``backend`` "sdpa"
        (fused; without autograd on packed weight copies) or "eager" (the published algorithm:
        materialized scores, the ``nn.Linear`` modules). ``cache`` (from :meth:`new_cache`) is
        filled with the prompt's K, V, A, A_LM, G_LM for cached decoding. ``key_padding`` [B, S]
        bool names the padding keys instead of the ids 0 (all False: a generated id 0 is scored
        as the token it is, as a cached step attends to it).
        """
        tokens, lowest_id = self._check_tokens(tokens)
        b, s = tokens.shape
        self._check_backend(backend)
        if cache is not None:
            self._check_cache(cache, b)
            if cache.length != 0:
                raise InputError("forward fills an empty cache; use step() to extend a filled one")
            if s > cache.capacity:
                raise InputError(f"the prompt ({s} tokens) exceeds the cache capacity {cache.capacity}")
        if key_padding is None:  # the ids 0, if any (the smallest id says; no second device sync)
            key_padding = tokens == 0 if lowest_id == 0 else None
        else:
            pad = self._check_key_padding(key_padding, tokens.shape)
            key_padding = pad if bool(pad.any()) else None
        if cache is not None:
            cache.key_padding = None if key_padding is None else _pad_to(key_padding, cache.capacity)
        p = _Pass(
            start=0, operators=self._operators(G, b), mode=None, cache=cache, key_padding=key_padding,
            backend=backend, **self._packed_fields(backend, 0, s, b), deductive=deductive,
            guard=FiniteGuard() if self.check_finite else None,
        )
        out, h, ded = self._run(tokens, p, logits)
        if cache is not None:
            cache.length = s
        return ModelOutput(logits=out, hidden=h, deductive=ded if deductive else None)

    def new_cache(self, batch: int, capacity: int) -> DecodeCache:
        """An empty static cache for ``batch`` sequences of up to ``capacity`` positions."""
        c = self.config
        if capacity > c.max_seq_len:
            raise InputError(f"cache capacity {capacity} exceeds max_seq_len={c.max_seq_len}")
        shape = (batch, c.num_heads, capacity, c.depth)
        layers = [
            LayerCache(k=torch.zeros(shape, dtype=self.dtype, device=self.device),  # zeros: a captured step
                       v=torch.zeros(shape, dtype=self.dtype, device=self.device))  # reads unwritten rows (masked)
            for _ in range(c.num_layers)
        ]
        return DecodeCache(layers=layers, length=0, capacity=capacity, key_padding=None)

    def step(
        self,
        tokens: Tensor,
        cache: DecodeCache,
        mode: str | None = None,
        *,
        G: GLike = None,
        logits: Any = "last",
        backend: str = "sdpa",
    ) -> Tensor | None:
        """A cached decoding step: new ids [B, S_new] at positions ``cache.length…`` → logits.

        ``mode`` "kv" recomputes A_LM, A_P, G_LM from the prompt's frozen A; "kvg" reuses the
        prompt's G_LM; "collapsed" uses the constant operators (``G``, or a collapsed model's
        own; the default mode then). New tokens attend to every cached key except the prompt's
        padding keys (generated keys are never masked), causally among themselves.
        """
        if not isinstance(cache, DecodeCache):
            raise InputTypeError(f"cache must be a DecodeCache from new_cache(), got {type(cache).__name__}")
        tokens, _ = self._check_tokens(tokens, cache.length)
        self._check_cache(cache, tokens.shape[0])
        self._check_backend(backend)
        if cache.length == 0:
            raise InputError("step() extends a filled cache: run forward(prompt, cache=cache) first")
        operators = self._operators(G, tokens.shape[0])
        mode = mode or ("collapsed" if operators is not None else "kv")
        check_generation(mode, operators is not None, 0)
        if mode == "nocache":
            raise InputError("step() is a cached step: use mode 'kv', 'kvg' or 'collapsed'")
        if mode == "kv" and cache.layers[0].A is None:
            raise InputError("mode 'kv' needs the prompt's A in the cache (it was filled under a constant G)")
        return self._step(tokens, cache, mode, operators, logits, backend, trusted=False)

    def _step(
        self, tokens: Tensor, cache: DecodeCache, mode: str, operators: list[Tensor] | None, logits: Any,
        backend: str, *, trusted: bool, fields: dict[str, Any] | None = None,
    ) -> Tensor | None:
        """The step itself. ``trusted`` (generate's own steps): the kv-mode operators are
        recomputed from the frozen prompt A, which the prompt's forward already checked, and a
        non-finite hidden state propagates through every later LayerNorm row, so only the last
        layer's hidden state is checked (one small check per step). ``fields``: the packed fields
        of every cache position, looked up once per generation (:meth:`_generation_fields`);
        None: looked up now."""
        s, t0 = tokens.shape[1], cache.length
        if t0 + s > cache.capacity:
            raise InputError(f"cache capacity {cache.capacity} exhausted (length {t0} + {s})")
        if fields is None:
            fields = self._packed_fields(backend, t0, s, tokens.shape[0])
        else:
            fields = _rows_of(fields, t0, t0 + s)
        p = _Pass(
            start=t0, operators=operators, mode=mode, cache=cache, key_padding=cache.key_padding,
            backend=backend, **fields,
            guard=FiniteGuard(deductive=not trusted) if self.check_finite else None, guard_last_only=trusted,
        )
        out, _, _ = self._run(tokens, p, logits)
        cache.length += s
        return out

    def _nocache_pass(self, tokens: Tensor, operators: list[Tensor] | None, fields: dict[str, Any]) -> Tensor:
        """One pass of ``nocache`` generation: :meth:`forward` of the ids so far [B, S] → the
        last position's logits [B, V], without forward's argument checks. The prompt was checked
        and every later id is the model's own choice, in the vocabulary; ``fields`` are the packed
        fields of every position of the generation (:meth:`_packed_fields`, looked up once: no
        user code runs between the passes). Ids 0 are padding keys, as in forward."""
        pad = tokens == 0  # [B, S]
        p = _Pass(
            start=0, operators=operators, mode=None, cache=None, key_padding=pad if bool(pad.any()) else None,
            backend="sdpa", **_rows_of(fields, 0, tokens.shape[1]), guard=FiniteGuard() if self.check_finite else None,
        )
        logits, _, _ = self._run(tokens, p, "last")
        assert logits is not None
        return logits

    def _generation_fields(self, cache: DecodeCache) -> dict[str, Any]:
        """The packed fields of generate's uncaptured steps, for every cache position: the
        weight stamps and hooks are checked once per generation, not once per step (no user code
        runs between generate's steps, so nothing can change them there)."""
        return self._packed_fields("sdpa", 0, cache.capacity, cache.layers[0].k.shape[0])

    def _new_step_buffers(self, batch: int, capacity: int) -> capture.StepBuffers:
        """Zeroed in-place tensors of a captured generation: the KV cache, the token buffer, the
        position and the non-finite flags (:class:`~.capture.StepBuffers`)."""
        cache = self.new_cache(batch, capacity)
        width = (batch, capacity + 1)
        return capture.StepBuffers(
            kv=[(lc.k, lc.v) for lc in cache.layers],
            ids=torch.zeros(width, dtype=torch.long, device=self.device),
            position=torch.zeros(1, dtype=torch.long, device=self.device),
            flags=torch.zeros(width, dtype=torch.bool, device=self.device),
        )

    @staticmethod
    def _cache_on(bufs: capture.StepBuffers, capacity: int) -> DecodeCache:
        """An empty :class:`DecodeCache` over the leased tensors ``bufs``."""
        return DecodeCache(layers=[LayerCache(k=k, v=v) for k, v in bufs.kv], length=0, capacity=capacity, key_padding=None)

    def _capture_fields(self, cache: DecodeCache) -> dict[str, Any] | None:
        """The packed fields of :meth:`_captured_step` (rotation tables of every cache position),
        or None when the packed path is not usable (a hook on a projection): steps run uncaptured."""
        fields = self._packed_fields("sdpa", 0, cache.capacity, cache.layers[0].k.shape[0], real=True)
        if fields["rope"] is None:
            return None
        capture.prepare_fields(fields)
        return fields

    @staticmethod
    def _hold_step_inputs(
        bufs: capture.StepBuffers, cache: DecodeCache, mode: str, operators: list[Tensor] | None,
    ) -> list[Tensor] | None:
        """What a captured generation's steps read but its prompt pass or its caller set — every
        layer's cached operator (kv: A; kvg: G_LM), the padding keys, the constant operators —
        moved into ``bufs``' static tensors (:meth:`.capture.StepBuffers.hold`); returns the
        operators the steps use."""
        name = {"kv": "A", "kvg": "G_LM"}.get(mode)
        for i, lc in enumerate(cache.layers):
            if name is not None:
                setattr(lc, name, bufs.hold(f"{name}{i}", getattr(lc, name)))
        if cache.key_padding is not None:
            cache.key_padding = bufs.hold("key_padding", cache.key_padding)
        return None if operators is None else [bufs.hold(f"operator{i}", g) for i, g in enumerate(operators)]

    def _captured_step(
        self, ids: Tensor, position: Tensor, flags: Tensor, cache: DecodeCache, mode: str, operators: list[Tensor] | None,
        fields: dict[str, Any], steps: capture.CapturedSteps,
    ) -> Tensor:
        """Generate's cached step of one token per row as one compiled graph (:mod:`.capture`):
        the same stages as :meth:`_step` on static shapes, for the token ``ids[:, position]``.
        The graph writes the greedy choice to ``ids[:, position + 1]``, the non-finite flags of
        the last hidden state to ``flags[:, position]`` (checked once, after the generation:
        no device sync between steps) and advances ``position`` (the loop between steps runs no
        tensor operation when decoding greedily). Returns the last-position logits [B, V]."""
        if cache.length + 1 > cache.capacity:
            raise InputError(f"cache capacity {cache.capacity} exhausted (length {cache.length} + 1)")
        logits = steps(self, ids, position, flags, cache, mode, operators, fields)
        cache.length += 1
        if self.device.type == "cuda":  # a CUDA graph overwrites its outputs on the next replay
            return logits.clone()
        return logits

    def _check_captured_flags(self, flags: Tensor) -> None:
        """Raise :class:`~plga.errors.NonFiniteError` if a captured step flagged its last hidden
        state (flags [B, C + 1] by sequence position; one device sync)."""
        if self.check_finite:
            guard = FiniteGuard(deductive=False)
            guard.add_flags(self.config.num_layers - 1, "the hidden state", flags)
            guard.check()

    def _captured_body(
        self, ids: Tensor, position: Tensor, flags: Tensor, cache: DecodeCache, mode: str, operators: list[Tensor] | None,
        fields: dict[str, Any],
    ) -> Tensor:
        """What :func:`.capture.compiled_step` compiles: the tokens ``ids[:, position]`` of the
        token buffer ids [B, C + 1] at ``position`` [1] → logits [B, V]; in place, the greedy
        choice (argmax of the logits) written to ``ids[:, position + 1]``, whether the last
        hidden state of each row is not finite to ``flags[:, position]`` (flags [B, C + 1]
        bool), and ``position`` advanced by one."""
        tokens = ids.index_select(1, position)  # [B, 1]
        unwritten = torch.arange(cache.capacity, device=position.device) > position  # [C]
        key_padding = unwritten.expand(tokens.shape[0], -1) if cache.key_padding is None else cache.key_padding | unwritten
        p = _Pass(
            start=0, operators=operators, mode=mode, cache=cache, key_padding=key_padding, backend="sdpa",
            rope=tuple(t.index_select(0, position) for t in fields["rope"]),  # this position's rotation
            weights=fields["weights"], final=fields["final"], position=position,
        )
        logits, h, _ = self._run(tokens, p, "last")
        assert logits is not None
        flags.index_copy_(1, position, ~torch.isfinite(h).reshape(h.shape[0], h.shape[1], -1).all(-1))  # [B, 1]
        ids.index_copy_(1, position + 1, native.greedy(logits)[:, None])
        position.add_(1)
        return logits

    # -- scoring --------------------------------------------------------------------------------

    @torch.no_grad()
    def score_loglikelihood(self, tokens: Tensor, *, chunk: int = 256, mode: str = "block", G: GLike = None) -> LoglikOutput:
        """Log-likelihood of ``tokens`` [B, S]: log p(x_{t+1} | x_{≤t}) for t < S − 1.

        The Gram (hence G) is not causal, so the two modes differ in meaning:

        - ``"block"``: one forward over the whole sequence, as the published one-pass scoring
          does (G from all S rows); only the vocab projection and log-softmax are chunked,
          ``chunk`` positions at a time, which bounds memory to chunk × V per row.
        - ``"online"``: the exact online contract (OnlineContract.lean): token t+1 is scored
          by a forward on the prefix x_{≤t} alone, reading only its final row. S − 1 forwards.

        They agree exactly when G is context-invariant (a collapsed model, or a constant ``G``).
        """
        tokens, _ = self._check_tokens(tokens)
        b, s = tokens.shape
        if chunk < 1:
            raise InputError(f"chunk must be ≥ 1, got {chunk}")
        targets = tokens[:, 1:]  # [B, S-1]
        out = torch.empty(b, s - 1, dtype=torch.float64, device=self.device)
        if mode == "block":
            h = self.forward(tokens, logits=None, G=G).hidden  # [B, S, D]
            for c0 in range(0, s - 1, chunk):
                c1 = min(c0 + chunk, s - 1)
                logp = torch.log_softmax(self._project(h[:, c0:c1], "all").to(torch.float64), dim=-1)
                out[:, c0:c1] = logp.gather(-1, targets[:, c0:c1, None])[..., 0]
        elif mode == "online":
            for t in range(1, s):
                last = self.forward(tokens[:, :t], logits="last", G=G).logits
                assert last is not None
                logp = torch.log_softmax(last.to(torch.float64), dim=-1)
                out[:, t - 1] = logp.gather(-1, targets[:, t - 1, None])[:, 0]
        else:
            raise InputError(f"unknown scoring mode {mode!r}; use 'block' or 'online'")
        mask = targets != 0
        return LoglikOutput(token_logprobs=out, mask=mask, total=(out * mask).sum(-1))

    # -- generation -----------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        mode: str | None = None,
        *,
        G: GLike = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        return_step_logits: bool = False,
        progress: bool = False,
    ) -> GenerationOutput:
        """Decode ``max_new_tokens`` after ``prompt`` [B, S] (left padding with id 0 for batches).

        Modes (:data:`~plga.reference.decoder.MODES`, docs/spec.md §3): ``nocache`` recomputes
        the whole forward (so G) every step, with the vocab projection at the last position
        only; ``kv`` caches rotated K, V and the prompt's A (G_LM recomputed from the frozen A
        each step); ``kvg`` also caches A_LM, G_LM; ``collapsed`` uses constant per-layer
        operators — a collapsed model's own, or ``G`` ("identity", :func:`random_G`, arrays
        [L, H, d, d]) — with K, V cached, and never runs the metric learner. Default: ``collapsed``
        with constant operators, ``kv`` otherwise. Greedy when ``temperature == 0``; otherwise
        seeded sampling (:mod:`plga.reference.sampling`, the same tokens as the reference for
        the same ``seed``; default seed 0) with top-k / top-p. ``progress`` shows a bar per
        generated token on a terminal.
        """
        check_sampling(temperature, top_k, top_p)
        seed = check_seed(seed)
        tokens, _ = self._check_tokens(prompt)
        b, s = tokens.shape
        operators = self._operators(G, b)
        mode = mode or ("collapsed" if operators is not None else "kv")
        check_generation(mode, operators is not None, max_new_tokens)
        if s + max_new_tokens > self.config.max_seq_len:
            raise InputError(
                f"prompt length {s} + {max_new_tokens} new tokens exceeds max_seq_len={self.config.max_seq_len}"
            )
        rng = np.random.default_rng(seed)
        out_tokens = torch.empty(b, s + max_new_tokens, dtype=torch.long, device=self.device)
        out_tokens[:, :s] = tokens
        steps: list[Tensor] = []

        def choose(step_logits: Tensor) -> Tensor:
            if return_step_logits:
                steps.append(step_logits)
            if temperature == 0:  # the model already refused non-finite activations
                return native.greedy(step_logits)
            picked = sample_next(step_logits.double().cpu().numpy(), rng, temperature, top_k, top_p)
            return torch.as_tensor(picked, device=self.device)

        if mode == "nocache":
            fields = self._packed_fields("sdpa", 0, s + max_new_tokens - 1, b) if max_new_tokens else {}
            for n in steps_of(max_new_tokens, progress):
                out_tokens[:, s + n] = choose(self._nocache_pass(out_tokens[:, : s + n], operators, fields))
        elif max_new_tokens:
            capacity = s + max_new_tokens - 1 if max_new_tokens > 1 else s
            captured = self.compile_decode and max_new_tokens > 1
            if captured:  # a few capacities serve every prompt length: one compilation each
                capacity = capture.bucket(capacity, self.config.max_seq_len)
            leased: Any = contextlib.nullcontext()
            if captured:  # the steps' in-place tensors; on CUDA the same ones every generation
                key = (b, capacity, self.dtype, self.device)
                leased = self._step_buffers.lease(key, lambda: self._new_step_buffers(b, capacity),
                                                  keep=capture.reuses_buffers(self.device))
            with leased as bufs:
                cache = self.new_cache(b, capacity) if bufs is None else self._cache_on(bufs, capacity)
                logits = self.forward(tokens, logits="last", G=operators, cache=cache).logits
                fields = self._capture_fields(cache) if captured else None
                plain_fields = self._generation_fields(cache) if fields is None and max_new_tokens > 1 else None
                ids, position, flags = out_tokens, None, None  # where the steps read their tokens
                if fields is not None:  # a token buffer of the cache's static width, the step's position, its flags
                    ids, position, flags = bufs.ids, bufs.position, bufs.flags
                    ids[:, :s] = tokens
                    position.fill_(s)
                    operators = self._hold_step_inputs(bufs, cache, mode, operators)
                with capture.CapturedSteps(self.device) if fields is not None else contextlib.nullcontext() as captured_steps:
                    for n in steps_of(max_new_tokens, progress):
                        assert logits is not None
                        if n and position is not None and temperature == 0:  # the step's graph wrote its greedy choice
                            if return_step_logits:
                                steps.append(logits)
                        else:
                            if n and flags is not None:  # a sampled token: the host reads these logits anyway
                                self._check_captured_flags(flags)
                            ids[:, s + n] = choose(logits)
                        if n + 1 < max_new_tokens and position is not None:
                            assert fields is not None and flags is not None and captured_steps is not None
                            logits = self._captured_step(ids, position, flags, cache, mode, operators, fields, captured_steps)
                        elif n + 1 < max_new_tokens:
                            logits = self._step(ids[:, s + n, None], cache, mode, operators, "last", "sdpa", trusted=True,
                                                fields=plain_fields)
                if flags is not None:  # greedy: one sync for all the steps' flags
                    self._check_captured_flags(flags)
                if ids is not out_tokens:
                    out_tokens[:, s:] = ids[:, s : s + max_new_tokens]
        step_logits = None
        if return_step_logits:
            v = self.config.input_vocab_size
            step_logits = torch.stack(steps, 1) if steps else torch.zeros(b, 0, v, dtype=self.dtype, device=self.device)
        return GenerationOutput(tokens=out_tokens, step_logits=step_logits)


# --- module-level helpers -------------------------------------------------------------------


def _rows_of(fields: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """Packed fields looked up for a whole generation, with the rotation tables cut to the
    positions start … stop − 1 of one pass or step (the module path's fields unchanged)."""
    if fields["rope"] is None:
        return fields
    return dict(fields, rope=tuple(t[start:stop] for t in fields["rope"]))


def _pad_to(pad: Tensor, capacity: int) -> Tensor:
    out = torch.zeros(pad.shape[0], capacity, dtype=torch.bool, device=pad.device)
    out[:, : pad.shape[1]] = pad
    return out


def _squeeze_batch(g: Tensor) -> Tensor:
    if g.shape[0] != 1:
        raise InputError(f"a collapsed G must be batch-independent [H, d, d]; got {tuple(g.shape)}")
    return g[0]


def random_G(config: PLDRConfig, seed: int = 0, std: float = 1.0) -> Tensor:
    """A seeded random-normal per-layer G [L, H, d, d] (the upstream "random" ablation)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (config.num_layers, config.num_heads, config.depth, config.depth)
    return torch.randn(shape, generator=gen, dtype=torch.float64).mul_(std).float()


__all__ = [
    "COLLAPSED_KEY", "MODES", "CollapseReport", "DecodeCache", "GenerationOutput", "LayerCache",
    "LoglikOutput", "ModelOutput", "PLDRModel", "random_G",
]
