"""Known-answer models the verdict once got wrong, each with the negative control that shows the
test catches the old behaviour.

* **collapsed, emits id 0** — power-stage W = 0 (G_LM constant) and an LM head that favours id 0:
  the recomputation without cache must attend to a generated 0 as cached decoding does, not
  mask it as padding (which changed the logits and made the verdict inconclusive);
* **one moving head** — every operator constant except one head of the last layer, whose G is
  10⁸ times smaller than its neighbour's: pooled over the layer's heads its movement reads
  ~1e-8 (collapsed); per operator it is O(1);
* **moves past a length** — layer 0's G_LM is one operator (to float64 rounding) for inputs of
  12 to 100 tokens and another past ~110: only the context probe, a sequence as long as the
  context, reaches it.

Each construction is checked on the reference decoder first, independently of the audit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest

from plga.audit import run_audit, runner
from plga.audit.cli import add_audit_arguments, audit_main
from plga.audit.model import random_params
from plga.audit.summary import coverage_line
from plga.audit.verdict import COLLAPSED, INCONCLUSIVE, NOT_COLLAPSED, verdict
from plga.reference import decoder as dec
from plga.reference.config import PLDRConfig

from .tiny import CONFIG, PLGA, SIZES, power_stage_w_zero

PROMPTS = [[5, 9, 17, 21, 30, 8], [40, 12, 7, 7, 19, 33, 50, 4]]
MHA = "decoder.dec_layers.{}.mha1."


def _audit(params, config, tmp_path, prompts=PROMPTS, sizes=SIZES):
    return run_audit(checkpoint=(params, config), prompts=prompts, out_dir=tmp_path, sizes=sizes, progress=False, plots=False)


def _g(params, config, tokens) -> np.ndarray:
    f = dec.forward(dec.to_backend(params), config, np.asarray([tokens]))
    return np.stack([d["G_LM"][0] for d in f.deductive])  # [L, H, d, d]


# --- a generated id 0 is a token -------------------------------------------------------------


def _emits_zero() -> dict[str, np.ndarray]:
    params = power_stage_w_zero()
    params["final_layer.bias"] = params["final_layer.bias"].copy()
    params["final_layer.bias"][0] += 3.0  # greedy decoding emits id 0 on these prompts
    return params


def test_collapsed_model_that_emits_the_padding_id(tmp_path, monkeypatch):
    params = _emits_zero()
    assert np.array_equal(_g(params, CONFIG, PROMPTS[0]), _g(params, CONFIG, PROMPTS[1])), "G_LM is constant by construction"
    rec = _audit(params, CONFIG, tmp_path / "fixed")
    assert any(0 in c for c in rec["decode_continuations"]), "the construction must emit id 0"
    assert rec["verdict"]["verdict"] == COLLAPSED, rec["verdict"]
    # negative control: recomputing with generated 0s masked as padding (the published no-cache rule)
    monkeypatch.setattr(runner, "_scored", lambda backend, tokens, **kw: backend.forward(np.asarray(tokens), **kw))
    assert _audit(params, CONFIG, tmp_path / "masked")["verdict"]["verdict"] == INCONCLUSIVE


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_explicit_key_padding_scores_a_zero_as_a_token(backend):
    """Both decoders: ``key_padding`` all False gives the logits of a cached step over the same
    ids (a generated 0 is never padding there); the default still masks ids 0."""
    if backend == "torch":
        pytest.importorskip("torch")
    from plga.audit.backend import make_backend

    params = power_stage_w_zero()
    be = make_backend(backend, params, CONFIG)
    toks = np.asarray([[5, 9, 17, 0, 30]])
    masked = be.forward(toks).logits[0, -1]
    real = be.forward(toks, key_padding=np.zeros(toks.shape, dtype=bool)).logits[0, -1]
    assert not np.allclose(masked, real, rtol=1e-6, atol=1e-6), "the mask must matter for this test to mean anything"
    p = dec.to_backend(params)
    logits, _ = dec.step(p, CONFIG, toks[:, 3:], dec.forward(p, CONFIG, toks[:, :3]).caches, "kv")  # prompt, then 0 and 30
    assert np.allclose(logits[0, -1], real, rtol=1e-9, atol=1e-9), "explicit no-padding = the cached step"
    with pytest.raises(ValueError, match="key_padding"):
        be.forward(toks, key_padding=np.zeros((1, 4), dtype=bool))


# --- one moving head -------------------------------------------------------------------------


def _one_moving_head(scale: float = 1e-8) -> dict[str, np.ndarray]:
    """a = 0, b_a random everywhere (constant G) except layer 1 head 1: a = scale·R, b_a = scale·R'."""
    params = random_params(CONFIG, seed=3)
    rng = np.random.default_rng(7)
    d = CONFIG.depth
    for i in range(CONFIG.num_layers):
        params[PLGA.format(i) + "alst"] = np.zeros_like(params[PLGA.format(i) + "alst"])
        params[PLGA.format(i) + "balst"] = rng.normal(size=params[PLGA.format(i) + "balst"].shape).astype(np.float32)
    last = PLGA.format(CONFIG.num_layers - 1)
    params[last + "alst"][1] = (scale * rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32)
    params[last + "balst"][1] = (scale * rng.normal(size=(d, d))).astype(np.float32)
    return params


