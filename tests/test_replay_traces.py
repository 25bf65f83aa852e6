"""Every recorded conversation of ../shared/traces replayed through compaction (issue 2's requirement).

At windows of 4,000 and 16,000 tokens with the default policy (exact counter), for every conversation and every
model call:
- the sent history passes the oracle's independent structural checks (tests/oracle: tool pairing, provider
  order, system prompt kept, ids) and the core's own `check_invariants` finds nothing;
- the conversation's first user request and its latest one are sent unchanged;
- no call is over the window, unless what compaction may not remove (system prompt, first and latest request,
  the most recent tool step) alone exceeds it, and then the result says so (fits False, "pinned_over_budget");
- tokens sent with compaction are never above tokens sent without (per call and in total), and strictly below
  in total on every conversation whose uncompacted input ever exceeds the window;
- every tool call of the running request (the recording ends with tool results before this call) is in the sent
  history or named in its progress note (issue 12: the running task keeps its progress); the same is checked at
  2,000 and 8,000 tokens (`test_running_request_keeps_every_call`).
The replay semantics themselves are checked too: each call's input is the previous call's compacted output
followed by the recorded messages since, and the "uncompacted" figure is the plain recording before the call.

The conversations come from the oracle's loader (not lc_compaction.traces), so loader and replay are checked
independently. One test per (conversation, window): parallel with xdist; counting is cached per window.
"""

from __future__ import annotations

import asyncio
import functools
import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.structure import check_invariants
from lc_compaction.replay import (
    CallRecord,
    ReplayError,
    areplay_conversation,
    areplay_files,
    percentile,
    replay_conversation,
    replay_files,
    summarize_calls,
)
from lc_compaction.traces import bundled_traces
from tests.oracle import CheckContext, check, check_all_structural, load_traces, trace_files
from tests.oracle.checks import missing_running_calls, running_calls, same_message

WINDOWS = (4_000, 16_000)


@functools.cache
def _traces() -> dict[str, list[BaseMessage]]:
    return dict(load_traces())


@functools.cache
def _policy(window: int) -> CompactionPolicy:
    """One policy (so one counter and its cache) per window and test process."""
    return CompactionPolicy(max_input_tokens=window)


def _ids() -> list[str]:
    return list(_traces())


def test_all_shared_traces_are_here():
    """The sweep below covers the whole shared collection (every conversation of every file)."""
    files = trace_files()
    assert {"agentdojo.jsonl", "agentdojo_injections.jsonl", "tau_bench_airline.jsonl"} <= {p.name for p in files}
    lines = sum(1 for p in files for line in p.read_text(encoding="utf-8").splitlines() if line.strip())
    assert len(_traces()) == lines


def _first_request(recording: list[BaseMessage]) -> BaseMessage:
    return next(m for m in recording if isinstance(m, HumanMessage))


def _unremovable_upper_bound(history: list[BaseMessage], policy: CompactionPolicy) -> int:
    """Tokens of what compaction may keep whole in its hard pass: the leading system messages, the first and the
    latest user request, and the most recent step (the last tool block and the assistant messages right before
    it, or the trailing assistant messages), plus the reply priming. Generous on purpose: when a call is over
    the window, this must be over the window too, else something removable was left in."""
    counter = policy.counter
    keep: set[int] = set()
    for i, m in enumerate(history):
        if not isinstance(m, SystemMessage):
            break
        keep.add(i)
    humans = [i for i, m in enumerate(history) if isinstance(m, HumanMessage)]
    keep.update(humans[:1] + humans[-1:])
    j = len(history) - 1
    while j >= 0 and isinstance(history[j], ToolMessage):
        keep.add(j)
        j -= 1
    while j >= 0 and isinstance(history[j], AIMessage):
        keep.add(j)
        j -= 1
    return sum(counter.count_message(history[i]) for i in keep) + counter.reply_overhead


def _names_can_fit(history: list[BaseMessage], policy: CompactionPolicy) -> bool:
    """Whether a history that names every call of the running request can fit the budget at all: the leading
    system messages, the first user request (sent verbatim) and one assistant message naming each running call as
    the oracle reads it (`name(` and 60 characters of its JSON arguments) fit within `max_input_tokens - reserve`.
    When even that does not (a long coding run in a 4,000-token window: 85 calls beside a 1,500-token task), no
    compaction can keep every name, and the check of the names does not apply; the others still do."""
    counter = policy.counter
    lead = [m for m in history[:next((i for i, m in enumerate(history) if not isinstance(m, SystemMessage)),
                                     len(history))]]
    names = "\n".join(f"- {c.get('name')}({json.dumps(c.get('args') or {}, ensure_ascii=False)[:60]}...)"
                      for c in running_calls(history))
    floor = (sum(counter.count_message(m) for m in lead) + counter.count_message(_first_request(history))
             + counter.count_message(AIMessage(names)) + counter.reply_overhead)
    return floor <= policy.budget_tokens()


