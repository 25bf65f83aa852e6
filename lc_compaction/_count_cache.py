"""The per-message token-count cache shared by the counters of `lc_compaction.tokens`.

A bounded, thread-safe LRU keyed by the message (see `_MessageCache`), validated on every hit so an edited
message is recounted; plus a fast path for the very same message object seen again.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, FunctionMessage

from lc_compaction._kinds import AI, HUMAN, SYSTEM, TOOL, kind


def _role(message: BaseMessage) -> str:
    """The role a message is sent with: ``system``, ``user``, ``assistant``, ``tool``, ``function`` or custom."""
    k = kind(message)
    if k == HUMAN:
        return "user"
    if k == AI:
        return "assistant"
    if k == SYSTEM:
        role = message.additional_kwargs.get("__openai_role__")
        return role if isinstance(role, str) and role else "system"
    if k == TOOL:
        return "tool"
    if isinstance(message, FunctionMessage):
        return "function"
    if isinstance(message, ChatMessage):
        return str(message.role)
    return str(getattr(message, "type", "") or "")


# ---------------------------------------------------------------------------------------------------------------
# The per-message cache
# ---------------------------------------------------------------------------------------------------------------

_ATOMS = (str, int, float, bool, type(None))


def _snapshot(value: Any) -> Any:
    """A copy of ``value`` that later in-place edits cannot change (strings are immutable; containers are copied,
    their leaf strings shared, so a snapshot costs O(structure), not O(text)). JSON-like data (dicts, lists and
    tuples of strings, numbers, booleans and None: content blocks, tool calls) is copied directly; anything else
    goes through ``copy.deepcopy``."""
    if isinstance(value, _ATOMS):
        return value
    if type(value) is dict:
        return {k: _snapshot(v) for k, v in value.items()}
    if type(value) is list:
        return [_snapshot(v) for v in value]
    if type(value) is tuple:
        return tuple(_snapshot(v) for v in value)
    return copy.deepcopy(value)


class _MessageCache:
    """A bounded, thread-safe LRU of per-message counts, validated on every hit.

    Key: ``(role, name, "id", message.id, content)`` when the message has an id (a block list's length instead of
    the content: either keeps an original and its truncated version apart); for a string-content message without
    one, ``(role, name, "text", content)`` (no tool calls) or ``(role, name, "calls", content, tool call ids)``, so
    messages re-created from the same data (e.g. converted again from OpenAI dicts) still hit; otherwise
    ``(role, name, "obj", id(message))``.  The key only
    decides where to look: a hit is used only if the stored content, tool calls and invalid tool calls equal the
    message's (``==``, which returns at once for the same objects), so an edited message (same id, new content) is
    recounted and a reused ``id()`` cannot return a wrong count.
    """

    def __init__(self, maxsize: int) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 0:
            raise ValueError(f"cache_size must be a non-negative integer, got {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[Any, ...], tuple[Any, Any, Any, int]] = OrderedDict()
        # Fast path for the same message object seen again (most of a history, call after call): keyed by
        # id(message), valid only while the message still holds the very same str content (immutable) and
        # name, and calls no tool; anything else takes the validated path above.
        self._same: dict[int, tuple[type, str, Any, Any, int]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _parts(message: BaseMessage) -> tuple[Any, Any, Any]:
        if kind(message) != AI:  # getattr on a missing pydantic field is slow: skip it
            return (message.content, None, None)
        ai = cast(AIMessage, message)  # kind AI: an AIMessage or a subclass
        return (ai.content, ai.tool_calls or None, ai.invalid_tool_calls or None)

    @staticmethod
    def _key(message: BaseMessage, role: str, parts: tuple[Any, Any, Any]) -> tuple[Any, ...]:
        name = message.name
        content, tool_calls, invalid = parts
        if message.id:
            # the content tells apart versions of one message (an original tool result and its truncated note share
            # an id; two notes of one length may point at other results): each stays cached, so compacting again
            # does not re-tokenize. A string is the key itself (its hash is computed once per string object, and
            # the entry holds it anyway), a block list by its length.
            size = content if isinstance(content, str) else len(content) if isinstance(content, list) else -1
            return (role, name, "id", message.id, size)
        if isinstance(content, str):
            if tool_calls is None and invalid is None:
                return (role, name, "text", content)
            call_ids = tuple(tc.get("id") if isinstance(tc, dict) else None for tc in (tool_calls or ()))
            if invalid is None and call_ids and all(isinstance(i, str) for i in call_ids):
                return (role, name, "calls", content, call_ids)
        return (role, name, "obj", id(message))

    def lookup(self, message: BaseMessage, compute: Callable[[BaseMessage], int]) -> int:
        """Return the cached count for ``message`` or compute, store and return it."""
        if self.maxsize == 0:
            with self._lock:
                self.misses += 1
            return compute(message)
        content = message.content
        same = self._same.get(id(message))
        if (same is not None and same[1] is content and same[0] is type(message) and same[2] == message.name
                and same[3] == message.id):
            with self._lock:
                self.hits += 1
            return same[4]
        count = self._lookup(message, compute)
        if isinstance(content, str) and not _has_tool_calls(message):
            with self._lock:
                if len(self._same) >= self.maxsize:
                    self._same.clear()
                self._same[id(message)] = (type(message), content, message.name, message.id, count)
        return count

    def _lookup(self, message: BaseMessage, compute: Callable[[BaseMessage], int]) -> int:
        role = _role(message)
        parts = self._parts(message)
        key = self._key(message, role, parts)
        with self._lock:
            entry = self._data.get(key)
        if entry is not None:
            try:
                valid = entry[0] == parts[0] and entry[1] == parts[1] and entry[2] == parts[2]
            except Exception:  # noqa: BLE001 - exotic objects whose == raises: treat as a miss
                valid = False
            if valid:
                with self._lock:
                    self.hits += 1
                    if key in self._data:
                        self._data.move_to_end(key)
                return entry[3]
        count = compute(message)
        try:
            stored = (_snapshot(parts[0]), _snapshot(parts[1]), _snapshot(parts[2]), count)
        except Exception:  # noqa: BLE001 - uncopyable content: count it, do not cache it
            stored = None
        with self._lock:
            self.misses += 1
            if stored is not None:
                self._data[key] = stored
                self._data.move_to_end(key)
                while len(self._data) > self.maxsize:
                    self._data.popitem(last=False)
        return count

    def info(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "size": len(self._data), "maxsize": self.maxsize}

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._same.clear()
            self.hits = 0
            self.misses = 0


def _has_tool_calls(message: BaseMessage) -> bool:
    """Whether `message` is an AI message carrying tool calls (valid or invalid ones)."""
    if kind(message) != AI:
        return False
    ai = cast(AIMessage, message)  # kind AI: an AIMessage or a subclass
    return bool(ai.tool_calls or ai.invalid_tool_calls)
