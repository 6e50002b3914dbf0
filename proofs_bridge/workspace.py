"""The Lake workspace gate: what ``lake build`` in ``formal/`` would trip over, checked without Lean.

No Lean toolchain runs in this project's CI, so these checks read the files Lake reads and
apply Lake's own rules to them:

* ``lean-toolchain`` ↔ ``lakefile.toml`` ↔ ``lake-manifest.json``: every ``[[require]]`` has a
  manifest entry with the same URL and the same commit (``rev`` and ``inputRev``), no direct
  manifest entry lacks a ``[[require]]``, and the manifest's ``Cli`` tag is the toolchain's
  release (the published formalization's pins move together);
* manifest package names are Lean *name literals*: Lake decodes them with ``String.toName``,
  which returns the anonymous name when a component is not an identifier (a hyphen ends one),
  and then aborts with "expected a `Name`". Such names must be written escaped,
  ``«PLDR-LLM-Math-Foundations»`` (what Lake itself writes for a TOML name that is no
  identifier: ``stringToLegalOrSimpleName`` makes it one simple name, printed escaped);
* every ``import`` resolves to a file of ``formal/`` or to a module recorded for a pinned
  dependency in ``formal/dependencies.json`` at that dependency's pinned ``rev``;
* the forbidden tokens of :data:`.parser.FORBIDDEN` (proof escapes, unchecked code, kernel
  switches) appear nowhere, comments included.

Each function returns a list of problems (empty: green).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import DataFileError, UsageError
from .parser import forbidden_in, read_lean_source

DEPENDENCIES = "dependencies.json"
_TOOLCHAIN_RE = re.compile(r"leanprover/lean4:(v\d+\.\d+\.\d+(?:-rc\d+)?)")
_REV_RE = re.compile(r"[0-9a-f]{40}")
_IMPORT_RE = re.compile(r"^import\s+(\S+)\s*$", re.MULTILINE)


# --- Lean names (Lean's Init/Meta: isIdFirst, isIdRest, splitNameLit) ----------------------


def _letter_like(c: str) -> bool:
    o = ord(c)
    return ((0x3B1 <= o <= 0x3C9 and o != 0x3BB) or (0x391 <= o <= 0x3A9 and o not in (0x3A0, 0x3A3))
            or 0x3CA <= o <= 0x3FB or 0x1F00 <= o <= 0x1FFE or 0x2100 <= o <= 0x214F or 0x1D49C <= o <= 0x1D59F)


def _id_first(c: str) -> bool:
    return (c.isascii() and c.isalpha()) or c == "_" or _letter_like(c)


def _id_rest(c: str) -> bool:
    return _id_first(c) or (c.isascii() and c.isdigit()) or c in "'!?" or 0x2080 <= ord(c) <= 0x209C \
        or 0x1D62 <= ord(c) <= 0x1D6A or c == "ⱼ"


def is_name_literal(s: str) -> bool:
    """Whether Lean's ``String.toName`` decodes ``s`` to a non-anonymous name: dot-separated
    components, each an identifier, a number, or ``«…»`` (any text without ``»``)."""
    if not s:
        return False
    i, n = 0, len(s)
    while True:
        if s[i] == "«":
            j = s.find("»", i + 1)
            if j < 0:
                return False
            i = j + 1
        elif s[i].isascii() and s[i].isdigit():
            while i < n and s[i].isascii() and s[i].isdigit():
                i += 1
        elif _id_first(s[i]):
            i += 1
            while i < n and _id_rest(s[i]):
                i += 1
        else:
            return False
        if i == n:
            return True
        if s[i] != "." or i + 1 == n:
            return False
        i += 1


def lake_package_name(toml_name: str) -> str:
    """The name Lake gives a package declared ``name = "…"`` in TOML, as a name literal:
    unchanged when it is one, else one simple name, escaped (``Name.toString``)."""
    return toml_name if is_name_literal(toml_name) else f"«{toml_name}»"


# --- loading ---------------------------------------------------------------------------------


def _load(root: Path) -> tuple[dict[str, Any], dict[str, Any], str, dict[str, Any]]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise UsageError("the Lake workspace gate reads lakefile.toml with tomllib: it needs Python ≥ 3.11") from None

    def read(name: str) -> str:
        return read_lean_source(root / name, name)

    try:
        lakefile = tomllib.loads(read("lakefile.toml"))
        manifest = json.loads(read("lake-manifest.json"))
        deps = json.loads(read(DEPENDENCIES))
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(f"{root}: a Lake configuration file does not parse: {exc}") from None
    return lakefile, manifest, read("lean-toolchain").strip(), deps


def check_pins(root: Path) -> list[str]:
    """lean-toolchain ↔ lakefile.toml ↔ lake-manifest.json ↔ dependencies.json, and legal names."""
    lakefile, manifest, toolchain, deps = _load(root)
    problems: list[str] = []
    m = _TOOLCHAIN_RE.fullmatch(toolchain)
    if not m:
        problems.append(f"lean-toolchain: {toolchain!r} is not one 'leanprover/lean4:vX.Y.Z[-rcN]' line")
    if not is_name_literal(str(manifest.get("name", ""))):
        problems.append(f"lake-manifest.json: project name {manifest.get('name')!r} is not a Lean name literal")
    if manifest.get("name") != lake_package_name(str(lakefile.get("name", ""))):
        problems.append(f"lake-manifest.json: project name {manifest.get('name')!r} ≠ lakefile name {lakefile.get('name')!r}")
    entries = {}
    for e in manifest.get("packages", []):
        name = str(e.get("name", ""))
        if not is_name_literal(name):
            problems.append(f"lake-manifest.json: package name {name!r} is not a Lean name literal "
                            f"(Lake stops with \"expected a `Name`\"); write it escaped, «{name}»")
        entries[name] = e
    required = set()
    for req in lakefile.get("require", []):
        name, want = str(req.get("name", "")), lake_package_name(str(req.get("name", "")))
        required.add(want)
        rev = str(req.get("rev", ""))
        if not _REV_RE.fullmatch(rev):
            problems.append(f"lakefile.toml: require {name!r} is not pinned to a 40-hex commit (rev {rev!r})")
        e = entries.get(want)
        if e is None:
            problems.append(f"lake-manifest.json: no package {want!r} for the lakefile's require {name!r}")
            continue
        if e.get("url") != req.get("git"):
            problems.append(f"{want}: manifest url {e.get('url')!r} ≠ lakefile git {req.get('git')!r}")
        if e.get("rev") != rev or e.get("inputRev") != rev:
            problems.append(f"{want}: manifest rev/inputRev {e.get('rev')!r}/{e.get('inputRev')!r} ≠ lakefile rev {rev!r}")
        if e.get("inherited") is not False:
            problems.append(f"{want}: a direct requirement must have \"inherited\": false in the manifest")
        d = deps.get(name)
        if d is None:
            problems.append(f"{DEPENDENCIES}: no module list for the requirement {name!r}")
        elif d.get("rev") != rev:
            problems.append(f"{DEPENDENCIES}: {name!r} recorded at {d.get('rev')!r}, pinned at {rev!r}: re-record its modules")
    for name, e in entries.items():
        if e.get("inherited") is False and name not in required:
            problems.append(f"lake-manifest.json: direct package {name!r} has no [[require]] in lakefile.toml")
    cli = entries.get("Cli")
    if m and cli is not None and str(cli.get("inputRev", "")).startswith("v") and cli["inputRev"] != m.group(1):
        problems.append(f"lake-manifest.json: Cli is tagged {cli['inputRev']!r} but lean-toolchain is {m.group(1)!r}")
    return problems


def lean_sources(root: Path) -> dict[str, str]:
    """``Plga.lean`` and ``Plga/**/*.lean`` relative path → text (each read with the size cap)."""
    files = [root / "Plga.lean", *sorted((root / "Plga").rglob("*.lean"))]
    return {str(p.relative_to(root)): read_lean_source(p, str(p.relative_to(root))) for p in files if p.exists() or p.is_symlink()}


def check_imports(root: Path, sources: dict[str, str] | None = None) -> list[str]:
    """Every ``import`` names a file of formal/ or a module recorded for a pinned dependency."""
    sources = lean_sources(root) if sources is None else sources
    deps = json.loads(read_lean_source(root / DEPENDENCIES, DEPENDENCIES))
    external = {mod for name, d in deps.items() if not name.startswith("_") for mod in d.get("modules", [])}
    problems = []
    for rel, text in sources.items():
        for m in _IMPORT_RE.finditer(text):
            mod = m.group(1)
            if mod == "Plga" or mod.startswith("Plga."):
                if not (root / (mod.replace(".", "/") + ".lean")).is_file():
                    problems.append(f"{rel}: import {mod}: no file {mod.replace('.', '/')}.lean in formal/")
            elif mod not in external:
                problems.append(f"{rel}: import {mod}: not a module of a pinned dependency ({DEPENDENCIES})")
    return problems


def check_forbidden(root: Path, sources: dict[str, str] | None = None) -> list[str]:
    """``file:line: forbidden token`` for every proof escape anywhere in formal/'s Lean files."""
    sources = lean_sources(root) if sources is None else sources
    return [f"{rel}:{text.count(chr(10), 0, pos) + 1}: forbidden {tok!r}"
            for rel, text in sources.items() for pos, tok in forbidden_in(text)]


def check_workspace(root: Path | str | None = None) -> dict[str, list[str]]:
    """All workspace gates of one formal/ tree."""
    from .catalog import formal_dir

    root = Path(root) if root is not None else formal_dir()
    sources = lean_sources(root)
    return {
        "pins (toolchain ↔ lakefile ↔ manifest)": check_pins(root),
        "imports": check_imports(root, sources),
        "forbidden tokens": check_forbidden(root, sources),
    }
