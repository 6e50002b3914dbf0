"""Signatures and implementations of everything a statement may call.

* project definitions of ``formal/`` (signature from the parsed header; implementation: the
  reference function of ``spec.LEAN_NAMES ∪ online.LEAN_NAMES``; body: the Lean body when it
  parses in the subset, else :data:`.unfold.MIRRORS`);
* Mathlib functions of :data:`.elaborate.BUILTIN_HEADERS`;
* published ``PldrLlm`` definitions of :data:`.unfold.UPSTREAM`.
"""

from __future__ import annotations

import inspect
from typing import Any

from plga.reference import online, spec

from . import syntax as S
from .elaborate import BUILTIN_HEADERS, NAT, PROP, Env, Outside, Sig, Typer, sig_of
from .evaluate import Impl
from .parser import Declaration, LeanSubsetError, parse_header, parse_term
from .unfold import MIRRORS, UPSTREAM

#: Definitions of ``formal/Plga/Decoder.lean`` → the reference code they model. They build the
#: decoder from the spec functions, so they have no one-function mirror in ``LEAN_NAMES``; the
#: concrete-decoder checks (:mod:`.concrete`) run exactly these reference functions.
DECODER_MIRRORS: dict[str, str] = {
    "ropeRow": "spec.rope", "opScore": "spec.plga_scores", "attendRow": "spec.plga_attention",
    "prefixKeys": "spec.rope", "headRow": "decoder.decoder_layer", "frozenLayer": "decoder.decoder_layer",
    "sdpaLayer": "spec.sdpa_attention", "gramOf": "spec.density_operator", "generatedLayer": "decoder.decoder_layer",
    "interleave": "spec.rope", "plgaGenerator": "decoder.power_stage", "frozenDecoder": "decoder.forward",
    "sdpaDecoder": "spec.sdpa_attention", "generatedDecoder": "decoder.forward",
}


def reference_names() -> dict[str, Any]:
    """Lean name → Python reference function (spec and online contract, and the decoder
    definitions' mirrors, resolved here so a renamed reference function fails the gate)."""
    from plga.reference import decoder

    modules = {"spec": spec, "decoder": decoder}
    mirrors = {}
    for lean, path in DECODER_MIRRORS.items():
        mod, _, fn = path.partition(".")
        mirrors[lean] = getattr(modules[mod], fn)
    return {**spec.LEAN_NAMES, **online.LEAN_NAMES, **mirrors}


def def_body(decl: Declaration) -> S.Node | None:
    """The body of a definition when it parses in the subset (else ``None``)."""
    text = decl.body.strip()
    if not text.startswith(":="):
        return None
    try:
        return parse_term(text[2:].strip(), decl.file, decl.line)
    except LeanSubsetError:
        return None


def load_sigs(decls: list[Declaration]) -> dict[str, Sig]:
    sigs: dict[str, Sig] = {}
    for name, hdr in BUILTIN_HEADERS.items():
        sigs[name] = sig_of(parse_header(hdr))
    for name, (hdr, body) in UPSTREAM.items():
        sigs[name] = sig_of(parse_header(f"def {name} {hdr}"), parse_term(body))
    for d in decls:
        if d.kind not in ("def", "abbrev"):
            continue
        body = def_body(d)
        if body is None and d.name in MIRRORS:
            body = parse_term(MIRRORS[d.name])
        header = S.Header(d.kind, d.name, d.binders, d.header.type, d.header.text)
        try:
            sigs[d.name] = sig_of(header, body)
        except Outside:
            continue
    return sigs


def implementations(sigs: dict[str, Sig]) -> dict[str, Impl]:
    """One :class:`Impl` per signature (bodies typed once here)."""
    refs = reference_names()
    out: dict[str, Impl] = {}
    for name, sig in sigs.items():
        py = refs.get(name)
        extra: dict[str, str] = {}
        if py is not None:
            try:
                params = list(inspect.signature(py).parameters.values())
            except (TypeError, ValueError):
                params = []
            required = [p for p in params if p.default is inspect.Parameter.empty
                        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            for p in required[len(sig.params):]:
                if p.name in sig.implicits:
                    extra[p.name] = p.name
                else:
                    py = None  # the Python mirror needs an argument the Lean def does not take
                    break
        typer = None
        if sig.body is not None:
            typer = Typer(sigs)
            env = Env({n: NAT for n in sig.implicits}, sigs)
            for pname, pt in sig.params:
                env = env.bind(pname, pt)
            try:
                typer.infer(sig.body, env, sig.result if sig.result != PROP else None)
            except Outside:
                typer = None
        out[name] = Impl(sig, py, sig.body, typer, extra)
    return out
