"""The recall tool: the model reads back what compaction offloaded (`lc_compaction.offload`).

    recall_tool_result(tool_call_id: str, offset: int = 0, length: int | None = None) -> str

`tool_call_id` is the handle a truncation note, an arrival preview or a cut names (the store key: a tool call's
id, "<tool_call_id>@<message id>" when that id was reused in the thread, or the id of a cut user or assistant
message). It returns the original's recall text (the content itself when it was a string, else the JSON text of
its content blocks), or the slice `[offset, offset + length)` of it in characters. A slice is never longer than
the largest one the window allows (`length=None`, the default, asks for that one): `recall_chars` characters and
as many UTF-8 bytes, as planned by the compaction that wrote the record for its window (the record's
"recall_chars"; `lc_compaction.offload.recall_chars` says how and why the answer then never overflows the window
by itself), and never more than the tool's `max_chars`. When more remains, one line after the slice says where
the next slice starts. The tool's artifact (`ToolMessage.artifact`) says the same as JSON:
`{"tool_call_id", "offset", "end", "total_chars"}` (characters).

A repeated result made a note by deduplication (`lc_compaction.dedup`) is not in the store: its content is that of
the earlier result the note names, which is in the conversation. A recall of its handle answers from the
conversation's messages (the runtime's state): when the earlier result is there whole, one line says so and names
its tool call (sending the same content again would only repeat it); when it was cut in place, with the slices of
that result's record, under the handle its cut names. The artifact then also has `"same_as"`: that result's
handle. In view mode the state holds the repeated result whole (the note is only in the model input), and a recall
of its handle answers "not found" like any handle without a record: the note names the call to read instead.

The store and the thread come from LangChain's tool runtime (`ToolRuntime`: `runtime.store`, the graph's store,
and `runtime.config["configurable"]["thread_id"]`): no global state. Only the current thread's namespaces are
read (one batched lookup of the handle among its tool results, then its messages), so another thread's handle
gives a clear "not found", never its content.

`CompactionMiddleware(offload=True)` registers the tool itself. With `create_react_agent` or a hand-built graph,
add `recall_tool_result` to the tools (its `ToolNode` injects the runtime) and compile with a store.

From Python (no model): `load_offloaded(store, thread_id, key)` gives the original message back, byte-identical.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, cast

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.store.base import BaseStore, GetOp

from lc_compaction._drive import adrive, drive
from lc_compaction._kinds import TOOL, kind
from lc_compaction.dedup import is_deduplicated
from lc_compaction.markers import MARK_KEY, RECALL_MESSAGE_TOOL_NAME, is_shortened, is_truncated
from lc_compaction.offload import (
    DEFAULT_RECALL_CHARS,
    RECALL_TOOL_NAME,
    message_text,
    offload_namespace,
    recall_text,
    record_message,
    utf8_prefix,
)

__all__ = ["DEFAULT_RECALL_CHARS", "aload_offloaded", "aread_message", "aread_recall", "deduplicated_source",
           "load_offloaded", "read_message", "read_recall", "recall_message", "recall_message_tool", "recall_tool",
           "recall_tool_result", "runtime_thread"]

_DESCRIPTION = (
    "Read back a tool result (or message) that was truncated, cut or offloaded to save context (its note says so). "
    "Give the tool_call_id exactly as the note writes it; offset and length are in characters, for reading a long "
    "result in slices (leave length out for the largest slice that fits). Only this conversation's results can be "
    "recalled.")


def load_offloaded(store: BaseStore, thread_id: str, key: str, *, kind: str = "tool_result") -> BaseMessage | None:
    """The original message offloaded under `key` (a tool_call_id, or a message id with `kind="message"`) in
    `thread_id`'s namespace, byte-identical; None when there is none.

    Raises:
        ValueError: the stored value is not an offload record; `thread_id` or `kind` is invalid.
    """
    item = store.get(offload_namespace(thread_id, kind), key)
    return record_message(item.value) if item is not None else None


async def aload_offloaded(store: BaseStore, thread_id: str, key: str, *, kind: str = "tool_result"
                          ) -> BaseMessage | None:
    """Async twin of `load_offloaded`."""
    item = await store.aget(offload_namespace(thread_id, kind), key)
    return record_message(item.value) if item is not None else None


def _gets(thread_id: str, key: str) -> list[GetOp]:
    """The lookups of a recall: the handle among the thread's tool results, then among its messages."""
    return [GetOp(offload_namespace(thread_id, kind), key) for kind in ("tool_result", "message")]


