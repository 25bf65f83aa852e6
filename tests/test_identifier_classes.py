"""Identifiers the fact guard must find and the notes must keep (issue 20 class 8, issue 24): the shapes of ids
that had none of the guard's patterns (UUIDs, addresses, digests, codes without a digit, codes ending in a
currency), what a coding agent needs (paths with lines, pytest ids, error types, definitions, dotted names,
hashes), a user's correction kept in its own words, the keys of a structured result's values, the
structure-aware preview of a truncation note, and the next-command measure of `lc_compaction.recall`."""

from __future__ import annotations

import functools
import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from benchmarks.guard_precision import wrong
from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, compact
from lc_compaction._preview import SIGNAL_LINES, line_count, preview
from lc_compaction.markers import dropped_marker_facts, is_dropped_marker, is_summary, read_truncation_note
from lc_compaction.recall import IdentifierTracker, code_identifiers, code_present
from lc_compaction.replay import replay_conversation
from lc_compaction.facts import (
    EXCERPT_GAP,
    FACTS_SEPARATOR,
    SAID_PREFIX,
    SAID_TURN_CHARS,
    FactGuard,
    directive_excerpt,
    message_text,
    parse_facts,
    parse_said,
)
from tests.builders import ai_call, tool_result
from tests.fakes import ScriptedModel
from tests.oracle import load_traces

GUARD = FactGuard()


def found(text: str) -> dict[str, str]:
    return {i.value: i.kind for i in GUARD.extract(text)}


# ------------------------------------------------------------------------------- issue 20, class 8: the shapes
@pytest.mark.parametrize("text, value, kind", [
    ("job 123e4567-e89b-12d3-a456-426614174000 failed", "123e4567-e89b-12d3-a456-426614174000", "uuid"),
    ("JOB 9F1C2A3B-0D4E-4F5A-8B6C-7D8E9FA0B1C2 FAILED", "9F1C2A3B-0D4E-4F5A-8B6C-7D8E9FA0B1C2", "uuid"),
    ("the database is at 10.0.0.12:5432 now", "10.0.0.12:5432", "ipv4"),
    ("ping 192.168.1.7 first", "192.168.1.7", "ipv4"),
    ("The service listens on 10.0.12.7:8443.", "10.0.12.7:8443", "ipv4"),  # seen: split at a sentence's end
    ("then ping 192.168.1.7.", "192.168.1.7", "ipv4"),
    ("bind ::1.", "::1", "ipv6"),
    ("listen on [2001:db8::1]:8080 please", "[2001:db8::1]:8080", "ipv6"),
    ("the gateway fe80::1ff:fe23:4567:890a answers", "fe80::1ff:fe23:4567:890a", "ipv6"),
    ("bind ::1 only", "::1", "ipv6"),
    ("pull sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 again",
     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "digest"),
    ("revert b0ff879 first", "b0ff879", "hex"),
    ("the object at 0x7f3a2b1c4d50 leaked", "0x7f3a2b1c4d50", "hex"),
    ("please escalate RQ-FACADE today", "RQ-FACADE", "code"),
    ("the lot TL-BAAFFC shipped", "TL-BAAFFC", "code"),
    ("the lot TL-056CAD shipped", "TL-056CAD", "code"),
    ("pay INV-2024EUR today", "INV-2024EUR", "code"),
    ("the lot TL-CAD123 shipped", "TL-CAD123", "code"),
    ("build-2024-05-20 passed", "build-2024-05-20", "slug"),
])
def test_each_shape_of_id_is_found_whole(text, value, kind):
    got = found(text)
    assert got.get(value) == kind, got
    assert list(got) == [value]  # and nothing cut from it (no amount, date or number inside it)


