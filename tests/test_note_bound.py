"""The progress note's bound, its counted line, the last resort's order and the cache key (issue 24).

A note that names every call of a long coding loop in full grows without end, and every later compaction then
rewrites it. `progress.bounded_lines` makes its oldest lines shorter in steps (terse, then call-only to fit, then
counted); the last resort counts a note's oldest calls before it cuts the note's text, and cuts the note before the
newest step when that step takes at most half the budget; `PromptCache(whole_messages=True)` bills a prefix of
whole messages only. Each test below states the rule it checks and can fail when the rule is broken.
"""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, TruncateToolResults, compact
from lc_compaction.billing import BillMeter, PromptCache, shared_prefix_tokens
from lc_compaction.facts import FactGuard
from lc_compaction.progress import (
    COLLAPSED_RE,
    KEPT_FACTS_LINES,
    _collapse,
    bounded_lines,
    call_line,
    collapsed_counts,
    counted_note,
    note_lines,
    with_note,
)
from lc_compaction.structure import check_invariants
from lc_compaction.tokens import TiktokenCounter
from tests.oracle.checks import missing_running_calls

GUARD = FactGuard()
COUNTER = TiktokenCounter("gpt-4o")


def size(line: str) -> int:
    return COUNTER.count_text(line) + 1


def lines_of(n: int, *, failed: frozenset[int] = frozenset()) -> list[str]:
    """`n` note lines of `bash` calls, each result naming a file and a line (identifiers), some failed."""
    out = []
    for k in range(n):
        call = {"name": "bash", "args": {"command": f"python -m pytest tests/test_mod_{k}.py -x"}, "id": f"c{k}"}
        text = (f"tests/test_mod_{k}.py::test_case_{k} FAILED\nsrc/pkg/mod_{k}.py:{100 + k}: ValueError\n"
                + "collected output line\n" * 40 + ("exit code 1" if k in failed else "ok"))
        result = ToolMessage(text, tool_call_id=f"c{k}", name="bash", status="error" if k in failed else "success")
        out.append(call_line(call, result, guard=GUARD))
    return out


def test_lines_that_fit_stay_byte_for_byte():
    lines = lines_of(5)
    assert bounded_lines(lines, 100_000, size, GUARD) == lines


def test_over_the_bound_the_oldest_go_terse_first_and_keep_their_identifiers():
    lines = lines_of(30)
    out = bounded_lines(lines, 900, size, GUARD, drop_identifiers=False)
    assert len(out) == len(lines) and out != lines
    assert out[-1] == lines[-1]  # the newest line keeps its result's preview
    shortened = [k for k, (a, b) in enumerate(zip(lines, out)) if a != b]
    assert shortened == list(range(len(shortened)))  # oldest first
    for k in shortened:
        assert " -> " not in out[k].split(" | facts: ")[0]  # size and start gone ...
        assert f"src/pkg/mod_{k}.py" in out[k]  # ... identifiers kept
    assert not any(COLLAPSED_RE.match(x) for x in out)


def test_to_fit_the_oldest_lose_identifiers_saying_so_and_the_oldest_are_counted_last():
    failed = frozenset({0, 3, 7})
    lines = lines_of(60, failed=failed)
    out = bounded_lines(lines, 200, size, GUARD, drop_identifiers=True)
    counted = collapsed_counts(out[0])
    assert counted is not None, out[0]
    tally, fails = counted
    n = tally["bash"]
    assert n + len(out) - 1 == len(lines)  # every call named or counted
    assert fails == len([k for k in failed if k < n])  # how many of the counted calls failed
    for k, line in enumerate(out[1:], start=n):  # the rest keep their calls, in order
        assert line.startswith(f'- bash({{"command": "python -m pytest tests/test_mod_{k}.py -x"}})')
    for line in out[-KEPT_FACTS_LINES:]:  # the newest keep their identifiers
        assert "src/pkg/mod_" in line, line
    for line in out[1:-KEPT_FACTS_LINES]:
        assert "src/pkg/mod_" not in line.split(" (+")[0] and line.endswith(" more)"), line


