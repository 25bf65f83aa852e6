"""The structure of a message history: tool blocks, steps, exchanges; the invariant check; repair.

Words used throughout (all positions are indices into one `list[BaseMessage]`):

- **tool block**: an `AIMessage` with `tool_calls` and the run of `ToolMessage`s right after it that
  answer those calls (parallel calls included). It is never split: removed whole or kept whole.
- **step**: the smallest run a strategy may remove without breaking provider order rules: a request
  (`HumanMessage`), a lone `SystemMessage`, or a run of assistant messages that ends with a tool block
  (or at the next request). Because a removed step always ends after a `ToolMessage` or before a
  `HumanMessage`, every `AIMessage` with tool calls that follows it is still preceded by a user or tool
  turn (Gemini's rule).
- **exchange**: a user request and everything up to the next request. Summary messages are not requests.

The invariant check (`check_invariants`) is the one place the rules live; the ladder runs it after every
strategy and the tests use an independent copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction._kinds import AI, HUMAN, REMOVE, SYSTEM, TOOL, kind
from lc_compaction.markers import MARK_KEY, is_summary

ViolationKind = Literal[
    "orphan_tool_result",
    "dangling_tool_call",
    "duplicate_tool_result",
    "tool_result_not_adjacent",
    "first_message_not_human",
    "system_not_at_start",
    "remove_message",
    "missing_tool_call_id",
    "duplicate_tool_call_id",
]


@dataclass(frozen=True)
class Finding:
    """One thing about one message of a history: its `kind`, the message `index` (0-based), the `tool_call_id`
    when one is involved, and a `detail` in words. The record behind `Violation` and `Repair`."""

    kind: str
    index: int
    tool_call_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        tc = f" (tool_call_id={self.tool_call_id!r})" if self.tool_call_id else ""
        return f"message {self.index}: {self.kind}{tc}{': ' + self.detail if self.detail else ''}"

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON (kind, index, tool_call_id, detail)."""
        return {"kind": self.kind, "index": self.index, "tool_call_id": self.tool_call_id, "detail": self.detail}


class Violation(Finding):
    """One broken rule (`check_invariants`): `kind` is a `ViolationKind`, `index` the message that breaks it."""

    kind: ViolationKind


class Repair(Finding):
    """One repair made to a broken input (`repair_history`, `normalize_system_messages`, `ensure_ids`): what was
    done (`kind`), at which input index, for which tool_call_id."""


class InvalidHistoryError(ValueError):
    """The input history breaks a pairing or order rule; `violations` lists each with its message index.

    Pass `repair=True` (policy or call) to have it repaired instead; every repair is reported.
    """

    def __init__(self, violations: Sequence[Violation]):
        self.violations = list(violations)
        lines = "; ".join(str(v) for v in self.violations[:10])
        more = f" (+{len(self.violations) - 10} more)" if len(self.violations) > 10 else ""
        super().__init__(
            f"invalid message history: {lines}{more}. "
            "Fix the history, or pass repair=True to let lc-compaction repair it (repairs are reported)."
        )


class CompactionInvariantError(AssertionError):
    """A strategy produced a history that breaks an invariant (a bug: please report it)."""


def is_request(message: BaseMessage) -> bool:
    """A user request: a HumanMessage that is not a summary."""
    return kind(message) == HUMAN and not is_summary(message)


def call_ids(message: BaseMessage) -> list[str]:
    """The ids of an AIMessage's `tool_calls` (empty for other messages)."""
    if kind(message) == AI and message.tool_calls:  # type: ignore[attr-defined]
        return [tc.get("id") or "" for tc in message.tool_calls]  # type: ignore[attr-defined]
    return []


def tool_block_end(messages: Sequence[BaseMessage], i: int) -> int:
    """End (exclusive) of the tool block starting at `i`; `i + 1` when `messages[i]` calls no tool.

    The block covers the run of ToolMessages right after the AIMessage that answer its calls.
    """
    return _block_end(messages, [kind(m) for m in messages[i:]], i, offset=i)


