"""Offload, the pure part: what compaction takes out of the history, where it goes in a store, how it is named.

With offload on, nothing compaction does loses content: before a tool result is truncated (or cut in place), or
a message is dropped or summarized, its original is written to a LangGraph `BaseStore`, and the truncation note
tells the model how to read it back with the `recall_tool_result` tool. A tool result larger than
`policy.offload_above` tokens is offloaded when it arrives: the model sees a head and tail preview and the handle.

This module does no I/O. `compact(..., offload=True)` decides as if every write will succeed and lists what must be
written in `result.offloads` (`OffloadRecord`s); the writes, and what happens when one fails (the message stays as
it was for that call), are in `lc_compaction.integrations.offload`; the tool is in `lc_compaction.integrations.recall`.

Namespace layout, one per conversation thread (the thread id is `config["configurable"]["thread_id"]`):

    ("lc_compaction", "offload", <thread>, "tool_result")   key: the result's tool_call_id, or
                                                                 "<tool_call_id>@<message id>" (see Keys)
    ("lc_compaction", "offload", <thread>, "message")       key: the message id (a dropped, summarized or
                                                                 cut user or assistant message)
    ("lc_compaction", "offload", <thread>, "compaction")    key: the compaction's number, 8 digits ("00000003"):
                                                                 one record per rewrite of the stored history
                                                                 (`lc_compaction.history`)

Keys (`OffloadKeys`): a tool_call_id is the handle only when it names one result in the thread. Several
OpenAI-compatible servers number the calls of every assistant turn from `call_0`, so an id can come back in a
later turn: a tool result whose tool_call_id an earlier ToolMessage of the history already has, or one the writer
found already taken in the thread's store by another content (`compact(..., offload_rekey=...)`), is keyed
"<tool_call_id>@<message id>" (message ids are unique in a thread). Every note, preview and cut names its exact
key as the `tool_call_id` argument of the recall tool (`recall_hint`), so the model never has to guess.

`<thread>` is the thread id with "%" written "%25" and "." written "%2E" (a LangGraph namespace label may not
contain a period). The value, plain JSON (the same on `InMemoryStore` and `PostgresStore`):

    {"v": 1, "message": <JSON text of the LangChain message dict (`message_to_dict`), ASCII escapes>,
     "sha256": <hex digest of that text>, "chars": <characters of the recall text>, "tool_call_id": str | None,
     "message_id": str | None, "name": str | None, "reason": "truncated" | "removed" | "summarized" | ...,
     "recall_chars": int (optional: the largest recall slice for the window of the call that wrote it,
                     `recall_chars`),
     "position": int (optional: the message's index in the history that compaction read, in messages),
     "compaction": int (optional: the number of the compaction that removed or rewrote it, `lc_compaction.history`),
     "call": str (optional, tool results: the call that asked for it, `name(arguments JSON)`, at most
             `CALL_TEXT_CHARS` characters: what the search matches beside the result)}

The message is kept as JSON *text*: PostgreSQL's jsonb reorders object keys and refuses "\\u0000", so a nested
JSON object would not come back byte-identical; an ASCII-escaped JSON string does, on every store.

The recall text of a message (what `recall_tool_result` slices, in characters) is its content when the content is
a string, else the JSON text of its content blocks (`json.dumps(blocks, ensure_ascii=False)`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, message_to_dict, messages_from_dict

from lc_compaction._kinds import AI, TOOL, kind
from lc_compaction._note import note_lines, without_note
from lc_compaction.dedup import is_deduplicated
from lc_compaction.facts import LISTED_IDENTIFIER_CHARS, FactGuard, identifiers_beyond
from lc_compaction.markers import (
    CUT_IDENTIFIERS,
    LOOKUP_TOOL_NAMES,
    MARK_KEY,
    OFFLOADED_LEAD,
    RECALL_TOOL_NAME,
    is_dropped_marker,
    is_shortened,
    is_summary,
    is_truncated,
)
from lc_compaction.structure import is_conversation_start, is_missing_result

if TYPE_CHECKING:
    from lc_compaction.ladder import Action, LadderState, RecallKeys

__all__ = [
    "CALL_TEXT_CHARS",
    "DEFAULT_RECALL_CHARS",
    "MIN_RECALL_CHARS",
    "NAMESPACE_ROOT",
    "OFFLOAD_STRATEGY",
    "PREVIEW_HEAD_CHARS",
    "PREVIEW_TAIL_CHARS",
    "RECALL_CHARS_PER_TOKEN",
    "RECALL_OVERHEAD_TOKENS",
    "RECALL_SHARE",
    "RECALL_TOOL_NAME",
    "OffloadKeys",
    "OffloadRecord",
    "is_compaction_text",
    "message_text",
    "is_offloaded",
    "call_text",
    "large_arrivals",
    "message_from_json",
    "message_json",
    "offload_namespace",
    "own_original",
    "plan_offloads",
    "preview_arrivals",
    "recall_chars",
    "recall_hint",
    "recall_text",
    "record_message",
    "undeduplicated",
    "utf8_prefix",
]

NAMESPACE_ROOT = ("lc_compaction", "offload")
"""First labels of every offload namespace (see the module docstring for the layout)."""

OFFLOAD_STRATEGY = "offload_large_results"
"""`Action.strategy` of an arrival preview (`Action.kind` "offloaded")."""

PREVIEW_HEAD_CHARS = 1_500
PREVIEW_TAIL_CHARS = 500
"""Characters of a large result kept in its arrival preview: the start (where most tools put the answer: a
status line, headers, the first rows) and the end (totals, a last error line). About 500 tokens of English at
OpenAI's rule of thumb of 4 characters a token: a tenth of the default `offload_above`."""

