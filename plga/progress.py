"""Progress bars for long work: one policy for every command.

Bars go to stderr through tqdm, only when stderr is a terminal and the caller did not ask
for quiet (``--no-progress``, or ``PLGA_NO_PROGRESS=1``), so logs and pipes stay clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def enabled(requested: bool = True) -> bool:
    """Whether bars are shown: requested, not disabled by the environment, stderr a terminal."""
    if not requested or os.environ.get("PLGA_NO_PROGRESS"):
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def progress(iterable: Iterable[T], desc: str, *, show: bool = True, total: int | None = None) -> Iterator[T]:
    """``iterable`` wrapped in a tqdm bar on stderr labelled ``desc`` when :func:`enabled`."""
    if not enabled(show):
        yield from iterable
        return
    from tqdm import tqdm

    yield from tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=False, dynamic_ncols=True)


def bar(total: int, desc: str, *, show: bool = True) -> Any:
    """A manual tqdm bar (``update(n)``, ``set_postfix_str``, ``close``); a no-op object when off."""
    if not enabled(show):
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def set_description_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


__all__ = ["bar", "enabled", "progress"]
