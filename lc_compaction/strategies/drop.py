"""Strategy 2: drop the oldest exchanges whole (no LLM, nothing rewritten).

From the oldest, an exchange (a user request and everything up to the next request) is removed as one
unit, so no answer is left without its question and no tool call without its result. The very first
request is pinned: its answers may go, one step at a time, but the request stays. In an exchange whose
request is protected (the first, the latest, or one holding a kept or pinned message), the removable
steps go one at a time, oldest first. It stops as soon as the history is under the goal.

Where messages were dropped it leaves one marker (`markers.make_dropped_marker`: an AIMessage with the fixed text
`markers.DROPPED_TEXT`, counted in the budget), so the model knows something is missing between an old request
and a much later one (`leave_markers` below):

- one marker per place: a marker already next to (or inside) the dropped run stands for it, so markers never
  stack, and the marker, being fixed text, is byte-identical from call to call;
- an AIMessage, placed only where the provider order rules still hold: right before a HumanMessage (a request or
  a summary) or before an AIMessage that makes no tool call, never first after the system prompt and never last.
  So it is never a second HumanMessage after another, never between a tool call and its results (whole steps
  go), and never an assistant message right before an assistant tool call (Gemini: a tool call follows a user or
  tool turn). Where the next kept message is an assistant tool call (steps dropped inside an older tool loop),
  no marker is left (nor kept).

The running request's steps are never removed: in the second pass, when the history is still over the limit
(budget or trigger), its oldest steps are folded into its progress note instead (`progress.keep_progress`). The
two coexist: the drop marker marks finished exchanges left out, the progress note names the running loop's folded
calls; no drop marker is ever put inside the running loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from lc_compaction._kinds import AI, HUMAN, SYSTEM, kind
from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.markers import is_dropped_marker, make_dropped_marker
from lc_compaction.progress import keep_progress
from lc_compaction.structure import call_ids


@dataclass
class DropOldExchanges(SyncStrategy):
    """Remove whole old exchanges, oldest first, keeping the first request. No parameters."""

    name: str = "drop_old_exchanges"

    def apply(self, state: LadderState) -> None:
        """Remove whole exchanges (or steps after a protected request), oldest first, until under the goal; then
        fold the running request's oldest steps if the rule says so (`progress.keep_progress`)."""
        # Plan once over the current structure (O(n)), then remove in one batch.
        chosen: list[int] = []
        saved = 0
        units = 0
        marker = state.counter.count_message(make_dropped_marker(message_id="marker"))  # what a marker costs
        for whole, steps in state.removable_exchanges():
            groups = [steps] if whole else [[s] for s in steps]
            for group in groups:
                if not state.would_be_over_goal(saved - (marker if chosen else 0), len(chosen) - bool(chosen)):
                    break
                indices = [i for s in group for i in s.indices]
                if all(is_dropped_marker(state.slots[i].message) for i in indices):
                    continue  # a marker alone: it would only be put back
                chosen.extend(indices)
                saved += sum(state.slots[i].tokens for i in indices)
                units += 1
        notes: dict[int, BaseMessage] = {}
        if chosen:
            chosen, notes = leave_markers(state, chosen)
        if chosen:
            state.remove(chosen, strategy=self.name, notes=notes,
                         detail=f"{units} exchange(s) or step(s), {len(chosen)} messages")
        keep_progress(state, strategy=self.name)


# ------------------------------------------------------------------------------------ the drop marker
def marker_fits(messages: Sequence[BaseMessage], start: int, end: int) -> bool:
    """Whether a marker (an AIMessage) may stand in place of `messages[start:end]` under the provider order rules
    (module docstring): after a message that is not a system prompt, before a HumanMessage or an AIMessage
    without tool calls."""
    if start == 0 or end >= len(messages) or kind(messages[start - 1]) == SYSTEM:
        return False
    after = messages[end]
    return kind(after) == HUMAN or (kind(after) == AI and not call_ids(after))  # invalid calls are calls too


def leave_markers(state: LadderState, chosen: Sequence[int]) -> tuple[list[int], dict[int, BaseMessage]]:
    """The indices to remove and the markers to put in their place (`LadderState.remove`'s `notes`), for removing
    `chosen` from `state.messages`: each run of removed messages, with the unprotected markers next to or inside
    it, keeps its first marker, or gets a new one at its first index, when `marker_fits`; its other markers go. A
    protected marker next to the run stands for it (no new one). O(len(messages))."""
    messages = state.messages

    def loose(k: int) -> bool:  # a marker that may go with the run
        return is_dropped_marker(messages[k]) and not state.is_protected(k)

    drop = set(chosen)
    notes: dict[int, BaseMessage] = {}
    n, i = len(messages), min(drop)
    while i < n:
        if i not in drop:
            i += 1
            continue
        start = i
        while start > 0 and loose(start - 1):
            start -= 1
        end = i
        while end < n and (end in drop or loose(end)):
            end += 1
        markers = [k for k in range(start, end) if is_dropped_marker(messages[k])]
        drop.update(markers)
        beside = ((start > 0 and is_dropped_marker(messages[start - 1]))
                  or (end < n and is_dropped_marker(messages[end])))
        if not beside and marker_fits(messages, start, end):
            if markers:
                drop.discard(markers[0])
            else:  # its id follows from the first message it stands for: the same on every replay of a history
                notes[start] = make_dropped_marker(message_id=f"lc-compaction-dropped-{messages[start].id}")
        i = end
    return sorted(drop), notes
