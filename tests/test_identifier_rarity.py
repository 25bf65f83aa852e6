"""A log with a timestamp (or `line N`) on every line does not push its rare identifiers out of a bounded list
(issue 20, class 8), and offload on keeps what offload off keeps (issue 20, class 12).

Class 8: the bounded lists of identifiers (a summary's or a drop marker's facts lines, a truncation note's list, a
progress note's lines) filled up in order of appearance, so a log's timestamps, line numbers and sequential
numbers took the room of the UUID, the addresses, the digest, the git sha and the codes among them. Now one rule
(`facts.choose`) takes one value of each shape a round: checked through `compact`, a drop marker and the progress
note of a running tool loop, with a rare identifier near the end of the log. A long user turn that pastes a
numbered log before its correction keeps the correction's words in the marker.

Class 12: with offload on, a truncation note listed no identifiers (the recall instruction instead) and the drop
marker read the notes' sizes and store keys as identifiers. For built histories and the shared traces, what is
sent with offload on holds every identifier of the original history that offload off keeps, and no marker holds
offload metadata.
"""

from __future__ import annotations

import functools
import hashlib
import re

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from lc_compaction import CompactionPolicy, DropOldExchanges, compact
from lc_compaction.facts import FactGuard, choose, fits_chars, message_text, rarity_order, shape
from lc_compaction.integrations import CompactionMiddleware
from lc_compaction.markers import PROGRESS_PREFIX, RECALL_TOOL_NAME, dropped_marker_facts, is_dropped_marker
from lc_compaction.offload import preview
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call, tool_result
from tests.oracle import load_traces

RARE = ["123e4567-e89b-12d3-a456-426614174000", "10.0.12.7:8443", "[2001:db8::1]:8080",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "b0ff879", "RQ-FACADE",
        "INV-2024EUR", "TL-056CAD"]
"""The rare identifiers of the new user's trial: a UUID, IPv4 and [IPv6] with their ports, a digest, a git sha,
codes without a digit and ending in a currency."""

GUARD = FactGuard()


def log(lines: int = 200, *, step: int = 23) -> str:
    """A log with a timestamp, a `line N` and a sequential job number on every line, the rare identifiers one every
    `step` lines from line 10, the last of them near the end."""
    at = {10 + step * k: value for k, value in enumerate(RARE)}
    assert max(at) < lines and max(at) > lines - 40, "one rare identifier near the end"
    out = []
    for k in range(lines):
        line = f"2024-05-01T10:{k // 60:02d}:{k % 60:02d}Z INFO line {k + 1}: job 4{k:04d} step done"
        out.append(f"{line} ref {at[k]}" if k in at else line)
    return "\n".join(out)


