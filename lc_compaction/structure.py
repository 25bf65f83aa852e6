"""The structure of a message history: tool blocks, steps, exchanges; the invariant check; repair.

Words used throughout (all positions are indices into one `list[BaseMessage]`):

- **tool block**: an `AIMessage` with tool calls and the run of `ToolMessage`s right after it that
  answer those calls (parallel calls included). It is never split: removed whole or kept whole. Its calls are
  `tool_calls` and `invalid_tool_calls` (a call whose arguments did not parse): langchain-openai sends both as
  `tool_calls` on the wire (`_lc_invalid_tool_call_to_openai_tool_call`: id, name, the raw argument string), and
  `langchain.agents.create_agent` answers each invalid call with an error ToolMessage before middleware runs, so
  an invalid call and its result are one unit like any tool pair (see `tool_calls_of`).
- **pairing** follows the wire format (OpenAI's Chat Completions, Anthropic's Messages): a ToolMessage answers
  a call of the closest `AIMessage` with tool calls before it, by position. A tool-call id is unique within one
  AIMessage, not across the history: OpenAI-compatible servers that number calls per assistant turn send
  `call_0` in every turn, and the provider accepts it. Nothing here is keyed by a tool-call id globally.
- **step**: the smallest run a strategy may remove without breaking provider order rules: a request
  (`HumanMessage`), a lone `SystemMessage` (or a mid-history one sent as a `HumanMessage`), or a run of
  assistant messages that ends with a tool block (or at the next request). Because a removed step always ends
  after a `ToolMessage` or before a `HumanMessage`, every `AIMessage` with tool calls that follows it is still
  preceded by a user or tool turn (Gemini's rule).
- **exchange**: a user request and everything up to the next request. Summary messages and mid-history system
  messages sent as `HumanMessage`s are not requests.

The invariant check (`check_invariants`) is the one place the rules live; the ladder runs it after every
strategy and the tests use an independent copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from lc_compaction._content import TOOL_CALL_BLOCKS, block_type, starts_with_thinking
from lc_compaction._kinds import AI, HUMAN, REMOVE, SYSTEM, TOOL, kind
from lc_compaction.markers import MARK_KEY, is_converted_system, is_summary

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
    """A user request: a HumanMessage that is not a summary, nor a mid-history SystemMessage sent as a
    HumanMessage (`normalize_system_messages`: an instruction, kept like the system prompt)."""
    return kind(message) == HUMAN and not is_summary(message) and not (
        message.additional_kwargs and is_converted_system(message))


def is_conversation_start(message: BaseMessage) -> bool:
    """Whether `message` is the placeholder a repair puts before a history that starts with the assistant's
    message (`CONVERSATION_START_TEXT`): a user turn, but not the user's first request."""
    return kind(message) == HUMAN and message.content == CONVERSATION_START_TEXT


UserOrAssistant = Literal["user", "assistant"]


def turn_role(message: BaseMessage) -> UserOrAssistant | None:
    """The role a message takes in the alternation of user and assistant turns that strict chat templates check:
    "user" for a HumanMessage (a request, a summary, a mid-history system message sent as one), "assistant" for an
    AIMessage without tool calls, None for the rest (tool calls, tool results, system messages). The rule is that of
    Mistral's instruct chat templates (Hugging Face, v0.3 with tools): after the optional system message, the
    messages left when tool results and assistant messages with tool calls are set aside must alternate
    user/assistant, starting with the user, or rendering raises "conversation roles must alternate
    user/assistant/user/assistant/..."; vLLM and TGI servers apply such templates."""
    k = kind(message)
    if k == HUMAN:
        return "user"
    if k == AI and not call_ids(message):
        return "assistant"
    return None


def turn_before(messages: Sequence[BaseMessage], i: int) -> UserOrAssistant | None:
    """The role of the nearest turn (`turn_role`) before index `i`; None when only system messages, tool calls and
    tool results come before it. O(distance to it), in messages."""
    for j in range(i - 1, -1, -1):
        role = turn_role(messages[j])
        if role is not None:
            return role
    return None