def test_one_moving_head_is_not_diluted_by_its_layer(tmp_path):
    params = _one_moving_head()
    g0, g1 = _g(params, CONFIG, PROMPTS[0]), _g(params, CONFIG, PROMPTS[1])
    head = np.linalg.norm(g0[1, 1] - g1[1, 1]) / np.linalg.norm(g0[1, 1])
    pooled = np.linalg.norm(g0[1] - g1[1]) / np.linalg.norm(g0[1])
    assert head > 0.1 and pooled < 1e-6, (head, pooled)
    sizes = dataclasses.replace(SIZES, context_probe_len=0)  # one prompt, no probe: order parameter and ε_G alone
    rec = _audit(params, CONFIG, tmp_path, prompts=PROMPTS[:1], sizes=sizes)
    assert rec["verdict"]["verdict"] == NOT_COLLAPSED, rec["verdict"]
    assert rec["verdict"]["figures"]["G_spread"] is None and rec["verdict"]["figures"]["G_context"] is None
    # negative control: the same summary without the per-operator figures (the layer-pooled ones decide)
    s = json.loads(json.dumps(rec["summary"]))
    s["order_parameter"]["GLM"].pop("rms_per_operator")
    for d in s["decode"]:
        d.pop("epsG_per_operator_max_over_steps")
    assert verdict(s)["verdict"] == COLLAPSED


# --- moves only past position N ---------------------------------------------------------------


def _moves_past(n: int, config: PLDRConfig) -> dict[str, np.ndarray]:
    """Layer 0: q is the same row at every position (wq = 0, a bias in the slowest RoPE pair), so
    D and G_LM depend on the length S only; its one residual unit cancels its input exactly and
    adds a gate silu(K (LN(D)[15] − t)) that switches on near length n (for n = 150: one G_LM,
    to float64 rounding, from 12 to 100 tokens; another past ~110). Layer 1: collapsed
    (metric-learner LayerNorm γ = 0)."""
    d = config.depth
    p = random_params(config, seed=3)
    m0 = MHA.format(0)
    p[m0 + "wq.weight"] = np.zeros_like(p[m0 + "wq.weight"])
    bq = np.zeros(config.d_model, np.float32)
    bq[d - 2] = bq[2 * d - 2] = 1.0
    p[m0 + "wq.bias"] = bq
    p[m0 + "layernorm1.weight"] = np.ones_like(p[m0 + "layernorm1.weight"])
    p[m0 + "layernorm1.bias"] = np.zeros_like(p[m0 + "layernorm1.bias"])

    def ln15(s: int) -> float:  # LN(D) row 14, entry 15, of a length-s input
        th = config.rope_base ** (-(d - 2) / d)
        x = np.arange(s) * th
        r = np.zeros(d)
        r[d - 2], r[d - 1] = np.sum(np.cos(x) ** 2), np.sum(np.cos(x) * np.sin(x))
        return float((r[d - 1] - r.mean()) / np.sqrt(r.var() + 1e-6))

    t = ln15(n)
    k = 800.0 / (ln15(n) - ln15(int(n * 0.9)))
    a = config.A_dff
    w1, b1, w2 = np.zeros((a, d)), np.zeros(a), np.zeros((a, d))
    b2, w3 = np.zeros(a), np.zeros((d, a))
    rng = np.random.default_rng(3)
    b3 = rng.normal(size=d)
    for j in range(d):  # silu(64)·x_j·(−1/64) = −x_j: the unit's residual cancels
        b1[j], w2[j, j], w3[j, j] = 64.0, 1.0, -1.0 / 64
    for j in range(d, a):  # the gate: exactly 0 while LN(D)[15] < t
        w1[j, d - 1], b1[j], b2[j] = k, -k * t, 1.0
        w3[:, j] = rng.normal(size=d)
    u = m0 + "reslayerAs.0.denseAs.0."
    for name, v in (("gluw1.weight", w1), ("gluw1.bias", b1), ("gluw2.weight", w2), ("gluw2.bias", b2),
                    ("gluw3.weight", w3), ("gluw3.bias", b3)):
        p[u + name] = v.astype(np.float32)
    p[MHA.format(1) + "layernorm1.weight"] = np.zeros_like(p[MHA.format(1) + "layernorm1.weight"])
    return p


