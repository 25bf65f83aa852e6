"""structure.py: steps, exchanges, the invariant check and repair, on hand-made histories."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage

from lc_compaction.markers import make_summary_message
from lc_compaction.structure import (
    MISSING_RESULT_TEXT,
    check_invariants,
    ensure_ids,
    open_tool_block_start,
    repair_history,
    split_exchanges,
    split_steps,
    tool_block_end,
)
from tests.builders import ai_call as call  # an AIMessage calling tool f once
from tests.builders import tool_result as result  # its ToolMessage, text "r"


def test_steps_end_after_tool_blocks_and_before_requests():
    msgs = [SystemMessage("s", id="s"), HumanMessage("q", id="h1"), AIMessage("thinking aloud", id="x"),
            call("c1", "a1"), result("c1", "t1"), call("c2", "a2"), result("c2", "t2"), AIMessage("done", id="d"),
            make_summary_message("old", message_id="sum"), HumanMessage("q2", id="h2")]
    steps = split_steps(msgs)
    assert [(s.start, s.end, s.kind) for s in steps] == [
        (0, 1, "system"), (1, 2, "request"), (2, 5, "assistant"), (5, 7, "assistant"), (7, 8, "assistant"),
        (8, 9, "summary"), (9, 10, "request")]
    exchanges = split_exchanges(steps)
    assert [e.request for e in exchanges] == [None, 1, 9]
    assert exchanges[1].steps[-1].kind == "summary"  # a summary is not a request: it stays in its exchange


def test_valid_parallel_block_passes():
    a = AIMessage("", id="a",
                  tool_calls=[{"name": "f", "args": {}, "id": f"c{i}", "type": "tool_call"} for i in range(3)])
    msgs = [HumanMessage("q", id="h"), a, result("c2", "t2"), result("c0", "t0"), result("c1", "t1")]
    assert check_invariants(msgs) == []


def test_each_violation_names_index_and_tool_call_id():
    msgs = [HumanMessage("q", id="h"), call("c1", "a1"), HumanMessage("interrupt", id="h2"), result("c1", "t1"),
            result("zz", "t9"), SystemMessage("late", id="s"), RemoveMessage(id="h")]
    found = {(v.kind, v.index, v.tool_call_id) for v in check_invariants(msgs)}
    assert ("dangling_tool_call", 1, "c1") in found
    assert ("tool_result_not_adjacent", 3, "c1") in found
    assert ("orphan_tool_result", 4, "zz") in found
    assert ("system_not_at_start", 5, None) in found
    assert ("remove_message", 6, None) in found


def test_first_non_system_must_be_human():
    assert [v.kind for v in check_invariants([SystemMessage("s"), AIMessage("hi")])] == ["first_message_not_human"]


def test_repair_is_lossless_and_reported():
    msgs = [AIMessage("Hello!", id="g"), HumanMessage("q", id="h"), call("c1", "a1"), AIMessage("x", id="x"),
            result("c1", "t1"), result("c1", "dup"), result("nope", "orph"), call("c2", "a2")]
    fixed, repairs = repair_history(msgs)
    assert check_invariants(fixed) == []
    kinds = {r.kind for r in repairs}
    assert {"conversation_start_added", "tool_result_moved", "duplicate_tool_result_removed",
            "orphan_tool_result_removed", "missing_tool_result_added"} <= kinds
    ids = [m.id for m in fixed]
    assert ids.index("t1") == ids.index("a1") + 1  # moved next to its call
    assert "g" in ids and "x" in ids  # nothing of value dropped
    added = next(m for m in fixed if isinstance(m, ToolMessage) and m.tool_call_id == "c2")
    assert added.content == MISSING_RESULT_TEXT and added.status == "error"


def test_ensure_ids_fills_missing_and_duplicate_ids_only():
    a, b, c = HumanMessage("1", id="x"), AIMessage("2"), HumanMessage("3", id="x")
    out = ensure_ids([a, b, c])
    assert out[0] is a and out[1].id and out[2].id not in ("x", out[1].id)


def test_a_tool_call_id_is_unique_per_message_not_per_history():
    """Reused in another AIMessage: valid (the wire pairs by position). Twice in one AIMessage: named as such."""
    msgs = [HumanMessage("q", id="h"), call("c1", "a1"), result("c1", "t1"), call("c1", "a2"), result("c1", "t2")]
    assert check_invariants(msgs) == []
    twice = AIMessage("", id="a3", tool_calls=[{"name": "f", "args": {}, "id": "c1", "type": "tool_call"}] * 2)
    found = check_invariants([*msgs, twice, result("c1", "t3"), result("c1", "t4")])
    assert ("duplicate_tool_call_id", 5, "c1") in [(v.kind, v.index, v.tool_call_id) for v in found]
    duplicate = next(str(v) for v in found if v.kind == "duplicate_tool_call_id")
    assert "used by two tool calls of this message" in duplicate


def test_message_kinds_follow_the_class_hierarchy():
    """The per-class kind cache classifies subclasses (chunks, custom classes) like their base class."""
    from langchain_core.messages import AIMessageChunk, ChatMessage, FunctionMessage

    from lc_compaction._kinds import AI, HUMAN, OTHER, REMOVE, SYSTEM, TOOL, kind

    class TicketMessage(HumanMessage):
        pass

    assert kind(AIMessageChunk(content="x")) == AI and kind(AIMessage("x")) == AI
    assert kind(TicketMessage("help")) == HUMAN and kind(HumanMessage("h")) == HUMAN
    assert kind(SystemMessage("s")) == SYSTEM and kind(ToolMessage("r", tool_call_id="c")) == TOOL
    assert kind(RemoveMessage(id="x")) == REMOVE
    assert kind(ChatMessage(content="c", role="critic")) == OTHER
    assert kind(FunctionMessage(content="f", name="fn")) == OTHER
    # a chunk with tool calls pairs with its results like an AIMessage
    chunk = AIMessageChunk(content="", id="a", tool_calls=[{"name": "t", "args": {}, "id": "c1", "type": "tool_call"}])
    history = [TicketMessage("q", id="h"), chunk, ToolMessage("r", tool_call_id="c1", id="t")]
    assert check_invariants(history) == []
    assert [s.kind for s in split_steps(history)] == ["request", "assistant"]


def test_tool_block_end_and_an_open_block_at_the_end():
    two = AIMessage("", id="a",
                    tool_calls=[{"name": "f", "args": {}, "id": c, "type": "tool_call"} for c in ("c1", "c2")])
    head = [HumanMessage("q", id="h")]
    assert tool_block_end(head + [two, result("c1", "t1"), result("c2", "t2")], 1) == 4
    assert tool_block_end(head + [two, result("c1", "t1"), HumanMessage("q2", id="h2")], 1) == 3
    assert tool_block_end(head + [AIMessage("plain", id="p")], 1) == 2  # no call: the message alone
    # open: the calls of the last AIMessage are answered in part, or not yet at all
    assert open_tool_block_start(head + [two]) == 1
    assert open_tool_block_start(head + [two, result("c1", "t1")]) == 1
    # not open: every call answered, no call at all, or a result that answers none of the calls
    assert open_tool_block_start(head + [two, result("c1", "t1"), result("c2", "t2")]) == 4
    assert open_tool_block_start(head + [AIMessage("plain", id="p")]) == 2
    assert open_tool_block_start(head + [two, result("other", "t9")]) == 3
    assert open_tool_block_start([result("c1", "t1")]) == 1
