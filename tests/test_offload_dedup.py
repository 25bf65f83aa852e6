"""Offload and recall of a repeated tool result that deduplication made a note (lc_compaction.dedup), on
InMemoryStore and on PostgresStore (tests/conftest.py's `backend`).

- A note that leaves the history (truncated, dropped) is offloaded as its original: the content of the earlier
  result it names, which was identical to its own, byte for byte, with its own metadata; never the note's text.
- A recall of a note's own handle, through the real tool in a compiled graph (ToolNode injects the runtime and
  the graph's state), answers from the conversation: one line naming the earlier result's call when that result
  is there whole, or that result's record, slice by slice, when it was cut in place. A handle with neither a
  record nor a note is still "not found".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from lc_compaction import CompactionPolicy, compact
from lc_compaction.dedup import is_deduplicated, note_for
from lc_compaction.integrations.offload import OffloadTarget, compact_offloaded, write_offloads
from lc_compaction.integrations.recall import load_offloaded, recall_tool_result
from lc_compaction.markers import MARK_KEY, is_truncated
from lc_compaction.offload import RECALL_TOOL_NAME, OffloadRecord, plan_offloads, undeduplicated
from lc_compaction.shorten import shorten

DRIVE = "".join(f"file_{i:03}.txt  {i * 37 % 1000} KB  modified 2024-05-{i % 28 + 1:02}\n" for i in range(120))
"""A drive listing (about 5,000 characters) that an agent reads twice."""


def listing_twice(extra_turns: int = 0) -> list:
    """One request whose tool loop lists the drive twice (the same result), then `extra_turns` long exchanges."""
    out: list = [SystemMessage("You are an assistant.", id="sys"), HumanMessage("Tidy my drive.", id="h0"),
                 AIMessage("", id="a0", tool_calls=[{"name": "list_files", "args": {}, "id": "c0"}]),
                 ToolMessage(DRIVE, tool_call_id="c0", name="list_files", id="t0",
                             response_metadata={"tool": "drive-v2"}),
                 AIMessage("", id="a1", tool_calls=[{"name": "list_files", "args": {}, "id": "c1"}]),
                 ToolMessage(DRIVE, tool_call_id="c1", name="list_files", id="t1",
                             response_metadata={"tool": "drive-v2", "attempt": 2}),
                 AIMessage("Your drive holds 120 files.", id="r0")]
    for k in range(extra_turns):
        out += [HumanMessage(f"question {k} " + "words " * 200, id=f"h{k + 1}"),
                AIMessage(f"answer {k} " + "words " * 200, id=f"r{k + 1}")]
    return out


def recall_graph(store: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([recall_tool_result]))
    builder.add_edge(START, "tools")
    return builder.compile(store=store)


def recall(graph: Any, thread: str, conversation: list, tool_call_id: str, *, sync: bool = True,
           **args: Any) -> ToolMessage:
    """The recall tool's answer to a call made after `conversation` (the graph's state holds it)."""
    call = {"name": RECALL_TOOL_NAME, "args": {"tool_call_id": tool_call_id, **args}, "id": "rc-" + tool_call_id}
    state = {"messages": [*conversation, AIMessage("", id="ask", tool_calls=[call])]}
    config = {"configurable": {"thread_id": thread}}
    out = graph.invoke(state, config) if sync else asyncio.run(graph.ainvoke(state, config))
    msg = out["messages"][-1]
    assert isinstance(msg, ToolMessage) and msg.tool_call_id == call["id"]
    return msg


def test_the_repeat_is_a_note_on_arrival() -> None:
    """The setting of the tests below: the second listing becomes a note pointing at the first."""
    result = compact(listing_twice(), CompactionPolicy(max_input_tokens=100_000))
    note = next(m for m in result.messages if m.id == "t1")
    assert not result.triggered and is_deduplicated(note) and "tool call c0" in note.content
    assert note.response_metadata[MARK_KEY]["same_as"] == "t0"


def test_a_note_is_planned_as_its_original_never_as_its_text() -> None:
    original = listing_twice()
    noted = list(compact(original, CompactionPolicy(max_input_tokens=100_000)).messages)
    t0, t1 = noted[3], noted[5]
    assert is_deduplicated(t1)
    records = plan_offloads(noted, [], [t0, t1])  # both results removed by one compaction
    by_key = {r.key: r.message for r in records}
    assert set(by_key) == {"c0", "c1"}
    for key, message in (("c0", original[3]), ("c1", original[5])):
        assert json.dumps(message_to_dict(by_key[key])) == json.dumps(message_to_dict(message)), key
    assert undeduplicated(t0, {m.id: m for m in noted}) is t0, "anything but a note is written as it is"


def test_a_note_whose_earlier_result_was_cut_is_planned_as_it_is() -> None:
    """That result's original is not in the history (only its cut): the note, which names its call, is kept."""
    original = listing_twice()
    cut = shorten(original[3], 1_000)
    note = note_for(original[5], cut)
    messages = [*original[:3], cut, original[4], note, *original[6:]]
    assert undeduplicated(note, {m.id: m for m in messages}) is note
    assert "tool call c0 above, shown there cut" in note.content


