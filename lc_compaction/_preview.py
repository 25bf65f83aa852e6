"""The preview of a long tool result that a note keeps (a truncation note's, `strategies/truncate.py`): what of
the result a model needs when the rest is gone, within a bound in characters.

- A JSON result (an object or an array that `json.loads` reads): its scalar fields as `key: value` pairs, in
  order (`price: 136; seats: 109`, not bare `136; 109`; a list of scalars as `key: a, b, c`), as many as fit.
- Any other text, by lines: its first lines (the head) and its last ones (the tail: a test run's error and exit
  code sit at its END), and between them the lines that carry an error or an exit status (`Error`,
  `Exception`, `Traceback`, `FAILED`, `returncode`, `exit code`, ...: `SIGNAL`); a gap between two kept lines says
  how many lines it stands for (`[... 40 lines ...]`). Each line's whitespace is collapsed, and a long line is cut
  (`LINE_CHARS`).
- A text that fits the bound is kept whole (its lines' whitespace collapsed); a text of one line, its first
  `max_chars` characters, then `...` (as the note's start was before it kept lines).

The preview depends only on the text and the bound (no counter, no clock), so the same result gives the same
bytes. The work per result is bounded apart from C-level passes over the text (`str.count`, one regular
expression search of the head and one of the tail, `json.loads` for a text that starts like JSON): Python reads
at most `SIGNAL_LINES` matches, never a line at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

try:  # a dependency on CPython (as langsmith's, which langchain-core needs); PyPy has no wheel: `json` alone there
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

__all__ = ["GAP", "LINE_CHARS", "SIGNAL", "SIGNAL_LINES", "gap", "gapless", "line_count", "preview", "signal_lines"]

LINE_CHARS = 160
"""Characters of one line a preview keeps (whitespace collapsed); a longer one is cut and ends with `...`. A
traceback's error line or a pytest `FAILED` line is rarely longer (the SWE-agent results of the shared traces:
95% of the lines that carry an error are under 160 characters)."""

SIGNAL_LINES = 12
"""Lines that carry an error or an exit status read at most from the head of a text, and as many from its tail
(the last ones), before the bound chooses among them: what keeps the work per result bounded."""

SIGNAL = re.compile(r"(?m)^[^\n]{0,2000}?(?:Error\b|Exception\b|Traceback|FAILED|FAIL:|ERROR|[Ff]atal|"
                    r"returncode|[Ee]xit (?:code|status)|exited with|[0-9]+ (?:failed|errors?)\b|Errno)[^\n]{0,2000}")
"""A line that carries an error or an exit status (Python's tracebacks and exceptions, pytest's `FAILED` and
summary line, unittest's `FAIL:`, a shell's exit code, SWE-agent's `<returncode>`). Bounded repetitions: one
search of a region is linear in its length."""

_SIGNAL_ANCHORS = ("Err", "Exception", "Traceback", "FAIL", "ERROR", "atal", "returncode", "xit", " failed", " error")
"""A piece of text that every match of `SIGNAL`'s keywords holds (`Error` and `Errno` hold `Err`, `Exit code` and
`exited with` hold `xit`, `3 failed` holds ` failed`, ...): a line without any of them is no signal line, so
`_signal_matches` tries `SIGNAL` only on the lines that have one (found by `str.find`, at C speed), not on every
line."""


def _signal_matches(text: str, pos: int, endpos: int) -> Iterator[re.Match[str]]:
    """`SIGNAL.finditer(text, pos, endpos)`, the same matches: `SIGNAL` is tried (`match`, at the line's start,
    where `^` puts every match's start) only on the lines that hold one of `_SIGNAL_ANCHORS`, each anchor's next
    place found once (`str.find` from the place the search has reached)."""
    nexts = {a: text.find(a, pos, endpos) for a in _SIGNAL_ANCHORS}
    cur = pos
    while True:
        at = -1
        for anchor, p in nexts.items():
            if 0 <= p < cur:  # behind the search: its next place
                p = nexts[anchor] = text.find(anchor, cur, endpos)
            if p >= 0 and (at < 0 or p < at):
                at = p
        if at < 0:
            return
        start = text.rfind("\n", 0, at) + 1  # the start of the anchor's line
        m = SIGNAL.match(text, start, endpos) if start >= cur else None  # a line begun before `cur` matches not
        if m is not None:
            yield m
            cur = m.end()
        else:  # no match starts on this line: the next one
            newline = text.find("\n", at, endpos)
            if newline < 0:
                return
            cur = newline + 1


GAP = "[... {n:,} lines ...]"
"""Written in a preview where lines were left out, with how many."""

_GAP_RE = re.compile(r"\[\.\.\. [\d,]+ lines? \.\.\.\]")
_TAIL_CHARS = 8_000
"""Characters at the end of a text searched for its last signal lines (and at most as many at its start for the
first ones): the regions a preview reads lines from, beyond its head and tail."""


def line_count(text: str) -> int:
    """Lines in `text` (a final line break does not start one more)."""
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def gapless(preview_text: str) -> str:
    """`preview_text` with each gap marker (`GAP`) replaced by `[...]`: its line counts are counts, not
    identifiers (what the fact guard reads back from a note)."""
    return _GAP_RE.sub("[...]", preview_text) if "[... " in preview_text else preview_text


def quoted(preview_text: str) -> str:
    """`preview_text` as a note writes it: a JSON string (one line, its quotes and line breaks escaped), each line
    break followed by a space (`\\n ` in the JSON). A value at a line's start is then not glued to the escape:
    `\\nsrc/x.py:12` reads as `nsrc/x.py:12` to a whole-word test (the fact guard's presence rule, a model's
    tokenizer), `\\n src/x.py:12` as the path (a grep's or a traceback's lines start with what the next command
    needs). Read back with `json.loads`: the lines after the first start with that space."""
    return json.dumps(preview_text.replace("\n", "\n "), ensure_ascii=False)


def _squash(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 3] + "..."


def preview(text: str, max_chars: int) -> str:
    """The preview of `text` in at most `max_chars` characters (one line: its first `max_chars`, then `...`; see
    the module docstring); "" for 0.

    Raises:
        ValueError: `max_chars` < 0.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars: must be >= 0 characters, got {max_chars}")
    if not max_chars or not text:
        return ""
    lead = text.lstrip()[:1]
    if lead in ("{", "[") and len(text) > max_chars:
        data = _json(text)
        if isinstance(data, (dict, list)):
            return _pairs(data, max_chars)
    return _lines(text, max_chars)


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19
"""A run of 19 digits (in a text whose digits are all made 0): it may be an integer over 64 bits, which orjson
reads as a float (`json` as an int). A translation and a substring search: C speed, where a regular expression
tried at every digit cost more than orjson saves."""


def signal_lines(text: str) -> str:
    """The lines of `text` a next command most often needs, newest first, one per line: its lines that carry an
    error or an exit status (`SIGNAL`, from the end back) and its last three lines; "" for a text of one line or
    without any. What a list of its identifiers reads before the text in order (`progress.call_line`: a failing
    test's id, the `file.py:N` and the error type of a traceback sit at a test run's end)."""
    if "\n" not in text.strip():
        return ""
    tail = _numbered(text, _line_start_back(text, len(text), 3), len(text), 0)
    picked = [line for _, line in [*reversed(_signals(text, 0, len(text), 1)), *reversed(tail)]]
    return "\n".join(dict.fromkeys(picked))


def _json(text: str) -> Any:
    """`json.loads(text)`, or None when it raises: read by orjson first (the same values for what both read, a few
    times faster on a long listing), and by `json` when orjson refuses it (what `json` alone reads: `NaN`,
    `Infinity`, lone surrogates) or when the text has a run of 19 digits or more (an integer over 64 bits, which
    orjson reads as a float), so the answer is always `json`'s (`tests/test_preview.py`)."""
    if orjson is not None:
        try:
            raw = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: `json` reads it
            raw = b""
        if raw and _LONG_DIGITS not in raw.translate(_DIGITS_AS_ZERO):
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
    try:
        return json.loads(text)
    except ValueError:
        return None


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _squash(value)
    return json.dumps(value, ensure_ascii=False)


def _leaves(data: Any, key: str) -> Iterator[tuple[str, str]]:
    """(key, value) of the scalar leaves of a JSON value, in order; a list of scalars is one leaf (its values
    joined by ", "); a leaf of a list of objects keeps its own key."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, str(k))
    elif isinstance(data, list):
        if data and all(not isinstance(v, (dict, list)) for v in data):
            yield key, ", ".join(_scalar(v) for v in data)
        else:
            for v in data:
                yield from _leaves(v, key)
    else:
        yield key, _scalar(data)


def _pairs(data: Any, max_chars: int) -> str:
    out: list[str] = []
    size = 0
    more = " ..."
    for key, value in _leaves(data, ""):
        item = f"{key}: {value}" if key else value
        cost = len(item) + (2 if out else 0)
        if size + cost > max_chars - len(more):
            room = max_chars - len(more) - size - (2 if out else 0)
            if room >= 20 or not out:  # a long value is cut to the room left, not left out
                out.append(item[:max(0, room)])
            return ("; ".join(out) + more)[:max_chars]
        out.append(item)
        size += cost
    return "; ".join(out)


def gap(n: int) -> str:
    """The gap marker for `n` lines left out (`GAP`; "1 line" for one)."""
    return GAP.format(n=n).replace("[... 1 lines", "[... 1 line")


def _lines(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        joined = "\n".join(s for s in (" ".join(line.split()) for line in text.split("\n")) if s)
        if len(joined) <= max_chars:
            return joined
    if "\n" not in text.strip():  # one line: its start, as much as fits
        line = " ".join(text.split())
        return line if len(line) <= max_chars else line[:max_chars] + "..."
    total = line_count(text)
    head_end = _line_end(text, 0, 3)  # the first three lines, at most, and the last three
    tail_start = max(head_end, _line_start_back(text, len(text), 3))
    head = _numbered(text, 0, head_end, 1)
    tail = _numbered(text, tail_start, len(text), text.count("\n", 0, tail_start) + 1)
    signals = _signals(text, head_end, len(text), text.count("\n", 0, head_end) + 1)
    # the order lines are kept in: the first line, the last one, the signal lines from the end (a test run's
    # error, exit status and summary sit at its end), then the rest of the head and of the tail
    order: list[tuple[int, str]] = []
    for n, line in [*head[:1], *tail[-1:], *reversed(signals), *head[1:], *reversed(tail[:-1])]:
        if all(n != k for k, _ in order):
            order.append((n, line))
    chosen: list[tuple[int, str]] = []
    room = max_chars - len(gap(total)) - 1  # a gap at the end, at most
    for n, line in order:
        if not chosen and len(line) + 1 > room:  # the first line is cut to fit, never left out
            line = line[:max(0, room - 4)] + "..."
        if len(line) + 1 <= room:
            chosen.append((n, line))
            room -= len(line) + 1
    while chosen:  # the gaps between the lines kept: leave out the last kept until they fit too
        text_out = _render(sorted(chosen), total)
        if len(text_out) <= max_chars:
            return text_out
        chosen.pop()
    return _render([], total)[:max_chars]


def _render(lines: list[tuple[int, str]], total: int) -> str:
    out: list[str] = []
    previous = 0
    for n, line in lines:
        if n > previous + 1:
            out.append(gap(n - previous - 1))
        out.append(line)
        previous = n
    if previous < total:
        out.append(gap(total - previous))
    return "\n".join(out)


def _line_end(text: str, at: int, lines: int) -> int:
    """Where the `lines` lines from `at` end (after the last one's break)."""
    for _ in range(lines):
        k = text.find("\n", at)
        if k < 0:
            return len(text)
        at = k + 1
    return at


def _line_start_back(text: str, end: int, lines: int) -> int:
    """Where the last `lines` lines before `end` start."""
    at = end - 1 if text.endswith("\n", 0, end) else end
    for _ in range(lines):
        k = text.rfind("\n", 0, at)
        if k < 0:
            return 0
        at = k
    return at + 1


def _numbered(text: str, start: int, end: int, first: int) -> list[tuple[int, str]]:
    """The non-blank lines of `text[start:end]` (a few: the head or the tail) with their numbers, `first` the
    number of the first one."""
    out = []
    for k, line in enumerate(text[start:end].split("\n")):
        squashed = _squash(line)
        if squashed:
            out.append((first + k, squashed))
    return out


def _signals(text: str, start: int, end: int, first: int) -> list[tuple[int, str]]:
    """The signal lines between `start` and `end` (both at the start of a line; `first`: the number of the line
    at `start`): the first `SIGNAL_LINES` of the region's first `_TAIL_CHARS` characters and the last
    `SIGNAL_LINES` of its last ones, in order, numbered."""
    if end <= start:
        return []
    found: dict[int, str] = {}
    cut = max(start, end - _TAIL_CHARS)
    line, at = first, start
    for k, m in enumerate(_signal_matches(text, start, min(cut, start + _TAIL_CHARS))):
        if k >= SIGNAL_LINES:
            break
        line += text.count("\n", at, m.start())
        at = m.start()
        found[line] = _squash(m.group())
    tail = list(_signal_matches(text, cut, end))[-SIGNAL_LINES:]
    if tail:
        line, at = first + text.count("\n", start, tail[0].start()), tail[0].start()
        for m in tail:
            line += text.count("\n", at, m.start())
            at = m.start()
            found[line] = _squash(m.group())
    return sorted(found.items())
