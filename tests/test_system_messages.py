"""A mid-history SystemMessage is not the user (issue 12, item 4).

Such a message is sent as a HumanMessage (`normalize_system_messages`, marked `converted_from: "system"`): it is
kept like the system prompt, but it never starts an exchange, is never "the latest request" nor "the first
request", and never displaces another pin (the latest request, the thinking step of the active turn). The front
doors convert it on every call, compacting or not, looking only at the messages added since their previous call.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import add_messages

from lc_compaction import ApproximateCounter, CompactionPolicy, DropOldExchanges, TruncateToolResults, compact
from lc_compaction.integrations import CompactingChatMessageHistory, CompactionMiddleware
from lc_compaction.integrations import view as view_module
from lc_compaction.integrations.plan import plan_compaction
from lc_compaction.ladder import Slot, protect
from lc_compaction.markers import is_converted_system
from lc_compaction.structure import (
    is_conversation_start,
    check_invariants,
    is_request,
    normalize_system_messages,
    split_exchanges,
    split_steps,
)
from tests.agent_replay import ReplayChatModel, lookup
from tests.oracle import check_all_structural
from tests.oracle.checks import CheckContext, run_checks
from tests.oracle.generators import histories, with_system_notes
from tests.builders import history, tool_turn

FAST = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

THINK = {"type": "thinking", "thinking": "plan the lookups", "signature": "sig" * 20}


def converted(messages: list) -> list:
    return normalize_system_messages(messages)[0]


def pins(messages: list, keep_from: int | None = None) -> list[str]:
    policy = CompactionPolicy(max_input_tokens=100_000)
    slots = [Slot(m, 1) for m in messages]
    protect(slots, len(messages) if keep_from is None else keep_from, [policy.is_pinned_by_caller(m) for m in messages])
    return [s.message.id for s in slots if s.pinned]


# ------------------------------------------------------------------------------------------------ structure


def test_a_converted_system_message_is_no_request_and_starts_no_exchange():
    msgs = converted([SystemMessage("s", id="s"), HumanMessage("q1", id="h1"), AIMessage("a1", id="a1"),
                      SystemMessage("note", id="n"), AIMessage("a2", id="a2"), HumanMessage("q2", id="h2")])
    note = msgs[3]
    assert isinstance(note, HumanMessage) and is_converted_system(note) and not is_request(note)
    steps = split_steps(msgs)
    assert [s.kind for s in steps] == ["system", "request", "assistant", "system", "assistant", "request"]
    assert [(e.request, [s.start for s in e.steps]) for e in split_exchanges(steps)] == [
        (None, [0]), (1, [1, 2, 3, 4]), (5, [5])]


def test_normalize_looks_only_at_the_new_messages_and_copies_only_when_it_converts():
    msgs = [SystemMessage("s", id="s"), HumanMessage("q", id="h"), SystemMessage("old", id="old"),
            AIMessage("a", id="a")]
    same, none = normalize_system_messages(msgs, start=3)
    assert same is msgs and none == []  # the old one is not looked at again (the caller converted it before)
    grown = [*msgs, SystemMessage("new", id="new")]
    out, repairs = normalize_system_messages(grown, start=4)
    assert [r.index for r in repairs] == [4] and out is not grown and out[:4] == grown[:4]
    assert isinstance(out[4], HumanMessage) and out[4].id == "new"
    leading = [SystemMessage("s1", id="s1"), SystemMessage("s2", id="s2")]
    assert normalize_system_messages(leading, start=1) == (leading, [])  # still the leading system prompt


def test_the_pins_stay_on_the_user_and_the_thinking_step():
    msgs = converted([SystemMessage("s", id="s"), HumanMessage("first", id="h1"), AIMessage("a1", id="a1"),
                      HumanMessage("latest", id="h2"), SystemMessage("injected", id="n1"),
                      AIMessage([THINK, {"type": "text", "text": "calling"}], id="think",
                                tool_calls=[{"name": "f", "args": {}, "id": "c", "type": "tool_call"}]),
                      ToolMessage("r", tool_call_id="c", id="t"), SystemMessage("injected again", id="n2")])
    pinned = pins(msgs)
    assert {"s", "h1", "h2", "n1", "n2"} <= set(pinned)
    assert "a1" not in pinned
    # the request is still running: its loop keeps the thinking step first by itself (progress.py, rule 3), so
    # the step is not pinned (its result may be truncated); once answered, the step is pinned
    answered = converted([*msgs[:-1], AIMessage("done", id="done")])
    assert {"s", "h1", "h2", "n1", "think", "t"} <= set(pins(answered))
    for case in (msgs, answered):
        out = compact(case, CompactionPolicy(max_input_tokens=300, token_counter="approximate")).messages
        assert "think" in {m.id for m in out}


def test_a_note_in_an_old_exchange_does_not_keep_that_exchange_from_going():
    msgs = converted([SystemMessage("s", id="s"), HumanMessage("first", id="h1"), AIMessage("a1 " * 200, id="a1"),
                      HumanMessage("second " * 200, id="h2"), AIMessage("a2 " * 200, id="a2"),
                      SystemMessage("remember the limits", id="n"), AIMessage("a3 " * 200, id="a3"),
                      HumanMessage("latest", id="h3"), AIMessage("a4", id="a4")])
    assert "h2" not in pins(msgs, keep_from=7)
    result = compact(msgs, CompactionPolicy(max_input_tokens=700, keep=("turns", 1), strategies=[DropOldExchanges()],
                                            token_counter="approximate"))
    ids = [m.id for m in result.messages]
    assert "h2" not in ids and "a2" not in ids and "a3" not in ids  # the exchange went
    assert "n" in ids and "h3" in ids and "h1" in ids  # the note stays, like the system prompt
    assert check_invariants(result.messages) == []


def test_keep_turns_counts_user_requests_only():
    msgs = [SystemMessage("s", id="s"), HumanMessage("q1 " * 300, id="h1"), AIMessage("a1 " * 300, id="a1"),
            HumanMessage("q2 " * 300, id="h2"), AIMessage("a2 " * 300, id="a2"), SystemMessage("note", id="n"),
            AIMessage("a3", id="a3")]
    recorder = _KeptPart()
    policy = CompactionPolicy(max_input_tokens=1_000, keep=("turns", 1), token_counter="approximate",
                              strategies=[recorder, TruncateToolResults(), DropOldExchanges()])  # the default ladder
    result = compact(msgs, policy)
    ids = [m.id for m in result.messages]
    assert result.triggered and "a1" not in ids  # something had to go: the older turn's answer
    assert recorder.kept["soft"] == ["h2", "a2", "n", "a3"]  # the last user turn is h2's, not the note's
    assert {"h2", "n", "a3"} <= set(ids)
    assert result.messages[ids.index("h2")].content == msgs[3].content
    # the soft pass stops above the target (dropping a1 is not enough), so the second pass goes on toward it
    # with only the most recent step kept: a2 may go there, never in the soft pass
    assert recorder.kept["relaxed"] == ["a3"]
    # with a target the soft pass reaches, the whole last user turn stays
    reached = compact(msgs, CompactionPolicy(max_input_tokens=1_000, keep=("turns", 1), token_counter="approximate",
                                             target=("fraction", 0.8)))
    ids = [m.id for m in reached.messages]
    assert reached.triggered and "a1" not in ids and {"h2", "a2", "n", "a3"} <= set(ids)
    assert reached.stop_reason == "under_target"


class _KeptPart:
    """A test strategy that changes nothing and records, for each pass it runs in, the ids of the messages in
    the kept recent part (`Slot.kept`)."""

    name = "record_kept_part"

    def __init__(self) -> None:
        self.kept: dict[str, list[str | None]] = {}

    def apply(self, state: Any) -> None:
        self.kept.setdefault(state.pass_name, [s.message.id for s in state.slots if s.kept])

    async def aapply(self, state: Any) -> None:
        self.apply(state)


# ------------------------------------------------------------------------------------------------ compact


def _user_requests(messages: list) -> list:
    return [m for m in messages if isinstance(m, HumanMessage) and not m.additional_kwargs]


@FAST
@given(history=with_system_notes(histories(max_turns=4, max_steps=3, system=True)), window=st.integers(300, 12_000),
       counter=st.sampled_from(["approximate", "exact"]))
def test_compaction_keeps_the_notes_and_the_users_pins(history, window, counter):
    result = compact(history, CompactionPolicy(max_input_tokens=window, token_counter=counter))
    out = result.messages
    if not result.triggered:
        return  # under the trigger compact() returns its input as it is (the front doors convert: see below)
    assert check_invariants(out) == []
    check_all_structural(history, out)
    cut = {mid for a in result.actions if a.kind == "shortened" for mid in a.message_ids}  # the last resort
    checks = ["thinking_leads_active_turn", "system_only_at_start"]
    run_checks(checks + (["keeps_latest_human_verbatim"] if not cut else []), CheckContext(input=history, output=out))
    notes = [m for m in history if isinstance(m, SystemMessage) and m is not history[0]]
    by_id = {m.id: m for m in out}
    for note in notes:  # kept like the system prompt (text unchanged unless cut by the last resort), as a user turn
        assert isinstance(by_id[note.id], HumanMessage)
        assert by_id[note.id].content == note.content or note.id in cut
    requests = _user_requests(history)
    if requests:
        assert requests[0].id in by_id and requests[-1].id in by_id


# ------------------------------------------------------------------------------------------------ front doors


def grown_with_note(stored: list, n: int) -> list:
    return stored + [SystemMessage(f"note {n}: stay brief", id=f"note{n}")] + tool_turn(200 + n, 40)


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_the_door_converts_on_calls_that_do_not_compact_in_o_of_new(mode, monkeypatch):
    counter = ApproximateCounter()
    policy = CompactionPolicy(max_input_tokens=6_000, token_counter=counter)
    stored = history(10, 3000)
    first = plan_compaction(stored, None, policy, door="langgraph_node", mode=mode)
    assert first.result.compacted
    for write in first.messages_writes:  # what LangGraph stores (rewrite mode)
        stored = add_messages(stored, write)
    memory = first.memory
    monkeypatch.setattr(view_module, "_segments", lambda *a: pytest.fail("view memory rebuilt: O(history)"))
    for n in range(1, 4):
        stored = grown_with_note(stored, n)
        before = counter.cache_info()
        plan = plan_compaction(stored, memory, policy, door="langgraph_node", mode=mode)
        after = counter.cache_info()
        assert not plan.result.actions  # under the trigger
        assert after["hits"] + after["misses"] - before["hits"] - before["misses"] == 5  # the new messages only
        sent = plan.model_input
        assert not any(isinstance(m, SystemMessage) for m in sent[1:])
        note = next(m for m in sent if m.id == f"note{n}")
        assert isinstance(note, HumanMessage) and note.content == f"note {n}: stay brief"
        assert [r["kind"] for r in plan.memory["last"]["repairs"]] == ["system_message_converted"]
        if mode == "rewrite":  # stored in place: the same id, now a HumanMessage
            assert [[m.id for m in write] for write in plan.messages_writes] == [[f"note{n}"]]
            for write in plan.messages_writes:
                stored = add_messages(stored, write)
        memory = plan.memory
    # the next call with nothing new: the notes are sent converted again, and nothing is recounted
    plan = plan_compaction(stored + tool_turn(300, 40), memory, policy, door="langgraph_node", mode=mode)
    assert not any(isinstance(m, SystemMessage) for m in plan.model_input[1:])
    assert plan.memory["last"]["repairs"] == []


def test_the_chat_history_wrapper_sends_a_note_as_a_user_turn():
    from langchain_core._api import suppress_langchain_deprecation_warning
    from langchain_core.chat_history import InMemoryChatMessageHistory

    with suppress_langchain_deprecation_warning():
        inner = InMemoryChatMessageHistory()
    wrapper = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=100_000))
    wrapper.add_messages([SystemMessage("s", id="s"), HumanMessage("q", id="h"), AIMessage("a", id="a"),
                          SystemMessage("note", id="n")])
    view = wrapper.messages
    assert isinstance(view[3], HumanMessage) and view[3].content == "note" and isinstance(view[0], SystemMessage)
    assert [r.kind for r in wrapper.last_result.repairs] == ["system_message_converted"]
    assert isinstance(inner.messages[3], SystemMessage)  # stored as it was (no persist)


# ------------------------------------------------------------------------------------------------ end to end


class Reminder(AgentMiddleware):
    """Adds a SystemMessage to the state before every other model call (a reminder middleware)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.calls += 1
        return {"messages": [SystemMessage(f"Reminder {self.calls}: be brief.")]} if self.calls % 2 == 0 else None


