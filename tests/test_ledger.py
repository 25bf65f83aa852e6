"""The deterministic ledger (lc_compaction/strategies/ledger.py) and its use as the summary when no model is given."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.markers import fence, is_summary, make_summary_message, summary_text
from lc_compaction.facts import FACTS_PREFIX, parse_facts_line
from lc_compaction.strategies.ledger import (
    EARLIER_SUMMARY,
    LEDGER_HEADER,
    REQUEST_CHARS,
    build_ledger,
    entries,
)
from lc_compaction.strategies.summarize import Summarize
from lc_compaction.tokens import TiktokenCounter

from tests.builders import tool_exchange
from tests.oracle import check_all_structural

COUNT = TiktokenCounter().count_text


def filler(chars: int, start: int = 0) -> str:
    """`chars` characters of varied lower-case words (about 4 characters a token, no identifier in them); a
    different `start` (below 70, the period of the word pairs) gives a different text, so that results of
    different turns are not deduplicated (`lc_compaction.dedup`)."""
    words = ("seat", "aisle", "window", "meal", "bag", "gate", "lounge", "upgrade", "policy", "fare")
    pairs: list[str] = []
    i = start
    while sum(map(len, pairs)) + len(pairs) < chars + 1:
        pairs.append(words[i % 7] + words[i % 10])
        i += 1
    return " ".join(pairs)[:chars]


def booking_turn(k: int, result_chars: int = 40) -> list:
    """One user turn with one tool call (result of `result_chars` characters, its text different for each `k`
    below 70) and an answer."""
    return tool_exchange(k, f"Please look up reservation R{k:03d}X for me.", filler(result_chars, k),
                         f"Reservation R{k:03d}X is confirmed.", tool="get_reservation",
                         args={"reservation_id": f"R{k:03d}X"}, answer_id=f"b{k}")


def test_entries_list_requests_tool_calls_with_arguments_and_result_size_and_answers():
    lines = entries(booking_turn(7, result_chars=1234))
    assert lines == [
        "- User: Please look up reservation R007X for me.",
        '- Tool get_reservation({"reservation_id": "R007X"}) -> 1,234 characters',
        "- Assistant: Reservation R007X is confirmed.",
    ]


def test_error_results_show_their_start_instead_of_their_size():
    msgs = [AIMessage("", tool_calls=[{"name": "update", "args": {}, "id": "c1"}]),
            ToolMessage("Error: not enough seats on flight HAT229", tool_call_id="c1")]
    assert entries(msgs)[-1] == ("- Tool update({}) -> error: "
                                 + fence("Error: not enough seats on flight HAT229", "update"))


def test_long_requests_are_shortened_to_one_line():
    text = "word " * 500
    (line,) = entries([HumanMessage(text)])
    assert "\n" not in line and line.endswith(" ...")
    assert len(line) <= len("- User: ") + REQUEST_CHARS + len(" ...")


def test_reasoning_blocks_and_signatures_never_enter_the_ledger():
    msg = AIMessage(content=[{"type": "reasoning", "reasoning": "hidden thoughts", "signature": "SIG" * 50},
                             {"type": "text", "text": "Visible answer."}])
    (line,) = entries([msg])
    assert line == "- Assistant: Visible answer."


def test_bound_drops_the_oldest_entries_but_keeps_the_first_request():
    msgs = [m for k in range(40) for m in booking_turn(k)]
    text = build_ledger(msgs, max_tokens=200, count_text=COUNT)
    assert COUNT(text) <= 200
    lines = text.splitlines()
    assert lines[0] == LEDGER_HEADER
    assert lines[1] == "- User: Please look up reservation R000X for me."  # the first request stays
    assert "earlier entries left out" in lines[2]
    assert lines[-1] == "- Assistant: Reservation R039X is confirmed."  # the most recent stay
    assert "R001X" not in text  # the oldest others went


def test_a_tiny_bound_still_gives_a_ledger_never_an_empty_text():
    text = build_ledger(booking_turn(1), max_tokens=1, count_text=COUNT)
    assert text.startswith(LEDGER_HEADER)


def test_a_previous_ledger_is_merged_not_nested():
    first = build_ledger(booking_turn(1), max_tokens=None, count_text=COUNT)
    previous = make_summary_message(first + "\n\n" + FACTS_PREFIX + "R001X")
    text = build_ledger([previous, *booking_turn(2)], max_tokens=None, count_text=COUNT)
    assert text.count(LEDGER_HEADER) == 1
    assert FACTS_PREFIX not in text  # the guard writes a fresh facts line; the old one is not copied
    lines = text.splitlines()
    assert lines.index("- User: Please look up reservation R001X for me.") < lines.index(
        "- User: Please look up reservation R002X for me.")


def test_a_model_written_previous_summary_is_kept_under_its_own_heading():
    previous = make_summary_message("## Goal\nChange the return flight.")
    text = build_ledger([previous, *booking_turn(2)], max_tokens=None, count_text=COUNT)
    lines = text.splitlines()
    assert lines[1:4] == [EARLIER_SUMMARY, "  ## Goal", "  Change the return flight."]


def test_summarize_without_a_model_writes_the_ledger_with_the_guarded_facts():
    msgs = [SystemMessage("You are an airline agent.", id="s")]
    for k in range(12):
        msgs += booking_turn(k, result_chars=1500)
    policy = CompactionPolicy(max_input_tokens=4000, strategies=[Summarize()], token_counter="exact")
    result = compact(msgs, policy)
    check_all_structural(msgs, result.messages)
    summaries = [m for m in result.messages if is_summary(m)]
    assert len(summaries) == 1
    text = summary_text(summaries[0])
    assert text.startswith(LEDGER_HEADER) and text == result.summary
    assert result.details["summarizer"] == "ledger" and "fallback_reason" not in result.details
    # every reservation id of a summarized turn is in the ledger (its entries or the guard's line)
    gone = {m.id for m in result.removed}
    assert "h1" in gone
    for k in range(12):
        if f"h{k}" in gone:
            assert f"R{k:03d}X" in text
    d = result.details
    assert d["identifiers_evicted"] >= 1
    assert d["identifiers_kept_by_summary"] + d["identifiers_added_by_guard"] == d["identifiers_evicted"]
    assert len(parse_facts_line(text)) == d["identifiers_added_by_guard"]


def test_the_ledger_is_deterministic():
    msgs = [m for k in range(12) for m in booking_turn(k, result_chars=500)]  # over the budget (1,800 tokens)
    policy = CompactionPolicy(max_input_tokens=2000, strategies=[Summarize()])
    first = compact(list(msgs), policy).summary
    assert first is not None and first.startswith(LEDGER_HEADER)
    assert compact(list(msgs), policy).summary == first