def _found(items: list[Any], message_id: str | None = None) -> dict[str, Any] | None:
    """The first record found (with `message_id`: only the record of that message)."""
    return next((item.value for item in items if item is not None
                 and (message_id is None or item.value.get("message_id") == message_id)), None)


def _handles(messages: Sequence[BaseMessage]) -> dict[int, str]:
    """The handle of each tool result of `messages`, by position: its tool_call_id, or "<tool_call_id>@<message
    id>" when an earlier result has that tool_call_id (as `lc_compaction.offload.OffloadKeys` keys them)."""
    seen: set[str] = set()
    out: dict[int, str] = {}
    for i, m in enumerate(messages):
        if kind(m) == TOOL:
            cid = cast(ToolMessage, m).tool_call_id
            out[i] = f"{cid}@{m.id}" if cid in seen else cid
            seen.add(cid)
    return out


def deduplicated_source(messages: Sequence[BaseMessage] | None, key: str) -> tuple[BaseMessage, str] | None:
    """(the earlier result, its handle) that the deduplication note with handle `key` names, when `messages` (the
    conversation) holds such a note and that result; else None. O(len(messages))."""
    if not messages:
        return None
    handles = _handles(messages)
    note = next((messages[i] for i, h in handles.items() if is_deduplicated(messages[i])
                 and key in (h, f"{cast(ToolMessage, messages[i]).tool_call_id}@{messages[i].id}")), None)
    if note is None:
        return None
    same = note.response_metadata[MARK_KEY].get("same_as")
    return next(((messages[i], h) for i, h in handles.items() if messages[i].id == same), None)


def _pointer(key: str, source: BaseMessage, handle: str) -> tuple[str, dict[str, Any]]:
    """The answer for a deduplicated result whose earlier copy is whole in the conversation."""
    text = recall_text(source.content)
    tool = f" of {source.name}" if source.name else ""
    return (f"[{RECALL_TOOL_NAME}: the result of tool call {key} is identical to the result{tool} for tool call "
            f"{handle}, which is in this conversation above, whole ({len(text):,} characters): read it there]",
            {"tool_call_id": key, "offset": 0, "end": 0, "total_chars": len(text), "same_as": handle})


def _source_gets(thread_id: str, source: BaseMessage) -> list[GetOp]:
    """The lookups of a cut earlier copy's record: under its tool_call_id, and under its disambiguated handle."""
    cid = cast(ToolMessage, source).tool_call_id
    return [GetOp(offload_namespace(thread_id, "tool_result"), k) for k in (cid, f"{cid}@{source.id}")]


def _answer(value: dict[str, Any] | None, tool_call_id: str, offset: int, length: int | None, max_chars: int,
            same_as: str | None = None, tool: str = RECALL_TOOL_NAME) -> tuple[str, dict[str, Any]]:
    handle = "tool_call_id" if tool == RECALL_TOOL_NAME else "message_id"
    info: dict[str, Any] = {handle: tool_call_id, "offset": offset, "end": offset, "total_chars": None,
                            **({"same_as": same_as} if same_as is not None else {})}
    if value is None:
        what = "offloaded result" if tool == RECALL_TOOL_NAME else "kept message"
        return (f"[{tool}: no {what} with {handle} {tool_call_id!r} in this conversation (not found)]", info)
    message = record_message(value)
    text = recall_text(message.content) if tool == RECALL_TOOL_NAME else message_text(message)
    info["total_chars"] = len(text)
    planned = value.get("recall_chars")
    cap = min(max_chars, planned) if isinstance(planned, int) and planned > 0 else max_chars
    if length is None:
        length = cap
    if offset < 0 or length <= 0:
        return (f"[{tool}: offset must be >= 0 and length > 0 (characters); got offset={offset}, "
                f"length={length}]", info)
    if offset >= len(text) and text:
        what = "result" if tool == RECALL_TOOL_NAME else "message"
        return f"[{tool}: offset {offset:,} is past the end: the {what} has {len(text):,} characters]", info
    part = utf8_prefix(text[offset:offset + min(length, cap)], cap)
    end = offset + len(part)
    info["end"] = end
    if end < len(text):
        part += (f"\n[{tool}: characters {offset:,}-{end:,} of {len(text):,} shown; call again with "
                 f"offset={end} for more]")
    return part, info


