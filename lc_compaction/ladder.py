"""What a strategy sees and may change: `LadderState`, the `Strategy` protocol, and the `Action` record.

A strategy is like a pydantic-ai history processor with a budget: it gets the history (with the
structure and the goal), changes it only through `LadderState`'s methods, and every change is recorded
as an `Action`. The ladder (compact.py) runs the strategies in order while the history is over the goal,
and checks the whole list's invariants after each one.
"""

from __future__ import annotations

import bisect
import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from langchain_core.messages import BaseMessage

from lc_compaction._content import starts_with_thinking
from lc_compaction.agent_request import AgentRequest
from lc_compaction._kinds import AI, HUMAN, SYSTEM, TOOL, kind
from lc_compaction._kinds import kind as kind_of  # `replace` has a parameter named kind
from lc_compaction.dedup import DEDUP_STRATEGY, referenced, restorations, same_as
from lc_compaction.markers import is_summary, is_truncated
from lc_compaction.structure import (
    CompactionInvariantError,
    Step,
    UserOrAssistant,
    call_ids,
    check_invariants,
    is_conversation_start,
    is_request,
    running_steps,
    split_exchanges,
    split_steps,
    turn_before,
    turn_from,
)
from lc_compaction.tokens import TokenCounter, counted_alike


class RecallKeys(Protocol):
    """What a state needs of the store keys when offload is on (`lc_compaction.offload.OffloadKeys`, one layer up,
    implements it): a message's key, and whether its original will be in the store."""

    def key(self, message: BaseMessage) -> str:
        """The store key of `message`."""
        ...

    def recallable(self, message: BaseMessage) -> bool:
        """True when the original of `message` is in the store once the result is used."""
        ...


