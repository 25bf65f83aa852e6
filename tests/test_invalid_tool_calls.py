"""Malformed tool calls (issue 12, item 3): `AIMessage.invalid_tool_calls` and their error results are one unit.

A model whose arguments do not parse gets an `invalid_tool_calls` entry (id, name, the raw argument string);
`langchain.agents.create_agent` answers each with an error ToolMessage before middleware runs, and langchain-openai
sends invalid calls as `tool_calls` on the wire (`_lc_invalid_tool_call_to_openai_tool_call`). So the invariant
check, steps, counting, truncation, dropping and repair treat them as calls, and what ChatOpenAI sends stays valid
(checked here on `_convert_message_to_dict`'s output and on the requests a local server receives).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import _convert_message_to_dict
from langgraph.checkpoint.memory import InMemorySaver

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, compact
from lc_compaction.integrations import CompactionMiddleware
from lc_compaction.strategies.ledger import entries
from lc_compaction.structure import check_invariants, repair_history, split_steps, tool_pairs
from lc_compaction.tokens import TOOL_CALL_OVERHEAD_TOKENS, TiktokenCounter
from tests.agent_replay import ReplayChatModel, ScriptedOpenAIServer, lookup
from tests.oracle import check_all_structural
from tests.oracle.checks import CheckContext, run_checks
from tests.oracle.generators import MALFORMED_ARGS, histories, invalid_call_result

FAST = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def invalid_ai(mid: str, cid: str = "call_9", args: str = '{"q": "unterminated', *, valid: tuple[str, ...] = ()
               ) -> AIMessage:
    return AIMessage("", id=mid,
                     tool_calls=[{"name": "lookup", "args": {"q": c}, "id": c, "type": "tool_call"} for c in valid],
                     invalid_tool_calls=[{"name": "lookup", "args": args, "id": cid, "error": "bad JSON",
                                          "type": "invalid_tool_call"}])


def error_result(cid: str, mid: str) -> ToolMessage:
    return invalid_call_result({"name": "lookup", "id": cid}).model_copy(update={"id": mid})


def wire_errors(request: list[dict[str, Any]]) -> list[str]:
    """Pairing errors of an OpenAI Chat Completions `messages` list (the provider's rule): every `tool` message
    answers a call of the assistant message that starts its run; every call of an assistant message is answered
    in the run right after it; ids are unique within one assistant message."""
    errors: list[str] = []
    open_ids: list[str] = []
    in_run = False
    for i, m in enumerate(request):
        if m["role"] == "tool":
            if not in_run or m["tool_call_id"] not in open_ids:
                errors.append(f"messages[{i}]: tool_call_id {m['tool_call_id']!r} answers no open call")
            else:
                open_ids.remove(m["tool_call_id"])
            continue
        if open_ids:
            errors.append(f"before messages[{i}]: calls {open_ids} unanswered")
        ids = [c["id"] for c in m.get("tool_calls") or []]
        if len(set(ids)) != len(ids) or not all(isinstance(x, str) and x for x in ids):
            errors.append(f"messages[{i}]: tool call ids {ids} are not distinct non-empty strings")
        open_ids, in_run = list(ids), bool(ids)
    if open_ids:
        errors.append(f"at the end: calls {open_ids} unanswered")
    return errors


def as_sent(messages: list) -> list[dict[str, Any]]:
    """What ChatOpenAI sends for `messages` (langchain-openai's own conversion)."""
    return [_convert_message_to_dict(m) for m in messages]


# ------------------------------------------------------------------------------------------------ structure


def test_an_invalid_call_and_its_error_result_are_one_tool_block():
    history = [HumanMessage("q", id="h"), invalid_ai("a", valid=("call_0",)), error_result("call_9", "e"),
               ToolMessage("found", tool_call_id="call_0", id="t"), AIMessage("done", id="d")]
    assert check_invariants(history) == []
    assert [(s.start, s.end, s.kind) for s in split_steps(history)] == [(0, 1, "request"), (1, 4, "assistant"),
                                                                       (4, 5, "assistant")]
    assert tool_pairs(history) == {2: (1, "call_9"), 3: (1, "call_0")}
    assert wire_errors(as_sent(history)) == []


def test_an_invalid_call_without_its_result_is_dangling_and_repaired():
    history = [HumanMessage("q", id="h"), invalid_ai("a"), AIMessage("done", id="d")]
    found = [(v.kind, v.index, v.tool_call_id) for v in check_invariants(history)]
    assert found == [("dangling_tool_call", 1, "call_9")]
    assert wire_errors(as_sent(history))  # the provider would reject it too
    fixed, repairs = repair_history(history)
    assert check_invariants(fixed) == [] and wire_errors(as_sent(fixed)) == []
    assert [r.kind for r in repairs] == ["missing_tool_result_added"]


def test_an_invalid_call_without_an_id_is_given_one_and_a_result():
    """ChatOpenAI would send `"id": null` for it, which the provider rejects; repair gives it an id."""
    ai = AIMessage("", id="a", invalid_tool_calls=[{"name": "lookup", "args": "{", "id": None, "error": "e",
                                                    "type": "invalid_tool_call"}])
    history = [HumanMessage("q", id="h"), ai]
    assert [v.kind for v in check_invariants(history)] == ["missing_tool_call_id"]
    fixed, _ = repair_history(history)
    assert check_invariants(fixed) == [] and wire_errors(as_sent(fixed)) == []
    assert fixed[1].invalid_tool_calls[0]["args"] == "{"  # the raw arguments are kept


def test_the_error_result_alone_is_no_longer_an_orphan():
    """The crash of the issue: the check looked only at tool_calls and raised on create_agent's error result."""
    history = [SystemMessage("s", id="s"), HumanMessage("q " * 300, id="h"), invalid_ai("a"),
               error_result("call_9", "e"), HumanMessage("again " * 300, id="h2")]
    result = compact(history, CompactionPolicy(max_input_tokens=600, repair=False))
    assert check_invariants(result.messages) == []
    kept = {m.id for m in result.messages}
    assert ("a" in kept) == ("e" in kept)


# ------------------------------------------------------------------------------------------------ counting


@pytest.mark.parametrize("args", [*MALFORMED_ARGS, '{"path": "' + "x" * 3000])
def test_an_invalid_call_costs_its_raw_arguments_as_sent(args):
    counter = TiktokenCounter()
    bare = AIMessage("", id="a")
    with_call = invalid_ai("a", args=args)
    sent = as_sent([with_call])[0]["tool_calls"][0]["function"]
    expected = TOOL_CALL_OVERHEAD_TOKENS + counter.count_text(sent["name"]) + counter.count_text(sent["arguments"])
    assert counter.count_message(with_call) - counter.count_message(bare) == expected


# ------------------------------------------------------------------------------------------------ strategies


def loop_with_invalid_calls(steps: int, size: int = 300) -> list:
    out: list = [SystemMessage("You look things up.", id="s"), HumanMessage("look these up", id="h")]
    for k in range(steps):
        out += [invalid_ai(f"a{k}", f"bad{k}", valid=(f"ok{k}",)), error_result(f"bad{k}", f"e{k}"),
                ToolMessage(f"record {k} " + "z " * size, tool_call_id=f"ok{k}", id=f"t{k}", name="lookup")]
    return out + [AIMessage("all done", id="d"), HumanMessage("and now?", id="h2")]


@pytest.mark.parametrize("strategy", [TruncateToolResults(), DropOldExchanges(), Summarize()])
def test_each_strategy_keeps_invalid_calls_with_their_results(strategy):
    history = loop_with_invalid_calls(6)
    result = compact(history, CompactionPolicy(max_input_tokens=1_500, strategies=[strategy], repair=False))
    assert result.compacted and check_invariants(result.messages) == []
    check_all_structural(history, result.messages)
    run_checks(["tool_pairs_atomic"], CheckContext(input=history, output=result.messages))
    assert wire_errors(as_sent(result.messages)) == []


def test_the_summarizer_and_the_ledger_show_an_invalid_call_with_its_raw_arguments():
    lines = entries(loop_with_invalid_calls(1))
    tool_lines = [line for line in lines if line.startswith("- Tool")]
    assert tool_lines[1].startswith('- Tool lookup({"q": "unterminated) [malformed arguments] -> error: ')
    assert "Tool call lookup with id bad0 could not be executed" in tool_lines[1]  # its error result, fenced
    from lc_compaction.strategies.transcript import render_message
    assert render_message(invalid_ai("a"), 100) == 'Assistant called lookup({"q": "unterminated) [malformed arguments]'


@FAST
@given(history=st.booleans().flatmap(lambda reuse: histories(max_turns=4, max_steps=3, invalid_calls=True,
                                                             reuse_call_ids=reuse)),
       window=st.integers(300, 12_000))
def test_compacted_histories_with_invalid_calls_stay_valid_on_the_wire(history, window):
    result = compact(history, CompactionPolicy(max_input_tokens=window, token_counter="approximate"))
    assert check_invariants(result.messages) == []
    check_all_structural(history, result.messages)
    run_checks(["tool_pairs_atomic"], CheckContext(input=history, output=result.messages))
    assert wire_errors(as_sent(result.messages)) == []


# ------------------------------------------------------------------------------------------------ end to end


def _script(turns: int) -> list[AIMessage]:
    """Per turn: one good call and one malformed one, then an answer."""
    out = []
    for k in range(turns):
        out.append(AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": f"turn {k}"}, "id": f"ok_{k}",
                                              "type": "tool_call"}],
                             invalid_tool_calls=[{"name": "lookup", "args": '{"q": "turn ' + str(k), "id": f"bad_{k}",
                                                  "error": "malformed", "type": "invalid_tool_call"}]))
        out.append(AIMessage(f"answer {k}"))
    return out


