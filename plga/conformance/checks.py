"""The conformance checks: one function per property, registered in :data:`CHECKS`.

Each check takes a :class:`Context` (adapter, dtype, profile) and either returns (pass),
raises :class:`~plga.conformance.adapter.SkipCheck` (does not apply: a capability or shared
data is missing) or raises ``AssertionError`` (a conformance failure, with the tolerance
policy's three errors and a reproduction note). The pytest suite
(:mod:`plga.conformance.suite`), :func:`plga.conformance.check_kernel` and
:func:`plga.conformance.parametrize_with_checks` all run these same functions.

Groups: ``attention`` (differential against the reference over drawn shapes, dtypes, masks,
padding and G families), ``structure`` (sentinel G, batched = per-slice, SDPA at G = I),
``chain`` (queries → G_LM), ``decoder`` (forward from a state dict), ``cache`` (decoding
modes and their fidelity).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import assume, given, reproduce_failure
from hypothesis import strategies as st

from ..datafiles import GOLDEN_CHECKPOINT, TRAINED_G_LM, missing_reason
from . import eager as eg
from . import oracle, profiles
from . import strategies as sh
from .adapter import Adapter, NotProvided, SkipCheck
from .tolerance import ConformanceFailure, assert_bitwise_equal, assert_conforms, compare, k_for

# --- Context and registry -------------------------------------------------------------------


@dataclasses.dataclass
class Context:
    """What a check runs against: the adapter, one dtype and the profile."""

    adapter: Adapter
    dtype: str
    profile: str = "quick"
    check_id: str = ""
    shrink: bool = True
    reproduce: str | None = None  # "VERSION:BLOB" of a failure to replay

    @property
    def device(self) -> str:
        return getattr(self.adapter, "device", "cpu")

    @property
    def mp(self) -> bool:
        """mpmath ground truth when the kernel computes in float64."""
        return self.dtype == "float64"

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    def settings(self, factor: float = 1.0) -> Any:
        return profiles.hypothesis_settings(self.profile, factor, shrink=self.shrink)


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    group: str
    fn: Callable[[Context], None]
    requires: tuple[str, ...]
    doc: str
    dtypes: tuple[str, ...] | None  # None: every dtype the adapter declares


CHECKS: dict[str, Check] = {}
GROUPS = ("attention", "structure", "chain", "decoder", "cache")


def register(name: str, group: str, *, requires: Sequence[str] = (),
             dtypes: Sequence[str] | None = None) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    def deco(fn: Callable[[Context], None]) -> Callable[[Context], None]:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else name
        CHECKS[name] = Check(name, group, fn, tuple(requires), doc, None if dtypes is None else tuple(dtypes))
        return fn

    return deco


def check_ids(adapter: Adapter | None = None, group: str | None = None) -> list[tuple[str, str]]:
    """(check name, dtype) pairs in registry order; all suite dtypes when ``adapter`` is None."""
    from .adapter import DTYPES

    out = []
    for c in CHECKS.values():
        if group is not None and c.group != group:
            continue
        dts = c.dtypes if c.dtypes is not None else DTYPES
        if adapter is not None:
            dts = tuple(d for d in dts if d in adapter.dtypes) or dts[:1]  # keep one id to report the skip
        for d in dts:
            out.append((c.name, d))
    return out


def run_check(adapter: Adapter, name: str, dtype: str, *, profile: str | None = None, shrink: bool = True) -> None:
    """Run one registered check (raises SkipCheck / AssertionError as the check does)."""
    check = CHECKS[name]
    ctx = Context(adapter, dtype, profiles.selected(profile), f"{name}[{dtype}]", shrink, os.environ.get("PLGA_REPRODUCE"))
    adapter.require(*check.requires)
    if dtype not in adapter.dtypes:
        adapter.require(dtype)
    import torch

    if ctx.device.startswith("cuda") and not torch.cuda.is_available():
        raise SkipCheck(f"{adapter.name} runs on {ctx.device} but no CUDA device is available")
    # The suite's tensors are tiny: one intra-op thread is fastest and immune to the OpenMP
    # spin-wait stalls of an oversubscribed machine. $PLGA_NUM_THREADS overrides; restored after.
    old = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("PLGA_NUM_THREADS", "1")))
    try:
        check.fn(ctx)
    finally:
        torch.set_num_threads(old)


def run_property(ctx: Context, strategy: Any, body: Callable[[Any], None], factor: float = 1.0) -> None:
    """Run ``body(case)`` over ``strategy`` under the context's profile, with a repro note."""

    @given(st.data())
    def prop(data: Any) -> None:
        case = data.draw(strategy, label="case")
        try:
            body(case)
        except NotProvided as exc:
            raise SkipCheck(str(exc)) from exc

    prop._hypothesis_internal_add_digest = ctx.check_id.encode()  # type: ignore[attr-defined]
    test = ctx.settings(factor)(prop)
    if ctx.reproduce:
        version, _, blob = ctx.reproduce.partition(":")
        test = reproduce_failure(version, blob.encode())(test)
    try:
        test()
    except AssertionError as exc:
        _add_repro(exc, ctx)
        raise


