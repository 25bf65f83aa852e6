"""A rewrite never erases a message written in the same step: it writes by id, never `REMOVE_ALL_MESSAGES`.

- A real compiled graph where another node appends a message in the same step as the compaction (a parallel
  branch, whichever of the two LangGraph applies first; a `Send`): every message the compactor did not remove is
  still stored, in the compacted order, with the other node's message after it.
- `update_state` between steps (a message added, one edited by id, an interrupt before the model): nothing the
  compactor did not remove is lost.
- `create_agent`: another middleware's command in the same model step (inside or outside ours) and `update_state`
  between turns: the same.
- A repaired history (a tool result added where nothing was removed) is written as two writes, still by id.
- On generated histories (valid, and broken with `repair=True`), the writes applied by LangGraph's own
  `add_messages`, with a foreign message appended before or after them, give the compacted history plus that
  message.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware, ExtendedModelResponse, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.types import Command, Send

from lc_compaction import (CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, is_dropped_marker,
                           is_summary)
from lc_compaction.integrations import CompactionMiddleware, CompactionNode
from lc_compaction.integrations.plan import plan_compaction
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call, plain_chat
from tests.oracle.generators import broken_histories, histories

SIDE = AIMessage("a note written beside the compaction", id="side")


def _kept_in_order(history: list[BaseMessage], stored: list[BaseMessage], removed: set[str]) -> None:
    """Every message of `history` the compactor did not remove is stored, in the input order."""
    kept = [m.id for m in history if m.id not in removed]
    stored_ids = [m.id for m in stored]
    assert [i for i in stored_ids if i in set(kept)] == kept, "a message the compactor kept is missing or moved"


def _removed(graph: Any, config: dict) -> set[str]:
    return set(graph.get_state(config).values["compaction"]["last"]["removed_ids"])


def _parallel_graph(side_name: str, node: CompactionNode, seen: list) -> Any:
    """START -> compact and START -> `side_name` (appends SIDE) in the same step -> model -> END."""
    def model(state: MessagesState) -> dict:
        seen.append(list(state["messages"]))
        return {"messages": [AIMessage("ok", id=f"reply{len(seen)}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", node)
    builder.add_node(side_name, lambda state: {"messages": [SIDE]})
    builder.add_node("model", model)
    builder.add_edge(START, "compact")
    builder.add_edge(START, side_name)
    builder.add_edge(["compact", side_name], "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=InMemorySaver())


# "audit" sorts before "compact", so LangGraph applies its write first: REMOVE_ALL_MESSAGES would erase it
@pytest.mark.parametrize("side_name", ["audit", "zz_side"])
@pytest.mark.parametrize("strategies", ["drop", "summarize"])
def test_a_parallel_branch_write_in_the_same_step_is_kept(side_name: str, strategies: str) -> None:
    policy = CompactionPolicy(max_input_tokens=1_000, strategies=[DropOldExchanges()] if strategies == "drop"
                              else [Summarize()])
    seen: list = []
    graph = _parallel_graph(side_name, CompactionNode(policy), seen)
    config = {"configurable": {"thread_id": side_name}}
    history = plain_chat(8, 40)
    updates = [u for u in graph.stream({"messages": history}, config, stream_mode="updates") if "compact" in u]
    written = updates[0]["compact"]["messages"]
    assert not any(isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES for m in written)
    stored = graph.get_state(config).values["messages"]
    removed = _removed(graph, config)
    assert removed, "the window should have forced a compaction"
    _kept_in_order(history, stored, removed)
    ids = [m.id for m in stored]
    assert ids.count("side") == 1 and ids[-1] == "reply1"
    assert ids.index("side") > ids.index("last")  # appended after the compacted history
    assert [m.id for m in seen[0]] == ids[:-1]  # the model saw what is stored
    # what compaction wrote stands where it removed: each new message carries a removed message's id
    assert {m.id for m in stored} <= {h.id for h in history} | {"side", "reply1"}
    written_new = [m for m in stored if m.id in removed]
    assert len(written_new) == 1  # the summary, or the marker left where exchanges were dropped
    assert is_summary(written_new[0]) if strategies == "summarize" else is_dropped_marker(written_new[0])


def test_a_send_in_the_same_step_is_kept() -> None:
    def fan_out(state: MessagesState) -> list[Send]:
        return [Send("note", {"messages": []}), Send("compact", state)]

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(max_input_tokens=1_000))
    builder.add_node("note", lambda state: {"messages": [SIDE]})
    builder.add_node("model", lambda state: {"messages": [AIMessage("ok", id="reply")]})
    builder.add_conditional_edges(START, fan_out, ["note", "compact"])
    builder.add_edge(["compact", "note"], "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "send"}}
    history = plain_chat(8, 40)
    graph.invoke({"messages": history}, config)
    stored = graph.get_state(config).values["messages"]
    _kept_in_order(history, stored, _removed(graph, config))
    assert [m.id for m in stored][-2:] == ["side", "reply"]


def test_update_state_between_steps_is_kept() -> None:
    """A message added and one edited by `update_state` between turns, and one added while the run waits before
    the model (after the compaction): all stored, in order, with the compacted history."""
    seen: list = []

    def model(state: MessagesState) -> dict:
        seen.append(list(state["messages"]))
        return {"messages": [AIMessage("ok", id=f"reply{len(seen)}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(max_input_tokens=1_000))
    builder.add_node("model", model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=["model"])
    config = {"configurable": {"thread_id": "u"}}
    graph.invoke({"messages": [HumanMessage("hello", id="h0")]}, config)
    graph.invoke(None, config)  # on to the model
    note = HumanMessage("a note added by update_state", id="note")
    edited = HumanMessage("hello, edited by id", id="h0")
    graph.update_state(config, {"messages": [note, edited]})
    history = graph.get_state(config).values["messages"] + plain_chat(8, 40)[1:]
    graph.invoke({"messages": plain_chat(8, 40)[1:]}, config)  # compacts, then waits before the model
    late = HumanMessage("added while waiting before the model", id="late")
    graph.update_state(config, {"messages": [late]})
    graph.invoke(None, config)
    stored = graph.get_state(config).values["messages"]
    removed = _removed(graph, config)
    assert removed
    _kept_in_order(history, stored, removed)
    ids = [m.id for m in stored]
    assert ids[0] == "h0" and stored[0].text == "hello, edited by id"
    assert ids[-2:] == ["late", "reply2"] and [m.id for m in seen[-1]] == ids[:-1]


# --------------------------------------------------------------------------------------- create_agent


class NoteMiddleware(AgentMiddleware):
    """Writes one message to the state in the model step (a command beside the model's reply)."""

    def wrap_model_call(self, request: Any, handler: Any) -> ExtendedModelResponse:
        response = handler(request)
        response = response.model_response if isinstance(response, ExtendedModelResponse) else response
        if not isinstance(response, ModelResponse):
            response = ModelResponse(result=[response])
        note = AIMessage("a note from another middleware", id="note")
        return ExtendedModelResponse(model_response=response, command=Command(update={"messages": [note]}))


@pytest.mark.parametrize("ours", ["outer", "inner"])
def test_create_agent_keeps_another_middlewares_write_in_the_same_step(ours: str) -> None:
    model = ReplayChatModel(messages=iter([AIMessage("answer", id="reply")]))
    compaction = CompactionMiddleware(max_input_tokens=1_000)
    middleware = [compaction, NoteMiddleware()] if ours == "outer" else [NoteMiddleware(), compaction]
    agent = create_agent(model, [], middleware=middleware, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": ours}}
    history = plain_chat(8, 40)
    agent.invoke({"messages": history}, config)
    values = agent.get_state(config).values
    stored, removed = values["messages"], set(values["compaction"]["last"]["removed_ids"])
    assert removed
    _kept_in_order(history, stored, removed)
    ids = [m.id for m in stored]
    note = "note"
    assert ids.count(note) == 1 and ids.count("reply") == 1
    assert ids.index("reply") > ids.index("last") and ids.index(note) > ids.index("last")
    assert [m.id for m in model.calls[0]] == [i for i in ids if i not in {"reply", note}]


def test_create_agent_update_state_between_turns_is_kept() -> None:
    model = ReplayChatModel(messages=iter([AIMessage("first", id="r1"), AIMessage("second", id="r2")]))
    agent = create_agent(model, [], middleware=[CompactionMiddleware(max_input_tokens=1_000)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "u"}}
    agent.invoke({"messages": [HumanMessage("hello", id="h0")]}, config)
    agent.update_state(config, {"messages": [HumanMessage("a note added by update_state", id="note")]})
    history = agent.get_state(config).values["messages"] + plain_chat(8, 40)[1:]
    agent.invoke({"messages": plain_chat(8, 40)[1:]}, config)
    values = agent.get_state(config).values
    removed = set(values["compaction"]["last"]["removed_ids"])
    assert removed
    _kept_in_order(history, values["messages"], removed)
    assert [m.id for m in values["messages"]][-1] == "r2"


@pytest.mark.parametrize("where", ["early", "late"])
def test_a_message_another_middleware_puts_in_the_request_is_never_stored(where: str) -> None:
    """Only messages the state holds are removed or stored: one another middleware put in the request is compacted
    with the rest (removed when early, sent when late) but never written, and removing it raises nothing. (Early,
    it is large: the request is over the window with it even after the history was compacted before the call, so
    the request's own check compacts it.)"""

    class Inject(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            size = 300 if where == "early" else 40
            extra = [HumanMessage("injected context " * size, id="injected"), AIMessage("ok", id="injected-ack")]
            at = 1 if where == "early" else len(request.messages) - 1
            return handler(request.override(messages=[*request.messages[:at], *extra, *request.messages[at:]]))

    model = ReplayChatModel(messages=iter([AIMessage("answer", id="reply")]))
    agent = create_agent(model, [], middleware=[Inject(), CompactionMiddleware(max_input_tokens=1_000)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "i"}}
    history = plain_chat(8, 40)
    agent.invoke({"messages": history}, config)
    values = agent.get_state(config).values
    removed = set(values["compaction"]["last"]["removed_ids"])
    sent = {m.id for m in model.calls[0]}
    assert ("injected" not in sent) if where == "early" else ("injected" in sent and "injected-ack" in sent)
    ids = [m.id for m in values["messages"]]
    assert "injected" not in ids and "injected-ack" not in ids
    _kept_in_order(history, values["messages"], removed)
    # the stored history is the compaction before the call; the request's check took more out, never added any
    assert set(ids[:-1]) >= {m.id for m in model.calls[0] if not m.id.startswith("injected")}
    assert len(model.calls[0]) < len(values["messages"]) + (2 if where == "late" else 0)


# --------------------------------------------------------------------------------------- a repaired history


def _dangling() -> list[BaseMessage]:
    """A long chat whose latest exchange has a tool call without a result (repair adds one where nothing goes)."""
    history = plain_chat(8, 40)
    return [*history, ai_call("c9", "a9", name="lookup"), AIMessage("it did not answer", id="after")]


def test_a_repair_is_written_in_two_writes_by_id_beside_a_parallel_write() -> None:
    seen: list = []
    graph = _parallel_graph("audit", CompactionNode(max_input_tokens=1_000, repair=True), seen)
    config = {"configurable": {"thread_id": "repair"}}
    history = _dangling()
    graph.invoke({"messages": history}, config)
    stored = graph.get_state(config).values["messages"]
    _kept_in_order(history, stored, _removed(graph, config))
    ids = [m.id for m in stored]
    added = [m for m in stored if isinstance(m, ToolMessage) and m.tool_call_id == "c9"]
    assert len(added) == 1 and ids.index(added[0].id) == ids.index("a9") + 1  # right after its call
    assert ids.count("side") == 1 and ids[-1] == "reply1"
    node = CompactionNode(max_input_tokens=1_000, repair=True)
    out = node.invoke({"messages": _dangling()})
    assert isinstance(out, Command) and [key for key, _ in out.update].count("messages") == 2


def test_a_repair_through_create_agent_is_stored_in_order() -> None:
    model = ReplayChatModel(messages=iter([AIMessage("answer", id="reply")]))
    agent = create_agent(model, [], middleware=[CompactionMiddleware(max_input_tokens=1_000, repair=True)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "r"}}
    history = _dangling()
    agent.invoke({"messages": history}, config)
    values = agent.get_state(config).values
    stored = values["messages"]
    _kept_in_order(history, stored, set(values["compaction"]["last"]["removed_ids"]))
    assert [m.id for m in stored[:-1]] == [m.id for m in model.calls[0]] and stored[-1].id == "reply"


# --------------------------------------------------------------------------------------- generated histories


def _apply(stored: list[BaseMessage], writes: list[list[BaseMessage]], foreign: BaseMessage | None,
           first: bool) -> list[BaseMessage]:
    state = list(stored)
    if foreign is not None and first:
        state = add_messages(state, [foreign])
    for write in writes:
        state = add_messages(state, write)
    if foreign is not None and not first:
        state = add_messages(state, [foreign])
    return state


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), window=st.integers(150, 6_000), foreign_first=st.booleans(), broken=st.booleans(),
       summarize=st.booleans())
def test_the_writes_applied_by_add_messages_give_the_compacted_history(data, window, foreign_first, broken,
                                                                       summarize) -> None:
    if broken:
        history, _ = data.draw(broken_histories(kinds=("dangling_tool_call", "non_adjacent_tool_result",
                                                       "duplicate_tool_result", "orphan_tool_result")))
    else:
        history = data.draw(histories(max_turns=5, max_steps=3))
    strategies = [TruncateToolResults(), DropOldExchanges(), *([Summarize()] if summarize else [])]
    policy = CompactionPolicy(max_input_tokens=window, token_counter="approximate", repair=True,
                              strategies=strategies)
    plan = plan_compaction(history, None, policy, door="langgraph_node")
    for write in plan.messages_writes:
        assert not any(isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES for m in write)
    foreign = AIMessage("foreign", id="foreign-write")
    state = _apply(history, plan.messages_writes, foreign, foreign_first)
    ours = [m for m in state if m.id != "foreign-write"]
    assert [(m.id, m.content) for m in ours] == [(m.id, m.content) for m in plan.model_input]
    assert sum(m.id == "foreign-write" for m in state) == 1
    if len(plan.messages_writes) <= 1 or not foreign_first:
        assert state[-1].id == "foreign-write"  # after the compacted history
    assert _apply(history, plan.messages_writes, None, True) == ours
