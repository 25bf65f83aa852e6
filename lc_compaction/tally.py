"""Counting only what is new: `CountTally`, what a call counted, so the next call on the grown history counts
the k new messages, not the whole history.

A tally is plain JSON (it lives in graph state between model calls), but it is trusted only in the process that
made it and only for the very message objects it counted (`tally_prefix`): a message replaced by id (LangGraph's
`add_messages`, `update_state`, a `RemoveMessage`) or loaded again from a checkpoint is a new object, and then
everything is recounted (the per-message count cache still spares the tokenizer for content it has seen).

Messages are treated as immutable, as LangChain and LangGraph treat them: a message whose `content` is changed
in place, on the same object, inside one run, is not seen by the tally (checking every message's content on
every call would cost more than the counting it saves). Replace it instead (`message.model_copy(update=...)`
with the same id), or call `compact` without a tally.
"""

from __future__ import annotations

import operator
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage


@dataclass(frozen=True)
class CountTally:
    """What the previous call counted, so a call on a history grown by k messages counts only those k.

    Plain JSON data (`to_dict` / `from_dict`), meant to live in graph state between model calls.

    Attributes:
        length: number of messages counted (the prefix).
        last_id: id of the last message of that prefix; the prefix is reused only when the message at
            `length - 1` still has this id (and the first message still has `first_id`).
        first_id: id of the first message of that prefix.
        tokens: tokens of those messages (without reply priming or extra tokens), by the policy's counter.
        counter: the counter's name; a tally from another counter is ignored.

    A tally is trusted only in the process that made it and only for the very same message objects (see
    `tally_prefix`): a message replaced by id, edited or loaded again from a checkpoint is recounted.
    """

    length: int
    last_id: str | None
    first_id: str | None
    tokens: int
    counter: str

    def to_dict(self) -> dict[str, Any]:
        """The tally as plain JSON, for graph state (read back with `from_dict`)."""
        return {"length": self.length, "last_id": self.last_id, "first_id": self.first_id,
                "tokens": self.tokens, "counter": self.counter}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> CountTally | None:
        """The tally from `to_dict()` output; None for None or malformed data (then everything is counted)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["length"]), data.get("last_id"), data.get("first_id"), int(data["tokens"]),
                       str(data["counter"]))
        except (KeyError, TypeError, ValueError):
            return None

    @classmethod
    def of(cls, messages: Sequence[BaseMessage], tokens: int, counter: Any,
           counts: tuple[int, ...] | None = None) -> CountTally:
        """The tally of `messages` counted by `counter` (a TokenCounter; total `tokens`, per message `counts`
        when known), remembering in this process which message objects it covers (see `tally_prefix`)."""
        tally = cls(len(messages), messages[-1].id if messages else None, messages[0].id if messages else None,
                    tokens, counter.name)
        if messages:
            _PREFIXES.remember(tally, counter, tuple(messages), counts)
        return tally


class _PrefixRegistry:
    """The message objects each recent tally covered, in this process (bounded LRU, thread-safe).

    A tally is trusted only for the very same message objects: a message replaced by id (LangGraph's
    `add_messages`, `update_state`) or loaded again from a checkpoint is a new object, and then everything is
    recounted (the per-message cache still spares the tokenizer for unchanged content). Holding the objects
    keeps them alive, so an identity can never be reused by another object.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._data: OrderedDict[tuple[Any, ...], tuple[tuple[BaseMessage, ...], tuple[int, ...] | None, Any]] = \
            OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(tally: CountTally, counter: Any) -> tuple[Any, ...]:
        # the counter object itself (by identity): two counters with one name (two lambdas) never share counts
        return (id(counter), tally.counter, tally.length, tally.first_id, tally.last_id, tally.tokens)

    def remember(self, tally: CountTally, counter: Any, objects: tuple[BaseMessage, ...],
                 counts: tuple[int, ...] | None) -> None:
        key = self._key(tally, counter)
        with self._lock:
            self._data[key] = (objects, counts, counter)  # the counter is held: its id stays its own
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def forget(self, tally: CountTally, counter: Any) -> None:
        """Drop what `tally` remembered (superseded by a newer tally of the same history)."""
        with self._lock:
            self._data.pop(self._key(tally, counter), None)

    def counts(self, tally: CountTally, counter: Any) -> tuple[int, ...] | None:
        """The per-message counts remembered with `tally` (None when unknown)."""
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
        return entry[1] if entry is not None else None

    def covers(self, tally: CountTally, counter: Any, messages: Sequence[Any]) -> bool:
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
        objects = entry[0] if entry is not None else None
        n = tally.length
        # map stops at the end of `objects` (n items): no slice of `messages` is copied
        return objects is not None and len(objects) == n and all(map(operator.is_, objects, messages))


_PREFIXES = _PrefixRegistry()


def tally_prefix(messages: Sequence[Any], counter: Any, tally: CountTally | None) -> int:
    """How many leading messages `tally` still describes: its `length` when the counter is the same and that
    prefix is made of the very message objects the tally counted (in this process); else 0 (count all).
    O(length) identity checks, in C: no tokenizing, no cache lookups."""
    if tally is None or tally.counter != counter.name or not tally.last_id:
        return 0
    n = tally.length
    if not 0 < n <= len(messages):
        return 0
    if getattr(messages[n - 1], "id", None) != tally.last_id or getattr(messages[0], "id", None) != tally.first_id:
        return 0
    return n if _PREFIXES.covers(tally, counter, messages) else 0


def count_with_tally(messages: Sequence[BaseMessage], counter: Any, tally: CountTally | None,
                     counts: dict[int, int] | None = None, *, start: int | None = None) -> int:
    """Tokens of `messages` (without reply priming), counting only what is new since `tally` when it still
    describes a prefix of `messages` (`tally_prefix`); O(k) for k new messages, O(len(messages)) otherwise.
    Each count made is stored in `counts` (keyed by `id(message)`) when given. A counted message without an
    id gets a uuid4 id in place, so every message has one before any removal. `start`: the caller's own
    `tally_prefix(messages, counter, tally)`, when it already has it."""
    if start is None:
        start = tally_prefix(messages, counter, tally)
    total = tally.tokens if start else 0  # type: ignore[union-attr]
    for m in messages[start:]:
        if not m.id:  # as LangChain's SummarizationMiddleware does: an id, given in place (same object)
            m.id = str(uuid.uuid4())
        c = counter.count_message(m)
        if counts is not None:
            counts[id(m)] = c
        total += c
    return total


