"""Operator-chain controls: the chain computed from the layer weights with one bug."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from .. import eager as eg
from ..adapter import Adapter


class ChainControl(Adapter):
    """``operator_chain`` only (float32, float64), with ``bug`` in ``first_dense_block_only`` |
    ``bias_accumulated``."""

    dtypes = ("float32", "float64")
    capabilities = frozenset({"operator_chain"})

    def __init__(self, name: str, bug: str) -> None:
        self.name, self.bug, self.version = name, bug, "control"

    def operator_chain(self, q_rot: Tensor, layer_weights: Mapping[str, Any]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        w = dict(layer_weights)
        if self.bug == "first_dense_block_only":
            w["units"] = [(blocks[:1], g, b) for blocks, g, b in w["units"]]
        cw = eg.cast_layer_weights(w, q_rot.dtype, q_rot.device)
        A = eg.metric_learner(eg.density_operator(q_rot), cw)
        a_lm, a_p, g_lm = eg.power_stage(A, cw["W"], cw["b"], cw["P"], cw["a"], cw["b_a"])
        if self.bug == "bias_accumulated":
            b_a = layer_weights["b_a"]
            g_lm = b_a.add_((cw["a"] @ a_p).to(b_a.dtype))  # G_LM accumulated into the bias buffer
        return A, a_lm, a_p, g_lm


__all__ = ["ChainControl"]
