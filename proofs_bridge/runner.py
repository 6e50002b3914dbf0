"""Run every check of the catalog and render the results (the API behind ``plga theorems``)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from ..progress import progress
from . import concrete  # noqa: F401  (registers the concrete-decoder checks)
from .catalog import Catalog, Entry
from .derived import run_derived
from .elaborate import Outside
from .handwritten import EVIDENCE, HANDWRITTEN, CheckFailure, Ctx
from .library import implementations, load_sigs
from .parser import forbidden_in
from .statement import Statement
from .symbolic import prove

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
NOT_KERNEL_CHECKED = "not kernel-checked (no Lean toolchain here; run lake build)"


@dataclass
class CheckResult:
    """Outcome of one theorem's check."""

    name: str
    paper: str | None
    kind: str  # derived | handwritten | none
    symbolic: str  # proved | not proved | n/a
    status: str  # pass | fail | error
    examples: int
    worst_error: float
    message: str
    kernel: str = ""  # what the Lean side says (proof present / forbidden token)
    file: str = ""
    line: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not math.isfinite(d["worst_error"]):
            d["worst_error"] = None
        return d


class Bridge:
    """Catalog + signatures + statements of one formal/ tree (built once, reused)."""

    def __init__(self, root: Path | str | None = None):
        self.catalog = Catalog.load(root)
        self.sigs = load_sigs(self.catalog.declarations)
        self.impls = implementations(self.sigs)
        self._stmts: dict[str, Statement | Outside] = {}

    def statement(self, entry: Entry) -> Statement:
        """The derived statement of a theorem, or raise :class:`Outside`."""
        got = self._stmts.get(entry.name)
        if got is None:
            try:
                got = Statement.build(entry.name, entry.decl.binders, entry.decl.header.type, self.sigs)
            except Outside as exc:
                got = exc
            self._stmts[entry.name] = got
        if isinstance(got, Outside):
            raise got
        return got

    def kind(self, entry: Entry) -> str:
        """The evidence a check gives: ``derived`` when the statement is in the fragment, else the
        registered check's evidence (``handwritten`` or ``concrete-decoder``), else ``none``."""
        try:
            self.statement(entry)
            return "derived"
        except Outside:
            return EVIDENCE.get(entry.name, "none")

    def kernel(self, entry: Entry) -> str:
        """What the Lean side offers: a proof that uses an escape (``by exact (sorry)`` and every
        other spelling :func:`.parser.forbidden_in` knows), or a proof no kernel has checked."""
        bad = sorted({tok for _, tok in forbidden_in(entry.decl.body)})
        return f"forbidden: {', '.join(bad)}" if bad else NOT_KERNEL_CHECKED


def check_one(bridge: Bridge, entry: Entry, max_examples: int = 25, dps: int = 50, symbolic: bool = True) -> CheckResult:
    """Run the one check of ``entry``; a proof that uses a forbidden escape fails whatever the check says."""
    r = _run_check(bridge, entry, max_examples, dps, symbolic)
    if r.kernel.startswith("forbidden"):
        r.status = "fail"
        r.message = f"the Lean proof uses an escape ({r.kernel}); " + r.message
    return r


