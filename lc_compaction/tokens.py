"""Token counting: the :class:`TokenCounter` protocol, exact and approximate counters, and their cache.

Every count in this module is in **tokens** unless a name says otherwise (``chars_per_token`` is characters per
token).  A history costs ``sum(count_message(m)) + reply_overhead``; tool schemas sent beside the messages cost
``count_tools(tools)``; the compaction core adds those two.

What one message costs (the same structure for the exact and the approximate counter; only the cost of a piece of
text differs):

* ``MESSAGE_OVERHEAD_TOKENS`` (3) + the role's text (``system``/``user``/``assistant``/``tool``) + the name's text
  and ``NAME_OVERHEAD_TOKENS`` (1) when ``name`` is set -- the OpenAI cookbook's rules (see the constants).
* the content: a string is encoded; a list of blocks is counted block by block (text, reasoning, tool-use, image,
  file; a block of an unknown kind by its JSON text, keys included: see :meth:`StructuredCounter.count_content`).
  Images and files cost a bounded amount, never anything proportional to their base64 size; a PDF costs its pages
  (read from its bytes) times the per-page figure of the model's provider (`pdf_tokens_per_page`).
* an AI message's ``tool_calls``: name + the arguments as langchain-openai sends them (``json.dumps(args,
  ensure_ascii=False)``) + ``TOOL_CALL_OVERHEAD_TOKENS`` per call
  (``invalid_tool_calls``: name + the raw argument string + the same overhead).  A content block that repeats a
  tool call (Anthropic ``tool_use``, LangChain v1 ``tool_call``, OpenAI Responses ``function_call``, same id) is
  skipped, so the call is counted once.
* a tool message's ``tool_call_id`` is not counted (it is not rendered into the model's context as text).

Per-message results are cached (bounded LRU), so counting a history that grew by k messages tokenizes k messages.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.messages import BaseMessage, HumanMessage

from lc_compaction._content import (
    FILE_BLOCKS,
    IMAGE_BLOCKS,
    KNOWN_BLOCKS,
    OPAQUE_REASONING_BLOCKS,
    PLAIN_TEXT_FILE_BLOCKS,
    REASONING_BLOCKS,
    TEXT_BLOCKS,
    TOOL_CALL_BLOCKS,
    TOOL_RESULT_BLOCKS,
    is_image_media,
    looks_binary,
)
from lc_compaction._count_cache import _MessageCache, _role
from lc_compaction._kinds import TOOL, kind
from lc_compaction._images import (  # the IMAGE_* constants are re-exported: part of this module's API
    IMAGE_BASE_TOKENS,
    IMAGE_FIT_PX,
    IMAGE_LOW_DETAIL_TOKENS,
    IMAGE_MAX_TOKENS,
    IMAGE_SHORT_SIDE_PX,
    IMAGE_TILE_PX,
    IMAGE_TILE_TOKENS,
    PDF_FALLBACK_PAGES,
    PDF_PAGE_TOKENS_ANTHROPIC,
    PDF_PAGE_TOKENS_DEFAULT,
    PDF_PAGE_TOKENS_GEMINI,
    _image_dimensions,
    image_tokens,
    pdf_page_count,
    pdf_page_tokens,
)
from lc_compaction._offline import EncodingUnavailableError, ensure_encoding
from lc_compaction._tool_schema import (
    TOOL_COSTS_O200K,
    ToolSchemaCosts,
    compact_json,
    tool_costs_for_encoding,
    tool_schemas_tokens,
)

__all__ = [
    "IMAGE_BASE_TOKENS",
    "IMAGE_FIT_PX",
    "IMAGE_LOW_DETAIL_TOKENS",
    "IMAGE_MAX_TOKENS",
    "IMAGE_SHORT_SIDE_PX",
    "IMAGE_TILE_PX",
    "IMAGE_TILE_TOKENS",
    "PDF_FALLBACK_PAGES",
    "PDF_PAGE_TOKENS_ANTHROPIC",
    "PDF_PAGE_TOKENS_DEFAULT",
    "PDF_PAGE_TOKENS_GEMINI",
    "ApproximateCounter",
    "CallableCounter",
    "EncodingUnavailableError",
    "MessageCounter",
    "StructuredCounter",
    "TiktokenCounter",
    "TokenCounter",
    "encoding_name_for_model",
    "image_tokens",
    "model_family",
    "pdf_page_count",
    "pdf_tokens_per_page",
    "resolve_token_counter",
]

# ---------------------------------------------------------------------------------------------------------------
# Constants.  Sources:
#   [cookbook]  OpenAI cookbook, "How to count tokens with tiktoken" (examples/How_to_count_tokens_with_tiktoken.ipynb),
#               section 6 num_tokens_from_messages() (section 7, num_tokens_for_tools(), is in _tool_schema.py); its
#               outputs match the API's prompt_tokens (124 for its example messages on gpt-4o / gpt-4o-mini).
#   [vision]    OpenAI platform docs, Images and vision guide, "Calculating costs" (detail low = 85 tokens; high =
#               85 + 170 per 512px tile after fitting into 2048x2048 and scaling the shortest side down to 768px;
#               worked examples 1024x1024 -> 765 and 2048x4096 -> 1105).
#   [hmarr]     hmarr/openai-chat-tokens (src/index.ts, messageTokensEstimate): a function-call message costs its
#               name and arguments plus 3 tokens, fitted against the API's counts.
# ---------------------------------------------------------------------------------------------------------------

MESSAGE_OVERHEAD_TOKENS = 3
"""Tokens every message costs besides its text: ``<|start|>{role/name}\\n{content}<|end|>\\n`` [cookbook]."""

NAME_OVERHEAD_TOKENS = 1
"""Extra tokens when a message has a ``name`` (on top of the name's own text) [cookbook]."""

REPLY_PRIMING_TOKENS = 3
"""Tokens added once per request: every reply is primed with ``<|start|>assistant<|message|>`` [cookbook]."""

TOOL_CALL_OVERHEAD_TOKENS = 3
"""Tokens per tool call besides its name and arguments.  OpenAI does not publish this; 3 is the value fitted
against the API by [hmarr] for function-call messages (an estimate, not exact)."""

FILE_BLOCK_TOKENS = 1_000
"""Fixed estimate for a file, audio or video block whose text is not in the message and that is not a PDF (an audio
clip, a .docx, a file id of unknown type).  NOT exact and not an upper bound, but bounded and independent of the
payload's size, so a base64 payload never counts as text.  A PDF is counted by its pages (`pdf_tokens_per_page`)."""


# ---------------------------------------------------------------------------------------------------------------
# The protocol
# ---------------------------------------------------------------------------------------------------------------


@runtime_checkable
class TokenCounter(Protocol):
    """What the compaction core needs to measure a history.

    Attributes:
        name: a short label for reports, e.g. ``"tiktoken:o200k_base"``, ``"approximate"``, ``"messages"``.
        reply_overhead: tokens added once per request (3 for OpenAI's reply priming; 0 for ``"messages"``).
    """

    name: str
    reply_overhead: int

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message, including its per-message overhead.

        Called for every message on every model call, so implementations should cache per message (the built-in
        counters do) to keep the work on a history that grew by k messages proportional to k.
        """
        ...

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of a history: ``sum(count_message(m)) + reply_overhead``, 0 for an empty list."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (no message overhead)."""
        ...

    def count_tools(self, tools: Sequence[Any]) -> int:
        """Tokens of tool schemas sent beside the messages; 0 for an empty list."""
        ...


# ---------------------------------------------------------------------------------------------------------------
# Model -> encoding
# ---------------------------------------------------------------------------------------------------------------

DEFAULT_ENCODING = "o200k_base"
"""Encoding used when no model is given or the model is not an OpenAI one (an approximation for Claude, Gemini,
Llama...: their tokenizers differ, typically by 10-20% on English text)."""

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002")


def _bare_model_name(model_name: str) -> str:
    """Strip provider prefixes (``openai:``, ``azure/``, ``openrouter/openai/``) and fine-tune wrappers (``ft:``)."""
    name = model_name.strip().lower()
    name = name.rsplit("/", 1)[-1]
    for _ in range(3):
        if name.startswith("ft:"):
            name = name[3:].split(":", 1)[0]
        elif ":" in name:
            name = name.split(":", 1)[1]
        else:
            break
    return name


def model_family(model_name: str | None) -> str:
    """The provider whose media rules apply to a model: "anthropic" for a name holding "claude" or "anthropic"
    (``claude-sonnet-4-5``, ``anthropic:claude-3-5-haiku-latest``, Bedrock's
    ``us.anthropic.claude-3-7-sonnet-20250219-v1:0``), "gemini" for one holding "gemini" (``gemini-2.5-flash``,
    ``google_genai:gemini-2.0-flash``, ``vertex_ai/gemini-1.5-pro``), else "openai" (the default rules: gpt-*,
    o-series, and every other model, None included).  Case-insensitive."""
    name = (model_name or "").lower()
    if "claude" in name or "anthropic" in name:
        return "anthropic"
    if "gemini" in name:
        return "gemini"
    return "openai"


def pdf_tokens_per_page(model_name: str | None) -> int:
    """Tokens one PDF page costs on `model_name`, by its provider's published figure (`model_family`;
    `_images.pdf_page_tokens`): 3,000 on Claude (the top of Anthropic's 1,500-3,000 a page), 258 on Gemini (Google's
    figure), 3,000 on OpenAI and other models (no figure published; see `PDF_PAGE_TOKENS_DEFAULT`)."""
    return pdf_page_tokens(model_family(model_name))


def encoding_name_for_model(model_name: str | None) -> str:
    """Return the tiktoken encoding name for a chat model name.

    ``o200k_base`` for gpt-4o, chatgpt-4o, gpt-4.1, gpt-4.5, gpt-5*, o1/o3/o4* and gpt-oss (whose harmony encoding
    shares o200k_base's vocabulary for ordinary text); ``cl100k_base`` for gpt-4 (not 4o/4.1/4.5), gpt-3.5-turbo
    (also Azure's ``gpt-35-turbo``) and the text-embedding-3 / ada-002 models.  ``None`` and every other name
    (Claude, Gemini, Llama, ...) give ``o200k_base`` (:data:`DEFAULT_ENCODING`): an approximation, since those
    models use their own tokenizers.  Provider prefixes such as ``"openai:"``, ``"azure/"`` and fine-tune names
    (``"ft:gpt-4o-mini:org::id"``) are handled.
    """
    if not model_name:
        return DEFAULT_ENCODING
    name = _bare_model_name(model_name)
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return DEFAULT_ENCODING


# ---------------------------------------------------------------------------------------------------------------
# Walking unknown structures (the block kinds are in _content.py)
# ---------------------------------------------------------------------------------------------------------------

_MAX_DEPTH = 32
"""Nesting depth beyond which unknown structures are not walked further (no RecursionError on hostile input)."""


def _arguments_json(value: Any) -> str:
    """A tool call's arguments as OpenAI receives them (``_content.arguments_text``: ``json.dumps(args,
    ensure_ascii=False)``, default separators ", " and ": ", as langchain-openai sends them; a string, the raw
    arguments of an invalid call, as it is)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return compact_json(value)


def _is_listed(value: Any, ids: frozenset[str]) -> bool:
    return isinstance(value, str) and value in ids


def _is_remove(message: BaseMessage) -> bool:
    return getattr(message, "type", None) == "remove"


_PAGE_KEYS = ("pages", "page_count", "num_pages")


def _pdf_pages(block: dict[str, Any]) -> int | None:
    """The pages a file or document block counts for when it is a PDF (None when it is not one): read from its
    base64 data (`pdf_page_count`), else from its metadata (`_PAGE_KEYS` in the block, its ``extras`` or
    ``metadata``), else `PDF_FALLBACK_PAGES`."""
    def field(key: str) -> dict[str, Any]:
        value = block.get(key)
        return value if isinstance(value, dict) else {}

    file, source = field("file"), field("source")
    datas = [block.get("base64"), block.get("data"), block.get("file_data"), file.get("file_data"),
             source.get("data") if source.get("type", "base64") == "base64" else None]
    data = next((d for d in datas if isinstance(d, str) and d), None)
    mimes = [block.get("mime_type"), source.get("media_type"), file.get("mime_type")]
    names = [block.get("filename"), file.get("filename"), block.get("url"), block.get("file_url"),
             source.get("url")]
    is_pdf = (any(isinstance(m, str) and m.lower() == "application/pdf" for m in mimes)
              or any(isinstance(n, str) and n.lower().split("?", 1)[0].endswith(".pdf") for n in names)
              or (isinstance(data, str) and data.startswith("data:application/pdf")))
    pages = pdf_page_count(data) if isinstance(data, str) else None
    if pages is None and not is_pdf:
        return None
    if pages is not None:
        return pages
    for holder in (block, field("extras"), field("metadata")):
        for key in _PAGE_KEYS:
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return PDF_FALLBACK_PAGES


# ---------------------------------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------------------------------


class StructuredCounter:
    """Base of the exact and approximate counters: the message structure, the caching, the tool schemas.

    Subclasses define :meth:`count_text` (tokens of a string); everything else -- per-message overheads, blocks,
    images, tool calls, tool schemas -- is shared, so both counters apply identical rules.
    """

    name: str = "structured"
    reply_overhead: int = REPLY_PRIMING_TOKENS
    _tool_costs: ToolSchemaCosts = TOOL_COSTS_O200K

    def __init__(self, *, cache_size: int = 100_000, model_name: str | None = None) -> None:
        self._cache = _MessageCache(cache_size)
        self._role_costs: dict[str, int] = {}
        self._name_costs: dict[str, int] = {}
        self._pdf_page_tokens = pdf_tokens_per_page(model_name)

    # -- the protocol -------------------------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (no message overhead).  Implemented by subclasses."""
        raise NotImplementedError

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message including its per-message overhead (cached; see the module docstring).

        A LangGraph ``RemoveMessage`` (never sent to a model) costs 0.

        Raises:
            TypeError: ``message`` is not a ``BaseMessage``.
        """
        if not isinstance(message, BaseMessage):
            raise TypeError(f"count_message expects a langchain BaseMessage, got {type(message).__name__}")
        if _is_remove(message):
            return 0
        return self._cache.lookup(message, self._count_message_uncached)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of a history: ``sum(count_message(m)) + reply_overhead``; 0 for an empty sequence.

        Raises:
            TypeError: an item is not a ``BaseMessage``.
        """
        if not messages:
            return 0
        return sum(self.count_message(m) for m in messages) + self.reply_overhead

    def count_tools(self, tools: Sequence[Any]) -> int:
        """Tokens of tool schemas sent beside the messages, by the [cookbook] ``num_tokens_for_tools`` formula
        (see ``_tool_schema.tool_schemas_tokens``; constants 7/3/3/-3/3/12 for o200k models, 10/3/3/-3/3/12 for
        cl100k ones).  An empty sequence costs 0.

        Raises:
            ValueError: a tool cannot be converted to the OpenAI format.
        """
        return tool_schemas_tokens(tools, self.count_text, self._tool_costs)

    # -- cache --------------------------------------------------------------------------------------------------

    def cache_info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "maxsize"}`` of the per-message cache (counts of lookups and entries)."""
        return self._cache.info()

    def clear_cache(self) -> None:
        """Empty the per-message cache and reset its hit and miss counters."""
        self._cache.clear()

    # -- message structure --------------------------------------------------------------------------------------

    def _role_tokens(self, role: str) -> int:
        cost = self._role_costs.get(role)
        if cost is None:
            cost = self.count_text(role)
            self._role_costs[role] = cost
        return cost

    def _count_message_uncached(self, message: BaseMessage) -> int:
        total = MESSAGE_OVERHEAD_TOKENS + self._role_tokens(_role(message))
        if message.name:
            total += self._name_tokens(str(message.name)) + NAME_OVERHEAD_TOKENS
        tool_calls = getattr(message, "tool_calls", None) or []
        invalid = getattr(message, "invalid_tool_calls", None) or []
        call_ids = frozenset(
            tc["id"] for tc in [*tool_calls, *invalid] if isinstance(tc, dict) and isinstance(tc.get("id"), str)
        )
        total += self.count_content(message.content, call_ids=call_ids)
        for tc in tool_calls:
            if isinstance(tc, dict):
                total += self._tool_call_tokens(tc.get("name"), tc.get("args"))
        for itc in invalid:
            if isinstance(itc, dict):
                total += self._tool_call_tokens(itc.get("name"), itc.get("args"))
        return total

    def _name_tokens(self, name: str) -> int:
        """Tokens of a tool or message name: few distinct values, so remembered (at most 4,096 names)."""
        cost = self._name_costs.get(name)
        if cost is None:
            cost = self.count_text(name)
            if len(self._name_costs) >= 4096:
                self._name_costs.clear()
            self._name_costs[name] = cost
        return cost

    def _tool_call_tokens(self, name: Any, args: Any) -> int:
        total = TOOL_CALL_OVERHEAD_TOKENS
        if name:
            total += self._name_tokens(str(name))
        if args is not None and args != "":
            total += self.count_text(_arguments_json(args))
        return total

    def count_content(self, content: Any, *, call_ids: frozenset[str] = frozenset()) -> int:
        """Tokens of a message's ``content`` (a string or a list of blocks), without message overhead.

        Blocks: text-like (``text``/``input_text``/``output_text``, bare strings) -> their text; ``refusal`` -> its
        text; ``reasoning``/``thinking`` -> their text and summaries; signatures, ``encrypted_content`` and
        ``redacted_thinking`` -> 0 (provider-encrypted payloads whose billed size is not knowable, so a reasoning
        block's count is a lower bound); ``tool_use``/``tool_call``/``function_call`` whose id is in ``call_ids`` -> 0
        (counted once, from ``tool_calls``), otherwise name + compact JSON of the input + the per-call overhead;
        ``tool_result``/``function_call_output`` -> their content, recursively; images -> :func:`image_tokens` when
        the base64 header gives the size, else :data:`IMAGE_MAX_TOKENS` (85 if ``detail`` is ``"low"``; a Gemini
        ``media`` block of an ``image/`` type is an image); a PDF (its media type, a ``.pdf`` file name, or
        ``%PDF-`` bytes, in a file, document or Gemini ``media`` block, or an ``image_url`` whose URL is a
        ``data:application/pdf`` one) -> its pages times :func:`pdf_tokens_per_page` of the
        counter's model, the pages read from its base64 (`pdf_page_count`), else from ``pages`` / ``page_count`` /
        ``num_pages`` in the block, its ``extras`` or ``metadata``, else :data:`PDF_FALLBACK_PAGES`; other files,
        audio, video -> :data:`FILE_BLOCK_TOKENS` (or their text when they carry plain text); a dict
        block of an unknown kind (Bedrock Converse's ``{"type": "json", "json": {...}}`` tool-result block, a
        block without a type) and the value of a ``non_standard`` block -> the tokens of their JSON text, keys
        included, binary-looking strings left out (see ``_json_tokens``).  Never raises.
        """
        return self._content_tokens(content, call_ids, 0)

    def _content_tokens(self, content: Any, call_ids: frozenset[str], depth: int) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        if content is None:
            return 0
        if isinstance(content, (list, tuple)):
            if depth > _MAX_DEPTH:
                return 0
            return sum(self._block_tokens(block, call_ids, depth + 1) for block in content)
        return self._block_tokens(content, call_ids, depth + 1)

    def _block_tokens(self, block: Any, call_ids: frozenset[str], depth: int) -> int:
        if isinstance(block, str):
            return self.count_text(block)
        if not isinstance(block, dict):
            if isinstance(block, (list, tuple)):
                return self._content_tokens(block, call_ids, depth)
            return self._value_tokens(block, depth)
        btype = block.get("type")
        if not isinstance(btype, str) or btype not in KNOWN_BLOCKS:
            return self._json_tokens(block, depth)
        if btype in TEXT_BLOCKS:
            return self._field_text(block.get("text"), depth)
        if btype == "refusal":
            return self._field_text(block.get("refusal"), depth)
        if btype in REASONING_BLOCKS:
            return self._reasoning_tokens(block, depth)
        if btype in OPAQUE_REASONING_BLOCKS:
            return 0  # an encrypted payload: its billed size is not knowable (see count_content)
        if btype in TOOL_CALL_BLOCKS:
            # OpenAI Responses function_call blocks carry both an item "id" (fc_...) and the "call_id" that
            # LangChain uses as the tool call's id: a match on either is a duplicate.
            if btype != "server_tool_use" and call_ids and (
                _is_listed(block.get("id"), call_ids) or _is_listed(block.get("call_id"), call_ids)
            ):
                return 0
            args = block.get("input", block.get("args", block.get("arguments")))
            if (args is None or args == {}) and isinstance(block.get("partial_json"), str):
                args = block["partial_json"]
            return self._tool_call_tokens(block.get("name"), args)
        if btype in TOOL_RESULT_BLOCKS:
            inner = block.get("content", block.get("output"))
            return self._content_tokens(inner, call_ids, depth)
        if btype in IMAGE_BLOCKS or is_image_media(block):
            return self._image_block_tokens(block)
        if btype in FILE_BLOCKS or btype in PLAIN_TEXT_FILE_BLOCKS:
            return self._file_block_tokens(block, call_ids, depth)
        # non_standard: a provider's own block, sent as it is
        return self._json_tokens(block.get("value"), depth)

    def _field_text(self, value: Any, depth: int) -> int:
        if isinstance(value, str):
            return self.count_text(value)
        return self._value_tokens(value, depth)

    def _reasoning_tokens(self, block: dict[str, Any], depth: int) -> int:
        total = 0
        for key in ("reasoning", "thinking", "text"):
            value = block.get(key)
            if isinstance(value, str):
                total += self.count_text(value)
        for key in ("summary", "content"):
            items = block.get(key)
            if isinstance(items, (list, tuple)):
                for item in items:
                    if isinstance(item, str):
                        total += self.count_text(item)
                    elif isinstance(item, dict) and isinstance(item.get("text"), str):
                        total += self.count_text(item["text"])
        return total

    def _image_block_tokens(self, block: dict[str, Any]) -> int:
        detail: Any = block.get("detail")
        url: Any = None
        b64: Any = None
        image_url = block.get("image_url")
        if isinstance(image_url, dict):
            url = image_url.get("url")
            detail = image_url.get("detail", detail)
        elif isinstance(image_url, str):
            url = image_url
        source = block.get("source")
        if isinstance(source, dict):
            if isinstance(source.get("data"), str) and source.get("type", "base64") == "base64":
                b64 = source["data"]
            elif isinstance(source.get("url"), str):
                url = source["url"]
        if b64 is None:
            for key in ("base64", "data"):
                if isinstance(block.get(key), str):
                    b64 = block[key]
                    break
        if url is None and isinstance(block.get("url"), str):
            url = block["url"]
        extras = block.get("extras")
        if detail is None and isinstance(extras, dict):
            detail = extras.get("detail")
        if detail == "low":
            return IMAGE_LOW_DETAIL_TOKENS
        if isinstance(url, str) and url[:20].lower() == "data:application/pdf":  # a PDF sent as an image_url
            return (pdf_page_count(url) or PDF_FALLBACK_PAGES) * self._pdf_page_tokens
        if b64 is None and isinstance(url, str) and url.startswith("data:"):
            header, _, payload = url.partition(",")
            if ";base64" in header:
                b64 = payload
        if isinstance(b64, str) and b64:
            size = _image_dimensions(b64)
            if size is not None:
                return image_tokens(size[0], size[1], detail="high")
        return IMAGE_MAX_TOKENS

    def _file_block_tokens(self, block: dict[str, Any], call_ids: frozenset[str], depth: int) -> int:
        total = 0
        for key in ("title", "context"):
            if isinstance(block.get(key), str):
                total += self.count_text(block[key])
        text = block.get("text")
        if isinstance(text, str) and not looks_binary(text):
            return total + self.count_text(text)
        source = block.get("source")
        if isinstance(source, dict):
            if source.get("type") == "text" and isinstance(source.get("data"), str):
                return total + self.count_text(source["data"])
            if source.get("type") == "content" and source.get("content") is not None:
                return total + self._content_tokens(source["content"], call_ids, depth)
        pages = _pdf_pages(block)
        if pages is not None:
            return total + pages * self._pdf_page_tokens
        return total + FILE_BLOCK_TOKENS

    def _value_tokens(self, value: Any, depth: int) -> int:
        """Tokens of a value found where text was expected: a string (0 when binary-looking), a number's digits,
        a dict or list by its JSON text (`_json_tokens`)."""
        if depth > _MAX_DEPTH or value is None or isinstance(value, bool):
            return 0
        if isinstance(value, str):
            return 0 if looks_binary(value) else self.count_text(value)
        if isinstance(value, (int, float)):
            return self.count_text(str(value))
        if isinstance(value, (dict, list, tuple)):
            return self._json_tokens(value, depth)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return 0
        try:
            return self.count_text(str(value))
        except Exception:  # noqa: BLE001 - an exotic object whose str() raises counts 0: counting never fails
            return 0

    def _json_tokens(self, value: Any, depth: int) -> int:
        """Tokens of the JSON text of an unknown structure (``json.dumps(value, ensure_ascii=False)``: keys,
        quotes and punctuation included), as a provider that receives it as JSON reads it. Binary-looking strings
        (base64, ``data:`` URLs: `_content.looks_binary`) count as empty strings, bytes too; a nested dict of a
        known block kind (an image inside a provider's wrapper) costs what that block costs instead; nesting
        beyond `_MAX_DEPTH` is not walked."""
        nested = 0

        def plain(v: Any, d: int) -> Any:
            nonlocal nested
            if d > _MAX_DEPTH:
                return None
            if isinstance(v, str):
                return "" if looks_binary(v) else v
            if v is None or isinstance(v, (bool, int, float)):
                return v
            if isinstance(v, dict):
                btype = v.get("type")
                if d and isinstance(btype, str) and btype in KNOWN_BLOCKS:
                    nested += self._block_tokens(v, frozenset(), depth + d)
                    return None
                return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): plain(x, d + 1)
                        for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [plain(x, d + 1) for x in v]
            if isinstance(v, (bytes, bytearray, memoryview)):
                return ""
            return str(v)

        try:
            text = json.dumps(plain(value, 0), ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return nested
        return self.count_text(text) + nested


class TiktokenCounter(StructuredCounter):
    """Exact counter: tiktoken, the tokenizer OpenAI bills with, plus the cookbook's message overheads.

    Counts are exact for plain-text OpenAI chat messages (the cookbook's formula reproduces the API's
    ``prompt_tokens``); tool calls, images and files follow documented estimates (see the module constants).
    For non-OpenAI models the encoding is ``o200k_base``, an approximation.

    Args:
        model_name: chooses the encoding via :func:`encoding_name_for_model` (ignored if ``encoding_name`` given) and
            the media rules (a PDF page's cost: :func:`pdf_tokens_per_page`).
        encoding_name: a tiktoken encoding name, e.g. ``"o200k_base"``.
        cache_size: maximum number of cached per-message counts (entries; 0 disables the cache).

    Raises:
        EncodingUnavailableError: the encoding can be neither downloaded nor loaded offline (see ``_offline``).
        ValueError: unknown ``encoding_name`` or a negative ``cache_size``.
    """

    def __init__(self, model_name: str | None = None, *, encoding_name: str | None = None,
                 cache_size: int = 100_000) -> None:
        super().__init__(cache_size=cache_size, model_name=model_name)
        self.model_name = model_name
        self.encoding_name = encoding_name or encoding_name_for_model(model_name)
        self.encoding = ensure_encoding(self.encoding_name)
        self.name = f"tiktoken:{self.encoding_name}"
        self.reply_overhead = REPLY_PRIMING_TOKENS
        self._tool_costs = tool_costs_for_encoding(self.encoding_name)
        self._encode = self.encoding.encode_ordinary

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` under the encoding; special-token strings such as ``<|endoftext|>`` count as
        ordinary text (as the API treats user content)."""
        if not text:
            return 0
        return len(self._encode(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter(model_name={self.model_name!r}, encoding_name={self.encoding_name!r})"


class ApproximateCounter(StructuredCounter):
    """Approximate counter: ``ceil(len(text) / chars_per_token)`` per piece of text, same structure and overheads
    as :class:`TiktokenCounter` (message overheads, tool-call dedup, bounded images and files, reply priming).

    No tokenizer is needed.  English prose is about 4 characters per token with OpenAI's encodings; code, JSON and
    non-Latin scripts have fewer characters per token, so this undercounts them.

    Args:
        chars_per_token: characters per token (> 0).
        cache_size: maximum number of cached per-message counts (entries; 0 disables the cache).
        model_name: chooses the media rules (a PDF page's cost: `pdf_tokens_per_page`); None: the default ones.

    Raises:
        ValueError: ``chars_per_token`` is not a positive number, or ``cache_size`` is negative.
    """

    def __init__(self, *, chars_per_token: float = 4.0, cache_size: int = 100_000,
                 model_name: str | None = None) -> None:
        if isinstance(chars_per_token, bool) or not isinstance(chars_per_token, (int, float)) or not (
            chars_per_token > 0 and math.isfinite(chars_per_token)
        ):
            raise ValueError(f"chars_per_token must be a positive number, got {chars_per_token!r}")
        super().__init__(cache_size=cache_size, model_name=model_name)
        self.model_name = model_name
        self.chars_per_token = float(chars_per_token)
        self.name = "approximate"
        self.reply_overhead = REPLY_PRIMING_TOKENS

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)`` tokens (characters are Python ``str`` code points)."""
        if not text:
            return 0
        return math.ceil(len(text) / self.chars_per_token)

    def __repr__(self) -> str:
        return f"ApproximateCounter(chars_per_token={self.chars_per_token}, model_name={self.model_name!r})"


class MessageCounter:
    """Counts messages, not tokens: every message costs 1, like LangChain's ``token_counter=len``.

    ``count_text`` and ``count_tools`` return 0, and ``reply_overhead`` is 0, so ``count_messages`` is
    ``len(messages)`` (a ``RemoveMessage`` still costs 1 here, as it does with ``len``).
    """

    name: str = "messages"
    reply_overhead: int = 0

    def count_message(self, message: BaseMessage) -> int:
        """1."""
        return 1

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """``len(messages)``."""
        return len(messages)

    def count_text(self, text: str) -> int:
        """0: text has no message count."""
        return 0

    def count_tools(self, tools: Sequence[Any]) -> int:
        """0: tool schemas are not messages."""
        return 0

    def __repr__(self) -> str:
        return "MessageCounter()"


def counted_alike(counter: Any, message: BaseMessage, other: BaseMessage) -> bool:
    """Whether `counter` counts `message` as it counts `other`, known without counting either: with the package's own
    counters (`StructuredCounter`: a message's count is its role, name, content and tool calls; `MessageCounter`:
    1), two tool results of one class and name whose contents are one string (a repeated tool result, a
    deduplication note given back its earlier copy's content; a tool result calls no tool and its role is always
    "tool"). False for any other messages and counters: a caller's callable may read more."""
    return (isinstance(counter, (StructuredCounter, MessageCounter)) and type(message) is type(other)
            and kind(message) == TOOL and message.name == other.name and isinstance(message.content, str)
            and message.content == other.content)


class CallableCounter:
    """Wraps a LangChain-style ``token_counter: Callable[[list[BaseMessage]], int]``.

    A message costs ``fn([message])`` (cached like the other counters: an edited message is recounted);
    ``count_messages`` is the sum of those, ``reply_overhead`` is 0.  ``count_text(text)`` is
    ``fn([HumanMessage(text)]) - fn([HumanMessage("")])`` (at least 0).  ``count_tools`` returns 0: a message
    counter cannot price tool schemas -- pass their cost as ``extra_tokens``.

    Args:
        fn: the callable; it must return an int (or a float, which is rounded up) number of tokens.
        cache_size: maximum number of cached per-message counts (entries; 0 disables the cache).

    Raises:
        TypeError: ``fn`` is not callable (at construction) or returns something that is not a number (when
            counting).
    """

    reply_overhead: int = 0

    def __init__(self, fn: Callable[[list[BaseMessage]], int], *, cache_size: int = 100_000) -> None:
        if not callable(fn):
            raise TypeError(f"CallableCounter needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = f"callable:{getattr(fn, '__qualname__', None) or type(fn).__name__}"
        self._cache = _MessageCache(cache_size)

    def _call(self, messages: list[BaseMessage]) -> int:
        result = self.fn(messages)
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise TypeError(f"token_counter {self.name} returned {type(result).__name__}, expected an int")
        if result < 0 or result != result:  # negative or NaN
            raise ValueError(f"token_counter {self.name} returned {result!r}: a token count must be >= 0")
        return math.ceil(result)

    def count_message(self, message: BaseMessage) -> int:
        """``fn([message])`` tokens, cached.

        Raises:
            TypeError: ``message`` is not a ``BaseMessage`` or ``fn`` does not return a number.
        """
        if not isinstance(message, BaseMessage):
            raise TypeError(f"count_message expects a langchain BaseMessage, got {type(message).__name__}")
        return self._cache.lookup(message, lambda m: self._call([m]))

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """``sum(count_message(m))`` tokens (``reply_overhead`` is 0)."""
        return sum(self.count_message(m) for m in messages)

    def count_text(self, text: str) -> int:
        """Tokens ``fn`` gives a user message holding ``text``, minus those of an empty one (not cached)."""
        if not text:
            return 0
        return max(0, self._call([HumanMessage(content=text)]) - self._call([HumanMessage(content="")]))

    def count_tools(self, tools: Sequence[Any]) -> int:
        """0 (unknown): pass tool-schema tokens as ``extra_tokens`` instead."""
        return 0

    def cache_info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "maxsize"}`` of the per-message cache."""
        return self._cache.info()

    def clear_cache(self) -> None:
        """Empty the per-message cache and reset its counters."""
        self._cache.clear()

    def __repr__(self) -> str:
        return f"CallableCounter({self.fn!r})"


_EXACT_SPECS = frozenset({"exact", "tiktoken"})
_APPROX_SPECS = frozenset({"approximate", "approx"})


def resolve_token_counter(spec: Any, *, model_name: str | None = None) -> TokenCounter:
    """Turn a ``token_counter`` setting into a :class:`TokenCounter`.

    * ``None``, ``"exact"``, ``"tiktoken"`` -> ``TiktokenCounter(model_name)``
    * ``"approximate"``, ``"approx"`` -> ``ApproximateCounter(model_name=model_name)``
    * ``"messages"`` or the builtin ``len`` -> ``MessageCounter()``
    * an object that satisfies :class:`TokenCounter` -> itself
    * any other callable (not a class) -> ``CallableCounter(spec)``

    Strings are matched case-insensitively, ignoring surrounding spaces.

    Raises:
        ValueError: anything else (the message names ``token_counter`` and the accepted values).
        EncodingUnavailableError: the exact counter's encoding cannot be loaded.
    """
    if spec is None:
        return TiktokenCounter(model_name)
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key in _EXACT_SPECS:
            return TiktokenCounter(model_name)
        if key in _APPROX_SPECS:
            return ApproximateCounter(model_name=model_name)
        if key == "messages":
            return MessageCounter()
        raise ValueError(
            f"token_counter={spec!r} is not valid: use 'exact' (or 'tiktoken'), 'approximate' (or 'approx'), "
            "'messages', a TokenCounter instance, or a callable taking a list of messages and returning an int"
        )
    if isinstance(spec, TokenCounter) and not isinstance(spec, type):
        return spec
    if spec is len:
        return MessageCounter()
    if callable(spec) and not isinstance(spec, type):
        return CallableCounter(spec)
    raise ValueError(
        f"token_counter must be 'exact', 'approximate', 'messages', a TokenCounter instance or a callable taking "
        f"a list of messages, got {type(spec).__name__}: {spec!r}"
    )
