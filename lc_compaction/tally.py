"""Counting only what is new: `CountTally`, what a call counted, so the next call on the grown history counts
the k new messages, not the whole history.

A tally is plain JSON (it lives in graph state between model calls), but it is trusted only in the process that
made it and only for the message objects it counted, or equal ones (`tally_prefix`): a message replaced by id
with other content (LangGraph's `add_messages`, `update_state`) or a removed one makes everything recounted (the
per-message count cache still spares the tokenizer for content it has seen). A history loaded again from a
checkpoint holds new but equal objects: it is compared by value once, then by pointer again.

The steady-state call is O(k) for k new messages plus one C-level pointer comparison of the prefix (no message
object touched): the snapshot of the counted objects is extended in place, never copied.

Messages are treated as immutable, as LangChain and LangGraph treat them: a message whose `content` is changed
in place, on the same object, inside one run, is not seen by the tally (checking every message's content on
every call would cost more than the counting it saves). Replace it instead (`message.model_copy(update=...)`
with the same id), or call `compact` without a tally.
"""

from __future__ import annotations

import operator
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from lc_compaction.structure import fill_missing_ids


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

    A tally is trusted only in the process that made it and only for the message objects it counted, or equal
    ones (see `tally_prefix`): a message replaced by id with other content, or removed, makes it recount.
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
    def of(cls, messages: Sequence[BaseMessage], tokens: int, counter: Any, counts: Sequence[int] | None = None,
           *, grown_from: CountTally | None = None) -> CountTally:
        """The tally of `messages` counted by `counter` (a TokenCounter; total `tokens`), remembering in this
        process which message objects it covers (see `tally_prefix`).

        Args:
            counts: per-message counts (tokens) of `messages`, or of the new messages only (`grown_from`); None
                when unknown.
            grown_from: the tally this call was given, when `messages` starts with the very objects it covered
                (`tally_prefix` returned its `length`). What it remembered is then extended in place by the new
                messages, O(new messages), and the superseded tally is forgotten; without it, O(len(messages)).
        """
        tally = cls(len(messages), messages[-1].id if messages else None, messages[0].id if messages else None,
                    tokens, counter.name)
        if messages:
            _PREFIXES.remember(tally, counter, messages, counts, grown_from=grown_from)
        return tally


class _Snapshot:
    """The message objects one tally covered, in order, and their counts (tokens; None when unknown).

    Held by exactly one registry entry at a time: a newer tally of the grown history takes it over and appends
    the new messages (O(k)), so a long session never copies its whole history on a steady-state call (a copy
    touches every message object, which costs more in CPU cache misses than in the copy itself)."""

    __slots__ = ("counter", "counts", "memo", "objects")

    def __init__(self, objects: list[BaseMessage], counts: array | None, counter: Any) -> None:
        self.objects = objects
        self.counts = counts
        self.counter = counter  # held, so the counter's id() stays its own while the entry lives
        self.memo: dict[str, Any] = {}  # what rules above derive from these objects (`prefix_memo`)