def read_recall(store: BaseStore | None, thread_id: str | None, tool_call_id: str, offset: int = 0,
                length: int | None = None, *, max_chars: int = DEFAULT_RECALL_CHARS,
                messages: Sequence[BaseMessage] | None = None) -> tuple[str, dict[str, Any]]:
    """What the tool answers, and its artifact (see the module docstring): the slice (`offset`, `length` in
    characters; `length=None`: the largest allowed), or a one-line reason (not found, no store, no thread, bad
    offset). `messages`: the conversation (the tool's runtime state), where a handle without a record may name a
    deduplicated result (see the module docstring). Never raises for a missing record."""
    if store is None:
        return (f"[{RECALL_TOOL_NAME}: this agent has no store, so nothing was offloaded]",
                {"tool_call_id": tool_call_id})
    if not thread_id:
        return (f"[{RECALL_TOOL_NAME}: no thread id in this run's config, so nothing can be recalled]",
                {"tool_call_id": tool_call_id})
    return drive(_read(thread_id, tool_call_id, offset, length, max_chars, messages), store.batch)


async def aread_recall(store: BaseStore | None, thread_id: str | None, tool_call_id: str, offset: int = 0,
                       length: int | None = None, *, max_chars: int = DEFAULT_RECALL_CHARS,
                       messages: Sequence[BaseMessage] | None = None) -> tuple[str, dict[str, Any]]:
    """Async twin of `read_recall`."""
    if store is None or not thread_id:
        return read_recall(store, thread_id, tool_call_id, offset, length, max_chars=max_chars)
    return await adrive(_read(thread_id, tool_call_id, offset, length, max_chars, messages), store.abatch)


def _read(thread_id: str, tool_call_id: str, offset: int, length: int | None, max_chars: int,
          messages: Sequence[BaseMessage] | None) -> Generator[list[GetOp], list[Any], tuple[str, dict[str, Any]]]:
    """`read_recall`'s body, one for both drivers (`_drive.py`): yields each batch of store reads and receives
    its results."""
    value = _found((yield _gets(thread_id, tool_call_id)))
    found = deduplicated_source(messages, tool_call_id) if value is None else None
    if found is None:
        return _answer(value, tool_call_id, offset, length, max_chars)
    source, handle = found
    if not (is_truncated(source) or is_shortened(source)):
        return _pointer(tool_call_id, source, handle)
    return _answer(_found((yield _source_gets(thread_id, source)), source.id), tool_call_id, offset, length,
                   max_chars, same_as=handle)