@dataclass
class Action:
    """One change a strategy made.

    Attributes:
        strategy: the strategy's `name` ("truncate_tool_results", "drop_old_exchanges", "summarize", ...).
        kind: "truncated", "removed", "summarized", "folded" (steps of the running request folded into its
            progress note: `progress.py`), "shortened".
        message_ids: ids of the messages affected (in the input's order).
        tokens_saved: tokens (of the policy's counter) the change saved.
        detail: a short human-readable note.
    """

    strategy: str
    kind: str
    message_ids: list[str]
    tokens_saved: int
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The action as plain JSON (the same keys as the attributes)."""
        return {"strategy": self.strategy, "kind": self.kind, "message_ids": list(self.message_ids),
                "tokens_saved": self.tokens_saved, "detail": self.detail}


@runtime_checkable
class Strategy(Protocol):
    """One rung of the ladder. `apply` / `aapply` change `state` while `state.over_goal()`."""

    name: str

    def apply(self, state: LadderState) -> None:
        """Change `state` (through its methods) while `state.over_goal()`; may change nothing."""
        ...

    async def aapply(self, state: LadderState) -> None:
        """Async twin of `apply` (an LLM call is awaited)."""
        ...


@runtime_checkable
class AheadStrategy(Protocol):
    """A strategy that can do its work ahead of the trigger, in the background (`Summarize(ahead_at=...)`):
    `compact` asks `ahead_wanted` (cheap) on a call whose history is above `ahead_at` and below the trigger,
    then gives `start_ahead` the history and a function that builds the ladder's state as a triggered soft pass
    would see it (called in the background); a later triggered pass of the strategy uses the result or works
    inline."""

    name: str
    ahead_at: Any

    def ahead_wanted(self, messages: Sequence[BaseMessage]) -> tuple[bool, dict[str, Any] | None]:
        """Whether to start a background job for `messages`, and a report for `details["ahead"]` (or None)."""
        ...

    def start_ahead(self, messages: Sequence[BaseMessage], state: Callable[[], LadderState],
                    run: Any) -> dict[str, Any] | None:
        """Start the job over `messages` ("thread" or "task"; `state()` builds its ladder state, thread-safe);
        its report for `details["ahead"]` (or None)."""
        ...


class SyncStrategy(ABC):
    """Base of a strategy with no I/O (nothing to await): subclasses write `apply`; `aapply` runs it."""

    name: str

    @abstractmethod
    def apply(self, state: LadderState) -> None:
        """Change `state` (through its methods) while `state.over_goal()`; may change nothing."""

    async def aapply(self, state: LadderState) -> None:
        """Async twin of `apply` (no I/O: the same work)."""
        self.apply(state)


@dataclass(slots=True)
class Slot:
    """One message of the history being compacted, with its token count and protection flags."""

    message: BaseMessage
    tokens: int
    pinned: bool = False
    kept: bool = False


class LadderState:
    """The history during one compaction, with the goal and the protected parts.

    - `messages`: the current list (read only: change it through the methods below).
    - `goal_tokens` / `goal_messages`: get the history under these (None: no goal in that unit).
    - a message is *protected* when it is pinned (system prompt, first and latest request, caller pins,
      the request of any exchange that holds a protected message) or in the kept recent part.
    - `fixed_tokens`: tokens counted beside the messages (reply priming, system prompt and tool schemas
      passed separately): part of `total()`.
    - `budget_tokens`: the hard limit (tokens; None: none); `limit(tokens, n_messages)`: whether a history of that
      size is over the budget or above the trigger (the policy's `is_triggered`; None: over the goal). The
      running request's steps are folded only over the limit (`progress.py`).
    - `offload`: the store keys (`lc_compaction.offload.OffloadKeys`) when the caller writes every original this
      compaction takes out to a store before using the result: notes and cuts tell the model how to recall them
      (`recall_key`); None when offload is off.
    """

    def __init__(self, slots: list[Slot], counter: TokenCounter, *, fixed_tokens: int,
                 goal_tokens: int | None, goal_messages: int | None, pass_name: str,
                 budget_tokens: int | None = None, limit: Callable[[int, int], bool] | None = None,
                 offload: RecallKeys | None = None):
        self.slots = slots
        self.counter = counter
        self.fixed_tokens = fixed_tokens
        self.goal_tokens = goal_tokens
        self.goal_messages = goal_messages
        self.pass_name = pass_name
        self.budget_tokens = budget_tokens
        self._limit = limit
        self.offload = offload
        self.agent_request: AgentRequest | None = None
        """The agent's latest model request, when the front door gave it (`compact(agent_request=...)`): what a
        cache-sharing summary request repeats (`strategies.summarize.Summarize.share_agent_request`)."""
        self.window_tokens: int | None = None
        """The model's input window (tokens; the policy's `max_input_tokens`), the bound of a request that
        repeats the agent's with more appended; None: not known."""
        self.actions: list[Action] = []
        self.removed: list[BaseMessage] = []
        self.details: dict[str, Any] = {}
        self.memo: dict[Any, Any] = {}
        """Strategies' memory for this compaction, shared by both passes and not reported (the summarizer keeps
        its deadline and its failure there, so the second pass does not call a failed model again)."""
        self._total = fixed_tokens + sum(s.tokens for s in slots)
        targets = {id(s.message): target for s in slots if (target := same_as(s.message)) is not None}
        self.pointed_at: set[str] = set(targets.values())
        """Every message id a deduplication note of this state points at, or did (a superset: a note added by
        `replace` adds its target, a note taken out leaves it): `dedup.restorations` has nothing to do
        unless a message that leaves is one of them, so a change costs O(what leaves), not O(history)."""
        self._notes = set(targets)  # the deduplication notes among the slots' messages, by id() (a superset)
        self._note_at: tuple[int, dict[str, list[int]]] | None = None
        """(`_shape`, for each id notes point at, the sorted indices of the slots that may hold a note pointing at
        it: a superset): kept while no structural change moves the slots, so that a replace whose message notes
        point at reads only those notes, not the history's."""
        # The structure (message types, tool-call ids, order) changes only through remove / put_summary / fold;
        # replace keeps it (it verifies so). Steps and the invariant check are recomputed only when it changed.
        self._shape = 0  # incremented on every structural change
        self._checked_shape = 0  # the ladder validates its input before the first strategy
        self._steps: tuple[int, list[Step]] | None = None

    def fork(self) -> LadderState:
        """A copy to try changes on (the history, its figures, actions and details copied; the messages, the counter
        and `memo` shared): adopt it when the attempt is kept, else drop it."""
        new = copy.copy(self)
        new.slots = list(self.slots)
        new.actions = list(self.actions)
        new.removed = list(self.removed)
        new.details = copy.deepcopy(self.details)
        new.pointed_at = set(self.pointed_at)  # a note the attempt adds is not the original's
        new._notes = set(self._notes)
        new._note_at = None
        return new

    # -------------------------------------------------------------- reading
    @property
    def messages(self) -> list[BaseMessage]:
        return [s.message for s in self.slots]

    def recall_key(self, message: BaseMessage) -> str | None:
        """The handle a note or a cut of `message` names for the recall tool (its store key), or None when
        offload is off or the original will not be in the store (`OffloadKeys.recallable`)."""
        keys = self.offload
        return keys.key(message) if keys is not None and keys.recallable(message) else None

    def total(self) -> int:
        """Tokens of the whole request as it stands (messages + fixed tokens)."""
        return self._total

    def over_goal(self) -> bool:
        """True while the history is above the goal in tokens or in messages."""
        if self.goal_tokens is not None and self._total > self.goal_tokens:
            return True
        return self.goal_messages is not None and len(self.slots) > self.goal_messages

    def would_be_over_goal(self, saved_tokens: int, removed_messages: int) -> bool:
        """Whether the history would still be over the goal after saving `saved_tokens` tokens and
        removing `removed_messages` messages (lets a strategy plan a batch before changing anything)."""
        if self.goal_tokens is not None and self._total - saved_tokens > self.goal_tokens:
            return True
        return self.goal_messages is not None and len(self.slots) - removed_messages > self.goal_messages

    def over_budget(self, tokens: int | None = None) -> bool:
        """Whether the history (or a history of `tokens` tokens) is over the budget; False without a budget."""
        return self.budget_tokens is not None and (self._total if tokens is None else tokens) > self.budget_tokens

    def over_limit(self, tokens: int | None = None, messages: int | None = None) -> bool:
        """Whether the history (or one of `tokens` tokens and `messages` messages) is over the budget or above
        the trigger (`limit`); without a `limit`, whether it is over the goal."""
        tokens = self._total if tokens is None else tokens
        messages = len(self.slots) if messages is None else messages
        if self._limit is None:
            return self.would_be_over_goal(self._total - tokens, len(self.slots) - messages)
        return self._limit(tokens, messages)

    def is_protected(self, i: int) -> bool:
        """Whether message `i` is pinned or in the kept recent part (no strategy may remove it)."""
        return self.slots[i].pinned or self.slots[i].kept

    def steps(self) -> list[Step]:
        """The steps of the current history (`structure.split_steps`), cached until the structure changes."""
        if self._steps is None or self._steps[0] != self._shape:
            self._steps = (self._shape, split_steps(self.messages))
        return self._steps[1]

    def removable_exchanges(self) -> list[tuple[bool, list[Step]]]:
        """Oldest first: for each exchange, (whole, steps a strategy may remove or summarize).

        `whole` is True when the exchange's request itself is removable: then the exchange goes as one
        unit (request and answers together). When the request is protected (the first request, the latest,
        or one whose exchange holds a protected message), only the steps after it are listed, and they may
        go one at a time. Summary messages are never listed (the summarizer replaces them itself), nor
        mid-history system messages (pinned: they stay where they are when their exchange goes), nor the steps
        of the running request (`structure.running_steps`: they are only ever folded into its progress note).
        """
        out: list[tuple[bool, list[Step]]] = []
        steps = self.steps()
        running = {s.start for s in running_steps(self.messages, steps)}
        for ex in split_exchanges(steps):
            free = [s for s in ex.steps if not any(self.is_protected(i) for i in s.indices)
                    and s.kind != "summary" and s.kind != "system" and s.start not in running]
            if not free:
                continue
            # a mid-history system message (pinned, kept in place) does not keep its exchange from going whole
            others = sum(1 for s in ex.steps if s.kind != "system")
            whole = ex.request is not None and any(s.start == ex.request for s in free) and len(free) == others
            if not whole:
                free = [s for s in free if s.kind != "request"]
            if free:
                out.append((whole, free))
        return out

    def summary_index(self) -> int | None:
        """Index of the (at most one) current summary message, or None."""
        for i, s in enumerate(self.slots):
            if is_summary(s.message):
                return i
        return None

    # -------------------------------------------------------------- changing
    def record_failure(self, strategy: str, error: str) -> None:
        """Say that `strategy` could not do its work (its model failed, timed out, or is not called during a
        cooldown after a failure): `details["failures"][strategy] = error` (the error's text). When no strategy
        changed the history, the result's `stop_reason` is then "strategy_failed" instead of "nothing_removable"."""
        self.details.setdefault("failures", {})[strategy] = error

    def replace(self, i: int, message: BaseMessage, *, strategy: str, kind: str, detail: str = "",
                tokens: int | None = None, record_gone: bool = True) -> int:
        """Put `message` in place of message `i` (same position); record it; return the tokens saved (net of any
        repeated result given back its content, `dedup.restorations`, when a truncation note replaces the
        earlier copy that deduplication notes point at). `tokens`: `counter.count_message(message)` when the caller
        already has it. `record_gone`: False only for those restorations themselves."""
        old = self.slots[i]
        if (type(message) is not type(old.message) or getattr(message, "tool_call_id", None)
                != getattr(old.message, "tool_call_id", None)
                or (kind_of(message) == AI and call_ids(message) != call_ids(old.message))):  # only an AI message calls
            raise CompactionInvariantError(
                f"{strategy} replaced message {i} with one of another type or other tool-call ids")
        if tokens is None:
            tokens = self.counter.count_message(message)
        saved = old.tokens - tokens
        self._total -= saved
        self.slots[i] = Slot(message, tokens, old.pinned, old.kept)
        target = same_as(message)
        if target is not None:
            self.pointed_at.add(target)
            self._notes.add(id(message))
            if self._note_at is not None and self._note_at[0] == self._shape:
                at = self._note_at[1].setdefault(target, [])
                k = bisect.bisect_left(at, i)
                if k == len(at) or at[k] != i:
                    at.insert(k, i)
        self.actions.append(Action(strategy, kind, [old.message.id or ""], saved, detail))
        if record_gone and is_truncated(message):
            saved -= self._restore([old.message], [old.tokens])
        return saved

    def remove(self, indices: Sequence[int], *, strategy: str, detail: str = "",
               notes: Mapping[int, BaseMessage] | None = None) -> int:
        """Remove the messages at `indices` (whole steps); record it; return the tokens saved (net of the notes).

        `notes`: for some removed indices i, a new message (a drop marker) put where message i was; counted.

        Raises:
            CompactionInvariantError: an index is protected (a strategy bug).
        """
        drop = set(indices)
        for i in drop:
            if self.slots[i].pinned:
                raise CompactionInvariantError(f"{strategy} tried to remove pinned message {i}")
        notes = notes or {}
        if not set(notes) <= drop:
            raise CompactionInvariantError(f"{strategy} put a note where it removed nothing")
        added = {i: Slot(m, self.counter.count_message(m)) for i, m in notes.items()}
        saved = sum(self.slots[i].tokens for i in drop) - sum(s.tokens for s in added.values())
        gone = [self.slots[i].message for i in sorted(drop)]
        gone_tokens = [self.slots[i].tokens for i in sorted(drop)]
        # a marker put back under the id of one it replaces (`drop.leave_markers`) is rewritten, not removed
        kept_ids = {m.id for m in notes.values() if m.id}
        self.removed.extend(m for m in gone if m.id not in kept_ids)
        ids = [m.id or "" for m in gone if m.id not in kept_ids]
        self.slots = [added[i] if i in added else s for i, s in enumerate(self.slots) if i not in drop or i in added]
        self._shape += 1
        self._total -= saved
        self.actions.append(Action(strategy, "removed", ids, saved, detail))
        return saved - self._restore(gone, gone_tokens)

    def summary_runs(self, indices: Sequence[int]) -> list[SummaryRun]:
        """The runs of consecutive messages among `indices` (the messages a summary would replace), in order,
        each with its neighbours once they are gone and the roles of the nearest turns on each side (what the role
        a summary in its place would take depends on: `summary_role`)."""
        msgs = self.messages
        n = len(msgs)
        runs: list[list[int]] = []
        for i in sorted(set(indices)):
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        out = []
        for run in runs:
            before = msgs[run[0] - 1] if run[0] > 0 else None
            after = msgs[run[-1] + 1] if run[-1] + 1 < n else None
            out.append(SummaryRun(run, before, after, turn_before(msgs, run[0]), turn_from(msgs, run[-1] + 1)))
        return out

    def put_summary(self, indices: Sequence[int], summary: BaseMessage, *, strategy: str, detail: str = "",
                    at: int | None = None) -> int:
        """Replace the messages at `indices` (and any earlier summary among them) by `summary`, placed where
        message `at` was (one of `indices`; default the first of them). Returns the tokens saved."""
        drop = sorted(set(indices))
        if not drop:
            raise ValueError("put_summary needs at least one message to replace")
        if at is not None and at not in drop:
            raise ValueError(f"put_summary: message {at} is not among the messages replaced")
        first = drop[0] if at is None else at
        for i in drop:
            if self.slots[i].pinned:
                raise CompactionInvariantError(f"{strategy} tried to summarize pinned message {i}")
        tokens = self.counter.count_message(summary)
        saved = sum(self.slots[i].tokens for i in drop) - tokens
        ids = [self.slots[i].message.id or "" for i in drop]
        self.removed.extend(self.slots[i].message for i in drop if not is_summary(self.slots[i].message))
        keep = set(drop)
        new: list[Slot] = []
        for i, s in enumerate(self.slots):
            if i == first:
                new.append(Slot(summary, tokens))
            if i not in keep:
                new.append(s)
        gone = [self.slots[i].message for i in drop]
        gone_tokens = [self.slots[i].tokens for i in drop]
        self.slots = new
        self._shape += 1
        self._total -= saved
        self.actions.append(Action(strategy, "summarized", ids, saved, detail))
        return saved - self._restore(gone, gone_tokens)

    def fold(self, indices: Sequence[int], replaced: dict[int, BaseMessage], tokens: dict[int, int], *,
             strategy: str, detail: str = "") -> int:
        """Remove the messages at `indices` (whole steps) and put `replaced[i]` (same type and tool-call ids,
        `tokens[i]` tokens) in place of message `i`, as one "folded" action (`progress.fold_steps`); return the
        tokens saved.

        Raises:
            CompactionInvariantError: an index to remove is pinned, or a replacement changes a message's type or
                tool-call ids (a strategy bug).
        """
        drop = set(indices)
        for i in drop:
            if self.slots[i].pinned:
                raise CompactionInvariantError(f"{strategy} tried to fold pinned message {i}")
        for i, message in replaced.items():
            old = self.slots[i].message
            if i in drop or type(message) is not type(old) or call_ids(message) != call_ids(old):
                raise CompactionInvariantError(f"{strategy} replaced message {i} with one of another type or "
                                               "other tool-call ids")
        saved = sum(self.slots[i].tokens for i in drop)
        for i, message in replaced.items():
            slot = self.slots[i]
            saved += slot.tokens - tokens[i]
            self.slots[i] = Slot(message, tokens[i], slot.pinned, slot.kept)
        ids = [self.slots[i].message.id or "" for i in sorted(drop)]
        gone = [self.slots[i].message for i in sorted(drop)]
        gone_tokens = [self.slots[i].tokens for i in sorted(drop)]
        self.removed.extend(gone)
        self.slots = [s for i, s in enumerate(self.slots) if i not in drop]
        self._shape += 1
        self._total -= saved
        self.actions.append(Action(strategy, "folded", ids, saved, detail))
        return saved - self._restore(gone, gone_tokens)

    def _restore(self, gone: Sequence[BaseMessage], gone_tokens: Sequence[int]) -> int:
        """Apply `dedup.restorations` for messages that left (`gone_tokens`: their counts, tokens; each restoration a
        "restored" action of `DEDUP_STRATEGY`); the tokens it added back. A note given back the content of a message
        that left costs what that message cost when the counter counts them alike (`tokens.counted_alike`): it is
        not counted again."""
        if not any(m.id in self.pointed_at for m in gone):  # O(len(gone)): nothing points at them
            return 0
        before = self._total
        if self._note_at is None or self._note_at[0] != self._shape:
            by_target: dict[str, list[int]] = {}
            for i, s in enumerate(self.slots):
                if id(s.message) in self._notes and (target := same_as(s.message)) is not None:
                    by_target.setdefault(target, []).append(i)
            self._note_at = (self._shape, by_target)
        at = self._note_at[1]
        # the notes that may point at a message that left, in order: `restorations` reads no other
        indices = sorted({i for m in gone if m.id in self.pointed_at for i in at.get(m.id, ())})
        notes = [(i, self.slots[i].message) for i in indices if id(self.slots[i].message) in self._notes]
        counted = {id(m.content): (m, t) for m, t in zip(gone, gone_tokens)}
        for i, message, detail in restorations(notes, gone, self.pointed_at):
            source = counted.get(id(message.content))
            tokens = source[1] if source is not None and counted_alike(self.counter, message, source[0]) else None
            self.replace(i, message, strategy=DEDUP_STRATEGY, kind="restored", record_gone=False, detail=detail,
                         tokens=tokens)
        return self._total - before

    def check(self, after: str) -> None:
        """Run the whole-list invariant check; raise `CompactionInvariantError` naming `after` on a violation.

        Skipped when the structure did not change since the last check (`replace` verifies that it keeps it)."""
        if self._checked_shape == self._shape:
            return
        self._checked_shape = self._shape
        violations = check_invariants(self.messages)
        if violations:
            raise CompactionInvariantError(f"after {after}: " + "; ".join(str(v) for v in violations[:5]))