def _checked(received: list) -> None:
    assert check_invariants(received) == [], check_invariants(received)
    check_all_structural(received, received)
    assert wire_errors(as_sent(received)) == []


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_whose_model_emits_invalid_tool_calls(mode):
    turns = 8
    model = ReplayChatModel(messages=iter(_script(turns)), profile={"max_input_tokens": 2_500},
                            on_call=lambda i, received, kwargs: _checked(received))
    agent = create_agent(model, [lookup], system_prompt="You look things up.",
                         middleware=[CompactionMiddleware(mode=mode, repair=False)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": mode}}
    for k in range(turns):
        agent.invoke({"messages": [HumanMessage(f"question {k}")]}, config)
    assert len(model.calls) == 2 * turns
    state = agent.get_state(config).values
    assert state["compaction"]["compactions"] >= 1
    assert state["messages"][-1].content == f"answer {turns - 1}"


def test_chat_openai_sends_valid_requests_when_the_model_writes_malformed_arguments():
    """The model's malformed arguments come from the wire (a local OpenAI-compatible server): ChatOpenAI makes
    them invalid_tool_calls, create_agent answers them, the middleware compacts, and every request the server
    receives pairs every tool message with a call of its assistant message."""
    turns = 5
    with ScriptedOpenAIServer(_script(turns)) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        agent = create_agent(model, [lookup], system_prompt="You look things up.",
                             middleware=[CompactionMiddleware(max_input_tokens=2_500)], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "wire"}}
        for k in range(turns):
            agent.invoke({"messages": [HumanMessage(f"question {k}")]}, config)
        requests = [r["messages"] for r in server.requests]
    assert len(requests) == 2 * turns
    assert any(m.get("tool_calls") and any(c["function"]["arguments"].startswith('{"q": "turn')
                                           and not c["function"]["arguments"].endswith("}")
                                           for c in m["tool_calls"]) for r in requests for m in r)
    for i, request in enumerate(requests):
        assert wire_errors(request) == [], (i, wire_errors(request))
    assert len(requests[-1]) < 2 + 5 * turns  # compacted
