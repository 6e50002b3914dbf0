"""A_LM at its 1e-9 floor in the decoder checks, below float64.

The floor ε of A_LM = iSwiGLU(W A + b) + ε is ~1e-9 of A_LM where the drawn weights put it
(u ≈ 3), below float32's resolution. A ninth outside audit's decoder that forgot it in kv's step
(declared in float32 and bfloat16 only) passed: the conditioning rule took A_LM's rounding as
absolute (u_r / A_LM) and rejected every case near the floor below float64. The rule now also
estimates it through u (:func:`plga.conformance.checks.a_lm_rounding`), and a decoder boundary
case puts A_LM at its floor in every layer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from plga.conformance import check_kernel, checks, oracle
from plga.conformance import strategies as sh
from plga.conformance.tolerance import UNIT_ROUNDOFF


def _power_inputs(b_shift: float, seed: int = 3) -> tuple[np.ndarray, ...]:
    """(A, W, b) of one head: A a LayerNorm-like output, W and b as the random decoder weights."""
    rng = np.random.default_rng(seed)
    d = 16
    A = rng.standard_normal((1, 1, d, d))  # [B, H, d, d]
    W = rng.standard_normal((1, d, d)) * 0.5 / np.sqrt(d)
    b = 3.0 + b_shift + 0.1 * rng.standard_normal((1, d, d))
    return A, W, b


def _a_lm(A: Any, W: Any, b: Any) -> Any:
    u = W @ A + b
    return u * torch.nn.functional.silu(u) + 1e-9


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_at_the_floor_the_estimate_bounds_the_real_rounding(dtype):
    """A_LM computed in ``dtype`` from ``dtype`` inputs, against float64 from the same W, b (as
    the suite's truth reads the cast state) and the exact A: its relative error stays within ρ,
    which is ~3 u_r there, while the absolute estimate u_r / A_LM is ~1e9 u_r."""
    tdt = getattr(torch, dtype)
    A, W, b = _power_inputs(sh.DECODER_FLOOR_B_SHIFT)
    W, b = (torch.from_numpy(x).to(tdt).double().numpy() for x in (W, b))  # representable in dtype
    truth = _a_lm(*(torch.from_numpy(x) for x in (A, W, b))).numpy()
    low = _a_lm(*(torch.from_numpy(x).to(tdt) for x in (A, W, b))).double().numpy()
    rho = checks.a_lm_rounding(A, truth, W, b, dtype)
    err = np.abs(low - truth) / truth
    unit = UNIT_ROUNDOFF[dtype]
    assert np.all(err <= rho), f"max err/ρ {np.max(err / rho):.3g}"
    assert np.max(rho) < 5 * unit  # judged: |P| ρ ≪ POWER_CONDITION_BOUND
    assert np.min(unit / truth) > 1e8 * unit  # the absolute estimate alone rejects every entry
    # negative control: the same A_LM without the floor is off far beyond ρ
    Wt, bt, At = (torch.from_numpy(x).to(tdt) for x in (W, b, A))
    u = Wt @ At + bt
    no_floor = (u * torch.nn.functional.silu(u)).double().numpy()
    assert np.all(np.abs(no_floor - truth) / truth > 10 * rho)


def test_the_estimate_keeps_the_rule_where_a_lm_is_small_near_u_zero_and_in_the_bulk():
    """Near u = 0 (iSwiGLU(u) ≈ u²/2 small) both estimates are large: such cases stay rejected.
    In the bulk (u ≈ 3) the absolute estimate is the smaller one: the rule is unchanged there."""
    A, W, _ = _power_inputs(0.0)
    u = np.linspace(-1e-3, 1e-3, A.size).reshape(A.shape)  # [1, 1, d, d], 0 excluded (even count)
    b = u - W @ A  # W A + b = u
    a_lm = u * u / (1 + np.exp(-u)) + 1e-9
    rho = checks.a_lm_rounding(A, a_lm, W, b, "float32")
    assert np.all(rho > 1e3 * UNIT_ROUNDOFF["float32"])
    A, W, b = _power_inputs(0.0)
    u = W @ A + b
    a_lm = u * u / (1 + np.exp(-u)) + 1e-9
    assert np.array_equal(checks.a_lm_rounding(A, a_lm, W, b, "bfloat16"), UNIT_ROUNDOFF["bfloat16"] / a_lm)


def _floor_case(ctx_dtype: str) -> tuple[Any, Any, Any, np.ndarray]:
    from plga.conformance.adapters import EagerAdapter

    ctx = checks.Context(EagerAdapter(), ctx_dtype, check_id=f"cache_modes[{ctx_dtype}]")
    case = next(c for c in checks._decoder_boundary(ctx, generation=True) if c.b_shift)
    return ctx, case.state(ctx), case.config, case.tokens


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_floor_case_is_judged_below_float64(dtype):
    ctx, state, config, tokens = _floor_case(dtype)
    a_lm = np.asarray(oracle.truth_forward(state, config, tokens).deductive[0]["A_LM"])
    assert np.all(a_lm < 1.05e-9), "every entry of A_LM at its floor"
    checks._assume_power_conditioned(ctx, state, config, tokens)  # not rejected


def test_the_floor_case_is_left_out_in_float16():
    """1e-9 is below float16's smallest normal (6e-5), even below its subnormals: A_LM's rounding is
    absolute there and the case is rejected."""
    from hypothesis.errors import UnsatisfiedAssumption

    ctx, state, config, tokens = _floor_case("float16")
    with pytest.raises(UnsatisfiedAssumption):
        checks._assume_power_conditioned(ctx, state, config, tokens)


def test_kv_step_without_the_floor_is_caught_below_float64(monkeypatch):
    """The audit's decoder (control ``kv_step_power_without_floor``) fails cache_modes at float32
    and bfloat16 on the floor case; negative control: with the case's bias unshifted (A_LM far above
    its floor, as every other case) it passes."""
    from plga.conformance.controls import CONTROLS

    impl = CONTROLS["kv_step_power_without_floor"].make()
    for seed in (20260, 1):
        report = check_kernel(impl, profile="quick", seed=seed, shrink=False, checks=["cache_modes"])
        assert report.failed_checks() == {"cache_modes"}, report.summary()
        assert {f.id for f in report.failures} == {"cache_modes[float32]", "cache_modes[bfloat16]"}, report.summary()
        assert all("A_LM at its 1e-9 floor" in f.message for f in report.failures), report.summary()
    monkeypatch.setattr(sh, "DECODER_FLOOR_B_SHIFT", 0.0)
    assert check_kernel(impl, profile="quick", seed=20260, shrink=False, checks=["cache_modes"]).passed


def test_a_prompt_pass_without_the_floor_is_caught_below_float64(monkeypatch):
    """The same slip in the prompt pass's power stage (every mode reads it) fails the forward check."""
    from plga.conformance import eager as eg
    from plga.conformance.controls.decoders import BelowFloat64DecoderControl

    class PowerWithoutFloor(eg.EagerDecoder):
        def chain(self, i: int, q_rot: Any) -> Any:
            A = super().chain(i, q_rot)[0]
            w = eg.cast_layer_weights(self.layer_weights(i), self.chain_dtype, self.device)
            u = w["W"] @ A + w["b"]  # [B, H, d, d]
            a_lm = u * torch.nn.functional.silu(u)  # the floor forgotten
            a_p = torch.pow(a_lm, w["P"])
            return A, a_lm, a_p, w["a"] @ a_p + w["b_a"]

    impl = BelowFloat64DecoderControl("test.power_without_floor", PowerWithoutFloor)
    assert check_kernel(impl, profile="quick", shrink=False, checks=["forward_logits"]).failed_checks() == {"forward_logits"}
    monkeypatch.setattr(sh, "DECODER_FLOOR_B_SHIFT", 0.0)
    assert check_kernel(impl, profile="quick", shrink=False, checks=["forward_logits"]).passed
