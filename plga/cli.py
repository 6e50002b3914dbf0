"""The ``plga`` console script.

Every subcommand returns an exit code. One error mapper (:func:`main`): an error caused by
the user's input (:class:`plga.errors.PlgaError`) is one line on stderr and exit status 2
(``PLGA_DEBUG=1`` shows its traceback); anything else is a bug of ours and keeps its
traceback (exit 1). Verdicts use 0 (pass) and 1 (fail).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from . import __version__
from .allocator import keep_freed_blocks
from .errors import PlgaError, UsageError
from .inputs import load_operators, load_tokens


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    from .atomic import atomic_path

    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    except OSError as exc:  # a folder in the way, no permission, a full disk: the path the user gave
        raise UsageError(f"cannot write --out {path}: {exc.strerror or exc}") from None


def _load_model(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], Any, list[np.ndarray] | None]:
    """(params, config, stored operators): a collapsed checkpoint (``plga audit --collapse``,
    ``PLDRModel.save_collapsed``) brings its constant operators, any other checkpoint None."""
    from .reference.checkpoint import is_collapsed, load_checkpoint, load_collapsed
    from .reference.config import PLDRConfig

    if is_collapsed(args.checkpoint):
        if args.config:
            raise UsageError(f"{args.checkpoint} is a collapsed checkpoint with its own config.json; drop --config")
        return load_collapsed(args.checkpoint)
    config = PLDRConfig.from_json(args.config) if args.config else None
    params, config = load_checkpoint(args.checkpoint, config=config, max_seq_len=args.max_seq_len)
    return params, config, None


def _check_backend_options(args: argparse.Namespace) -> None:
    """--dtype and --device belong to the torch backend: refused with the reference one."""
    if args.backend == "reference" and (args.dtype != "float64" or args.device != "cpu"):
        raise UsageError("--dtype and --device apply to --backend torch; the reference computes in float64 on the CPU")


def cmd_check_sdpa(args: argparse.Namespace) -> int:
    """PLGA with G = I against SDPA, float64 and mpmath references, seeded inputs."""
    from .reference.reduction import MP_BOUND, sdpa_reduction

    rows, ok = sdpa_reduction(args.seed, args.dps)
    width = max(len(r[1]) for r in rows)
    print(f"{'backend':<18} {'shape':<{width}} {'mask':<7} max|PLGA(G=I) − SDPA|")
    for backend, shape, mask, diff in rows:
        print(f"{backend:<18} {shape:<{width}} {mask:<7} {diff:.3e}")
    worst64 = max(r[3] for r in rows if r[0] == "float64")
    worstmp = max(r[3] for r in rows if r[0] != "float64")
    print(f"float64 max difference {worst64!r} (must be exactly 0); mpmath {worstmp:.3e} (must be ≤ {MP_BOUND:g}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_forward(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on token ids and write logits (and deductive tensors)."""
    _check_backend_options(args)
    tokens = load_tokens(args.tokens)
    params, config, stored_g = _load_model(args)
    arrays: dict[str, np.ndarray] = {}
    if args.backend == "reference":
        from .reference import decoder

        result = decoder.forward(decoder.to_backend(params), config, tokens, constant_g=stored_g)
        arrays["logits"] = result.logits
        if args.deductive:
            for i, ded in enumerate(result.deductive):
                for name, value in ded.items():  # A, A_LM, A_P (not under constant operators), G_LM, scores
                    arrays[f"layer{i}.{name}"] = np.asarray(value)
    else:
        arrays.update(_torch_forward(params, config, tokens, args, stored_g))
    _save_npz(args.out, arrays)
    print(f"wrote {args.out}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items()))
    return 0


def _torch_model(params: dict[str, np.ndarray], config: Any, args: argparse.Namespace, stored_g: list[np.ndarray] | None) -> Any:
    """The kernels' PLDRModel on ``args.device`` in ``args.dtype`` (the operator chain stays ≥ float32);
    collapsed when the checkpoint stored constant operators."""
    try:
        import torch

        from .kernels import PLDRModel
    except ImportError as exc:
        raise UsageError(f"--backend torch needs the torch extra (pip install 'plga[torch]'): {exc}") from None
    dtype = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    from .reference.checkpoint import COLLAPSED_KEY

    state = params if stored_g is None else params | {COLLAPSED_KEY: np.stack(stored_g)}
    return PLDRModel.from_reference(state, config, dtype=dtype, device=torch_device(args.device))


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


def _torch_forward(
    params: dict[str, np.ndarray], config: Any, tokens: np.ndarray, args: argparse.Namespace, stored_g: list[np.ndarray] | None
) -> dict[str, np.ndarray]:
    import torch

    model = _torch_model(params, config, args, stored_g)
    with torch.no_grad():
        out = model(torch.as_tensor(tokens, device=args.device), deductive=args.deductive)
    arrays = {"logits": out.logits.double().cpu().numpy()}
    if args.deductive:
        for i, ded in enumerate(out.deductive):
            for name, value in ded.items():
                arrays[f"layer{i}.{name}"] = value.double().cpu().numpy()
    return arrays


def cmd_generate(args: argparse.Namespace) -> int:
    """Greedy (or seeded sampled) decoding in a cache mode; writes tokens and step logits."""
    from .reference import decoder
    from .reference.sampling import DEFAULT_SEED

    _check_backend_options(args)
    tokens = load_tokens(args.tokens)
    params, config, stored_g = _load_model(args)
    if args.constant_g and stored_g is not None:
        raise UsageError(f"{args.checkpoint} is collapsed and brings its own operators; drop --constant-g")
    constant_g = load_operators(args.constant_g, config) if args.constant_g else stored_g
    mode = args.mode or ("collapsed" if constant_g is not None else "kv")
    if args.constant_g and mode in decoder.LEARNER_CACHE_MODES:
        raise UsageError(f"--constant-g replaces the metric learner, whose prompt operators --mode {mode} caches; "
                         "use --mode collapsed (or nocache)")
    if mode == "collapsed" and constant_g is None:
        raise UsageError("--mode collapsed needs constant operators: a collapsed checkpoint, or --constant-g")
    if stored_g is not None and mode in decoder.LEARNER_CACHE_MODES:
        raise UsageError(f"{args.checkpoint} is collapsed (no metric learner): use --mode collapsed or nocache")
    if args.compile and (args.backend != "torch" or mode == "nocache"):
        raise UsageError("--compile captures the cached decoding steps of --backend torch: use it with --backend torch "
                         "and --mode kv, kvg or collapsed")
    if args.backend == "reference":
        result = decoder.generate(
            decoder.to_backend(params), config, tokens, args.max_new_tokens, mode,
            constant_g=constant_g, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            seed=args.seed, progress=not args.no_progress,
        )
        out_tokens, step_logits = result.tokens, result.step_logits
    else:
        import torch

        model = _torch_model(params, config, args, stored_g)
        model.compile_decode = args.compile
        if args.compile and args.max_new_tokens > 1 and not args.no_progress:
            print("compiling the decoding step (slow the first time for a shape; the disk cache speeds up later runs)",
                  file=sys.stderr)
        g = None if constant_g is None or stored_g is not None else np.stack(constant_g)
        with torch.no_grad():
            gen = model.generate(
                torch.as_tensor(tokens, device=model.device), args.max_new_tokens, mode, G=g,
                temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                return_step_logits=True, progress=not args.no_progress,
            )
        out_tokens, step_logits = gen.tokens.cpu().numpy(), gen.step_logits.double().cpu().numpy()
    _save_npz(args.out, {"tokens": out_tokens, "step_logits": step_logits})
    print(f"wrote {args.out}: tokens {out_tokens.shape}, step_logits {step_logits.shape} (mode {mode})")
    if args.temperature > 0 and args.seed is None:  # after success: a failing run keeps its one error line
        print(f"sampled with the default seed {DEFAULT_SEED} (pass --seed N for another draw)", file=sys.stderr)
    for row in out_tokens:
        print(" ".join(str(int(t)) for t in row))
    return 0


def cmd_theorems(args: argparse.Namespace) -> int:
    """Run the proofs bridge: derived, symbolic, hand-written and concrete-decoder checks of every theorem."""
    from .proofs_bridge.runner import theorems_command

    return theorems_command(args.names, as_json=args.json, max_examples=args.max_examples, dps=args.dps,
                            symbolic=not args.no_symbolic, root=args.formal_dir, readme_table=args.readme_table,
                            show_progress=not args.no_progress)


def cmd_verify(args: argparse.Namespace) -> int:
    """SDPA reduction, every theorem check and the kernel conformance quick profile, one table."""
    from .conformance.verify import verify_main

    return verify_main(args)


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="upstream .pth, .safetensors, or a folder with config.json")
    p.add_argument("--tokens", required=True, help="token ids: .npy/.npz, or JSON: a list of ids (one row) or a list "
                   "of lists (id 0 = padding)")
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
    p.add_argument("--seed", type=int, default=0, help="seed of the random q, k, v (default 0)")
    p.add_argument("--dps", type=int, default=50, help="mpmath digits (default 50)")
    p.set_defaults(func=cmd_check_sdpa)

    p = sub.add_parser("forward", help="evaluate a checkpoint on token ids; write logits (and deductive tensors)")
    _add_model_arguments(p)
    p.add_argument("--deductive", action="store_true", help="also write layer{i}.A, .A_LM, .A_P, .G_LM, .scores")
    _add_backend_arguments(p)
    p.set_defaults(func=cmd_forward)

    p = sub.add_parser("generate", help="greedy or sampled decoding in a cache mode")
    _add_model_arguments(p)
    p.add_argument("--max-new-tokens", type=int, required=True, help="how many tokens to generate after the prompt")
    p.add_argument("--mode", choices=("nocache", "kv", "kvg", "collapsed"), default=None,
                   help="nocache: recompute the whole forward (and G) every step; kv: cache K, V and the prompt's "
                   "generator A; kvg: also freeze the prompt's G_LM; collapsed: one constant operator per layer "
                   "(a collapsed checkpoint's, or --constant-g). Default: collapsed with constant operators, else kv")
    p.add_argument("--constant-g", metavar="SPEC", help="constant operators replacing the metric learner: identity, "
                   "random[:SEED], or a file (.npz with key G_LM, or .npy; [layers, heads, d, d]); goes with --mode "
                   "collapsed (the default then) or nocache")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0 = all, default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus: the smallest set reaching probability p (default 1)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default 0); the same seed gives the same "
                   "tokens on both backends")
    p.add_argument("--compile", action="store_true",
                   help="torch backend, cached modes: run each decoding step as one compiled graph (torch.compile; a "
                   "CUDA graph on CUDA). The first run of a model shape compiles (seconds to a minute, cached on disk "
                   "for later runs), so it pays off on long generations")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)")
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

    p = sub.add_parser("conformance", help="run the conformance suite on a PLGA implementation (0 conforms, 1 not, 2 usage)")
    add_conformance_arguments(p)
    p.set_defaults(func=run_from_args)

    from .conformance.verify import add_verify_arguments

    p = sub.add_parser("verify", help="the main job: SDPA reduction, every theorem check, kernel conformance (quick)")
    add_verify_arguments(p)
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


def run_command(name: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The one error mapper of every entry point (``plga``, ``python -m plga.bench``,
    ``python -m plga.conformance``, ``python -m plga.proofs_bridge``): a
    :class:`~plga.errors.PlgaError` (the user's input) is one line on stderr and exit 2
    (``PLGA_DEBUG=1`` shows its traceback); an interrupt is exit 130; anything else is a bug
    of ours and propagates with its traceback (exit 1). Large freed CPU blocks are kept for
    reuse (:func:`plga.allocator.keep_freed_blocks`)."""
    keep_freed_blocks()
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print(f"plga {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # a pipe of ours, not the user's reader: a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not raise again
        return 141  # 128 + SIGPIPE, as a shell filter whose reader left (`plga … | head`)
    except PlgaError as exc:
        if os.environ.get("PLGA_DEBUG"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"plga {name}: error: {message}", file=sys.stderr)
        return 2


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reading end is closed (poll reports an error)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no file descriptor
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``plga`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command(args.command, args.func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
