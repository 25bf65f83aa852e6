"""Compaction records and undo, the pure part: what each rewrite of a thread's stored history did, and the history
as it was before it.

With offload on, every message a compaction removes or rewrites is kept: an original (a tool result, a user or
assistant message as it first arrived) under its own key in the thread's offload namespaces
(`lc_compaction.offload`, written once), and the rewrite itself as one compaction record, in
`("lc_compaction", "offload", <thread>, "compaction")` under its number (`record_key`). The record lists the
stored history as it was before the rewrite, message by message, each entry one of:

    {"id": <message id>}                                   kept as it was (the same message is stored after it)
    {"id": ..., "kind": "tool_result" | "message", "key": ...}   its original, in that namespace under that key
    {"id": ..., "message": <JSON text, `offload.message_json`>}  anything else: a note, a summary or a marker an
                                                            earlier compaction wrote, a message rewritten
                                                            around its original (small: compaction's own text)

and the ids of the stored history after it (`after`, in order). The value (plain JSON, the same on
`InMemoryStore` and `PostgresStore`):

    {"v": 1, "compaction": int, "previous": int (the record the history was at before; 0: none),
     "triggered": bool (the ladder ran; False: arrival edits or a repair alone), "before": [entry, ...],
     "after": [id, ...]}

Numbers count a thread's records from 1 and are never reused (an undone record stays, and a later compaction takes
the next number): the door's memory keeps `{"head": the record the stored history is at (0: none), "last": the
largest number given}` under `HISTORY_KEY` (`next_numbers`, `moved_to`). When the memory has no such entry (a new
thread, or a memory reset: its key removed from the state, its version or mode changed), the numbers go on after
the last record the store holds for the thread (`integrations.history.record_numbers` reads it, once: the call
writes the entry back, `{"head": 0, "last": <that number>}` when it records nothing), and the history is at no
known record (a record made then has "previous" 0: undo stops at it). A record is written once: a key already in
the store is never overwritten (`integrations.history.write_record`).

Undo (`undo_plan`, `restore`): the history before record N is the current history with the span of N's `after`
replaced by N's `before`, every message not in that span (the turns that arrived after it) kept where it is. To go
back before N, the records from the head down to N are undone newest first (the arrival-only ones after N are
kept: they changed only messages that arrived after N).

This module does no I/O: the front doors' `lc_compaction.integrations.history` reads and writes the store and the
graph state.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from lc_compaction.offload import OffloadRecord, message_from_json, message_json

__all__ = ["HISTORY_KEY", "CompactionRecord", "compaction_record", "history_entry", "history_known", "moved_to",
           "next_numbers", "record_key", "restore", "undo_plan"]

HISTORY_KEY = "history"
"""Key of the compaction records' entry in a door's memory: `{"head": int, "last": int}` (see the module)."""

_VERSION = 1


def record_key(number: int) -> str:
    """The store key of compaction record `number`: 8 digits, so keys sort as numbers."""
    return f"{number:08d}"


def _entry(memory: Any) -> tuple[int, int] | None:
    entry = memory.get(HISTORY_KEY) if isinstance(memory, dict) else None
    if not isinstance(entry, dict):
        return None
    head, last = entry.get("head"), entry.get("last")
    ok = all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (head, last))
    return (head, last) if ok else None  # type: ignore[return-value]


def history_entry(memory: Any) -> tuple[int, int]:
    """(head, last) of a door's memory's `HISTORY_KEY` entry (see the module); (0, 0) when missing or malformed."""
    return _entry(memory) or (0, 0)


def history_known(memory: Any) -> bool:
    """Whether a door's memory has a well-formed `HISTORY_KEY` entry: its "last" is then the largest number given
    in the thread; without one, the store says (see the module)."""
    return _entry(memory) is not None


def next_numbers(memory: Any, stored_last: int = 0) -> tuple[int, int]:
    """(the number the next compaction record of this thread gets, the record the history is at now: its
    "previous"), from a door's memory and `stored_last`, the largest record number the store holds for the thread
    when the memory has no entry (`history_known`; read by `integrations.history.record_numbers`); a missing or
    malformed entry and an empty store: (1, 0)."""
    head, last = history_entry(memory)
    return max(last, stored_last) + 1, head


def moved_to(memory: Any, head: int, last: int | None = None) -> dict[str, int]:
    """The memory's new `HISTORY_KEY` entry once the history is at record `head` (`last`: the largest number given,
    default: the memory's, at least `head`)."""
    _, old_last = history_entry(memory)
    return {"head": head, "last": max(old_last if last is None else last, head)}


