"""lc_compaction.billing: the prompt-cache rule on hand-made request pairs (real tiktoken counts), the shared
prefix as sent, the meter, and the bill as the replay and the CLI report it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, replay_conversation
from lc_compaction.billing import (
    BillMeter,
    PromptCache,
    bill_ratio,
    same_on_wire,
    shared_prefix_tokens,
)
from lc_compaction.cli import main
from lc_compaction.tokens import MESSAGE_OVERHEAD_TOKENS, TiktokenCounter
from lc_compaction.traces import bundled_traces, load_traces

COUNTER = TiktokenCounter("gpt-4o")


def _text(tokens: int) -> str:
    """A text of exactly `tokens` tokens ("the the the ...": one o200k token each)."""
    text = "the" + " the" * (tokens - 1)
    assert COUNTER.count_text(text) == tokens
    return text


def _system_of(tokens: int) -> SystemMessage:
    """A system message costing exactly `tokens` tokens (its overhead and role included)."""
    overhead = COUNTER.count_message(SystemMessage(content="the")) - 1
    message = SystemMessage(content=_text(tokens - overhead))
    assert COUNTER.count_message(message) == tokens
    return message


def _pair(shared: int) -> tuple[list, list]:
    """Two requests sharing exactly `shared` tokens: the same system prompt, then a user message in one and an
    assistant message in the other (different roles: nothing of the second message is shared)."""
    system = _system_of(shared)
    return [system, HumanMessage("what is my balance?")], [system, AIMessage("Your balance is 12.")]


@pytest.mark.parametrize(("shared", "cached"), [(1_023, 0), (1_024, 1_024), (1_151, 1_024), (1_152, 1_152),
                                                (1_279, 1_152), (1_280, 1_280)])
def test_openai_rule_on_request_pairs(shared, cached):
    previous, current = _pair(shared)
    assert shared_prefix_tokens(previous, current, COUNTER) == (shared, 1)
    meter = BillMeter(PromptCache(), COUNTER)
    first = meter.bill(previous)
    assert first.cached_tokens == 0 and first.billed == first.input_tokens  # nothing before the first request
    bill = meter.bill(current)
    assert bill.shared_tokens == shared and bill.cached_tokens == cached
    assert bill.input_tokens == COUNTER.count_messages(current)
    assert bill.billed == pytest.approx(bill.input_tokens - cached + 0.1 * cached)


def test_a_change_in_the_first_message_caches_nothing():
    system = _system_of(3_000)
    changed = SystemMessage(content="A" + system.content[1:])
    tail = [HumanMessage("hello"), AIMessage("hi"), HumanMessage("book it")]
    shared, messages = shared_prefix_tokens([system, *tail], [changed, *tail], COUNTER)
    assert messages == 0
    # only the tokens before the content (<|start|>, the role, the separator) are the same
    assert shared == MESSAGE_OVERHEAD_TOKENS - 1 + COUNTER.count_text("system")
    meter = BillMeter(PromptCache(), COUNTER)
    meter.bill([system, *tail])
    bill = meter.bill([changed, *tail])
    assert bill.cached_tokens == 0 and bill.billed == bill.input_tokens


def test_the_common_token_prefix_inside_the_first_differing_message_is_shared():
    system = _system_of(1_500)
    common = _text(400) + "."
    a, b = common + " Reservation ZFA04Y is confirmed.", common + " Nothing was found."
    enc = COUNTER.encoding
    assert enc.encode_ordinary(a)[:COUNTER.count_text(common)] == enc.encode_ordinary(common)  # token boundary
    previous = [system, ToolMessage(a, tool_call_id="c1")]
    current = [system, ToolMessage(b, tool_call_id="c1")]
    shared, messages = shared_prefix_tokens(previous, current, COUNTER)
    header = MESSAGE_OVERHEAD_TOKENS - 1 + COUNTER.count_text("tool")
    assert messages == 1
    assert shared == COUNTER.count_message(system) + header + COUNTER.count_text(common)


def test_a_growing_history_shares_the_whole_previous_request_but_its_reply_priming():
    trace = load_traces(bundled_traces()[1])[0]
    points = [i for i, m in enumerate(trace.messages) if isinstance(m, AIMessage)]
    meter = BillMeter(PromptCache(cached_price=0.25), COUNTER)
    previous: list = []
    for i in points[:6]:
        request = trace.messages[:i]
        bill = meter.bill(request)
        expected = COUNTER.count_messages(previous) - COUNTER.reply_overhead if previous else 0
        assert bill.shared_tokens == expected and bill.shared_messages == len(previous)
        assert bill.cached_tokens == PromptCache().cached_tokens(expected)
        previous = request


def test_what_is_not_sent_does_not_break_the_prefix():
    call = {"name": "get_reservation_details", "args": {"reservation_id": "ZFA04Y"}, "id": "call_1"}
    ai = AIMessage("", tool_calls=[call], id="a")
    tool = ToolMessage('{"status": "ok"}', tool_call_id="call_1", id="t")
    # another id, lc-compaction's marks and response metadata are not sent
    assert same_on_wire(ai, ai.model_copy(update={"id": "other", "response_metadata": {"x": 1}}))
    assert same_on_wire(tool, tool.model_copy(update={"id": None, "response_metadata": {"lc_compaction": {}}}))
    # what is sent does
    assert not same_on_wire(tool, tool.model_copy(update={"tool_call_id": "call_2"}))
    assert not same_on_wire(tool, tool.model_copy(update={"content": '{"status": "cancelled"}'}))
    other_args = ai.model_copy(update={"tool_calls": [{**call, "args": {"reservation_id": "ZFA04Z"}}]})
    assert not same_on_wire(ai, other_args)
    assert not same_on_wire(HumanMessage("hi"), AIMessage("hi"))
    assert not same_on_wire(HumanMessage("hi", name="ann"), HumanMessage("hi"))


def test_prompt_cache_settings_are_validated_and_named():
    for bad in ({"cached_price": 1.5}, {"cached_price": -0.1}, {"step_tokens": 0}, {"min_tokens": -1},
                {"cached_price": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PromptCache(**bad)
    cache = PromptCache(cached_price=0.25)
    assert "1,024" in cache.describe() and "128" in cache.describe() and "0.25" in cache.describe()
    assert cache.to_dict()["cached_price"] == 0.25 and cache.to_dict()["name"] == "openai"
    assert bill_ratio(50.0, 200.0) == 0.25 and bill_ratio(10.0, 0) is None


# ------------------------------------------------------------------------------------------ in the replay
def _tool_loop():
    """The bundled AgentDojo conversation with the most text (a tool loop with large results)."""
    return max((t for p in bundled_traces() for t in load_traces(p) if t.id.startswith("agentdojo")),
               key=lambda t: sum(len(str(m.content)) for m in t.messages))


@pytest.mark.parametrize("price", [0.0, 0.1, 1.0])
def test_replay_bills_every_call_under_the_cache_price(price):
    trace = _tool_loop()
    replay = replay_conversation(trace, CompactionPolicy(max_input_tokens=6_000),
                                 cache=PromptCache(cached_price=price))
    assert any(c.compacted for c in replay.calls)
    for c in replay.calls:
        assert 0 <= c.cached_tokens <= c.tokens_sent
        assert c.billed_input == pytest.approx(c.tokens_sent - (1 - price) * c.cached_tokens)
        assert c.billed_input_uncompacted == pytest.approx(
            c.tokens_uncompacted - (1 - price) * c.cached_tokens_uncompacted)
    s = replay.summary()
    assert s["billed_input"] == pytest.approx(sum(c.billed_input for c in replay.calls), abs=0.01)
    assert s["bill_ratio"] == pytest.approx(s["billed_input"] / s["billed_input_uncompacted"], abs=1e-4)
    if price == 1.0:  # no discount: the bill is the tokens sent
        assert s["billed_input"] == s["tokens_sent"] and s["billed_input_uncompacted"] == s["tokens_sent_uncompacted"]
    flags = [c.compacted for c in replay.calls]
    assert s["back_to_back_compactions"] == sum(a and b for a, b in zip(flags, flags[1:]))
    assert [c.back_to_back for c in replay.calls] == [False] + [a and b for a, b in zip(flags, flags[1:])]


def test_replay_cached_tokens_follow_the_sent_histories():
    """Each call's cached tokens are the rule applied to the prefix shared with the previous call's sent history,
    recomputed here from the histories the replay hands to on_call."""
    trace = _tool_loop()
    policy = CompactionPolicy(max_input_tokens=6_000)
    sent: list[list] = []
    replay = replay_conversation(trace, policy, on_call=lambda rec, hist, res: sent.append(list(res.messages)))
    cache = PromptCache()
    for k, c in enumerate(replay.calls):
        shared, n = shared_prefix_tokens(sent[k - 1], sent[k], policy.counter) if k else (0, 0)
        assert c.cached_tokens == cache.cached_tokens(shared) and c.prefix_messages == n
    # a call that does not compact sends the previous call's history and the new messages: the whole previous
    # request is its prefix; some compactions rewrite what the previous call sent, and the prefix breaks there
    for k, c in enumerate(replay.calls[1:], 1):
        if not c.compacted:
            assert c.prefix_messages == len(sent[k - 1])
    assert any(c.prefix_messages < len(sent[k - 1]) for k, c in enumerate(replay.calls[1:], 1) if c.compacted)


def test_without_compaction_the_bill_is_the_uncompacted_bill():
    trace = _tool_loop()
    replay = replay_conversation(trace, CompactionPolicy(max_input_tokens=1_000_000, deduplicate=False))
    s = replay.summary()
    assert s["compactions"] == 0 and s["arrival_edit_calls"] == 0 and s["bill_ratio"] == 1.0
    assert s["cached_tokens"] == s["cached_tokens_uncompacted"] > 0


def test_repeated_results_noted_on_arrival_lower_the_bill_without_breaking_the_prefix():
    """Under a window that never fills, the default policy never compacts, but a repeated tool result becomes a
    note when it arrives (`lc_compaction.dedup`): an arrival edit, not a compaction, that sends fewer tokens and
    leaves every call's prefix whole (each call starts with the whole previous request)."""
    trace = _tool_loop()
    sent: list[list] = []
    replay = replay_conversation(trace, CompactionPolicy(max_input_tokens=1_000_000),
                                 on_call=lambda rec, hist, res: sent.append(list(res.messages)))
    s = replay.summary()
    assert s["compactions"] == 0 and s["back_to_back_compactions"] == 0
    assert s["arrival_edit_calls"] > 0 and s["tokens_sent"] < s["tokens_sent_uncompacted"]
    assert s["bill_ratio"] < 1.0
    for k, c in enumerate(replay.calls[1:], 1):
        assert not c.compacted and c.prefix_messages == len(sent[k - 1])


