"""The progress note's text (`progress.py` writes it): a message's note found, read back, put in and taken out.

Vocabulary below every rule: the fact guard reads the identifiers a note lists (`split_line`), offload writes a
message without its note (`without_note`), and the running-task rule (`progress.py`) writes it (`with_note`).
A note is `markers.PROGRESS_PREFIX` and one line per call (`progress.call_line`), recognized by its text alone.
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
    fence,
    fenced_spans,
    is_progress_text,
    unfence,
)

__all__ = ["FACTS_LEAD", "NoteLine", "note_lines", "parse_line", "split_line", "with_note", "without_note"]

FACTS_LEAD = " | facts: "
"""Where a line's identifiers start (`progress.call_line`): they end the line."""

_RESULT_SIZE = re.compile(rf" -> [\d,]+ characters(?:, ({FAILURE_RE.pattern}))?: (?=<)")
_TERSE_FAILURE = re.compile(rf" -> ({FAILURE_RE.pattern})$")
"""The failure a terse line ends its call with (`_terse_line`, `terse_note`)."""
_ARGS_SIZE = re.compile(r"\.\.\. \[[\d,]+ characters of arguments\]\)")
_MORE = re.compile(r" \(\+(?:\d+ )?more\)$")


@dataclass(frozen=True)
class NoteLine:
    """The parts of a note line (`parse_line`): the call (`- name(arguments)`, a cut's size left out), the result's
    part without its size (`-> <fence>name: "start"</fence>[ | recall...]`, "" for a terse line), the tool named in
    the result's fence, the result's start (decoded), the identifiers listed after the fence (plain) and inside it
    (the result's), " (+n more)" when it ends the line, and the call's failure ("error (exit code 2)"; "" for a
    success)."""

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
        """The identifiers as the terse form writes them: `A; B; <untrusted_tool_data>name: C; D</...>[ (+n
        more)]`; "" when none."""
        parts = (self.plain, fence(self.from_tool, self.tool) if self.from_tool else "")
        listed = FACTS_SEPARATOR.join(x for x in parts if x)
        return listed + (self.more if listed else "")


def parse_line(line: str) -> NoteLine:
    line = _ARGS_SIZE.sub("...)", line, count=1)
    more = _MORE.search(line)
    more_text = more.group(0) if more else ""
    line = line[:more.start()] if more else line
    found = _RESULT_SIZE.search(line)
    if found is None:  # terse, or no result: the identifiers, if any, end the line
        at = line.find(FACTS_LEAD)
        call, listed = (line[:at], line[at + len(FACTS_LEAD):]) if at >= 0 else (line, "")
        failed = _TERSE_FAILURE.search(call)
        # a terse line lists them as `NoteLine.listed` writes them: its plain part may hold the fenced ones
        return NoteLine(call[:failed.start()] if failed else call, plain=listed, more=more_text,
                     failure=failed.group(1) if failed else "")
    rest = line[found.end():]
    spans = fenced_spans(rest)
    end = spans[0][1] if spans and spans[0][0] == 0 else 0
    piece, after = rest[:end], rest[end:]
    label, inner = unfence(piece) if piece else (None, "")
    try:
        start, k = json.JSONDecoder().raw_decode(inner)
    except ValueError:
        start, k = "", len(inner)
    from_tool = inner[k + len(FACTS_LEAD):] if inner.startswith(FACTS_LEAD, k) else ""
    at = after.find(FACTS_LEAD)
    after, plain = (after[:at], after[at + len(FACTS_LEAD):]) if at >= 0 else (after, "")
    result = " -> " + (fence(inner[:k], label) if label else piece) + after
    return NoteLine(line[:found.start()], result, label, start if isinstance(start, str) else "", plain, from_tool,
                 more_text, found.group(1) or "")


def split_line(line: str) -> tuple[str, str]:
    """A line of the note (`call_line`, or its terse form, `_terse_line`) cut in two: the call and its result's
    start, without the sizes of the result and of cut arguments (counts of characters, not identifiers), and the
    identifiers it lists, written as the terse form writes them: `A; B; <untrusted_tool_data>name: C;
    D</untrusted_tool_data>[ (+n more)]` (plain ones, then the result's, fenced; "" when none). A failed call's
    failure is left out with the sizes."""
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
    return text.split("\n")[1:] if text else []


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
    new = with_text_first(message, "\n".join([PROGRESS_PREFIX, *lines]))
    kwargs = dict(message.additional_kwargs or {})
    kwargs[MARK_KEY] = {**(kwargs.get(MARK_KEY) or {}), "progress_note": len(lines)}
    return message.model_copy(update={"content": new, "additional_kwargs": kwargs})
