"""A fleet of workers on one PostgreSQL checkpointer and store: offload and recall under load.

    scripts/dev python benchmarks/fleet.py                    # 4 workers x 25 threads, search off then on;
                                                              # writes benchmarks/FLEET.md
    scripts/dev python benchmarks/fleet.py --workers 2 --threads 3 --turns 3 --search on --output /tmp/F.md

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
- **Search** (`--search on`; `both`, the default, runs the fleet twice, off then on, and reports both): at every
  even turn from the third on, the model first looks for the latest recorded message of an earlier turn of its
  thread that compaction dropped (absent from its input, or a drop marker or summary in its place) and that has at
  least 2 words no other recorded message of the thread uses; it calls `search_compacted_history` with up to 4 of
  those words (limit 10), checks that a hit names that message, and reads it with the recall tool the hit names,
  checking the answer against the recording (`recall_text`, or `message_text` for a user or assistant message)
  as a recall is checked. At the second turn it also searches up to 4 words of another recorded conversation that
  its own never uses (nor the lookup tools' own answers): the answer must have no hit.
- **Undo** (after the checks, untimed): every thread with a compaction whose ladder ran is sent to a worker
  process that made neither its latest such record nor its record 1, which undoes the latest, then back to before
  record 1, and compares the history with the checkpointer's history of the thread and the recording, message
  for message (`undo_check`).
- **Checks after the run** (`FleetReport.problems`, empty when all hold): in every thread's final checkpoint no
  message id twice; every recorded message of the replayed turns is in the checkpoint as recorded, or is a note /
  preview there, or is gone, and in the last two cases its original is in the thread's store namespace,
  byte-identical, or it is a deduplication note there and the earlier result it names is in the checkpoint as
  recorded; every record in the store recalled slice by slice (`read_recall`) gives the original; every
  recall the model made gave its own thread's content, and every cross-thread recall "not found". The messages the
  model made (its lookup calls) and the lookup answers are checked like the recorded ones (in the checkpoint as
  made, or their original in the store); the "message" records are read back with `read_message`; the compaction
  records are numbered 1 to the memory's last, well formed, and name only originals of their thread; every search
  answer names only its thread's records (artifact hits and handles in its text) and is at most its bound (8,000
  characters, or the largest slice the thread's records were planned with); the largest answer is reported.
- **Figures**: turns per second (wall clock, the turns only, per run: search off and on), and the compaction
  node's own time per model call, split into the
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

WORD = re.compile(r"[a-z][a-z0-9]{3,}")
"""A word a search query is made of (casefolded text): letters first, at least 4 characters."""

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
    _words: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _df: dict[str, int] = field(default_factory=dict, repr=False)

    def recorded(self, turns: int) -> list[BaseMessage]:
        out = [self.system] if self.system is not None else []
        for t in self.turns[:turns]:
            out.extend(t)
        return out

    def words(self, message_id: str) -> list[str]:
        """The distinct words (casefolded, letters first, 4 characters or more) of a recorded message's text and
        tool calls, in order of first use."""
        if message_id not in self._words:
            m = self.by_id[message_id]
            text = m.content if isinstance(m.content, str) else json.dumps(m.content)
            if isinstance(m, AIMessage):
                text += " " + " ".join(f"{c['name']} {json.dumps(c['args'])}" for c in m.tool_calls)
            self._words[message_id] = list(dict.fromkeys(WORD.findall(text.casefold())))
        return self._words[message_id]

    def vocabulary(self) -> set[str]:
        """Every word of the thread's recorded messages (`words`)."""
        return {w for mid in self.by_id for w in self.words(mid)}

    def rare_words(self, message_id: str) -> list[str]:
        """The words of `message_id` that no other recorded message of the thread uses (a realistic query for
        it: what the user or the agent would remember of it), in order."""
        if not self._df:
            for mid in self.by_id:
                for w in self.words(mid):
                    self._df[w] = self._df.get(w, 0) + 1
        return [w for w in self.words(message_id) if self._df[w] == 1]

    def rare_words_all(self) -> list[str]:
        """The rare words (`rare_words`) of every recorded message, in order."""
        return [w for mid in self.by_id for w in self.rare_words(mid)]


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


