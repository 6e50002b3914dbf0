"""``plga audit``: is a PLDR-LLM's G_LM collapsed? The paper's measurements, a verdict, figures.

:func:`run_audit` collects raw per-instance arrays from a model (float64 reference backend
by default, torch optionally) and writes ``audit.json``, ``audit_raw.npz``, ``summary.md`` and
figures; :func:`summarize` derives every reported number from the raw arrays, and
:func:`verdict` the verdict (collapsed / not collapsed / inconclusive) from the summary;
:mod:`plga.audit.stats` holds one pure NumPy function per statistic, named after the published
audit's fields. :func:`audit_operators` audits constant operators such as a trained G_LM.
``--collapse`` writes the collapsed checkpoint in the project's one collapsed format
(:func:`write_collapsed`). Definitions, the verdict rule and published values: ``docs/audit.md``.

Modules: ``interface`` (the backend protocol), ``backend`` (reference backend, the choice),
``torch_backend``, ``model`` (built-in model, prompts), ``runner`` (measurements), ``stats``,
``summary``, ``verdict``, ``report`` (Markdown), ``figures`` (PNG), ``collapsed``, ``cli``.
"""

from . import stats
from .collapsed import write_collapsed
from .runner import QUICK, AuditSizes, audit_operators, run_audit, run_operator_audit
from .summary import jsonable, summarize
from .verdict import THRESHOLDS, Thresholds, verdict

__all__ = [
    "QUICK", "THRESHOLDS", "AuditSizes", "Thresholds", "audit_operators", "jsonable", "run_audit",
    "run_operator_audit", "stats", "summarize", "verdict", "write_collapsed",
]
