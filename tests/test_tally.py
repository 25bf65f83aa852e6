"""The count tally: a call on a grown history counts only the new messages, and never trusts a stale count.

Each test counts the count-cache lookups a call makes (`cache_info()`: one lookup per message counted), so "only
the new messages were counted" is observed, not assumed; every total is checked against a full recount.
"""

from __future__ import annotations

import numpy as np
from langchain_core.messages import AIMessage, HumanMessage, messages_from_dict, messages_to_dict

from lc_compaction import ApproximateCounter, CompactionPolicy, compact
from lc_compaction.tally import CountTally, covered_objects
from tests.builders import history, lookups, tool_turn


def steady(counter: ApproximateCounter) -> CompactionPolicy:
    """A policy whose trigger never fires: every call is a steady-state call."""
    return CompactionPolicy(max_input_tokens=10**8, token_counter=counter)


def test_a_chain_of_calls_counts_only_the_new_messages_each_time():
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = history(5, 300)
    result = compact(msgs, policy)
    for n in range(10, 16):
        msgs = msgs + tool_turn(n, 100 * n)  # a new list each call, as LangGraph's add_messages makes
        before = lookups(counter)
        result = compact(msgs, policy, tally=result.tally)
        assert lookups(counter) - before == 4
        assert result.tokens_before == counter.count_messages(msgs)


def test_a_history_loaded_again_from_a_checkpoint_is_matched_by_value_then_by_pointer():
    """A checkpointer gives back new, equal message objects: they are not recounted, and the remembered
    snapshot takes them, so the next call compares them by pointer."""
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = history(6, 500)
    first = compact(msgs, policy)
    loaded = messages_from_dict(messages_to_dict(msgs)) + tool_turn(20, 50)
    assert loaded[0] is not msgs[0] and loaded[0] == msgs[0]
    before = lookups(counter)
    second = compact(loaded, policy, tally=first.tally)
    assert lookups(counter) - before == 4
    assert second.tokens_before == counter.count_messages(loaded)
    snapshot = covered_objects(second.tally, counter)
    assert snapshot is not None and all(a is b for a, b in zip(snapshot, loaded, strict=True))


def test_a_message_replaced_with_other_content_makes_the_whole_history_recounted():
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = history(6, 500)
    first = compact(msgs, policy)
    edited = list(msgs)
    edited[3] = edited[3].model_copy(update={"content": "a much longer tool result " * 200})  # same id
    edited += tool_turn(20, 50)
    before = lookups(counter)
    result = compact(edited, policy, tally=first.tally)
    assert lookups(counter) - before == len(edited)
    assert result.tokens_before == counter.count_messages(edited)


def test_a_tally_superseded_by_a_later_call_is_not_trusted_by_a_fork():
    """Two continuations of one history (a fork of the graph): the first extends the tally; the second, given
    the same tally, recounts and stays exact."""
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = history(4, 500)
    first = compact(msgs, policy)
    branch_a = msgs + tool_turn(30, 80)
    branch_b = msgs + [HumanMessage("something else " * 50, id="hb")]
    a = compact(branch_a, policy, tally=first.tally)
    before = lookups(counter)
    b = compact(branch_b, policy, tally=first.tally)
    assert lookups(counter) - before == len(branch_b)
    assert a.tokens_before == counter.count_messages(branch_a)
    assert b.tokens_before == counter.count_messages(branch_b)


def test_a_field_whose_equality_raises_counts_as_a_change_not_an_error():
    """An equal-looking copy whose fields cannot be compared (an array in `additional_kwargs`) is recounted."""
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1", additional_kwargs={"vec": np.arange(3)})]
    first = compact(msgs, policy)
    copied = [msgs[0], msgs[1].model_copy(deep=True), HumanMessage("more", id="h2")]
    result = compact(copied, policy, tally=first.tally)
    assert result.tokens_before == counter.count_messages(copied)


def test_a_tally_from_json_in_a_fresh_process_covers_nothing():
    counter = ApproximateCounter()
    policy = steady(counter)
    msgs = history(3, 200)
    first = compact(msgs, policy)
    foreign = CountTally.from_dict({**first.tally.to_dict(), "tokens": first.tally.tokens + 1})  # unknown here
    before = lookups(counter)
    result = compact(msgs + tool_turn(9, 10), policy, tally=foreign)
    assert lookups(counter) - before == len(msgs) + 4
    assert result.tokens_before == counter.count_messages(msgs + tool_turn(9, 10))


def test_a_call_that_grows_the_same_history_meanwhile_cannot_change_the_counts_a_compaction_reuses(monkeypatch):
    """Two calls from one tally at once (two branches of a graph): thread A compacts, thread B makes a steady call
    that extends the remembered snapshot in place while A holds the prefix counts. A's figures stay exact."""
    import importlib
    import threading

    compact_module = importlib.import_module("lc_compaction.compact")
    counter = ApproximateCounter()
    firing = CompactionPolicy(max_input_tokens=2000, token_counter=counter)
    steady_policy = steady(counter)
    base = history(8, 10)
    first = compact(base, steady_policy)
    branch_a = base + tool_turn(50, 8000)  # over the window: compacts
    branch_b = base + tool_turn(60, 1)
    a_has_counts, b_done = threading.Event(), threading.Event()
    original = compact_module.prefix_counts

    def prefix_counts_then_wait(tally, counter):  # stands for a thread switch right after A read the prefix counts
        counts = original(tally, counter)
        if threading.current_thread().name == "A":
            a_has_counts.set()
            b_done.wait(5)
        return counts

    monkeypatch.setattr(compact_module, "prefix_counts", prefix_counts_then_wait)
    out = {}

    def run_a():
        out["a"] = compact(branch_a, firing, tally=first.tally)

    def run_b():
        a_has_counts.wait(5)
        out["b"] = compact(branch_b, steady_policy, tally=first.tally)
        b_done.set()

    threads = [threading.Thread(target=run_a, name="A"), threading.Thread(target=run_b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a_has_counts.is_set()  # A did read the prefix counts through the patched lookup
    reference = ApproximateCounter(cache_size=0)
    a = out["a"]
    assert a.triggered and a.actions
    assert a.tokens_before == reference.count_messages(branch_a)
    assert a.tokens_after == reference.count_messages(a.messages)
    assert out["b"].tokens_before == reference.count_messages(branch_b)
