"""A thread left broken under the trigger is repaired on every call, not only when compaction runs (issue 20,
class 11).

A run stopped before its tools ran (`interrupt_before=["tools"]`, a crash, a timeout) leaves a tool call without
a result; the next user message then makes a history every provider rejects. The front doors check, on every
call, what is new since their previous call (`check_invariants(messages, start)`: O(new messages), from the
count tally's prefix) and repair it (or raise with `repair=False`):

- a real compiled graph (the node before the model, a `ToolNode`, `InMemorySaver`, `interrupt_before=["tools"]`)
  and `create_agent` (rewrite and view): the model receives a valid history, and in rewrite mode the stored one
  is repaired too; with `repair=False` the error names the call;
- the real result arriving in the same graph step as the repair (`Command(update=..., goto=...)` resumes the
  interrupted tools beside the compaction node): the placeholder gives way to it, never two results for a call;
  the same on histories where the real result is stored before or after the placeholder;
- the check on the steady state looks at the new messages only (the `start` it is given), and it is exact: on
  generated histories, valid or with one defect, it finds a violation exactly when the whole check does.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core._api import suppress_langchain_deprecation_warning
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from lc_compaction import CompactionPolicy, compact
from lc_compaction.integrations import CompactingChatMessageHistory, CompactionMiddleware, CompactionNode
from lc_compaction.structure import (MISSING_RESULT_TEXT, InvalidHistoryError, check_invariants, is_missing_result,
                                     repair_history)
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call, compact_model_tools
from tests.oracle.generators import broken_histories, histories

WINDOW = 100_000  # far over these histories: nothing triggers, only the repair can change them
CALL = AIMessage("", id="call", tool_calls=[{"name": "lookup", "args": {"q": 1}, "id": "c1", "type": "tool_call"}])


@tool
def lookup(q: int) -> str:
    """Look a record up by its number."""
    return f"record {q}"


def _results(messages: list[BaseMessage], call_id: str = "c1") -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id]


def _graph(node: CompactionNode, model: ReplayChatModel) -> Any:
    return compact_model_tools(node, lambda state: {"messages": [model.invoke(state["messages"])]}, [lookup],
                               interrupt_before=["tools"])


def _stopped_before_tools(graph: Any, config: dict) -> None:
    graph.invoke({"messages": [HumanMessage("look record 1 up", id="h1")]}, config)
    assert graph.get_state(config).next == ("tools",)


# ----------------------------------------------------------------------------------------- a compiled graph


def test_the_node_repairs_a_call_left_without_result_under_the_trigger() -> None:
    model = ReplayChatModel(messages=iter([CALL, AIMessage("sure", id="reply")]))
    graph = _graph(CompactionNode(max_input_tokens=WINDOW), model)
    config = {"configurable": {"thread_id": "t"}}
    _stopped_before_tools(graph, config)
    graph.invoke({"messages": [HumanMessage("never mind, something else", id="h2")]}, config)  # the tools never ran
    received = model.calls[-1]
    assert check_invariants(received) == [], "the model must receive a history the provider accepts"
    assert [r.text for r in _results(received)] == [MISSING_RESULT_TEXT]
    values = graph.get_state(config).values
    assert check_invariants(values["messages"]) == [], "the stored history is repaired too (rewrite mode)"
    last = values["compaction"]["last"]
    assert not last["triggered"] and [(r["kind"], r["tool_call_id"]) for r in last["repairs"]] == [
        ("missing_tool_result_added", "c1")]


def test_with_repair_off_the_node_reports_the_call_on_every_call() -> None:
    model = ReplayChatModel(messages=iter([CALL, AIMessage("sure", id="reply")]))
    graph = _graph(CompactionNode(max_input_tokens=WINDOW, repair=False), model)
    config = {"configurable": {"thread_id": "t"}}
    _stopped_before_tools(graph, config)
    with pytest.raises(InvalidHistoryError, match="message 1: dangling_tool_call.*'c1'"):
        graph.invoke({"messages": [HumanMessage("something else", id="h2")]}, config)
    assert len(model.calls) == 1  # the broken history never reached the model


def test_a_real_result_in_the_same_step_as_the_repair_is_kept_alone() -> None:
    """`Command(update=..., goto="compact")` resumes the interrupted tools in the step where the node repairs
    the call they answer: the placeholder the node wrote and the tool's result land together; the node's next
    call keeps the result, next to its call, and drops the placeholder (never two results for one call). (The
    model node of the step after, a branch of its own beside that call of the node, reads the step's merge as
    LangGraph wrote it; no front door stands between them.)"""
    model = ReplayChatModel(messages=iter([CALL, AIMessage("first", id="r1"), AIMessage("second", id="r2")]))
    graph = _graph(CompactionNode(max_input_tokens=WINDOW), model)
    config = {"configurable": {"thread_id": "t"}}
    _stopped_before_tools(graph, config)
    graph.invoke(Command(update={"messages": [HumanMessage("and record 2?", id="h2")]}, goto="compact"), config)
    received = model.calls[-1]  # after the node's call on the merge
    assert check_invariants(received) == [] and [r.text for r in _results(received)] == ["record 1"]
    stored = graph.get_state(config).values["messages"]
    assert check_invariants(stored) == []
    assert [r.text for r in _results(stored)] == ["record 1"]
    at = [m.id for m in stored].index("call")
    assert stored[at + 1].text == "record 1", "the result is moved next to its call"


def _side_by_side_graph(window: int, *, calls: int) -> tuple[Any, list[list[BaseMessage]]]:
    """A compiled graph whose compaction node runs in the same step as its tool node (both after the model, both
    before the next model call), as a new user built it; the model asks for `calls` parallel lookups once."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    seen: list[list[BaseMessage]] = []

    def model(state: MessagesState) -> dict:
        seen.append(list(state["messages"]))
        if state["messages"][-1].type == "human":
            return {"messages": [AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": k}, "id": f"c{k}",
                                                              "type": "tool_call"} for k in range(calls)])]}
        return {"messages": [AIMessage("done")]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(max_input_tokens=window))
    builder.add_node("compact_in_loop", CompactionNode(max_input_tokens=window))
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_conditional_edges("model", lambda s: ["tools", "compact_in_loop"] if s["messages"][-1].tool_calls
                                  else END, ["tools", "compact_in_loop", END])
    builder.add_edge(["tools", "compact_in_loop"], "model")
    return builder.compile(checkpointer=InMemorySaver()), seen


