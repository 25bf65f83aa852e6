"""A fleet of workers on one PostgreSQL checkpointer and store: offload and recall under load.

    scripts/dev python benchmarks/fleet.py                    # 4 workers x 25 threads; writes benchmarks/FLEET.md
    scripts/dev python benchmarks/fleet.py --workers 2 --threads 3 --turns 3 --output /tmp/F.md

What runs:

- **Threads.** `workers * threads` conversation threads, thread j replaying the tau-bench airline conversation
  j mod 40 of the shared traces (multi-turn: 4 to 15 user turns), every id prefixed with `T{j}|` so that no two
  threads share a `tool_call_id` (a recall of another thread's id must then answer "not found").
- **Workers.** `workers` processes, each a compiled LangGraph graph (the `CompactionNode` in rewrite mode with
  `offload=True`, a scripted model, the recorded tools, a `ToolNode` with `recall_tool_result`) on one shared
  `PostgresSaver` and `PostgresStore` (a psycopg pool per worker), running `threads` turns at once (a thread
  pool). Turn t of thread j goes to worker (j + t) mod workers: a thread's consecutive turns never run on the
  same worker, so the first model call of every turn runs on a worker that did not see the previous call.
- **The scripted model** is stateless (any worker can run any call): it reads the last message of its input,
  replies with the recorded assistant message that follows it, and at the start of a turn first recalls the
  most recent offloaded result it sees, with the handle its note names (checking the answer against the
  recording, byte for byte: a non-empty first slice, whole or followed by the line naming the next offset; an
  answer identical to an earlier one arrives as a deduplication note, and the earlier answer it names is checked) and,
  at the second turn, recalls a `tool_call_id` of another thread (the answer must be "not found").
- **Checks after the run** (`FleetReport.problems`, empty when all hold): in every thread's final checkpoint no
  message id twice; every recorded message of the replayed turns is in the checkpoint as recorded, or is a note /
  preview there, or is gone, and in the last two cases its original is in the thread's store namespace,
  byte-identical, or it is a deduplication note there and the earlier result it names is in the checkpoint as
  recorded; every record in the store recalled slice by slice (`read_recall`) gives the original; every
  recall the model made gave its own thread's content, and every cross-thread recall "not found".
- **Figures**: turns per second (wall clock), and the compaction node's own time per model call, split into the
  first call of a turn (a worker that did not see the previous call: the tally is not in its memory) and the
  other calls (the same worker as the previous call); plus, on InMemoryStore and on PostgresStore, the cost of
  an offload write (one record: lookup and put) and of a recall (one slice of 8,000 characters).
"""

from __future__ import annotations

import contextvars
import json
import multiprocessing as mp
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from tests.shared_data import traces_dir

ROOT = Path(__file__).resolve().parent.parent
CLOSING = "[replay: the recording has no reply here]"
HANDLE = re.compile(r'recall_tool_result\(tool_call_id=("(?:[^"\\]|\\.)*")\)')
"""The handle a note or preview names (a JSON string), as a model reads it."""
WINDOW = 8_000
OFFLOAD_ABOVE = 1_000
"""Tokens. The window is small enough that compaction truncates and drops in most threads, and large enough for a
recall's answer (the slice its window allows beside the tau-bench system prompt and tools,
`lc_compaction.offload.recall_chars`); `offload_above` is under the largest tau-bench results (flight searches), so
results are also offloaded on arrival."""

LOG: contextvars.ContextVar[dict[str, list]] = contextvars.ContextVar("fleet_log")
"""The calls and checks of the turn being run (LangGraph copies the context into the threads that run nodes)."""


# ----------------------------------------------------------------------------------------------- conversations