def _add_repro(exc: BaseException, ctx: Context) -> None:
    import re

    blob = None
    for note in getattr(exc, "__notes__", []):
        m = re.search(r"@reproduce_failure\('([^']+)', b'([^']+)'\)", note)
        if m:
            blob = f"{m.group(1)}:{m.group(2)}"
    impl = (ctx.adapter.spec or os.environ.get("PLGA_IMPL") or "<module:object of your adapter>").split(" → ")[0]
    name, _, _rest = ctx.check_id.partition("[")
    lines = [f"Reproduce ({ctx.check_id}, profile {ctx.profile}):"]
    env = f"PLGA_IMPL='{impl}' " + (f"PLGA_REPRODUCE='{blob}' " if blob else "")
    lines.append(f"  {env}python -m pytest --pyargs plga.conformance.suite -p no:cacheprovider -k '{name} and {ctx.dtype}'")
    if blob:
        lines.append(f"  or: plga.conformance.check_kernel(impl, checks=['{ctx.check_id}'], reproduce='{blob}')")
    if ctx.profile != "ci":
        lines.append("  (derandomized replay without the blob: PLGA_PROFILE=ci)")
    exc.add_note("\n".join(lines))


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except NotProvided as exc:
        raise SkipCheck(str(exc)) from exc


# --- Attention ------------------------------------------------------------------------------


def _attention_case_check(ctx: Context, case: sh.AttentionCase, *, what: str, finite_mask: bool = False) -> None:
    t = case.tensors(ctx.dtype, ctx.device)
    kw = dict(causal=case.causal, key_padding_mask=t["key_padding_mask"], scale=case.scale, finite_mask=finite_mask)
    scale = case.scale if case.scale is not None else 1 / math.sqrt(case.d)
    scores = (oracle.to_np(t["q"]) @ (np.eye(case.d) if t["G"] is None else oracle.to_np(t["G"]))) @ np.swapaxes(oracle.to_np(t["k"]), -1, -2)
    assume(np.abs(scores * scale).max() <= sh.MAX_ABS_SCORE)
    truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp, **kw)
    out = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], t["G"], **kw)
    baselines = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], order=o, **kw) for o in eg.ATTENTION_ORDERS]
    assert_conforms(out, baselines, truth, dtype=ctx.dtype, k=k_for(ctx.check_id.split("[")[0]), what=what,
                    note=case.describe())


@register("attention_unmasked", "attention", requires=("attention",))
def check_attention_unmasked(ctx: Context) -> None:
    """Unmasked PLGA attention equals the reference over drawn shapes, scales and every G family."""
    run_property(ctx, sh.attention_cases(causal=False, padding=("none",)),
                 lambda c: _attention_case_check(ctx, c, what="attention (no mask)"))


@register("attention_causal", "attention", requires=("attention", "causal"))
def check_attention_causal(ctx: Context) -> None:
    """Causal attention (bottom-right aligned for S ≤ T) equals the ideal masked reference."""
    run_property(ctx, sh.attention_cases(causal=True, padding=("none",)),
                 lambda c: _attention_case_check(ctx, c, what="attention (causal)"))


@register("attention_padding", "attention", requires=("attention", "key_padding_mask"))
def check_attention_padding(ctx: Context) -> None:
    """Key padding (right, left, scattered; with and without causal) is excluded exactly."""
    run_property(ctx, sh.attention_cases(causal=None, padding=("right", "left", "random")),
                 lambda c: _attention_case_check(ctx, c, what="attention (key padding)"))


@register("attention_finite_mask", "attention", requires=("attention", "finite_mask", "causal", "key_padding_mask"))
def check_attention_finite_mask(ctx: Context) -> None:
    """finite_mask=True reproduces the published −1e9 additive mask, fully masked rows included."""

    def body(c: sh.AttentionCase) -> None:
        # left padding with causal leaves early rows with no allowed key: the finite mask's regime
        if c.causal and c.pad is not None:
            c.pad[:, 0] = c.padding == "left"
            c.pad[c.pad.all(axis=1), -1] = False
        _attention_case_check(ctx, c, what="attention (finite −1e9 mask)", finite_mask=True)

    run_property(ctx, sh.attention_cases(causal=None, padding=("left", "right", "random")), body)