@dataclass
class CompactionRecord:
    """One rewrite of a thread's stored history (see the module docstring for the entries).

    Attributes:
        number: its number in the thread (from 1).
        previous: the record the history was at before it (0: none).
        triggered: the ladder ran (False: arrival edits or a repair alone).
        before: the stored history before it, one entry a message, in order.
        after: the ids of the stored history after it, in order.
    """

    number: int
    previous: int
    triggered: bool
    before: list[dict[str, str]] = field(default_factory=list)
    after: list[str] = field(default_factory=list)

    def value(self) -> dict[str, Any]:
        """The store value (plain JSON)."""
        return {"v": _VERSION, "compaction": self.number, "previous": self.previous, "triggered": self.triggered,
                "before": self.before, "after": self.after}

    @classmethod
    def from_value(cls, value: Any) -> CompactionRecord:
        """The record back from its store value.

        Raises:
            ValueError: `value` is not a compaction record of a known version.
        """
        if (not isinstance(value, dict) or value.get("v") != _VERSION or not isinstance(value.get("before"), list)
                or not isinstance(value.get("after"), list) or not isinstance(value.get("compaction"), int)):
            raise ValueError(f"not an lc-compaction compaction record (version {_VERSION}): {str(value)[:120]!r}")
        return cls(value["compaction"], int(value.get("previous") or 0), bool(value.get("triggered")),
                   list(value["before"]), list(value["after"]))

    def refs(self) -> list[tuple[str, str]]:
        """(kind, key) of every original the record names, in order (what `restore` needs loaded)."""
        return [(e["kind"], e["key"]) for e in self.before if "kind" in e]


def compaction_record(number: int, previous: int, triggered: bool, before: Sequence[BaseMessage],
                      after: Sequence[BaseMessage], offloads: Sequence[OffloadRecord],
                      failed: Collection[str] = ()) -> CompactionRecord:
    """The record of one rewrite: `before` and `after` are the stored history before and after it (every message
    with an id); `offloads` the originals the call wrote or found already stored (`CompactionResult.offloads`),
    `failed` the ids of those whose write failed. A message of `before` is "kept" when the message stored after
    under its id is the same (equal), named by its original's key when one of `offloads` is that very message,
    else kept whole in the record (compaction's own text, a message rewritten around its original).
    O(len(before) + len(after)), plus the size of what is kept whole."""
    after_by_id = {m.id: m for m in after}
    originals = {id(r.message): r for r in offloads if r.message.id not in failed}
    entries: list[dict[str, str]] = []
    for m in before:
        mid = m.id or ""
        now = after_by_id.get(m.id)
        if now is not None and (now is m or now == m):
            entries.append({"id": mid})
        elif (r := originals.get(id(m))) is not None:
            entries.append({"id": mid, "kind": r.kind, "key": r.key})
        else:
            entries.append({"id": mid, "message": message_json(m)})
    return CompactionRecord(number, previous, triggered, entries, [m.id or "" for m in after])


def restore(current: Sequence[BaseMessage], record: CompactionRecord,
            originals: Mapping[tuple[str, str], BaseMessage]) -> list[BaseMessage]:
    """`current` (a thread's stored history, at `record` or after it) as it was before `record`: the span of its
    `after` ids replaced by its `before`, at the place of the first of them; every other message (what arrived
    after it) kept, in order. `originals`: the messages its references name, by (kind, key). O(len(current) +
    len(record.before)).

    Raises:
        ValueError: an original the record names is not in `originals`, or a message it kept is no longer in
            `current` (the history was changed by other means than compaction since).
    """
    by_id = {m.id: m for m in current}
    restored: list[BaseMessage] = []
    for e in record.before:
        if "message" in e:
            restored.append(message_from_json(e["message"]))
        elif "kind" in e:
            found = originals.get((e["kind"], e["key"]))
            if found is None:
                raise ValueError(f"compaction {record.number}: the original {e['kind']} {e['key']!r} is not in the "
                                 "store")
            restored.append(found)
        elif (kept := by_id.get(e["id"])) is not None:
            restored.append(kept)
        else:
            raise ValueError(f"compaction {record.number}: message {e['id']!r}, which it kept, is no longer in the "
                             "stored history")
    skip = set(record.after) | {e["id"] for e in record.before}
    out: list[BaseMessage] = []
    placed = False
    for m in current:
        if m.id in skip:
            if not placed:
                out.extend(restored)
                placed = True
            continue
        out.append(m)
    return out if placed else restored + out


def undo_plan(chain: Sequence[CompactionRecord], number: int | None) -> tuple[list[CompactionRecord], int]:
    """(the records to undo, newest first; the record the history is at afterwards) to go back before record
    `number` (None: the latest one whose ladder ran), given `chain`: the records from the head back, newest first,
    each the "previous" of the one before it. The records after `number` whose ladder did not run are kept (they
    changed only messages that arrived after it).

    Raises:
        ValueError: no such record in the chain (never recorded, or already undone), or none whose ladder ran.
    """
    if number is None:
        target = next((r for r in chain if r.triggered), None)
        if target is None:
            raise ValueError("no compaction to undo in this thread's stored history")
    else:
        target = next((r for r in chain if r.number == number), None)
        if target is None:
            raise ValueError(f"compaction {number} is not in this thread's stored history (never recorded, or "
                             "undone already)")
    undo = [r for r in chain if r.number > target.number and r.triggered]
    return [*undo, target], target.previous
