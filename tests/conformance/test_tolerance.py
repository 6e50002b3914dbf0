"""The tolerance policy: floor, bound, messages, mp-space errors, overrides."""

import mpmath
import numpy as np
import pytest
import torch

from plga.conformance.tolerance import (
    DEFAULT_K,
    K_OVERRIDES,
    ConformanceFailure,
    assert_bitwise_equal,
    assert_conforms,
    compare,
    k_for,
    rounding_floor,
)


def test_floor_is_flash_attention_formula_in_the_kernel_dtype():
    a = torch.linspace(-3, 5, 101, dtype=torch.float64)
    a32 = a.float()
    probe = float(2 * ((a32 + 0.3) - 0.3 - a32).abs().max())
    assert rounding_floor(a.numpy(), "float32") == max(probe, 2 * float(np.spacing(np.float32(5.0))))
    assert rounding_floor(a.numpy(), "bfloat16") > rounding_floor(a.numpy(), "float32") > rounding_floor(a.numpy(), "float64")
    assert rounding_floor(np.array(5.0), "float32") == 2 * float(np.spacing(np.float32(5.0)))  # a 0-d truth


def test_floor_is_at_least_two_ulp_of_the_largest_output():
    """Found on CUDA: one key, softmax = 1, the fused kernel returns v one ulp off while every
    eager baseline is exact; the add/sub probe alone gave a floor of 1/8 ulp there."""
    truth = np.array([-0.70373524, -1.26542147, -0.62327446, 0.04132598]).astype(np.float32).astype(np.float64)
    t32 = truth.copy()  # the baselines are exact
    one_ulp = float(np.spacing(np.float32(1.26542147)))
    assert rounding_floor(truth, "float32") == 2 * one_ulp
    kernel = t32.copy()
    kernel[1] += one_ulp
    assert compare(kernel, [t32], truth, dtype="float32", k=2).passed
    kernel[1] += 2 * one_ulp  # three ulp off an exact baseline: still a failure
    assert not compare(kernel, [t32], truth, dtype="float32", k=2).passed


def test_bound_is_k_times_baseline_plus_floor():
    truth = np.linspace(0, 1, 50)
    base = truth + 1e-6
    ok = truth + 2e-6
    cmp = assert_conforms(torch.tensor(ok, dtype=torch.float32), [base], truth, dtype="float32")
    assert cmp.k == DEFAULT_K and cmp.bound == pytest.approx(2 * cmp.baseline_error + cmp.floor)
    with pytest.raises(ConformanceFailure) as info:
        assert_conforms(truth + 1e-4, [base], truth, dtype="float64", what="out")
    msg = str(info.value)
    for part in ("kernel error", "baseline", "rounding floor", "worst index", "mismatched elements", "/ 50"):
        assert part in msg, msg


def test_worst_baseline_variant_counts():
    truth = np.zeros(4)
    cmp = compare(truth + 3e-3, [truth + 1e-3, truth + 2e-3], truth, dtype="float64")
    assert cmp.baseline_error == pytest.approx(2e-3) and cmp.passed


def test_errors_against_mpmath_truth_are_exact():
    with mpmath.workdps(40):
        t = np.array([mpmath.mpf(1) / 3, mpmath.mpf(2) / 3], dtype=object)
    k = np.array([1 / 3, 2 / 3])
    cmp = compare(k, [k], t, dtype="float64")
    assert 0 < cmp.kernel_error < 1e-16  # the rounding error of 1/3, not 0


def test_nonfinite_and_shape_mismatch_fail():
    truth = np.ones(3)
    with pytest.raises(ConformanceFailure, match="non-finite"):
        assert_conforms(np.array([1.0, np.nan, 1.0]), [truth], truth, dtype="float64")
    with pytest.raises(ConformanceFailure, match="shape"):
        assert_conforms(np.ones(4), [truth], truth, dtype="float64")


def test_overrides_are_declared_with_reasons():
    assert k_for("attention_unmasked") == DEFAULT_K == 2.0
    assert k_for("operator_chain") == K_OVERRIDES["operator_chain"][0] > 2
    assert k_for("operator_chain", 3.0) == 3.0
    assert all(reason for _, reason in K_OVERRIDES.values())


def test_bitwise():
    assert_bitwise_equal(torch.ones(3), torch.ones(3), what="x")
    with pytest.raises(ConformanceFailure, match="bit-for-bit"):
        assert_bitwise_equal(torch.ones(3), torch.ones(3) + 1e-7, what="x")


def test_magnitude_floor_accepts_ulps_of_the_terms_not_of_the_result():
    """A gradient entry that is exactly 0 as the difference of two products of size ~3: a sound
    backward (P from the LSE, D = rowsum(dO∘O)) leaves a few ulp of 3 there, the baselines none."""
    from plga.conformance.tolerance import MAGNITUDE_ULPS, UNIT_ROUNDOFF

    truth = np.array([0.0, 1e-3, -2e-3])
    kernel = truth + np.array([2 * 2 * UNIT_ROUNDOFF["float32"] * 3.0, 0.0, 0.0])  # 2 ulp of the terms
    assert not compare(kernel, [truth], truth, dtype="float32").passed  # |truth| alone: the floor vanishes
    assert compare(kernel, [truth], truth, dtype="float32", magnitude=3.0).passed
    wrong = truth + np.array([(MAGNITUDE_ULPS + 1) * 2 * UNIT_ROUNDOFF["float32"] * 3.0, 0.0, 0.0])
    assert not compare(wrong, [truth], truth, dtype="float32", magnitude=3.0).passed  # the floor is bounded