@register("attention_mask_dominance", "attention", requires=("attention", "key_padding_mask"))
def check_attention_mask_dominance(ctx: Context) -> None:
    """Masked keys with scores ~300 above the rest and values ~100 still get exactly zero weight."""
    def body(c: sh.AttentionCase) -> None:
        assume(c.pad is not None and c.pad.any())
        rng = np.random.default_rng(c.seed + 7)
        common = rng.standard_normal((c.b, c.h, 1, c.d))
        q = common + 0.3 * rng.standard_normal((c.b, c.h, c.s, c.d))
        g = np.broadcast_to(np.eye(c.d), (c.h, c.d, c.d)) if c.g is None else c.g
        qg = common @ g  # [B, H, 1, d]
        direction = qg / np.maximum(np.sum(qg * qg, axis=-1, keepdims=True), 1e-12)
        scale = c.scale if c.scale is not None else 1 / math.sqrt(c.d)
        k, v = c.k.copy(), c.v.copy()
        padded = c.pad[:, None, :, None]  # [B, 1, T, 1]
        k = np.where(padded, 300.0 / scale * direction, k)
        v = np.where(padded, 100.0, v)
        c.q, c.k, c.v = q, k, v
        t = c.tensors(ctx.dtype, ctx.device)
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp, **kw)
        out = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], t["G"], **kw)
        base = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], order=o, **kw) for o in eg.ATTENTION_ORDERS]
        assert_conforms(out, base, truth, dtype=ctx.dtype, what="attention (masked keys dominate the scores)",
                        note=c.describe() + "\n  masked keys score ≈ +300 and carry values 100: any leak through the mask shows")

    run_property(ctx, sh.attention_cases(causal=None, padding=("right", "random"), families=("none", "identity", "random", "sentinel")), body)


@register("attention_trained_g", "attention", requires=("attention",))
def check_attention_trained_g(ctx: Context) -> None:
    """The real trained G_LM of PLDR-LLM-v51-110M-1 (ill-conditioned ~1e10) at d = 64."""
    if oracle.trained_g_lm() is None:
        raise SkipCheck(missing_reason(TRAINED_G_LM))
    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right"), families=("trained",), dims=(64,), max_len=9),
                 lambda c: _attention_case_check(ctx, c, what="attention (trained G_LM)"), factor=0.5)


@register("attention_backward", "attention", requires=("attention", "backward"), dtypes=("float32", "bfloat16"))
def check_attention_backward(ctx: Context) -> None:
    """Gradients with respect to q, k, v and G match float64 autograd of the eager math.

    The truth is float64 autograd (there is no mpmath gradient), so float64 kernels are not
    checked here: their truth would be no more precise than they are.
    """
    import torch

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        w = torch.from_numpy(np.random.default_rng(c.seed + 3).standard_normal((c.b, c.h, c.s, c.dv))).to(t["q"])
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)

        def grads(fn: Callable[..., Any], dtype: Any, **extra: Any) -> list[Any]:
            leaves = [t[n].detach().to(dtype).requires_grad_(True) for n in ("q", "k", "v", "G")]
            out = fn(*leaves, **kw, **extra)
            (out * w.to(dtype)).sum().backward()
            return [x.grad for x in leaves]

        truth = grads(eg.plga_attention, torch.float64)
        kern = grads(lambda *a, **k: _call(ctx.adapter.attention, *a, **k), t["q"].dtype)
        base = [grads(eg.plga_attention, t["q"].dtype, order=o) for o in eg.ATTENTION_ORDERS]
        scale = max(float(g.abs().max()) for g in truth)  # a zero gradient still gets the floor of its neighbours
        for i, name in enumerate(("dq", "dk", "dv", "dG")):
            assert_conforms(kern[i], [b[i] for b in base], truth[i], dtype=ctx.dtype, k=k_for("attention_backward"),
                            what=f"attention backward {name}", note=c.describe(), magnitude=scale)

    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right"), families=("random", "sentinel", "rank_one")),
                 body, factor=0.5)


# --- Structure ------------------------------------------------------------------------------


