"""What the summarizer reads: the evicted messages as readable text, and the prompts of one summary.

- `render_message` / `render_transcript`: one readable entry per message ("User: ...", "Assistant called
  name({json args})", "Tool result (name): <untrusted_tool_data>name: ...</untrusted_tool_data>"): no reprs,
  no base64, long tool results cut to a number of characters with the size of the rest. Tool results sit inside
  the data fence (`markers.UNTRUSTED_DATA_FENCE`), attributed to their tool, as in the summary; fence strings
  inside any message are neutralized first, so no message can open or close one. An optional `redact` (a
  callable on text: a user's PII redaction) is applied to every message's text before it is rendered.
- `render_input`: what fills the prompt template's `{messages}` (the earlier summary, then the conversation).
- `summary_prompts`: the prompts of one summary, within the input bound (tokens): one prompt when the messages
  fit (tool results cut shorter in turn, `TOOL_RESULT_CHARS`), else chunks of them, oldest first, each prompt
  carrying the summary so far, so the beginning is never dropped.
- `cut_to_tokens`: a text cut to a number of tokens with `CUT_MARKER` (an over-long reply, an earlier summary
  that leaves no room for any message); a fence the cut falls in is closed. A chunk that splits one entry
  closes and reopens its fence the same way (`markers.split_fenced`).

Nothing here calls a model: `summary_prompts` is a generator that yields each prompt and is sent the summary
the model wrote for it (see `Summarize` in summarize.py, which drives it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction._content import content_text, is_invalid_call
from lc_compaction.markers import UNTRUSTED_DATA_FENCE, defang, fence, is_summary, split_fenced, summary_text
from lc_compaction.facts import tool_names, tool_of
from lc_compaction.structure import tool_calls_of

Redact = Callable[[str], str]
"""A redaction hook: text in, the text to show out (e.g. e-mail addresses replaced by a placeholder)."""

TOOL_RESULT_CHARS: tuple[int, ...] = (2000, 500, 0)
"""Characters of each tool result shown to the summarizer, tried in turn until the input fits its bound (0: only
the result's size). 2,000 characters (about 500 tokens) holds a typical JSON record whole; 500 a preview. The
fact guard keeps the identifiers of the part not shown."""

CHUNK_TOOL_RESULT_CHARS = 500
"""Characters of each tool result when the evicted part is summarized in chunks."""

MIN_CHUNK_TOKENS = 256
"""Smallest part of the input bound left for the messages of one chunk (tokens), and for the summary so far beside
them (an earlier summary shortened to it, the replies to the chunks capped to it: `summary_prompts`); with less,
the evicted part is not summarized in chunks (`NoRoomError`: the ledger is written instead)."""


class NoRoomError(ValueError):
    """The input bound leaves too little room to summarize the evicted part in chunks (`summary_prompts`): fewer
    than `MIN_CHUNK_TOKENS` for a chunk's messages and as many for the summary so far beside the prompt. Depends on
    the history (whether the evicted part fits one prompt), so it is met at run time, never at construction:
    `Summarize` writes the ledger instead and reports why."""

CUT_MARKER = "\n[... summary cut at {cap:,} tokens by lc-compaction ...]"
"""Appended where a reply over the output cap was cut (or where the server itself stopped at the cap)."""


def render_message(message: BaseMessage, tool_result_chars: int, *, names: dict[Any, str] | None = None,
                   redact: Redact | None = None) -> str:
    """One message as readable text for the summarizer: "User: ...", "Assistant: ...", "Assistant called
    name({json args})", "Tool result (name): <untrusted_tool_data>name: ...</untrusted_tool_data>" (cut to
    `tool_result_chars` characters, with the size left out); an invalid tool call with its raw arguments and
    "[malformed arguments]". `names`: the tool names of the calls (`facts.tool_names`), for a result that does not
    carry its tool's name. `redact` is applied to the message's
    text (and arguments)."""
    def shown(text: str) -> str:
        return defang(redact(text) if redact is not None else text)

    if isinstance(message, ToolMessage):
        text = content_text(message.content)
        tool = tool_of(message, names or {})
        header = f"Tool result ({tool})" + (" [error]" if message.status == "error" else "")
        if len(text) <= tool_result_chars:
            return f"{header}: {fence(shown(text), tool)}"
        if tool_result_chars <= 0:
            return f"{header}: [{len(text):,} characters, not shown]"
        rest = len(text) - tool_result_chars
        return f"{header}: {fence(shown(text[:tool_result_chars]), tool)} [... {rest:,} more characters]"
    if isinstance(message, AIMessage):
        lines = []
        if message.text.strip():
            lines.append(f"Assistant: {shown(message.text.strip())}")
        for call in tool_calls_of(message):  # invalid calls too: their raw arguments, marked
            if is_invalid_call(call):
                raw = call.get("args") or ""
                lines.append(f"Assistant called {call.get('name') or '?'}({shown(raw)}) [malformed arguments]")
            else:
                args = json.dumps(call.get("args") or {}, ensure_ascii=False)
                lines.append(f"Assistant called {call.get('name') or '?'}({shown(args)})")
        return "\n".join(lines) or "Assistant: (no text)"
    if is_summary(message):
        text = summary_text(message)
        return f"Earlier summary: {redact(text) if redact is not None else text}"
    role = "User" if isinstance(message, HumanMessage) else "System" if isinstance(message, SystemMessage) else (
        getattr(message, "role", None) or message.type).capitalize()
    return f"{role}: {shown(content_text(message.content))}"


def render_transcript(messages: Sequence[BaseMessage], tool_result_chars: int, *,
                      redact: Redact | None = None) -> list[str]:
    """The messages as readable text entries, one per message, oldest first (see `render_message`)."""
    names = tool_names(messages)
    return [render_message(m, tool_result_chars, names=names, redact=redact) for m in messages]


def render_input(previous_summary: str | None, entries: Sequence[str]) -> str:
    """What fills the prompt's `{messages}`: the previous summary (when there is one) and the entries."""
    parts = []
    if previous_summary:
        parts.append(f"<previous_summary>\n{previous_summary}\n</previous_summary>")
    parts.append("<conversation>\n" + "\n\n".join(entries) + "\n</conversation>")
    return "\n\n".join(parts)


