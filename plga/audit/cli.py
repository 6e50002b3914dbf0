"""The ``plga audit`` subcommand: ``add_audit_arguments(parser)`` and ``audit_main(args) -> int``.

The first line printed is the verdict (collapsed / not collapsed / inconclusive) with its
deciding figures; the last names the verdict again and where the outputs are. A user's
mistake (and a refused ``--collapse``) raises a :class:`plga.errors.PlgaError`, which the
``plga`` console script prints as one line (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from ..errors import CollapseRefusedError, UsageError
from .runner import (
    COLLAPSE_REPORT,
    COLLAPSED_DIR,
    JSON_NAME,
    QUICK,
    RAW_NAME,
    SUMMARY_NAME,
    AuditSizes,
)


def add_audit_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the audit's options to ``parser`` (a subparser of the ``plga`` console script)."""
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a .pth, a .safetensors (config.json beside it) or a model folder; "
                        "omitted: a built-in small model with seeded random weights")
    parser.add_argument("--config", default=None, metavar="CONFIG.json",
                        help="the checkpoint's configuration (upstream hyperparameters or config.json); default: the "
                        "config.json of a model folder or beside a .safetensors, else inferred from the tensor shapes")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="context length when the configuration is inferred from the tensor shapes (default 1024)")
    parser.add_argument("--prompts", default=None,
                        help="prompt file: .npy int [N, S] (0 = pad), .json list of id lists or of strings, or text (one prompt a line)")
    parser.add_argument("--tokenizer", default=None, help="SentencePiece .model for text prompts (default prompts: 8 English sentences)")
    parser.add_argument("--out", default="audit_out", help="output folder (default: audit_out)")
    parser.add_argument("--collapse", action="store_true",
                        help="when the verdict is 'collapsed': write the collapsed checkpoint OUT/collapsed (constant operator = "
                        "mean G_LM; PLDRModel.from_pretrained loads it) with its measured approximation error in "
                        f"{COLLAPSE_REPORT}; otherwise refuse (exit 2)")
    parser.add_argument("--force", action="store_true", help="with --collapse: write the collapsed checkpoint whatever the verdict")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke-test sizes ({QUICK.n_order_tokens} sampled tokens, {QUICK.n_decode_steps} decoding steps) "
                        "instead of the published protocol")
    parser.add_argument("--operators", default=None, metavar="FILE.npz",
                        help="audit constant operators [L, H, d, d] from an .npz instead of a model")
    parser.add_argument("--operators-key", default=None, help="the array of --operators to audit (default: every array)")
    parser.add_argument("--backend", default="auto", choices=("auto", "reference", "torch"),
                        help="auto (default): torch (plga.kernels.PLDRModel) on a non-CPU device or in float32, else the float64 "
                        "reference (as fast as torch on the CPU at every measured size; docs/audit.md)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the built-in model and of the pair/candidate draws")
    parser.add_argument("--decode-steps", type=int, default=None, help=f"greedy steps of cached vs recomputed decoding (default {AuditSizes().n_decode_steps}, the published protocol)")
    parser.add_argument("--order-tokens", type=int, default=None, help=f"sampled tokens per continuation for the order parameter (default {AuditSizes().n_order_tokens}; "
                        "a continuation also stops at the end-of-sequence id)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser


def audit_main(args: argparse.Namespace) -> int:
    """Run the audit from parsed arguments: the verdict first, then where the outputs are."""
    from .runner import run_audit, run_operator_audit
    from .summary import coverage_line
    from .verdict import one_line

    t0 = time.perf_counter()
    out = Path(args.out)
    if args.operators:
        _refuse_model_options(args)
        run_operator_audit(args.operators, out, key=args.operators_key, plots=not args.no_plots)
        print(f"operator audit of {args.operators}: {out / 'operators_audit.json'}, {out / 'operators_summary.md'}")
        return 0
    if args.force and not args.collapse:
        raise UsageError("--force only applies to --collapse")
    config = None
    if args.config:
        from ..reference.config import PLDRConfig

        if args.max_seq_len is not None:
            raise UsageError("--max-seq-len sets the context of an inferred configuration; --config gives its own max_seq_len")
        config = PLDRConfig.from_json(args.config)
    if args.max_seq_len is not None and args.max_seq_len < 1:
        raise UsageError(f"--max-seq-len must be ≥ 1, got {args.max_seq_len}")
    sizes = QUICK if args.quick else AuditSizes()
    if args.order_tokens is not None:
        if args.order_tokens < 1:
            raise UsageError(f"--order-tokens must be ≥ 1, got {args.order_tokens}")
        sizes = dataclasses.replace(sizes, n_order_tokens=args.order_tokens)
    try:
        rec = run_audit(
            checkpoint=args.checkpoint, prompts=args.prompts, tokenizer=args.tokenizer, out_dir=out,
            collapse=args.collapse, force=args.force, seed=args.seed, device=args.device, dtype=args.dtype,
            backend=args.backend, n_decode_steps=args.decode_steps, progress=not args.no_progress, sizes=sizes,
            plots=not args.no_plots, config=config, max_seq_len=args.max_seq_len or 1024,
        )
    except CollapseRefusedError as exc:  # the audit was written: its verdict still comes first, on stdout
        if exc.record is not None:
            print(f"verdict: {one_line(exc.record['verdict'])}")
            print(f"scope: {coverage_line(exc.record['coverage'])}")
        raise
    print(f"verdict: {one_line(rec['verdict'])}")
    print(f"scope: {coverage_line(rec['coverage'])}")
    print(_outputs_line(rec, out, time.perf_counter() - t0))
    return 0


def _refuse_model_options(args: argparse.Namespace) -> None:
    """``--operators`` audits an operator file: a model, prompts or a collapse are a mistake, not ignored
    (``--quick`` and the backend options change nothing there)."""
    given = [name for name, set_ in (
        ("a checkpoint", args.checkpoint is not None), ("--collapse", args.collapse), ("--force", args.force),
        ("--prompts", args.prompts is not None), ("--tokenizer", args.tokenizer is not None),
        ("--decode-steps", args.decode_steps is not None), ("--order-tokens", args.order_tokens is not None),
        ("--config", args.config is not None), ("--max-seq-len", args.max_seq_len is not None),
    ) if set_]
    if given:
        raise UsageError(f"--operators audits an operator file; {', '.join(given)} belong(s) to a model audit: drop them or --operators")


def _outputs_line(rec: dict[str, Any], out: Path, seconds: float) -> str:
    """The last line: the verdict again and every output written."""
    files = [JSON_NAME, SUMMARY_NAME, RAW_NAME, *rec.get("plots", [])]
    line = f"{rec['verdict']['verdict']}; wrote {out}/: {', '.join(files)}"
    if rec.get("collapse") and not rec["collapse"].get("refused"):
        forced = " (forced)" if rec["verdict"]["verdict"] != "collapsed" else ""
        line += f"; collapsed checkpoint{forced} {out / COLLAPSED_DIR}/ with its error in {COLLAPSE_REPORT}"
    return line + f" ({seconds:.1f} s)"