def _run_check(bridge: Bridge, entry: Entry, max_examples: int, dps: int, symbolic: bool) -> CheckResult:
    kind = bridge.kind(entry)
    base = dict(name=entry.name, paper=entry.paper, kernel=bridge.kernel(entry), file=entry.file, line=entry.line)
    if kind == "derived":
        stmt = bridge.statement(entry)
        out = run_derived(stmt, bridge.impls, max_examples=max_examples, dps=dps)
        sym = prove(stmt, bridge.impls) if symbolic else None
        sym_status = sym.status if sym else "n/a"
        msg = out.message
        if sym is not None and sym.status == "not proved":
            msg = (msg + "; " if msg else "") + f"symbolic: {sym.message}"
        return CheckResult(kind="derived", symbolic=sym_status, status=out.status, examples=out.examples,
                           worst_error=out.worst_error, message=msg, **base)
    if entry.name in HANDWRITTEN:
        try:
            r = HANDWRITTEN[entry.name](Ctx(max_examples=max_examples, dps=dps))
            return CheckResult(kind=kind, symbolic="n/a", status="pass", examples=r.examples,
                               worst_error=r.worst_error, message=r.message, **base)
        except CheckFailure as exc:
            return CheckResult(kind=kind, symbolic="n/a", status="fail", examples=0, worst_error=math.nan,
                               message=str(exc), **base)
        except (ArithmeticError, ValueError, TypeError, KeyError, IndexError) as exc:
            return CheckResult(kind=kind, symbolic="n/a", status="error", examples=0, worst_error=math.nan,
                               message=f"{type(exc).__name__}: {exc}", **base)
    try:
        bridge.statement(entry)
        reason = ""
    except Outside as exc:
        reason = str(exc)
    return CheckResult(kind="none", symbolic="n/a", status="error", examples=0, worst_error=math.nan,
                       message=f"no check: outside the derived fragment ({reason}) and no @check registered", **base)


def run_all(max_examples: int = 25, dps: int = 50, root: Path | str | None = None, symbolic: bool = True,
            names: list[str] | None = None, show_progress: bool = False) -> list[CheckResult]:
    """Check every theorem of formal/ (or only ``names``) and return the results.

    An unknown name raises :class:`InputError` naming it; a progress bar goes to stderr when
    ``show_progress`` and :mod:`plga.progress` allow it.
    """
    bridge = Bridge(root)
    theorems = bridge.catalog.theorems()
    if names:
        unknown = sorted(set(names) - {e.name for e in theorems})
        if unknown:
            raise InputError(f"unknown theorem(s): {', '.join(unknown)} (`plga theorems` with no names checks all "
                             f"{len(theorems)}; their names are in the README's 'What is formalized' table)")
        theorems = [e for e in theorems if e.name in names]
    return [check_one(bridge, e, max_examples=max_examples, dps=dps, symbolic=symbolic)
            for e in progress(theorems, "theorem checks", show=show_progress)]


def theorems_command(names: list[str], *, as_json: bool = False, max_examples: int = 25, dps: int = 50,
                     symbolic: bool = True, root: Path | str | None = None, readme_table: bool = False,
                     show_progress: bool = True) -> int:
    """``plga theorems`` and ``python -m plga.proofs_bridge theorems``: one code path.

    Prints the results table (or JSON) and returns 0 when every check passed, 1 otherwise. A
    usage mistake (unknown theorem, bad option, no Lean tree) raises a :class:`PlgaError`.
    """
    if readme_table:
        print(render_formalized_table(root))
        return 0
    if max_examples < 1 or not 16 <= dps <= 1000:
        raise UsageError("--max-examples must be ≥ 1 and --dps in [16, 1000]")
    if root is not None and not (Path(root) / "Plga").is_dir():
        raise UsageError(f"--formal-dir {root} holds no Plga/ folder of Lean files")
    results = run_all(max_examples=max_examples, dps=dps, root=root, symbolic=symbolic, names=names or None,
                      show_progress=show_progress)
    if not results:
        raise UsageError("no theorem was found to check: refusing a vacuous success")
    if as_json:
        print(json.dumps({"summary": summary(results), "results": [r.to_json() for r in results]},
                         indent=2, ensure_ascii=False))
    else:
        print(render_table(results))
    return 0 if all(r.status == "pass" for r in results) else 1