def _replay_and_check(conv_id: str, window: int, *, latest_verbatim: bool = True
                      ) -> tuple[list[CallRecord], list[BaseMessage]]:
    recording = _traces()[conv_id]
    policy = _policy(window)
    counter = policy.counter
    first = _first_request(recording)
    seen: list[tuple[CallRecord, list[BaseMessage], list[BaseMessage]]] = []

    def on_call(record, history_in, result):
        sent = list(result.messages)
        where = f"{conv_id} at {window} tokens, call {record.index}"
        check_all_structural(history_in, sent)
        if latest_verbatim:
            check("keeps_latest_human_verbatim", CheckContext(input=list(history_in), output=sent))
            assert any(same_message(first, m) for m in sent), f"{where}: the first user request was not sent"
            assert record.first_request_present, where
        assert record.violations == [], f"{where}: {record.violations}"
        missing = missing_running_calls(recording[:record.message_index], sent)
        if _names_can_fit(recording[:record.message_index], policy):
            assert not missing, f"{where}: calls of the running request lost: {missing[:5]}"
        assert record.tokens_sent == counter.count_messages(sent), where
        seen.append((record, history_in, sent))

    replay = replay_conversation(recording, policy, conversation_id=conv_id, on_call=on_call)

    # one call per recorded assistant message, in order
    ai_at = [i for i, m in enumerate(recording) if isinstance(m, AIMessage)]
    assert [c.message_index for c in replay.calls] == ai_at
    assert len(seen) == len(ai_at)
    previous_sent: list[BaseMessage] = []
    previous_end = 0
    for record, history_in, sent in seen:
        where = f"{conv_id} at {window} tokens, call {record.index}"
        # the compacted history replaced the history; the recording since the last call was appended
        expected_in = previous_sent + recording[previous_end:record.message_index]
        assert [m.id for m in history_in] == [m.id for m in expected_in], where
        assert all(a is b for a, b in zip(history_in, expected_in)), where
        previous_sent, previous_end = sent, record.message_index
        # "without compaction" is the plain recording before this assistant message
        assert record.tokens_uncompacted == counter.count_messages(recording[:record.message_index]), where
        assert record.tokens_sent <= record.tokens_uncompacted, where
        if record.tokens_sent > window:
            assert not record.fits and record.stop_reason == "pinned_over_budget", (
                f"{where}: {record.tokens_sent} tokens sent, over the window, but the result says "
                f"fits={record.fits}, stop_reason={record.stop_reason!r}")
            bound = _unremovable_upper_bound(history_in, policy)
            assert bound > window, (f"{where}: {record.tokens_sent} tokens sent, over the window, though the "
                                    f"unremovable part is only {bound} tokens")
    return replay.calls, recording


CODING = "mini-swe-agent/"
"""Conversation ids of the coding runs (swe_agent_coding.jsonl): one request, then 35 to 175 tool steps. Their
long loops are issue 24's open work (compact rarely and deep, keep every call named): until it lands, the sweeps
below run them as expected failures (`xfail`, not strict), and the rest of the suite holds them to every other
rule."""

ISSUE_24 = pytest.mark.xfail(strict=False, reason="issue 24 (open): a coding run's long loop in a small window "
                             "loses calls of the running request or goes over the window")


def _sweep_ids() -> list:
    return [pytest.param(i, marks=ISSUE_24) if i.startswith(CODING) else i for i in _ids()]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("conv_id", _sweep_ids())
def test_replay_real_conversation(conv_id: str, window: int):
    calls, _ = _replay_and_check(conv_id, window)
    over = [c for c in calls if c.tokens_sent > window]
    assert over == [], f"{len(over)} calls over the window (see the checks above for why they are allowed)"
    sent = sum(c.tokens_sent for c in calls)
    uncompacted = sum(c.tokens_uncompacted for c in calls)
    assert sent <= uncompacted
    if max(c.tokens_uncompacted for c in calls) > window:
        assert sent < uncompacted, "a conversation longer than the window must cost fewer tokens with compaction"


@pytest.mark.parametrize("window", [2_000, 3_000, 8_000])
def test_running_request_keeps_every_call(window: int):
    """At more windows, over every shared conversation: at each model call, every tool call of the running request
    is in the sent history or named in its progress note, and the sent history is valid. At 2,000 tokens the
    tau-bench system prompt (about 1,250 tokens) leaves too little room on a few long loops: there, and only where
    the last resort had to cut the message holding the progress note after making it terse, or had cut a call's
    arguments before it was folded, a call may be lost; and at any window where no history naming every call can fit
    the budget (`_names_can_fit`)."""
    _running_request_sweep(window, coding=False)


