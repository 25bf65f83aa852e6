"""What the summarizer reads: the evicted messages as readable text, and the prompts of one summary.

- `render_message` / `render_transcript`: one readable entry per message ("User: ...", "Assistant called
  name({json args})", "Tool result (name): ..."): no reprs, no base64, long tool results cut to a number of
  characters with the size of the rest.
- `render_input`: what fills the prompt template's `{messages}` (the earlier summary, then the conversation).
- `summary_prompts`: the prompts of one summary, within the input bound (tokens): one prompt when the messages
  fit (tool results cut shorter in turn, `TOOL_RESULT_CHARS`), else chunks of them, oldest first, each prompt
  carrying the summary so far, so the beginning is never dropped.
- `cut_to_tokens`: a text cut to a number of tokens with `CUT_MARKER` (an over-long reply, an earlier summary
  that leaves no room for any message).

Nothing here calls a model: `summary_prompts` is a generator that yields each prompt and is sent the summary
the model wrote for it (see `Summarize` in summarize.py, which drives it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction.markers import is_summary, summary_text
from lc_compaction._content import content_text

TOOL_RESULT_CHARS: tuple[int, ...] = (2000, 500, 0)
"""Characters of each tool result shown to the summarizer, tried in turn until the input fits its bound (0: only
the result's size). 2,000 characters (about 500 tokens) holds a typical JSON record whole; 500 a preview. The
fact guard keeps the identifiers of the part not shown."""

CHUNK_TOOL_RESULT_CHARS = 500
"""Characters of each tool result when the evicted part is summarized in chunks."""

MIN_CHUNK_TOKENS = 256
"""Smallest part of the input bound left for the messages of one chunk (tokens); `trim_tokens_to_summarize`
must leave at least this beside the prompt and the running summary."""

CUT_MARKER = "\n[... summary cut at {cap:,} tokens by lc-compaction ...]"
"""Appended where a reply over the output cap was cut (or where the server itself stopped at the cap)."""


def render_message(message: BaseMessage, tool_result_chars: int) -> str:
    """One message as readable text for the summarizer: "User: ...", "Assistant: ...", "Assistant called
    name({json args})", "Tool result (name): ..." (cut to `tool_result_chars` characters, with the size left out)."""
    if isinstance(message, ToolMessage):
        text = content_text(message.content)
        name = f" ({message.name})" if message.name else ""
        status = " [error]" if message.status == "error" else ""
        if len(text) <= tool_result_chars:
            return f"Tool result{name}{status}: {text}"
        if tool_result_chars <= 0:
            return f"Tool result{name}{status}: [{len(text):,} characters, not shown]"
        rest = len(text) - tool_result_chars
        return f"Tool result{name}{status}: {text[:tool_result_chars]} [... {rest:,} more characters]"
    if isinstance(message, AIMessage):
        lines = []
        if message.text.strip():
            lines.append(f"Assistant: {message.text.strip()}")
        for call in message.tool_calls:
            args = json.dumps(call.get("args") or {}, ensure_ascii=False)
            lines.append(f"Assistant called {call.get('name') or '?'}({args})")
        return "\n".join(lines) or "Assistant: (no text)"
    if is_summary(message):
        return f"Earlier summary: {summary_text(message)}"
    role = "User" if isinstance(message, HumanMessage) else "System" if isinstance(message, SystemMessage) else (
        getattr(message, "role", None) or message.type).capitalize()
    return f"{role}: {content_text(message.content)}"


def render_transcript(messages: Sequence[BaseMessage], tool_result_chars: int) -> list[str]:
    """The messages as readable text entries, one per message, oldest first (see `render_message`)."""
    return [render_message(m, tool_result_chars) for m in messages]


def render_input(previous_summary: str | None, entries: Sequence[str]) -> str:
    """What fills the prompt's `{messages}`: the previous summary (when there is one) and the entries."""
    parts = []
    if previous_summary:
        parts.append(f"<previous_summary>\n{previous_summary}\n</previous_summary>")
    parts.append("<conversation>\n" + "\n\n".join(entries) + "\n</conversation>")
    return "\n\n".join(parts)


def cut_to_tokens(text: str, cap: int, count_text: Callable[[str], int]) -> tuple[str, bool]:
    """`text` cut so that it, with `CUT_MARKER`, is at most `cap` tokens; (text, False) when it already fits.
    The cut falls on a whitespace when one is near (in the last fifth of the kept part)."""
    if count_text(text) <= cap:
        return text, False
    marker = CUT_MARKER.format(cap=cap)
    room = max(0, cap - count_text(marker))
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix within `room` tokens
        mid = (lo + hi + 1) // 2
        if count_text(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    prefix = text[:lo]
    space = max(prefix.rfind(" "), prefix.rfind("\n"))
    if space > lo * 4 // 5:
        prefix = prefix[:space]
    return prefix.rstrip() + marker, True


def summary_prompts(template: str, messages: Sequence[BaseMessage], previous_summary: str | None,
                    budget: int | None, count_text: Callable[[str], int]) -> Generator[str, str, str]:
    """The prompts of one summary: yields each prompt, is sent the model's summary of it, returns the summary.

    Args:
        template: the prompt, a `str.format` template with `{messages}` (filled by `render_input`).
        messages: the evicted conversation messages, oldest first.
        previous_summary: the earlier summaries' text, or None.
        budget: bound of each prompt, tokens by `count_text` (`trim_tokens_to_summarize`); None for no bound.
        count_text: the counter of text (tokens).

    One prompt when it fits `budget` with tool results cut to each of `TOOL_RESULT_CHARS` in turn; otherwise
    chunks of the messages (tool results cut to `CHUNK_TOOL_RESULT_CHARS`), oldest first, each prompt given the
    summary so far. An earlier summary too large to leave `MIN_CHUNK_TOKENS` for the messages is cut, with
    `CUT_MARKER` (never silently).
    """
    for chars in TOOL_RESULT_CHARS:
        prompt = template.format(messages=render_input(previous_summary, render_transcript(messages, chars)))
        if budget is None or count_text(prompt) <= budget:
            return (yield prompt)
    assert budget is not None
    entries = render_transcript(messages, CHUNK_TOOL_RESULT_CHARS)
    running = previous_summary
    if running and budget - count_text(template.format(messages=render_input(running, []))) < MIN_CHUNK_TOKENS:
        bare = count_text(template.format(messages=render_input("", [])))
        running, _ = cut_to_tokens(running, max(1, budget - MIN_CHUNK_TOKENS - bare - 16), count_text)

    def fits(chunk: list[str]) -> bool:
        return count_text(template.format(messages=render_input(running, chunk))) <= budget

    while entries:
        chunk, entries = _take_chunk(entries, fits)
        running = yield template.format(messages=render_input(running, chunk))
    return running or ""


def _take_chunk(entries: list[str], fits: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
    """The longest run of leading `entries` for which `fits` holds (at least one entry: a single entry too long
    for the room is split by characters and its rest left for the next chunk). Returns (chunk, rest)."""
    if not fits(entries[:1]):
        first = entries[0]
        keep = len(first)
        while keep > 1 and not fits([first[:keep] + " [continued]"]):
            keep = keep * 3 // 4
        rest = ("[continued] " if keep >= 64 else "") + first[keep:]  # the mark never outgrows the progress
        return [first[:keep] + " [continued]"], [rest, *entries[1:]]
    lo, hi = 1, len(entries)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(entries[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return entries[:lo], entries[lo:]
