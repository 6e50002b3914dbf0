"""Eager torch PLGA math in any dtype: the *baseline* of the tolerance policy.

The tolerance policy (:mod:`plga.conformance.tolerance`) compares a kernel with the float64 /
mpmath ground truth *and* with this module: the same mathematics as docs/spec.md, written the
obvious way in torch and evaluated in the kernel's own dtype. Its error against the ground
truth measures what rounding alone costs in that dtype; a kernel may be at most ``k`` times
worse (flash-attention's ``attention_ref(..., upcast=False, reorder_ops=True)``).

Every function takes ``order``: ``"natural"`` follows the published operation order
(``(q G) kᵀ · scale``, ``torch.softmax``, ``F.layer_norm``); ``"reordered"`` regroups the
same products and sums (``(q · scale)(G kᵀ)``, a hand-written softmax and LayerNorm,
``exp(P log A_LM)``) to expose how much the order of operations alone moves the result.
The policy takes the larger of the two errors as the baseline.

The module also holds :class:`EagerDecoder`, a complete PLDR-LLM v510 decoder with the three
caches, written against the reference decoder (:mod:`plga.reference.decoder`) line by line.
It is the baseline of decoder-level checks (never an implementation under test: it would be
compared with itself) and the base the negative controls of :mod:`plga.conformance.broken`
and :mod:`plga.conformance.controls` subclass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..reference.spec import EPSILON_ADJ, LAYER_NORM_EPS, MASK_FILL, causal_support
from .tolerance import dtype_name, fill_carries_scores

ORDERS = ("natural", "reordered")
#: Attention has two more variants: √scale applied to both q and k (torch's SDPA math path),
#: and the softmax taken as exp(log_softmax) of unscaled-then-divided scores.
ATTENTION_ORDERS = ("natural", "reordered", "split_scale", "log_softmax")


# --- Attention ------------------------------------------------------------------------------


def finite_softmax_lse(x: Tensor, allowed: Tensor) -> Tensor:
    """softmax(x + fill) under the finite mask as exp(x' − logsumexp(x')), x' = x + fill: a
    log-sum-exp normalization, as FA-2-style kernels keep one. On a row without an allowed key
    lse is rounded at 1e9, and every weight carries up to u · 1e9 (≈ 1e-7 in float64) that the
    published order does not: a rounding a sound float64 kernel may have, measured here."""
    xf = x + torch.where(allowed, 0.0, MASK_FILL).to(x.dtype)  # [..., S, T]
    return torch.exp(xf - torch.logsumexp(xf, dim=-1, keepdim=True))


def _causal(s: int, t: int, device: Any) -> Tensor:
    """The project's one causal convention (:func:`plga.reference.spec.causal_support`) [S, T]."""
    return torch.from_numpy(causal_support(s, t)).to(device)


def attention_support(
    s: int, t: int, *, causal: bool, key_padding_mask: Tensor | None, device: Any = None
) -> Tensor | None:
    """Allowed (query, key) pairs, bool [B or 1, 1, S, T]; None when every pair is allowed.

    Causal is bottom-right aligned: query i is position T − S + i and sees keys j ≤ T − S + i.
    ``key_padding_mask`` [B, T] is True at padding keys.
    """
    allowed: Tensor | None = None
    if causal:
        allowed = _causal(s, t, device)[None, None]
    if key_padding_mask is not None:
        keys = (~key_padding_mask.to(torch.bool))[:, None, None, :]  # [B, 1, 1, T]
        allowed = keys if allowed is None else allowed & keys
    return allowed