def turn_from(messages: Sequence[BaseMessage], i: int) -> UserOrAssistant | None:
    """The role of the nearest turn (`turn_role`) at or after index `i`; None when none follows."""
    for j in range(i, len(messages)):
        role = turn_role(messages[j])
        if role is not None:
            return role
    return None


_CALL_FIELDS = ("tool_calls", "invalid_tool_calls")
"""The fields of an AIMessage whose entries are tool calls on the wire (langchain-openai's `_convert_message_to_dict`
sends `tool_calls` then `invalid_tool_calls`, in that order)."""


def tool_calls_of(message: BaseMessage) -> list[dict[str, Any]]:
    """The tool calls an AIMessage makes on the wire, in the wire's order: its `tool_calls` (args a dict), then its
    `invalid_tool_calls` (args the raw string the model wrote, or None); empty for other messages."""
    if kind(message) != AI:
        return []
    ai = cast(AIMessage, message)
    calls, invalid = ai.tool_calls, ai.invalid_tool_calls
    out = cast(list[dict[str, Any]], list(calls) if calls else [])  # ToolCall TypedDicts: dicts of their fields
    if invalid:
        out.extend(cast(list[dict[str, Any]], invalid))
    return out


def call_ids(message: BaseMessage) -> list[str]:
    """The ids of the tool calls an AIMessage makes (`tool_calls_of`; "" for a call without an id), in order;
    empty for other messages."""
    return [tc.get("id") or "" for tc in tool_calls_of(message)]


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
    answered = {cast(ToolMessage, m).tool_call_id for m in messages[j:]}  # the block's ToolMessages
    return n if answered == calls else j - 1


def _block_end(messages: Sequence[BaseMessage], kinds: Sequence[str], i: int, offset: int = 0) -> int:
    """`tool_block_end` with the kinds of the messages known (`kinds[j - offset]` is the kind of message j)."""
    ids = set(call_ids(messages[i]))
    j = i + 1
    if not ids:
        return j
    n = len(messages)
    while j < n and kinds[j - offset] == TOOL and cast(ToolMessage, messages[j]).tool_call_id in ids:
        j += 1
    return j


def tool_pairs(messages: Sequence[BaseMessage]) -> dict[int, tuple[int, str]]:
    """Which call each ToolMessage answers, by the wire's rule: {index of the ToolMessage: (index of its AIMessage,
    call id)} for each ToolMessage in the run right after an AIMessage with a call of its id (the first result of
    a call only). ToolMessages that answer no call so (orphans, results out of place) are left out. O(n)."""
    out: dict[int, tuple[int, str]] = {}
    block, open_ids = -1, set()
    for i, m in enumerate(messages):
        k = kind(m)
        if k == TOOL:
            tcid = cast(ToolMessage, m).tool_call_id
            if block >= 0 and tcid in open_ids:
                open_ids.discard(tcid)
                out[i] = (block, tcid)
            continue
        ids = call_ids(m) if k == AI else []
        block, open_ids = (i if ids else -1), set(ids)
    return out


