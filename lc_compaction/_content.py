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

import json
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

FILE_BLOCKS = frozenset({"file", "input_file", "document", "audio", "input_audio", "video", "media"})
"""Media other than images: files, documents (PDFs, or plain text in a ``document`` whose source is text), audio,
video, and the Gemini (VertexAI) ``media`` block (``{"type": "media", "mime_type": ..., "data" | "file_uri": ...}``,
which `langchain_core.messages.utils` reads too; an image when its ``mime_type`` says so, `is_image_media`)."""


def is_image_media(block: dict[str, Any]) -> bool:
    """A Gemini ``media`` block that holds an image (its ``mime_type`` is ``image/...``): counted as an image."""
    mime = block.get("mime_type")
    return block.get("type") == "media" and isinstance(mime, str) and mime.lower().startswith("image/")

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

    A bare string is itself, a dict block with a string ``text`` is that text, a media block is named by its type
    and its reference (:func:`media_reference`: ``"[image: https://example.com/a.png]"``, ``"[file: report.pdf,
    file id file-abc]"``, ``"[image: inline image/png data]"`` for base64 or a ``data:`` URL), any other dict block
    by its type (``"[thinking]"``, ``"[block]"`` when it has none): never dumped, so no base64; a tool-result block
    (Anthropic ``tool_result``) by the text of its own content. Anything else is
    ``str()`` of it. This is the text the summarizer's transcript, the ledger, the fact guard (which keeps URLs)
    and the truncation notes read, so a media block's URL survives a summary as a reference.
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
            elif block.get("type") in TOOL_RESULT_BLOCKS and isinstance(block.get("content"), (str, list)):
                parts.append(content_text(block["content"]))  # a tool result's own blocks (media named too)
            else:
                kind = block.get("type", "block")
                ref = media_reference(block) if kind in MEDIA_BLOCKS else None
                parts.append(f"[{kind}: {ref}]" if ref else f"[{kind}]")
        else:
            parts.append(str(block))
    return "\n".join(parts)


def _data_url_type(url: str) -> str:
    """The media type of a ``data:`` URL (``"image/png"`` for ``data:image/png;base64,...``), or ""."""
    header = url[5:].split(",", 1)[0]
    return header.split(";", 1)[0].strip()


def media_reference(block: Any) -> str | None:
    """What names a media block's content without its payload, or None when the block holds nothing to name.

    - a URL (``image_url.url`` or a string ``image_url`` (OpenAI Chat / Responses), ``url`` (LangChain v1 and v0),
      ``file_url``, an Anthropic ``source`` of type ``url``) as it is;
    - a file id (``file_id``, ``file.file_id``, an Anthropic ``source`` of type ``file``) as ``file id <id>``;
    - inline data (base64: ``base64``, ``data``, ``file_data``, ``file.file_data``, ``input_audio.data``, an
      Anthropic ``source`` of type ``base64``, or a ``data:`` URL) by its media type only: ``inline image/png
      data`` (never the payload);
    - a file name or title (``filename``, ``file.filename``, ``title``) before any of these.
    Several parts are joined with ", ".
    """
    if not isinstance(block, dict):
        return None
    def field(key: str) -> dict[str, Any]:
        value = block.get(key)
        return value if isinstance(value, dict) else {}

    file, source, audio = field("file"), field("source"), field("input_audio")
    image_url = block.get("image_url")
    parts: list[str] = []
    for name in (block.get("filename"), file.get("filename"), block.get("title")):
        if isinstance(name, str) and name.strip():
            parts.append(name.strip())
            break
    urls = [image_url.get("url") if isinstance(image_url, dict) else image_url, block.get("url"),
            block.get("file_url"), source.get("url") if source.get("type") == "url" else None]
    ids = [block.get("file_id"), file.get("file_id"), source.get("file_id") if source.get("type") == "file" else None]
    inline = [block.get("base64"), block.get("data"), block.get("file_data"), file.get("file_data"), audio.get("data"),
              source.get("data") if source.get("type", "base64") == "base64" else None]
    mime = next((m for m in (block.get("mime_type"), source.get("media_type"), file.get("mime_type"))
                 if isinstance(m, str) and m), "")
    if not mime and isinstance(audio.get("format"), str):
        mime = f"audio/{audio['format']}"
    for url in urls:
        if isinstance(url, str) and url:
            if url.startswith("data:"):
                inline.insert(0, url)
            else:
                parts.append(url)
    for fid in ids:
        if isinstance(fid, str) and fid:
            parts.append(f"file id {fid}")
    for data in inline:
        if isinstance(data, str) and data:
            kind = _data_url_type(data) if data.startswith("data:") else ""
            parts.append(f"inline {kind or mime or 'binary'} data".replace("  ", " "))
            break
    return ", ".join(dict.fromkeys(parts)) or None


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
    text = block.get("text") if btype in TEXT_BLOCKS else None
    if isinstance(text, str):
        return text
    source = block.get("source") if btype == "document" else None
    data = source.get("data") if isinstance(source, dict) and source.get("type") == "text" else None
    return data if isinstance(data, str) else None


