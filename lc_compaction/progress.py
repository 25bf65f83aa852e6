"""The running task keeps its progress: while a request's tool loop runs, none of its tool calls leaves the input.

Words: the *running request* is the latest user request while its exchange has not answered yet (its last
assistant step ends with tool results: the model is about to be called with them). Its *loop* is its assistant
steps (`running_steps`). An agent whose model no longer sees which tools it already called calls them again, and
again (issue 12: `GraphRecursionError` in `create_agent`).

The rule, whose one home is this module (`LadderState.removable_exchanges` never lists the loop; `DropOldExchanges`
and `Summarize` call `keep_progress` after their own work):

1. No strategy removes or summarizes a step of the loop.
2. Its old results become one-line notes first: `TruncateToolResults`, the first rung, reaches them in the second
   pass, where the kept part shrinks to the most recent step.
3. Only when the history with those notes is still above the *goal* (the policy's target; the second pass runs only
   when the history is over the budget, above the trigger or above the target; a loop folded before has a trigger of
   its own under the default one, `loop_trigger`, and then folds as deep as the budget would make it) are the loop's
   oldest steps folded: as few as bring it under the goal (the target, or in a loop that is most of the history the
   deeper `CompactionPolicy.loop_goal`; issue 24: a compaction that stops just under the limit leaves no headroom, so
   the next tool result triggers again and every compaction rewrites the prefix: on the shared coding runs, most
   compactions came right after another); when no number of them can, the most that bring it under the limit; when
   none can, as few as make it fit the budget (all of them if nothing less does). The most recent step and pinned
   steps are never folded. When the loop's first assistant message starts with a thinking block, the loop keeps a
   thinking-first assistant message first (Anthropic: the active turn's must lead with its thinking block,
   unmodified; earlier ones may be dropped): a fold takes that first step only into a step that starts with its own
   thinking block, whose thinking stays as it is (`_Folds.plan`), and only when keeping the first step cannot do what
   folding it does (bring the history under the limit, or make it fit the budget, or, when nothing makes it fit, save
   the most). Over the budget, folding goes on while a fold still saves tokens.
4. The folded steps become ONE progress note that names every call, one line each (rule 5 bounds it):
   `- tool({"arg": ...}) -> 5,480 characters: "start of the result..." | facts: A; B` (`call_line`). What came
   from the results is tool data: the note's lines sit inside one fence (`markers.UNTRUSTED_DATA_FENCE`, its
   opening and closing strings on lines of their own, `_note.NOTE_FENCE`), not one per line (issue 24: the fence
   strings and the tool's name cost about 14 tokens a line, a coding loop's note about 1,000). Nothing is
   removed silently.
   The strategy that folds (`DropOldExchanges`, `Summarize`) passes its fact guard, which adds to each line the
   identifiers of what it folds that the line does not show (`| facts: ...` for the result's, `| said: ...` for
   the call's own; a truncated result's are those its note listed), as it does to a summary. With offload on, a
   line whose result is kept in the store names the call that reads it back.
5. The note is bounded (issue 24: a note that names a hundred calls in full becomes the history, and every later
   compaction rewrites it): a fold writes it in at most `NOTE_SHARE` of the budget, making its oldest lines
   shorter, each step only as far as needed (`bounded_lines`): they lose their result's size and start (the call
   and its identifiers stay), then, all but the newest `KEPT_FACTS_LINES`, their identifiers (the line says how
   many it left out: " (+n more)"); only when even call-only lines would take more than `HARD_NOTE_SHARE` of the
   budget are the oldest counted into one line (`- [37 earlier calls: bash x35, edit x2; 3 failed] | facts:
   ...`), which says how many calls, by tool, how many failed, and keeps the newest of their identifiers.
6. When even every step that may go folded leaves the history over the budget, the note's oldest lines lose their
   result's size and start and keep the call and its identifiers, as few as make it fit (`_fit_note`): before the
   last resort, which cuts the note before the newest step (when that step takes at most half the budget) and
   makes the whole note terse.

Where the note goes, and why there: into the content of the first `AIMessage` that remains after the folded steps
(the assistant message whose tool calls come next), as its first text, after any leading thinking blocks. Every
provider accepts that history, because the roles and the tool blocks are exactly those of a history from which
whole steps were removed: no new message is added. A standalone `AIMessage` before the next `AIMessage` with tool
calls would break Gemini's rule that a tool call follows a user or tool turn; a new `HumanMessage` right after the
request would put two user turns side by side (chat templates that require alternating roles reject it); and a
synthetic tool call (a call to a "progress" tool with the note as its result) names a tool the model was not
given, which some providers reject and which a model may try to call. Anthropic requires an assistant message's
thinking blocks first, so the note goes after them; an OpenAI Responses reasoning item must stay right before the
item it pairs with (its call or its message), so the note goes before it (`_content.with_text_first`, which also
covers langchain-openai's v0.3 layout); the thinking and reasoning blocks themselves are not changed.

The note is byte-stable: its text is `markers.PROGRESS_PREFIX` and one line per call, in the order the calls were
made, built only from the calls and their results (no counters, times or unordered sets). A later call that folds
more takes the earlier note's lines as they are (unless the bound, rule 5, shortens the oldest, or rule 6 or the
last resort must: the history cannot be sent as it is) and appends the new ones (the note moves to the new first
remaining assistant message, and the one it leaves gets its own content back). The note is recognized by its text
alone, so this also works on a history stored as plain role/content JSON. It counts in the budget like any text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage

from lc_compaction._content import (
    content_text,
    starts_with_thinking,
    tool_failure,
)
from lc_compaction._kinds import AI, TOOL, kind
from lc_compaction._memo import Bounded, remembers
from lc_compaction._presence import Presence
from lc_compaction._preview import gapless, preview, quoted, signal_lines
from lc_compaction.markers import (
    FACTS_SEPARATOR,
    MARK_KEY,
    PROGRESS_PREFIX,
    defang,
    fence,
    fenced_spans,
    unfence,
    RECALL_TOOL_NAME,
    read_truncation_note,
    result_parts,
)
from lc_compaction._note import (
    FACTS_LEAD,
    SAID_LEAD,
    NoteLine,
    has_note,
    ids_text,
    note_lines,
    parse_line,
    split_line,
    with_note,
    without_note,
)
from lc_compaction.facts import FactGuard, Identifier, choose, contains, fits_chars, without_keys
from lc_compaction.structure import Step, is_request, running_steps, split_exchanges

if TYPE_CHECKING:
    from lc_compaction.ladder import LadderState

__all__ = ["ARGS_CHARS", "FACTS_CHARS", "PREVIEW_CHARS", "call_line", "counted_note", "fold_steps", "keep_progress",
           "loop_trigger",
           "note_lines",
           "running_steps", "split_line", "terse_note", "with_note", "without_note"]

PREVIEW_CHARS = 100
"""Characters of a result's preview shown in its line of the note (`_preview.preview`: a JSON result's `key: value`
pairs; a text's first and last lines and those that carry an error or an exit status, with how many lines each
gap stands for): enough to recognize a record or an error, half of `TruncateToolResults.preview_chars` (the note
holds many calls, a truncation one)."""

ARGS_CHARS = 300
"""Characters of a call's arguments (JSON) shown in its line; longer arguments are cut there, and the line says
their full size (a `write_file` content, say)."""

FACTS_CHARS = 300
"""Characters of identifiers a line lists at most (`call_line`, when the strategy that folds passes its fact guard):
the longest list the 40 tau-bench airline conversations of the shared traces needed, replayed at 8,000 tokens
with the summarizer alone, was 144 characters, and with the default ladder at 4,000 tokens 243; the bound keeps an
identifier-dense result (a table of codes: AgentDojo's file listings and inboxes need up to 2,617) from making the
note as large as the result."""

# ------------------------------------------------------------------------------------------------ the note's text

LINE_CACHE = 4_096
"""Progress note lines remembered (`call_line`, with the built-in guard): a history folded again from the same
messages (the view mode, a policy built per request) makes the same lines, each a read of its call's arguments and
its result's start."""
LINE_CACHE_CHARS = 8_000_000
"""Characters of the texts the remembered lines were made from (arguments, earlier lines, result starts: the keys
hold them), at most; the bound of the truncation notes' cache (`strategies.truncate.NOTE_CACHE_CHARS`)."""

_SHARED_LINES: Bounded[str] = Bounded(LINE_CACHE, LINE_CACHE_CHARS)
"""The lines `call_line` made with the built-in guard, in this process. Forgotten by `_memo.clear`."""
remembers(_SHARED_LINES.clear)


def _result_facts(result: BaseMessage) -> tuple[int, str, str, str | None]:
    """(size in characters, start of the text, identifiers listed, failure) of a tool result as it was before any
    cut: a truncation note (ours, marked or recognized by its text: `markers.read_truncation_note`) gives the
    original size, start and failure it recorded, and the identifiers it lists (their fenced text, without the
    tool's name); a result cut in place by the last resort or previewed when it arrived (offload on) gives its
    original size, what is left of its text, the identifiers its marker lists (`markers.result_parts`: never the
    marker's sizes, store key or recall instruction) and the failure its mark recorded (`shorten.shorten`). The failure
    is `_content.tool_failure`'s phrase ("error", "error (exit code 2)", ...), None for a success."""
    text = content_text(result.content)
    meta = result.response_metadata.get(MARK_KEY) if isinstance(result.response_metadata, dict) else None
    size = meta.get("original_chars") if isinstance(meta, dict) else None
    recorded = meta.get("failure") if isinstance(meta, dict) and isinstance(meta.get("failure"), str) else None
    note = read_truncation_note(text)
    if note is not None:
        return (note.original_chars, note.start, note.identifiers,
                note.failure or recorded or tool_failure(result, note.start))
    own, listed = result_parts(text)  # an arrival preview's or a cut's own text and list, not their words
    return (size if isinstance(size, int) else len(own)), own, listed, recorded or tool_failure(result, own)


def call_line(call: dict[str, Any], result: BaseMessage | None, *, guard: FactGuard | None = None, said: str = "",
              known: str | Presence = "", recall: str | None = None) -> str:
    """One line of the note (no newline in it):
    `- name(arguments as JSON) -> N characters[, error[ (exit code N)]]: "start of the result"[ | facts: B; C][ |
    said: A]`; ", error..." says the call failed (`_content.tool_failure`: the result's status "error", a non-zero
    exit code or return code, a traceback), and every terser form of the line keeps it (`_terse_line`,
    `terse_note`: `- name(arguments) -> error[ (...)]`). What came from the result is tool data: the note's lines
    sit inside its one fence (`_note.with_note`, `markers.UNTRUSTED_DATA_FENCE`), as in a summary (the note is in
    the assistant's voice, and a tool's text must not read as the assistant's own words), so the line has the
    fence strings in it neutralized (`markers.defang`) and no fence of its own.

    `call` is an entry of `AIMessage.tool_calls` (or `invalid_tool_calls`, whose arguments are a string); `result`
    the ToolMessage that answered it (None: "no result"). With a `guard` (the fact guard of the strategy that folds:
    the summarizer's, `DropOldExchanges`'), the line also lists the identifiers (ids, codes, numbers, dates,
    amounts, e-mails, URLs, paths) of the arguments, the result (of a truncated result, those its note lists too)
    and `said` (the text of the assistant message that made the call) that neither the line nor `known` (the
    note's earlier lines, as a text or as a `_presence.Presence` that grows a line at a time) holds, at most
    `FACTS_CHARS` characters of them (`FactGuard.first`: chosen by `facts.choose`, one of each shape a round, so a
    log's timestamps do not push out its rare ids): those only the result holds after its start (`FACTS_LEAD`),
    the others after `SAID_LEAD`; " (+n more)" ends a line that could not list them all. With `recall` (the result's
    store key, offload on: `LadderState.recall_key`), the line also names the call that reads the whole result back:
    `| recall_tool_result(tool_call_id="...")`. `split_line` reads a line back.

    A function of the call's name and arguments, what the result gives (`_result_facts`), `said`, the text of
    `known` and `recall`: with the built-in guard (`FactGuard.builtin`), the lines made are remembered by these
    (`_SHARED_LINES`), so a history folded again (the view mode, a new policy) does not read its calls again."""
    facts = _result_facts(result) if result is not None else None
    if guard is None or not guard.builtin:
        return _call_line(call, facts, guard, said, known, recall)
    args = call.get("args")
    args_text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
    known_text = known.text() if isinstance(known, Presence) else known
    key = (call.get("name"), isinstance(args, str), args_text, facts, said, known_text, recall)
    line = _SHARED_LINES.items.get(key)
    if line is None:
        line = _call_line(call, facts, guard, said, known, recall)
        _SHARED_LINES.put(key, len(args_text) + len(known_text) + (len(facts[1]) if facts else 0), line)
    return line


def _call_line(call: dict[str, Any], facts: tuple[int, str, str, str | None] | None, guard: FactGuard | None,
               said: str, known: str | Presence, recall: str | None) -> str:
    """`call_line`, made: `facts` is `_result_facts` of the result (None: no result)."""
    args = call.get("args")
    text = " ".join(args.split()) if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
    if len(text) > ARGS_CHARS:
        text = f"{text[:ARGS_CHARS]}... [{len(text):,} characters of arguments]"
    name = call.get("name") or "?"
    head = f"- {name}({text})"
    full = listed = tail = ""
    if facts is None:
        head += " -> no result"
    else:
        size, start, listed, failure = facts
        full = start
        error = f", {failure}" if failure else ""
        head += f" -> {size:,} characters{error}: " + quoted(preview(start, PREVIEW_CHARS))
        if recall is not None:
            tail = f" | {RECALL_TOOL_NAME}(tool_call_id={json.dumps(recall)})"
    line = defang(head + tail)
    if guard is None:
        return line
    earlier = known if isinstance(known, Presence) else Presence(known)
    in_line = Presence(line)

    def seen(i: Identifier) -> bool:  # in the note's earlier lines or in this line (`known`, a newline, `line`)
        if "\n" in i.value:
            return contains(f"{earlier.text()}\n{line}", i)
        return not (earlier.lacks(i) and in_line.lacks(i))  # most are in neither: `lacks` tells at once

    args_text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
    own = f"{said}\n{args_text}"
    values: set[str] = set()

    def new(i: Identifier) -> bool:
        if i.value.casefold() in values or seen(i):
            return False
        values.add(i.value.casefold())
        return True

    # the first identifiers of the call and the result's start, then those a truncated result's note lists
    # (the result's error and exit-status lines and its last lines first: `_preview.signal_lines`)
    signals = signal_lines(full) if facts is not None else ""
    shown, left = guard.first(f"{own}\n{signals}\n{full}" if signals else f"{own}\n{full}", new, FACTS_CHARS,
                              then=[Identifier(v, "carried") for v in listed.split(FACTS_SEPARATOR) if v])
    if not shown and left == 0:
        return line
    # the identifiers only the result holds are the result's (after its start), the others the call's own
    in_own = Presence(own)
    from_tool = {v for v in shown if v not in in_own and facts is not None}
    plain = [v for v in shown if v not in from_tool]
    fenced = [v for v in shown if v in from_tool]
    more = f" (+{left} more)" if left else ""
    return defang(head + (f"{FACTS_LEAD}{FACTS_SEPARATOR.join(fenced)}" if fenced else "") + tail
                  + (f"{SAID_LEAD}{FACTS_SEPARATOR.join(plain)}" if plain else "") + more)


def terse_note(message: AIMessage) -> AIMessage:
    """`message` with its progress note's lines cut to the call itself (`- name(arguments)`, the arguments to
    `TERSE_ARGS_CHARS` characters, without the result's size, start and facts), and its failure when it failed
    (`- name(arguments) -> error (exit code 2)`: a failed call never reads like a success): what the last resort
    does before cutting the note (`shorten.last_resort`), so that every call stays named when a window is too small
    for the full lines. Later folds extend the terse lines as usual. (Before that, `keep_progress` may already have
    cut the oldest lines to the call and its facts.)"""
    lines = note_lines(message)
    if not lines:
        return message
    return with_note(message, [_bare_line(line) if line.startswith("- ") else line for line in lines])


def counted_note(message: AIMessage, fits: Callable[[AIMessage], bool]) -> AIMessage:
    """`message` with its progress note's oldest lines counted into one line (`COLLAPSED_RE`: how many calls by
    tool, how many failed), as few as make `fits(new message)` true, all but the newest when none does: what the
    last resort does to a note before cutting its text (`shorten.last_resort`), so that every call stays named or
    counted. `message` itself when its note has fewer than two lines."""
    lines = note_lines(message)
    first = 1 if lines and COLLAPSED_RE.match(lines[0]) else 0
    if len(lines) - first < 2:
        return message

    def counted(j: int) -> AIMessage:
        return with_note(message, [_collapse(lines[:j], lines[:j], None), *lines[j:]])

    return _fewest(first + 1, len(lines) - 1, counted, fits)


T = TypeVar("T")


def _fewest(lo: int, hi: int, attempt: Callable[[int], T], fits: Callable[[T], bool]) -> T:
    """`attempt(j)` for the smallest j in [lo, hi] whose attempt `fits`, `attempt(hi)` when none does; `fits` is
    monotone in j (more lines shortened never fit worse): a binary search, O(log n) attempts."""
    best = attempt(hi)
    if fits(best):
        while lo < hi:
            mid = (lo + hi) // 2
            tried = attempt(mid)
            if fits(tried):
                hi, best = mid, tried
            else:
                lo = mid + 1
    return best


TERSE_ARGS_CHARS = 100
"""Characters of a call's arguments a terse line keeps (`terse_note`): enough to tell the calls of a loop apart
(`bash({"command": "python -m pytest tests/test_x.py -x"`), short enough that a long coding loop's every call
stays named in a small window (a 4,000-token window, 60 calls of a SWE-bench run: the shared traces). Measured on
the shared SWE-bench runs at 8,000 tokens (the next command's identifiers the sent history lacks, of 3,963:
`benchmarks/bill.py`): 210 with 60 characters, 209 with 80, 184 with 100, 174 with 120 (an agent's next command
reuses the names its earlier scripts wrote); the bill and the tau-bench identifiers at 4,000 tokens are unchanged
or better with 100 (46 then 40 (call, identifier) pairs missing of 21,801)."""


def _bare_line(line: str) -> str:
    """A line cut to its call and its failure (`terse_note`), the call's arguments to `TERSE_ARGS_CHARS`
    characters (then "...)")."""
    failure = parse_line(line).failure
    call = line.split(" -> ", 1)[0].split(FACTS_LEAD, 1)[0].split(SAID_LEAD, 1)[0]
    head, paren, args = call.partition("(")
    if paren and len(args) > TERSE_ARGS_CHARS + 1:
        call = f"{head}({args[:TERSE_ARGS_CHARS]}...)"
    return call + (f" -> {failure}" if failure else "")


def _terse_line(line: str, guard: FactGuard) -> str:
    """A note line without its result's size and start: the call (and its failure, `NoteLine.terse_call`), then
    `| facts: ` and the result's identifiers, those the start held (found by `guard`) first, then `| said: ` and
    the call's own, when it has any, without their keys (`facts.without_keys`)."""
    parts = parse_line(line)
    from_tool = parts.from_tool
    if parts.start:
        listed = parts.listed()
        more = [i.value for i in guard.extract(gapless(parts.start)) if not contains(f"{parts.call}\n{listed}", i)]
        if more:
            from_tool = FACTS_SEPARATOR.join(x for x in (*more, parts.from_tool) if x)
    # the identifiers stay, their keys give way (`facts.keys_fit`); "(+n more)" stays
    return defang(parts.terse_call() + ids_text(without_keys(from_tool), without_keys(parts.plain)) + parts.more)


NOTE_SHARE = 0.125
"""The share of the budget (tokens) a fold makes the note's oldest lines shorter to fit in (`bounded_lines`; issue
24; its newest `KEPT_FACTS_LINES` lines keep their identifiers, so a note may stay above it). A note that names
every call of a long coding loop grows without end (on the shared SWE-bench runs at
an 8,000-token window, 80 calls made an 18,000-character note: the history could not get under the target
again, and most compactions came right after another). An eighth of the budget leaves, under the default target
(half the window), room for the system prompt and the request (up to a quarter on the shared traces) and the
newest steps, and so the headroom the next calls grow into."""

KEPT_FACTS_LINES = 14
"""The newest lines of a note that keep their identifiers under its bound (`bounded_lines`): only older lines lose
them, and only older lines are ever counted. A request's short loop (the tau-bench conversations of the shared
traces) keeps what its calls found; a coding loop's hundred calls keep those of the last fourteen. Measured on the
shared traces (`benchmarks/bill.py`'s tables; the (call, identifier) pairs the sent history lacks, of the 21,801
of the tau-bench conversations at 4,000 tokens; the next command's identifiers of the SWE-bench runs at 8,000):
12 lines lost 69 pairs and held 3,754 of 3,963 next-command identifiers, 14 lost 46 and held 3,753, 16 lost 40
and held 3,738 (a longer note leaves less room to the coding loop's newest steps)."""

NOTE_REFILL = 0.5
"""When a note's lines go over a bound (`NOTE_SHARE`, `HARD_NOTE_SHARE`), they are made shorter down to this share
of it, not just under it (`bounded_lines`): the lines that change are the note's first ones, and a provider's
cache keeps the prefix of the note up to its first change, so the next folds should only append (on the shared
SWE-bench runs at 8,000 tokens, billed relative to not compacting with the prompt cache on token prefixes: 0.458
with 0.5, 0.460 with 1; on whole messages, 0.578 and 0.588)."""

HARD_NOTE_SHARE = 0.2
"""The share of the budget (tokens) over which the note's oldest call-only lines are counted into one line
(`bounded_lines`): until then every call stays named (an agent that no longer sees which calls it made makes them
again, issue 12); a fifth of the budget holds about 70 call-only lines at an 8,000-token window. Chosen by a sweep
on the shared SWE-bench runs at 8,000 tokens (`benchmarks/bill.py`; billed relative to not compacting, and the
share of the next command's identifiers the compacted history still holds): 0.25 gave 0.556 and 94.1%, 0.2 gave
0.552 and 94.6%, 0.15 gave 0.545 and 94.8%, but 0.15 counted an 18-call running request's calls into one line at
a 2,000-token window and the agent made them again (tests/test_running_task_e2e.py)."""

COLLAPSED_RE = re.compile(r"^- \[(\d+) earlier calls: ([^\];]*)(?:; (\d+) failed)?\]")
"""The line that stands for the oldest calls once even their terse lines would not fit the note's bound
(`bounded_lines`): `- [37 earlier calls: bash x35, edit x2; 3 failed] | facts: ...` (how many, by tool, how
many of them failed when any did, and the newest of their identifiers, `FACTS_CHARS` characters at most)."""


def note_bound(state: LadderState) -> int | None:
    """The note's bound in tokens (`NOTE_SHARE` of the budget); None without a budget."""
    return None if state.budget_tokens is None else max(1, int(state.budget_tokens * NOTE_SHARE))


def collapsed_counts(line: str) -> tuple[dict[str, int], int] | None:
    """(calls by tool, failed calls) a collapsed line (`COLLAPSED_RE`) stands for; None for any other line."""
    found = COLLAPSED_RE.match(line)
    if found is None:
        return None
    tally: dict[str, int] = {}
    for part in found.group(2).split(", "):
        name, _, n = part.rpartition(" x")
        if name and n.isdigit():
            tally[name] = tally.get(name, 0) + int(n)
    return tally, int(found.group(3) or 0)


def _line_identifiers(parts: NoteLine) -> tuple[list[str], list[str]]:
    """(plain, from tools) identifiers a note line (`parse_line`'s parts) lists, in order, without their fences."""
    plain: list[str] = []
    tool: list[str] = [v for v in parts.from_tool.split(FACTS_SEPARATOR) if v]
    listed, at = parts.plain, 0
    for begin, end in fenced_spans(listed):  # a terse line's plain part may hold the fenced ones
        plain.extend(v for v in listed[at:begin].split(FACTS_SEPARATOR) if v.strip())
        tool.extend(v for v in unfence(listed[begin:end])[1].split(FACTS_SEPARATOR) if v)
        at = end
    plain.extend(v for v in listed[at:].split(FACTS_SEPARATOR) if v.strip())
    return [v.strip() for v in plain], [v.strip() for v in tool]


def _collapse(lines: Sequence[str], originals: Sequence[str], guard: FactGuard | None) -> str:
    """One line for `lines` (the note's oldest, an earlier collapsed line among them): how many calls, by tool in
    the order first made, how many failed, and the identifiers of `originals` (the same lines before
    `bounded_lines` made them shorter: those they list and, with a `guard`, those the calls' arguments and the
    results' starts show) that `facts.choose` keeps in `FACTS_CHARS` characters (one of each shape a round, the
    newest first, the tools' before the plain ones), those that came from results fenced as tool data; " (+more)" ends a
    line that could not list them all."""
    tally: dict[str, int] = {}
    plain: dict[str, None] = {}
    tool: dict[str, None] = {}
    failed = 0
    more = False
    for line, original in zip(lines, originals):
        parts = parse_line(original)
        counts, fails = collapsed_counts(line) or ({(line[2:].split("(", 1)[0] or "?"): 1}, int(bool(parts.failure)))
        failed += fails
        more = more or bool(parts.more)
        for name, n in counts.items():
            tally[name] = tally.get(name, 0) + n
        own, from_tool = _line_identifiers(parts)
        if guard is not None and not COLLAPSED_RE.match(original):  # those the call and the result's start show
            own = [i.value for i in guard.extract(parts.call)] + own
            from_tool = [i.value for i in guard.extract(gapless(parts.start))] + from_tool
        for seen, values in ((plain, own), (tool, from_tool)):
            for v in values:
                seen.pop(v, None)
                seen[v] = None  # the newest occurrence last
    head = (f"- [{sum(tally.values())} earlier calls: "
            f"{', '.join(f'{name} x{n}' for name, n in tally.items())}{f'; {failed} failed' if failed else ''}]")
    # the tools' newest first, then the plain ones' (`choose`: one of each shape a round)
    values = [*plain, *tool]
    picked = choose(values, fits_chars(values, FACTS_CHARS - len(FACTS_SEPARATOR)))
    more = more or len(picked) < len(values)
    kept_plain = [values[j] for j in picked if j < len(plain)]
    kept_tool = [values[j] for j in picked if j >= len(plain)]
    listed = ids_text(FACTS_SEPARATOR.join(kept_tool), FACTS_SEPARATOR.join(kept_plain))
    return defang(head + listed + (" (+more)" if more else ""))


def _call_only(line: str, guard: FactGuard | None) -> str:
    """`_bare_line`, and " (+n more)" when that leaves out identifiers the line listed or showed in its arguments
    (found by `guard`; without one, " (+more)" when the arguments were cut): the note says so."""
    bare = _bare_line(line)
    if bare == line:
        return line
    parts = parse_line(line)
    own, from_tool = _line_identifiers(parts)
    n = len(own) + len(from_tool)
    cut = parts.call not in bare
    if guard is not None and cut:
        n += sum(1 for i in guard.extract(parts.call) if not contains(bare, i))
    more = n == 0 and (bool(parts.more) or (cut and guard is None))
    return bare + (f" (+{n} more)" if n else " (+more)" if more else "")


def bounded_lines(lines: Sequence[str], bound: int, size: Any, guard: FactGuard | None, *,
                  drop_identifiers: bool = True) -> list[str]:
    """`lines` (a note's, oldest first) made to fit `bound` tokens with the prefix line (`size(line)`: a line's
    tokens; the note's are taken as the sum of its lines'), oldest first, each step only as far as needed: lines
    lose their result's size and start (`_terse_line`, identifiers kept; without a guard, `_bare_line`; never the
    newest line); over `HARD_NOTE_SHARE` of the budget (`bound` is `NOTE_SHARE` of it), those but the newest
    `KEPT_FACTS_LINES` lose their identifiers too (`_call_only`: the call, its arguments cut to `TERSE_ARGS_CHARS`,
    its failure, and how many identifiers it left out); and only when the note would take more than that even with
    every line call-only, the oldest of those call-only lines are counted into one line (`COLLAPSED_RE`: how many
    calls by tool, how many failed, and the newest identifiers of their lines), as few as bring them under it. With
    `drop_identifiers` False, only the first step (what a fold uses when keeping every identifier still brings the
    history under the limit: `_Folds.plan`; identifiers are dropped to fit, never for headroom alone). Unchanged
    when they fit. What a fold writes anyway (the note moves to a new host at every fold), so no note is rewritten
    for it at a call that folds nothing."""
    out = list(lines)
    total = size(PROGRESS_PREFIX) + sum(size(x) for x in out)
    first = 1 if out and COLLAPSED_RE.match(out[0]) else 0

    def shorter(x: str) -> str:
        return _terse_line(x, guard) if guard is not None else _bare_line(x)

    hard = int(bound * HARD_NOTE_SHARE / NOTE_SHARE)

    def call_only(x: str) -> str:
        return _call_only(x, guard)

    older = len(out) - KEPT_FACTS_LINES  # the lines before the newest ones, which keep their identifiers
    # the newest line keeps its result's preview (the step before the one the model reads whole)
    for shorten, upto, limit in ((shorter, len(out) - 1, bound),
                                 (call_only, older if drop_identifiers else first, hard)):
        if total <= limit:
            continue
        for i in range(first, upto):  # once over, down to a fraction of it: the next folds only append
            if total <= limit * NOTE_REFILL:
                break
            if out[i].startswith("- "):
                new = shorten(out[i])
                total += size(new) - size(out[i])
                out[i] = new
    # counted only when even every line call-only would take more than the hard bound (the newest keep theirs)
    bare = total - sum(size(x) - size(call_only(x)) for x in out[max(first, older):] if x.startswith("- "))
    if bare <= hard or not drop_identifiers:
        return out
    room = size(fence("", "tools")) + FACTS_CHARS // 3 + 20  # about what the collapsed line adds, at most
    j = first
    while j < older and bare + room > hard * NOTE_REFILL:
        bare -= size(out[j])
        j += 1
    return [_collapse(out[:j], lines[:j], guard), *out[j:]] if j > first else out


# ------------------------------------------------------------------------------------------------ folding

@dataclass
class _Fold:
    """One fold, planned: messages to remove, messages to replace (the note's host, a former host), and the
    figures (tokens by the state's counter)."""

    removed: list[int]
    replaced: dict[int, BaseMessage]
    replaced_tokens: dict[int, int]
    saved: int
    calls: int


class _Folds:
    """The folds of the first k of `chosen` (assistant steps of the exchange `[start, end)`, oldest first), for
    each k: the note's lines are a prefix of one list (a line never depends on a later one), built once."""

    def __init__(self, state: LadderState, chosen: Sequence[Step], start: int, end: int,
                 guard: FactGuard | None = None):
        self.state = state
        self.chosen = list(chosen)
        self.msgs = state.messages
        msgs = self.msgs
        self.end = end
        # the active turn (the latest request's exchange) whose first assistant message leads with thinking
        first = next((i for i in range(start, end) if kind(msgs[i]) == AI), None)
        self.thinking_first = end == len(msgs) and first is not None and starts_with_thinking(msgs[first])
        self.lines: list[str] = []
        self.hosts: list[int | None] = []   # for each k - 1: the index of the note's host
        self.upto: list[int] = []           # for each k - 1: how many lines its note has
        self.calls: list[int] = []          # for each k - 1: how many calls the folded steps make
        noted: set[int] = set()
        known = Presence()  # the lines so far, for `call_line`'s "already listed" (read once, not once a line)

        def add_lines(lines: Sequence[str]) -> None:
            self.lines.extend(lines)
            if guard is not None:
                for line in lines:
                    known.add(line)

        def add_note(i: int) -> None:
            if i not in noted:
                noted.add(i)
                add_lines(note_lines(msgs[i]))

        i, calls = start, 0
        for step in self.chosen:
            for j in range(i, step.start):  # messages kept between the folded steps: only their notes move
                add_note(j)
            for j in step.indices:
                add_note(j)
                m = msgs[j]
                if kind(m) == AI:
                    said = content_text(without_note(m).content)  # type: ignore[arg-type]
                    for call in [*m.tool_calls, *getattr(m, "invalid_tool_calls", ())]:  # type: ignore[attr-defined]
                        result = next((msgs[r] for r in range(j + 1, step.end) if kind(msgs[r]) == TOOL
                                       and msgs[r].tool_call_id == call.get("id")), None)  # type: ignore[attr-defined]
                        recall = state.recall_key(result) if result is not None else None
                        add_lines([call_line(call, result, guard=guard, said=said, known=known, recall=recall)])
                        said = ""
                        calls += 1
            i = step.end
            host = next((h for h in range(i, end) if kind(msgs[h]) == AI), None)
            for j in range(i, host + 1 if host is not None else i):
                add_note(j)
            self.hosts.append(host)
            self.upto.append(len(self.lines))
            self.calls.append(calls)
        self.start = start
        self.guard = guard
        self.bound = note_bound(state)
        self._sizes: dict[str, int] = {}

    def size(self, line: str) -> int:
        """Tokens of one line of the note, its newline counted as one (memoized: a fold plans many notes)."""
        n = self._sizes.get(line)
        if n is None:
            n = self._sizes[line] = self.state.counter.count_text(line) + 1
        return n

    def plan(self, k: int) -> _Fold | None:
        """The fold of the first `k` steps; None when no assistant message follows them in their exchange, or
        when the active turn's first assistant message leads with thinking and the first one left would not."""
        host = self.hosts[k - 1]
        if host is None:
            return None
        msgs, state = self.msgs, self.state
        folded = [i for s in self.chosen[:k] for i in s.indices]
        if self.thinking_first:
            gone = set(folded)
            lead = next(i for i in range(self.start, self.end) if kind(msgs[i]) == AI and i not in gone)
            if not starts_with_thinking(msgs[lead]):  # the note's host keeps its leading thinking blocks
                return None
        replaced: dict[int, BaseMessage] = {
            i: without_note(msgs[i]) for i in range(self.start, host)  # type: ignore[arg-type]
            if i not in folded and note_lines(msgs[i])}
        lines = self.lines[:self.upto[k - 1]]
        count = state.counter.count_message
        for drop in (False, True):  # identifiers leave the note only when keeping them leaves it over the limit
            bounded = lines if self.bound is None else bounded_lines(lines, self.bound, self.size, self.guard,
                                                                    drop_identifiers=drop)
            replaced[host] = with_note(msgs[host], bounded)  # type: ignore[arg-type]
            tokens = {i: count(m) for i, m in replaced.items()}
            saved = sum(state.slots[i].tokens for i in folded) + sum(
                state.slots[i].tokens - t for i, t in tokens.items())
            if self.bound is None or bounded == lines or not state.over_limit(
                    state.total() - saved, len(state.slots) - len(folded)):
                break
        return _Fold(folded, replaced, tokens, saved, self.calls[k - 1])


def loop_trigger(messages: Sequence[BaseMessage], count: Callable[[BaseMessage], int], total: int,
                 cached_price: float) -> tuple[int, int] | None:
    """The tokens above which a running loop that was folded before is due to fold again (issue 24), or None when
    `messages` (the history, `total` tokens with what the call adds, `count` a message's tokens) ends with no such
    loop (its last message is no tool result, or its running request has no progress note yet), or `cached_price`
    (a cached token's price over an uncached one) is not strictly between 0 and 1.

    A loop that was folded has shown it outgrows the window: it will fold again, and the only choice is when. A
    fold makes the next call pay the uncached price for what follows the request (the note's host, about `F`
    tokens, and the newest step), where the calls in between pay the cached price `p` for all they send, growing by
    `g` tokens a step. Folding after `H` tokens of growth costs about `(1 - p) * F` per fold and `p * H / 2` a call
    on average over the `H / g` calls in between; the sum per call is least at `H = sqrt(2 * (1 - p) / p * F * g)`
    (the economic order quantity, Harris 1913, with the break as the order cost and the cached price as the holding
    cost). `F` is the note's host and one step, `g` the mean tokens of the steps since the host's, both measured on
    `messages`. Returns `(floor, threshold)`: `total` less that growth (what the history was after the last fold;
    a fold the loop's trigger makes goes at least that deep, as one the budget makes in a long loop), and the
    floor plus `LOOP_GROWTH_OF_LEAST` times `H`; the budget still triggers first when it is lower. Only a loop
    folded before: a loop that may end before the window is full does not pay a fold it did not need (on the
    shared SWE-bench runs, folding every loop from its request this way billed 0.57 at 32,000 tokens instead of
    0.79 but kept 97.9% of the next command's identifiers instead of 99.2%). O(steps since the request): a
    compacted loop's are few."""
    if not 0 < cached_price < 1 or not messages or kind(messages[-1]) != TOOL:
        return None
    host = None
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if is_request(m):
            return None
        if has_note(m):
            host = i
            break
    if host is None:
        return None
    steps = 0
    step_start = None
    for i in range(host + 1, len(messages)):
        if kind(messages[i]) == AI:
            steps += 1
            if step_start is None:
                step_start = i
    if step_start is None:
        return None
    grown = sum(count(messages[i]) for i in range(step_start, len(messages)))
    g = grown / steps
    f = count(messages[host]) + g
    least = math.sqrt(2 * (1 - cached_price) / cached_price * f * g)
    return total - grown, total - grown + math.ceil(LOOP_GROWTH_OF_LEAST * least)


LOOP_GROWTH_OF_LEAST = 1.5
"""The growth a folded loop gets before it folds again (`loop_trigger`), as a multiple of the growth of least cost
(`H`): near `H` the cost is flat (at k times `H` it is `(k + 1/k) / 2` of the least: 1.08 at 1.5, 1.25 at 2), and
each step kept in view longer is context the next command may need. Replayed on the shared SWE-bench runs
(`benchmarks/bill.py`; bill relative to not compacting on whole messages at 8,000 / 16,000 / 32,000 tokens, and
the next command's identifiers the sent history holds at 8,000 / 32,000): at 1, 0.553 / 0.603 / 0.791 and 94.7% /
99.1%; at 1.25, 0.562 / 0.603 / 0.793 and 95.2% at 8,000; at 1.5, 0.557 / 0.600 / 0.791 and 95.2% / 99.2%; at 2,
0.556 / 0.609 / 0.796; without the loop's trigger (the budget alone), 0.556 / 0.614 / 0.802 and 95.3% / 99.3%
(the figures move by a few thousandths from one setting to the next: a fold's timing decides which steps are in
view when a long result arrives)."""


def fold_steps(state: LadderState, chosen: Sequence[Step], *, strategy: str, guard: FactGuard | None = None) -> bool:
    """Fold `chosen` (whole assistant steps of one exchange, oldest first) into the progress note (see the module
    docstring; `guard`: see `call_line`). Returns whether it was done (False when no assistant message follows them
    in their exchange, or when the note would cost more tokens than the steps it names)."""
    if not chosen:
        return False
    plan = _Folds(state, chosen, *_exchange_bounds(state, chosen[0]), guard).plan(len(chosen))
    if plan is None or plan.saved <= 0:  # a note larger than the steps it names: keep the steps
        return False
    _commit(state, plan, strategy)
    return True


def _exchange_bounds(state: LadderState, step: Step) -> tuple[int, int]:
    """[start, end) of the exchange that holds `step`."""
    for ex in split_exchanges(state.steps()):
        if ex.steps and ex.steps[0].start <= step.start < ex.steps[-1].end:
            return ex.steps[0].start, ex.steps[-1].end
    return 0, len(state.slots)


def _commit(state: LadderState, plan: _Fold, strategy: str) -> None:
    state.fold(plan.removed, plan.replaced, plan.replaced_tokens, strategy=strategy,
               detail=f"{len(plan.removed)} messages folded into the progress note ({plan.calls} call(s) named)")


def keep_progress(state: LadderState, *, strategy: str, guard: FactGuard | None = None) -> None:
    """Fold the oldest steps of the running request's loop into its progress note when, and only as far as, the
    rule of the module docstring says: only in the second pass, only while above the goal. `strategy` names who
    folds (the action's strategy); `guard`: the fact guard of the strategy that folds (see `call_line`; with it,
    rule 6 too)."""
    if state.pass_name == "soft" or not (state.over_limit() or state.over_goal()):
        return
    while _fold_some(state, strategy, guard):
        pass  # over the budget and nothing fits: fold again while a fold saves (a thinking step may now lead)
    if guard is not None and state.over_budget():
        _fit_note(state, strategy, guard)


def _fold_some(state: LadderState, strategy: str, guard: FactGuard | None) -> bool:
    """One fold of rule 3 (see `keep_progress`); True when it folded while over the budget and the history is
    still over it (another fold may save more)."""
    loop = running_steps(state.messages, state.steps())
    candidates = [s for s in loop if not any(state.is_protected(i) for i in s.indices)]
    if not candidates:
        return False
    bounds = _exchange_bounds(state, loop[0])
    # the orders to fold in, oldest first; a thinking-first loop tries first to keep its first step (see `plan`)
    orders = [candidates]
    if starts_with_thinking(state.messages[loop[0].start]) and candidates[0] == loop[0]:
        orders = [candidates[1:], candidates]
    over_budget = state.over_budget()
    fits_budget: _Fold | None = None
    widest: _Fold | None = None
    for order in orders:  # an order that keeps the thinking first step is tried whole before one that folds it
        folds = _Folds(state, order, *bounds, guard)
        deepest: _Fold | None = None  # the widest plan of this order under the limit
        for k in range(1, len(order) + 1):
            plan = folds.plan(k)
            if plan is None or plan.saved <= 0:
                continue
            if not state.would_be_over_goal(plan.saved, len(plan.removed)):
                _commit(state, plan, strategy)
                return False
            tokens = state.total() - plan.saved
            if not state.over_limit(tokens, len(state.slots) - len(plan.removed)) and (
                    deepest is None or plan.saved > deepest.saved):
                deepest = plan
            if fits_budget is None and not state.over_budget(tokens):
                fits_budget = plan
            if widest is None or plan.saved > widest.saved:
                widest = plan
        if deepest is not None:
            _commit(state, deepest, strategy)  # no fold reaches the goal: the deepest under the limit
            return False
        if order is not candidates and not state.over_limit():
            return False  # keeping the thinking first step already leaves the history under the limit
    chosen = fits_budget or widest  # under the limit in any order first, then the budget in the earliest
    if not over_budget or chosen is None:
        return False
    _commit(state, chosen, strategy)
    return chosen is widest and state.over_budget()


def _fit_note(state: LadderState, strategy: str, guard: FactGuard) -> None:
    """With every step that may go folded and the history still over the budget: the note's oldest lines lose
    their result's size and start (`_terse_line`: the call and its identifiers, those of the start too, stay), as
    few as make the history fit the budget, all of them when none does. Only then does a note change its earlier
    lines (the history cannot be sent as it is: the last resort would cut the newest result, then make the whole
    note terse, identifiers and all, `terse_note`); a note whose lines are already terse stays as it is."""
    loop = running_steps(state.messages, state.steps())
    host = next((i for s in loop for i in s.indices if note_lines(state.messages[i])), None)
    if host is None or state.slots[host].pinned:
        return
    message = state.messages[host]
    lines = note_lines(message)
    full = [k for k, line in enumerate(lines) if line.startswith("- ") and _terse_line(line, guard) != line]
    if not full:
        return
    count = state.counter.count_message
    rest = state.total() - state.slots[host].tokens

    def tightened(j: int) -> tuple[BaseMessage, int]:
        terse = set(full[:j])
        new = with_note(message, [_terse_line(line, guard) if k in terse else line  # type: ignore[arg-type]
                                  for k, line in enumerate(lines)])
        return new, count(new)

    best = _fewest(1, len(full), tightened, lambda attempt: not state.over_budget(rest + attempt[1]))
    if best[1] < state.slots[host].tokens:
        state.replace(host, best[0], strategy=strategy, kind="shortened", tokens=best[1],
                      detail="progress note: its oldest lines without their result's size and start, identifiers "
                             "kept, to fit the budget")
