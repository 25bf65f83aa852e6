"""The recall exam (issue 22): what compaction removed, found again with `search_compacted_history` and recall.

    scripts/dev python benchmarks/recall_exam.py --output benchmarks/RECALL.md
    scripts/dev python benchmarks/recall_exam.py --conversations 2 --windows 4000 --output /tmp/RECALL.md
    scripts/dev python benchmarks/recall_exam.py --from-json FIGURES.json --output benchmarks/RECALL.md   # no replay

Method.

- **Replay.** Every conversation of the shared traces (`tests/shared_data.py` `traces_dir()`: the full set at
  `$LC_COMPACTION_SHARED` or `../shared/traces`, the vendored sample otherwise; `lc_compaction.traces` loads them)
  is replayed as the agent loop runs it, call by call (`lc_compaction.replay`'s semantics): before each recorded
  assistant message (one model call), the `CompactionNode` (rewrite mode, `offload=` a real LangGraph
  `InMemoryStore`, `max_input_tokens=window`, gpt-4o's exact counter, the three lookup tools registered so their
  schemas count beside the messages) is invoked on the stored history with the thread's config, exactly as a
  graph step invokes it, and its state update is applied with LangGraph's `add_messages` reducer
  (`integrations.history.stored_after`); in rewrite mode the stored history it leaves is what the model node sends.
  Then the recorded assistant message and what follows it (tool results, the next user turn) are appended. So the
  store holds what the node's door records (`plan.plan_compaction`: originals, positions, compaction records).
  One store per window, one thread per conversation: the search reads only its own thread.
- **Facts.** Picked, without looking at what compaction does, from the early messages (index below half of the
  recording) that are user turns or tool results: the identifiers of `lc_compaction.recall.find_identifiers`
  (e-mails, flight numbers, codes, reservation ids, user and payment handles, amounts, long numbers) and the paths
  of `lc_compaction.recall.code_identifiers` (kinds `path`, `file_line`, `pytest_id`), in order of appearance,
  `FACTS_PER_MESSAGE` a message at most, values of at least `MIN_VALUE_CHARS` characters, none the system prompt
  holds, each value once per conversation; the messages are taken round-robin in order (the first fact of each
  early message, then the second ...) up to `FACTS_PER_CONVERSATION`. Plus one planted correction per
  conversation, `Correction: use the <right> <topic>, not <wrong> (ref RQ-<n>).`, varied by a hash of the
  conversation id (`correction`): appended to the second user turn; a conversation with one user turn (the coding
  and AgentDojo runs) gets it as a user turn of its own after the first tool exchange (the user interjects).
- **Presence.** An identifier (and the correction's ref and its chosen option) is held by a text when its
  canonical form is one of the text's words (`recall.words`, the rule `IdentifierTracker.held` uses); a path when
  it occurs with no letter, digit or `_` around it (`recall.code_present`). The sent context's text is each sent
  message's `recall.message_text` (content, and an assistant's tool calls as JSON).
- **When a fact is asked.** At the last model call of the conversation (table 1), and at the first model call
  whose sent context no longer holds it (table 2, the facts compaction removed at some call).
- **The scripted agent.** (a) Found in the sent context alone when the context holds it. (b) Else it calls
  `search_compacted_history` (`integrations.search.search_history`, the tool's own function: limit 5, answers
  capped as the tool caps them), reads the hits in order, at most `HITS_READ`, calls the recall tool each names
  (`recall_tool_result` / `recall_message`: `read_recall` / `read_message`), reading on slice by slice while the
  answer says more remains, at most `SLICES_READ` slices a hit; the fact is found when a recalled text holds it.
  Queries, each reported on its own: **value** (the value as written: the easy case); **context** (the words
  around the value in its message: up to `CONTEXT_WORDS` words before and after it, words holding a digit left
  out, since the agent that lost the value does not remember neighbouring ids and numbers either); **call** (tool
  results only: the producing call's tool name and the string values of its arguments, e.g. the bash command:
  an agent looking for an output knows what it ran). No query is tuned per fact.
- **Misses** (a fact neither in the context nor recalled): `not recorded` (no record of the thread holds the
  value: it was lost), `no hit` (the search answered nothing), `not in hits read` (a record holds it, none of the
  first `HITS_READ` hits does), `beyond slices read` (a hit read holds it past `SLICES_READ` slices).

Figures per window and per trace file: facts; the share found in the sent context alone; the share found with
search + recall (context, or else search + recall) per query kind; the misses by category. Target (issue 22):
at least 98% with search, whatever the window. Nothing is timed but the run's wall clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from lc_compaction._content import content_text
from lc_compaction.integrations import (
    CompactionNode,
    recall_message,
    recall_tool_result,
    search_compacted_history,
)
from lc_compaction.integrations.history import stored_after
from lc_compaction.integrations.recall import read_message, read_recall
from lc_compaction.integrations.search import search_history
from lc_compaction.offload import offload_namespace, recall_text, record_message
from lc_compaction.recall import (
    IDENTIFIER_PATTERNS,
    argument_strings,
    canonical,
    code_identifiers,
    code_present,
    find_identifiers,
    message_text,
    words,
)
from lc_compaction.traces import Trace, load_traces

__all__ = ["CONTEXT_WORDS", "FACTS_PER_CONVERSATION", "FACTS_PER_MESSAGE", "HITS_READ", "QUERY_KINDS", "SLICES_READ",
           "WINDOWS", "Ask", "Fact", "ask", "correction", "exam_conversation", "markdown", "pick_facts",
           "plant_correction", "recall_exam"]

WINDOWS = (4_000, 8_000)
"""Windows of the exam, tokens (issue 22)."""

FACTS_PER_CONVERSATION = 12
"""Facts picked from a conversation's early messages at most (the planted correction comes on top)."""

