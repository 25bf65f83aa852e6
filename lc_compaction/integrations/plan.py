"""What both agent front doors share: the policy they resolve, and the plan of one model call.

The LangGraph pre-model node (`langgraph.py`) and the LangChain v1 `AgentMiddleware` (`middleware.py`) do the
same thing before each model call: read the stored history and the memory of the previous call, compact, and
say how to update the state. Both call `plan_compaction` (or `aplan_compaction`) with their own door name and
translate the `CompactionPlan` into their framework's update; nothing here knows which framework runs it.

- `resolve_policy(policy, model=..., **settings)`: the `CompactionPolicy` a door uses (the window from the
  model's profile when not given: `model_window`).
- `plan_compaction(messages, memory, policy, door=..., mode=..., offload=...)`: one call's `CompactionPlan`: the
  model input, the writes for the stored messages (rewrite mode, by id: `writes.py`), the new memory, and the event
  data; with `offload` (an `integrations.offload.OffloadTarget`), what compaction takes out is written to the store
  before the plan is returned (`integrations.offload.compact_offloaded`).
- `Mode`: "rewrite" or "view" (see `langgraph.py`'s module docstring for what each does to the state).

The memory (plain JSON, under the door's memory key; `MEMORY_VERSION` says its layout): how many calls and
compactions, the last call's outcome, the count tally (so the next call counts only the new messages), and in
view mode the last model input (`view.py`). It survives any checkpointer and a process restart.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langgraph.store.base import PutOp

from lc_compaction.agent_request import AgentRequest
from lc_compaction.compact import CompactionResult, acompact, as_messages, compact
from lc_compaction.integrations.events import Door, event_payload, outcome_payload
from lc_compaction.integrations.history import (
    arecord_numbers,
    awrite_record,
    record_numbers,
    record_rewrite,
    write_record,
)
from lc_compaction.integrations.offload import OffloadTarget, acompact_offloaded, compact_offloaded
from lc_compaction.integrations.view import Rebuilt, rebuild_view, view_memory
from lc_compaction.integrations.writes import adopt_ids, by_id_writes
from lc_compaction.policy import CompactionPolicy
from lc_compaction.structure import Repair, fill_missing_ids, normalize_system_messages, open_tool_block_start
from lc_compaction.tally import CountTally, forget, prefix_counts
from lc_compaction.tokens import TokenCounter

__all__ = [
    "MEMORY_VERSION",
    "REQUESTS_KEPT",
    "CompactionPlan",
    "Mode",
    "ThreadLRU",
    "aplan_compaction",
    "check_mode",
    "model_window",
    "plan_compaction",
    "resolve_policy",
    "tokens_beside",
]

Mode = Literal["rewrite", "view"]
""""rewrite": replace the stored history by the compacted one; "view": store everything, send the compacted list."""

MEMORY_VERSION = 2
"""Version of the memory layout kept under the memory key; memory of another version is ignored (recomputed).
2: view mode describes its model input as runs of the stored history (1: as a list of every message id)."""

_MODES = ("rewrite", "view")

REQUESTS_KEPT = 1_024
"""Threads whose latest request a door keeps in this process (`ThreadLRU`; the middleware: its policy, the tokens
beside the messages and the request passed on; the node: its model input), least recently used first out: a
thread not kept falls back on its memory's "request" entry (the middleware), and a summary on the transcript
prompt."""

T = TypeVar("T")


class ThreadLRU(Generic[T]):
    """What a door keeps per thread in this process (the latest request of each thread), bounded: the least
    recently used thread goes first beyond `size` threads; thread-safe. The key is the run's thread id (None
    without a checkpointer)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[str | None, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, thread: str | None) -> T | None:
        with self._lock:
            return self._data.get(thread)

    def latest(self) -> T | None:
        """The latest entry of any thread."""
        with self._lock:
            return self._data[next(reversed(self._data))] if self._data else None

    def put(self, thread: str | None, value: T) -> None:
        with self._lock:
            self._data[thread] = value
            self._data.move_to_end(thread)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


def check_mode(mode: Any) -> Mode:
    """`mode` itself when it is "rewrite" or "view".

    Raises:
        ValueError: any other value (naming it).
    """
    if mode not in _MODES:
        raise ValueError(f"mode: must be 'rewrite' or 'view', got {mode!r}")
    return cast(Mode, mode)  # checked just above


# ----------------------------------------------------------------------------------------------- the policy