# ------------------------------------------------------------------------------------------------ the CLI
def _json(*args: str) -> dict:
    result = CliRunner().invoke(main, ["replay", "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_cached_price_reaches_the_bill_and_is_named():
    """The price bills the calls; with a trigger given, the same compactions run at every price, so only the bill
    changes (without one, the price also picks the default trigger: `test_cli_cached_price_picks_the_default_...`)."""
    rule = ("--trigger", "fraction=0.8")
    cheap, dear = _json("--cached-price", "0.1", *rule), _json("--cached-price", "0.5", *rule)
    for data, price in ((cheap, 0.1), (dear, 0.5)):
        assert data["cache_model"]["cached_price"] == price
        assert data["cache_model"]["min_tokens"] == 1_024 and data["cache_model"]["step_tokens"] == 128
        assert "openai" in data["cache_model"]["rule"]
        assert data["billed_input"] == pytest.approx(data["tokens_sent"] - (1 - price) * data["cached_tokens"],
                                                     abs=0.05)
    assert cheap["cached_tokens"] == dear["cached_tokens"] > 0  # the price changes the bill, not the cache
    assert cheap["billed_input"] < dear["billed_input"]
    assert _json("--cached-price", "1", *rule)["billed_input"] == cheap["tokens_sent"]
    bad = CliRunner().invoke(main, ["replay", "--cached-price", "1.5"])
    assert bad.exit_code == 2 and "--cached-price" in bad.output


def test_cli_cached_price_picks_the_default_trigger():
    """Without a trigger, the CLI's price is the policy's `cached_price`: at 0.5 the default trigger is 80% of the
    window, so the replay compacts earlier and more often than at 0.1 (the budget as trigger)."""
    cheap, dear = _json("--cached-price", "0.1"), _json("--cached-price", "0.5")
    assert dear["policy"]["trigger"] != cheap["policy"]["trigger"]
    assert dear["compactions"] > cheap["compactions"] > 0


def test_cli_json_reports_the_bill_and_identifiers_per_call_and_in_total():
    data = _json("--max-input-tokens", "6000")
    calls = [c for f in data["files"] for conv in f["by_conversation"] for c in conv["calls"]]
    assert len(calls) == data["model_calls"]
    for key in ("cached_tokens", "cached_tokens_uncompacted", "identifiers_so_far", "identifiers_held",
                "tool_identifiers_so_far", "tool_identifiers_held"):
        assert sum(c[key] for c in calls) == data[key], key
    assert sum(c["back_to_back"] for c in calls) == data["back_to_back_compactions"]
    assert sum(c["billed_input"] for c in calls) == pytest.approx(data["billed_input"], abs=0.5)
    assert data["bill_ratio"] == pytest.approx(data["billed_input"] / data["billed_input_uncompacted"], abs=1e-4)
    assert all(0 <= c["identifiers_held"] <= c["identifiers_so_far"] for c in calls)
    assert data["identifiers_so_far"] > 0
    assert data["identifiers_held_fraction"] == pytest.approx(data["identifiers_held"] / data["identifiers_so_far"],
                                                              abs=1e-4)
    for f in data["files"]:
        assert sum(conv["back_to_back_compactions"] for conv in f["by_conversation"]) == f["back_to_back_compactions"]


def test_cli_table_names_the_cache_model_and_the_bill():
    result = CliRunner().invoke(main, ["replay", "--cached-price", "0.25"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "cache model: openai prompt cache" in result.stdout and "0.25 of the input price" in result.stdout
    assert "back-to-back" in result.stdout and "ratio" in result.stdout and "ids kept" in result.stdout


def test_plot_bill_draws_each_call_bill_with_and_without_compaction():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from lc_compaction.report import plot_bill

    replay = replay_conversation(_tool_loop(), CompactionPolicy(max_input_tokens=6_000))
    for cumulative in (False, True):
        ax = Figure().subplots()
        assert plot_bill({"default": replay}, ax=ax, cumulative=cumulative) is ax
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        with_, without = [c.billed_input for c in replay.calls], [c.billed_input_uncompacted for c in replay.calls]
        if cumulative:
            with_ = [sum(with_[:k + 1]) for k in range(len(with_))]
            without = [sum(without[:k + 1]) for k in range(len(without))]
        assert list(lines["default"].get_ydata()) == pytest.approx(with_)
        assert list(lines["no compaction"].get_ydata()) == pytest.approx(without)
        dots = lines["compacted"]
        assert list(dots.get_xdata()) == [c.index for c in replay.calls if c.compacted]
        assert "0.1" in ax.get_ylabel()
