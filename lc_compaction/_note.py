"""The progress note's text (`progress.py` writes it): a message's note found, read back, put in and taken out.

Vocabulary below every rule: the fact guard reads the identifiers a note lists (`split_line`), offload writes a
message without its note (`without_note`), and the running-task rule (`progress.py`) writes it (`with_note`).
A note is `markers.PROGRESS_PREFIX`, then its one fence (`NOTE_FENCE`) around one line per call
(`progress.call_line`), recognized by its text alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from lc_compaction._content import FAILURE_RE, OUTPUT_TEXT_BLOCKS, block_type, with_text_first
from lc_compaction._kinds import AI, kind
from lc_compaction.markers import (
    FACTS_SEPARATOR,
    MARK_KEY,
    PROGRESS_PREFIX,
    RECALL_TOOL_NAME,
    UNTRUSTED_DATA_FENCE,
    defang,
    fence,
    is_progress_text,
)

__all__ = ["FACTS_LEAD", "NOTE_FENCE", "NoteLine", "SAID_LEAD", "has_note", "note_lines", "parse_line", "split_line",
           "with_note", "without_note"]

FACTS_LEAD = " | facts: "
"""Where a line's identifiers from its result start (`progress.call_line`): after the result's start (a terse line:
after the call)."""

SAID_LEAD = " | said: "
"""Where a line's own identifiers start (those of the call's arguments and the assistant's text that the line does
not show): they end the line, before " (+n more)"."""

NOTE_FENCE = UNTRUSTED_DATA_FENCE
"""The note's one fence (issue 24): its lines sit between a line that is the opening string and one that is the
closing string, so what came from the results (their starts, the identifiers they held) is tool data without a
fence of its own on every line (about 14 tokens a line); a fold that appends lines moves only the closing line."""

_RESULT_SIZE = re.compile(rf" -> [\d,]+ characters(?:, ({FAILURE_RE.pattern}))?: (?=\")")
_TERSE_FAILURE = re.compile(rf" -> ({FAILURE_RE.pattern})$")
"""The failure a terse line ends its call with (`_terse_line`, `terse_note`)."""
_ARGS_SIZE = re.compile(r"\.\.\. \[[\d,]+ characters of arguments\]\)")
_MORE = re.compile(r" \(\+(?:\d+ )?more\)$")
_RECALL_LEAD = f" | {RECALL_TOOL_NAME}("


@dataclass(frozen=True)
class NoteLine:
    """The parts of a note line (`parse_line`): the call (`- name(arguments)`, a cut's size left out), the result's
    part without its size, its start fenced as the guard reads it (`-> <fence>name: "start"</fence>[ | recall...]`,
    "" for a terse line), the tool the line's result came from (the call's name; "tools" for a counted line), the
    result's start (decoded), the identifiers listed after `SAID_LEAD` (plain) and `FACTS_LEAD` (the result's),
    " (+n more)" when it ends the line, and the call's failure ("error (exit code 2)"; "" for a success)."""

    call: str
    result: str = ""
    tool: str | None = None
    start: str = ""
    plain: str = ""
    from_tool: str = ""
    more: str = ""
    failure: str = ""

    def terse_call(self) -> str:
        """The call, and its failure when it failed: `- name(arguments)[ -> error (...)]`."""
        return self.call + (f" -> {self.failure}" if self.failure else "")

    def listed(self) -> str:
        """The identifiers as the fact guard reads them (`split_line`): `A; B; <untrusted_tool_data>name: C;
        D</...>[ (+n more)]`; "" when none."""
        parts = (self.plain, fence(self.from_tool, self.tool) if self.from_tool else "")
        listed = FACTS_SEPARATOR.join(x for x in parts if x)
        return listed + (self.more if listed else "")

    def written(self) -> str:
        """The identifiers as a line ends with them: `[ | facts: C; D][ | said: A; B][ (+n more)]`."""
        return ids_text(self.from_tool, self.plain) + self.more


def ids_text(from_tool: str, plain: str) -> str:
    """The end of a line that lists `from_tool` (the result's identifiers, joined) and `plain` (its own): each
    after its lead (`FACTS_LEAD`, `SAID_LEAD`), "" for none."""
    return (f"{FACTS_LEAD}{from_tool}" if from_tool else "") + (f"{SAID_LEAD}{plain}" if plain else "")


def _tool_of(call: str) -> str:
    return "tools" if call.startswith("- [") else (call[2:].split("(", 1)[0] or "tool")


