"""A failed step never reads like a success (issue 20, class 9).

A tool call failed when its result says so: `ToolMessage.status == "error"`, a non-zero exit code or return code in
its text (a shell tool prints it last), a Python traceback. Wherever compaction writes about that call instead of
the result -- a line of the running request's progress note at every level of terseness (the full line, the
terse line of `_fit_note`, the bare line of the last resort's `terse_note`), a truncation note, a result cut in
place, a ledger entry -- the failure is said. The failures are made by the tests themselves (which step fails,
and how), never read back with the code under test.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, Summarize, TruncateToolResults, compact
from lc_compaction._content import _EXIT_CODE, failure_in_text
from lc_compaction.markers import MARK_KEY, is_shortened, outside_fences, read_truncation_note
from lc_compaction.progress import _terse_line, call_line, note_lines, terse_note, with_note
from lc_compaction.facts import FactGuard
from lc_compaction.strategies.ledger import entries
from lc_compaction.structure import check_invariants
from tests.oracle.checks import COUNTED_LINE

# how a step fails: the result text (body first) and its status; None: it succeeds
FAILURES = {
    "status": lambda body: (body, "error"),
    "exit_code_last": lambda body: (f"{body}\n[process exited with code 2]", "success"),
    "returncode_json": lambda body: (json.dumps({"stdout": body, "stderr": "boom", "returncode": 1}), "success"),
    "traceback_last": lambda body: (f"{body}\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
                                    "ValueError: bad", "success"),
    "exit_status_start": lambda body: (f"Exit status 127\n{body}", "success"),
}
SUCCESSES = {
    "plain": lambda body: (body, "success"),
    "exit_code_zero": lambda body: (f"{body}\nexit code: 0", "success"),
    "returncode_zero_json": lambda body: (json.dumps({"stdout": body, "returncode": 0}), "success"),
}


def body(n: int, chars: int) -> str:
    return (f"step {n} wrote line {n} of the build log, all files compiled; " * (chars // 60 + 1))[:chars]


def step(n: int, how: str, chars: int) -> list[BaseMessage]:
    """Step n of the loop: `run({"n": n})` and its result, failing (or not) as `how` says."""
    text, status = {**FAILURES, **SUCCESSES}[how](body(n, chars))
    call = {"name": "run", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}
    return [AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(text, tool_call_id=f"c{n}", id=f"t{n}", name="run", status=status)]


def running_loop(kinds: list[str], chars: list[int]) -> list[BaseMessage]:
    msgs: list[BaseMessage] = [SystemMessage("You build the project.", id="s"), HumanMessage("Build it.", id="h")]
    for n, (how, size) in enumerate(zip(kinds, chars)):
        msgs += step(n, how, size)
    return msgs


def says_failure(line: str) -> bool:
    """The line, outside the result's fenced data (which may quote the tool's own "ValueError"), says error."""
    return "error" in outside_fences(line)


def call_of(line: str) -> int:
    return json.loads(line[line.index("(") + 1:line.index(")")])["n"]


def levels(line: str) -> list[str]:
    """The line at every level of terseness: as it is, `_fit_note`'s terse form, the last resort's bare form."""
    bare = note_lines(terse_note(with_note(AIMessage("", id="x"), [line])))
    return [line, _terse_line(line, FactGuard()), *bare]


# ------------------------------------------------------------------------------------------------ each level
@pytest.mark.parametrize("how", sorted(FAILURES))
def test_a_failed_call_says_so_at_every_level_of_its_note_line(how):
    failed = step(0, how, 3_000)
    call, result = failed[0].tool_calls[0], failed[1]
    for truncated in (False, True):  # folded as it came, or after its result became a truncation note
        shown = TruncateToolResults().truncated(result) if truncated else result  # type: ignore[arg-type]
        for line in levels(call_line(call, shown, guard=FactGuard())):
            assert says_failure(line), (how, truncated, line)


@pytest.mark.parametrize("how", sorted(SUCCESSES))
def test_a_successful_call_reads_as_one_at_every_level(how):
    ok = step(0, how, 3_000)
    for line in levels(call_line(ok[0].tool_calls[0], ok[1], guard=FactGuard())):
        assert not says_failure(line), (how, line)


@pytest.mark.parametrize("how", sorted(FAILURES))
def test_a_truncated_or_cut_failed_result_says_so(how):
    """The truncation note of a failed result, and a result the last resort cut (its exit code, printed last, cut
    away), say how it failed: the note in its text (what the model reads), the cut in its mark (what a progress
    note line built from it reads)."""
    failed = step(0, how, 8_000)[1]
    note = TruncateToolResults().truncated(failed)  # type: ignore[arg-type]
    parsed = read_truncation_note(note.content)  # type: ignore[arg-type]
    assert parsed is not None and parsed.failure.startswith("error"), note.content
    assert "error" in outside_fences(note.content)  # type: ignore[arg-type]
    # cut in place by the last resort: one result far over a small window
    msgs = [HumanMessage("Build it.", id="h"), AIMessage("", id="a0", tool_calls=[
        {"name": "run", "args": {"n": 0}, "id": "c0", "type": "tool_call"}]), failed]
    result = compact(msgs, CompactionPolicy(max_input_tokens=600, reserve=0, token_counter="approximate"))
    cut = result.messages[-1]
    assert is_shortened(cut) and cut.response_metadata[MARK_KEY]["failure"].startswith("error")


@pytest.mark.parametrize("how", sorted(FAILURES))
def test_the_ledger_says_a_failed_call_failed(how):
    failed = step(0, how, 3_000)
    line = entries([HumanMessage("Build it."), *failed])[-1]
    assert "-> error" in outside_fences(line), line


# ------------------------------------------------------------------------------------------------ the property
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def failing_loops(draw):
    n = draw(st.integers(3, 9))
    kinds = draw(st.lists(st.sampled_from(sorted(FAILURES) + sorted(SUCCESSES)), min_size=n, max_size=n))
    chars = draw(st.lists(st.integers(200, 7_000), min_size=n, max_size=n))
    return kinds, chars


@FAST
@given(loop=failing_loops(), window=st.integers(700, 6_000), summarize=st.booleans())
def test_every_note_line_of_a_failed_call_says_so_under_any_pressure(loop, window, summarize):
    """On generated running loops with failing steps, compacted at windows from roomy to hopeless (the full lines,
    `_fit_note`'s terse lines and the last resort's bare ones all occur): every note line of a failed call says
    so, and no line of a successful one does; a line that counts the oldest calls (a bounded note) says how many
    of them failed; so does what stands in for a kept result (its truncation note, its
    cut's mark). The last line of a note the last resort cut in place may be a fragment, and is not read."""
    kinds, chars = loop
    msgs = running_loop(kinds, chars)
    failed = {n for n, how in enumerate(kinds) if how in FAILURES}
    strategies = [TruncateToolResults(), Summarize(model=None)] if summarize else None
    result = compact(msgs, CompactionPolicy(max_input_tokens=window, token_counter="approximate",
                                            strategies=strategies))
    assert check_invariants(result.messages) == []
    for m in result.messages:
        lines = note_lines(m)
        if lines and is_shortened(m):
            lines = lines[:-1]
        for line in lines:
            counted = COUNTED_LINE.match(line)
            if counted:  # the oldest calls, counted (a bounded note): how many of them failed, exactly
                n, fails = int(counted.group(1)), int(counted.group(3) or 0)
                assert fails == len(failed & set(range(n))), line
                continue
            for shown in levels(line):
                assert says_failure(shown) == (call_of(line) in failed), (kinds[call_of(line)], shown)
        if isinstance(m, ToolMessage) and int(m.tool_call_id[1:]) in failed and m.status != "error":
            note = read_truncation_note(m.content) if isinstance(m.content, str) else None
            mark = m.response_metadata.get(MARK_KEY) or {}
            assert (note is not None and note.failure) or mark.get("failure") or m.content == msgs[
                2 + 2 * int(m.tool_call_id[1:]) + 1].content, m


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["exit", "EXıT", "exİt", "ReTuRn", "return", "code", "status", "_", "-", " ", ":",
                                 "=", "is", "of", '"', "2", "0", "-1", "with", "ed", "x", "\n", "é", "ſ"]),
                max_size=30))
def test_the_exit_code_prefilter_answers_as_the_expression(parts):
    """`failure_in_text` reads an exit code only where the text holds "exit" or "return" (any case): it finds one
    exactly where `_EXIT_CODE` alone does, non-ASCII case partners included."""
    text = "".join(parts)
    codes = _EXIT_CODE.findall(text)
    found = failure_in_text(text)
    if codes and int(codes[-1]) != 0:
        assert found == f"exit code {int(codes[-1])}"
    else:
        assert found is None or not found.startswith("exit code")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["exit", "EXıT", "exİt", "ReTuRn", "return", "returncode", "exitcode", "code",
                                 "status", "_", "-", " ", ":", "=", "is", "of", '"', "2", "0", "-1", "with", "ed",
                                 "x", "\n", "é", "ſ"]), max_size=30))
def test_exit_codes_are_the_expression_s_codes(parts):
    """`_exit_codes` (the expression tried only where an exit word starts) finds every code `_EXIT_CODE.findall`
    finds, in order."""
    from lc_compaction._content import _DOTTED_I, _exit_codes

    text = "".join(parts)
    low = (text if text.isascii() else text.translate(_DOTTED_I)).lower()
    assert _exit_codes(text, low) == _EXIT_CODE.findall(text)
