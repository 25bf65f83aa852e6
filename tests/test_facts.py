"""The fact guard (lc_compaction/facts.py): identifier extraction, presence, the bounded facts line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from lc_compaction.markers import fence, make_summary_message
from lc_compaction.facts import (
    FACTS_PREFIX,
    TOOL_FACTS_PREFIX,
    FactGuard,
    Identifier,
    contains,
    message_text,
    parse_facts_line,
)
from lc_compaction.tokens import TiktokenCounter
from lc_compaction.traces import load_traces
from tests.shared_data import traces_dir

COUNT = TiktokenCounter().count_text


def values(text: str, guard: FactGuard | None = None) -> list[str]:
    return [i.value for i in (guard or FactGuard()).extract(text)]


def kinds(text: str) -> dict[str, str]:
    return {i.value: i.kind for i in FactGuard().extract(text)}


@pytest.mark.parametrize("text, expected, kind", [
    ("Your order #W2378156 ships today", "#W2378156", "named_id"),
    ("#W2378156 was delivered", "#W2378156", "code"),
    ("the parcel left warehouse WH-220 this morning", "WH-220", "code"),
    ("use ZFA23B at the gate", "ZFA23B", "code"),
    ("reservation ZFA23B is confirmed", "ZFA23B", "named_id"),
    ("ticket no. 4471 was closed", "4471", "named_id"),
    ("The reservation ID is AQLBTL.", "AQLBTL", "named_id"),
    ("pay INV-2024-0042 today", "INV-2024-0042", "code"),
    ("the total was $1,234.56 with tax", "$1,234.56", "amount"),
    ("a refund of 250 EUR was issued", "250 EUR", "amount"),
    ("write to mia.li3818@example.com please", "mia.li3818@example.com", "email"),
    ("see https://example.com/docs/a?b=1 for details.", "https://example.com/docs/a?b=1", "url"),
    ("I changed src/lc_compaction/ladder.py and tests", "src/lc_compaction/ladder.py", "path"),
    ("the log is at /var/log/app/error.log now", "/var/log/app/error.log", "path"),
    ("edit summarize.py next", "summarize.py", "path"),
    ("fly on 2024-05-20 at noon", "2024-05-20", "date"),
    ("fly on May 20th, 2024 at noon", "May 20th, 2024", "date"),
    ("fly on 5/20/2024 at noon", "5/20/2024", "date"),
    ("my user id is sofia_kim_7287", "sofia_kim_7287", "slug"),
    ("call me at extension 98231", "98231", "number"),
])
def test_each_kind_of_identifier_is_extracted(text, expected, kind):
    found = kinds(text)
    assert expected in found, f"{expected!r} not extracted from {text!r}: {found}"
    assert found[expected] == kind


def test_json_fields_named_like_ids_give_their_values_even_without_digits():
    text = json.dumps({"reservation_id": "AQLBTL", "flight_number": "HAT084", "status": "available",
                       "cabin": "economy"})
    found = values(text)
    assert "AQLBTL" in found and "HAT084" in found
    assert "available" not in found and "economy" not in found


def test_plain_words_small_numbers_and_times_are_not_identifiers():
    assert values("Sure, I can help. It takes 5 to 10 minutes, departing 04:00 EST from IAH.") == []


def test_a_span_is_taken_once_by_the_first_pattern_that_matches():
    # the year of a date, the digits of an amount or of an e-mail are not separate numbers
    assert values("on 2024-05-27 pay $2048 to omar.rossi5980@example.com") == [
        "2024-05-27", "$2048", "omar.rossi5980@example.com"]


def test_values_are_distinct_in_order_of_first_appearance():
    assert values("HAT084 then HAT266, HAT084 again, then hat266") == ["HAT084", "HAT266"]


def test_trailing_punctuation_is_not_part_of_the_identifier():
    assert values('Reservation "OBUT9V." is ready (see https://x.io/a).') == ["OBUT9V", "https://x.io/a"]


def test_presence_is_case_insensitive_and_respects_alphanumeric_boundaries():
    assert contains("booked obut9v today", "OBUT9V")
    assert not contains("code 1234", "123")
    assert not contains("flight HAT0845", "HAT084")
    assert contains("paid $255.", "$255")


def test_message_text_reads_tool_call_arguments_and_skips_reasoning_blocks():
    ai = AIMessage(content=[{"type": "reasoning", "reasoning": "secret 99999"}, {"type": "text", "text": "ok"}],
                   tool_calls=[{"name": "get_reservation_details", "args": {"reservation_id": "KA7I60"}, "id": "c1"}])
    found = FactGuard().extract_messages([ai])
    assert [i.value for i in found] == ["KA7I60"]


def test_summary_facts_line_is_read_back_verbatim_so_context_found_ids_are_carried():
    # AQLBTL was found only through its JSON field name; in a facts line it has no such context any more
    summary = make_summary_message("The user has several trips.\n\n" + FACTS_PREFIX + "AQLBTL; HAT084")
    found = FactGuard().extract_messages([summary])
    assert [i.value for i in found] == ["AQLBTL", "HAT084"]
    assert parse_facts_line(message_text(summary)) == ["AQLBTL", "HAT084"]


def test_guard_appends_only_missing_identifiers_and_reports_counts():
    ids = FactGuard().extract_messages([
        HumanMessage("My reservation is OBUT9V and my id is sofia_kim_7287"),
        ToolMessage('{"payment_id": "gift_card_7480005", "amount": 1130}', tool_call_id="c1"),
    ])
    result = FactGuard().guard("The user sofia_kim_7287 wants to change OBUT9V.", ids, COUNT)
    assert result.kept_by_summary == 2 and result.added == 2 and result.omitted == 0
    last = result.text.splitlines()[-1]  # they come from a tool result only: fenced, attributed to it
    assert last == TOOL_FACTS_PREFIX + fence("gift_card_7480005; amount: 1130", "tool")  # a number with its key
    assert parse_facts_line(result.text) == ["gift_card_7480005", "1130"]
    assert result.text.startswith("The user sofia_kim_7287 wants to change OBUT9V.")


def test_guard_adds_nothing_when_the_summary_has_everything():
    ids = [Identifier("HAT084", "code")]
    result = FactGuard().guard("Booked HAT084.", ids, COUNT)
    assert result.text == "Booked HAT084." and result.added == 0 and result.kept_by_summary == 1


def test_guard_replaces_a_facts_line_the_model_copied_instead_of_stacking_two():
    ids = [Identifier("HAT084", "code"), Identifier("OBUT9V", "code")]
    copied = "Summary text.\n\n" + FACTS_PREFIX + "HAT084; OBUT9V"
    result = FactGuard().guard(copied, ids, COUNT)
    assert result.text.count(FACTS_PREFIX) == 1
    assert result.kept_by_summary == 0  # a copied facts line is not the summary keeping them on its own
    assert parse_facts_line(result.text) == ["HAT084", "OBUT9V"]


def test_facts_line_is_bounded_and_keeps_the_most_recent():
    ids = [Identifier(f"CODE{n:04d}", "code") for n in range(200)]
    guard = FactGuard(max_tokens=60)
    line, omitted = guard.facts_line(ids, COUNT)
    assert COUNT(line) <= 60
    kept = parse_facts_line(line)
    assert omitted == 200 - len(kept) > 0
    assert kept == [i.value for i in ids[-len(kept):]]  # the most recent ones, in their order
    assert f"(+{omitted} older omitted)" in line


def test_user_patterns_are_added_after_the_built_in_ones():
    guard = FactGuard(extra_patterns={"ticket": r"\bTK[a-z]{3}\b"})
    assert values("see TKabc and HAT084", guard) == ["TKabc", "HAT084"]
    assert values("see TKabc", FactGuard(extra_patterns=[r"\bTK[a-z]{3}\b"])) == ["TKabc"]


def test_patterns_can_replace_the_built_in_ones():
    guard = FactGuard(patterns={"only": r"\bX\d+\b"})
    assert values("X12 and HAT084 and 2024-05-20", guard) == ["X12"]


def test_invalid_settings_raise_errors_that_name_them():
    with pytest.raises(ValueError, match="'broken'"):
        FactGuard(extra_patterns={"broken": "("})
    with pytest.raises(ValueError, match="max_tokens"):
        FactGuard(max_tokens=0)


@pytest.mark.parametrize("run", ["A-" * 20_000, "1,000," * 7_000, "a." * 20_000, "a@" * 20_000, "ab_12-" * 7_000,
                                 '"x_id": "' * 5_000, "$1," * 13_000])
def test_long_runs_of_id_like_characters_give_no_spurious_identifiers(run):
    """Runs of 40,000 characters that every pattern starts on (bounded patterns: this stays linear)."""
    found = FactGuard().extract(run)
    assert all(len(i.value) <= 64 for i in found)
    assert len(found) <= 2


# ------------------------------------------------------------------------------------------- the prefilters
_PIECES = ["order", "ORDER", "Ticket", "tranſaction", "SHA256:", "md5-", "İnvoice", "line 42", "Line 7", "def f(",
           "class C:", "x.py::test_a", "a.py:12", "::1", "fe80::1", "10.0.0.1:80", "2024-05-01", "Jan 5, 2024",
           "$12", "12 EUR", "USD 5", "42 dollars", "ValueError", "Warning", "pkg.mod", "/usr/bin/x", "C:\\dir\\f",
           "file.txt", '"order_id": "W12345"', '"price": 55', "id: AB12", "#W2378156", "TL-BAAFFC", "sofia_kim_7287",
           "abc1234def", "0x1F2E", "3fa85f64-5717-4562-b3fc-2c963f66afa6", "a@b.co", "https://x.io/a", " ", "\n",
           ", ", "-", "/", ".", ":", "K", "ſ", "ı"]


def _without_prefilters() -> FactGuard:
    guard = FactGuard()
    guard._needs = {}  # every pattern searched on every text
    return guard


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_the_prefilters_never_change_what_is_found(text: str):
    """`_NEEDS` only skips a pattern on a text where it cannot match: the matches are those of searching every
    pattern (generated texts of the pieces the patterns and their tests look for, case folds included)."""
    assert FactGuard()._search(text) == _without_prefilters()._search(text)


def test_the_prefilters_never_change_what_is_found_on_the_shared_traces():
    from tests.shared_data import traces_dir
    from lc_compaction.traces import load_traces

    guard, every = FactGuard(), _without_prefilters()
    texts = [str(m.content)[:3_000] for path in sorted(traces_dir().glob("*.jsonl"))
             for trace in load_traces(path)[:6] for m in trace.messages]
    assert len(texts) > 200
    assert [guard._search(t) for t in texts] == [every._search(t) for t in texts]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([*_PIECES, "UA-1234 ", "reservation UA-1234 ", "日本語 ", "Jan 5, 2024 ", "USD 100 "]),
                min_size=40, max_size=400).map("".join))
def test_reading_a_text_chunk_by_chunk_finds_what_reading_it_whole_finds(text: str):
    """`FactGuard.first` with room for every identifier reads the text in chunks (`EXTRACT_CHUNK`): an identifier
    a cut goes through is read whole from the next chunk (`EDGE_CHARS`), never as two pieces."""
    from lc_compaction.facts import _item

    guard = FactGuard()
    items, more = guard.first(text, lambda i: True, 10**9)
    assert more == 0
    assert items == [_item(i) for i in guard.extract(text)]


def test_an_identifier_the_chunk_cut_goes_through_is_read_whole():
    """Seen: a run of `reservation UA-1234 ` without a line break was cut inside an id at 1,024 characters: the
    note listed `UA-1`, a piece, and not the id after it."""
    text = "reservation UA-1234 " * 51 + "UA-123 " + "reservation UA-1234 " * 20
    items, _ = FactGuard().first(text, lambda i: True, 10**6)
    assert items == ["UA-1234", "UA-123"]


def test_extract_messages_with_a_memo_reads_the_same_as_without():
    """A list read again with more messages (a drop marker that grows over several drops) gives what a fresh read
    gives, on the shared traces' messages, for every prefix in steps."""
    messages = [m for p in sorted(traces_dir().glob("*.jsonl")) for t in load_traces(p)[:3] for m in t.messages]
    guard, memo = FactGuard(), {}
    for end in range(10, min(len(messages), 400), 37):
        assert guard.extract_messages(messages[:end], memo=memo) == FactGuard().extract_messages(messages[:end])
    assert memo  # the memo was used


def test_a_value_near_a_chunk_cut_is_read_with_its_key():
    """Found by the chunk property above: a keyed value near a chunk's cut was read again from its own start, without
    the key that makes it an identifier (a two-digit price is one only with its key); the next chunk now starts
    `EDGE_CHARS` before it."""
    from lc_compaction.facts import EXTRACT_CHUNK, _item

    text = ("order" * ((EXTRACT_CHUNK - 70) // 5) + '10.0.0.1:80"price": 55"order_id": "W12345"'
            + "reservation UA-1234 " * 6)
    guard = FactGuard()
    items, _ = guard.first(text, lambda i: True, 10**9)
    assert "55" in items
    assert items == [_item(i) for i in guard.extract(text)]