def parse_line(line: str) -> NoteLine:
    line = _ARGS_SIZE.sub("...)", line, count=1)
    more = _MORE.search(line)
    more_text = more.group(0) if more else ""
    line = line[:more.start()] if more else line
    at = line.rfind(SAID_LEAD)
    line, plain = (line[:at], line[at + len(SAID_LEAD):]) if at >= 0 else (line, "")
    found = _RESULT_SIZE.search(line)
    if found is None:  # terse, or no result: the identifiers, if any, end the line
        at = line.find(FACTS_LEAD)
        call, from_tool = (line[:at], line[at + len(FACTS_LEAD):]) if at >= 0 else (line, "")
        failed = _TERSE_FAILURE.search(call)
        call = call[:failed.start()] if failed else call
        return NoteLine(call, tool=_tool_of(call), plain=plain, from_tool=from_tool, more=more_text,
                        failure=failed.group(1) if failed else "")
    rest = line[found.end():]
    try:
        start, k = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        start, k = "", len(rest)
    after = rest[k:]
    at = after.find(_RECALL_LEAD)
    listed, tail = (after[:at], after[at:]) if at >= 0 else (after, "")
    from_tool = listed[len(FACTS_LEAD):] if listed.startswith(FACTS_LEAD) else ""
    call = line[:found.start()]
    tool = _tool_of(call)
    return NoteLine(call, " -> " + fence(rest[:k], tool) + tail, tool, start if isinstance(start, str) else "",
                    plain, from_tool, more_text, found.group(1) or "")


def split_line(line: str) -> tuple[str, str]:
    """A line of the note (`call_line`, or its terse form, `_terse_line`) cut in two, as the fact guard reads it:
    the call and its result's start (fenced as tool data, `markers.fence`: the note's lines are inside the note's
    one fence), without the sizes of the result and of cut arguments (counts of characters, not identifiers), and
    the identifiers it lists: `A; B; <untrusted_tool_data>name: C; D</untrusted_tool_data>[ (+n more)]` (plain ones,
    then the result's, fenced; "" when none). A failed call's failure is left out with the sizes."""
    parts = parse_line(line)
    return parts.call + parts.result, parts.listed()


def _note_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content.split("\n\n", 1)[0] if is_progress_text(content) else None
    for block in content:
        text = block.get("text") if isinstance(block, dict) and block_type(block) in OUTPUT_TEXT_BLOCKS else block
        if is_progress_text(text):
            return text
    return None


def note_lines(message: BaseMessage) -> list[str]:
    """The call lines of the progress note in `message` (empty when it holds none), as they were written."""
    text = _note_text(message.content) if kind(message) == AI else None
    lines = text.split("\n")[1:] if text else []
    if lines and lines[0] == NOTE_FENCE[0]:
        lines = lines[1:-1] if lines[-1] == NOTE_FENCE[1] else lines[1:]
    return lines


def has_note(message: BaseMessage) -> bool:
    """Whether `message` holds a progress note (without reading its lines: `note_lines`)."""
    return kind(message) == AI and _note_text(message.content) is not None


def without_note(message: AIMessage) -> AIMessage:
    """`message` without its progress note (its own content back); `message` itself when it holds none."""
    content = message.content
    if isinstance(content, str):
        if not is_progress_text(content):
            return message
        rest = content.split("\n\n", 1)
        new: Any = rest[1] if len(rest) > 1 else ""
    else:
        new = [b for b in content if not is_progress_text(b.get("text") if isinstance(b, dict) else b)]
        if len(new) == len(content):
            return message
    kwargs = dict(message.additional_kwargs or {})
    mark = {k: v for k, v in (kwargs.get(MARK_KEY) or {}).items() if k != "progress_note"}
    if mark:
        kwargs[MARK_KEY] = mark
    else:
        kwargs.pop(MARK_KEY, None)
    return message.model_copy(update={"content": new, "additional_kwargs": kwargs})


def with_note(message: AIMessage, lines: Sequence[str]) -> AIMessage:
    """A copy of `message` whose content starts (after its leading thinking blocks, before an OpenAI Responses
    reasoning item, which stays right before the item it pairs with: `_content.with_text_first`) with the progress
    note of `lines`; an earlier note in it is replaced. Marked `additional_kwargs["lc_compaction"]["progress_note"]`
    with the number of calls it names."""
    message = without_note(message)
    body = [NOTE_FENCE[0], *(defang(x) for x in lines), NOTE_FENCE[1]] if lines else []
    new = with_text_first(message, "\n".join([PROGRESS_PREFIX, *body]))
    kwargs = dict(message.additional_kwargs or {})
    kwargs[MARK_KEY] = {**(kwargs.get(MARK_KEY) or {}), "progress_note": len(lines)}
    return message.model_copy(update={"content": new, "additional_kwargs": kwargs})
