"""The default ladder (truncate, then drop) keeps the identifiers of what it removes (issue 13, "never lose the
number that mattered").

- A truncation note lists the identifiers of the original that its preview lacks, fenced and attributed to the
  tool, within a bound in characters, the same bytes for the same result; the fact guard reads them back.
- The drop marker carries the identifiers of the messages it stands for (said by the user or the agent: plain;
  from tools: fenced and attributed), bounded; a later drop next to it replaces it by the union (its own first),
  with the same id; a replay of the same history gives the same bytes; what the history still holds is not
  repeated; where no marker fits, the next marker of the drop carries them; cut by the last resort it is still a
  marker and gives back its whole lines.
- The progress note of a drop's fold names the identifiers of the folded (truncated) results; over the budget its
  oldest lines keep the call and the identifiers, without the result's start.
- A summary that later replaces notes and markers carries their identifiers, attributed.
- On generated histories: two compactions of the same history give the same bytes, and every identifier the guard
  finds in the input is still in the output, unless a bound or the last resort says it left some out.
"""

from __future__ import annotations

import json

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
    message_to_dict,
)

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, compact, pin_message
from lc_compaction.markers import (
    DROPPED_TEXT,
    NOTE_IDENTIFIERS,
    UNTRUSTED_DATA_FENCE,
    dropped_marker_facts,
    fence_label,
    fenced_spans,
    is_dropped_marker,
    is_summary,
    outside_fences,
    read_truncation_note,
    summary_text,
)
from lc_compaction.progress import note_lines, split_line
from lc_compaction.shorten import shorten
from lc_compaction.facts import (
    FACTS_SEPARATOR,
    SAID_PREFIX,
    FactGuard,
    contains,
    is_facts_line,
    parse_facts,
    parse_listed,
)
from tests.builders import ai_call, tool_result
from tests.oracle.generators import histories
from tests.test_running_task import agent_loop, loop

GUARD = FactGuard()
FILLER = "the fare rules say that changes are allowed before departure; " * 6  # 372 characters, no identifier


def booking(k: int, *, named: bool = True) -> list[BaseMessage]:
    """One exchange: the user names their id, the agent looks the booking up, the result holds identifiers past
    its first 200 characters, the agent answers. Ids `h{k}`, `a{k}`, `t{k}`, `r{k}`; call id `c{k}`."""
    result = json.dumps({"reservation_id": f"RS{k:03d}Q", "notes": FILLER, "flight_number": f"HAT{100 + k}",
                         "price": 40 + k, "email": f"guest{k}@example.com", "payment_id": f"gift_card_{7000 + k}"})
    return [HumanMessage(f"Please check the booking of user mia_li_{3000 + k}.", id=f"h{k}"),
            ai_call(f"c{k}", f"a{k}", name="get_reservation", args={"user_id": f"mia_li_{3000 + k}"}),
            tool_result(f"c{k}", f"t{k}", result, name="get_reservation" if named else None),
            AIMessage(f"Booking {k} is confirmed.", id=f"r{k}")]


def bookings(n: int, **kw) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("You are a travel agent.", id="s")]
    for k in range(n):
        out += booking(k, **kw)
    return [*out, HumanMessage("And finally?", id="last")]


def values(identifiers) -> list[str]:
    return [i.value for i in identifiers]


def held(text: str, value: str) -> bool:
    return contains(text, value)


def sent_text(messages: list[BaseMessage]) -> str:
    parts = []
    for m in messages:
        parts.append(m.content if isinstance(m.content, str) else json.dumps(m.content, ensure_ascii=False))
        parts.extend(json.dumps(c["args"], ensure_ascii=False) for c in getattr(m, "tool_calls", None) or [])
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------- the truncation note
def test_a_note_lists_what_its_preview_lacks_fenced_and_attributed_to_the_tool():
    result = booking(1, named=False)[2]
    note = TruncateToolResults().note(result, tool="get_reservation")  # the call's name: the result has none
    data = json.loads(result.content)
    preview = read_truncation_note(note).start  # a JSON result's preview: its fields as `key: value`
    assert preview.startswith(f"reservation_id: {data['reservation_id']}; notes: the fare rules")
    beyond = [i for i in GUARD.extract(result.content) if not contains(preview, i)]
    assert values(beyond) == ["HAT101", "41", "guest1@example.com", "gift_card_7001"]
    start, end = fenced_spans(note)[0]
    assert fence_label(note[start:end]) == "get_reservation"
    for i in beyond:
        assert held(note[start:end], i.value) and not held(outside_fences(note), i.value)
    assert note.count("RS001Q") == 1  # the preview holds it: not listed again
    # a number listed with the key of its field (alone it says nothing), the others as they are
    keys = {str(v): k for k, v in data.items()}
    assert read_truncation_note(note).identifiers.split(FACTS_SEPARATOR) == [
        f"{keys[v]}: {v}" if v.isdigit() else v for v in values(beyond)]
    assert [(i.value, i.key) for i in GUARD.extract_result(result.model_copy(update={"content": note}))][-4:] == [
        (v, keys[v] if v.isdigit() else None) for v in values(beyond)]