DEFAULT_RECALL_CHARS = 8_000
"""Largest slice of one recall, in characters (and UTF-8 bytes: see `recall_chars`), and the slice when the
window is not known (a policy with only a trigger): about 2,000 tokens of English at OpenAI's rule of thumb of 4
characters a token, and well under the default `offload_above` (5,000 tokens), so a recall's answer is never
offloaded again on arrival."""

MIN_RECALL_CHARS = 256
"""Smallest slice (characters), even when the pinned messages leave no room: a recall always makes progress."""

RECALL_SHARE = 0.5
"""Share of the room left for messages that one recall's answer may take (the room: the budget, `max_input_tokens -
reserve`, less the tokens sent beside the messages, the system prompt and `RECALL_OVERHEAD_TOKENS`). The other
half holds the request being answered, the recall's own call and the recent turns the policy keeps."""

RECALL_CHARS_PER_TOKEN = 2
"""Characters per token assumed to turn that share into characters. The 690 tool results of 200 characters or
more in the shared traces (tau-bench airline, AgentDojo; o200k_base) have 2.2 to 5+ characters a token (median
3.0), so a slice of `RECALL_SHARE * room * 2` characters of such text takes at most 91% of half the room. Text
denser than that (CJK: about 1.3 characters a token; emoji: under 1) is bounded by bytes instead: a slice is also
at most that many UTF-8 bytes (`utf8_prefix`), and every token of a byte-level BPE (tiktoken's encodings) holds
at least one byte, so a slice never costs more than the whole room, whatever the script."""

RECALL_OVERHEAD_TOKENS = 64
"""Tokens of a recall's answer beside the slice: the ToolMessage framing and the one-line trailer saying where
the next slice starts (about 30 tokens), rounded up."""

CALL_TEXT_CHARS = 1_000
"""Characters of a tool call's text (`call_text`) kept beside its result's record: the search matches a result by
the call that asked for it (an order id, a path in the arguments); longer arguments are in the assistant
message's own record."""

_VERSION = 1


def _label(thread_id: str) -> str:
    return thread_id.replace("%", "%25").replace(".", "%2E")


def offload_namespace(thread_id: str, kind: str = "tool_result") -> tuple[str, ...]:
    """The store namespace of `thread_id`'s offloaded tool results (`kind="tool_result"`), other messages
    (`kind="message"`) or compaction records (`kind="compaction"`, `lc_compaction.history`).

    Raises:
        ValueError: `thread_id` is not a non-empty string, or `kind` is unknown.
    """
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"thread_id: offload needs a non-empty string thread id, got {thread_id!r}")
    if kind not in ("tool_result", "message", "compaction"):
        raise ValueError(f"kind: 'tool_result', 'message' or 'compaction', got {kind!r}")
    return (*NAMESPACE_ROOT, _label(thread_id), kind)