FACTS_PER_MESSAGE = 2
"""Facts picked from one message at most (a listing of 50 ids does not fill a conversation's quota alone)."""

MIN_VALUE_CHARS = 4
"""Shortest value picked, characters: shorter ones (`$25`, `2024`) are words any text may hold by chance."""

CONTEXT_WORDS = 8
"""Words on each side of a value in the "context" query."""

HITS_READ = 3
"""Hits of one search whose handle the scripted agent recalls at most (in rank order)."""

SLICES_READ = 10
"""Slices of one recalled record the scripted agent reads at most (following "call again with offset=...")."""

SEARCH_LIMIT = 5
"""The `limit` the scripted agent gives the search (the tool's default)."""

QUERY_KINDS = ("value", "context", "call")
"""The scripted agent's queries (see the module docstring); "call" for facts of tool results only."""

PATH_KINDS = ("path", "file_line", "pytest_id")
"""Kinds of `recall.CODE_PATTERNS` picked as paths."""

MISSES = ("not recorded", "no hit", "not in hits read", "beyond slices read")

_CORRECTIONS = (("pipeline", "streaming", "batch"), ("database", "replica", "primary"),
                ("region", "eu-west-3", "us-east-1"), ("branch", "release-2.4", "main"),
                ("format", "parquet", "csv"), ("queue", "priority", "default"),
                ("endpoint", "v2", "v1"), ("scheduler", "cron", "manual"))
"""(topic, the option the user asks for, the one they turn down) of the planted corrections."""

_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"\w+")


# ----------------------------------------------------------------------------------------------------- facts


