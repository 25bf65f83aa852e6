"""Replay recorded conversations through compaction, as the agent loop would have run them.

Replay semantics (one conversation): before every recorded assistant message (one model call), the history so
far goes through `compact`, and the compacted history REPLACES the history (as an agent loop with a rewriting
pre-model hook does); then the recorded assistant message and the messages after it (tool results, the next
user turn) are appended. The uncompacted figure of a call is the same call without compaction: the whole
recorded conversation before that assistant message.

All token figures are counted with the policy's counter (`policy.counter.count_messages`: the messages plus the
reply priming), so "sent" and "uncompacted" are measured alike. Times are wall-clock milliseconds of the
`compact` call. Used by the CLI (`lc-compaction replay`), the notebooks and the tests.

Each call is also billed (`billing`): under a `PromptCache` (OpenAI's rule and a cached price of 0.1 by default)
the sent history is compared with the previous call's, and so is the uncompacted history with the previous
uncompacted one, giving the cached tokens and the input bill (in units of uncached input tokens) with and
without compaction. With `agent_model` (the agent's chat model, also the summarizer: a `Summarize(model=...)` of
the same model), every call's compaction is given the agent's previous request (`compact(...,
agent_request=...)`: the previous call's sent history, through `agent_model`), so a summary may repeat it (the
cache-sharing request); each summary call a compaction made (`details["summary_requests"]`) is billed too
(`BillMeter.bill_summary`: its input against the agent's previous request, plus its output at `output_price`),
beside the agent's call that follows it. And each call looks up the identifiers of the recording so far in what was sent
(`recall.IdentifierTracker`: patterns independent of the fact guard).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage

from lc_compaction._drive import adrive, drive
from lc_compaction.agent_request import AgentRequest
from lc_compaction.billing import DEFAULT_OUTPUT_PRICE, BillMeter, PromptCache, SummaryBill, bill_ratio
from lc_compaction.compact import CompactionResult, acompact, compact
from lc_compaction.policy import CompactionPolicy
from lc_compaction.recall import CODE_PATTERNS, IdentifierTracker
from lc_compaction.structure import check_invariants, is_request
from lc_compaction.traces import Trace, load_traces

if TYPE_CHECKING:
    from tqdm.auto import tqdm

__all__ = ["CallRecord", "ConversationReplay", "FileReplay", "ReplayError", "ReplayReport", "areplay_conversation",
           "areplay_files", "command_figures", "percentile", "policy_dict", "replay_conversation", "replay_files",
           "summarize_calls"]

CompactFn = Callable[..., CompactionResult]
"""`compact_fn(history, policy)` (and `agent_request=` with `agent_model`) -> `CompactionResult`."""
ACompactFn = Callable[..., Awaitable[CompactionResult]]
"""The async `compact_fn`: `await compact_fn(history, policy)` (and `agent_request=`) -> `CompactionResult`."""
OnCall = Callable[["CallRecord", list[BaseMessage], CompactionResult], None]
"""`on_call(record, history_in, result)`: called after each model call's compaction with the history that went
in (carried history plus the new recorded messages) and the `CompactionResult` (whose `.messages` were sent)."""


@dataclass
class CallRecord:
    """One model call of a replayed conversation.

    Attributes:
        index: the call's number in its conversation (0-based).
        message_index: index, in the recorded conversation, of the assistant message this call produced.
        tokens_uncompacted: input tokens of the call without compaction (the whole recording before it).
        tokens_before: input tokens entering compaction (the carried, already compacted history plus the new
            recorded messages).
        tokens_sent: input tokens of the call with compaction (what the model would have been sent).
        messages_uncompacted / messages_before / messages_sent: the same three sizes, in messages.
        compaction_ms: wall time of the `compact` call, milliseconds.
        compacted: this call compacted: the trigger (or the budget) was exceeded and the ladder changed the
            history (`CompactionResult.triggered` and `.compacted`).
        arrival_edits: this call changed only messages new since the previous call (a repeated tool result noted,
            `lc_compaction.dedup`; an offload preview): the ladder did not run, and what the previous call sent
            is sent alike (no prefix break). Not a compaction.
        triggered: the trigger (or the budget) was exceeded after the arrival edits (the ladder ran).
        stop_reason: `CompactionResult.stop_reason`.
        fits: `CompactionResult.fits` (within `max_input_tokens - reserve`).
        strategies: names of the strategies that changed something, in order.
        violations: the invariant violations of the sent history (`structure.check_invariants`, as strings).
        first_request_present: the conversation's first user request is in the sent history, same id and
            same content.
        identifiers_evicted: identifiers (ids, codes, amounts, e-mails, ...: `FactGuard`) in what a summary
            replaced at this call (0 when no summary was written).
        identifiers_kept: how many of them the summary's own text kept, without the fact guard's line (the
            guard adds the others).
        cached_tokens: input tokens of the call billed as cached (`PromptCache.cached_tokens` of the prefix the
            sent history shares with the previous call's; 0 on the first call).
        billed_input: the call's input bill with compaction, in uncached-token units
            (`tokens_sent - cached_tokens + cached_price * cached_tokens`).
        prefix_messages: leading messages sent alike in this call and the previous one (`billing.same_on_wire`):
            where the cached prefix broke.
        cached_tokens_uncompacted / billed_input_uncompacted: the same without compaction (the recording before
            this call against the recording before the previous one).
        back_to_back: this call compacted and so did the previous call of the conversation.
        prefix_broken: this call's sent history does not start with all the previous call sent
            (`prefix_messages` below the previous call's `messages_sent`): the provider's cached prefix broke
            here, and the rest of the history is billed uncached (a compaction rewrote it).
        after_compaction: an earlier call of the conversation compacted (the calls that send the smaller
            history a compaction made, and so can pay back its broken prefix).
        identifiers_so_far: distinct identifiers in the recording before this call (`recall`: reservation ids,
            flight numbers, codes, amounts, e-mails, user and payment ids, long numbers).
        identifiers_held: of them, those the sent history still holds.
        tool_identifiers_so_far / tool_identifiers_held: the same for identifiers found so far only in tool
            results.
        command_identifiers_seen: identifiers of this call's command (the recorded message's tool-call
            arguments: paths, `file.py:N`, pytest ids, error types, def/class names, dotted names, hashes) that
            appeared earlier in the recording (`recall.IdentifierTracker.command`).
        command_identifiers_held: of them, those the sent history holds.
        tool_command_identifiers_seen / tool_command_identifiers_held: the same for those that appeared earlier
            only in tool results.
        command_identifiers_by_kind: `{kind: [seen, held, tool_seen, tool_held]}` (`recall.CODE_PATTERNS`).
        summary_calls: summary calls this call's compaction made (`details["summary_requests"]`: those that
            answered; a transcript prompt in chunks makes several).
        summary_forms: their forms, in order ("agent": the agent's request repeated; "transcript").
        summary_input_tokens / summary_cached_tokens / summary_output_tokens: their input tokens, the part billed
            as cached (against the agent's previous request: `BillMeter.bill_summary`) and their output tokens,
            summed.
        summary_billed: their bill (input and output, the output at the replay's `output_price`), in
            uncached-token units.
    """

    index: int
    message_index: int
    tokens_uncompacted: int
    tokens_before: int
    tokens_sent: int
    messages_uncompacted: int
    messages_before: int
    messages_sent: int
    compaction_ms: float
    compacted: bool
    triggered: bool
    stop_reason: str
    fits: bool
    strategies: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    first_request_present: bool = True
    identifiers_evicted: int = 0
    identifiers_kept: int = 0
    cached_tokens: int = 0
    billed_input: float = 0.0
    prefix_messages: int = 0
    cached_tokens_uncompacted: int = 0
    billed_input_uncompacted: float = 0.0
    back_to_back: bool = False
    arrival_edits: bool = False
    prefix_broken: bool = False
    after_compaction: bool = False
    identifiers_so_far: int = 0
    identifiers_held: int = 0
    tool_identifiers_so_far: int = 0
    tool_identifiers_held: int = 0
    command_identifiers_seen: int = 0
    command_identifiers_held: int = 0
    tool_command_identifiers_seen: int = 0
    tool_command_identifiers_held: int = 0
    command_identifiers_by_kind: dict[str, list[int]] = field(default_factory=dict)
    summary_calls: int = 0
    summary_forms: list[str] = field(default_factory=list)
    summary_input_tokens: int = 0
    summary_cached_tokens: int = 0
    summary_output_tokens: int = 0
    summary_billed: float = 0.0

    @property
    def billed_total(self) -> float:
        """The call's input bill and its summary calls' bill, in uncached-token units."""
        return self.billed_input + self.summary_billed

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-serializable values (same names as the attributes)."""
        return {"index": self.index, "message_index": self.message_index,
                "tokens_uncompacted": self.tokens_uncompacted, "tokens_before": self.tokens_before,
                "tokens_sent": self.tokens_sent, "messages_uncompacted": self.messages_uncompacted,
                "messages_before": self.messages_before, "messages_sent": self.messages_sent,
                "compaction_ms": round(self.compaction_ms, 3), "compacted": self.compacted,
                "triggered": self.triggered, "stop_reason": self.stop_reason, "fits": self.fits,
                "strategies": list(self.strategies), "violations": list(self.violations),
                "first_request_present": self.first_request_present,
                "cached_tokens": self.cached_tokens, "billed_input": round(self.billed_input, 2),
                "prefix_messages": self.prefix_messages, "cached_tokens_uncompacted": self.cached_tokens_uncompacted,
                "billed_input_uncompacted": round(self.billed_input_uncompacted, 2),
                "back_to_back": self.back_to_back, "arrival_edits": self.arrival_edits,
                "prefix_broken": self.prefix_broken, "after_compaction": self.after_compaction,
                "identifiers_so_far": self.identifiers_so_far,
                "identifiers_held": self.identifiers_held, "tool_identifiers_so_far": self.tool_identifiers_so_far,
                "tool_identifiers_held": self.tool_identifiers_held,
                "command_identifiers_seen": self.command_identifiers_seen,
                "command_identifiers_held": self.command_identifiers_held,
                "tool_command_identifiers_seen": self.tool_command_identifiers_seen,
                "tool_command_identifiers_held": self.tool_command_identifiers_held,
                "command_identifiers_by_kind": {k: list(v) for k, v in self.command_identifiers_by_kind.items()},
                "summary_calls": self.summary_calls, "summary_forms": list(self.summary_forms),
                "summary_input_tokens": self.summary_input_tokens,
                "summary_cached_tokens": self.summary_cached_tokens,
                "summary_output_tokens": self.summary_output_tokens, "summary_billed": round(self.summary_billed, 2),
                "billed_total": round(self.billed_total, 2)}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) of `values`, interpolating linearly between the closest ranks:
    position `(n - 1) * q / 100` in the sorted values (Hyndman and Fan's type 7, numpy.percentile's default
    "linear" method); the value itself for a single value; None for no values.

    Raises:
        ValueError: q is outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"q: a percentile is between 0 and 100, got {q!r}")
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def summarize_calls(calls: Sequence[CallRecord], *, max_input_tokens: int | None, budget_tokens: int | None = None,
                    conversations: int = 1) -> dict[str, Any]:
    """The replay figures over `calls` (of one or many conversations), as a JSON-serializable dict.

    Keys (tokens are input tokens by the policy's counter; ms are milliseconds):
        conversations, model_calls, compactions (calls whose ladder changed the history: `CallRecord.compacted`),
        arrival_edit_calls (calls that changed only new messages: `CallRecord.arrival_edits`),
        tokens_sent_uncompacted / tokens_sent (cumulative over all calls: what would be billed as input),
        tokens_saved (the difference) and tokens_saved_fraction (of tokens_sent_uncompacted; 0.0 when none),
        peak_input_tokens / peak_input_tokens_uncompacted (largest single call, 0 for no calls),
        over_window_calls (tokens_sent > max_input_tokens; 0 when there is no window),
        over_budget_calls (tokens_sent > max_input_tokens - reserve), not_fitting_calls (fits False),
        invariant_violations (total count over all sent histories), first_request_missing_calls,
        compaction_ms_median, compaction_ms_p95, compaction_ms_max (None when there are no calls),
        identifiers_evicted / identifiers_kept (summed over calls; see `CallRecord`): the share a summary keeps
        without the fact guard, identifiers_so_far / identifiers_held / tool_identifiers_so_far /
        tool_identifiers_held (summed (call, identifier) pairs) and their fractions,
        command_identifiers_seen / command_identifiers_held / tool_command_identifiers_seen /
        tool_command_identifiers_held (the next command's, summed over calls) and their fractions (None without
        any), command_identifiers_by_kind (`{kind: {"seen", "held", "held_fraction", "tool_seen", "tool_held"}}`);
        prefix_breaks (calls whose cached prefix broke: `CallRecord.prefix_broken`), calls_after_first_compaction
        (calls after their conversation's first compaction: `CallRecord.after_compaction`), what decides whether
        compaction lowers the bill (`bill_ratio` below 1) or raises it;
        summary_calls, summary_agent_calls (of the "agent" form), summary_input_tokens, summary_cached_tokens,
        summary_cached_fraction (of summary_input_tokens; None without summary calls), summary_output_tokens,
        summary_billed (input and output, uncached-token units; see `CallRecord`), billed_total (billed_input
        plus summary_billed) and bill_ratio_total (billed_total over billed_input_uncompacted: the bill with
        the summary calls counted, against no compaction).
    """
    ms = [c.compaction_ms for c in calls]
    unc = sum(c.tokens_uncompacted for c in calls)
    sent = sum(c.tokens_sent for c in calls)
    billed = sum(c.billed_input for c in calls)
    billed_unc = sum(c.billed_input_uncompacted for c in calls)
    summary_in = sum(c.summary_input_tokens for c in calls)
    summary_cached = sum(c.summary_cached_tokens for c in calls)
    summary_billed = sum(c.summary_billed for c in calls)
    ids = sum(c.identifiers_so_far for c in calls)
    ids_held = sum(c.identifiers_held for c in calls)
    tool_ids = sum(c.tool_identifiers_so_far for c in calls)
    tool_held = sum(c.tool_identifiers_held for c in calls)
    command = command_figures(c.command_identifiers_by_kind for c in calls)
    return {
        "conversations": conversations,
        "model_calls": len(calls),
        "compactions": sum(1 for c in calls if c.compacted),
        "arrival_edit_calls": sum(1 for c in calls if c.arrival_edits),
        "tokens_sent_uncompacted": unc,
        "tokens_sent": sent,
        "tokens_saved": unc - sent,
        "tokens_saved_fraction": round((unc - sent) / unc, 4) if unc else 0.0,
        "peak_input_tokens": max((c.tokens_sent for c in calls), default=0),
        "peak_input_tokens_uncompacted": max((c.tokens_uncompacted for c in calls), default=0),
        "over_window_calls": sum(1 for c in calls if max_input_tokens is not None and c.tokens_sent > max_input_tokens),
        "over_budget_calls": sum(1 for c in calls if budget_tokens is not None and c.tokens_sent > budget_tokens),
        "not_fitting_calls": sum(1 for c in calls if not c.fits),
        "invariant_violations": sum(len(c.violations) for c in calls),
        "identifiers_evicted": sum(c.identifiers_evicted for c in calls),
        "identifiers_kept": sum(c.identifiers_kept for c in calls),
        "first_request_missing_calls": sum(1 for c in calls if not c.first_request_present),
        "cached_tokens": sum(c.cached_tokens for c in calls),
        "cached_tokens_uncompacted": sum(c.cached_tokens_uncompacted for c in calls),
        "billed_input": round(billed, 2),
        "billed_input_uncompacted": round(billed_unc, 2),
        "bill_ratio": bill_ratio(billed, billed_unc),
        "summary_calls": sum(c.summary_calls for c in calls),
        "summary_agent_calls": sum(c.summary_forms.count("agent") for c in calls),
        "summary_input_tokens": summary_in,
        "summary_cached_tokens": summary_cached,
        "summary_cached_fraction": _fraction(summary_cached, summary_in),
        "summary_output_tokens": sum(c.summary_output_tokens for c in calls),
        "summary_billed": round(summary_billed, 2),
        "billed_total": round(billed + summary_billed, 2),
        "bill_ratio_total": bill_ratio(billed + summary_billed, billed_unc),
        "back_to_back_compactions": sum(1 for c in calls if c.back_to_back),
        "prefix_breaks": sum(1 for c in calls if c.prefix_broken),
        "calls_after_first_compaction": sum(1 for c in calls if c.after_compaction),
        "identifiers_so_far": ids,
        "identifiers_held": ids_held,
        "identifiers_held_fraction": round(ids_held / ids, 4) if ids else None,
        "tool_identifiers_so_far": tool_ids,
        "tool_identifiers_held": tool_held,
        "tool_identifiers_held_fraction": round(tool_held / tool_ids, 4) if tool_ids else None,
        **command,
        "compaction_ms_median": _round(percentile(ms, 50)),
        "compaction_ms_p95": _round(percentile(ms, 95)),
        "compaction_ms_max": _round(max(ms) if ms else None),
    }


def _fraction(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def command_figures(by_kind: Iterable[Mapping[str, Sequence[int]]]) -> dict[str, Any]:
    """The next-command figures over calls, from each call's `CallRecord.command_identifiers_by_kind`: the keys
    `command_identifiers_seen`, `command_identifiers_held`, `command_identifiers_held_fraction`,
    `tool_command_identifiers_seen`, `tool_command_identifiers_held`, `tool_command_identifiers_held_fraction`
    (fractions None when nothing was seen) and `command_identifiers_by_kind` (`{kind: {"seen", "held",
    "held_fraction", "tool_seen", "tool_held", "tool_held_fraction"}}`, kinds in `recall.CODE_PATTERNS` order)."""
    totals: dict[str, list[int]] = {k: [0, 0, 0, 0] for k in CODE_PATTERNS}
    for call in by_kind:
        for k, v in call.items():
            row = totals.setdefault(k, [0, 0, 0, 0])
            for j in range(4):
                row[j] += v[j]
    seen, held, tool_seen, tool_held = (sum(v[j] for v in totals.values()) for j in range(4))
    return {"command_identifiers_seen": seen, "command_identifiers_held": held,
            "command_identifiers_held_fraction": _fraction(held, seen),
            "tool_command_identifiers_seen": tool_seen, "tool_command_identifiers_held": tool_held,
            "tool_command_identifiers_held_fraction": _fraction(tool_held, tool_seen),
            "command_identifiers_by_kind": {
                k: {"seen": v[0], "held": v[1], "held_fraction": _fraction(v[1], v[0]), "tool_seen": v[2],
                    "tool_held": v[3], "tool_held_fraction": _fraction(v[3], v[2])}
                for k, v in totals.items() if v[0]}}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@dataclass
class ConversationReplay:
    """One conversation replayed: a `CallRecord` per model call, the final compacted history, and the policy.

    Attributes:
        id: the conversation id.
        calls: one record per recorded assistant message, in order.
        messages: the history at the end of the replay (compacted as the agent would hold it).
        max_input_tokens / budget_tokens: the policy's window and budget (tokens; None when not set).
        path: the trace file, when replayed from one.
        cache: the `PromptCache` the calls were billed under.
    """

    id: str
    calls: list[CallRecord]
    messages: list[BaseMessage]
    max_input_tokens: int | None
    budget_tokens: int | None
    path: Path | None = None
    cache: PromptCache = field(default_factory=PromptCache)

    def summary(self) -> dict[str, Any]:
        """`summarize_calls` over this conversation's calls."""
        return summarize_calls(self.calls, max_input_tokens=self.max_input_tokens, budget_tokens=self.budget_tokens)

    def to_dict(self, *, calls: bool = False) -> dict[str, Any]:
        """`{"id": ..., **summary()}`, plus `"calls": [record dicts]` when `calls` is True."""
        out: dict[str, Any] = {"id": self.id, **self.summary()}
        if calls:
            out["calls"] = [c.to_dict() for c in self.calls]
        return out


def _with_ids(messages: Sequence[BaseMessage], conversation_id: str) -> list[BaseMessage]:
    """Copies of messages without an id get f"{conversation_id}:{index}" (the caller's objects are untouched)."""
    return [m if m.id else m.model_copy(update={"id": f"{conversation_id}:{i}"}) for i, m in enumerate(messages)]


class _Replayer:
    """The bookkeeping shared by the sync and async replays (compaction itself is done by the caller)."""

    def __init__(self, messages: Sequence[BaseMessage], policy: CompactionPolicy, conversation_id: str,
                 on_call: OnCall | None, cache: PromptCache | None, agent_model: BaseChatModel | None = None,
                 output_price: float = DEFAULT_OUTPUT_PRICE):
        self.recording = _with_ids(messages, conversation_id)
        self.policy = policy
        self.counter = policy.counter
        self.id = conversation_id
        self.on_call = on_call
        self.first = next((m for m in self.recording if is_request(m)), None)
        self.history: list[BaseMessage] = []
        self.calls: list[CallRecord] = []
        self.cache = cache or PromptCache(cached_price=policy.cached_price)
        self.meter = BillMeter(self.cache, self.counter)
        self.meter_uncompacted = BillMeter(self.cache, self.counter)
        self.identifiers = IdentifierTracker()
        self.agent_model = agent_model
        self.output_price = output_price
        self.previous_request: AgentRequest | None = None  # the agent's previous request (with `agent_model`)

    def compact_args(self) -> dict[str, Any]:
        """The keyword arguments of the next `compact_fn` call: the agent's previous request with `agent_model`
        (none before the first call), nothing without."""
        return {} if self.agent_model is None else {"agent_request": self.previous_request}

    def bill_summaries(self, result: CompactionResult) -> list[SummaryBill]:
        """The bills of the summary calls `result` reports (`details["summary_requests"]`), each against the
        agent's previous request: a request of the "agent" form repeats it (its leading messages are those of the
        previous request passed to `compact_fn`), a transcript prompt shares none of its messages."""
        bills = []
        for sent in result.details.get("summary_requests") or ():
            agent = self.previous_request
            prefix: Sequence[BaseMessage] = ()
            if sent.get("form") == "agent" and agent is not None:
                prefix = [*([agent.system] if agent.system is not None else []), *agent.messages]
                prefix = prefix[: int(sent.get("prefix_messages", len(prefix)))]
            bills.append(self.meter.bill_summary(prefix, input_tokens=int(sent["input_tokens"]),
                                                 output_tokens=int(sent.get("output_tokens", 0)),
                                                 output_price=self.output_price, form=str(sent.get("form", ""))))
        return bills

    def steps(self) -> Iterator[int]:
        """Yield the index of each recorded assistant message (time to compact), appending the others."""
        for i, m in enumerate(self.recording):
            if isinstance(m, AIMessage):
                yield i
            self.history = [*self.history, m]
            self.identifiers.add(m)

    def record(self, i: int, history_in: list[BaseMessage], result: CompactionResult, ms: float) -> None:
        sent = list(result.messages)
        uncompacted = self.recording[:i]
        tokens_uncompacted = self.counter.count_messages(uncompacted)
        tokens_sent = self.counter.count_messages(sent)
        summaries = self.bill_summaries(result)  # made before this call: billed against the previous request
        bill = self.meter.bill(sent, input_tokens=tokens_sent)
        bill_uncompacted = self.meter_uncompacted.bill(uncompacted, input_tokens=tokens_uncompacted)
        held = self.identifiers.held(sent)
        command = self.identifiers.command(self.recording[i], sent)
        compacted = result.compacted and result.triggered
        previous = self.calls[-1] if self.calls else None
        record = CallRecord(
            index=len(self.calls), message_index=i,
            tokens_uncompacted=tokens_uncompacted,
            tokens_before=self.counter.count_messages(history_in),
            tokens_sent=tokens_sent,
            messages_uncompacted=i, messages_before=len(history_in), messages_sent=len(sent),
            compaction_ms=ms, compacted=compacted, triggered=result.triggered,
            arrival_edits=result.compacted and not result.triggered,
            stop_reason=result.stop_reason, fits=result.fits, strategies=result.strategies_applied,
            violations=[str(v) for v in check_invariants(sent)],
            first_request_present=self._first_present(sent),
            identifiers_evicted=int(result.details.get("identifiers_evicted", 0)),
            identifiers_kept=int(result.details.get("identifiers_kept_by_summary", 0)),
            cached_tokens=bill.cached_tokens, billed_input=bill.billed, prefix_messages=bill.shared_messages,
            cached_tokens_uncompacted=bill_uncompacted.cached_tokens, billed_input_uncompacted=bill_uncompacted.billed,
            back_to_back=compacted and previous is not None and previous.compacted,
            prefix_broken=previous is not None and bill.shared_messages < previous.messages_sent,
            after_compaction=previous is not None and (previous.compacted or previous.after_compaction),
            identifiers_so_far=held.so_far, identifiers_held=held.held,
            tool_identifiers_so_far=held.tool_so_far, tool_identifiers_held=held.tool_held,
            command_identifiers_seen=command.seen, command_identifiers_held=command.held,
            tool_command_identifiers_seen=command.tool_seen, tool_command_identifiers_held=command.tool_held,
            command_identifiers_by_kind={k: list(v) for k, v in command.by_kind.items()},
            summary_calls=len(summaries), summary_forms=[b.form for b in summaries],
            summary_input_tokens=sum(b.input_tokens for b in summaries),
            summary_cached_tokens=sum(b.cached_tokens for b in summaries),
            summary_output_tokens=sum(b.output_tokens for b in summaries),
            summary_billed=sum(b.billed for b in summaries))
        self.calls.append(record)
        self.history = sent
        if self.agent_model is not None:
            self.previous_request = AgentRequest(model=self.agent_model, messages=tuple(sent))
        if self.on_call is not None:
            self.on_call(record, history_in, result)

    def _first_present(self, sent: Sequence[BaseMessage]) -> bool:
        if self.first is None:
            return True
        return any(m.id == self.first.id and m.content == self.first.content for m in sent)

    def done(self, path: Path | None) -> ConversationReplay:
        return ConversationReplay(id=self.id, calls=self.calls, messages=self.history,
                                  max_input_tokens=self.policy.max_input_tokens,
                                  budget_tokens=self.policy.budget_tokens(), path=path, cache=self.cache)

    def error(self, i: int, exc: Exception) -> ReplayError:
        return ReplayError(f"conversation {self.id!r}, model call {len(self.calls)} (before recorded message {i}): "
                           f"{type(exc).__name__}: {exc}")


class ReplayError(RuntimeError):
    """Compaction raised while replaying; the message names the conversation and the model call, and the
    original exception is chained (`__cause__`)."""


def replay_conversation(messages: Sequence[BaseMessage] | Trace, policy: CompactionPolicy, *,
                        conversation_id: str | None = None, compact_fn: CompactFn = compact,
                        on_call: OnCall | None = None, cache: PromptCache | None = None,
                        agent_model: BaseChatModel | None = None,
                        output_price: float = DEFAULT_OUTPUT_PRICE) -> ConversationReplay:
    """Replay one recorded conversation through compaction (see the module docstring for the semantics).

    Args:
        messages: the recorded conversation (`list[BaseMessage]`), or a `Trace` (its id is used).
        policy: the `CompactionPolicy`; its counter measures every figure.
        conversation_id: names the conversation in the result and in errors; messages without an id get
            f"{conversation_id}:{index}" (default "conversation", or the trace's id).
        compact_fn: `compact(messages, policy) -> CompactionResult`, replaceable (e.g. a wrapper). With
            `agent_model` it is also given `agent_request=` (an `AgentRequest`, or None on the first call).
        on_call: called after each call (see `OnCall`), e.g. to check every sent history.
        cache: bills every call (`billing.PromptCache`; default: OpenAI's rule, cached tokens at
            `policy.cached_price` of the input price).
        agent_model: the agent's chat model. Each compaction is given the agent's previous request (the previous
            call's sent history, through this model, no tools: the traces record none), which a `Summarize` of the
            same model repeats for a cache-sharing summary request (`Summarize.share_agent_request`). None
            (default): no request is given (summaries use the transcript prompt). The summary calls are billed
            either way (`CallRecord.summary_billed`).
        output_price: a summary reply token's price over an uncached input token's (`billing.DEFAULT_OUTPUT_PRICE`: 4).

    Returns:
        A `ConversationReplay` with one `CallRecord` per recorded assistant message.

    Raises:
        ReplayError: `compact_fn` raised (the conversation, call and recorded message index are named).
    """
    rep, path = _replayer(messages, policy, conversation_id, on_call, cache, agent_model, output_price)
    return drive(_replay(rep, path), lambda history: compact_fn(history, policy, **rep.compact_args()))


async def areplay_conversation(messages: Sequence[BaseMessage] | Trace, policy: CompactionPolicy, *,
                               conversation_id: str | None = None, compact_fn: ACompactFn = acompact,
                               on_call: OnCall | None = None, cache: PromptCache | None = None,
                               agent_model: BaseChatModel | None = None,
                               output_price: float = DEFAULT_OUTPUT_PRICE) -> ConversationReplay:
    """Async twin of `replay_conversation` (awaits `compact_fn`, `acompact` by default)."""
    rep, path = _replayer(messages, policy, conversation_id, on_call, cache, agent_model, output_price)
    return await adrive(_replay(rep, path), lambda history: compact_fn(history, policy, **rep.compact_args()))


def _replayer(messages: Sequence[BaseMessage] | Trace, policy: CompactionPolicy, conversation_id: str | None,
              on_call: OnCall | None, cache: PromptCache | None, agent_model: BaseChatModel | None,
              output_price: float) -> tuple[_Replayer, Path | None]:
    """The bookkeeping of one conversation's replay, and its trace file (None for a list of messages)."""
    if isinstance(messages, Trace):
        return (_Replayer(messages.messages, policy, conversation_id or messages.id, on_call, cache, agent_model,
                          output_price), messages.path)
    return _Replayer(messages, policy, conversation_id or "conversation", on_call, cache, agent_model,
                     output_price), None


def _replay(rep: _Replayer, path: Path | None) -> Generator[list[BaseMessage], CompactionResult, ConversationReplay]:
    """One conversation's replay: yields the history going into each model call, is sent its compaction (timed
    from the yield to the answer), returns the replay. An error thrown in at the yield becomes a `ReplayError`."""
    for i in rep.steps():
        history_in = rep.history
        t0 = time.perf_counter()
        try:
            result = yield history_in
        except Exception as exc:
            raise rep.error(i, exc) from exc
        rep.record(i, history_in, result, (time.perf_counter() - t0) * 1000)
    return rep.done(path)


# ------------------------------------------------------------------------------------------------ many files
@dataclass
class FileReplay:
    """The conversations of one trace file, replayed."""

    path: Path
    conversations: list[ConversationReplay]

    @property
    def calls(self) -> list[CallRecord]:
        """Every call of every conversation of the file, in order."""
        return [c for conv in self.conversations for c in conv.calls]


@dataclass
class ReplayReport:
    """Trace files replayed under one policy: per file, per conversation, and in total.

    `to_dict()` is what `lc-compaction replay --json` prints: the `summarize_calls` keys over every call at the
    top level, then "policy" (the settings used), "cache_model" (`PromptCache.to_dict()`: the rule and the price
    the bills use) and "files" (the same keys per file, with "path" and "by_conversation", each conversation with
    its "calls": `CallRecord.to_dict()` per call).
    """

    files: list[FileReplay]
    policy: CompactionPolicy
    cache: PromptCache = field(default_factory=PromptCache)

    @property
    def conversations(self) -> list[ConversationReplay]:
        """Every conversation of every file, in order."""
        return [c for f in self.files for c in f.conversations]

    @property
    def calls(self) -> list[CallRecord]:
        """Every call of every conversation, in order."""
        return [c for f in self.files for c in f.calls]

    def _summary(self, calls: Sequence[CallRecord], conversations: int) -> dict[str, Any]:
        return summarize_calls(calls, max_input_tokens=self.policy.max_input_tokens,
                               budget_tokens=self.policy.budget_tokens(), conversations=conversations)

    def totals(self) -> dict[str, Any]:
        """`summarize_calls` over every call of every file."""
        return self._summary(self.calls, len(self.conversations))

    def file_summary(self, f: FileReplay) -> dict[str, Any]:
        """`summarize_calls` over one file's calls, with its "path"."""
        return {"path": str(f.path), **self._summary(f.calls, len(f.conversations))}

    def to_dict(self, *, calls: bool = True) -> dict[str, Any]:
        """JSON-serializable: totals at the top level, then "policy", "cache_model" and "files" (see the class
        docstring); without the per-call records when `calls` is False."""
        return {**self.totals(), "policy": policy_dict(self.policy), "cache_model": self.cache.to_dict(),
                "files": [{**self.file_summary(f),
                           "by_conversation": [c.to_dict(calls=calls) for c in f.conversations]}
                          for f in self.files]}


def policy_dict(policy: CompactionPolicy) -> dict[str, Any]:
    """The settings of `policy` that shape a replay, JSON-serializable (tokens unless the name says otherwise)."""
    goal_tokens, goal_messages = policy.target_goal()
    return {"max_input_tokens": policy.max_input_tokens, "trigger": policy.trigger_clauses,
            "keep": list(policy.keep), "target_tokens": goal_tokens, "target_messages": goal_messages,
            "reserve": policy.reserve, "budget_tokens": policy.budget_tokens(),
            "token_counter": getattr(policy.counter, "name", type(policy.counter).__name__),
            "strategies": [s.name for s in policy.strategies or ()], "deduplicate": policy.deduplicate,
            "cached_price": policy.cached_price}


def _progress(total: int, progress: bool) -> tqdm[NoReturn]:
    from tqdm.auto import tqdm

    # disable=None: shown only when stderr is a terminal; delay: only on replays longer than a second.
    return tqdm(total=total, unit="conv", desc="replay", disable=None if progress else True, delay=1.0,
                leave=False)


def replay_files(paths: Iterable[str | Path], policy: CompactionPolicy, progress: bool = True, *,
                 compact_fn: CompactFn = compact, on_call: OnCall | None = None,
                 cache: PromptCache | None = None, agent_model: BaseChatModel | None = None,
                 output_price: float = DEFAULT_OUTPUT_PRICE) -> ReplayReport:
    """Replay every conversation of the JSONL trace files `paths` under `policy`.

    Args:
        paths: trace files (see `lc_compaction.traces`); `traces.bundled_traces()` for the examples.
        policy: the `CompactionPolicy`.
        progress: show a tqdm progress bar on stderr (only when it is a terminal, and only after a second).
        compact_fn, on_call, cache, agent_model, output_price: as in `replay_conversation`.

    Returns:
        A `ReplayReport` (per file, per conversation, totals; `to_dict()` for JSON).

    Raises:
        TraceFormatError: a file is not a valid trace (file, line and field named); nothing is replayed.
        ReplayError: compaction raised on a conversation.
    """
    cache = cache or PromptCache()
    return drive(_replay_files(paths, policy, progress, cache),
                 lambda trace: replay_conversation(trace, policy, compact_fn=compact_fn, on_call=on_call,
                                                   cache=cache, agent_model=agent_model,
                                                   output_price=output_price))


async def areplay_files(paths: Iterable[str | Path], policy: CompactionPolicy, progress: bool = True, *,
                        compact_fn: ACompactFn = acompact, on_call: OnCall | None = None,
                        cache: PromptCache | None = None, agent_model: BaseChatModel | None = None,
                        output_price: float = DEFAULT_OUTPUT_PRICE) -> ReplayReport:
    """Async twin of `replay_files` (conversations replayed one after the other with `areplay_conversation`)."""
    cache = cache or PromptCache()
    return await adrive(_replay_files(paths, policy, progress, cache),
                        lambda trace: areplay_conversation(trace, policy, compact_fn=compact_fn, on_call=on_call,
                                                           cache=cache, agent_model=agent_model,
                                                           output_price=output_price))


def _replay_files(paths: Iterable[str | Path], policy: CompactionPolicy, progress: bool,
                  cache: PromptCache) -> Generator[Trace, ConversationReplay, ReplayReport]:
    """The replay of many files: every file is loaded first (a bad file replays nothing), then each conversation
    is yielded and its replay sent back, one after the other; returns the report."""
    loaded = [(Path(p), load_traces(p)) for p in paths]
    files: list[FileReplay] = []
    with _progress(sum(len(t) for _, t in loaded), progress) as bar:
        for path, traces in loaded:
            convs = []
            for trace in traces:
                convs.append((yield trace))
                bar.update(1)
            files.append(FileReplay(path, convs))
    return ReplayReport(files, policy, cache)