def _diagnose_sentinel(out: Any, case: sh.AttentionCase, t: dict[str, Any]) -> str:
    """Name the mix-up a wrong sentinel output matches (Gᵀ, rolled or reversed heads)."""
    g = oracle.to_np(t["G"])
    candidates = {"Q Gᵀ Kᵀ (G transposed)": np.swapaxes(g, -1, -2)}
    if case.h > 1:
        candidates["G of head h+1 used for head h (heads permuted)"] = np.roll(g, -1, axis=-3)
        candidates["G of head h−1 used for head h (heads permuted)"] = np.roll(g, 1, axis=-3)
        candidates["heads reversed"] = np.flip(g, axis=-3)
    o = oracle.to_np(out)
    kw = dict(causal=case.causal, key_padding_mask=t["key_padding_mask"], scale=case.scale)
    best = min(candidates.items(), key=lambda kv: float(np.max(np.abs(o - oracle.truth_attention(t["q"], t["k"], t["v"], kv[1], **kw)))))
    err = float(np.max(np.abs(o - oracle.truth_attention(t["q"], t["k"], t["v"], best[1], **kw))))
    return f"  closest mix-up: {best[0]} (max |diff| {err:.3e})"


@register("sentinel_g", "structure", requires=("attention",))
def check_sentinel_g(ctx: Context) -> None:
    """The index-encoded sentinel G (h + 0.13 i + 0.017 j) exposes Gᵀ and head mix-ups."""

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        kw = dict(causal=c.causal, key_padding_mask=t["key_padding_mask"], scale=c.scale)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], mp=ctx.mp, **kw)
        out = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], t["G"], **kw)
        base = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], order=o, **kw) for o in eg.ATTENTION_ORDERS]
        cmp = compare(out, base, truth, dtype=ctx.dtype, what="attention (sentinel G)")
        if not cmp.passed:
            raise ConformanceFailure(cmp.message() + "\n" + _diagnose_sentinel(out, c, t) + "\n" + c.describe(), cmp)

    run_property(ctx, sh.attention_cases(causal=False, padding=("none",), families=("sentinel",), min_heads=2, dims=(2, 4, 8)), body)


@register("batched_equals_slices", "structure", requires=("attention",))
def check_batched_equals_slices(ctx: Context) -> None:
    """A batched multi-head call equals the per-(batch, head) calls stacked (within rounding)."""
    import torch

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        pad = t["key_padding_mask"]
        kw = dict(causal=c.causal, scale=c.scale)
        full = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], t["G"], key_padding_mask=pad, **kw)
        rows = []
        for bi in range(c.b):
            heads = []
            for hi in range(c.h):
                g = t["G"]
                if g is not None:
                    g = g[bi : bi + 1, hi : hi + 1] if g.ndim == 4 else g[hi : hi + 1]
                q1, k1, v1 = (t[n][bi : bi + 1, hi : hi + 1] for n in ("q", "k", "v"))
                heads.append(_call(ctx.adapter.attention, q1, k1, v1, g,
                                   key_padding_mask=None if pad is None else pad[bi : bi + 1], **kw))
            rows.append(torch.cat(heads, dim=1))
        sliced = torch.cat(rows, dim=0)
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], t["G"], key_padding_mask=pad, **kw)
        base = [eg.plga_attention(t["q"], t["k"], t["v"], t["G"], key_padding_mask=pad, order=o, **kw) for o in eg.ATTENTION_ORDERS]
        b_err = max(compare(b, [], truth, dtype=ctx.dtype).kernel_error for b in base)
        cmp = compare(full, [sliced], oracle.to_np(sliced), dtype=ctx.dtype, what="batched vs per-slice")
        bound = k_for("batched_equals_slices") * b_err + cmp.floor
        if not (cmp.nonfinite == 0 and cmp.kernel_error <= bound):
            raise ConformanceFailure(
                f"batched call differs from the stacked per-(batch, head) calls by {cmp.kernel_error:.3e} "
                f"> k·baseline + floor = {bound:.3e} (baseline error {b_err:.3e}, floor {cmp.floor:.3e})\n"
                f"  worst index {cmp.worst_index}: batched {cmp.kernel_value!r}, sliced {cmp.truth_value!r}\n{c.describe()}", cmp)

    run_property(ctx, sh.attention_cases(causal=None, padding=("none", "right", "random"), min_heads=2,
                                         families=("none", "random", "sentinel")), body)


