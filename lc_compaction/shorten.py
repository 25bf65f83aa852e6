"""The last resort: cut messages in place when no strategy can make the history fit the budget.

A cut message keeps its id, type, `tool_call_id` and tool calls (their ids and names); its text is cut at the end
and a marker says how much went (`markers.SHORTENED_MARKER`), and its `response_metadata["lc_compaction"]` says
`{"kind": "shortened", "original_chars": n, "removed_blocks": [...], "cut_tool_calls": [...]}`, and a failed call's
result also `"failure": "error (exit code 2)"` (`_content.tool_failure`: what the cut text may no longer show).
With offload on, the original is written to the store before the cut is used (`lc_compaction.offload`): the
marker then also names the recall tool and the handle (`offload.recall_hint`), and the mark has `"offloaded": {}`.
Content blocks keep their structure: text blocks (and text documents) are cut in order (a text block right after
an OpenAI Responses reasoning item keeps its place and id when cut to nothing, the first such one holding the
marker: the reasoning stays right before the item it pairs with, `_content.is_paired_reasoning`), tool-use and
reasoning blocks are kept, and media blocks (images, files, audio) are removed, oldest first and only as many as
needed, when cutting the text alone cannot get the message small enough; the marker names them.

Tool-call arguments are cut last, when the text and the media alone cannot make the message fit (a `write_file`
call whose arguments exceed the window): they stay a JSON object in `tool_calls[i]["args"]` with every top-level
key, long strings are cut at the end with `markers.ARGUMENT_CUT_MARKER`, long lists and objects below the top
level keep their first items and say how many went (`markers.ITEMS_CUT_MARKER`), so `ChatOpenAI` sends them as
it sends any call (`json.dumps(args)`). The content blocks that repeat a call (Anthropic `tool_use` input,
LangChain `tool_call` args, OpenAI Responses `function_call` arguments) are cut the same way; an invalid call's raw
argument string is cut like a string.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from lc_compaction._content import MEDIA_BLOCKS  # re-exported: part of this module's API
from lc_compaction._content import (
    TOOL_CALL_BLOCKS,
    arguments_text,
    block_text,
    block_type,
    content_text,
    is_media,
    tool_failure,
    is_paired_reasoning,
    last_text_block,
    with_block_text,
)
from lc_compaction._kinds import TOOL, kind
from lc_compaction._preview import gap
from lc_compaction.dedup import content_sha256
from lc_compaction.facts import (
    LISTED_IDENTIFIER_CHARS,
    SAID_PREFIX,
    FactGuard,
    identifiers_beyond,
    parse_facts,
    tool_names,
    tool_of,
)
from lc_compaction.ladder import LadderState
from lc_compaction.markers import (
    ARGUMENT_CUT_MARKER,
    CUT_IDENTIFIERS,
    ITEMS_CUT_KEY,
    is_stored_lookup,
    ITEMS_CUT_MARKER,
    MARK_KEY,
    SHORTENED_MARKER,
    SEARCH_HINT,
    before_cut,
    cut_listing,
    dropped_marker_facts,
    is_dropped_marker,
    is_shortened,
    is_summary,
    make_dropped_marker,
    read_truncation_note,
)
from lc_compaction.offload import recall_hint
from lc_compaction._note import note_lines
from lc_compaction.progress import counted_note, terse_note
from lc_compaction.structure import is_request, tool_calls_of

MIN_TOKENS_TO_CUT = 50
"""A message of this many tokens or fewer is never cut (the marker alone costs about 20 tokens)."""

MIN_ARGUMENT_CHARS_TO_CUT = 100
"""A tool-call argument string of this many characters or fewer is never cut (paths, ids, names: what makes the
call meaningful; the marker alone is about 90 characters)."""

MIN_ITEMS_TO_CUT = 8
"""A list or object inside tool-call arguments with this many items or fewer keeps them all (it may still have
its strings cut)."""


def text_length(content: Any) -> int:
    """Characters of cuttable text in a message content (a str, or the text parts of its blocks)."""
    if isinstance(content, str):
        return len(content)
    return sum(len(t) for t in (block_text(b) for b in content) if t is not None)


def media_count(content: Any) -> int:
    """How many removable media blocks (`MEDIA_BLOCKS`, not text documents: `_content.is_media`) a content holds."""
    if isinstance(content, str):
        return 0
    return sum(1 for b in content if is_media(b))


def _marker(removed: int, removed_blocks: Sequence[str], recall: str | None, what: str, listed: str = "") -> str:
    """The marker, on its own line: how many characters went, the media blocks removed, the identifiers of the
    text removed (`listed`: `markers.CUT_IDENTIFIERS` and them), and with `recall` (the original's store key) how
    to read the original back."""
    note = SHORTENED_MARKER.format(removed=removed)
    if removed_blocks:
        note = note[:-1] + f"; removed: {', '.join(removed_blocks)}]"
    if listed:
        note = note[:-1] + f"{CUT_IDENTIFIERS}{listed}]"
    if recall is not None:
        note = note[:-1] + f" {recall_hint(recall, what)}]"
    return note


def arguments_length(message: BaseMessage) -> int:
    """Characters of the tool-call arguments of a message as the wire carries them (`_content.arguments_text`)."""
    return sum(len(arguments_text(tc.get("args"))) for tc in tool_calls_of(message))


def cut_arguments(args: Any, fraction: float) -> tuple[Any, int]:
    """`args` (a tool call's arguments) cut to about `fraction` (0 to 1) of their size, and the characters removed.

    A dict stays a dict with every top-level key; strings longer than `MIN_ARGUMENT_CHARS_TO_CUT` keep their first
    `fraction` of characters and end with `ARGUMENT_CUT_MARKER`; below the top level, a list or object of more than
    `MIN_ITEMS_TO_CUT` items keeps its first `fraction` of them and says how many went (`ITEMS_CUT_MARKER`, as a last
    list item or under `ITEMS_CUT_KEY`). Numbers, booleans, None and short strings are kept. A string (an invalid
    call's raw arguments) is cut like a string. Never raises; the result is JSON-serializable when `args` is.
    """
    return _cut_value(args, max(0.0, min(1.0, fraction)), 0)


def _cut_value(value: Any, fraction: float, depth: int) -> tuple[Any, int]:
    if isinstance(value, str):
        if len(value) <= MIN_ARGUMENT_CHARS_TO_CUT:
            return value, 0
        keep = int(len(value) * fraction)
        marker = ARGUMENT_CUT_MARKER.format(removed=len(value) - keep)
        if keep + len(marker) >= len(value):
            return value, 0  # the cut would not be shorter
        return value[:keep] + marker, len(value) - keep
    if depth > 32:
        return value, 0  # no RecursionError on hostile nesting: left as it is
    if isinstance(value, dict):
        items = list(value.items())
        removed, dropped = 0, 0
        if depth and len(items) > MIN_ITEMS_TO_CUT:
            keep = int(len(items) * fraction)
            gone = sum(len(arguments_text({k: v})) for k, v in items[keep:])
            if gone > len(ITEMS_CUT_MARKER) + len(ITEMS_CUT_KEY) + 16:  # only when the cut is shorter
                removed, dropped = gone, len(items) - keep
                items = items[:keep]
        out: dict[Any, Any] = {}
        for k, v in items:
            out[k], r = _cut_value(v, fraction, depth + 1)
            removed += r
        if dropped:
            out[ITEMS_CUT_KEY] = ITEMS_CUT_MARKER.format(removed=dropped)
        return out, removed
    if isinstance(value, (list, tuple)):
        items = list(value)
        removed, dropped = 0, 0
        if len(items) > MIN_ITEMS_TO_CUT:
            keep = int(len(items) * fraction)
            gone = sum(len(arguments_text(v)) + 2 for v in items[keep:])
            if gone > len(ITEMS_CUT_MARKER) + 16:  # only when the cut is shorter
                removed, dropped = gone, len(items) - keep
                items = items[:keep]
        cut = []
        for v in items:
            new, r = _cut_value(v, fraction, depth + 1)
            cut.append(new)
            removed += r
        if dropped:
            cut.append(ITEMS_CUT_MARKER.format(removed=dropped))
        return cut, removed
    return value, 0


def _cut_calls(message: BaseMessage, fraction: float) -> tuple[dict[str, Any], list[str], int]:
    """The update that cuts every tool call's arguments of `message` (`cut_arguments`), the ids of the calls cut,
    and the characters removed. Content blocks that repeat a call (same id) get the same cut."""
    update: dict[str, Any] = {}
    cut_ids: list[str] = []
    removed = 0
    by_id: dict[str, Any] = {}
    for field_name in ("tool_calls", "invalid_tool_calls"):
        calls = list(getattr(message, field_name, None) or [])
        new_calls = []
        for tc in calls:
            args = tc.get("args")
            new_args, r = cut_arguments(args, fraction) if args is not None else (args, 0)
            if r:
                removed += r
                cut_ids.append(tc.get("id") or "")
                if isinstance(tc.get("id"), str):
                    by_id[tc["id"]] = new_args
                tc = {**tc, "args": new_args}
            new_calls.append(tc)
        if calls:
            update[field_name] = new_calls
    content = message.content
    if by_id and isinstance(content, list):
        blocks = []
        for block in content:
            if isinstance(block, dict) and block_type(block) in TOOL_CALL_BLOCKS:
                cid = block.get("call_id") if block.get("call_id") in by_id else block.get("id")
                if isinstance(cid, str) and cid in by_id:
                    block = _with_block_args(block, by_id[cid])
            blocks.append(block)
        update["content"] = blocks
    return update, cut_ids, removed


def _with_block_args(block: dict[str, Any], args: Any) -> dict[str, Any]:
    """A tool-call content block with `args` as its arguments, in its own field and form."""
    for key in ("input", "args"):
        if key in block:
            return {**block, key: args}
    if "arguments" in block:  # OpenAI Responses: a JSON string
        return {**block, "arguments": args if isinstance(args, str) else arguments_text(args)}
    return block


TAIL_SHARE = 0.4
"""The share of the characters a cut tool result keeps (`shorten`) that come from its end, whole lines (issue 24: a
test run's failures, its error and its exit code sit at the END of its output; a cut that kept only the head of a
61,000-character pytest run dropped the FAILED lines the next command needs). The rest is its head, and a gap
line (`_preview.gap`) says how many lines went between them."""

MIN_HEAD_TAIL_CHARS = 200
"""Characters below which a cut keeps only the head of a result (a head and a tail of a few characters each would
be two fragments, not a start and an end)."""


def _head_and_tail(text: str, keep: int) -> tuple[str, int]:
    """What a cut of a tool result's text to `keep` characters keeps, and how many of its characters that is: its
    head and, when the text has lines beyond the head, its last whole lines (`TAIL_SHARE` of `keep`), with a gap
    line between them (not counted as kept: it is the cut's own text); the head alone otherwise."""
    if keep >= len(text) or keep < MIN_HEAD_TAIL_CHARS:
        return text[:keep], min(keep, len(text))
    start = text.find("\n", len(text) - int(keep * TAIL_SHARE)) + 1  # the tail: whole lines
    head_len = keep - (len(text) - start)
    if start <= 0 or start >= len(text) or head_len <= 0 or not text[start:].strip():
        return text[:keep], keep
    line_end = text.rfind("\n", 0, head_len)
    if line_end > head_len * 0.7:  # the head ends at a line's end when one is near
        head_len = line_end + 1
    head = text[:head_len]
    between = max(text.count("\n", head_len, start), 1)
    return f"{head.rstrip()}\n{gap(between)}\n{text[start:]}", head_len + len(text) - start


def shorten(message: BaseMessage, keep_chars: int, *, drop_media: bool | int = False,
            args_fraction: float | None = None, recall: str | None = None,
            beyond: Callable[[str, str], str] | None = None) -> BaseMessage:
    """A copy of `message` whose text keeps `keep_chars` characters (in block order), with a marker: its first
    ones, or of a tool result whose content is a string, its head and its last lines (`TAIL_SHARE`).

    Args:
        message: any message (its id, type, tool_call_id and tool-call ids and names are kept).
        keep_chars: characters of text to keep, >= 0.
        drop_media: remove image / file / audio / non-text document blocks (named in the marker): True for all,
            a number N for the first N of them (the oldest), False for none.
        args_fraction: cut each tool call's arguments to about this fraction (0 to 1) of their size
            (`cut_arguments`; the cut is marked inside them); None (default) leaves them whole.
        recall: the store key of the original when it is offloaded (`LadderState.recall_key`): the marker says
            how to recall it.
        beyond: `beyond(text, kept)` -> the identifiers of the text removed to list in the marker (fenced:
            `facts.identifiers_beyond`), given the whole text and the text kept (block texts joined by newlines),
            with `recall` too (before its hint: issue 20, class 12, offload on keeps what offload off keeps); None:
            none listed.

    The content gets its marker when something of it was removed; `response_metadata["lc_compaction"]` says what
    was cut (`original_chars` of text, `removed_blocks`, `cut_tool_calls` ids and `removed_argument_chars`).
    """
    content = message.content
    original = text_length(content)
    removed_blocks: list[str] = []
    update: dict[str, Any] = {}
    cut_ids: list[str] = []
    removed_args = 0
    if args_fraction is not None and tool_calls_of(message):
        update, cut_ids, removed_args = _cut_calls(message, args_fraction)
        content = update.get("content", content)
    what = "result" if message.type == "tool" else "message"
    list_for = beyond
    if isinstance(content, str):
        kept_text, kept = (_head_and_tail(content, keep_chars) if message.type == "tool"
                           else (content[:keep_chars], min(keep_chars, len(content))))
        removed = max(len(content) - kept, 0)
        listed = list_for(content, kept_text) if list_for is not None and removed else ""
        new_content: Any = kept_text + (_marker(removed, (), recall, what, listed)
                                        if removed or not cut_ids or recall is not None else "")
    else:
        out: list[Any] = []
        budget = keep_chars
        to_drop = len(content) if drop_media is True else int(drop_media)
        paired: list[int] = []  # blocks cut to nothing right after a Responses reasoning item (the first: the marker)
        for block in content:
            text = block_text(block)
            if text is None:
                if is_media(block) and len(removed_blocks) < to_drop:
                    removed_blocks.append(str(block_type(block)))
                else:
                    out.append(block)
                continue
            if len(text) <= budget:
                out.append(block)
                budget -= len(text)
                continue
            if budget:
                out.append(with_block_text(block, text[:budget]))
            elif out and is_paired_reasoning(out[-1]):
                paired.append(len(out))  # it keeps its place (the item the reasoning pairs with), empty
                out.append(with_block_text(block, ""))
            budget = 0
        kept = keep_chars - budget
        removed = max(original - kept, 0)
        if removed or removed_blocks or not cut_ids or recall is not None:
            listed = ""
            if list_for is not None and removed:
                texts = [t for t in (block_text(b) for b in content) if t is not None]
                kept_texts = [t for t in (block_text(b) for b in out) if t is not None]
                listed = list_for("\n".join(texts), "\n".join(kept_texts))
            marker = _marker(removed, removed_blocks, recall, what, listed).strip()
            if paired:
                out[paired[0]] = with_block_text(out[paired[0]], marker)
            else:
                out.append(last_text_block(message, marker))
        new_content = out
    meta = dict(message.response_metadata or {})
    previous = meta.get(MARK_KEY) if is_shortened(message) else None
    meta[MARK_KEY] = {"kind": "shortened", "original_chars": original, "removed_blocks": removed_blocks}
    if kind(message) == TOOL:  # what a later identical result is recognised by (`dedup.py`)
        sha = previous.get("sha256") if isinstance(previous, dict) else content_sha256(message.content)
        if sha:
            meta[MARK_KEY]["sha256"] = sha
        failure = _failure(message, previous)  # what the cut text may no longer show (an exit code printed last)
        if failure:
            meta[MARK_KEY]["failure"] = failure
    if cut_ids:
        meta[MARK_KEY].update(cut_tool_calls=cut_ids, removed_argument_chars=removed_args)
    if recall is not None:
        meta[MARK_KEY]["offloaded"] = {}
    return message.model_copy(update={**update, "content": new_content, "response_metadata": meta})


def _failure(message: BaseMessage, previous: Any) -> str | None:
    """How the tool call whose result `message` is failed (`_content.tool_failure`), as the result said before any
    cut: the failure an earlier cut recorded (`previous`: its mark), the one a truncation note says, or the one the
    result's own text and status say; None for a success."""
    recorded = previous.get("failure") if isinstance(previous, dict) else None
    if isinstance(recorded, str):
        return recorded
    text = content_text(message.content)
    note = read_truncation_note(text)
    return (note.failure if note is not None else None) or tool_failure(message, text)


def last_resort(state: LadderState, budget: int, goal: int | None = None) -> None:
    """Cut messages in place until `state` fits `budget` tokens, or do nothing when it cannot fit.

    `goal` (tokens, below `budget`: the policy's target): when cutting every candidate could reach it, older
    messages that are not pinned are cut down toward it rather than just to the budget, so that the next calls
    have room to grow before anything is cut again (a cut that leaves the history at the budget is redone at the
    next call, breaking the cached prefix each time).
    Pinned messages, summaries and drop markers (their fact lines end them; a marker is rebuilt with its said line
    whole, `_shrink_marker`) are only ever cut to fit the budget; the most recent
    step (the results the model has not read yet) is cut to leave room for one more step as large as it was:
    toward `max(goal, budget - its tokens)`, so that a result too large for the window is not cut to fit exactly
    the budget and then cut again at the next call.

    Order: messages not pinned first, then pinned ones and the one holding the running request's progress note
    (`progress.py`: it names the calls already made), then the newest step (issue 24: the result the model has
    just asked for reaches it whole whenever it fits in half the budget; a model that does not see it asks again,
    and loops; a newest step over half the budget is first cut down to half of it, no further, as far as the
    budget needs, before anything else is cut), the latest request last; the largest first in each group;
    the system prompt and messages of `MIN_TOKENS_TO_CUT` tokens or fewer never. The progress note is first made
    terse (`progress.terse_note`: each call named without its result's size and start), then its oldest calls
    are counted by tool (`progress.counted_note`: every call still named or counted), then, if that is not
    enough, cut like any message, but only after the newest step (its text names the calls already made: an agent
    that no longer sees them makes them again). Each is cut to what the
    budget needs (text first, media blocks only if the text alone is not enough). When even cutting every
    candidate to its marker could not fit (the system prompt alone is too large), the history is over the budget
    whatever is cut, and the caller reports the overflow; what may still go goes all the same (the call may fit
    the window, which the reply's reserve makes larger than the budget): every message not pinned, not a summary
    and not the latest request loses its text and media to the marker (its tool calls stay whole: cutting their
    arguments would lose what names them), the progress note is made terse (each call still named: cutting it
    would lose calls for a history that does not fit anyway); pinned messages, summaries and the latest request
    stay as they are. Every cut is recorded as a "shortened" action of the
    strategy "last_resort".
    """
    counter = state.counter
    slots = state.slots

    def cuttable(i: int) -> bool:
        return not isinstance(slots[i].message, SystemMessage) and slots[i].tokens > MIN_TOKENS_TO_CUT

    floor = state.fixed_tokens + sum(
        counter.count_message(shorten(s.message, 0, drop_media=True, args_fraction=0.0,
                                      recall=state.recall_key(s.message)))
        if cuttable(i) else s.tokens
        for i, s in enumerate(slots))
    requests = [i for i, s in enumerate(slots) if is_request(s.message)]
    latest = requests[-1] if requests else -1
    noted = {i for i, s in enumerate(slots) if note_lines(s.message)}  # the running request's progress note
    if floor > budget:  # it cannot fit: still do what may be done (issue 20), never to the pins
        for i in sorted((i for i in range(len(slots)) if cuttable(i)), key=lambda k: -slots[k].tokens):
            if i in noted:
                _terse(state, i)
            elif not (i == latest or slots[i].pinned or is_summary(slots[i].message)):
                _cut_text(state, i)
        return
    steps = state.steps()
    recent = set(steps[-1].indices) if steps else set()  # the newest step: what the model has not read yet
    recent_tokens = sum(slots[i].tokens for i in recent)
    if recent_tokens > budget // 2:  # too large to go whole: cut down to half the budget, and no further first
        for i in sorted((i for i in recent if cuttable(i) and kind(slots[i].message) == TOOL and i not in noted
                         and not slots[i].pinned),
                        key=lambda k: -slots[k].tokens):
            if recent_tokens <= budget // 2 or state.total() <= budget:
                break
            before = slots[i].tokens
            over = min(recent_tokens - budget // 2, state.total() - budget)
            _cut_to_fit(state, i, want=max(before - over, 1))
            recent_tokens -= before - slots[i].tokens
    # the newest step goes whole (or as cut above), after the note and the pins (issue 24)
    tried: set[int] = set()
    deferred: set[int] = set()  # notes made terse and counted: their text is cut after the newest step's
    # toward the target only when cutting can reach it (else, as before the target, to the budget: cutting every
    # message to nothing toward an unreachable target would only destroy what still fits)
    low = budget if goal is None or floor > goal else min(goal, budget)
    while state.total() > budget:
        candidates = [i for i in range(len(slots)) if i not in tried and cuttable(i)]
        if not candidates:
            return
        i = min(candidates, key=lambda k: (k == latest, k in deferred, k in recent, slots[k].pinned or k in noted,
                                           -slots[k].tokens))
        if i in noted and i not in deferred:
            if _terse(state, i) and state.total() <= budget:
                return
            if _count(state, i, budget) and state.total() <= budget:
                return
            if any(k in recent for k in candidates):  # the note's text (what names the calls) goes last
                deferred.add(i)
                continue
        tried.add(i)
        if (i == latest or slots[i].pinned or i in noted or is_summary(slots[i].message)
                or is_dropped_marker(slots[i].message)):
            level = budget
        else:
            level = max(low, budget - recent_tokens) if i in recent else low
        want = max(slots[i].tokens - (state.total() - level), 1)
        if not (is_dropped_marker(slots[i].message) and _shrink_marker(state, i, want)):
            _cut_to_fit(state, i, want=want)


def _shrink_marker(state: LadderState, i: int, want: int) -> bool:
    """Replace the drop marker `i` by one that costs at most `want` tokens and keeps its said line whole (a user's
    correction is words: a cut at the end of the text took it with the facts after it, for good, since the cut
    marker is what a later drop extends) and as many of its listed identifiers as fit, chosen as a bound chooses
    them (`FactGuard.facts_line`: `facts.choose`, one of each shape a round), not the head of its lines; whether it
    did (False: even its said line alone does not fit, and it is cut like any message)."""
    message = state.slots[i].message
    facts = dropped_marker_facts(message)
    said = "\n".join(line for line in facts.splitlines() if line.startswith(SAID_PREFIX))
    hint = isinstance(message.content, str) and f"\n{SEARCH_HINT}" in message.content

    def marker(lines: str) -> BaseMessage:
        return make_dropped_marker(message_id=message.id, facts="\n".join(x for x in (said, lines) if x), hint=hint)

    count = state.counter.count_message
    room = want - count(marker(""))
    if room < 0:
        return False
    listed, _ = _GUARD.facts_line(parse_facts(facts), state.counter.count_text, room) if room else ("", 0)
    new = marker(listed)
    tokens = count(new)
    if tokens > want:
        new, tokens = marker(""), want - room
    if tokens >= state.slots[i].tokens:
        return False
    state.replace(i, new, strategy="last_resort", kind="shortened", tokens=tokens,
                  detail="drop marker: its said line kept whole, its identifiers bounded to fit the budget")
    return True


def _count(state: LadderState, i: int, budget: int) -> bool:
    """Replace message `i`'s progress note by one whose oldest lines are counted (`progress.counted_note`), as few
    as make the history fit `budget`; whether it got smaller."""
    rest = state.total() - state.slots[i].tokens
    count = state.counter.count_message
    new = counted_note(state.slots[i].message, lambda m: rest + count(m) <= budget)  # type: ignore[arg-type]
    tokens = count(new)
    if tokens >= state.slots[i].tokens:
        return False
    state.replace(i, new, strategy="last_resort", kind="shortened", tokens=tokens,
                  detail="progress note: its oldest calls counted by tool, to fit the budget")
    return True


def _terse(state: LadderState, i: int) -> bool:
    """Replace message `i`'s progress note by its terse form when that is smaller; whether it was."""
    new = terse_note(state.slots[i].message)  # type: ignore[arg-type]
    tokens = state.counter.count_message(new)
    if tokens >= state.slots[i].tokens:
        return False
    state.replace(i, new, strategy="last_resort", kind="shortened", tokens=tokens,
                  detail="progress note made terse: each call named, without its result's size and start")
    return True


def _cut_text(state: LadderState, i: int) -> None:
    """Replace message `i` by its cut without any text or media (its tool calls whole: what names them), when
    that is smaller: what a history that cannot fit still sheds (`last_resort`)."""
    message = state.slots[i].message
    cut = shorten(message, 0, drop_media=True, recall=state.recall_key(message))
    tokens = state.counter.count_message(cut)
    if tokens < state.slots[i].tokens:
        state.replace(i, cut, strategy="last_resort", kind="shortened", tokens=tokens,
                      detail=f"the history cannot fit the budget: its text cut ({text_length(message.content):,} "
                             "characters), its tool calls kept")


_GUARD = FactGuard()
"""The fact guard that reads what a cut removes from a tool result (the default guard, as a truncation note's)."""


def _beyond(state: LadderState, message: BaseMessage, want: int) -> Callable[[str, str], str] | None:
    """`shorten`'s `beyond` for a cut of `message`: of a tool result, the identifiers of the text removed that the
    text kept does not hold, attributed to its tool (`facts.identifiers_beyond`), so that a result cut to fit the
    window keeps its ids as a truncation note does; None for any other message. At most `LISTED_IDENTIFIER_CHARS`
    characters of them, and at most `want` (the tokens the cut may cost, as characters: about a third of them at
    three to four characters a token, so the kept text keeps most of the room in a small window). Of a text cut
    before, what is left of it and what its marker listed (`markers.cut_listing`)."""
    if kind(message) != TOOL:
        return None
    tool = tool_of(message, tool_names(state.messages))  # type: ignore[arg-type]
    if is_stored_lookup(tool, state.recall_key(message)):
        return None

    def beyond(text: str, kept: str) -> str:
        listed = cut_listing(text)
        original = before_cut(text) + (f"\n{listed}" if listed else "")
        return identifiers_beyond(_GUARD, original, kept, tool, min(LISTED_IDENTIFIER_CHARS, want))
    return beyond


def _listing_reserve(want: int) -> int:
    """Tokens to leave for the identifiers a cut of a tool result lists (at most `LISTED_IDENTIFIER_CHARS`
    characters, and at most `want`): half a token a character, as identifiers go (digits and separators two to
    three characters a token in cl100k_base and o200k_base), and 15 tokens for their fence."""
    return min(LISTED_IDENTIFIER_CHARS, want) // 2 + 15


def _cut_to_fit(state: LadderState, i: int, *, want: int) -> None:
    """Replace message `i` by its longest cut that costs at most `want` tokens (or its smallest cut)."""
    counter = state.counter
    message, tokens = state.slots[i].message, state.slots[i].tokens
    recall = state.recall_key(message)
    length = text_length(message.content)
    best = None
    # text first, in proportion to the tokens to shed; then the media blocks one by one (oldest first), each
    # time keeping all the text first
    media = media_count(message.content)
    beyond = _beyond(state, message, want)
    # each try is first made without the identifiers it would list (`beyond`: the costliest step of a cut of an
    # identifier-dense result), and listed only when it leaves room for them (`_listing_reserve`) or keeps nothing
    reserve = _listing_reserve(want) if beyond is not None else 0
    for dropped in range(media + 1):
        keep = length if dropped else int(length * want / max(tokens, 1))
        while True:
            candidate = shorten(message, keep, drop_media=dropped, recall=recall)
            fits = counter.count_message(candidate) + reserve <= want
            if reserve and (fits or keep == 0):
                candidate = shorten(message, keep, drop_media=dropped, recall=recall, beyond=beyond)
                fits = counter.count_message(candidate) <= want
            if fits:
                best = candidate
                break
            if keep == 0:
                break
            keep = int(keep * 0.8)
        if best is not None:
            break
    if best is None and tool_calls_of(message):
        # nothing else fits: the tool-call arguments too, the text first cut to what the budget needs
        best = _cut_arguments_to_fit(message, want, length, media, counter.count_message, recall)
    if best is None:
        best = shorten(message, 0, drop_media=True, args_fraction=0.0 if tool_calls_of(message) else None,
                       recall=recall)
    if counter.count_message(best) < tokens:
        mark = best.response_metadata[MARK_KEY]
        removed = mark["removed_blocks"]
        args = mark.get("removed_argument_chars")
        state.replace(i, best, strategy="last_resort", kind="shortened",
                      detail=f"cut to fit the budget: from {length:,} characters of text"
                             + (f", removed {', '.join(removed)}" if removed else "")
                             + (f", {args:,} characters of tool-call arguments cut" if args else ""))


def _cut_arguments_to_fit(message: BaseMessage, want: int, length: int, media: int,
                          count: Callable[[BaseMessage], int], recall: str | None) -> BaseMessage | None:
    """The cut of `message` with its media removed and its tool-call arguments cut that costs at most `want`
    tokens, keeping as much of the text (then of the arguments) as it can; None when no cut is small enough."""
    args_len = max(arguments_length(message), 1)
    bare = shorten(message, 0, drop_media=True, args_fraction=0.0, recall=recall)
    if count(bare) > want:
        return None
    # the text: all of it, else in proportion, with the arguments at their smallest
    keep = length
    while count(shorten(message, keep, drop_media=media or False, args_fraction=0.0, recall=recall)) > want and keep:
        keep = int(keep * 0.8)
    # then as much of the arguments as fits beside it (binary search on the fraction kept)
    lo, hi = 0.0, 1.0
    for _ in range(12):
        mid = (lo + hi) / 2
        if count(shorten(message, keep, drop_media=media or False, args_fraction=mid, recall=recall)) <= want:
            lo = mid
        else:
            hi = mid
    if lo * args_len < 1:
        lo = 0.0
    return shorten(message, keep, drop_media=media or False, args_fraction=lo, recall=recall)


__all__: Sequence[str] = ["MEDIA_BLOCKS", "MIN_ARGUMENT_CHARS_TO_CUT", "MIN_ITEMS_TO_CUT", "MIN_TOKENS_TO_CUT",
                          "arguments_length", "cut_arguments", "last_resort", "media_count", "shorten", "text_length"]
