"""The project's exceptions: one type per kind of failure, one home for all of them.

Every error a *user* can cause (a bad argument, a damaged or hostile file, numbers that
overflowed in their checkpoint) derives from :class:`PlgaError`. The command line turns a
``PlgaError`` into one line on stderr and exit status 2; anything else that escapes is a bug
of ours and is shown as a traceback (exit 1). Each class also derives from the builtin a
Python caller would expect (``ValueError``, ``TypeError``), so ``except ValueError`` keeps
working for library users.

Verdicts are not errors: a kernel that does not conform raises
:class:`plga.conformance.tolerance.ConformanceFailure` (an ``AssertionError``) inside the
suite, and the command reports it with exit status 1.
"""

from __future__ import annotations

from typing import Any


class PlgaError(Exception):
    """Base of every error caused by input rather than by a bug in plga."""


class InputError(PlgaError, ValueError):
    """An argument or option has a value plga cannot use (shape, range, unknown name)."""


class InputTypeError(InputError, TypeError):
    """An argument has the wrong type (e.g. float token ids, a string where a tensor belongs)."""


class UsageError(InputError):
    """A command line that cannot run as given (missing file, conflicting options)."""


class CheckpointError(InputError):
    """A checkpoint, config or collapsed folder that cannot be used: unreadable, unsafe,
    too large for what it declares, or not matching its config."""


class CollapseRefusedError(UsageError):
    """``plga audit --collapse`` on a model whose verdict is not "collapsed", without ``--force``.
    ``record`` is the audit that was written (its verdict, its coverage)."""

    def __init__(self, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = record


class DataFileError(InputError):
    """A token, prompt, operator or vector file that cannot be used; the message names it."""


class NonFiniteError(InputError):
    """A deductive tensor or activation overflowed or became NaN; the message names the
    layer and the heads (or positions)."""


class LeanSubsetError(InputError):
    """A Lean header outside the subset that :mod:`plga.proofs_bridge` parses (or malformed,
    or nested too deep); the message is ``file:line:column: detail (token …)``."""

    def __init__(self, file: str, line: int, column: int, token: str, detail: str) -> None:
        self.file, self.line, self.column, self.token = file, line, column, token
        super().__init__(f"{file}:{line}:{column}: {detail} (token {token!r})")


class ImplementationLoadError(PlgaError):
    """``--impl`` / ``PLGA_IMPL`` names nothing importable or nothing usable as an adapter."""


__all__ = [
    "CheckpointError", "CollapseRefusedError", "DataFileError", "ImplementationLoadError", "InputError", "InputTypeError",
    "LeanSubsetError", "NonFiniteError", "PlgaError", "UsageError",
]