def _user_turn(message: BaseMessage | None) -> bool:
    return message is not None and kind(message) == HUMAN


def _start(message: BaseMessage | None) -> bool:
    return message is None or kind(message) == SYSTEM


Turns = tuple[Optional[UserOrAssistant], Optional[UserOrAssistant]]
"""The roles of the nearest turns before and after a place (`structure.turn_before` / `turn_from`)."""


def summary_role(before: BaseMessage | None, after: BaseMessage | None, preferred: str,
                 turns: Turns | None = None) -> str | None:
    """The role of a summary put between `before` and `after` (None: the start, or the end), or None when no role
    keeps the roles alternating there. `preferred` ("human" or "ai") is taken when it fits, else the other.
    `turns`: the roles of the nearest user or assistant turns on each side (`structure.turn_role`: tool calls and
    results are no turns), when known (`LadderState.summary_runs` gives them); None: only the neighbours count.

    The rule (issue 12: providers and chat templates that require alternating roles reject two user turns in a
    row; Gemini rejects a tool call right after an assistant turn; the first turn after the system prompt is the
    user's; issue 20: the strict templates, Mistral's, also reject two assistant turns in a row, and check after
    leaving out tool calls and results, so the turns on each side count, not only the neighbours):
    - a user turn fits when neither neighbour nor nearest turn is a user turn (the summary then answers nothing and
      asks nothing: it sits between assistant turns, or tool results whose turn is the assistant's, and an
      assistant step, or starts the conversation);
    - an assistant turn fits after a user or tool turn, the nearest turn before it the user's, and before a user
      turn (or at the end).
    Between a user turn and an assistant step nothing fits (`Summarize` folds such steps into a progress note
    instead: `SummaryRun.folds_instead`); nor right after the system prompt before a user turn.
    """
    before_turn, after_turn = turns if turns is not None else (None, None)
    fits = {
        "human": not _user_turn(before) and not _user_turn(after) and before_turn != "user" and after_turn != "user",
        "ai": (_user_turn(before) or (before is not None and kind(before) == TOOL))
              and (after is None or _user_turn(after)) and (turns is None or before_turn == "user"),
    }
    if fits.get(preferred):
        return preferred
    other = "ai" if preferred == "human" else "human"
    return other if fits[other] else None