def model_window(model: Any) -> int | None:
    """The context window of a chat model, in tokens: `model.profile["max_input_tokens"]` (LangChain's model
    profile, the value `SummarizationMiddleware` reads for fractional limits). None when the model has no profile
    or the profile does not say."""
    profile = getattr(model, "profile", None)
    if not isinstance(profile, dict):
        return None
    window = profile.get("max_input_tokens")
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _model_name(model: Any) -> str | None:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def resolve_policy(policy: CompactionPolicy | None = None, *, model: BaseChatModel | None = None,
                   **settings: Any) -> CompactionPolicy:
    """The policy a front door uses: `policy` itself, or a `CompactionPolicy(**settings)`.

    Settings left at None are not passed (the policy's defaults apply). When `max_input_tokens` is not given
    and `model` is, the window (tokens) comes from the model's profile (`model_window`); `model_name` (which
    picks the tiktoken encoding) comes from the model's `model_name` / `model` attribute when not given.

    Raises:
        ValueError: both `policy` and settings are given; or the policy is invalid (the message names the
            setting, and says when the model's profile had no `max_input_tokens` to fall back on).
        TypeError: `policy` is not a `CompactionPolicy`, or a setting name is unknown.
    """
    given = {k: v for k, v in settings.items() if v is not None}
    if policy is not None:
        if not isinstance(policy, CompactionPolicy):
            raise TypeError(f"policy: expected a CompactionPolicy, got {type(policy).__name__}")
        if given:
            raise ValueError(f"give either policy or the settings {sorted(given)}, not both")
        return policy
    if model is not None:
        if given.get("max_input_tokens") is None and (window := model_window(model)) is not None:
            given["max_input_tokens"] = window
        if given.get("model_name") is None and (name := _model_name(model)) is not None:
            given["model_name"] = name
    try:
        return CompactionPolicy(**given)
    except ValueError as exc:
        if given.get("max_input_tokens") is None and model is not None:
            raise ValueError(f"{exc} (the model {type(model).__name__} has no profile['max_input_tokens']: "
                             "pass max_input_tokens=... or a trigger such as ('tokens', 100_000))") from exc
        raise


def tokens_beside(counter: TokenCounter, *, system: BaseMessage | None = None, tools: Sequence[Any] = ()) -> int:
    """Tokens sent with every model call beside the stored messages: a system message that is not in them and
    the tool schemas bound to the model (`counter.count_message`, `counter.count_tools`). Passed to `compact` as
    `extra_tokens`."""
    return (counter.count_message(system) if system is not None else 0) + counter.count_tools(list(tools))


# ----------------------------------------------------------------------------------------------- the plan


@dataclass
class CompactionPlan:
    """What a front door does for one model call.

    Attributes:
        result: the `CompactionResult` of this call.
        model_input: the messages to send to the model (never empty, no `RemoveMessage`). A message compaction
            wrote (a summary, a drop marker) carries the id of the first stored message it stands in place of
            (`writes.adopt_ids`), in both modes.
        messages_writes: rewrite mode's writes for the stored messages, by id, to apply in order through
            `add_messages` (`writes.by_id_writes`: the removed messages as `RemoveMessage(id=...)`, the changed
            and new ones replacing a stored message in place); one write, or two when a repair added a message
            where nothing was removed; empty when the stored history stays as it is (view mode, or nothing
            changed).
        memory: the new memory (plain JSON) to store under the memory key.
        event: the data of this call's custom event (`events.event_payload`: the memory's "last" entry plus the
            door and the number of stored messages), for `events.report`.
    """

    result: CompactionResult
    model_input: list[BaseMessage]
    messages_writes: list[list[BaseMessage]]
    memory: dict[str, Any]
    event: dict[str, Any]


@dataclass
class _Converted:
    """The mid-history SystemMessages among the messages added since the previous call, sent as HumanMessages
    (`structure.normalize_system_messages`) on every call, compacting or not: `repairs` (indices in the
    compaction input) and `stored_at` (index in the stored history -> the message sent in its place)."""

    repairs: list[Repair]
    stored_at: dict[int, BaseMessage]


_NOTHING_CONVERTED = _Converted([], {})
"""The conversions of a call whose new messages hold no mid-history SystemMessage (never changed)."""


def _convert_new_system_messages(stored: list[BaseMessage], base: Rebuilt | None, start: int,
                                 to_compact: list[BaseMessage]) -> tuple[list[BaseMessage], _Converted]:
    """`to_compact` with the mid-history SystemMessages among the new messages (stored[start:], at the end of
    `to_compact`) sent as HumanMessages: O(new messages); the same list when there is none."""
    first_new = len(to_compact) - (len(stored) - base.covered) if base is not None else start
    out, repairs = normalize_system_messages(to_compact, max(first_new, 0))
    if not repairs:
        return out, _NOTHING_CONVERTED
    offset = (base.covered - first_new) if base is not None else 0
    return out, _Converted(repairs, {r.index + offset: out[r.index] for r in repairs})


