"""Content blocks: the one home of their kinds and of how their text is read.

A message's ``content`` is a string or a list of blocks; a block is a bare string or a dict whose ``"type"`` names
its kind.  The kinds below cover the formats LangChain passes through: its own v1 standard blocks
(``langchain_core.messages.content``: ``text``, ``reasoning``, ``tool_call``, ``image``, ``file``, ``audio``,
``video``, ``text-plain``, ``non_standard``, ...), Anthropic's (``thinking``, ``redacted_thinking``, ``tool_use``,
``tool_result``, ``document``) and OpenAI's Chat Completions and Responses formats (``image_url``,
``input_text`` / ``output_text``, ``input_image``, ``input_file``, ``input_audio``, ``function_call``,
``function_call_output``, ``refusal``).  The counters (``tokens.py``), the last resort (``shorten.py``), the ladder's
pins (``ladder.py``) and the text the strategies read (truncation notes, the summarizer's transcript, the ledger,
the fact guard, reports) all take their rules from here.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage

# ------------------------------------------------------------------------------------------------ the block kinds

OUTPUT_TEXT_BLOCKS = frozenset({"text", "output_text"})
"""Text a model writes: ``text`` (LangChain, Anthropic), ``output_text`` (OpenAI Responses)."""

TEXT_BLOCKS = OUTPUT_TEXT_BLOCKS | {"input_text"}
"""Plain text blocks; ``input_text`` is OpenAI Responses' type for text sent to the model."""

REASONING_BLOCKS = frozenset({"reasoning", "thinking"})
"""Visible reasoning: LangChain v1 / OpenAI ``reasoning``, Anthropic ``thinking``."""

OPAQUE_REASONING_BLOCKS = frozenset({"redacted_thinking"})
"""Reasoning whose payload is provider-encrypted (Anthropic ``redacted_thinking``): no readable text."""

THINKING_BLOCKS = REASONING_BLOCKS | OPAQUE_REASONING_BLOCKS
"""Every reasoning block, visible or not (see :func:`starts_with_thinking`)."""

TOOL_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "server_tool_use", "tool_call_chunk",
                              "invalid_tool_call"})
"""Blocks that make a tool call: Anthropic ``tool_use`` / ``server_tool_use``, LangChain v1 ``tool_call`` (and
its chunk and invalid forms), OpenAI Responses ``function_call``."""

TOOL_RESULT_BLOCKS = frozenset({"tool_result", "function_call_output"})
"""Blocks that carry a tool's result: Anthropic ``tool_result``, OpenAI Responses ``function_call_output``."""

IMAGE_BLOCKS = frozenset({"image", "image_url", "input_image"})
"""Images: LangChain v1 / Anthropic ``image``, OpenAI Chat ``image_url``, OpenAI Responses ``input_image``."""

FILE_BLOCKS = frozenset({"file", "input_file", "document", "audio", "input_audio", "video"})
"""Media other than images: files, documents (PDFs, or plain text in a ``document`` whose source is text), audio,
video."""

PLAIN_TEXT_FILE_BLOCKS = frozenset({"text-plain"})
"""A file whose text is in the block (LangChain v1 ``PlainTextContentBlock``)."""

MEDIA_BLOCKS = IMAGE_BLOCKS | FILE_BLOCKS
"""Media blocks (images, files, documents, audio, video): whole payloads, not text (see :func:`is_media`)."""

KNOWN_BLOCKS = (TEXT_BLOCKS | THINKING_BLOCKS | TOOL_CALL_BLOCKS | TOOL_RESULT_BLOCKS | MEDIA_BLOCKS
                | PLAIN_TEXT_FILE_BLOCKS | {"refusal", "non_standard"})
"""Every kind above, plus OpenAI's ``refusal`` and LangChain v1's ``non_standard`` wrapper."""



def block_type(block: Any) -> str | None:
    """The kind of a block: its ``"type"`` when it is a dict with a string type, else None."""
    if isinstance(block, dict):
        btype = block.get("type")
        if isinstance(btype, str):
            return btype
    return None


# ------------------------------------------------------------------------------------------------ binary payloads

_BINARY_MIN_CHARS = 256
_BINARY_RE = re.compile(r"[A-Za-z0-9+/_=-]+")


def looks_binary(s: str) -> bool:
    """A ``data:`` URL, or a string of at least 256 characters with no whitespace, made only of base64 (or
    base64url) characters: a payload, never read as text."""
    if s.startswith("data:"):
        return True
    return len(s) >= _BINARY_MIN_CHARS and _BINARY_RE.fullmatch(s) is not None


# ------------------------------------------------------------------------------------------------ text of a content


def content_text(content: object) -> str:
    """Readable text of a message content: the string itself, or the parts of a block list joined by newlines.

    A bare string is itself, a dict block with a string ``text`` is that text, any other dict block is named by
    its type (``"[image]"``, ``"[block]"`` when it has none: never dumped, so no base64), anything else is
    ``str()`` of it.
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(f"[{block.get('type', 'block')}]")
        else:
            parts.append(str(block))
    return "\n".join(parts)


def reply_text(message: BaseMessage) -> str:
    """The text of a model reply: the string content, or its bare strings and :data:`OUTPUT_TEXT_BLOCKS` joined
    (no separator).  Reasoning blocks, signatures, tool-use blocks and anything else are left out."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            parts.append(block)
        elif block_type(block) in OUTPUT_TEXT_BLOCKS and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def block_text(block: Any) -> str | None:
    """The editable text of a block, or None: a bare string, a text block's ``text``, or the source data of a
    ``document`` whose source is plain text (``{"type": "text", "data": ...}``, Anthropic's format)."""
    if isinstance(block, str):
        return block
    btype = block_type(block)
    if btype in TEXT_BLOCKS and isinstance(block.get("text"), str):
        return block["text"]
    source = block.get("source") if btype == "document" else None
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return source["data"]
    return None


def with_block_text(block: Any, text: str) -> Any:
    """A copy of ``block`` (one for which :func:`block_text` is not None) whose text is ``text``."""
    if isinstance(block, str):
        return text
    if "text" in block:
        return {**block, "text": text}
    return {**block, "source": {**block["source"], "data": text}}


# ------------------------------------------------------------------------------------------------ media, thinking


def is_media(block: Any) -> bool:
    """True for a media block (:data:`MEDIA_BLOCKS`) that carries no editable text: an image, file, audio or
    video block, or a document that is not plain text."""
    return block_type(block) in MEDIA_BLOCKS and block_text(block) is None


def starts_with_thinking(message: BaseMessage) -> bool:
    """True when ``message`` is an AI message whose content is a block list that starts with a reasoning block
    (:data:`THINKING_BLOCKS`)."""
    content = message.content
    if message.type != "ai" or not isinstance(content, list) or not content:
        return False
    return block_type(content[0]) in THINKING_BLOCKS


__all__ = [
    "FILE_BLOCKS",
    "IMAGE_BLOCKS",
    "KNOWN_BLOCKS",
    "MEDIA_BLOCKS",
    "OPAQUE_REASONING_BLOCKS",
    "OUTPUT_TEXT_BLOCKS",
    "PLAIN_TEXT_FILE_BLOCKS",
    "REASONING_BLOCKS",
    "TEXT_BLOCKS",
    "THINKING_BLOCKS",
    "TOOL_CALL_BLOCKS",
    "TOOL_RESULT_BLOCKS",
    "block_text",
    "block_type",
    "content_text",
    "is_media",
    "looks_binary",
    "reply_text",
    "starts_with_thinking",
    "with_block_text",
]
