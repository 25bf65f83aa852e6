"""Property-based tests (hypothesis): every invariant of the core, on generated histories, at random windows
and keeps, checked by the independent oracle (tests/oracle) and by the result's own claims."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, InvalidHistoryError, compact, is_summary
from lc_compaction.structure import check_invariants

from tests.oracle.checks import check_all_structural, same_message
from tests.oracle.generators import broken_histories, histories

KEEPS = st.one_of(
    st.tuples(st.just("turns"), st.integers(0, 3)),
    st.tuples(st.just("messages"), st.integers(0, 12)),
    st.tuples(st.just("tokens"), st.integers(0, 3000)),
)
COUNTERS = st.sampled_from(["approximate", "messages", "exact"])
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _policy(window: int, keep, counter: str) -> CompactionPolicy:
    if counter == "messages":
        window = max(2, window // 200)  # a window in messages
        return CompactionPolicy(max_input_tokens=window, reserve=0, keep=keep, token_counter="messages")
    return CompactionPolicy(max_input_tokens=window, keep=keep, token_counter=counter)


def _first_request(messages):
    return next((m for m in messages if isinstance(m, HumanMessage) and not is_summary(m)), None)


def _last_request(messages):
    return next((m for m in reversed(messages) if isinstance(m, HumanMessage) and not is_summary(m)), None)


@FAST
@given(history=st.booleans().flatmap(lambda reuse: histories(max_turns=5, max_steps=3, reuse_call_ids=reuse)),
       window=st.integers(200, 20_000), keep=KEEPS, counter=COUNTERS)
def test_invariants_hold_on_generated_histories(history, window, keep, counter):
    policy = _policy(window, keep, counter)
    result = compact(history, policy)
    out = result.messages
    # pairing and order rules, by the oracle and by our own check
    check_all_structural(history, out)
    assert check_invariants(out) == []
    # pins: the system prompt, the first and the latest request survive verbatim
    if isinstance(history[0], SystemMessage):
        assert out[0] is history[0] or same_message(history[0], out[0])
    for pinned in (_first_request(history), _last_request(history)):
        if pinned is not None:
            assert any(m.id == pinned.id for m in out), f"request {pinned.id} lost"
    # never an empty or request-less history
    assert any(isinstance(m, HumanMessage) for m in out)
    # the figures are honest
    assert result.tokens_after == policy.counter.count_messages(out)
    assert result.tokens_after <= result.tokens_before
    if not result.triggered:  # the ladder did not run: the input itself, or only arrival edits (dedup.py)
        if not result.actions:
            assert out is history
        else:
            assert {a.kind for a in result.actions} == {"deduplicated"} and len(out) == len(history)
            edited = {mid for a in result.actions for mid in a.message_ids}
            assert all(b is a or (a.id in edited and isinstance(a, ToolMessage)) for a, b in zip(history, out))
    budget = policy.budget_tokens()
    if result.fits:
        assert result.tokens_after <= budget
    else:
        assert result.stop_reason == "pinned_over_budget"
        assert result.tokens_after > budget
    # no message is duplicated; every surviving input message keeps its id
    ids = [m.id for m in out]
    assert len(ids) == len(set(ids))


@FAST
@given(history=histories(max_turns=5, max_steps=3), window=st.integers(500, 20_000), keep=KEEPS)
def test_compacted_history_does_not_compact_again(history, window, keep):
    """A result under the target is below the trigger: the next call leaves it alone."""
    policy = _policy(window, keep, "approximate")
    first = compact(history, policy)
    assume(first.triggered and first.stop_reason == "under_target")
    second = compact(first.messages, policy)
    assert not second.triggered
    assert second.messages is first.messages


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=broken_histories(reuse_call_ids=None, invalid_calls=None))
def test_broken_input_raises_naming_index_or_is_repaired(case):
    history, defect = case
    policy = CompactionPolicy(trigger=("messages", 0), keep=("messages", 0), token_counter="approximate")
    if defect.kind == "system_in_middle":
        # lossless: sent as a HumanMessage, reported as a repair
        result = compact(history, policy)
        assert any(r.kind == "system_message_converted" for r in result.repairs)
        assert check_invariants(result.messages) == []
        return
    with pytest.raises(InvalidHistoryError) as err:
        compact(history, policy)
    found = err.value.violations
    assert any(v.index == defect.index or (defect.tool_call_id and v.tool_call_id == defect.tool_call_id)
               for v in found), (defect, found)
    if defect.tool_call_id:
        assert defect.tool_call_id in str(err.value)
    # the same input with repair: a valid history, every repair reported, the input list untouched
    before = list(history)
    repaired = compact(history, policy, repair=True)
    assert history == before
    assert check_invariants(repaired.messages) == []
    assert repaired.repairs
