"""The verdict: known-answer checkpoints built in the test, and the rule at its boundaries.

Three models of one configuration, whose answer is known from their construction:

* **collapsed** — power-stage W = 0: A_LM = iSwiGLU(b) + ε is the same matrix for every
  input, so A_P and G_LM = a·A_P + b_a are too, although A still varies with the input;
* **not collapsed** — seeded random weights;
* **borderline** — a = c·R (c = 4e-7), b_a = G*: G_LM = G* + c·R·A_P(x) moves with the
  input by a relative ~1e-5, between the two thresholds, so the verdict is inconclusive.

Each construction is checked directly on the reference decoder (G_LM of two prompts), not
through the audit, before the audit's verdict is compared with it.
"""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest

from plga.audit import run_audit
from plga.audit.model import random_params
from plga.audit.runner import _until_eos
from plga.audit.summary import jsonable
from plga.audit.verdict import (
    COLLAPSED,
    INCONCLUSIVE,
    NOT_COLLAPSED,
    THRESHOLDS,
    Thresholds,
    one_line,
    verdict,
)
from plga.reference import decoder as dec

from .tiny import CONFIG, PLGA, SIZES, power_stage_w_zero

PROMPTS = [[5, 9, 17, 21, 30, 8], [40, 12, 7, 7, 19, 33, 50, 4]]


def _borderline(c: float = 4e-7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    gstar = [rng.normal(size=(CONFIG.num_heads, CONFIG.depth, CONFIG.depth)).astype(np.float32) for _ in range(CONFIG.num_layers)]
    params = random_params(CONFIG, seed=3, collapsed_g=gstar)  # a = 0, b_a = G*
    for i in range(CONFIG.num_layers):
        key = PLGA.format(i) + "alst"
        params[key] = (c * rng.normal(0.0, 0.25, params[key].shape)).astype(np.float32)
    return params


MODELS = {"collapsed": power_stage_w_zero, "random": lambda: random_params(CONFIG, seed=3), "borderline": _borderline}
LO, HI = THRESHOLDS.collapsed_at_most, THRESHOLDS.not_collapsed_above
EXPECTED = {"collapsed": COLLAPSED, "random": NOT_COLLAPSED, "borderline": INCONCLUSIVE}


def _g_of(params: dict[str, np.ndarray], prompt: list[int]) -> np.ndarray:
    f = dec.forward(dec.to_backend(params), CONFIG, np.asarray([prompt]))
    return np.stack([d["G_LM"][0] for d in f.deductive])  # [L, H, d, d]


@pytest.fixture(scope="module", params=sorted(MODELS))
def known(request, tmp_path_factory):
    name = request.param
    params = MODELS[name]()
    out = tmp_path_factory.mktemp(name)
    rec = run_audit(checkpoint=(params, CONFIG), prompts=PROMPTS, out_dir=out, sizes=SIZES, progress=False, plots=False)
    return name, params, rec, out


def test_constructions_are_what_they_claim(known):
    """Direct check on the reference decoder, independent of the audit's statistics."""
    name, params, _, _ = known
    g0, g1 = _g_of(params, PROMPTS[0]), _g_of(params, PROMPTS[1])
    rel = np.linalg.norm(g0 - g1) / np.linalg.norm(g0)
    if name == "collapsed":
        assert np.array_equal(g0, g1)
        a0 = dec.forward(dec.to_backend(params), CONFIG, np.asarray([PROMPTS[0]])).deductive[0]["A"]
        a1 = dec.forward(dec.to_backend(params), CONFIG, np.asarray([PROMPTS[1]])).deductive[0]["A"]
        assert not np.allclose(a0, a1), "upstream of the power stage the model still depends on the input"
    elif name == "random":
        assert rel > 0.1
    else:
        assert 3 * LO < rel < HI / 3


def test_verdict_on_known_answer_checkpoints(known):
    name, _, rec, out = known
    v = rec["verdict"]
    assert v["verdict"] == EXPECTED[name], v
    g = v["figures"]["G_deviation"]
    if name == "collapsed":
        assert g <= THRESHOLDS.collapsed_at_most and v["figures"]["argmax_disagreements"] == 0
        assert v["figures"]["margin_criterion_prompts"] == v["figures"]["prompts_decoded"] == 2
    elif name == "random":
        assert g > THRESHOLDS.not_collapsed_above
    else:
        assert 3 * LO < g < HI / 3, "the borderline model sits well inside the inconclusive band"
    saved = json.loads((out / "audit.json").read_text())
    assert next(iter(saved)) == "verdict" and saved["verdict"] == v
    assert verdict(saved["summary"]) == v, "the verdict is re-derived from the saved summary"
    assert (out / "summary.md").read_text().splitlines()[2].startswith(f"**Verdict: {EXPECTED[name]}.**")


def _summary(op=0.0, eps=0.0, spread=0.0, flips=0, certified=True, context=None, padding=None):
    s = {
        "order_parameter": {"GLM": {"rms": {"min": 0.0, "median": 0.0, "max": op, "n": 4}}},
        "G_LM_spread": {"min": 0.0, "median": 0.0, "max": spread, "n": 4},
        "decode": [{"T": 8, "n_disagree": flips, "margin_criterion_2B": certified, "epsG_rel_rms_max_over_steps": eps}],
    }
    for key, x in (("G_LM_context_probe", context), ("G_LM_padding_probe", padding)):
        if x is not None:
            s[key] = {"min": 0.0, "median": 0.0, "max": x, "n": 4}
    return s


FIGURE_KEYS = ("op", "eps", "spread", "context", "padding")


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({}, COLLAPSED),
        ({"op": LO}, COLLAPSED),  # the threshold itself is still collapsed
        ({"eps": LO * 1.01}, INCONCLUSIVE),
        ({"spread": HI}, INCONCLUSIVE),
        ({"spread": HI * 1.01}, NOT_COLLAPSED),
        ({"op": 1e-4, "flips": 1}, NOT_COLLAPSED),  # a moving G that changes decoding
        ({"flips": 1}, INCONCLUSIVE),  # a constant G yet caching changed an argmax
        ({"certified": False}, INCONCLUSIVE),  # agreement not certified by 2B < margin
        ({"op": float("nan")}, INCONCLUSIVE),
        ({"eps": float("inf")}, INCONCLUSIVE),
    ],
)
def test_rule_at_its_boundaries(kw, want):
    v = verdict(_summary(**kw))
    assert v["verdict"] == want, v
    assert v["reasons"] and one_line(v).startswith(want + ":")


