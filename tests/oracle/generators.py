"""Hypothesis strategies for valid LangChain message histories, and for histories with exactly one known defect.

Does not import lc_compaction.

A valid history: an optional leading SystemMessage (and optionally a prior summary HumanMessage), then turns.
A turn is a HumanMessage, 0..k tool steps (an AIMessage with 1..7 parallel tool_calls directly followed by
exactly their ToolMessages, in call order or shuffled within the block), then an AIMessage answer.  The last turn
may stop after its request or after its last tool results (a history about to be sent to the model).
Every message has a unique id; every tool_call id is unique, unless ``reuse_call_ids=True``: then each AIMessage
numbers its calls from ``call_0`` (as OpenAI-compatible servers that number calls per assistant turn do), which is
valid on the wire (a ToolMessage answers a call of the closest AIMessage with tool calls before it).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

TOOL_NAMES = (
    "search",
    "read_file",
    "get_weather",
    "send_email",
    "list_calendar_events",
    "query_database",
    "get_balance",
)
WORDS = (
    "alpha",
    "lorem",
    "ipsum",
    "42",
    "UA-1234",
    "reservation",
    "résumé",
    "日本語",
    "€100",
    "\n",
    '{"k": [1, 2]}',
    "\\path\\to",
    "<tag>",
    "emoji 🚀",
)


class _Ids:
    """Unique message ids and tool_call ids within one history."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0
        self.calls = 0

    def msg(self) -> str:
        self.n += 1
        return f"{self.prefix}m{self.n}"

    def call(self, style: str) -> str:
        self.calls += 1
        return f"toolu_{self.prefix}{self.calls:04d}" if style == "anthropic" else f"call_{self.prefix}{self.calls}"


# --------------------------------------------------------------------------------------------------------------
# pieces
# --------------------------------------------------------------------------------------------------------------


