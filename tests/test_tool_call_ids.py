"""Tool-call ids reused across turns (issue 12, item 2): pairing follows the wire format.

Several OpenAI-compatible servers number tool calls per assistant turn (`call_0` in every turn). On the wire a
ToolMessage answers a call of the closest AIMessage with tool calls before it, so such a history is valid: the
invariant check, repair, steps, the ledger and the report pair by position; an id repeated within ONE AIMessage
is still a violation, and `repair=True` repairs every violation it names. The front doors repair by default (each
repair in the event and the log line) and never raise on a history the provider accepts; `compact()` still raises
by default. End to end: a real `create_agent` agent whose scripted model reuses `call_0` every turn runs 10 turns.
"""

from __future__ import annotations

import logging
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from lc_compaction import CompactionPolicy, InvalidHistoryError, compact
from lc_compaction.integrations import CompactingChatMessageHistory, CompactionMiddleware, CompactionNode
from lc_compaction.report import compaction_table
from lc_compaction.strategies.ledger import entries
from lc_compaction.structure import (
    ViolationKind,
    check_invariants,
    repair_history,
    split_exchanges,
    split_steps,
    tool_pairs,
)
from tests.agent_replay import EventLog, ReplayChatModel, lookup
from tests.oracle import check_all_structural
from tests.oracle.checks import CheckContext, run_checks
from tests.oracle.generators import broken_histories, histories

FAST = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def calls(mid: str, *ids: str, name: str = "lookup", text: str = "") -> AIMessage:
    return AIMessage(text, id=mid, tool_calls=[{"name": name, "args": {"q": f"{mid}-{k}"}, "id": c, "type": "tool_call"}
                                               for k, c in enumerate(ids)])


def result(cid: str, mid: str, text: str = "r") -> ToolMessage:
    return ToolMessage(text, tool_call_id=cid, id=mid, name="lookup")


def per_turn_history(turns: int, size: int = 400) -> list:
    """`turns` user turns, each with two parallel calls numbered call_0 / call_1 (as per-turn servers do)."""
    out: list = [SystemMessage("You look things up.", id="s")]
    for k in range(turns):
        out += [HumanMessage(f"question {k}", id=f"h{k}"), calls(f"a{k}", "call_0", "call_1"),
                result("call_0", f"t{k}a", f"turn {k} first " + "x " * size),
                result("call_1", f"t{k}b", f"turn {k} second " + "y " * size), AIMessage(f"answer {k}", id=f"d{k}")]
    return out


# ------------------------------------------------------------------------------------------------ structure


def test_an_id_reused_in_another_turn_is_valid_and_pairs_by_position():
    history = per_turn_history(3)
    assert check_invariants(history) == []
    pairs = tool_pairs(history)
    ids = [m.id for m in history]
    for k in range(3):
        a = ids.index(f"a{k}")
        assert pairs[ids.index(f"t{k}a")] == (a, "call_0") and pairs[ids.index(f"t{k}b")] == (a, "call_1")
    steps = split_steps(history)
    assert [(s.kind, s.end - s.start) for s in steps[:4]] == [("system", 1), ("request", 1), ("assistant", 3),
                                                              ("assistant", 1)]
    assert [e.request for e in split_exchanges(steps)] == [None, 1, 6, 11]


def test_an_id_repeated_within_one_message_is_a_violation_naming_it():
    history = [HumanMessage("q", id="h"), calls("a", "call_0", "call_0"), result("call_0", "t1"),
               result("call_0", "t2")]
    found = [(v.kind, v.index, v.tool_call_id) for v in check_invariants(history)]
    assert ("duplicate_tool_call_id", 1, "call_0") in found
    with pytest.raises(InvalidHistoryError, match="message 1: duplicate_tool_call_id.*pass repair=True"):
        compact(history, CompactionPolicy(trigger=("messages", 0), keep=("messages", 0)))