def test_a_note_takes_its_tool_from_the_call_when_the_result_has_no_name():
    out = compact(bookings(6, named=False), CompactionPolicy(max_input_tokens=100_000, trigger=("messages", 10),
                                                              strategies=[TruncateToolResults()]))
    notes = [m for m in out.messages if isinstance(m, ToolMessage) and read_truncation_note(m.content)]
    assert notes
    for m in notes:
        start, end = fenced_spans(m.content)[0]
        assert fence_label(m.content[start:end]) == "get_reservation" and "from get_reservation" in m.content


def test_a_note_is_bounded_in_characters_and_says_how_many_it_left_out():
    result = booking(1)[2]
    note = TruncateToolResults(max_identifier_chars=20).note(result)
    listed = read_truncation_note(note).identifiers.split(FACTS_SEPARATOR)
    assert listed == ["HAT101", "price: 41"] and len(FACTS_SEPARATOR.join(listed)) <= 20
    assert note.endswith("(+2 more)]")
    for off in (TruncateToolResults(max_identifier_chars=0), TruncateToolResults(fact_guard=False)):
        assert NOTE_IDENTIFIERS not in off.note(result)
    # with offload on the note lists them too (a drop marker reads them from it: issue 20, class 12), then the hint
    recalled = TruncateToolResults().note(result, recall="c1")
    plain = TruncateToolResults().note(result)
    assert read_truncation_note(recalled).identifiers == read_truncation_note(plain).identifiers
    assert recalled.index(NOTE_IDENTIFIERS) < recalled.index("recall_tool_result")


def test_a_note_depends_only_on_its_result():
    """Byte-stable: the same result gives the same note in two compactions of the same history, and in another
    history."""
    policy = CompactionPolicy(max_input_tokens=100_000, trigger=("messages", 10), strategies=[TruncateToolResults()])
    first, again = compact(bookings(6), policy), compact(bookings(6), policy)
    other = compact([*bookings(6)[:-1], *booking(9), HumanMessage("And?", id="end")], policy)
    notes = {m.id: m.content for m in first.messages if isinstance(m, ToolMessage)}
    assert notes == {m.id: m.content for m in again.messages if isinstance(m, ToolMessage)}
    assert any(read_truncation_note(c) for c in notes.values())
    for m in other.messages:
        if m.id in notes and read_truncation_note(m.content):
            assert m.content == notes[m.id]


def test_the_fact_guard_reads_a_note_back_attributed_and_without_its_size():
    exchange = booking(1)
    note = exchange[2].model_copy(update={"content": TruncateToolResults().note(exchange[2])})
    found = {i.value: i.source for i in GUARD.extract_messages([exchange[1], note])}
    assert {v: found.get(v) for v in ("HAT101", "41", "guest1@example.com", "RS001Q")} == dict.fromkeys(
        ("HAT101", "41", "guest1@example.com", "RS001Q"), "get_reservation")
    assert found["mia_li_3001"] is None  # the agent's call argument, not tool data
    assert f"{len(exchange[2].content):,}" not in found  # the note's own count of characters


# ------------------------------------------------------------------------------------------- the drop marker
def drop_policy(window: int = 500, **kw) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=window, token_counter="approximate",
                            strategies=[DropOldExchanges(**kw)])