def cut_to_tokens(text: str, cap: int, count_text: Callable[[str], int]) -> tuple[str, bool]:
    """`text` cut so that it, with `CUT_MARKER`, is at most `cap` tokens; (text, False) when it already fits.
    The cut falls on a whitespace when one is near (in the last fifth of the kept part); a fence it falls in is
    closed before the marker."""
    if count_text(text) <= cap:
        return text, False
    marker = CUT_MARKER.format(cap=cap)
    close = UNTRUSTED_DATA_FENCE[1]
    room = max(0, cap - count_text(marker) - (count_text(close) if UNTRUSTED_DATA_FENCE[0] in text else 0))
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix within `room` tokens
        mid = (lo + hi + 1) // 2
        if count_text(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    space = max(text.rfind(" ", 0, lo), text.rfind("\n", 0, lo))
    if space > lo * 4 // 5:
        lo = space
    prefix, _ = split_fenced(text, lo)  # a fence the cut falls in is closed (room was left for the closing)
    return prefix.rstrip() + marker, True


def summary_prompts(template: str, messages: Sequence[BaseMessage], previous_summary: str | None,
                    budget: int | None, count_text: Callable[[str], int], *,
                    redact: Redact | None = None,
                    report: dict[str, Any] | None = None) -> Generator[tuple[str, int | None], str, str]:
    """The prompts of one summary: yields each prompt with the cap of its reply (tokens; None: the summary's own
    cap), is sent the model's summary of it, returns the summary.

    Args:
        template: the prompt, a `str.format` template with `{messages}` (filled by `render_input`).
        messages: the evicted conversation messages, oldest first.
        previous_summary: the earlier summaries' text, or None.
        budget: bound of each prompt, tokens by `count_text` (`trim_tokens_to_summarize`); None for no bound.
        count_text: the counter of text (tokens).
        redact: applied to every message's text and to the earlier summary before they are rendered.
        report: when given, `report["previous_summary_cut"]` is set to `{"tokens_before": n, "tokens_after": m}`
            when the earlier summary is shortened.

    One prompt when it fits `budget` with tool results cut to each of `TOOL_RESULT_CHARS` in turn; otherwise
    chunks of the messages (tool results cut to `CHUNK_TOOL_RESULT_CHARS`), oldest first, each prompt given the
    summary so far, whose reply is capped so that it leaves `MIN_CHUNK_TOKENS` for the next chunk. An earlier
    summary too large to leave them is shortened to that cap, with `CUT_MARKER` (never silently: `report`).

    Raises:
        NoRoomError: chunks are needed and `budget` leaves fewer than `MIN_CHUNK_TOKENS` twice beside the prompt
            (the messages of a chunk and the summary so far), before any prompt is yielded.
    """
    if previous_summary and redact is not None:
        previous_summary = redact(previous_summary)
    for chars in TOOL_RESULT_CHARS:
        entries = render_transcript(messages, chars, redact=redact)
        prompt = template.format(messages=render_input(previous_summary, entries))
        if budget is None or count_text(prompt) <= budget:
            return (yield prompt, None)
    assert budget is not None
    entries = render_transcript(messages, CHUNK_TOOL_RESULT_CHARS, redact=redact)
    bare = count_text(template.format(messages=render_input(None, [])))
    tags = max(0, count_text(template.format(messages=render_input("x", []))) - bare - count_text("x"))
    room = budget - bare - tags - MIN_CHUNK_TOKENS  # for the summary so far, beside a chunk of the messages
    running = previous_summary
    if room < MIN_CHUNK_TOKENS:
        raise NoRoomError(f"trim_tokens_to_summarize={budget} leaves {max(0, budget - bare)} tokens beside the "
                          f"{bare}-token prompt: too few to summarize the evicted messages in chunks (each needs "
                          f"{MIN_CHUNK_TOKENS} tokens for its messages and {MIN_CHUNK_TOKENS} for the summary so "
                          "far)")
    if running and count_text(running) > room:
        before = count_text(running)
        running, _ = cut_to_tokens(running, room, count_text)
        if report is not None:
            report["previous_summary_cut"] = {"tokens_before": before, "tokens_after": count_text(running)}

    def fits(chunk: list[str]) -> bool:
        return count_text(template.format(messages=render_input(running, chunk))) <= budget

    while entries:
        chunk, entries = _take_chunk(entries, fits)
        running = yield template.format(messages=render_input(running, chunk)), (room if entries else None)
    return running or ""


def _take_chunk(entries: list[str], fits: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
    """The longest run of leading `entries` for which `fits` holds (at least one entry: a single entry too long
    for the room is split by characters, a fence it splits closed and reopened, and its rest left for the next
    chunk). Returns (chunk, rest)."""
    if not fits(entries[:1]):
        first = entries[0]
        keep = len(first)
        while keep > 1 and not fits([split_fenced(first, keep)[0] + " [continued]"]):
            keep = keep * 3 // 4
        head, tail = split_fenced(first, keep)
        rest = ("[continued] " if keep >= 64 else "") + tail  # the mark never outgrows the progress
        return [head + " [continued]"], [rest, *entries[1:]]
    lo, hi = 1, len(entries)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(entries[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return entries[:lo], entries[lo:]