def message_json(message: BaseMessage) -> str:
    """`message` as ASCII-escaped JSON text of its LangChain dict (`message_to_dict`): what a record keeps, so the
    message comes back byte-identical from any store (see the module docstring)."""
    return json.dumps(message_to_dict(message), ensure_ascii=True, separators=(",", ":"))


def message_from_json(text: str) -> BaseMessage:
    """The message back from `message_json`'s text.

    Raises:
        ValueError: `text` is not JSON of a LangChain message dict.
    """
    try:
        return messages_from_dict([json.loads(text)])[0]
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a message's JSON text: {text[:120]!r}") from exc


def call_text(name: str, args: Any) -> str:
    """A tool call as the search reads it: `name(arguments as JSON)`, at most `CALL_TEXT_CHARS` characters."""
    return f"{name}({json.dumps(args, ensure_ascii=False, sort_keys=True)})"[:CALL_TEXT_CHARS]


def recall_text(content: Any) -> str:
    """The text `recall_tool_result` slices (characters): a string content itself, else the JSON text of the
    content blocks (non-ASCII characters kept as they are)."""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def message_text(message: BaseMessage) -> str:
    """The text `recall_message` slices (characters): `recall_text` of the content, then, for an assistant message
    with tool calls, one line a call, `name(arguments as JSON)` whole (the search finds such a message by its calls,
    `search.document`: reading it back must show them, even when its content is empty)."""
    text = recall_text(message.content)
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    lines = [f"{c['name']}({json.dumps(c.get('args'), ensure_ascii=False, sort_keys=True)})" for c in calls]
    return "\n".join([text, *lines] if text else lines)


def recall_hint(key: str, what: str = "result") -> str:
    """The sentence a truncation note, a preview or a cut ends with: how the model gets the whole `what` back;
    `key` is the store key (`OffloadKeys.key`), passed as the tool's `tool_call_id` argument."""
    return (f"The full {what} is kept: call {RECALL_TOOL_NAME}(tool_call_id={json.dumps(key)}) to read "
            "it (offset and length in characters).")


def recall_chars(budget_tokens: int | None, beside_tokens: int) -> int:
    """The largest recall slice, in characters (and UTF-8 bytes), for a call whose token budget is `budget_tokens`
    (`CompactionPolicy.budget_tokens()`) that sends `beside_tokens` tokens beside the conversation (tool schemas,
    a separate system prompt, reply priming, the system messages that open the history):
    `RECALL_SHARE * (budget - beside_tokens - RECALL_OVERHEAD_TOKENS) * RECALL_CHARS_PER_TOKEN`, within
    [`MIN_RECALL_CHARS`, `DEFAULT_RECALL_CHARS`]; `DEFAULT_RECALL_CHARS` when there is no budget (None: no
    `max_input_tokens`). See `RECALL_CHARS_PER_TOKEN` for why the answer then never overflows the window by
    itself."""
    if budget_tokens is None:
        return DEFAULT_RECALL_CHARS
    room = budget_tokens - beside_tokens - RECALL_OVERHEAD_TOKENS
    return max(MIN_RECALL_CHARS, min(DEFAULT_RECALL_CHARS, int(RECALL_SHARE * room * RECALL_CHARS_PER_TOKEN)))


def utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 encoding takes at most `max_bytes` bytes (a lone surrogate
    counts 3, as "surrogatepass" writes it). O(len(result))."""
    if len(text) * 4 <= max_bytes:
        return text
    used = 0
    for i, ch in enumerate(text):
        c = ord(ch)
        used += 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4
        if used > max_bytes:
            return text[:i]
    return text


class OffloadKeys:
    """The store key of every message one compaction may offload (see Keys in the module docstring).

    Args:
        messages: the history being compacted, as given (scanned once: O(n)).
        rekey: ids of tool results whose tool_call_id the writer found taken by another content in the store.
    """

    def __init__(self, messages: Sequence[BaseMessage], rekey: Iterable[str] = ()):
        self.special: dict[str, str] = {}
        """message id -> "<tool_call_id>@<message id>", for the tool results whose tool_call_id is not theirs."""
        self.ids = {m.id for m in messages if m.id}
        """Ids of the input messages: only they can be written (a summary made by this compaction is not)."""
        forced = set(rekey)
        seen: set[str] = set()
        for m in messages:
            if kind(m) == TOOL:
                cid = m.tool_call_id  # type: ignore[attr-defined]
                if (cid in seen or m.id in forced) and m.id:
                    self.special[m.id] = f"{cid}@{m.id}"
                seen.add(cid)

    def key(self, message: BaseMessage) -> str:
        """The store key of `message`: its tool_call_id (or the disambiguated one) for a tool result, else its id."""
        if kind(message) == TOOL:
            return self.special.get(message.id or "", cast(ToolMessage, message).tool_call_id)
        return message.id or ""

    def recallable(self, message: BaseMessage) -> bool:
        """True when the original of `message` is in the store once the result is used: an input message that
        the compaction writes (not a note, preview or cut of an original that was never kept), or the note or
        preview of one already written (`is_offloaded`)."""
        if message.id not in self.ids or is_compaction_text(message):
            return False
        return is_offloaded(message) or not (is_truncated(message) or is_shortened(message))


def is_compaction_text(message: BaseMessage) -> bool:
    """True for a message whose text compaction (or LangChain's summarization) wrote, not the user, the model or
    a tool: a summary (`markers.is_summary`), a drop marker (`markers.is_dropped_marker`), or a placeholder a
    repair added (`structure.is_missing_result`, `CONVERSATION_START_TEXT`). Such a message is never an original
    to store: what it stands for is stored under its own keys, and the front doors give it the id of a message it
    replaced (`integrations.writes.adopt_ids`), whose original that key holds."""
    return (is_summary(message) or is_dropped_marker(message) or is_missing_result(message)
            or is_conversation_start(message))


def is_offloaded(message: BaseMessage) -> bool:
    """True for a message whose content is a note or preview of an original already in the store (its mark says
    `"offloaded"`): its own content is never written (it would overwrite the original)."""
    meta = message.response_metadata
    mark = meta.get(MARK_KEY) if isinstance(meta, dict) else None
    return isinstance(mark, dict) and "offloaded" in mark


@dataclass
class OffloadRecord:
    """One original to write before a compaction result is used.

    Attributes:
        message: the original message (as it was in the input).
        reason: what compaction did to it: "truncated", "shortened", "offloaded" (arrival preview), "removed" or
            "summarized".
        key: the store key (`OffloadKeys.key`; by default the tool_call_id of a tool result, else the message id).
        recall_chars: the largest recall slice for the window of the call that plans it (`recall_chars`), written
            in the value; None: the recall tool's own cap applies.
        kind: "tool_result" or "message" (the namespace, from the message's type).
        position: the message's index in the history compaction read (messages); None: not said.
        compaction: the number of the compaction that took it out (`lc_compaction.history`), set by the writer;
            None: not said.
        call: a tool result's call (`call_text`), what the search matches beside it; None for other messages.
    """

    message: BaseMessage
    reason: str
    key: str = ""
    recall_chars: int | None = None
    position: int | None = None
    compaction: int | None = None
    call: str | None = None
    kind: str = field(init=False)
    _text: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.kind = "tool_result" if kind(self.message) == TOOL else "message"
        if not self.key:
            self.key = OffloadKeys(()).key(self.message)

    def message_json(self) -> str:
        """The message as ASCII-escaped JSON text (computed once)."""
        if self._text is None:
            self._text = message_json(self.message)
        return self._text

    def sha256(self) -> str:
        """Hex digest of `message_json()` (what the dedupe check compares)."""
        return hashlib.sha256(self.message_json().encode("ascii")).hexdigest()

    def value(self) -> dict[str, Any]:
        """The store value (see the module docstring)."""
        m = self.message
        return {"v": _VERSION, "message": self.message_json(), "sha256": self.sha256(),
                "chars": len(recall_text(m.content)), "tool_call_id": getattr(m, "tool_call_id", None),
                "message_id": m.id, "name": m.name, "reason": self.reason,
                **({"recall_chars": self.recall_chars} if self.recall_chars is not None else {}),
                **({"position": self.position} if self.position is not None else {}),
                **({"compaction": self.compaction} if self.compaction is not None else {}),
                **({"call": self.call} if self.call is not None else {})}


def record_message(value: dict[str, Any]) -> BaseMessage:
    """The original message back from a store value written for an `OffloadRecord`.

    Raises:
        ValueError: the value is not an offload record of a known version.
    """
    if not isinstance(value, dict) or value.get("v") != _VERSION or not isinstance(value.get("message"), str):
        raise ValueError(f"not an lc-compaction offload record (version {_VERSION}): {str(value)[:120]!r}")
    return message_from_json(value["message"])


_REASON = {"truncated": "truncated", "shortened": "shortened", "offloaded": "offloaded"}


def undeduplicated(message: BaseMessage, by_id: dict[str | None, BaseMessage]) -> BaseMessage:
    """The original of a deduplication note (`lc_compaction.dedup`): the note with the content of the earlier
    result it names (`by_id`: the history's messages by id), which was identical to the note's own original (a
    string character for character, a block list block for block), and its metadata without the note's mark; so
    a recall of the note's own handle answers with that content. Any other message, and a note whose earlier
    result is not whole in `by_id` (cut in place: its original is recallable under its own handle, which the
    note's text names), is returned as it is."""
    if not is_deduplicated(message):
        return message
    mark = message.response_metadata[MARK_KEY]
    source = by_id.get(mark.get("same_as"))
    if (source is None or kind(source) != TOOL or is_truncated(source) or is_shortened(source)
            or is_deduplicated(source)
            or (isinstance(source.content, str) and len(source.content) != mark.get("original_chars"))):
        return message
    meta = {k: v for k, v in message.response_metadata.items() if k != MARK_KEY}
    return message.model_copy(update={"content": source.content, "response_metadata": meta})


def own_original(message: BaseMessage, by_id: dict[str | None, BaseMessage]) -> BaseMessage:
    """The original of `message` as compaction first found it, what its store key holds: a deduplication note's
    (`undeduplicated`), or an assistant message without the progress note a fold put in its content
    (`_note.without_note`). The note is compaction's own text: its lines name calls whose steps are written
    one by one under their own keys, and it grows at every fold, so a host written with it would be another
    content under the same key at the next call that writes it (and a recall of it would answer the note); any
    other message is returned as it is."""
    if kind(message) == AI and note_lines(message):
        return without_note(cast(AIMessage, message))
    return undeduplicated(message, by_id)


def plan_offloads(original: Sequence[BaseMessage], actions: Iterable[Action], removed: Iterable[BaseMessage],
                  keys: RecallKeys | None = None, recall_chars: int | None = None) -> list[OffloadRecord]:
    """The originals a compaction result must write first: every input message it truncated, cut in place,
    previewed, removed or summarized, in the order of the actions, one record per store key (`keys`, default
    `OffloadKeys(original)`), each with `recall_chars`. Messages that were already a note, a preview or a cut
    (their original is stored, or was never kept) are skipped, as are the texts compaction wrote itself
    (`is_compaction_text`: a summary, a drop marker, a repair's placeholder, of this call or an earlier one). A
    deduplication note is written as its original, the content of the earlier result it names
    (`undeduplicated`); an assistant message holding the running request's progress note as its own content,
    without the note (`own_original`). Each record says its message's `position` in `original` and, for a tool
    result, its `call` (`call_text`). O(input + actions)."""
    by_id: dict[str | None, BaseMessage] = {m.id: m for m in original if m.id}
    position = {m.id: i for i, m in enumerate(original) if m.id}
    calls = {c["id"]: call_text(c["name"], c.get("args")) for m in original if kind(m) == AI
             for c in m.tool_calls if c.get("id")}  # type: ignore[attr-defined]
    keys = keys if keys is not None else OffloadKeys(original)
    out: dict[tuple[str, str], OffloadRecord] = {}

    def add(message: BaseMessage | None, reason: str) -> None:
        if (message is None or is_truncated(message) or is_shortened(message) or is_offloaded(message)
                or is_compaction_text(message)):
            return
        cid = cast(ToolMessage, message).tool_call_id if kind(message) == TOOL else None
        record = OffloadRecord(own_original(message, by_id), reason, keys.key(message), recall_chars,
                               position=position.get(message.id or ""), call=calls.get(cid) if cid else None)
        out.setdefault((record.kind, record.key), record)

    for action in actions:
        if action.kind in _REASON:
            for mid in action.message_ids:
                add(by_id.get(mid), _REASON[action.kind])
    summarized = {mid for a in actions if a.kind == "summarized" for mid in a.message_ids}
    for m in removed:
        add(by_id.get(m.id, m) if m.id else m, "summarized" if m.id in summarized else "removed")
    return list(out.values())


# ------------------------------------------------------------------------------------- arrival previews


def large_arrivals(messages: Sequence[BaseMessage], start: int, counts: dict[int, int], above: int | None,
                   pinned: Callable[[BaseMessage], bool]) -> set[str]:
    """Ids of the tool results among `messages[start:]` (the ones new since the previous call: O(k)) larger than
    `above` tokens (`CompactionPolicy.offload_above`; None: none; `counts`: tokens by `id(message)`, as
    `count_with_tally` fills it), that are not already a note or preview, not `pinned` by the caller
    (`CompactionPolicy.is_pinned_by_caller`), and not answers of the recall tool itself."""
    if above is None:
        return set()
    out = set()
    for m in messages[start:]:
        if (kind(m) == TOOL and counts.get(id(m), 0) > above and m.name not in LOOKUP_TOOL_NAMES
                and not (is_truncated(m) or is_shortened(m) or pinned(m))):
            out.add(m.id or "")
    return out


_GUARD = FactGuard()
"""The fact guard an arrival preview lists the identifiers of its hidden part with (the default patterns)."""


def preview(message: ToolMessage, tokens: int, key: str | None = None) -> ToolMessage:
    """A copy of `message` (same id, tool_call_id, name, status) whose content is its first `PREVIEW_HEAD_CHARS`
    and last `PREVIEW_TAIL_CHARS` characters of recall text, a line saying what was left out, and the handle; marked
    `{"kind": "truncated", "original_chars": n, "offloaded": {"tokens": tokens}}` (`tokens`: the original's);
    `key`: the store key the handle names (default: the tool_call_id). The line lists the identifiers of the part
    not shown (`facts.identifiers_beyond`, `LISTED_IDENTIFIER_CHARS` characters of them, after
    `markers.CUT_IDENTIFIERS`), which a drop marker or a progress note reads back (`markers.result_parts`) as the
    result's own, never the line's sizes, key or recall instruction (issue 20, class 12)."""
    text = recall_text(message.content)
    head, tail = text[:PREVIEW_HEAD_CHARS], text[max(PREVIEW_HEAD_CHARS, len(text) - PREVIEW_TAIL_CHARS):]
    cut = len(text) - len(head) - len(tail)
    tool = f" from {message.name}" if message.name else ""
    beyond = identifiers_beyond(_GUARD, text, f"{head}\n{tail}", message.name, LISTED_IDENTIFIER_CHARS) if cut else ""
    listed = f"{CUT_IDENTIFIERS}{beyond}" if beyond else ""
    note = (f"{OFFLOADED_LEAD}{tool} when it arrived: {len(text):,} characters, "
            f"{tokens:,} tokens; {cut:,} characters are not shown here{listed}. "
            f"{recall_hint(key or message.tool_call_id)}]\n")
    meta = dict(message.response_metadata or {})
    meta[MARK_KEY] = {"kind": "truncated", "original_chars": len(text), "offloaded": {"tokens": tokens}}
    return message.model_copy(update={"content": head + note + tail, "response_metadata": meta})


def preview_arrivals(state: LadderState, ids: set[str]) -> None:
    """Replace the tool results of `state` whose id is in `ids` (from `large_arrivals`) by their preview,
    recording each as an "offloaded" action of `OFFLOAD_STRATEGY`. A preview that would not be smaller is
    skipped."""
    if not ids:
        return
    for i, slot in enumerate(state.slots):
        m = slot.message
        if m.id in ids and kind(m) == TOOL:
            new = preview(m, slot.tokens, state.recall_key(m))  # type: ignore[arg-type]
            tokens = state.counter.count_message(new)
            if tokens < slot.tokens:
                state.replace(i, new, strategy=OFFLOAD_STRATEGY, kind="offloaded",
                              detail=f"a result of {slot.tokens:,} tokens, over offload_above", tokens=tokens)