def test_the_marker_carries_what_it_stands_for_user_plain_tools_fenced():
    history = bookings(6)
    result = compact(history, drop_policy())
    (marker,) = [m for m in result.messages if is_dropped_marker(m)]
    assert marker.content.startswith(DROPPED_TEXT + "\n")
    facts = {i.value: i.source for i in GUARD.extract_messages([marker])}  # its lines, and its quotes of the user
    gone = [m for m in history if m.id in {r.id for r in result.removed}]
    assert gone
    for i in GUARD.extract_messages(gone):
        assert held(sent_text(result.messages), i.value), i  # in the marker, or still in the history
    dropped_requests = [m for m in gone if isinstance(m, HumanMessage)]
    assert dropped_requests
    for m in dropped_requests:  # what the user said: plain
        (user_id,) = [i.value for i in GUARD.extract(m.content)]
        assert facts[user_id] is None and held(outside_fences(marker.content), user_id)
    for k in {int(m.id[1:]) for m in dropped_requests}:  # what the tool returned: fenced, attributed
        for value in (f"HAT{100 + k}", f"guest{k}@example.com", f"gift_card_{7000 + k}"):
            assert facts[value] == "get_reservation" and not held(outside_fences(marker.content), value)
    # recognized by its text after a format without metadata, identifiers and all
    (again,) = [m for m in convert_to_messages(convert_to_openai_messages(result.messages)) if is_dropped_marker(m)]
    assert parse_facts(dropped_marker_facts(again)) == parse_facts(dropped_marker_facts(marker))


def test_the_marker_is_bounded_and_keeps_the_most_recent():
    full = [m for m in compact(bookings(6), drop_policy()).messages if is_dropped_marker(m)][0]
    small = [m for m in compact(bookings(6), drop_policy(max_marker_chars=150)).messages if is_dropped_marker(m)][0]
    lines = "\n".join(x for x in dropped_marker_facts(small).split("\n") if is_facts_line(x))  # the said line aside
    assert 0 < len(lines) <= 150 + len(" (+99 older omitted)") and "older omitted)" in lines
    kept, every = parse_facts(lines), parse_facts(dropped_marker_facts(full))
    assert kept and set(values(kept)) < set(values(every))
    tools = [i for i in every if i.source is not None]
    assert values(kept)[-1] == tools[-1].value  # the most recent stay
    bare = [m for m in compact(bookings(6), drop_policy(fact_guard=False)).messages if is_dropped_marker(m)]
    assert [m.content for m in bare] == [DROPPED_TEXT]


def test_a_later_drop_extends_the_marker_with_the_union_its_own_first():
    """As rewrite mode stores it: the conversation grows by one booking a call; the marker keeps its id, reads its
    identifiers back first and adds those of the newly dropped exchange; a replay gives the same bytes."""
    def run() -> list[list[dict]]:
        stored: list[BaseMessage] = [SystemMessage("You are a travel agent.", id="s"), *booking(0)]
        seen = []
        for k in range(1, 9):
            stored = compact([*stored, *booking(k)], drop_policy(500)).messages
            seen.append([message_to_dict(m) for m in stored])
        return seen

    calls = run()
    assert calls == run()  # byte-stable across replays of the same history
    markers = [[m for m in convert_to_messages([d["data"] | {"type": d["type"]} for d in c]) if is_dropped_marker(m)]
               for c in calls]
    markers = [ms[0] for ms in markers if ms]
    assert len({m.id for m in markers}) == 1 and len(markers) >= 4
    grew = 0
    for before, after in zip(markers, markers[1:]):
        old, new = parse_facts(dropped_marker_facts(before)), parse_facts(dropped_marker_facts(after))
        if old != new:
            grew += 1
            assert set(values(old)) <= set(values(new))  # the union (within the bound, which these do not reach)
            for source in {i.source for i in old}:  # on each line (and in each tool's fence): its own first
                mine = [i.value for i in old if i.source == source]
                assert [i.value for i in new if i.source == source][:len(mine)] == mine
    assert grew >= 3


def test_the_marker_leaves_out_what_the_history_still_holds():
    history = bookings(6)
    history[-1] = HumanMessage("About HAT100 and guest0@example.com: and finally?", id="last")
    marker = [m for m in compact(history, drop_policy()).messages if is_dropped_marker(m)][0]
    facts = values(parse_facts(dropped_marker_facts(marker)))
    assert "gift_card_7000" in facts and "HAT100" not in facts and "guest0@example.com" not in facts