@register("sdpa_identity", "structure", requires=("attention",))
def check_sdpa_identity(ctx: Context) -> None:
    """At G = I (and G = None) PLGA is torch SDPA: bit for bit when the adapter declares sdpa_bitwise."""
    import torch
    import torch.nn.functional as F

    bitwise = ctx.adapter.provides("sdpa_bitwise")

    def body(c: sh.AttentionCase) -> None:
        t = c.tensors(ctx.dtype, ctx.device)
        eye = torch.eye(c.d, dtype=t["q"].dtype, device=t["q"].device).expand(c.h, c.d, c.d)
        kw = dict(causal=c.causal, key_padding_mask=None, scale=c.scale)
        out_i = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], eye, **kw)
        out_none = _call(ctx.adapter.attention, t["q"], t["k"], t["v"], None, **kw)
        if c.causal and c.s == c.t:
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True, scale=c.scale)
        elif c.causal:
            mask = torch.ones(c.s, c.t, dtype=torch.bool, device=t["q"].device).tril(diagonal=c.t - c.s)[None, None]
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=mask, scale=c.scale)
        else:
            ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], scale=c.scale)
        if bitwise:
            assert_bitwise_equal(out_i, ref, what="PLGA at G = I vs torch SDPA on the same q", note=c.describe())
            assert_bitwise_equal(out_none, ref, what="PLGA at G = None vs torch SDPA on the same q", note=c.describe())
        truth = oracle.truth_attention(t["q"], t["k"], t["v"], None, mp=ctx.mp, **kw)
        base = [ref] + [eg.plga_attention(t["q"], t["k"], t["v"], None, order=o, **kw) for o in eg.ATTENTION_ORDERS]
        assert_conforms(out_i, base, truth, dtype=ctx.dtype, what="PLGA at G = I vs SDPA ground truth", note=c.describe())
        assert_conforms(out_none, base, truth, dtype=ctx.dtype, what="PLGA at G = None vs SDPA ground truth", note=c.describe())

    run_property(ctx, sh.attention_cases(causal=None, padding=("none",), families=("identity",)), body)


# --- Operator chain -------------------------------------------------------------------------


def _chain_inputs(c: sh.ChainCase, dtype: Any, device: str) -> tuple[Any, dict[str, Any]]:
    import torch

    q, w = c.arrays()
    conv = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)  # noqa: E731
    return conv(q), eg.cast_layer_weights({**w, "units": [([tuple(map(conv, b)) for b in bl], conv(g), conv(be)) for bl, g, be in w["units"]],
                                           **{k: conv(w[k]) for k in ("ln_weight", "ln_bias", "W", "b", "P", "a", "b_a")}}, dtype, device)


@register("operator_chain", "chain", requires=("operator_chain",))
def check_operator_chain(ctx: Context) -> None:
    """(A, A_LM, A_P, G_LM) from rotated queries match the reference chain, b_a ≠ 0, P of both signs."""

    def body(c: sh.ChainCase) -> None:
        q, w = _chain_inputs(c, ctx.torch_dtype, ctx.device)
        out = _call(ctx.adapter.operator_chain, q, w)
        out_dtype = out[-1].dtype
        truth = oracle.truth_chain(q, w, mp=ctx.mp and c.d <= 4)
        qb, wb = q.to(out_dtype), eg.cast_layer_weights(w, out_dtype)
        base = [eg.operator_chain(qb, wb, order=o) for o in eg.ORDERS]
        from .tolerance import dtype_name

        for i, name in enumerate(("A", "A_LM", "A_P", "G_LM")):
            assert_conforms(out[i], [b[i] for b in base], truth[i], dtype=dtype_name(out_dtype), k=k_for("operator_chain"),
                            what=f"operator chain {name}", note=c.describe())

    run_property(ctx, sh.chain_cases(), body)


# --- Decoder --------------------------------------------------------------------------------


def tiny_config() -> Any:
    """Two layers, d_model 16, 2 heads (d = 8): every code path of the decoder, in milliseconds."""
    from ..reference.config import PLDRConfig

    return PLDRConfig(num_layers=2, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1, num_denseA=2,
                      input_vocab_size=37, max_seq_len=64)


def _state(params: dict[str, np.ndarray], dtype: Any, device: str) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device=device, dtype=dtype) for k, v in params.items()}


def _baseline_decoders(state: dict[str, Any], config: Any) -> list[eg.EagerDecoder]:
    """Eager decoders in the published order, reordered, and (bf16/fp16) with a float32 chain."""
    import torch

    ref = next(iter(state.values()))
    out = [eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, order=o) for o in eg.ORDERS]
    if ref.dtype in (torch.bfloat16, torch.float16):
        out.append(eg.EagerDecoder(state, config, dtype=ref.dtype, device=ref.device, wide_chain=True))
    return out