def check_invariants(messages: Sequence[BaseMessage], start: int = 0) -> list[Violation]:
    """Check the list against the pairing and order rules; return every violation (empty when valid).

    Rules (OpenAI, Anthropic and Gemini reject requests that break them), pairing by position (see the module
    docstring):
    - every ToolMessage answers a tool call of the closest AIMessage with tool calls before it, in the unbroken
      run of ToolMessages right after that AIMessage (no orphans, results adjacent to their call);
    - every tool call has exactly one result (no dangling calls, no duplicate results); the calls of one
      AIMessage have distinct, non-empty ids (the same id in another AIMessage is fine);
    - the first non-system message is a HumanMessage; no SystemMessage after the first non-system message;
    - no RemoveMessage (a graph-state instruction, never model input).

    Every violation is one `repair_history` repairs. Cost: one pass, O(len(messages)).

    `start`: check only what `messages[start:]` adds to a prefix `messages[:start]` known to pass (a front door's
    previous call checked it: the messages its count tally covers), from the tool block the prefix ends with:
    O(new messages + that block). The list is valid exactly when this finds nothing; indices are in `messages`,
    but a result that answers a call of an earlier block of the prefix is named an orphan (a full check names
    it exactly).
    """
    out: list[Violation] = []
    begin = _block_start(messages, start) if start > 0 else 0
    # a valid prefix has SystemMessages only at its start: it holds a non-system message when it ends with one
    seen_non_system = begin > 0 and kind(messages[begin - 1]) != SYSTEM
    block = -1  # index of the AIMessage whose run of results we are in (-1: none)
    open_calls: dict[str, int] = {}  # calls of `block` not answered yet -> its index
    latest_call: dict[str, int] = {}  # call id -> index of the latest AIMessage that made it (results out of place)
    answered: set[tuple[int, str]] = set()  # (AIMessage index, call id) answered
    for i, m in enumerate(messages[begin:] if begin else messages, begin):  # a slice: O(new), as islice is not
        k = kind(m)
        if k == REMOVE:
            out.append(Violation("remove_message", i, detail="RemoveMessage is a state update, not a message"))
            continue
        if k == TOOL:
            tcid = cast(ToolMessage, m).tool_call_id
            if not tcid:
                out.append(Violation("missing_tool_call_id", i, detail="a ToolMessage without tool_call_id"))
            elif block >= 0 and tcid in open_calls:
                answered.add((block, tcid))
                del open_calls[tcid]
            elif block >= 0 and (block, tcid) in answered:
                out.append(Violation("duplicate_tool_result", i, tcid,
                                     f"its call in message {block} is answered already"))
            elif tcid in latest_call:
                owner = latest_call[tcid]
                if (owner, tcid) in answered:
                    out.append(Violation("duplicate_tool_result", i, tcid,
                                         f"its call in message {owner} is answered already"))
                else:
                    out.append(Violation("tool_result_not_adjacent", i, tcid, f"its call is in message {owner}"))
                    answered.add((owner, tcid))
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
        block = -1
        if k == SYSTEM:
            if seen_non_system:
                out.append(Violation("system_not_at_start", i))
            continue
        if not seen_non_system and k != HUMAN:
            out.append(Violation("first_message_not_human", i, detail=f"first non-system message is {m.type}"))
        seen_non_system = True
        ids = call_ids(m) if k == AI else ()
        if ids:
            for n, tcid in enumerate(ids):
                if not tcid:
                    out.append(Violation("missing_tool_call_id", i, detail=f"tool call {n} has no id"))
                elif tcid in open_calls:
                    out.append(Violation("duplicate_tool_call_id", i, tcid,
                                         "this id is used by two tool calls of this message"))
                else:
                    open_calls[tcid] = i
                    latest_call[tcid] = i
            block = i
    for tcid, ai_index in open_calls.items():
        out.append(Violation("dangling_tool_call", ai_index, tcid, "no ToolMessage answers it"))
    return out


def _block_start(messages: Sequence[BaseMessage], start: int) -> int:
    """Where the tool block holding `messages[start - 1]` starts (its AIMessage), or `start` when that message
    is in none: O(length of the block)."""
    j = min(start, len(messages))
    while j > 0 and kind(messages[j - 1]) == TOOL:
        j -= 1
    return j - 1 if j > 0 and kind(messages[j - 1]) == AI and call_ids(messages[j - 1]) else j


MISSING_RESULT_TEXT = "[lc-compaction: no result was recorded for this tool call]"
"""Content of the ToolMessage that repair adds for a tool call that had no result."""


def is_missing_result(message: BaseMessage) -> bool:
    """True for the placeholder `repair_history` adds for a tool call without a result: a ToolMessage whose content
    is `MISSING_RESULT_TEXT` (compaction's own text, never a tool's)."""
    return kind(message) == TOOL and message.content == MISSING_RESULT_TEXT

CONVERSATION_START_TEXT = "[lc-compaction: the conversation starts with the assistant's message below]"
"""Content of the HumanMessage that repair puts before a history that starts with an assistant message."""