def _softmax(x: Tensor, allowed: Tensor | None, finite_mask: bool, order: str) -> Tensor:
    """Row softmax of scaled scores x [..., S, T] under ``allowed`` (ideal or finite mask).

    Under the finite mask in float64, where −1e9 + s still carries s and sound kernels round a
    row without an allowed key differently, the reordered order normalizes by a log-sum-exp
    (:func:`finite_softmax_lse`)."""
    if allowed is not None and finite_mask and order == "reordered" and fill_carries_scores(dtype_name(x)):
        return finite_softmax_lse(x, allowed)
    if allowed is not None and finite_mask:
        fill = torch.full((), MASK_FILL, dtype=x.dtype, device=x.device)
        x = x + torch.where(allowed, torch.zeros((), dtype=x.dtype, device=x.device), fill)
        allowed = None
    if order == "natural":
        if allowed is None:
            return torch.softmax(x, dim=-1)
        w = torch.softmax(x.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
        return w.masked_fill(~allowed, 0.0)
    # reordered: explicit max shift, exp, sum, divide; masked entries exactly zero
    if allowed is None:
        m = x.amax(dim=-1, keepdim=True)
        e = torch.exp(x - m)
        return e / e.sum(dim=-1, keepdim=True)
    lowest = torch.finfo(x.dtype).min
    m = x.masked_fill(~allowed, lowest).amax(dim=-1, keepdim=True)
    e = torch.exp((x - m).masked_fill(~allowed, 0.0)).masked_fill(~allowed, 0.0)
    denom = e.sum(dim=-1, keepdim=True)
    return e / torch.where(denom == 0, torch.ones_like(denom), denom)


def plga_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    G: Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    finite_mask: bool = False,
    order: str = "natural",
) -> Tensor:
    """softmax_J((q G) kᵀ · scale) v in q's dtype: q [B,H,S,d], k [B,H,T,d], v [B,H,T,dv].

    ``G`` [H, d, d], [B, H, d, d] or None (identity). ``finite_mask`` adds −1e9 to masked
    scores (published semantics) instead of excluding them exactly.
    """
    if order not in ATTENTION_ORDERS:
        raise ValueError(f"order must be one of {ATTENTION_ORDERS}, got {order!r}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    kt = k.transpose(-1, -2)  # [B, H, d, T]
    if G is not None:
        G = G.to(q.dtype)
    qg = q if G is None else q @ G  # [B, H, S, d]
    if order == "natural":
        x = (qg @ kt) * scale  # [B, H, S, T]
    elif order == "reordered":
        gk = kt if G is None else G @ kt  # [B, H, d, T]
        x = (q * scale) @ gk
    elif order == "split_scale":  # √|scale| on each side (the sign on the keys)
        r = math.sqrt(abs(scale))
        x = (qg * r) @ (kt * (r if scale >= 0 else -r))
    else:  # log_softmax
        x = (qg @ kt) / (1.0 / scale) if scale != 0 else (qg @ kt) * 0.0
    allowed = attention_support(q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask, device=q.device)
    if order == "log_softmax" and not (allowed is not None and not finite_mask):
        if allowed is not None:  # finite mask
            x = x + torch.where(allowed, 0.0, MASK_FILL).to(x.dtype)
        return torch.exp(torch.log_softmax(x, dim=-1)) @ v
    if order == "log_softmax":
        w = torch.exp(torch.log_softmax(x.masked_fill(~allowed, float("-inf")), dim=-1)).nan_to_num(0.0)
        return w.masked_fill(~allowed, 0.0) @ v
    return _softmax(x, allowed, finite_mask, "natural" if order == "split_scale" else order) @ v  # [B, H, S, dv]


# --- The operator chain ---------------------------------------------------------------------


def _layer_norm(x: Tensor, w: Tensor, b: Tensor, order: str) -> Tensor:
    if order == "natural":
        return F.layer_norm(x, (x.shape[-1],), w, b, LAYER_NORM_EPS)
    mean = x.sum(dim=-1, keepdim=True) / x.shape[-1]
    c = x - mean
    var = (c * c).sum(dim=-1, keepdim=True) / x.shape[-1]
    return c * torch.rsqrt(var + LAYER_NORM_EPS) * w + b


def _swiglu(x: Tensor, block: Sequence[Tensor], order: str) -> Tensor:
    w1, b1, w2, b2, w3, b3 = block
    if order == "natural":
        return F.linear(F.silu(F.linear(x, w1, b1)) * F.linear(x, w2, b2), w3, b3)
    u = x @ w1.transpose(-1, -2) + b1
    gate = u * torch.sigmoid(u)
    return (gate * (x @ w2.transpose(-1, -2) + b2)) @ w3.transpose(-1, -2) + b3


def density_operator(q_rot: Tensor, order: str = "natural") -> Tensor:
    """A₀ = Q̃ᵀ Q̃ over all S rows: [B, H, S, d] → [B, H, d, d]."""
    if order == "natural":
        return q_rot.transpose(-1, -2) @ q_rot
    return torch.einsum("bhsi,bhsj->bhij", q_rot.flip(-2), q_rot.flip(-2))  # rows summed in reverse


def metric_learner(density: Tensor, w: Mapping[str, Any], order: str = "natural") -> Tensor:
    """A = Φ_res(LN(A₀)) with the layer weights ``w`` (keys ln_weight, ln_bias, units)."""
    a = _layer_norm(density, w["ln_weight"], w["ln_bias"], order)  # [B, H, d, d]
    for blocks, gamma, beta in w["units"]:
        y = a
        for block in blocks:
            y = _swiglu(y, block, order)
        a = _layer_norm(y + a, gamma, beta, order)
    return a


def power_stage(
    A: Tensor, W: Tensor, b: Tensor, P: Tensor, a: Tensor, b_a: Tensor, order: str = "natural"
) -> tuple[Tensor, Tensor, Tensor]:
    """(A_LM, A_P, G_LM): iSwiGLU(W A + b) + ε, A_LM^{⊙P}, a A_P + b_a (left matrix products)."""
    u = W @ A + b  # [B, H, d, d]
    if order == "natural":
        a_lm = u * F.silu(u) + EPSILON_ADJ
        a_p = torch.pow(a_lm, P)
        return a_lm, a_p, a @ a_p + b_a
    a_lm = (u * u) * torch.sigmoid(u) + EPSILON_ADJ
    a_p = torch.exp(P * torch.log(a_lm))
    return a_lm, a_p, b_a + a @ a_p


def cast_layer_weights(w: Mapping[str, Any], dtype: torch.dtype, device: Any = None) -> dict[str, Any]:
    """The chain weights dict with every tensor cast to ``dtype`` (and moved to ``device``)."""
    c = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    units = [([tuple(c(x) for x in blk) for blk in blocks], c(g), c(bt)) for blocks, g, bt in w["units"]]
    out = {k: c(w[k]) for k in ("ln_weight", "ln_bias", "W", "b", "P", "a", "b_a")}
    out["units"] = units
    return out


def operator_chain(
    q_rot: Tensor, layer_weights: Mapping[str, Any], order: str = "natural"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(A, A_LM, A_P, G_LM) from rotated queries q_rot [B, H, S, d], in q_rot's dtype."""
    w = cast_layer_weights(layer_weights, q_rot.dtype, q_rot.device)
    A = metric_learner(density_operator(q_rot, order), w, order)
    return (A, *power_stage(A, w["W"], w["b"], w["P"], w["a"], w["b_a"], order))


def layer_weights_from_state(state: Mapping[str, Any], num_reslayerA: int, num_denseA: int, layer: int) -> dict[str, Any]:
    """The chain weights dict of layer ``layer`` from an upstream-named state dict."""
    p = f"decoder.dec_layers.{layer}.mha1."
    glu = lambda pre: tuple(state[f"{pre}gluw{n}.{kind}"] for n in (1, 2, 3) for kind in ("weight", "bias"))  # noqa: E731
    units = [
        (
            [glu(f"{p}reslayerAs.{j}.denseAs.{k}.") for k in range(num_denseA)],
            state[f"{p}reslayerAs.{j}.layernormA.weight"],
            state[f"{p}reslayerAs.{j}.layernormA.bias"],
        )
        for j in range(num_reslayerA)
    ]
    q = p + "plgatt_layer."
    return {
        "ln_weight": state[p + "layernorm1.weight"],
        "ln_bias": state[p + "layernorm1.bias"],
        "units": units,
        "W": state[q + "Wlst"],
        "b": state[q + "blst"],
        "P": state[q + "pwlst"],
        "a": state[q + "alst"],
        "b_a": state[q + "balst"],
    }


# --- RoPE -----------------------------------------------------------------------------------


#: How RoPE tables are built: ``"float64"`` (the contract, docs/spec.md §2.3) or ``"float32"``, the
#: upstream implementation's (torchtune's) own: θ_j = 1 / β^(2j/d), angles p·θ_j and cos/sin
#: all in float32. The angle p·θ_j then carries half a float32 ulp of itself, ~p·6e-8 (1e-5 at
#: position 200): a legitimate float32 rounding a float32 decoder may have.
ROPE_TABLES = ("float64", "float32")


def rope(x: Tensor, positions: Tensor, base: float = 10000.0, style: str = "interleaved", tables: str = "float64") -> Tensor:
    """Rotate rows of x [..., S, d] at integer ``positions`` [S]; the tables built in ``tables``
    precision (:data:`ROPE_TABLES`), cast to x's dtype."""
    d = x.shape[-1]
    if tables == "float64":
        theta = base ** (-2.0 * torch.arange(d // 2, dtype=torch.float64, device=x.device) / d)  # [d/2]
    else:  # torchtune's RotaryPositionalEmbeddings: every step in float32
        theta = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device)[: d // 2].float() / d))  # [d/2]
    angles = positions.to(device=x.device, dtype=theta.dtype)[:, None] * theta  # [S, d/2]
    return rotate_pairs(x, torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype), style)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, style: str) -> Tensor:
    """Rotate the coordinate pairs of ``style`` of x [..., S, d] by the angles whose cos, sin [S, d/2] are given."""
    d = x.shape[-1]
    if style == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


# --- The decoder ----------------------------------------------------------------------------


@dataclasses.dataclass
class LayerCache:
    """Upstream ``kvcache`` + ``Gcache`` of one layer (as :class:`plga.reference.decoder.LayerCache`)."""

    k: Tensor  # [B, H, T, d] rotated keys
    v: Tensor  # [B, H, T, d]
    A: Tensor | None  # [B, H, d, d] prompt generator (frozen)
    A_LM: Tensor | None
    G_LM: Tensor  # [B, H, d, d] operator used for new tokens
    key_allowed: Tensor  # [B, T] False at the prompt's padding keys


class EagerDecoder:
    """The PLDR-LLM v510 decoder in eager torch, in one dtype, mirroring the reference decoder.

    ``state`` maps upstream names to tensors (cast to ``dtype`` on ``device`` here); ``config``
    is a :class:`plga.reference.config.PLDRConfig`. Modes: ``nocache``, ``kv``, ``kvg``,
    ``collapsed`` (a constant per-layer G replaces the metric learner).
    Subclasses override :meth:`rotate_queries`, :meth:`chain`, :meth:`cached_operator`,
    :meth:`attention_weights` to build negative controls.
    """

    def __init__(
        self, state: Mapping[str, Any], config: Any, dtype: torch.dtype = torch.float32,
        device: Any = "cpu", order: str = "natural", wide_chain: bool = False, wide_softmax: bool = False,
        rope_tables: str = "float64", jitter: float = 0.0,
    ) -> None:
        self.config = config
        self.rope_tables = rope_tables  # :data:`ROPE_TABLES`
        # jitter: each layer's generator A perturbed by this much of each row's largest entry (seeded
        # signs) before the power stage: another rounding of A, as an implementation's own order of
        # operations gives (A is a LayerNorm's output: its rounding scales with its rows)
        self.jitter = jitter
        self.dtype = dtype
        self.device = torch.device(device)
        self.order = order
        # wide_chain: the operator chain (and q G) in float32 for bf16/fp16 activations, the
        # precision policy of plga.kernels; one more legitimate way to evaluate the same math
        self.chain_dtype = torch.float32 if wide_chain and dtype in (torch.bfloat16, torch.float16) else dtype
        # wide_softmax: the attention weights in float32, rounded once — in float16 the −1e9 mask
        # overflows to −inf and a row without an allowed key is NaN in the other orders
        self.softmax_dtype = torch.float32 if wide_softmax and dtype in (torch.bfloat16, torch.float16) else dtype
        self.p = {k: torch.as_tensor(v).to(device=self.device, dtype=dtype) for k, v in state.items()}
        # both square roots in float32, as the published code computes them (docs/spec.md §2)
        self.sqrt_d_model = float(torch.tensor(float(config.d_model), dtype=torch.float32).sqrt())
        self.sqrt_depth = float(torch.tensor(float(config.depth), dtype=torch.float32).sqrt())

    # building blocks
    def linear(self, x: Tensor, name: str) -> Tensor:
        return x @ self.p[name + ".weight"].transpose(0, 1) + self.p[name + ".bias"]

    def ln(self, x: Tensor, name: str) -> Tensor:
        return _layer_norm(x, self.p[name + ".weight"], self.p[name + ".bias"], self.order)

    def heads(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.config.num_heads, self.config.depth).transpose(1, 2)  # [B, H, S, d]

    def embed(self, tokens: Tensor) -> Tensor:
        emb = self.p["decoder.embedding.weight"][tokens]  # [B, S, D]
        return self.ln(emb * self.sqrt_d_model, "decoder.layernorm1")

    def layer_weights(self, i: int) -> dict[str, Any]:
        return layer_weights_from_state(self.p, self.config.num_reslayerA, self.config.num_denseA, i)

    # overridable stages
    def rotate_queries(self, i: int, h: Tensor, positions: Tensor, constant_g: Tensor | None) -> Tensor:
        """RoPE(h W_q + b_q) per head → [B, H, S, d]."""
        return self.rotate(self.heads(self.linear(h, f"decoder.dec_layers.{i}.mha1.wq")), positions)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE of queries or keys [B, H, S, d] at ``positions`` [S] (tables: ``rope_tables``)."""
        return rope(x, positions, self.config.rope_base, self.config.rope_style, self.rope_tables)

    def chain(self, i: int, q_rot: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(A, A_LM, A_P, G_LM) of layer i from its rotated queries (in ``chain_dtype``)."""
        if not self.jitter:
            return operator_chain(q_rot.to(self.chain_dtype), self.layer_weights(i), self.order)
        w = cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
        A = metric_learner(density_operator(q_rot.to(self.chain_dtype), self.order), w, self.order)  # [B, H, d, d]
        signs = torch.randint(0, 2, A.shape, generator=torch.Generator().manual_seed(7919 + i)) * 2 - 1
        A = A + self.jitter * A.abs().amax(-1, keepdim=True) * signs.to(device=A.device, dtype=A.dtype)  # [B, H, d, d]
        return (A, *self.power(i, A))

    def power(self, i: int, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        w = cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
        return power_stage(A.to(self.chain_dtype), w["W"], w["b"], w["P"], w["a"], w["b_a"], self.order)

    def constant_operator(self, constant_g: Tensor) -> Tensor:
        """The operator applied after rotation when a constant G replaces the learner."""
        return constant_g

    def cached_operator(self, i: int, cache: LayerCache, mode: str) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """(A, A_LM, G_LM) for a cached step: kv recomputes G_LM from the frozen A; kvg reuses it."""
        if mode == "kv":
            assert cache.A is not None
            a_lm, _, g = self.power(i, cache.A)
            return cache.A, a_lm, g
        return cache.A, cache.A_LM, cache.G_LM

    def attention_weights(self, x: Tensor, support: Tensor) -> Tensor:
        """softmax of the scaled scores x [B, H, S, T] under the finite −1e9 mask, as published
        (``support`` [B, S, T]: the allowed pairs)."""
        if self.softmax_dtype != x.dtype:
            return _softmax(x.to(self.softmax_dtype), support[:, None], True, self.order).to(x.dtype)
        return _softmax(x, support[:, None], True, self.order)

    def layer(
        self, i: int, h: Tensor, positions: Tensor, support: Tensor | None,
        cache: LayerCache | None, mode: str, constant_g: Tensor | None,
    ) -> tuple[Tensor, dict[str, Tensor], LayerCache]:
        c, pre = self.config, f"decoder.dec_layers.{i}."
        q = self.rotate_queries(i, h, positions, constant_g)  # [B, H, S, d]
        k = self.rotate(self.heads(self.linear(h, pre + "mha1.wk")), positions)
        v = self.heads(self.linear(h, pre + "mha1.wv"))
        ded: dict[str, Tensor] = {}
        a = a_lm = None
        if constant_g is not None:
            cg = self.constant_operator(constant_g)
            g = cg.to(self.dtype).expand(h.shape[0], *cg.shape[-3:])
        elif cache is None:
            a, a_lm, a_p, g = self.chain(i, q)
            ded.update(A=a, A_LM=a_lm, A_P=a_p)
        else:
            a, a_lm, g = self.cached_operator(i, cache, mode)
        ded["G_LM"] = g
        if cache is not None:
            k = torch.cat([cache.k, k], dim=2)
            v = torch.cat([cache.v, v], dim=2)
            key_allowed = torch.cat([cache.key_allowed, torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)], dim=1)
            s_new, t_all = h.shape[1], k.shape[2]
            support = key_allowed[:, None, :] & _causal(s_new, t_all, h.device)[None]
        else:
            assert support is not None
            key_allowed = support[:, -1, :]
        if g.dtype != self.dtype:  # wide chain: q G formed in the wider dtype, rounded once
            x = ((q.to(g.dtype) @ g).to(self.dtype) @ k.transpose(-1, -2)) / self.sqrt_depth
        elif self.order == "natural":
            x = ((q @ g) @ k.transpose(-1, -2)) / self.sqrt_depth
        else:
            x = q @ (g @ k.transpose(-1, -2)) / self.sqrt_depth
        ded["scores"] = x
        w = self.attention_weights(x, support)  # [B, H, S, T]
        b, _, s, _ = q.shape
        attn = self.linear((w @ v).transpose(1, 2).reshape(b, s, c.d_model), pre + "mha1.dense")
        h1 = self.ln(attn + h, pre + "layernorm1")
        ffn = _swiglu(h1, tuple(self.p[f"{pre}ffn.gluw{n}.{kd}"] for n in (1, 2, 3) for kd in ("weight", "bias")), self.order)
        out = self.ln(ffn + h1, pre + "layernorm2")
        return out, ded, LayerCache(k=k, v=v, A=a, A_LM=a_lm, G_LM=g, key_allowed=key_allowed)

    # whole-model entry points
    def forward(self, tokens: Tensor, constant_g: Sequence[Tensor] | None = None) -> tuple[Tensor, list[dict[str, Tensor]], list[LayerCache]]:
        tokens = torch.as_tensor(tokens, device=self.device).long()
        s = tokens.shape[1]
        support = _causal(s, s, self.device)[None] & (tokens != 0)[:, None, :]
        positions = torch.arange(s, device=self.device)
        h = self.embed(tokens)
        deds, caches = [], []
        for i in range(self.config.num_layers):
            g = None if constant_g is None else torch.as_tensor(constant_g[i], device=self.device)
            h, ded, cache = self.layer(i, h, positions, support, None, "nocache", g)
            deds.append(ded)
            caches.append(cache)
        return self.linear(h, "final_layer"), deds, caches

    def step_positions(self, offset: int, n: int) -> Tensor:
        """Positions of ``n`` new tokens after ``offset`` cached ones (absolute, padding included)."""
        return torch.arange(offset, offset + n, device=self.device)

    def step(self, tokens: Tensor, caches: list[LayerCache], mode: str, constant_g: Sequence[Tensor] | None = None) -> tuple[Tensor, list[LayerCache]]:
        positions = self.step_positions(caches[0].k.shape[2], tokens.shape[1])
        h = self.embed(tokens)
        new = []
        for i in range(self.config.num_layers):
            g = None if constant_g is None else torch.as_tensor(constant_g[i], device=self.device)
            h, _, cache = self.layer(i, h, positions, None, caches[i], mode, g)
            new.append(cache)
        return self.linear(h, "final_layer"), new

    def choose(self, logits: Tensor) -> Tensor:
        """Greedy choice: the argmax of each row's logits [B, V] → [B, 1]."""
        return logits.argmax(-1, keepdim=True)

    def generate(self, prompt: Tensor, max_new_tokens: int, mode: str = "kv", constant_g: Sequence[Tensor] | None = None,
                 forced: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Greedy decoding → (tokens [B, S+N], step_logits [B, N, V]) in ``mode``; with ``forced``
        [B, S+N] each step takes the forced token instead of its argmax (teacher forcing)."""
        tokens = torch.as_tensor(prompt, device=self.device).long()
        s0 = tokens.shape[1]

        def pick(logits: Tensor, n: int) -> Tensor:
            return self.choose(logits) if forced is None else forced[:, s0 + n : s0 + n + 1].to(tokens.device)

        steps = []
        if mode == "nocache":
            for n in range(max_new_tokens):
                logits = self.forward(tokens, constant_g)[0][:, -1]
                steps.append(logits)
                tokens = torch.cat([tokens, pick(logits, n)], dim=1)
        elif max_new_tokens:
            if mode == "collapsed" and constant_g is None:
                raise ValueError("mode 'collapsed' needs constant_g")
            logits_all, _, caches = self.forward(tokens, constant_g)
            logits = logits_all[:, -1]
            cached_mode = "kvg" if mode == "collapsed" else mode
            for n in range(max_new_tokens):
                steps.append(logits)
                nxt = pick(logits, n)
                tokens = torch.cat([tokens, nxt], dim=1)
                if n + 1 < max_new_tokens:
                    out, caches = self.step(nxt, caches, cached_mode, constant_g)
                    logits = out[:, -1]
        v = self.config.input_vocab_size
        step_logits = torch.stack(steps, dim=1) if steps else torch.zeros(tokens.shape[0], 0, v, dtype=self.dtype)
        return tokens, step_logits


__all__ = [
    "ATTENTION_ORDERS",
    "EPSILON_ADJ",
    "LAYER_NORM_EPS",
    "MASK_FILL",
    "ORDERS",
    "ROPE_TABLES",
    "EagerDecoder",
    "LayerCache",
    "attention_support",
    "cast_layer_weights",
    "density_operator",
    "finite_softmax_lse",
    "layer_weights_from_state",
    "metric_learner",
    "operator_chain",
    "plga_attention",
    "power_stage",
    "rope",
]