class _PrefixRegistry:
    """The message objects each recent tally covered, in this process (bounded LRU, thread-safe).

    A tally is trusted only for the same message objects, or equal ones (`covers`): a message replaced by id
    with other content (LangGraph's `add_messages`, `update_state`) makes everything recounted (the
    per-message cache still spares the tokenizer for unchanged content). Holding the objects keeps them alive,
    so an identity can never be reused by another object.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._data: OrderedDict[tuple[Any, ...], _Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(tally: CountTally, counter: Any) -> tuple[Any, ...]:
        # the counter object itself (by identity): two counters with one name (two lambdas) never share counts
        return (id(counter), tally.counter, tally.length, tally.first_id, tally.last_id, tally.tokens)

    def remember(self, tally: CountTally, counter: Any, messages: Sequence[BaseMessage],
                 counts: Sequence[int] | None, *, grown_from: CountTally | None = None) -> None:
        """Remember `tally`'s objects (see `CountTally.of` for `counts` and `grown_from`)."""
        key = self._key(tally, counter)
        with self._lock:
            snapshot = None
            if grown_from is not None:
                old_key = self._key(grown_from, counter)
                if old_key == key:  # the same history again: the entry already covers it
                    if key in self._data:
                        self._data.move_to_end(key)
                        return
                else:
                    snapshot = self._data.pop(old_key, None)
                known = grown_from.length
                if snapshot is not None and len(snapshot.objects) == known:
                    snapshot.objects.extend(messages[known:])
                    if snapshot.counts is not None and counts is not None and len(counts) == len(messages) - known:
                        snapshot.counts.extend(counts)
                    else:
                        snapshot.counts = None
                else:  # taken over by another call meanwhile: start a new one (prefix counts unknown)
                    snapshot = None
                    counts = None
            if snapshot is None:
                snapshot = _Snapshot(list(messages), _as_array(counts, len(messages)), counter)
            self._data[key] = snapshot
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def forget(self, tally: CountTally, counter: Any) -> None:
        """Drop what `tally` remembered (superseded by a newer tally of the same history)."""
        with self._lock:
            self._data.pop(self._key(tally, counter), None)

    def clear(self) -> None:
        """Drop everything remembered."""
        with self._lock:
            self._data.clear()

    def objects(self, tally: CountTally, counter: Any) -> list[BaseMessage] | None:
        """A copy of the message objects remembered with `tally` (None when unknown)."""
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
            return list(entry.objects) if entry is not None else None

    def counts(self, tally: CountTally, counter: Any) -> Sequence[int] | None:
        """A copy of the per-message counts (tokens) remembered with `tally` (None when unknown). A copy: another
        call that grows the same history extends the remembered array in place."""
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
            if entry is None or entry.counts is None or len(entry.objects) != tally.length:
                return None
            return entry.counts[:tally.length]

    def memo(self, tally: CountTally, counter: Any) -> dict[str, Any] | None:
        """The memo of the snapshot `tally` covers (see `prefix_memo`), or None."""
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
            return entry.memo if entry is not None and len(entry.objects) == tally.length else None

    def covers(self, tally: CountTally, counter: Any, messages: Sequence[Any]) -> bool:
        """Whether `messages` starts with the objects `tally` counted, or with equal ones (`starts_with`; when
        they matched by value, the snapshot takes the current objects, so the next call compares by pointer)."""
        with self._lock:
            entry = self._data.get(self._key(tally, counter))
            n = tally.length
            if entry is None or len(entry.objects) != n:
                return False
            return starts_with(entry.objects, messages, adopt=True)


def starts_with(prefix: list[Any], messages: Sequence[Any], *, adopt: bool = False) -> bool:
    """Whether `messages` starts with the items of `prefix`: the same objects, or equal ones.

    When the first items are the same object (messages kept in graph state within a run), one C-level list
    comparison: identical items are skipped by pointer (no message object is touched), and only an item that
    is not the same object is compared by value (pydantic equality). When they are not (a history loaded again
    from a checkpoint: new objects), each pair is compared by class and fields (`__dict__`, a C-level dict
    comparison, cheaper than pydantic's `__eq__`). With `adopt`, a prefix that matched by value takes the
    current objects, so the next comparison is by pointer again. An `==` that raises counts as a mismatch.

    Python equality is a little coarser than the JSON a model receives (`1 == True`, `10**20 == 1e20`): a message
    replaced by one that differs only so is taken as unchanged (the per-message count cache does the same).
    """
    n = len(prefix)
    if n > len(messages):
        return False
    if not n:
        return True
    try:
        if prefix[0] is not messages[0]:
            same = _same_fields(prefix, messages)
        elif not isinstance(messages, list):
            return all(map(operator.is_, prefix, messages))  # stops at the end of `prefix`
        else:
            prefix.extend(messages[n:])  # equal lengths: list == list compares item by item, pointers first
            try:
                same = prefix == messages
            finally:
                del prefix[n:]
    except Exception:  # noqa: BLE001 - an exotic field whose == raises (an array in additional_kwargs): not the same
        return False
    if same and adopt and (prefix[0] is not messages[0] or prefix[-1] is not messages[n - 1]):
        prefix[:] = messages[:n]
    return same


def _same_fields(prefix: list[Any], messages: Sequence[Any]) -> bool:
    """Each item of `prefix` is the item of `messages` at its position, or one of the same class and fields."""
    for a, b in zip(prefix, messages):  # stops at the end of `prefix`
        if a is not b and (type(a) is not type(b) or a.__dict__ != b.__dict__):
            return False
    return True