@pytest.mark.parametrize("calls", [1, 2])
def test_a_tool_node_in_the_same_step_as_the_node_answers_alone(calls: int) -> None:
    """The node runs beside the tool node that answers the model's calls (the trial's graph): it sees the calls
    still open at the end of the history and writes no placeholder for them (`_Planning.hold_open_tail`), so the
    next model input holds each real result once and nothing else for those calls."""
    graph, seen = _side_by_side_graph(WINDOW, calls=calls)
    graph.invoke({"messages": [HumanMessage("look records up", id="h1")]}, {"configurable": {"thread_id": "t"}})
    received = seen[1]
    assert check_invariants(received) == []
    for k in range(calls):
        assert [r.text for r in _results(received, f"c{k}")] == [f"record {k}"]
    assert not any(is_missing_result(m) for m in received)


def test_the_held_open_calls_are_counted_and_the_rest_compacted_beside_them() -> None:
    """Over the trigger, the node beside the tool node still compacts what comes before the open calls, counting
    them beside it: the next model input is valid and fits, with the real results."""
    graph, seen = _side_by_side_graph(2_000, calls=2)
    config = {"configurable": {"thread_id": "t"}}
    long = [HumanMessage(f"note {k}: " + "lorem ipsum dolor sit amet " * 40, id=f"n{k}") for k in range(12)]
    history: list[BaseMessage] = []
    for k, m in enumerate(long):
        history += [m, AIMessage(f"noted {k}", id=f"r{k}")]
    graph.update_state(config, {"messages": history})
    graph.invoke({"messages": [HumanMessage("look records up", id="h1")]}, config)
    received = seen[-1]
    assert check_invariants(received) == [] and not any(is_missing_result(m) for m in received)
    assert [r.text for r in _results(received, "c0")] == ["record 0"]
    assert len(received) < len(history) + 4, "nothing was compacted"


