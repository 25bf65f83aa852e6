"""Issue 22: with offload on, every rewrite of the stored history is recorded, and can be undone.

- Recording: every message that arrived and is no longer stored is in the thread's store byte-identical
  (`offload.message_json`), written once (a store that counts its puts), with the position it had in the history
  the compaction read and the number of that compaction; one compaction record per call whose node wrote the
  messages, numbered 1, 2, ...
- Undo through a compiled `StateGraph` with `CompactionNode` and through `create_agent` with
  `CompactionMiddleware`, with turns after the compactions: `uncompact()` restores the history before the latest
  compaction, `uncompact(1)` the one before the first, each equal to the original plus every later turn, message
  for message; the next call compacts again (the history no longer fits) into a valid history. On InMemory and on
  PostgreSQL (`backend`), and across two workers (two graphs, one Postgres store and checkpointer).
- Numbers are never reused: when the door's memory is reset (the key removed from the state, its version or mode
  changed), the next record is numbered after the last one the store holds, and records 1 and 2 stay as they were
  byte for byte (a record is written once: an existing key is never overwritten). Sync and async.
- With offload on, the drop marker carries `markers.SEARCH_HINT` on its second line; reading facts back skips it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from lc_compaction.history import CompactionRecord, record_key
from lc_compaction.integrations import CompactionMiddleware, CompactionNode
from lc_compaction.markers import (
    SEARCH_HINT,
    dropped_marker_facts,
    is_dropped_marker,
    make_dropped_marker,
    make_summary_message,
    summary_text,
)
from lc_compaction.offload import message_json, offload_namespace, record_message
from lc_compaction.structure import check_invariants
from tests.agent_replay import ReplayChatModel

WINDOW = 1_500
TURNS = 14


def _user(k: int) -> HumanMessage:
    lead = ("Correction: use the streaming pipeline, not the batch one. " if k == 1
            else f"Question {k} about ORD-{k:04d}. ")
    return HumanMessage(lead + "please " * 90, id=f"u{k}")


def _reply(n: Any) -> AIMessage:
    return AIMessage(f"Answer {n}: shipped. " + "ok " * 90, id=f"a{n}")


class CountingStore(BaseStore):
    """A real store (InMemory or Postgres) that counts the puts of each (namespace, key)."""

    def __init__(self, inner: BaseStore) -> None:
        self.inner = inner
        self.puts: dict[tuple[tuple[str, ...], str], int] = {}

    def _count(self, ops: Any) -> None:
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                self.puts[(op.namespace, op.key)] = self.puts.get((op.namespace, op.key), 0) + 1

    def batch(self, ops: Any) -> list[Any]:
        ops = list(ops)
        self._count(ops)
        return self.inner.batch(ops)

    async def abatch(self, ops: Any) -> list[Any]:
        ops = list(ops)
        self._count(ops)
        return await self.inner.abatch(ops)


def _graph(node: CompactionNode, store: BaseStore, saver: Any) -> Any:
    """START -> compact -> model -> END; the model's reply id follows from the request's (the same on any worker)."""
    def model(state: MessagesState) -> dict:
        return {"messages": [_reply(state["messages"][-1].id)]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", node)
    builder.add_node("model", model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver, store=store)


def _node() -> CompactionNode:
    return CompactionNode(max_input_tokens=WINDOW, offload=True)


class Chat:
    """Runs turns on one or more graphs sharing a thread; remembers every message that arrived, in order, and the
    stored history each compaction read (`before[n]`: the history before compaction n)."""

    def __init__(self, graphs: list[Any], thread: str = "t1") -> None:
        self.graphs = graphs
        self.config = {"configurable": {"thread_id": thread}}
        self.arrived: list[BaseMessage] = []
        self.before: dict[int, list[BaseMessage]] = {}

    def state(self) -> dict:
        return self.graphs[0].get_state(self.config).values

    def head(self) -> int:
        return ((self.state().get("compaction") or {}).get("history") or {}).get("head", 0)

    def turn(self, k: int, worker: int = 0) -> None:
        stored = list(self.state().get("messages") or [])
        user = _user(k)
        last = ((self.state().get("compaction") or {}).get("history") or {}).get("last", 0)
        self.graphs[worker].invoke({"messages": [user]}, self.config)
        after = self.state()
        now = after["compaction"]["history"]["last"] if "history" in after["compaction"] else 0
        if now > last:
            self.before[now] = [*stored, user]
        self.arrived += [user, after["messages"][-1]]


def _run(chat: Chat, turns: int = TURNS, workers: int = 1) -> None:
    for k in range(turns):
        chat.turn(k, worker=k % workers)
    assert len(chat.before) >= 2, "the chat compacted at least twice"


def _check_undo(chat: Chat, undo: Any) -> None:
    """Undo the latest compaction, then the first: each time the original plus every later turn; the next call
    compacts the restored history again into a valid one."""
    last = max(chat.before)
    out = undo(chat.config, None)
    assert out["undone"] == [last]
    compacting = chat.before[last][-1].id  # the user turn whose call made the latest compaction
    tail = chat.arrived[[m.id for m in chat.arrived].index(compacting) + 1:]
    assert tail, "turns arrived after it"
    assert chat.state()["messages"] == chat.before[last] + tail
    out = undo(chat.config, 1)
    assert out["undone"][-1] == 1 and out["head"] == 0
    assert chat.state()["messages"] == chat.arrived, "the original plus every later turn, message for message"
    with pytest.raises(ValueError, match="not in this thread"):
        undo(chat.config, 1)
    chat.turn(99)  # no longer fits: compacted again
    stored = chat.state()["messages"]
    check_invariants(stored)
    assert len(stored) < len(chat.arrived)
    assert chat.head() == max(chat.before), "a new record, numbered after every earlier one"


def test_undo_through_a_compiled_graph_restores_the_original_plus_later_turns(backend: Any) -> None:
    store, saver = backend
    node = _node()
    graph = _graph(node, store, saver)
    chat = Chat([graph])
    _run(chat)
    _check_undo(chat, lambda config, n: node.uncompact(config, n, graph=graph))


def test_async_undo_through_a_compiled_graph() -> None:
    """`auncompact` (InMemory: the sync PostgresSaver has no async methods)."""
    store, saver = InMemoryStore(), InMemorySaver()
    node = _node()
    graph = _graph(node, store, saver)
    chat = Chat([graph], thread="async")
    _run(chat)
    out = asyncio.run(node.auncompact(chat.config, 1, graph=graph))
    assert out["undone"][-1] == 1 and max(chat.before) in out["undone"]
    assert chat.state()["messages"] == chat.arrived


def test_undo_across_two_workers_on_postgres(postgres_backend: Any, postgres_uri: str) -> None:
    """Two graphs (two workers) share one PostgresStore and one PostgresSaver; turns alternate between them; the
    second undoes what the first compacted."""
    import psycopg

    store, saver = postgres_backend
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        for table in ("store", "checkpoint_writes", "checkpoint_blobs", "checkpoints"):
            conn.execute(f"DELETE FROM {table}")
    nodes = [_node(), _node()]
    graphs = [_graph(n, store, saver) for n in nodes]
    chat = Chat(graphs, thread="fleet.1")
    _run(chat, workers=2)
    _check_undo(chat, lambda config, n: nodes[1].uncompact(config, n, graph=graphs[1]))


def test_undo_through_create_agent_and_the_middleware(backend: Any) -> None:
    store, saver = backend
    replies = iter(_reply(n) for n in range(1_000))
    model = ReplayChatModel(messages=replies, profile={"max_input_tokens": WINDOW})
    middleware = CompactionMiddleware(max_input_tokens=WINDOW, offload=True)
    agent = create_agent(model, [], middleware=[middleware], store=store, checkpointer=saver)
    chat = Chat([agent], thread="agent")
    _run(chat)
    _check_undo(chat, lambda config, n: middleware.uncompact(config, n, graph=agent))


# ------------------------------------------------------------------------------------------------ recording


def test_every_removed_message_is_recorded_byte_identical_once(backend: Any) -> None:
    inner, saver = backend
    store = CountingStore(inner)
    node = _node()
    graph = _graph(node, store, saver)
    chat = Chat([graph])
    updates = []
    for k in range(TURNS):
        last = (chat.state().get("compaction") or {}).get("history", {}).get("last", 0) if k else 0
        stored = list(chat.state().get("messages") or [])
        user = _user(k)
        for update in graph.stream({"messages": [user]}, chat.config, stream_mode="updates"):
            if "compact" in update:
                updates.append("messages" in (update["compact"] or {}))
        state = chat.state()
        if state["compaction"].get("history", {}).get("last", 0) > last:
            chat.before[state["compaction"]["history"]["last"]] = [*stored, user]
        chat.arrived += [user, state["messages"][-1]]
    rewrites = sum(updates)
    assert rewrites >= 2
    head = chat.head()
    assert head == rewrites == max(chat.before), "one compaction record per rewrite"
    records = {n: CompactionRecord.from_value(inner.get(offload_namespace("t1", "compaction"), record_key(n)).value)
               for n in range(1, head + 1)}
    assert [r.previous for r in records.values()] == list(range(head))
    stored_ids = {m.id for m in chat.state()["messages"]}
    gone = [m for m in chat.arrived if m.id not in stored_ids]
    assert gone
    for m in gone:
        item = inner.get(offload_namespace("t1", "message"), m.id)
        assert item is not None, f"{m.id} was removed and not recorded"
        assert item.value["message"] == message_json(m), "byte-identical"
        assert record_message(item.value) == m
        n = item.value["compaction"]
        assert chat.before[n][item.value["position"]].id == m.id, "the position it had in the history compaction read"
        assert {"id": m.id, "kind": "message", "key": m.id} in records[n].before
    written = {k: v for k, v in store.puts.items() if k[0][-1] in ("message", "tool_result")}
    assert written and set(written.values()) == {1}, "each original written once"


def test_undo_needs_offload_and_something_to_undo() -> None:
    graph = _graph(CompactionNode(max_input_tokens=WINDOW), InMemoryStore(), InMemorySaver())
    with pytest.raises(ValueError, match="offload"):
        CompactionNode(max_input_tokens=WINDOW).uncompact({"configurable": {"thread_id": "x"}}, graph=graph)
    node = _node()
    graph = _graph(node, InMemoryStore(), InMemorySaver())
    config = {"configurable": {"thread_id": "x"}}
    graph.invoke({"messages": [HumanMessage("hi", id="h")]}, config)
    with pytest.raises(ValueError, match="no compaction to undo"):
        node.uncompact(config, graph=graph)
    with pytest.raises(ValueError, match="view mode"):
        CompactionNode(max_input_tokens=WINDOW, offload=True, mode="view").uncompact(config, graph=graph)


# ------------------------------------------------------------------------------------------------ numbering


class AsyncOnlyStore(CountingStore):
    """A store whose sync `batch` raises, as `AsyncPostgresStore` does on the event loop's thread."""

    def batch(self, ops: Any) -> list[Any]:
        raise AssertionError("a sync store call on the async path")


