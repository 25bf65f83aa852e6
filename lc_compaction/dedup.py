"""Repeated tool results: a result byte-identical to an earlier one becomes a one-line note pointing at it.

Agents call the same tool with the same arguments again (a file listing re-read at every step, a search repeated
after a retry). A result identical, character for character, to an earlier result still in the history carries
nothing new: it is replaced by a note naming the earlier result's tool call, and nothing is lost, because the
earlier result is still there. Among the 1,349 tool results of the shared traces, the 75 such repeats hold 57% of
the tool-result tokens (AgentDojo loops that list the same 7,600-token drive on every call).

Which copy stays: the first. A later copy is replaced when it arrives, before the provider ever sees it, so what
the provider already holds (its prompt cache) is never rewritten; the note is a function of the earlier result
alone (its tool_call_id and size), byte-identical on every call and every replay.

What counts as the earlier copy: a tool result still whole, or one cut in place by the last resort because it
alone did not fit (its mark keeps the sha256 of the original content, `shorten.py`): the model saw what fits of it
there, and a second copy would be cut the same way. A result that was truncated to a note, deduplicated, or that is
pinned by the caller is never an earlier copy, and a pinned result (or an answer of the recall tool,
`integrations.recall`: the model asked to read it) is never replaced; so an agent that calls a tool
again because its earlier result was truncated gets the whole result.

`CompactionPolicy(deduplicate=True)` (the default) runs this on every call, before the trigger is checked
(`compact.py`); it is recorded as an action of `DEDUP_STRATEGY`, kind "deduplicated".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from lc_compaction._kinds import TOOL, kind
from lc_compaction.markers import LOOKUP_TOOL_NAMES, MARK_KEY, is_shortened, is_truncated

__all__ = ["DEDUP_MIN_CHARS", "DEDUP_STRATEGY", "arrival_notes", "content_sha256", "detail", "duplicates",
           "is_deduplicated", "note_for", "referenced", "restorations", "same_as"]

DEDUP_STRATEGY = "deduplicate_tool_results"
"""`Action.strategy` of a repeated result replaced by its note (`Action.kind` "deduplicated")."""

DEDUP_MIN_CHARS = 400
"""Results shorter than this (characters of content, as sent: a string, or a block list as JSON) are never replaced:
the note is about 40 tokens, and at OpenAI's rule of thumb of 4 characters a token, 400 characters is about 100
tokens, so a note saves at least about half of what it replaces."""


def is_deduplicated(message: BaseMessage) -> bool:
    """True for a ToolMessage whose content is a deduplication note (`note_for`)."""
    mark = (message.response_metadata or {}).get(MARK_KEY) if kind(message) == TOOL else None
    return isinstance(mark, dict) and mark.get("kind") == "deduplicated"


def same_as(message: BaseMessage) -> str | None:
    """The id of the earlier result a deduplication note points at (its mark's "same_as"); None for any other
    message."""
    if not is_deduplicated(message):
        return None
    target = message.response_metadata[MARK_KEY].get("same_as")
    return target if isinstance(target, str) else None


def _key(content: Any) -> str | None:
    """The content as one string to compare (a string as is, a block list as JSON with sorted keys), or None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    return None


def content_sha256(content: Any) -> str | None:
    """The sha256 (hex) of a message content as `_key` spells it; what a cut result's mark keeps (`shorten.py`)."""
    key = _key(content)
    return None if key is None else hashlib.sha256(key.encode("utf-8")).hexdigest()


class _Copies:
    """The earlier copies in `messages[:n]`: the first whole tool result of each content (`_key`) and the first cut
    one of each original's sha256; the results never taken as copies (truncated, deduplicated, the recall tool's
    answers) are left out. Pins are not: `duplicates` checks the copy it finds."""

    __slots__ = ("cut", "n", "whole")

    def __init__(self) -> None:
        self.n = 0
        self.whole: dict[str, int] = {}
        self.cut: dict[str, int] = {}

    def extend(self, messages: Sequence[BaseMessage], upto: int) -> None:
        """Index `messages[self.n:upto]`."""
        for i in range(self.n, upto):
            m = messages[i]
            if kind(m) == TOOL:
                self.add(i, _entry(m))
        self.n = max(self.n, upto)

    def add(self, i: int, entry: tuple[bool, str] | None) -> None:
        """Index tool result `i`, whose `_entry` is `entry`, unless one of the same content came before."""
        if entry is not None:
            (self.cut if entry[0] else self.whole).setdefault(entry[1], i)


def _entry(message: BaseMessage) -> tuple[bool, str] | None:
    """How tool result `message` may be an earlier copy (`_Copies`): `(True, sha256 of the original)` when it was cut
    in place, `(False, its content as one string, _key)` when it is whole and long enough (`DEDUP_MIN_CHARS`);
    None when it is never one (truncated, deduplicated, a lookup tool's answer, short, or of no content kind)."""
    if is_truncated(message) or is_deduplicated(message) or message.name in LOOKUP_TOOL_NAMES:
        return None
    if is_shortened(message):
        sha = message.response_metadata[MARK_KEY].get("sha256")
        return (True, sha) if sha else None
    key = _key(message.content)
    return (False, key) if key is not None and len(key) >= DEDUP_MIN_CHARS else None


_MEMO_KEY = "dedup.copies"


def duplicates(messages: Sequence[BaseMessage], start: int = 0,
               pinned: Callable[[BaseMessage], bool] | None = None,
               memo: dict[str, Any] | None = None) -> dict[int, int]:
    """`{i: j}`: the tool result `messages[i]` (`i >= start`: the messages new since the previous call) has the same
    content, at least `DEDUP_MIN_CHARS` characters, as the earlier tool result `messages[j]`, which is whole or was
    cut in place (see the module docstring); `j` is the first such result. `pinned`: results it is true for are
    neither replaced nor referenced. No step at all when no new tool result is long enough.

    `memo`: `tally.prefix_memo` of the tally that covers `messages[:start]` (the same objects): the index of the
    earlier copies is kept there and extended by the new messages only, so a call costs O(new messages), not
    O(history). Without it, O(len(messages)) dictionary steps."""
    n = len(messages)
    if not any(kind(messages[i]) == TOOL and len(_key(messages[i].content) or "") >= DEDUP_MIN_CHARS
               for i in range(start, n)):
        return {}
    copies = memo.get(_MEMO_KEY) if memo is not None else None
    if not isinstance(copies, _Copies) or copies.n > start:
        copies = _Copies()
        if memo is not None:
            memo[_MEMO_KEY] = copies
    copies.extend(messages, start)
    new = _Copies()
    out: dict[int, int] = {}
    for i in range(start, n):
        m = messages[i]
        if kind(m) != TOOL or (pinned is not None and pinned(m)):
            continue  # a pinned result is never a copy
        entry = _entry(m)
        if entry is not None and not entry[0]:  # whole: a repeat of an earlier copy?
            key = entry[1]
            j = copies.whole.get(key)
            if j is None:
                j = new.whole.get(key)
            if j is None and (copies.cut or new.cut):
                sha = hashlib.sha256(key.encode("utf-8")).hexdigest()
                j = copies.cut.get(sha, new.cut.get(sha))
            if j is not None:
                if pinned is not None and pinned(messages[j]):
                    return _scan(messages, start, pinned)  # the first copy is pinned: another may be the copy
                out[i] = j
                continue  # replaced by its note: never a copy
        new.add(i, entry)
    return out


def _scan(messages: Sequence[BaseMessage], start: int, pinned: Callable[[BaseMessage], bool]) -> dict[int, int]:
    """`duplicates` without an index, pins excluded as copies: the whole history, once."""
    copies = _Copies()
    out: dict[int, int] = {}
    for i, m in enumerate(messages):
        if kind(m) != TOOL or pinned(m):
            continue
        entry = _entry(m)  # None for the recall tool's answer: what the model asked to read, it gets whole
        if entry is not None and not entry[0] and i >= start:
            j = copies.whole.get(entry[1])
            if j is None and copies.cut:
                j = copies.cut.get(hashlib.sha256(entry[1].encode("utf-8")).hexdigest())
            if j is not None:
                out[i] = j
                continue
        copies.add(i, entry)
    return out


def note_for(message: ToolMessage, original: BaseMessage) -> ToolMessage:
    """A copy of `message` (same id, tool_call_id, name, status, artifact) whose content says it is identical to
    `original` (an earlier tool result) and where to read it; marked `{"kind": "deduplicated", "same_as": <original's
    id>, "original_chars": n}` (characters of the content replaced). `message` may be a note already (pointed at
    another earlier copy by `restorations`): `n` and the size the text names stay those of the content it
    replaced, not of the note's own text."""
    earlier = (message.response_metadata or {}).get(MARK_KEY) if is_deduplicated(message) else None
    chars = earlier.get("original_chars") if isinstance(earlier, dict) else None
    if not isinstance(chars, int):
        chars = len(_key(message.content) or "")
    call = getattr(original, "tool_call_id", "") or ""
    tool = f" of {original.name}" if getattr(original, "name", None) else ""
    where = ", shown there cut to fit the context window" if is_shortened(original) else ""
    text = (f"[lc-compaction: this result ({chars:,} characters) is identical to the earlier result{tool} for "
            f"tool call {call} above{where}; it is not repeated here]")
    meta = dict(message.response_metadata or {})
    meta[MARK_KEY] = {"kind": "deduplicated", "same_as": original.id, "original_chars": chars}
    return message.model_copy(update={"content": text, "response_metadata": meta})


def arrival_notes(messages: Sequence[BaseMessage], found: dict[int, int], count: Callable[[BaseMessage], int],
                  tokens: Callable[[int], int]) -> list[tuple[int, ToolMessage, int]]:
    """The notes that replace the repeated results `found` (`duplicates(messages, ...)`): `(i, note, its tokens)`
    for each `i` whose note (`note_for`) is smaller than the result by `count` (tokens); `tokens(i)` is the result's
    own count. A note that would not be smaller is skipped."""
    out = []
    for i, j in found.items():
        new = note_for(messages[i], messages[j])  # type: ignore[arg-type]  # duplicates() picks tool results
        n = count(new)
        if n < tokens(i):
            out.append((i, new, n))
    return out


def detail(j: int) -> str:
    """`Action.detail` of a result deduplicated against message `j`."""
    return f"identical to message {j}"


def restorations(notes: Sequence[tuple[int, BaseMessage]], gone: Sequence[BaseMessage], pointed_at: Collection[str]
                 ) -> list[tuple[int, BaseMessage, str]]:
    """What keeps every deduplication note of a history pointing at a result still there, once the messages of
    `gone` left it (removed, or replaced by a truncation note). `notes`: `(index, message)` of the history's
    messages that may be notes, in order (all of them, or any superset of its notes); `pointed_at`: a superset of
    the ids its notes point at, so that a call whose `gone` holds none of them costs O(len(gone)). For each message
    of `gone` that notes name as their earlier copy, the first of those notes gets the content back (that
    message's content and, for a result cut in place, its cut mark; the note's own id, tool_call_id and name stay)
    and the others are pointed at it (`note_for`). Returns `(index, new message, detail)` in order; `LadderState`
    records each as a "restored" action of `DEDUP_STRATEGY` (its `tokens_saved` is negative: the tokens the
    content costs again). O(len(notes)) when there is one."""
    by_id = {m.id: m for m in gone if m.id and kind(m) == TOOL and m.id in pointed_at}
    if not by_id:
        return []
    messages = dict(notes)
    pointing: dict[str, list[int]] = {}
    for i, m in notes:
        if is_deduplicated(m):
            same = m.response_metadata[MARK_KEY].get("same_as")
            if same in by_id:
                pointing.setdefault(same, []).append(i)
    out: list[tuple[int, BaseMessage, str]] = []
    for same, indices in pointing.items():
        original = by_id[same]
        first = messages[indices[0]]
        meta = {k: v for k, v in (first.response_metadata or {}).items() if k != MARK_KEY}
        if is_shortened(original):
            meta[MARK_KEY] = original.response_metadata[MARK_KEY]
        restored = first.model_copy(update={"content": original.content, "response_metadata": meta})
        out.append((indices[0], restored, f"the earlier copy (message {same}) left the history"))
        out.extend((i, note_for(messages[i], restored), f"points at message {restored.id} now")  # type: ignore[arg-type]
                   for i in indices[1:])
    return out


def referenced(messages: Sequence[BaseMessage]) -> dict[int, int]:
    """`{j: k}`: the earlier copy `messages[j]` that deduplication notes point at, and the index `k` of the latest
    such note. `ladder.protect` keeps an earlier copy's step whenever a note pointing at it is kept, in a pass that
    need not fit the budget: taking the copy out would only move its content forward (`restorations`), breaking
    the cached prefix for nothing. Over the budget the copy's step may go (a large step it sits in could hold the
    history over the budget) and the note gets the content back."""
    notes = [(k, m) for k, m in enumerate(messages) if is_deduplicated(m)]
    if not notes:
        return {}
    at = {m.id: i for i, m in enumerate(messages) if m.id and kind(m) == TOOL}
    out: dict[int, int] = {}
    for k, m in notes:
        j = at.get(m.response_metadata[MARK_KEY].get("same_as"))
        if j is not None and j < k:
            out[j] = k
    return out
