"""The analytic FLOP / byte counts and the roofline arithmetic of plga.bench (no timing)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from plga.bench import flops as FL
from plga.reference.checkpoint import expected_shapes
from plga.reference.config import PLDRConfig

TINY = PLDRConfig.from_name("tiny")  # 1 layer, D 16, 2 heads of d 8, dff 24, A_dff 12, 1×2 units, V 37


def test_tiny_prefill_counted_by_hand():
    # B = 1, S = 4, all logits, causal pairs = 4·5/2 = 10
    fb = FL.forward_flops(TINY, 1, 4, logits="all")
    assert fb.projections == 4 * 2 * 4 * 16 * 16 == 8192
    assert fb.gram == 2 * 2 * 4 * 8 * 8 == 1024
    assert fb.metric_learner == 2 * 6 * (2 * 8) * 8 * 12 == 18432  # 2 SwiGLUs on 16 rows of 8
    assert fb.power_stage == 2 * 2 * 2 * 8**3 == 4096
    assert fb.apply_g == 2 * 2 * 4 * 8 * 8 == 1024
    assert fb.scores == fb.attention == 2 * 2 * 10 * 8 == 320
    assert fb.ffn == 3 * 2 * 4 * 16 * 24 == 9216
    assert fb.vocab == 2 * 4 * 16 * 37 == 4736
    assert fb.total == 47360
    assert fb.as_dict()["total"] == 47360


def test_tiny_cached_steps_counted_by_hand():
    # one token at position 4 (5 keys): no Gram, no metric learner; kv keeps the power stage
    kv = FL.forward_flops(TINY, 1, 1, start=4, operator="kv", logits="last")
    assert kv.total == 2048 + 4096 + 256 + 2 * 160 + 2304 + 1184 == 10208
    kvg = FL.forward_flops(TINY, 1, 1, start=4, operator="kvg", logits="last")
    assert kvg.total == kv.total - 4096
    col = FL.forward_flops(TINY, 1, 1, start=4, operator="collapsed", logits="last")
    assert col.total == kvg.total


def test_last_logits_and_pairs():
    all_ = FL.forward_flops(TINY, 3, 7, logits="all")
    last = FL.forward_flops(TINY, 3, 7, logits="last")
    assert all_.total - last.total == 2 * 3 * 6 * 16 * 37
    assert FL.forward_flops(TINY, 3, 7, logits="none").vocab == 0
    assert FL.attention_pairs(4) == 10
    assert FL.attention_pairs(4, causal=False) == 16
    assert FL.attention_pairs(1, 9) == 10
    full = FL.forward_flops(TINY, 1, 4, causal_pairs=False)
    assert full.scores == 2 * 2 * 16 * 8


def test_last_row_only_counted_by_hand():
    # B = 1, S = 4, last logits, the one layer trimmed: q, k, v, Gram, metric learner and power
    # stage over the 4 rows; output projection, q G, the last query's 4 pairs and the FFN at 1 row
    fb = FL.forward_flops(TINY, 1, 4, logits="last", last_row_only=True)
    assert fb.projections == 3 * 2 * 4 * 16 * 16 + 2 * 1 * 16 * 16 == 6656
    assert (fb.gram, fb.metric_learner, fb.power_stage) == (1024, 18432, 4096)
    assert fb.apply_g == 2 * 2 * 1 * 8 * 8 == 256
    assert fb.scores == fb.attention == 2 * 2 * 4 * 8 == 128
    assert fb.ffn == 3 * 2 * 1 * 16 * 24 == 2304
    assert fb.vocab == 2 * 1 * 16 * 37 == 1184
    assert fb.total == 34208
    # after 3 cached rows the last query sees 3 + 4 keys, whatever the pair convention
    for causal in (True, False):
        assert FL.forward_flops(TINY, 1, 4, start=3, logits="last", last_row_only=True, causal_pairs=causal).scores == 2 * 2 * 7 * 8
    two = dataclasses.replace(TINY, num_layers=2)  # only the last of two layers is trimmed
    whole, trimmed = FL.forward_flops(two, 1, 4, logits="last"), FL.forward_flops(two, 1, 4, logits="last", last_row_only=True)
    assert whole.total - trimmed.total == FL.forward_flops(TINY, 1, 4, logits="last").total - fb.total
    with pytest.raises(ValueError, match="logits='last'"):
        FL.forward_flops(TINY, 1, 4, logits="all", last_row_only=True)


def test_generate_sums_its_forwards():
    n = FL.generate_flops(TINY, 1, 5, 3, "nocache")
    assert n.total == sum(FL.forward_flops(TINY, 1, s, logits="last").total for s in (5, 6, 7))
    kv = FL.generate_flops(TINY, 2, 5, 3, "kv")
    want = FL.forward_flops(TINY, 2, 5, logits="last").total + sum(
        FL.forward_flops(TINY, 2, 1, start=s, operator="kv", logits="last").total for s in (5, 6)
    )
    assert kv.total == want
    col = FL.generate_flops(TINY, 1, 5, 1, "collapsed")
    assert col.total == FL.forward_flops(TINY, 1, 5, operator="collapsed", logits="last").total
    # the fused path's passes with last logits trim their last layer; one-row steps have nothing to trim
    n = FL.generate_flops(TINY, 1, 5, 3, "nocache", last_row_only=True)
    assert n.total == sum(FL.forward_flops(TINY, 1, s, logits="last", last_row_only=True).total for s in (5, 6, 7))
    kv_trimmed = FL.generate_flops(TINY, 2, 5, 3, "kv", last_row_only=True)
    assert kv.total - kv_trimmed.total == (FL.forward_flops(TINY, 2, 5, logits="last").total
                                           - FL.forward_flops(TINY, 2, 5, logits="last", last_row_only=True).total)
    published = FL.generate_flops(TINY, 1, 5, 3, "nocache", step_logits="all", last_row_only=True)  # all logits: no trim
    assert published.total == FL.generate_flops(TINY, 1, 5, 3, "nocache", step_logits="all").total


@pytest.mark.parametrize("bad", [dict(operator="nope"), dict(operator="kv"), dict(logits="some")])
def test_bad_arguments(bad):
    with pytest.raises(ValueError):
        FL.forward_flops(TINY, 1, 4, **bad)


def test_matches_torch_flop_counter_on_the_eager_path():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params

    model = PLDRModel.from_reference(random_params(TINY, 0), TINY)
    tokens = torch.randint(1, 37, (2, 5), generator=torch.Generator().manual_seed(0))
    # with autograd on, the module path runs (the no-grad fused path pads dff to FFN_ALIGN with
    # zero weights: extra multiplications the FLOP model rightly does not count as useful work)
    with torch.enable_grad(), FlopCounterMode(display=False) as counter:
        model(tokens, logits="all", backend="eager")
    assert counter.get_total_flops() == FL.forward_flops(TINY, 2, 5, causal_pairs=False).total


def test_matches_torch_flop_counter_on_the_trimmed_last_logits_pass():
    """The fused backend with last logits (autograd on: the module path, the same trim) runs
    the products :func:`forward_flops` counts with ``last_row_only``; FlopCounterMode counts
    the matrix products but not the CPU flash kernel, so the count is compared without the
    scores and the attention. Control: the untrimmed count is larger by the trimmed rows."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params

    model = PLDRModel.from_reference(random_params(TINY, 0), TINY)
    tokens = torch.randint(1, 37, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.enable_grad(), FlopCounterMode(display=False) as counter:
        model(tokens, logits="last")
    products = sum(v for k, v in counter.get_flop_counts()["Global"].items() if str(k) in ("aten.mm", "aten.addmm", "aten.bmm"))
    fb = FL.forward_flops(TINY, 2, 5, logits="last", last_row_only=True)
    assert products == fb.total - fb.scores - fb.attention
    whole = FL.forward_flops(TINY, 2, 5, logits="last")
    assert products < whole.total - whole.scores - whole.attention


@pytest.mark.parametrize("name", ["tiny", "small", "paper-110m"])
def test_parameter_count_matches_the_state_dict(name):
    c = PLDRConfig.from_name(name)
    assert FL.parameter_count(c) == sum(int(np.prod(s)) for s in expected_shapes(c).values())


def test_paper_parameter_count():
    assert FL.parameter_count(PLDRConfig.from_name("paper-110m")) == 109_689_362  # the published model's parameter count (docs/spec.md §2.1)


def test_decode_weight_bytes_by_hand():
    # kvg: embedding row 16 + input LN 32 + projections 4·(256+16) + FFN 2·(384+24)+(384+16) + layer LNs 64 + final 37·16+37
    kvg = 16 + 32 + 1088 + 1216 + 64 + 629
    assert FL.decode_weight_bytes(TINY, "kvg") == 4 * kvg
    assert FL.decode_weight_bytes(TINY, "kv") == 4 * (kvg + 5 * 2 * 64)  # + W, b, P, a, b_a
    assert FL.decode_weight_bytes(TINY, "collapsed") == 4 * (kvg + 2 * 64)  # + collapsed_G
    nocache = FL.decode_weight_params(TINY, "nocache")
    assert {"metric_learner", "gram_layernorm", "power_stage"} <= set(nocache)
    # bf16 weights, float32 chain
    assert FL.decode_weight_bytes(TINY, "kv", bytes_per_param=2, chain_bytes_per_param=4) == 2 * kvg + 4 * 640


def test_decode_cache_bytes():
    assert FL.decode_cache_bytes(TINY, "nocache", 10) == 0
    assert FL.decode_cache_bytes(TINY, "collapsed", 10) == 4 * 2 * 1 * 2 * 10 * 8
    assert FL.decode_cache_bytes(TINY, "kvg", 10) == 4 * (2 * 2 * 10 * 8 + 2 * 64)


def test_roofline_arithmetic():
    assert FL.achieved_gflops(3e9, 1.5) == pytest.approx(2.0)
    assert FL.roofline_fraction(1e12, 10.0, 200.0) == pytest.approx(0.5)
    assert FL.bandwidth_bound_s(1e9, 20.0) == pytest.approx(0.05)
    assert FL.bandwidth_fraction(1e9, 0.1, 20.0) == pytest.approx(0.5)
    assert FL.bandwidth_fraction(1e9, 0.05, 20.0) == pytest.approx(1.0)
    for bad in (lambda: FL.achieved_gflops(1, 0), lambda: FL.roofline_fraction(1, 1, 0), lambda: FL.bandwidth_bound_s(1, 0)):
        with pytest.raises(ValueError):
            bad()
    assert math.isclose(FL.bandwidth_fraction(313_475_912, 0.0313, 10.0), 1.0015, rel_tol=1e-3)