def _records(store: BaseStore, thread: str) -> dict[str, str]:
    """The thread's compaction records: key -> the value's JSON text."""
    items = store.search(offload_namespace(thread, "compaction"), limit=1_000)
    return {item.key: json.dumps(item.value) for item in items}


def _originals(store: BaseStore, thread: str) -> dict[tuple[str, str], str]:
    return {(kind, item.key): json.dumps(item.value) for kind in ("message", "tool_result")
            for item in store.search(offload_namespace(thread, kind), limit=1_000)}


def _memory_reset(memory: dict, how: str) -> dict | None:
    """The memory as a reset leaves it: removed, of another version, or of the other mode (a user switching the
    node to view mode and back)."""
    return {"removed": None, "version": {**memory, "version": -1}, "mode": {**memory, "mode": "view"}}[how]


def _history(values: dict) -> dict:
    return (values.get("compaction") or {}).get("history") or {}


def _check_renumbered(chat: Chat, inner: BaseStore, store: CountingStore, records: dict[str, str],
                      originals: dict[tuple[str, str], str], before: list[BaseMessage]) -> None:
    """After the reset: the new record is number 3, records 1 and 2 and every earlier original are as they were,
    no record was put twice."""
    thread = chat.config["configurable"]["thread_id"]
    assert _history(chat.state()) == {"head": 3, "last": 3}, "numbered after the records the store holds"
    now = _records(inner, thread)
    assert sorted(now) == [record_key(n) for n in (1, 2, 3)]
    assert {k: now[k] for k in records} == records, "records 1 and 2 unchanged, byte for byte"
    assert CompactionRecord.from_value(json.loads(now[record_key(3)])).number == 3
    later = _originals(inner, thread)
    assert {k: later[k] for k in originals} == originals, "the originals of compactions 1 and 2 unchanged"
    assert {json.loads(v)["compaction"] for k, v in later.items() if k not in originals} <= {3}
    puts = [n for (ns, _), n in store.puts.items() if ns[-1] == "compaction"]
    assert puts and set(puts) == {1}, "each record written once"
    assert chat.state()["messages"] != before