#: Conditioning rule of decoder-level checks: the power stage turns a perturbation δ of A_LM
#: into a relative change |P|·δ/A_LM of A_P, and rounding perturbs A_LM by about u(dtype); a
#: case with max|P|/A_LM · u > POWER_CONDITION_BOUND is rejected (every comparison of it,
#: kernel and baseline alike, measures amplified noise).
POWER_CONDITION_BOUND = 0.25


def _assume_power_conditioned(ctx: Context, state: dict[str, Any], config: Any, tokens: np.ndarray) -> None:
    from .tolerance import UNIT_ROUNDOFF

    res = oracle.truth_forward(state, config, tokens)
    worst = 0.0
    for i, ded in enumerate(res.deductive):
        p = np.abs(oracle.to_np(state[f"decoder.dec_layers.{i}.mha1.plgatt_layer.pwlst"]))
        worst = max(worst, float(np.max(p / np.asarray(ded["A_LM"], dtype=np.float64))))
    assume(worst * UNIT_ROUNDOFF[ctx.dtype] <= POWER_CONDITION_BOUND)


def _forward_compare(ctx: Context, state: dict[str, Any], config: Any, tokens: np.ndarray, *, what: str,
                     constant_g: Sequence[Any] | None = None, truth_logits: Any = None, note: str = "") -> None:
    import torch

    tok = torch.from_numpy(tokens).to(ctx.device)
    if constant_g is None and truth_logits is None:  # drawn cases only (the golden case is fixed)
        _assume_power_conditioned(ctx, state, config, tokens)
    out = _call(ctx.adapter.forward, state, config, tok, constant_g=constant_g)
    if truth_logits is None:
        truth_logits = oracle.truth_forward(state, config, tokens, constant_g).logits
    base = [d.forward(tok, constant_g)[0] for d in _baseline_decoders(state, config)]
    name = ctx.check_id.split("[")[0]
    assert_conforms(out.logits, base, truth_logits, dtype=ctx.dtype, k=k_for(name), what=what,
                    note=f"{note}tokens {tokens.tolist()}")


@register("forward_logits", "decoder", requires=("forward",))
def check_forward_logits(ctx: Context) -> None:
    """Decoder logits from a seeded random state dict match the reference (padding on either side)."""
    config = tiny_config()

    def body(args: tuple[int, np.ndarray]) -> None:
        seed, tokens = args
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        _forward_compare(ctx, state, config, tokens, what="decoder logits", note=f"weights seed {seed}; ")

    run_property(ctx, st.tuples(st.integers(0, 2**31 - 1), sh.token_batches(vocab=config.input_vocab_size, left_padding=ctx.mp)),
                 body, factor=0.5)


@register("forward_golden", "decoder", requires=("forward",), dtypes=("float64", "float32"))
def check_forward_golden(ctx: Context) -> None:
    """The golden checkpoint small_seed0 reproduces the upstream logits (right and left padding)."""
    gold = oracle.golden_small()
    if gold is None:
        raise SkipCheck(missing_reason(GOLDEN_CHECKPOINT))
    params, config, arrays = gold
    state = _state(params, ctx.torch_dtype, ctx.device)
    _forward_compare(ctx, state, config, arrays["tokens"], what="golden small_seed0 logits", truth_logits=arrays["logits"])


@register("forward_collapsed", "decoder", requires=("collapsed",))
def check_forward_collapsed(ctx: Context) -> None:
    """With a constant per-layer G the decoder is generalized SDPA on RoPE(Q) G (G after rotation)."""
    import torch

    config = tiny_config()

    def body(args: tuple[int, str, np.ndarray]) -> None:
        seed, family, tokens = args
        assume(tokens.shape[1] >= 2)  # position 0 has R(0) = I: G before/after RoPE agree there
        rng = np.random.default_rng(seed)
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        gs = [torch.from_numpy(sh.make_g(family, (config.num_heads,), config.depth, rng)).to(device=ctx.device, dtype=ctx.torch_dtype)
              for _ in range(config.num_layers)]
        _forward_compare(ctx, state, config, tokens, constant_g=gs, what=f"collapsed decoder logits (constant {family} G)",
                         note=f"weights seed {seed}; ")

    run_property(ctx, st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(["random", "sentinel", "ill_conditioned"]),
                                sh.token_batches(vocab=config.input_vocab_size, min_len=2, left_padding=ctx.mp)), body, factor=0.5)