def with_block_text(block: Any, text: str) -> Any:
    """A copy of ``block`` (one for which :func:`block_text` is not None) whose text is ``text``."""
    if isinstance(block, str):
        return text
    if "text" in block:
        return {**block, "text": text}
    return {**block, "source": {**block["source"], "data": text}}


# ------------------------------------------------------------------------------------------------ tool calls


def arguments_text(args: Any) -> str:
    """A tool call's arguments as the wire carries them (langchain-openai's ``_lc_tool_call_to_openai_tool_call``
    and ``_lc_invalid_tool_call_to_openai_tool_call``): a string (the raw arguments of an invalid call) as it is,
    None as ``""``, anything else ``json.dumps(args, ensure_ascii=False)`` (values JSON cannot encode as their
    ``str()``)."""
    if isinstance(args, str):
        return args
    if args is None:
        return ""
    try:
        return json.dumps(args, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(args)


def is_invalid_call(call: Any) -> bool:
    """True for an entry of ``AIMessage.invalid_tool_calls`` (a call whose arguments did not parse: its ``args`` is
    the raw string, and it carries an ``error``)."""
    return isinstance(call, dict) and (call.get("type") == "invalid_tool_call" or "error" in call)


# ------------------------------------------------------------------------------------------------ failed calls

FAILURE_SCAN_CHARS = 4_000
"""Characters read at each end of a tool result to find its failure (`failure_in_text`): a shell tool prints its
exit code last, a Python tool its traceback's header first or last; the scan stays bounded on a long result."""

_EXIT_CODE = re.compile(
    r"\b(?:exit(?:ed)?(?: with)?[ _-]?(?:code|status)|return[ _-]?code|returncode|exitcode)\b[\"']?\s*"
    r"(?:[:=]|is|of)?\s*[\"']?(-?\d+)", re.IGNORECASE)
_EXIT_WORDS = ("exit", "return")
"""Every `_EXIT_CODE` match contains one of these, case-insensitively: a text without them has no exit code, which
`str.find` on the lower-cased text tells at C speed (the expression tried at every position of a long result cost
most of a truncation note)."""
_DOTTED_I = str.maketrans({"\u0130": "i", "\u0131": "i"})
"""The two non-ASCII characters that `re.IGNORECASE` matches with an `i` (İ and ı; the letters of `_EXIT_WORDS`
have no other such partner): folded before the check, so it answers as the expression does."""
_TRACEBACK = "Traceback (most recent call last)"
_ERROR_START = re.compile(r"\s*error\b", re.IGNORECASE)

FAILURE_RE = re.compile(r"error(?: \((?:exit code -?\d+|traceback)\))?")
"""What `tool_failure` returns, as a pattern (the note lines and truncation notes that carry it are read back with
it)."""


def _exit_codes(text: str, low: str) -> list[str]:
    """`_EXIT_CODE.findall(text)`, the same codes: the expression is tried (`match`) only where `low` (`text`
    lower-cased as `failure_in_text` does, the same length) has one of `_EXIT_WORDS`, where every match starts, left
    to right, from the end of the last match on (a `low` of another length, were lower-casing to lengthen a
    character: the whole text searched)."""
    if len(low) != len(text):
        return _EXIT_CODE.findall(text) if any(w in low for w in _EXIT_WORDS) else []
    starts = []
    for word in _EXIT_WORDS:
        at = low.find(word)
        while at >= 0:
            starts.append(at)
            at = low.find(word, at + 1)
    codes = []
    end = 0
    for at in sorted(starts):
        if at >= end and (m := _EXIT_CODE.match(text, at)) is not None:
            codes.append(m.group(1))
            end = m.end()
    return codes


def failure_in_text(text: str) -> str | None:
    """How a tool result's text says that the call failed, or None: ``"exit code N"`` for the last exit code or
    return code it reports when that is not 0 (``exit code: 2``, ``"returncode": 1``, ``exited with code 127``,
    ``Exit status 1``), ``"traceback"`` for a Python traceback (``Traceback (most recent call last)``), ``"error"``
    when it starts with the word "error" (LangChain's ``ToolNode`` error results: ``"Error: ..."``). Only the
    first and the last `FAILURE_SCAN_CHARS` characters are read."""
    if len(text) > 2 * FAILURE_SCAN_CHARS:
        text = f"{text[:FAILURE_SCAN_CHARS]}\n{text[-FAILURE_SCAN_CHARS:]}"
    low = (text if text.isascii() else text.translate(_DOTTED_I)).lower()
    codes = _exit_codes(text, low)
    if codes and int(codes[-1]) != 0:
        return f"exit code {int(codes[-1])}"
    if _TRACEBACK in text:
        return "traceback"
    return "error" if _ERROR_START.match(text) else None


def tool_failure(message: BaseMessage, text: str | None = None) -> str | None:
    """How a tool result says its call failed, as the note lines and truncation notes write it: ``"error"``
    (``ToolMessage.status == "error"``, or a text that starts with "error"), ``"error (exit code N)"`` or ``"error
    (traceback)"`` (`failure_in_text`, on ``text`` when given, else the content's text); None for a success.
    Matches `FAILURE_RE`."""
    detail = failure_in_text(content_text(message.content) if text is None else text)
    if detail is None and getattr(message, "status", None) != "error":
        return None
    return "error" if detail in (None, "error") else f"error ({detail})"


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


# ------------------------------------------------------------------------------------------------ text we insert

_RESPONSES_REASONING_KEYS = ("summary", "encrypted_content")


def is_paired_reasoning(block: Any) -> bool:
    """True for an OpenAI Responses reasoning item in a content list: a ``reasoning`` block with the Responses API's
    marks (an ``rs_`` id, a ``summary`` list, ``encrypted_content``, the last also in LangChain v1's ``extras``).

    The Responses API wants such an item directly before the item the model wrote after it (a ``function_call`` or
    an assistant ``message``): "Item 'rs_...' of type 'reasoning' was provided without its required following
    item". langchain-openai sends an AIMessage's blocks as input items in their order
    (``_construct_responses_api_input``), so nothing may be put between the two. Any other reasoning block
    (Anthropic's ``thinking`` and ``redacted_thinking``, a v1 ``reasoning`` without those marks) is thinking that
    must come first in its message instead."""
    if block_type(block) != "reasoning":
        return False
    rid = block.get("id")
    if isinstance(rid, str) and rid.startswith("rs_"):
        return True
    extras = block.get("extras")
    return any(key in block for key in _RESPONSES_REASONING_KEYS) or (
        isinstance(extras, dict) and "encrypted_content" in extras)


def insertion_index(content: list[Any]) -> int:
    """Where a text block we add goes in an AI message's block list: after its leading thinking blocks (Anthropic
    requires a message's thinking first), which is before any Responses reasoning item (`is_paired_reasoning`:
    kept directly before the item it pairs with)."""
    i = 0
    while i < len(content) and block_type(content[i]) in THINKING_BLOCKS and not is_paired_reasoning(content[i]):
        i += 1
    return i


def _v03_reasoning(message: BaseMessage) -> bool:
    """langchain-openai's v0.3 layout (``output_version="v0"``): the Responses reasoning item is kept in
    ``additional_kwargs["reasoning"]`` beside a block-list content."""
    return isinstance(message.additional_kwargs.get("reasoning"), dict) and isinstance(message.content, list)


def last_text_block(message: BaseMessage, text: str) -> dict[str, Any]:
    """A block holding `text`, to go last in `message`'s block list (a cut's marker): a ``text`` block, or, in
    langchain-openai's v0.3 layout when the message has no ``text`` block of its own, an ``output_text`` block,
    which that layout sends after the calls (a ``text`` block would be sent between the reasoning item and the
    call it pairs with: `with_text_first`)."""
    if _v03_reasoning(message) and not any(block_type(b) == "text" for b in message.content):
        return {"type": "output_text", "text": text}
    return {"type": "text", "text": text}


def with_text_first(message: BaseMessage, text: str, separator: str = "\n\n") -> Any:
    """`message.content` with `text` put in as the first text the model reads, where the providers' order rules
    still hold (an AI message; the other blocks are kept as they are, in their order):

    - a string content: `text`, then `separator` and the content (when not empty);
    - a block list: a text block at `insertion_index` (after leading thinking, before a Responses reasoning item);
    - langchain-openai's v0.3 layout (`_v03_reasoning`): langchain-openai sends its reasoning item first, then every
      ``text`` block, then the calls (``langchain_core``'s ``_convert_from_v03_ai_message``), so a text block sits
      between the reasoning and what it pairs with unless the model wrote text there: the text then goes after the
      message's last text block (the item the reasoning pairs with stays right after it); with no text of its own,
      it goes last as an ``output_text`` block (the Responses API's own type for assistant text), which that
      layout sends after the calls."""
    content = message.content
    if isinstance(content, str):
        return text + (separator + content if content else "")
    block = {"type": "text", "text": text}
    if _v03_reasoning(message):
        last = max((i for i, b in enumerate(content) if block_type(b) == "text"), default=None)
        if last is None:
            return [*content, {"type": "output_text", "text": text}]
        return [*content[:last + 1], block, *content[last + 1:]]
    at = insertion_index(content)
    return [*content[:at], block, *content[at:]]


__all__ = [
    "FAILURE_RE",
    "FAILURE_SCAN_CHARS",
    "FILE_BLOCKS",
    "IMAGE_BLOCKS",
    "KNOWN_BLOCKS",
    "MEDIA_BLOCKS",
    "is_image_media",
    "OPAQUE_REASONING_BLOCKS",
    "OUTPUT_TEXT_BLOCKS",
    "PLAIN_TEXT_FILE_BLOCKS",
    "REASONING_BLOCKS",
    "TEXT_BLOCKS",
    "THINKING_BLOCKS",
    "TOOL_CALL_BLOCKS",
    "TOOL_RESULT_BLOCKS",
    "arguments_text",
    "block_text",
    "block_type",
    "content_text",
    "failure_in_text",
    "insertion_index",
    "is_invalid_call",
    "is_media",
    "is_paired_reasoning",
    "last_text_block",
    "media_reference",
    "looks_binary",
    "reply_text",
    "starts_with_thinking",
    "tool_failure",
    "with_block_text",
    "with_text_first",
]
