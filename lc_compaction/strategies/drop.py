"""Strategy 2: drop the oldest exchanges whole (no LLM, nothing rewritten).

From the oldest, an exchange (a user request and everything up to the next request) is removed as one
unit, so no answer is left without its question and no tool call without its result. The very first
request is pinned: its answers may go, one step at a time, but the request stays. In an exchange whose
request is protected (the first, the latest, or one holding a kept or pinned message), the removable
steps go one at a time, oldest first. It stops as soon as the history is under the goal.

Where messages were dropped it leaves one marker (`markers.make_dropped_marker`: an AIMessage whose first line is
the fixed text `markers.DROPPED_TEXT`, counted in the budget), so the model knows something is missing between an
old request and a much later one, and which identifiers it had seen there (`leave_markers` below):

- the marker carries the identifiers of the messages it stands for (the fact guard's, `facts.py`:
  reservation ids, flight numbers, amounts, e-mails, ...), on the guard's lines (`FactGuard.facts_line`): those
  the user said (or the agent, and no tool) plain, those that came from tool results fenced and attributed to
  their tool (`markers.UNTRUSTED_DATA_FENCE`), so that tool output never reads as the agent's own words. A
  truncation note gives the identifiers it lists (`FactGuard.extract_result`). At most `max_marker_chars`
  characters of them, chosen by `facts.choose` when they do not all fit (one of each shape a round, the most
  recent first; the line says how many it left out);
- one marker per place: a marker already next to (or inside) the dropped run stands for it, so markers never
  stack; it is replaced by one carrying the union of its identifiers (read back first, in their order) and those
  of the newly dropped messages, with the same id. The marker depends only on the messages it stands for (and on
  whether the user said an identifier anywhere in the history), so a replay of the same history gives the same
  bytes, and a marker no drop extends is byte-identical from call to call;
- an AIMessage, placed only where the provider order rules still hold (`marker_fits`): right before a
  HumanMessage (a request or a summary), with a user turn as the nearest turn before it (`structure.turn_before`:
  tool calls and results are no turns), never first after the system prompt and never last. So it is never a
  second HumanMessage after another, never between a tool call and its results (whole steps go), never an
  assistant message right before an assistant tool call (Gemini: a tool call follows a user or tool turn), and
  never a second assistant turn beside another (chat templates that require strictly alternating roles, Mistral's
  and the vLLM / TGI servers that apply them, reject two assistant turns in a row just as two user turns: they
  leave out tool calls and results before they check, `structure.turn_role`). That is exactly where the drop
  needs it for the roles to alternate: the dropped run held the assistant turn between two user turns. Where the
  next kept message is an assistant message (a tool call, or a reply: steps dropped inside an older tool loop,
  which hold no turn, so the roles alternate without a marker), or the turn before it is the assistant's, no
  marker is left there: the identifiers of that run (and of any marker inside it) go to the next marker placed
  after it in the same drop, else to the one placed before it, else to the nearest marker the history keeps; with
  no marker at all, its steps are folded into a progress note in the assistant message after them instead (the
  marker merged into that message: `MarkerPlan.fold`), or stay when no such message follows. (Measured on
  the shared traces with the default policy at 4,000 to 32,000 tokens: no drop ever had a run before a tool call;
  generated histories do.)
- optional, unlike fitting: when the history is still over the budget after the last resort, the markers are left
  out, one at a time (`leave_out_marker`, called by `compact`), until it fits. A marker the roles need is left out
  last, and then `details["roles_not_alternating"]` says where two user turns meet.

The running request's steps are never removed: in the second pass, when the history is still over the limit
(budget or trigger), its oldest steps are folded into its progress note instead (`progress.keep_progress`). The
two coexist: the drop marker marks finished exchanges left out, the progress note names the running loop's folded
calls; no drop marker is ever put inside the running loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage

from lc_compaction._content import content_text
from lc_compaction._kinds import HUMAN, SYSTEM, TOOL, kind
from lc_compaction._presence import Presence, presence
from lc_compaction.dedup import same_as
from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.markers import is_dropped_marker, make_dropped_marker, read_truncation_note
from lc_compaction.progress import fold_steps, keep_progress
from lc_compaction.facts import (
    FactGuard,
    Identifier,
    fact_guard_of,
    message_text,
    parse_said,
    source_alone,
    tool_names,
    tool_of,
    trust,
)
from lc_compaction.structure import turn_before, turn_from

DEFAULT_MARKER_CHARS = 2_000
"""Default bound of the identifiers a drop marker lists, in characters (`FactGuard.facts_line` with characters as
its unit: the lines' prefixes and fences included; the said line, `FactGuard.said_line`, has its own bound).
Measured on the 40 tau-bench airline conversations of the shared traces replayed with the default policy, numbers
listed with their keys (`price: 136`): the longest marker lines needed were 1,740 characters at a 4,000-token and
at an 8,000-token window (median 734 and 762), so every one fits whole. A bound of 1,200 characters kept 97.5%
of the (call, identifier) pairs of that replay at 4,000 tokens, 1,600 kept 98.9%, 2,000 99.0% (as 2,400). (The
AgentDojo conversations, one request each, never drop.)"""


@dataclass
class DropOldExchanges(SyncStrategy):
    """Remove whole old exchanges, oldest first, keeping the first request; leave a marker with their identifiers.

    Args:
        fact_guard: finds the identifiers the marker carries: True (default, `FactGuard()`, the summarizer's
            patterns), a `FactGuard`, or False (the marker is the fixed text alone).
        max_marker_chars: bound of the marker's identifier lines, in characters (default `DEFAULT_MARKER_CHARS`,
            measured on the shared traces); when they do not all fit, `facts.choose` keeps one of each shape
            first, the most recent first.

    Raises:
        ValueError: `max_marker_chars` < 0, or `fact_guard` of another type.
    """

    fact_guard: bool | FactGuard = True
    max_marker_chars: int = DEFAULT_MARKER_CHARS
    name: str = "drop_old_exchanges"
    _guard: FactGuard | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.max_marker_chars < 0:
            raise ValueError(f"max_marker_chars: must be >= 0 characters, got {self.max_marker_chars}")
        self._guard = fact_guard_of(self.fact_guard)

    def apply(self, state: LadderState) -> None:
        """Remove whole exchanges (or steps after a protected request), oldest first, until under the goal (the
        markers counted as written); then fold the running request's oldest steps if the rule says so
        (`progress.keep_progress`, with the fact guard: the progress note names the identifiers of what it
        folds)."""
        # Plan over the current structure (O(n)): the groups in the order they go, and how many of them (at the
        # least) get the history under the goal with a marker of the fixed text alone; then remove in one batch.
        groups: list[list[int]] = []
        for whole, steps in state.removable_exchanges():
            for group in ([steps] if whole else [[s] for s in steps]):
                indices = [i for s in group for i in s.indices]
                if not all(is_dropped_marker(state.slots[i].message) for i in indices):  # a marker alone: put back
                    groups.append(indices)
        # the least a marker costs
        marker = state.counter.count_message(make_dropped_marker(message_id="marker", hint=_hint(state)))
        k = saved = removed = 0
        while k < len(groups) and state.would_be_over_goal(saved - (marker if k else 0), removed - bool(k)):
            saved += sum(state.slots[i].tokens for i in groups[k])
            removed += len(groups[k])
            k += 1
        if k:
            # the markers' identifiers cost more than the estimate: add groups while the real outcome is over
            # and while a run's identifiers have no marker to go to (the next group may end the run where one fits)
            plan = leave_markers(state, [i for g in groups[:k] for i in g], self._marker_guard())
            while k < len(groups) and (plan.fold or self._over_goal_after(state, plan)):
                k += 1
                plan = leave_markers(state, [i for g in groups[:k] for i in g], self._marker_guard())
            self._commit(state, plan, f"{k} exchange(s) or step(s)")
        keep_progress(state, strategy=self.name, guard=self._guard)

    def _commit(self, state: LadderState, plan: MarkerPlan, units: str) -> None:
        """Replace the markers next to the runs, remove the runs (markers in their place), then fold the runs whose
        identifiers no marker could carry into a progress note (`progress.fold_steps`: it names their calls and
        identifiers); a run no note can take (the note would cost more than its steps) stays."""
        for i, message in plan.replaced.items():
            state.replace(i, message, strategy=self.name, kind="marker_extended",
                          detail="the marker next to the dropped run carries its identifiers too")
        fold = [[state.messages[i] for i in run] for run in plan.fold]
        if plan.remove:
            state.remove(plan.remove, strategy=self.name, notes=plan.notes,
                         detail=f"{units}, {len(plan.remove)} messages")
        for run in fold:
            members = {id(m) for m in run}
            fold_steps(state, [st for st in state.steps() if all(id(state.messages[i]) in members for i in st.indices)],
                       strategy=self.name, guard=self._guard)

    def _marker_guard(self) -> tuple[FactGuard, int] | None:
        return (self._guard, self.max_marker_chars) if self._guard is not None and self.max_marker_chars else None

    @staticmethod
    def _over_goal_after(state: LadderState, plan: MarkerPlan) -> bool:
        """Whether the history would still be over the goal after `plan` (the runs to fold counted as removed)."""
        notes, replaced = plan.notes, plan.replaced
        bare = make_dropped_marker(hint=_hint(state)).content
        if not replaced and len(notes) <= 1 and all(m.content == bare for m in notes.values()):
            return False  # one marker of the fixed text alone: the plan counted it
        count = state.counter.count_message
        gone = [*plan.remove, *(i for run in plan.fold for i in run)]
        saved = (sum(state.slots[i].tokens for i in gone) - sum(count(m) for m in notes.values())
                 - sum(count(m) - state.slots[i].tokens for i, m in replaced.items()))
        return state.would_be_over_goal(saved, len(gone) - len(notes))


# ------------------------------------------------------------------------------------ the drop marker
def leave_out_marker(state: LadderState) -> bool:
    """Remove one drop marker from `state` (a marker is optional; fitting the budget is not: `compact` calls this
    when the last resort cannot make the history fit, module docstring); whether there was one to remove (pinned
    ones stay). The markers the roles do not need go first (removing one does not put two user turns side by side),
    the largest first; a marker they need goes only after those, and then `details["roles_not_alternating"]` lists
    the two messages that meet ("<id> then <id>")."""
    msgs = state.messages
    found = [i for i, m in enumerate(msgs) if is_dropped_marker(m) and not state.slots[i].pinned]
    if not found:
        return False

    def needed(i: int) -> bool:
        return turn_before(msgs, i) == "user" and turn_from(msgs, i + 1) == "user"

    i = min(found, key=lambda k: (needed(k), -state.slots[k].tokens))
    if needed(i):
        before = next(m for m in reversed(msgs[:i]) if kind(m) == HUMAN)
        after = next(m for m in msgs[i + 1:] if kind(m) == HUMAN)
        state.details.setdefault("roles_not_alternating", []).append(f"{before.id} then {after.id}")
    state.remove([i], strategy="last_resort", detail="drop marker left out to fit the budget")
    return True


def marker_fits(messages: Sequence[BaseMessage], start: int, end: int) -> bool:
    """Whether a marker (an AIMessage) may stand in place of `messages[start:end]` under the provider order rules
    (module docstring): after a message that is not a system prompt, with a user turn as the nearest turn before
    it, and before a HumanMessage (an assistant turn between two user turns)."""
    if start == 0 or end >= len(messages) or kind(messages[start - 1]) == SYSTEM:
        return False
    return kind(messages[end]) == HUMAN and turn_before(messages, start) == "user"


@dataclass
class MarkerPlan:
    """What removing some messages does (`leave_markers`), by index in the history before it:

    Attributes:
        remove: the indices to remove (`LadderState.remove`), oldest first.
        notes: the markers to put in place of some of them (`LadderState.remove`'s `notes`).
        replaced: the markers the history keeps that carry more identifiers now (replace them first).
        fold: runs (whole steps, oldest first) not to remove but to fold into a progress note: no marker could
            carry their identifiers (a run no note can take stays).
    """

    remove: list[int]
    notes: dict[int, BaseMessage] = field(default_factory=dict)
    replaced: dict[int, BaseMessage] = field(default_factory=dict)
    fold: list[list[int]] = field(default_factory=list)


def leave_markers(state: LadderState, chosen: Sequence[int], guard: tuple[FactGuard, int] | None = None
                  ) -> MarkerPlan:
    """What removing `chosen` from `state.messages` does with the markers (`MarkerPlan`).
    Each run of removed messages, with the unprotected markers next to or inside it, keeps its first marker (with
    its id), or gets a new one at its first index, when `marker_fits`; its other markers go. A protected marker
    next to the run stands for it (no new one). With `guard` (the fact guard and the bound in characters), each
    marker carries the identifiers of what it stands for that the messages left do not hold (module docstring):
    a marker that stays is rewritten with the union, when that changes it (a pinned one stays as it is). Where
    no marker fits, what the run stood for goes to the next marker of this drop, else to the one before it, else
    to the nearest marker the history keeps; when there is none, the run's steps are to be folded instead
    (`MarkerPlan.fold`). O(len(messages)) plus the extraction."""
    messages = state.messages

    def loose(k: int) -> bool:  # a marker that may go with the run
        return is_dropped_marker(messages[k]) and not state.is_protected(k)

    drop = set(chosen)
    planned: list[tuple[int, bool, list[BaseMessage]]] = []  # (where, a new note (else: replace it), stands for)
    pending: list[BaseMessage] = []  # what a run without a marker stood for: carried to the next marker
    pending_at = 0  # where the last such run started
    pending_run: list[int] = []  # its messages (not its markers)
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
        beside = next((k for k in (start - 1, end) if 0 <= k < n and is_dropped_marker(messages[k])), None)
        old = [messages[k] for k in ([beside] if beside is not None else []) + markers]
        stands_for = [*old, *pending, *(messages[k] for k in range(start, end) if k not in markers)]
        pending = []
        if beside is not None:
            if guard is not None and not state.slots[beside].pinned:
                planned.append((beside, False, stands_for))
        elif marker_fits(messages, start, end):
            if markers and guard is None:
                drop.discard(markers[0])  # it stands for the run as it is
            else:
                planned.append((markers[0] if markers else start, True, stands_for))
        else:
            pending, pending_at = stands_for, start
            pending_run = [k for k in range(start, end) if k not in markers]
        i = end
    fold: list[list[int]] = []
    if pending and guard is not None:  # no marker after it: the nearest one before it, or the nearest marker left
        if planned:
            k, new_note, stands_for = planned[-1]
            planned[-1] = (k, new_note, [*stands_for, *pending])
        else:
            left_markers = [k for k in range(n) if k not in drop and is_dropped_marker(messages[k])
                            and not state.slots[k].pinned]
            if left_markers:
                k = min(left_markers, key=lambda j: (j > pending_at, abs(j - pending_at)))
                planned.append((k, False, [messages[k], *pending]))
            elif guard[0].extract_messages(pending):
                fold.append(pending_run)
                drop.difference_update(pending_run)
    notes: dict[int, BaseMessage] = {}
    replaced: dict[int, BaseMessage] = {}
    targets = {k for k, _, _ in planned}
    # a deduplication note whose earlier copy is dropped gets that copy's content back (`dedup.restorations`):
    # what the copy holds stays, so its identifiers are not listed again
    gone = {messages[k].id: messages[k] for k in drop if messages[k].id and messages[k].id in state.pointed_at}
    left = [gone.get(same_as(m) or "", m) for k, m in enumerate(messages) if k not in drop and k not in targets]
    for k, new_note, stands_for in planned:
        # a marker keeps its id; a new one's follows from the first message it stands for (the same on every
        # replay of a history)
        message_id = messages[k].id if is_dropped_marker(messages[k]) else f"lc-compaction-dropped-{messages[k].id}"
        marker = _marker(state, stands_for, guard, message_id, left)
        if marker.content == messages[k].content and is_dropped_marker(messages[k]):
            drop.discard(k)  # unchanged: it stays as it is
        elif new_note:
            notes[k] = marker
        else:
            replaced[k] = marker
    return MarkerPlan(sorted(drop), notes, replaced, fold)


def _marker(state: LadderState, stands_for: Sequence[BaseMessage], guard: tuple[FactGuard, int] | None,
            message_id: str | None, left: Sequence[BaseMessage]) -> BaseMessage:
    """The marker for `stands_for` (earlier markers first, then the dropped messages, oldest first), with their
    identifiers that no message of `left` (the history after the drop) holds with the same attribution (a tool's
    identifier that the agent repeated stays: when that message goes, its reading would not say it came from a
    tool), on the guard's lines within the bound; the fixed text alone without a guard. A tool result left (not a
    note) holds the tool-derived identifiers of its tool that its text contains (`facts.contains`): its text is
    read once, not extracted, so a large result kept whole costs what reading it costs."""
    if guard is None:
        return make_dropped_marker(message_id=message_id, hint=_hint(state))
    fact_guard, bound = guard
    identifiers = fact_guard.extract_messages(stands_for, memo=state.memo)
    if identifiers:  # what a message left holds with the same attribution (the agent's echo of tool data is not)
        results = [m for m in left if kind(m) == TOOL and read_truncation_note(content_text(m.content)) is None]
        whole = {id(m) for m in results}  # by object: `m in results` compares messages field by field
        trusted = trust(identifiers, state.messages)
        # a tool result read alone gives identifiers of its own tool only (`facts.source_alone`): one whose tool is
        # no source of the marker's identifiers holds none of them, and is not read (most notes of a long history)
        sources = {i.source for i in trusted}
        held = {(i.value.casefold(), i.source) for m in left
                if kind(m) != TOOL or (id(m) not in whole and ((s := source_alone(m)) is None or s in sources))
                for i in _identifiers_of(state, fact_guard, m)}
        texts: dict[str, list[str]] = {}
        if results:  # a tool result left holds what its text contains, as its tool's (read once, not extracted)
            names = tool_names(state.messages)
            for m in results:
                texts.setdefault(tool_of(m, names), []).append(message_text(m))  # type: ignore[arg-type]
        # one Presence a tool, its results joined by line breaks: a value without a line break is in the joined
        # text exactly where it is in one of them (a line break is a boundary); one with a line break is asked of
        # each text alone
        joined = {tool: Presence("\n".join(parts)) for tool, parts in texts.items()}

        def left_holds(i: Identifier) -> bool:
            if i.source is None or i.source not in texts:
                return False
            if "\n" in i.value:
                return any(i in presence(t) for t in texts[i.source])
            return i in joined[i.source]
        identifiers = [i for i in trusted if (i.value.casefold(), i.source) not in held and not left_holds(i)]
    said = fact_guard.said_line(stands_for)  # a user's short turns word for word (a correction is words)
    if said:  # what the quotes give back when read again (a merge extracts them) is not listed again
        quoted = fact_guard.read_back("\n".join(parse_said(said)))
        identifiers = [i for i in identifiers if i.source is not None or i not in quoted]
    facts, _ = fact_guard.facts_line(identifiers, len, bound)
    return make_dropped_marker(message_id=message_id, facts="\n".join(x for x in (said, facts) if x),
                               hint=_hint(state))


def _hint(state: LadderState) -> bool:
    """Whether a marker carries `markers.SEARCH_HINT`: offload is on (what it stands for is kept and searchable)."""
    return state.offload is not None


def _identifiers_of(state: LadderState, guard: FactGuard, message: BaseMessage) -> list[Identifier]:
    """The identifiers `message` holds as the guard reads it back (`FactGuard.extract_messages`: a note's, a
    marker's, a progress note's listed ones verbatim), remembered for this compaction (`LadderState.memo`) by
    message object."""
    key = ("drop_marker_identifiers", id(message))
    found = state.memo.get(key)
    if found is None or found[0] is not message:
        found = (message, guard.extract_messages([message]))
        state.memo[key] = found
    return found[1]
