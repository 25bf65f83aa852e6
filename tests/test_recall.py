"""lc_compaction.recall: the identifiers of the history so far and whether what is sent holds them, on hand-made
texts and on replays of the shared tau-bench conversations."""

from __future__ import annotations

import functools

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, replay_conversation
from lc_compaction.recall import IdentifierTracker, canonical, find_identifiers, message_text, words
from tests.oracle import load_traces


def test_each_kind_is_found():
    text = ('Reservation ZFA04Y on flight HAT017 for $1,234.50; refund to mia.li@example.com, user mia_li_3668, '
            'card credit_card_4421486, IBAN GB29NWBK60161331926819, phone 5551234567. '
            '{"reservation_id": "AQLBTL", "price": 523, "amount": 7}')
    found = find_identifiers(text)
    assert found == {"mia.li@example.com": "email", "hat017": "flight", "zfa04y": "code",
                     "gb29nwbk60161331926819": "code", "aqlbtl": "keyed_code", "mia_li_3668": "handle",
                     "credit_card_4421486": "handle", "1234.5": "amount", "523": "amount",
                     "5551234567": "long_number"}


def test_written_after_reservation_a_code_of_letters_is_found_and_ordinary_words_are_not():
    assert find_identifiers("Your reservation ID is AQLBTL.") == {"aqlbtl": "keyed_code"}
    assert find_identifiers("PLEASE CONFIRM the BASIC ECONOMY fare, 2024-05-25, 3 bags.") == {}


def test_canonical_forms_match_across_writings():
    assert canonical("$1,234.50") == "1234.5" and canonical("250.00") == "250" and canonical("HAT017") == "hat017"
    assert canonical("two words") is None
    held = words('{"price": 1234.5, "flight_number": "HAT017"} Flight hat017.')
    assert {"1234.5", "hat017"} <= held
    # a cut preview or a longer code does not hold the identifier
    assert "hat017" not in words("flight HAT01") and "hat017" not in words("flight HAT0171")


def test_tracker_counts_identifiers_so_far_and_those_held():
    call = {"name": "get_reservation_details", "args": {"reservation_id": "ZFA04Y"}, "id": "c1"}
    history = [SystemMessage("You are an airline agent."), HumanMessage("My user id is mia_li_3668."),
               AIMessage("", tool_calls=[call]),
               ToolMessage('{"reservation_id": "ZFA04Y", "flights": [{"flight_number": "HAT017", "price": 523}]}',
                           tool_call_id="c1")]
    tracker = IdentifierTracker()
    tracker.extend(history)
    assert set(tracker.kinds) == {"mia_li_3668", "zfa04y", "hat017", "523"}
    whole = tracker.held(history)
    assert (whole.so_far, whole.held) == (4, 4)
    # HAT017 and 523 appear only in the tool result; ZFA04Y is also in the call's arguments
    assert (whole.tool_so_far, whole.tool_held) == (2, 2)
    truncated = ToolMessage("[tool result truncated: 96 characters]", tool_call_id="c1")
    part = tracker.held([*history[:3], truncated])
    assert (part.so_far, part.held, part.tool_so_far, part.tool_held) == (4, 2, 2, 0)
    assert tracker.held([]).held == 0


def test_message_text_holds_tool_call_arguments():
    ai = AIMessage("", tool_calls=[{"name": "book", "args": {"flight": "HAT017", "note": "café"}, "id": "c"}])
    assert "HAT017" in message_text(ai) and "café" in message_text(ai) and "book" in message_text(ai)


# --------------------------------------------------------------------------- replays of the shared traces
@functools.cache
def _tau() -> list:
    return [(cid, msgs) for cid, msgs in load_traces() if cid.startswith("tau-bench/")][:6]


def _held(strategies, window: int) -> tuple[int, int]:
    so_far = held = 0
    for cid, messages in _tau():
        policy = CompactionPolicy(max_input_tokens=window, strategies=strategies)
        s = replay_conversation(messages, policy, conversation_id=cid).summary()
        so_far, held = so_far + s["identifiers_so_far"], held + s["identifiers_held"]
    return so_far, held


def test_replay_counts_the_identifiers_of_the_recording_before_each_call():
    cid, messages = _tau()[0]
    replay = replay_conversation(messages, CompactionPolicy(max_input_tokens=4_000), conversation_id=cid)
    for c in replay.calls:
        tracker = IdentifierTracker()
        tracker.extend(messages[:c.message_index])
        assert c.identifiers_so_far == len(tracker.kinds)
        assert 0 <= c.identifiers_held <= c.identifiers_so_far
    assert replay.calls[-1].identifiers_so_far > replay.calls[0].identifiers_so_far


def test_without_compaction_every_identifier_is_held():
    so_far, held = _held(None, 1_000_000)
    assert so_far > 0 and held == so_far


@pytest.mark.parametrize("window", [4_000])
def test_dropping_loses_identifiers_that_the_ledger_keeps(window):
    """The measure tells strategies apart: dropping old exchanges and truncating results without the fact guard
    loses identifiers of the history; the ledger with the guard keeps more of them, and so does the default
    ladder, whose truncation notes and drop marker carry them."""
    bare = [TruncateToolResults(fact_guard=False), DropOldExchanges(fact_guard=False)]
    total, dropped = _held(bare, window)
    _, summarized = _held([Summarize()], window)
    _, guarded = _held([TruncateToolResults(), DropOldExchanges()], window)
    assert dropped < total
    assert summarized > dropped
    assert guarded > dropped