@dataclass
class Conversation:
    """One thread's replay: its turns (the user message first), the recorded messages by id, and the next reply
    after each message that an assistant message follows."""

    thread: int
    system: SystemMessage | None
    turns: list[list[BaseMessage]]
    by_id: dict[str, BaseMessage] = field(default_factory=dict)
    by_call: dict[str, ToolMessage] = field(default_factory=dict)
    reply_after: dict[str, AIMessage] = field(default_factory=dict)

    def recorded(self, turns: int) -> list[BaseMessage]:
        out = [self.system] if self.system is not None else []
        for t in self.turns[:turns]:
            out.extend(t)
        return out


def _relabel(m: BaseMessage, prefix: str) -> BaseMessage:
    update: dict[str, Any] = {"id": prefix + (m.id or "")}
    if isinstance(m, ToolMessage):
        update["tool_call_id"] = prefix + m.tool_call_id
    if isinstance(m, AIMessage) and m.tool_calls:
        update["tool_calls"] = [{**tc, "id": prefix + tc["id"]} for tc in m.tool_calls]
    return m.model_copy(update=update)


def conversations(n: int, traces_dir: Path, max_turns: int | None) -> list[Conversation]:
    """`n` threads over the tau-bench airline conversations (thread j: conversation j mod 40), ids prefixed
    `T{j}|`; a turn the recording left open is closed with a synthetic reply."""
    from lc_compaction.traces import load_traces

    traces = load_traces(traces_dir / "tau_bench_airline.jsonl")
    out = []
    for j in range(n):
        trace = traces[j % len(traces)]
        prefix = f"T{j}|"
        msgs = [_relabel(m, prefix) for m in trace.messages]
        system = msgs[0] if msgs and isinstance(msgs[0], SystemMessage) else None
        turns: list[list[BaseMessage]] = []
        for m in msgs[1 if system else 0:]:
            if isinstance(m, HumanMessage):
                turns.append([m])
            elif turns:
                turns[-1].append(m)
        for k, t in enumerate(turns):
            if not isinstance(t[-1], AIMessage) or t[-1].tool_calls:
                t.append(AIMessage(CLOSING, id=f"{prefix}closing:{k}"))
        turns = turns[:max_turns] if max_turns else turns
        conv = Conversation(j, system, turns)
        previous = None
        for m in conv.recorded(len(turns)):
            conv.by_id[m.id] = m
            if isinstance(m, ToolMessage):
                conv.by_call[m.tool_call_id] = m
            if isinstance(m, AIMessage) and previous is not None:
                conv.reply_after[previous.id] = m
            previous = m
        out.append(conv)
    return out


# ----------------------------------------------------------------------------------------------- one worker


