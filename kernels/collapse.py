"""Collapse statistics: the constant operator G* and how far each prompt's G_LM is from it.

Inference collapse (paper Thm. 5.4; Lean ``inference_collapse``): when the operator
``G_LM(x)`` no longer depends on the input x, the metric learner can be replaced by one cached
operator per layer and head, and attention becomes SDPA on ``q' = RoPE(q) G*``. G* is
estimated as the mean of ``G_LM`` over prompts; the spread is the relative fluctuation
``‖G(x) − G*‖_F / ‖G*‖_F`` per prompt, layer and head (docs/spec.md §4).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor


@dataclasses.dataclass
class CollapseReport:
    """Relative fluctuation ‖G(x) − G*‖_F / ‖G*‖_F of G_LM over the prompts."""

    G_star: Tensor  # [L, H, d, d] mean operator
    fluctuation: Tensor  # [N, L, H]
    max_per_head: Tensor  # [L, H]
    median_per_head: Tensor  # [L, H]

    @property
    def max(self) -> float:
        return float(self.fluctuation.max()) if self.fluctuation.numel() else 0.0


def collapse_statistics(operators: Tensor) -> CollapseReport:
    """G* and the spread from per-prompt operators ``operators`` [N, L, H, d, d]."""
    g_star = operators.mean(0)  # [L, H, d, d]
    fluct = torch.linalg.matrix_norm(operators - g_star) / torch.linalg.matrix_norm(g_star)  # [N, L, H]
    return CollapseReport(
        G_star=g_star, fluctuation=fluct, max_per_head=fluct.amax(0), median_per_head=fluct.median(0).values
    )


__all__ = ["CollapseReport", "collapse_statistics"]
