"""The last resort: cut messages in place when no strategy can make the history fit the budget.

A cut message keeps its id, type, `tool_call_id` and tool calls; its text is cut at the end and a marker says
how much went (`markers.SHORTENED_MARKER`), and its `response_metadata["lc_compaction"]` says
`{"kind": "shortened", "original_chars": n, "removed_blocks": [...]}`. Content blocks keep their structure:
text blocks (and text documents) are cut in order, tool-use and reasoning blocks are kept, and media blocks
(images, files, audio) are removed, oldest first and only as many as needed, when cutting the text alone cannot
get the message small enough; the marker names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from lc_compaction._content import MEDIA_BLOCKS  # re-exported: part of this module's API
from lc_compaction._content import block_text, block_type, is_media, with_block_text
from lc_compaction.ladder import LadderState
from lc_compaction.markers import MARK_KEY, SHORTENED_MARKER
from lc_compaction.progress import note_lines, terse_note
from lc_compaction.structure import is_request

MIN_TOKENS_TO_CUT = 50
"""A message of this many tokens or fewer is never cut (the marker alone costs about 20 tokens)."""


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


def shorten(message: BaseMessage, keep_chars: int, *, drop_media: bool | int = False) -> BaseMessage:
    """A copy of `message` whose text keeps its first `keep_chars` characters (in block order), with a marker.

    Args:
        message: any message (its id, type, tool_call_id and tool calls are kept).
        keep_chars: characters of text to keep, >= 0.
        drop_media: remove image / file / audio / non-text document blocks (named in the marker): True for all,
            a number N for the first N of them (the oldest), False for none.
    """
    content = message.content
    original = text_length(content)
    removed_blocks: list[str] = []
    if isinstance(content, str):
        new_content: Any = content[:keep_chars] + SHORTENED_MARKER.format(removed=max(len(content) - keep_chars, 0))
    else:
        out: list[Any] = []
        budget = keep_chars
        to_drop = len(content) if drop_media is True else int(drop_media)
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
            budget = 0
        kept = keep_chars - budget
        note = SHORTENED_MARKER.format(removed=max(original - kept, 0)).strip()
        if removed_blocks:
            note = note[:-1] + f"; removed: {', '.join(removed_blocks)}]"
        out.append({"type": "text", "text": note})
        new_content = out
    meta = dict(message.response_metadata or {})
    meta[MARK_KEY] = {"kind": "shortened", "original_chars": original, "removed_blocks": removed_blocks}
    return message.model_copy(update={"content": new_content, "response_metadata": meta})


def last_resort(state: LadderState, budget: int) -> None:
    """Cut messages in place until `state` fits `budget` tokens, or do nothing when it cannot fit.

    Order: messages not pinned first, then pinned ones and the one holding the running request's progress note
    (`progress.py`: it names the calls already made), the latest request last; the largest first in each group;
    the system prompt and messages of `MIN_TOKENS_TO_CUT` tokens or fewer never. The progress note is first made
    terse (`progress.terse_note`: each call named without its result's size and start), then, if that is not
    enough, cut like any message. Each is cut to what the
    budget needs (text first, media blocks only if the text alone is not enough). When even cutting every
    candidate to its marker could not fit (the system prompt alone is too large), nothing is cut: the caller
    reports the overflow. Every cut is recorded as a "shortened" action of the strategy "last_resort".
    """
    counter = state.counter
    slots = state.slots

    def cuttable(i: int) -> bool:
        return not isinstance(slots[i].message, SystemMessage) and slots[i].tokens > MIN_TOKENS_TO_CUT

    floor = state.fixed_tokens + sum(
        counter.count_message(shorten(s.message, 0, drop_media=True)) if cuttable(i) else s.tokens
        for i, s in enumerate(slots))
    if floor > budget:
        return
    requests = [i for i, s in enumerate(slots) if is_request(s.message)]
    latest = requests[-1] if requests else -1
    noted = {i for i, s in enumerate(slots) if note_lines(s.message)}  # the running request's progress note
    tried: set[int] = set()
    while state.total() > budget:
        candidates = [i for i in range(len(slots)) if i not in tried and cuttable(i)]
        if not candidates:
            return
        i = min(candidates, key=lambda k: (k == latest, slots[k].pinned or k in noted, -slots[k].tokens))
        tried.add(i)
        if i in noted and _terse(state, i) and state.total() <= budget:
            return
        _cut_to_fit(state, i, want=max(slots[i].tokens - (state.total() - budget), 1))


def _terse(state: LadderState, i: int) -> bool:
    """Replace message `i`'s progress note by its terse form when that is smaller; whether it was."""
    new = terse_note(state.slots[i].message)  # type: ignore[arg-type]
    tokens = state.counter.count_message(new)
    if tokens >= state.slots[i].tokens:
        return False
    state.replace(i, new, strategy="last_resort", kind="shortened", tokens=tokens,
                  detail="progress note made terse: each call named, without its result's size and start")
    return True


def _cut_to_fit(state: LadderState, i: int, *, want: int) -> None:
    """Replace message `i` by its longest cut that costs at most `want` tokens (or its smallest cut)."""
    counter = state.counter
    message, tokens = state.slots[i].message, state.slots[i].tokens
    length = text_length(message.content)
    best = None
    # text first, in proportion to the tokens to shed; then the media blocks one by one (oldest first), each
    # time keeping all the text first
    for dropped in range(media_count(message.content) + 1):
        keep = length if dropped else int(length * want / max(tokens, 1))
        while True:
            candidate = shorten(message, keep, drop_media=dropped)
            if counter.count_message(candidate) <= want:
                best = candidate
                break
            if keep == 0:
                break
            keep = int(keep * 0.8)
        if best is not None:
            break
    if best is None:
        best = shorten(message, 0, drop_media=True)
    if counter.count_message(best) < tokens:
        removed = best.response_metadata[MARK_KEY]["removed_blocks"]
        state.replace(i, best, strategy="last_resort", kind="shortened",
                      detail=f"message alone over the budget: cut from {length:,} characters of text"
                             + (f", removed {', '.join(removed)}" if removed else ""))


__all__: Sequence[str] = ["MEDIA_BLOCKS", "MIN_TOKENS_TO_CUT", "last_resort", "media_count", "shorten", "text_length"]