# --- Caches ---------------------------------------------------------------------------------


def _generation_compare(ctx: Context, got: Any, truth: Any, baselines: Sequence[Any], *, what: str, note: str) -> None:
    """Tokens equal up to a near-tie of the truth; step logits within the policy on the common prefix."""
    import torch

    name = ctx.check_id.split("[")[0]
    tokens = np.asarray(oracle.to_np(got.tokens)).astype(np.int64)
    t_tokens = np.asarray(truth.tokens)
    t_steps = np.asarray(truth.step_logits)  # [B, N, V]
    n = t_steps.shape[1]
    if tokens.shape != t_tokens.shape:
        raise ConformanceFailure(f"{what}: tokens shape {tokens.shape} != expected {t_tokens.shape}\n{note}")
    s0 = t_tokens.shape[1] - n
    # the common prefix of steps where kernel, truth and every baseline chose the same tokens
    agree = n
    for b in [tokens, *[np.asarray(oracle.to_np(x[0])).astype(np.int64) for x in baselines]]:
        diff = np.nonzero((b[:, s0:] != t_tokens[:, s0:]).any(axis=0))[0]
        if diff.size:
            agree = min(agree, int(diff[0]) + 1)  # the step's logits are comparable, the token may differ
    if agree:
        got_steps = got.step_logits[:, :agree]
        base_steps = [x[1][:, :agree] for x in baselines]
        cmp = assert_conforms(got_steps, base_steps, t_steps[:, :agree], dtype=ctx.dtype, k=k_for(name), what=f"{what} step logits",
                              note=note)
        bound = cmp.bound
    else:
        bound = 0.0
    diff = np.nonzero((tokens[:, s0:] != t_tokens[:, s0:]).any(axis=0))[0]
    if diff.size:
        step = int(diff[0])
        top2 = np.sort(t_steps[:, step], axis=-1)[:, -2:]
        margin = float(np.min(top2[:, 1] - top2[:, 0]))
        if not margin <= 2 * bound:
            raise ConformanceFailure(
                f"{what}: token at step {step} differs from the reference ({tokens[:, s0 + step].tolist()} vs "
                f"{t_tokens[:, s0 + step].tolist()}) although the reference margin {margin:.3e} exceeds 2 × the "
                f"logit tolerance {bound:.3e} (criterion 2B < margin ⇒ identical greedy tokens)\n{note}")
    del torch


def _prompt_strategy(ctx: Context, config: Any) -> Any:
    prompts = sh.token_batches(vocab=config.input_vocab_size, max_len=6, max_batch=1, min_len=2, left_padding=ctx.mp)
    return st.tuples(st.integers(0, 2**31 - 1), prompts, st.integers(2, 5))


def _gen(ctx: Context, state: dict[str, Any], config: Any, prompt: np.ndarray, n: int, mode: str, g: Any = None) -> Any:
    import torch

    return _call(ctx.adapter.generate, state, config, torch.from_numpy(prompt).to(ctx.device), n, mode=mode, constant_g=g)


def _baseline_gen(state: dict[str, Any], config: Any, prompt: np.ndarray, n: int, mode: str, g: Any = None) -> list[Any]:
    import torch

    return [d.generate(torch.from_numpy(prompt), n, mode, g) for d in _baseline_decoders(state, config)]


@register("cache_modes", "cache", requires=("cache_kv", "cache_kvg"))
def check_cache_modes(ctx: Context) -> None:
    """KV and KVG decoding match the reference and each other (kv = kvg)."""
    config = tiny_config()

    def body(args: tuple[int, np.ndarray, int]) -> None:
        seed, prompt, n = args
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        truth = oracle.truth_generate(state, config, prompt, n, "kv")
        _assume_power_conditioned(ctx, state, config, prompt)
        note = f"weights seed {seed}; prompt {prompt.tolist()}; {n} new tokens"
        kv = _gen(ctx, state, config, prompt, n, "kv")
        kvg = _gen(ctx, state, config, prompt, n, "kvg")
        _generation_compare(ctx, kv, truth, _baseline_gen(state, config, prompt, n, "kv"), what="kv decoding", note=note)
        _generation_compare(ctx, kvg, truth, _baseline_gen(state, config, prompt, n, "kvg"), what="kvg decoding", note=note)
        if not np.array_equal(oracle.to_np(kv.tokens), oracle.to_np(kvg.tokens)):
            raise ConformanceFailure(f"kv and kvg decoding chose different tokens: {oracle.to_np(kv.tokens).tolist()} vs "
                                     f"{oracle.to_np(kvg.tokens).tolist()}\n{note}")

    run_property(ctx, _prompt_strategy(ctx, config), body, factor=0.5)