def summary(results: list[CheckResult]) -> dict[str, Any]:
    n = len(results)
    derived = sum(r.kind == "derived" for r in results)
    attempted = sum(r.symbolic in ("proved", "not proved") for r in results)
    proved = sum(r.symbolic == "proved" for r in results)
    return {
        "theorems": n,
        "passed": sum(r.status == "pass" for r in results),
        "failed": sum(r.status == "fail" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "derived": derived,
        "derived_fraction": derived / n if n else 0.0,
        "algebraic_identities": attempted,
        "proved_symbolically": proved,
        "handwritten": sum(r.kind == "handwritten" for r in results),
        "concrete_decoder": sum(r.kind == "concrete-decoder" for r in results),
        "forbidden_in_proof": sum(r.kernel.startswith("forbidden") for r in results),
        "kernel_checked": 0,  # no Lean toolchain runs here; `lake build` in formal/ is the only kernel check
    }


def render_table(results: list[CheckResult]) -> str:
    """Markdown table of the results plus the derived and symbolic fractions."""
    lines = ["| theorem | paper result | check | symbolic | status | examples | worst error |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        worst = "—" if not math.isfinite(r.worst_error) else f"{r.worst_error:.2g}"
        lines.append(f"| `{r.name}` | {r.paper or '—'} | {r.kind} | {r.symbolic} | {r.status} | {r.examples} | {worst} |")
    s = summary(results)
    pct = 100 * s["derived_fraction"]
    lines.append("")
    lines.append(f"derived: {s['derived']}/{s['theorems']} ({pct:.0f}%)")
    lines.append(f"algebraic identities proved symbolically: {s['proved_symbolically']}/{s['algebraic_identities']}")
    lines.append(f"evidence: {s['derived']} derived from the statement, {s['proved_symbolically']} of them also "
                 f"symbolic; {s['handwritten']} hand-written; {s['concrete_decoder']} on the concrete reference decoder")
    lines.append(f"status: {s['passed']} pass, {s['failed']} fail, {s['errors']} error; kernel-checked: 0/"
                 f"{s['theorems']} (not compiled: no Lean toolchain in this project's CI; `lake build` in formal/ does it)")
    bad = [r for r in results if r.status != "pass"]
    for r in bad:
        lines.append(f"- `{r.name}` ({r.status}): {r.message}")
    return "\n".join(lines)


def render_formalized_table(root: Path | str | None = None) -> str:
    """The README's "What is formalized" table: File | Paper result | Theorems | Python check."""
    bridge = Bridge(root)
    rows: dict[str, dict[str, Any]] = {}
    for e in bridge.catalog.theorems():
        r = rows.setdefault(e.file, {"papers": [], "names": [], "kinds": {}})
        if e.paper and e.paper not in r["papers"]:
            r["papers"].append(e.paper)
        r["names"].append(e.name)
        k = bridge.kind(e)
        r["kinds"][k] = r["kinds"].get(k, 0) + 1
    lines = ["| File | Paper result | Theorems | Python check |", "|---|---|---|---|"]
    for file, r in rows.items():
        papers = "; ".join(p for p in r["papers"] if p != "new") or "new"
        if "new" in r["papers"] and papers != "new":
            papers += "; new"
        names = ", ".join(f"`{n}`" for n in r["names"])
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(r["kinds"].items()))
        lines.append(f"| `{file}` | {papers} | {names} | {kinds} (`python -m plga.proofs_bridge theorems`) |")
    return "\n".join(lines)


# --- manifest -------------------------------------------------------------------------------


def load_manifest(path: Path = MANIFEST_PATH) -> dict[str, dict[str, str]]:
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def approve(names: list[str] | None, path: Path = MANIFEST_PATH, root: Path | str | None = None) -> list[str]:
    """Record the current fingerprint and check kind of ``names`` (all theorems when None)."""
    bridge = Bridge(root)
    manifest = load_manifest(path)
    done = []
    for e in bridge.catalog.theorems():
        if names is None or e.name in names:
            manifest[e.name] = {"fingerprint": e.fingerprint, "check": bridge.kind(e)}
            done.append(e.name)
    missing = set(names or []) - set(done)
    if missing:
        raise InputError(f"unknown theorem(s): {', '.join(sorted(missing))}")
    if names is None:  # --all also drops entries of deleted theorems
        manifest = {k: v for k, v in manifest.items() if k in done}
    path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return done
