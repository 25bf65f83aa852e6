"""Compaction never shows in the user's stream: `stream_mode="messages"` carries the agent model's tokens and
the tool results, and nothing compaction writes (no `RemoveMessage`, no summary, no truncated result) nor any
token of the summarizer, through `create_agent` (middleware), `create_react_agent` (pre-model hook) and a
hand-built graph (a node before the model), sync and async, in rewrite mode.

Why it held before only partly: LangGraph streams a message a node writes when its id was not in the node's
input, so `[RemoveMessage(REMOVE_ALL_MESSAGES), *compacted]` and a summary with a new id were streamed, tagged
with the writing node (the model node, for the middleware). Now every message compaction writes carries a stored
id (`integrations/writes.py`), and the summarizer is called with LangGraph's `TAG_NOSTREAM` tag.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from lc_compaction import (CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, is_dropped_marker,
                           is_summary)
from lc_compaction.integrations import CompactionMiddleware, CompactionNode
from tests.builders import compact_model_tools, plain_chat, tool_loop

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

SUMMARIZER_WORDS = "zebra quokka narwhal"
AGENT_TEXT = "the agent answers politely"
MODEL_NODE = {"create_agent": "model", "create_react_agent": "agent", "stategraph": "model"}


@tool
def lookup(q: int) -> str:
    """Look a record up by its number."""
    return "record " + "lorem ipsum dolor sit amet " * 60


def _policy(strategies: str) -> CompactionPolicy:
    summarizer = GenericFakeChatModel(messages=iter([f"{SUMMARIZER_WORDS} summary of the earlier talk"] * 3))
    ladder = {"summarize": [Summarize(model=summarizer, fallback="raise")],
              "drop": [DropOldExchanges()],
              "truncate": [TruncateToolResults(keep=1)]}[strategies]
    return CompactionPolicy(max_input_tokens=1_500, strategies=ladder)


class _Bindable(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _build(door: str, policy: CompactionPolicy) -> Any:
    model = _Bindable(messages=iter([AIMessage(AGENT_TEXT)] * 3))
    if door == "create_agent":
        return create_agent(model, [lookup], middleware=[CompactionMiddleware(policy)], checkpointer=InMemorySaver())
    node = CompactionNode(policy, tools=[lookup])
    if door == "create_react_agent":
        return create_react_agent(model, [lookup], pre_model_hook=node, checkpointer=InMemorySaver())
    return compact_model_tools(node, lambda state: {"messages": [model.invoke(state["messages"])]}, [lookup])


def _history(strategies: str) -> list[BaseMessage]:
    # over the budget with or without the tool schema: the first call's before_model counts no schema yet (no
    # request seen), and it must compact the stored history here for its writes to be checked
    return tool_loop(5, 60, tool="lookup") if strategies == "truncate" else plain_chat(8, 60)


def _stream(graph: Any, history: list[BaseMessage], use_async: bool) -> list[tuple[BaseMessage, dict]]:
    config = {"configurable": {"thread_id": "s"}}
    if use_async:
        async def run() -> list[tuple[BaseMessage, dict]]:
            return [item async for item in graph.astream({"messages": history}, config, stream_mode="messages")]

        return asyncio.run(run())
    return list(graph.stream({"messages": history}, config, stream_mode="messages"))


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("strategies", ["summarize", "drop", "truncate"])
@pytest.mark.parametrize("door", ["create_agent", "create_react_agent", "stategraph"])
def test_nothing_compaction_writes_is_streamed(door: str, strategies: str, use_async: bool) -> None:
    graph = _build(door, _policy(strategies))
    history = _history(strategies)
    streamed = _stream(graph, history, use_async)
    values = graph.get_state({"configurable": {"thread_id": "s"}}).values
    assert values["compaction"]["last"]["outcome"] == "compacted", "the window should have forced a compaction"
    if strategies == "summarize":
        assert any(is_summary(m) and SUMMARIZER_WORDS in m.text for m in values["messages"]), "no summary written"
    stored_before = {m.id for m in history}
    for message, meta in streamed:
        where = f"{type(message).__name__}(id={message.id!r}) from node {meta.get('langgraph_node')!r}"
        assert not isinstance(message, RemoveMessage), where
        assert not is_summary(message) and not is_dropped_marker(message) and "quokka" not in message.text, where
        assert not (isinstance(message, ToolMessage) and message.id in stored_before), where  # a truncated result
        if meta.get("langgraph_node") == MODEL_NODE[door]:
            assert isinstance(message, (AIMessage, AIMessageChunk)) and message.text in AGENT_TEXT, where
    tokens = "".join(m.text for m, meta in streamed if meta.get("langgraph_node") == MODEL_NODE[door])
    assert AGENT_TEXT in tokens, "the agent's own reply must stream"


@pytest.mark.parametrize("door", ["create_agent", "stategraph"])
def test_control_the_summarizer_would_stream_without_its_nostream_tag(door: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with the tag taken off the summarizer's config, its tokens do stream, tagged
    with the node that runs the compaction."""
    from lc_compaction.strategies import summary_call

    base = summary_call.SUMMARIZER_CONFIG
    untagged = {**base, "tags": [], "metadata": dict(base["metadata"])}
    monkeypatch.setattr(summary_call, "_config", lambda: untagged)
    streamed = _stream(_build(door, _policy("summarize")), _history("summarize"), False)
    assert any("quokka" in m.text for m, _meta in streamed)