def _compact_twice(chat: Chat, turn: Any) -> int:
    k = 0
    while _history(chat.state()).get("head", 0) < 2:
        assert k < 40, "the chat compacted twice"
        turn(k)
        k += 1
    assert _history(chat.state()) == {"head": 2, "last": 2}
    return k


@pytest.mark.parametrize("how", ["removed", "version", "mode"])
def test_a_reset_memory_never_renumbers_or_overwrites_records(how: str, backend: Any) -> None:
    inner, saver = backend
    store = CountingStore(inner)
    node = _node()
    graph = _graph(node, store, saver)
    chat = Chat([graph], thread=f"reset-{how}")
    config = chat.config
    k = _compact_twice(chat, lambda k: graph.invoke({"messages": [_user(k)]}, config))
    thread = config["configurable"]["thread_id"]
    records, originals = _records(inner, thread), _originals(inner, thread)
    graph.update_state(config, {"compaction": _memory_reset(chat.state()["compaction"], how)})
    before: list[BaseMessage] = []
    while _history(chat.state()).get("head", 0) in (0, 2):
        assert k < 80, "the chat compacted again"
        before = [*chat.state()["messages"], _user(k)]
        graph.invoke({"messages": [_user(k)]}, config)
        k += 1
    _check_renumbered(chat, inner, store, records, originals, before)
    reply = chat.state()["messages"][-1]
    out = node.uncompact(config, graph=graph)
    assert out["undone"] == [3] and out["head"] == 0
    assert chat.state()["messages"] == [*before, reply], "the history before record 3, plus the reply"
    assert _records(inner, thread) == {**records, record_key(3): _records(inner, thread)[record_key(3)]}


