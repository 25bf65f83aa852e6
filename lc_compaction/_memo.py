"""The process-wide memos of the package: what one policy's strategies remember of the texts they read and a new
policy finds (the fact guard's extractions, `facts._SHARED_EXTRACTIONS`; the truncation notes and the progress
note lines made with the built-in guard, `strategies.truncate._SHARED_NOTES`, `progress._SHARED_LINES`). Each is
a function of its key alone and bounded; a module that keeps one registers how to forget it (`remembers`), and
`clear` forgets them all: what a benchmark does before a call it reports as a first one (nothing remembered), and
what a test may do to start from nothing.

This module depends on nothing else of the package."""

from __future__ import annotations

from collections.abc import Callable

_CLEARS: list[Callable[[], None]] = []


def remembers(clear: Callable[[], None]) -> None:
    """Register `clear`, which forgets one process-wide memo (called by `clear`)."""
    _CLEARS.append(clear)


def clear() -> None:
    """Forget every process-wide memo of the package (the next compaction reads every text again, as the first
    compaction of a new process does; the token counts are the counter's, not these)."""
    for forget in _CLEARS:
        forget()