def test_a_note_that_leaves_the_history_is_offloaded_and_recalled_with_its_content(backend: Any) -> None:
    store = backend[0]
    target = OffloadTarget(store, "drive")
    policy = CompactionPolicy(max_input_tokens=3_000, offload=store, offload_above=None)
    first = compact_offloaded(listing_twice(), policy, target)  # under the budget: the repeat is noted
    assert not first.triggered and is_deduplicated(next(m for m in first.messages if m.id == "t1"))
    later = listing_twice(extra_turns=6)
    second = compact_offloaded([*first.messages, *later[len(first.messages):]], policy, target)
    assert second.triggered and not second.offload["failed"]
    gone = {m.id for m in second.removed} | {m.id for m in second.messages if is_truncated(m)}
    assert {"t0", "t1"} <= gone
    for key, message in (("c0", later[3]), ("c1", later[5])):
        back = load_offloaded(store, "drive", key)
        assert back is not None and json.dumps(message_to_dict(back)) == json.dumps(message_to_dict(message))
    answer = recall(recall_graph(store), "drive", list(second.messages), "c1")  # the slice this window allows
    end = answer.artifact["end"]
    assert 0 < end and answer.artifact["total_chars"] == len(DRIVE) and answer.content.startswith(DRIVE[:end])
    assert "same_as" not in answer.artifact, "answered from the note's own record"


def test_a_recall_of_a_note_names_the_whole_earlier_result(backend: Any) -> None:
    store = backend[0]
    noted = list(compact(listing_twice(), CompactionPolicy(max_input_tokens=100_000)).messages)
    graph = recall_graph(store)
    for sync in (True, False):
        answer = recall(graph, "names", noted, "c1", sync=sync)
        assert answer.artifact["same_as"] == "c0" and answer.artifact["total_chars"] == len(DRIVE)
        assert "tool call c0" in answer.content and "whole" in answer.content and DRIVE[:50] not in answer.content
    assert "not found" in recall(graph, "names", noted, "c9").content
    assert "not found" in recall(graph, "names", [], "c1").content, "without the note in the state, no record"


def test_a_recall_of_a_note_whose_earlier_result_was_cut_gives_that_result(backend: Any) -> None:
    store = backend[0]
    original = listing_twice()
    cut = shorten(original[3], 1_000)
    assert write_offloads([OffloadRecord(original[3], "shortened", "c0")], OffloadTarget(store, "cut"))["written"]
    conversation = [*original[:3], cut, original[4], note_for(original[5], cut), *original[6:]]
    graph = recall_graph(store)
    for sync in (True, False):
        answer = recall(graph, "cut", conversation, "c1", sync=sync, offset=100, length=300)
        assert answer.artifact["same_as"] == "c0" and answer.artifact["end"] == 400
        assert answer.content.startswith(DRIVE[100:400])
    assert "not found" in recall(graph, "elsewhere", conversation, "c1").content, "per thread"