def test_context_probe_reaches_what_the_prompts_do_not(tmp_path):
    config = dataclasses.replace(CONFIG, A_dff=24, num_reslayerA=1, num_denseA=1, max_seq_len=256)
    params = _moves_past(150, config)
    ids = lambda s: [4 + i % 60 for i in range(s)]  # noqa: E731
    plateau = [_g(params, config, ids(s)) for s in (12, 30, 60, 100)]
    assert all(np.linalg.norm(g - plateau[0]) <= 1e-12 * np.linalg.norm(plateau[0]) for g in plateau), "one G from 12 to 100 tokens"
    long = _g(params, config, ids(256))
    assert np.linalg.norm(long[0] - plateau[0]) / np.linalg.norm(plateau[0]) > 0.1, "and another past the threshold"
    prompts = [ids(12), [7, 19, 33, 50, 4, 40, 12, 7, 7, 19, 33, 50, 9, 11]]  # every measured sequence: 12–30 tokens
    rec = _audit(params, config, tmp_path / "probe", prompts=prompts)
    assert rec["verdict"]["verdict"] == NOT_COLLAPSED and rec["verdict"]["figures"]["G_context"] > 0.1, rec["verdict"]
    assert rec["coverage"]["longest_sequence"] == config.max_seq_len
    # negative control: without the probe every measured sequence lies on the plateau
    off = _audit(params, config, tmp_path / "off", prompts=prompts, sizes=dataclasses.replace(SIZES, context_probe_len=0))
    assert 12 <= off["coverage"]["longest_sequence"] <= 100
    assert off["verdict"]["verdict"] == COLLAPSED


def test_coverage_says_what_was_measured(tmp_path):
    rec = _audit(power_stage_w_zero(), CONFIG, tmp_path)
    c = rec["coverage"]
    seqs = [*PROMPTS, *(PROMPTS[r["prompt"]] + r["tokens"] for r in rec["stochastic_continuations"])]
    seqs += [p + g for p, g in zip(PROMPTS, rec["decode_continuations"], strict=False)]
    assert c["prompts"] == 2 and c["prompt_lengths"] == [6, 8] and c["context"] == 64 and c["vocabulary"] == 64
    assert c["longest_sequence"] == 64, "the context probe"
    assert c["distinct_token_ids"] >= len({t for s in seqs for t in s})
    line = coverage_line(c)
    assert line.startswith("measured on 2 prompts of 6–8 tokens and sequences up to 64 of the 64-token context")
    assert line in (tmp_path / "summary.md").read_text()


# --- user errors -------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    from plga.cli import main

    return main(["audit", *argv])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--tokenizer", "{tmp}/missing.model"], "does not exist"),
        (["--tokenizer", "{tmp}/not_a_model.model"], "is not a SentencePiece model"),
        (["--prompts", "{tmp}/zero.json"], "outside [1,"),
        (["--prompts", "{tmp}/big.json"], "outside [1,"),
        (["--operators", "{tmp}/nan.npz"], "non-finite"),
        (["{tmp}/ckpt.pth", "--operators", "{tmp}/ok.npz"], "a checkpoint"),
        (["--operators", "{tmp}/ok.npz", "--collapse"], "--collapse"),
    ],
)
def test_user_errors_are_one_line_exit_2(argv, needle, tmp_path, capsys):
    pytest.importorskip("sentencepiece")
    (tmp_path / "not_a_model.model").write_text("hello\n")
    (tmp_path / "zero.json").write_text(json.dumps([[5, 0, 7]]))
    (tmp_path / "big.json").write_text(json.dumps([[5, 10**6 - 1]]))
    g = np.ones((1, 2, 4, 4))
    np.savez(tmp_path / "ok.npz", G=g)
    g[0, 1, 2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", G=g)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert _cli([*argv, "--out", str(tmp_path / "out"), "--quick", "--no-progress", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plga audit: error:") and needle in err and "\n" not in err, err


def test_operators_audit_still_runs_on_finite_operators(tmp_path):
    np.savez(tmp_path / "ok.npz", G=np.eye(4)[None, None].repeat(2, axis=1))
    args = add_audit_arguments(argparse.ArgumentParser()).parse_args(["--operators", str(tmp_path / "ok.npz"), "--out", str(tmp_path), "--no-plots"])
    assert audit_main(args) == 0
