"""How lc-compaction marks the messages it writes, and how it recognizes them later.

Marks live in fields that chat-model integrations do not send to the provider
(`additional_kwargs` of a HumanMessage, `response_metadata` of a ToolMessage), so
they survive checkpoints and serialization (plain JSON) without changing the prompt.

- A summary message is a `HumanMessage` with
  `additional_kwargs={"lc_source": "summarization", "lc_compaction": {"kind": "summary"}}`.
  `lc_source` is the key LangChain's `SummarizationMiddleware` sets on its summary,
  so a summary written by that middleware is recognized as a summary too.
- A truncated tool result is a `ToolMessage` with
  `response_metadata["lc_compaction"] = {"kind": "truncated", "original_chars": n, ...}`.
  LangChain's `ClearToolUsesEdit` marks `response_metadata["context_editing"]["cleared"]`;
  such a result also counts as already truncated.
- A message cut in place because it alone was larger than the budget carries
  `response_metadata["lc_compaction"] = {"kind": "shortened", "original_chars": n}`.
- A pinned message (never removed, truncated or summarized) carries
  `additional_kwargs["lc_compaction"] = {"pinned": True}`; see `pin_message`.
- Where exchanges were dropped, one `AIMessage` with the fixed text `DROPPED_TEXT` and
  `response_metadata["lc_compaction"] = {"kind": "dropped"}` (`make_dropped_marker`); an `AIMessage` whose whole
  content is that text is recognized too (a history that went through a format without metadata). Where it goes
  and when: `strategies/drop.py`.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from lc_compaction._kinds import AI, TOOL, kind

MARK_KEY = "lc_compaction"
"""Key under which lc-compaction keeps its marks (`additional_kwargs` / `response_metadata`)."""

SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
"""Text that starts every summary message; the same words LangChain's SummarizationMiddleware uses."""

TRUNCATION_PREFIX = "[tool result truncated by lc-compaction"
"""Start of the one-line note that replaces a truncated tool result's content."""

DROPPED_TEXT = "[lc-compaction: earlier messages of this conversation were left out here to fit the context window]"
"""The whole text of the marker left where exchanges were dropped. Fixed, so the marker is byte-identical on every
call (the provider's prompt cache keeps what precedes and includes it); it says neither how many messages nor
which, which would change it, and the cache after it, at each further drop."""

SHORTENED_MARKER = "\n[... cut by lc-compaction: {removed:,} characters removed to fit the context window ...]"
"""Marker appended where an oversized single message was cut in place."""


def _mark(message: BaseMessage, field: str) -> dict[str, Any]:
    value = getattr(message, field, None) or {}
    mark = value.get(MARK_KEY) if isinstance(value, dict) else None
    return mark if isinstance(mark, dict) else {}


def is_summary(message: BaseMessage) -> bool:
    """True for a summary message written by lc-compaction or by LangChain's SummarizationMiddleware."""
    kwargs = message.additional_kwargs
    if not kwargs:
        return False
    if kwargs.get("lc_source") == "summarization":
        return True
    mark = kwargs.get(MARK_KEY)
    return isinstance(mark, dict) and mark.get("kind") == "summary"


def is_truncated(message: BaseMessage) -> bool:
    """True for a ToolMessage whose content was already truncated (by us or by ContextEditingMiddleware)."""
    if kind(message) != TOOL:
        return False
    meta = message.response_metadata or {}
    if _mark(message, "response_metadata").get("kind") == "truncated":
        return True
    cleared = meta.get("context_editing")
    return isinstance(cleared, dict) and bool(cleared.get("cleared"))


def is_shortened(message: BaseMessage) -> bool:
    """True for a message that was cut in place because it alone exceeded the budget."""
    return _mark(message, "response_metadata").get("kind") == "shortened"


def is_dropped_marker(message: BaseMessage) -> bool:
    """True for the marker left where exchanges were dropped (`make_dropped_marker`): an AIMessage with the mark, or
    one whose whole content is `DROPPED_TEXT` and that makes no tool call."""
    if kind(message) != AI:
        return False
    if _mark(message, "response_metadata").get("kind") == "dropped":
        return True
    return message.content == DROPPED_TEXT and not message.tool_calls  # type: ignore[attr-defined]


def make_dropped_marker(*, message_id: str | None = None) -> AIMessage:
    """The marker left where exchanges were dropped: `AIMessage(DROPPED_TEXT)` marked
    `response_metadata["lc_compaction"] = {"kind": "dropped"}` (a field no chat model sends to its provider).
    `message_id`: its id (default: a new "lc-compaction-dropped-..." id)."""
    return AIMessage(content=DROPPED_TEXT, id=message_id or f"lc-compaction-dropped-{uuid.uuid4().hex[:12]}",
                     response_metadata={MARK_KEY: {"kind": "dropped"}})


def is_pinned_mark(message: BaseMessage) -> bool:
    """True when the message carries the pin mark set by `pin_message`."""
    return bool(_mark(message, "additional_kwargs").get("pinned"))


def is_converted_system(message: BaseMessage) -> bool:
    """True for a mid-history SystemMessage that the ladder sent as a HumanMessage (not a summary)."""
    mark = _mark(message, "additional_kwargs")
    return mark.get("converted_from") == "system" and mark.get("kind") != "summary"


def pin_message(message: BaseMessage) -> BaseMessage:
    """Return a copy of `message` marked as pinned: no strategy removes, truncates or summarizes it.

    The mark is `additional_kwargs["lc_compaction"]["pinned"] = True` (JSON, survives checkpoints).
    """
    kwargs = dict(message.additional_kwargs or {})
    mark = dict(kwargs.get(MARK_KEY) or {})
    mark["pinned"] = True
    kwargs[MARK_KEY] = mark
    return message.model_copy(update={"additional_kwargs": kwargs})


def make_summary_message(text: str, *, message_id: str | None = None, role: str = "human") -> BaseMessage:
    """Build the summary message for `text` (plain text).

    Args:
        text: the summary itself, plain text.
        message_id: id of the new message (give one so graph state can replace it later).
        role: "human" (default; accepted mid-history by every provider) or "ai".

    Raises:
        ValueError: `role` is "system" (a SystemMessage after the conversation started is rejected by
            Anthropic and Gemini) or unknown.
    """
    kwargs = {"lc_source": "summarization", MARK_KEY: {"kind": "summary"}}
    content = SUMMARY_PREFIX + text
    if role == "human":
        return HumanMessage(content=content, additional_kwargs=kwargs, id=message_id)
    if role == "ai":
        return AIMessage(content=content, additional_kwargs=kwargs, id=message_id)
    raise ValueError(f"summary role must be 'human' or 'ai', got {role!r} "
                     "(a mid-history SystemMessage is rejected by Anthropic and Gemini)")


def summary_text(message: BaseMessage) -> str:
    """The summary's own text, without the fixed prefix."""
    text = message.content if isinstance(message.content, str) else message.text
    return text[len(SUMMARY_PREFIX):] if text.startswith(SUMMARY_PREFIX) else text
