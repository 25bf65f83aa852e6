"""View mode's memory: the last model input, described as runs of the stored history plus the messages that
compaction rewrote, so the next call starts from it plus the new messages.

In view mode the stored history is never changed; the model gets a compacted *view* of it. Each call starts from
the previous view plus the messages stored since, so the model input grows by appending (a stable prompt-cache
prefix) and compaction runs only when that view crosses the trigger again.

The memory (plain JSON, in graph state under the front door's memory key, entry "view"):

    {"covered": n,                       # the view covers stored[:n] (messages)
     "last_id": "...",                   # id of stored[n - 1]: the view applies only while it is still there
     "segments": [[start, end, first_id, last_id] | "<id>", ...],
     "replaced": {"<id>": message_to_dict(message)}}

A segment ``[start, end, first_id, last_id]`` stands for ``stored[start:end]`` (its end ids are checked when it
is rebuilt); a string for the rewritten message with that id (a truncated result, a summary), kept in
``replaced``. On a call that compacts nothing, the new memory is the old one with the messages stored since as
one more run: O(segments), not O(history).

In the process that wrote it, the view is also kept as objects (bounded LRU, keyed by ``(covered, last_id)``):
when the memory's segments and rewritten messages are the ones it was made with, and the stored messages it
covers are still the same objects (the first and last by identity, the others the same or equal), the next model
input is that list plus the new messages, O(k) apart from a pointer copy, and the count tally of the previous
call still covers it. (The view is a function of those three, so an entry made by another conversation with the
same ids can only be used when it is the same view.)
Otherwise (another process, a history loaded again from a checkpoint: new objects, messages replaced or removed
by someone else) the view is rebuilt from the JSON, O(history), and checked, so it holds the current stored
objects; when it no longer matches the stored history, the caller compacts the whole history.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from lc_compaction.integrations.writes import edited_from
from lc_compaction.structure import check_invariants
from lc_compaction.tally import starts_with

__all__ = ["Rebuilt", "clear", "rebuild_view", "view_memory"]

logger = logging.getLogger(__name__)


def _dump(message: BaseMessage) -> dict[str, Any]:
    """A message as a plain dict (`message_to_dict`), without a ToolMessage's `artifact` (never sent to the
    model; the stored history keeps it)."""
    data = message_to_dict(message)
    data["data"].pop("artifact", None)
    return data


@dataclass
class _Entry:
    """A view kept as objects: the stored messages it covers (``stored[:covered]``), the model input, and the
    memory's ``segments`` and ``replaced`` it was made with."""

    stored: list[BaseMessage]
    view: list[BaseMessage]
    segments: list[Any]
    replaced: dict[str, Any]


