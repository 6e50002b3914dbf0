"""docs/spec.md, the project's mathematical contract, stays tied to the code it specifies.

Every check is a function of the document's text that returns the problems it finds. Each test
asserts that the real document has none, and — the negative control — that a mutated copy
of the document (a wrong constant, a wrong shape, a missing key, an unknown Lean name, a link
to the private planning folder, a lost section) is caught.
"""

from __future__ import annotations

import importlib
import itertools
import re
from collections.abc import Iterable, Mapping

import pytest

from plga.reference import spec
from plga.reference.checkpoint import (
    COLLAPSED_KEY,
    LEARNER_MARKERS,
    collapsed_shapes,
    expected_count,
    expected_shapes,
)
from plga.reference.config import HF_FIELDS, PRESETS, UPSTREAM_KEYS, PLDRConfig
from plga.reference.numerics import float32_sqrt

from .conftest import REPO

DOC = REPO / "docs" / "spec.md"

#: A configuration whose every size is distinct, so a documented shape that swaps two sizes
#: (e.g. ``[d, A_dff]`` for ``[A_dff, d]``) or a placeholder ranging over the wrong count fails.
PROBE = PLDRConfig(
    num_layers=3, d_model=20, num_heads=2, dff=14, A_dff=6, num_reslayerA=4, num_denseA=5,
    input_vocab_size=11, max_seq_len=16,
)

#: The code's values of the constants the document tabulates (§2.7).
CONSTANTS = {"EPSILON_ADJ": spec.EPSILON_ADJ, "LAYER_NORM_EPS": spec.LAYER_NORM_EPS, "MASK_FILL": spec.MASK_FILL}

#: The section numbers of the contract the code cites (the planning document's numbering).
SKELETON = ("1", *(f"1.{n}" for n in range(1, 9)), "2", "3", "4", "5")

#: Placeholders of the key patterns and the configuration count each ranges over.
PLACEHOLDERS = {"{i}": "num_layers", "{j}": "num_reslayerA", "{k}": "num_denseA"}

#: Text that would send a reader to the planning folder outside the repository (spelled from
#: parts, so that this file does not itself hold the links a repository-wide scan looks for).
_OUTSIDE = "shared"
FORBIDDEN = (
    f"../{_OUTSIDE}", f"/work/{_OUTSIDE}", *(f"{_OUTSIDE}/{name}" for name in ("SPEC", "IMPLEMENTATIONS", "FORMAL_CATALOG", "data")),
    "SPEC.md",
)


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def mutate(text: str, old: str, new: str) -> str:
    """``text`` with its one occurrence of ``old`` replaced (a control that cannot be a no-op)."""
    assert text.count(old) == 1, f"the negative control expects exactly one {old!r} in the document"
    return text.replace(old, new)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row, stripped."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.lstrip().startswith("|") and not set(line.strip()) <= set("|-: ")
    ]


def ticked(cell: str) -> str | None:
    """The content of a cell that is one backticked literal, else None."""
    m = re.fullmatch(r"`([^`]+)`", cell)
    return m.group(1) if m else None


# --- constants (§2.7) ---------------------------------------------------------------------------


def check_constants(text: str, code: Mapping[str, float] = CONSTANTS) -> list[str]:
    documented = {ticked(r[0]): ticked(r[1]) for r in table_rows(text) if len(r) >= 2 and ticked(r[0]) in code}
    problems = [f"constant {name} is not in the constants table" for name in code if name not in documented]
    for name, value in documented.items():
        try:
            ok = value is not None and float(value) == code[name]
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"constant {name}: the document says {value!r}, the code has {code[name]!r}")
    return problems


def test_constants_match_the_reference(doc):
    assert check_constants(doc) == []
    assert check_constants(mutate(doc, "| `EPSILON_ADJ` | `1e-9` |", "| `EPSILON_ADJ` | `1e-8` |"))
    assert check_constants(mutate(doc, "| `MASK_FILL` | `-1e9` |", "| `MASK_FILL` | `-1e4` |"))
    assert check_constants(mutate(doc, "| `LAYER_NORM_EPS` | `1e-6` |", "| `LAYER_NORM_EPS_` | `1e-6` |"))


def test_constants_match_the_kernels(doc):
    """The kernels carry their own copies of the constants; they must say what the document says."""
    pytest.importorskip("torch")
    from plga.kernels import functional as kf

    kernel_values = {"EPSILON_ADJ": kf.EPSILON_ADJ, "LAYER_NORM_EPS": kf.LAYER_NORM_EPS, "MASK_FILL": kf.MASK_FILL}
    assert check_constants(doc, kernel_values) == []
    assert check_constants(doc, kernel_values | {"MASK_FILL": -1e4})


