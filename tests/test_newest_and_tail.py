"""What the next command needs survives a cut (issue 24).

- A tool result the last resort cuts keeps its head AND its last lines (`shorten.TAIL_SHARE`): a test run's
  FAILED lines, error and exit code sit at its end.
- A newest result over half the budget is cut down to about half the budget, not to an empty marker, and only
  after the progress note has been made as small as it can be made (counted, then cut).
- A progress note's line lists the identifiers of a result's error and exit-status lines and of its last lines
  before those of its head (`_preview.signal_lines`): a failing test's id, a traceback's `file.py:N` and error
  type.
Each test can fail when its rule is broken.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, TruncateToolResults, compact
from lc_compaction._preview import signal_lines
from lc_compaction.facts import FactGuard
from lc_compaction.markers import before_cut
from lc_compaction.progress import FACTS_CHARS, call_line, note_lines, with_note
from lc_compaction.shorten import TAIL_SHARE, shorten
from lc_compaction.structure import check_invariants
from lc_compaction.tokens import TiktokenCounter

COUNTER = TiktokenCounter("gpt-4o")
GUARD = FactGuard()


def pytest_run(passing: int) -> str:
    """A long pytest output: many passing test ids first, then the failure and the summary at the end."""
    lines = [f"tests/test_mod.py::test_case_{k} PASSED" for k in range(passing)]
    lines += ["=================================== FAILURES ===================================",
              "src/pkg/schema.py:894: KeyError",
              "FAILED tests/test_schema.py::TestValidates::test_nested_none - KeyError: 'value'",
              f"========================= 1 failed, {passing} passed in 3.21s ========================="]
    return "\n".join(lines)


def test_a_cut_tool_result_keeps_its_head_and_its_last_lines():
    text = pytest_run(2_000)
    message = ToolMessage(text, tool_call_id="c1", id="t1")
    keep = 1_000
    cut = shorten(message, keep)
    kept = before_cut(cut.content)  # type: ignore[arg-type]
    assert kept.startswith(text[:200])  # the head
    assert "FAILED tests/test_schema.py::TestValidates::test_nested_none" in kept  # the end
    assert kept.endswith(text.splitlines()[-1])
    assert len(text.splitlines()[-1]) < keep * TAIL_SHARE
    assert "lines ...]" in kept  # the gap says how many lines went
    assert len(kept) <= keep + 40  # the kept characters, and the gap line
    assert cut.response_metadata["lc_compaction"]["original_chars"] == len(text)


def test_a_cut_of_a_message_that_is_not_a_tool_result_keeps_its_head_only():
    text = pytest_run(500)
    cut = shorten(HumanMessage(text, id="h"), 1_000)
    assert before_cut(cut.content) == text[:1_000].rstrip()  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", min_size=0, max_size=40), min_size=1, max_size=80),
       st.integers(min_value=0, max_value=3_000))
def test_a_cut_keeps_only_text_of_the_result_in_order(lines, keep):
    """Property: what a cut keeps is a head of the text, then (after one gap line) a suffix of it, never more
    characters of it than asked."""
    text = "\n".join(lines)
    cut = shorten(ToolMessage(text, tool_call_id="c", id="t"), keep)
    kept = before_cut(cut.content)  # type: ignore[arg-type]  (its trailing whitespace stripped)
    gap = re.search(r"\n\[\.\.\. [\d,]+ lines? \.\.\.\]\n", kept)  # "[... 1 line ...]" too
    if gap is not None and len(text) > keep:
        head, tail = kept[:gap.start()], kept[gap.end():]
        assert text.startswith(head) and text.rstrip().endswith(tail)
        assert len(head) + len(tail) <= keep
    else:
        assert text.startswith(kept.rstrip()) or kept.strip() == text.strip()


def _loop(note_calls: int, newest_lines: int) -> list:
    host = AIMessage("", id="a0", tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "c0"}])
    lines = [call_line({"name": "bash", "args": {"command": f"pytest tests/test_{k}.py"}, "id": f"x{k}"},
                       ToolMessage(f"tests/test_{k}.py::test_{k} PASSED\nsrc/m_{k}.py:{k + 10}: ok",
                                   tool_call_id=f"x{k}"), guard=GUARD) for k in range(note_calls)]
    return [SystemMessage("You fix bugs.", id="s"), HumanMessage("Fix the failing test.", id="h"),
            with_note(host, lines), ToolMessage("a.py b.py", tool_call_id="c0", id="t0"),
            AIMessage("", id="a1", tool_calls=[{"name": "bash", "args": {"command": "pytest -x"}, "id": "c1"}]),
            ToolMessage(pytest_run(newest_lines), tool_call_id="c1", id="t1")]


def test_a_newest_result_over_half_the_budget_is_cut_to_about_half_not_to_nothing():
    policy = CompactionPolicy(max_input_tokens=4_000, strategies=[TruncateToolResults()])
    budget = policy.budget_tokens()
    history = _loop(40, 260)
    newest = COUNTER.count_message(history[-1])
    assert budget // 2 < newest < budget  # over half the budget, under the whole
    result = compact(history, policy)
    assert result.fits and check_invariants(result.messages) == []
    sent = COUNTER.count_message(result.messages[-1])
    assert 0.75 * (budget // 2) <= sent <= budget // 2 + 50  # cut to about half the budget (the cut steps by a fifth)
    text = result.messages[-1].content
    assert "FAILED tests/test_schema.py::TestValidates::test_nested_none" in text  # its end survives
    assert "cut to fit the budget" in " ".join(a.detail for a in result.actions if a.strategy == "last_resort")


def test_the_note_is_cut_before_a_newest_result_over_half_the_budget_goes_below_half():
    """The newest step is the last thing the last resort cuts below half the budget: the note goes first."""
    policy = CompactionPolicy(max_input_tokens=4_000, strategies=[TruncateToolResults()])
    history = _loop(120, 260)
    result = compact(history, policy)
    assert result.fits
    assert COUNTER.count_message(result.messages[-1]) >= 0.75 * (policy.budget_tokens() // 2)
    assert sum(len(note_lines(m)) for m in result.messages) >= 1  # the note is still there, smaller
    assert COUNTER.count_message(result.messages[2]) < COUNTER.count_message(history[2])


def test_signal_lines_are_the_error_lines_and_the_last_lines_newest_first():
    text = pytest_run(50)
    lines = signal_lines(text).splitlines()
    assert lines[0].startswith("=====") and "1 failed" in lines[0]  # the last line first
    assert any("FAILED tests/test_schema.py" in x for x in lines)
    assert not any("PASSED" in x for x in lines[:3])
    assert signal_lines("one line only") == ""


def test_a_note_line_lists_the_failure_identifiers_before_those_of_the_head():
    """A test run with many passing ids before its failure: the line's bounded facts name the failing test, the
    traceback's file and line and the error type, which document order would have left out."""
    text = pytest_run(300)
    call = {"name": "bash", "args": {"command": "python -m pytest tests -x"}, "id": "c1"}
    line = call_line(call, ToolMessage(text, tool_call_id="c1"), guard=GUARD)
    assert "tests/test_schema.py::TestValidates::test_nested_none" in line
    assert "src/pkg/schema.py:894" in line and "KeyError" in line
    facts = line.split("| facts: ", 1)[1]
    assert len(facts) <= FACTS_CHARS + 200
