"""One case, really run, on ``tiny`` (in this process): the eager baseline decodes the same
tokens as the fused path, and a case returns every raw measurement the rows need."""

from __future__ import annotations

import pytest

from plga.bench.plan import plan_cases
from plga.reference.config import PLDRConfig

torch = pytest.importorskip("torch")

from plga.bench.case import eager_generate, run_case  # noqa: E402


def test_eager_baseline_decodes_the_same_tokens():
    from plga.kernels import PLDRModel
    from plga.reference.checkpoint import random_params

    c = PLDRConfig.from_name("tiny")
    model = PLDRModel.from_reference(random_params(c, 0), c)
    prompt = torch.randint(1, c.input_vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    for mode in ("nocache", "kv", "kvg"):
        assert torch.equal(eager_generate(model, prompt, 4, mode), model.generate(prompt, 4, mode).tokens)
    collapsed = model.collapse_from(prompt)
    assert torch.equal(eager_generate(collapsed, prompt, 4, "collapsed"), collapsed.generate(prompt, 4, "collapsed").tokens)


@pytest.mark.parametrize("impl", ["eager", "fused"])
def test_a_decode_case_runs_on_tiny(impl):
    spec = next(c for c in plan_cases(["tiny"], ["decode"], quick=True, runs=1, low_precision=False)
                if c["kind"] == "decode" and c["impl"] == impl and c["mode"] == "kv" and c["batch"] == 1)
    out = run_case(spec)
    assert len(out["times_s"]) == 1 and out["times_s"][0] > 0
    assert out["prefill_times_s"] and len(out["tokens_digest"]) == 12
    assert out["peak_rss_bytes"] > 0


def test_a_prefill_case_runs_on_tiny():
    spec = next(c for c in plan_cases(["tiny"], ["prefill"], quick=True, runs=1, low_precision=False)
                if c["kind"] == "prefill" and c["impl"] == "fused")
    out = run_case(spec)
    assert out["logits"] == "last" and len(out["times_s"]) == 1
