"""``summarize(raw) -> summary``: every reported number, derived from the raw per-instance arrays.

The command calls this on the arrays it writes to ``audit_raw.npz``; the tests call it on
the arrays read back from that file and compare with ``audit.json`` (the published audit's
``TestRawRecords`` contract). Nothing here touches a model. Definitions: ``docs/audit.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import stats as st

TENSORS = ("A", "ALM", "AP", "GLM")


def _mmm_mean(x: Any) -> dict[str, float]:
    out = st.min_median_max(x)
    x = np.asarray(x, dtype=np.float64).ravel()
    out["mean"] = float(np.mean(x)) if x.size else math.nan
    return out


def _spectra(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("A", "ALM", "GLM"):
        sv = raw[f"{name}_sv"]
        ranks = st.numrank(sv)
        out[f"{name}_s1"] = st.min_median_max(sv[..., 0])
        out[f"{name}_s2_over_s1"] = st.min_median_max(st.s2_over_s1(sv))
        out[f"{name}_numrank"] = st.min_median_max(ranks)
        out[f"{name}_numrank_hist"] = st.rank_histogram(ranks)
    out["crosshead_rms"] = st.min_median_max(raw["crosshead_rms"])
    out["crosshead_rel"] = st.min_median_max(raw["crosshead_rel"])
    out["rowvar_ratio"] = st.min_median_max(raw["rowvar_ratio"])
    out["nonfinite_matrices"] = int(np.sum(raw["nonfinite_matrices"]))
    out["n_instances"] = int(np.prod(raw["A_sv"].shape[:-1]))
    return out


def _per_layer(x: np.ndarray) -> list[dict[str, float]]:
    """min/median/max per layer of an array [P, L, ...]."""
    return [st.min_median_max(x[:, li]) for li in range(x.shape[1])]


def _twirl(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    eu, er, om = raw["twirl_E_unrot"], raw["twirl_E_rot"], raw["twirl_omega"]
    per = st.twirl_stats(eu, er, om)  # each [P, L]
    pooled = st.twirl_stats(eu.sum(axis=0), er.sum(axis=0), om)  # each [L]
    d = len(om)
    return {
        "per_instance": {k: st.min_median_max(v) for k, v in per.items()},
        "prompt_pooled_per_layer": {k: st.min_median_max(v) for k, v in pooled.items()},
        "n_instances": int(np.prod(eu.shape[:2])),
        "label": "head 0 of each layer; per-(prompt, layer) ratios, and prompt-pooled per-layer energy ratios",
        "analytic": {"d": d, "n_frequencies": len(st.twirl_frequencies(d)), "C_theta": st.twirl_constant(d)},
    }


def _decode(raw: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    dl = raw["dlogit_steps"]  # [P, max T, ...]: prompt p took its first decode_T[p] steps
    n_steps = raw["decode_T"] if "decode_T" in raw else np.full(dl.shape[0], dl.shape[1])
    out = []
    for p, t in enumerate(int(n) for n in n_steps):
        eg, ea, dl, mg = (raw[k][p, :t] for k in ("epsG_steps", "epsG_absmax_steps", "dlogit_steps", "margin_steps"))
        ac, au = raw["argmax_cached"][p, :t], raw["argmax_uncached"][p, :t]
        max_dl, min_mg = float(dl.max()), float(mg.min())
        out.append({
            "T": t,
            "min_margin": min_mg,
            "median_margin": float(np.median(mg)),
            "max_dlogit": max_dl,
            "median_dlogit": float(np.median(dl)),
            "argmax_agree": bool(np.all(ac == au)),
            "n_disagree": int(np.sum(ac != au)),
            "margin_criterion_2B": st.margin_ok(max_dl, min_mg),
            "epsG_rel_rms_max_over_steps": float(eg.max()),
            "epsG_absmax_over_steps": float(ea.max()),
            "kv_equals_kvg": bool(raw["kv_kvg_same"][p]),
        })
        if "epsG_head_steps" in raw:  # one ε_G per (layer, head) operator, max over steps and operators
            out[-1]["epsG_per_operator_max_over_steps"] = float(raw["epsG_head_steps"][p, :t].max())
    return out


def _online(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    la, lb = raw["o1_logits_a"], raw["o1_logits_b"]
    ga, gb = raw["o1_glm_a"], raw["o1_glm_b"]
    o1 = {
        "prefix_length": int(la.shape[0]),
        "suffix_change": [st.delta_stats(la[i], lb[i]) for i in range(la.shape[0])],
        "deductive_per_layer": [{"G_LM": st.delta_stats(ga[li], gb[li])} for li in range(ga.shape[0])],
    }
    o2 = [st.delta_stats(raw["o2_logits_a"][i], raw["o2_logits_b"][i]) for i in range(raw["o2_logits_a"].shape[0])]
    o3 = [
        {
            "final_real_row_delta": st.delta_stats(raw["o3_final_row_a"][i], raw["o3_final_row_b"][i]),
            "glm_delta": st.delta_stats(raw["o3_glm_a"][i], raw["o3_glm_b"][i]),
        }
        for i in range(raw["o3_final_row_a"].shape[0])
    ]
    seq, blk, cand = raw["o4_seq"], raw["o4_blk"], raw["o4_cand"]
    ncand = int(raw["o4_cand_len"].shape[0])
    tok_diff = np.abs(seq - blk)
    cand_diff = np.array([abs(float(np.sum(seq[cand == c])) - float(np.sum(blk[cand == c]))) for c in range(ncand)])
    single = [c for c in range(ncand) if raw["o4_cand_len"][c] == 1]
    o4 = {
        "per_token_absdiff": _mmm_mean(tok_diff),
        "per_candidate_absdiff": _mmm_mean(cand_diff),
        "n_tokens": int(seq.size),
        "n_candidates": ncand,
        "single_token_exact_coincidence": bool(all(np.array_equal(seq[cand == c], blk[cand == c]) for c in single)) if single else None,
        "formula": "sequential: sum_i log p(y_i | x, y_{:i}) via one final-row prefix call per token; "
        "block: one call on (x+y)[:-1], rows n-1+i; log-softmax in float64",
    }
    return {
        "o1_prefix_rows": o1,
        "o2_repeat_call_bitwise": {"comparisons": o2, "all_zero": all(d["nonzero"] == 0 for d in o2)},
        "o3_padding": {"pad_len": int(raw["o3_pad_len"][0]), "prompts": o3},
        "o4_block_vs_sequential": o4,
    }


def _collapse(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    sp = raw["collapse_spread"]
    return {
        "G_spread_rel": st.min_median_max(sp),
        "G_spread_rel_per_layer": [st.min_median_max(sp[li]) for li in range(sp.shape[0])],
        "file_check": {
            "tokens_equal": bool(np.all(raw["collapse_tokens_equal"])),
            "max_dlogit": float(np.max(raw["collapse_dlogit"])),
            "label": "the written checkpoint read back decodes as kvg decoding with the in-memory mean G "
            "(a check of the file and its reader, equal by construction when they are right; not a measurement of the model)",
        },
        "vs_model": {
            "argmax_agree_frac": float(np.mean(raw["collapse_vs_model_agree"])),
            "max_dlogit": float(np.max(raw["collapse_vs_model_dlogit"])),
            "label": "collapsed model vs the original model, both uncached, teacher-forced on the model's greedy kv tokens",
        },
        "G_commutant_residual": st.min_median_max(st.commutant_residual(raw["collapse_G"])),
    }


def summarize(raw: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every summary number of the audit from the raw arrays (keys of ``audit_raw.npz``).

    Sections (published names where they correspond): ``spectra``, ``glm_commutant_residual``,
    ``dag_losses``, ``ln_scale_error``, ``twirl_empirical``, ``contraction`` (published
    ``jacobians_v2`` pairwise ratios), ``order_parameter``, ``decode``, ``online`` and, when the
    collapse arrays are present, ``collapse``. Sections whose arrays are absent are omitted.
    """
    s: dict[str, Any] = {}
    if "A_sv" in raw:
        s["spectra"] = _spectra(raw)
    if "G_LM" in raw and raw["G_LM"].shape[0] >= 2:
        sp = st.spread(raw["G_LM"], axis=0)[1]  # [L, H]
        s["G_LM_spread"] = {**st.min_median_max(sp), "per_layer": [st.min_median_max(sp[li]) for li in range(sp.shape[0])],
                            "label": "max over prompts of |G(x) - mean G|_F / |mean G|_F, per (layer, head)"}
    if "context_probe_G" in raw and "G_LM" in raw:
        mean = raw["G_LM"].mean(axis=0)  # [L, H, d, d] the prompts' mean operator
        dev = st.relative_deviation(raw["context_probe_G"], mean[None])  # [n, L, H]
        s["G_LM_context_probe"] = {**st.min_median_max(dev), "length": int(raw["context_probe_ids"].shape[1]),
                                   "label": "|G(probe) - mean G(prompts)|_F / |mean G(prompts)|_F per (layer, head); "
                                            "the probe: seeded random ids as long as the context"}
    if "padding_probe_G" in raw and "G_LM" in raw:
        mean = raw["G_LM"].mean(axis=0)  # [L, H, d, d]
        dev = st.relative_deviation(raw["padding_probe_G"], mean[None, None])  # [P, 2 sides, L, H]
        s["G_LM_padding_probe"] = {**st.min_median_max(dev), "right": st.min_median_max(dev[:, 0]), "left": st.min_median_max(dev[:, 1]),
                                   "label": "|G(padded prompt) - mean G(prompts)|_F / |mean G(prompts)|_F per (layer, head); "
                                            "every prompt padded with id 0 on the right and on the left"}
    if "glm_comm_res" in raw:
        cr = raw["glm_comm_res"]
        s["glm_commutant_residual"] = {"all": st.min_median_max(cr), "per_layer": _per_layer(cr)}
    if "dag_ALM" in raw:
        s["dag_losses"] = {t: st.min_median_max(raw[f"dag_{t}"]) for t in ("ALM", "AP", "GLM")}
    if "ln_rowvar_DS" in raw:
        v = raw["ln_rowvar_DS"]
        s["ln_scale_error"] = {
            "rowvar_DS": st.min_median_max(v),
            "direct_rel": st.min_median_max(raw["ln_direct_rel"]),
            "direct_abs": st.min_median_max(raw["ln_direct_abs"]),
            "proxy": st.min_median_max(raw["ln_proxy"]),
            "n_rows": int(v.size),
            "n_zero_var_rows": int(np.sum(v == 0)),
        }
    if "twirl_E_unrot" in raw:
        s["twirl_empirical"] = _twirl(raw)
    if "pair_within" in raw:
        att = raw["pair_attempted"]
        s["contraction"] = {
            "pairwise_within": st.min_median_max(raw["pair_within"]),
            "pairwise_cross": st.min_median_max(raw["pair_cross"]),
            "pairwise_within_per_layer": _layers_of(raw["pair_within"], raw["pair_within_layer"], int(att[2])),
            "pairwise_cross_per_layer": _layers_of(raw["pair_cross"], raw["pair_cross_layer"], int(att[2])),
            "n_pairs": {
                "within": int(raw["pair_within"].size), "cross": int(raw["pair_cross"].size),
                "attempted_within": int(att[0]), "attempted_cross": int(att[1]),
            },
            "note": "empirical ratios |phi(r)-phi(r')|/|r-r'| of the layer's residual-unit composition; report retained counts",
        }
    if "op_A_rms" in raw:
        s["order_parameter"] = {
            t: {"rms": st.min_median_max(raw[f"op_{t}_rms"]), "signed": st.min_median_max(raw[f"op_{t}_signed"])}
            for t in TENSORS
        }
        if "op_GLM_head_rms" in raw:  # one rms order parameter per (layer, head) operator
            s["order_parameter"]["GLM"]["rms_per_operator"] = st.min_median_max(raw["op_GLM_head_rms"])
        s["order_parameter_note"] = (
            "rms = RMS(x1-x2)/(0.5*(RMS x1+RMS x2)); signed = SYMMETRIZED signed-mean normalization "
            "0.5*(|mu_1|+|mu_2|); the two maxima are reported separately, never as one value"
        )
    if "dlogit_steps" in raw:
        s["decode"] = _decode(raw)
    if "o1_logits_a" in raw:
        s["online"] = _online(raw)
    if "collapse_G" in raw:
        s["collapse"] = _collapse(raw)
    return s


