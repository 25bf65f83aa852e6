"""The user's stream through `create_agent` keeps its shape with `CompactionMiddleware`, before and after a
compaction, in every `stream_mode` (issue 20, class 10).

Compaction writes from the middleware's own node ("CompactionMiddleware.before_model"), as LangChain's
`SummarizationMiddleware` does, never from the model node. So, against the same agent without the middleware
(same scripted model, same tool), turn after turn of a conversation that gets compacted (rewrite and view mode):

- "updates": the model and tool nodes' updates are the same dicts, with the same messages (the model node's is
  its reply alone: `update["messages"][-1]` is the reply); compaction's `RemoveMessage`s and rewritten messages
  come only in the middleware's node's update;
- "values": every chunk is the state dict, the middleware's private memory key beside the user's keys, and the
  latest message goes through the same sequence (request, tool call, tool result, reply);
- "messages": the same (message, node) items; nothing from the middleware's node;
- a list of modes: each part as above.

Before the fix the model node's update at the compacting turn was a list of dicts holding the `RemoveMessage`s
and the reply (so `update["messages"][-1]` raised `TypeError`), and in view mode every update of the model node
carried the memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from lc_compaction.integrations import CompactionMiddleware
from tests.agent_replay import ReplayChatModel

TURNS = 10
WINDOW = 2_500
USER_NODES = ("model", "tools")
OUR_NODE = "CompactionMiddleware.before_model"
MEMORY = "compaction"


@tool
def lookup(q: int) -> str:
    """Look a record up by its number."""
    return f"record {q}: " + "lorem ipsum dolor sit amet " * 60


def _script() -> list[AIMessage]:
    out = []
    for k in range(TURNS):
        out.append(AIMessage("", id=f"call{k}", tool_calls=[{"name": "lookup", "args": {"q": k}, "id": f"c{k}",
                                                             "type": "tool_call"}]))
        out.append(AIMessage(f"record {k} is filed under shelf {k}", id=f"answer{k}"))
    return out


def _agent(mode: str | None) -> Any:
    middleware = [] if mode is None else [CompactionMiddleware(max_input_tokens=WINDOW, mode=mode)]
    model = ReplayChatModel(messages=iter(_script()))
    return create_agent(model, [lookup], system_prompt="You look records up.", middleware=middleware,
                        checkpointer=InMemorySaver())


def _run(agent: Any, stream_mode: Any, use_async: bool) -> tuple[list[list[Any]], list[dict]]:
    """Every turn's stream items, and the memory after each turn (None without the middleware)."""
    config = {"configurable": {"thread_id": "t"}}
    turns, memories = [], []
    for k in range(TURNS):
        turn = {"messages": [HumanMessage(f"please look up record {k}", id=f"h{k}")]}
        if use_async:
            async def collect(turn: dict = turn) -> list[Any]:
                return [item async for item in agent.astream(turn, config, stream_mode=stream_mode)]

            turns.append(asyncio.run(collect()))
        else:
            turns.append(list(agent.stream(turn, config, stream_mode=stream_mode)))
        memories.append(agent.get_state(config).values.get(MEMORY))
    return turns, memories


def _message(m: BaseMessage) -> tuple:
    """A message as compared between the two agents (a tool result's id is a new uuid in each run)."""
    return type(m).__name__, m.text, m.id if isinstance(m, (AIMessage, HumanMessage)) else None


def _by_mode(items: list[Any], stream_mode: Any) -> dict[str, list[Any]]:
    if isinstance(stream_mode, list):
        out: dict[str, list[Any]] = {m: [] for m in stream_mode}
        for mode, chunk in items:
            out[mode].append(chunk)
        return out
    return {stream_mode: items}


def _updates(chunks: list[dict]) -> list[tuple]:
    """The user nodes' updates: node, the update's type, its keys and its messages."""
    out = []
    for chunk in chunks:
        for node, update in chunk.items():
            if node in USER_NODES:
                shape = (sorted(update), [_message(m) for m in update["messages"]]) if isinstance(update, dict) \
                    else [sorted(u) for u in update]
                out.append((node, type(update).__name__, shape))
    return out


def _latest(chunks: list[dict]) -> list[tuple]:
    """The latest message of each values chunk, consecutive repeats once."""
    out: list[tuple] = []
    for chunk in chunks:
        last = _message(chunk["messages"][-1])
        if not out or out[-1] != last:
            out.append(last)
    return out


def _streamed(items: list[tuple]) -> list[tuple]:
    return [(meta.get("langgraph_node"), *_message(m)) for m, meta in items]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("stream_mode", ["updates", "values", "messages", ["updates", "messages", "values"]],
                         ids=["updates", "values", "messages", "list"])
@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_stream_shapes_are_those_of_the_agent_without_compaction(mode: str, stream_mode: Any,
                                                                 use_async: bool) -> None:
    plain, _ = _run(_agent(None), stream_mode, use_async)
    ours, memories = _run(_agent(mode), stream_mode, use_async)
    compacted_at = [k for k, memory in enumerate(memories) if memory["compactions"]]
    assert compacted_at and compacted_at[0] < TURNS - 2, "the conversation must be compacted before its end"
    for k, (theirs, mine) in enumerate(zip(plain, ours)):
        when = f"turn {k} ({'after' if k >= compacted_at[0] else 'before'} the first compaction)"
        theirs_by, mine_by = _by_mode(theirs, stream_mode), _by_mode(mine, stream_mode)
        if "updates" in theirs_by:
            assert _updates(mine_by["updates"]) == _updates(theirs_by["updates"]), when
            for chunk in mine_by["updates"]:
                assert set(chunk) <= {*USER_NODES, OUR_NODE}, when
                if "model" in chunk:  # the common idiom
                    assert isinstance(chunk["model"]["messages"][-1], AIMessage), when
                for node, update in chunk.items():
                    written = update.get("messages", []) if isinstance(update, dict) else []
                    assert node == OUR_NODE or not any(isinstance(m, RemoveMessage) for m in written), when
        if "values" in theirs_by:
            assert all(isinstance(c, dict) and set(c) - {MEMORY} == {"messages"} for c in mine_by["values"]), when
            assert _latest(mine_by["values"]) == _latest(theirs_by["values"]), when
        if "messages" in theirs_by:
            assert _streamed(mine_by["messages"]) == _streamed(theirs_by["messages"]), when
            assert all(meta.get("langgraph_node") in USER_NODES for _, meta in mine_by["messages"]), when
    if mode == "rewrite" and stream_mode == "updates":  # the writes did happen, from the middleware's node
        writes = [m for turn in ours for chunk in turn for m in (chunk.get(OUR_NODE) or {}).get("messages", [])]
        assert any(isinstance(m, RemoveMessage) for m in writes)
