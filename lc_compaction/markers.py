"""How lc-compaction marks the messages it writes, and how it recognizes them later.

Marks live in fields that chat-model integrations do not send to the provider
(`additional_kwargs` of a HumanMessage, `response_metadata` of a ToolMessage), so
they survive checkpoints and serialization (plain JSON) without changing the prompt.

- A summary message is a `HumanMessage` (or, where a user turn would break the alternation of roles, an
  `AIMessage`: see `Summarize`) with
  `additional_kwargs={"lc_source": "summarization", "lc_compaction": {"kind": "summary"}}` and a text that starts
  with `SUMMARY_PREFIX`. `lc_source` is the key LangChain's `SummarizationMiddleware` sets on its summary, and
  `SUMMARY_PREFIX` the words it starts its summary with, so a summary written by that middleware is recognized
  too, and so is any summary whose metadata was lost (a history stored as plain role/content JSON, by our CLI's
  OpenAI-format output or by a database chat history): by its text alone (`is_summary`).
- A truncated tool result is a `ToolMessage` with
  `response_metadata["lc_compaction"] = {"kind": "truncated", "original_chars": n, ...}`.
  LangChain's `ClearToolUsesEdit` marks `response_metadata["context_editing"]["cleared"]`;
  such a result also counts as already truncated.
- A message cut in place because it alone was larger than the budget carries
  `response_metadata["lc_compaction"] = {"kind": "shortened", "original_chars": n}`.
- The running request's progress note (`progress.py`): a text that starts with `PROGRESS_PREFIX`, put into an
  `AIMessage` of the running tool loop; that message carries `additional_kwargs["lc_compaction"]["progress_note"]`.
  It is recognized by its text alone too.
- A pinned message (never removed, truncated or summarized) carries
  `additional_kwargs["lc_compaction"] = {"pinned": True}`; see `pin_message`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from lc_compaction._kinds import AI, HUMAN, TOOL, kind

MARK_KEY = "lc_compaction"
"""Key under which lc-compaction keeps its marks (`additional_kwargs` / `response_metadata`)."""

SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
"""Text that starts every summary message; the same words LangChain's SummarizationMiddleware uses."""

TRUNCATION_PREFIX = "[tool result truncated by lc-compaction"
"""Start of the one-line note that replaces a truncated tool result's content."""

PROGRESS_PREFIX = ("[lc-compaction progress note: the earlier steps of this task were folded to fit the context "
                   "window; each line below is one tool call already made, with its arguments and its result's "
                   "size and start]")
"""First line of the running request's progress note (`progress.py`); one line per folded tool call follows."""

SHORTENED_MARKER = "\n[... cut by lc-compaction: {removed:,} characters removed to fit the context window ...]"
"""Marker appended where an oversized single message was cut in place."""


def _mark(message: BaseMessage, field: str) -> dict[str, Any]:
    value = getattr(message, field, None) or {}
    mark = value.get(MARK_KEY) if isinstance(value, dict) else None
    return mark if isinstance(mark, dict) else {}


_SUMMARY_LEAD = SUMMARY_PREFIX.strip()


def is_summary(message: BaseMessage) -> bool:
    """True for a summary message written by lc-compaction or by LangChain's SummarizationMiddleware: by its marks
    (`lc_source`, `lc_compaction.kind`), or, when the marks were lost, by its text: a `HumanMessage`, or an
    `AIMessage` without tool calls, whose text starts with `SUMMARY_PREFIX` (the words both write). A user who
    types those exact words first is taken for a summary too: a price of recognizing stored summaries."""
    kwargs = message.additional_kwargs
    if kwargs:
        if kwargs.get("lc_source") == "summarization":
            return True
        mark = kwargs.get(MARK_KEY)
        if isinstance(mark, dict) and mark.get("kind") == "summary":
            return True
    k = kind(message)
    if k != HUMAN and (k != AI or message.tool_calls):  # type: ignore[attr-defined]
        return False
    return _leading_text(message.content).startswith(_SUMMARY_LEAD)


def _leading_text(content: Any) -> str:
    """The start of a content's text: the string itself, or its first text block (whitespace stripped)."""
    if isinstance(content, str):
        return content.lstrip()
    for block in content:
        if isinstance(block, str):
            return block.lstrip()
        if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text"):
            text = block.get("text")
            return text.lstrip() if isinstance(text, str) else ""
    return ""


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
    from langchain_core.messages import AIMessage

    kwargs = {"lc_source": "summarization", MARK_KEY: {"kind": "summary"}}
    content = SUMMARY_PREFIX + text
    if role == "human":
        return HumanMessage(content=content, additional_kwargs=kwargs, id=message_id)
    if role == "ai":
        return AIMessage(content=content, additional_kwargs=kwargs, id=message_id)
    raise ValueError(f"summary role must be 'human' or 'ai', got {role!r} (a mid-history SystemMessage is rejected by Anthropic and Gemini)")


def summary_text(message: BaseMessage) -> str:
    """The summary's own text, without the fixed prefix."""
    text = message.content if isinstance(message.content, str) else message.text
    lead = text.lstrip()
    return lead[len(_SUMMARY_LEAD):].lstrip() if lead.startswith(_SUMMARY_LEAD) else text


def is_progress_text(text: Any) -> bool:
    """True for the text of a progress note (it starts with `PROGRESS_PREFIX`)."""
    return isinstance(text, str) and text.startswith(PROGRESS_PREFIX)
