"""The process-wide memos of the package: what one policy's strategies remember of the texts they read and a new
policy finds (the fact guard's extractions, `facts._SHARED_EXTRACTIONS`; the truncation notes and the progress
note lines made with the built-in guard, `strategies.truncate._SHARED_NOTES`, `progress._SHARED_LINES`), each a
`Bounded`. Each is a function of its key alone and bounded; a module that keeps one registers how to forget it
(`remembers`), and `clear` forgets them all: what a benchmark does before a call it reports as a first one
(nothing remembered), and what a test may do to start from nothing.

This module depends on nothing else of the package."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

_CLEARS: list[Callable[[], None]] = []


def remembers(clear: Callable[[], None]) -> None:
    """Register `clear`, which forgets one process-wide memo (called by `clear`)."""
    _CLEARS.append(clear)


def clear() -> None:
    """Forget every process-wide memo of the package (the next compaction reads every text again, as the first
    compaction of a new process does; the token counts are the counter's, not these)."""
    for forget in _CLEARS:
        forget()


class Bounded(Generic[V]):
    """A memo of values by key, all forgotten when it holds `max_items` of them or when the texts their keys hold
    (the `chars` each `put` is given, characters) would pass `max_chars`: the texts are the history's own strings,
    held by the keys, and the bound keeps a memo from holding a history's worth after the history is gone. A dict's
    get and set are atomic in CPython: threads share one without a lock (a lost entry is made again).

    Attributes:
        items: the values by key (read with `items.get(key)`).
    """

    def __init__(self, max_items: int, max_chars: int) -> None:
        self.max_items = max_items
        self.max_chars = max_chars
        self.items: dict[Hashable, V] = {}
        self.chars = 0

    def put(self, key: Hashable, chars: int, value: V) -> None:
        """Remember `value` under `key` (`chars`: characters of the texts the key holds), first forgetting
        everything when the bound would be passed."""
        if len(self.items) >= self.max_items or self.chars + chars > self.max_chars:
            self.clear()
        self.items[key] = value
        self.chars += chars

    def clear(self) -> None:
        """Forget every value."""
        self.items.clear()
        self.chars = 0
