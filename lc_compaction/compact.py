"""`compact()` / `acompact()`: run the ladder over a history and say what was done.

The ladder, in order:

1. Arrival edits, on every call, to messages the provider has not seen yet (so they never rewrite its cached
   prefix): a new tool result identical to an earlier one becomes a note pointing at it (`policy.deduplicate`,
   `lc_compaction.dedup`; lossless), and with `offload=True` a new tool result over `policy.offload_above` tokens
   becomes a preview (`lc_compaction.offload`). Then, if the history does not exceed the trigger (nor the
   budget), it comes back as it is: without arrival edits, the same list object, the same message objects, and
   nothing else is done (no copies), except that a message without an id gets one in place, as LangChain's
   `SummarizationMiddleware` does. The messages new since the tally are checked first (all of them without
   one: `check_invariants(messages, start)`, O(new messages)), so a broken history is repaired (`repair` True,
   from the call or the policy) or raises `InvalidHistoryError` (otherwise) under the trigger too: a thread
   stopped before its tools ran is never sent as it is. Such a call above a strategy's `ahead_at`
   (`Summarize(ahead_at=...)`) starts that strategy's work in the background (`_Compaction.ahead`: a worker
   thread under `compact`, an asyncio task under `acompact`); it never changes the call's result but for
   `details["ahead"]`.
2. The input is checked (`structure.check_invariants`). A SystemMessage after the conversation started is
   sent as a HumanMessage (lossless, reported); inside a running tool loop that thinks, such a note goes where
   a step that starts with thinking follows it (`structure.place_system_notes`, reported). Any other defect
   raises `InvalidHistoryError` naming the message index and tool_call_id, or is repaired (reported) when
   `repair=True`.
3. **Soft pass**: the strategies run in order, each only while the history is above the target, with the
   pins and the `keep` part protected.
4. **Second pass**: if the history is still above the target (the soft pass stopped short of it: the `keep` part,
   or the results it spares, hold too much), the strategies run again toward the target with the protected part
   shrunk to the pins and the most recent step ("hard" pass when over the budget `max_input_tokens - reserve`,
   else "relaxed"). The target is what buys headroom: a compaction that stops just under the budget (or the
   trigger) compacts again at the next call, breaking the provider's cached prefix each time (issue 13,
   `benchmarks/BILL.md`). In the relaxed pass a summarizer's model is not called a second time. The running
   request's tool calls never leave the input: its old results become notes, and only what still cannot fit is
   folded into its progress note (`progress.py`).
5. **Last resort**: if it is still over the budget, messages are cut in place (same id, a marked cut) until
   it fits (unpinned older messages toward the target, for the same headroom; the newest step leaving room for
   one more like it: `shorten.last_resort`): unpinned ones first, then pinned ones, the latest request last, the
   largest first in each group; the system prompt never. When cutting cannot make it fit (the pins alone are
   over the budget), only what is not pinned is cut, its text to the marker (tool calls kept, the progress note
   made terse). Then, if it still does not fit, the drop markers are left out one at a time, cutting again from
   before those cuts after each (`strategies.drop.leave_out_marker`: a marker is optional, fitting is not; kept
   only if the history then fits). Otherwise `fits` is False and `stop_reason` is "pinned_over_budget": given up
   only once no valid move is left.
6. The whole list is checked again; a violation here is a bug and raises `CompactionInvariantError`. A
   compaction never returns a history larger than its input (notes and markers that would cost more than what
   they stand for), unless it repaired the input: the input comes back as it is, stop reason "nothing_removable"
   (or "pinned_over_budget").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from lc_compaction._kinds import SYSTEM, kind
from lc_compaction.agent_request import AgentRequest
from lc_compaction.dedup import DEDUP_STRATEGY, arrival_notes, detail, duplicates
from lc_compaction.ladder import Action, AheadStrategy, LadderState, Slot, Strategy, SyncStrategy, protect
from lc_compaction.markers import is_dropped_marker
from lc_compaction.offload import (
    OffloadKeys,
    OffloadRecord,
    large_arrivals,
    plan_offloads,
    preview_arrivals,
    recall_chars,
)
from lc_compaction.policy import CompactionPolicy
from lc_compaction.progress import loop_trigger
from lc_compaction.structure import (
    InvalidHistoryError,
    Repair,
    check_invariants,
    ensure_ids,
    normalize_system_messages,
    notes_out_of_place,
    place_system_notes,
    repair_history,
    running_steps,
)
from lc_compaction.shorten import last_resort
from lc_compaction.strategies.drop import leave_out_marker
from lc_compaction.tokens import MessageCounter, StructuredCounter, counted_alike
from lc_compaction.tally import CountTally, count_with_tally, forget, prefix_counts, prefix_memo, tally_prefix

logger = logging.getLogger(__name__)

StopReason = str
"""Why the ladder stopped: "under_trigger", "under_target", "under_budget" (fits, above target),
"nothing_removable" (triggered, nothing could be done, still within budget), "strategy_failed" (triggered, nothing
was changed, and a strategy could not do its work: the summarizer's model failed, timed out or is cooling down
after a failure; `details["failures"]` names the strategy and the error), "below_clear_at_least" (the history
fit the budget and the compaction would have reclaimed fewer than `policy.clear_at_least` tokens: nothing was
changed), "pinned_over_budget"."""


@dataclass
class CompactionResult:
    """What `compact` returns.

    Attributes:
        messages: the compacted history (the input list itself when nothing was done).
        tokens_before / tokens_after: tokens of the request before and after (messages, reply priming and
            `extra_tokens`), by the policy's counter.
        messages_before / messages_after: message counts.
        triggered: whether the trigger (or the budget) was exceeded once the arrival edits were made (see the
            module docstring): whether the ladder ran. A result with actions but `triggered` False made only
            arrival edits.
        stop_reason: see `StopReason`.
        fits: tokens_after is within the budget (always True when there is no token budget).
        budget_tokens / target_tokens: the hard limit and the soft goal, in tokens (None when not set).
        actions: every change, in order (strategy, kind, message ids, tokens saved).
        repairs: repairs made to a broken or mid-history-system input (never silent).
        removed: the input messages no longer in the result (removed or summarized), in input order.
        summary: the text of the summary written by this call, if any.
        details: strategy-specific figures (e.g. identifiers kept by the fact guard).
        elapsed_ms: wall time of the call, milliseconds.
        tally: what this call counted, to pass as `tally=` to the next call on the grown history (O(k)
            counting); `tally.to_dict()` is plain JSON for graph state.
        offloads: with `compact(..., offload=True)`, the originals to write to the store before the result is
            used (`lc_compaction.offload.OffloadRecord`); empty otherwise.
        offload: what the writer did (`lc_compaction.integrations.offload`): plain JSON with "namespace",
            "written", "already_stored" (counts of records) and "failed" (`[{"id", "error"}]`: those messages
            were kept as they were); None when nothing was offloaded.
    """

    messages: list[BaseMessage]
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    triggered: bool
    stop_reason: StopReason
    fits: bool
    budget_tokens: int | None = None
    target_tokens: int | None = None
    actions: list[Action] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    removed: list[BaseMessage] = field(default_factory=list)
    summary: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float = 0.0
    tally: CountTally | None = None
    offloads: list[OffloadRecord] = field(default_factory=list, repr=False)
    offload: dict[str, Any] | None = None

    @property
    def compacted(self) -> bool:
        """True when the history was changed (actions or repairs)."""
        return bool(self.actions or self.repairs)

    @property
    def strategies_applied(self) -> list[str]:
        """Names of the strategies that changed something, in order, without repeats."""
        out: list[str] = []
        for a in self.actions:
            if a.strategy not in out:
                out.append(a.strategy)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable summary (no message objects): for events, logs and checkpoints; with offload, the
        writer's report under "offload"."""
        data = {
            "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
            "messages_before": self.messages_before, "messages_after": self.messages_after,
            "triggered": self.triggered, "compacted": self.compacted, "stop_reason": self.stop_reason,
            "fits": self.fits, "budget_tokens": self.budget_tokens, "target_tokens": self.target_tokens,
            "strategies_applied": self.strategies_applied,
            "actions": [a.to_dict() for a in self.actions], "repairs": [r.to_dict() for r in self.repairs],
            "removed_ids": [m.id for m in self.removed], "summary": self.summary,
            "details": self.details, "elapsed_ms": round(self.elapsed_ms, 3),
        }
        if self.offload is not None:
            data["offload"] = self.offload
        return data


