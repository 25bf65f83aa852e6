"""Issue 22: `search_compacted_history` finds what compaction took out of the thread, and only that thread's.

- Through `create_agent` + `CompactionMiddleware(offload=True)` (which registers the tools) and a scripted model:
  after a chat long enough to drop its early turns, the model searches for a correction the user made at turn 1
  (its turn no longer in its input; the drop marker may quote its start), reads the hit's handle, and
  `recall_message` answers the turn word for word. Another thread of the same store searching for those words
  finds nothing and sees none of them. InMemory and Postgres.
- A folded step of a running request (its result and call out of the history, in the progress note) is found by
  an identifier inside its result, and by the argument of the call that asked for it; the hit names
  `recall_tool_result(tool_call_id=...)` and its snippet sits inside the data fence.
- Bounded: at most `limit` hits (1 to 10, others refused), each snippet at most `SNIPPET_CHARS` characters, the
  whole answer within `DEFAULT_RECALL_CHARS`, and within the smaller slice the records were planned with.
- Tokens: a path keeps its root (`./`, `/`) as a token of its own, so the same path asked for ranks first.
- With a store that has a semantic index (`index=`), its ranking is fused with BM25's: a record sharing no word
  with the query is found.
- Search and recall answers are never offloaded on arrival nor deduplicated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from lc_compaction import CompactionPolicy, compact
from lc_compaction.integrations import CompactionMiddleware
from lc_compaction.integrations.offload import OffloadTarget, compact_offloaded, write_offloads
from lc_compaction.integrations.search import search_history
from lc_compaction.markers import LOOKUP_TOOL_NAMES, SEARCH_TOOL_NAME, UNTRUSTED_DATA_FENCE
from lc_compaction.offload import DEFAULT_RECALL_CHARS, OffloadRecord, call_text, large_arrivals
from lc_compaction.search import MAX_SEARCH_LIMIT, SNIPPET_CHARS, Document, bm25_ranking, search_tokens
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call, tool_loop, tool_result

WINDOW = 1_500
TURNS = 12
CORRECTION = "Correction: use the streaming pipeline, not the batch one."
RECALL_MESSAGE = re.compile(r'recall_message\(message_id=("(?:[^"\\]|\\.)*")\)')


def _user(k: int) -> HumanMessage:
    return HumanMessage((CORRECTION if k == 1 else f"Question {k} about ORD-{k:04d}.") + " please" * 90, id=f"u{k}")


def _by_call(messages: list, cid: str) -> ToolMessage:
    return next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == cid)


def _call(name: str, args: dict, cid: str) -> AIMessage:
    return AIMessage("", id=f"ai-{cid}", tool_calls=[{"name": name, "args": args, "id": cid}])


def _script(calls: list, query: str, turns: int) -> Iterator[AIMessage]:
    """Answers `turns` turns, then searches for `query`, recalls the first hit that is a message, and answers."""
    for n in range(turns):
        yield AIMessage(f"Answer {n}. " + "ok " * 90, id=f"a{n}")
    yield _call(SEARCH_TOOL_NAME, {"query": query}, "s1")
    found = RECALL_MESSAGE.search(_by_call(calls[-1], "s1").content)
    if found is not None:
        yield _call("recall_message", {"message_id": json.loads(found.group(1))}, "s2")
    yield AIMessage("Done.", id="done")


def _agent(store: Any, saver: Any, query: str, turns: int) -> tuple[Any, ReplayChatModel]:
    calls: list = []
    model = ReplayChatModel(messages=iter(()), profile={"max_input_tokens": WINDOW})
    model.calls = calls
    model.messages = _script(calls, query, turns)
    agent = create_agent(model, [], middleware=[CompactionMiddleware(max_input_tokens=WINDOW, offload=True)],
                         store=store, checkpointer=saver)
    return agent, model


def test_the_agent_finds_a_dropped_correction_and_reads_it_back_in_its_thread_only(backend: Any) -> None:
    store, saver = backend
    agent, model = _agent(store, saver, "streaming pipeline", TURNS)
    config = {"configurable": {"thread_id": "bob"}}
    for k in range(TURNS):
        agent.invoke({"messages": [_user(k)]}, config)
    agent.invoke({"messages": [HumanMessage("Which pipeline did I ask for?", id="q")]}, config)
    search_at = next(i for i, c in enumerate(model.calls) if any(getattr(m, "tool_call_id", "") == "s1" for m in c))
    before = model.calls[search_at - 1]
    assert "u1" not in {m.id for m in before} and _user(1).content not in "".join(m.text for m in before), \
        "the turn was dropped (a marker may quote its start)"
    answer = _by_call(model.calls[search_at], "s1")
    assert answer.artifact["hits"][0] == {"kind": "message", "key": "u1", "message_id": "u1",
                                          "compaction": answer.artifact["hits"][0]["compaction"], "position": 2}
    assert isinstance(answer.artifact["hits"][0]["compaction"], int)
    assert "streaming pipeline" in answer.content and 'recall_message(message_id="u1")' in answer.content
    recalled = _by_call(model.calls[-1], "s2")
    assert recalled.content == _user(1).content, "the turn word for word"
    # another thread of the same store: nothing of bob's
    other, other_model = _agent(store, saver, "streaming pipeline", 2)
    alice = {"configurable": {"thread_id": "alice"}}
    for k in (0, 2):
        other.invoke({"messages": [_user(k)]}, alice)
    other.invoke({"messages": [HumanMessage("Which pipeline?", id="q")]}, alice)
    seen = _by_call(other_model.calls[-1], "s1")
    assert seen.artifact["hits"] == [] and "streaming" in seen.content and CORRECTION not in seen.content
    assert "u1" not in seen.content


# --------------------------------------------------------------------------------------- folded steps


def _folded(store: InMemoryStore) -> list:
    history = tool_loop(12, 60, args=lambda i: {"q": f"item-{i}"})[:-2]  # a running request: ends with a result
    history[4] = history[4].model_copy(update={"content": "result 1: the key is ZETA-4242 " + history[4].content})
    result = compact_offloaded(history, CompactionPolicy(max_input_tokens=2_000), OffloadTarget(store, "loop"))
    assert any(a.kind == "folded" for a in result.actions), "steps were folded into the progress note"
    assert "t1" not in {m.id for m in result.messages}
    return history


@pytest.mark.parametrize("query", ["ZETA-4242", "item-1"])
def test_a_folded_step_is_found_by_its_output_or_its_call(query: str) -> None:
    store = InMemoryStore()
    _folded(store)
    text, artifact = search_history(store, "loop", query)
    first = next(h for h in artifact["hits"] if h["kind"] == "tool_result")
    assert first["key"] == "c1" and first["message_id"] == "t1"
    assert 'recall_tool_result(tool_call_id="c1")' in text
    block = text.split('recall_tool_result(tool_call_id="c1")')[1]
    assert block.lstrip("\n").startswith(UNTRUSTED_DATA_FENCE[0] + "lookup: ")
    assert "ZETA-4242" in block.split(UNTRUSTED_DATA_FENCE[1])[0], "the identifier inside the fence"
    assert search_history(store, "elsewhere", query)[1]["hits"] == [], "another thread has no such record"


# ------------------------------------------------------------------------------------------- bounds


def _many(store: InMemoryStore, thread: str, recall_chars: int | None = None) -> None:
    records = [OffloadRecord(tool_result(f"c{i}", f"t{i}", f"alpha {i} " + "beta gamma alpha " * 200, name="f"),
                             "removed", recall_chars=recall_chars) for i in range(30)]
    assert write_offloads(records, OffloadTarget(store, thread))["written"] == 30


def test_answers_are_bounded() -> None:
    store = InMemoryStore()
    _many(store, "big")
    text, artifact = search_history(store, "big", "alpha gamma", MAX_SEARCH_LIMIT)
    assert len(artifact["hits"]) == MAX_SEARCH_LIMIT and len(text) <= DEFAULT_RECALL_CHARS
    inner = re.findall(re.escape(UNTRUSTED_DATA_FENCE[0]) + "f: (.*?)" + re.escape(UNTRUSTED_DATA_FENCE[1]), text)
    assert len(inner) == MAX_SEARCH_LIMIT and all(len(s) <= SNIPPET_CHARS + 2 for s in inner)
    assert len(search_history(store, "big", "alpha")[1]["hits"]) == 5, "the default limit"
    for bad in (0, MAX_SEARCH_LIMIT + 1):
        assert "limit must be" in search_history(store, "big", "alpha", bad)[0]
    _many(store, "small", recall_chars=400)
    text, artifact = search_history(store, "small", "alpha", MAX_SEARCH_LIMIT)
    assert 1 <= len(artifact["hits"]) < MAX_SEARCH_LIMIT and len(text.encode()) <= 400


# ------------------------------------------------------------------------------------------- ranking


def test_a_path_keeps_its_root() -> None:
    tokens = search_tokens("open ./src/app.py then /etc/x.conf for order A-1001")
    assert {"./", "./src/app.py", "/", "/etc/x.conf", "a-1001", "app.py", "src"} <= set(tokens)
    docs = [Document("message", k, HumanMessage(t, id=k), t) for k, t in
            [("abs", "edit /src/app.py now"), ("rel", "edit ./src/app.py now"), ("none", "nothing here")]]
    assert [docs[i].key for i in bm25_ranking(docs, "./src/app.py")] == ["rel", "abs"]
    assert [docs[i].key for i in bm25_ranking(docs, "/src/app.py")] == ["abs", "rel"]


def test_a_semantic_index_is_fused_with_bm25() -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] if ("car" in t or "automobile" in t) else [0.0, 1.0] for t in texts]

    plain, indexed = InMemoryStore(), InMemoryStore(index={"dims": 2, "embed": embed, "fields": ["message"]})
    for store in (plain, indexed):
        write_offloads([OffloadRecord(HumanMessage("I bought an automobile", id="m1"), "removed"),
                        OffloadRecord(HumanMessage("my boat is blue", id="m2"), "removed")],
                       OffloadTarget(store, "s"))
    assert search_history(plain, "s", "car")[1]["hits"] == [], "no word in common"
    assert [h["key"] for h in search_history(indexed, "s", "car")[1]["hits"]][0] == "m1"


# ---------------------------------------------------------------------------------- lookup answers


def test_lookup_answers_are_never_offloaded_nor_deduplicated() -> None:
    answer = "hit " * 4_000
    history = [HumanMessage("find it", id="h0")]
    for k, name in enumerate(sorted(LOOKUP_TOOL_NAMES)):
        history += [ai_call(f"s{k}", f"a{k}", name=name), tool_result(f"s{k}", f"t{k}", answer, name=name),
                    ai_call(f"r{k}", f"b{k}", name=name), tool_result(f"r{k}", f"u{k}", answer, name=name)]
    counts = {id(m): 10_000 for m in history}
    assert large_arrivals(history, 0, counts, 5_000, lambda m: False) == set()
    result = compact(history, CompactionPolicy(max_input_tokens=200_000))
    assert not [a for a in result.actions if a.kind in ("deduplicated", "offloaded")]


def test_an_assistant_tool_call_found_by_search_reads_back_with_its_calls() -> None:
    """An assistant message whose substance is a tool call (empty content): the search finds it by the call's
    arguments and names `recall_message`; reading it back shows the call whole, not an empty text (found by the
    fleet benchmark with search on, `benchmarks/fleet.py`)."""
    from lc_compaction.integrations.recall import read_message

    store = InMemoryStore()
    thought = "The gift card balance does not cover the total; suggest a second payment method."
    call = AIMessage("", id="a7", tool_calls=[{"name": "think", "args": {"thought": thought}, "id": "c7"}])
    write_offloads([OffloadRecord(call, "removed")], OffloadTarget(store, "t"))
    _, found = search_history(store, "t", "gift card balance suggest")
    assert [h["message_id"] for h in found["hits"]] == ["a7"]
    text, info = read_message(store, "t", found["hits"][0]["key"])
    assert text == 'think({"thought": "' + thought + '"})' and info["end"] == info["total_chars"] == len(text)
    said = AIMessage("Let me check.", id="a8", tool_calls=[{"name": "get", "args": {"id": "R1"}, "id": "c8"}])
    write_offloads([OffloadRecord(said, "removed")], OffloadTarget(store, "t"))
    assert read_message(store, "t", "a8")[0] == 'Let me check.\nget({"id": "R1"})'
    human = HumanMessage("plain words", id="u9")
    write_offloads([OffloadRecord(human, "removed")], OffloadTarget(store, "t"))
    assert read_message(store, "t", "u9")[0] == "plain words", "other messages: their content, as before"


def test_a_search_for_a_command_finds_what_it_returned_first() -> None:
    """A coding agent looks for the output of a command it ran, by the command's words: the result's record (which
    holds its call) ranks above the shorter assistant message that made the call, whose calls are ranked with their
    results (found by the recall exam, `benchmarks/recall_exam.py`)."""
    store = InMemoryStore()
    records = []
    for k in range(3):
        call = AIMessage("", id=f"a{k}", tool_calls=[{"name": "bash", "args": {"command": f"python step{k}.py"},
                                                      "id": f"c{k}"}])
        out = tool_result(f"c{k}", f"t{k}", f"Traceback (most recent call last):\n  line {k}\nValueError: "
                          + "x" * 400, name="bash")
        records += [OffloadRecord(call, "removed"),
                    OffloadRecord(out, "removed", call=call_text("bash", {"command": f"python step{k}.py"}))]
    write_offloads(records, OffloadTarget(store, "t"))
    hits = search_history(store, "t", "python step1.py")[1]["hits"]
    assert hits[0]["kind"] == "tool_result" and hits[0]["key"] == "c1"


def test_an_earlier_search_answer_is_no_hit() -> None:
    """A search's answer, recorded once compacted, holds what it found; searching again finds the original, not
    the stale answer (nor the assistant message that asked for it): the new user's trial of issue 22."""
    store = InMemoryStore()
    correction = HumanMessage("Correction: deploy only to region eu-west-3, ticket OPS-4471.", id="h2")
    ask = AIMessage("", id="a9", tool_calls=[{"name": SEARCH_TOOL_NAME, "args": {"query": "OPS-4471", "limit": 1},
                                              "id": "s9"}])
    answer = tool_result("s9", "t9", "1. user message: recall_message(message_id=\"h2\") | Correction: deploy only to "
                         "region eu-west-3, ticket OPS-4471.", name=SEARCH_TOOL_NAME)
    write_offloads([OffloadRecord(correction, "removed"), OffloadRecord(ask, "removed"),
                    OffloadRecord(answer, "removed", call=call_text(SEARCH_TOOL_NAME, {"query": "OPS-4471"}))],
                   OffloadTarget(store, "t"))
    text, found = search_history(store, "t", "OPS-4471", 3)
    assert [h["message_id"] for h in found["hits"]] == ["h2"] and found["matched"] == 1


def test_the_answer_says_how_many_match_and_when_its_bound_left_hits_out() -> None:
    store = InMemoryStore()
    _many(store, "small", recall_chars=700)
    text, found = search_history(store, "small", "alpha", MAX_SEARCH_LIMIT)
    first = text.splitlines()[0]
    assert found["matched"] == 30 and first.startswith(f"[{SEARCH_TOOL_NAME}: 30 of the 30 kept messages")
    assert f"the best {len(found['hits'])} follow" in first and len(found["hits"]) < MAX_SEARCH_LIMIT
    assert "size bound leaves out" in first
    text, found = search_history(store, "small", "alpha", 1)
    assert "size bound" not in text.splitlines()[0] and len(found["hits"]) == 1
