"""Cache-sharing summary requests (issue 21): when the summarizer is the agent's own model, the summary request
repeats the agent's latest request byte for byte (tools, system message, messages, settings) and appends the
instruction last, so the provider reads the whole prefix from its prompt cache.

Over the real wire: `ChatOpenAI` against a local OpenAI-compatible server that records every request body
(`tests.fakes.FakeOpenAI`), through `compact(agent_request=...)`, through `create_agent` + `CompactionMiddleware`
and through a compiled `StateGraph` with `CompactionNode`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from lc_compaction import CompactionMiddleware, CompactionNode, CompactionPolicy, acompact, compact
from lc_compaction.agent_request import AgentRequest, same_model
from lc_compaction.markers import is_summary, summary_text
from lc_compaction.strategies.prompts import SHARED_REQUEST_LEAD
from lc_compaction.strategies.summarize import Summarize
from tests.builders import compact_model_tools, lookups_history
from tests.fakes import FakeOpenAI  # noqa: F401 - the `server` fixture (tests/fakes.py) yields one

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

SYSTEM = "You are an airline agent. Look reservations up with get_reservation before you answer."
LEAD = SHARED_REQUEST_LEAD.splitlines()[0]


@tool
def get_reservation(reservation_id: str) -> str:
    """Look a reservation up by its id."""
    notes = " ".join(f"seat{j % 9} row{j % 30}" for j in range(300))
    return json.dumps({"reservation_id": reservation_id, "status": "confirmed", "notes": notes})


def is_summary_request(body: dict) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and isinstance(last["content"], str) and last["content"].startswith(LEAD)


def assert_repeats(summary: dict, agent: dict) -> None:
    """`summary`'s tools and messages start with `agent`'s, byte-identical as JSON, with only the instruction after."""
    n = len(agent["messages"])
    assert json.dumps(summary.get("tools")) == json.dumps(agent.get("tools"))
    assert json.dumps(summary["messages"][:n]) == json.dumps(agent["messages"])
    assert len(summary["messages"]) == n + 1 and is_summary_request(summary)
    assert summary.get("tool_choice") == agent.get("tool_choice")  # unchanged: part of Anthropic's cache key
    assert summary["model"] == agent["model"]


def window_between(sent, history) -> int:
    """A window (tokens) whose budget holds `sent` (the agent's previous request, as it did) but not `history`."""
    counter = CompactionPolicy(max_input_tokens=10_000).counter
    low, high = counter.count_messages(sent), counter.count_messages(history)
    window = low
    while CompactionPolicy(max_input_tokens=window).budget_tokens() < (low + high) // 2:
        window += 10
    assert low <= CompactionPolicy(max_input_tokens=window).budget_tokens() < high
    return window


def shared_policy(history, strategy) -> CompactionPolicy:
    """A policy with `strategy` alone, at a window the history before its newest exchange's end fits."""
    return CompactionPolicy(max_input_tokens=window_between(history[:-2], history), strategies=[strategy])


def previous_request(model, history, messages=None, **settings) -> AgentRequest:
    """The agent's previous request over `history` (default: all but its newest exchange's end), with the tool."""
    sent = history[1:-2] if messages is None else messages
    return AgentRequest(model=model, messages=sent, system=history[0], tools=(get_reservation,), **settings)


def summary_of(messages) -> str:
    (message,) = [m for m in messages if is_summary(m)]
    return summary_text(message)


# ----------------------------------------------------------------------------------------------- the core call
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_summary_request_repeats_the_agents_request(server, mode):
    model = server.chat_model()
    history = lookups_history()
    system, sent = history[0], history[1:-2]  # the agent's previous request: all but the newest exchange's end
    server.script = [("text", "ok")]
    model.bind_tools([get_reservation]).invoke([system, *sent])  # the agent's own call, recorded by the server
    server.script = [("text", "The user checked reservations RES000Q to RES010Q; all confirmed.")]
    agent = AgentRequest(model=model, messages=sent, system=system, tools=(get_reservation,))
    window = window_between([system, *sent], history)
    policy = CompactionPolicy(max_input_tokens=window, strategies=[Summarize(model=model)])
    if mode == "sync":
        result = compact(history[1:], policy, agent_request=agent)
    else:
        result = asyncio.run(acompact(history[1:], policy, agent_request=agent))
    assert result.details["summary_request"] == "agent"
    assert len(server.requests) == 2
    assert_repeats(server.requests[1], server.requests[0])
    assert summary_of(result.messages).startswith("The user checked reservations RES000Q to RES010Q")
    instruction = server.requests[1]["messages"][-1]["content"]
    scope = instruction[instruction.index("The part to summarize"):]
    first = next(m for m in result.removed if m.type != "system")  # the first message the summary replaced
    assert first.tool_calls[0]["args"]["reservation_id"] in scope  # named by its call
    assert "RES010Q is confirmed." in scope or "RES011Q is confirmed." in scope
    assert "max_completion_tokens" in server.requests[1]  # the output cap is bound (not in the cache key)


def test_another_summarizer_model_gets_the_transcript_prompt(server):
    history = lookups_history()
    agent_model = server.chat_model().model_copy(update={"model_name": "gpt-4o"})
    agent = previous_request(agent_model, history)
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    window = window_between(history[:-2], history)
    result = compact(history[1:], CompactionPolicy(max_input_tokens=window,
                                                   strategies=[Summarize(model=server.chat_model())]),
                     agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    (body,) = server.requests
    assert "tools" not in body and len(body["messages"]) == 1
    assert "Request 1: check reservation RES001Q." in body["messages"][0]["content"]


def test_a_request_that_did_not_hold_what_is_summarized_is_not_repeated(server):
    model = server.chat_model()
    history = lookups_history()
    agent = previous_request(model, history, history[-4:])
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    result = compact(history[1:], shared_policy(history, Summarize(model=model)), agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    assert "tools" not in server.requests[0]


def test_sharing_off_gets_the_transcript_prompt(server):
    model = server.chat_model()
    history = lookups_history()
    agent = previous_request(model, history)
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    strategy = Summarize(model=model, share_agent_request=False)
    result = compact(history[1:], shared_policy(history, strategy), agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    assert "tools" not in server.requests[0]


def test_redact_applies_to_the_summary_of_a_shared_request(server):
    model = server.chat_model()
    history = lookups_history()
    agent = previous_request(model, history)
    server.script = [("text", "Reservations RES000Q to RES010Q; the card on file is 4111-1111-1111-1111.")]
    strategy = Summarize(model=model, redact=lambda text: text.replace("4111-1111-1111-1111", "[card]"))
    result = compact(history[1:], shared_policy(history, strategy), agent_request=agent)
    assert result.details["summary_request"] == "agent"
    text = summary_of(result.messages)
    assert "[card]" in text and "4111" not in text


def test_a_reply_that_calls_a_tool_is_no_summary(server):
    model = server.chat_model()
    history = lookups_history()
    agent = previous_request(model, history)
    server.script = [("tool", ("get_reservation", {"reservation_id": "RES001Q"}))]
    strategy = Summarize(model=model, max_retries=0, fallback="ledger")
    result = compact(history[1:], shared_policy(history, strategy), agent_request=agent)
    assert result.details["summarizer_failure"] == "no_text"
    assert result.details["summarizer"] == "ledger"
    assert not any(getattr(m, "tool_calls", None) and m.id and m.id.startswith("lc-compaction")
                   for m in result.messages)


def test_same_model_is_the_same_model_for_the_provider(server):
    a, b = server.chat_model(), server.chat_model()
    assert same_model(a, a) and same_model(a, b)
    assert not same_model(a, a.model_copy(update={"model_name": "gpt-4o"}))
    assert not same_model(a, None)


# ----------------------------------------------------------------------------------------------- the front doors
def agent_script(turns_before_answer: int):
    """The fake agent model: a summary request gets a summary; a user turn gets a lookup; after
    `turns_before_answer` lookups since the user's turn, an answer."""

    def answer(body: dict) -> tuple[str, object]:
        if is_summary_request(body):
            return "text", "Summary: the user checked reservations; every one was confirmed."
        messages = body["messages"]
        since = 0
        for m in reversed(messages):
            if m["role"] == "user":
                break
            since += m["role"] == "tool"
        if since >= turns_before_answer:
            return "text", "All of them are confirmed."
        k = len(messages)
        return "tool", ("get_reservation", {"reservation_id": f"RES{k:03d}Q"})

    return answer


def check_requests(requests: list[dict]) -> int:
    """Every summary request repeats the agent request just before it; returns how many there were."""
    shared = 0
    for k, body in enumerate(requests):
        if is_summary_request(body):
            previous = next(r for r in reversed(requests[:k]) if not is_summary_request(r))
            assert_repeats(body, previous)
            shared += 1
    return shared


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_middleware_shares_the_agents_request(server, mode):
    model = server.chat_model()
    server.script = [("by", agent_script(2))]
    middleware = CompactionMiddleware(max_input_tokens=8000, mode=mode, strategies=[Summarize(model=model)])
    agent = create_agent(model, [get_reservation], system_prompt=SYSTEM, middleware=[middleware],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": f"t-{mode}"}}
    for k in range(6):
        agent.invoke({"messages": [("user", f"Request {k}: check my reservations, please.")]}, config)
    assert check_requests(server.requests) >= 1
    state = agent.get_state(config).values
    if mode == "rewrite":
        assert any(is_summary(m) for m in state["messages"])


def test_compiled_graph_node_shares_the_agents_request(server):
    model = server.chat_model()
    server.script = [("by", agent_script(2))]
    bound = model.bind_tools([get_reservation])

    def call_model(state):
        return {"messages": [bound.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    node = CompactionNode(model=model, tools=[get_reservation], system_prompt=SYSTEM, max_input_tokens=8000,
                          strategies=[Summarize(model=model)])
    graph = compact_model_tools(node, call_model, [get_reservation])
    config = {"configurable": {"thread_id": "graph"}}
    for k in range(6):
        graph.invoke({"messages": [("user", f"Request {k}: check my reservations, please.")]}, config)
    assert check_requests(server.requests) >= 1
    assert any(is_summary(m) for m in graph.get_state(config).values["messages"])


def test_a_request_over_the_window_with_the_instruction_is_not_repeated(server):
    model = server.chat_model()
    history = lookups_history()
    filler = HumanMessage(" ".join(f"word{k}" for k in range(3000)), id="filler")
    policy = shared_policy(history, Summarize(model=model))
    counter = policy.counter
    assert counter.count_messages([*history, filler]) > policy.max_input_tokens  # over the window itself
    agent = previous_request(model, history, [*history[1:], filler])
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    result = compact(history[1:], policy, agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    assert "tools" not in server.requests[0]


# ------------------------------------------------------------------------- what a shared request must not bring back
def test_an_edited_message_makes_the_transcript_prompt(server):
    model = server.chat_model()
    history = lookups_history()
    sent = list(history[1:-2])
    sent[4] = sent[4].model_copy(update={"content": "Request 1: check reservation RES999Q (the old text)."})
    agent = previous_request(model, history, sent)
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    result = compact(history[1:], shared_policy(history, Summarize(model=model)), agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    assert "RES999Q" not in json.dumps(server.requests[0])


def test_a_forced_tool_choice_makes_the_transcript_prompt(server):
    model = server.chat_model()
    history = lookups_history()
    agent = previous_request(model, history, tool_choice="required")
    assert not agent.answers_in_text()
    server.script = [("text", "The user checked reservations RES000Q to RES010Q.")]
    result = compact(history[1:], shared_policy(history, Summarize(model=model)), agent_request=agent)
    assert result.details["summary_request"] == "transcript"
    assert result.details["summarizer"] == "model"


@pytest.mark.parametrize("door", ["middleware", "node"])
def test_a_rewind_never_summarizes_the_abandoned_branch(server, door):
    model = server.chat_model()
    server.script = [("by", agent_script(0))]
    pad = " My notes: " + "note " * 1100
    strategies = [Summarize(model=model)]
    if door == "middleware":
        agent = create_agent(model, [get_reservation], system_prompt=SYSTEM, checkpointer=InMemorySaver(),
                             middleware=[CompactionMiddleware(max_input_tokens=6000, strategies=strategies)])
    else:
        bound = model.bind_tools([get_reservation])
        node = CompactionNode(model=model, tools=[get_reservation], system_prompt=SYSTEM, max_input_tokens=6000,
                              strategies=strategies)
        agent = compact_model_tools(
            node, lambda state: {"messages": [bound.invoke([SystemMessage(SYSTEM), *state["messages"]])]},
            [get_reservation])
    config = {"configurable": {"thread_id": f"rewind-{door}"}}
    agent.invoke({"messages": [("user", "Is RES001Q confirmed?" + pad)]}, config)
    fork = agent.get_state(config).config
    agent.invoke({"messages": [("user", "Oops, wrong account: SECRET-ABANDONED." + pad)]}, config)
    seen = len(server.requests)
    out = agent.invoke({"messages": [("user", "Another question: RES009Q?" + pad * 3)]}, fork)
    after = server.requests[seen:]
    assert any("RES009Q" in json.dumps(r) for r in after)  # the fork's turn was sent
    assert not any("SECRET-ABANDONED" in json.dumps(r) for r in after)
    assert not any("SECRET-ABANDONED" in str(m.content) for m in out["messages"])


def test_a_bound_model_given_to_the_node_is_shared(server):
    model = server.chat_model()
    server.script = [("by", agent_script(2))]
    bound = model.bind_tools([get_reservation])
    node = CompactionNode(model=bound, system_prompt=SYSTEM, max_input_tokens=8000,
                          strategies=[Summarize(model=model)])
    graph = compact_model_tools(
        node, lambda state: {"messages": [bound.invoke([SystemMessage(SYSTEM), *state["messages"]])]},
        [get_reservation])
    config = {"configurable": {"thread_id": "bound"}}
    for k in range(6):
        graph.invoke({"messages": [("user", f"Request {k}: check my reservations, please.")]}, config)
    assert check_requests(server.requests) >= 1