def test_a_dangling_call_is_not_masked_by_another_turn_reusing_its_id():
    history = [HumanMessage("q", id="h"), calls("a1", "call_0"), HumanMessage("q2", id="h2"), calls("a2", "call_0"),
               result("call_0", "t")]
    assert [(v.kind, v.index) for v in check_invariants(history)] == [("dangling_tool_call", 1)]
    fixed, repairs = repair_history(history)
    assert check_invariants(fixed) == []
    assert [m.id for m in fixed][:3] == ["h", "a1", "lc-compaction-missing-a1-call_0"]
    assert fixed[-1].id == "t"  # the result stays with the call of its own turn


def test_repair_renames_a_repeated_id_with_its_result_and_tool_use_block():
    ai = AIMessage([{"type": "text", "text": "two lookups"},
                    {"type": "tool_use", "id": "call_0", "name": "lookup", "input": {"q": 1}},
                    {"type": "tool_use", "id": "call_0", "name": "lookup", "input": {"q": 2}}], id="a",
                   tool_calls=[{"name": "lookup", "args": {"q": 1}, "id": "call_0", "type": "tool_call"},
                               {"name": "lookup", "args": {"q": 2}, "id": "call_0", "type": "tool_call"}])
    history = [HumanMessage("q", id="h"), ai, result("call_0", "t1", "one"), result("call_0", "t2", "two")]
    fixed, repairs = repair_history(history)
    assert check_invariants(fixed) == []
    new_ai = fixed[1]
    assert [tc["id"] for tc in new_ai.tool_calls] == ["call_0", "call_0_2"]
    assert [b["id"] for b in new_ai.content if b["type"] == "tool_use"] == ["call_0", "call_0_2"]
    assert [(m.tool_call_id, m.content) for m in fixed[2:]] == [("call_0", "one"), ("call_0_2", "two")]
    assert {r.kind for r in repairs} == {"tool_call_id_renamed"}
    assert history[1].tool_calls[1]["id"] == "call_0"  # the input is not changed


def test_calls_and_results_without_ids_are_paired_and_given_ids():
    ai = AIMessage("", id="a", tool_calls=[{"name": "lookup", "args": {}, "id": None, "type": "tool_call"}])
    history = [HumanMessage("q", id="h"), ai, ToolMessage("found", tool_call_id="", id="t")]
    assert {v.kind for v in check_invariants(history)} == {"missing_tool_call_id"}
    fixed, repairs = repair_history(history)
    assert check_invariants(fixed) == []
    assert fixed[2].content == "found" and fixed[2].tool_call_id == fixed[1].tool_calls[0]["id"]
    assert {r.kind for r in repairs} == {"tool_call_id_added", "tool_call_id_renamed"}


VIOLATION_EXAMPLES: dict[str, list] = {
    "orphan_tool_result": [HumanMessage("q", id="h"), result("nope", "t")],
    "dangling_tool_call": [HumanMessage("q", id="h"), calls("a", "c1"), HumanMessage("next", id="h2")],
    "duplicate_tool_result": [HumanMessage("q", id="h"), calls("a", "c1"), result("c1", "t"), result("c1", "t2")],
    "tool_result_not_adjacent": [HumanMessage("q", id="h"), calls("a", "c1"), AIMessage("x", id="x"),
                                 result("c1", "t")],
    "first_message_not_human": [AIMessage("hello", id="g"), HumanMessage("q", id="h")],
    "system_not_at_start": [HumanMessage("q", id="h"), SystemMessage("late", id="s")],
    "remove_message": [HumanMessage("q", id="h"), RemoveMessage(id="gone")],
    "missing_tool_call_id": [HumanMessage("q", id="h"), calls("a", "c1"), ToolMessage("r", tool_call_id="", id="t")],
    "duplicate_tool_call_id": [HumanMessage("q", id="h"), calls("a", "c1", "c1"), result("c1", "t")],
}


def test_every_violation_kind_has_an_example():
    assert set(VIOLATION_EXAMPLES) == set(get_args(ViolationKind))


