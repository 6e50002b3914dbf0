"""Torch implementation of the audit backend (imported lazily; needs torch).

The same arithmetic as :mod:`plga.reference.decoder` (SPEC §2–3: float32 square roots, −1e9
additive mask, the Gram over every query row, KV and KVG caches), on a torch device and
dtype, returning NumPy float64 arrays. Probes of layer internals run on the float64 reference
(:class:`plga.audit.backend._ReferenceProbes`). When ``plga.kernels`` grows fused kernels this
class is the one place to route forward/generate through them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..reference import decoder as dec
from ..reference.config import PLDRConfig
from ..reference.numerics import float32_sqrt
from .backend import ForwardOut, _ReferenceProbes

_DT = {"float64": torch.float64, "float32": torch.float32}


class TorchBackend(_ReferenceProbes):
    """PLDR-LLM v510 forward and cached decoding in torch (device, dtype configurable)."""

    name = "torch"

    def __init__(self, params: Mapping[str, np.ndarray], config: PLDRConfig, device: str = "cpu", dtype: str = "float64") -> None:
        try:
            self.device = torch.device(device)
            torch.empty(0, device=self.device)
        except (RuntimeError, AssertionError) as exc:
            raise ValueError(f"torch device {device!r} is not available: {str(exc).splitlines()[0]}") from None
        self.config, self.dtype = config, _DT[dtype]
        self.params64 = dec.to_backend(params)
        self.p = {k: torch.as_tensor(np.asarray(v), dtype=self.dtype, device=self.device) for k, v in params.items()}
        d = config.depth
        th = torch.tensor(config.rope_base, dtype=torch.float64) ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
        self.theta = th.to(self.device)

    # -- pieces ---------------------------------------------------------------------------
    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.p[name + ".weight"].T + self.p[name + ".bias"]

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-6) * self.p[name + ".weight"] + self.p[name + ".bias"]

    def _glu(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        return self._lin(F.silu(self._lin(x, prefix + "gluw1")) * self._lin(x, prefix + "gluw2"), prefix + "gluw3")

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ang = positions.to(torch.float64)[:, None] * self.theta[None, :]
        cos, sin = torch.cos(ang).to(self.dtype), torch.sin(ang).to(self.dtype)
        d = x.shape[-1]
        if self.config.rope_style == "interleaved":
            x0, x1 = x[..., 0::2], x[..., 1::2]
        else:
            x0, x1 = x[..., : d // 2], x[..., d // 2 :]
        y0, y1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
        out = torch.empty_like(x)
        if self.config.rope_style == "interleaved":
            out[..., 0::2], out[..., 1::2] = y0, y1
        else:
            out[..., : d // 2], out[..., d // 2 :] = y0, y1
        return out

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.config.num_heads, self.config.depth).transpose(1, 2)

    def _learner(self, layer: int, q_rot: torch.Tensor) -> torch.Tensor:
        p = f"decoder.dec_layers.{layer}.mha1."
        a = self._ln(q_rot.transpose(-1, -2) @ q_rot, p + "layernorm1")
        for j in range(self.config.num_reslayerA):
            y = a
            for k in range(self.config.num_denseA):
                y = self._glu(y, f"{p}reslayerAs.{j}.denseAs.{k}.")
            a = self._ln(y + a, f"{p}reslayerAs.{j}.layernormA")
        return a

    def _power(self, layer: int, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = f"decoder.dec_layers.{layer}.mha1.plgatt_layer."
        u = self.p[p + "Wlst"] @ a + self.p[p + "blst"]
        a_lm = u * F.silu(u) + 1e-9
        a_p = torch.pow(a_lm, self.p[p + "pwlst"])
        return a_lm, a_p, self.p[p + "alst"] @ a_p + self.p[p + "balst"]

    def _layer(self, i: int, h: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, cache: dict | None, mode: str, g_const: Any) -> tuple[torch.Tensor, dict, dict]:
        p = f"decoder.dec_layers.{i}."
        q = self._rope(self._heads(self._lin(h, p + "mha1.wq")), positions)
        k = self._rope(self._heads(self._lin(h, p + "mha1.wk")), positions)
        v = self._heads(self._lin(h, p + "mha1.wv"))
        ded: dict[str, torch.Tensor] = {}
        a = None
        if g_const is not None:
            g = g_const.expand(h.shape[0], *g_const.shape[-3:])
        elif cache is None:
            a = self._learner(i, q)
            a_lm, a_p, g = self._power(i, a)
            ded.update(A=a, A_LM=a_lm, A_P=a_p)
        elif mode == "kv":
            a = cache["A"]
            a_lm, a_p, g = self._power(i, a)
            ded.update(A=a, A_LM=a_lm, A_P=a_p)
        else:
            a, g = cache["A"], cache["G"]
        ded["G_LM"] = g
        s_new = h.shape[1]
        if cache is not None:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            allowed = torch.cat([cache["allowed"], torch.ones(h.shape[0], s_new, dtype=torch.bool, device=self.device)], 1)
        t_all = k.shape[2]
        causal = torch.ones(s_new, t_all, dtype=torch.bool, device=self.device).tril(t_all - s_new)
        support = causal[None, None] & allowed[:, None, None, :]
        scores = (q @ g) @ k.transpose(-1, -2) / float32_sqrt(self.config.depth)
        w = torch.softmax(scores + torch.where(support, 0.0, -1e9).to(self.dtype), dim=-1)
        att = self._lin((w @ v).transpose(1, 2).reshape(h.shape), p + "mha1.dense")
        h1 = self._ln(att + h, p + "layernorm1")
        out = self._ln(self._glu(h1, p + "ffn.") + h1, p + "layernorm2")
        return out, ded, {"k": k, "v": v, "A": a, "G": g, "allowed": allowed}

    def _run(self, tokens: np.ndarray, caches: list | None = None, mode: str = "nocache", constant_g: Any = None) -> tuple[torch.Tensor, list, list]:
        t = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.device)
        off = 0 if caches is None else caches[0]["k"].shape[2]
        if off + t.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence length {off + t.shape[1]} exceeds max_seq_len={self.config.max_seq_len}")
        positions = torch.arange(off, off + t.shape[1], device=self.device)
        h = self._ln(self.p["decoder.embedding.weight"][t] * float32_sqrt(self.config.d_model), "decoder.layernorm1")
        allowed = t != 0
        ded, new = [], []
        for i in range(self.config.num_layers):
            gc = None if constant_g is None else torch.as_tensor(np.asarray(constant_g[i]), dtype=self.dtype, device=self.device)
            h, d_i, c_i = self._layer(i, h, positions, allowed, None if caches is None else caches[i], mode, gc)
            ded.append(d_i)
            new.append(c_i)
        return self._lin(h, "final_layer"), ded, new

    @staticmethod
    def _np(x: torch.Tensor) -> np.ndarray:
        return x.detach().to("cpu", torch.float64).numpy()

    # -- interface ------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, tokens: np.ndarray, constant_g: Sequence[np.ndarray] | None = None) -> ForwardOut:
        logits, ded, _ = self._run(tokens, constant_g=constant_g)
        return ForwardOut(logits=self._np(logits), deductive=[{k: self._np(v) for k, v in d.items()} for d in ded])

    @torch.no_grad()
    def generate(
        self, prompt: np.ndarray, n: int, mode: str, *, constant_g: Sequence[np.ndarray] | None = None,
        temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if mode not in dec.MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {dec.MODES}")
        rng = np.random.default_rng(seed) if seed is not None else None
        tokens = np.asarray(prompt, dtype=np.int64)
        steps = []
        if mode == "nocache":
            for _ in range(n):
                logits = self._np(self._run(tokens, constant_g=constant_g)[0][:, -1])
                steps.append(logits)
                tokens = np.concatenate([tokens, dec.sample_next(logits, rng, temperature, top_k, top_p)[:, None]], 1)
        elif n:
            out, _, caches = self._run(tokens, constant_g=constant_g)
            logits = self._np(out[:, -1])
            cached = "kvg" if mode == "constant" else mode
            for j in range(n):
                steps.append(logits)
                nxt = dec.sample_next(logits, rng, temperature, top_k, top_p)
                tokens = np.concatenate([tokens, nxt[:, None]], 1)
                if j + 1 < n:
                    out, _, caches = self._run(nxt[:, None], caches, cached, constant_g)
                    logits = self._np(out[:, -1])
        step_logits = np.stack(steps, 1) if steps else np.zeros((tokens.shape[0], 0, self.config.input_vocab_size))
        return tokens, step_logits

