"""Torch kernels for PLGA and the PLDR-LLM decoder (needs the ``torch`` extra).

:mod:`.functional` holds the attention and operator-chain kernels (the functions the
conformance suite certifies), :mod:`.modules` the ``nn.Module`` tree with upstream names,
:mod:`.model` ``PLDRModel`` (forward, cached steps, generation), :mod:`.packed` the packed
weight copies of the fused inference path, :mod:`.gemm` the GEMM their prefill products and the
metric learner run on, :mod:`.collapse` the collapse statistics and
:mod:`.finite` the deferred finiteness checks. Sampling follows the one specification in
:mod:`plga.reference.sampling`. CUDA is only queried when a tensor is placed there, never at
import.
"""

from .collapse import CollapseReport, collapse_statistics
from .functional import (
    apply_g,
    apply_rope,
    attention_support,
    dag_loss,
    density_operator,
    metric_learner,
    operator_chain,
    plga_attention,
    plga_attention_eager,
    plga_scores,
    power_stage,
    rope_tables,
)
from .model import (
    COLLAPSED_KEY,
    MODES,
    DecodeCache,
    GenerationOutput,
    LoglikOutput,
    ModelOutput,
    PLDRModel,
    random_G,
)

__all__ = [
    "COLLAPSED_KEY", "MODES", "CollapseReport", "DecodeCache", "GenerationOutput", "LoglikOutput",
    "ModelOutput", "PLDRModel", "apply_g", "apply_rope", "attention_support", "collapse_statistics", "dag_loss",
    "density_operator", "metric_learner", "operator_chain", "plga_attention", "plga_attention_eager",
    "plga_scores", "power_stage", "random_G", "rope_tables",
]