@st.composite
def texts(draw, min_size: int = 0, max_size: int = 200) -> str:
    """Text of a drawn length, built by repeating a few words (fast even for tens of thousands of chars)."""
    n = draw(st.integers(min_size, max_size))
    if n == 0:
        return ""
    if n <= 24 and draw(st.booleans()):
        s = draw(st.text(min_size=n, max_size=n))
        if len(s) == n:
            return s
    pattern = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))) + " "
    return (pattern * (n // len(pattern) + 1))[:n]


@st.composite
def long_texts(draw, max_size: int = 20_000) -> str:
    """Mostly short, sometimes very long (tool results up to max_size chars)."""
    size = draw(st.sampled_from(["short", "short", "medium", "long"]))
    upper = {"short": 200, "medium": 3000, "long": max_size}[size]
    return draw(texts(min_size=0 if size == "short" else upper // 4, max_size=upper))


@st.composite
def base64_data(draw, max_bytes: int = 3000) -> str:
    seed = draw(st.binary(min_size=1, max_size=32))
    size = draw(st.integers(1, max_bytes))
    raw = (seed * (size // len(seed) + 1))[:size]
    return base64.b64encode(raw).decode("ascii")


@st.composite
def image_blocks(draw) -> dict:
    """An image with inline base64 data, in one of the formats LangChain meets."""
    data = draw(base64_data())
    form = draw(st.sampled_from(["image_url", "image_url_str", "v1", "v0", "anthropic", "input_image"]))
    if form == "image_url":
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    if form == "image_url_str":
        return {"type": "image_url", "image_url": f"data:image/png;base64,{data}"}
    if form == "v1":
        return {"type": "image", "base64": data, "mime_type": "image/png"}
    if form == "v0":
        return {"type": "image", "source_type": "base64", "data": data, "mime_type": "image/png"}
    if form == "anthropic":
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    return {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}


@st.composite
def text_blocks(draw, max_size: int = 200) -> dict:
    return {"type": "text", "text": draw(texts(min_size=1, max_size=max_size))}


@st.composite
def thinking_blocks(draw) -> dict:
    text = draw(texts(min_size=1, max_size=300))
    if draw(st.booleans()):
        signature = draw(texts(min_size=8, max_size=400)).replace(" ", "")
        return {"type": "thinking", "thinking": text, "signature": signature or "sig"}
    return {"type": "reasoning", "reasoning": text}


_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(WORDS),
)
JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.sampled_from(WORDS[:8]), children, max_size=3)
    ),
    max_leaves=6,
)
"""Small JSON values for tool-call arguments (built once: strategies are costly to construct)."""
_ARG_DICTS = st.dictionaries(st.sampled_from(("query", "path", "city", "ids", "options")), JSON_VALUES, max_size=4)


@st.composite
def tool_args(draw) -> dict:
    """Tool-call arguments from empty to several thousand characters."""
    size = draw(st.sampled_from(["empty", "small", "small", "large"]))
    if size == "empty":
        return {}
    args = draw(_ARG_DICTS)
    if size == "large":
        args["body"] = draw(texts(min_size=1000, max_size=6000))
    return args


@st.composite
def human_content(draw) -> Any:
    kind = draw(st.sampled_from(["str", "str", "blocks", "image"]))
    if kind == "str":
        return draw(texts(min_size=1, max_size=300))
    blocks: list = draw(st.lists(text_blocks(), min_size=1, max_size=3))
    if kind == "image":
        blocks.insert(draw(st.integers(0, len(blocks))), draw(image_blocks()))
    return blocks


@st.composite
def tool_result_content(draw) -> Any:
    kind = draw(st.sampled_from(["str", "str", "str", "blocks", "image"]))
    if kind == "str":
        return draw(long_texts())
    blocks: list = [{"type": "text", "text": draw(long_texts())}]
    if kind == "image":
        blocks.append(draw(image_blocks()))
    return blocks


# --------------------------------------------------------------------------------------------------------------
# history
# --------------------------------------------------------------------------------------------------------------


MALFORMED_ARGS = ('{"query": "unterminated', '{"path": ', "not json at all", '{"a": 1,}', "")
"""Raw argument strings a model writes that do not parse (truncated output, trailing comma, prose)."""


def invalid_call_result(call: dict) -> ToolMessage:
    """The error ToolMessage langchain.agents.create_agent adds for an invalid tool call (its text and status)."""
    name = call.get("name") or "unknown"
    return ToolMessage(
        content=f"Tool call {name} with id {call['id']} could not be executed - arguments were malformed or truncated.",
        name=name,
        tool_call_id=call["id"],
        status="error",
    )


def _tool_step(draw, ids: _Ids, max_parallel: int, reuse_call_ids: bool = False,
               invalid_calls: bool = False) -> list[BaseMessage]:
    style = draw(st.sampled_from(["openai", "openai_text", "blocks", "anthropic"]))
    n_invalid = draw(st.integers(0, 2)) if invalid_calls else 0
    n = draw(st.integers(0 if n_invalid else 1, max_parallel))
    calls = []
    for k in range(n):
        calls.append(
            {
                "name": draw(st.sampled_from(TOOL_NAMES)),
                "args": draw(tool_args()),
                "id": f"call_{k}" if reuse_call_ids else ids.call("anthropic" if style == "anthropic" else "openai"),
                "type": "tool_call",
            }
        )
    content: Any
    if style == "openai":
        content = ""
    elif style == "openai_text":
        content = draw(texts(min_size=1, max_size=200))
    elif style == "blocks":
        content = draw(st.lists(text_blocks(), min_size=1, max_size=2))
    else:
        content = []
        if draw(st.booleans()):
            content.append(draw(thinking_blocks()))
        if draw(st.booleans()):
            content.append(draw(text_blocks()))
        content.extend({"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in calls)
    invalid = [
        {
            "name": draw(st.sampled_from(TOOL_NAMES)),
            "args": draw(st.sampled_from(MALFORMED_ARGS)),
            "id": f"call_{n + k}" if reuse_call_ids else ids.call("openai"),
            "error": "Function arguments could not be parsed as JSON",
            "type": "invalid_tool_call",
        }
        for k in range(n_invalid)
    ]
    ai = AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, id=ids.msg(),
                   name=draw(st.sampled_from([None, None, "agent"])))
    # create_agent puts the error results of invalid calls right after the AIMessage, before the tools run
    errors = [invalid_call_result(c).model_copy(update={"id": ids.msg()}) for c in invalid]
    results = [
        ToolMessage(
            content=draw(tool_result_content()),
            tool_call_id=c["id"],
            name=c["name"],
            id=ids.msg(),
            status=draw(st.sampled_from(["success", "success", "success", "error"])),
        )
        for c in calls
    ]
    if len(results) > 1 and draw(st.booleans()):
        results = list(draw(st.permutations(results)))
    return [ai, *errors, *results]


def _answer(draw, ids: _Ids) -> AIMessage:
    kind = draw(st.sampled_from(["str", "str", "blocks", "thinking"]))
    if kind == "str":
        content: Any = draw(texts(min_size=1, max_size=400))
    elif kind == "blocks":
        content = draw(st.lists(text_blocks(), min_size=1, max_size=3))
    else:
        content = [draw(thinking_blocks()), draw(text_blocks())]
    return AIMessage(content=content, id=ids.msg())


@st.composite
def histories(
    draw,
    *,
    min_turns: int = 1,
    max_turns: int = 4,
    max_steps: int = 3,
    max_parallel: int = 7,
    system: bool | None = None,
    prior_summary: bool = False,
    min_tool_steps: int = 0,
    reuse_call_ids: bool = False,
    invalid_calls: bool = False,
) -> list[BaseMessage]:
    """A valid history (list[BaseMessage]) with unique message ids and tool_call ids.

    system: True / False forces the leading SystemMessage, None draws it.  prior_summary: allow a leading summary
    HumanMessage (additional_kwargs lc_source="summarization").  min_tool_steps: at least that many tool steps.
    reuse_call_ids: every AIMessage numbers its calls call_0, call_1, ... (ids repeat across turns).
    invalid_calls: tool steps may hold up to 2 invalid tool calls (AIMessage.invalid_tool_calls, raw malformed
    arguments) answered by create_agent's error ToolMessages, some steps only those."""
    ids = _Ids(draw(st.sampled_from(["", "x", "run7-"])))
    messages: list[BaseMessage] = []
    if system if system is not None else draw(st.booleans()):
        messages.append(SystemMessage(content=draw(texts(min_size=1, max_size=2000)), id=ids.msg()))
    if prior_summary and draw(st.booleans()):
        messages.append(
            HumanMessage(
                content="Here is a summary of the conversation to date:\n\n" + draw(texts(min_size=1, max_size=300)),
                additional_kwargs={"lc_source": "summarization", "lc_compaction": {"kind": "summary"}},
                id=ids.msg(),
            )
        )
    n_turns = draw(st.integers(min_turns, max_turns))
    steps = [draw(st.integers(0, max_steps)) for _ in range(n_turns)]
    if sum(steps) < min_tool_steps:
        steps[-1] += min_tool_steps - sum(steps)
    for t, k in enumerate(steps):
        last = t == n_turns - 1
        messages.append(
            HumanMessage(
                content=draw(human_content()), id=ids.msg(), name=draw(st.sampled_from([None, None, "user_1"]))
            )
        )
        if last and k == 0 and draw(st.booleans()):
            break  # pending request
        for _ in range(k):
            messages.extend(_tool_step(draw, ids, max_parallel, reuse_call_ids, invalid_calls))
        if last and k > 0 and draw(st.booleans()):
            break  # pending model call after tool results
        messages.append(_answer(draw, ids))
    return messages


# --------------------------------------------------------------------------------------------------------------
# broken histories
# --------------------------------------------------------------------------------------------------------------

DEFECT_CHECKS = {
    "orphan_tool_result": "no_orphan_tool_results",
    "dangling_tool_call": "no_dangling_tool_calls",
    "duplicate_tool_result": "no_duplicate_tool_results",
    "non_adjacent_tool_result": "tool_results_adjacent",
    "system_in_middle": "system_only_at_start",
    "starts_with_ai": "first_non_system_is_human",
    "duplicate_call_id_in_message": "no_duplicate_tool_results",
}
"""Defect kind -> the check that must fail on it."""


SYSTEM_NOTES = (
    "Reminder: answer in French from now on.",
    "The user's account was upgraded; quote the new limits.",
    "Tool results older than an hour are stale.",
)
"""Texts of mid-history SystemMessages (a middleware's reminder, a note injected mid-loop)."""


@st.composite
def with_system_notes(draw, history_strategy, max_notes: int = 3) -> list[BaseMessage]:
    """A history from `history_strategy` with 1..max_notes SystemMessages inserted after the first user request,
    each where it breaks no tool block (not inside a run of ToolMessages).  Valid except that providers such as
    Anthropic and Gemini reject a system message after the conversation started (system_only_at_start fails)."""
    ms = list(draw(history_strategy))
    first = next((i for i, m in enumerate(ms) if isinstance(m, HumanMessage)), len(ms) - 1)
    for n in range(draw(st.integers(1, max_notes))):
        spots = [p for p in range(first + 1, len(ms) + 1) if p == len(ms) or not isinstance(ms[p], ToolMessage)]
        at = draw(st.sampled_from(spots))
        ms.insert(at, SystemMessage(content=draw(st.sampled_from(SYSTEM_NOTES)), id=f"note{n}"))
    return ms


@dataclass(frozen=True)
class Defect:
    kind: str
    check: str
    index: int
    """Index of the faulty message: the orphan / duplicate / misplaced ToolMessage, the AIMessage with the
    dangling call or with two calls of one id, the mid-history SystemMessage, the leading AIMessage."""
    tool_call_id: str | None
    description: str


def _tool_blocks(messages: list[BaseMessage]) -> list[tuple[int, list[int]]]:
    blocks = []
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage) and (m.tool_calls or m.invalid_tool_calls):
            j = i + 1
            while j < len(messages) and isinstance(messages[j], ToolMessage):
                j += 1
            blocks.append((i, list(range(i + 1, j))))
    return blocks


def _first_non_system(messages: list[BaseMessage]) -> int:
    return next(i for i, m in enumerate(messages) if not isinstance(m, SystemMessage))


@st.composite
def broken_histories(draw, kinds: tuple[str, ...] = tuple(DEFECT_CHECKS), *,
                     reuse_call_ids: bool | None = False,
                     invalid_calls: bool | None = False) -> tuple[list[BaseMessage], Defect]:
    """(history, Defect): a valid history with exactly one defect of a drawn kind (see DEFECT_CHECKS).
    reuse_call_ids, invalid_calls: as in `histories` (None: drawn)."""
    kind = draw(st.sampled_from(kinds))
    reuse = draw(st.booleans()) if reuse_call_ids is None else reuse_call_ids
    invalid = draw(st.booleans()) if invalid_calls is None else invalid_calls
    ms = list(draw(histories(max_turns=3, max_steps=2, max_parallel=4, min_tool_steps=1, reuse_call_ids=reuse,
                             invalid_calls=invalid)))
    blocks = _tool_blocks(ms)
    start = _first_non_system(ms)
    tcid: str | None = None

    if kind == "orphan_tool_result":
        tcid = "call_orphan_0"
        index = draw(st.integers(start + 1, len(ms)))
        ms.insert(index, ToolMessage(content="stray result", tool_call_id=tcid, id="orphan-tool", name="search"))
        desc = f"ToolMessage at [{index}] answers {tcid!r}, which no AIMessage calls"
    elif kind == "dangling_tool_call":
        ai_index, tools = draw(st.sampled_from(blocks))
        t = draw(st.sampled_from(tools))
        tcid = ms[t].tool_call_id
        del ms[t]
        index = ai_index
        desc = f"the ToolMessage answering {tcid!r} of the AIMessage at [{index}] was removed"
    elif kind == "duplicate_tool_result":
        _, tools = draw(st.sampled_from(blocks))
        t = draw(st.sampled_from(tools))
        tcid = ms[t].tool_call_id
        index = t + 1
        ms.insert(index, ms[t].model_copy(update={"id": "duplicate-tool"}))
        desc = f"the result of {tcid!r} appears twice, the copy at [{index}]"
    elif kind == "non_adjacent_tool_result":
        ai_index, tools = draw(st.sampled_from(blocks))
        t = draw(st.sampled_from(tools))
        tcid = ms[t].tool_call_id
        end = tools[-1] + 1  # first message after the block
        calls_again = end < len(ms) and isinstance(ms[end], AIMessage) and any(
            c.get("id") == tcid for c in [*ms[end].tool_calls, *ms[end].invalid_tool_calls])
        if end >= len(ms) or calls_again:
            # (an AIMessage that makes a call of the same id, reused ids, would make the moved result its own)
            ms.insert(end, AIMessage(content="Done.", id="appended-answer"))
        moved = ms.pop(t)
        # ms[end - 1] is now the first message after the (shorter) block: a non-tool message
        index = end
        ms.insert(index, moved)
        desc = f"the result of {tcid!r} was moved to [{index}], after the non-tool message at [{index - 1}]"
    elif kind == "system_in_middle":
        spots = [p for p in range(start + 1, len(ms) + 1) if p == len(ms) or not isinstance(ms[p], ToolMessage)]
        index = draw(st.sampled_from(spots))
        ms.insert(index, SystemMessage(content="Mid-history notice.", id="mid-system"))
        desc = f"SystemMessage at [{index}] after the conversation started"
    elif kind == "starts_with_ai":
        index = start
        ms.insert(index, AIMessage(content="Hello! How can I help?", id="leading-ai"))
        desc = f"the first non-system message [{index}] is an AIMessage"
    elif kind == "duplicate_call_id_in_message":
        ai_index, tools = draw(st.sampled_from(blocks))
        t = draw(st.sampled_from(tools))
        tcid = ms[t].tool_call_id
        ai = ms[ai_index]
        field = "tool_calls" if any(c["id"] == tcid for c in ai.tool_calls) else "invalid_tool_calls"
        twin = next(c for c in getattr(ai, field) if c["id"] == tcid)
        ms[ai_index] = ai.model_copy(update={field: [*getattr(ai, field), dict(twin)]})
        ms.insert(tools[-1] + 1, ToolMessage(content="second answer", tool_call_id=tcid, name=twin["name"],
                                             id="twin-tool"))
        index = ai_index
        desc = f"the AIMessage at [{index}] makes two calls with the id {tcid!r} (both answered)"
    else:  # pragma: no cover
        raise ValueError(kind)
    return ms, Defect(kind=kind, check=DEFECT_CHECKS[kind], index=index, tool_call_id=tcid, description=desc)


__all__ = [
    "DEFECT_CHECKS",
    "MALFORMED_ARGS",
    "Defect",
    "SYSTEM_NOTES",
    "base64_data",
    "broken_histories",
    "histories",
    "human_content",
    "image_blocks",
    "invalid_call_result",
    "long_texts",
    "texts",
    "thinking_blocks",
    "tool_args",
    "tool_result_content",
    "with_system_notes",
]
