"""Strategy 1: truncate old tool results to a one-line note (the cheapest rung: nothing is removed).

Oldest first, outside the kept part, each ToolMessage's content becomes one line that says it was
truncated, its original size in characters, and a preview of its start; `tool_call_id`, `name`, `id` and
`status` stay, so the call/result pair is intact. Already-truncated results and excluded tools are skipped.
It stops as soon as the history is under the goal.

When the kept part alone is over the goal (one request followed by a long tool loop: coding agents,
AgentDojo), truncation reaches into it, oldest first, sparing the `keep` most recent tool results.
Parameter names follow LangChain's `ClearToolUsesEdit` (`keep`, `exclude_tools`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from langchain_core.messages import ToolMessage

from lc_compaction._content import content_text
from lc_compaction._kinds import TOOL, kind
from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.markers import MARK_KEY, TRUNCATION_PREFIX, is_shortened, is_truncated
from lc_compaction.offload import recall_hint


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
    """

    keep: int = 3
    exclude_tools: Sequence[str] = ()
    preview_chars: int = 200
    name: str = "truncate_tool_results"

    def __post_init__(self) -> None:
        if self.keep < 0:
            raise ValueError(f"keep: must be >= 0 tool results, got {self.keep}")
        if self.preview_chars < 0:
            raise ValueError(f"preview_chars: must be >= 0 characters, got {self.preview_chars}")

    def note(self, message: ToolMessage, text: str | None = None, *, recall: str | None = None) -> str:
        """The one-line note that replaces `message.content` (`text`: its `content_text`, when known); with
        `recall` (the original's store key, offload on), it ends with how to get the original back
        (`lc_compaction.offload.recall_hint`)."""
        if text is None:
            text = content_text(message.content)
        preview = " ".join(text[: self.preview_chars].split())
        more = "..." if len(text) > self.preview_chars else ""
        tool = f" from {message.name}" if message.name else ""
        hint = f". {recall_hint(recall)}" if recall is not None else ""
        return (f"{TRUNCATION_PREFIX}: the result{tool} had {len(text):,} characters; "
                f"it started with: {json.dumps(preview + more, ensure_ascii=False)}{hint}]")

    def truncated(self, message: ToolMessage, *, recall: str | None = None) -> ToolMessage:
        """A copy of `message` with the note as content and the truncation mark (same id, tool_call_id); with
        `recall` (the original's store key, offload on), the note says how to recall it and the mark has
        `"offloaded": {}`."""
        text = content_text(message.content)
        meta = dict(message.response_metadata or {})
        meta[MARK_KEY] = {"kind": "truncated", "original_chars": len(text)}
        if recall is not None:
            meta[MARK_KEY]["offloaded"] = {}
        return message.model_copy(update={"content": self.note(message, text, recall=recall),
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
        for i in indices:
            if not state.over_goal():
                return
            old = state.slots[i]
            content = old.message.content
            if isinstance(content, str) and len(content) <= self.preview_chars + 120:
                continue  # the note (preview plus about 120 characters) would not be smaller
            new = self.truncated(cast(ToolMessage, old.message),  # `_candidates` picks tool results
                                 recall=state.recall_key(old.message))
            tokens = state.counter.count_message(new)
            if tokens >= old.tokens:
                continue  # the note would not be smaller
            state.replace(i, new, strategy=self.name, kind="truncated", detail=where, tokens=tokens)
