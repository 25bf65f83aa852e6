"""compact() / acompact(): the ladder's behaviour on hand-made histories (each test names one rule)."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import (
    CompactionPolicy,
    DropOldExchanges,
    TruncateToolResults,
    acompact,
    compact,
    is_truncated,
    pin_message,
)
import lc_compaction.strategies.truncate as truncate_module
from lc_compaction.markers import SHORTENED_MARKER, TRUNCATION_PREFIX, is_dropped_marker
from lc_compaction.structure import check_invariants
from tests.builders import ai_call, conversation, history, lookups, tool_result, tool_turn


def test_under_trigger_returns_the_same_list_and_objects():
    msgs = history(2, 10)
    result = compact(msgs, CompactionPolicy(max_input_tokens=100_000, token_counter="approximate"))
    assert result.messages is msgs
    assert not result.triggered and result.stop_reason == "under_trigger" and not result.compacted
    assert result.tokens_before == result.tokens_after


def test_truncation_runs_first_oldest_first_and_stops_at_target():
    msgs = history(6, 4000)
    policy = CompactionPolicy(max_input_tokens=6000, token_counter="approximate")
    result = compact(msgs, policy)
    assert result.strategies_applied == ["truncate_tool_results"]
    truncated = [m.id for m in result.messages if is_truncated(m)]
    # oldest first: the truncated results are a prefix of the old (outside keep) results
    assert truncated == [f"t{n}" for n in range(len(truncated))]
    assert result.tokens_after <= policy.target_goal()[0]
    # it stopped as soon as it was under: one fewer truncation would not have been enough
    assert result.tokens_after + result.actions[-1].tokens_saved > policy.target_goal()[0]
    # pairs intact, ids kept
    assert check_invariants(result.messages) == []
    note = next(m for m in result.messages if m.id == "t0")
    assert note.content.startswith(TRUNCATION_PREFIX) and "4,009 characters" in note.content
    assert note.tool_call_id == "c0" and note.name == "search"


def test_truncation_note_preview_length_is_configurable():
    m = ToolMessage("abcdefghij" * 10, tool_call_id="c", id="t", name="fetch")
    assert '"abcde..."' in TruncateToolResults(preview_chars=5).note(m)
    assert "abcdefghij" * 3 in TruncateToolResults(preview_chars=40).note(m)


def test_excluded_tools_are_never_truncated():
    msgs = conversation("s", (tool_turn(n, 4000, name="payment" if n == 0 else "search") for n in range(6)))
    policy = CompactionPolicy(max_input_tokens=6000, token_counter="approximate",
                              strategies=[TruncateToolResults(exclude_tools=["payment"])])
    result = compact(msgs, policy)
    t0 = next(m for m in result.messages if m.id == "t0")
    assert t0.content == msgs[3].content
    assert any(is_truncated(m) for m in result.messages)


def test_already_truncated_results_are_skipped():
    policy = CompactionPolicy(max_input_tokens=6000, token_counter="approximate")
    first = compact(history(6, 4000), policy)
    second = compact(first.messages + tool_turn(9, 8000), policy)
    touched = [i for a in second.actions if a.kind == "truncated" for i in a.message_ids]
    assert not set(touched) & {m.id for m in first.messages if is_truncated(m)}


def test_drop_removes_whole_exchanges_and_keeps_the_first_request():
    msgs = history(8, 100)
    policy = CompactionPolicy(max_input_tokens=500, reserve=0, token_counter="approximate",
                              strategies=[DropOldExchanges()])
    result = compact(msgs, policy)
    ids = [m.id for m in result.messages]
    assert ids[0] == "sys" and "h0" in ids and "h7" in ids
    removed = {m.id for m in result.removed}
    for n in range(1, 8):  # an exchange goes whole or stays whole
        exchange = {f"h{n}", f"a{n}", f"t{n}", f"r{n}"}
        assert exchange <= removed or not exchange & removed, n
    assert check_invariants(result.messages) == []
    assert result.tokens_after <= 500


def _single_request_loop(result_chars: int) -> list:
    """One request then a 12-call tool loop; every result is distinct (a repeat would be deduplicated on
    arrival, `lc_compaction.dedup`, and this is about truncation) and about `result_chars` characters long."""
    msgs = [SystemMessage("s", id="sys"), HumanMessage("do the task", id="h")]
    for n in range(12):
        msgs += [ai_call(f"c{n}", f"a{n}", name="read"),
                 tool_result(f"c{n}", f"t{n}", f"result {n}: " + "y" * result_chars, name="read")]
    return msgs


def test_long_single_request_tool_loop_reaches_into_the_kept_part_sparing_recent_results():
    """One request then a long tool loop: everything is 'kept' by turns, yet it must not overflow. When the
    soft pass gets under the target with them spared, the `keep` most recent results stay whole."""
    msgs = _single_request_loop(3000)  # ~750 tokens a result: three spared results fit the 4,000-token target
    policy = CompactionPolicy(max_input_tokens=8000, token_counter="approximate",
                              strategies=[TruncateToolResults(keep=3)])
    result = compact(msgs, policy)
    assert result.fits and result.tokens_after <= policy.target_goal()[0]
    assert result.stop_reason == "under_target"
    for n in (9, 10, 11):  # the 3 most recent results are spared
        assert not is_truncated(next(m for m in result.messages if m.id == f"t{n}"))
    assert is_truncated(next(m for m in result.messages if m.id == "t0"))
    truncated = [a.message_ids[0] for a in result.actions if a.kind == "truncated"]
    assert truncated == [f"t{n}" for n in range(len(truncated))]  # oldest first, none of the spared three


def test_the_second_pass_reaches_into_the_spared_results_toward_the_target_sparing_the_most_recent_step():
    """When the `keep` spared results alone keep the history above the target, the soft pass stops above it and
    the second pass goes on truncating them, oldest first, toward the target; the most recent step's result is
    never touched (issue 13: a compaction that stops above the target is redone on the next calls)."""
    msgs = _single_request_loop(10_000)  # ~2,500 tokens a result: three spared results are over the target
    policy = CompactionPolicy(max_input_tokens=8000, token_counter="approximate",
                              strategies=[TruncateToolResults(keep=3)])
    target = policy.target_goal()[0]
    assert target is not None
    result = compact(msgs, policy)
    assert result.fits and result.tokens_after <= target and result.stop_reason == "under_target"
    by_id = {m.id: m for m in result.messages}
    assert [n for n in range(12) if not is_truncated(by_id[f"t{n}"])] == [11]  # only the most recent step whole
    assert by_id["t11"] is msgs[-1]
    # the soft pass truncated all but the 3 most recent, the second pass two of those three, oldest first
    truncated = [a.message_ids[0] for a in result.actions if a.kind == "truncated"]
    assert truncated == [f"t{n}" for n in range(11)]
    # a soft pass alone (keep=3) would have stopped above the target: the second pass is what got under it
    spared = sum(policy.counter.count_message(m) for m in msgs[-5::2])  # t9, t10, t11 whole
    assert spared > target


def test_hard_pass_shrinks_keep_to_fit_the_window():
    msgs = history(3, 100) + [HumanMessage("last " + "z" * 200, id="hl")]
    policy = CompactionPolicy(max_input_tokens=200, reserve=0, keep=("turns", 3), token_counter="approximate",
                              strategies=[DropOldExchanges()])
    result = compact(msgs, policy)
    assert result.fits and result.tokens_after <= 200
    assert {"sys", "h0", "hl"} <= {m.id for m in result.messages}


def test_single_oversized_message_is_cut_in_place_with_a_marker():
    big = HumanMessage("Summarize this document: " + "lorem ipsum " * 4000, id="big")
    msgs = [SystemMessage("You summarize documents.", id="sys"), big]
    policy = CompactionPolicy(max_input_tokens=2000, reserve=0, token_counter="approximate")
    result = compact(msgs, policy)
    assert [m.id for m in result.messages] == ["sys", "big"]
    cut = result.messages[1]
    assert cut.content.startswith("Summarize this document:")
    assert SHORTENED_MARKER.split("{")[0] in cut.content
    assert result.fits and result.tokens_after <= 2000
    assert result.messages[0] is msgs[0]


def test_pinned_part_over_the_window_is_reported_not_emptied():
    sys_prompt = SystemMessage("policy " * 3000, id="sys")
    msgs = [sys_prompt, HumanMessage("hi", id="h")]
    policy = CompactionPolicy(max_input_tokens=1000, reserve=0, token_counter="approximate")
    result = compact(msgs, policy)
    assert not result.fits and result.stop_reason == "pinned_over_budget"
    assert result.messages[0].content == sys_prompt.content
    assert any(m.id == "h" for m in result.messages)


def test_caller_pins_are_never_removed():
    msgs = history(6, 100)
    policy = CompactionPolicy(max_input_tokens=400, reserve=0, token_counter="approximate", pin={"r2"},
                              strategies=[DropOldExchanges()])
    result = compact(msgs, policy)
    ids = [m.id for m in result.messages]
    assert "r2" in ids and "h2" in ids  # the pinned answer keeps its request
    marked = list(msgs)
    marked[msgs.index(next(m for m in msgs if m.id == "r3"))] = pin_message(next(m for m in msgs if m.id == "r3"))
    result = compact(marked, CompactionPolicy(max_input_tokens=400, reserve=0, token_counter="approximate",
                                              strategies=[DropOldExchanges()]))
    assert "r3" in [m.id for m in result.messages]


def test_extra_tokens_count_toward_the_trigger():
    msgs = history(2, 100)
    policy = CompactionPolicy(max_input_tokens=10_000, token_counter="approximate")
    assert not compact(msgs, policy).triggered
    assert compact(msgs, policy, extra_tokens=9_000).triggered
    with pytest.raises(ValueError, match="extra_tokens"):
        compact(msgs, policy, extra_tokens=-1)


def test_openai_dicts_are_accepted_at_the_edge():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi " * 2000},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]
    result = compact(msgs, CompactionPolicy(max_input_tokens=1000, reserve=0, token_counter="approximate"))
    assert result.triggered and all(m.id for m in result.messages)


def test_messages_without_ids_get_unique_ids_when_compacted():
    msgs = [SystemMessage("s")] + [m for n in range(5) for m in (HumanMessage(f"q{n} " * 50), AIMessage(f"a{n}"))]
    result = compact(msgs, CompactionPolicy(trigger=("messages", 6), keep=("messages", 2), token_counter="messages"))
    ids = [m.id for m in result.messages]
    assert all(ids) and len(set(ids)) == len(ids)


def test_acompact_matches_compact():
    msgs = history(8, 3000)
    policy = CompactionPolicy(max_input_tokens=5000, token_counter="approximate")
    sync = compact(msgs, policy)
    async_ = asyncio.run(acompact(msgs, policy))
    assert [m.id for m in sync.messages] == [m.id for m in async_.messages]
    assert [m.content for m in sync.messages] == [m.content for m in async_.messages]
    assert sync.tokens_after == async_.tokens_after


def test_result_to_dict_is_json():
    import json

    result = compact(history(8, 3000), CompactionPolicy(max_input_tokens=5000, token_counter="approximate"))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["tokens_before"] > data["tokens_after"]
    assert data["strategies_applied"] and data["actions"]


def test_tally_counts_only_new_messages():
    from lc_compaction.tally import CountTally

    counter_policy = CompactionPolicy(max_input_tokens=1_000_000, token_counter="approximate")
    msgs = history(20, 200)
    first = compact(msgs, counter_policy)
    grown = msgs + tool_turn(99, 50)
    before = lookups(counter_policy.counter)
    second = compact(grown, counter_policy, tally=CountTally.from_dict(first.tally.to_dict()))
    # 4 new messages: 4 lookups, not 85
    assert lookups(counter_policy.counter) - before == 4
    assert second.tokens_before == counter_policy.counter.count_messages(grown)
    # a tally that no longer describes a prefix is ignored (everything is recounted, the figure stays exact)
    stale = CountTally(len(msgs), "not-there", msgs[0].id, 1, first.tally.counter)
    assert compact(grown, counter_policy, tally=stale).tokens_before == second.tokens_before
    assert CountTally.from_dict({"bad": 1}) is None


def test_active_turn_keeps_its_leading_thinking_block():
    """Anthropic requires the first assistant message after the last user turn to start with its thinking
    block while a tool loop is active: that step is pinned, whatever else must go."""
    from tests.oracle.checks import CheckContext, check

    think = AIMessage(
        content=[{"type": "thinking", "thinking": "plan the steps", "signature": "sig"},
                 {"type": "tool_use", "id": "k0", "name": "read", "input": {"p": 0}}],
        id="think", tool_calls=[{"name": "read", "args": {"p": 0}, "id": "k0", "type": "tool_call"}])
    msgs = history(3, 2000) + [HumanMessage("now do it", id="hn"), think,
                               tool_result("k0", "tk0", "z" * 6000, name="read")]
    for n in range(1, 6):
        msgs += [ai_call(f"k{n}", f"ak{n}", name="read", args={"p": n}),
                 tool_result(f"k{n}", f"tk{n}", "z" * 6000, name="read")]
    policy = CompactionPolicy(max_input_tokens=4000, token_counter="approximate", keep=("messages", 2),
                              strategies=[DropOldExchanges()])
    result = compact(msgs, policy)
    assert "think" in [m.id for m in result.messages]
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=result.messages))
    assert check_invariants(result.messages) == []


def test_mid_history_system_message_is_sent_as_human_and_reported():
    msgs = [SystemMessage("rules", id="s"), HumanMessage("q " * 800, id="h1"), AIMessage("a", id="a1"),
            SystemMessage("note: the user is VIP", id="mid"), HumanMessage("q2", id="h2")]
    result = compact(msgs, CompactionPolicy(max_input_tokens=300, reserve=0, token_counter="approximate"))
    mid = next(m for m in result.messages if m.id == "mid")
    assert isinstance(mid, HumanMessage) and mid.content == "note: the user is VIP"
    assert [r.kind for r in result.repairs] == ["system_message_converted"]
    assert result.messages[0].id == "s" and check_invariants(result.messages) == []


def test_tally_is_not_trusted_for_a_message_replaced_by_id():
    """A message replaced by id (LangGraph's add_messages / update_state) or loaded again is a new object: the
    tally does not cover it, so the history is recounted and compaction is not skipped on a stale count."""
    from lc_compaction.tally import CountTally

    policy = CompactionPolicy(max_input_tokens=4000, token_counter="approximate")
    small = [HumanMessage("attach doc", id="u1"), AIMessage("ok", id="a1")]
    first = compact(small, policy)
    edited = [HumanMessage("attach doc: " + "lorem ipsum " * 3000, id="u1"), small[1], HumanMessage("go", id="u2")]
    result = compact(edited, policy, tally=first.tally)
    assert result.tokens_before == policy.counter.count_messages(edited)
    assert result.triggered and result.fits
    # a tally rebuilt from JSON in another process covers no objects here: a full, exact count
    fresh = compact(small + [HumanMessage("go", id="u3")], policy, tally=CountTally.from_dict(first.tally.to_dict()))
    assert fresh.tokens_before == policy.counter.count_messages(small + [HumanMessage("go", id="u3")])


def test_a_string_is_not_a_history():
    with pytest.raises(ValueError, match="messages"):
        compact("hello", CompactionPolicy(max_input_tokens=1000, token_counter="approximate"))


def test_repeated_message_ids_are_replaced_and_reported():
    msgs = [HumanMessage("q " * 600, id="x"), AIMessage("a", id="x"), HumanMessage("last", id="x")]
    result = compact(msgs, CompactionPolicy(max_input_tokens=300, reserve=0, token_counter="approximate"))
    ids = [m.id for m in result.messages]
    assert len(set(ids)) == len(ids)
    assert [r.kind for r in result.repairs].count("duplicate_id_replaced") == 2


def test_a_negative_count_from_a_callable_counter_is_an_error():
    policy = CompactionPolicy(max_input_tokens=1000, token_counter=lambda ms: -1)
    with pytest.raises(ValueError, match=">= 0"):
        compact([HumanMessage("hi", id="h")], policy)


def test_a_compaction_after_a_tallied_call_does_not_recount_the_prefix():
    """The previous call's per-message counts of the very same objects are reused: when the grown history
    triggers, only the new messages are looked up in the count cache."""
    from lc_compaction import ApproximateCounter

    counter = ApproximateCounter()
    msgs = history(12, 2000)
    first = compact(msgs, CompactionPolicy(max_input_tokens=10**7, token_counter=counter))
    grown = msgs + tool_turn(50, 10)
    small = CompactionPolicy(max_input_tokens=counter.count_messages(grown) // 2, token_counter=counter,
                             strategies=[DropOldExchanges()])
    before = lookups(counter)
    result = compact(grown, small, tally=first.tally)
    assert result.triggered and result.actions
    markers = sum(is_dropped_marker(m) for m in result.messages)
    assert markers == 1
    # the 4 new messages, the fixed-text marker the plan starts from, and each drop marker: its cost when the plan
    # is checked (when its text is not the fixed one) and when it is put in; the prefix (50 messages) never
    assert 4 + 1 + markers <= lookups(counter) - before <= 4 + 1 + 2 * markers < len(msgs)
    assert result.tokens_after == counter.count_messages(result.messages)


def test_a_compaction_never_returns_a_history_larger_than_its_input():
    """Where what a strategy puts in place (a note, a marker) costs more than what it removes, the input comes
    back unchanged instead of a larger history (compact.py, step 6)."""
    from lc_compaction.ladder import SyncStrategy

    class Inflate(SyncStrategy):
        name = "inflate"

        def apply(self, state):  # replaces the first tool result by a longer one: a strategy gone wrong
            for i, slot in enumerate(state.slots):
                if isinstance(slot.message, ToolMessage):
                    state.replace(i, slot.message.model_copy(update={"content": "x " * 4_000}), strategy=self.name,
                                  kind="truncated")
                    return

    history = [HumanMessage("q", id="h"),
               AIMessage("", id="a", tool_calls=[{"name": "t", "args": {}, "id": "c"}]),
               ToolMessage("r " * 500, tool_call_id="c", id="t")]
    result = compact(history, CompactionPolicy(max_input_tokens=100_000, trigger=("tokens", 10),
                                               strategies=[Inflate()]))
    assert result.messages is history and not result.compacted
    assert result.tokens_after == result.tokens_before and result.stop_reason == "nothing_removable"


@pytest.mark.parametrize("bad", [{"content": "no role"}, 42, None])
def test_an_item_that_is_no_message_is_named_by_its_index(bad):
    with pytest.raises(ValueError, match=r"^messages\[1\]: could not convert this "):
        compact([HumanMessage("hi"), bad, ("user", "again")], CompactionPolicy(max_input_tokens=4000))


def test_a_truncation_note_is_remembered_per_result_and_setting(monkeypatch):
    """`TruncateToolResults.note` remembers its notes: the same result (text, tool, status) gives the same note
    without being read again; a result that differs only in its status gets its own note (a failure says so),
    and the cache is bounded (cleared when full)."""
    strategy = TruncateToolResults()
    body = "x" * 2_000
    ok = ToolMessage(body, tool_call_id="c1", name="run")
    failed = ToolMessage(body, tool_call_id="c2", name="run", status="error")
    first = strategy.note(ok)
    reads = []
    monkeypatch.setattr(truncate_module, "preview", lambda text, n: reads.append(text) or text[:n])
    assert strategy.note(ok.model_copy()) == first and not reads  # remembered: not read again
    failed_note = strategy.note(failed)
    assert reads and "error" in failed_note and failed_note != first
    monkeypatch.setattr(strategy._notes, "max_items", 2)  # NOTE_CACHE, the bound of the memo it uses
    for k in range(3):
        strategy.note(ToolMessage(f"{k}" * 500, tool_call_id=f"d{k}", name="run"))
    assert len(strategy._notes.items) <= 2