def test_where_no_marker_fits_the_next_marker_of_the_drop_carries_the_identifiers():
    """Steps dropped inside a tool loop whose next kept message is an assistant tool call leave no marker there
    (provider order rules): their identifiers go to the next marker of the same drop. The target (500 tokens of
    the 630-token budget) is one the drop of the old steps reaches: below it (the default, 350) the second pass
    also drops the kept turn's step, behind a marker of its own."""
    first = [HumanMessage("Look up my three bookings, user mia_li_3000.", id="h")]
    for k in range(3):
        first += booking(k)[1:3]
    first[3] = pin_message(first[3])  # the second step stays: the first one's run is followed by a tool call
    history = [SystemMessage("You are a travel agent.", id="s"), *first, AIMessage("All three are fine.", id="done"),
               *booking(7)]
    result = compact(history, CompactionPolicy(max_input_tokens=700, token_counter="approximate", keep=("turns", 1),
                                               target=("tokens", 500), strategies=[DropOldExchanges()]))
    gone = {m.id for m in result.removed}
    assert {"a0", "t0", "a2", "t2"} <= gone and "a1" not in gone
    (marker,) = [m for m in result.messages if is_dropped_marker(m)]
    assert [m.id for m in result.messages].index(marker.id) > [m.id for m in result.messages].index("a1")
    facts = values(parse_facts(dropped_marker_facts(marker)))
    assert "HAT100" in facts and "HAT102" in facts  # the first run's, carried, and its own


def test_a_marker_cut_by_the_last_resort_is_still_one_and_gives_back_whole_lines():
    marker = [m for m in compact(bookings(6), drop_policy()).messages if is_dropped_marker(m)][0]
    lines = dropped_marker_facts(marker).split("\n")
    assert len(lines) == 2 and lines[0].startswith(SAID_PREFIX)  # the user's words (and ids), the tools' ids
    cut = shorten(marker, len(DROPPED_TEXT) + 1 + len(lines[0]) + 12)
    assert is_dropped_marker(cut) and dropped_marker_facts(cut) == lines[0]
    assert values(GUARD.extract_messages([cut])) == values(GUARD.extract(lines[0][len(SAID_PREFIX):]))
    assert is_dropped_marker(shorten(marker, 10)) and dropped_marker_facts(shorten(marker, 10)) == ""


# ------------------------------------------------------------------------------------------- the progress note
def test_folded_notes_keep_their_identifiers_in_the_progress_note():
    """The issue's example (two lookups of about 1,370 tokens a step, window 4,000): the previous steps, truncated
    to notes, are folded into the progress note by the drop strategy; each folded call's `ORD-...` identifier
    (past its result's start) is in the note, among that call's result's identifiers, inside the note's fence.
    The trigger is the issue's (80% of the window), explicit: under the default (the budget) the notes still fit
    and nothing is folded."""
    for n, (_before, result) in enumerate(agent_loop(4, CompactionPolicy(max_input_tokens=4_000,
                                                                          trigger=("fraction", 0.8)))):
        lines = [line for m in result.messages for line in note_lines(m)]
        folded = [c for c in range(2 * (n + 1)) if f'"item": {c}}})' in "\n".join(lines)]
        for c in folded:
            (line,) = [x for x in lines if x.startswith(f'- lookup({{"item": {c}}})')]
            listed = {i.value: i.source for i in parse_listed(split_line(line)[1])}
            assert listed.get(f"ORD-{1000 + c}") == "lookup", line
            host = next(m for m in result.messages if note_lines(m))
            assert f"ORD-{1000 + c}" in str(host.text) and f"ORD-{1000 + c}" not in outside_fences(str(host.text))
    assert folded


def test_over_the_note_bound_the_oldest_lines_keep_the_call_and_say_what_they_left_out():
    """Past the note's bound (`progress.NOTE_SHARE` of the budget, issue 24), the note's oldest lines lose their
    result's start (the call and its identifiers stay), then their identifiers, each saying how many it left out
    (" (+n more)"), before the last resort cuts anything: every call stays named, and no identifier leaves
    silently."""
    policy = CompactionPolicy(max_input_tokens=4_000)
    tightened = False
    for n, (_before, result) in enumerate(agent_loop(12, policy)):
        assert result.fits and "last_resort" not in result.strategies_applied
        lines = [line for m in result.messages for line in note_lines(m)]
        terse = [line for line in lines if " -> " not in line]
        tightened = tightened or bool(terse)
        for line in terse:
            assert line.startswith("- lookup(") and (" | facts: " in line or line.endswith(" more)")), line
        text = sent_text(result.messages)
        for c in range(2 * (n + 1)):
            assert f'"item": {c}' in text  # every call
            if f"ORD-{1000 + c}" not in text:  # an identifier left out: its line says so
                (line,) = [x for x in lines if x.startswith(f'- lookup({{"item": {c}}})')]
                assert line.endswith(" more)"), line
    assert tightened
    assert len(loop(12)) > len(result.messages)


