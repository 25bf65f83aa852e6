"""The LangGraph pre-model node, in real compiled graphs built both ways, on recorded conversations.

- `create_react_agent(..., pre_model_hook=node)` (system prompt in state, or given as `prompt=`), and a hand-built
  `StateGraph` with the node before the model node; each replays recorded multi-turn conversations (the agent's
  model is a scripted fake chat model, the tools return the recorded results), in rewrite and in view mode.
  After every model call: the input fits the window, passes the oracle's structural checks, keeps the first and
  the latest request. After every turn: the stored history matches the mode.
- Rewrite mode writes truncations in place (same ids, no RemoveMessage) and removals by id (never
  REMOVE_ALL_MESSAGES; tests/test_same_step_writes.py has the rest); ids are given before removal; the window comes
  from the model's profile; custom state keys; clear errors.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import MessagesState
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.prebuilt import create_react_agent
from typing_extensions import TypedDict

from tests.agent_replay import Replay, check_model_input, check_stored_history, load_replays
from tests.builders import compact_model_tools, compact_then_model, plain_chat, tool_loop
from lc_compaction import CompactionPolicy, InvalidHistoryError, TruncateToolResults
from lc_compaction.integrations import CompactionNode, CompactionState, compaction_hook

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

WINDOWS = {  # conversation id -> window (tokens) small enough that compaction runs several times
    "tau-bench/gpt-4o-airline/task046-trial3": 4_000,  # 13 user turns, 30 model calls, 1,252-token policy prompt
    "agentdojo/claude-3-haiku-20240307/workspace/user_task_35": 8_000,  # 114k tokens of tool output, 7.6k max
    "agentdojo/gpt-3.5-turbo-0125/slack/user_task_13": 1_000,  # parallel tool calls (up to 7 a turn)
}
REPLAYS = {r.conv_id: r for r in load_replays(list(WINDOWS))}


def _stategraph(model: Any, tools: list, node: CompactionNode, mode: str, checkpointer: Any) -> Any:
    """compact -> model -> (tools -> compact)* over MessagesState (rewrite) or CompactionState (view: the model
    node reads llm_input_messages)."""
    bound = model.bind_tools(tools)
    key = "llm_input_messages" if mode == "view" else "messages"

    def call_model(state: CompactionState) -> dict:
        return {"messages": [bound.invoke(state[key])]}

    return compact_model_tools(node, call_model, tools, CompactionState if mode == "view" else MessagesState,
                               checkpointer=checkpointer)


def build(door: str, replay: Replay, mode: str, window: int, on_call: Any) -> tuple[Any, Any, bool]:
    """(graph, scripted model, whether the system message is in the state) for one door."""
    model = replay.model(profile={"max_input_tokens": window}, on_call=on_call)
    tools = replay.tools()
    if door == "react_prompt":  # the system prompt is the agent's prompt: counted by the node, never stored
        node = compaction_hook(model=model, tools=tools, system_prompt=replay.system, mode=mode)
        graph = create_react_agent(model, tools, prompt=replay.system, pre_model_hook=node,
                                   checkpointer=InMemorySaver())
        return graph, model, False
    node = CompactionNode(model=model, tools=tools, mode=mode)
    if door == "react_state":
        return create_react_agent(model, tools, pre_model_hook=node, checkpointer=InMemorySaver()), model, True
    return _stategraph(model, tools, node, mode, InMemorySaver()), model, True


def replay_through(door: str, replay: Replay, mode: str, window: int) -> tuple[list, dict]:
    """Run every turn; check each model call and the stored history after each turn. Returns (inputs, memory)."""
    graph = model = None

    def on_call(i: int, received: list, kwargs: dict) -> None:
        check_model_input(replay, i, received, kwargs, window=window)

    graph, model, in_state = build(door, replay, mode, window, on_call)
    config = {"configurable": {"thread_id": f"{door}-{mode}"}}
    for k in range(len(replay.turns)):
        graph.invoke(replay.turn_input(k, include_system=in_state), config)
        values = graph.get_state(config).values
        check_stored_history(replay, k, values["messages"], mode=mode, last_input=model.calls[-1],
                             include_system=in_state)
    assert len(model.calls) == sum(len(t.replies) for t in replay.turns)
    return model.calls, graph.get_state(config).values["compaction"]


@pytest.mark.parametrize("conv_id", list(WINDOWS))
@pytest.mark.parametrize("door", ["react_state", "react_prompt", "stategraph"])
def test_replayed_conversation_in_both_modes(door: str, conv_id: str) -> None:
    replay, window = REPLAYS[conv_id], WINDOWS[conv_id]
    rewrite_inputs, rewrite_memory = replay_through(door, replay, "rewrite", window)
    view_inputs, view_memory = replay_through(door, replay, "view", window)
    assert rewrite_memory["compactions"] >= 1, "the window should have forced at least one compaction"
    assert rewrite_memory["calls"] == len(rewrite_inputs)
    # view mode remembers its last input, so the model sees exactly what rewrite mode would have sent
    assert [[message_to_dict(m) for m in call] for call in view_inputs] == \
           [[message_to_dict(m) for m in call] for call in rewrite_inputs]
    assert view_memory["compactions"] == rewrite_memory["compactions"]


# --------------------------------------------------------------------------------------- how rewrite writes


def _model_free_graph(node: CompactionNode) -> Any:
    return compact_then_model(node, lambda state: {"messages": [AIMessage("ok", id=f"reply{len(state['messages'])}")]})


def test_truncation_only_is_written_in_place_with_the_same_ids() -> None:
    history = tool_loop(4, 80)  # ~1,700 tokens: over the 1,350-token budget (the default trigger)
    node = CompactionNode(max_input_tokens=1_500, strategies=[TruncateToolResults(keep=1)])
    graph = _model_free_graph(node)
    config = {"configurable": {"thread_id": "t"}}
    updates = [u for u in graph.stream({"messages": history}, config, stream_mode="updates") if "compact" in u]
    written = updates[0]["compact"]["messages"]
    assert written and not any(isinstance(m, RemoveMessage) for m in written)
    assert all(isinstance(m, ToolMessage) and m.id in {h.id for h in history} for m in written)
    stored = graph.get_state(config).values["messages"]
    assert [m.id for m in stored] == [m.id for m in history] + [f"reply{len(history)}"]
    first_changed = min(i for i, (a, b) in enumerate(zip(stored, history)) if a.content != b.content)
    assert first_changed > 0
    # everything before the first truncated result is byte-identical: the prompt-cache prefix survives
    assert [message_to_dict(m) for m in stored[:first_changed]] == [message_to_dict(m) for m in history[:first_changed]]
    assert len(stored[first_changed].content) < len(history[first_changed].content)


def test_removal_is_written_by_id_never_as_remove_all() -> None:
    history = plain_chat(8, 40)
    node = CompactionNode(max_input_tokens=1_000)
    graph = _model_free_graph(node)
    config = {"configurable": {"thread_id": "r"}}
    updates = [u for u in graph.stream({"messages": history}, config, stream_mode="updates") if "compact" in u]
    written = updates[0]["compact"]["messages"]
    removals = [m.id for m in written if isinstance(m, RemoveMessage)]
    assert removals and REMOVE_ALL_MESSAGES not in removals
    stored = graph.get_state(config).values["messages"]
    kept_ids = [m.id for m in stored[:-1]]
    assert stored[-1].id == f"reply{len(kept_ids)}"
    assert kept_ids[0] == "h0" and kept_ids[-1] == "last" and len(kept_ids) < len(history)
    # exactly the messages that are no longer stored were removed, each once; the others are the input's, in order
    assert sorted(removals) == sorted({m.id for m in history} - set(kept_ids))
    assert [i for i in kept_ids if i in {m.id for m in history}] == [m.id for m in history if m.id in kept_ids]


def test_messages_without_ids_get_ids_before_any_removal() -> None:
    history = [m.model_copy(update={"id": None}) for m in plain_chat(8, 40)]
    update = CompactionNode(max_input_tokens=1_000).invoke({"messages": history})  # no parent run: no event
    written = update["messages"]
    assert written and all(m.id for m in written) and len({m.id for m in written}) == len(written)
    assert {m.id for m in written} <= {m.id for m in history}  # the ids given in place, before the removal


def test_view_mode_leaves_the_state_alone_and_fills_llm_input_messages() -> None:
    history = plain_chat(8, 40)
    update = CompactionNode(max_input_tokens=1_000, mode="view").invoke({"messages": history})
    assert "messages" not in update
    assert 0 < len(update["llm_input_messages"]) < len(history)
    assert update["compaction"]["view"]["covered"] == len(history)


# --------------------------------------------------------------------------------------- settings and errors


def test_window_comes_from_the_model_profile() -> None:
    model = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 12_345})
    assert CompactionNode(model=model).policy.max_input_tokens == 12_345
    assert CompactionNode(model=model, max_input_tokens=999).policy.max_input_tokens == 999


def test_cached_price_reaches_the_policy_and_moves_the_default_trigger() -> None:
    """`cached_price=0.5` (`policy.EARLY_TRIGGER_PRICE`): the default trigger is 80% of the window, so a history
    between 80% of the window and the budget is compacted; at the default price it is under the trigger."""
    history = plain_chat(8, 40)
    tokens = CompactionPolicy(max_input_tokens=100_000).counter.count_messages(history)
    window = int(tokens / 0.85)  # 80% of the window < tokens < the budget (90% of it)
    node = CompactionNode(max_input_tokens=window, cached_price=0.5)
    assert node.policy.cached_price == 0.5
    assert node.policy.budget_tokens() is not None and tokens < node.policy.budget_tokens()
    assert "messages" not in CompactionNode(max_input_tokens=window).invoke({"messages": history})
    assert node.invoke({"messages": history})["messages"]


def test_clear_at_least_reaches_the_policy() -> None:
    """`clear_at_least` (tokens): a compaction that cannot reclaim that much while the history fits the budget
    is not applied (stop reason "below_clear_at_least"); without it the same trigger compacts."""
    history = plain_chat(8, 40)
    tokens = CompactionPolicy(max_input_tokens=100_000).counter.count_messages(history)
    settings = dict(max_input_tokens=100_000, trigger=("tokens", tokens // 2))
    assert CompactionNode(**settings).invoke({"messages": history})["messages"]
    node = CompactionNode(**settings, clear_at_least=tokens)  # cannot reclaim the whole history
    assert node.policy.clear_at_least == tokens
    update = node.invoke({"messages": history})
    assert "messages" not in update and update["compaction"]["last"]["reason"] == "below_clear_at_least"


def test_no_window_anywhere_is_a_clear_error() -> None:
    model = GenericFakeChatModel(messages=iter([]))
    with pytest.raises(ValueError, match="max_input_tokens"):
        CompactionNode(model=model)


def test_policy_and_settings_together_are_refused() -> None:
    with pytest.raises(ValueError, match="either policy or the settings"):
        CompactionNode(CompactionPolicy(max_input_tokens=1_000), trigger=("tokens", 500))
    with pytest.raises(ValueError, match="mode"):
        CompactionNode(max_input_tokens=1_000, mode="trim")  # type: ignore[arg-type]


def test_tools_and_system_prompt_are_counted() -> None:
    from langchain_core.tools import tool

    @tool
    def search_flights(origin: str, destination: str, date: str) -> str:
        """Search flights between two airports on a date (YYYY-MM-DD)."""
        return ""

    bare = CompactionNode(max_input_tokens=1_000)
    dressed = CompactionNode(max_input_tokens=1_000, tools=[search_flights], system_prompt="You are an airline agent.")
    assert bare.extra_tokens == 0
    assert dressed.extra_tokens > 0
    history = tool_loop(2, 30)
    before = bare.invoke({"messages": history})["compaction"]["last"]["tokens_before"]
    after = dressed.invoke({"messages": history})["compaction"]["last"]["tokens_before"]
    assert after == before + dressed.extra_tokens


def test_custom_state_keys() -> None:
    class State(TypedDict, total=False):
        history: Annotated[list[AnyMessage], add_messages]
        model_view: list[AnyMessage]
        memo: dict

    seen: list[list] = []

    def model(state: State) -> dict:
        seen.append(state["model_view"])
        return {"history": [AIMessage("ok", id=f"r{len(state['history'])}")]}

    node = CompactionNode(max_input_tokens=1_000, mode="view", messages_key="history", output_key="model_view",
                          memory_key="memo")
    graph = compact_then_model(node, model, State, input_schema=State)
    config = {"configurable": {"thread_id": "k"}}
    history = plain_chat(8, 40)
    graph.invoke({"history": history}, config)
    values = graph.get_state(config).values
    assert len(values["history"]) == len(history) + 1
    assert 0 < len(seen[0]) < len(history)
    assert values["memo"]["calls"] == 1


def test_missing_messages_key_names_the_key() -> None:
    node = CompactionNode(max_input_tokens=1_000, messages_key="history")
    with pytest.raises(ValueError, match="'history'"):
        node.invoke({"messages": [HumanMessage("hi")]})


def test_broken_history_raises_naming_the_index_when_repair_is_off() -> None:
    broken = [SystemMessage("s", id="s"), HumanMessage("q " * 400, id="h"),
              ToolMessage("orphan", tool_call_id="nope", id="t")]
    with pytest.raises(InvalidHistoryError, match="message 2.*orphan_tool_result"):
        CompactionNode(max_input_tokens=300, repair=False).invoke({"messages": broken})


def test_broken_history_is_repaired_by_default_and_the_repair_stored() -> None:
    """The node repairs by default (a thread is never left unusable): the orphan goes, the repair is in memory."""
    broken = [SystemMessage("s", id="s"), HumanMessage("q " * 400, id="h"),
              ToolMessage("orphan", tool_call_id="nope", id="t")]
    update = CompactionNode(max_input_tokens=300).invoke({"messages": broken})
    kept = [m.id for m in update["messages"] if not isinstance(m, RemoveMessage)]
    assert "t" not in kept and "h" in kept
    assert [(r["kind"], r["index"], r["tool_call_id"]) for r in update["compaction"]["last"]["repairs"]] == [
        ("orphan_tool_result_removed", 2, "nope")]


def test_empty_history_gives_no_update() -> None:
    assert CompactionNode(max_input_tokens=1_000).invoke({"messages": []}) == {}


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_a_message_edited_by_id_is_recounted(mode: str) -> None:
    """`update_state` replacing a message by id with a much larger one: the next model call is compacted to fit,
    never sent at the stale size (the counting tally covers only the very same message objects)."""
    from langchain_core.messages import AIMessage as AI, HumanMessage as Human

    from lc_compaction import TiktokenCounter
    from lc_compaction.integrations import CompactionNode, CompactionState

    sent: list = []

    def model(state):
        sent.append(state["llm_input_messages"] if mode == "view" else state["messages"])
        return {"messages": [AI("ok", id=f"ai{len(sent)}")]}

    g = compact_then_model(CompactionNode(max_input_tokens=4000, mode=mode), model, CompactionState)
    cfg = {"configurable": {"thread_id": "1"}}
    g.invoke({"messages": [Human("attach doc", id="u1")]}, cfg)
    g.update_state(cfg, {"messages": [Human("attach doc: " + "lorem ipsum " * 6000, id="u1")]})
    g.invoke({"messages": [Human("summarize it", id="u2")]}, cfg)
    assert TiktokenCounter("gpt-4o").count_messages(sent[-1]) <= 4000
    assert g.get_state(cfg).values["compaction"]["last"]["reason"] != "under_trigger"
