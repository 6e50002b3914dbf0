"""The ``plga audit`` subcommand: ``add_audit_arguments(parser)`` and ``audit_main(args) -> int``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .runner import AuditSizes


def add_audit_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the audit's options to ``parser`` (a subparser of the ``plga`` console script)."""
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a .pth, a .safetensors (config.json beside it) or a model folder; "
                        "omitted: a built-in small model with seeded random weights")
    parser.add_argument("--prompts", default=None,
                        help="prompt file: .npy int [N, S] (0 = pad), .json list of id lists or of strings, or text (one prompt a line)")
    parser.add_argument("--tokenizer", default=None, help="SentencePiece .model for text prompts (default prompts: 8 English sentences)")
    parser.add_argument("--out", default="audit_out", help="output folder (default: audit_out)")
    parser.add_argument("--collapse", action="store_true",
                        help="also build the constant operator (mean G), write the collapsed checkpoint OUT/collapsed "
                        "(plga.kernels format: PLDRModel.from_pretrained loads it) and check its cache fidelity")
    parser.add_argument("--operators", default=None, metavar="FILE.npz",
                        help="audit constant operators [L, H, d, d] from an .npz instead of a model")
    parser.add_argument("--operators-key", default=None, help="the array of --operators to audit (default: every array)")
    parser.add_argument("--backend", default="auto", choices=("auto", "reference", "torch"),
                        help="auto: torch (plga.kernels.PLDRModel) when importable and d_model ≥ 512 (or a non-CPU device / float32), "
                        "else the float64 reference")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the built-in model and of the pair/candidate draws")
    parser.add_argument("--decode-steps", type=int, default=None, help="greedy steps of the cache-fidelity check (default 8)")
    parser.add_argument("--order-tokens", type=int, default=None, help="sampled tokens per continuation for the order parameter (default 8)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser


def audit_main(args: argparse.Namespace) -> int:
    """Run the audit from parsed arguments; print where the outputs are. Errors: one line, exit 2."""
    from .runner import run_audit, run_operator_audit

    t0 = time.perf_counter()
    try:
        if args.operators:
            rec: Any = run_operator_audit(args.operators, args.out, key=args.operators_key, plots=not args.no_plots)
            print(f"operator audit of {args.operators}: {args.out}/operators_audit.json, {args.out}/operators_summary.md")
            return 0
        sizes = AuditSizes()
        if args.order_tokens is not None:
            if args.order_tokens < 1:
                raise ValueError(f"--order-tokens must be ≥ 1, got {args.order_tokens}")
            sizes = AuditSizes(n_order_tokens=args.order_tokens)
        rec = run_audit(
            checkpoint=args.checkpoint, prompts=args.prompts, tokenizer=args.tokenizer, out_dir=args.out,
            collapse=args.collapse, seed=args.seed, device=args.device, dtype=args.dtype, backend=args.backend,
            n_decode_steps=args.decode_steps, progress=not args.no_progress, sizes=sizes, plots=not args.no_plots,
        )
    except (ValueError, OSError, ImportError, RuntimeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"plga audit: error: {msg}", file=sys.stderr)
        return 2
    dec = rec["summary"].get("decode", [])
    eg = max((d["epsG_rel_rms_max_over_steps"] for d in dec), default=0.0, key=lambda v: float(v))
    print(f"audit written to {args.out}/ (audit.json, audit_raw.npz, summary.md) in {time.perf_counter() - t0:.1f}s; "
          f"max eps_G {eg}, argmax agree {all(d['argmax_agree'] for d in dec)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m plga.audit.cli``) until the lead wires the subcommand."""
    parser = add_audit_arguments(argparse.ArgumentParser(prog="plga audit", description=__doc__))
    return audit_main(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