def coverage(prompts: list[list[int]], sampled: list[dict[str, Any]], greedy: list[list[int]], raw: Mapping[str, np.ndarray],
             config: Any) -> dict[str, Any]:
    """What the measurements saw: sequence lengths and token ids, against the model's context and
    vocabulary. A verdict holds for inputs like these; G_LM may still depend on an id or a
    position no measurement reached."""
    seqs = [list(p) for p in prompts]
    seqs += [list(prompts[r["prompt"]]) + list(r["tokens"]) for r in sampled]
    seqs += [list(p) + list(g) for p, g in zip(prompts, greedy, strict=False)]
    if "context_probe_ids" in raw:
        seqs += [list(map(int, x)) for x in raw["context_probe_ids"]]
    ids = {int(t) for s in seqs for t in s}
    return {"prompts": len(prompts), "prompt_lengths": [min(map(len, prompts)), max(map(len, prompts))],
            "longest_sequence": max(map(len, seqs)), "context": config.max_seq_len,
            "distinct_token_ids": len(ids), "vocabulary": config.input_vocab_size}


def coverage_line(c: Mapping[str, Any]) -> str:
    """The coverage as one line, printed under the verdict."""
    lo, hi = c["prompt_lengths"]
    return (f"measured on {c['prompts']} prompts of {lo}–{hi} tokens and sequences up to {c['longest_sequence']} of the "
            f"{c['context']}-token context, {c['distinct_token_ids']} distinct token ids of {c['vocabulary']}")


def _layers_of(values: np.ndarray, layers: np.ndarray, n_layers: int) -> list[dict[str, float]]:
    return [st.min_median_max(values[layers == li]) for li in range(n_layers)]


def jsonable(x: Any) -> Any:
    """JSON-safe copy: non-finite floats become the strings "inf", "-inf", "nan"; NumPy scalars → Python."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        f = float(x)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return x