def _graph(convs: list[Conversation], checkpointer: Any, store: Any, search: bool = False) -> tuple[Any, Any]:
    """(the compiled graph of a worker, its `CompactionNode`); `search`: the scripted model also searches (see the
    module docstring) and the lookup node holds the three lookup tools."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    from lc_compaction import CompactionPolicy
    from lc_compaction.history import history_entry
    from lc_compaction.integrations import (
        CompactionNode,
        CompactionState,
        recall_message,
        recall_tool_result,
        search_compacted_history,
    )
    from lc_compaction.markers import LOOKUP_TOOL_NAMES, RECALL_MESSAGE_TOOL_NAME, SEARCH_TOOL_NAME
    from lc_compaction.offload import RECALL_TOOL_NAME, is_offloaded, message_json, message_text, recall_text

    lookups = [recall_tool_result, recall_message, search_compacted_history] if search else [recall_tool_result]
    node = CompactionNode(CompactionPolicy(max_input_tokens=WINDOW, offload=True, offload_above=OFFLOAD_ABOVE),
                          tools=lookups)
    by_thread = {c.thread: c for c in convs}

    def thread_of(config: RunnableConfig) -> Conversation:
        return by_thread[int(config["configurable"]["thread_id"].rsplit("-", 1)[1])]

    def compact(state: dict, config: RunnableConfig) -> dict:
        first = isinstance(state["messages"][-1], HumanMessage)
        last_before = history_entry(state.get("compaction"))[1]
        t0 = time.perf_counter()
        out = node.invoke(state, config)
        LOG.get()["calls"].append((first, (time.perf_counter() - t0) * 1000))
        made = history_entry(memory_of(out))[1]
        if made > last_before:
            LOG.get()["records"].append(made)  # this worker made compaction record `made` of the thread
        return out

    def lookup_call(kind: str, anchor: str, target: str, args: dict[str, Any], tool: str = RECALL_TOOL_NAME
                    ) -> AIMessage:
        """A lookup call; its id says what it is for: `kind`, the turn's user message `anchor`, and `target` (the
        recorded message the answer is checked against, or the other thread's number)."""
        cid = f"{kind}|{esc(anchor)}|{esc(target)}"  # the ids hold "|": escaped in the call id only
        return AIMessage("", id=f"ai-{cid}", tool_calls=[{"name": tool, "args": args, "id": cid}])

    def slice_ok(answer: BaseMessage | None, expected: str) -> bool:
        """The answer is a non-empty first slice of `expected`: whole, or followed by the line naming the next
        offset."""
        end = answer.artifact["end"] if answer is not None and isinstance(answer.artifact, dict) else 0
        return answer is not None and end > 0 and answer.content[:end] == expected[:end] and (
            answer.content == expected if end == len(expected)
            else answer.content[end:].endswith(f"call again with offset={end} for more]"))

    def steps(conv: Conversation, turn: int, messages: list[BaseMessage]) -> list[str]:
        """The lookups the model makes at the start of turn `turn`, in order (then it replies)."""
        out = []
        if turn == 1 and len(convs) > 1:
            out.append("xrecall")
            if search:
                out.append("xsearch")
        if search and turn >= 2 and turn % 2 == 0 and dropped_target(conv, turn, messages) is not None:
            out.append("search")
        return [*out, "own"]

    def model(state: dict, config: RunnableConfig) -> dict:
        conv = thread_of(config)
        messages = state["messages"]
        last = messages[-1]
        log = LOG.get()
        if isinstance(last, HumanMessage):
            anchor, done = last.id, None
        elif isinstance(last, ToolMessage) and last.tool_call_id.split("|", 1)[0] in KINDS:
            done, anchor, target = (x.replace("\x1f", "|") for x in last.tool_call_id.split("|", 2))
            log["answers"].append(message_json(last))
            if done == "xrecall":
                other = int(target[1:target.index("|")])
                ok = "not found" in last.content and by_thread_content(other, target) not in last.content
                log["checks"].append(("cross_thread", ok, last.tool_call_id))
            elif done == "recall":
                expected = recall_text(conv.by_call[target].content)
                answer = earlier_copy(last, messages)  # an answer identical to an earlier one is noted on arrival
                log["checks"].append(("recall", slice_ok(answer, expected), target))
            elif done == "xsearch":
                hits = last.artifact.get("hits") if isinstance(last.artifact, dict) else None
                log["checks"].append(("cross_thread_search", hits == [], last.tool_call_id))
                log["searches"].append(("xsearch", len(last.content.encode("utf-8")), hits == []))
            elif done == "search":
                hits = last.artifact.get("hits", []) if isinstance(last.artifact, dict) else []
                hit = next((h for h in hits if h.get("message_id") == target), None)
                log["searches"].append(("search", len(last.content.encode("utf-8")), hit is not None))
                log["checks"].append(("search_found", hit is not None, f"{target} for {last.artifact}"))
                if hit is not None:  # read it whole with the call the hit names
                    tool = RECALL_TOOL_NAME if hit["kind"] == "tool_result" else RECALL_MESSAGE_TOOL_NAME
                    arg = "tool_call_id" if hit["kind"] == "tool_result" else "message_id"
                    return {"messages": log_out(lookup_call("srecall", anchor, target, {arg: hit["key"]}, tool))}
            elif done == "srecall":
                original = conv.by_id[target]
                whole = recall_text(original.content) if isinstance(original, ToolMessage) else message_text(original)
                log["checks"].append(("search_recall", slice_ok(last, whole), target))
        else:
            return {"messages": log_out(conv.reply_after[last.id].model_copy())}
        turn = next(k for k, t in enumerate(conv.turns) if t[0].id == anchor)
        after = STEPS.index(STEP_OF[done]) if done is not None else -1
        for step in [s for s in steps(conv, turn, messages) if STEPS.index(s) > after]:
            if step == "xrecall":
                others = [c for c in convs if c.thread != conv.thread]
                other = others[conv.thread % len(others)]
                target = next(iter(other.by_call), None)
                if target is not None:
                    return {"messages": log_out(lookup_call("xrecall", anchor, target, {"tool_call_id": target}))}
            elif step == "xsearch":
                other, words = foreign_words(conv)
                if words:
                    return {"messages": log_out(lookup_call("xsearch", anchor, f"T{other.thread}|",
                                                            {"query": " ".join(words), "limit": 10},
                                                            SEARCH_TOOL_NAME))}
            elif step == "search":
                target, words = dropped_target(conv, turn, messages)  # type: ignore[misc]
                return {"messages": log_out(lookup_call("search", anchor, target,
                                                        {"query": " ".join(words), "limit": 10}, SEARCH_TOOL_NAME))}
            elif step == "own":
                notes = [m for m in messages if isinstance(m, ToolMessage) and is_offloaded(m)
                         and m.tool_call_id in conv.by_call]
                if notes:
                    handle = HANDLE.search(str(notes[-1].content))
                    return {"messages": log_out(lookup_call(
                        "recall", anchor, notes[-1].tool_call_id,
                        {"tool_call_id": json.loads(handle.group(1)) if handle else notes[-1].tool_call_id}))}
        return {"messages": log_out(conv.reply_after[anchor].model_copy())}

    def log_out(message: AIMessage) -> list[AIMessage]:
        LOG.get()["made"].append(message_json(message))
        return [message]

    def by_thread_content(thread: int, call: str) -> str:
        other = by_thread.get(thread)
        return recall_text(other.by_call[call].content)[:200] if other and call in other.by_call else "\x00"

    def foreign_words(conv: Conversation) -> tuple[Conversation, list[str]]:
        """Another thread (another recorded conversation than this one's) and up to 4 words of its messages that
        this thread's recording never uses: a search for them must find nothing."""
        others = [c for c in convs if c.thread % 40 != conv.thread % 40] or [conv]
        other = others[conv.thread % len(others)]
        own = conv.vocabulary()
        words = [w for w in other.rare_words_all() if w not in own and w not in library_words()][:4]
        return other, words

    def dropped_target(conv: Conversation, turn: int, messages: list[BaseMessage]) -> tuple[str, list[str]] | None:
        """(the id of the latest recorded message of an earlier turn that compaction dropped from `messages` and
        whose text has at least 2 words no other recorded message of the thread uses, those words (up to 4));
        None when there is none. Dropped: absent, or a drop marker or a summary stands in its place."""
        from lc_compaction.markers import is_dropped_marker, is_summary

        present = {m.id: m for m in messages}
        for m in reversed([m for t in conv.turns[:turn] for m in t]):
            have = present.get(m.id)
            if have is not None and not (is_dropped_marker(have) or is_summary(have)):
                continue
            words = conv.rare_words(m.id)
            if len(words) >= 2:
                return m.id, words[:4]
        return None

    def tools(state: dict, config: RunnableConfig) -> dict:
        conv = thread_of(config)
        return {"messages": [conv.by_call[tc["id"]].model_copy() for tc in state["messages"][-1].tool_calls]}

    def route(state: dict) -> str:
        calls = state["messages"][-1].tool_calls if isinstance(state["messages"][-1], AIMessage) else []
        if not calls:
            return END
        return "recall" if calls[0]["name"] in LOOKUP_TOOL_NAMES else "tools"

    builder = StateGraph(CompactionState)
    builder.add_node("compact", compact)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_node("recall", ToolNode(lookups))
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_conditional_edges("model", route, ["tools", "recall", END])
    builder.add_edge("tools", "compact")
    builder.add_edge("recall", "compact")
    return builder.compile(checkpointer=checkpointer, store=store), node