def _memory(memory: Any, mode: str) -> dict[str, Any] | None:
    """The previous call's memory when it is of this version and mode (else None: start from scratch)."""
    if isinstance(memory, dict) and memory.get("version") == MEMORY_VERSION and memory.get("mode") == mode:
        return memory
    return None


def _tally(memory: Any) -> CountTally | None:
    """The counting tally the previous call stored (None when absent or from another memory version)."""
    if isinstance(memory, dict) and memory.get("version") == MEMORY_VERSION:
        return CountTally.from_dict(memory.get("tally"))
    return None


class _Planning:
    """One model call's plan, before and after the compaction: shared by `plan_compaction` and its async twin."""

    def __init__(self, messages: Sequence[Any], memory: Any, mode: str, door: Door, key: str) -> None:
        """Read the stored history and the previous memory: only the messages added since the previous call are
        checked and given ids, O(k)."""
        if not messages:
            raise ValueError(f"state[{key!r}] is empty: there is nothing to send to the model")
        self.mode = check_mode(mode)
        self.door = door
        self.state_messages = len(messages)
        self.previous = _memory(memory, mode)
        self.tally = _tally(memory)
        if mode == "view":
            view = self.previous.get("view") if self.previous is not None else None
            covered = view.get("covered") if isinstance(view, dict) else None
            start = covered if isinstance(covered, int) and 0 <= covered <= len(messages) else 0
        else:
            start = self.tally.length if self.tally is not None and self.tally.length <= len(messages) else 0
        self.stored = as_messages(messages, start, name=f"state[{key!r}]")
        if self.stored is not messages:
            start = 0  # converted: new objects, all of them to check
        # ids before any removal: given in place to the new messages (LangGraph's add_messages has normally given
        # them already); compact() copies duplicates when it compacts
        fill_missing_ids(self.stored, start)
        self.base: Rebuilt | None = (rebuild_view(self.stored, self.previous.get("view"))
                                     if mode == "view" and self.previous is not None else None)
        self.to_compact, self.converted = _convert_new_system_messages(
            self.stored, self.base, start, self.base.messages if self.base is not None else self.stored)
        """What to compact: the stored history, or in view mode the previous view plus the new messages; a
        mid-history SystemMessage among the new messages sent as a HumanMessage (`self.converted`), on every
        call, compacting or not."""
        self.tail: list[BaseMessage] = []
        """The open tool block held out of compaction (`hold_open_tail`), passed on after the compacted history."""

    def hold_open_tail(self, counter: TokenCounter) -> int:
        """Hold the stored history's open tool block out of the compaction: an assistant message whose tool calls
        are not all answered, at the very end (`structure.open_tool_block_start`), with the results received so
        far. Not repaired and not compacted: a tool node that runs in the same graph step as the node answers it,
        and a "no result was recorded" placeholder written now would land beside the real result, two results
        for one call in the next model input (issue 20, class 11). A call that no node answers is repaired at the
        first call after a message follows it (it is no longer at the end). Rewrite mode only (the state is the
        model input). Returns the tokens of the held messages (`counter.count_messages`), to count beside the
        history; 0 when nothing is held."""
        cut = open_tool_block_start(self.to_compact)
        if self.mode != "rewrite" or cut == 0 or cut >= len(self.to_compact):
            return 0
        self.tail = list(self.to_compact[cut:])
        self.to_compact = self.to_compact[:cut]
        return counter.count_messages(self.tail)

    def recorded(self, record: bool) -> bool:
        """Whether the call's rewrite is recorded (with offload on): in rewrite mode, when the plan's writes are the
        stored history's (`record`). Its numbers then come from `integrations.history.record_numbers`."""
        return self.mode == "rewrite" and record

    @staticmethod
    def numbered(offload: OffloadTarget | None, numbers: tuple[int, int] | None) -> OffloadTarget | None:
        """`offload` with the number its records are written under (`numbers`: that number, the record the history
        is at; None: not recorded, `offload` as it is)."""
        return offload if offload is None or numbers is None else dataclasses.replace(offload, compaction=numbers[0])

    def record(self, plan: CompactionPlan, held: Sequence[BaseMessage] | None, thread_id: str,
               numbers: tuple[int, int]) -> PutOp | None:
        """The compaction record of `plan` (None when it writes nothing), its memory's history entry set
        (`integrations.history.record_rewrite`)."""
        before = held if held is not None else self.stored
        return record_rewrite(plan.memory, self.previous, before, plan.messages_writes, plan.result, thread_id,
                              *numbers)

    def finish(self, result: CompactionResult, policy: CompactionPolicy,
               held: Sequence[BaseMessage] | None) -> CompactionPlan:
        stored, mode = self.stored, self.mode
        if self.converted.repairs:  # reported like any repair; in rewrite mode stored in place (same ids)
            result = dataclasses.replace(result, repairs=[*self.converted.repairs, *result.repairs])
        if not result.messages:  # compact never empties a non-empty history (the first request is pinned)
            raise AssertionError("compaction returned an empty history for a non-empty one; please report it")
        held_ids = {m.id for m in held if m.id} if held is not None and result.compacted and mode == "rewrite" else None
        if result.messages is not self.to_compact:
            result = _with_messages(result, adopt_ids(self.to_compact, result.messages, held_ids), policy.counter)
        out = [*result.messages, *self.tail] if self.tail else result.messages
        old = self.previous or {}
        new_memory: dict[str, Any] = {
            "version": MEMORY_VERSION,
            "mode": mode,
            "calls": int(old.get("calls", 0)) + 1,
            "compactions": int(old.get("compactions", 0)) + int(result.compacted and result.triggered),
            "last": outcome_payload(result, mode=mode),
        }
        if result.tally is not None:  # lets the next call count only the messages added since (O(k))
            new_memory["tally"] = result.tally.to_dict()
        writes: list[list[BaseMessage]] = []
        if mode == "view":
            new_memory["view"] = view_memory(stored, self.base, old.get("view"), out, unchanged=out is self.to_compact,
                                             swapped=self.converted.stored_at)
        elif result.compacted:
            writes = by_id_writes(stored, out, held_ids)
        event = event_payload(result, mode=mode, door=self.door, state_messages=self.state_messages,
                              outcome=new_memory["last"])
        # the compacted list is a new list; an unchanged one is the input list itself, passed on without a copy
        return CompactionPlan(result=result, model_input=out if mode == "rewrite" else list(out),
                              messages_writes=writes, memory=new_memory, event=event)