def test_a_reset_memory_never_renumbers_records_async() -> None:
    """The async path (`aplan_compaction`) reads the last number without one sync store call."""
    inner = InMemoryStore()
    store = AsyncOnlyStore(inner)
    node = _node()
    graph = _graph(node, store, InMemorySaver())
    chat = Chat([graph], thread="reset-async")
    config = chat.config

    async def run() -> None:
        k = 0
        while _history((await graph.aget_state(config)).values).get("head", 0) < 2:
            assert k < 40, "the chat compacted twice"
            await graph.ainvoke({"messages": [_user(k)]}, config)
            k += 1
        thread = config["configurable"]["thread_id"]
        records, originals = _records(inner, thread), _originals(inner, thread)
        await graph.aupdate_state(config, {"compaction": None})
        before: list[BaseMessage] = []
        while _history((await graph.aget_state(config)).values).get("head", 0) in (0, 2):
            assert k < 80, "the chat compacted again"
            before = [*(await graph.aget_state(config)).values["messages"], _user(k)]
            await graph.ainvoke({"messages": [_user(k)]}, config)
            k += 1
        _check_renumbered(chat, inner, store, records, originals, before)
        reply = (await graph.aget_state(config)).values["messages"][-1]
        out = await node.auncompact(config, graph=graph)
        assert out["undone"] == [3]
        assert (await graph.aget_state(config)).values["messages"] == [*before, reply]

    asyncio.run(run())