@register("collapsed_equals_kvg", "cache", requires=("cache_kvg", "collapsed"))
def check_collapsed_equals_kvg(ctx: Context) -> None:
    """Decoding with the constant G = the prompt's cached G_LM equals KVG decoding."""
    import torch

    config = tiny_config()

    def body(args: tuple[int, np.ndarray, int]) -> None:
        seed, prompt, n = args
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        note = f"weights seed {seed}; prompt {prompt.tolist()}; {n} new tokens"
        _assume_power_conditioned(ctx, state, config, prompt)
        fwd = _call(ctx.adapter.forward, state, config, torch.from_numpy(prompt).to(ctx.device)) if ctx.adapter.provides("forward") else None
        if fwd is not None and fwd.G_LM is not None:
            gs = [g[0] for g in fwd.G_LM]
        else:
            res = oracle.truth_forward(state, config, prompt)
            gs = [torch.from_numpy(np.asarray(d["G_LM"])[0]).to(device=ctx.device, dtype=ctx.torch_dtype) for d in res.deductive]
        kvg = _gen(ctx, state, config, prompt, n, "kvg")
        col = _gen(ctx, state, config, prompt, n, "collapsed", gs)
        truth = oracle.truth_generate(state, config, prompt, n, "kvg")
        _generation_compare(ctx, kvg, truth, _baseline_gen(state, config, prompt, n, "kvg"), what="kvg decoding", note=note)
        _generation_compare(ctx, col, truth, _baseline_gen(state, config, prompt, n, "collapsed", gs), what="collapsed decoding (G = cached G_LM)", note=note)
        if not np.array_equal(oracle.to_np(col.tokens), oracle.to_np(kvg.tokens)):
            raise ConformanceFailure(f"collapsed decoding with the cached G and kvg decoding chose different tokens: "
                                     f"{oracle.to_np(col.tokens).tolist()} vs {oracle.to_np(kvg.tokens).tolist()}\n{note}")

    run_property(ctx, _prompt_strategy(ctx, config), body, factor=0.5)


@register("gcache_invalidated", "cache", requires=("cache_kvg",))
def check_gcache_invalidated(ctx: Context) -> None:
    """A new prompt gets a new G-cache: decoding two prompts in turn matches decoding each fresh."""
    config = tiny_config()

    def body(args: tuple[int, np.ndarray, int]) -> None:
        seed, prompt, n = args
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        other = np.where(prompt > 0, (prompt * 7 + 3) % (config.input_vocab_size - 1) + 1, 0)
        other[:, 0] = 1 + (prompt[:, 0] % (config.input_vocab_size - 1))
        note = f"weights seed {seed}; first prompt {prompt.tolist()}, then {other.tolist()}; {n} new tokens"
        for p in (prompt, other):
            _assume_power_conditioned(ctx, state, config, p)
        for p in (prompt, other):
            got = _gen(ctx, state, config, p, n, "kvg")
            truth = oracle.truth_generate(state, config, p, n, "kvg")
            _generation_compare(ctx, got, truth, _baseline_gen(state, config, p, n, "kvg"), what="kvg decoding of successive prompts", note=note)

    run_property(ctx, _prompt_strategy(ctx, config), body, factor=0.5)


@register("cache_nocache", "cache", requires=("cache_nocache",))
def check_cache_nocache(ctx: Context) -> None:
    """No-cache decoding (full recompute, G from the whole sequence each step) matches the reference."""
    config = tiny_config()

    def body(args: tuple[int, np.ndarray, int]) -> None:
        seed, prompt, n = args
        state = _state(oracle.random_state_dict(config, seed), ctx.torch_dtype, ctx.device)
        truth = oracle.truth_generate(state, config, prompt, n, "nocache")
        _assume_power_conditioned(ctx, state, config, truth.tokens)  # the longest sequence G is taken from
        got = _gen(ctx, state, config, prompt, n, "nocache")
        _generation_compare(ctx, got, truth, _baseline_gen(state, config, prompt, n, "nocache"), what="nocache decoding",
                            note=f"weights seed {seed}; prompt {prompt.tolist()}; {n} new tokens")

    run_property(ctx, _prompt_strategy(ctx, config), body, factor=0.5)


__all__ = ["CHECKS", "GROUPS", "Check", "Context", "check_ids", "register", "run_check", "run_property", "tiny_config"]
