"""Parse the declaration headers of ``formal/Plga/*.lean`` with a project-owned lark grammar.

Following LeanDojo (``TracedTheorem.get_theorem_statement``), a statement is the source span
from the declaration keyword to the ``:=`` that starts its proof (or body), comments removed;
proof bodies are never parsed. Only locating comments, docstrings and declaration starts uses
regular expressions (as ``check_axioms.py`` of PLDR-LLM-Math-Foundations does for names); the
header itself goes through ``lean_subset.lark``. Notation outside
the subset raises :class:`LeanSubsetError` naming file, line and token: never a silent skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lark import Lark, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import DataFileError, LeanSubsetError
from ..inputs import read_text
from . import syntax as S

GRAMMAR_PATH = Path(__file__).with_name("lean_subset.lark")

#: Whole-word tokens forbidden anywhere in formal/ (comments count, as in the published CI):
#: proof escapes (``sorry`` in any spelling, ``admit``, the ``sorryAx`` constant behind both),
#: postulates, unchecked code and evaluation the kernel does not re-check.
FORBIDDEN = ("sorry", "sorryAx", "admit", "axiom", "unsafe", "native_decide", "implemented_by", "extern")
#: ``set_option`` escapes: kernel or elaborator checks switched off.
_FORBIDDEN_OPTION_RE = re.compile(r"set_option\s+(debug\.[\w.]+|[\w.]+\s+false)")
_FORBIDDEN_RE = re.compile(r"(?<![\w'])(" + "|".join(FORBIDDEN) + r")(?![\w'!?])")

#: Largest Lean file the bridge reads (the real ones are < 20 KiB).
MAX_LEAN_BYTES = 1 << 20
#: Largest header the grammar is given, and the deepest term it may build: the transformer and
#: every later pass recurse over the tree, so a bound here is what keeps them inside Python's stack.
MAX_HEADER_CHARS = 20_000
MAX_TERM_DEPTH = 100


def forbidden_in(text: str) -> list[tuple[int, str]]:
    """``(offset, token)`` of every forbidden token or ``set_option`` escape in ``text``."""
    hits = [(m.start(), m.group(1)) for m in _FORBIDDEN_RE.finditer(text)]
    hits += [(m.start(), " ".join(m.group(0).split())) for m in _FORBIDDEN_OPTION_RE.finditer(text)]
    return sorted(hits)


def read_lean_source(path: str | Path, display: str | None = None) -> str:
    """The text of a regular file of at most :data:`MAX_LEAN_BYTES` (UTF-8), through the
    project's one bounded reader (:func:`plga.inputs.read_text`): a link to a device
    (``/dev/zero``), a FIFO, a folder or an oversized file is refused with one
    :class:`DataFileError` line before anything is read. ``display`` names the file in it."""
    return read_text(path, f"Lean file {display}" if display else "Lean file", DataFileError, MAX_LEAN_BYTES)


@lru_cache(maxsize=1)
def grammar() -> Lark:
    """The LALR parser of the subset (cached)."""
    return Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=False, maybe_placeholders=False)


# --- Tree → dataclasses ---------------------------------------------------------------------


def _qbs(names: list[str], type_: S.Node | None = None, domain: S.Node | None = None) -> tuple[S.QBinder, ...]:
    return tuple(S.QBinder(n, type_, domain) for n in names)


@v_args(inline=True)
class _ToAst(Transformer):
    def start(self, x):
        return x

    def header(self, kind, name, *rest):
        binders = [r for r in rest if isinstance(r, S.Binder)]
        types = [r for r in rest if isinstance(r, S.Node)]
        return S.Header(str(kind), str(name), tuple(binders), types[0] if types else None)

    def body_cmd(self, t):
        return t

    def variable_cmd(self, *binders):
        return S.Header("variable", "", tuple(binders), None)

    def _binder(self, kind, parts):
        names = tuple(str(p) for p in parts[:-1])
        return S.Binder(names, parts[-1], kind)

    def explicit_binder(self, *p):
        return self._binder("explicit", p)

    def implicit_binder(self, *p):
        return self._binder("implicit", p)

    def strict_binder(self, *p):
        return self._binder("strict", p)

    def named_inst_binder(self, name, t):
        return S.Binder((str(name),), t, "inst")

    def inst_binder(self, t):
        return S.Binder((), t, "inst")

    def iff(self, a, b):
        return S.Logic("↔", a, b)

    def arrow(self, a, b):
        return S.Logic("→", a, b)

    def or_(self, a, b):
        return S.Logic("∨", a, b)

    def and_(self, a, b):
        return S.Logic("∧", a, b)

    def prod_type(self, a, b):
        return S.BinOp("×", a, b)

    def not_(self, a):
        return S.Not(a)

    def rel(self, a, op, b):
        return S.Rel(str(op), a, b)

    def add(self, a, b):
        return S.BinOp("+", a, b)

    def sub(self, a, b):
        return S.BinOp("-", a, b)

    def mul(self, a, b):
        return S.BinOp("*", a, b)

    def div(self, a, b):
        return S.BinOp("/", a, b)

    def dotp(self, a, b):
        return S.BinOp("⬝ᵥ", a, b)

    def smul(self, a, b):
        return S.BinOp("•", a, b)

    def mulvec(self, a, b):
        return S.BinOp("*ᵥ", a, b)

    def vecmul(self, a, b):
        return S.BinOp("ᵥ*", a, b)

    def pow(self, a, b):
        return S.BinOp("^", a, b)

    def hadamard(self, a, b):
        return S.BinOp("⊙", a, b)

    def neg(self, a):
        return S.Neg(a)

    def app(self, f, a):
        if isinstance(f, S.App):
            return S.App(f.fn, (*f.args, a))
        return S.App(f, (a,))

    def transpose(self, a):
        return S.Postfix("ᵀ", a)

    def inv(self, a):
        return S.Postfix("⁻¹", a)

    def proj(self, a, tok):
        return S.Proj(a, str(tok)[1:])

    def get_opt(self, a, _lb, i):
        return S.GetOpt(a, i)

    def name(self, tok):
        return S.Name(str(tok))

    def number(self, tok):
        return S.Num(str(tok))

    def sort(self, tok):
        return S.Sort(str(tok))

    def ascription(self, e, t):
        return S.Ascribe(e, t)

    def abs(self, _o, e, _c):
        return S.Abs(e)

    def norm(self, _o, e, _c):
        return S.Norm(e)

    def list_nil(self):
        return S.ListLit(())

    def list_lit(self, *items):
        return S.ListLit(tuple(items))

    def lam(self, *parts):
        *bs, body = parts
        if bs and isinstance(bs[-1], tuple) and bs[-1] and bs[-1][0] == "type":
            t = bs.pop()[1]
            return S.Lam(tuple(S.QBinder(b.name, t) for g in bs for b in g), body)
        return S.Lam(tuple(b for group in bs for b in group), body)

    def fun_type(self, t):
        return ("type", t)

    def fb_name(self, tok):
        return (S.QBinder(str(tok)),)

    def fb_hole(self, _tok):
        return (S.QBinder("_"),)

    def fb_typed(self, *parts):
        *names, t = parts
        return _qbs([str(n) for n in names], t)

    def forall_(self, bs, body):
        return S.Forall(bs, body)

    def exists_(self, bs, body):
        return S.Exists(bs, body)

    def bigsum(self, bs, body):
        return S.BigSum(bs, body)

    def ite(self, c, a, b):
        return S.Ite(c, a, b)

    def qb_names(self, *names):
        return _qbs([str(n) for n in names])

    def qb_typed(self, *parts):
        *names, t = parts
        return _qbs([str(n) for n in names], t)

    def qb_mem(self, name, dom):
        return _qbs([str(name)], None, dom)

    def qb_paren(self, *parts):
        *names, t = parts
        return _qbs([str(n) for n in names], t)

    def qb_groups(self, *groups):
        return tuple(b for g in groups for b in g)


def parse_header(text: str, file: str = "<string>", line0: int = 1, col0: int = 1) -> S.Header:
    """Parse one header (``theorem name binders : type``, no ``:=``) into a :class:`Header`.

    ``line0``/``col0`` locate ``text`` in ``file`` so that errors point at the real source.
    """
    tree = _parse(text, text, file, line0, col0)
    h = _ToAst().transform(tree)
    return S.Header(h.kind, h.name, h.binders, h.type, text)


def parse_term(text: str, file: str = "<string>", line0: int = 1, col0: int = 1) -> S.Node:
    """Parse a standalone term (a definition body) in the subset."""
    tree = _parse(":= " + text, "   " + text, file, line0, col0 - 3)
    return _ToAst().transform(tree)


def _parse(source: str, shown: str, file: str, line0: int, col0: int) -> Tree:
    """The lark tree of ``source``, refused (one located line) when it is too long or too deep
    for the recursive passes that follow; ``shown`` is the text positions are counted in."""
    if len(source) > MAX_HEADER_CHARS:
        raise LeanSubsetError(file, line0, col0, source[:12] + "…",
                              f"statement of {len(source)} characters, over the bridge's limit of {MAX_HEADER_CHARS}")
    try:
        tree = grammar().parse(source)
    except UnexpectedInput as exc:
        raise _locate(exc, shown, file, line0, col0) from None
    except RecursionError:  # pragma: no cover - lark's LALR loop is iterative
        raise LeanSubsetError(file, line0, col0, source[:12] + "…", "statement nested too deeply") from None
    depth = _depth(tree)
    if depth > MAX_TERM_DEPTH:
        raise LeanSubsetError(file, line0, col0, source[:12] + "…",
                              f"term nested {depth} deep, over the bridge's limit of {MAX_TERM_DEPTH} "
                              "(split the statement or name a sub-term with a definition)")
    return tree


def _depth(tree: Tree) -> int:
    """Depth of a lark tree, without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in node.children if isinstance(c, Tree))
    return deepest


