"""Next-token selection: greedy and seeded temperature / top-k / top-p sampling.

Same semantics as :func:`plga.reference.decoder.sample_next`: temperature 0 is greedy (first
maximum on ties); otherwise logits/temperature are restricted to the ``top_k`` largest (if
> 0), then to the smallest prefix (by decreasing probability, ties broken by lower id) whose
cumulative probability reaches ``top_p`` (the token that crosses p is kept), renormalized,
and one token is drawn with a seeded ``torch.Generator``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import NonFiniteError
from ..reference.decoder import check_sampling


def _check_logits(logits: Tensor) -> None:
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[-1] == 0:
        raise ValueError(f"logits must be a tensor [batch, vocab], got {getattr(logits, 'shape', type(logits).__name__)}")
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteError("next-token logits are not finite (NaN or inf)")


def sampling_distribution(
    logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> tuple[Tensor, Tensor]:
    """(probs [B, V] float64 over tokens sorted by decreasing logit, ids [B, V]) for sampling.

    ``probs[b, r]`` is the probability of drawing token ``ids[b, r]``; entries past the kept
    set are exactly 0. Temperature must be > 0 here.
    """
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        raise ValueError("sampling_distribution needs temperature > 0 (temperature 0 is greedy)")
    _check_logits(logits)
    x = logits.to(torch.float64) / temperature  # [B, V]
    vals, ids = torch.sort(x, dim=-1, descending=True, stable=True)  # ties: lower id first
    v = x.shape[-1]
    keep = v if top_k == 0 else min(top_k, v)
    rank = torch.arange(v, device=x.device)  # [V]
    probs = torch.exp(vals - vals[:, :1]).masked_fill(rank >= keep, 0.0)
    probs = probs / probs.sum(-1, keepdim=True)
    # the nucleus cut applies at top_p = 1 too: a tail of total mass < 1e-12 is dropped (reference)
    cum = torch.cumsum(probs, dim=-1)
    cut = (cum < top_p * (1 - 1e-12)).sum(-1, keepdim=True) + 1  # [B, 1]
    n_keep = cut.clamp(1, keep)
    probs = probs.masked_fill(rank >= n_keep, 0.0)
    probs = probs / probs.sum(-1, keepdim=True)
    return probs, ids


def sample_next(
    logits: Tensor,
    generator: torch.Generator | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Tensor:
    """Next token ids [B] (int64) from last-position logits [B, V]."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return torch.argmax(logits, dim=-1)  # the model already refused non-finite activations
    if generator is None:
        raise ValueError("sampling with temperature > 0 needs a seeded torch.Generator")
    probs, ids = sampling_distribution(logits, temperature, top_k, top_p)
    rank = torch.multinomial(probs, 1, generator=generator)  # [B, 1]
    return ids.gather(-1, rank)[:, 0]


__all__ = ["check_sampling", "sample_next", "sampling_distribution"]