def as_messages(messages: Sequence[Any], start: int = 0, *, name: str = "messages") -> list[BaseMessage]:
    """The input as a list of messages: the list itself when it is one, else `convert_to_messages(messages)`.

    Only `messages[start:]` is checked when the caller knows the prefix was checked before (O(k) per call for k
    new messages). `name` is what errors call the input (a front door passes its state key).

    Raises:
        ValueError: `messages` is a string, a single message or not a sequence; or an item cannot be converted
            (the message names its index: `messages[3]`).
    """
    if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
        raise ValueError(f"{name}: expected a list of messages, got {type(messages).__name__}")
    if isinstance(messages, list) and all(isinstance(m, BaseMessage) for m in messages[start:]):
        return messages
    try:
        return list(convert_to_messages(messages))
    except Exception as exc:  # convert_to_messages raises a bare ValueError/NotImplementedError
        for k, item in enumerate(messages):  # name the item that does not convert
            try:
                convert_to_messages([item])
            except Exception as item_exc:
                raise ValueError(f"{name}[{k}]: could not convert this {type(item).__name__} to a LangChain "
                                 f"message: {item_exc}") from item_exc
        raise ValueError(f"{name}: could not convert the input to LangChain messages: {exc}") from exc


def _deduplicate(state: LadderState, start: int = 0, pinned: Callable[[BaseMessage], bool] | None = None,
                found: dict[int, int] | None = None) -> int:
    """Replace each repeated tool result of `state` from index `start` on by its note (`duplicates`,
    `arrival_notes`), recorded as "deduplicated" actions of `DEDUP_STRATEGY`. Returns the tokens saved. `found`:
    `duplicates(state.messages, start, pinned)` when the caller already has it."""
    msgs = state.messages
    found = duplicates(msgs, start, pinned) if found is None else found
    saved = 0
    for i, new, tokens in arrival_notes(msgs, found, state.counter.count_message, lambda k: state.slots[k].tokens):
        saved += state.replace(i, new, strategy=DEDUP_STRATEGY, kind="deduplicated", tokens=tokens,
                               detail=detail(found[i]))
    return saved