@dataclass
class Fact:
    """One fact to ask for.

    Attributes:
        value: as written in its message (the "value" query).
        family: "identifier" (presence by canonical word), "path" (by `code_present`) or "correction".
        origin: "user turn", "tool result" or "correction".
        source_id / source_index: its message's id and index in the (planted) recording.
        required: what a text must hold: canonical words (identifiers, correction) or the path as written.
        context: the "context" query; call: the "call" query ("" when not a tool result).
    """

    value: str
    family: str
    origin: str
    source_id: str
    source_index: int
    required: tuple[str, ...]
    context: str
    call: str = ""

    def held_by(self, text: str) -> bool:
        """Whether `text` holds the fact (see the module docstring's presence rule)."""
        if self.family == "path":
            return code_present(text, self.required[0])
        own = words(text)
        return all(w in own for w in self.required)

    def queries(self) -> dict[str, str]:
        """The scripted agent's query of each kind it can make for this fact."""
        out = {"value": self.value, "context": self.context}
        if self.call:
            out["call"] = self.call
        return out


def correction(conversation_id: str) -> tuple[str, tuple[str, ...], str]:
    """The planted correction of a conversation (varied by a hash of its id): (the sentence, the canonical words a
    text must hold: the ref and the chosen option, the ref as written)."""
    digest = int(hashlib.sha256(conversation_id.encode()).hexdigest()[:8], 16)
    topic, right, wrong = _CORRECTIONS[digest % len(_CORRECTIONS)]
    ref = f"RQ-{1000 + digest % 9000}"
    sentence = f"Correction: use the {right} {topic}, not {wrong} (ref {ref})."
    required = tuple(w for w in (canonical(ref), canonical(right)) if w)
    return sentence, required, ref


def plant_correction(messages: Sequence[BaseMessage], conversation_id: str) -> tuple[list[BaseMessage], Fact | None]:
    """The recording with the correction planted (see the module docstring), and its fact (None when the
    conversation has fewer than two model calls and one user turn: nowhere to plant it)."""
    sentence, required, ref = correction(conversation_id)
    out = list(messages)
    users = [i for i, m in enumerate(out) if isinstance(m, HumanMessage)]
    if len(users) >= 2:
        i = users[1]
        m = out[i]
        text = content_text(m.content)
        out[i] = m.model_copy(update={"content": f"{text}\n\n{sentence}" if text else sentence})
    else:
        ais = [i for i, m in enumerate(out) if isinstance(m, AIMessage)]
        if len(ais) < 2:
            return out, None
        i = ais[1]
        out.insert(i, HumanMessage(sentence, id=f"{conversation_id}:correction"))
    context = _context_words(content_text(out[i].content), ref)
    return out, Fact(ref, "correction", "correction", out[i].id or "", i, required, context)


def _context_words(text: str, value: str) -> str:
    """Up to `CONTEXT_WORDS` words before and after the first occurrence of `value` in `text`, words holding a
    digit and the value's own words left out."""
    at = text.find(value)
    if at < 0:
        return ""
    own = {w.casefold() for w in _WORD.findall(value)}
    before = [w for w in _WORD.findall(text[max(0, at - 400):at]) if not _DIGIT.search(w) and w.casefold() not in own]
    after = [w for w in _WORD.findall(text[at + len(value):at + len(value) + 400])
             if not _DIGIT.search(w) and w.casefold() not in own]
    return " ".join(before[-CONTEXT_WORDS:] + after[:CONTEXT_WORDS])


def _raw(text: str, value: str, kind: str) -> tuple[str, int] | None:
    """The first match of `kind`'s pattern in `text` whose canonical form is `value`: (as written, position)."""
    pattern = IDENTIFIER_PATTERNS[kind]
    for m in pattern.finditer(text):
        g = next((i for i in range(1, (pattern.groups or 0) + 1) if m.group(i)), 0)
        raw = m.group(g)
        if raw and canonical(raw) == value:
            return raw, m.start(g)
    return None


def _candidates(text: str) -> list[tuple[int, str, str, tuple[str, ...]]]:
    """(position, value as written, family, required) of a message text's identifiers and paths, in order of
    appearance."""
    out = []
    for value, kind in find_identifiers(text).items():
        found = _raw(text, value, kind)
        if found is not None:
            out.append((found[1], found[0], "identifier", (value,)))
    for value, kind in code_identifiers(text).items():
        if kind in PATH_KINDS:
            out.append((text.find(value), value, "path", (value,)))
    out.sort(key=lambda c: c[0])
    return out