def normalize_system_messages(messages: Sequence[BaseMessage], start: int = 0
                              ) -> tuple[list[BaseMessage], list[Repair]]:
    """Turn each SystemMessage after the first non-system message into a HumanMessage (same id, same text).

    Anthropic and Gemini reject a system message mid-history. Nothing is lost: the content and id are kept
    and the message is marked `additional_kwargs["lc_compaction"]["converted_from"] = "system"`. Such a message
    is an instruction, not the user: it is kept like the system prompt (the policy pins it), never starts an
    exchange and is never "the latest request" (`is_request`).

    Only `messages[start:]` are looked at (the front doors pass the index of the first message added since their
    previous call: O(new messages) plus the leading system messages). Returns the list itself (no copy) when
    nothing needs converting, else a new list; and one `Repair` per converted message (input index).
    """
    n = len(messages)
    out = messages if isinstance(messages, list) else list(messages)
    hits = [i for i in range(start, n) if kind(out[i]) == SYSTEM]
    if hits:  # mid-history: after the first non-system message (found past the leading system messages)
        first = next((i for i in range(n) if kind(out[i]) != SYSTEM), n)
        hits = [i for i in hits if i > first]
    if not hits:
        return out, []
    out = list(out)
    repairs: list[Repair] = []
    for i in hits:
        out[i] = _as_human(out[i])
        repairs.append(Repair("system_message_converted", i, detail="mid-history SystemMessage sent as a HumanMessage"))
    return out, repairs


def _is_note(message: BaseMessage) -> bool:
    return kind(message) == HUMAN and bool(message.additional_kwargs) and is_converted_system(message)


def notes_out_of_place(messages: Sequence[BaseMessage], start: int = 0) -> bool:
    """Whether `place_system_notes` would move a converted system note of `messages`, given that the first `start`
    messages were checked before (a previous call's tally; 0: check them all). A note moves only when the next
    assistant message after it does not start with thinking, and the prefix had none such: so only the notes among
    the new messages, or after the prefix's last assistant message (whose next assistant message is new), can move.
    O(new messages + the prefix's last step) when none is there (the common call), else O(len(messages)) once."""
    j = min(max(start, 0), len(messages))
    while j > 0 and kind(messages[j - 1]) != AI and not is_request(messages[j - 1]):
        j -= 1
    if not any(_is_note(messages[i]) for i in range(j, len(messages))):
        return False
    return bool(place_system_notes(messages)[1])


def place_system_notes(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[Repair]]:
    """Keep the converted mid-history system notes (`normalize_system_messages`) of a running tool loop that thinks
    out of the steps that cannot follow them: return the messages with each such note moved, and one `Repair`
    ("system_note_moved", the note's input index) a note; the list itself (no copy) when none moves.

    The running loop: the assistant steps after the latest request while the history ends with their tool results;
    it thinks when its first assistant message starts with a thinking block (`starts_with_thinking`). A note there
    is a user message with text, and Anthropic starts a new turn at such a message: with thinking on, the first
    assistant message after it must start with a thinking block (the API rejects it otherwise: "a final `assistant`
    message must start with a thinking block"). So a note whose next assistant message does not start with one
    goes right before the first later assistant message that does (where the model, having read it, opened the new
    turn), else after the loop's last tool result (the model's next reply opens the new turn with its own thinking).

    Why there, and not the other places: merged into a tool result, the system's words would read as a tool's
    (and truncation would cut them); moved before the loop's first assistant step, the note would change the whole
    loop's cached prefix, and tell the model it read the note before steps it took without it. Moving it later
    changes the history only from the note's place on, and in an agent's own run it never moves: a note is
    appended after the loop's results, and the model's reply to it starts with thinking. Elsewhere (a loop without
    thinking, a finished request: Anthropic checks only the turn being continued) notes stay where they are.
    O(len(messages))."""
    n = len(messages)
    request = next((i for i in range(n - 1, -1, -1) if is_request(messages[i])), None)
    if request is None:
        return list(messages) if not isinstance(messages, list) else messages, []
    notes = [i for i in range(request + 1, n) if _is_note(messages[i])]
    tail = next((i for i in range(n - 1, request, -1) if not _is_note(messages[i])), None)
    first = next((i for i in range(request + 1, n) if kind(messages[i]) == AI), None)
    if (not notes or tail is None or kind(messages[tail]) != TOOL or first is None
            or not starts_with_thinking(messages[first])):
        return messages if isinstance(messages, list) else list(messages), []
    moves: dict[int, int] = {}  # note index -> index of the message it goes before (n: the end)
    for i in notes:
        following = [j for j in range(i + 1, n) if kind(messages[j]) == AI]
        if not following or starts_with_thinking(messages[following[0]]):
            continue
        target = next((j for j in following if starts_with_thinking(messages[j])), n)
        while target - 1 > i and _is_note(messages[target - 1]):
            target -= 1  # after the notes already there (the notes keep their order)
        moves[i] = target
    if not moves:
        return messages if isinstance(messages, list) else list(messages), []
    out: list[BaseMessage] = []
    repairs: list[Repair] = []
    for j in range(n + 1):
        for i in (k for k, target in moves.items() if target == j):
            out.append(messages[i])
            where = "after the running loop's last tool result" if j == n else \
                f"before message {j}, the first later assistant message that starts with a thinking block"
            repairs.append(Repair("system_note_moved", i,
                                  detail=f"a system note in a thinking tool loop moved {where}"))
        if j < n and j not in moves:
            out.append(messages[j])
    return out, repairs