class _Compaction:
    """One compaction (one call of `compact` or `acompact`): its state and steps, shared by the sync and async
    drivers."""

    def __init__(self, messages: Sequence[Any], policy: CompactionPolicy | None, extra_tokens: int,
                 repair: bool | None, tally: CountTally | None = None, offload: bool = False,
                 offload_rekey: Collection[str] = ()):
        self.t0 = time.perf_counter()
        if policy is None:
            raise ValueError("policy: compact() needs a CompactionPolicy (at least max_input_tokens or a trigger)")
        if policy.offload is not None and not offload:
            raise ValueError("policy.offload is set, but compact() does no I/O: use a front door, or "
                             "lc_compaction.integrations.offload.compact_offloaded(), or compact(..., offload=True) "
                             "and write result.offloads yourself before using the result")
        if extra_tokens < 0:
            raise ValueError(f"extra_tokens: must be >= 0 tokens, got {extra_tokens}")
        self.policy = policy
        self.counter = policy.counter
        tallied = tally_prefix(messages, self.counter, tally) if isinstance(messages, list) else 0
        self.original = as_messages(messages, tallied)
        self.fixed = extra_tokens + (self.counter.reply_overhead if self.original else 0)
        self.counts: dict[int, int] = {}
        self.tallied = tallied if self.original is messages else 0
        """How many leading messages `tally` already counted (0: every message is counted)."""
        self.tally = tally
        memo = prefix_memo(tally, self.counter) if tally is not None and self.tallied else None
        self.repeats = duplicates(self.original, self.tallied, policy.is_pinned_by_caller, memo) \
            if policy.deduplicate else {}
        """The new tool results that repeat an earlier one (`dedup.duplicates`), by index in the input."""
        self.message_tokens = count_with_tally(self.original, self.counter, tally, self.counts, start=self.tallied,
                                               known=self._repeat_counts())
        self.tokens_before = self.message_tokens + self.fixed
        loop = loop_trigger(self.original, self.counter.count_message, self.tokens_before,
                            policy.cached_price) if policy.trigger is None else None
        self.loop_limit = None if loop is None else loop[1]
        """Tokens above which a folded running loop folds again (`progress.loop_trigger`), with the default
        trigger; None otherwise."""
        by_policy = policy.is_triggered(self.tokens_before, len(self.original))
        by_loop = loop is not None and not by_policy and self.tokens_before > loop[1]
        self.triggered = by_policy or by_loop
        self.repair = policy.repairs_by_default(False) if repair is None else repair
        self.budget = policy.budget_tokens()
        self.goal_tokens, self.goal_messages = policy.target_goal()
        if loop is not None and by_loop:  # the loop's own trigger: fold as deep as its growth since the last fold
            self.goal_tokens = loop[0] if self.goal_tokens is None else min(self.goal_tokens, loop[0])
        least = policy.clear_at_least
        if least and self.triggered:  # reclaim at least `clear_at_least` tokens (LangChain's meaning)
            goal = self.tokens_before - least
            self.goal_tokens = goal if self.goal_tokens is None else min(self.goal_tokens, goal)
        self.repairs: list[Repair] = []
        self.state: LadderState | None = None
        self.offload = offload  # offload: huge new tool results become previews even under the trigger
        self.rekey = offload_rekey
        self.arrivals = large_arrivals(self.original, self.tallied, self.counts, policy.offload_above,
                                       policy.is_pinned_by_caller) if offload else set()
        self.duplicates = bool(self.repeats)
        self.ladder_ran = self.triggered
        self.violations = check_invariants(self.original, self.tallied)
        """What the check of the messages new since the tally found (`check_invariants(messages, start)`): the whole
        input is valid exactly when it found nothing (`prepare` checks it again only when it found something, to
        name each violation exactly, or when a system message was converted)."""
        self.broken = bool(self.violations) or notes_out_of_place(self.original, self.tallied)
        """The messages new since the tally (all of them without one) break a rule, or a system note sent as a user
        message stands where a step that cannot follow it comes next (`structure.notes_out_of_place`): the input is
        checked and repaired (or raises, without a repair decision) or its note placed, under the trigger too,
        O(new); a broken history is never returned as it is."""

    def unchanged(self, reason: str) -> CompactionResult:
        new = self.original[self.tallied:]
        counts = [self.counts[id(m)] for m in new] if all(id(m) in self.counts for m in new) else None
        tally = CountTally.of(self.original, self.message_tokens, self.counter, counts,
                              grown_from=self.tally if self.tallied else None)
        return CompactionResult(
            tally=tally, messages=self.original, tokens_before=self.tokens_before, tokens_after=self.tokens_before,
            messages_before=len(self.original), messages_after=len(self.original), triggered=self.triggered,
            stop_reason=reason, fits=self.budget is None or self.tokens_before <= self.budget,
            budget_tokens=self.budget, target_tokens=self.goal_tokens, elapsed_ms=self._ms())

    def _repeat_counts(self) -> dict[int, int]:
        """Counts (tokens) of the new repeated results that need no tokenizing: a repeat of an earlier result of
        the tallied prefix with the same class, tool name and text content costs what that result cost, which the
        tally knows: with the package's own counters (`tokens.StructuredCounter`: a message's count is its role,
        name, content and tool calls) and the one-per-message counter; a caller's callable may read more."""
        if not self.repeats or not isinstance(self.counter, (StructuredCounter, MessageCounter)):
            return {}
        prefix = self._prefix_counts()
        if prefix is None:
            return {}
        msgs = self.original
        return {i: prefix[j] for i, j in self.repeats.items()
                if j < len(prefix) and counted_alike(self.counter, msgs[i], msgs[j])}

    def arrival_edits_only(self) -> CompactionResult:
        """Under the trigger with repeated results only (no offload previews): each repeat becomes its note
        (`dedup.arrival_notes`), and nothing else is looked at, as on a call with nothing to edit (no validation,
        no ladder state): O(new messages) plus one list copy. The notes only lower the total, so the history stays
        under the trigger."""
        msgs = list(self.original)
        actions = []
        saved = 0
        counts = self.counts
        for i, note, tokens in arrival_notes(msgs, self.repeats, self.counter.count_message,
                                             lambda k: counts[id(msgs[k])]):
            old = msgs[i]
            saved += counts[id(old)] - tokens
            actions.append(Action(DEDUP_STRATEGY, "deduplicated", [old.id or ""], counts[id(old)] - tokens,
                                  detail(self.repeats[i])))
            msgs[i] = note
            counts[id(note)] = tokens
        if not actions:
            return self.unchanged("under_trigger")
        total = self.message_tokens - saved
        new = msgs[self.tallied:]
        tally = CountTally.of(msgs, total, self.counter, [counts[id(m)] for m in new],
                              grown_from=self.tally if self.tallied else None)
        return CompactionResult(
            tally=tally, messages=msgs, tokens_before=self.tokens_before, tokens_after=total + self.fixed,
            messages_before=len(msgs), messages_after=len(msgs), triggered=False, stop_reason="under_trigger",
            fits=self.budget is None or total + self.fixed <= self.budget, budget_tokens=self.budget,
            target_tokens=self.goal_tokens, actions=actions, elapsed_ms=self._ms())

    def _prefix_counts(self) -> Sequence[int] | None:
        """Per-message counts (tokens) of the prefix the tally covered (remembered by the previous call), if
        known."""
        if not self.tallied or self.tally is None:
            return None
        counts = prefix_counts(self.tally, self.counter)
        return counts if counts is not None and len(counts) == self.tallied else None

    def _ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def prepare(self) -> None:
        msgs, self.repairs = normalize_system_messages(self.original)
        violations = check_invariants(msgs) if msgs is not self.original or self.violations else []
        if violations:
            if not self.repair:
                raise InvalidHistoryError(violations)
            msgs, more = repair_history(msgs)
            self.repairs.extend(more)
            leftover = check_invariants(msgs)
            if leftover:  # repair could not fix it: never go on with a broken history
                raise InvalidHistoryError(leftover)
        msgs, moved = place_system_notes(msgs)  # a note in a thinking loop: before a step that can follow it
        self.repairs.extend(moved)
        msgs = ensure_ids(msgs, self.repairs)
        pinned = [self.policy.is_pinned_by_caller(m) for m in msgs]
        counts = self.counts
        prefix = self._prefix_counts()
        if prefix is not None:  # the previous call's counts of the very same objects: no lookups
            counts.update(zip(map(id, self.original), prefix))
        counted, count = counts.get, self.counter.count_message
        slots = []
        for m in msgs:
            c = counted(id(m))
            slots.append(Slot(m, count(m) if c is None else c))
        self.pinned_by_caller = pinned
        self.state = LadderState(slots, self.counter, fixed_tokens=self.fixed, goal_tokens=self.goal_tokens,
                                 goal_messages=self.goal_messages, pass_name="soft", budget_tokens=self.budget,
                                 limit=self.limit,
                                 offload=OffloadKeys(self.original, self.rekey) if self.offload else None)
        keep_from = self.policy.keep_start(msgs, [s.tokens for s in slots])
        protect(slots, keep_from, pinned, self.state.steps())
        # arrival edits, before the ladder, which then runs only if the history is still above the trigger
        if self.policy.deduplicate:  # the whole list again when repairs changed it, else the repeats found above
            _deduplicate(self.state, 0 if self.repairs else self.tallied, self.policy.is_pinned_by_caller,
                        found=None if self.repairs else self.repeats)
        if self.arrivals:
            preview_arrivals(self.state, self.arrivals)
        if self.duplicates or self.arrivals:
            self.ladder_ran = self.limit(self.state.total(), len(slots))

    def limit(self, tokens: int, n_messages: int) -> bool:
        """Whether a history of `tokens` tokens and `n_messages` messages is over this call's trigger: the policy's
        (`CompactionPolicy.is_triggered`), or a folded running loop's (`loop_limit`)."""
        return self.policy.is_triggered(tokens, n_messages) or (
            self.loop_limit is not None and tokens > self.loop_limit)

    def over_budget(self) -> bool:
        st = self.state
        assert st is not None
        return self.budget is not None and st.total() > self.budget

    def needs_second_pass(self) -> bool:
        """After the soft pass: still over the budget, above the trigger, or above the target (a compaction that
        stops short of the target leaves no headroom, so the next calls compact again, churning the prompt
        cache)."""
        st = self.state
        assert st is not None
        return self.over_budget() or self.limit(st.total(), len(st.slots)) or st.over_goal()

    def start_second_pass(self) -> None:
        """Shrink the protected part to the pins and the most recent step; the goal stays the target, or, while the
        latest request's tool loop runs and is most of the history (in tokens), becomes the loop goal
        (`CompactionPolicy.loop_goal`).
        `pass_name` is "hard" when the history is over the budget (it must shrink to fit the window), else
        "relaxed" (it fits, but is above the target)."""
        st = self.state
        assert st is not None
        msgs = st.messages
        steps = st.steps()
        keep_from = steps[-1].start if steps and steps[-1].kind == "assistant" else len(msgs)
        pinned = [self.policy.is_pinned_by_caller(m) for m in msgs]
        over_budget = self.over_budget()
        # over the budget, a kept dedup note's earlier copy does not hold its step (`ladder.protect`)
        protect(st.slots, keep_from, pinned, steps, keep_copies=not over_budget)
        st.pass_name = "hard" if over_budget else "relaxed"
        loop_goal = self.policy.loop_goal()
        if loop_goal is not None and self.goal_tokens is not None and loop_goal < self.goal_tokens:
            loop = running_steps(msgs, steps)
            if 2 * sum(st.slots[i].tokens for s in loop for i in s.indices) > st.total():
                # a running loop that is most of the history: its steps fold deeper, for headroom
                # (`policy.LOOP_TARGET_OF_TARGET`); the target stays what the result reports and the last resort
                # cuts toward (cutting text in place toward the loop goal would only destroy it)
                st.goal_tokens = loop_goal

    def last_resort(self) -> None:
        """Cut messages in place until the history fits the token budget (`shorten.last_resort`); when it cannot,
        leave out drop markers one at a time (`strategies.drop.leave_out_marker`: a marker is optional, fitting is
        not), each time cutting again from the history as it was before the cuts, and keep the first attempt that
        fits (none fits: the cuts alone stay)."""
        st, budget = self.state, self.budget
        if st is None or budget is None:
            return
        before = st.fork() if any(is_dropped_marker(m) for m in st.messages) else None
        last_resort(st, budget, self.goal_tokens)
        if st.total() <= budget or before is None:
            return
        while leave_out_marker(before):
            attempt = before.fork()
            last_resort(attempt, budget, self.goal_tokens)
            if attempt.total() <= budget:
                self.state = attempt
                return

    def without_ladder(self) -> CompactionResult | None:
        """The result when the ladder need not run: nothing to compact (under the trigger, nothing new to edit
        or repair), or arrival edits only; None when it must run (`run`)."""
        if not (self.triggered or self.arrivals or self.duplicates or self.broken):
            return self.unchanged("under_trigger")
        if not (self.triggered or self.arrivals or self.broken):
            return self.arrival_edits_only()
        return None

    def ahead(self, result: CompactionResult, run: str, agent_request: AgentRequest | None) -> CompactionResult:
        """Summaries ahead of time: on a call that did not trigger, each strategy with an `ahead_at`
        (`ladder.AheadStrategy`: `Summarize`) that the history is above is asked whether to start its
        background work (`ahead_wanted`: cheap), and if so starts it ("thread" for `compact`, "task" for
        `acompact`) with a function that builds the ladder's state as a triggered soft pass would see it
        (`_ahead_state`: `prepare`, `share`, O(history), called in the background). Its report goes to
        `result.details["ahead"]`. Nothing here raises into the call: a history that cannot be prepared (broken,
        without a repair decision) fails the job in the background (logged, reported on the next call)."""
        if result.triggered or not self.policy.ahead_strategies:
            return result
        for s in self.policy.ahead_strategies:
            assert isinstance(s, AheadStrategy)  # checked by the policy
            if not self.policy.is_ahead(s.ahead_at, result.tokens_after, result.messages_after):
                continue
            wanted, report = s.ahead_wanted(result.messages)
            if wanted:
                try:
                    started = s.start_ahead(result.messages, self._ahead_state(agent_request), run)
                except Exception as exc:  # noqa: BLE001 - work ahead of time never fails the call
                    logger.warning("lc-compaction: %s could not start its work ahead of time: %s: %s", s.name,
                                   type(exc).__name__, exc)
                    started = {"status": "not_started", "error": f"{type(exc).__name__}: {exc}"}
                if started is not None:
                    report = {**started, "previous": report} if report else started
            if report:
                result.details["ahead"] = report
        return result

    def _ahead_state(self, agent_request: AgentRequest | None) -> Callable[[], LadderState]:
        """A function giving the ladder's state of this call's history as a triggered soft pass would see it
        (`prepare`, `share`), built once, on first use, from a copy of the input list (the caller may change its
        list afterwards), by whichever thread asks first (a lock)."""
        self.original = list(self.original)
        lock = threading.Lock()

        def state() -> LadderState:
            with lock:
                if self.state is None:
                    self.prepare()
                    self.share(agent_request)
                assert self.state is not None  # set by prepare()
                return self.state

        return state

    def run(self, agent_request: AgentRequest | None) -> CompactionResult:
        """Prepare the state, apply the ladder's strategies (`apply`), the last resort if still over the budget,
        and finish."""
        self.prepare()
        state = self.state
        assert state is not None  # set by prepare()
        self.share(agent_request)
        for strategy in self.ladder():
            strategy.apply(state)
        if self.over_budget():
            self.last_resort()
        return self.finish()

    def share(self, agent_request: AgentRequest | None) -> None:
        """Give the state the agent's request a summary request may repeat (`LadderState.agent_request`) and the
        window that bounds it, unless the request is not the start of the history given (`AgentRequest.begins`:
        another branch, an edited or removed message) or forces a tool call (`AgentRequest.answers_in_text`)."""
        state = self.state
        assert state is not None  # set by prepare()
        state.window_tokens = self.policy.max_input_tokens
        usable = agent_request is not None and agent_request.answers_in_text() and agent_request.begins(self.original)
        state.agent_request = agent_request if usable else None

    def ladder(self) -> Iterator[Strategy]:
        """Yield each strategy to apply, in order, for the soft pass then (if needed) the second pass; the
        caller applies it (sync or async) and this generator checks the invariants after each."""
        st = self.state
        assert st is not None
        if not self.ladder_ran:
            return
        for second in (False, True):
            if second:
                if not self.needs_second_pass():
                    return
                self.start_second_pass()
            for strategy in self.policy.strategies or ():
                if not st.over_goal():
                    break
                yield strategy
                st.check(strategy.name)

    def finish(self) -> CompactionResult:
        st = self.state
        assert st is not None
        st.check("the ladder")
        if not self.repairs and st.total() > self.tokens_before:  # notes cost more than what they replace: never grow
            over = self.budget is not None and self.tokens_before > self.budget
            return self.unchanged("pinned_over_budget" if over else "nothing_removable")
        least = self.policy.clear_at_least
        if (least and self.ladder_ran and st.actions and (self.budget is None or self.tokens_before <= self.budget)
                and self.tokens_before - st.total() < least):
            return self.unchanged("below_clear_at_least")  # Anthropic's meaning: too small to pay for the prefix
        if self.budget is not None and st.total() > self.budget:
            reason = "pinned_over_budget"
        elif not self.ladder_ran:
            reason = "under_trigger"  # only arrival previews (offload)
        elif not st.actions:
            reason = "strategy_failed" if st.details.get("failures") else "nothing_removable"
        elif (self.goal_tokens is not None and st.total() > self.goal_tokens) or (
                self.goal_messages is not None and len(st.slots) > self.goal_messages):
            reason = "under_budget"
        else:
            reason = "under_target"
        orig_by_id = {m.id: m for m in self.original if m.id}
        removed = [orig_by_id.get(m.id, m) if m.id else m for m in st.removed
                   if m.id in orig_by_id or not is_dropped_marker(m)]  # a marker this call wrote is no input
        summary = st.details.pop("summary", None)
        messages = st.messages
        tally = CountTally.of(messages, st.total() - self.fixed, self.counter, [s.tokens for s in st.slots])
        if self.tally is not None and self.tallied and self.tally != tally:  # superseded: one entry per history
            forget(self.tally, self.counter)
        changed = bool(st.actions or self.repairs)
        return CompactionResult(
            messages=messages if changed else self.original,
            tokens_before=self.tokens_before, tokens_after=st.total(),
            messages_before=len(self.original), messages_after=len(messages), triggered=self.ladder_ran,
            stop_reason=reason, fits=reason != "pinned_over_budget",
            budget_tokens=self.budget, target_tokens=self.goal_tokens, actions=st.actions,
            repairs=self.repairs, removed=removed, summary=summary,
            details=st.details, elapsed_ms=self._ms(), tally=tally,
            offloads=self._offloads(removed))

    def _offloads(self, removed: list[BaseMessage]) -> list[OffloadRecord]:
        """With offload, the originals to write (`offload.plan_offloads`), each with the largest recall slice for
        this call's window (`offload.recall_chars`: the fixed tokens and the system messages that open the
        history are sent with every recall's answer)."""
        st = self.state
        if not self.offload or st is None:
            return []
        beside = st.fixed_tokens
        for slot in st.slots:
            if kind(slot.message) != SYSTEM:
                break
            beside += slot.tokens
        return plan_offloads(self.original, st.actions, removed, st.offload,
                             recall_chars(self.policy.budget_tokens(), beside))