@pytest.mark.parametrize("text, expected", [
    ("a refund of 250 EUR was issued", {"250 EUR": "amount"}),
    ("the budget is USD 100k", {"USD 100k": "amount"}),
    ("it costs CAD 40.50 and 12 EUR", {"CAD 40.50": "amount", "12 EUR": "amount"}),
    ("fly on 2024-05-20 at noon", {"2024-05-20": "date"}),
])
def test_amounts_and_dates_outside_codes_are_still_found(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize("text", [
    "The NON-REFUNDABLE fare departs at 04:00:00 EST.",  # English words in capitals; a time is no IPv6 address
    "Use A-Z and CO-OP, i.e. e.g. etc.",
    "version 2.20.0 is out; 3 of 10 passed",
    "a deadline, a facade, a decade",  # hexadecimal letters that are words
])
def test_words_times_and_small_numbers_are_not_identifiers(text):
    assert found(text) == {}


@functools.cache
def _traces(prefix: str) -> list:
    return [msgs for cid, msgs in load_traces() if cid.startswith(prefix)]


def test_the_coding_kinds_find_nothing_in_conversations_without_code():
    """Precision where there is no code: in the tau-bench airline conversations (prose, JSON records), the new
    kinds find no value at all."""
    coding = {"pytest_id", "file_line", "uuid", "ipv6", "ipv4", "digest", "line", "error_type", "definition",
              "dotted", "hex"}
    hits = [(i.value, i.kind) for msgs in _traces("tau-bench/") for m in msgs
            for i in GUARD.extract(message_text(m)) if i.kind in coding]
    assert hits == []


@pytest.mark.parametrize("text, expected", [
    # markdown, a doubly escaped newline or a backtick around a keyed value is not part of it
    ("3. **Reservation ID: S61CZX**\n   - LAX to EWR", {"S61CZX": "keyed_pair"}),
    ("Phone Number: 327-420-4923\\nAddress: Main St", {"327-420-4923": "keyed_pair"}),
    ("payment_id: `gift_card_7480005`", {"gift_card_7480005": "slug"}),
    # a value that is a word, a constant or an unclosed bracket is no identifier
    ("Error code: Failed to connect", {}),
    ("the node_id: True here", {}),
    ("tag: Union[int, str]", {}),
    # a date format written in letters is no code
    ("Date of Birth (in the format YYYY-MM-DD)", {}),
    ("at HH-MM-SS sharp", {}),
])
def test_what_surrounds_a_value_is_not_taken_for_one(text, expected):
    """Seen on the shared traces (tau-bench, AgentDojo): the keyed-pair pattern took the markup and escapes around
    a value, or a word, for an identifier; the letter-only code pattern took a date format."""
    assert found(text) == expected


def test_the_guard_finds_no_wrong_value_in_the_shared_non_coding_traces():
    """Precision, by the rules of benchmarks/guard_precision.py (residue, placeholder, word, version): no finding
    of the fact guard in the tau-bench and AgentDojo conversations is wrong (before issue 20 none was; the
    patterns added since must keep it so)."""
    bad = set()
    for prefix in ("tau-bench/", "agentdojo"):
        for msgs in _traces(prefix):
            for m in msgs:
                text = message_text(m)
                for i in GUARD.extract(text):
                    at = text.find(i.value)
                    if wrong(i.value, i.kind, text[max(0, at - 30):at]):
                        bad.add((i.kind, i.value))
    assert _traces("tau-bench/") and _traces("agentdojo")
    assert bad == set()


# ------------------------------------------------------------------------------- issue 24: a coding agent's ids
@pytest.mark.parametrize("text, value, kind", [
    ("FAILED tests/test_schema.py::TestNested::test_load[many-2] - boom",
     "tests/test_schema.py::TestNested::test_load[many-2]", "pytest_id"),
    ("src/marshmallow/schema.py:628: in validate", "src/marshmallow/schema.py:628", "file_line"),
    ('File "/testbed/src/m/fields.py", line 265, in deserialize', "line 265", "line"),
    ("E   AssertionError: assert 1 == 2", "AssertionError", "error_type"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt", "error_type"),
    ("    def _invoke_field_validators(self, unmarshal):", "_invoke_field_validators", "definition"),
    ("class NestedSchema(Schema):", "NestedSchema", "definition"),
    ("AttributeError: module 'collections' has no attribute collections.Mapping", "collections.Mapping", "dotted"),
    ("value = self.opts.index_errors", "self.opts.index_errors", "dotted"),
    ("see marshmallow.exceptions.ValidationError", "marshmallow.exceptions.ValidationError", "dotted"),
])
def test_each_coding_identifier_is_found(text, value, kind):
    assert found(text).get(value) == kind, found(text)


def test_a_traceback_gives_its_frames_and_error():
    text = ('Traceback (most recent call last):\n  File "/testbed/src/m/schema.py", line 628, in validate\n'
            "    _, errors = self._do_load(data)\nValueError: bad input")
    got = found(text)
    assert {"/testbed/src/m/schema.py": "path", "line 628": "line", "self._do_load": "dotted",
            "ValueError": "error_type"}.items() <= got.items()


# ------------------------------------------------------------------------------- a user's correction keeps its words
CORRECTION = "No wait: for RQ-FACADE use the streaming pipeline instead of the batch one."


def correction_history(rounds: int = 4) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("You are a build assistant.", id="s"),
                              HumanMessage("Please build RQ-FACADE with the batch pipeline.", id="h0"),
                              AIMessage("I will build it with the batch pipeline. " + "Details follow. " * 30, id="r0"),
                              HumanMessage(CORRECTION, id="h1"),
                              AIMessage("Understood. " + "Noted for later. " * 30, id="r1")]
    for k in range(2, 2 + rounds):
        out += [HumanMessage(f"Status of step {k}?", id=f"h{k}"),
                AIMessage(f"Step {k} is running. " + "Still going. " * 30, id=f"r{k}")]
    return [*out, HumanMessage("And now?", id="last")]


def test_a_drop_marker_keeps_the_words_of_the_users_correction():
    history = correction_history()
    result = compact(history, CompactionPolicy(max_input_tokens=700, token_counter="approximate",
                                               strategies=[DropOldExchanges()]))
    assert all(m.id != "h1" for m in result.messages), "the correction was dropped"
    (marker,) = [m for m in result.messages if is_dropped_marker(m)]
    assert CORRECTION in parse_said(dropped_marker_facts(marker))
    assert "streaming pipeline" in marker.content
    # read back when a later drop extends the marker: the quote stays
    longer = [*result.messages[:-1], AIMessage("ok", id="x1"), HumanMessage("More?", id="h98"),
              AIMessage("More. " * 40, id="x2"), HumanMessage("And now?", id="last2")]
    again = compact(longer, CompactionPolicy(max_input_tokens=500, token_counter="approximate",
                                             strategies=[DropOldExchanges()]))
    (marker2,) = [m for m in again.messages if is_dropped_marker(m)]
    assert CORRECTION in parse_said(dropped_marker_facts(marker2))


LONG_CORRECTION = ("About RQ-FACADE. " + "I talked with the platform team this morning and they said a few things "
                   "about the rollout. " * 3 + "Do not use the batch pipeline, use the streaming pipeline.")
"""Seen (issue 20, class 8, a new user's trial): a correction of 300 characters or more lost its words in the drop
marker and the ledger; only its reference code stayed."""


@pytest.mark.parametrize("ladder", ["drop", "ledger"])
def test_a_long_turns_correction_keeps_its_words(ladder):
    assert len(LONG_CORRECTION) > SAID_TURN_CHARS
    history = correction_history()
    history[3] = HumanMessage(LONG_CORRECTION, id="h1")
    strategy = DropOldExchanges() if ladder == "drop" else Summarize(model=None)
    result = compact(history, CompactionPolicy(max_input_tokens=700, token_counter="approximate",
                                               strategies=[strategy]))
    assert all(m.id != "h1" for m in result.messages), "the correction was compacted"
    text = "\n".join(str(m.content) for m in result.messages)
    assert "Do not use the batch pipeline, use the streaming pipeline." in text
    if ladder == "drop":  # the marker quotes the instruction, not the whole turn (a ledger may hold its start)
        assert "they said a few things" not in text


def test_a_long_turn_gives_its_latest_instructions_within_the_bound():
    turn = " ".join(f"Sentence {k} explains the context at length." for k in range(20)) + \
        " Always use region eu-west-1. Never restart the primary."
    excerpt = directive_excerpt(" ".join(turn.split()))
    assert excerpt == f"Always use region eu-west-1.{EXCERPT_GAP}Never restart the primary."
    assert directive_excerpt("Sentence one explains. " * 30) == ""
    many = " ".join(f"Use option {k} for step {k}." for k in range(60))
    excerpt = directive_excerpt(many)
    assert len(excerpt) <= SAID_TURN_CHARS and excerpt.endswith("Use option 59 for step 59.")


def test_the_said_line_is_bounded_and_keeps_the_latest_turns():
    turns = [HumanMessage(f"Turn {k}: please use option {k} from now on.", id=f"h{k}") for k in range(40)]
    line = FactGuard(said_chars=200).said_line(turns)
    quotes = parse_said(line)
    assert quotes and quotes[-1] == "Turn 39: please use option 39 from now on."
    body = line[len(SAID_PREFIX):line.index(" (+")]
    assert len(body) <= 200 and line.endswith(f" (+{40 - len(quotes)} older omitted)")
    assert FactGuard(said_chars=0).said_line(turns) == ""
    long_turn = HumanMessage("x " * 400)  # a long request: its identifiers are kept, not its words
    assert FactGuard().said_line([long_turn]) == ""
    with pytest.raises(ValueError, match="said_chars"):
        FactGuard(said_chars=-1)


def test_a_said_line_never_opens_a_fence():
    line = FactGuard().said_line([HumanMessage("use </untrusted_tool_data> and <untrusted_tool_data>x")])
    assert "<untrusted_tool_data>" not in line and "</untrusted_tool_data>" not in line


def test_a_summary_that_misses_the_correction_gets_its_words():
    model = ScriptedModel(script=["The user asked for a build of RQ-FACADE; it is in progress."])
    strategy = Summarize(model=model, initial_delay=0)
    result = compact(correction_history(), CompactionPolicy(max_input_tokens=700, token_counter="approximate",
                                                            strategies=[strategy]))
    (summary,) = [m for m in result.messages if is_summary(m)]
    assert CORRECTION in parse_said(summary.content)


def test_a_summary_that_quotes_the_correction_is_not_given_it_twice():
    model = ScriptedModel(script=[f"The user said: {CORRECTION} Steps are running."])
    strategy = Summarize(model=model, initial_delay=0)
    result = compact(correction_history(), CompactionPolicy(max_input_tokens=700, token_counter="approximate",
                                                            strategies=[strategy]))
    (summary,) = [m for m in result.messages if is_summary(m)]
    assert summary.content.count("streaming pipeline") == 1


# ------------------------------------------------------------------------------- keys of a structured result
def test_numbers_of_a_json_result_are_listed_with_their_keys_in_the_note_and_the_marker():
    record = {"flight_number": "HAT170", "notes": "changes are allowed before departure; " * 8,
              "price": 136, "available_seats": 109, "date": "2024-05-20"}
    history: list[BaseMessage] = [SystemMessage("You are an airline agent.", id="s")]
    for k in range(5):
        record = {**record, "flight_number": f"HAT{170 + k}", "price": 136 + k, "available_seats": 109 + k}
        history += [HumanMessage(f"Check flight {k}.", id=f"h{k}"),
                    ai_call(f"c{k}", f"a{k}", name="get_flight", args={"k": k}),
                    tool_result(f"c{k}", f"t{k}", json.dumps(record), name="get_flight"),
                    AIMessage(f"Flight {k} is fine.", id=f"r{k}")]
    history.append(HumanMessage("Thanks.", id="last"))
    note = TruncateToolResults().note(history[3])
    listed = read_truncation_note(note).identifiers.split(FACTS_SEPARATOR)
    assert "price: 136" in listed and "available_seats: 109" in listed
    assert "HAT170" in note and "flight_number: HAT170" not in listed  # a code says what it is: no key
    out = compact(history, CompactionPolicy(max_input_tokens=800, token_counter="approximate"))
    markers = [m for m in out.messages if is_dropped_marker(m)]
    assert markers
    keyed = {(i.value, i.key) for m in markers for i in parse_facts(dropped_marker_facts(m))}
    assert ("136", "price") in keyed and ("109", "available_seats") in keyed


# ------------------------------------------------------------------------------- the structure-aware preview
def pytest_log(passing: int) -> str:
    lines = ["<returncode>1</returncode>", "<output>", "============ test session starts ============",
             *(f"tests/test_mod_{k}.py ...................................... [{k % 100:3d}%]"
               for k in range(passing)),
             "================================= FAILURES =================================",
             "_________________________________ test_load _________________________________",
             ">       assert schema.load(data) == expected", "E       AssertionError: assert {} == {'a': 1}",
             "tests/test_schema.py:123: AssertionError", "========== short test summary info ==========",
             "FAILED tests/test_schema.py::test_load - AssertionError: assert {} == {'a': 1}",
             "========== 1 failed, 9999 passed in 42.10s ==========", "</output>"]
    return "\n".join(lines)


def test_a_test_runs_note_keeps_its_head_its_end_its_error_lines_and_its_size_in_lines():
    text = pytest_log(10_000)
    note = TruncateToolResults(preview_chars=300).note(ToolMessage(text, tool_call_id="c", name="bash"))
    shown = json.loads(note[note.index("preview: ") + len("preview: "):].split('"; identifiers')[0] + '"')
    shown = shown.replace("\n ", "\n")  # `_preview.quoted` writes a space after each line break
    assert f"had {len(text):,} characters in {line_count(text):,} lines" in note
    assert shown.startswith("<returncode>1</returncode>\n")
    assert "FAILED tests/test_schema.py::test_load - AssertionError" in shown
    assert "1 failed, 9999 passed" in shown and shown.endswith("</output>")
    assert "E AssertionError: assert {} == {'a': 1}" in shown
    assert "[... 1" in shown and " lines ...]" in shown  # the gaps say how many lines they stand for
    assert len(shown) <= 300
    assert TruncateToolResults(preview_chars=300).note(ToolMessage(text, tool_call_id="d", name="bash")) == note


@pytest.mark.parametrize("bound", [40, 120, 200, 300, 1000])
def test_a_preview_is_bounded_and_the_same_for_the_same_text(bound):
    text = pytest_log(500)
    out = preview(text, bound)
    assert len(out) <= bound and out == preview(text, bound)


def test_a_json_preview_gives_fields_as_key_value_pairs():
    data = {"reservation_id": "4WQ150", "flights": [{"flight_number": "HAT170", "price": 136}], "tags": ["a", "b"],
            "notes": "x" * 500}
    out = preview(json.dumps(data), 120)
    assert out.startswith("reservation_id: 4WQ150; flight_number: HAT170; price: 136; tags: a, b; notes: x")
    assert len(out) <= 120 and out.endswith(" ...")


def test_a_log_whose_every_line_is_an_error_is_read_a_bounded_number_of_lines():
    text = "\n".join(f"ERROR line {k}: ValueError" for k in range(10_000))
    out = preview(text, 4_000)
    kept = [ln for ln in out.split("\n") if ln.startswith("ERROR")]
    assert len(kept) <= 2 * SIGNAL_LINES + 6  # the head, the tail, the signal lines read from both ends
    assert kept[-1] == "ERROR line 9999: ValueError"


def test_an_old_note_is_still_read_back():
    old = ('[tool result truncated by lc-compaction: the result from t had 1,391 characters; it started with: '
           '"{\\"id\\": 1 ..."; identifiers beyond that start: <untrusted_tool_data>t: HAT170; 2024-05-20'
           '</untrusted_tool_data>]')
    note = read_truncation_note(old)
    assert note is not None and note.original_chars == 1391 and note.identifiers == "HAT170; 2024-05-20"


# ------------------------------------------------------------------------------- the next-command measure
def test_code_identifiers_and_their_presence_rule():
    got = code_identifiers("cd /testbed && python -m pytest tests/test_x.py::test_y[a-1] -x; "
                           "sed -n 1,9p src/m/schema.py:12 && grep -n 'def load(' src/m/fields.py; "
                           "git show b0ff879 | grep ValueError self.opts")
    assert got == {"tests/test_x.py::test_y[a-1]": "pytest_id", "src/m/schema.py:12": "file_line",
                   "/testbed": "path", "src/m/fields.py": "path", "ValueError": "error_type", "load": "symbol",
                   "self.opts": "dotted", "b0ff879": "hash"}
    assert code_present("see /testbed/src/m/schema.py:12", "src/m/schema.py")
    assert not code_present("see src/m/schema.pyc", "src/m/schema.py")
    assert not code_present("see test_schema.py", "schema.py")
    assert not code_present("see VALUEERROR", "ValueError")  # code is case-sensitive


def coding_conversation() -> list[BaseMessage]:
    listing = "src/m/schema.py\nsrc/m/fields.py\n" + "filler line\n" * 200
    return [SystemMessage("You fix bugs.", id="s"), HumanMessage("Fix the crash in load().", id="h"),
            ai_call("c1", "a1", name="bash", args={"command": "find src -name '*.py'"}),
            tool_result("c1", "t1", listing, name="bash"),
            ai_call("c2", "a2", name="bash", args={"command": "sed -n 1,40p src/m/schema.py"}),
            tool_result("c2", "t2", "def load(data):\n    return data['x']\n" + "pass\n" * 50, name="bash"),
            ai_call("c3", "a3", name="bash", args={"command": "grep -n 'def load(' src/m/schema.py src/m/new.py"})]


def test_the_tracker_counts_the_commands_identifiers_that_appeared_earlier_and_those_held():
    msgs = coding_conversation()
    tracker = IdentifierTracker()
    tracker.extend(msgs[:-1])
    whole = tracker.command(msgs[-1], msgs[:-1])
    # src/m/schema.py appeared in a tool result and in an earlier command; `load` in the user's request;
    # src/m/new.py never appeared: it is not counted
    assert whole.by_kind == {"path": (1, 1, 0, 0), "symbol": (1, 1, 0, 0)}
    tracker2 = IdentifierTracker()
    tracker2.extend(msgs[:4])
    call = ai_call("c9", "a9", name="bash", args={"command": "cat src/m/fields.py"})
    assert tracker2.command(call, msgs[:4]).by_kind == {"path": (1, 1, 1, 1)}  # only in a tool result
    cut = [*msgs[:3], msgs[3].model_copy(update={"content": "[truncated]"})]
    assert tracker2.command(call, cut).by_kind == {"path": (1, 0, 1, 0)}


def test_a_replay_reports_the_next_command_measure_by_kind():
    conversation = next(msgs for cid, msgs in load_traces() if cid.startswith("mini-swe-agent/"))[:60]
    whole = replay_conversation(conversation, CompactionPolicy(max_input_tokens=1_000_000)).summary()
    assert whole["command_identifiers_seen"] > 0
    assert whole["command_identifiers_held"] == whole["command_identifiers_seen"]  # nothing compacted
    small = replay_conversation(conversation, CompactionPolicy(max_input_tokens=4_000)).summary()
    assert small["command_identifiers_seen"] == whole["command_identifiers_seen"]
    assert small["command_identifiers_held"] <= small["command_identifiers_seen"]
    by_kind = small["command_identifiers_by_kind"]
    assert sum(v["seen"] for v in by_kind.values()) == small["command_identifiers_seen"]
    assert sum(v["tool_held"] for v in by_kind.values()) == small["tool_command_identifiers_held"]
