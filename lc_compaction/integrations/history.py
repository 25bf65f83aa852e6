"""Compaction records and undo, the I/O part (`lc_compaction.history` is the pure part).

- `record_numbers` / `arecord_numbers`: the number a call's compaction record gets, and the record the history is
  at, before the call compacts: from the door's memory, with no store call; when the memory has no
  `history.HISTORY_KEY` entry (a new thread, a memory reset), after the last record number the store holds for the
  thread (its "compaction" namespace, searched page by page), so a number is never given twice.
- `record_rewrite`: after a door planned a call that rewrites the stored history (rewrite mode, offload on), the
  compaction record to put in the thread's store (one `PutOp`), and the memory's `history.HISTORY_KEY` entry that
  names it; `plan.plan_compaction` writes it before the plan is returned, as the originals are
  (`write_record` / `awrite_record`: written once, an existing key is never overwritten).
- `uncompact` / `auncompact`: restore a thread's stored history as it was before a compaction (default: the latest
  one whose ladder ran), keeping every message that arrived after it; `CompactionNode.uncompact` and
  `CompactionMiddleware.uncompact` call it with their state keys. It reads the graph's state
  (`graph.get_state(config)`) and the records, and writes by id through the graph
  (`graph.bulk_update_state`: the removed messages as `RemoveMessage(id=...)`, then the restored ones, as
  `writes.by_id_writes` says), with the memory's tally dropped, so the next call counts the whole history again
  and compacts it again when it no longer fits (its event says so). Through a `PostgresSaver` and a
  `PostgresStore`, any worker can undo a compaction another worker made: everything it reads is in the
  checkpoint and the store.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph.message import add_messages
from langgraph.store.base import BaseStore, GetOp, Op, PutOp, SearchOp
from langgraph.types import StateUpdate

from lc_compaction._drive import adrive, drive
from lc_compaction.compact import CompactionResult
from lc_compaction.history import (
    HISTORY_KEY,
    CompactionRecord,
    compaction_record,
    history_entry,
    history_known,
    moved_to,
    next_numbers,
    record_key,
    restore,
    undo_plan,
)
from lc_compaction.integrations.writes import by_id_writes
from lc_compaction.offload import offload_namespace, record_message

__all__ = ["arecord_numbers", "auncompact", "awrite_record", "record_numbers", "record_rewrite", "stored_after",
           "uncompact", "write_record"]

logger = logging.getLogger(__name__)

SEARCH_PAGE = 256
"""Records read per store search when the last record number of a thread is looked up (`record_numbers`)."""


def stored_after(before: Sequence[BaseMessage], writes: Sequence[Sequence[BaseMessage]]) -> list[BaseMessage]:
    """The stored history once `writes` (a plan's `messages_writes`) are applied to `before` through LangGraph's
    `add_messages` reducer, in order, as the graph applies them."""
    out: Any = list(before)
    for w in writes:
        out = add_messages(out, list(w))  # type: ignore[arg-type]  # a list of messages is a Messages
    return list(out)


def _last_stored(thread_id: str) -> Generator[list[Op], list[Any], int]:
    """The largest record number the store holds for `thread_id` (0: none): every record of its compaction
    namespace, `SEARCH_PAGE` a search (the stores order a search by recency or insertion, not by key)."""
    ns = offload_namespace(thread_id, "compaction")
    last = offset = 0
    while True:
        items = (yield [SearchOp(ns, limit=SEARCH_PAGE, offset=offset)])[0]
        for item in items:
            if tuple(item.namespace) == ns and item.key.isascii() and item.key.isdigit():
                last = max(last, int(item.key))
        if len(items) < SEARCH_PAGE:
            return last
        offset += len(items)


def _numbering(thread_id: str, memory: Any) -> Generator[list[Op], list[Any], tuple[int, int] | None]:
    if history_known(memory):
        return next_numbers(memory)  # the common path: no store call
    try:
        stored = yield from _last_stored(thread_id)
    except Exception as exc:  # noqa: BLE001 - the record serves undo only: the call goes on, unrecorded
        logger.warning("Could not read the compaction records of thread %r (%s: %s): this call's rewrite of the "
                       "stored history is not recorded (it cannot be undone)", thread_id, type(exc).__name__, exc)
        return None
    return next_numbers(memory, stored)


def record_numbers(store: BaseStore, thread_id: str, memory: Any) -> tuple[int, int] | None:
    """(the number of the call's compaction record, the record the history is at: its "previous"), from the door's
    memory (`memory`: the previous call's, of this version and mode; no store call when it has a history entry,
    `history.history_known`), else after the last record number `store` holds for `thread_id` (a new thread, or
    a memory reset: the history is then at no known record, 0). None when the store raised on that read (logged:
    the call's rewrite is not recorded)."""
    return drive(_numbering(thread_id, memory), store.batch)


async def arecord_numbers(store: BaseStore, thread_id: str, memory: Any) -> tuple[int, int] | None:
    """Async twin of `record_numbers` (no sync store call)."""
    return await adrive(_numbering(thread_id, memory), store.abatch)


def record_rewrite(memory: dict[str, Any], previous_memory: Any, before: Sequence[BaseMessage],
                   writes: Sequence[Sequence[BaseMessage]], result: CompactionResult, thread_id: str,
                   number: int, previous: int) -> PutOp | None:
    """The compaction record of a call (number `number`, at record `previous` before it: `record_numbers`) that
    writes `writes` to the stored history `before`, as a `PutOp` in `thread_id`'s compaction namespace; None when
    the call writes nothing. Sets `memory[HISTORY_KEY]` (`memory`: the call's new memory; `previous_memory`: the
    one it read): at the new record, or as it was (with the last number given, so a memory that had no entry
    does not read the store again)."""
    if not writes:
        memory[HISTORY_KEY] = {"head": previous, "last": max(number - 1, previous)}
        return None
    failed = {f["id"] for f in (result.offload or {}).get("failed", [])}
    record = compaction_record(number, previous, result.triggered, before, stored_after(before, writes),
                               result.offloads, failed)
    memory[HISTORY_KEY] = moved_to(previous_memory, number, number)
    return PutOp(offload_namespace(thread_id, "compaction"), record_key(number), record.value(), index=False)


def _put_once(put: PutOp, memory: dict[str, Any], previous_memory: Any) -> Generator[list[Op], list[Any], None]:
    """Look the record's key up, then put it unless it is there: a record is written once. A key already taken is
    a bug (numbers are never given twice): logged, the record skipped and the memory's entry dropped, so the next
    call numbers after the records the store holds (`record_numbers`)."""
    try:
        if (yield [GetOp(put.namespace, put.key)])[0] is not None:
            logger.error("Compaction record %s of %s is already in the store: not overwritten, this rewrite is not "
                         "recorded (it cannot be undone); numbers are never given twice, please report it",
                         put.key, put.namespace[-2])
            memory.pop(HISTORY_KEY, None)
            return
        yield [put]
    except Exception as exc:  # noqa: BLE001 - the record serves undo only: the call goes on
        _failed(put, memory, previous_memory, exc)


def write_record(store: BaseStore, put: PutOp, memory: dict[str, Any], previous_memory: Any) -> None:
    """Put a compaction record unless its key is already in the store (`_put_once`: logged, never overwritten);
    when the store raises, log it and leave the memory's entry as it was (that compaction cannot be undone;
    nothing else is lost)."""
    drive(_put_once(put, memory, previous_memory), store.batch)


async def awrite_record(store: BaseStore, put: PutOp, memory: dict[str, Any], previous_memory: Any) -> None:
    """Async twin of `write_record`."""
    await adrive(_put_once(put, memory, previous_memory), store.abatch)


def _failed(put: PutOp, memory: dict[str, Any], previous_memory: Any, exc: BaseException) -> None:
    logger.warning("Could not write compaction record %s (%s: %s): it cannot be undone", put.key,
                   type(exc).__name__, exc)
    if history_known(previous_memory):
        memory[HISTORY_KEY] = dict(previous_memory[HISTORY_KEY])
    else:
        memory.pop(HISTORY_KEY, None)


# ------------------------------------------------------------------------------------------------- undo


def _undo(thread_id: str, current: list[BaseMessage], memory: Any, compaction: int | None
          ) -> Generator[list[GetOp], list[Any], tuple[list[BaseMessage], list[int], int]]:
    """The restored history, the numbers undone (newest first) and the record the history is then at: reads the
    records from the head back (one lookup each) until the one asked for, then the originals they name (one
    batched lookup)."""
    ns = offload_namespace(thread_id, "compaction")
    chain: list[CompactionRecord] = []
    number = history_entry(memory)[0]
    while number:
        item = (yield [GetOp(ns, record_key(number))])[0]
        if item is None:
            raise ValueError(f"compaction record {number} of thread {thread_id!r} is not in the store")
        record = CompactionRecord.from_value(item.value)
        chain.append(record)
        if record.number == compaction or (compaction is None and record.triggered):
            break
        number = record.previous
    records, head = undo_plan(chain, compaction)
    refs = list(dict.fromkeys(ref for r in records for ref in r.refs()))
    items = (yield [GetOp(offload_namespace(thread_id, kind), key) for kind, key in refs]) if refs else []
    originals = {ref: record_message(item.value) for ref, item in zip(refs, items, strict=True) if item is not None}
    restored = current
    for r in records:
        restored = restore(restored, r, originals)
    return restored, [r.number for r in records], head


def _read(graph: Any, config: Any, messages_key: str, memory_key: str, mode: str,
          store: BaseStore | None) -> tuple[BaseStore, str]:
    if mode != "rewrite":
        raise ValueError("uncompact: view mode never rewrites the stored history (nothing to undo)")
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None or thread == "":
        raise ValueError("uncompact needs the thread: config={'configurable': {'thread_id': ...}}")
    chosen = store if store is not None else getattr(graph, "store", None)
    if chosen is None:
        raise ValueError("uncompact needs the store the compaction records are in: the graph's "
                         "(compile(store=...), create_agent(store=...)) or offload=<a BaseStore>")
    return chosen, str(thread)


def _updates(current: list[BaseMessage], restored: list[BaseMessage], memory: Any, head: int,
             messages_key: str, memory_key: str, as_node: str | None) -> list[list[StateUpdate]]:
    """The supersteps of the write: the messages by id (one or two writes, `writes.by_id_writes`), the memory
    (its tally dropped, its history entry at `head`) with the last one."""
    new_memory = {k: v for k, v in (memory or {}).items() if k != "tally"}
    new_memory[HISTORY_KEY] = moved_to(memory, head)
    writes = by_id_writes(current, restored)
    steps: list[list[StateUpdate]] = [[StateUpdate({messages_key: w}, as_node)] for w in writes]
    last = {memory_key: new_memory, **({messages_key: writes[-1]} if writes else {})}
    return [*steps[:-1], [StateUpdate(last, as_node)]]


def _report(undone: list[int], head: int, current: list[BaseMessage], restored: list[BaseMessage],
            config: Any) -> dict[str, Any]:
    return {"undone": undone, "head": head, "messages_before": len(current), "messages_after": len(restored),
            "config": config}


def uncompact(graph: Any, config: Any, compaction: int | None = None, *, messages_key: str = "messages",
              memory_key: str = "compaction", mode: str = "rewrite", store: BaseStore | None = None,
              as_node: str | None = None) -> dict[str, Any]:
    """Restore the stored history of the thread `config` names as it was before compaction record `compaction`
    (its number; None: the latest whose ladder ran), keeping every message that arrived after it; written by id
    through `graph` (a compiled graph with a checkpointer). See the module docstring.

    Args:
        graph: the compiled graph (`create_agent(...)`, `builder.compile(...)`) whose state holds the thread.
        config: the run's config, with `configurable.thread_id`.
        compaction: the record's number (from 1, as the memory's `history` entry and the records count them).
        messages_key / memory_key: the door's state keys.
        mode: the door's mode ("view" raises: it never rewrites the stored history).
        store: the store the records are in; None: the graph's.
        as_node: the node the update is written as (`graph.update_state`'s; None: the last node that wrote).

    Returns: `{"undone": [numbers, newest first], "head": the record the history is at now (0: none),
    "messages_before": int, "messages_after": int (messages), "config": the config of the new checkpoint}`.

    Raises:
        ValueError: view mode, no thread id, no store, no such record (never made, or undone already), a record
            or an original missing from the store, or a message the record kept no longer stored.
    """
    chosen, thread = _read(graph, config, messages_key, memory_key, mode, store)
    values = graph.get_state(config).values
    current, memory = list(values.get(messages_key) or []), values.get(memory_key)
    restored, undone, head = drive(_undo(thread, current, memory, compaction), chosen.batch)
    new_config = graph.bulk_update_state(config, _updates(current, restored, memory, head, messages_key,
                                                          memory_key, as_node))
    return _report(undone, head, current, restored, new_config)


async def auncompact(graph: Any, config: Any, compaction: int | None = None, *, messages_key: str = "messages",
                     memory_key: str = "compaction", mode: str = "rewrite", store: BaseStore | None = None,
                     as_node: str | None = None) -> dict[str, Any]:
    """Async twin of `uncompact`."""
    chosen, thread = _read(graph, config, messages_key, memory_key, mode, store)
    values = (await graph.aget_state(config)).values
    current, memory = list(values.get(messages_key) or []), values.get(memory_key)
    restored, undone, head = await adrive(_undo(thread, current, memory, compaction), chosen.abatch)
    new_config = await graph.abulk_update_state(config, _updates(current, restored, memory, head, messages_key,
                                                                 memory_key, as_node))
    return _report(undone, head, current, restored, new_config)
