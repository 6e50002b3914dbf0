"""``plga audit``: measure inference collapse, cache fidelity and operator structure of a PLDR-LLM.

:func:`run_audit` collects raw per-instance arrays from a model (float64 reference backend
by default, torch optionally) and writes ``audit.json``, ``audit_raw.npz``, ``summary.md`` and
plots; :func:`summarize` derives every reported number from the raw arrays (used by the command
and by the tests); :mod:`plga.audit.stats` holds one pure NumPy function per statistic, named
after the published audit's fields (``shared/FORMAL_CATALOG.md`` §3–5). :func:`audit_operators`
audits constant operators such as a trained G_LM. ``--collapse`` writes the collapsed
checkpoint in the project's one collapsed format (:func:`write_collapsed`, through
:func:`plga.reference.checkpoint.save_safetensors`), which
:func:`plga.reference.checkpoint.load_collapsed` and ``plga.kernels.PLDRModel.from_pretrained``
load.
"""

from . import stats
from .collapsed import write_collapsed
from .runner import AuditSizes, audit_operators, run_audit, run_operator_audit
from .summary import jsonable, summarize

__all__ = [
    "AuditSizes", "audit_operators", "jsonable", "run_audit", "run_operator_audit", "stats",
    "summarize", "write_collapsed",
]
