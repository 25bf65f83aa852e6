"""What issue 20 wrote beside the identifiers (a user's quotes, the keys of a structured result's numbers) never
costs an identifier (issue 20's last "must show": the identifiers table of benchmarks/BILL.md got worse).

- A bounded list (a truncation note's, a facts line) chooses its identifiers by their values alone, as it did
  before keys were written, and writes the keys only when the list with them fits too (`facts.keys_fit`).
- A summary's said line and its facts line's keys give way to the room the goal leaves (`summarize.said_room`):
  added beyond it, the summary ran over the goal and the last resort cut the kept tool results, the recent
  context and its identifiers."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, Summarize, TruncateToolResults, compact
from lc_compaction._note import split_line
from lc_compaction.facts import (
    FACTS_SEPARATOR,
    FactGuard,
    Identifier,
    keys_fit,
    parse_facts,
    parse_listed,
    parse_said,
    without_keys,
)
from lc_compaction.markers import is_shortened, is_summary, read_truncation_note
from lc_compaction.progress import _terse_line, call_line
from lc_compaction.recall import IdentifierTracker


def flights(n: int) -> list[dict[str, object]]:
    return [{"flight_number": f"HAT{100 + k}", "status": "available", "notes": "x" * 40, "price": 100 + 7 * k}
            for k in range(n)]


def listed(note: str) -> list[str]:
    found = read_truncation_note(note)
    assert found is not None, note
    return found.identifiers.split(FACTS_SEPARATOR)


@pytest.mark.parametrize("n", [8, 18, 20])
def test_a_truncation_note_lists_as_many_identifiers_as_its_bound_holds_without_keys(n):
    message = ToolMessage(json.dumps(flights(n)), tool_call_id="c", id="t", name="search")
    strategy = TruncateToolResults()
    note = strategy.note(message)
    items = listed(note)
    values = [item.rsplit(": ", 1)[-1] for item in items]
    # the bound chooses by the values alone: every flight and price beyond the preview fits 300 characters bare
    assert len(FACTS_SEPARATOR.join(values)) <= strategy.max_identifier_chars
    assert f"HAT{100 + n - 1}" in values and str(100 + 7 * (n - 1)) in values, note
    assert "more)" not in note[note.index("identifiers"):], note
    # a short list keeps its keys (issue 20); a longer one, whose keys would not fit, lists its values bare
    assert any(": " in item for item in items) == (n == 8)
    if n == 8:
        assert "price: 149" in items


def test_a_facts_line_keeps_its_keys_only_when_they_cost_no_identifier():
    guard = FactGuard()
    prices = [Identifier(str(100 + 7 * k), "number", key="price", source="search") for k in range(30)]
    bare, _ = guard.facts_line(prices, len, 10_000, keys=False)
    line, omitted = guard.facts_line(prices, len, len(bare) + 20)  # room for every value, not for every key
    assert omitted == 0 and "price:" not in line
    assert [i.value for i in parse_facts(line)] == [i.value for i in prices]
    line, omitted = guard.facts_line(prices, len, 2_000)  # room for the keys too
    assert omitted == 0 and line.count("price: ") == len(prices)
    line, _ = guard.facts_line(prices, len, 2_000, keys=False)
    assert "price:" not in line
    assert keys_fit(prices[:2], len("price: 100; price: 107"))
    assert not keys_fit(prices[:2], len("price: 100; price: 107") - 1)


def turn(k: int) -> str:
    return f"Turn {k}: for booking ZX{k}4Q9 please keep the window seat, " + "and thank you for your patience, " * 4


def running_search() -> list[BaseMessage]:
    """Four short user turns (quoted by a said line), then a running request whose result lists 25 flights."""
    out: list[BaseMessage] = [SystemMessage("You are an airline agent.", id="s"),
                              HumanMessage("Hi, I need help with my trips.", id="hi"),
                              AIMessage("Sure. " + "Happy to help. " * 20, id="ri")]
    for k in range(4):
        out += [HumanMessage(turn(k), id=f"h{k}"), AIMessage(f"Noted {k}. " + "Checking. " * 30, id=f"r{k}")]
    rows = [{"flight_number": f"HAT{100 + k}", "origin": "JFK", "destination": "SEA", "price": 100 + 7 * k}
            for k in range(25)]
    return [*out, HumanMessage("Which flights are there tomorrow?", id="q"),
            AIMessage("", id="a", tool_calls=[{"name": "search", "args": {"d": "tomorrow"}, "id": "c",
                                               "type": "tool_call"}]),
            ToolMessage(json.dumps(rows), tool_call_id="c", id="t", name="search")]


def test_a_summary_under_a_tight_goal_leaves_the_running_result_whole():
    history = running_search()
    policy = CompactionPolicy(max_input_tokens=900, token_counter="approximate", strategies=[Summarize()])
    result = compact(history, policy)
    assert result.fits
    (summary,) = [m for m in result.messages if is_summary(m)]
    (kept,) = [m for m in result.messages if m.id == "t"]
    assert not is_shortened(kept) and kept.content == history[-1].content, "the last resort cut the running result"
    assert not any(a.strategy == "last_resort" for a in result.actions)
    # every identifier of the history is still sent: the quotes that gave way left theirs on the facts line
    tracker = IdentifierTracker()
    tracker.extend(history)
    held = tracker.held(result.messages)
    assert held.held == held.so_far, sorted(set(tracker.kinds) - {v for m in result.messages
                                                                  for v in tracker.words_of(m)})
    assert len(" ".join(parse_said(summary.content))) < sum(len(turn(k)) for k in range(4))


def test_a_terse_progress_line_keeps_its_identifiers_and_lets_their_keys_go():
    rows = [{"flight_number": f"HAT{100 + k}", "notes": "x" * 60, "price": 100 + 7 * k} for k in range(6)]
    result = TruncateToolResults().truncated(ToolMessage(json.dumps(rows), tool_call_id="c", id="t", name="search"))
    call = {"name": "search", "args": {"d": "tomorrow"}, "id": "c", "type": "tool_call"}
    line = call_line(call, result, guard=FactGuard())
    assert "price: 135" in line  # the full line writes the keys (issue 20)
    terse = _terse_line(line, FactGuard())
    assert len(terse) < len(line) and "price:" not in terse
    assert {i.value for i in parse_listed(split_line(line)[1])} <= {i.value for i in parse_listed(split_line(terse)[1])}
    assert without_keys("price: 136; HAT170; <untrusted_tool_data>search: zip: 80211; 12:00</untrusted_tool_data>") \
        == "136; HAT170; <untrusted_tool_data>search: 80211; 12:00</untrusted_tool_data>"
