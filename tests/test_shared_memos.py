"""The process-wide memos (issue 25): truncation notes made with the built-in guard (or none) are shared by every
`TruncateToolResults` of the same class and settings, so a new policy does not read a result again; a strategy with
another guard, other settings or another class makes its own; `_memo.clear` forgets them, and the extractions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lc_compaction import _memo, progress
from lc_compaction.facts import _SHARED_EXTRACTIONS, FactGuard
from lc_compaction.strategies import truncate
from lc_compaction.strategies.truncate import TruncateToolResults
from tests.builders import tool_result

TEXT = "\n".join(f"row {k}: order #W{1_000_000 + 7 * k} total ${k}.50 ref ZX{k:04d}" for k in range(200))


@dataclass
class _Louder(TruncateToolResults):
    def _note(self, message, text, recall, tool):  # type: ignore[no-untyped-def]
        return super()._note(message, text, recall, tool).upper()


def test_notes_are_shared_by_strategies_of_the_built_in_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    original = TruncateToolResults._note

    def counting(self, message, text, recall, tool):  # type: ignore[no-untyped-def]
        made.append(text)
        return original(self, message, text, recall, tool)

    monkeypatch.setattr(TruncateToolResults, "_note", counting)
    _memo.clear()
    result = tool_result("c1", "t1", TEXT, name="lookup")
    first = TruncateToolResults().note(result)
    assert TruncateToolResults().note(tool_result("c9", "t9", TEXT, name="lookup")) == first  # a new policy's
    assert len(made) == 1
    assert TruncateToolResults(fact_guard=FactGuard()).note(result) == first and len(made) == 1
    # other settings, another guard, another class: their own notes
    assert TruncateToolResults(max_identifier_chars=40).note(result) != first
    assert TruncateToolResults(fact_guard=False).note(result) != first
    custom = TruncateToolResults(fact_guard=FactGuard(["ZX\\d+"]))
    assert custom._notes is not truncate._SHARED_NOTES
    custom.note(result)
    assert len(made) == 4
    assert _Louder().note(result) == first.upper()
    assert TruncateToolResults().note(tool_result("c1", "t1", TEXT, name="other")) != first  # the tool is named
    # forgotten: the next strategy reads the result again, and the guard extracts it again
    assert _SHARED_EXTRACTIONS.items
    _memo.clear()
    assert not _SHARED_EXTRACTIONS.items and not truncate._SHARED_NOTES.items
    made.clear()
    assert TruncateToolResults().note(result) == first and len(made) == 1


def test_progress_lines_are_remembered_with_the_built_in_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """`progress.call_line` gives the same line from memory (a history folded again), made once per call, result,
    `said`, earlier lines and recall key; with another guard it is made each time; `_memo.clear` forgets it."""
    made: list[int] = []
    original = progress._call_line
    monkeypatch.setattr(progress, "_call_line", lambda *a: made.append(1) or original(*a))
    _memo.clear()
    call = {"name": "write_file", "id": "c1", "args": {"path": "src/m.py", "content": TEXT}}
    result = tool_result("c1", "t1", "wrote src/m.py (200 lines)", name="write_file")
    guard = FactGuard()
    line = progress.call_line(call, result, guard=guard, known="- earlier(x)")
    assert progress.call_line(dict(call), result, guard=FactGuard(), known="- earlier(x)") == line
    assert len(made) == 1
    progress.call_line(call, result, guard=guard, known="- earlier(#W1000007)")  # other earlier lines: made
    assert len(made) == 2
    assert progress.call_line(call, None, guard=guard, known="- earlier(x)") != line
    custom = FactGuard(["ZX\\d+"])
    progress.call_line(call, result, guard=custom, known="- earlier(x)")
    progress.call_line(call, result, guard=custom, known="- earlier(x)")
    assert len(made) == 5
    _memo.clear()
    assert progress.call_line(call, result, guard=guard, known="- earlier(x)") == line and len(made) == 6
