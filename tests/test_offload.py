"""Offload and recall (lc_compaction.offload, integrations/offload.py, integrations/recall.py), each test on
InMemoryStore and on PostgresStore (a real server: tests/conftest.py, scripts/postgres).

- offload then recall, through the real tool in a compiled graph (ToolNode injects the runtime), gives the
  original back byte-identical: text, content blocks, a very long result, non-ASCII (NUL, emoji, CJK, a lone
  surrogate); the slices are in characters and never longer than the tool's cap (in characters and UTF-8 bytes);
- a recall from another thread is refused ("not found"), the thread namespace is per thread (a "." in the id too);
- a failed write loses nothing (the store raising, or another content under the same key): the message stays as
  it was, the failure is in the result and in the event;
- no double write: the next call finds the record and writes nothing;
- offloaded content is counted nowhere in the model input;
- a huge result is offloaded on arrival (under the trigger): head and tail preview plus the handle;
- a reused tool_call_id (`call_0` in every turn): taken in the store by an earlier turn's result, or twice in one
  history, each result gets its own handle and both are recalled byte-identical;
- a message cut by the last resort (a tool result or a user message) names the recall tool and its handle, and
  the recall gives the original; without offload the marker promises nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from lc_compaction import CompactionPolicy, compact
from lc_compaction.integrations.offload import (
    OffloadTarget,
    acompact_offloaded,
    compact_offloaded,
    offload_target,
    write_offloads,
)
from lc_compaction.integrations.recall import DEFAULT_RECALL_CHARS, load_offloaded, recall_tool, recall_tool_result
from lc_compaction.markers import is_truncated
from lc_compaction.offload import (
    RECALL_TOOL_NAME,
    OffloadKeys,
    is_offloaded,
    offload_namespace,
    plan_offloads,
    recall_text,
)

LONG = "".join(f"line {i}: status shipped, tracking event {i * 7919 % 10007}\n" for i in range(6_000))
UNICODE = "Zürich → 東京 🚀 naïve café\x00 end \ud800 lone surrogate; " * 40
BLOCKS = [{"type": "text", "text": "order A-1 shipped " * 60}, {"type": "image", "base64": "iVBORw0KGgo" * 30,
                                                                  "mime_type": "image/png"},
          {"type": "text", "text": "Ünïcödé ✓ " * 50, "extra": {"b": 1, "a": [1.5, None, True]}}]


def history(contents: list[Any], n_filler: int = 6) -> list:
    """A system prompt, one exchange per content (a tool call and its result), then small exchanges."""
    out: list = [SystemMessage("You are a support agent.", id="sys")]
    for i, content in enumerate(contents):
        out += [HumanMessage(f"question {i}", id=f"h{i}"),
                AIMessage("", id=f"a{i}", tool_calls=[{"name": "get_order", "args": {"n": i}, "id": f"call{i}"}]),
                ToolMessage(content, tool_call_id=f"call{i}", name="get_order", id=f"t{i}"),
                AIMessage(f"answer {i}", id=f"r{i}")]
    for j in range(n_filler):
        out += [HumanMessage(f"small question {j}", id=f"hs{j}"), AIMessage(f"small answer {j}", id=f"rs{j}")]
    return out


def policy(store: Any, window: int = 4_000, **kw: Any) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=window, offload=store, offload_above=kw.pop("offload_above", None), **kw)


def recall_graph(store: Any, tool: Any = recall_tool_result) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "tools")
    return builder.compile(store=store)


def recall(graph: Any, thread: str, tool_call_id: str, **args: Any) -> ToolMessage:
    call = {"name": RECALL_TOOL_NAME, "args": {"tool_call_id": tool_call_id, **args}, "id": "rc-" + tool_call_id}
    out = graph.invoke({"messages": [AIMessage("", tool_calls=[call])]}, {"configurable": {"thread_id": thread}})
    msg = out["messages"][-1]
    assert isinstance(msg, ToolMessage) and msg.tool_call_id == call["id"]
    return msg


def utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def recall_all(graph: Any, thread: str, tool_call_id: str, length: int | None = None) -> str:
    """Every slice of a recall, from offset 0 until the end, concatenated (the trailer line removed by the
    artifact's offsets); each slice no longer than the tool's cap."""
    parts, offset = [], 0
    while True:
        msg = recall(graph, thread, tool_call_id, offset=offset, **({"length": length} if length else {}))
        art = msg.artifact
        assert art["offset"] == offset and art["end"] - offset <= (length or DEFAULT_RECALL_CHARS)
        parts.append(msg.content[: art["end"] - offset])
        if art["end"] >= art["total_chars"]:
            assert msg.content == parts[-1], "the last slice carries no trailer"
            return "".join(parts)
        assert msg.content.endswith(f"call again with offset={art['end']} for more]")
        offset = art["end"]


@pytest.mark.parametrize("content", [LONG, UNICODE * 20, BLOCKS], ids=["very-long", "non-ascii", "blocks"])
def test_offload_then_recall_is_byte_identical(content: Any, backend: Any) -> None:
    store = backend[0]
    messages = history([content, LONG])
    target = OffloadTarget(store, "thread-A")
    result = compact_offloaded(messages, policy(store), target)
    truncated = [m for m in result.messages if m.type == "tool" and is_truncated(m)]
    assert "t0" in {m.id for m in truncated} or "t0" in {m.id for m in result.removed}
    assert result.offload["written"] >= 1 and not result.offload["failed"]
    # through the tool, in a real graph, slice by slice
    got = recall_all(recall_graph(store), "thread-A", "call0")
    assert got == recall_text(content)
    if isinstance(content, list):
        assert json.loads(got) == content and json.dumps(json.loads(got)) == json.dumps(content)
    # the whole message, from Python
    back = load_offloaded(store, "thread-A", "call0")
    assert json.dumps(message_to_dict(back)) == json.dumps(message_to_dict(messages[3]))


def test_truncation_note_names_the_handle_and_only_stored_results(backend: Any) -> None:
    store = backend[0]
    result = compact_offloaded(history([LONG, LONG]), policy(store), OffloadTarget(store, "t"))
    notes = [m for m in result.messages if m.type == "tool" and is_truncated(m)]
    assert notes
    for m in notes:
        assert f'{RECALL_TOOL_NAME}(tool_call_id="{m.tool_call_id}")' in m.content
        assert store.get(offload_namespace("t"), m.tool_call_id) is not None


def test_slice_recall_in_characters_and_capped(backend: Any) -> None:
    store = backend[0]
    compact_offloaded(history([UNICODE * 20, LONG]), policy(store), OffloadTarget(store, "s"))
    graph = recall_graph(store)
    text = recall_text(UNICODE * 20)
    msg = recall(graph, "s", "call0", offset=17, length=33)
    assert msg.content.startswith(text[17:50]) and msg.artifact["end"] == 50
    assert f"characters 17-50 of {len(text):,}" in msg.content
    small = recall_graph(store, recall_tool(max_chars=100))
    capped = recall(small, "s", "call0", offset=0, length=10_000)
    end = capped.artifact["end"]  # the longest slice of at most 100 characters and 100 UTF-8 bytes
    assert len(utf8(text[:end])) <= 100 < len(utf8(text[:end + 1])) and capped.content.startswith(text[:end])
    assert recall(small, "s", "call1", length=10_000).artifact["end"] == 100  # ASCII: 100 characters
    assert recall_all(small, "s", "call0") == text
    past = recall(graph, "s", "call0", offset=len(text) + 5)
    assert "past the end" in past.content and text[:20] not in past.content


def test_recall_from_another_thread_is_refused(backend: Any) -> None:
    store = backend[0]
    compact_offloaded(history([LONG, LONG]), policy(store), OffloadTarget(store, "alice"))
    graph = recall_graph(store)
    assert recall(graph, "alice", "call0").content.startswith(LONG[:100])
    other = recall(graph, "bob", "call0")
    assert "not found" in other.content and LONG[:30] not in other.content
    assert load_offloaded(store, "bob", "call0") is None


def test_thread_namespace_is_per_thread_and_escapes_periods(backend: Any) -> None:
    assert offload_namespace("user.42") == ("lc_compaction", "offload", "user%2E42", "tool_result")
    assert offload_namespace("user%2E42") != offload_namespace("user.42")
    store = backend[0]
    compact_offloaded(history([LONG, LONG]), policy(store), OffloadTarget(store, "user.42"))
    assert store.get(("lc_compaction", "offload", "user%2E42", "tool_result"), "call0") is not None
    assert recall_all(recall_graph(store), "user.42", "call0") == LONG
    with pytest.raises(ValueError, match="thread"):
        offload_namespace("")


class FlakyStore(BaseStore):
    """A store in front of another that counts the writes and can refuse them (raises on a batch with a PutOp)."""

    def __init__(self, inner: BaseStore, fail_puts: bool = False) -> None:
        self.inner = inner
        self.fail_puts = fail_puts
        self.puts = 0

    def batch(self, ops: Any) -> list:
        ops = list(ops)
        n = sum(1 for op in ops if isinstance(op, PutOp))
        if n and self.fail_puts:
            raise ConnectionError("store unavailable")
        self.puts += n
        return self.inner.batch(ops)

    async def abatch(self, ops: Any) -> list:
        return self.batch(ops)


def test_a_failed_write_loses_nothing(backend: Any) -> None:
    store = FlakyStore(backend[0], fail_puts=True)
    messages = history([LONG, LONG, LONG])
    snapshot = [json.dumps(message_to_dict(m)) for m in messages]
    result = compact_offloaded(messages, policy(store), OffloadTarget(store, "t"))
    assert [json.dumps(message_to_dict(m)) for m in result.messages] == snapshot, "a message was changed or lost"
    assert not result.removed and not any(a.kind in ("truncated", "removed") for a in result.actions)
    failed = result.offload["failed"]
    assert {f["id"] for f in failed} >= {"t0"} and all("store unavailable" in f["error"] for f in failed)
    assert result.to_dict()["offload"]["failed"] == failed  # what the event carries
    assert store.puts == 0 and messages[3].content == LONG


def test_a_conflicting_record_keeps_that_message_and_offloads_others(backend: Any) -> None:
    store = backend[0]  # another content under t0's tool_call_id, and under the key it would be given instead
    for key in ("call0", "call0@t0"):
        store.put(offload_namespace("t"), key, {"v": 1, "message": "{}", "sha256": "different"})
    messages = history([LONG, LONG, LONG])
    result = compact_offloaded(messages, policy(store), OffloadTarget(store, "t"))
    by_id = {m.id: m for m in result.messages}
    assert by_id["t0"].content == LONG, "the message whose record conflicts is kept whole"
    assert [f["id"] for f in result.offload["failed"]] == ["t0"]
    taken = [a.message_ids for a in result.actions if a.kind in ("truncated", "removed")]
    assert {"t1", "t2"} <= {i for ids in taken for i in ids}, "the other results are still compacted"
    originals = {m.id: m for m in messages}
    for key in result.offload["written_keys"]:
        kind = "tool_result" if key.startswith("call") else "message"
        back = load_offloaded(store, "t", key, kind=kind)
        assert message_to_dict(back) == message_to_dict(originals[back.id])


def test_no_double_write(backend: Any) -> None:
    store = FlakyStore(backend[0])
    messages = history([LONG, LONG])
    first = compact_offloaded(messages, policy(store), OffloadTarget(store, "t"))
    writes = store.puts
    assert writes == first.offload["written"] > 0
    again = compact_offloaded(messages, policy(store), OffloadTarget(store, "t"))
    assert store.puts == writes, "the same content was written twice"
    assert again.offload["already_stored"] == first.offload["written"] and again.offload["written"] == 0
    # the compacted history compacted again: its notes are not written over the originals
    grown = [*first.messages, HumanMessage("more " * 3_000, id="big")]
    compact_offloaded(grown, policy(store), OffloadTarget(store, "t"))
    assert recall_all(recall_graph(store), "t", "call0") == LONG


def test_offloaded_content_is_counted_nowhere_in_the_model_input(backend: Any) -> None:
    store = backend[0]
    pol = policy(store)
    result = compact_offloaded(history([LONG, UNICODE * 20, "y" * 3_000]), pol, OffloadTarget(store, "t"))
    assert result.tokens_after == pol.counter.count_messages(result.messages)  # reply priming included
    sent = json.dumps([message_to_dict(m) for m in result.messages])
    for record_id in result.offload["written_keys"]:
        original = recall_text(load_offloaded(store, "t", record_id).content)
        assert original[500:700] not in sent, f"{record_id}: offloaded content is still in the model input"
    assert LONG[1000:1100] not in json.dumps(result.to_dict())
    assert result.fits and result.tokens_after <= pol.budget_tokens()


def test_a_huge_result_is_offloaded_on_arrival_under_the_trigger(backend: Any) -> None:
    store = backend[0]
    pol = CompactionPolicy(max_input_tokens=1_000_000, offload=store, offload_above=2_000)
    messages = history([LONG], n_filler=0)
    assert not pol.is_triggered(pol.counter.count_messages(messages), len(messages))
    result = compact_offloaded(messages, pol, OffloadTarget(store, "t"))
    preview = {m.id: m for m in result.messages}["t0"]
    assert preview.content.startswith(LONG[:1_500]) and preview.content.endswith(LONG[-500:])
    assert f'{RECALL_TOOL_NAME}(tool_call_id="call0")' in preview.content
    assert result.stop_reason == "under_trigger" and [a.kind for a in result.actions] == ["offloaded"]
    assert pol.counter.count_message(preview) < 1_000
    assert recall_all(recall_graph(store), "t", "call0") == LONG
    # the next call does not preview it again, nor write it again
    again = compact_offloaded(result.messages, pol, OffloadTarget(store, "t"))
    assert again.messages is result.messages and again.offload is None


def test_a_recall_answer_is_never_offloaded_on_arrival(backend: Any) -> None:
    store = backend[0]
    pol = CompactionPolicy(max_input_tokens=1_000_000, offload=store, offload_above=100)
    messages = [HumanMessage("q", id="h"), AIMessage("", id="a", tool_calls=[
        {"name": RECALL_TOOL_NAME, "args": {"tool_call_id": "x"}, "id": "rc"}]),
        ToolMessage(LONG[:8_000], tool_call_id="rc", name=RECALL_TOOL_NAME, id="t")]
    result = compact_offloaded(messages, pol, OffloadTarget(store, "t"))
    assert result.messages is messages and not result.actions


def test_compact_alone_refuses_an_offload_policy_and_plans_with_offload_true(backend: Any) -> None:
    store = backend[0]
    with pytest.raises(ValueError, match="no I/O"):
        compact(history([LONG, LONG]), policy(store))
    result = compact(history([LONG, LONG]), policy(store), offload=True)
    assert {r.key for r in result.offloads} >= {"call0"} and store.search(("lc_compaction",)) == []


def test_policy_validates_offload_settings() -> None:
    with pytest.raises(ValueError, match="offload:"):
        CompactionPolicy(max_input_tokens=1000, offload="yes")
    with pytest.raises(ValueError, match="offload_above"):
        CompactionPolicy(max_input_tokens=1000, offload=True, offload_above=0)
    assert CompactionPolicy(max_input_tokens=1000, offload=False).offload is None
    with pytest.raises(ValueError, match="thread id"):
        offload_target(policy(InMemoryStore()), config={"configurable": {}})
    with pytest.raises(ValueError, match="store"):
        offload_target(policy(True), config={"configurable": {"thread_id": "x"}})


def test_async_twin_offloads_and_recalls(backend: Any) -> None:
    async def main() -> None:
        store = backend[0]
        result = await acompact_offloaded(history([BLOCKS, LONG]), policy(store), OffloadTarget(store, "t"))
        assert result.offload["written"] >= 1
        graph = recall_graph(store)
        call = {"name": RECALL_TOOL_NAME, "args": {"tool_call_id": "call0"}, "id": "rc"}
        out = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]},
                                  {"configurable": {"thread_id": "t"}})
        assert json.loads(out["messages"][-1].content) == BLOCKS

    asyncio.run(main())


def reused_turn(i: int, content: Any) -> list:
    """Turn i of a server that numbers the calls of every turn from "call_0" (several OpenAI-compatible ones do)."""
    return [HumanMessage(f"question {i}", id=f"h{i}"),
            AIMessage("", id=f"a{i}", tool_calls=[{"name": "get_order", "args": {"n": i}, "id": "call_0"}]),
            ToolMessage(content, tool_call_id="call_0", name="get_order", id=f"t{i}"),
            AIMessage(f"answer {i}", id=f"r{i}")]


def fillers(n: int = 6) -> list:
    return [m for j in range(n) for m in (HumanMessage(f"small question {j}", id=f"hs{j}"),
                                          AIMessage(f"small answer {j}", id=f"rs{j}"))]


def handle_in(message: Any) -> str:
    """The handle a note, preview or cut names, as the model reads it."""
    start = message.content.index(f"{RECALL_TOOL_NAME}(tool_call_id=") + len(RECALL_TOOL_NAME) + len("(tool_call_id=")
    return json.JSONDecoder().raw_decode(message.content, start)[0]


def test_a_reused_tool_call_id_gets_its_own_handle_and_both_are_recalled(backend: Any) -> None:
    store = backend[0]
    target, graph = OffloadTarget(store, "r"), recall_graph(store)
    first = compact_offloaded([SystemMessage("s", id="sys"), *reused_turn(0, LONG), *fillers()], policy(store),
                              target)
    note0 = {m.id: m for m in first.messages}["t0"]
    assert is_truncated(note0) and handle_in(note0) == "call_0"
    # later, turn 0 has left the history (as a rewrite leaves it once its exchange is dropped); turn 1 reuses call_0
    second = compact_offloaded([SystemMessage("s", id="sys"), *reused_turn(1, UNICODE * 20), *fillers()],
                               policy(store), target)
    note1 = {m.id: m for m in second.messages}["t1"]
    assert is_truncated(note1) and handle_in(note1) == "call_0@t1" and not second.offload["failed"]
    assert "call_0@t1" in second.offload["written_keys"]
    assert recall_all(graph, "r", handle_in(note0)) == LONG
    assert recall_all(graph, "r", handle_in(note1)) == recall_text(UNICODE * 20)
    assert load_offloaded(store, "r", "call_0@t1").id == "t1"


def test_reused_tool_call_ids_in_one_history_are_keyed_apart_and_both_recalled(backend: Any) -> None:
    store = backend[0]
    messages = [SystemMessage("s", id="sys"), *reused_turn(0, LONG), *reused_turn(1, BLOCKS), HumanMessage("q")]
    keys = OffloadKeys(messages)
    assert [keys.key(m) for m in messages if m.type == "tool"] == ["call_0", "call_0@t1"]
    records = plan_offloads(messages, [], [messages[3], messages[7]], keys)  # both results removed in one call
    assert [r.key for r in records] == ["call_0", "call_0@t1"], "one record per result, none written over another"
    assert write_offloads(records, OffloadTarget(store, "d"))["written"] == 2
    graph = recall_graph(store)
    assert recall_all(graph, "d", "call_0") == LONG
    assert json.loads(recall_all(graph, "d", "call_0@t1")) == BLOCKS


def test_a_cut_names_the_recall_tool_when_the_original_is_offloaded(backend: Any) -> None:
    store = backend[0]
    graph = recall_graph(store)
    # a tool result alone over the budget (the latest one: never truncated) and a user message alone over it
    for thread, messages, key in (
            ("cut-tool", [SystemMessage("s", id="sys"), *history([LONG], n_filler=0)[1:4]], "call0"),
            ("cut-user", [SystemMessage("s", id="sys"), HumanMessage(UNICODE * 40, id="paste")], "paste")):
        plain = compact(messages, CompactionPolicy(max_input_tokens=4_000))
        result = compact_offloaded(messages, policy(store), OffloadTarget(store, thread))
        assert [a.kind for a in result.actions][-1] == "shortened" == [a.kind for a in plain.actions][-1]
        cut, plain_cut = result.messages[-1], plain.messages[-1]
        assert RECALL_TOOL_NAME not in recall_text(plain_cut.content), "without offload, no recall is promised"
        assert handle_in(cut) == key and result.fits and not result.offload["failed"]
        assert is_offloaded(cut) and recall_all(graph, thread, key) == recall_text(messages[-1].content)