def _calls(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """The "call" query of each tool call id: the tool's name and its arguments' string values."""
    out = {}
    for m in messages:
        if isinstance(m, AIMessage):
            for tc in m.tool_calls:
                out[tc.get("id") or ""] = " ".join([tc.get("name") or "", *argument_strings(tc.get("args"))]).strip()
    return out


def pick_facts(messages: Sequence[BaseMessage]) -> list[Fact]:
    """The facts of a recording (see the module docstring), in the order they were picked."""
    system = "\n".join(content_text(m.content) for m in messages if isinstance(m, SystemMessage))
    system_words = words(system)
    calls = _calls(messages)
    early = len(messages) // 2
    per_message: list[list[Fact]] = []
    taken: set[str] = set()
    for i, m in enumerate(messages[:early]):
        if not isinstance(m, (HumanMessage, ToolMessage)):
            continue
        text = content_text(m.content)
        facts: list[Fact] = []
        for _, raw, family, required in _candidates(text):
            if len(facts) >= FACTS_PER_MESSAGE:
                break
            if len(raw) < MIN_VALUE_CHARS or raw in taken:
                continue
            if (family == "path" and code_present(system, raw)) or (family != "path" and required[0] in system_words):
                continue
            taken.add(raw)
            tool = isinstance(m, ToolMessage)
            facts.append(Fact(raw, family, "tool result" if tool else "user turn", m.id or "", i, required,
                              _context_words(text, raw), calls.get(m.tool_call_id, "") if tool else ""))
        if facts:
            per_message.append(facts)
    picked: list[Fact] = []
    for k in range(FACTS_PER_MESSAGE):
        for facts in per_message:
            if len(picked) >= FACTS_PER_CONVERSATION:
                return picked
            if k < len(facts):
                picked.append(facts[k])
    return picked


# -------------------------------------------------------------------------------------------------- the agent


@dataclass
class Ask:
    """The outcome of one query: found (a recalled text holds the fact), the hit's rank (from 1), the recall
    calls made, and the miss's category (None when found)."""

    found: bool
    rank: int | None = None
    recalls: int = 0
    miss: str | None = None


def _recall(store: BaseStore, thread: str, hit: dict[str, Any], fact: Fact) -> tuple[bool, int, bool]:
    """(a slice held the fact, slices read, slices remained unread) for one hit, read slice by slice."""
    offset, n = 0, 0
    while n < SLICES_READ:
        if hit["kind"] == "tool_result":
            text, info = read_recall(store, thread, hit["key"], offset)
        else:
            text, info = read_message(store, thread, hit["key"], offset)
        n += 1
        if fact.held_by(text):
            return True, n, False
        end, total = info.get("end"), info.get("total_chars")
        if not isinstance(end, int) or not isinstance(total, int) or end >= total or end <= offset:
            return False, n, False
        offset = end
    return False, n, True


def _recorded(store: BaseStore, thread: str, fact: Fact) -> bool:
    """Whether some record of the thread holds the fact (read whole)."""
    for kind in ("tool_result", "message"):
        for item in store.search(offload_namespace(thread, kind), limit=100_000):
            try:
                if fact.held_by(recall_text(record_message(item.value).content)):
                    return True
            except ValueError:
                continue
    return False


def ask(store: BaseStore, thread: str, fact: Fact, query: str) -> Ask:
    """The scripted agent's lookup of `fact` with `query` (search, then the recall each hit names)."""
    _, artifact = search_history(store, thread, query, SEARCH_LIMIT)
    hits = artifact.get("hits") or []
    recalls = 0
    deeper = False
    for rank, hit in enumerate(hits[:HITS_READ], start=1):
        ok, n, more = _recall(store, thread, hit, fact)
        recalls += n
        if ok:
            return Ask(True, rank, recalls)
        deeper |= more
    if not _recorded(store, thread, fact):
        return Ask(False, None, recalls, "not recorded")
    if not hits:
        return Ask(False, None, recalls, "no hit")
    return Ask(False, None, recalls, "beyond slices read" if deeper else "not in hits read")


# ------------------------------------------------------------------------------------------------- the replay


def _sent_text(sent: Sequence[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in sent)


def _apply(stored: list[BaseMessage], update: dict[str, Any] | Command, node: CompactionNode
           ) -> tuple[list[BaseMessage], Any]:
    """The stored history and the memory after the node's update (applied as LangGraph's reducer applies it)."""
    if isinstance(update, Command):
        writes = [v for k, v in update.update if k == node.messages_key]  # type: ignore[union-attr]
        memory = next(v for k, v in update.update if k == node.memory_key)  # type: ignore[union-attr]
    else:
        writes = [update[node.messages_key]] if node.messages_key in update else []
        memory = update.get(node.memory_key)
    return stored_after(stored, writes), memory


def _result(fact: Fact, store: BaseStore, thread: str, sent_text: str) -> dict[str, Any]:
    """One fact asked at one call: in context, else each query kind's `Ask`."""
    row: dict[str, Any] = {"value": fact.value, "origin": fact.origin, "family": fact.family,
                           "in_context": fact.held_by(sent_text), "queries": {}}
    if not row["in_context"]:
        for kind, query in fact.queries().items():
            a = ask(store, thread, fact, query) if query.strip() else Ask(False, None, 0, "no hit")
            row["queries"][kind] = {"found": a.found, "rank": a.rank, "recalls": a.recalls, "miss": a.miss,
                                    "query": query}
    return row


def exam_conversation(trace: Trace | tuple[str, Sequence[BaseMessage]], window: int, store: BaseStore,
                      *, model_name: str = "gpt-4o",
                      on_call: Callable[[int, list[BaseMessage]], None] | None = None) -> dict[str, Any]:
    """Replay one conversation with the correction planted and ask its facts (see the module docstring).

    Returns: `{"id", "calls", "compactions", "facts": n, "last": [row per fact], "removed": [row per fact that
    left the context at some call, asked at the first such call]}`; a row: `{"value", "origin", "family",
    "in_context", "queries": {kind: {"found", "rank", "recalls", "miss", "query"}}}`.
    """
    cid, recorded = (trace.id, trace.messages) if isinstance(trace, Trace) else trace
    recording = [m if m.id else m.model_copy(update={"id": f"{cid}:{i}"}) for i, m in enumerate(recorded)]
    recording, planted = plant_correction(recording, cid)
    facts = pick_facts(recording) + ([planted] if planted is not None else [])
    node = CompactionNode(max_input_tokens=window, model_name=model_name, offload=store,
                          tools=[search_compacted_history, recall_tool_result, recall_message])
    thread = cid
    config = {"configurable": {"thread_id": thread}}
    stored: list[BaseMessage] = []
    memory: Any = None
    calls = [i for i, m in enumerate(recording) if isinstance(m, AIMessage)]
    removed: dict[int, dict[str, Any]] = {}
    last: list[dict[str, Any]] = []
    end = 0
    compactions = 0
    for n, i in enumerate(calls):
        stored = stored_after(stored, [recording[end:i]]) if i > end else stored
        end = i
        update = node.invoke({"messages": stored, "compaction": memory}, config)
        before = (memory or {}).get("compactions", 0) if isinstance(memory, dict) else 0
        stored, memory = _apply(stored, update, node)
        compactions += int(memory.get("compactions", 0)) - int(before)
        sent = stored
        text = _sent_text(sent)
        if on_call is not None:
            on_call(i, sent)
        for k, fact in enumerate(facts):
            if fact.source_index < i and k not in removed and not fact.held_by(text):
                removed[k] = _result(fact, store, thread, text)
        if n == len(calls) - 1:
            last = [_result(f, store, thread, text) for f in facts if f.source_index < i]
    return {"id": cid, "calls": len(calls), "compactions": compactions,
            "facts": sum(1 for f in facts if calls and f.source_index < calls[-1]), "last": last,
            "removed": [removed[k] for k in sorted(removed)]}


# ------------------------------------------------------------------------------------------------- figures


def figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a set of asked facts: `{"facts", "in_context", "in_context_share", "by_kind": {kind:
    {"asked" (facts the kind applies to), "found" (in context or recalled), "share", "recalled", "misses":
    {category: n}, "recalls" (recall calls made, summed)}}}`; shares are fractions (None without facts)."""
    n = len(rows)
    in_context = sum(1 for r in rows if r["in_context"])
    by_kind: dict[str, Any] = {}
    for kind in QUERY_KINDS:
        applies = [r for r in rows if r["in_context"] or kind in r["queries"]]
        if kind == "call":
            applies = [r for r in applies if r["origin"] == "tool result"]
        recalled = sum(1 for r in applies if not r["in_context"] and r["queries"][kind]["found"])
        found = sum(1 for r in applies if r["in_context"]) + recalled
        misses = Counter(r["queries"][kind]["miss"] for r in applies if not r["in_context"]
                         and not r["queries"][kind]["found"])
        by_kind[kind] = {"asked": len(applies), "found": found, "share": _share(found, len(applies)),
                         "recalled": recalled, "misses": dict(misses),
                         "recalls": sum(r["queries"][kind]["recalls"] for r in applies if not r["in_context"])}
    keyword = [r for r in rows]
    found_kw = sum(1 for r in keyword if r["in_context"] or any(
        r["queries"][k]["found"] for k in ("context", "call") if k in r["queries"]))
    return {"facts": n, "in_context": in_context, "in_context_share": _share(in_context, n), "by_kind": by_kind,
            "keywords_found": found_kw, "keywords_share": _share(found_kw, n)}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def recall_exam(paths: Sequence[Path], *, windows: Sequence[int] = WINDOWS, conversations: int | None = None,
                model_name: str = "gpt-4o", progress: bool = False) -> dict[str, Any]:
    """The exam over the trace files `paths` (the first `conversations` of each file when given): `{"windows":
    {window: {"files": {file name: {"conversations", "calls", "compactions", "last": figures, "removed":
    figures}}, "all": {...}, "misses": [first misses, for the report]}}}` (`figures`)."""
    loaded = [(Path(p).name, load_traces(p)[:conversations] if conversations else load_traces(p)) for p in paths]
    out: dict[str, Any] = {"windows": {}}
    for window in windows:
        store = InMemoryStore()
        files: dict[str, Any] = {}
        every_last: list[dict[str, Any]] = []
        every_removed: list[dict[str, Any]] = []
        examples: list[dict[str, Any]] = []
        calls = compactions = convs = 0
        for name, traces in loaded:
            last: list[dict[str, Any]] = []
            removed: list[dict[str, Any]] = []
            f_calls = f_compactions = 0
            for trace in traces:
                r = exam_conversation(trace, window, store, model_name=model_name)
                if progress:
                    click.echo(f"{window} {name} {trace.id}: {len(r['last'])} facts, {r['compactions']} "
                               "compactions", err=True)
                last += r["last"]
                removed += r["removed"]
                f_calls += r["calls"]
                f_compactions += r["compactions"]
                for row in r["last"]:
                    if not row["in_context"] and not all(q["found"] for q in row["queries"].values()):
                        examples.append({"conversation": trace.id, **row})
            files[name] = {"conversations": len(traces), "calls": f_calls, "compactions": f_compactions,
                           "last": figures(last), "removed": figures(removed)}
            every_last += last
            every_removed += removed
            calls += f_calls
            compactions += f_compactions
            convs += len(traces)
        out["windows"][str(window)] = {
            "files": files, "all": {"conversations": convs, "calls": calls, "compactions": compactions,
                                    "last": figures(every_last), "removed": figures(every_removed)},
            "misses": examples}
    return out


# -------------------------------------------------------------------------------------------------- report


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _misses(by_kind: dict[str, Any]) -> str:
    parts = []
    for kind in QUERY_KINDS:
        m = by_kind[kind]["misses"]
        if m:
            parts.append(f"{kind}: " + ", ".join(f"{c} {m[c]}" for c in MISSES if c in m))
    return "; ".join(parts) or "none"


def _table(rows: dict[str, dict[str, Any]], which: str) -> list[str]:
    lines = ["| traces | conversations | model calls | compactions | facts | in the sent context alone | "
             "with search + recall: value | context words | call words (tool results) | context or call words | "
             "misses (not found) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        g = f[which]
        k = g["by_kind"]
        call = k["call"]
        lines.append(f"| {name} | {f['conversations']} | {f['calls']} | {f['compactions']} | {g['facts']} | "
                     f"{_pct(g['in_context_share'])} ({g['in_context']}) | {_pct(k['value']['share'])} | "
                     f"{_pct(k['context']['share'])} | {_pct(call['share'])} of {call['asked']} | "
                     f"{_pct(g['keywords_share'])} | {_misses(k)} |")
    return lines


def _verdict(result: dict[str, Any]) -> list[str]:
    out = []
    for which, when in (("last", "at the last call (every fact)"),
                        ("removed", "at the first call without it (only the facts compaction removed)")):
        for window, w in result["windows"].items():
            g = w["all"][which]
            parts = []
            for kind in QUERY_KINDS:
                s = g["by_kind"][kind]["share"]
                parts.append(f"{kind} {_pct(s)} ({'met' if s is not None and s >= 0.98 else 'missed'})")
            out.append(f"- {int(window):,} tokens, {when}: " + ", ".join(parts)
                       + f"; context or call words {_pct(g['keywords_share'])}.")
    return out


WHY = (
    "Why the \"call\" query misses the target (read with the misses' categories above, and the examples below). "
    "Coding agents run the same or nearly the same command many times (`python "
    "reproduce_issue.py`, `cat pvlib/temperature.py | sed -n ...`), so the words of a call match every run of it "
    "and the first three hits are often other runs of it, each with another output. (The assistant message that "
    "made a call no longer outranks the call's output: it is ranked by its own words when its results are "
    "records too, `search.Document.tokens`.) The value and the words around it in the output find almost every "
    "fact; an agent that tries the words around it, then its call words, finds what the \"context or call "
    "words\" column says. "
    "The value's misses are paths named in many records (`src/marshmallow/schema.py`), whose listing is outranked "
    "by the records that mention it more often.")


def _lost(result: dict[str, Any]) -> str:
    """The line saying whether any fact compaction removed was lost (a "not recorded" miss)."""
    lost = sum(g["by_kind"][k]["misses"].get("not recorded", 0) for w in result["windows"].values()
               for g in (w["all"]["last"], w["all"]["removed"]) for k in QUERY_KINDS)
    return ("Lost: no miss is \"not recorded\": every fact compaction removed was in a record of its thread."
            if not lost else f"Lost: {lost} lookups missed a fact no record of its thread holds (\"not recorded\").")


def _examples(result: dict[str, Any], n: int = 12) -> list[str]:
    lines = []
    for window, w in result["windows"].items():
        for e in w["misses"][:n]:
            qs = "; ".join(f"{k}: {q['miss'] or 'found at hit ' + str(q['rank'])} (query {json.dumps(q['query'][:80])})"
                           for k, q in e["queries"].items())
            lines.append(f"- {int(window):,}, {e['conversation']}, {e['origin']} `{e['value'][:60]}`: {qs}")
    return lines or ["- none"]


def markdown(result: dict[str, Any], *, command: str, machine: dict[str, Any], seconds: float) -> str:
    """RECALL.md from `recall_exam`'s result."""
    lines = ["# The recall exam: what compaction removed, found again by search and recall (issue 22)", "",
             f"Generated by `{command}` (benchmarks/recall_exam.py; the method is in its docstring).", "",
             f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, Python {machine['python']}, "
             f"{machine['date']}; load average before: {machine.get('load_before')}, after: "
             f"{machine.get('load_after')}; run time {seconds:.0f} s.", "",
             "Every shared conversation is replayed call by call through the `CompactionNode` (rewrite mode, "
             "offload on, a LangGraph `InMemoryStore`); facts (ids, amounts, paths of early user turns and tool "
             "results, by `lc_compaction.recall`'s extraction, and one planted correction a conversation) are "
             "asked for. A fact in the sent context counts as found without a search; otherwise a scripted agent "
             f"calls `search_compacted_history` (limit {SEARCH_LIMIT}), recalls the first {HITS_READ} hits "
             f"(`recall_tool_result` / `recall_message`, up to {SLICES_READ} slices each) and the fact counts as "
             "found when a recalled text holds it. Each query kind is scored on its own: the value as written "
             f"(the easy case), the words around it in its message ({CONTEXT_WORDS} each side, words with digits "
             "left out), and for a tool result the call that produced it (tool name and argument values). "
             "\"With search + recall\" shares count the facts found in the context too; \"context or call "
             "words\" is found by either key-word query.", "",
             "## Target (>= 98% with search, whatever the window)", "", *_verdict(result), "", _lost(result), "",
             WHY, ""]
    for window, w in result["windows"].items():
        rows = {**w["files"], "all": w["all"]}
        lines += [f"## {int(window):,} tokens", "",
                  "### Asked at the last model call of each conversation", "", *_table(rows, "last"), "",
                  "### Asked at the first model call whose sent context no longer held the fact", "",
                  "Only the facts compaction removed at some call (so none is in the context there).", "",
                  *_table(rows, "removed"), ""]
    lines += ["## Misses at the last call (first ones)", "", *_examples(result), ""]
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--traces", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of the traces (*.jsonl); default: tests/shared_data.py traces_dir().")
@click.option("--windows", default=",".join(str(w) for w in WINDOWS), show_default=True,
              help="Comma-separated windows, tokens.")
@click.option("--conversations", type=click.IntRange(1), default=None,
              help="Only the first N conversations of each file.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the markdown here (else print it).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the figures as JSON.")
@click.option("--progress", is_flag=True, help="A line per conversation on stderr.")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Write the markdown from the figures an earlier run wrote with --json (no replay).")
def main(traces: Path | None, windows: str, conversations: int | None, output: Path | None,
         json_path: Path | None, progress: bool, from_json: Path | None) -> None:
    """Run the recall exam (see the module docstring)."""
    from benchmarks.machine import machine_info
    from tests.shared_data import traces_dir

    if from_json is not None:
        data = json.loads(from_json.read_text(encoding="utf-8"))
        text = markdown(data, command=data["command"], machine=data["machine"], seconds=data["seconds"])
        if output is None:
            click.echo(text)
        else:
            output.write_text(text, encoding="utf-8")
        return

    folder = traces if traces is not None else traces_dir()
    machine = machine_info()
    machine["load_before"] = os.getloadavg()[0]
    started = time.perf_counter()
    result = recall_exam(sorted(folder.glob("*.jsonl")), windows=tuple(int(w) for w in windows.split(",")),
                         conversations=conversations, progress=progress)
    seconds = time.perf_counter() - started
    machine["load_after"] = os.getloadavg()[0]
    result["traces"] = str(folder)
    command = "scripts/dev python benchmarks/recall_exam.py" + "".join(f" {a}" for a in sys.argv[1:])
    text = markdown(result, command=command, machine=machine, seconds=seconds)
    if json_path is not None:
        json_path.write_text(json.dumps({**result, "machine": machine, "seconds": round(seconds, 1),
                                         "command": command}, indent=1)
                             + "\n", encoding="utf-8")
    if output is None:
        click.echo(text)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


if __name__ == "__main__":
    main()
