"""The audit's verdict: is the model's G_LM collapsed to one input-independent operator?

One rule, one set of thresholds (:data:`THRESHOLDS`), applied to the summary
(:func:`plga.audit.summarize`); ``docs/audit.md`` ("The verdict") states it in words.

The deciding figure is the **G deviation** g = max of five relative deviations of G_LM, each
a ratio of RMS or Frobenius norms, so all are on one scale:

* the order parameter of G_LM between two sampled continuations of a prompt (rms
  normalization), max over prompts, layers and heads;
* ε_G, the relative RMS deviation between the prompt's cached G_LM and the G_LM recomputed
  at each greedy decoding step, max over prompts, steps, layers and heads;
* the spread of G_LM across the prompts, max_x ‖G(x) − mean G‖_F / ‖mean G‖_F, max over
  layers and heads (needs two prompts or more);
* the context probe: the same deviation for G_LM of one sequence of random ids as long as the
  context, from the prompts' mean G (the prompts reach only a few dozen positions);
* the padding probe: the same deviation for G_LM of prompts padded with id 0 on the right
  and on the left, from the prompts' mean G (G_LM is built over every query row, padding
  included, so a collapse must also hold for padded batches).

Then, with the decoding checks (argmax of cached vs recomputed logits at every step; the
sufficient criterion 2B < margin per prompt):

* **collapsed** — g ≤ ``collapsed_at_most``, every argmax agrees, and 2B < margin holds on
  every prompt;
* **not collapsed** — g > ``not_collapsed_above``, or g > ``collapsed_at_most`` and caching
  changed an argmax;
* **inconclusive** — anything else (g between the thresholds; a collapsed G whose decoding
  is not certified by 2B < margin or changed an argmax; a non-finite figure, unless a finite
  one already decides "not collapsed").
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
    """The largest of the measured values (None where none was measured); NaN when any is NaN.

    Python's ``max`` drops a NaN unless it comes first, which would let an overflowed probe
    read as a small deviation."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return math.nan if any(math.isnan(v) for v in vals) else max(vals)


def _num(x: Any) -> float:
    """A summary number as float (``jsonable`` writes non-finite values as "inf", "nan": float() reads them)."""
    return float(x)


#: The figures whose maximum is the G deviation, with the names the reasons use.
DEVIATION_FIGURES = {"G_order_parameter": "order parameter", "epsG": "ε_G", "G_spread": "spread across prompts",
                     "G_context": "context probe", "G_padding": "padding probe"}


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
    probe = {name: _num(summary[key]["max"]) if key in summary else None
             for name, key in (("G_context", "G_LM_context_probe"), ("G_padding", "G_LM_padding_probe"))}
    f = {
        "G_order_parameter": _max([_num(o["max"]) for o in ops]),
        "epsG": _max(eps),
        "G_spread": _num(spread["max"]) if spread else None,
        **probe,
        "argmax_disagreements": sum(int(d["n_disagree"]) for d in dec),
        "decoding_steps": sum(int(d["T"]) for d in dec),
        "margin_criterion_prompts": sum(bool(d["margin_criterion_2B"]) for d in dec),
        "prompts_decoded": len(dec),
    }
    f["G_deviation"] = _max([f[k] for k in DEVIATION_FIGURES])
    return f


def verdict(summary: Mapping[str, Any], thresholds: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """``{"verdict", "reasons", "figures", "thresholds"}`` by the rule of the module docstring.

    A finite figure above the thresholds decides "not collapsed" even where another figure is
    NaN or infinite (an overflowed probe does not undo a measured deviation); otherwise a
    non-finite figure leaves the verdict inconclusive, never collapsed.
    """
    f = figures(summary)
    lo, hi = thresholds.collapsed_at_most, thresholds.not_collapsed_above
    g = f["G_deviation"]
    measured = [f[k] for k in DEVIATION_FIGURES if f[k] is not None]
    finite = [x for x in measured if math.isfinite(x)]
    g_finite = max(finite) if finite else None
    unmeasurable = [name for k, name in DEVIATION_FIGURES.items() if f[k] is not None and not math.isfinite(f[k])]
    flips = f["argmax_disagreements"]
    certified = f["margin_criterion_prompts"] == f["prompts_decoded"]
    reasons: list[str] = []
    if g_finite is not None and (g_finite > hi or (g_finite > lo and flips)):
        result = NOT_COLLAPSED
        reasons.append(f"G_LM changes with the input: G deviation {g_finite:.3g} > {threshold_text(hi if g_finite > hi else lo)}")
        if flips:
            reasons.append(f"cached decoding changed the argmax at {flips} of {f['decoding_steps']} steps")
    elif g is None:
        result = INCONCLUSIVE
        reasons.append("the G deviation was not measured")
    elif unmeasurable:
        result = INCONCLUSIVE
        reasons.append(f"the {', '.join(unmeasurable)} {'is' if len(unmeasurable) == 1 else 'are'} not finite "
                       "(G_LM overflowed there): the G deviation is undecided")
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

    def fmt(x: Any) -> str:  # a record read back from JSON holds "nan", "inf" as strings
        return "n/a" if x is None else f"{float(x):.3g}"

    shown = ", ".join(f"{name} {fmt(f.get(k))}" for k, name in DEVIATION_FIGURES.items())
    return f"{v['verdict']}: " + "; ".join(v["reasons"]) + f" ({shown})"


__all__ = ["COLLAPSED", "DEVIATION_FIGURES", "INCONCLUSIVE", "NOT_COLLAPSED", "THRESHOLDS", "VERDICTS", "Thresholds", "figures", "one_line", "threshold_text",
           "verdict"]