@dataclass
class SummaryRun:
    """A run of consecutive messages a summary would replace (`LadderState.summary_runs`): their indices, their
    neighbours once they are gone (None: the start or the end of the history), and the roles of the nearest turns
    on each side (`structure.turn_before` / `turn_from`; None: none)."""

    indices: list[int]
    before: BaseMessage | None
    after: BaseMessage | None
    before_turn: UserOrAssistant | None = None
    after_turn: UserOrAssistant | None = None

    def role(self, preferred: str) -> str | None:
        """The role a summary in place of this run takes (`summary_role`), or None when none fits."""
        return summary_role(self.before, self.after, preferred, (self.before_turn, self.after_turn))

    def breaks_order(self) -> bool:
        """Whether removing the run without a summary in its place would put two user turns, or two assistant
        turns, side by side (tool calls and results left out), or leave the first turn after the system prompt not
        the user's."""
        return (self.before_turn is not None and self.before_turn == self.after_turn) or (
            _start(self.before) and not _user_turn(self.after))

    def folds_instead(self) -> bool:
        """Whether the run lies between a user turn and a later assistant message (the first steps of an exchange's
        answer, after its request or its tool results): no summary role fits there, so its steps are folded into
        a progress note in that assistant message (`progress.fold_steps`)."""
        return self.before_turn == "user" and self.after is not None and kind(self.after) == AI


