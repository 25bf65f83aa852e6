"""Where exchanges were dropped, one byte-stable marker says so (`markers.DROPPED_TEXT`), counted in the budget.

- Whole exchanges dropped: one AIMessage marker right before the next kept request; the result's tokens include
  it; the oracle's structural checks pass.
- Call after call on a growing conversation (as rewrite mode stores it): never two markers, and the marker is the
  same message, byte for byte, on every call after it appeared (the provider's prompt cache keeps it).
- Placement rule: never a HumanMessage, never right before an assistant tool call (steps dropped inside a
  running tool loop leave none), never beside another assistant turn (issue 20), never first after the system
  prompt, never last; on generated histories too.
- Recognized on later calls by its mark, or by its text alone after a round trip through the OpenAI format.
- Through the LangGraph node: stored with the id of the first message it stands for, in the place of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
    message_to_dict,
)

from langgraph.graph.message import add_messages

from lc_compaction import (DROPPED_TEXT, ApproximateCounter, CompactionPolicy, DropOldExchanges, compact,
                           is_dropped_marker)
from lc_compaction.integrations import CompactionNode
from lc_compaction.markers import is_shortened
from lc_compaction.integrations.plan import plan_compaction
from lc_compaction.structure import check_invariants
from tests.builders import compact_then_model, lookups, plain_chat, tool_loop, tool_turn
from tests.oracle.checks import check_all_structural
from tests.oracle.generators import histories


def _markers(messages: list[BaseMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if is_dropped_marker(m)]


def _check_placement(messages: list[BaseMessage]) -> None:
    """The rule of strategies/drop.py: an AIMessage, not first after the system prompt, not last, followed by a
    HumanMessage, with a HumanMessage as the nearest message before it that is not a tool call or result (an
    assistant turn between two user turns: strict templates leave tool calls and results out), never next to
    another marker."""
    for i in _markers(messages):
        m = messages[i]
        assert isinstance(m, AIMessage) and not m.tool_calls
        # its first line is the fixed text, unless the last resort cut it (it is still recognized: by its mark)
        assert isinstance(m.content, str) and (m.content.split("\n", 1)[0] == DROPPED_TEXT or is_shortened(m))
        assert 0 < i < len(messages) - 1, f"marker at {i} of {len(messages)}"
        assert not isinstance(messages[i - 1], SystemMessage) and not is_dropped_marker(messages[i - 1])
        assert isinstance(messages[i + 1], HumanMessage), messages[i + 1]
        before = next(m for m in reversed(messages[:i]) if not isinstance(m, ToolMessage)
                      and not (isinstance(m, AIMessage) and (m.tool_calls or m.invalid_tool_calls)))
        assert isinstance(before, HumanMessage), before


def test_dropped_exchanges_leave_one_marker_counted_in_the_budget() -> None:
    history = plain_chat(8, 40)
    policy = CompactionPolicy(max_input_tokens=1_000, strategies=[DropOldExchanges()])
    result = compact(history, policy)
    out = result.messages
    assert [m.id for m in result.removed], "the window should have forced a drop"
    (i,) = _markers(out)
    assert out[i - 1].id == "h0" and isinstance(out[i + 1], HumanMessage)  # between the first and a later request
    assert out[i + 1].id == next(m.id for m in history if m.id not in {"h0"} | {r.id for r in result.removed})
    assert result.tokens_after == policy.counter.count_messages(out)  # the marker is counted
    assert result.tokens_after <= policy.target_goal()[0]
    check_all_structural(history, out)
    _check_placement(out)


def test_call_after_call_the_marker_is_one_and_the_same() -> None:
    """A conversation growing by one exchange a call, stored as rewrite mode stores it (the compacted history plus
    the new messages): one marker at most, with one id from the call it appeared on, byte-identical from call to
    call while no drop extends it (a drop adds the words of the short requests it stands for, `said_line`)."""
    policy = CompactionPolicy(max_input_tokens=1_200, strategies=[DropOldExchanges()])
    stored: list[BaseMessage] = [HumanMessage("first request " + "x " * 50, id="h0")]
    first_seen: dict[str, Any] | None = None
    previous: dict[str, Any] | None = None
    drops = unchanged = 0
    for k in range(40):
        stored = stored + [AIMessage(f"answer {k} " + "y " * 60, id=f"a{k}"),
                           HumanMessage(f"request {k + 1} " + "x " * 60, id=f"h{k + 1}")]
        result = compact(stored, policy)
        stored = result.messages
        drops += bool(result.removed)
        markers = _markers(stored)
        assert len(markers) <= 1
        _check_placement(stored)
        if markers:
            dumped = message_to_dict(stored[markers[0]])
            first_seen = first_seen or dumped
            assert dumped["data"]["id"] == first_seen["data"]["id"]
            if not result.removed and previous is not None:
                assert dumped == previous
                unchanged += 1
            previous = dumped
        else:
            assert first_seen is None, "the marker disappeared"
    assert drops >= 5 and first_seen is not None and unchanged >= 5


def test_no_marker_right_before_an_assistant_tool_call() -> None:
    """Steps dropped inside a running tool loop: the next kept message is an assistant tool call, which may only
    follow a user or tool turn, so no marker is left."""
    history = tool_loop(12, 60)
    result = compact(history, CompactionPolicy(max_input_tokens=1_000, strategies=[DropOldExchanges()]))
    assert result.removed and not _markers(result.messages)
    check_all_structural(history, result.messages)


def test_the_marker_is_recognized_by_its_text_after_the_openai_format() -> None:
    policy = CompactionPolicy(max_input_tokens=1_000, strategies=[DropOldExchanges()])
    out = compact(plain_chat(8, 40), policy).messages
    round_trip = convert_to_messages(convert_to_openai_messages(out))
    assert [is_dropped_marker(m) for m in round_trip] == [is_dropped_marker(m) for m in out]
    grown = [*round_trip, AIMessage("answer " + "y " * 300, id="late-a"),
             HumanMessage("next " + "x " * 300, id="late-h")]
    again = compact(grown, policy).messages
    assert len(_markers(again)) == 1
    _check_placement(again)


def test_through_the_node_it_takes_the_place_and_id_of_the_first_message_it_stands_for() -> None:
    seen: list = []

    def model(state: Any) -> dict:
        seen.append(list(state["messages"]))
        return {"messages": [AIMessage("ok", id=f"reply{len(seen)}")]}

    graph = compact_then_model(CompactionNode(max_input_tokens=1_000), model)
    config = {"configurable": {"thread_id": "m"}}
    history = plain_chat(8, 40)
    graph.invoke({"messages": history}, config)
    values = graph.get_state(config).values
    stored = values["messages"]
    (i,) = _markers(stored)
    removed = values["compaction"]["last"]["removed_ids"]
    assert stored[i].id == removed[0] == "a0"  # the first message of the dropped run
    assert [m.id for m in seen[0]] == [m.id for m in stored[:-1]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=histories(max_turns=6, max_steps=3), window=st.integers(150, 8_000),
       turns=st.integers(0, 3))
def test_generated_histories_place_markers_by_the_rule_and_never_stack_them(history, window, turns) -> None:
    policy = CompactionPolicy(max_input_tokens=window, token_counter="approximate", keep=("turns", turns))
    out = history
    for k in range(3):  # compacted again as it grows: markers are recognized, merged, never stacked
        result = compact(out, policy)
        check_all_structural(history if k == 0 else out, result.messages)
        assert check_invariants(result.messages) == []
        _check_placement(result.messages)
        assert result.tokens_after == policy.counter.count_messages(result.messages)
        out = [*result.messages, *tool_turn(100 + k, 300)]


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_after_the_marker_is_written_the_next_call_counts_only_the_new_messages(mode: str) -> None:
    """The marker (and a summary) are renamed to a stored id for the state writes; the count tally moves to the
    renamed messages, so the next call, on the stored history as `add_messages` leaves it, is O(k) again."""
    counter = ApproximateCounter()
    policy = CompactionPolicy(max_input_tokens=1_000, token_counter=counter, strategies=[DropOldExchanges()])
    stored: list[BaseMessage] = plain_chat(8, 40)
    plan = plan_compaction(stored, None, policy, door="langgraph_node", mode=mode)
    assert _markers(plan.model_input)
    for write in plan.messages_writes:
        stored = add_messages(stored, write)
    stored = add_messages(stored, [AIMessage("ok", id="reply"), HumanMessage("and then?", id="next")])
    before = lookups(counter)
    again = plan_compaction(stored, plan.memory, policy, door="langgraph_node", mode=mode)
    assert not again.result.compacted and lookups(counter) - before == 2
    assert again.result.tokens_before == counter.count_messages(again.model_input)