def open_tool_block_start(messages: Sequence[BaseMessage]) -> int:
    """Index where a trailing, still-open tool block starts; `len(messages)` when there is none.

    An open tool block is the last AIMessage when it has `tool_calls` not all answered yet, followed only by
    ToolMessages answering some of those calls (`tool_block_end` reaches the end: the results received so far).
    Such a tail is a normal state of a chat history between two runs of a chain (the chain returned tool calls;
    the caller sends the results next); it is not a complete history, so the chat-history front door keeps it
    out of compaction. Anything else (a ToolMessage that answers none of those calls, for instance) is left to
    `check_invariants`, which names the message. Cost: O(length of the tail), in messages.
    """
    n = len(messages)
    j = n
    while j > 0 and kind(messages[j - 1]) == TOOL:
        j -= 1
    if j == 0:
        return n
    calls = set(call_ids(messages[j - 1]))
    if not calls or tool_block_end(messages, j - 1) != n:
        return n
    answered = {m.tool_call_id for m in messages[j:]}  # type: ignore[attr-defined]
    return n if answered == calls else j - 1


def _block_end(messages: Sequence[BaseMessage], kinds: Sequence[str], i: int, offset: int = 0) -> int:
    """`tool_block_end` with the kinds of the messages known (`kinds[j - offset]` is the kind of message j)."""
    ids = set(call_ids(messages[i]))
    j = i + 1
    if not ids:
        return j
    n = len(messages)
    while j < n and kinds[j - offset] == TOOL and messages[j].tool_call_id in ids:  # type: ignore[attr-defined]
        j += 1
    return j


def check_invariants(messages: Sequence[BaseMessage]) -> list[Violation]:
    """Check the whole list against the pairing and order rules; return every violation (empty when valid).

    Rules (OpenAI, Anthropic and Gemini reject requests that break them):
    - every ToolMessage answers a tool call of the nearest AIMessage before it, in the unbroken run of
      ToolMessages right after that AIMessage (no orphans, results adjacent to their call);
    - every tool call has exactly one result (no dangling calls, no duplicate results);
    - the first non-system message is a HumanMessage; no SystemMessage after the first non-system message;
    - no RemoveMessage (a graph-state instruction, never model input).

    Cost: one pass, O(len(messages)).
    """
    out: list[Violation] = []
    seen_non_system = False
    open_calls: dict[str, int] = {}  # call id -> index of its AIMessage, for the current block
    answered: set[str] = set()
    all_calls: dict[str, int] = {}
    in_block = False
    for i, m in enumerate(messages):
        k = kind(m)
        if k == REMOVE:
            out.append(Violation("remove_message", i, detail="RemoveMessage is a state update, not a message"))
            continue
        if k == TOOL:
            tcid = m.tool_call_id  # type: ignore[attr-defined]
            if not tcid:
                out.append(Violation("missing_tool_call_id", i))
            elif tcid in answered:
                out.append(Violation("duplicate_tool_result", i, tcid))
            elif tcid in open_calls and in_block:
                answered.add(tcid)
                del open_calls[tcid]
            elif tcid in all_calls:
                out.append(Violation("tool_result_not_adjacent", i, tcid, f"its call is in message {all_calls[tcid]}"))
                answered.add(tcid)
            else:
                out.append(Violation("orphan_tool_result", i, tcid, "no AIMessage before it made this call"))
            if not seen_non_system:
                out.append(Violation("first_message_not_human", i))
            seen_non_system = True
            continue
        # a non-tool message closes the current tool block
        for tcid, ai_index in open_calls.items():
            out.append(Violation("dangling_tool_call", ai_index, tcid, "no ToolMessage answers it"))
        open_calls = {}
        in_block = False
        if k == SYSTEM:
            if seen_non_system:
                out.append(Violation("system_not_at_start", i))
            continue
        if not seen_non_system and k != HUMAN:
            out.append(Violation("first_message_not_human", i, detail=f"first non-system message is {m.type}"))
        seen_non_system = True
        ids = [tc.get("id") or "" for tc in m.tool_calls] if k == AI and m.tool_calls else ()  # type: ignore[attr-defined]
        if ids:
            for tcid in ids:
                if tcid in all_calls or tcid in open_calls:
                    first = all_calls.get(tcid, open_calls.get(tcid))
                    out.append(Violation("duplicate_tool_call_id", i, tcid,
                                         f"this tool call id was already used by message {first}"))
                    continue
                open_calls[tcid] = i
                all_calls[tcid] = i
            in_block = True
    for tcid, ai_index in open_calls.items():
        out.append(Violation("dangling_tool_call", ai_index, tcid, "no ToolMessage answers it"))
    return out