def _locate(exc: UnexpectedInput, text: str, file: str, line0: int, col0: int) -> LeanSubsetError:
    pos = getattr(exc, "pos_in_stream", None)
    if isinstance(exc, UnexpectedEOF) or pos is None or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    ):
        pos = len(text.rstrip())
        token, detail = "<end of statement>", "statement ends early"
    elif isinstance(exc, UnexpectedCharacters):
        token = text[pos] if pos < len(text) else "<end>"
        detail = "notation outside the Lean subset of formal/NOTATION.md"
    elif isinstance(exc, UnexpectedToken):
        token = str(exc.token)
        detail = "unexpected token (outside the Lean subset or malformed)"
    else:  # pragma: no cover - lark's hierarchy is closed
        token, detail = "?", str(exc)
    before = text[:pos]
    line = line0 + before.count("\n")
    col = (pos - before.rfind("\n")) if "\n" in before else col0 + pos
    return LeanSubsetError(file, line, col, token, detail)


# --- Files: comments, docstrings, declaration starts ----------------------------------------


@dataclass
class Declaration:
    """One ``def``/``theorem``/``lemma`` of a Lean file."""

    kind: str
    name: str
    namespace: str
    file: str
    line: int
    header: S.Header
    statement: str  # header text, comments removed, whitespace normalized
    docstring: str | None
    private: bool
    variables: tuple[S.Binder, ...] = ()  # section variables the statement uses
    body: str = ""  # proof/definition text (comments removed), never parsed

    @property
    def full_name(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    @property
    def binders(self) -> tuple[S.Binder, ...]:
        return self.variables + self.header.binders


@dataclass
class LeanFile:
    path: str
    declarations: list[Declaration] = field(default_factory=list)


_COMMANDS = (
    "theorem", "lemma", "def", "abbrev", "instance", "structure", "class", "inductive", "example",
    "axiom", "namespace", "section", "end", "open", "variable", "universe", "import",
    "set_option", "attribute", "noncomputable", "private", "protected", "notation", "macro",
    "syntax", "local", "scoped", "mutual", "#check", "#print", "#eval", "@[", "include", "omit",
)
_DECL_KINDS = ("theorem", "lemma", "def", "abbrev")
_ID = r"[A-Za-z_α-κμ-ωΑ-ΟΡΤ-Ωℂ-⅏][A-Za-z0-9_'!?α-ωΑ-Ωℂ-⅏₀-₉ₐ-ₜᵢ-ᵪⱼ.]*"
_CMD_RE = re.compile(
    r"(?<![\w.'])(#check|#print|#eval|@\[|" + "|".join(c for c in _COMMANDS if c[0] not in "#@") + r")(?![\w'!?])"
)


def strip_comments(src: str) -> tuple[str, list[tuple[int, int, str]]]:
    """``src`` with every comment blanked (newlines kept) and the list of ``/-- … -/`` docstrings.

    Handles nested block comments and string literals; docstrings are (start, end, text).
    """
    out = list(src)
    docs: list[tuple[int, int, str]] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            i = j + 1
        elif src.startswith("--", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/-", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/-", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("-/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if src.startswith("/--", i) and not src.startswith("/--/", i):
                docs.append((i, j, src[i + 3 : j - 2].strip()))
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out), docs


def normalize(text: str) -> str:
    """Collapse whitespace: the statement text that is fingerprinted."""
    return " ".join(text.split())


def _line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


def _header_end(code: str, start: int, stop: int) -> int:
    """Offset of the ``:=`` (or of a leading ``|`` match arm) ending the header at bracket depth 0."""
    depth = 0
    i = start
    while i < stop:
        c = code[i]
        if c in "([{⦃":
            depth += 1
        elif c in ")]}⦄":
            depth -= 1
        elif depth == 0 and code.startswith(":=", i):
            return i
        elif depth == 0 and c == "|" and code[code.rfind("\n", 0, i) + 1 : i].strip() == "":
            return i
        elif depth == 0 and code.startswith("where", i) and not re.match(r"[\w']", code[i - 1]):
            return i
        i += 1
    return stop


def scan_file(path: str | Path, display: str | None = None) -> LeanFile:
    """Find every declaration of a ``.lean`` file and parse its header.

    Raises :class:`LeanSubsetError` on the first header outside the subset.
    """
    path = Path(path)
    return scan_source(read_lean_source(path, display or path.name), display or path.name)


def scan_source(src: str, file: str) -> LeanFile:
    """:func:`scan_file` on a string (``file`` names it in messages)."""
    code, docs = strip_comments(src)
    lf = LeanFile(file)

    cmds = [(m.start(), m.group(1)) for m in _CMD_RE.finditer(code)]
    scopes: list[tuple[str, str, list[S.Binder]]] = []  # (kind, name, variables)
    k = 0
    while k < len(cmds):
        pos, kw = cmds[k]
        # the command runs until the next command keyword that is not a modifier of this one
        nxt = cmds[k + 1][0] if k + 1 < len(cmds) else len(code)
        if kw in ("namespace", "section"):
            m = re.match(r"(namespace|section)[ \t]*(" + _ID + r")?", code[pos:])
            scopes.append((kw, (m.group(2) or "") if m else "", []))
        elif kw == "end":
            if scopes:
                scopes.pop()
        elif kw == "noncomputable" and re.match(r"noncomputable\s+section", code[pos:]):
            scopes.append(("section", "", []))
            k += 1  # skip the `section` keyword that follows
        elif kw == "variable":
            end = nxt
            text = code[pos:end]
            try:
                h = parse_header(text.strip(), file, _line_of(src, pos))
            except LeanSubsetError:
                raise
            if scopes:
                scopes[-1][2].extend(h.binders)
            else:
                scopes.append(("file", "", list(h.binders)))
        elif kw in _DECL_KINDS:
            # modifiers between the previous command and this keyword
            j = k - 1
            private = False
            while j >= 0 and cmds[j][1] in ("private", "protected", "noncomputable", "@["):
                private = private or cmds[j][1] == "private"
                j -= 1
            # skip nested command keywords inside this declaration's body (none are legal there
            # except `end` of a `where`/`match`? no: keep scanning by keyword positions)
            hend = _header_end(code, pos, nxt)
            header_text = code[pos:hend]
            line = _line_of(src, pos)
            col = pos - src.rfind("\n", 0, pos)
            header = parse_header(header_text.rstrip(), file, line, col)
            doc = None
            for _ds, de, dt in docs:
                if de <= pos and _only_modifiers(code[de:pos]):
                    doc = dt
            ns = ".".join(s[1] for s in scopes if s[0] == "namespace" and s[1])
            variables = tuple(b for s in scopes for b in s[2])
            used = _used_variables(variables, header)
            body = code[hend:nxt]
            lf.declarations.append(
                Declaration(header.kind, header.name, ns, file, line, header,
                            normalize(header_text), doc, private, used, body)
            )
        k += 1
    return lf


def _only_modifiers(text: str) -> bool:
    """True when ``text`` holds only whitespace, attributes and declaration modifiers."""
    t = re.sub(r"@\[[^\]]*\]", " ", text)
    return all(w in ("private", "protected", "noncomputable") for w in t.split())


def _used_variables(variables: tuple[S.Binder, ...], header: S.Header) -> tuple[S.Binder, ...]:
    """Section variables a statement includes: those it names, what their types need, and
    instance binders over included names (Lean 4's inclusion rule, without ``include``)."""
    if not variables:
        return ()
    names: set[str] = set()
    for b in header.binders:
        names |= S.free_names(b.type)
    if header.type is not None:
        names |= S.free_names(header.type)
    changed = True
    keep: list[S.Binder] = []
    while changed:
        changed = False
        for b in variables:
            if b in keep:
                continue
            if b.kind == "inst":
                hit = S.free_names(b.type) & {n for k in keep for n in k.names}
                if hit and (S.free_names(b.type) & {n for v in variables for n in v.names}) <= {
                    n for k in keep for n in k.names
                }:
                    keep.append(b)
                    changed = True
            elif set(b.names) & names:
                keep.append(b)
                names |= S.free_names(b.type)
                changed = True
    order = {id(b): i for i, b in enumerate(variables)}
    keep.sort(key=lambda b: order[id(b)])
    # split multi-name binders down to the names used
    out = []
    for b in keep:
        if b.kind == "inst":
            out.append(b)
        else:
            used = tuple(n for n in b.names if n in names)
            out.append(S.Binder(used, b.type, b.kind))
    return tuple(out)


_PAPER_RE = re.compile(r"Paper:\s*(.*)")


def paper_reference(doc: str | None) -> str | None:
    """The paper result named on a docstring's first line: ``Paper: Thm. 5.4(i).`` → ``Thm. 5.4(i)``.

    The reference ends at the first period followed by end of line or by a space and anything
    but a digit or an opening parenthesis (so ``Def. 3.1``, ``Prop. 3.12 / Prop. 5.2(iii)`` and
    ``Rem. (DAG-loss positivity obstruction)`` stay whole).
    """
    if not doc:
        return None
    first = doc.strip().splitlines()[0]
    m = _PAPER_RE.search(first)
    if not m:
        return None
    rest = m.group(1)
    for i, c in enumerate(rest):
        after = rest[i + 2 : i + 3]
        if c == "." and (i + 1 == len(rest) or (rest[i + 1] == " " and not (after.isdigit() or after == "("))):
            return rest[:i].strip()
    return rest.strip()