def _script(turns: int) -> list[AIMessage]:
    out = []
    for k in range(turns):
        out.append(AIMessage([THINK, {"type": "text", "text": "looking"}],
                             tool_calls=[{"name": "lookup", "args": {"q": f"turn {k}"}, "id": f"c{k}",
                                          "type": "tool_call"}]))
        out.append(AIMessage(f"answer {k}"))
    return out


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_with_a_reminder_middleware(mode):
    """Every request the model receives: no SystemMessage after the first message, the user's latest request
    word for word, and the active turn still led by its thinking step."""
    turns = 6
    asked: list[str] = []

    def on_call(i: int, received: list, kwargs: dict) -> None:
        assert not any(isinstance(m, SystemMessage) for m in received[1:])
        assert check_invariants(received) == []
        check_all_structural(received, received)
        users = _user_requests(received)
        assert users and users[-1].content == asked[-1]
        last_user = max(j for j, m in enumerate(received) if m is users[-1])
        first_ai = next((m for m in received[last_user + 1:] if isinstance(m, AIMessage)), None)
        if first_ai is not None:
            assert first_ai.content[0]["type"] == "thinking"

    model = ReplayChatModel(messages=iter(_script(turns)), profile={"max_input_tokens": 2_000}, on_call=on_call)
    agent = create_agent(model, [lookup], system_prompt="You look things up.",
                         middleware=[Reminder(), CompactionMiddleware(mode=mode)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": mode}}
    for k in range(turns):
        asked.append(f"question {k}: " + "please " * 40)
        agent.invoke({"messages": [HumanMessage(asked[-1])]}, config)
    assert len(model.calls) == 2 * turns
    stored = agent.get_state(config).values["messages"]
    if mode == "rewrite":
        assert not any(isinstance(m, SystemMessage) for m in stored)
    else:
        assert any(isinstance(m, SystemMessage) for m in stored)  # view mode never changes the stored history


def test_a_greeting_first_keeps_the_users_first_request_pinned():
    """A chat that opens with the assistant's greeting (chat UIs do): the repair's placeholder goes first, and the
    user's first request, with the greeting before it, stays whole however much is dropped."""
    first = "My order ORD-4417 arrived broken; I want a refund to card ending 8812."
    msgs = [AIMessage("Hello! How can I help?", id="g"), HumanMessage(first, id="h0")]
    for i in range(1, 8):
        msgs += [AIMessage(f"answer {i} " + "blah " * 700, id=f"a{i}"), HumanMessage(f"follow-up {i}", id=f"h{i}")]
    result = compact(msgs, CompactionPolicy(max_input_tokens=4000), repair=True)
    out = result.messages
    assert is_conversation_start(out[0])
    assert [m.id for m in out[1:3]] == ["g", "h0"] and out[2].content == first
    assert result.fits