class _ViewCache:
    """The views made in this process, by key (bounded LRU, thread-safe). A call takes its previous view out
    (`take`) and puts its own in, so a live conversation holds one entry."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._data: OrderedDict[tuple[int, Any], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: tuple[int, Any]) -> _Entry | None:
        with self._lock:
            return self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def put(self, key: tuple[int, Any], entry: _Entry) -> None:
        with self._lock:
            self._data[key] = entry
            while len(self._data) > self.size:
                self._data.popitem(last=False)


_VIEWS = _ViewCache()


def clear() -> None:
    """Forget every view this process keeps as objects: the next call of each conversation rebuilds its view from
    the JSON memory, O(history), as a new process does. For tests and to release memory."""
    _VIEWS.clear()


@dataclass
class Rebuilt:
    """The previous view plus the messages stored since (`messages`), and what it was made from."""

    messages: list[BaseMessage]
    covered: int
    entry: _Entry | None  # the cached objects it came from (None: rebuilt from the JSON)


def rebuild_view(stored: list[BaseMessage], view: Any) -> Rebuilt | None:
    """The model input of the previous call plus the messages stored since, from the memory's ``view`` entry;
    None when there is none or it no longer matches `stored` (then the caller compacts the whole history).

    O(k) for k new messages when this process made the view and the stored messages it covers are unchanged;
    O(history) otherwise (rebuilt from the JSON and checked with `check_invariants`).
    """
    if not isinstance(view, dict):
        return None
    covered, last_id = view.get("covered"), view.get("last_id")
    if (not isinstance(covered, int) or isinstance(covered, bool) or not 0 < covered <= len(stored)
            or stored[covered - 1].id != last_id):
        logger.debug("compaction memory does not match the stored history: recomputing from the whole history")
        return None
    entry = _VIEWS.take((covered, last_id))
    if (entry is not None and len(entry.stored) == covered and entry.segments == view.get("segments")
            and entry.replaced == (view.get("replaced") or {}) and entry.stored[0] is stored[0]
            and entry.stored[-1] is stored[covered - 1] and starts_with(entry.stored, stored)):
        return Rebuilt(entry.view + stored[covered:], covered, entry)
    # not the objects it was made from (a history loaded again from a checkpoint: new objects; or messages
    # replaced by id): rebuilt from the JSON, so the view holds the current stored objects
    messages = _from_json(stored, view, covered)
    return Rebuilt(messages, covered, None) if messages is not None else None


def _from_json(stored: list[BaseMessage], view: dict[str, Any], covered: int) -> list[BaseMessage] | None:
    segments, replaced = view.get("segments"), view.get("replaced") or {}
    if not isinstance(segments, list) or not isinstance(replaced, dict):
        return None
    out: list[BaseMessage] = []
    for seg in segments:
        if isinstance(seg, str):
            data = replaced.get(seg)
            try:
                if data is None:
                    raise KeyError(seg)
                out.extend(messages_from_dict([data]))
            except Exception:  # noqa: BLE001 - missing or malformed: the memory is not usable
                logger.debug("rewritten message %r of the remembered view cannot be read: recomputing", seg)
                return None
            continue
        if not (isinstance(seg, list) and len(seg) == 4 and all(isinstance(x, int) for x in seg[:2])):
            return None
        start, end, first_id, last_id = seg
        if not (0 <= start < end <= covered) or stored[start].id != first_id or stored[end - 1].id != last_id:
            logger.debug("a run of the remembered view is gone from the stored history: recomputing")
            return None
        out.extend(stored[start:end])
    out.extend(stored[covered:])
    if check_invariants(out):
        logger.debug("the remembered view plus the new messages breaks an invariant: recomputing")
        return None
    return out


def _equal(a: BaseMessage, b: BaseMessage) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an exotic field whose == raises: not the same
        return False


def _run(stored: list[BaseMessage], start: int, end: int) -> list[Any]:
    return [start, end, stored[start].id, stored[end - 1].id]


def view_memory(stored: list[BaseMessage], base: Rebuilt | None, old_view: Any, model_input: list[BaseMessage],
                unchanged: bool, swapped: dict[int, BaseMessage] | None = None) -> dict[str, Any]:
    """The ``view`` entry for this call's model input, and the view kept as objects for the next call.

    Args:
        stored: the stored history (with ids).
        base: what this call compacted, when it started from the previous view (else it started from `stored`).
        old_view: the previous ``view`` entry (used when `base` is given).
        model_input: the compacted list (the model input).
        unchanged: True when `model_input` is the compaction input itself (nothing compacted): the new entry is
            then the old one plus the new messages as runs, O(segments); so it is when only new messages were
            edited in place (an arrival edit, `writes.edited_from`), those kept as rewritten messages.
        swapped: new messages sent in another form, {index in `stored`: the message sent} (a mid-history
            SystemMessage sent as a HumanMessage): kept as rewritten messages, O(1) each.
    """
    n = len(stored)
    old_segments = old_view.get("segments") if isinstance(old_view, dict) else None
    if not unchanged and base is not None and isinstance(old_segments, list):
        fresh = len(base.messages) - (n - base.covered)  # where the new messages start in this call's input
        k = edited_from(base.messages, model_input)
        if k is not None and k >= fresh:  # only new messages edited in place (an arrival edit): O(new messages)
            swapped = {**(swapped or {}), **{base.covered + p - fresh: model_input[p]
                                             for p in range(k, len(model_input))
                                             if model_input[p] is not base.messages[p]}}
            unchanged = True
    if unchanged and base is not None and isinstance(old_segments, list):
        segments = list(old_segments)
        replaced = old_view.get("replaced") or {}
        if swapped:
            replaced = dict(replaced)
        _append_runs(segments, replaced, stored, base.covered, n, swapped)
    elif unchanged:
        segments, replaced = [], {}
        _append_runs(segments, replaced, stored, 0, n, swapped)
    else:
        segments, replaced = _segments(stored, model_input)
    if base is not None and base.entry is not None:  # the stored snapshot grows in place: O(k)
        entry = base.entry
        entry.stored.extend(stored[base.covered:])
        entry.view, entry.segments, entry.replaced = model_input, segments, replaced
    else:
        entry = _Entry(list(stored), model_input, segments, replaced)
    _VIEWS.put((n, stored[-1].id), entry)
    return {"covered": n, "last_id": stored[-1].id, "segments": segments, "replaced": replaced}


def _append_runs(segments: list[Any], replaced: dict[str, Any], stored: list[BaseMessage], start: int, end: int,
                 swapped: dict[int, BaseMessage] | None) -> None:
    """Append `stored[start:end]` to `segments` as runs (the first one merged with a run that ends at `start`),
    each message of `swapped` in that range as a rewritten one. O(1 + len(swapped))."""
    pos = start
    for p, m in sorted((k, v) for k, v in swapped.items() if start <= k < end) if swapped else ():
        if pos < p:
            _add_run(segments, stored, pos, p)
        replaced[str(m.id)] = _dump(m)
        segments.append(m.id)
        pos = p + 1
    if pos < end:
        _add_run(segments, stored, pos, end)


def _add_run(segments: list[Any], stored: list[BaseMessage], lo: int, hi: int) -> None:
    """Append the run `stored[lo:hi]`, merged into the last segment when that run ends at `lo`."""
    last = segments[-1] if segments else None
    if isinstance(last, list) and last[1] == lo:
        segments[-1] = _run(stored, last[0], hi)
    else:
        segments.append(_run(stored, lo, hi))


def _segments(stored: list[BaseMessage], model_input: list[BaseMessage]) -> tuple[list[Any], dict[str, Any]]:
    """Runs of `stored` and rewritten messages making up `model_input` (O(history): after a compaction). A
    message of the input is the stored one with its id when it is the same object or an equal one."""
    position = {m.id: i for i, m in enumerate(stored)}
    segments: list[Any] = []
    replaced: dict[str, Any] = {}
    start = end = -1
    for m in model_input:
        i = position.get(m.id)
        if i is not None and stored[i] is not m and not _equal(stored[i], m):
            i = None
        if i is not None and i == end:
            end += 1
            continue
        if start >= 0:
            segments.append(_run(stored, start, end))
            start = end = -1
        if i is not None:
            start, end = i, i + 1
        else:
            assert m.id is not None, "a compacted history's messages all have ids (compact fills missing ones)"
            replaced[m.id] = _dump(m)
            segments.append(m.id)
    if start >= 0:
        segments.append(_run(stored, start, end))
    return segments, replaced