def protect(slots: list[Slot], keep_from: int, pinned_by_caller: Sequence[bool],
            steps: list[Step] | None = None, *, keep_copies: bool = True) -> None:
    """Set the pinned / kept flags of `slots` for one pass (see `LadderState`).

    Pinned: leading system messages, the first and the latest request (`is_request`: never a summary or a
    mid-history system message; when the history starts with the assistant's message, after the placeholder a
    repair put first, `structure.is_conversation_start`, the user's first request and what came before it),
    caller pins (mid-history system messages among them, see
    `CompactionPolicy.is_pinned_by_caller`), the first assistant step after the latest request when it starts
    with a thinking block (Anthropic requires the active turn's first assistant message to keep it) and that
    request has answered (a running request's loop keeps a thinking-first step first by itself: `progress.py`,
    rule 3; its results may be truncated and its text cut, its thinking blocks never are), and the
    request of every exchange holding a pinned or kept message other than a system one. Kept: every message from
    `keep_from` on, moved back to the start of its step, and, with `keep_copies`, the step of every earlier copy
    that a kept deduplication note points at (`dedup.referenced`). Without it (a pass that must fit the budget,
    `compact.Compaction.start_second_pass`) that step may be folded like any other: a kept note whose copy leaves
    gets the content back (`dedup.restorations`), so nothing the note stood for is lost, and a large step the
    copy sits in (a pinned-size thinking step, say) no longer holds the history over the budget. The first
    assistant step after the latest request's last mid-history system note is pinned too when it starts with a
    thinking block: Anthropic starts a turn at that note (a user message with text), and that step opens it.
    """
    msgs = [s.message for s in slots]
    steps = split_steps(msgs) if steps is None else steps
    n = len(slots)
    for s in slots:
        s.pinned = False
        s.kept = False
    # align keep_from to the start of the step it falls in (never split a tool block)
    for st in steps:
        if st.start < keep_from < st.end:
            keep_from = st.start
            break
    for i in range(keep_from, n):
        slots[i].kept = True
    # an earlier copy that a kept deduplication note points at is as recent as the note (`dedup.referenced`)
    copies = {j for j, k in referenced(msgs).items() if k >= keep_from and j < keep_from} if keep_copies else ()
    if copies:
        for st in steps:
            if copies.intersection(st.indices):
                for i in st.indices:
                    slots[i].kept = True
    for i, m in enumerate(msgs):
        if m.type == "system":
            slots[i].pinned = True
        else:
            break
    requests = [i for i, m in enumerate(msgs) if is_request(m)]
    if requests:
        slots[requests[0]].pinned = True
        slots[requests[-1]].pinned = True
        if is_conversation_start(msgs[requests[0]]) and len(requests) > 1:
            # the assistant spoke first (a greeting): the placeholder a repair put before it is not the user's
            # first request; that request is pinned too, and what the assistant said before it stays in between
            for i in range(requests[0], requests[1] + 1):
                slots[i].pinned = True
        # the active turn's first assistant step (after the latest request, past any mid-history system note),
        # unless it is the running request's: its loop keeps a thinking-first step first by folding only into
        # one (`progress._Folds.plan`), and no strategy removes its steps
        active = next((st for st in steps if st.start > requests[-1] and st.kind == "assistant"), None)
        if active is not None and starts_with_thinking(msgs[active.start]) and not running_steps(msgs, steps):
            for i in active.indices:
                slots[i].pinned = True
        # ... and the one after its last mid-history system note: a user message with text, where Anthropic starts
        # a new turn (`structure.place_system_notes`)
        notes = [st.start for st in steps if st.start > requests[-1] and st.kind == "system"]
        opened = next((st for st in steps if notes and st.start > notes[-1] and st.kind == "assistant"), None)
        if opened is not None and starts_with_thinking(msgs[opened.start]):
            for i in opened.indices:
                slots[i].pinned = True
    for i, flag in enumerate(pinned_by_caller):
        if flag:
            slots[i].pinned = True
    # a pinned message pins its whole step (a tool block is never split) ...
    pinned = [s.pinned for s in slots]
    for st in steps:
        if st.end - st.start > 1 and True in pinned[st.start:st.end]:
            for i in st.indices:
                slots[i].pinned = True
    # ... and the request of its exchange, so no answer is left without its question (a mid-history system
    # message is no answer: pinned, it stays where it is and holds no request)
    held = [s.pinned or s.kept for s in slots]
    for ex in split_exchanges(steps):
        if ex.request is None or not ex.steps:
            continue
        if any(True in held[st.start:st.end] for st in ex.steps if st.kind != "system"):
            slots[ex.request].pinned = True
