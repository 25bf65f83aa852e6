"""Events, logs and streaming of the front doors.

- Each compaction, and each skip for a reason (under the trigger, nothing removable, the pinned part alone over
  the window), is a `lc_compaction` custom event seen by `astream_events` and by callback handlers, with tokens
  before/after, strategies, messages affected and the reason; and a log line ("Context optimized: ...").
- `ainvoke` / `astream` paths of the node and the middleware.
- A summarizer's model call tagged `TAG_NOSTREAM` does not stream its tokens in `stream_mode="messages"` while
  the agent's tokens do (and, as a control, the same call without the tag does stream).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import MessagesState

from lc_compaction import CompactionPolicy
from lc_compaction.integrations import EVENT_NAME, CompactionMiddleware, CompactionNode
from lc_compaction.integrations.plan import plan_compaction
from lc_compaction.ladder import LadderState
from lc_compaction.markers import is_summary, make_summary_message
from tests.agent_replay import EventLog
from tests.builders import compact_then_model, plain_chat

LOGGER = "lc_compaction.integrations.events"
OPTIMIZED = re.compile(r"Context optimized: ([\d,]+) -> ([\d,]+) tokens \((.+)\), (\d+) messages affected")




def _graph(node: CompactionNode, model: Any) -> Any:
    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    return compact_then_model(node, call_model)



# --------------------------------------------------------------------------------------- events and logs


def test_astream_events_shows_compaction_then_skips(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    model = GenericFakeChatModel(messages=iter(["first answer", "second answer"]))
    graph = _graph(CompactionNode(max_input_tokens=1_000), model)
    config = {"configurable": {"thread_id": "e"}}

    async def collect(turn: dict) -> list[dict]:
        return [ev["data"] async for ev in graph.astream_events(turn, config, version="v2")
                if ev["event"] == "on_custom_event" and ev["name"] == EVENT_NAME]

    first = asyncio.run(collect({"messages": plain_chat(8, 40)}))
    second = asyncio.run(collect({"messages": [HumanMessage("short follow-up", id="f")]}))
    assert len(first) == 1 and len(second) == 1
    ran, skipped = first[0], second[0]
    assert ran["outcome"] == "compacted" and ran["tokens_after"] < ran["tokens_before"]
    assert ran["strategies_applied"] == ["drop_old_exchanges"] and ran["messages_affected"] > 0
    assert ran["messages_after"] < ran["messages_before"] and ran["door"] == "langgraph_node"
    assert skipped["outcome"] == "skipped" and skipped["reason"] == "under_trigger"
    assert skipped["tokens_before"] == skipped["tokens_after"]

    lines = [r for r in caplog.records if r.name == LOGGER]
    match = OPTIMIZED.fullmatch(lines[0].getMessage())
    assert lines[0].levelno == logging.INFO and match
    assert int(match[1].replace(",", "")) == ran["tokens_before"]
    assert int(match[2].replace(",", "")) == ran["tokens_after"]
    assert match[3] == "drop_old_exchanges" and int(match[4]) == ran["messages_affected"]
    assert lines[1].levelno == logging.DEBUG and "under_trigger" in lines[1].getMessage()


def test_nothing_removable_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    node = CompactionNode(max_input_tokens=10_000, trigger=("tokens", 50))
    log = EventLog()
    node.invoke({"messages": [HumanMessage("one long request " * 40, id="only")]}, {"callbacks": [log]})
    assert log.events[0]["reason"] == "nothing_removable" and log.events[0]["outcome"] == "skipped"
    assert log.events[0]["fits"] is True
    assert any("skipped (nothing_removable)" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_pinned_part_over_the_window_is_reported_and_still_sent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    model = GenericFakeChatModel(messages=iter(["answer"]))
    graph = _graph(CompactionNode(max_input_tokens=500), model)
    log = EventLog()
    history = [SystemMessage("a very long policy " * 200, id="sys"), HumanMessage("hi", id="h")]
    out = graph.invoke({"messages": history}, {"configurable": {"thread_id": "p"}, "callbacks": [log]})
    assert log.events[0]["reason"] == "pinned_over_budget" and log.events[0]["fits"] is False
    assert out["messages"][-1].content == "answer" and out["messages"][0].id == "sys"
    assert any(r.levelno == logging.WARNING and "over the budget" in r.getMessage() for r in caplog.records)


def test_event_without_a_parent_run_is_skipped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    update = CompactionNode(max_input_tokens=1_000).invoke({"messages": plain_chat(8, 40)})
    assert update["compaction"]["last"]["outcome"] == "compacted"
    assert any(OPTIMIZED.fullmatch(r.getMessage()) for r in caplog.records)


def test_the_plan_names_the_door_in_its_event_and_not_in_its_memory() -> None:
    """Both doors run `plan_compaction` with their own door name: it is in the event data, while the memory
    (the state both doors store) is the same whichever door wrote it."""
    policy = CompactionPolicy(max_input_tokens=1_000, token_counter="approximate")
    plans = {door: plan_compaction(plain_chat(8, 40), None, policy, door=door)
             for door in ("langgraph_node", "agent_middleware")}
    node, middleware = plans["langgraph_node"], plans["agent_middleware"]
    assert node.event["door"] == "langgraph_node" and middleware.event["door"] == "agent_middleware"
    assert node.result.compacted and node.event["state_messages"] == len(plain_chat(8, 40))
    for plan in (node, middleware):
        assert plan.event == {**plan.memory["last"], "door": plan.event["door"],
                              "state_messages": plan.event["state_messages"]}
        assert "door" not in plan.memory["last"] and "state_messages" not in plan.memory["last"]
    def timeless(memory: dict) -> dict:  # the wall time of the call is the one field that may differ
        return {**memory, "last": {k: v for k, v in memory["last"].items() if k != "elapsed_ms"}}

    assert timeless(node.memory) == timeless(middleware.memory)


# --------------------------------------------------------------------------------------- async paths


def test_node_ainvoke_and_astream_updates() -> None:
    model = GenericFakeChatModel(messages=iter(["a1", "a2"]))
    graph = _graph(CompactionNode(max_input_tokens=1_000), model)
    config = {"configurable": {"thread_id": "a"}}

    async def run() -> tuple[dict, list]:
        out = await graph.ainvoke({"messages": plain_chat(8, 40)}, config)
        updates = [u async for u in graph.astream({"messages": [HumanMessage("more?", id="m")]}, config,
                                                  stream_mode="updates")]
        return out, updates

    out, updates = asyncio.run(run())
    assert len(out["messages"]) < len(plain_chat(8, 40)) + 1
    compact_updates = [u["compact"] for u in updates if "compact" in u]
    assert compact_updates[0]["compaction"]["calls"] == 2
    assert compact_updates[0]["compaction"]["last"]["reason"] == "under_trigger"


def test_middleware_event_in_astream_events() -> None:
    model = GenericFakeChatModel(messages=iter(["done"]), profile={"max_input_tokens": 1_000})
    agent = create_agent(model, [], system_prompt="Be brief.", middleware=[CompactionMiddleware()])

    async def run() -> list[dict]:
        return [ev["data"] async for ev in agent.astream_events({"messages": plain_chat(8, 40)}, version="v2")
                if ev["event"] == "on_custom_event" and ev["name"] == EVENT_NAME]

    events = asyncio.run(run())
    assert len(events) == 1 and events[0]["outcome"] == "compacted" and events[0]["door"] == "agent_middleware"


# --------------------------------------------------------------------------------------- summarizer tokens


class ModelSummary:
    """A test strategy: replaces the old exchanges by a summary written by a chat model, called with the config
    LangChain's SummarizationMiddleware uses (tags=[TAG_NOSTREAM]) unless `tagged` is False."""

    name = "test_model_summary"

    def __init__(self, model: Any, *, tagged: bool = True) -> None:
        self.model = model
        self.config = {"tags": [TAG_NOSTREAM] if tagged else [], "metadata": {"lc_source": "summarization"}}

    def _indices(self, state: LadderState) -> list[int]:
        return [i for whole, steps in state.removable_exchanges() if whole for s in steps for i in s.indices]

    def _put(self, state: LadderState, indices: list[int], text: str) -> None:
        state.put_summary(indices, make_summary_message(text, message_id="summary"), strategy=self.name)

    def apply(self, state: LadderState) -> None:
        if indices := self._indices(state):
            self._put(state, indices, self.model.invoke("Summarize.", config=self.config).text)

    async def aapply(self, state: LadderState) -> None:
        if indices := self._indices(state):
            self._put(state, indices, (await self.model.ainvoke("Summarize.", config=self.config)).text)


@pytest.mark.parametrize("tagged", [True, False])
def test_summarizer_tokens_do_not_stream(tagged: bool) -> None:
    # one reply per pass: the soft pass stops above the target (the two kept turns), so the second pass
    # summarizes again
    summarizer = GenericFakeChatModel(messages=iter(["zebra quokka summary of earlier talk"] * 2))
    agent_model = GenericFakeChatModel(messages=iter(["the agent answers politely"]))
    node = CompactionNode(max_input_tokens=1_000, strategies=[ModelSummary(summarizer, tagged=tagged)])
    graph = _graph(node, agent_model)
    config = {"configurable": {"thread_id": "s"}}

    async def run() -> list[Any]:
        return [message async for message, _meta in graph.astream({"messages": plain_chat(8, 40)}, config,
                                                                  stream_mode="messages")]

    # tokens of chat model calls arrive as AIMessageChunks (whole messages written by nodes arrive as messages)
    tokens = " ".join(m.text for m in asyncio.run(run()) if isinstance(m, AIMessageChunk))
    stored = graph.get_state(config).values["messages"]
    assert any(is_summary(m) and "zebra quokka" in m.text for m in stored), "the summarizer must have run"
    assert "politely" in tokens
    assert ("quokka" in tokens) is (not tagged)
