"""A truncation note's preview reads a JSON result as `json` does, whichever parser reads it first
(`_preview._json`: orjson, then `json` for what orjson refuses)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lc_compaction._preview import _json, preview

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20)


def _same(a, b) -> bool:
    """Equal as JSON values, NaN equal to NaN, and of the same types (1 is not 1.0, True is not 1)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _reference(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


@settings(max_examples=400, deadline=None)
@given(JSON, st.integers(min_value=0, max_value=40), st.booleans())
def test_a_json_text_is_read_as_json_reads_it(value, cut, indent):
    """A JSON text (NaN, infinities and integers over 64 bits included), whole or cut short, parses to what
    `json.loads` gives, or to None where it raises."""
    text = json.dumps(value, indent=2 if indent else None)
    for t in (text, text[:max(0, len(text) - cut)]):
        assert _same(_json(t), _reference(t))


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity, -Infinity]", f"[{2**80}]", '{"a": 1, "a": 2}',
                                  '[{"x": "\\ud800"}]', "[1.5e400]", "[{'a': 1}]", '{"a": 1} trailing', "[1,]"])
def test_the_edges_where_the_parsers_differ_are_json_s(text):
    assert _same(_json(text), _reference(text))
    assert preview(text, 8) == preview(text, 8)  # deterministic either way


def test_a_value_at_a_line_start_is_not_glued_to_the_escaped_line_break():
    """A note writes its preview as a JSON string: `\\nsrc/b.py:12` reads as `nsrc/b.py:12` to a whole-word test,
    so each line break is followed by a space (`_preview.quoted`), in a truncation note and a progress line."""
    from langchain_core.messages import ToolMessage

    from lc_compaction._preview import quoted
    from lc_compaction.facts import contains
    from lc_compaction.progress import call_line
    from lc_compaction.strategies import TruncateToolResults

    text = "grep -n found 3 lines\nsrc/b.py:12: x = 1\nUA-12 booked\n" + "filler line\n" * 80
    assert json.loads(quoted("a\nb")) == "a\n b"
    note = TruncateToolResults().note(ToolMessage(text, tool_call_id="c", id="t", name="grep"))
    line = call_line({"name": "grep", "args": {"q": "x"}, "id": "c"}, ToolMessage(text, tool_call_id="c", id="t"))
    for written in (note, line):
        assert contains(written, "src/b.py:12") and contains(written, "UA-12"), written


_SIGNAL_PIECES = ["Error", "Errno", "ERROR", "Exception", "Traceback", "FAILED", "FAIL:", "FAIL", "Fatal", "fatal",
                  "returncode", "Exit code", "exit status", "exited with", "exit", "3 failed", "12 errors", "1 error",
                  " failed", "Errors", "ErrorX", "x", "word ", "  ", "\n", "\n", "7", "é", "a" * 1990, " " * 2100]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_SIGNAL_PIECES), max_size=30), st.integers(0, 40), st.integers(0, 40))
def test_signal_lines_are_the_expression_s_matches(pieces: list[str], skip: int, cut: int) -> None:
    """`_signal_matches` (the lines holding an anchor, then `SIGNAL` on each) finds what `SIGNAL.finditer` finds,
    from any place to any end."""
    from lc_compaction._preview import SIGNAL, _signal_matches

    text = "".join(pieces)
    pos = min(skip * len(text) // 40, len(text))
    endpos = max(pos, len(text) - cut * len(text) // 40)
    expected = [(m.span(), m.group()) for m in SIGNAL.finditer(text, pos, endpos)]
    assert [(m.span(), m.group()) for m in _signal_matches(text, pos, endpos)] == expected