def test_a_counted_note_fits_with_the_fewest_counted_and_names_the_rest():
    lines = lines_of(20)
    message = with_note(AIMessage("", id="a", tool_calls=[{"name": "bash", "args": {}, "id": "z"}]), lines)
    limit = COUNTER.count_message(message) // 2
    new = counted_note(message, lambda m: COUNTER.count_message(m) <= limit)
    kept = note_lines(new)
    counted = collapsed_counts(kept[0])
    assert counted is not None and COUNTER.count_message(new) <= limit
    n = counted[0]["bash"]
    assert kept[1:] == lines[n:] and n + len(kept) - 1 == len(lines)
    fewer = with_note(message, [bounded_collapse_of(lines, n - 1), *lines[n - 1:]]) if n > 1 else None
    assert fewer is None or COUNTER.count_message(fewer) > limit  # one fewer counted would not fit


def bounded_collapse_of(lines: list[str], j: int) -> str:
    return _collapse(lines[:j], lines[:j], None)


def _loop_with_note(note_calls: int, newest_chars: int) -> list:
    """A running loop whose first remaining assistant message holds a long note, then a newest step."""
    host = AIMessage("", id="a0", tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "c0"}])
    history = [SystemMessage("You fix bugs.", id="s"), HumanMessage("Fix the failing test.", id="h"),
               with_note(host, lines_of(note_calls)), ToolMessage("a.py b.py", tool_call_id="c0", id="t0"),
               AIMessage("", id="a1", tool_calls=[{"name": "bash", "args": {"command": "cat a.py"}, "id": "c1"}]),
               ToolMessage("x = 1\n" * (newest_chars // 6), tool_call_id="c1", id="t1")]
    return history


def test_the_newest_result_reaches_the_model_whole_before_the_note_is_cut():
    """Issue 24: with a note too large for the window and a newest result that fits in half the budget, the last
    resort counts and cuts the note, never the newest result (truncation alone as the ladder: no fold rewrites the
    note first)."""
    policy = CompactionPolicy(max_input_tokens=3_000, strategies=[TruncateToolResults()])
    history = _loop_with_note(60, 1_500)
    newest = COUNTER.count_message(history[-1])
    assert newest <= policy.budget_tokens() // 2 < COUNTER.count_messages(history)
    result = compact(history, policy)
    assert result.fits and check_invariants(result.messages) == []
    assert result.messages[-1].content == history[-1].content
    assert "last_resort" in result.strategies_applied


def test_the_last_resort_counts_the_oldest_calls_instead_of_cutting_their_names():
    policy = CompactionPolicy(max_input_tokens=2_000)
    history = _loop_with_note(60, 600)
    result = compact(history, policy)
    assert result.fits
    lines = [line for m in result.messages for line in note_lines(m)]
    assert lines and COLLAPSED_RE.match(lines[0])
    calls = [{"name": "bash", "args": json.loads(line[len("- bash("):line.index("})") + 1]), "id": f"x{k}"}
             for k, line in enumerate(lines_of(60))]
    recorded = [history[0], history[1], AIMessage("", id="r", tool_calls=calls),
                *[ToolMessage("r", tool_call_id=c["id"], id=f"rt{k}") for k, c in enumerate(calls)]]
    assert missing_running_calls(recorded, result.messages) == []  # every call named or counted


def test_whole_messages_as_the_cache_key_credit_nothing_inside_the_first_changed_message():
    base = [SystemMessage("s " * 700, id="s"), HumanMessage("task " * 400, id="h")]
    before = [*base, AIMessage("note line one\n" * 200, id="a")]
    after = [*base, AIMessage("note line one\n" * 200 + "one more line\n", id="a")]
    partial, n = shared_prefix_tokens(before, after, COUNTER)
    whole, m = shared_prefix_tokens(before, after, COUNTER, whole_messages=True)
    assert n == m == 2
    assert whole == COUNTER.count_message(base[0]) + COUNTER.count_message(base[1]) < partial
    meter = BillMeter(PromptCache(whole_messages=True), COUNTER)
    meter.bill(before)
    assert meter.bill(after).shared_tokens == whole
    cache = PromptCache(whole_messages=True)
    assert cache.to_dict()["whole_messages"] is True and "whole messages" in cache.describe()
    assert "whole messages" not in PromptCache().describe()
