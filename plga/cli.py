"""The ``plga`` console script.

Every subcommand returns an exit code; any error reaches the user as one line on stderr
with a non-zero exit, never a traceback (``PLGA_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import __version__
from .errors import PlgaError, UsageError


def _load_tokens(path: str) -> np.ndarray:
    """Token ids from ``.npy`` or a JSON list of lists → int64 [B, S]."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"token file {path} does not exist")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise UsageError(f"token file {path} is not a plain .npy array: {exc}") from exc
    else:
        try:
            data = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"token file {path} is neither .npy nor valid JSON: {exc}") from exc
        if not (isinstance(data, list) and data and all(isinstance(r, list) for r in data)):
            raise UsageError(f"token file {path} must hold a non-empty JSON list of lists of ids")
        if len({len(r) for r in data}) != 1:
            raise UsageError(f"token file {path}: rows have different lengths; pad them with id 0")
        if not all(isinstance(t, int) and not isinstance(t, bool) for r in data for t in r):
            raise UsageError(f"token file {path}: every id must be an integer")
        arr = np.asarray(data, dtype=np.int64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.dtype.kind not in "iu":
        raise UsageError(f"token file {path} must hold integer ids of shape [batch, seq], got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64)


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    from .atomic import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def _load_model(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], Any]:
    from .reference.checkpoint import load_checkpoint
    from .reference.config import PLDRConfig

    config = PLDRConfig.from_json(args.config) if args.config else None
    return load_checkpoint(args.checkpoint, config=config, max_seq_len=args.max_seq_len)


def sdpa_reduction(seed: int = 0, dps: int = 50) -> tuple[list[tuple[str, str, str, float]], bool]:
    """PLGA at G = I against SDPA on seeded inputs: rows (backend, shape, mask, max diff), verdict.

    The verdict requires exactly 0 in float64 (the same arithmetic) and ≤ 1e-40 in mpmath.
    """
    from .reference import spec
    from .reference.numerics import mp_eval

    if not 16 <= dps <= 1000:
        raise UsageError(f"--dps must lie in [16, 1000], got {dps}")
    if seed < 0:
        raise UsageError(f"--seed must be ≥ 0, got {seed}")
    rng = np.random.default_rng(seed)
    rows = []
    for s, t, d in [(1, 1, 2), (5, 7, 4), (16, 16, 8), (33, 40, 16), (64, 64, 64)]:
        q, k, v = (rng.standard_normal((2, 3, n, d)) for n in (s, t, t))  # [B, H, ·, d]
        support = np.tril(np.ones((s, t), dtype=bool), k=t - s)
        eye = np.eye(d)
        for fill in (None, spec.MASK_FILL):
            plga = spec.plga_attention(q, eye, k, v, support, None, fill)
            sdpa = spec.sdpa_attention(q, k, v, support, None, fill)
            rows.append(("float64", f"S={s} T={t} d={d}", "ideal" if fill is None else "finite", float(np.max(np.abs(plga - sdpa)))))
    for s, d in [(3, 2), (4, 4)]:
        q, k, v = (rng.standard_normal((s, d)) for _ in range(3))
        support = np.tril(np.ones((s, s), dtype=bool))
        plga = mp_eval(spec.plga_attention, q, np.eye(d), k, v, support, dps=dps)
        sdpa = mp_eval(spec.sdpa_attention, q, k, v, support, dps=dps)
        diff = max(abs(a - b) for a, b in zip(plga.flat, sdpa.flat, strict=True))
        rows.append((f"mpmath {dps} digits", f"S={s} d={d}", "ideal", float(diff)))
    worst64 = max(r[3] for r in rows if r[0] == "float64")
    worstmp = max(r[3] for r in rows if r[0] != "float64")
    return rows, worst64 == 0.0 and worstmp <= 1e-40


def cmd_check_sdpa(args: argparse.Namespace) -> int:
    """PLGA with G = I against SDPA, float64 and mpmath references, seeded inputs."""
    rows, ok = sdpa_reduction(args.seed, args.dps)
    width = max(len(r[1]) for r in rows)
    print(f"{'backend':<18} {'shape':<{width}} {'mask':<7} max|PLGA(G=I) − SDPA|")
    for backend, shape, mask, diff in rows:
        print(f"{backend:<18} {shape:<{width}} {mask:<7} {diff:.3e}")
    worst64 = max(r[3] for r in rows if r[0] == "float64")
    worstmp = max(r[3] for r in rows if r[0] != "float64")
    print(f"float64 max difference {worst64!r} (must be exactly 0); mpmath {worstmp:.3e} (must be ≤ 1e-40): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_forward(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on token ids and write logits (and deductive tensors)."""
    tokens = _load_tokens(args.tokens)
    params, config = _load_model(args)
    arrays: dict[str, np.ndarray] = {}
    if args.backend == "reference":
        from .reference import decoder

        result = decoder.forward(decoder.to_backend(params), config, tokens)
        arrays["logits"] = result.logits
        if args.deductive:
            for i, ded in enumerate(result.deductive):
                for name in ("A", "A_LM", "A_P", "G_LM", "scores"):
                    arrays[f"layer{i}.{name}"] = np.asarray(ded[name])
    else:
        arrays.update(_torch_forward(params, config, tokens, args))
    _save_npz(args.out, arrays)
    print(f"wrote {args.out}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items()))
    return 0


def _torch_model(params: dict[str, np.ndarray], config: Any, args: argparse.Namespace) -> Any:
    """The kernels' PLDRModel on ``args.device`` in ``args.dtype`` (the operator chain stays ≥ float32)."""
    try:
        import torch

        from .kernels import PLDRModel
    except ImportError as exc:
        raise UsageError(f"--backend torch needs the torch extra (pip install 'plga[torch]'): {exc}") from None
    dtype = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    return PLDRModel.from_reference(params, config, dtype=dtype, device=torch_device(args.device))


def torch_device(name: str) -> Any:
    """A validated ``torch.device``; CUDA is queried here, lazily, only when asked for."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise UsageError(f"--device {name!r} is not a torch device: {exc}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name!r}: CUDA is not available in this torch build or machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif device.type != "cpu":
        raise UsageError(f"--device {name!r}: only cpu and cuda devices are supported")
    return device


def _torch_forward(params: dict[str, np.ndarray], config: Any, tokens: np.ndarray, args: argparse.Namespace) -> dict[str, np.ndarray]:
    import torch
    model = _torch_model(params, config, args)
    with torch.no_grad():
        out = model(torch.as_tensor(tokens, device=args.device), deductive=args.deductive)
    arrays = {"logits": out.logits.double().cpu().numpy()}
    if args.deductive:
        for i, ded in enumerate(out.deductive):
            for name in ("A", "A_LM", "A_P", "G_LM", "scores"):
                arrays[f"layer{i}.{name}"] = ded[name].double().cpu().numpy()
    return arrays


def cmd_generate(args: argparse.Namespace) -> int:
    """Greedy (or seeded sampled) decoding in a cache mode; writes tokens and step logits."""
    from .reference import decoder

    tokens = _load_tokens(args.tokens)
    params, config = _load_model(args)
    constant_g = None
    if args.constant_g:
        constant_g = _load_constant_g(args.constant_g, config)
    if args.mode == "constant" and constant_g is None:
        raise UsageError("--mode constant needs --constant-g FILE.npz (key G_LM, [layers, heads, d, d])")
    if args.backend == "reference":
        result = decoder.generate(
            decoder.to_backend(params), config, tokens, args.max_new_tokens, args.mode,
            constant_g=constant_g, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            seed=args.seed,
        )
        out_tokens, step_logits = result.tokens, result.step_logits
    else:
        import torch

        model = _torch_model(params, config, args)
        with torch.no_grad():
            gen = model.generate(
                torch.as_tensor(tokens, device=args.device), args.max_new_tokens, args.mode,
                G=None if constant_g is None else np.stack(constant_g), temperature=args.temperature,
                top_k=args.top_k, top_p=args.top_p, seed=args.seed, return_step_logits=True,
            )
        out_tokens, step_logits = gen.tokens.cpu().numpy(), gen.step_logits.double().cpu().numpy()
    _save_npz(args.out, {"tokens": out_tokens, "step_logits": step_logits})
    print(f"wrote {args.out}: tokens {out_tokens.shape}, step_logits {step_logits.shape}")
    for row in out_tokens:
        print(" ".join(str(int(t)) for t in row))
    return 0


def _load_constant_g(path: str, config: Any) -> list[np.ndarray]:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"constant-G file {path} does not exist")
    try:
        with np.load(p, allow_pickle=False) as z:
            g = np.asarray(z["G_LM"] if "G_LM" in z.files else z[z.files[0]], dtype=np.float64)
    except (ValueError, OSError, KeyError, IndexError) as exc:
        raise UsageError(f"cannot read constant G from {path}: {exc}") from exc
    want = (config.num_layers, config.num_heads, config.depth, config.depth)
    if g.shape != want:
        raise UsageError(f"constant G in {path} has shape {g.shape}, the model needs {want}")
    return list(g)


def cmd_theorems(args: argparse.Namespace) -> int:
    """Run the proofs bridge: derived, symbolic, hand-written and concrete-decoder checks of every theorem."""
    from .proofs_bridge.runner import theorems_command

    return theorems_command(args.names, as_json=args.json, max_examples=args.max_examples, dps=args.dps,
                            symbolic=not args.no_symbolic, root=args.formal_dir, readme_table=args.readme_table,
                            show_progress=not args.no_progress)


def cmd_verify(args: argparse.Namespace) -> int:
    """SDPA reduction, every theorem check and the kernel conformance quick profile, one table."""
    import time

    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be ≥ 1, got {args.max_examples}")
    rows: list[dict[str, Any]] = []

    t0 = time.perf_counter()
    sdpa_rows, sdpa_ok = sdpa_reduction()
    worst = max(r[3] for r in sdpa_rows if r[0] == "float64")
    worst_mp = max(r[3] for r in sdpa_rows if r[0] != "float64")
    rows.append({"check": "SDPA reduction (G = I)", "ok": sdpa_ok, "seconds": time.perf_counter() - t0,
                 "detail": f"{len(sdpa_rows)} cases; float64 max diff {worst!r} (exact), mpmath {worst_mp:.1e}"})

    from .proofs_bridge import run_all, summary

    t0 = time.perf_counter()
    results = run_all(max_examples=args.max_examples)
    s = summary(results)
    failed = [r.name for r in results if r.status != "pass"]
    rows.append({"check": "theorem checks (formal/)", "ok": not failed and s["theorems"] > 0,
                 "seconds": time.perf_counter() - t0,
                 "detail": f"{s['passed']}/{s['theorems']} pass; derived {s['derived']}/{s['theorems']}; "
                           f"symbolic {s['proved_symbolically']}/{s['algebraic_identities']}; kernel-checked 0 (no Lean here)"
                           + (f"; failed: {', '.join(failed[:5])}" if failed else "")})

    from .conformance import quick_summary
    from .conformance.adapter import resolve_impl

    for row in quick_summary(resolve_impl(args.impl)):
        rows.append({"check": f"conformance: {row['group']}", "ok": row["ok"], "seconds": row["seconds"],
                     "detail": f"{row['implementation']}: {row['passed']} passed, {row['failed']} failed, {row['skipped']} skipped"
                               + (f"; failed: {', '.join(row['failures'][:3])}" if row["failures"] else "")})
    ok = all(r["ok"] for r in rows)
    if args.json:
        print(json.dumps({"ok": ok, "rows": rows}, indent=2))
    else:
        width = max(len(r["check"]) for r in rows)
        print(f"{'check':<{width}}  result  seconds  detail")
        for r in rows:
            print(f"{r['check']:<{width}}  {'PASS' if r['ok'] else 'FAIL':<6}  {r['seconds']:7.1f}  {r['detail']}")
        print(f"plga verify: {'PASS' if ok else 'FAIL'} ({sum(r['ok'] for r in rows)}/{len(rows)} checks)")
    return 0 if ok else 1


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="upstream .pth, .safetensors, or a folder with config.json")
    p.add_argument("--tokens", required=True, help="token ids: .npy or a JSON list of lists (id 0 = padding)")
    p.add_argument("--out", required=True, help="output .npz (written atomically)")
    p.add_argument("--config", help="JSON config (upstream hyperparameters or config.json); default: inferred")
    p.add_argument("--max-seq-len", type=int, default=1024, help="context length when inferring the config (default 1024)")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _add_backend_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("reference", "torch"), default="reference",
                   help="reference: the exact float64 reference (default); torch: plga.kernels")
    p.add_argument("--device", default="cpu", help="torch backend device (default cpu)")
    p.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64", help="torch backend dtype")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``plga`` command with every subcommand."""
    parser = _Parser(prog="plga", description="Power Law Graph Attention: specification, reference, kernels, conformance.")
    parser.add_argument("--version", action="version", version=f"plga {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("check-sdpa", help="PLGA with G = I against SDPA in the float64 and mpmath references")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dps", type=int, default=50, help="mpmath digits (default 50)")
    p.set_defaults(func=cmd_check_sdpa)

    p = sub.add_parser("forward", help="evaluate a checkpoint on token ids; write logits (and deductive tensors)")
    _add_model_arguments(p)
    p.add_argument("--deductive", action="store_true", help="also write layer{i}.A, .A_LM, .A_P, .G_LM, .scores")
    _add_backend_arguments(p)
    p.set_defaults(func=cmd_forward)

    p = sub.add_parser("generate", help="greedy or sampled decoding in a cache mode")
    _add_model_arguments(p)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--mode", choices=("nocache", "kv", "kvg", "constant"), default="kv")
    p.add_argument("--constant-g", help=".npz with G_LM [layers, heads, d, d]: replaces the metric learner")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None, help="sampling seed (needed when temperature > 0)")
    _add_backend_arguments(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("theorems", help="every theorem of formal/ as an executable check (table; --json)")
    p.add_argument("names", nargs="*", help="only these theorems (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable results and summary")
    p.add_argument("--max-examples", type=int, default=25, help="Hypothesis examples per derived check (default 25)")
    p.add_argument("--dps", type=int, default=50, help="mpmath digits (default 50)")
    p.add_argument("--no-symbolic", action="store_true", help="skip the sympy proofs")
    p.add_argument("--formal-dir", default=None, help="formal/ tree to read (default: the installed one)")
    p.add_argument("--readme-table", action="store_true", help="print the README's 'What is formalized' table and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (also PLGA_NO_PROGRESS=1)")
    p.set_defaults(func=cmd_theorems)

    from .conformance.cli import add_conformance_arguments, run_from_args

    p = sub.add_parser("conformance", help="run the conformance suite on a PLGA implementation (pytest exit code)")
    add_conformance_arguments(p)
    p.set_defaults(func=run_from_args)

    p = sub.add_parser("verify", help="the main job: SDPA reduction, every theorem check, kernel conformance (quick)")
    p.add_argument("--impl", default=None, metavar="MODULE:OBJECT", help="implementation for the conformance part (default: plga.kernels)")
    p.add_argument("--max-examples", type=int, default=10, help="Hypothesis examples per theorem check (default 10)")
    p.add_argument("--json", action="store_true", help="print the summary rows as JSON")
    p.set_defaults(func=cmd_verify)

    from .bench import add_bench_arguments, bench_main

    p = sub.add_parser("bench", help="speed and memory of the reference, eager, fused and collapsed paths (JSON)")
    add_bench_arguments(p)
    p.set_defaults(func=bench_main)

    from .audit.cli import add_audit_arguments, audit_main

    p = sub.add_parser("audit", help="the paper's collapse measurements on a checkpoint (or a built-in model)")
    add_audit_arguments(p)
    p.set_defaults(func=audit_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``plga`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("plga: interrupted", file=sys.stderr)
        return 130
    except (PlgaError, ValueError, TypeError, OSError, KeyError) as exc:
        if os.environ.get("PLGA_DEBUG"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"plga {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