def _graph(convs: list[Conversation], checkpointer: Any, store: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    from lc_compaction import CompactionPolicy
    from lc_compaction.integrations import CompactionNode, CompactionState, recall_tool_result
    from lc_compaction.offload import RECALL_TOOL_NAME, is_offloaded, recall_text

    node = CompactionNode(CompactionPolicy(max_input_tokens=WINDOW, offload=True, offload_above=OFFLOAD_ABOVE),
                          tools=[recall_tool_result])
    by_thread = {c.thread: c for c in convs}

    def thread_of(config: RunnableConfig) -> Conversation:
        return by_thread[int(config["configurable"]["thread_id"].rsplit("-", 1)[1])]

    def compact(state: dict, config: RunnableConfig) -> dict:
        first = isinstance(state["messages"][-1], HumanMessage)
        t0 = time.perf_counter()
        out = node.invoke(state, config)
        LOG.get()["calls"].append((first, (time.perf_counter() - t0) * 1000))
        return out

    def recall_call(kind: str, anchor: str, target: str, handle: str | None = None) -> AIMessage:
        """A recall of `handle` (default: `target`, the recorded tool_call_id the answer is checked against)."""
        cid = f"{kind}|{esc(anchor)}|{esc(target)}"  # the ids hold "|": escaped in the call id only
        return AIMessage("", id=f"ai-{cid}", tool_calls=[{"name": RECALL_TOOL_NAME,
                                                          "args": {"tool_call_id": handle or target}, "id": cid}])

    def model(state: dict, config: RunnableConfig) -> dict:
        conv = thread_of(config)
        messages = state["messages"]
        last = messages[-1]
        step = "turn"
        anchor = last.id
        if isinstance(last, ToolMessage) and last.tool_call_id.startswith(("recall|", "xrecall|")):
            kind, anchor, target = last.tool_call_id.split("|", 2)
            anchor = anchor.replace("\x1f", "|")
            target = target.replace("\x1f", "|")
            if kind == "xrecall":
                other = int(target[1:target.index("|")])
                ok = "not found" in last.content and by_thread_content(other, target) not in last.content
                LOG.get()["checks"].append(("cross_thread", ok, last.tool_call_id))
                step = "own"
            else:
                expected = recall_text(conv.by_call[target].content)
                answer = earlier_copy(last, messages)  # an answer identical to an earlier one is noted on arrival
                end = answer.artifact["end"] if answer is not None and isinstance(answer.artifact, dict) else 0
                ok = answer is not None and end > 0 and answer.content[:end] == expected[:end] and (
                    answer.content == expected if end == len(expected)
                    else answer.content[end:].endswith(f"call again with offset={end} for more]"))
                LOG.get()["checks"].append(("recall", ok, target))
                step = "reply"
        if isinstance(last, HumanMessage):
            turn = next(k for k, t in enumerate(conv.turns) if t[0].id == last.id)
            others = [c for c in convs if c.thread != conv.thread]
            if turn == 1 and others:
                other = others[conv.thread % len(others)]
                target = next(iter(other.by_call), None)
                if target is not None:
                    return {"messages": [recall_call("xrecall", anchor, target)]}
            step = "own"
        if step == "own":
            notes = [m for m in messages if isinstance(m, ToolMessage) and is_offloaded(m)
                     and m.tool_call_id in conv.by_call]
            if notes:
                handle = HANDLE.search(str(notes[-1].content))
                return {"messages": [recall_call("recall", anchor, notes[-1].tool_call_id,
                                                 json.loads(handle.group(1)) if handle else None)]}
        reply = conv.reply_after[anchor]
        return {"messages": [reply.model_copy()]}

    def by_thread_content(thread: int, call: str) -> str:
        other = by_thread.get(thread)
        return recall_text(other.by_call[call].content)[:200] if other and call in other.by_call else "\x00"

    def tools(state: dict, config: RunnableConfig) -> dict:
        conv = thread_of(config)
        return {"messages": [conv.by_call[tc["id"]].model_copy() for tc in state["messages"][-1].tool_calls]}

    def route(state: dict) -> str:
        calls = state["messages"][-1].tool_calls if isinstance(state["messages"][-1], AIMessage) else []
        if not calls:
            return END
        return "recall" if calls[0]["name"] == RECALL_TOOL_NAME else "tools"

    builder = StateGraph(CompactionState)
    builder.add_node("compact", compact)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_node("recall", ToolNode([recall_tool_result]))
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_conditional_edges("model", route, ["tools", "recall", END])
    builder.add_edge("tools", "compact")
    builder.add_edge("recall", "compact")
    return builder.compile(checkpointer=checkpointer, store=store)


def esc(s: str) -> str:
    return s.replace("|", "\x1f")


def earlier_copy(message: BaseMessage, messages: list[BaseMessage]) -> BaseMessage | None:
    """What the model reads for `message`: the message itself, or for a deduplication note (`lc_compaction.dedup`)
    the earlier result it names, when `messages` holds it whole (else None)."""
    from lc_compaction.dedup import is_deduplicated
    from lc_compaction.markers import MARK_KEY, is_shortened, is_truncated

    if not is_deduplicated(message):
        return message
    same = message.response_metadata[MARK_KEY].get("same_as")
    source = next((m for m in messages if m.id == same), None)
    return None if source is None or is_truncated(source) or is_shortened(source) else source


def _pools(uri: str, size: int) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(uri, min_size=1, max_size=size, open=True,
                          kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    return pool, PostgresSaver(pool), PostgresStore(pool)


def _worker(index: int, uri: str, spec: dict, tasks: Any, results: Any) -> None:
    convs = conversations(spec["n_threads"], Path(spec["traces"]), spec["max_turns"])
    pool, saver, store = _pools(uri, min(spec["threads"], 10))
    graph = _graph(convs, saver, store)
    by_thread = {c.thread: c for c in convs}

    def run(thread: int, turn: int) -> None:
        log: dict[str, list] = {"calls": [], "checks": []}
        LOG.set(log)
        conv = by_thread[thread]
        first = [conv.system] if turn == 0 and conv.system is not None else []
        error = None
        t0 = time.perf_counter()
        try:
            graph.invoke({"messages": [*first, conv.turns[turn][0]]},
                         {"configurable": {"thread_id": f"{spec['run']}-{thread}"}, "recursion_limit": 200})
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which fails the run
            error = f"{type(exc).__name__}: {exc}"
        results.put({"thread": thread, "turn": turn, "worker": index, "calls": log["calls"], "checks": log["checks"],
                     "error": error, "seconds": time.perf_counter() - t0})

    results.put({"ready": index})
    with ThreadPoolExecutor(spec["threads"]) as ex:
        while True:
            task = tasks.get()
            if task is None:
                break
            ex.submit(run, *task)
    pool.close()


# ----------------------------------------------------------------------------------------------- the coordinator


@dataclass
class FleetReport:
    """What a fleet run did and measured (`to_dict()` is plain JSON)."""

    workers: int
    threads: int
    turns: int
    model_calls: int
    seconds: float
    first_call_ms: list[float]
    other_call_ms: list[float]
    recalls: int
    cross_thread_recalls: int
    records: int
    problems: list[str]

    def to_dict(self) -> dict[str, Any]:
        def stats(xs: list[float]) -> dict[str, float]:
            if not xs:
                return {}
            xs = sorted(xs)
            return {"n": len(xs), "median": round(statistics.median(xs), 3),
                    "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3), "max": round(xs[-1], 3)}

        return {"workers": self.workers, "threads": self.threads, "turns": self.turns,
                "model_calls": self.model_calls, "seconds": round(self.seconds, 2),
                "turns_per_second": round(self.turns / self.seconds, 2) if self.seconds else None,
                "first_call_of_turn_ms": stats(self.first_call_ms), "other_calls_ms": stats(self.other_call_ms),
                "recalls": self.recalls, "cross_thread_recalls": self.cross_thread_recalls,
                "offloaded_records": self.records, "problems": self.problems}


def run_fleet(uri: str, *, workers: int = 4, threads: int = 25, max_turns: int | None = None,
              traces: Path | None = None, timeout: float = 1800.0) -> FleetReport:
    """Run the fleet (see the module docstring) against the PostgreSQL server at `uri` and check the outcome.

    Raises:
        ValueError: fewer than 2 workers (consecutive turns could not change worker).
        TimeoutError: the run took longer than `timeout` seconds.
    """
    if workers < 2:
        raise ValueError("workers: at least 2 (a thread's consecutive turns must go to different workers), "
                         f"got {workers}")
    traces = traces or traces_dir()
    n = workers * threads
    spec = {"n_threads": n, "threads": threads, "max_turns": max_turns, "traces": str(traces),
            "run": f"fleet{os.getpid()}x{int(time.time())}"}
    convs = conversations(n, traces, max_turns)
    _setup(uri)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(workers)]
    procs = [ctx.Process(target=_worker, args=(w, uri, spec, inboxes[w], results), daemon=True) for w in range(workers)]
    for p in procs:
        p.start()
    outcomes: list[dict] = []
    problems: list[str] = []
    try:
        ready = 0
        deadline = time.monotonic() + timeout
        while ready < workers:
            msg = results.get(timeout=max(1.0, deadline - time.monotonic()))
            ready += "ready" in msg
        t0 = time.perf_counter()
        for c in convs:
            inboxes[c.thread % workers].put((c.thread, 0))
        remaining = sum(len(c.turns) for c in convs)
        while remaining:
            try:
                out = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the fleet did not finish in {timeout} s ({remaining} turns left)") from None
            outcomes.append(out)
            remaining -= 1
            if out["error"]:
                problems.append(f"thread {out['thread']} turn {out['turn']}: {out['error']}")
            nxt = out["turn"] + 1
            if nxt < len(convs[out["thread"]].turns):
                inboxes[(out["thread"] + nxt) % workers].put((out["thread"], nxt))
        seconds = time.perf_counter() - t0
    finally:
        for box in inboxes:
            box.put(None)
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    where = {(o["thread"], o["turn"]): o["worker"] for o in outcomes}
    for (j, t), w in where.items():
        if (j, t + 1) in where and where[(j, t + 1)] == w:
            problems.append(f"thread {j}: turns {t} and {t + 1} ran on the same worker {w}")
    checks = [c for o in outcomes for c in o["checks"]]
    problems += [f"{kind} check failed: {detail}" for kind, ok, detail in checks if not ok]
    records = _verify(uri, spec["run"], convs, problems)
    first = [ms for o in outcomes for f, ms in o["calls"] if f]
    other = [ms for o in outcomes for f, ms in o["calls"] if not f]
    return FleetReport(workers=workers, threads=threads, turns=len(outcomes), model_calls=len(first) + len(other),
                       seconds=seconds, first_call_ms=first, other_call_ms=other,
                       recalls=sum(1 for c in checks if c[0] == "recall"),
                       cross_thread_recalls=sum(1 for c in checks if c[0] == "cross_thread"), records=records,
                       problems=problems)


def _setup(uri: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(uri) as saver, PostgresStore.from_conn_string(uri) as store:
        saver.setup()
        store.setup()


def _verify(uri: str, run: str, convs: list[Conversation], problems: list[str]) -> int:
    """The checks on every thread's final checkpoint and store namespace (see the module); returns the number of
    records checked."""
    from lc_compaction.dedup import is_deduplicated
    from lc_compaction.integrations.recall import read_recall
    from lc_compaction.markers import is_dropped_marker, is_shortened, is_summary, is_truncated
    from lc_compaction.offload import offload_namespace, recall_text, record_message
    from lc_compaction.progress import note_lines, without_note

    pool, saver, store = _pools(uri, 2)
    records = 0
    try:
        for conv in convs:
            thread = f"{run}-{conv.thread}"
            tup = saver.get_tuple({"configurable": {"thread_id": thread}})
            state = tup.checkpoint["channel_values"].get("messages", []) if tup else []
            ids = [m.id for m in state]
            if len(ids) != len(set(ids)):
                problems.append(f"{thread}: a message id appears twice in the checkpoint")
            stored: dict[str, BaseMessage] = {}
            for kind in ("tool_result", "message"):
                for item in store.search(offload_namespace(thread, kind), limit=10_000):
                    m = record_message(item.value)
                    stored[m.id] = m
                    records += 1
                    if kind == "tool_result":
                        parts, offset = [], 0
                        while True:
                            text, info = read_recall(store, thread, item.key, offset)
                            parts.append(text[: info["end"] - offset])
                            if info["end"] >= info["total_chars"]:
                                break
                            offset = info["end"]
                        if "".join(parts) != recall_text(m.content):
                            problems.append(f"{thread}: recall of {item.key} is not the original")
            in_state = {m.id: m for m in state}
            for rec in conv.recorded(len(conv.turns)):
                have = in_state.get(rec.id)
                kept = stored.get(rec.id)
                if have is not None and (have.content == rec.content):
                    continue
                if have is not None and note_lines(have) and without_note(have).content == rec.content:
                    continue  # it hosts the running loop's progress note, its own content intact (progress.py)
                if have is not None and is_deduplicated(have):  # its content: the earlier result it names
                    source = earlier_copy(have, state)
                    if source is None or json.dumps(source.content) != json.dumps(rec.content):
                        problems.append(f"{thread}: message {rec.id} is a deduplication note whose earlier result "
                                        "is not in the checkpoint as recorded")
                    continue
                if kept is None:
                    problems.append(f"{thread}: message {rec.id} is lost (changed or gone, not in the store)")
                elif json.dumps(kept.content) != json.dumps(rec.content):
                    problems.append(f"{thread}: the stored original of {rec.id} differs from the recording")
                elif have is not None and not (is_truncated(have) or is_shortened(have)
                                               or is_dropped_marker(have) or is_summary(have)):
                    # a drop marker or a summary takes the id of the first message it stands for (writes.py)
                    problems.append(f"{thread}: message {rec.id} changed without a note")
            order = [m.id for m in state if m.id in conv.by_id]
            expected = [m.id for m in conv.recorded(len(conv.turns)) if m.id in set(order)]
            if order != expected:
                problems.append(f"{thread}: the checkpoint's messages are out of the recorded order")
    finally:
        pool.close()
    return records


# ----------------------------------------------------------------------------------------------- store costs


def store_costs(uri: str | None, repeat: int = 200) -> dict[str, dict[str, float]]:
    """Median microseconds of an offload write (one record of 10,000 characters: the batched lookup and put),
    of the same write when the record is already there (the lookup alone), and of a recall of one slice of 8,000
    characters, on InMemoryStore and (when `uri` is given) PostgresStore."""
    from langgraph.store.memory import InMemoryStore

    from lc_compaction.integrations.offload import OffloadTarget, write_offloads
    from lc_compaction.integrations.recall import read_recall
    from lc_compaction.offload import OffloadRecord

    stores: dict[str, Any] = {"InMemoryStore": InMemoryStore()}
    pool = None
    if uri:
        pool, _, pg = _pools(uri, 2)
        stores["PostgresStore"] = pg
    text = "".join(f"row {i}: flight HAT{i:03d} seats 12 price {i * 13 % 700} USD\n" for i in range(250))[:10_000]
    out: dict[str, dict[str, float]] = {}
    try:
        for name, store in stores.items():
            target = OffloadTarget(store, f"costs-{name}-{os.getpid()}-{int(time.time())}")
            write, again, recall = [], [], []
            for i in range(repeat):
                rec = [OffloadRecord(ToolMessage(text, tool_call_id=f"c{i}", name="search", id=f"t{i}"), "truncated")]
                t0 = time.perf_counter_ns()
                report = write_offloads(rec, target)
                t1 = time.perf_counter_ns()
                write_offloads(rec, target)
                t2 = time.perf_counter_ns()
                answer, _ = read_recall(store, target.thread_id, f"c{i}")
                t3 = time.perf_counter_ns()
                assert report["written"] == 1 and answer.startswith(text[:8_000])
                write.append((t1 - t0) / 1000)
                again.append((t2 - t1) / 1000)
                recall.append((t3 - t2) / 1000)
            out[name] = {"write_us": round(statistics.median(write), 1),
                         "already_stored_us": round(statistics.median(again), 1),
                         "recall_us": round(statistics.median(recall), 1)}
    finally:
        if pool is not None:
            pool.close()
    return out


# ----------------------------------------------------------------------------------------------- the report


def render(report: dict[str, Any], costs: dict[str, Any], machine: dict[str, Any], command: str) -> str:
    f, o = report["first_call_of_turn_ms"], report["other_calls_ms"]
    lines = [
        "# Offload on a fleet: PostgreSQL checkpointer and store shared by worker processes",
        "",
        f"Generated by `{command}` (benchmarks/fleet.py; the method is in its docstring).",
        "",
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, Python {machine['python']}, "
        f"{machine['date']}; load average before: {machine.get('load_before')}, after: {machine.get('load_after')}.",
        "",
        "## The run",
        "",
        "| workers | threads | turns | model calls | seconds | turns / s | recalls | cross-thread recalls | "
        "offloaded records | problems |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {report['workers']} | {report['workers'] * report['threads']} ({report['threads']} a worker) | "
        f"{report['turns']} | {report['model_calls']} | {report['seconds']} | {report['turns_per_second']} | "
        f"{report['recalls']} | {report['cross_thread_recalls']} | {report['offloaded_records']} | "
        f"{len(report['problems'])} |",
        "",
        "Compaction per model call (the `CompactionNode` call, offload writes to PostgreSQL included), ms of wall "
        "time inside a worker that runs up to its threads' turns at once (so waits for the GIL and the connection "
        "pool are in it). The single-process figures (steady state, first call of a run from a checkpoint) are in "
        "[RESULTS.md](RESULTS.md).",
        "",
        "| model call | calls | median | p95 | max |",
        "|---|---|---|---|---|",
        f"| first of a turn: a worker that did not see the previous call | {f.get('n')} | {f.get('median')} | "
        f"{f.get('p95')} | {f.get('max')} |",
        f"| later in the turn: the same worker as the previous call | {o.get('n')} | {o.get('median')} | "
        f"{o.get('p95')} | {o.get('max')} |",
        "",
        f"Window {WINDOW:,} tokens, `offload_above` {OFFLOAD_ABOVE:,} tokens, rewrite mode. Every thread's checkpoint "
        "and store namespace were checked after the run: no lost or duplicated message, no cross-thread recall, "
        "every offloaded result recalled byte-identical"
        + (" (all held)." if not report["problems"] else f"; problems: {report['problems'][:5]}"),
        "",
        "## Offload write and recall",
        "",
        "Median microseconds; one record of 10,000 characters; a recall is one slice of 8,000 characters.",
        "",
        "| store | write (lookup + put) | write of a record already stored (lookup) | recall |",
        "|---|---|---|---|",
    ]
    for name, c in costs.items():
        lines.append(f"| {name} | {c['write_us']:,} | {c['already_stored_us']:,} | {c['recall_us']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from benchmarks.machine import machine_info

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=25, help="threads a worker (conversation threads)")
    parser.add_argument("--turns", type=int, default=None, help="user turns a thread at most (default: all)")
    parser.add_argument("--uri", default=None, help="a PostgreSQL server (default: start one with scripts/postgres)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "FLEET.md"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    machine = machine_info()
    machine["load_before"] = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        started = args.uri is None
        uri = args.uri
        if started:
            out = subprocess.run([str(ROOT / "scripts" / "postgres"), "start", tmp], check=True,
                                 capture_output=True, text=True).stdout
            uri = dict(p.split("=", 1) for p in out.split())["URI"]
        try:
            report = run_fleet(uri, workers=args.workers, threads=args.threads, max_turns=args.turns).to_dict()
            costs = store_costs(uri)
        finally:
            if started:
                subprocess.run([str(ROOT / "scripts" / "postgres"), "stop", tmp], check=True)
    machine["load_after"] = os.getloadavg()[0]
    given = argv if argv is not None else sys.argv[1:]
    command = "scripts/dev python benchmarks/fleet.py" + ("" if not given else " " + " ".join(given))
    Path(args.output).write_text(render(report, costs, machine, command), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps({"fleet": report, "store_costs": costs, "machine": machine}, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "problems"} | {"problems": len(report["problems"])}))
    for p in report["problems"][:20]:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