MISSING_RESULT_TEXT = "[lc-compaction: no result was recorded for this tool call]"
"""Content of the ToolMessage that repair adds for a tool call that had no result."""

CONVERSATION_START_TEXT = "[lc-compaction: the conversation starts with the assistant's message below]"
"""Content of the HumanMessage that repair puts before a history that starts with an assistant message."""


def normalize_system_messages(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[Repair]]:
    """Turn each SystemMessage after the first non-system message into a HumanMessage (same id, same text).

    Anthropic and Gemini reject a system message mid-history. Nothing is lost: the content and id are kept
    and the message is marked `additional_kwargs["lc_compaction"]["converted_from"] = "system"`.
    Returns the new list and one `Repair` per converted message.
    """
    out: list[BaseMessage] = []
    repairs: list[Repair] = []
    seen_non_system = False
    for i, m in enumerate(messages):
        if kind(m) == SYSTEM:
            if seen_non_system:
                kwargs = dict(m.additional_kwargs or {})
                kwargs[MARK_KEY] = {**(kwargs.get(MARK_KEY) or {}), "converted_from": "system"}
                if "summar" in (m.text or "").lower()[:200]:
                    kwargs.setdefault("lc_source", "summarization")
                    kwargs[MARK_KEY]["kind"] = "summary"
                out.append(HumanMessage(content=m.content, id=m.id, name=m.name, additional_kwargs=kwargs))
                repairs.append(Repair("system_message_converted", i, detail="mid-history SystemMessage sent as a HumanMessage"))
                continue
        else:
            seen_non_system = True
        out.append(m)
    return out, repairs


def repair_history(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[Repair]]:
    """Repair pairing and order defects without losing content; return the new list and the repairs made.

    - RemoveMessage (a LangGraph state update, not a message): dropped;
    - orphan ToolMessage (no call before it): removed (there is no call to attach it to);
    - duplicate result: later copies removed;
    - result separated from its call: moved to the block right after its call;
    - tool call without a result: a ToolMessage with `MISSING_RESULT_TEXT` (status "error") is added;
    - mid-history SystemMessage: sent as a HumanMessage (see `normalize_system_messages`);
    - history starting with an assistant or tool message: a HumanMessage with `CONVERSATION_START_TEXT` is
      put before it.
    Indices in the repairs refer to the input list.
    """
    from langchain_core.messages import RemoveMessage

    msgs, repairs = normalize_system_messages(messages)
    kept = []
    for i, m in enumerate(msgs):
        if isinstance(m, RemoveMessage):
            repairs.append(Repair("remove_message_dropped", i, detail="a RemoveMessage is a state update, never model input"))
        else:
            kept.append(m)
    msgs = kept
    call_owner: dict[str, int] = {}
    for i, m in enumerate(msgs):
        for tcid in call_ids(m):
            call_owner.setdefault(tcid, i)
    results: dict[str, BaseMessage] = {}
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            tcid = m.tool_call_id
            if tcid not in call_owner or call_owner[tcid] > i:
                repairs.append(Repair("orphan_tool_result_removed", i, tcid))
            elif tcid in results:
                repairs.append(Repair("duplicate_tool_result_removed", i, tcid))
            else:
                results[tcid] = m
    out: list[BaseMessage] = []
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            continue  # placed right after their call below
        out.append(m)
        for tcid in call_ids(m):
            if call_owner.get(tcid) != i:
                continue
            res = results.get(tcid)
            if res is None:
                repairs.append(Repair("missing_tool_result_added", i, tcid))
                name = next((tc.get("name") for tc in m.tool_calls if tc.get("id") == tcid), None)  # type: ignore[attr-defined]
                res = ToolMessage(content=MISSING_RESULT_TEXT, tool_call_id=tcid, name=name, status="error",
                                  id=f"lc-compaction-missing-{tcid}")
            out.append(res)
    # report moved results (their position relative to the call changed)
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage) and results.get(m.tool_call_id) is m:
            owner = call_owner[m.tool_call_id]
            between = msgs[owner + 1:i]
            if any(not isinstance(x, ToolMessage) for x in between):
                repairs.append(Repair("tool_result_moved", i, m.tool_call_id, f"moved next to its call in message {owner}"))
    first = next((k for k, m in enumerate(out) if not isinstance(m, SystemMessage)), None)
    if first is not None and not isinstance(out[first], HumanMessage):
        out.insert(first, HumanMessage(content=CONVERSATION_START_TEXT, id=f"lc-compaction-start-{uuid.uuid4().hex[:8]}"))
        repairs.append(Repair("conversation_start_added", first, detail=f"history started with a {out[first + 1].type} message"))
    return out, repairs