def check_float32_roots(text: str) -> list[str]:
    rows = [(re.fullmatch(r"fl32\(√(\d+)\)", ticked(r[0]) or ""), ticked(r[1])) for r in table_rows(text) if len(r) >= 2]
    roots = {int(m.group(1)): value for m, value in rows if m}
    problems = [] if 896 in roots else ["the rounded-root table lacks fl32(√896), the 110M embedding scale"]
    for n, value in roots.items():
        if value is None or float(value) != float32_sqrt(n):
            problems.append(f"fl32(√{n}): the document says {value!r}, float32 gives {float32_sqrt(n)!r}")
    return problems


def test_float32_roots_are_the_float32_roundings(doc):
    assert check_float32_roots(doc) == []
    assert check_float32_roots(mutate(doc, "`29.933259963989258`", "`29.933259094191531`"))  # the exact root
    assert check_float32_roots(mutate(doc, "| `fl32(√896)` |", "| `fl32(√897)` |"))


# --- state-dict keys (§2.5, §3.8) ----------------------------------------------------------------


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(key pattern, shape) of every table row whose first cell is a backticked state-dict key."""
    out = []
    for row in table_rows(text):
        key = ticked(row[0])
        if key and re.fullmatch(r"(decoder|final_layer)\.[\w.{}]+", key) and len(row) >= 2:
            out.append((key, ticked(row[1]) or row[1]))
    return out


def shape_of(expr: str, config: PLDRConfig) -> tuple[int, ...] | None:
    """``[d_model, d]`` → the sizes of ``config``; None for anything that is not such a list."""
    sizes = {k: getattr(config, k) for k in UPSTREAM_KEYS} | {"d": config.depth}
    m = re.fullmatch(r"\[(.*)\]", expr)
    if not m:
        return None
    names = [n.strip() for n in m.group(1).split(",")]
    return tuple(sizes[n] for n in names) if all(n in sizes for n in names) else None


def expand(pattern: str, config: PLDRConfig) -> list[str] | None:
    """Every key a pattern stands for; None when it uses an unknown placeholder."""
    used = re.findall(r"\{[^}]*\}", pattern)
    if any(p not in PLACEHOLDERS for p in used):
        return None
    names = sorted(set(used))
    ranges = [range(getattr(config, PLACEHOLDERS[p])) for p in names]
    keys = []
    for values in itertools.product(*ranges):
        key = pattern
        for name, value in zip(names, values, strict=True):
            key = key.replace(name, str(value))
        keys.append(key)
    return keys


def family(key: str) -> str:
    """The pattern of a concrete key: its layer, unit and block indices back to placeholders."""
    for name, fragment in (("{i}", "dec_layers."), ("{j}", "reslayerAs."), ("{k}", "denseAs.")):
        key = re.sub(re.escape(fragment) + r"\d+", fragment + name, key)
    return key


def check_state_dict_keys(text: str, config: PLDRConfig = PROBE) -> list[str]:
    want = expected_shapes(config)
    problems: list[str] = []
    seen: set[str] = set()
    rows = documented_keys(text)
    for pattern, shape_expr in rows:
        if pattern == COLLAPSED_KEY:
            continue
        keys = expand(pattern, config)
        if keys is None:
            problems.append(f"{pattern}: unknown placeholder (use {', '.join(PLACEHOLDERS)})")
            continue
        shape = shape_of(shape_expr, config)
        if shape is None:
            problems.append(f"{pattern}: shape {shape_expr!r} is not a list of configuration sizes")
        if seen & set(keys):
            problems.append(f"{pattern} repeats keys documented by an earlier row")
        seen |= set(keys)
        unknown = [k for k in keys if k not in want]
        if unknown:
            problems.append(f"{pattern} is documented but {unknown[0]} is not a key of a v510 decoder")
        wrong = [k for k in keys if k in want and shape is not None and want[k] != shape]
        if wrong:
            problems.append(f"{pattern}: documented shape {shape_expr} = {shape}, expected_shapes gives {want[wrong[0]]}")
    undocumented = sorted({family(k) for k in set(want) - seen})
    problems += [f"{f} is a key of the decoder but is not documented" for f in undocumented]
    collapsed = [shape_of(s, config) for p, s in rows if p == COLLAPSED_KEY]
    if collapsed != [collapsed_shapes(config)[COLLAPSED_KEY]]:
        problems.append(f"{COLLAPSED_KEY}: documented {collapsed}, collapsed_shapes gives {collapsed_shapes(config)[COLLAPSED_KEY]}")
    problems += [f"the collapsed format does not name the dropped fragment `{m}`" for m in LEARNER_MARKERS if f"`{m}`" not in text]
    count = re.search(r"\((\d[\d,]*) keys for the 110M models\)", text)
    n_110m = expected_count(PLDRConfig.from_name("paper-110m"))
    if not count or int(count.group(1).replace(",", "")) != n_110m:
        problems.append(f"the 110M key count must read ({n_110m} keys for the 110M models)")
    return problems


def test_state_dict_keys_match_expected_shapes(doc):
    assert check_state_dict_keys(doc) == []
    assert check_state_dict_keys(doc, PLDRConfig.from_name("paper-110m")) == []
    learner_w3 = "| `decoder.dec_layers.{i}.mha1.reslayerAs.{j}.denseAs.{k}.gluw3.weight` | `[d, A_dff]` |"
    ffn_w1_bias = "| `decoder.dec_layers.{i}.ffn.gluw1.bias` | `[dff]` | |\n"
    controls = [
        mutate(doc, learner_w3, learner_w3.replace("[d, A_dff]", "[A_dff, d]")),  # transposed
        mutate(doc, ffn_w1_bias, ""),  # a key family left undocumented
        mutate(doc, ffn_w1_bias, ffn_w1_bias + "| `decoder.dec_layers.{i}.ffn.gluw4.bias` | `[dff]` | |\n"),
        mutate(doc, learner_w3, learner_w3.replace(".{k}.", ".{i}.")),  # wrong placeholder
        mutate(doc, "| `decoder.collapsed_G` | `[num_layers, num_heads, d, d]` |",
               "| `decoder.collapsed_G` | `[num_heads, num_layers, d, d]` |"),
        mutate(doc, "`.mha1.plgatt_layer.`", "`plgatt_layer`"),
        mutate(doc, "(690 keys for the 110M models)", "(691 keys for the 110M models)"),
    ]
    for control in controls:
        assert check_state_dict_keys(control), "a mutated key table passed"


# --- configuration fields (§2.1) -----------------------------------------------------------------


def check_config_table(text: str) -> list[str]:
    hf_of = {upstream: hf for hf, upstream in HF_FIELDS.items()}
    paper = PRESETS["paper-110m"]
    rows = {ticked(r[0]): r for r in table_rows(text) if len(r) >= 4 and ticked(r[0]) in UPSTREAM_KEYS}
    problems = [f"configuration field {k} is not in the table" for k in UPSTREAM_KEYS if k not in rows]
    for key, row in rows.items():
        if ticked(row[1]) != hf_of[key]:
            problems.append(f"{key}: the Transformers-port field is {hf_of[key]!r}, the document says {row[1]!r}")
        if row[3] != str(paper[key]):
            problems.append(f"{key}: the released 110M value is {paper[key]}, the document says {row[3]!r}")
    return problems


def test_config_table_matches_the_config_module(doc):
    assert check_config_table(doc) == []
    assert check_config_table(mutate(doc, "| `d_model` | `hidden_size` |", "| `d_model` | `head_dim` |"))
    assert check_config_table(mutate(doc, "| F, feed-forward width | 2389 |", "| F, feed-forward width | 2390 |"))
    assert check_config_table(mutate(doc, "| `max_seq_len` | `max_position_embeddings` |", "| `max_len` | `max_position_embeddings` |"))


# --- Lean names ----------------------------------------------------------------------------------


def declared_lean_names() -> set[str]:
    pattern = re.compile(
        r"^(?:(?:noncomputable|private|protected)\s+)*(?:def|theorem|lemma|abbrev|structure)\s+([^\s({\[:]+)",
        re.M,
    )
    return {name for path in sorted((REPO / "formal" / "Plga").glob("*.lean")) for name in pattern.findall(path.read_text(encoding="utf-8"))}


def cited_lean_names(text: str) -> set[str]:
    """Backticked names in every list introduced by ``Lean:``."""
    lists = re.findall(r"Lean: (`[A-Za-z_][\w']*`(?:,\s+`[A-Za-z_][\w']*`)*)", text)
    return {name for run in lists for name in re.findall(r"`([^`]+)`", run)}


def check_lean_names(text: str, declared: Iterable[str]) -> list[str]:
    declared = set(declared)
    cited = cited_lean_names(text)
    problems = [f"the document cites Lean `{n}`, which no formal/Plga/*.lean declares" for n in sorted(cited - declared)]
    problems += [f"the spec definition Lean `{n}` (reference/spec.py) is never cited" for n in sorted(set(spec.LEAN_NAMES) - cited)]
    return problems


def test_lean_names_exist_and_cover_the_spec(doc):
    declared = declared_lean_names()
    assert {"maskedSoftmax", "plgaScores", "inference_collapse"} <= declared, "the Lean parser found nothing"
    assert check_lean_names(doc, declared) == []
    assert check_lean_names(mutate(doc, "Lean: `plgaScores`, `plgaScores_eq_smul`", "Lean: `plgaScorez`, `plgaScores_eq_smul`"), declared)
    assert check_lean_names(mutate(doc, "Lean: `resUnit`.", "Lean: `resUnitt`."), declared)
    assert check_lean_names(mutate(doc, "Lean: `dagLoss`, ", "Lean: "), declared)  # a spec definition uncited


# --- the repository stands on its own ----------------------------------------------------------


def check_self_contained(text: str) -> list[str]:
    return [f"the document refers to {f!r}, which a user of the repository does not have" for f in FORBIDDEN if f in text]


def test_no_reference_to_files_outside_the_repository(doc):
    assert check_self_contained(doc) == []
    assert check_self_contained(mutate(doc, "# PLGA and the PLDR-LLM v510 decoder", f"# PLGA (see ../{_OUTSIDE}/SPEC.md)"))


# --- sections and links --------------------------------------------------------------------------


def sections(text: str) -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.M))


def code_section_refs() -> dict[str, set[str]]:
    """Section numbers the repository cites as "SPEC §n" or "docs/spec.md §n" → the citing files."""
    ref = re.compile(r"(?:SPEC(?:\.md)?|spec\.md)\s*§\s*(\d+(?:\.\d+)?)(?:\s*[–-]\s*(\d+(?:\.\d+)?))?")
    refs: dict[str, set[str]] = {}
    roots = ["README.md", "reference", "kernels", "proofs_bridge", "formal", "plga", "tests", "docs", "benchmarks"]
    for root in roots:
        base = REPO / root
        paths = [base] if base.is_file() else [p for ext in ("py", "lean", "md") for p in base.rglob(f"*.{ext}")]
        for path in paths:
            if path == DOC or ".venv" in path.parts:
                continue
            for m in ref.finditer(path.read_text(encoding="utf-8", errors="replace")):
                for number in filter(None, m.groups()):
                    refs.setdefault(number, set()).add(str(path.relative_to(REPO)))
    return refs


def check_sections(text: str, refs: Mapping[str, set[str]]) -> list[str]:
    have = sections(text)
    problems = [f"section §{n} of the contract's numbering is missing" for n in SKELETON if n not in have]
    problems += [f"§{n} is cited by {sorted(files)} but the document has no such section" for n, files in sorted(refs.items()) if n not in have]
    return problems


def test_sections_follow_the_contract_numbering(doc):
    refs = code_section_refs()
    assert check_sections(doc, refs) == []
    assert check_sections(mutate(doc, "### 1.8 Scores, masks and attention", "### Scores, masks and attention"), refs)
    assert check_sections(doc, {"7.3": {"somewhere.py"}})


#: Where the section map's short names live (a bare name is a function of the spec).
HOMES = {
    "spec": "plga.reference.spec", "numerics": "plga.reference.numerics", "decoder": "plga.reference.decoder",
    "checkpoint": "plga.reference.checkpoint", "kernels.functional": "plga.kernels.functional",
    "PLDRModel": "plga.kernels.model:PLDRModel",
}


def resolves(name: str) -> bool:
    """Whether a section-map entry names an existing file of the repository or code object."""
    if "/" in name:
        return (REPO / name).exists()
    if name.startswith("plga."):
        try:
            importlib.import_module(name)  # a module of the package
            return True
        except ImportError:
            pass
    home, _, attr = name.rpartition(".")
    target = HOMES.get(home, "" if home else "plga.reference.spec")
    if not target:
        return False
    module, _, owner = target.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return False
    obj = getattr(obj, owner) if owner else obj
    return hasattr(obj, attr)


def check_section_map(text: str) -> list[str]:
    rows = [r for r in table_rows(text) if r and r[0].startswith("[§") and len(r) >= 3]
    names = [n for r in rows for n in re.findall(r"`([^`]+)`", r[2])]
    problems = [] if names else ["the section map names no implementation"]
    return problems + [f"the section map names `{n}`, which does not exist" for n in names if not resolves(n)]


def test_section_map_names_existing_code(doc):
    pytest.importorskip("torch")  # the map names kernels
    assert check_section_map(doc) == []
    assert check_section_map(mutate(doc, "| `density_operator` |", "| `density_operatorr` |"))
    assert check_section_map(mutate(doc, "`reference/online.py`", "`reference/offline.py`"))
    assert check_section_map(mutate(doc, "`PLDRModel.collapse_from`", "`PLDRModel.collapse_onto`"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_anchors(text: str) -> list[str]:
    anchors = {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}
    return [f"link #{a} has no heading" for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in anchors]


def test_internal_links_resolve(doc):
    assert re.search(r"\]\(#", doc), "the section map links its sections"
    assert check_anchors(doc) == []
    assert check_anchors(mutate(doc, "### 2.3 RoPE", "### 2.3 Rotary embeddings"))