@ISSUE_24
@pytest.mark.parametrize("window", [2_000, 3_000, 8_000])
def test_running_request_keeps_every_call_in_coding_runs(window: int):
    """The same over the coding runs (issue 24, open)."""
    _running_request_sweep(window, coding=True)


def _args_cut_in_note(sent: list, missing: list[str]) -> bool:
    """Whether every missing call is named in a note line whose arguments the last resort had cut to fit."""
    lines = [line for m in sent if isinstance(m, AIMessage) for line in m.text.split("\n")
             if "cut by lc-compaction" in line.split(" -> ")[0]]
    return all(any(line.startswith(f"- {c.split('(', 1)[0]}(") for line in lines) for c in missing)


def _running_request_sweep(window: int, *, coding: bool) -> None:
    policy = CompactionPolicy(max_input_tokens=window)
    lost: list[str] = []
    folded = excused = 0
    for conv_id, recording in _traces().items():
        if conv_id.startswith(CODING) != coding:
            continue
        note_cut = False  # the last resort cut a progress note of this conversation (after making it terse)
        terse = False  # the last resort made a progress note of this conversation terse (in this call or earlier)

        def on_call(record, history_in, result, conv_id=conv_id, recording=recording):
            nonlocal folded, excused, note_cut, terse
            assert check_invariants(result.messages) == []
            folded += sum(a.kind == "folded" for a in result.actions)
            hosts = {m.id for m in result.messages if isinstance(m, AIMessage) and "progress note" in m.text}
            cuts = [a for a in result.actions if a.strategy == "last_resort" and set(a.message_ids) & hosts]
            made_terse = [a for a in cuts if "made terse" in a.detail]
            terse = terse or bool(made_terse)
            cut_after_terse = terse and len(cuts) > len(made_terse)
            note_cut = note_cut or (cut_after_terse and result.tokens_after > 0.9 * policy.budget_tokens())
            missing = missing_running_calls(recording[:record.message_index], result.messages)
            if missing and not _names_can_fit(recording[:record.message_index], policy):
                pass  # no history naming every call fits the budget (`_names_can_fit`): nothing can keep them all
            elif missing and window <= 2_000 and (note_cut or _args_cut_in_note(result.messages, missing)):
                excused += 1  # the window cannot hold every call's name (those calls stay lost afterwards), or
                # the last resort had cut the call's arguments to fit before it was folded: named, arguments cut
            elif missing:
                lost.append(f"{conv_id}, call {record.index}: {missing[:3]}")

        replay_conversation(recording, policy, conversation_id=conv_id, on_call=on_call)
    assert not lost, lost[:5]
    assert folded > 0  # the windows are small enough that some running loops had to be folded
    assert excused <= (40 if window <= 2_000 else 0), excused


TAU_IDS = [i for i in _ids() if i.startswith("tau-bench/")][:3]


@pytest.mark.parametrize("conv_id", TAU_IDS)
def test_pinned_part_over_the_window_is_reported(conv_id: str):
    """At 1,200 tokens the tau-bench system prompt alone (about 1,250 tokens) is over the window: every call is
    over it, and every result says so; nothing else is sent beyond what may not be removed. (Whether the
    requests survive such a hopeless window is the next test's matter.)"""
    window = 1_200
    policy = _policy(window)
    system = _traces()[conv_id][0]
    assert isinstance(system, SystemMessage) and policy.counter.count_message(system) > window
    calls, _ = _replay_and_check(conv_id, window, latest_verbatim=False)
    assert calls and all(c.tokens_sent > window for c in calls)
    assert all(not c.fits and c.stop_reason == "pinned_over_budget" for c in calls)


def test_hopeless_window_still_sends_the_latest_request():
    """When even the system prompt alone is over the budget, cutting the other messages cannot make the history
    fit; the latest user request (a pin) must still be sent as it is, not replaced by a cut marker (an earlier
    last resort cut every message over 50 tokens to a bare marker, and still did not fit)."""
    conv_id = TAU_IDS[0]
    recording = _traces()[conv_id]
    history = recording[:6]  # system prompt (about 1,250 tokens), 3 user turns, the last one about 55 tokens
    assert isinstance(history[-1], HumanMessage)
    result = compact(history, _policy(1_200))
    assert result.stop_reason == "pinned_over_budget" and not result.fits
    check("keeps_latest_human_verbatim", CheckContext(input=list(history), output=list(result.messages)))