class Step(NamedTuple):
    """A removable run `[start, end)` of the history; `kind` is "request", "system", "summary" or "assistant"."""

    start: int
    end: int
    kind: str

    @property
    def indices(self) -> range:
        return range(self.start, self.end)


def split_steps(messages: Sequence[BaseMessage]) -> list[Step]:
    """Partition the whole list into steps (see the module docstring). O(len(messages))."""
    steps: list[Step] = []
    kinds = [kind(m) for m in messages]
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        k = kinds[i]
        if k == SYSTEM:
            steps.append(Step(i, i + 1, "system"))
            i += 1
        elif k == HUMAN:
            steps.append(Step(i, i + 1, "summary" if is_summary(m) else "request"))
            i += 1
        else:
            start = i
            while i < n and kinds[i] != HUMAN and kinds[i] != SYSTEM:
                m = messages[i]
                end = _block_end(messages, kinds, i) if kinds[i] == AI and m.tool_calls else i + 1  # type: ignore[attr-defined]
                i = end
                if kinds[end - 1] == TOOL:
                    break  # a step ends after a tool block
            steps.append(Step(start, i, "assistant"))
    return steps


@dataclass
class Exchange:
    """A request and the steps after it up to the next request; `request` is None for the preamble."""

    request: int | None
    steps: list[Step] = field(default_factory=list)


def split_exchanges(steps: Sequence[Step]) -> list[Exchange]:
    """Group steps into exchanges; steps before the first request form a preamble exchange (request None)."""
    out: list[Exchange] = [Exchange(None)]
    for s in steps:
        if s.kind == "request":
            out.append(Exchange(s.start, [s]))
        else:
            out[-1].steps.append(s)
    if not out[0].steps:
        out.pop(0)
    return out


def fill_missing_ids(messages: Sequence[BaseMessage], start: int = 0) -> None:
    """Give each message of `messages[start:]` that has no id a new uuid4 id, in place (the same object), as
    LangChain's `SummarizationMiddleware` does: every message has an id before any removal from graph state
    (`RemoveMessage(id=...)`). O(len(messages) - start)."""
    for m in messages[start:]:
        if not m.id:
            m.id = str(uuid.uuid4())


def ensure_ids(messages: Sequence[BaseMessage], repairs: list[Repair] | None = None) -> list[BaseMessage]:
    """Return the messages with a unique, non-empty id each (copies only where an id is missing or repeated).

    Ids are needed before any removal from graph state (`RemoveMessage(id=...)`) and for caching counts.
    A repeated id is replaced in the later message's copy and reported in `repairs` when given.
    """
    seen: set[str] = set()
    out: list[BaseMessage] = []
    for i, m in enumerate(messages):
        if not m.id or m.id in seen:
            if m.id and repairs is not None:
                repairs.append(Repair("duplicate_id_replaced", i, detail=f"id {m.id!r} was already used"))
            m = m.model_copy(update={"id": str(uuid.uuid4())})
        seen.add(m.id)  # type: ignore[arg-type]
        out.append(m)
    return out
