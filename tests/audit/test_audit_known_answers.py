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
  context, reaches it;
* **overflows past a length** — the same, with a power stage that overflows once the gate opens:
  the probe's NaN must leave the verdict inconclusive (Python's ``max`` dropped it: collapsed);
* **huge but finite G** — entries ~1e188 that move O(1) with the input: every figure is a ratio,
  so the verdict is "not collapsed" (squares overflowed: a crash in the DAG loss);
* **moves only with padding** — G_LM one operator on every unpadded sequence, another when id 0
  pads it (G_LM sums over every query row, padding included): the padding probe must see it;
* **prompts near the end of the context** — prompts that leave different room for decoding
  (one array per prompt's steps crashed the audit).

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
from plga.errors import NonFiniteError
from plga.reference import decoder as dec
from plga.reference.config import PLDRConfig

from .tiny import CONFIG, MHA, PLGA, SIZES, moves_past, power_stage_w_zero

PROMPTS = [[5, 9, 17, 21, 30, 8], [40, 12, 7, 7, 19, 33, 50, 4]]


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
    # negative control: the same summary without the per-operator figures (the layer-pooled ones decide;
    # the padding probe, per operator too, goes with them)
    s = json.loads(json.dumps(rec["summary"]))
    s.pop("G_LM_padding_probe")
    s["order_parameter"]["GLM"].pop("rms_per_operator")
    for d in s["decode"]:
        d.pop("epsG_per_operator_max_over_steps")
    assert verdict(s)["verdict"] == COLLAPSED


# --- moves only past position N ---------------------------------------------------------------


def test_context_probe_reaches_what_the_prompts_do_not(tmp_path):
    config = dataclasses.replace(CONFIG, A_dff=24, num_reslayerA=1, num_denseA=1, max_seq_len=256)
    params = moves_past(150, config)
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


def test_a_probe_that_overflows_leaves_the_verdict_open(tmp_path):
    config = dataclasses.replace(CONFIG, A_dff=24, num_reslayerA=1, num_denseA=1, max_seq_len=256)
    params = moves_past(150, config)
    ids = lambda s: [4 + i % 60 for i in range(s)]  # noqa: E731
    f = dec.forward(dec.to_backend(params), config, np.asarray([ids(20)]))
    a_plateau = f.deductive[0]["A"][0]  # [H, d, d] the generator A on the plateau
    eye = np.broadcast_to(np.eye(config.depth), a_plateau.shape)
    params[PLGA.format(0) + "Wlst"] = (100.0 * eye).astype(np.float32)  # u = 100 A + b = 1 on the plateau ...
    params[PLGA.format(0) + "blst"] = (1.0 - 100.0 * a_plateau).astype(np.float32)
    params[PLGA.format(0) + "pwlst"] = np.full(a_plateau.shape, 1000.0, np.float32)  # ... and A_P = σ(u)^1000 overflows off it
    assert np.isfinite(_g(params, config, ids(100))).all()
    with pytest.raises(NonFiniteError):
        _g(params, config, ids(256))
    prompts = [ids(12), [7, 19, 33, 50, 4, 40, 12, 7, 7, 19, 33, 50, 9, 11]]
    rec = _audit(params, config, tmp_path / "probe", prompts=prompts)
    v = rec["verdict"]
    assert v["verdict"] == INCONCLUSIVE and "context probe is not finite" in v["reasons"][0], v
    assert v["figures"]["G_deviation"] == "nan" and max(float(v["figures"][k]) for k in ("G_order_parameter", "epsG", "G_spread")) < 1e-12
    assert _cli([*_model_args(params, config, tmp_path), "--out", str(tmp_path / "cli"), "--collapse"]) == 2, "--collapse refused"
    # negative control: the same summary read by a maximum that drops a NaN not in first place
    s = json.loads(json.dumps(rec["summary"]))
    s["G_LM_context_probe"]["max"] = 0.0
    assert verdict(s)["verdict"] == COLLAPSED


def _model_args(params, config, tmp_path) -> list[str]:
    """A checkpoint folder (safetensors + config.json) of ``params`` for the command line."""
    from plga.reference.checkpoint import save_safetensors

    folder = tmp_path / "model"
    if not folder.exists():
        save_safetensors(params, config, folder)
    return [str(folder), "--prompts", str(_prompt_file(tmp_path)), "--quick", "--no-progress", "--no-plots"]


def _prompt_file(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps([[4 + i % 60 for i in range(12)], [7, 19, 33, 50, 4, 40, 12, 7, 7, 19, 33, 50, 9, 11]]))
    return path


def test_huge_but_finite_operators_are_measured(tmp_path):
    params = random_params(CONFIG, seed=3)
    for i in range(CONFIG.num_layers):  # A_P = σ(...)·... ^ 80 with b = 10: |G| ~ 1e188, finite, moving with the input
        params[PLGA.format(i) + "blst"] = np.full_like(params[PLGA.format(i) + "blst"], 10.0)
        params[PLGA.format(i) + "pwlst"] = np.full_like(params[PLGA.format(i) + "pwlst"], 80.0)
    g0, g1 = _g(params, CONFIG, PROMPTS[0]), _g(params, CONFIG, PROMPTS[1])
    assert np.isfinite(g0).all() and np.abs(g0).max() > 1e160, "entries whose squares overflow float64"
    assert np.linalg.norm(g0 / 1e150 - g1 / 1e150) > 0.1 * np.linalg.norm(g0 / 1e150), "and G moves with the input"
    rec = _audit(params, CONFIG, tmp_path)
    assert rec["verdict"]["verdict"] == NOT_COLLAPSED, rec["verdict"]
    assert 0.1 < float(rec["verdict"]["figures"]["G_spread"]) < 10
    assert rec["summary"]["dag_losses"]["GLM"]["max"] == "inf", "tr e^{G⊙G} lies beyond float64"


def _moves_with_padding() -> tuple[dict[str, np.ndarray], PLDRConfig]:
    """One layer. Every real id's embedding has 0 in coordinate e (the padding id 0 alone has ±3
    there and in e − 1); the queries' head-local coordinates 14, 15 read only coordinates e − 1, e,
    so they are 0 on every unpadded row. The metric learner's one unit cancels its input exactly
    (silu(64)·x·(−1/64)) and adds a gate on x₁₄ − x₁₅ of the normalized Gram rows: 0 without
    padding, O(1) with it. So A, A_LM and G_LM are one operator on every unpadded sequence."""
    config = dataclasses.replace(CONFIG, num_layers=1, A_dff=17, num_reslayerA=1, num_denseA=1, max_seq_len=128)
    d, e = config.depth, config.d_model - 1
    p = random_params(config, seed=3)
    rng = np.random.default_rng(11)
    base = np.array([1.0] * 15 + [-1.0] * 15)
    emb = np.stack([np.concatenate([rng.permutation(base), [0.0, 0.0]]) for _ in range(config.input_vocab_size)])
    emb[0, e - 1], emb[0, e] = -3.0, 3.0
    p["decoder.embedding.weight"] = emb.astype(np.float32)
    p["decoder.layernorm1.bias"][e] = 0.0
    m0 = MHA.format(0)
    wq, bq = p[m0 + "wq.weight"].copy(), p[m0 + "wq.bias"].copy()
    wq[:, e] = 0.0
    for h in range(config.num_heads):
        for loc in (14, 15):
            wq[h * d + loc] = 0.0
            wq[h * d + loc, e] = 2.0 * rng.normal()
            bq[h * d + loc] = 0.0
    p[m0 + "wq.weight"], p[m0 + "wq.bias"] = wq, bq
    p[m0 + "layernorm1.weight"], p[m0 + "layernorm1.bias"] = np.ones(d, np.float32), np.zeros(d, np.float32)
    a = config.A_dff
    w1, b1, w2, b2, w3 = np.zeros((a, d)), np.zeros(a), np.zeros((a, d)), np.zeros(a), np.zeros((d, a))
    for j in range(d):
        b1[j], w2[j, j], w3[j, j] = 64.0, 1.0, -1.0 / 64
    w1[d, 14], w1[d, 15], b2[d] = 4.0, -4.0, 1.0
    w3[:, d] = rng.normal(size=d)
    unit = m0 + "reslayerAs.0.denseAs.0."
    for name, v in (("gluw1.weight", w1), ("gluw1.bias", b1), ("gluw2.weight", w2), ("gluw2.bias", b2),
                    ("gluw3.weight", w3), ("gluw3.bias", rng.normal(size=d))):
        p[unit + name] = v.astype(np.float32)
    p["final_layer.bias"][0] = -1e4  # never generates the padding id
    return p, config


def test_a_g_that_moves_only_with_padding_is_not_collapsed(tmp_path):
    params, config = _moves_with_padding()
    plain = [_g(params, config, t) for t in (PROMPTS[0], PROMPTS[1], list(range(4, 64)) * 2)]
    assert all(np.linalg.norm(g - plain[0]) <= 1e-14 * np.linalg.norm(plain[0]) for g in plain), "one G without padding"
    for padded in (PROMPTS[0] + [0] * 4, [0] * 4 + PROMPTS[0]):
        assert np.linalg.norm(_g(params, config, padded) - plain[0]) > 0.5 * np.linalg.norm(plain[0]), "another with padding"
    rec = _audit(params, config, tmp_path)
    v = rec["verdict"]
    assert v["verdict"] == NOT_COLLAPSED and float(v["figures"]["G_padding"]) > 0.5, v
    assert all(float(v["figures"][k]) < 1e-12 for k in ("G_order_parameter", "epsG", "G_spread", "G_context")), v["figures"]
    # negative control: without the padding probe every figure reads one operator
    s = json.loads(json.dumps(rec["summary"]))
    s.pop("G_LM_padding_probe")
    assert verdict(s)["verdict"] == COLLAPSED


def test_prompts_that_leave_different_room_in_the_context(tmp_path):
    """Prompts of 10 and 62 tokens in a 64-token context decode 4 and 2 steps; each prompt's
    record equals that of an audit of the prompt alone (the steps it did not take never count)."""
    params = random_params(CONFIG, seed=3)
    long = [4 + (7 * i) % 59 for i in range(62)]
    both = _audit(params, CONFIG, tmp_path / "both", prompts=[PROMPTS[0], long])
    assert [d["T"] for d in both["summary"]["decode"]] == [4, 2]
    assert [len(c) for c in both["decode_continuations"]] == [4, 2]
    for i, p in enumerate((PROMPTS[0], long)):
        alone = _audit(params, CONFIG, tmp_path / f"alone{i}", prompts=[p])
        assert alone["summary"]["decode"][0] == both["summary"]["decode"][i], i
    assert both["verdict"]["figures"]["decoding_steps"] == 6


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
        (["--operators", "{tmp}/odd.npz"], "d must be even"),
        (["--operators", "{tmp}/ok.npz", "--config", "{tmp}/cfg.json"], "--config"),
        (["--prompts", "{tmp}/nested.json"], "every id must be an integer"),
        (["--config", "{tmp}/cfg.json"], "configuration belongs to a checkpoint"),
        (["--out", "{tmp}/zero.json"], "is not a folder"),
        (["--operators", "{tmp}/ok.npz", "--out", "{tmp}/zero.json"], "is not a folder"),
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
    np.savez(tmp_path / "odd.npz", G=np.ones((1, 2, 5, 5)))
    (tmp_path / "nested.json").write_text(json.dumps([[[5, 6], [7, 8]]]))  # one prompt of two rows: not a prompt
    (tmp_path / "cfg.json").write_text(json.dumps(CONFIG.to_upstream()))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "out")]
    assert _cli([*argv, *out, "--quick", "--no-progress", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plga audit: error:") and needle in err and "\n" not in err, err


def test_operators_audit_still_runs_on_finite_operators(tmp_path):
    np.savez(tmp_path / "ok.npz", G=np.eye(4)[None, None].repeat(2, axis=1))
    args = add_audit_arguments(argparse.ArgumentParser()).parse_args(["--operators", str(tmp_path / "ok.npz"), "--out", str(tmp_path), "--no-plots"])
    assert audit_main(args) == 0


def test_config_option_configures_a_pth(tmp_path):
    """``--config`` gives a ``.pth`` its context (no shape tells it); without it the context is
    inferred as 1024, or ``--max-seq-len``."""
    torch = pytest.importorskip("torch")
    params = power_stage_w_zero()
    torch.save({k: torch.from_numpy(v) for k, v in params.items()}, tmp_path / "m.pth")
    (tmp_path / "cfg.json").write_text(json.dumps(CONFIG.to_upstream()))
    common = ["--quick", "--no-progress", "--no-plots", "--prompts", str(_prompt_file(tmp_path))]
    for extra, context in (([], 1024), (["--max-seq-len", "128"], 128), (["--config", str(tmp_path / "cfg.json")], CONFIG.max_seq_len)):
        out = tmp_path / f"out{context}"
        assert _cli([str(tmp_path / "m.pth"), *extra, "--out", str(out), *common]) == 0
        assert json.loads((out / "audit.json").read_text())["coverage"]["context"] == context
