"""CompactionPolicy: defaults, the SummarizationMiddleware tuple formats, and errors naming the setting."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from lc_compaction import CompactionPolicy


def test_defaults_compact_only_when_the_call_would_not_fit():
    """Issue 13's rule: no trigger of its own (the budget is the trigger: compacting earlier breaks the provider's
    cached prefix for no need, benchmarks/BILL.md), down to 50% of the window."""
    p = CompactionPolicy(max_input_tokens=100_000, token_counter="approximate")
    assert p.trigger_clauses == [] and p.trigger_tokens() == []
    assert p.keep == ("turns", 2)
    assert p.reserve == 4096
    assert p.budget_tokens() == 100_000 - 4096
    goal_tokens, goal_messages = p.target_goal()
    assert goal_tokens == 50_000 and goal_messages is None
    assert not p.is_triggered(80_001, 10)  # the old trigger (80% of the window) is gone
    assert not p.is_triggered(100_000 - 4096, 10_000)
    assert p.is_triggered(100_000 - 4096 + 1, 10)


def test_default_target_stays_below_a_small_budget():
    """With a large reserve, 75% of the budget is below half the window: the target is the lower of the two."""
    p = CompactionPolicy(max_input_tokens=1_000, reserve=500, token_counter="approximate")
    assert p.budget_tokens() == 500 and p.target_goal()[0] == 375


def test_reserve_scales_down_for_small_windows():
    assert CompactionPolicy(max_input_tokens=4000, token_counter="approximate").reserve == 400


def test_target_defaults_below_a_low_trigger():
    p = CompactionPolicy(max_input_tokens=100_000, trigger=("tokens", 20_000), token_counter="approximate")
    assert p.target_goal()[0] == 15_000


def test_trigger_list_means_any_and_clause_means_all():
    p = CompactionPolicy(trigger=[("tokens", 100), ("messages", 5)], token_counter="approximate")
    assert p.is_triggered(101, 1) and p.is_triggered(1, 6) and not p.is_triggered(100, 5)
    q = CompactionPolicy(trigger={"tokens": 100, "messages": 5}, token_counter="approximate")
    assert not q.is_triggered(101, 1) and not q.is_triggered(1, 6) and q.is_triggered(101, 6)


def test_budget_triggers_even_without_a_token_trigger():
    p = CompactionPolicy(max_input_tokens=1000, reserve=0, trigger=("messages", 500), token_counter="approximate")
    assert p.is_triggered(1001, 3)


@pytest.mark.parametrize(
    "kwargs, setting",
    [
        ({"trigger": ("tokens", 10), "keep": ("turns", -1)}, "keep"),
        ({"trigger": ("tokens", 10), "keep": ("weeks", 2)}, "keep"),
        ({"trigger": ("tokens", 10), "keep": ("fraction", 0.5)}, "keep"),
        ({"trigger": ("fraction", 0.5)}, "trigger"),
        ({"trigger": ("fraction", 1.5), "max_input_tokens": 100}, "trigger"),
        ({"trigger": []}, "trigger"),
        ({}, "trigger"),
        ({"max_input_tokens": 1000, "trigger": ("fraction", 0.8), "target": ("fraction", 0.9)}, "target"),
        ({"max_input_tokens": 1000, "target": ("fraction", 0.95)}, "target"),  # at or above the budget (900)
        ({"max_input_tokens": 2000, "target": 500}, "target"),
        ({"max_input_tokens": 2000, "keep": 3}, "keep"),
        ({"trigger": ("messages", 10), "target": ("messages", 10)}, "target"),
        ({"max_input_tokens": -5}, "max_input_tokens"),
        ({"max_input_tokens": 100, "reserve": 100}, "reserve"),
        ({"max_input_tokens": 100, "token_counter": 42}, "token_counter"),
        ({"max_input_tokens": 100, "strategies": [object()]}, "strategies"),
    ],
)
def test_invalid_settings_raise_value_error_naming_the_setting(kwargs, setting):
    kwargs.setdefault("token_counter", "approximate")
    with pytest.raises(ValueError, match=setting):
        CompactionPolicy(**kwargs)


def test_a_target_error_names_what_stands_in_for_an_unset_trigger():
    # No trigger given: the budget (4,000 - 400) triggers, so the message names the budget, not "the trigger".
    with pytest.raises(ValueError, match=r"^target: 3600 tokens is not below the budget \(the default trigger: "
                                         r"max_input_tokens - reserve, 3600 tokens\)$"):
        CompactionPolicy(max_input_tokens=4000, target=("tokens", 3600), token_counter="approximate")
    # At a cached price of 0.5 the default trigger is 80% of the window (3,200 tokens).
    with pytest.raises(ValueError, match=r"^target: 3300 tokens is not below the default trigger \(80% of the "
                                         r"window at cached_price >= 0.5, 3200 tokens\)$"):
        CompactionPolicy(max_input_tokens=4000, target=("tokens", 3300), cached_price=0.5,
                         token_counter="approximate")
    # A trigger of one's own is named as the trigger.
    with pytest.raises(ValueError, match=r"^target: 3300 tokens is not below the trigger \(3000 tokens\)$"):
        CompactionPolicy(max_input_tokens=4000, trigger=("tokens", 3000), target=("tokens", 3300),
                         token_counter="approximate")


def test_keep_turns_counts_requests_from_the_end():
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3"), AIMessage("d", id="4"),
            HumanMessage("e", id="5")]
    p = CompactionPolicy(trigger=("messages", 1), keep=("turns", 2), token_counter="messages")
    assert p.keep_start(msgs, [1] * 5) == 2
    p1 = CompactionPolicy(trigger=("messages", 1), keep=("tokens", 2), token_counter="messages")
    assert p1.keep_start(msgs, [1] * 5) == 3


def test_pins_by_id_predicate_and_mark():
    from lc_compaction import pin_message

    m = HumanMessage("x", id="keep-me")
    assert CompactionPolicy(trigger=("tokens", 1), pin={"keep-me"}, token_counter="messages").is_pinned_by_caller(m)
    assert CompactionPolicy(trigger=("tokens", 1), pin=lambda x: x.id == "keep-me",
                            token_counter="messages").is_pinned_by_caller(m)
    marked = pin_message(HumanMessage("y", id="other"))
    assert CompactionPolicy(trigger=("tokens", 1), token_counter="messages").is_pinned_by_caller(marked)
    assert not CompactionPolicy(trigger=("tokens", 1), token_counter="messages").is_pinned_by_caller(m)


def test_trigger_tokens_lists_every_token_threshold_and_no_message_threshold():
    """`trigger_tokens()` (what the CLI's and the notebooks' plots draw): a `tokens` threshold as given, a
    `fraction` times the window, `messages` left out; in clause order."""
    p = CompactionPolicy(max_input_tokens=10_000, token_counter="approximate",
                         trigger=[("tokens", 9_000), ("messages", 50), {"fraction": 0.7, "messages": 20}])
    assert p.trigger_tokens() == [9_000, 0.7 * 10_000]
    assert CompactionPolicy(trigger=("messages", 5), token_counter="approximate").trigger_tokens() == []


def test_the_cached_price_sets_when_the_default_trigger_fires():
    """`cached_price` (module docstring of policy.py): below `EARLY_TRIGGER_PRICE` the default trigger is the budget
    alone; at or above it (cached tokens cost half as much or more: a broken prefix pays back quickly), 80% of the
    window. A trigger given explicitly is kept whatever the price."""
    from lc_compaction.policy import EARLY_TRIGGER_FRACTION, EARLY_TRIGGER_PRICE

    cheap = CompactionPolicy(max_input_tokens=10_000, cached_price=EARLY_TRIGGER_PRICE - 0.01)
    dear = CompactionPolicy(max_input_tokens=10_000, cached_price=EARLY_TRIGGER_PRICE)
    at = int(EARLY_TRIGGER_FRACTION * 10_000) + 1
    assert not cheap.is_triggered(at, 10) and cheap.is_triggered(cheap.budget_tokens() + 1, 10)
    assert dear.is_triggered(at, 10) and not dear.is_triggered(at - 1, 10)
    given = CompactionPolicy(max_input_tokens=10_000, cached_price=1.0, trigger=("tokens", 9_000))
    assert not given.is_triggered(at, 10)
    for bad in (-0.1, 1.5, True, "0.1", float("nan")):
        with pytest.raises(ValueError, match="cached_price"):
            CompactionPolicy(max_input_tokens=10_000, cached_price=bad)


def test_clear_at_least_goes_on_until_that_much_is_reclaimed_or_changes_nothing():
    """`clear_at_least` (tokens), both meanings (ClearToolUsesEdit and Anthropic's context editing): once
    triggered, the ladder reclaims at least that many tokens (deeper than the target when needed); and when the
    history fits the budget and the ladder cannot reclaim that much, nothing is applied."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from lc_compaction import compact

    def history(n: int) -> list:
        out: list = [HumanMessage("Please check the orders.", id="h0")]
        for k in range(n):
            out += [AIMessage("", id=f"a{k}", tool_calls=[{"name": "lookup", "args": {"k": k}, "id": f"c{k}"}]),
                    ToolMessage(f"order {k}: " + f"line {k} of the order record. " * 60, tool_call_id=f"c{k}",
                                id=f"t{k}", name="lookup")]
        return out

    msgs = history(8)
    base = CompactionPolicy(max_input_tokens=10_000, trigger=("tokens", 3_900))
    plain = compact(msgs, base)
    assert plain.triggered and plain.compacted
    reclaimed = plain.tokens_before - plain.tokens_after
    most = compact(msgs, CompactionPolicy(max_input_tokens=10_000, trigger=("tokens", 3_900), target=("tokens", 1)))
    most_reclaimed = most.tokens_before - most.tokens_after
    assert most_reclaimed > reclaimed + 200  # the scenario: the ladder could go deeper than the target
    least = (reclaimed + most_reclaimed) // 2
    deeper = compact(msgs, CompactionPolicy(max_input_tokens=10_000, trigger=("tokens", 3_900), clear_at_least=least))
    assert deeper.compacted and deeper.tokens_before - deeper.tokens_after >= least
    never = compact(msgs, CompactionPolicy(max_input_tokens=10_000, trigger=("tokens", 3_900),
                                           clear_at_least=plain.tokens_before))  # cannot reclaim everything
    assert never.stop_reason == "below_clear_at_least" and never.messages is msgs and not never.compacted
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="clear_at_least"):
            CompactionPolicy(max_input_tokens=10_000, clear_at_least=bad)
