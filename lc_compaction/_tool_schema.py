"""What tool schemas sent beside the messages cost, in tokens: the OpenAI cookbook's ``num_tokens_for_tools``.

Source [cookbook]: OpenAI cookbook, "How to count tokens with tiktoken"
(examples/How_to_count_tokens_with_tiktoken.ipynb), section 7 ``num_tokens_for_tools()``; its output matches the
API's ``prompt_tokens`` (101 for its example messages and tool on gpt-4o / gpt-4o-mini).  Used by the counters of
``lc_compaction.tokens`` (``count_tools``), which give the cost of a piece of text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolSchemaCosts:
    """The [cookbook] ``num_tokens_for_tools`` constants (tokens): per function (``func_init``), once per
    property list (``prop_init``), per property (``prop_key``), per enum (``enum_init``) and enum value
    (``enum_item``), once per list of tools (``func_end``)."""

    func_init: int
    prop_init: int
    prop_key: int
    enum_init: int
    enum_item: int
    func_end: int


TOOL_COSTS_O200K = ToolSchemaCosts(func_init=7, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12)
"""[cookbook] constants for gpt-4o / gpt-4o-mini (o200k_base); also used for later o200k models and approximations."""

TOOL_COSTS_CL100K = ToolSchemaCosts(func_init=10, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12)
"""[cookbook] constants for gpt-3.5-turbo / gpt-4 (cl100k_base)."""


def tool_costs_for_encoding(encoding_name: str) -> ToolSchemaCosts:
    """:data:`TOOL_COSTS_CL100K` for ``"cl100k_base"``, :data:`TOOL_COSTS_O200K` for every other encoding."""
    return TOOL_COSTS_CL100K if encoding_name == "cl100k_base" else TOOL_COSTS_O200K


def compact_json(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``; a string as it is; ``str()`` for what JSON
    cannot encode (``""`` when even that fails)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except Exception:  # noqa: BLE001 - an object whose str() raises: "" as documented above
            return ""


def tool_schemas_tokens(tools: Sequence[Any], count_text: Callable[[str], int], costs: ToolSchemaCosts) -> int:
    """Tokens of tool schemas sent beside the messages, by the [cookbook] ``num_tokens_for_tools`` formula.

    Each tool (an OpenAI-format dict, a ``BaseTool``, a pydantic model, a callable, an Anthropic-format dict) is
    converted with ``langchain_core.utils.function_calling.convert_to_openai_tool``.  Per function:
    ``func_init`` + ``count_text("name:description")`` (one trailing period dropped); if it has properties,
    ``prop_init`` + per property ``prop_key`` + the text of ``"key:type:description"`` (+ ``enum_init`` +
    ``enum_item`` + the text per enum value).  Once per list: ``func_end``.  Extension beyond the cookbook (which
    ignores them): a property's other schema keys (``items``, ``anyOf``, ``default``, nested ``properties``, ...)
    add the tokens of their compact JSON, and a tool that is not a function (e.g. ``{"type": "web_search"}``)
    costs ``func_init`` + the tokens of its compact JSON.  An empty sequence costs 0.

    Args:
        tools: the tools, in any format ``convert_to_openai_tool`` accepts.
        count_text: tokens of a bare string (a counter's ``count_text``).
        costs: the constants of the counter's encoding (:func:`tool_costs_for_encoding`).

    Raises:
        ValueError: a tool cannot be converted to the OpenAI format (the message names its index).
    """
    if not tools:
        return 0
    from langchain_core.utils.function_calling import convert_to_openai_tool

    total = 0
    for i, tool in enumerate(tools):
        try:
            converted = convert_to_openai_tool(tool)
        except Exception as e:
            raise ValueError(f"tools[{i}] cannot be converted to an OpenAI tool schema: {e}") from e
        total += _function_schema_tokens(converted, count_text, costs)
    return total + costs.func_end


def _function_schema_tokens(tool: Any, count_text: Callable[[str], int], costs: ToolSchemaCosts) -> int:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict):
        return costs.func_init + count_text(compact_json(tool))
    total = costs.func_init
    description = function.get("description") or ""
    if not isinstance(description, str):
        description = compact_json(description)
    description = description.removesuffix(".")
    total += count_text(f"{function.get('name', '')}:{description}")
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if isinstance(properties, dict) and properties:
        total += costs.prop_init
        for key, schema in properties.items():
            total += costs.prop_key
            if not isinstance(schema, dict):
                total += count_text(f"{key}:{compact_json(schema)}")
                continue
            p_type = schema.get("type", "")
            if not isinstance(p_type, str):
                p_type = compact_json(p_type)
            p_desc = schema.get("description") or ""
            if not isinstance(p_desc, str):
                p_desc = compact_json(p_desc)
            enum = schema.get("enum")
            if isinstance(enum, (list, tuple)):
                total += costs.enum_init
                for item in enum:
                    total += costs.enum_item + count_text(item if isinstance(item, str) else compact_json(item))
            p_desc = p_desc.removesuffix(".")
            total += count_text(f"{key}:{p_type}:{p_desc}")
            extra = {k: v for k, v in schema.items() if k not in ("type", "description", "enum", "title")}
            if extra:
                total += count_text(compact_json(extra))
    return total


__all__ = [
    "TOOL_COSTS_CL100K",
    "TOOL_COSTS_O200K",
    "ToolSchemaCosts",
    "compact_json",
    "tool_costs_for_encoding",
    "tool_schemas_tokens",
]
