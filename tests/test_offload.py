"""Offload and recall (lc_compaction.offload, integrations/offload.py, integrations/recall.py), each test on
InMemoryStore and on PostgresStore (a real server: tests/conftest.py, scripts/postgres).

- offload then recall, through the real tool in a compiled graph (ToolNode injects the runtime), gives the
  original back byte-identical: text, content blocks, a very long result, non-ASCII (NUL, emoji, CJK, a lone
  surrogate); the slices are in characters and never longer than the tool's cap;
- a recall from another thread is refused ("not found"), the thread namespace is per thread (a "." in the id too);
- a failed write loses nothing (the store raising, or another content under the same key): the message stays as
  it was, the failure is in the result and in the event;
- no double write: the next call finds the record and writes nothing;
- offloaded content is counted nowhere in the model input;
- a huge result is offloaded on arrival (under the trigger): head and tail preview plus the handle.
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
from lc_compaction.integrations.offload import OffloadTarget, acompact_offloaded, compact_offloaded, offload_target
from lc_compaction.integrations.recall import DEFAULT_RECALL_CHARS, load_offloaded, recall_tool, recall_tool_result
from lc_compaction.markers import is_truncated
from lc_compaction.offload import RECALL_TOOL_NAME, offload_namespace, recall_text

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
    assert capped.artifact["end"] == 100 and capped.content.startswith(text[:100])
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
    store = backend[0]
    store.put(offload_namespace("t"), "call0", {"v": 1, "message": "{}", "sha256": "different"})
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