def _as_array(counts: Sequence[int] | None, n: int) -> array | None:
    return array("q", counts) if counts is not None and len(counts) == n else None


_PREFIXES = _PrefixRegistry()


def prefix_counts(tally: CountTally, counter: Any) -> Sequence[int] | None:
    """The per-message counts (tokens) of the messages `tally` covered, as `counter` counted them in this process,
    in order; None when this process does not know them (another process made the tally, or it was forgotten).
    A copy: another call that grows the same history extends what is remembered in place."""
    return _PREFIXES.counts(tally, counter)


def covered_objects(tally: CountTally, counter: Any) -> list[BaseMessage] | None:
    """The message objects `tally` covers in this process (a copy of the list; after a history loaded again from
    a checkpoint matched by value, the current objects); None when this process does not know the tally."""
    return _PREFIXES.objects(tally, counter)


def prefix_memo(tally: CountTally, counter: Any) -> dict[str, Any] | None:
    """A dict that lives as long as what this process remembers for `tally`, and is handed on, as it is, to the
    tally of the same history grown by new messages (`CountTally.of(..., grown_from=tally)`); a new empty one when
    the history was rewritten. A rule above the counting keeps there an index of the prefix that it extends by the
    new messages only (`dedup.duplicates`: the contents of the tool results so far), under a key of its own, with
    how many messages it covers (the snapshot grows under it). None when this process does not know the tally."""
    return _PREFIXES.memo(tally, counter)


def forget(tally: CountTally, counter: Any) -> None:
    """Drop what this process remembers for `tally` (counted by `counter`): call it when a newer tally of the same
    history supersedes it (a compaction rewrote the history), so the process keeps one entry per history.
    Nothing happens when the tally is unknown here."""
    _PREFIXES.forget(tally, counter)


def clear() -> None:
    """Forget every tally this process remembers: afterwards every tally is treated as one from another process
    (its history is counted again once). What a new process starts with; for tests and to release memory."""
    _PREFIXES.clear()


def tally_prefix(messages: Sequence[Any], counter: Any, tally: CountTally | None) -> int:
    """How many leading messages `tally` still describes: its `length` when the counter is the same and that
    prefix is made of the message objects the tally counted in this process, or of equal ones (same class and
    fields, hence the same counts); else 0 (count all). See `starts_with`: one C-level list comparison when the
    objects are the ones counted (O(length) pointer checks, no message touched); when they are new objects (a
    history loaded again from a checkpoint), a field-by-field comparison of every message, O(history), and the
    previously counted objects are released. No tokenizing, no cache lookups.
    """
    if tally is None or tally.counter != counter.name or not tally.last_id:
        return 0
    n = tally.length
    if not 0 < n <= len(messages):
        return 0
    if getattr(messages[n - 1], "id", None) != tally.last_id or getattr(messages[0], "id", None) != tally.first_id:
        return 0
    return n if _PREFIXES.covers(tally, counter, messages) else 0


def count_with_tally(messages: Sequence[BaseMessage], counter: Any, tally: CountTally | None,
                     counts: dict[int, int] | None = None, *, start: int | None = None,
                     known: dict[int, int] | None = None) -> int:
    """Tokens of `messages` (without reply priming), counting only what is new since `tally` when it still
    describes a prefix of `messages` (`tally_prefix`); O(k) for k new messages, O(len(messages)) otherwise.
    Each count made is stored in `counts` (keyed by `id(message)`) when given. A counted message without an
    id gets a uuid4 id in place (`structure.fill_missing_ids`), so every message has one before any removal.
    `start`: the caller's own `tally_prefix(messages, counter, tally)`, when it already has it. `known`: counts
    (tokens) the caller already has for some new messages, by index (a repeated tool result costs what its earlier
    copy cost: `compact._Compaction`), used instead of counting them."""
    if start is None:
        start = tally_prefix(messages, counter, tally)
    total = tally.tokens if start and tally is not None else 0  # start > 0 only with a tally
    fill_missing_ids(messages, start)
    for i in range(start, len(messages)):
        m = messages[i]
        c = known[i] if known and i in known else counter.count_message(m)
        if counts is not None:
            counts[id(m)] = c
        total += c
    return total