# ---------------------------------------------------------------------------------------------- create_agent


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_repairs_a_run_stopped_before_its_tools(mode: str, use_async: bool) -> None:
    model = ReplayChatModel(messages=iter([CALL, AIMessage("sure", id="reply")]))
    agent = create_agent(model, [lookup], middleware=[CompactionMiddleware(max_input_tokens=WINDOW, mode=mode)],
                         checkpointer=InMemorySaver(), interrupt_before=["tools"])
    config = {"configurable": {"thread_id": "t"}}
    run = (lambda x: asyncio.run(agent.ainvoke(x, config))) if use_async else (lambda x: agent.invoke(x, config))
    run({"messages": [HumanMessage("look record 1 up", id="h1")]})
    assert agent.get_state(config).next == ("tools",)
    run({"messages": [HumanMessage("never mind", id="h2")]})
    assert check_invariants(model.calls[-1]) == [], [m.text for m in model.calls[-1]]
    stored = agent.get_state(config).values["messages"]
    if mode == "rewrite":
        assert check_invariants(stored) == [] and [r.text for r in _results(stored)] == [MISSING_RESULT_TEXT]
    else:  # view mode keeps the stored history whole: the view sent is repaired, every call
        assert check_invariants(stored) != []


# ---------------------------------------------------------------------------------------------- chat history


def test_the_chat_history_wrapper_repairs_a_call_left_without_result_under_the_trigger() -> None:
    """A chain that stopped after the model asked for a tool, then the user's next message: the wrapper's view
    (what the chain sends) is repaired on the read, the trigger far away; the inner history is left as it is."""
    with suppress_langchain_deprecation_warning():
        inner = InMemoryChatMessageHistory()
    history = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=WINDOW))
    history.add_messages([HumanMessage("look record 1 up", id="h1"), CALL])
    assert [m.id for m in history.messages] == ["h1", "call"]  # an open tool block: the results may follow
    history.add_messages([HumanMessage("never mind", id="h2")])
    view = history.messages
    assert check_invariants(view) == [] and [r.text for r in _results(view)] == [MISSING_RESULT_TEXT]
    assert check_invariants(inner.messages) != []


# ------------------------------------------------------------------------------------------- the repair rule


@pytest.mark.parametrize("order", ["result_after", "result_first", "result_in_block"])
def test_a_placeholder_gives_way_to_the_real_result(order: str) -> None:
    placeholder = ToolMessage(MISSING_RESULT_TEXT, tool_call_id="c1", id="placeholder", status="error")
    real = ToolMessage("record 1", tool_call_id="c1", id="real")
    h1, h2 = HumanMessage("q", id="h1"), HumanMessage("next", id="h2")
    history = {"result_after": [h1, CALL, placeholder, h2, real],  # the tool's write applied after the node's
               "result_first": [h1, real, CALL, placeholder, h2],  # before it
               "result_in_block": [h1, CALL, real, placeholder, h2]}[order]
    assert check_invariants(history)
    fixed, repairs = repair_history(history)
    assert [m.id for m in fixed] == ["h1", "call", "real", "h2"]
    assert check_invariants(fixed) == []
    assert not any(is_missing_result(m) for m in fixed)
    assert repairs


def test_a_placeholder_still_answers_its_own_call_when_the_id_comes_back_later() -> None:
    """A server that reuses call ids: a later call of the same id with its own result leaves an earlier
    placeholder alone (pairing is by position)."""
    again = AIMessage("", id="again", tool_calls=[{"name": "lookup", "args": {"q": 2}, "id": "c1",
                                                   "type": "tool_call"}])
    history = [HumanMessage("q", id="h1"), CALL,
               ToolMessage(MISSING_RESULT_TEXT, tool_call_id="c1", id="placeholder", status="error"),
               HumanMessage("next", id="h2"), again, ToolMessage("record 2", tool_call_id="c1", id="r2"),
               ToolMessage("record 2 again", tool_call_id="c1", id="dup")]
    fixed, _ = repair_history(history)
    assert [m.id for m in fixed] == ["h1", "call", "placeholder", "h2", "again", "r2"]