@pytest.mark.parametrize("kind", sorted(VIOLATION_EXAMPLES))
def test_repair_repairs_every_violation_it_names(kind):
    """The error says "pass repair=True": for every kind of violation, compact(repair=True) gives a valid
    history and reports what it did."""
    history = VIOLATION_EXAMPLES[kind]
    assert kind in {v.kind for v in check_invariants(history)}
    policy = CompactionPolicy(trigger=("messages", 0), keep=("messages", 0), token_counter="approximate")
    if kind != "system_not_at_start":  # that one is always converted, losslessly
        with pytest.raises(InvalidHistoryError, match="pass repair=True"):
            compact(history, policy)
    result = compact(history, policy, repair=True)
    assert check_invariants(result.messages) == []
    assert result.repairs


@FAST
@given(case=broken_histories(reuse_call_ids=None, invalid_calls=None))
def test_repair_fixes_generated_defects_with_reused_ids(case):
    history, defect = case
    fixed, repairs = repair_history(history)
    assert check_invariants(fixed) == [] and repairs, defect
    check_all_structural(fixed, fixed)


# ------------------------------------------------------------------------------------------------ compact


@FAST
@given(history=histories(max_turns=5, max_steps=3, reuse_call_ids=True), window=st.integers(300, 12_000),
       counter=st.sampled_from(["approximate", "exact"]))
def test_compact_accepts_ids_reused_across_turns(history, window, counter):
    policy = CompactionPolicy(max_input_tokens=window, token_counter=counter)
    result = compact(history, policy)  # repair is off: a wire-valid history must not raise
    assert result.repairs == []
    check_all_structural(history, result.messages)
    run_checks(["tool_pairs_atomic"], CheckContext(input=history, output=result.messages))
    assert check_invariants(result.messages) == []


def test_ledger_and_report_pair_reused_ids_by_position():
    history = per_turn_history(2, size=5)
    lines = entries(history)
    tools = [line for line in lines if line.startswith("- Tool")]
    sizes = [len(m.content) for m in history if isinstance(m, ToolMessage)]
    assert [line.rsplit("-> ", 1)[1] for line in tools] == [f"{n:,} characters" for n in sizes]
    nameless = [m.model_copy(update={"name": None}) if isinstance(m, ToolMessage) else m for m in history]
    renamed = [m.model_copy(update={"tool_calls": [{**tc, "name": f"tool_{m.id}"} for tc in m.tool_calls]})
               if isinstance(m, AIMessage) and m.tool_calls else m for m in nameless]
    table = compaction_table(renamed, renamed, "approximate")
    by_id = dict(zip([m.id for m in renamed], table["tool"]))
    assert by_id["t0a"] == "tool_a0" and by_id["t1a"] == "tool_a1"


def test_the_transcript_names_a_nameless_result_after_its_own_turns_call():
    from lc_compaction.strategies.transcript import render_transcript

    history = [HumanMessage("q0", id="h0"), calls("a0", "call_0", name="get_order"),
               ToolMessage("order W1", tool_call_id="call_0", id="t0"), HumanMessage("q1", id="h1"),
               calls("a1", "call_0", name="get_user"), ToolMessage("user U1", tool_call_id="call_0", id="t1")]
    shown = render_transcript(history, 1000)
    assert shown[2].startswith("Tool result (get_order)") and shown[5].startswith("Tool result (get_user)")


# ------------------------------------------------------------------------------------------------ front doors


def test_the_node_compacts_reused_ids_even_with_repair_off():
    history = per_turn_history(6)
    for repair in (None, False):
        update = CompactionNode(max_input_tokens=2_000, repair=repair).invoke({"messages": history})
        assert update["compaction"]["compactions"] == 1 and update["compaction"]["last"]["repairs"] == []


