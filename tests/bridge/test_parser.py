"""The lark parser of the Lean subset, including malformed input (its own meta-tests)."""

from __future__ import annotations

import pytest

from plga.proofs_bridge import syntax as S
from plga.proofs_bridge.parser import (
    LeanSubsetError,
    paper_reference,
    parse_header,
    scan_source,
    strip_comments,
)


def concl(text: str) -> S.Node:
    return parse_header(text).type


def test_binders_and_kinds():
    h = parse_header("theorem t {n : ℕ} [NeZero n] (x y : Fin n → ℝ) {ε : ℝ} (hε : 0 < ε) : x = y")
    assert [b.kind for b in h.binders] == ["implicit", "inst", "explicit", "implicit", "explicit"]
    assert h.binders[2].names == ("x", "y")
    assert isinstance(h.binders[4].type, S.Rel)


def test_sdpa_statement_tree():
    c = concl("theorem s {S T d : ℕ} (Q : Matrix (Fin S) (Fin d) ℝ) (K : Matrix (Fin T) (Fin d) ℝ) : "
              "Q * (1 : Matrix (Fin d) (Fin d) ℝ) * Kᵀ = Q * Kᵀ")
    assert isinstance(c, S.Rel) and c.op == "="
    left = c.left
    assert isinstance(left, S.BinOp) and left.op == "*" and isinstance(left.right, S.Postfix)
    assert isinstance(left.left.right, S.Ascribe)  # (Q * 1) * Kᵀ: left associative


@pytest.mark.parametrize(
    "text, shown",
    [
        ("∑ i, f i + 1 = 2", "((∑ i, f i) + 1) = 2"),  # ∑ body at precedence 67
        ("∑ i, a i * b i = c", "(∑ i, (a i) * (b i)) = c"),
        ("-x ^ 2 = y", "(-(x ^ 2)) = y"),
        ("a • M *ᵥ v = w", "(a • (M *ᵥ v)) = w"),
        ("f xᵀ = y", "(f xᵀ) = y"),
        ("p ∧ ∀ x, q x ∧ r → s", "p ∧ (∀ x, ((q x) ∧ r) → s)"),  # ∀ body extends to the end
        ("(p ∧ ∀ x, q x) → s", "(p ∧ (∀ x, q x)) → s"),
        ("P → Q → R", "P → (Q → R)"),
        ("|x| + ‖y‖ ≤ 1", "(|x| + ‖y‖) ≤ 1"),
        ("(F x)[r]? = (F (x.take (r + 1)))[r]?", "(F x)[r]? = (F (x.take (r + 1)))[r]?"),
        ("(fun (_ : List ℤ) => ([] : List ℤ)) = g", "(fun (_ : List ℤ) => ([] : List ℤ)) = g"),
        ("A ⊙ B ^ 2 = C", "((A ⊙ B) ^ 2) = C"),
        ("∀ i ∈ J, y i = x i + c", "∀ i ∈ J, (y i) = ((x i) + c)"),
        ("∃ c : ℝ, ∀ i, y i = c", "∃ (c : ℝ), ∀ i, (y i) = c"),
    ],
)
def test_precedence(text, shown):
    assert S.show(concl(f"theorem t : {text}")) == shown


@pytest.mark.parametrize(
    "text, token",
    [
        ("theorem t : ∏ i, f i = 1", "∏"),
        ("theorem t : ⟨a, b⟩ = c", "⟨"),
        ("theorem t : f ∘ g = h", "∘"),
        ("theorem t (a : ℝ : a = a", ":"),
        ("theorem t : a = ", "<end of statement>"),
        ("theorem t : x ⊆ y", "⊆"),
    ],
)
def test_outside_subset_is_an_error_naming_file_line_token(text, token):
    with pytest.raises(LeanSubsetError) as info:
        parse_header(text, "F.lean", 7)
    err = info.value
    assert err.file == "F.lean" and err.line == 7 and err.token == token
    assert "F.lean:7:" in str(err)


def test_comments_docstrings_and_spans():
    src = (
        "/-! module doc with theorem fake : 1 = 2 -/\n"
        "namespace Plga\n"
        "-- theorem commented : 1 = 1\n"
        "/-- Paper: Thm. 5.4(i). The doc. -/\n"
        "@[simp] theorem t1 (x : ℝ) : /- inline -/ x = x := by\n  rfl\n"
        "/- nested /- block -/ comment -/\n"
        "private def d1 (u : ℝ) : ℝ := u\n"
        "end Plga\n"
    )
    code, docs = strip_comments(src)
    assert "fake" not in code and "commented" not in code and "inline" not in code
    assert [d[2] for d in docs] == ["Paper: Thm. 5.4(i). The doc."]
    lf = scan_source(src, "X.lean")
    names = [(d.kind, d.full_name, d.line, d.private) for d in lf.declarations]
    assert names == [("theorem", "Plga.t1", 5, False), ("def", "Plga.d1", 8, True)]
    assert lf.declarations[0].statement == "theorem t1 (x : ℝ) : x = x"
    assert paper_reference(lf.declarations[0].docstring) == "Thm. 5.4(i)"


def test_error_in_file_reports_the_source_line():
    src = "namespace Plga\n/-- Paper: new. -/\ntheorem ok (u : ℝ) : u = u := rfl\n\n/-- Paper: new. -/\ntheorem bad (x : ℝ) :\n    ∏ i, x = 1 := by simp\nend Plga\n"
    with pytest.raises(LeanSubsetError) as info:
        scan_source(src, "Bad.lean")
    assert (info.value.file, info.value.line, info.value.token) == ("Bad.lean", 7, "∏")


def test_bad_fixture_file_fails_loudly():
    from pathlib import Path

    from plga.proofs_bridge.parser import scan_file

    with pytest.raises(LeanSubsetError, match=r"Notation.lean:9:.*'∏'"):
        scan_file(Path(__file__).with_name("fixtures") / "bad" / "Notation.lean")


def test_variables_are_included_when_used():
    src = "section\nvariable {n : ℕ} [NeZero n] (x : Fin n → ℝ) (unused : ℝ)\n/-- Paper: new. -/\ntheorem t : x = x := rfl\nend\n"
    d = scan_source(src, "V.lean").declarations[0]
    assert [b.names for b in d.variables] == [("n",), (), ("x",)]


@pytest.mark.parametrize(
    "doc, ref",
    [("Paper: Def. 3.1. iSwiGLU is …", "Def. 3.1"), ("Paper: new. Bridge.", "new"),
     ("Paper: Prop. 3.12 / Prop. 5.2(iii). x", "Prop. 3.12 / Prop. 5.2(iii)"), ("No paper line", None)],
)
def test_paper_reference(doc, ref):
    assert paper_reference(doc) == ref


def test_real_formal_files_parse(real_bridge):
    assert len(real_bridge.catalog.theorems()) > 0