def compact(messages: Sequence[Any], policy: CompactionPolicy | None = None, *, extra_tokens: int = 0,
            repair: bool | None = None, tally: CountTally | None = None, offload: bool = False,
            offload_rekey: Collection[str] = (), agent_request: AgentRequest | None = None) -> CompactionResult:
    """Compact `messages` under `policy`: cheapest strategy first, stopping as soon as it fits.

    Args:
        messages: the history: `BaseMessage`s, or anything `convert_to_messages` accepts (dicts in OpenAI
            format, `(role, text)` tuples), converted once here.
        policy: the `CompactionPolicy`.
        extra_tokens: tokens sent with the messages but not in them (a system prompt or tool schemas the
            caller passes separately), counted toward the trigger and the budget.
        repair: override `policy.repair` for this call (`policy.repair=None`, the default, is False here: a
            broken input raises unless repair is asked for). The messages new since `tally` are checked under
            the trigger too (see the module docstring, step 1).
        tally: the previous result's `tally` (or `CountTally.from_dict(...)`): when the history only grew since,
            only the new messages are counted (O(k) instead of O(history)).
        offload: the caller writes `result.offloads` to a store before using the result (`lc_compaction.offload`;
            the front doors and `integrations.offload.compact_offloaded` do): truncation notes say how to recall,
            and a new tool result over `policy.offload_above` tokens becomes a preview even under the trigger.
            Still no I/O here.
        offload_rekey: with offload, ids of tool results whose tool_call_id is already the key of another
            content in the thread's store (the writer finds them): they are keyed "<tool_call_id>@<message id>"
            (`lc_compaction.offload.OffloadKeys`).
        agent_request: the agent's latest model request as the front door sent it
            (`lc_compaction.agent_request.AgentRequest`), for a summary request that repeats it
            (`Summarize.share_agent_request`); None (default): summaries use the transcript prompt.

    Returns:
        A `CompactionResult`. When the trigger is not exceeded, `result.messages` is the input list itself (unless
        a broken input was repaired: then `result.repairs` says how, `triggered` is False).

    Raises:
        InvalidHistoryError: the input breaks a pairing or order rule and repair is off (names the index and
            tool_call_id).
        ValueError: invalid arguments (naming the argument); `policy.offload` is set and `offload` is False.
        CompactionInvariantError: a strategy broke an invariant (a bug; the input is untouched).
    """
    compaction = _Compaction(messages, policy, extra_tokens, repair, tally, offload, offload_rekey)
    quick = compaction.without_ladder()
    if quick is not None:
        return compaction.ahead(quick, "thread", agent_request)
    return compaction.run(agent_request)


