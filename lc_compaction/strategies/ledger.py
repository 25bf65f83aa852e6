"""The deterministic ledger: a summary written without a model.

It lists, oldest first, what the evicted messages did: each user request (shortened), each tool call with its
name, its arguments and the size of its result (and the start of the result when it was an error), and each
assistant answer (shortened). The fact guard then appends the identifiers it left out. It is what a user reads
to know what the agent already did; it is the summary when no model is given, and the fallback when the model
fails, times out or answers nothing usable.

    Ledger of the earlier conversation (written by lc-compaction without a model):
    - User: Hi, I'd like to adjust my return flight for the trip from Houston to Denver. Could you help me ...
    - Tool get_user_details({"user_id": "sofia_kim_7287"}) -> 1,048 characters
    - Tool update_reservation_flights({"reservation_id": "OBUT9V", ...}) -> error: <untrusted_tool_data>
      update_reservation_flights: Error: not enough seats ...</untrusted_tool_data>
    - Assistant: It seems there are not enough seats available on flight HAT229. Would you like ...

The only tool output a ledger quotes, an error result, sits inside the data fence (`markers.UNTRUSTED_DATA_FENCE`),
attributed to its tool; `build_ledger`'s `protect` (the provenance guard) fences what else in an entry came from
tool results, and its `redact` (a user's PII redaction) applies to every entry.

A previous summary is merged, not nested: a previous ledger's entries are kept as entries, a model-written
summary's lines are kept under "Earlier summary:". When the ledger is over its bound (tokens), the oldest
entries go first, except the first user request, and one line says how many were left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction._content import arguments_text, content_text, is_invalid_call, tool_failure
from lc_compaction.markers import defang, fence, fenced_lines, is_summary, summary_text
from lc_compaction.facts import is_guard_line
from lc_compaction.structure import tool_calls_of, tool_pairs

LEDGER_HEADER = "Ledger of the earlier conversation (written by lc-compaction without a model):"
"""First line of every ledger; a later pass recognizes a previous ledger by it."""

REQUEST_CHARS = 300
"""Characters of a user request kept in its entry (about 75 tokens: two or three sentences, enough for the ask
and its identifiers; the fact guard keeps any identifier cut off)."""

ANSWER_CHARS = 200
"""Characters of an assistant answer kept in its entry (one or two sentences)."""

ARGS_CHARS = 200
"""Characters of a tool call's JSON arguments kept in its entry."""

ERROR_CHARS = 120
"""Characters of an error result kept in its entry (the error's first line, usually the reason)."""

OMITTED_ENTRY = "- [... {n} earlier entries left out to fit the summary's size ...]"
"""The line that replaces the entries dropped to fit the bound."""

EARLIER_SUMMARY = "Earlier summary:"
"""Heads the lines of a model-written previous summary kept in a ledger."""


def shorten(text: str, limit: int) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `limit` characters with " ..." when longer."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(0, limit)].rstrip() + " ..."


def _is_error(message: ToolMessage, text: str) -> bool:
    return tool_failure(message, text) is not None  # the status, a non-zero exit code, a traceback


def entries(messages: Sequence[BaseMessage]) -> list[str]:
    """One line per event of `messages` (oldest first): "- User: ...", "- Tool name(args) -> N characters",
    "- Assistant: ...". Summary messages contribute their entries (a ledger) or their lines (other summaries)."""
    results = {call: cast(ToolMessage, messages[t]) for t, call in tool_pairs(messages).items()}  # by position
    out: list[str] = []
    for i, m in enumerate(messages):
        if is_summary(m):
            out.extend(previous_entries(summary_text(m)))
        elif isinstance(m, (HumanMessage, SystemMessage)):
            text = content_text(m.content)
            if text.strip():
                out.append(f"- User: {defang(shorten(text, REQUEST_CHARS))}")
        elif isinstance(m, AIMessage):
            text = m.text  # text blocks only: never reasoning, signatures or tool-use blocks
            if text.strip():
                out.append(f"- Assistant: {defang(shorten(text, ANSWER_CHARS))}")
            for call in tool_calls_of(m):
                name = call.get("name") or "?"
                invalid = is_invalid_call(call)  # its raw argument string, marked
                args = defang(shorten(arguments_text(call.get("args") if invalid else call.get("args") or {}),
                                      ARGS_CHARS))
                note = " [malformed arguments]" if invalid else ""
                out.append(f"- Tool {name}({args}){note} -> "
                           f"{_result_note(results.get((i, call.get('id') or '')), name)}")
    return out


def _result_note(result: ToolMessage | None, tool: str) -> str:
    if result is None:
        return "no result"
    text = content_text(result.content)
    if _is_error(result, text):
        return f"error: {fence(shorten(text, ERROR_CHARS), result.name or tool)}"
    return f"{len(text):,} characters"


def previous_entries(text: str) -> list[str]:
    """The entries of a previous summary's text: a ledger's own entries (without its header), or the lines of a
    model-written summary under "Earlier summary:"; the guard's facts and said lines left out (the guard writes
    them again). Each line's fences are well-formed on their own (`markers.fenced_lines`), so dropping a line
    never leaves tool data outside its fence."""
    body = "\n".join(line for line in text.splitlines() if not is_guard_line(line))
    lines = [line for line in fenced_lines(body) if line.strip()]
    if lines and lines[0] == LEDGER_HEADER:
        return lines[1:]
    if not lines:
        return []
    return [EARLIER_SUMMARY, *(f"  {line.strip()}" for line in lines)]


def build_ledger(messages: Sequence[BaseMessage], *, max_tokens: int | None,
                 count_text: Callable[[str], int], protect: Callable[[str], str] | None = None,
                 redact: Callable[[str], str] | None = None) -> str:
    """The ledger of `messages` (a previous summary among them is merged), at most `max_tokens` tokens of
    `count_text` (None: no bound). Oldest entries are left out first, never the first user request; the header
    and the "left out" line always stay, so a tiny bound still gives a (short) ledger, never an empty one.
    `protect` (the provenance guard's `guard`) then `redact` (a callable on text) are applied to each entry
    before the bound, so the bound holds for what is written.

    Returns the ledger text (header included, no facts line: the fact guard adds it).
    """
    lines = entries(messages)
    if protect is not None:
        lines = [protect(line) for line in lines]
    if redact is not None:
        lines = [redact(line) for line in lines]
    text = _render(lines, 0)
    if max_tokens is None or count_text(text) <= max_tokens:
        return text
    first = next((i for i, line in enumerate(lines) if line.startswith("- User:")), None)
    pinned = [lines[first]] if first is not None else []
    rest = [line for i, line in enumerate(lines) if i != first]
    # keep the k most recent of `rest` (binary search on k: the rendering grows with k)
    lo, hi = 0, len(rest)
    while lo < hi:
        k = (lo + hi + 1) // 2
        if count_text(_render(pinned + rest[len(rest) - k:], len(rest) - k)) <= max_tokens:
            lo = k
        else:
            hi = k - 1
    return _render(pinned + rest[len(rest) - lo:], len(rest) - lo)


def _render(lines: Sequence[str], omitted: int) -> str:
    body = list(lines)
    if omitted:
        # the "left out" line goes where the dropped entries were: after the first request when it leads
        at = 1 if body and body[0].startswith("- User:") else 0
        body.insert(at, OMITTED_ENTRY.format(n=omitted))
    return "\n".join([LEDGER_HEADER, *body])