def test_async_replay_gives_the_same_records():
    """areplay_conversation (acompact) and replay_conversation (compact) agree call by call (times aside)."""
    policy = _policy(4_000)
    for conv_id in [TAU_IDS[0], "agentdojo/claude-3-sonnet-20240229/workspace/user_task_27"]:
        recording = _traces()[conv_id]
        sync = replay_conversation(recording, policy, conversation_id=conv_id)
        asyn = asyncio.run(areplay_conversation(recording, policy, conversation_id=conv_id))

        def strip(c: CallRecord) -> dict:
            d = c.to_dict()
            d.pop("compaction_ms")
            return d

        assert [strip(c) for c in sync.calls] == [strip(c) for c in asyn.calls]
        assert any(c.compacted for c in sync.calls)
        assert [m.id for m in sync.messages] == [m.id for m in asyn.messages]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_compaction_error_names_conversation_and_call(mode):
    recording = _traces()[_ids()[0]]

    def broken(messages, policy):
        if sum(isinstance(m, AIMessage) for m in messages) >= 2:
            raise RuntimeError("boom")
        return compact(messages, policy)

    async def abroken(messages, policy):
        return broken(messages, policy)

    with pytest.raises(ReplayError, match=r"conversation 'x', model call 2 .*RuntimeError: boom") as info:
        if mode == "sync":
            replay_conversation(recording, _policy(4_000), conversation_id="x", compact_fn=broken)
        else:
            asyncio.run(areplay_conversation(recording, _policy(4_000), conversation_id="x", compact_fn=abroken))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_async_file_replay_gives_the_same_report():
    """areplay_files (acompact) and replay_files (compact) give the same report on the bundled traces (times
    aside), file by file and conversation by conversation."""
    policy = _policy(4_000)
    paths = bundled_traces()
    sync = replay_files(paths, policy, progress=False)
    asyn = asyncio.run(areplay_files(paths, policy, progress=False))

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if not k.startswith("compaction_ms")}
        return [strip(v) for v in d] if isinstance(d, list) else d

    assert [f.path for f in asyn.files] == paths
    assert len(sync.conversations) == len(asyn.conversations) >= 2
    assert sync.totals()["compactions"] > 0
    assert strip(sync.to_dict()) == strip(asyn.to_dict())


def test_messages_without_ids_get_stable_ids_and_are_not_mutated():
    recording = [m.model_copy(update={"id": None}) for m in _traces()[_ids()[0]]]
    replay = replay_conversation(recording, _policy(4_000), conversation_id="c")
    assert all(m.id is None for m in recording)
    assert all(c.first_request_present for c in replay.calls)
    assert replay.messages[0].id == "c:0"


def test_summary_figures_add_up():
    """summarize_calls over hand-made records: sums, peaks, over-window and budget counts, percentiles."""
    def rec(i, unc, sent, ms, fits=True, violations=()):
        return CallRecord(index=i, message_index=i, tokens_uncompacted=unc, tokens_before=unc, tokens_sent=sent,
                          messages_uncompacted=i, messages_before=i, messages_sent=i, compaction_ms=ms,
                          compacted=sent < unc, triggered=sent < unc, stop_reason="x", fits=fits,
                          violations=list(violations))

    calls = [rec(0, 100, 100, 1.0), rec(1, 900, 500, 3.0), rec(2, 1500, 1200, 2.0, fits=False, violations=["v"])]
    s = summarize_calls(calls, max_input_tokens=1000, budget_tokens=450, conversations=1)
    assert s["model_calls"] == 3 and s["compactions"] == 2
    assert s["tokens_sent_uncompacted"] == 2500 and s["tokens_sent"] == 1800 and s["tokens_saved"] == 700
    assert s["tokens_saved_fraction"] == 0.28
    assert s["peak_input_tokens"] == 1200 and s["peak_input_tokens_uncompacted"] == 1500
    assert s["over_window_calls"] == 1 and s["over_budget_calls"] == 2 and s["not_fitting_calls"] == 1
    assert s["invariant_violations"] == 1
    assert s["compaction_ms_median"] == 2.0 and s["compaction_ms_max"] == 3.0
    assert s["compaction_ms_p95"] == pytest.approx(2.9)
    empty = summarize_calls([], max_input_tokens=None)
    assert empty["model_calls"] == 0 and empty["compaction_ms_median"] is None and empty["over_window_calls"] == 0


@pytest.mark.parametrize("q", [0, 5, 50, 95, 99.5, 100])
def test_percentile_matches_numpy_linear(q):
    np = pytest.importorskip("numpy")
    data = [5.0, 1.0, 9.5, 3.25, 7.0, 7.0, 0.5]
    assert percentile(data, q) == pytest.approx(float(np.percentile(data, q)))
    assert percentile([4.0], q) == 4.0
    assert percentile([], q) is None


def test_percentile_rejects_out_of_range():
    with pytest.raises(ValueError, match="q: a percentile is between 0 and 100"):
        percentile([1.0], 101)