def test_an_existing_record_is_never_overwritten(caplog: pytest.LogCaptureFixture) -> None:
    """A record key already in the store that the memory does not know of (a bug: numbers are never reused) is
    logged and skipped, never overwritten; the next compaction is numbered after the records the store holds. And a
    fresh memory numbers after the records the store already holds."""
    inner = InMemoryStore()
    store = CountingStore(inner)
    node = _node()
    graph = _graph(node, store, InMemorySaver())
    chat = Chat([graph], thread="taken")
    config = chat.config
    graph.invoke({"messages": [_user(0)]}, config)  # no compaction yet: the memory knows of no record
    assert _history(chat.state()).get("head", 0) == 0
    ns = offload_namespace("taken", "compaction")
    squatter = {"v": 1, "compaction": 1, "previous": 0, "triggered": True, "before": [], "after": ["x"]}
    inner.put(ns, record_key(1), squatter, index=False)
    k = 1
    with caplog.at_level(logging.ERROR, logger="lc_compaction.integrations.history"):
        while _history(chat.state()).get("head", 0) < 2:
            assert k < 40, "the chat compacted"
            graph.invoke({"messages": [_user(k)]}, config)
            k += 1
    assert inner.get(ns, record_key(1)).value == squatter, "never overwritten"
    assert any("already" in r.getMessage() for r in caplog.records), "logged"
    assert _history(chat.state()) == {"head": 2, "last": 2}, "numbered after the record the store holds"
    assert sorted(_records(inner, "taken")) == [record_key(1), record_key(2)]
    # a fresh thread whose store already holds records: numbered after them from the first compaction
    other = Chat([graph], thread="fresh")
    inner.put(offload_namespace("fresh", "compaction"), record_key(7), squatter, index=False)
    k = 0
    while _history(other.state()).get("head", 0) == 0:
        assert k < 40, "the chat compacted"
        graph.invoke({"messages": [_user(k)]}, other.config)
        k += 1
    assert _history(other.state()) == {"head": 8, "last": 8}
    assert inner.get(offload_namespace("fresh", "compaction"), record_key(7)).value == squatter


def test_record_numbers_read_the_store_only_without_a_history_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common path (the memory has its history entry) makes no store call; without it, every page of the
    thread's records is read (numbers above a page, gaps, another thread's records not counted), sync and async."""
    from lc_compaction.integrations import history

    class NoCalls(BaseStore):
        def batch(self, ops: Any) -> list[Any]:
            raise AssertionError("a store call on the common path")

        async def abatch(self, ops: Any) -> list[Any]:
            raise AssertionError("a store call on the common path")

    memory = {"history": {"head": 4, "last": 6}}
    assert history.record_numbers(NoCalls(), "t", memory) == (7, 4)
    assert asyncio.run(history.arecord_numbers(NoCalls(), "t", memory)) == (7, 4)
    monkeypatch.setattr(history, "SEARCH_PAGE", 3)
    store = InMemoryStore()
    for n in (*range(1, 9), 11):
        store.put(offload_namespace("t", "compaction"), record_key(n), {"compaction": n}, index=False)
    store.put(offload_namespace("t2", "compaction"), record_key(40), {"compaction": 40}, index=False)
    assert history.record_numbers(store, "t", None) == (12, 0)
    assert history.record_numbers(AsyncOnlyStore(store), "t", None) is None, "the store raised: not recorded"
    assert asyncio.run(history.arecord_numbers(AsyncOnlyStore(store), "t", {"calls": 3})) == (12, 0)
    assert history.record_numbers(store, "t3", None) == (1, 0)


# ------------------------------------------------------------------------------------------------ the hint


def test_the_drop_marker_names_the_search_with_offload_on_only(backend: Any) -> None:
    store, saver = backend
    graph = _graph(_node(), store, saver)
    chat = Chat([graph])
    _run(chat)
    markers = [m for m in chat.state()["messages"] if is_dropped_marker(m)]
    assert markers and all(m.text.split("\n")[1] == SEARCH_HINT for m in markers)
    off = Chat([_graph(CompactionNode(max_input_tokens=WINDOW), InMemoryStore(), InMemorySaver())])
    for k in range(TURNS):
        off.turn(k)
    assert not any(SEARCH_HINT in m.text for m in off.state()["messages"])


def test_reading_facts_back_skips_the_hint() -> None:
    marker = make_dropped_marker(message_id="m", facts="identifiers: ORD-0001", hint=True)
    assert marker.text.count(SEARCH_HINT) == 1
    assert dropped_marker_facts(marker) == "identifiers: ORD-0001"
    assert dropped_marker_facts(make_dropped_marker(message_id="m", hint=True)) == ""
    summary = make_summary_message("The user wants ORD-0001.", hint=True)
    assert SEARCH_HINT in summary.text and summary_text(summary) == "The user wants ORD-0001."
    assert make_summary_message("x").text == make_summary_message("x", hint=False).text
    assert SEARCH_HINT not in make_dropped_marker(message_id="m").text