KINDS = ("recall", "xrecall", "search", "srecall", "xsearch")
"""The lookups the scripted model makes (the first part of their call ids)."""
STEPS = ("xrecall", "xsearch", "search", "own")
"""The steps of the start of a turn, in order (`recall`: the step "own"; `srecall`: the end of "search")."""
STEP_OF = {"recall": "own", "xrecall": "xrecall", "search": "search", "srecall": "search", "xsearch": "xsearch"}


def library_words() -> set[str]:
    """The words of the lookup tools' own "not found" answers (a query for another thread's content avoids them:
    this thread's records may hold such an answer)."""
    from langgraph.store.memory import InMemoryStore

    from lc_compaction.integrations.recall import read_message, read_recall
    from lc_compaction.integrations.search import search_history

    store = InMemoryStore()
    text = " ".join([read_recall(store, "x", "y")[0], read_message(store, "x", "y")[0],
                     search_history(store, "x", "query")[0]])
    return set(WORD.findall(text.casefold()))


def memory_of(out: Any) -> Any:
    """The compaction memory a `CompactionNode` update writes (a dict update or a `Command`'s list of writes)."""
    if isinstance(out, dict):
        return out.get("compaction")
    update = getattr(out, "update", None)
    if isinstance(update, list):
        return next((v for k, v in reversed(update) if k == "compaction"), None)
    return update.get("compaction") if isinstance(update, dict) else None


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
    graph, node = _graph(convs, saver, store, spec["search"])
    by_thread = {c.thread: c for c in convs}

    def run(thread: int, turn: int) -> None:
        log: dict[str, list] = {"calls": [], "checks": [], "records": [], "answers": [], "searches": [], "made": []}
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
        results.put({"thread": thread, "turn": turn, "worker": index, **log, "error": error,
                     "seconds": time.perf_counter() - t0})

    def undo(thread: int) -> None:
        checks: list = []
        error = None
        try:
            checks = undo_check(graph, node, by_thread[thread], f"{spec['run']}-{thread}")
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which fails the run
            error = f"{type(exc).__name__}: {exc}"
        results.put({"undo": thread, "worker": index, "checks": checks, "error": error})

    results.put({"ready": index})
    with ThreadPoolExecutor(spec["threads"]) as ex:
        while True:
            task = tasks.get()
            if task is None:
                break
            if task[0] == "undo":
                ex.submit(undo, task[1])
            else:
                ex.submit(run, *task)
    pool.close()