def runtime_thread(runtime: ToolRuntime) -> str | None:
    thread = ((runtime.config or {}).get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def _messages(runtime: ToolRuntime) -> Sequence[BaseMessage] | None:
    """The conversation's messages in the runtime's state (a dict or an object with `messages`), if any."""
    state = runtime.state
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    return messages if isinstance(messages, list) else None


def recall_tool(*, max_chars: int = DEFAULT_RECALL_CHARS, name: str = RECALL_TOOL_NAME) -> BaseTool:
    """Build the recall tool (sync and async) whose slices are at most `max_chars` characters (and UTF-8 bytes),
    less when the record says its window allows less (see the module docstring).

    Raises:
        ValueError: `max_chars` is not a positive int.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ValueError(f"max_chars: must be a positive int (characters), got {max_chars!r}")

    def recall(tool_call_id: str, runtime: ToolRuntime, offset: int = 0, length: int | None = None
               ) -> tuple[str, dict[str, Any]]:
        return read_recall(runtime.store, runtime_thread(runtime), tool_call_id, offset, length, max_chars=max_chars,
                           messages=_messages(runtime))

    async def arecall(tool_call_id: str, runtime: ToolRuntime, offset: int = 0, length: int | None = None
                      ) -> tuple[str, dict[str, Any]]:
        return await aread_recall(runtime.store, runtime_thread(runtime), tool_call_id, offset, length,
                                  max_chars=max_chars, messages=_messages(runtime))

    return StructuredTool.from_function(func=recall, coroutine=arecall, name=name, description=_DESCRIPTION,
                                        response_format="content_and_artifact")


recall_tool_result = recall_tool()
"""The recall tool, slices of at most `DEFAULT_RECALL_CHARS` characters (less where the window needs it)."""



# ------------------------------------------------------------------------------------------ recall_message

_MESSAGE_DESCRIPTION = (
    "Read back a user or assistant message that was left out or summarized to save context, whole or in slices: "
    "give the message_id exactly as a search_compacted_history hit names it; offset and length are in characters "
    "(leave length out for the largest slice that fits). Only this conversation's messages can be read.")


def read_message(store: BaseStore | None, thread_id: str | None, message_id: str, offset: int = 0,
                 length: int | None = None, *, max_chars: int = DEFAULT_RECALL_CHARS) -> tuple[str, dict[str, Any]]:
    """What `recall_message` answers, and its artifact `{"message_id", "offset", "end", "total_chars"}`
    (characters): the slice of the message kept under `message_id` in `thread_id`'s "message" namespace, sized as
    `read_recall` sizes its slices (its text: `offload.message_text`, an assistant message's tool calls
    included), or a one-line reason (not found, no store, no thread, bad offset). Never
    raises for a missing record."""
    if store is None or not thread_id:
        return _no_store(store, message_id)
    item = store.get(offload_namespace(thread_id, "message"), message_id)
    return _answer(item.value if item is not None else None, message_id, offset, length, max_chars,
                   tool=RECALL_MESSAGE_TOOL_NAME)


async def aread_message(store: BaseStore | None, thread_id: str | None, message_id: str, offset: int = 0,
                        length: int | None = None, *, max_chars: int = DEFAULT_RECALL_CHARS
                        ) -> tuple[str, dict[str, Any]]:
    """Async twin of `read_message`."""
    if store is None or not thread_id:
        return _no_store(store, message_id)
    item = await store.aget(offload_namespace(thread_id, "message"), message_id)
    return _answer(item.value if item is not None else None, message_id, offset, length, max_chars,
                   tool=RECALL_MESSAGE_TOOL_NAME)


def _no_store(store: BaseStore | None, message_id: str) -> tuple[str, dict[str, Any]]:
    if store is None:
        return (f"[{RECALL_MESSAGE_TOOL_NAME}: this agent has no store, so nothing was kept]",
                {"message_id": message_id})
    return (f"[{RECALL_MESSAGE_TOOL_NAME}: no thread id in this run's config, so nothing can be read back]",
            {"message_id": message_id})


def recall_message_tool(*, max_chars: int = DEFAULT_RECALL_CHARS, name: str = RECALL_MESSAGE_TOOL_NAME) -> BaseTool:
    """Build the `recall_message` tool (sync and async): reads back a user or assistant message compaction took
    out, by its message id, in slices of at most `max_chars` characters (and UTF-8 bytes), less when the record
    says its window allows less (as `recall_tool`). Registered by `CompactionMiddleware(offload=True)`; with the
    node, add it to the agent's tools.

    Raises:
        ValueError: `max_chars` is not a positive int.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ValueError(f"max_chars: must be a positive int (characters), got {max_chars!r}")

    def recall(message_id: str, runtime: ToolRuntime, offset: int = 0, length: int | None = None
               ) -> tuple[str, dict[str, Any]]:
        return read_message(runtime.store, runtime_thread(runtime), message_id, offset, length, max_chars=max_chars)

    async def arecall(message_id: str, runtime: ToolRuntime, offset: int = 0, length: int | None = None
                      ) -> tuple[str, dict[str, Any]]:
        return await aread_message(runtime.store, runtime_thread(runtime), message_id, offset, length,
                                   max_chars=max_chars)

    return StructuredTool.from_function(func=recall, coroutine=arecall, name=name, description=_MESSAGE_DESCRIPTION,
                                        response_format="content_and_artifact")


recall_message = recall_message_tool()
"""The `recall_message` tool, slices of at most `DEFAULT_RECALL_CHARS` characters (less where the window needs it)."""
