"""Strategy 1: truncate old tool results to a one-line note (the cheapest rung: nothing is removed).

Oldest first, outside the kept part, each ToolMessage's content becomes one line that says it was
truncated, its original size in characters, a preview of its start, and the identifiers of the original that the
preview does not hold (found by the fact guard, `facts.py`: reservation ids, flight numbers, amounts,
e-mails, ...), fenced and attributed to the tool (`markers.fence`) as in a summary:

    [tool result truncated by lc-compaction: the result from get_reservation_details had 1,391 characters; it
    started with: "{\"reservation_id\": \"4WQ150\", ..."; identifiers beyond that start:
    <untrusted_tool_data>get_reservation_details: HAT170; 2024-05-20; 4WQ150; ...</untrusted_tool_data>]

`tool_call_id`, `name`, `id` and `status` stay, so the call/result pair is intact. The note depends only on the
result and its call's tool name (no counter, no order that changes), so the same result gives the same bytes on
every call and every replay. Already-truncated results and excluded tools are skipped. It stops as soon as the
history is under the goal.

When the kept part alone is over the goal (one request followed by a long tool loop: coding agents,
AgentDojo), truncation reaches into it, oldest first, sparing the `keep` most recent tool results.
Parameter names follow LangChain's `ClearToolUsesEdit` (`keep`, `exclude_tools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import ToolMessage

from lc_compaction._content import content_text, tool_failure
from lc_compaction._memo import Bounded, remembers
from lc_compaction._kinds import TOOL, kind
from lc_compaction._preview import gapless, line_count, preview, quoted
from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.markers import (
    MARK_KEY,
    NOTE_IDENTIFIERS,
    NOTE_PREVIEW,
    is_stored_lookup,
    TRUNCATION_PREFIX,
    is_shortened,
    is_truncated,
    result_parts,
)
from lc_compaction.offload import recall_hint
from lc_compaction.facts import (
    LISTED_IDENTIFIER_CHARS,
    FactGuard,
    fact_guard_of,
    identifiers_beyond,
    tool_names,
    tool_of,
)

DEFAULT_NOTE_IDENTIFIER_CHARS = LISTED_IDENTIFIER_CHARS
"""Default bound of the identifiers a truncation note lists, in characters (`facts.LISTED_IDENTIFIER_CHARS`: the
values and their `"; "` separators; its docstring says how it was measured)."""


NOTE_CACHE = 1024
"""Notes remembered (by the result's text, tool, recall key and status, and the settings the note depends on): the
view mode compacts the same originals at every call, and a note costs a read of its whole result."""
NOTE_CACHE_CHARS = 8_000_000
"""Characters of the results whose notes are remembered at most (the texts are the history's own strings, held
by the cache key: the bound keeps it from holding a history's worth of results after the history is gone); the
same bound as the fact guard's extraction cache (`facts._EXTRACT_CACHE_CHARS`)."""


_SHARED_NOTES: Bounded[str] = Bounded(NOTE_CACHE, NOTE_CACHE_CHARS)
"""The notes of every `TruncateToolResults` whose guard is the built-in one or none (`FactGuard.builtin`): a note
depends on the result, its tool, recall key and status, and the strategy's class and settings alone (all in the
key), so a new policy (a restarted door, a policy built per request, the view mode) does not read again a result
another read. Forgotten by `_memo.clear`."""
remembers(_SHARED_NOTES.clear)


@dataclass
class TruncateToolResults(SyncStrategy):
    """Replace old tool results with a one-line note.

    Args:
        keep: when truncation reaches into the kept part (because the kept part alone is over the goal),
            how many of its most recent tool results it spares (default 3, as LangChain's
            `ClearToolUsesEdit.keep`). Results outside the kept part are all truncatable.
        exclude_tools: tool names whose results are never truncated (results that cannot be fetched twice,
            like a payment receipt).
        preview_chars: characters of the original content kept in the note (default 200).
        fact_guard: finds the identifiers the note lists: True (default, `FactGuard()`, the summarizer's
            patterns), a `FactGuard`, or False (the note lists none).
        max_identifier_chars: bound of the identifiers a note lists, in characters (the values and their
            `"; "` separators; default `DEFAULT_NOTE_IDENTIFIER_CHARS`, measured on the shared traces); the
            first ones of the original are listed, and the note says how many more it left out.

    Raises:
        ValueError: `keep`, `preview_chars` or `max_identifier_chars` < 0, or `fact_guard` of another type.
    """

    keep: int = 3
    exclude_tools: Sequence[str] = ()
    preview_chars: int = 200
    fact_guard: bool | FactGuard = True
    max_identifier_chars: int = DEFAULT_NOTE_IDENTIFIER_CHARS
    name: str = "truncate_tool_results"
    _guard: FactGuard | None = field(init=False, repr=False, compare=False, default=None)
    _notes: Bounded[str] = field(init=False, repr=False, compare=False, default=_SHARED_NOTES)

    def __post_init__(self) -> None:
        if self.keep < 0:
            raise ValueError(f"keep: must be >= 0 tool results, got {self.keep}")
        if self.preview_chars < 0:
            raise ValueError(f"preview_chars: must be >= 0 characters, got {self.preview_chars}")
        if self.max_identifier_chars < 0:
            raise ValueError(f"max_identifier_chars: must be >= 0 characters, got {self.max_identifier_chars}")
        self._guard = fact_guard_of(self.fact_guard)
        shared = self._guard is None or self._guard.builtin
        self._notes = _SHARED_NOTES if shared else Bounded(NOTE_CACHE, NOTE_CACHE_CHARS)

    def note(self, message: ToolMessage, text: str | None = None, *, recall: str | None = None,
             tool: str | None = None) -> str:
        """The one-line note that replaces `message.content` (`text`: its `content_text`, when known; `tool`: the
        name of the tool that returned it, default `message.name`); a failed call's note says how it failed after
        the size (`, error (exit code 2)`: `_content.tool_failure`), so it never reads like a success; with
        `recall` (the original's store key, offload on), it ends with how to get the original back
        (`lc_compaction.offload.recall_hint`), after the identifiers it lists as without offload: a drop marker or a
        progress note reads them from the note (issue 20, class 12: offload on must keep what offload off keeps, and
        the recall instruction is no identifier of the result); but a lookup answer's note (offload on: a recall
        or a search, `markers.is_stored_lookup`) lists none: they are the originals', which the store keeps. It
        depends only on these: the same result gives the same note, remembered for the last `NOTE_CACHE` results read
        (`NOTE_CACHE_CHARS` characters of them), so a history compacted again from its originals (the view mode of
        the front doors, a restarted worker) does not read them again; with the built-in guard or none, by every
        strategy of the same class and settings in the process (`_SHARED_NOTES`), so a new policy does not either."""
        if text is None:
            text = content_text(message.content)
        tool = tool or message.name
        key = (text, tool, recall, getattr(message, "status", None), type(self), self.preview_chars,
               self.max_identifier_chars, self._guard is None)
        note = self._notes.items.get(key)
        if note is None:
            note = self._note(message, text, recall, tool)
            self._notes.put(key, len(text), note)
        return note

    def _note(self, message: ToolMessage, text: str, recall: str | None, tool: str | None) -> str:
        shown = preview(text, self.preview_chars)
        source = f" from {tool}" if tool else ""
        lines = line_count(text)
        shape = f" in {lines:,} lines" if lines > 1 else ""
        hint = f". {recall_hint(recall)}" if recall is not None else ""
        failure = tool_failure(message, text)  # a failed call's note says so (its preview may not show it)
        listed = "" if is_stored_lookup(tool, recall) else self._identifiers(text, gapless(shown), tool)
        return (f"{TRUNCATION_PREFIX}: the result{source} had {len(text):,} characters{shape}"
                f"{f', {failure}' if failure else ''}; "
                f"{NOTE_PREVIEW}{quoted(shown)}"
                f"{listed}{hint}]")

    def _identifiers(self, text: str, preview: str, tool: str | None) -> str:
        """The note's identifiers part: `markers.NOTE_IDENTIFIERS`, then the identifiers of `text` that `preview`
        does not hold (`facts.identifiers_beyond`: in order, fenced and attributed to `tool`, at most
        `max_identifier_chars` characters of them); "" when there are none or the guard is off. Of a text the
        last resort cut or an arrival preview, what it shows of the original and what its marker lists
        (`markers.result_parts`), never the marker's words."""
        if self._guard is None or not self.max_identifier_chars:
            return ""
        own, listed = result_parts(text)  # of a cut or an arrival preview: its own text and list, not its words
        original = own + (f"\n{listed}" if listed else "")
        part = identifiers_beyond(self._guard, original, preview, tool, self.max_identifier_chars)
        return f"{NOTE_IDENTIFIERS}{part}" if part else ""

    def truncated(self, message: ToolMessage, *, recall: str | None = None, tool: str | None = None) -> ToolMessage:
        """A copy of `message` with the note as content and the truncation mark (same id, tool_call_id); with
        `recall` (the original's store key, offload on), the note says how to recall it and the mark has
        `"offloaded": {}`; `tool`: as in `note`."""
        text = content_text(message.content)
        meta = dict(message.response_metadata or {})
        meta[MARK_KEY] = {"kind": "truncated", "original_chars": len(text)}
        if recall is not None:
            meta[MARK_KEY]["offloaded"] = {}
        return message.model_copy(update={"content": self.note(message, text, recall=recall, tool=tool),
                                          "response_metadata": meta})

    def _candidates(self, state: LadderState) -> tuple[list[int], list[int]]:
        """(outside, inside): truncatable results outside the kept part, and inside it less the `keep`
        most recent ones, each oldest first."""
        msgs = state.messages
        excluded = set(self.exclude_tools)
        outside: list[int] = []
        inside: list[int] = []
        for i, m in enumerate(msgs):
            if (kind(m) != TOOL or state.slots[i].pinned or m.name in excluded
                    or is_truncated(m) or (is_shortened(m) and state.slots[i].kept)):
                continue
            (inside if state.slots[i].kept else outside).append(i)
        if self.keep:
            inside = inside[: max(0, len(inside) - self.keep)]
        return outside, inside

    def apply(self, state: LadderState) -> None:
        """Truncate old tool results outside the kept part, oldest first, then (when the kept part alone is over
        the goal) inside it, sparing the `keep` most recent; stop as soon as under the goal."""
        outside, inside = self._candidates(state)
        self._truncate(state, outside, "outside the kept part")
        if state.over_goal() and inside and self._kept_part_over_goal(state):
            self._truncate(state, inside, "inside the kept part (it alone is over the goal)")
    def _kept_part_over_goal(self, state: LadderState) -> bool:
        if state.goal_tokens is None:
            return False
        kept = sum(s.tokens for s in state.slots if s.kept or s.pinned) + state.fixed_tokens
        return kept > state.goal_tokens

    def _truncate(self, state: LadderState, indices: list[int], where: str) -> None:
        names: dict[Any, str] | None = None
        for i in indices:
            if not state.over_goal():
                return
            old = state.slots[i]
            content = old.message.content
            if isinstance(content, str) and len(content) <= self.preview_chars + 120:
                continue  # the note (preview plus about 120 characters) would not be smaller
            message = cast(ToolMessage, old.message)  # `_candidates` picks tool results
            if names is None:
                names = tool_names(state.messages)
            new = self.truncated(message, recall=state.recall_key(message), tool=tool_of(message, names))
            tokens = state.counter.count_message(new)
            if tokens >= old.tokens:
                continue  # the note would not be smaller
            state.replace(i, new, strategy=self.name, kind="truncated", detail=where, tokens=tokens)