def _with_messages(result: CompactionResult, messages: list[BaseMessage], counter: TokenCounter) -> CompactionResult:
    """`result` with `messages` (the same list but for renamed copies, `adopt_ids`), and its tally moved over to
    them (ids are not counted: the per-message counts stay), so the next call counts only what is new."""
    if all(map(operator.is_, messages, result.messages)):
        return result
    tally = result.tally
    if tally is not None:
        counts = prefix_counts(tally, counter)
        forget(tally, counter)
        tally = CountTally.of(messages, tally.tokens, counter, counts)
    return dataclasses.replace(result, messages=messages, tally=tally)


def plan_compaction(messages: Sequence[Any], memory: Any, policy: CompactionPolicy, *, door: Door,
                    mode: Mode = "rewrite", extra_tokens: int = 0, key: str = "messages",
                    held: Sequence[BaseMessage] | None = None, offload: OffloadTarget | None = None,
                    agent_request: AgentRequest | None = None, record: bool = True,
                    hold_open_tail: bool = False) -> CompactionPlan:
    """Compact the stored history for one model call and say how to update the state. Used by both doors.

    Args:
        messages: the stored history (non-empty): `BaseMessage`s, or anything `convert_to_messages` accepts.
            Messages without an id get one, in place, before anything is removed.
        memory: what the previous call stored under the memory key (None on the first call; anything that does
            not match the stored history is ignored and the whole history is compacted).
        policy: the `CompactionPolicy`.
        door: the front door that runs the call ("langgraph_node" or "agent_middleware"), for the event data.
        mode: "rewrite" or "view" (see the module docstring of `langgraph.py`).
        extra_tokens: tokens sent beside the messages (a system prompt or tool schemas not in `messages`; see
            `tokens_beside`).
        key: the state key the messages come from (named in errors).
        held: the messages the state holds, when `messages` may differ from them (the agent middleware: another
            middleware may have changed the model request); the writes then remove and replace only messages
            the state holds (`writes.by_id_writes`). None: the state holds `messages`.
        offload: where to write what compaction takes out (`integrations.offload.offload_target`), when
            `policy.offload` is on: the writes happen here, before the plan is returned. None: no offload.
        agent_request: the agent's latest model request as the door sent it, for a cache-sharing summary
            request (`compact(agent_request=...)`, `lc_compaction.agent_request`). None: the transcript prompt.
        record: with `offload` in rewrite mode, whether the plan's writes are the stored history's (True, the
            default): its originals are numbered and the compaction record is written to the store before the
            plan is returned (`lc_compaction.history`, `integrations.history.record_rewrite`). False for a plan
            of one model call alone (the middleware's `wrap_model_call`).
        hold_open_tail: in rewrite mode, keep an open tool block at the end of the stored history out of the
            compaction and its repair (`_Planning.hold_open_tail`): the LangGraph node, which may run in the same
            graph step as the tool node that answers it. False: such a block is repaired like any dangling call.

    The memory written (plain JSON; in view mode it holds the messages compaction rewrote):
    `{"version": 2, "mode": ..., "calls": int, "compactions": int (calls whose ladder ran and changed the history;
    not arrival edits alone, `compact.py`), "last": <event data of this call, without
    the door and the number of stored messages>, "tally": <CountTally.to_dict(): what was counted, so the next
    call counts only the new messages>, "view": <the model input as runs of the stored history and rewritten
    messages (truncated results, summaries), see `lc_compaction.integrations.view`>}`; "view" only in view mode;
    with offload in rewrite mode, "history": `{"head": int, "last": int}` (`lc_compaction.history`; without it,
    a reset memory, the numbers go on after the last record the store holds: `integrations.history.record_numbers`).

    Raises:
        ValueError: `messages` is empty or cannot be converted; `mode` is unknown.
        InvalidHistoryError: the history breaks a pairing/order rule and the policy says `repair=False`
            (names the message index and tool_call_id). With `repair` None (the default) the history is
            repaired, each repair in the result, the event and the log line.

    A SystemMessage among the new messages after the conversation started is sent as a HumanMessage on every
    call, compacting or not (reported as a repair; in rewrite mode written in place, by id).
    """
    planning = _Planning(messages, memory, mode, door, key)
    extra_tokens += planning.hold_open_tail(policy.counter) if hold_open_tail else 0
    todo, tally, repair = planning.to_compact, planning.tally, policy.repairs_by_default(True)
    numbers = (record_numbers(offload.store, offload.thread_id, planning.previous)
               if offload is not None and planning.recorded(record) else None)
    offload = planning.numbered(offload, numbers)
    result = (compact(todo, policy, extra_tokens=extra_tokens, tally=tally, repair=repair,
                      agent_request=agent_request) if offload is None else
              compact_offloaded(todo, policy, offload, extra_tokens=extra_tokens, tally=tally, repair=repair,
                                agent_request=agent_request))
    plan = planning.finish(result, policy, held)
    if offload is not None and numbers is not None:
        put = planning.record(plan, held, offload.thread_id, numbers)
        if put is not None:
            write_record(offload.store, put, plan.memory, planning.previous)
    return plan