def test_the_doors_repair_by_default_with_each_repair_in_the_event_and_the_log(caplog):
    """An assistant message first: OpenAI accepts it, our rule does not; the doors repair it and say so."""
    history = [AIMessage("Hello! How can I help?", id="g"), *per_turn_history(6)[1:]]
    log = EventLog()
    node = CompactionNode(max_input_tokens=2_000)
    with caplog.at_level(logging.INFO, logger="lc_compaction.integrations.events"):
        from langgraph.graph import START, MessagesState, StateGraph
        graph = StateGraph(MessagesState)
        graph.add_node("compact", node)
        graph.add_edge(START, "compact")
        graph.compile().invoke({"messages": history}, {"callbacks": [log]})
    (event,) = log.events
    assert [r["kind"] for r in event["repairs"]] == ["conversation_start_added"]
    assert any("repaired: conversation_start_added at 0" in r.getMessage() for r in caplog.records)
    wrapper = CompactingChatMessageHistory(_memory(history), CompactionPolicy(max_input_tokens=2_000))
    view = wrapper.messages
    assert check_invariants(view) == [] and isinstance(view[0], HumanMessage)
    with pytest.raises(InvalidHistoryError):
        compact(history, CompactionPolicy(max_input_tokens=2_000))  # compact() keeps raising by default


def _memory(messages: list) -> Any:
    from langchain_core._api import suppress_langchain_deprecation_warning
    from langchain_core.chat_history import InMemoryChatMessageHistory

    with suppress_langchain_deprecation_warning():
        inner = InMemoryChatMessageHistory()
    inner.add_messages(messages)
    return inner


def test_the_chat_history_wrapper_folds_reused_ids():
    inner = _memory([])
    wrapper = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_500, repair=False))
    for m in per_turn_history(8):
        wrapper.add_message(m)
        view = wrapper.messages  # folds each message; an open tool block at the end is left as it is
        if isinstance(m, AIMessage) and not m.tool_calls:
            assert check_invariants(view) == []
    assert len(view) < len(inner.messages)


# ------------------------------------------------------------------------------------------------ end to end


def _script(turns: int) -> list[AIMessage]:
    """Per turn: two parallel lookups numbered call_0 / call_1 (the same ids every turn), then an answer."""
    out = []
    for k in range(turns):
        out.append(AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": f"turn {k} item {j}"}, "id": f"call_{j}",
                                              "type": "tool_call"} for j in range(2)]))
        out.append(AIMessage(f"answer {k}"))
    return out


def _checked(received: list) -> None:
    """Every request the model receives passes the invariant check, ours and the oracle's."""
    assert check_invariants(received) == [], check_invariants(received)
    check_all_structural(received, received)


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_with_call_0_every_turn_runs_ten_turns(mode):
    turns = 10
    model = ReplayChatModel(messages=iter(_script(turns)), profile={"max_input_tokens": 3_000},
                            on_call=lambda i, received, kwargs: _checked(received))
    log = EventLog()
    agent = create_agent(model, [lookup], system_prompt="You look things up.",
                         middleware=[CompactionMiddleware(mode=mode)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": mode}, "callbacks": [log]}
    for k in range(turns):
        agent.invoke({"messages": [HumanMessage(f"question {k}")]}, config)
        stored = agent.get_state(config).values["messages"]
        assert stored[-1].content == f"answer {k}"
    assert len(model.calls) == 2 * turns
    assert agent.get_state(config).values["compaction"]["compactions"] >= 1
    assert not any(e["repairs"] for e in log.events)  # a valid history: nothing to repair


@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_create_react_agent_hook_with_call_0_every_turn():
    from langgraph.prebuilt import create_react_agent

    turns = 10
    model = ReplayChatModel(messages=iter(_script(turns)), on_call=lambda i, received, kwargs: _checked(received))
    agent = create_react_agent(model, [lookup], pre_model_hook=CompactionNode(max_input_tokens=3_000),
                               checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "hook"}}
    for k in range(turns):
        agent.invoke({"messages": [HumanMessage(f"question {k}")]}, config)
    assert len(model.calls) == 2 * turns
    assert agent.get_state(config).values["compaction"]["compactions"] >= 1