def sent(messages: list[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in messages)


def missing(messages: list[BaseMessage]) -> list[str]:
    text = sent(messages)
    return [value for value in RARE if value not in text]


def ops_history(turns: int = 6) -> list[BaseMessage]:
    """An ops chat whose first lookup returns the log; later lookups return filler."""
    out: list[BaseMessage] = [SystemMessage("You are an ops agent.", id="s"),
                              HumanMessage("Watch the deploy.", id="h0")]
    for t in range(turns):
        out += [ai_call(f"c{t}", f"a{t}", name="read_log", args={"n": t}),
                tool_result(f"c{t}", f"t{t}", log() if t == 0 else f"nothing new {t} " + "ok " * 300, name="read_log"),
                AIMessage(f"Checked {t}.", id=f"r{t}"), HumanMessage(f"Next {t}?", id=f"h{t + 1}")]
    return out


# ----------------------------------------------------------------------------------------------- the rule
def test_values_of_one_shape_count_once_a_round():
    values = [f"2024-05-01T10:00:{k:02d}Z" for k in range(20)] + ["b0ff879"] + [f"line {k}" for k in range(20)]
    order = rarity_order(values)
    # the first round: one timestamp, one `line N` (the newest of each) and the sha, rarest shape first
    assert [values[j] for j in order[:3]] == ["b0ff879", "line 19", "2024-05-01T10:00:19Z"]
    assert shape("line 7") == shape("line 123") and shape("RQ-FACADE") != shape("TL-056CAD")
    picked = choose(values, fits_chars(values, 60))
    assert picked == sorted(picked), "the list keeps the values' order"
    assert "b0ff879" in [values[j] for j in picked]
    assert choose(values, fits_chars(values, 60)) == picked  # the same values, the same list
    assert choose(values, fits_chars(values, 10**6)) == list(range(len(values)))  # all fit: all, in order


# ----------------------------------------------------------------------------------------------- class 8, end to end
@pytest.mark.parametrize("window", [1_500, 2_500, 4_000])
def test_compact_keeps_every_rare_identifier_of_a_timestamped_log(window):
    result = compact(ops_history(), CompactionPolicy(max_input_tokens=window))
    assert result.strategies_applied, "the window should force a compaction"
    assert missing(result.messages) == []


def test_a_truncation_note_lists_the_rare_identifiers_of_the_log():
    result = compact(ops_history(), CompactionPolicy(max_input_tokens=4_000))
    (note,) = [m for m in result.messages if m.id == "t0"]
    assert "truncated" in note.text
    assert missing([note]) == []


def test_a_drop_marker_keeps_every_rare_identifier_of_a_dropped_log():
    history = ops_history()
    result = compact(history, CompactionPolicy(max_input_tokens=1_500, strategies=[DropOldExchanges()]))
    assert "t0" in {m.id for m in result.removed}, "the log's exchange was dropped"
    (marker,) = [m for m in result.messages if is_dropped_marker(m)]
    assert missing([marker]) == [], dropped_marker_facts(marker)


def test_a_progress_note_keeps_every_rare_identifier_of_a_folded_log():
    """A running tool loop (its last message a tool result): the log's step is folded into the progress note."""
    history: list[BaseMessage] = [SystemMessage("You are an ops agent.", id="s"),
                                  HumanMessage("Find why the deploy failed.", id="h0")]
    for t in range(12):
        history += [ai_call(f"c{t}", f"a{t}", name="read_log", args={"n": t}),
                    tool_result(f"c{t}", f"t{t}", log() if t == 1 else f"nothing new {t} " + "ok " * 200,
                                name="read_log")]
    result = compact(history, CompactionPolicy(max_input_tokens=2_000))
    notes = [m for m in result.messages if isinstance(m, AIMessage) and PROGRESS_PREFIX in m.text]
    assert notes and "t1" not in {m.id for m in result.messages}, "the log's step was folded"
    assert missing(notes) == []


CORRECTION = "Do not use the batch pipeline, use the streaming pipeline."


@pytest.mark.parametrize("window", [1_500, 2_500])
def test_a_numbered_log_in_a_long_turn_does_not_push_out_its_correction(window):
    turn = "Here is the numbered log of the failed deploy:\n" + log(60, step=5) + "\n" + CORRECTION
    history: list[BaseMessage] = [SystemMessage("You are an ops agent.", id="s"),
                                  HumanMessage("Deploy RQ-FACADE with the batch pipeline.", id="h0"),
                                  AIMessage("Deploying with batch. " + "x " * 100, id="r0"),
                                  HumanMessage(turn, id="h1"), AIMessage("Understood. " + "y " * 100, id="r1")]
    for k in range(2, 8):
        history += [HumanMessage(f"Status {k}?", id=f"h{k}"), AIMessage(f"Running {k}. " + "z " * 150, id=f"r{k}")]
    history.append(HumanMessage("And now?", id="last"))
    result = compact(history, CompactionPolicy(max_input_tokens=window))
    assert "h1" not in {m.id for m in result.messages}, "the long turn was compacted"
    assert "use the streaming pipeline" in sent(result.messages)


# ----------------------------------------------------------------------------------------------- class 12
METADATA = re.compile(r"\b\d{1,3}(?:,\d{3})+ (?:characters|tokens)\b|" + RECALL_TOOL_NAME + r"|tool_call_id")


def identifiers(messages: list[BaseMessage]) -> set[str]:
    return {i.value.casefold() for m in messages for i in GUARD.extract(message_text(m))}


def record_history(turns: int = 8) -> list[BaseMessage]:
    """Lookups whose results alternate between the timestamped log and a JSON record; calls numbered `call_N`."""
    out: list[BaseMessage] = [SystemMessage("You are an agent.", id="s"),
                              HumanMessage("Help me with RQ-FACADE.", id="h0")]
    for t in range(turns):
        record = ('{"reservation_id": "R%dX%dQZ", "user_id": "user_%d_77%d", "price": %d, "notes": "%s"}'
                  % (t, t, t, t, 130 + t, "free text " * 200))
        out += [ai_call(f"call_{t}", f"a{t}", name="lookup", args={"id": t}),
                tool_result(f"call_{t}", f"t{t}", record if t % 2 else log(), name="lookup"),
                AIMessage(f"Done {t}.", id=f"r{t}"), HumanMessage(f"Next {t}?", id=f"h{t + 1}")]
    return out


def _check_on_keeps_off(history: list[BaseMessage], window: int) -> bool:
    """Checks one history; False when the last resort cut messages (with offload on its cuts name the recall call,
    which takes room the identifiers had: not compared), True when compared."""
    off_result = compact(history, CompactionPolicy(max_input_tokens=window))
    on_result = compact(history, CompactionPolicy(max_input_tokens=window, offload=InMemoryStore()), offload=True)
    off, on = off_result.messages, on_result.messages
    for m in on:
        if is_dropped_marker(m):
            assert not METADATA.search(dropped_marker_facts(m)), dropped_marker_facts(m)
    if "last_resort" in {*off_result.strategies_applied, *on_result.strategies_applied}:
        return False
    original = identifiers(history)
    lost = (identifiers(off) & original) - identifiers(on)
    assert not lost, f"offload on lost what offload off keeps: {sorted(lost)[:10]}"
    offloaded = {m.tool_call_id for m in history if isinstance(m, ToolMessage)} - identifiers(history)
    for m in on:
        if is_dropped_marker(m):
            assert not {v.casefold() for v in offloaded} & identifiers([m]), "a call id of an offloaded result"
    return True


@pytest.mark.parametrize("window", [1_500, 2_500, 4_000])
def test_offload_on_keeps_what_offload_off_keeps_on_built_histories(window):
    assert _check_on_keeps_off(record_history(), window)
    assert _check_on_keeps_off(ops_history(), window)


@functools.cache
def _shared() -> list[tuple[str, list[BaseMessage]]]:
    picked: dict[str, list[tuple[str, list[BaseMessage]]]] = {}
    for cid, msgs in load_traces():
        family = cid.split("/")[0].split(":")[0]
        if len(picked.setdefault(family, [])) < 3 and sum(isinstance(m, ToolMessage) for m in msgs) >= 4:
            picked[family].append((cid, msgs))
    return [c for group in picked.values() for c in group]


@pytest.mark.parametrize("window", [2_000, 4_000])
def test_offload_on_keeps_what_offload_off_keeps_on_the_shared_traces(window):
    conversations = _shared()
    assert len(conversations) >= 6
    compared = sum(_check_on_keeps_off(msgs[:80], window) for _, msgs in conversations)
    assert compared >= 3


def test_an_arrival_preview_gives_the_results_identifiers_not_its_metadata():
    result = ToolMessage(log(400, step=51), tool_call_id="call_3", name="read_log", id="t3")
    shown = preview(result, 9_000)
    assert RECALL_TOOL_NAME in shown.text
    found = {i.value for i in GUARD.extract_result(shown)}
    assert set(RARE) <= found
    assert not {"call_3", f"{len(result.text):,}", "9,000"} & found


def _correction_then_routine(routine: list[str]) -> list[BaseMessage]:
    """A request, its correction, then a run of routine turns with a tool result each, then the latest request (the
    new user's trial of class 8: a correction older than a run of routine turns)."""
    msgs: list[BaseMessage] = [
        SystemMessage("You are an ops agent.", id="sys"),
        HumanMessage("Set up the ingest job RQ-FACADE.", id="h0"),
        AIMessage("Done, it uses the batch pipeline.", id="a0"),
        HumanMessage("Correction for RQ-FACADE: use the streaming pipeline, not the batch one.", id="hc"),
        AIMessage("Understood.", id="ac")]
    for t, turn in enumerate(routine):
        msgs += [HumanMessage(turn, id=f"u{t}"), ai_call(f"c{t}", f"a{t}c", name="logs", args={"svc": t}),
                 tool_result(f"c{t}", f"t{t}", "\n".join(f"2024-05-17T08:{i % 60:02d}:00Z INFO svc{t} batch ok"
                                                        for i in range(150)), name="logs"),
                 AIMessage(f"Service {t} looks healthy.", id=f"a{t}r")]
    return [*msgs, HumanMessage("Now run it.", id="hl")]


TEMPLATED = [f"Now look at the logs of service number {t} and tell me whether anything looks wrong there."
             for t in range(10)]
"""Routine turns of one shape (they differ only in a number), one of them with a cue word ("wrong")."""
WORDED = [f"Please have a look at the {name} service logs for me." for name in
          ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")]
"""Routine turns of distinct shapes, none with an instruction's cue word."""


@pytest.mark.parametrize("routine", [TEMPLATED, WORDED], ids=["templated", "worded"])
@pytest.mark.parametrize("strategies,window", [(None, 2_000), ([DropOldExchanges()], 3_000)])
def test_an_older_correction_keeps_its_words_beside_routine_turns(routine: list[str], strategies: list | None,
                                                                  window: int) -> None:
    """The drop marker's said line keeps the correction's words, not only its reference code, when newer routine
    turns would fill it (one turn of a shape a round, instructions and corrections first within a round)."""
    policy = CompactionPolicy(max_input_tokens=window, **({"strategies": strategies} if strategies else {}))
    result = compact(_correction_then_routine(routine), policy)
    assert result.fits and any(is_dropped_marker(m) for m in result.messages)
    assert "hc" not in [m.id for m in result.messages], "the correction's turn was dropped"
    assert "use the streaming pipeline" in sent(result.messages)


def test_the_said_line_keeps_the_latest_turns_when_none_is_repeated_or_an_instruction() -> None:
    """Turns of distinct shapes and no cue word: the most recent that fit, as before."""
    turns = [HumanMessage(f"Please have a look at the {name} service logs for me.", id=f"u{k}")
             for k, name in enumerate(("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"))]
    line = FactGuard(said_chars=200).said_line(turns)
    kept = [t.text for t in turns if t.text in line]
    assert kept and kept == [t.text for t in turns[-len(kept):]] and len(kept) < len(turns)


@pytest.mark.parametrize("per_line", ["span", "uuid"])
def test_an_id_on_every_line_counts_as_one_shape(per_line):
    """A request, trace or span id on every line of a log (hexadecimal, or a UUID) is one shape, as its timestamps
    are: it does not take the note's whole list from the rare ids (a new user's trial of issue 20: a 16-digit span
    id on every line, each its own shape while only decimal runs were folded, left none of the rare ids listed)."""
    def span(k: int) -> str:
        h = hashlib.sha256(str(k).encode()).hexdigest()
        return h[:16] if per_line == "span" else f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    rare = ["10.20.30.40:8443", "RQ-FACADE", "INV-2024EUR"]
    at = {40: rare[0], 90: rare[1], 140: rare[2]}
    text = "\n".join(f"2024-05-01T10:{k // 60:02d}:{k % 60:02d}Z line {k} job 4411 span={span(k)} step ok"
                     + (f" ref {at[k]}" if k in at else "") for k in range(150))
    assert len({shape(span(k)) for k in range(150)}) == 1
    history: list[BaseMessage] = [SystemMessage("You are an ops agent.", id="s"), HumanMessage("Watch it.", id="h0"),
                                  ai_call("c0", "a0", name="read_log", args={}),
                                  tool_result("c0", "t0", text, name="read_log"),
                                  AIMessage("Checked.", id="r0"), HumanMessage("And the next one?", id="h1")]
    result = compact(history, CompactionPolicy(max_input_tokens=2_000))
    (note,) = [m for m in result.messages if m.id == "t0"]
    assert "truncated" in note.text
    assert [value for value in rare if value not in note.text] == []


@pytest.mark.parametrize("window", [1_500, 2_500])
def test_a_correction_survives_the_last_resort_cutting_its_drop_marker(window):
    """A new user's trial of issue 20 (class 8), through `create_agent`: a correction given early, then routine
    turns with tool logs; once the newest log needs the room, the last resort cut the drop marker at its end, the
    said line with it, and the cut marker is what later drops extend: the correction was gone for good (37 of 84
    calls). A marker is now only cut to fit the budget, and rebuilt with its said line whole."""

    @tool
    def read_log(job: int) -> str:
        """Read a job's log."""
        return "\n".join(f"2024-05-{10 + job % 20:02d}T12:{k % 60:02d}:{k * 7 % 60:02d}Z line {k} job {job}: step ok"
                         for k in range(50 + job * 37 % 250))

    reply = "Status is nominal; the pipeline is healthy and there is nothing else to report. " * 3
    turns = ["Please set up the ingestion for dataset orders-eu.", CORRECTION,
             *(f"How is it going now, any news on step {k}? Anything odd?" for k in range(20))]
    script: list = []
    for n in range(len(turns)):
        if n % 2 == 0:
            script.append(AIMessage("", tool_calls=[{"name": "read_log", "args": {"job": n}, "id": f"call_{n}",
                                                     "type": "tool_call"}]))
        script.append(AIMessage(reply))
    model = ReplayChatModel(messages=iter(script))
    agent = create_agent(model, [read_log], system_prompt="You are an ops agent.", checkpointer=InMemorySaver(),
                         middleware=[CompactionMiddleware(max_input_tokens=window)])
    config = {"configurable": {"thread_id": "ops"}}
    for turn in turns:
        agent.invoke({"messages": [{"role": "user", "content": turn}]}, config)
    inputs = ["\n".join(m.text for m in call) for call in model.calls]
    assert len(inputs) == len(script)
    compacted = [text for text in inputs if "earlier messages of this conversation were left out" in text]
    assert len(compacted) > 10, "the window should force drops"
    assert [k for k, text in enumerate(inputs) if k > 1 and CORRECTION not in text] == []