async def aplan_compaction(messages: Sequence[Any], memory: Any, policy: CompactionPolicy, *, door: Door,
                           mode: Mode = "rewrite", extra_tokens: int = 0, key: str = "messages",
                           held: Sequence[BaseMessage] | None = None, offload: OffloadTarget | None = None,
                           agent_request: AgentRequest | None = None, record: bool = True,
                           hold_open_tail: bool = False) -> CompactionPlan:
    """Async twin of `plan_compaction` (strategies run through `aapply`, so an LLM summarizer is awaited)."""
    planning = _Planning(messages, memory, mode, door, key)
    extra_tokens += planning.hold_open_tail(policy.counter) if hold_open_tail else 0
    todo, tally, repair = planning.to_compact, planning.tally, policy.repairs_by_default(True)
    numbers = (await arecord_numbers(offload.store, offload.thread_id, planning.previous)
               if offload is not None and planning.recorded(record) else None)
    offload = planning.numbered(offload, numbers)
    result = (await acompact(todo, policy, extra_tokens=extra_tokens, tally=tally, repair=repair,
                             agent_request=agent_request) if offload is None
              else await acompact_offloaded(todo, policy, offload, extra_tokens=extra_tokens, tally=tally,
                                            repair=repair, agent_request=agent_request))
    plan = planning.finish(result, policy, held)
    if offload is not None and numbers is not None:
        put = planning.record(plan, held, offload.thread_id, numbers)
        if put is not None:
            await awrite_record(offload.store, put, plan.memory, planning.previous)
    return plan