def undo_check(graph: Any, node: Any, conv: Conversation, thread_id: str) -> list[tuple[str, bool, str]]:
    """Undo the thread's compactions through `graph` (this worker's; the records were made by others) and check
    the restored history against the checkpointer's own history of the thread and the recording.

    Method: the thread's checkpoints, oldest first (`get_state_history`), give for each compaction record the
    stored history the call that made it read (the checkpoint before the `compact` step whose memory names it)
    and wrote, and for each message the checkpoint it first appears in (arrival order). Then:

    1. `uncompact(config)` must undo the latest record whose ladder ran, N, and give the history call N read
       followed by every message that first appeared after call N, as stored now, in arrival order.
    2. `uncompact(config, 1)` must undo the rest (the records in the chain whose ladder ran, then record 1) and
       give every message that ever arrived, in arrival order, each as it was stored just before the first undone
       call after its arrival (or as stored now when none came after it: an arrival preview kept); a message of
       the recording is as recorded, or an arrival note (preview or deduplication) whose original is in the store.

    Returns (check, ok, detail) triples; the message checks are exact (`==` on each message, in order) and no id
    may appear twice."""
    from lc_compaction.dedup import is_deduplicated
    from lc_compaction.history import CompactionRecord, history_entry, record_key
    from lc_compaction.offload import is_offloaded, offload_namespace

    config = {"configurable": {"thread_id": thread_id}}
    snaps = list(graph.get_state_history(config))[::-1]
    values = graph.get_state(config).values
    current = list(values.get("messages") or [])
    head, last = history_entry(values.get("compaction"))
    out: list[tuple[str, bool, str]] = []
    records: dict[int, CompactionRecord] = {}
    for n in range(1, last + 1):
        item = graph.store.get(offload_namespace(thread_id, "compaction"), record_key(n))
        if item is None:
            out.append(("undo", False, f"{thread_id}: compaction record {n} is not in the store"))
            return out
        records[n] = CompactionRecord.from_value(item.value)
    made: dict[int, int] = {}  # record -> index of the checkpoint the call that made it wrote
    for i in range(1, len(snaps)):
        if snaps[i - 1].next == ("compact",):
            a = history_entry(snaps[i - 1].values.get("compaction"))[1]
            b = history_entry(snaps[i].values.get("compaction"))[1]
            if b > a:
                made[b] = i
    if sorted(made) != list(range(1, last + 1)):
        out.append(("undo", False, f"{thread_id}: records {sorted(made)} made by the compaction calls of the "
                                   f"checkpoints, {last} in the memory"))
        return out
    seen: dict[str, int] = {}
    for i, snap in enumerate(snaps):
        for m in snap.values.get("messages") or []:
            seen.setdefault(m.id, i)
    order = list(seen)
    triggered = [n for n, r in records.items() if r.triggered]
    if not triggered:
        return out

    def same(name: str, got: list[BaseMessage], want: list[BaseMessage]) -> None:
        diff = next((k for k in range(max(len(got), len(want)))
                     if k >= len(got) or k >= len(want) or got[k] != want[k]), None)
        ids = [m.id for m in got]
        out.append((name, diff is None and len(ids) == len(set(ids)),
                    f"{thread_id}: {len(got)} messages restored, {len(want)} expected, first difference at "
                    f"{diff}; ids unique: {len(ids) == len(set(ids))}"))

    n_latest = max(triggered)
    first_undo = node.uncompact(config, graph=graph)
    out.append(("undo", first_undo["undone"] == [n_latest],
                f"{thread_id}: undid {first_undo['undone']}, the latest whose ladder ran is {n_latest}"))
    now = {m.id: m for m in current}
    before = list(snaps[made[n_latest] - 1].values["messages"])
    tail = [now[i] for i in order if seen[i] > made[n_latest] and i in now]
    lost = [i for i in order if seen[i] > made[n_latest] and i not in now]
    out.append(("undo", not lost, f"{thread_id}: arrived after compaction {n_latest}, not stored: {lost[:3]}"))
    same("undo_latest", list(graph.get_state(config).values["messages"]), before + tail)
    if first_undo["head"] == 0:
        return out
    chain, n = [], first_undo["head"]
    while n:
        chain.append(n)
        n = records[n].previous
    want_undone = [n for n in chain if n > 1 and records[n].triggered] + [1]
    second = node.uncompact(config, 1, graph=graph)
    out.append(("undo", second["undone"] == want_undone and second["head"] == 0,
                f"{thread_id}: undid {second['undone']}, expected {want_undone}"))
    undone_at = {made[n] for n in [*first_undo["undone"], *second["undone"]]}
    expected = []
    for i in order:
        if seen[i] in undone_at:
            continue  # written by an undone call (not an arrival)
        version = None
        for j in range(seen[i], len(snaps)):
            if j in undone_at:
                break
            version = next((m for m in snaps[j].values.get("messages") or [] if m.id == i), version)
        expected.append(version)
    restored = list(graph.get_state(config).values["messages"])
    same("undo_all", restored, expected)
    for m in restored:
        rec = conv.by_id.get(m.id)
        if rec is not None and m.content != rec.content and not (is_offloaded(m) or is_deduplicated(m)):
            out.append(("undo", False, f"{thread_id}: restored message {m.id} is not as recorded"))
    missing = set(conv.by_id) - {m.id for m in restored}
    out.append(("undo", not missing, f"{thread_id}: recorded messages missing after undo: {sorted(missing)[:3]}"))
    return out


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
    search: bool = False
    searches: int = 0
    searches_found: int = 0
    cross_thread_searches: int = 0
    cross_thread_found_nothing: int = 0
    search_recalls: int = 0
    largest_answer_bytes: int = 0
    compaction_records: int = 0
    undo_threads: int = 0
    undo_from_other_worker: int = 0
    undo_to_first: int = 0

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
                "offloaded_records": self.records, "search": self.search, "searches": self.searches,
                "searches_found": self.searches_found, "cross_thread_searches": self.cross_thread_searches,
                "cross_thread_found_nothing": self.cross_thread_found_nothing,
                "search_recalls": self.search_recalls, "largest_search_answer_bytes": self.largest_answer_bytes,
                "compaction_records": self.compaction_records, "undo_threads": self.undo_threads,
                "undo_from_other_worker": self.undo_from_other_worker, "undo_to_first": self.undo_to_first,
                "problems": self.problems}


