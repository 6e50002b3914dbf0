"""Same seed → bit-identical results on the CPU, across separate processes.

Two fresh interpreters run the same seeded *sampled* generation (reference float64; kernels
float64 and float32, every cache mode) plus a forward with deductive tensors, and print a
SHA-256 of the raw bytes of every output. The digests must be equal. What is *not* promised
(docs/robustness.md): CUDA without deterministic algorithms, a different torch thread count
(reduction order), a different torch / NumPy / BLAS build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch", reason="the kernel half of the determinism check needs torch")

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np
    import torch

    torch.set_num_threads(int(sys.argv[1]))
    from plga.kernels import PLDRModel
    from plga.reference import decoder
    from plga.reference.checkpoint import random_params
    from plga.reference.config import PLDRConfig

    config = PLDRConfig(num_layers=2, d_model=16, num_heads=2, dff=24, A_dff=12, num_reslayerA=1,
                        num_denseA=2, input_vocab_size=37, max_seq_len=64)
    params = random_params(config, seed=7)
    prompt = np.array([[3, 17, 5, 29, 8], [0, 0, 4, 9, 11]])
    digests = {}

    def digest(name, *arrays):
        h = hashlib.sha256()
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
        digests[name] = h.hexdigest()

    for mode in ("nocache", "kv"):
        r = decoder.generate(decoder.to_backend(params), config, prompt, 6, mode, temperature=1.0, top_k=10, top_p=0.9, seed=123)
        digest(f"reference/{mode}", r.tokens, r.step_logits)
    for dtype in (torch.float64, torch.float32):
        model = PLDRModel.from_reference(params, config, dtype=dtype)
        for mode in ("nocache", "kv", "kvg"):
            out = model.generate(torch.as_tensor(prompt), 6, mode, temperature=1.0, top_k=10, top_p=0.9, seed=123,
                                 return_step_logits=True)
            digest(f"kernels/{dtype}/{mode}", out.tokens.numpy(), out.step_logits.numpy())
        with torch.no_grad():
            f = model(torch.as_tensor(prompt), deductive=True)
        digest(f"kernels/{dtype}/forward", f.logits.numpy(), *(d[k].numpy() for d in f.deductive for k in sorted(d)))
    print(json.dumps(digests))
    """
)


def _run(threads: int = 1) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(threads)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_seeded_runs_are_bit_identical_across_processes():
    first, second = _run(), _run()
    assert len(first) == 2 + 2 * 4
    different = sorted(k for k in first if first[k] != second[k])
    assert not different, f"outputs differ between two runs with the same seed: {different}"