# ------------------------------------------------------------------------------------------- what is checked


def test_a_steady_call_checks_the_new_messages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    def spy(messages: list[BaseMessage], start: int = 0) -> Any:
        seen.append((len(messages), start))
        return check_invariants(messages, start)

    core = importlib.import_module("lc_compaction.compact")  # the module (the package exports a function so named)
    monkeypatch.setattr(core, "check_invariants", spy)
    policy = CompactionPolicy(max_input_tokens=WINDOW)
    history: list[BaseMessage] = [HumanMessage(f"question {i}", id=f"q{i}") if i % 2 == 0 else
                                  AIMessage(f"answer {i}", id=f"a{i}") for i in range(400)]
    first = compact(history, policy, repair=True)
    grown = [*history, HumanMessage("one more", id="more")]
    second = compact(grown, policy, repair=True, tally=first.tally)
    assert second.messages is grown and not second.repairs
    assert seen == [(400, 0), (401, 400)]


def test_a_broken_history_with_a_repeated_result_is_repaired_under_the_trigger() -> None:
    """A repeated tool result alone takes a path without ladder state; with a broken history it goes through
    the check and the repair like any other."""
    result_text = "the same record " * 40
    history = [HumanMessage("q", id="h1"), ai_call("c0", "a0", name="lookup"),
               ToolMessage(result_text, tool_call_id="c0", id="t0"), AIMessage("ok", id="r0"),
               HumanMessage("again", id="h2"), CALL, HumanMessage("stop", id="h3"),
               ai_call("c2", "a2", name="lookup"), ToolMessage(result_text, tool_call_id="c2", id="t2")]
    result = compact(history, CompactionPolicy(max_input_tokens=WINDOW), repair=True)
    assert not result.triggered and check_invariants(result.messages) == []
    assert [r.kind for r in result.repairs] == ["missing_tool_result_added"]
    assert [a.kind for a in result.actions] == ["deduplicated"]


def test_compact_without_a_repair_decision_never_returns_a_broken_history_under_the_trigger() -> None:
    """`compact()` with no repair decision (neither the call nor the policy sets `repair`): a history under the
    trigger whose new messages break a rule raises `InvalidHistoryError` naming the index and the call, rather than
    coming back as it is for the provider to reject; asked to repair, it is repaired; a valid one still comes back
    as the same list, and with a tally only the new messages are checked."""
    policy = CompactionPolicy(max_input_tokens=WINDOW)
    history = [HumanMessage("q", id="h1"), CALL, HumanMessage("stop", id="h2")]
    with pytest.raises(InvalidHistoryError) as err:
        compact(history, policy)
    assert "c1" in str(err.value) and "1" in str(err.value)
    assert history == [HumanMessage("q", id="h1"), CALL, HumanMessage("stop", id="h2")]  # the input is untouched
    repaired = compact(history, policy, repair=True)
    assert check_invariants(repaired.messages) == [] and repaired.repairs
    valid = [HumanMessage("q", id="h1"), AIMessage("a", id="a1")]
    first = compact(valid, policy)
    assert first.messages is valid and first.stop_reason == "under_trigger"
    with pytest.raises(InvalidHistoryError):
        compact([*valid, ToolMessage("late", tool_call_id="nowhere", id="t9")], policy, tally=first.tally)


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])


@FAST
@given(data=st.data())
def test_the_check_from_a_valid_prefix_agrees_with_the_whole_check(data: st.DataObject) -> None:
    broken = data.draw(st.booleans())
    history = (data.draw(broken_histories(reuse_call_ids=None, invalid_calls=None))[0] if broken
               else data.draw(histories(reuse_call_ids=data.draw(st.booleans()))))
    valid_prefixes = [k for k in range(len(history) + 1) if not check_invariants(history[:k])]
    start = data.draw(st.sampled_from(valid_prefixes))
    assert bool(check_invariants(history, start)) == bool(check_invariants(history))