async def acompact(messages: Sequence[Any], policy: CompactionPolicy | None = None, *, extra_tokens: int = 0,
                   repair: bool | None = None, tally: CountTally | None = None, offload: bool = False,
                   offload_rekey: Collection[str] = (), agent_request: AgentRequest | None = None
                   ) -> CompactionResult:
    """Async twin of `compact` (strategies run through `aapply`, so an LLM summarizer is awaited).

    The event loop is never held for a whole compaction: when every strategy of the ladder is a `SyncStrategy`
    (nothing to await: the default ladder, the ledger), the ladder runs in a worker thread
    (`asyncio.to_thread`), so other tasks go on meanwhile (Python lets the loop's thread run every
    `sys.getswitchinterval()` seconds, 5 ms by default). A call with nothing to compact, or only arrival edits,
    stays on the loop: it costs what its new messages cost."""
    compaction = _Compaction(messages, policy, extra_tokens, repair, tally, offload, offload_rekey)
    quick = compaction.without_ladder()
    if quick is not None:
        return compaction.ahead(quick, "task", agent_request)
    if all(isinstance(s, SyncStrategy) for s in compaction.policy.strategies or ()):
        return await asyncio.to_thread(compaction.run, agent_request)
    compaction.prepare()
    state = compaction.state
    assert state is not None  # set by prepare()
    compaction.share(agent_request)
    for strategy in compaction.ladder():
        await strategy.aapply(state)
    if compaction.over_budget():
        compaction.last_resort()
    return compaction.finish()
