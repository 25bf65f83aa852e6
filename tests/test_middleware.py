"""The AgentMiddleware in `langchain.agents.create_agent`, on recorded conversations and on the wire.

- Recorded multi-turn conversations replayed through `create_agent(model, tools, system_prompt=...,
  middleware=[CompactionMiddleware(...)])`, rewrite and view, sync and async: after every model call the input
  (system prompt and tool schemas included) fits the window and passes the oracle's structural checks; after
  every turn the stored history matches the mode.
- The system prompt and the tool schemas the model receives are counted; the window comes from the request's
  model profile (or `model=`); ChatOpenAI against a local server receives a valid compacted request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage, message_to_dict
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from tests.agent_replay import (
    EventLog,
    Replay,
    ReplayChatModel,
    ScriptedOpenAIServer,
    check_model_input,
    check_stored_history,
    load_replays,
    wire_tokens,
)
from tests.builders import plain_chat, tool_loop
from lc_compaction import CompactionPolicy, TruncateToolResults
from lc_compaction.integrations import CompactionMiddleware

WINDOWS = {
    "tau-bench/gpt-4o-airline/task013-trial0": 4_000,  # 15 user turns, 28 model calls
    "agentdojo/claude-3-sonnet-20240229/workspace/user_task_26": 8_000,  # 86k tokens of tool output
    "agentdojo/gpt-3.5-turbo-0125/slack/user_task_13": 1_000,  # parallel tool calls
}
REPLAYS = {r.conv_id: r for r in load_replays(list(WINDOWS))}



def build_agent(replay: Replay, window: int, mode: str, middleware: CompactionMiddleware | None = None
                ) -> tuple[Any, ReplayChatModel]:
    def on_call(i: int, received: list, kwargs: dict) -> None:
        check_model_input(replay, i, received, kwargs, window=window)

    model = replay.model(profile={"max_input_tokens": window}, on_call=on_call)
    agent = create_agent(model, replay.tools(), system_prompt=replay.system,
                         middleware=[middleware or CompactionMiddleware(mode=mode)], checkpointer=InMemorySaver())
    return agent, model


def run_turns(replay: Replay, agent: Any, model: ReplayChatModel, mode: str, *, use_async: bool = False) -> dict:
    config = {"configurable": {"thread_id": mode}}
    for k in range(len(replay.turns)):
        turn = replay.turn_input(k, include_system=False)
        if use_async:
            asyncio.run(agent.ainvoke(turn, config))
        else:
            agent.invoke(turn, config)
        stored = agent.get_state(config).values["messages"]
        check_stored_history(replay, k, stored, mode=mode, last_input=model.calls[-1], include_system=False)
    return agent.get_state(config).values["compaction"]


def _dicts(calls: list[list]) -> list[list[dict]]:
    return [[message_to_dict(m) for m in call] for call in calls]


@pytest.mark.parametrize("conv_id", list(WINDOWS))
def test_replayed_conversation_in_both_modes(conv_id: str) -> None:
    replay, window = REPLAYS[conv_id], WINDOWS[conv_id]
    agent, model = build_agent(replay, window, "rewrite")
    memory = run_turns(replay, agent, model, "rewrite")
    # the window comes from the request's model: before_model plans every call but the first (no request seen
    # yet; wrap_model_call's check compacts that one alone)
    assert memory["compactions"] >= 1 and memory["calls"] == len(model.calls) - 1
    view_agent, view_model = build_agent(replay, window, "view")
    view_memory = run_turns(replay, view_agent, view_model, "view")
    assert _dicts(view_model.calls) == _dicts(model.calls)
    assert view_memory["compactions"] == memory["compactions"]


def test_async_path_sends_what_the_sync_path_sends() -> None:
    conv_id = "tau-bench/gpt-4o-airline/task013-trial0"
    replay, window = REPLAYS[conv_id], WINDOWS[conv_id]
    agent, model = build_agent(replay, window, "rewrite")
    run_turns(replay, agent, model, "rewrite")
    async_agent, async_model = build_agent(replay, window, "rewrite")
    run_turns(replay, async_agent, async_model, "rewrite", use_async=True)
    assert _dicts(async_model.calls) == _dicts(model.calls)


# --------------------------------------------------------------------------------------- what is counted




@tool
def lookup_reservation(reservation_id: str, include_history: bool = False) -> str:
    """Look up an airline reservation by its six-character id and return flights, passengers, payment methods,
    baggage allowance, insurance status and the full change history when include_history is true."""
    return "{}"


def _one_call(history: list, *, system: str | None, tools: list, window: int) -> dict:
    """Run one agent call over `history` and return the lc_compaction event it dispatched."""
    model = ReplayChatModel(messages=iter(["done"]), profile={"max_input_tokens": window})
    agent = create_agent(model, tools, system_prompt=system, middleware=[CompactionMiddleware()])
    log = EventLog()
    agent.invoke({"messages": history}, {"callbacks": [log]})
    assert len(log.events) == 1
    return log.events[0]


def test_system_prompt_and_tool_schemas_count_toward_the_trigger() -> None:
    history = plain_chat(3, 30)
    window = 1_000
    alone = wire_tokens(history)
    budget = CompactionPolicy(max_input_tokens=window).budget_tokens()
    assert budget is not None
    assert alone < budget, "the messages alone must stay under the default trigger (the budget)"
    long_system = "You are a careful airline agent. " * 80
    assert wire_tokens([SystemMessage(long_system), *history]) > budget, "with the system prompt they do not fit"
    assert _one_call(history, system=None, tools=[], window=window)["reason"] == "under_trigger"
    with_system = _one_call(history, system=long_system, tools=[], window=window)
    assert with_system["outcome"] == "compacted"
    with_tools = _one_call(history, system=None, tools=[lookup_reservation], window=window)
    bare = _one_call(history, system=None, tools=[], window=window)
    assert with_tools["tokens_before"] > bare["tokens_before"]


def test_window_comes_from_the_request_model_profile() -> None:
    small = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 3_000})
    large = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 50_000})
    mw = CompactionMiddleware()
    assert mw.policy is None
    assert mw.policy_for(small).max_input_tokens == 3_000
    assert mw.policy_for(large).max_input_tokens == 50_000
    assert mw.policy_for(small) is mw.policy_for(small)


def test_window_from_a_model_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    mw = CompactionMiddleware(model="openai:gpt-4o-mini")
    window = ChatOpenAI(model="gpt-4o-mini").profile["max_input_tokens"]
    assert mw.policy is not None and mw.policy.max_input_tokens == window


def test_settings_errors() -> None:
    with pytest.raises(ValueError, match="either policy or the settings"):
        CompactionMiddleware(CompactionPolicy(max_input_tokens=1_000), keep=("messages", 4))
    with pytest.raises(ValueError, match="mode"):
        CompactionMiddleware(mode="trim")  # type: ignore[arg-type]
    no_profile = GenericFakeChatModel(messages=iter(["x"]))
    agent = create_agent(no_profile, [], middleware=[CompactionMiddleware()])
    with pytest.raises(ValueError, match="max_input_tokens"):
        agent.invoke({"messages": [HumanMessage("hi")]})


def test_a_policy_object_and_keyword_settings_give_the_same_result() -> None:
    history = plain_chat(6, 30)
    settings = dict(max_input_tokens=1_000, trigger=("tokens", 600), keep=("messages", 3))
    events = []
    for mw in (CompactionMiddleware(**settings), CompactionMiddleware(CompactionPolicy(**settings))):
        model = ReplayChatModel(messages=iter(["done"]))
        log = EventLog()
        create_agent(model, [], middleware=[mw]).invoke({"messages": history}, {"callbacks": [log]})
        events.append({k: v for k, v in log.events[0].items() if k != "elapsed_ms"})
    assert events[0] == events[1] and events[0]["outcome"] == "compacted"


def _event(history: list, mw: CompactionMiddleware) -> dict:
    """The lc_compaction event of one agent call over `history` through `mw`."""
    log = EventLog()
    create_agent(ReplayChatModel(messages=iter(["done"])), [], middleware=[mw]).invoke(
        {"messages": history}, {"callbacks": [log]})
    assert len(log.events) == 1
    return log.events[0]


def test_cached_price_reaches_the_policy_and_moves_the_default_trigger() -> None:
    """`cached_price=0.5` (`policy.EARLY_TRIGGER_PRICE`): the default trigger is 80% of the window, so a history
    between 80% of the window and the budget is compacted; at the default price it is under the trigger."""
    history = plain_chat(8, 40)
    tokens = _event(history, CompactionMiddleware(max_input_tokens=100_000))["tokens_before"]
    window = int(tokens / 0.85)  # 80% of the window < tokens < the budget (90% of it)
    mw = CompactionMiddleware(max_input_tokens=window, cached_price=0.5)
    assert mw.policy is not None and mw.policy.cached_price == 0.5
    assert _event(history, CompactionMiddleware(max_input_tokens=window))["reason"] == "under_trigger"
    assert _event(history, mw)["outcome"] == "compacted"


def test_clear_at_least_reaches_the_policy() -> None:
    """`clear_at_least` (tokens): a compaction that cannot reclaim that much while the history fits the budget
    is not applied (stop reason "below_clear_at_least"); without it the same trigger compacts."""
    history = plain_chat(8, 40)
    tokens = _event(history, CompactionMiddleware(max_input_tokens=100_000))["tokens_before"]
    settings = dict(max_input_tokens=100_000, trigger=("tokens", tokens // 2))
    assert _event(history, CompactionMiddleware(**settings))["outcome"] == "compacted"
    mw = CompactionMiddleware(**settings, clear_at_least=tokens)  # cannot reclaim the whole history
    assert mw.policy is not None and mw.policy.clear_at_least == tokens
    assert _event(history, mw)["reason"] == "below_clear_at_least"


def test_truncation_only_is_stored_in_place() -> None:
    # ~1,700 tokens: over the 1,350-token budget (the default trigger)
    history = tool_loop(4, 80, tool="lookup_reservation", args=lambda i: {"reservation_id": f"R{i}"},
                        last="one more question")
    model = ReplayChatModel(messages=iter([AIMessage("answer", id="reply")]))
    mw = CompactionMiddleware(max_input_tokens=1_500, strategies=[TruncateToolResults(keep=1)])
    agent = create_agent(model, [], middleware=[mw], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    updates = list(agent.stream({"messages": history}, config, stream_mode="updates"))
    assert [list(u) for u in updates] == [["CompactionMiddleware.before_model"], ["model"]]
    assert [m.id for m in updates[1]["model"]["messages"]] == ["reply"]  # the model node writes its reply only
    written = updates[0]["CompactionMiddleware.before_model"]["messages"]
    assert any(isinstance(m, ToolMessage) for m in written), "the truncated results are written back"
    assert not any(isinstance(m, RemoveMessage) for m in written)
    stored = agent.get_state(config).values["messages"]
    assert [m.id for m in stored] == [m.id for m in history] + ["reply"]
    changed = [i for i, (a, b) in enumerate(zip(stored, history)) if a.content != b.content]
    assert changed and all(isinstance(stored[i], ToolMessage) for i in changed)
    assert [message_to_dict(m) for m in stored[: changed[0]]] == [message_to_dict(m) for m in history[: changed[0]]]
    assert _dicts([stored[:-1]]) == _dicts([model.calls[0]])  # what is stored is what the model saw


# --------------------------------------------------------------------------------------- on the wire


def test_chat_openai_receives_a_valid_compacted_request() -> None:
    history = plain_chat(10, 30)
    history.insert(1, AIMessage("", id="call", tool_calls=[{"name": "lookup_reservation", "id": "c1",
                                                            "args": {"reservation_id": "ABC123"}}]))
    history.insert(2, ToolMessage("{\"status\": \"confirmed\"} " * 50, tool_call_id="c1", id="res"))
    with ScriptedOpenAIServer() as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test",
                           profile={"max_input_tokens": 1_500}, max_retries=0)
        agent = create_agent(model, [lookup_reservation], system_prompt="Be brief.",
                             middleware=[CompactionMiddleware(mode="view")])
        result = agent.invoke({"messages": history})
    assert result["messages"][-1].content == "ok"
    body = server.requests[0]
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and set(roles) <= {"system", "user", "assistant", "tool"}
    assert len(body["messages"]) < 1 + len(history)  # the system prompt plus fewer messages than stored
    called: set[str] = set()
    for m in body["messages"]:
        called.update(tc["id"] for tc in m.get("tool_calls") or [])
        if m["role"] == "tool":
            assert m["tool_call_id"] in called
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup_reservation"]
    assert body["messages"][-1] == {"role": "user", "content": "and finally?"}