def _as_human(m: BaseMessage) -> BaseMessage:
    """A mid-history SystemMessage as the HumanMessage sent in its place (see `normalize_system_messages`)."""
    kwargs = dict(m.additional_kwargs or {})
    kwargs[MARK_KEY] = {**(kwargs.get(MARK_KEY) or {}), "converted_from": "system"}
    if "summar" in (m.text or "").lower()[:200]:
        kwargs.setdefault("lc_source", "summarization")
        kwargs[MARK_KEY]["kind"] = "summary"
    return HumanMessage(content=m.content, id=m.id, name=m.name, additional_kwargs=kwargs)


def repair_history(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[Repair]]:
    """Repair every defect `check_invariants` reports, without losing content; return the new list and the
    repairs made (indices refer to the input list).

    - RemoveMessage (a LangGraph state update, not a message): dropped;
    - a tool call without an id: given one (`lc_call_{index}_{n}`); an id used by two calls of one AIMessage:
      the later call gets a new id (`{id}_2`, ...), and so does the ToolMessage of that id that answers it (the
      second one in the block);
    - orphan ToolMessage (no call before it): removed (there is no call to attach it to);
    - duplicate result: later copies removed;
    - result separated from its call (the latest AIMessage before it with an unanswered call of that id):
      moved to the block right after its call;
    - tool call without a result: a ToolMessage with `MISSING_RESULT_TEXT` (status "error") is added;
    - a call answered by such a placeholder (`is_missing_result`: an earlier repair added it) and by a real
      result too (the tool's result arrived after the repair, or in the same graph step, before or after the
      placeholder): the real result takes the placeholder's place, right after its call, and the placeholder
      goes (never the other way round: "duplicate result: later copies removed" does not apply to it);
    - mid-history SystemMessage: sent as a HumanMessage (see `normalize_system_messages`);
    - history starting with an assistant or tool message: a HumanMessage with `CONVERSATION_START_TEXT` is
      put before it.
    Pairing is by position, as on the wire (see the module docstring): a call id reused in another AIMessage is
    another call. A ToolMessage without a tool_call_id answers the first call of its block that had no id.
    """
    msgs, repairs = normalize_system_messages(messages)
    items: list[tuple[int, BaseMessage, list[str]]] = []  # (input index, message, its calls' original ids)
    for i, m in enumerate(msgs):
        k = kind(m)
        if k == REMOVE:
            repairs.append(Repair("remove_message_dropped", i,
                                  detail="a RemoveMessage is a state update, never model input"))
            continue
        originals = call_ids(m) if k == AI else []
        if originals:
            m = _with_unique_call_ids(m, i, repairs)
        items.append((i, m, originals))
    # pair each ToolMessage with its call: (position in `items` of the AIMessage, call id) -> the result
    results: dict[tuple[int, str], BaseMessage] = {}
    moved: list[tuple[int, int, str]] = []  # (input index of the result, input index of its call, call id)
    block = -1  # position of the AIMessage whose run of results we are in
    pending: dict[str, list[str]] = {}  # that block's original call ids -> its (new) call ids not answered yet
    unanswered: dict[str, list[int]] = {}  # call id -> positions of the AIMessages whose call of it has no result
    # a placeholder an earlier repair added gives way to a real result of its call, wherever that result is
    placeholders = {cast(ToolMessage, m).tool_call_id for _, m, _ in items if is_missing_result(m)}
    stand_ins: dict[str, list[tuple[int, int]]] = {}  # call id -> (its AIMessage's position, input index) of
    # each call a placeholder answers so far
    latest: dict[str, int] = {}  # call id -> position of the latest AIMessage that made a call of it
    early: dict[str, tuple[int, BaseMessage]] = {}  # call id -> (input index, result) of an orphan result whose
    # call comes later and may be answered by a placeholder (two writes of one graph step, the tool's first)
    for p, (i, m, originals) in enumerate(items):
        k = kind(m)
        if k != TOOL:
            block, pending = (p if originals else -1), {}
            for original, new in zip(originals, call_ids(m)):
                pending.setdefault(original, []).append(new)
                unanswered.setdefault(new, []).append(p)
                latest[new] = p
            continue
        tcid = cast(ToolMessage, m).tool_call_id or ""
        stand_in = tcid in placeholders and is_missing_result(m)
        if block >= 0 and pending.get(tcid):
            owner, target = block, pending[tcid].pop(0)
            if target != tcid:
                m = m.model_copy(update={"tool_call_id": target})
                repairs.append(Repair("tool_call_id_renamed", i, tcid or None,
                                      f"it answers the call now named {target!r}"))
        elif not stand_in and stand_ins.get(tcid) and stand_ins[tcid][-1][0] == latest[tcid]:
            # the real result of the latest call of its id, which a placeholder answers
            owner, at = stand_ins[tcid].pop()
            repairs.append(Repair("missing_tool_result_replaced", at, tcid, f"by the result in message {i}"))
            if owner != block:
                moved.append((i, items[owner][0], tcid))
            results[(owner, tcid)] = m
            continue
        elif block >= 0 and tcid in pending:
            repairs.append(Repair("duplicate_tool_result_removed", i, tcid))
            continue
        elif unanswered.get(tcid):
            owner, target = unanswered[tcid][-1], tcid
            moved.append((i, items[owner][0], tcid))
        elif tcid in placeholders and tcid not in unanswered and tcid not in early:
            early[tcid] = (i, m)  # no call of it yet: a placeholder of a later call may give way to it
            continue
        else:
            what = "duplicate_tool_result_removed" if tcid in unanswered else "orphan_tool_result_removed"
            repairs.append(Repair(what, i, tcid or None))
            continue
        unanswered[target].remove(owner)
        if stand_in and target in early:  # the real result came first, before its call
            at, real = early.pop(target)
            repairs.append(Repair("missing_tool_result_replaced", i, target, f"by the result in message {at}"))
            moved.append((at, items[owner][0], target))
            m = real if cast(ToolMessage, real).tool_call_id == target else real.model_copy(
                update={"tool_call_id": target})
        elif stand_in:
            stand_ins.setdefault(target, []).append((owner, i))
        results[(owner, target)] = m
    for tcid, (i, _) in early.items():
        repairs.append(Repair("orphan_tool_result_removed", i, tcid or None))
    out: list[BaseMessage] = []
    for p, (i, m, _) in enumerate(items):
        if kind(m) == TOOL:
            continue  # placed right after their call below
        out.append(m)
        for tc in tool_calls_of(m):
            tcid = tc.get("id") or ""
            res = results.get((p, tcid))
            if res is None:
                repairs.append(Repair("missing_tool_result_added", i, tcid))
                res = ToolMessage(content=MISSING_RESULT_TEXT, tool_call_id=tcid, name=tc.get("name"), status="error",
                                  id=f"lc-compaction-missing-{m.id or i}-{tcid}")
            out.append(res)
    for i, owner, tcid in moved:
        repairs.append(Repair("tool_result_moved", i, tcid, f"moved next to its call in message {owner}"))
    first = next((k for k, m in enumerate(out) if kind(m) != SYSTEM), None)
    if first is not None and kind(out[first]) != HUMAN:
        out.insert(first, HumanMessage(content=CONVERSATION_START_TEXT,
                                       id=f"lc-compaction-start-{uuid.uuid4().hex[:8]}"))
        repairs.append(Repair("conversation_start_added", first,
                              detail=f"history started with a {out[first + 1].type} message"))
    return out, repairs


