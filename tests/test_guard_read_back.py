"""A guard list leaves out only what the text beside it gives back when read again (`FactGuard.read_back`).

The class (issue 20's last "must show": the identifiers table of benchmarks/BILL.md got worse): a drop marker's
said line quotes the user word for word, and a summary's text holds what it holds; the guard's list left out every
identifier such a text *contains*. But a later compaction reads the marker or the summary back by extraction, and
a letter-only code the guard took from its key in a tool result (`"reservation_id": "QWERTZ"`) is no identifier
in the user's words ("the codes are QWERTZ and ..."): once the quote (or the ledger entry) was left out by its
bound, the code was gone from the history."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, compact
from lc_compaction.facts import FactGuard, message_text, parse_facts, parse_said
from lc_compaction.markers import dropped_marker_facts, is_dropped_marker, is_summary
from tests.builders import ai_call, tool_result

CODE = "QWERTZ"  # letters only: the guard finds it by the key of the tool result's field, not in the user's words
ASK = f"I need to cancel two of my reservations. Their codes are {CODE} and ASDF5G."


def filler(k: int) -> str:
    """A short user turn (under `SAID_TURN_CHARS`) without identifiers, long enough that two of them and the
    request fill most of the said line's bound (`DEFAULT_SAID_CHARS`); each of its own shape (`k` spelled in
    letters: turns that differ only in a number count once a round in a said line, `FactGuard.said_line`)."""
    name = str(k).translate(str.maketrans("0123456789", "abcdefghij"))
    return f"Turn {name}: thank you, that is clear, " + "please go on with what we agreed, " * 5


def exchange(k: int) -> list[BaseMessage]:
    return [HumanMessage(filler(k), id=f"h{k}"), AIMessage(f"Answer {k}. " + "Still checking. " * 30, id=f"r{k}")]


def start(before: int = 0) -> list[BaseMessage]:
    """The first request, `before` exchanges, then the request naming the codes and its reservation lookup."""
    record = {"reservation_id": CODE, "user_id": "mia_li_3668", "cabin": "economy",
              "notes": "changes are allowed before departure; " * 10}
    return [SystemMessage("You are an airline agent.", id="s"),
            HumanMessage("Hi, I need help with my trips.", id="hi"),  # the first request: drop keeps it
            AIMessage("Sure, what can I do for you? " + "Happy to help. " * 20, id="ri"),
            *(m for k in range(before) for m in exchange(100 + k)),
            HumanMessage(ASK, id="h0"),
            ai_call("c0", id="a0", name="get_reservation_details", args={"reservation_id": CODE}),
            tool_result("c0", id="t0", content=json.dumps(record), name="get_reservation_details"),
            AIMessage(f"The reservation {CODE} is in economy. " + "Details follow. " * 30, id="r0")]


def held(messages: list[BaseMessage], value: str) -> bool:
    return any(value in message_text(m) for m in messages)


def test_the_guard_does_not_read_a_letter_only_code_in_the_users_words():
    assert CODE in ASK
    assert CODE not in FactGuard().read_back(ASK)  # what the quote gives back: not the code
    assert "ASDF5G" in FactGuard().read_back(ASK)  # a code with a digit is read in any text


def test_a_merged_drop_marker_keeps_a_code_that_only_an_omitted_quote_held():
    policy = CompactionPolicy(max_input_tokens=600, token_counter="approximate", strategies=[DropOldExchanges()])
    history = [*start(), *exchange(1), HumanMessage("And now?", id="q1")]
    first = compact(history, policy)
    (marker,) = [m for m in first.messages if is_dropped_marker(m)]
    assert ASK in parse_said(dropped_marker_facts(marker)), "the request is quoted by the first marker"
    assert held(first.messages, CODE)
    # the next drops extend the marker: more turns than its said line's bound, so the request's quote goes
    grown = [*first.messages[:-1], *exchange(2), *exchange(3), *exchange(4), HumanMessage("And now?", id="q2")]
    again = compact(grown, policy)
    (marker2,) = [m for m in again.messages if is_dropped_marker(m)]
    assert marker2.id == marker.id, "the marker was extended, not replaced"
    assert ASK not in parse_said(dropped_marker_facts(marker2)), "the request's quote is left out by the bound"
    assert all(m.id != "h0" for m in again.messages)
    assert held(again.messages, CODE), dropped_marker_facts(marker2)
    assert CODE in [i.value for i in parse_facts(dropped_marker_facts(marker2))]


def test_a_ledger_summary_lists_a_code_its_text_holds_but_does_not_give_back():
    policy = CompactionPolicy(max_input_tokens=600, token_counter="approximate", strategies=[Summarize()])
    history = [*start(before=1), *exchange(1), HumanMessage("And now?", id="q1")]
    result = compact(history, policy)
    (summary,) = [m for m in result.messages if is_summary(m)]
    assert CODE in summary.content
    assert CODE in [i.value for i in parse_facts(summary.content)], summary.content
    # a later merge, whose ledger and said line leave the request out, still holds the code
    grown = [*result.messages[:-1], *exchange(2), *exchange(3), *exchange(4), HumanMessage("And now?", id="q2")]
    again = compact(grown, policy)
    (summary2,) = [m for m in again.messages if is_summary(m)]
    assert ASK not in parse_said(summary2.content) and all(m.id != "h0" for m in again.messages)
    assert held(again.messages, CODE), summary2.content