def test_each_figure_alone_decides():
    """Negative controls: a deviation in any one of the five figures is caught."""
    for key in FIGURE_KEYS:
        assert verdict(_summary(**{key: 0.5}))["verdict"] == NOT_COLLAPSED, key
    assert verdict({"decode": []})["verdict"] == INCONCLUSIVE, "nothing measured is no verdict"


def test_thresholds_are_data():
    v = verdict(_summary(op=1e-5), Thresholds(collapsed_at_most=1e-4, not_collapsed_above=1e-2))
    assert v["verdict"] == COLLAPSED and v["thresholds"] == {"collapsed_at_most": 1e-4, "not_collapsed_above": 1e-2}


def test_until_eos_cuts_after_the_first_eos_of_the_continuation():
    t = np.array([[7, 3, 9, 4, 3, 5, 3]])
    assert _until_eos(t, 2, 3).tolist() == [[7, 3, 9, 4, 3]]  # the prompt's own 3 does not count
    assert _until_eos(t, 2, 8).tolist() == t.tolist()


class _Tokenizer:
    """A stand-in with only what the audit asks of a tokenizer when prompts are ids."""

    def __init__(self, eos: int) -> None:
        self._eos = eos

    def eos_id(self) -> int:
        return self._eos


@pytest.mark.parametrize("eos", [3, 5])
def test_sampled_continuations_stop_at_the_eos_id(eos, tmp_path):
    """A model that always emits id 3: continuations are [3] when 3 is EOS, full length otherwise."""
    params = random_params(CONFIG, seed=3)
    params["final_layer.bias"] = params["final_layer.bias"].copy()
    params["final_layer.bias"][3] = 1e4
    rec = run_audit(checkpoint=(params, CONFIG), prompts=PROMPTS, tokenizer=_Tokenizer(eos), out_dir=tmp_path,
                    sizes=SIZES, progress=False, plots=False)
    assert rec["prompts"]["eos_id"] == eos
    for c in rec["stochastic_continuations"]:
        if eos == 3:
            assert c["tokens"] == [3] and c["stopped_at_eos"]
        else:
            assert c["tokens"] == [3] * SIZES.n_order_tokens and not c["stopped_at_eos"]


@pytest.mark.parametrize("key", FIGURE_KEYS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "nan"])
def test_a_non_finite_figure_anywhere_is_never_collapsed(key, bad, monkeypatch):
    """A NaN (an overflowed probe) in any figure, in any position of the maximum, leaves the verdict
    inconclusive; the strings are what a record read back from JSON holds. Negative control: a
    verdict that takes a non-finite figure for one not measured (as Python's ``max`` did with a NaN
    that does not come first) reads collapsed."""
    summary = _summary(**{**dict.fromkeys(FIGURE_KEYS, 0.0), key: bad})
    v = verdict(summary)
    assert v["verdict"] == INCONCLUSIVE, v
    assert "not finite" in v["reasons"][0] and one_line(jsonable(v)).startswith(INCONCLUSIVE + ":")
    module = importlib.import_module("plga.audit.verdict")
    measured = module.figures

    def unmeasured_if_not_finite(s):
        f = measured(s)
        for k in module.DEVIATION_FIGURES:
            f[k] = f[k] if f[k] is None or math.isfinite(f[k]) else None
        f["G_deviation"] = max(f[k] for k in module.DEVIATION_FIGURES if f[k] is not None)
        return f

    monkeypatch.setattr(module, "figures", unmeasured_if_not_finite)
    assert verdict(summary)["verdict"] == COLLAPSED


@pytest.mark.parametrize("key", FIGURE_KEYS)
def test_a_finite_deviation_decides_beside_a_non_finite_figure(key):
    """An overflowed probe does not undo a deviation measured elsewhere."""
    other = next(k for k in FIGURE_KEYS if k != key)
    v = verdict(_summary(**{key: float("nan"), other: 0.5}))
    assert v["verdict"] == NOT_COLLAPSED and "0.5 > 1e-4" in v["reasons"][0], v