def test_split_line_reads_every_form_of_a_line():
    from lc_compaction.progress import call_line

    result = booking(2)[2]
    call = {"name": "get_reservation", "args": {"user_id": "mia_li_3002"}, "id": "c2"}
    line = call_line(call, result, guard=GUARD, said="I will check booking ZZ9999 for you.")
    head, listed = split_line(line)
    found = {i.value: i.source for i in parse_listed(listed)}
    assert found == {"ZZ9999": None, "HAT102": "get_reservation", "42": "get_reservation",
                     "guest2@example.com": "get_reservation", "gift_card_7002": "get_reservation"}
    assert f"{len(result.content):,}" not in head and "ZZ9999" not in head and "reservation_id: RS002Q" in head
    assert UNTRUSTED_DATA_FENCE[0] not in line  # no fence of its own: the note's one fence holds its lines
    assert " | facts: HAT102; " in line and line.endswith(" | said: ZZ9999")
    assert split_line(call_line(call, result)) == (head, "")


# ------------------------------------------------------------------------------------------- a summary reads them
def test_a_summary_that_replaces_notes_and_a_marker_carries_their_identifiers_attributed():
    """The first compaction (1,000 tokens) leaves a marker and a truncation note: its target (60% of the window)
    keeps the newest old exchange as a note; the default one (50%) drops every old exchange behind the marker. The
    second one has an explicit trigger (80% of its window): what the first left fits its budget, which the default
    waits for."""
    ladder = CompactionPolicy(max_input_tokens=1000, token_counter="approximate", target=("fraction", 0.6))
    first = compact(bookings(6), ladder).messages
    assert any(is_dropped_marker(m) for m in first)
    assert any(isinstance(m, ToolMessage) and read_truncation_note(m.content) for m in first)
    result = compact(first, CompactionPolicy(max_input_tokens=600, token_counter="approximate",
                                             trigger=("fraction", 0.8), strategies=[Summarize()]))
    replaced = {i for a in result.actions if a.kind == "summarized" for i in a.message_ids}
    assert any(m.id in replaced for m in first if is_dropped_marker(m))
    assert any(m.id in replaced and read_truncation_note(m.content) for m in first if isinstance(m, ToolMessage))
    carried = GUARD.extract_messages(m for m in first if m.id in replaced)
    (summary,) = [m for m in result.messages if is_summary(m)]
    text = summary_text(summary)
    facts = {i.value: i.source for i in parse_facts(text)}
    assert carried
    for i in carried:
        assert held(text, i.value), i.value
        if i.source is not None:  # from a tool: never in the summary's own (the user's) voice
            assert not held(outside_fences(text), i.value), i.value
            assert facts.get(i.value, "get_reservation") == "get_reservation"


# ------------------------------------------------------------------------------------------- generated histories
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])


def _left_some_out(result) -> bool:
    """A bound or the last resort says the result does not hold every identifier."""
    text = sent_text(result.messages)
    return ("last_resort" in result.strategies_applied or "older omitted)" in text or " more)" in text
            or "(+more)" in text
            or any(is_dropped_marker(m) and not m.content.startswith(DROPPED_TEXT) for m in result.messages))


@FAST
@given(history=histories(max_turns=5, max_steps=3), window=st.integers(300, 8_000), turns=st.integers(0, 2))
def test_generated_histories_keep_every_identifier_and_the_same_bytes(history, window, turns):
    policy = CompactionPolicy(max_input_tokens=window, token_counter="approximate", keep=("turns", turns))
    result = compact(history, policy)
    again = compact(list(history), policy)
    assert [message_to_dict(m) for m in result.messages] == [message_to_dict(m) for m in again.messages]
    if _left_some_out(result):
        return
    text, given = sent_text(result.messages), sent_text(history)
    for i in GUARD.extract_messages(history):
        if held(given, i.value):  # (the guard's presence test, whole words: "£0" is found in "0£0" but not held)
            assert held(text, i.value), (i, [a.to_dict() for a in result.actions])


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="max_identifier_chars"):
        TruncateToolResults(max_identifier_chars=-1)
    with pytest.raises(ValueError, match="max_marker_chars"):
        DropOldExchanges(max_marker_chars=-1)
    for strategy in (TruncateToolResults, DropOldExchanges):
        with pytest.raises(ValueError, match="fact_guard: expected True, False or a FactGuard, got str"):
            strategy(fact_guard="yes")
