"""The audit's Markdown reports: ``summary.md`` (verdict first) and ``operators_summary.md``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .summary import coverage_line
from .verdict import threshold_text


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _mmm(d: Mapping[str, Any]) -> str:
    return " / ".join(_fmt(d.get(k)) for k in ("min", "median", "max"))


def summary_markdown(record: Mapping[str, Any]) -> str:
    """The audit's ``summary.md``: environment, then one table per measurement."""
    s = record["summary"]
    env, model = record["environment"], record["model"]
    vd = record["verdict"]
    f = vd["figures"]
    th = vd["thresholds"]
    lines = [
        "# PLGA audit",
        "",
        f"**Verdict: {vd['verdict']}.** " + "; ".join(vd["reasons"]) + ".",
        "",
        "| deciding figure | value | rule |",
        "|---|---|---|",
        f"| G deviation g = max of the five below | {_fmt(f['G_deviation'])} | collapsed ≤ {threshold_text(th['collapsed_at_most'])} < inconclusive ≤ {threshold_text(th['not_collapsed_above'])} < not collapsed |",
        f"| order parameter of G_LM (rms, max over prompts, layers, heads) | {_fmt(f['G_order_parameter'])} | |",
        f"| ε_G, cached vs recomputed G_LM (max over prompts, steps, layers, heads) | {_fmt(f['epsG'])} | |",
        f"| spread of G_LM across prompts (max over layers, heads) | {_fmt(f['G_spread'])} | |",
        f"| context probe: G_LM of a context-long sequence vs the prompts' mean (max) | {_fmt(f.get('G_context'))} | |",
        f"| padding probe: G_LM of the prompts padded right and left vs the prompts' mean (max) | {_fmt(f.get('G_padding'))} | |",
        f"| argmax changed by caching | {f['argmax_disagreements']} of {f['decoding_steps']} steps | collapsed needs 0 |",
        f"| 2B < margin holds | {f['margin_criterion_prompts']} of {f['prompts_decoded']} prompts | collapsed needs all |",
        "",
        *([f"Scope: {coverage_line(record['coverage'])}; G_LM may still depend on an id or a position no measurement reached.", ""]
          if "coverage" in record else []),
        "Definitions, the verdict rule and the published values: `docs/audit.md` of plga.",
        "",
        "## Run",
        "",
        f"Model: `{model['source']}` (params sha256 `{model['params_sha256'][:16]}…`), config `{model['config']}`.",
        f"Backend {env['backend']} on {env['device']} ({env['dtype']}); numpy {env['numpy']}, torch {env.get('torch')}, python {env['python']}.",
        f"Prompts: {len(record['prompts']['lengths'])} (lengths {record['prompts']['lengths']}). Raw arrays: `{record['raw_records']['file']}` sha256 `{record['raw_records']['sha256']}`.",
        "Every number below is re-derived from the raw arrays by `plga.audit.summarize`. Cells are min / median / max.",
        "",
        "## Order parameter (two seeded stochastic continuations, re-scored without cache)",
        "",
        "| tensor | rms normalization | symmetrized signed-mean normalization |",
        "|---|---|---|",
    ]
    for t, v in s.get("order_parameter", {}).items():
        lines.append(f"| {t} | {_mmm(v['rms'])} | {_mmm(v['signed'])} |")
    lines += ["", "## Cached (KV/G) vs recomputed decoding", "",
              "| prompt | steps | max ε_G rel RMS | max ε_G abs | max Δlogit B | min margin | 2B < margin | argmax agree | kv = kvg |",
              "|---|---|---|---|---|---|---|---|---|"]
    for i, d in enumerate(s.get("decode", [])):
        lines.append(
            f"| {i} | {d['T']} | {_fmt(d['epsG_rel_rms_max_over_steps'])} | {_fmt(d['epsG_absmax_over_steps'])} | "
            f"{_fmt(d['max_dlogit'])} | {_fmt(d['min_margin'])} | {d['margin_criterion_2B']} | {d['argmax_agree']} ({d['n_disagree']} off) | {d['kv_equals_kvg']} |"
        )
    sp = s.get("spectra", {})
    if sp:
        lines += ["", f"## Spectra ({sp['n_instances']} (prompt, layer, head) instances)", "", "| key | min / median / max |", "|---|---|"]
        for k in ("A_s1", "A_s2_over_s1", "A_numrank", "ALM_s1", "ALM_s2_over_s1", "ALM_numrank", "GLM_numrank",
                  "rowvar_ratio", "crosshead_rms", "crosshead_rel"):
            lines.append(f"| {k} | {_mmm(sp[k])} |")
        lines += ["", f"Rank histograms: A {sp['A_numrank_hist']}; A_LM {sp['ALM_numrank_hist']}; G_LM {sp['GLM_numrank_hist']}. Non-finite matrices: {sp['nonfinite_matrices']}."]
    if "glm_commutant_residual" in s:
        c = s["glm_commutant_residual"]
        lines += ["", "## RoPE structure", "", f"Commutant residual of G_LM: {_mmm(c['all'])}; per layer: "
                  + "; ".join(f"L{i} {_mmm(v)}" for i, v in enumerate(c["per_layer"])) + "."]
    if "twirl_empirical" in s:
        tw = s["twirl_empirical"]
        lines += ["", "| twirl (head 0) | per instance | prompt-pooled per layer |", "|---|---|---|"]
        for k in ("commutant_frac_unrot", "commutant_frac_rot", "offcomm_suppression"):
            lines.append(f"| {k} | {_mmm(tw['per_instance'][k])} | {_mmm(tw['prompt_pooled_per_layer'][k])} |")
        lines.append(f"\nAnalytic: C_Θ = {_fmt(tw['analytic']['C_theta'])} over {tw['analytic']['n_frequencies']} frequencies (d = {tw['analytic']['d']}).")
    if "contraction" in s:
        c = s["contraction"]
        n = c["n_pairs"]
        lines += ["", "## Row-map contraction (empirical pairwise ratios)", "",
                  f"Within prompts: {_mmm(c['pairwise_within'])} ({n['within']} retained of {n['attempted_within']} attempted); "
                  f"across prompts: {_mmm(c['pairwise_cross'])} ({n['cross']} retained of {n['attempted_cross']} attempted)."]
    if "dag_losses" in s:
        lines += ["", "## DAG loss (overflow-safe) and ε-LayerNorm scale error", "", "| quantity | min / median / max |", "|---|---|"]
        for k, v in s["dag_losses"].items():
            lines.append(f"| dag {k} | {_mmm(v)} |")
        ln = s.get("ln_scale_error", {})
        for k in ("rowvar_DS", "direct_rel", "direct_abs", "proxy"):
            if k in ln:
                lines.append(f"| ln_scale_error {k} | {_mmm(ln[k])} |")
        if ln:
            lines.append(f"\n{ln['n_rows']} rows, {ln['n_zero_var_rows']} with zero variance.")
    if "online" in s:
        o = s["online"]
        o1 = o["o1_prefix_rows"]
        lines += ["", "## Online-contract probes", "",
                  "- O1 suffix change, prefix rows (max_abs / l2 / nonzero): "
                  + "; ".join(f"[{i}] {d['max_abs']:.3g} / {d['l2']:.3g} / {d['nonzero']}" for i, d in enumerate(o1["suffix_change"]))
                  + "; G_LM per layer max_abs: " + ", ".join(f"{d['G_LM']['max_abs']:.3g}" for d in o1["deductive_per_layer"]) + ".",
                  f"- O2 repeat call bitwise identical: {o['o2_repeat_call_bitwise']['all_zero']}.",
                  f"- O3 padding ({o['o3_padding']['pad_len']} pads): final real row max_abs "
                  + ", ".join(f"{p['final_real_row_delta']['max_abs']:.3g}" for p in o["o3_padding"]["prompts"])
                  + "; last-layer G_LM max_abs " + ", ".join(f"{p['glm_delta']['max_abs']:.3g}" for p in o["o3_padding"]["prompts"]) + ".",
                  f"- O4 block vs sequential: per token {_mmm(o['o4_block_vs_sequential']['per_token_absdiff'])}; per candidate "
                  f"{_mmm(o['o4_block_vs_sequential']['per_candidate_absdiff'])}; single-token exact coincidence "
                  f"{o['o4_block_vs_sequential']['single_token_exact_coincidence']}."]
    if "collapse" in s:
        c = s["collapse"]
        meta = record.get("collapse") or {}
        forced = " (written with --force: the verdict is not 'collapsed')" if vd["verdict"] != "collapsed" else ""
        lines += ["", "## Collapsed checkpoint", "",
                  f"`{meta.get('folder')}`{forced}: constant operator = mean G_LM over {meta.get('n_prompts_averaged')} prompts.",
                  f"Approximation error against the original model (teacher-forced, uncached): max Δlogit {_fmt(c['vs_model']['max_dlogit'])}, "
                  f"argmax agreement {_fmt(c['vs_model']['argmax_agree_frac'])}; spread of G_LM around the mean {_mmm(c['G_spread_rel'])}.",
                  f"File check (the checkpoint read back decodes as the in-memory mean G; tests the file, not the model): "
                  f"{'passed' if c['file_check']['tokens_equal'] and c['file_check']['max_dlogit'] == 0 else 'FAILED'}."]
    elif (record.get("collapse") or {}).get("refused"):
        lines += ["", "## Collapsed checkpoint", "", f"Not written: {record['collapse']['reason']}."]
    if record.get("plots"):
        lines += ["", "## Plots", ""] + [f"- `{p}`" for p in record["plots"]]
    lines.append("")
    return "\n".join(lines)


def operators_markdown(record: Mapping[str, Any]) -> str:
    """``operators_summary.md``: per-layer medians over heads of each operator statistic."""
    lines = ["# Constant-operator audit", "", f"Source `{record['source']}` (sha256 `{record['sha256']}`).", ""]
    for name, op in record["operators"].items():
        lines += [f"## `{name}` {op['shape']}", "",
                  "| layer | commutant residual | rope comm. p=64 | s2/s1 | cond | symmetry | ‖G‖_F | range | numrank hist | G[0,0] head 0 |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for li, r in enumerate(op["per_layer_median"]):
            lines.append(
                f"| {li} | {_fmt(r['commutant_residual'])} | {_fmt(r.get('rope_commutator_rel_p64'))} | {_fmt(r['s2_over_s1'])} | "
                f"{_fmt(r['condition_number'])} | {_fmt(r['symmetry_defect'])} | {_fmt(r['frobenius'])} | "
                f"[{_fmt(r['entry_min'])}, {_fmt(r['entry_max'])}] | {r['numrank_hist']} | {_fmt(r['G00_head0'])} |"
            )
        lines += ["", "Cells are medians over heads (range: over heads). " + op["label"], ""]
    return "\n".join(lines)