_CALL_BLOCK_ID_KEYS = ("id", "call_id")
"""Keys under which a content block that repeats a tool call holds the call's id (`function_call`: call_id)."""


def _with_unique_call_ids(message: BaseMessage, index: int, repairs: list[Repair]) -> BaseMessage:
    """`message` (input index `index`) with a distinct, non-empty id for each of its calls; a copy only when one
    had to change. A call without an id gets `lc_call_{index}_{n}`, a repeated id `{id}_2`, `{id}_3`, ...
    (letters, digits and `_` only: Anthropic's pattern for tool-use ids). Content blocks that repeat a renamed
    call (`tool_use`, `tool_call`, `function_call` blocks of that id) are renamed with it, in order."""
    ids = call_ids(message)
    if all(ids) and len(set(ids)) == len(ids):
        return message
    taken = set(ids)
    new_ids: list[str] = []
    seen: set[str] = set()
    for n, tcid in enumerate(ids):
        new = tcid
        if not tcid or tcid in seen:
            base = tcid or f"lc_call_{index}_{n}"
            new, k = (base, 2) if not tcid else (f"{base}_2", 2)
            while new in taken or new in seen:
                k += 1
                new = f"{base}_{k}"
            taken.add(new)
            repairs.append(Repair("tool_call_id_renamed" if tcid else "tool_call_id_added", index, tcid or None,
                                  f"tool call {n} now has the id {new!r}"))
        seen.add(new)
        new_ids.append(new)
    update: dict[str, Any] = {}
    pos = 0
    for field_name in _CALL_FIELDS:
        calls = list(getattr(message, field_name, None) or [])
        update[field_name] = [{**tc, "id": new_ids[pos + n]} for n, tc in enumerate(calls)]
        pos += len(calls)
    renames: dict[str, list[str]] = {}
    for old, new in zip(ids, new_ids):
        if old:
            renames.setdefault(old, []).append(new)
    if isinstance(message.content, list):
        blocks = []
        for block in message.content:
            if isinstance(block, dict) and block_type(block) in TOOL_CALL_BLOCKS:
                for key in _CALL_BLOCK_ID_KEYS:
                    value = block.get(key)
                    queue = renames.get(value) if isinstance(value, str) else None
                    if queue:
                        block = {**block, key: queue.pop(0)}
                        break
            blocks.append(block)
        update["content"] = blocks
    return message.model_copy(update=update)


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
            steps.append(Step(i, i + 1, "summary" if is_summary(m) else "system" if is_converted_system(m)
                              else "request"))
            i += 1
        else:
            start = i
            while i < n and kinds[i] != HUMAN and kinds[i] != SYSTEM:
                m = messages[i]
                ai = cast(AIMessage, m)
                calls = kinds[i] == AI and (ai.tool_calls or ai.invalid_tool_calls)
                end = _block_end(messages, kinds, i) if calls else i + 1
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
        assert m.id is not None  # kept when new, else given a fresh one just above
        seen.add(m.id)
        out.append(m)
    return out


def running_steps(messages: Sequence[BaseMessage], steps: Sequence[Step]) -> list[Step]:
    """The assistant steps of the running request (the latest user request while its exchange has not answered:
    `progress.py`), oldest first; empty when the latest exchange has answered (its last assistant step does not
    end with a tool result) or has no step yet. O(len(steps))."""
    exchanges = split_exchanges(steps)
    if not exchanges or exchanges[-1].request is None:
        return []
    loop = [s for s in exchanges[-1].steps if s.kind == "assistant"]
    if not loop or kind(messages[loop[-1].end - 1]) != TOOL:
        return []
    return loop
