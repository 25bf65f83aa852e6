"""View mode's memory (`lc_compaction.integrations.view`): the next call starts from the last model input plus
the new messages, in O(k) in the process that made it, and from the JSON memory anywhere else, with the same
result.

Each test drives `plan_compaction` (what both front doors run) call after call, passing the memory on as
LangGraph does; "a fresh process" is simulated by emptying the in-process caches.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, message_to_dict

from lc_compaction import ApproximateCounter, CompactionPolicy, DropOldExchanges, TruncateToolResults
from lc_compaction.integrations.plan import plan_compaction
from lc_compaction.integrations import view as view_cache
from lc_compaction.structure import check_invariants
from lc_compaction import tally as count_tally
from tests.builders import history, lookups, tool_turn


def dicts(messages: list[BaseMessage]) -> list[dict]:
    return [message_to_dict(m) for m in messages]


def forget_process_state() -> None:
    """What a new process starts with: no view kept as objects, no counting snapshot."""
    view_cache.clear()
    count_tally.clear()


def session(policy: CompactionPolicy, calls: int) -> tuple[list[BaseMessage], list[Any]]:
    """A long history compacted at the first call, then `calls` calls, each after one small tool turn.
    Returns the stored history and, per call, (stored length, model input, memory)."""
    stored = history(10, 3000)
    memory = None
    out = []
    for n in range(calls + 1):
        if n:
            stored = stored + tool_turn(100 + n, 40)  # a new list each call, as add_messages makes
        plan = plan_compaction(stored, memory, policy, door="langgraph_node", mode="view")
        memory = plan.memory
        out.append((len(stored), plan.model_input, memory))
    return stored, out


def policy(counter: Any = "approximate") -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=6_000, token_counter=counter)


def test_steady_calls_count_only_the_new_messages_and_the_memory_does_not_grow():
    counter = ApproximateCounter()
    pol = policy(counter)
    stored = history(10, 3000)
    first = plan_compaction(stored, None, pol, door="langgraph_node", mode="view")
    assert first.result.compacted and first.memory["view"]["replaced"]  # truncated results are remembered
    memory, previous = first.memory, first.model_input
    for n in range(1, 8):
        stored = stored + tool_turn(100 + n, 40)
        before = lookups(counter)
        plan = plan_compaction(stored, memory, pol, door="langgraph_node", mode="view")
        assert not plan.result.compacted
        assert lookups(counter) - before == 4  # the four new messages only
        # the model input grows by appending: the previous input, then the new messages
        assert dicts(plan.model_input) == dicts(previous) + dicts(stored[-4:])
        assert plan.model_input is not stored and check_invariants(plan.model_input) == []
        # the new messages extend the last run of stored messages: the memory does not grow with the history
        assert len(plan.memory["view"]["segments"]) == len(first.memory["view"]["segments"])
        assert plan.memory["view"]["replaced"] == first.memory["view"]["replaced"]
        memory, previous = plan.memory, plan.model_input


def test_a_fresh_process_rebuilds_the_same_view_from_the_json_memory():
    pol = policy()
    stored, calls = session(pol, 5)
    length, model_input, memory = calls[-2]
    grown = stored[: length + 4]
    warm = plan_compaction(grown, memory, pol, door="langgraph_node", mode="view")
    forget_process_state()
    cold = plan_compaction(grown, memory, pol, door="langgraph_node", mode="view")
    assert dicts(cold.model_input) == dicts(warm.model_input)
    assert cold.memory["view"] == warm.memory["view"]
    assert cold.result.tokens_before == warm.result.tokens_before


def test_two_policies_on_histories_with_the_same_ids_never_share_a_view():
    """Two front doors with different policies over equal histories in one process: each sees its own view,
    the one it gets when it runs alone."""
    truncating = CompactionPolicy(max_input_tokens=6_000, token_counter="approximate",
                                  strategies=[TruncateToolResults(preview_chars=50)])
    dropping = CompactionPolicy(max_input_tokens=6_000, token_counter="approximate",
                                strategies=[DropOldExchanges()])
    alone = {}
    for name, pol in (("truncating", truncating), ("dropping", dropping)):
        forget_process_state()
        alone[name] = [dicts(model_input) for _, model_input, _ in session(pol, 4)[1]]
    forget_process_state()
    stored_a, stored_b = history(10, 3000), history(10, 3000)  # equal messages, distinct objects
    memory_a = memory_b = None
    seen: dict[str, list] = {"truncating": [], "dropping": []}
    for n in range(5):
        if n:
            stored_a = stored_a + tool_turn(100 + n, 40)
            stored_b = stored_b + tool_turn(100 + n, 40)
        a = plan_compaction(stored_a, memory_a, truncating, door="langgraph_node", mode="view")
        b = plan_compaction(stored_b, memory_b, dropping, door="langgraph_node", mode="view")
        memory_a, memory_b = a.memory, b.memory
        seen["truncating"].append(dicts(a.model_input))
        seen["dropping"].append(dicts(b.model_input))
    assert seen == alone
    assert alone["truncating"] != alone["dropping"]


def test_a_stored_message_replaced_by_id_is_seen_by_the_next_view():
    pol = policy()
    stored, calls = session(pol, 2)
    _, model_input, memory = calls[-1]
    kept = next(i for i, m in enumerate(stored) if m.id == model_input[-1].id)  # the last answer, sent as stored
    edited = list(stored)
    edited[kept] = stored[kept].model_copy(update={"content": "a corrected answer"})
    edited += tool_turn(500, 10)
    plan = plan_compaction(edited, memory, pol, door="langgraph_node", mode="view")
    sent = {m.id: m for m in plan.model_input}
    assert sent[stored[kept].id].content == "a corrected answer"
    assert plan.result.tokens_before == pol.counter.count_messages(plan.model_input)


def reloaded(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The history as a checkpointer gives it back at the start of the next run: new, equal objects."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    return serde.loads_typed(serde.dumps_typed(messages))


def test_a_compaction_right_after_a_checkpoint_load_remembers_only_what_it_rewrote():
    """The first call of a run gets new, equal objects and compacts: the memory keeps only the messages
    compaction changed, not the unchanged ones the previous view held."""
    from langchain_core.messages import messages_from_dict

    pol = policy()
    stored, calls = session(pol, 1)
    _, _, memory = calls[-1]
    # a large tool result (~3,500 tokens): over the 5,400-token budget (the default trigger), this call compacts again
    stored = reloaded(stored) + tool_turn(300, 14_000)
    plan = plan_compaction(stored, memory, pol, door="langgraph_node", mode="view")
    assert plan.result.compacted
    by_id = {m.id: m for m in stored}
    replaced = plan.memory["view"]["replaced"]
    assert replaced
    for mid, data in replaced.items():
        assert mid not in by_id or messages_from_dict([data])[0] != by_id[mid], mid


def test_an_edit_by_id_after_a_checkpoint_load_reaches_the_model():
    """A run that starts from the checkpoint and compacts, then the first request is edited by id
    (`update_state`): the next run's model input has the edited text, in this process and in a fresh one."""
    pol = policy()
    stored, calls = session(pol, 1)
    _, _, memory = calls[-1]
    stored = reloaded(stored) + tool_turn(300, 14_000)  # over the budget: this call compacts
    compacting = plan_compaction(stored, memory, pol, door="langgraph_node", mode="view")
    assert compacting.result.triggered and compacting.result.compacted
    memory = compacting.memory
    first_request = next(i for i, m in enumerate(stored) if m.type == "human")
    edited = reloaded(stored)
    edited[first_request] = edited[first_request].model_copy(update={"content": "EDITED first request"})
    edited += tool_turn(400, 20)
    warm = plan_compaction(edited, memory, pol, door="langgraph_node", mode="view")
    forget_process_state()
    cold = plan_compaction(edited, memory, pol, door="langgraph_node", mode="view")
    for plan in (warm, cold):
        sent = {m.id: m.content for m in plan.model_input}
        assert sent[stored[first_request].id] == "EDITED first request"
    assert dicts(warm.model_input) == dicts(cold.model_input)
