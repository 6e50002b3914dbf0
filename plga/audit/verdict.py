"""The audit's verdict: is the model's G_LM collapsed to one input-independent operator?

One rule, one set of thresholds (:data:`THRESHOLDS`), applied to the summary
(:func:`plga.audit.summarize`); ``docs/audit.md`` ("The verdict") states it in words.

The deciding figure is the **G deviation** g = max of four relative deviations of G_LM, each
a ratio of RMS or Frobenius norms, so all are on one scale:

* the order parameter of G_LM between two sampled continuations of a prompt (rms
  normalization), max over prompts, layers and heads;
* ε_G, the relative RMS deviation between the prompt's cached G_LM and the G_LM recomputed
  at each greedy decoding step, max over prompts, steps, layers and heads;
* the spread of G_LM across the prompts, max_x ‖G(x) − mean G‖_F / ‖mean G‖_F, max over
  layers and heads (needs two prompts or more);
* the context probe: the same deviation for G_LM of one sequence of random ids as long as the
  context, from the prompts' mean G (the prompts reach only a few dozen positions).

Then, with the decoding checks (argmax of cached vs recomputed logits at every step; the
sufficient criterion 2B < margin per prompt):

* **collapsed** — g ≤ ``collapsed_at_most``, every argmax agrees, and 2B < margin holds on
  every prompt;
* **not collapsed** — g > ``not_collapsed_above``, or g > ``collapsed_at_most`` and caching
  changed an argmax;
* **inconclusive** — anything else (g between the thresholds; a collapsed G whose decoding
  is not certified by 2B < margin or changed an argmax; a non-finite figure).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

COLLAPSED = "collapsed"
NOT_COLLAPSED = "not collapsed"
INCONCLUSIVE = "inconclusive"
VERDICTS = (COLLAPSED, NOT_COLLAPSED, INCONCLUSIVE)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The verdict's thresholds on the G deviation g (relative, dimensionless).

    ``collapsed_at_most`` = 1e-6: about eight float32 roundings (2⁻²³ ≈ 1.2e-7), so a model
    whose G is constant up to the rounding of a float32 computation passes; the published
    collapsed checkpoint (SOC-110M-5) measures exactly 0 on all three figures.
    ``not_collapsed_above`` = 1e-4: close to a thousand float32 roundings, more than rounding
    accumulated through a model's layers explains, so G really moves with the input.
    In between, the audit does not guess.
    """

    collapsed_at_most: float = 1e-6
    not_collapsed_above: float = 1e-4


THRESHOLDS = Thresholds()


def threshold_text(x: float) -> str:
    """A threshold as people write it: 1e-4, not 0.0001 or 1e-04."""
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:g}"
    return f"{x:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _max(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return max(vals) if vals else None


def _num(x: Any) -> float:
    """A summary number as float (``jsonable`` writes non-finite values as "inf", "nan": float() reads them)."""
    return float(x)


def figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The deciding figures from a summary (None where the measurement is absent).

    The order parameter and ε_G are each the larger of the layer-pooled published figure and
    the same figure per operator — each (layer, head) on its own, where the summary holds it —
    so that one moving head is not diluted by the layer's other heads (neither form bounds
    the other: their normalizations differ).
    """
    glm = summary.get("order_parameter", {}).get("GLM", {})
    ops = [glm[k] for k in ("rms", "rms_per_operator") if glm.get(k, {}).get("n")]
    dec = summary.get("decode", [])
    spread = summary.get("G_LM_spread")
    eps = [_num(d[k]) for d in dec for k in ("epsG_rel_rms_max_over_steps", "epsG_per_operator_max_over_steps") if k in d]
    f = {
        "G_order_parameter": _max([_num(o["max"]) for o in ops]),
        "epsG": _max(eps),
        "G_spread": _num(spread["max"]) if spread else None,
        "G_context": _num(summary["G_LM_context_probe"]["max"]) if "G_LM_context_probe" in summary else None,
        "argmax_disagreements": sum(int(d["n_disagree"]) for d in dec),
        "decoding_steps": sum(int(d["T"]) for d in dec),
        "margin_criterion_prompts": sum(bool(d["margin_criterion_2B"]) for d in dec),
        "prompts_decoded": len(dec),
    }
    f["G_deviation"] = _max([f["G_order_parameter"], f["epsG"], f["G_spread"], f["G_context"]])
    return f


def verdict(summary: Mapping[str, Any], thresholds: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """``{"verdict", "reasons", "figures", "thresholds"}`` by the rule of the module docstring."""
    f = figures(summary)
    lo, hi = thresholds.collapsed_at_most, thresholds.not_collapsed_above
    g = f["G_deviation"]
    flips = f["argmax_disagreements"]
    certified = f["margin_criterion_prompts"] == f["prompts_decoded"]
    reasons: list[str] = []
    if g is None or not math.isfinite(g):
        result = INCONCLUSIVE
        reasons.append("the G deviation was not measured or is not finite")
    elif g > hi or (g > lo and flips):
        result = NOT_COLLAPSED
        reasons.append(f"G_LM changes with the input: G deviation {g:.3g} > {threshold_text(hi if g > hi else lo)}")
        if flips:
            reasons.append(f"cached decoding changed the argmax at {flips} of {f['decoding_steps']} steps")
    elif g > lo:
        result = INCONCLUSIVE
        reasons.append(f"G deviation {g:.3g} lies between {threshold_text(lo)} (collapsed) and {threshold_text(hi)} (not collapsed)")
    else:
        result = COLLAPSED if not flips and certified else INCONCLUSIVE
        reasons.append(f"G_LM is one operator: G deviation {g:.3g} ≤ {threshold_text(lo)}")
        if flips:
            reasons.append(f"yet cached decoding changed the argmax at {flips} of {f['decoding_steps']} steps")
        elif not certified:
            reasons.append(f"yet 2B < margin holds on only {f['margin_criterion_prompts']} of {f['prompts_decoded']} prompts")
    return {"verdict": result, "reasons": reasons, "figures": f, "thresholds": dataclasses.asdict(thresholds)}


def one_line(v: Mapping[str, Any]) -> str:
    """The verdict as one line: the verdict, then its reasons and the three G figures."""
    f = v["figures"]

    def fmt(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    return (f"{v['verdict']}: " + "; ".join(v["reasons"])
            + f" (order parameter {fmt(f['G_order_parameter'])}, ε_G {fmt(f['epsG'])}, spread across prompts {fmt(f['G_spread'])}, "
               f"context probe {fmt(f.get('G_context'))})")


__all__ = ["COLLAPSED", "INCONCLUSIVE", "NOT_COLLAPSED", "THRESHOLDS", "VERDICTS", "Thresholds", "figures", "one_line", "threshold_text",
           "verdict"]