def run_fleet(uri: str, *, workers: int = 4, threads: int = 25, max_turns: int | None = None,
              traces: Path | None = None, timeout: float = 1800.0, search: bool = False,
              undo: bool = True) -> FleetReport:
    """Run the fleet (see the module docstring) against the PostgreSQL server at `uri` and check the outcome.
    `search`: the scripted model also searches what compaction removed; `undo`: after the checks, every thread
    with a compaction is undone by a worker that did not make it (`undo_check`; not in the timed part).

    Raises:
        ValueError: fewer than 2 workers (consecutive turns could not change worker).
        TimeoutError: the run took longer than `timeout` seconds.
    """
    if workers < 2:
        raise ValueError("workers: at least 2 (a thread's consecutive turns must go to different workers), "
                         f"got {workers}")
    traces = traces or traces_dir()
    n = workers * threads
    spec = {"n_threads": n, "threads": threads, "max_turns": max_turns, "traces": str(traces), "search": search,
            "run": f"fleet{os.getpid()}x{int(time.time())}{'s' if search else ''}"}
    convs = conversations(n, traces, max_turns)
    _setup(uri)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(workers)]
    procs = [ctx.Process(target=_worker, args=(w, uri, spec, inboxes[w], results), daemon=True) for w in range(workers)]
    for p in procs:
        p.start()
    outcomes: list[dict] = []
    undos: list[dict] = []
    problems: list[str] = []
    deadline = time.monotonic() + timeout

    def receive(left: int) -> dict:
        try:
            return results.get(timeout=max(1.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"the fleet did not finish in {timeout} s ({left} tasks left)") from None

    try:
        ready = 0
        while ready < workers:
            ready += "ready" in receive(workers - ready)
        t0 = time.perf_counter()
        for c in convs:
            inboxes[c.thread % workers].put((c.thread, 0))
        remaining = sum(len(c.turns) for c in convs)
        while remaining:
            out = receive(remaining)
            outcomes.append(out)
            remaining -= 1
            if out["error"]:
                problems.append(f"thread {out['thread']} turn {out['turn']}: {out['error']}")
            nxt = out["turn"] + 1
            if nxt < len(convs[out["thread"]].turns):
                inboxes[(out["thread"] + nxt) % workers].put((out["thread"], nxt))
        seconds = time.perf_counter() - t0
        made = {(o["thread"], r): o["worker"] for o in outcomes for r in o["records"]}
        records, triggered = _verify(uri, spec["run"], convs, outcomes, problems)
        if undo:
            undos = _undo_all(triggered, made, workers, inboxes, receive, problems)
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
    searches = [s for o in outcomes for s in o["searches"]]
    first = [ms for o in outcomes for f, ms in o["calls"] if f]
    other = [ms for o in outcomes for f, ms in o["calls"] if not f]
    return FleetReport(workers=workers, threads=threads, turns=len(outcomes), model_calls=len(first) + len(other),
                       seconds=seconds, first_call_ms=first, other_call_ms=other,
                       recalls=sum(1 for c in checks if c[0] == "recall"),
                       cross_thread_recalls=sum(1 for c in checks if c[0] == "cross_thread"), records=records,
                       problems=problems, search=search,
                       searches=sum(1 for s in searches if s[0] == "search"),
                       searches_found=sum(1 for s in searches if s[0] == "search" and s[2]),
                       cross_thread_searches=sum(1 for s in searches if s[0] == "xsearch"),
                       cross_thread_found_nothing=sum(1 for s in searches if s[0] == "xsearch" and s[2]),
                       search_recalls=sum(1 for c in checks if c[0] == "search_recall"),
                       largest_answer_bytes=max((s[1] for s in searches), default=0),
                       compaction_records=len(made), undo_threads=len(undos),
                       undo_from_other_worker=sum(1 for u in undos if u["other"]),
                       undo_to_first=sum(1 for u in undos if u["to_first"]))


def _undo_all(triggered: dict[int, list[int]], made: dict[tuple[int, int], int], workers: int, inboxes: list[Any],
              receive: Any, problems: list[str]) -> list[dict]:
    """Send every thread with a compaction whose ladder ran to a worker that made neither its latest such record
    nor its record 1 (with 2 workers, when both made one of them: a worker that did not make the latest), collect
    `undo_check`'s checks into `problems`; returns one dict a thread (its "other": the worker made neither)."""
    sent: dict[int, tuple[int, bool]] = {}
    for thread, numbers in sorted(triggered.items()):
        if not numbers:
            continue
        makers = {made.get((thread, max(numbers))), made.get((thread, 1))}
        free = [w for w in range(workers) if w not in makers]
        latest = made.get((thread, max(numbers)))
        w = free[thread % len(free)] if free else next(x for x in range(workers) if x != latest)
        inboxes[w].put(("undo", thread))
        sent[thread] = (w, bool(free))
    out = []
    for left in range(len(sent), 0, -1):
        msg = receive(left)
        thread = msg["undo"]
        if msg["error"]:
            problems.append(f"undo of thread {thread} on worker {msg['worker']}: {msg['error']}")
        problems += [f"{kind} check failed: {detail}" for kind, ok, detail in msg["checks"] if not ok]
        out.append({"thread": thread, "worker": msg["worker"], "other": sent[thread][1],
                    "to_first": any(c[0] == "undo_all" for c in msg["checks"])})
    return out


def _setup(uri: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(uri) as saver, PostgresStore.from_conn_string(uri) as store:
        saver.setup()
        store.setup()


def _verify(uri: str, run: str, convs: list[Conversation], outcomes: list[dict], problems: list[str]
            ) -> tuple[int, dict[int, list[int]]]:
    """The checks on every thread's final checkpoint and store namespaces (see the module); returns the number of
    offload records checked and, by thread, the numbers of its compaction records whose ladder ran."""
    from lc_compaction.dedup import is_deduplicated
    from lc_compaction.history import history_entry
    from lc_compaction.integrations.recall import read_message, read_recall
    from lc_compaction.markers import SEARCH_TOOL_NAME, is_dropped_marker, is_shortened, is_summary, is_truncated
    from lc_compaction.offload import (
        DEFAULT_RECALL_CHARS,
        message_from_json,
        message_text,
        offload_namespace,
        recall_text,
        record_message,
    )
    from lc_compaction.progress import note_lines, without_note

    pool, saver, store = _pools(uri, 2)
    records = 0
    triggered: dict[int, list[int]] = {}
    produced: dict[int, dict[str, BaseMessage]] = {c.thread: {} for c in convs}
    for o in sorted(outcomes, key=lambda o: (o["thread"], o["turn"])):
        for text in [*o["made"], *o["answers"]]:
            m = message_from_json(text)
            produced[o["thread"]].setdefault(m.id, m)  # type: ignore[arg-type]
    try:
        for conv in convs:
            thread = f"{run}-{conv.thread}"
            tup = saver.get_tuple({"configurable": {"thread_id": thread}})
            values = tup.checkpoint["channel_values"] if tup else {}
            state = values.get("messages", [])
            ids = [m.id for m in state]
            if len(ids) != len(set(ids)):
                problems.append(f"{thread}: a message id appears twice in the checkpoint")
            stored: dict[str, BaseMessage] = {}
            keys: dict[tuple[str, str], str | None] = {}
            caps: list[int] = []
            for kind in ("tool_result", "message"):
                read = read_recall if kind == "tool_result" else read_message
                for item in store.search(offload_namespace(thread, kind), limit=10_000):
                    m = record_message(item.value)
                    stored[m.id] = m  # type: ignore[index]
                    keys[(kind, item.key)] = m.id
                    records += 1
                    if isinstance(item.value.get("recall_chars"), int):
                        caps.append(item.value["recall_chars"])
                    parts, offset = [], 0
                    while True:
                        text, info = read(store, thread, item.key, offset)
                        parts.append(text[: info["end"] - offset])
                        if info["end"] >= info["total_chars"]:
                            break
                        offset = info["end"]
                    if "".join(parts) != (recall_text(m.content) if kind == "tool_result" else message_text(m)):
                        problems.append(f"{thread}: recall of {kind} {item.key} is not the original")
            triggered[conv.thread] = _check_records(thread, store, history_entry(values.get("compaction")), keys,
                                                    problems)
            in_state = {m.id: m for m in state}
            extra = [m for mid, m in produced[conv.thread].items() if mid not in conv.by_id]
            for rec in [*conv.recorded(len(conv.turns)), *extra]:
                have = in_state.get(rec.id)
                kept = stored.get(rec.id)  # type: ignore[arg-type]
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
            bound = min([DEFAULT_RECALL_CHARS, max(caps, default=DEFAULT_RECALL_CHARS)])
            for m in extra:
                if isinstance(m, ToolMessage) and m.name == SEARCH_TOOL_NAME:
                    _check_answer(thread, m, keys, bound, problems)
    finally:
        pool.close()
    return records, triggered


ANSWER_HANDLE = re.compile(r'(recall_tool_result\(tool_call_id|recall_message\(message_id)=("(?:[^"\\]|\\.)*")\)')
"""A handle a search answer names (a JSON string): which recall tool, and its key."""


def _check_answer(thread: str, answer: ToolMessage, keys: dict[tuple[str, str], str | None], bound: int,
                  problems: list[str]) -> None:
    """A search answer shows its thread's records only: every hit of its artifact and every handle its text
    names is a record of that thread (no other thread's content: its keys are other ids); and it is at most
    `bound` characters and UTF-8 bytes."""
    hits = answer.artifact.get("hits", []) if isinstance(answer.artifact, dict) else []
    for h in hits:
        if keys.get((h["kind"], h["key"]), "\x00") != h["message_id"]:
            problems.append(f"{thread}: search answer {answer.id} names {h}, not a record of this thread")
    for tool, key in ANSWER_HANDLE.findall(answer.content):  # type: ignore[arg-type]
        kind = "tool_result" if tool.startswith("recall_tool_result") else "message"
        if (kind, json.loads(key)) not in keys:
            problems.append(f"{thread}: search answer {answer.id} names {kind} {key}, not a record of this thread")
    size = len(answer.content.encode("utf-8"))  # type: ignore[union-attr]
    if size > bound:
        problems.append(f"{thread}: search answer {answer.id} has {size} bytes, over its bound {bound}")


def _check_records(thread: str, store: Any, memory: tuple[int, int], keys: dict[tuple[str, str], str | None],
                   problems: list[str]) -> list[int]:
    """The thread's compaction records: numbered 1 to the memory's last, each readable, each "previous" before
    it, no id twice in its before or its after, every original it names in the thread's records under that id;
    returns the numbers of those whose ladder ran."""
    from lc_compaction.history import CompactionRecord, record_key
    from lc_compaction.offload import message_from_json, offload_namespace

    items = {i.key: i.value for i in store.search(offload_namespace(thread, "compaction"), limit=10_000)}
    head, last = memory
    if sorted(items) != [record_key(n) for n in range(1, last + 1)] or not head <= last:
        problems.append(f"{thread}: compaction records {sorted(items)[:5]}..., memory at {head} of {last}")
    out = []
    for key, value in sorted(items.items()):
        try:
            r = CompactionRecord.from_value(value)
            for e in r.before:
                if "message" in e:
                    message_from_json(e["message"])
        except ValueError as exc:
            problems.append(f"{thread}: compaction record {key} unreadable: {exc}")
            continue
        before = [e["id"] for e in r.before]
        if record_key(r.number) != key or not 0 <= r.previous < r.number or len(set(before)) != len(before) \
                or len(set(r.after)) != len(r.after):
            problems.append(f"{thread}: compaction record {key} malformed (number, previous or an id twice)")
        for e in r.before:
            if "kind" in e and keys.get((e["kind"], e["key"])) != e["id"]:
                problems.append(f"{thread}: compaction record {key} names {e}, not in the thread's records")
        if r.triggered:
            out.append(r.number)
    return out


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


def render(reports: dict[str, dict[str, Any]], costs: dict[str, Any], machine: dict[str, Any], command: str) -> str:
    """FLEET.md: one column a run (`reports`: by "off" / "on", search off or on), side by side."""
    runs = list(reports.items())
    head = "| | " + " | ".join(f"search {k}" for k, _ in runs) + " |"
    rule = "|---|" + "---|" * len(runs)

    def row(label: str, get: Any) -> str:
        return f"| {label} | " + " | ".join(str(get(r)) for _, r in runs) + " |"

    def call(key: str, stat: str) -> Any:
        return lambda r: r[key].get(stat)

    problems = [p for _, r in runs for p in r["problems"]]
    lines = [
        "# Offload on a fleet: PostgreSQL checkpointer and store shared by worker processes",
        "",
        f"Generated by `{command}` (benchmarks/fleet.py; the method is in its docstring).",
        "",
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, Python {machine['python']}, "
        f"{machine['date']}; load average (1 minute) before: {machine.get('load_before')}, after: "
        f"{machine.get('load_after')} (the machine is shared: other jobs ran meanwhile, so the throughput is a "
        "lower bound and the two columns are comparable only roughly).",
        "",
        "## The runs",
        "",
        "The same threads and turns, search off (the scripted model only recalls, as before issue 22) and on (it "
        "also searches what compaction dropped, reads the hit back, and once searches another thread's words).",
        "",
        head, rule,
        row("workers", lambda r: r["workers"]),
        row("threads", lambda r: f"{r['workers'] * r['threads']} ({r['threads']} a worker)"),
        row("turns", lambda r: r["turns"]),
        row("model calls", lambda r: r["model_calls"]),
        row("seconds (wall clock, the turns only)", lambda r: r["seconds"]),
        row("**turns / s**", lambda r: f"**{r['turns_per_second']}**"),
        row("recalls of an offloaded result", lambda r: r["recalls"]),
        row("cross-thread recalls (all \"not found\")", lambda r: r["cross_thread_recalls"]),
        row("searches of its own dropped messages / found / read back byte-identical",
            lambda r: f"{r['searches']} / {r['searches_found']} / {r['search_recalls']}"),
        row("searches of another thread's words / found nothing",
            lambda r: f"{r['cross_thread_searches']} / {r['cross_thread_found_nothing']}"),
        row("largest search answer (UTF-8 bytes)", lambda r: r["largest_search_answer_bytes"]),
        row("offload records (all recalled byte-identical)", lambda r: r["offloaded_records"]),
        row("compaction records", lambda r: r["compaction_records"]),
        row("threads undone by another worker process (made neither) / back to before record 1",
            lambda r: f"{r['undo_threads']} ({r['undo_from_other_worker']}) / {r['undo_to_first']}"),
        row("problems", lambda r: len(r["problems"])),
        "",
        "Compaction per model call (the `CompactionNode` call, offload writes to PostgreSQL included), ms of wall "
        "time inside a worker that runs up to its threads' turns at once (so waits for the GIL and the connection "
        "pool are in it): median / p95 / max. The single-process figures (steady state, first call of a run from a "
        "checkpoint) are in [RESULTS.md](RESULTS.md).",
        "",
        head, rule,
        row("first of a turn (a worker that did not see the previous call)",
            lambda r: f"{call('first_call_of_turn_ms', 'median')(r)} / {call('first_call_of_turn_ms', 'p95')(r)} / "
                      f"{call('first_call_of_turn_ms', 'max')(r)} ({call('first_call_of_turn_ms', 'n')(r)} calls)"),
        row("later in the turn (the same worker as the previous call)",
            lambda r: f"{call('other_calls_ms', 'median')(r)} / {call('other_calls_ms', 'p95')(r)} / "
                      f"{call('other_calls_ms', 'max')(r)} ({call('other_calls_ms', 'n')(r)} calls)"),
        "",
        f"Window {WINDOW:,} tokens, `offload_above` {OFFLOAD_ABOVE:,} tokens, rewrite mode. After each run every "
        "thread's checkpoint and store namespaces were checked: no lost or duplicated message (the lookup calls and "
        "answers included), every offload record recalled byte-identical, every compaction record well formed and "
        "naming records of its thread, every search answer naming only its thread's records and within its bound; "
        "then each thread that compacted was undone by another worker process and compared message for message "
        "with the checkpointer's history and the recording (`undo_check`; not in the timed part)"
        + (" (all held)." if not problems else f"; problems: {problems[:5]}"),
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
    parser.add_argument("--search", choices=("both", "on", "off"), default="both",
                        help="the scripted model searches (on), or not (off), or one run of each (both)")
    parser.add_argument("--uri", default=None, help="a PostgreSQL server (default: start one with scripts/postgres)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "FLEET.md"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    machine = machine_info()
    machine["load_before"] = round(os.getloadavg()[0], 2)
    modes = ["off", "on"] if args.search == "both" else [args.search]
    with tempfile.TemporaryDirectory() as tmp:
        started = args.uri is None
        uri = args.uri
        if started:
            out = subprocess.run([str(ROOT / "scripts" / "postgres"), "start", tmp], check=True,
                                 capture_output=True, text=True).stdout
            uri = dict(p.split("=", 1) for p in out.split())["URI"]
        try:
            reports = {mode: run_fleet(uri, workers=args.workers, threads=args.threads, max_turns=args.turns,
                                       search=mode == "on").to_dict() for mode in modes}
            costs = store_costs(uri)
        finally:
            if started:
                subprocess.run([str(ROOT / "scripts" / "postgres"), "stop", tmp], check=True)
    machine["load_after"] = round(os.getloadavg()[0], 2)
    given = argv if argv is not None else sys.argv[1:]
    command = "scripts/dev python benchmarks/fleet.py" + ("" if not given else " " + " ".join(given))
    Path(args.output).write_text(render(reports, costs, machine, command), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps({"fleet": reports, "store_costs": costs, "machine": machine}, indent=1))
    problems = [p for r in reports.values() for p in r["problems"]]
    for mode, r in reports.items():
        print(mode, json.dumps({k: v for k, v in r.items() if k != "problems"} | {"problems": len(r["problems"])}))
    for p in problems[:20]:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
