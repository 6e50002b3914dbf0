"""Torch kernels for PLGA and the PLDR-LLM decoder (needs the ``torch`` extra).

:mod:`.functional` holds the attention and operator-chain kernels, :mod:`.model` the
``PLDRModel`` with upstream state-dict names, caches and generation, :mod:`.sampling` the
next-token rules, :mod:`.testing` the tolerance policy used by the tests. CUDA is only
queried when a tensor is placed there, never at import.
"""

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
    CollapseReport,
    DecodeCache,
    GenerationOutput,
    LoglikOutput,
    ModelOutput,
    PLDRModel,
    random_G,
)
from .sampling import sample_next, sampling_distribution

__all__ = [
    "COLLAPSED_KEY", "MODES", "CollapseReport", "DecodeCache", "GenerationOutput", "LoglikOutput",
    "ModelOutput", "PLDRModel", "apply_g", "apply_rope", "attention_support", "dag_loss",
    "density_operator", "metric_learner", "operator_chain", "plga_attention", "plga_attention_eager",
    "plga_scores", "power_stage", "random_G", "rope_tables", "sample_next", "sampling_distribution",
]
