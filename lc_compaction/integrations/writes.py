"""How a rewrite is written to graph state: by id, so a message another node writes in the same step is kept.

LangGraph applies all the writes of one step together, through the `add_messages` reducer of the messages key
(`langgraph.graph.message.add_messages`), one write after another. For each message of a write, in order:

- an id already stored: the stored message is replaced *in place* (a `RemoveMessage` with that id removes it);
- a new id: the message is *appended* at the end (a `RemoveMessage` with an unknown id raises `ValueError`);
- `RemoveMessage(id=REMOVE_ALL_MESSAGES)`: everything stored before it is erased, including what another node
  (a parallel branch, a `Send`, a tool node beside the compaction) wrote earlier in the same step.

There is no "insert at": the only way to put a new message at a given place is to replace the message stored
there. So a compaction is written as:

1. every message it removed, by id (`RemoveMessage(id=...)`), and nothing else;
2. every message it changed in place (a truncated tool result, a message cut to fit, a mid-history system
   message sent as human): the same id, replaced in place;
3. every message it wrote (a summary, a drop marker): given the id of the first removed message at its place
   (`adopt_ids`), so it replaces that one in place and the order is the compacted order. The model input carries
   the same ids, so what is stored is what the model saw.

A message another node appends in the same step is in neither list: it stays, after the compacted history. A
message written by a repair of a broken history (`repair=True`: a missing tool result added, a result moved next
to its call) may stand where nothing was removed; then the compacted history from the start of that message's tool
block on is written in a second write: its stored messages are removed by id in the first and appended again, in
order, by the second (one `Command` with two writes to the messages key). A same-step message of another node is
kept then too (it may come before that tail instead of after it, never between a tool call and its results).
Only a stored history whose ids repeat (which `add_messages` never makes) is written whole, with
`REMOVE_ALL_MESSAGES`.

Streaming: LangGraph's `stream_mode="messages"` shows a message a node writes only when its id was not in the
node's input (`StreamMessagesHandler` skips the ids it has seen). Every message written here carries the id of a
stored message, so nothing compaction writes reaches the user's stream (the drop marker and the summary
included); only the messages added by a repair, which have ids of their own, can.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from langchain_core.messages import BaseMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

__all__ = ["adopt_ids", "by_id_writes", "edited_from"]


def edited_from(before: Sequence[BaseMessage], after: Sequence[BaseMessage]) -> int | None:
    """Where `after` starts to differ from `before` when it is `before` with messages replaced in place (the same
    length, the same id at every position: an arrival edit, a truncation): the first position whose message is
    neither the same object nor an equal one (`len(before)` when none); None when messages were removed, added or
    moved. The part before the last 64 messages is compared as one list first (pointer by pointer, at C speed;
    halved until it matches), so a call that edited only its new messages costs O(new messages) in Python."""
    n = len(before)
    if n != len(after):
        return None
    h = max(0, n - 64)
    while h and list(before[:h]) != list(after[:h]):
        h //= 2
    k = next((i for i in range(h, n) if before[i] is not after[i] and before[i] != after[i]), n)
    return k if all(b.id == a.id for b, a in zip(before[k:], after[k:])) else None


def adopt_ids(before: Sequence[BaseMessage], after: Sequence[BaseMessage],
              held: Collection[str] | None = None) -> list[BaseMessage]:
    """`after` (a compaction of `before`) with each message that is not in `before` (a summary, a drop marker)
    renamed, in a copy, to the id of the first message of `before` that was removed at its place: between the
    messages of `before` kept right before and right after it. A message with no removed message at its place
    (added by a repair) keeps its own id. `held`: only ids in it are taken (see `by_id_writes`; None: any).

    Returns a new list (the same message objects, except the renamed copies; none renamed when the ids of
    `before` repeat, or when `after` only replaced messages in place: `edited_from`). O(len(before) + len(after)),
    and O(the edited part) for edits in place.
    """
    if edited_from(before, after) is not None:  # no message of its own: nothing to rename
        return list(after)
    where = {m.id: i for i, m in enumerate(before)}
    if len(where) != len(before):
        return list(after)
    kept = {m.id for m in after if m.id in where}
    out: list[BaseMessage] | None = None
    pending: list[int] = []  # positions in `after` of the new messages since the last kept one
    previous = -1  # position in `before` of the last kept message
    for j in range(len(after) + 1):
        i = where.get(after[j].id) if j < len(after) else len(before)
        if i is None:
            pending.append(j)
            continue
        if pending and i > previous:
            free = [before[k].id for k in range(previous + 1, i)
                    if before[k].id not in kept and (held is None or before[k].id in held)]
            for p, slot in zip(pending, free, strict=False):  # more new messages than room: the rest keep theirs
                if out is None:
                    out = list(after)
                out[p] = after[p].model_copy(update={"id": slot})
        pending = []
        previous = max(previous, i)
    return out if out is not None else list(after)


def by_id_writes(before: Sequence[BaseMessage], after: Sequence[BaseMessage],
                 held: Collection[str] | None = None) -> list[list[BaseMessage]]:
    """The writes that turn the stored history `before` into its compaction `after` (after `adopt_ids`) through
    `add_messages`, by id (see the module docstring). Each write is a list of messages for the messages key, to
    apply in order: none when nothing changed, one in the common case, two when a repair added or moved a message
    where nothing was removed.

    Args:
        before: the history that was compacted (every message with an id).
        after: its compaction, with `adopt_ids` applied.
        held: the ids the stored state holds, when `before` may hold others (the model request of an agent,
            changed by another middleware): a message of `before` not held is neither removed nor stored. None:
            the state holds `before`.
    """
    k = edited_from(before, after)
    if k is not None:  # edits in place only (an arrival edit): the replaced messages, by id
        return [edits] if (edits := [m for b, m in zip(before[k:], after[k:])
                                      if m is not b and (held is None or m.id in held)]) else []
    if held is not None:
        ours = {m.id for m in before}
        before = [m for m in before if m.id in held]
        after = [m for m in after if m.id in held or m.id not in ours]
    where = {m.id: i for i, m in enumerate(before)}
    if len(where) != len(before):  # repeated ids cannot be told apart by id
        return [[RemoveMessage(id=REMOVE_ALL_MESSAGES), *after]]
    kept = {m.id for m in after}
    writes: list[BaseMessage] = [RemoveMessage(id=m.id) for m in before if m.id not in kept]  # type: ignore[arg-type]
    previous = -1
    for j, m in enumerate(after):
        i = where.get(m.id)
        if i is None or i < previous:  # nothing removed to stand in for, or moved: write the rest as a tail
            while j > 0 and isinstance(after[j], ToolMessage):
                j -= 1  # from the start of its tool block: a foreign message never parts results from their call
            tail = after[j:]
            tail_ids = {t.id for t in tail}
            writes = [w for w in writes if w.id not in tail_ids]
            writes += [RemoveMessage(id=t.id) for t in tail if t.id in where]  # type: ignore[arg-type]
            return [writes, list(tail)]
        previous = i
        if m is not before[i]:
            writes.append(m)
    return [writes] if writes else []
