"""Offload on keeps what offload off keeps, and reports no false failure: compaction's own texts are never
originals to store (issue 20, class 12).

A drop that extends the drop marker removes the old marker (compaction's text, stored with the id of the first
message it replaced, `writes.adopt_ids`). Before the fix offload tried to store it under that id, found the
original there, logged "Offload failed ... already stored under this key" on most turns of a healthy chat, and
pinned the marker, which was then never extended again. Now a summary, a drop marker or a repair's placeholder is
never written (`offload.is_compaction_text`) nor named recallable.

Through `create_agent` and a hand-built graph with a real `InMemoryStore`, rewrite and view mode, a chat long
enough to drop exchanges at several turns: no WARNING is logged, no compaction text is in the store as an original,
every model input up to the first drop is the one the same agent sends with offload off (the same tools on both),
and the marker is extended turn after turn on both. (Offload adds one line to the marker, `markers.SEARCH_HINT`,
issue 22: its tokens may make a later drop take one exchange more than with offload off, so the inputs after the
first drop are compared by their markers' growth, not message for message.)
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore

from lc_compaction import CompactionPolicy, DropOldExchanges, compact, is_dropped_marker
from lc_compaction.integrations import (
    CompactionMiddleware,
    CompactionNode,
    recall_message,
    recall_tool_result,
    search_compacted_history,
)
from lc_compaction.markers import SEARCH_HINT, make_dropped_marker
from lc_compaction.offload import NAMESPACE_ROOT, OffloadKeys, is_compaction_text, record_message
from lc_compaction.structure import is_missing_result, repair_history
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call

TURNS = 24
WINDOW = 1_500


def _replies() -> list[AIMessage]:
    return [AIMessage(f"Order ORD-{k:05d}X shipped on day {k}; " + "details " * 50, id=f"reply{k}")
            for k in range(TURNS)]


def _request(k: int) -> HumanMessage:
    return HumanMessage(f"question about invoice INV-{k:04d}Z " + "please " * 100, id=f"h{k}")


def _agent(door: str, mode: str, offload: bool, store: InMemoryStore) -> tuple[Any, ReplayChatModel]:
    model = ReplayChatModel(messages=iter(_replies()))
    settings: dict[str, Any] = dict(max_input_tokens=WINDOW, strategies=[DropOldExchanges()], mode=mode)
    if door == "create_agent":
        # the same tool schemas on both: with offload on the middleware registers the recall tool itself
        tools = [] if offload else [recall_tool_result, recall_message, search_compacted_history]
        agent = create_agent(model, tools, middleware=[CompactionMiddleware(offload=True if offload else None,
                                                                            **settings)],
                             checkpointer=InMemorySaver(), store=store)
        return agent, model
    node = CompactionNode(offload=True if offload else None, **settings)
    key = "llm_input_messages" if mode == "view" else "messages"
    builder = StateGraph(MessagesState)
    builder.add_node("compact", node)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state[key])]},
                     input_schema=_ViewState if mode == "view" else MessagesState)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    return builder.compile(checkpointer=InMemorySaver(), store=store), model


class _ViewState(MessagesState):
    llm_input_messages: list[BaseMessage]


def _run(agent: Any, model: ReplayChatModel) -> list[str]:
    """Every turn; returns the drop marker's text in each model input that holds one."""
    config = {"configurable": {"thread_id": "chat"}}
    markers = []
    for k in range(TURNS):
        agent.invoke({"messages": [_request(k)]}, config)
        last = agent.get_state(config).values["compaction"]["last"]
        assert not (last.get("offload") or {}).get("failed"), last["offload"]
        markers += [m.text for m in model.calls[-1] if is_dropped_marker(m)]
    return markers


@pytest.mark.parametrize("mode", ["rewrite", "view"])
@pytest.mark.parametrize("door", ["create_agent", "stategraph"])
def test_offload_on_keeps_extending_the_marker_as_offload_off_does(door: str, mode: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    store = InMemoryStore()
    on, on_model = _agent(door, mode, True, store)
    markers_on = _run(on, on_model)
    off, off_model = _agent(door, mode, False, InMemoryStore())
    markers_off = _run(off, off_model)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    dump = lambda calls: [[message_to_dict(m) for m in call] for call in calls]  # noqa: E731
    first = next(i for i, call in enumerate(off_model.calls) if any(is_dropped_marker(m) for m in call))
    hinted = [[_without_hint(m) for m in call] for call in on_model.calls]
    assert dump(hinted[:first + 1]) == dump(off_model.calls[:first + 1]), "offload on sends what offload off sends"
    assert all(f"\n{SEARCH_HINT}\n" in marker for marker in markers_on), "offload on: the marker names the search"
    assert all(SEARCH_HINT not in marker for marker in markers_off)
    for markers in (markers_on, markers_off):
        distinct = list(dict.fromkeys(markers))
        assert len(distinct) >= 3, "the marker is extended at each later drop"
        assert all(b.startswith(a.split("\n")[0]) and len(b) > len(a) for a, b in zip(distinct, distinct[1:]))
    records = [item for ns in store.list_namespaces(prefix=NAMESPACE_ROOT) if ns[-1] != "compaction"
               for item in store.search(ns, limit=1_000)]
    assert records, "the dropped originals are stored"
    assert not any(is_compaction_text(record_message(item.value)) for item in records)


def _without_hint(message: BaseMessage) -> BaseMessage:
    """A drop marker without the line offload adds (`markers.SEARCH_HINT`); any other message as it is."""
    if not (is_dropped_marker(message) and f"\n{SEARCH_HINT}" in message.text):
        return message
    return message.model_copy(update={"content": message.text.replace(f"\n{SEARCH_HINT}", "")})


# ------------------------------------------------------------------------------------------- the core rule


def test_compaction_texts_are_never_offloaded_nor_named_recallable() -> None:
    """A history holding compaction's texts (a summary, a drop marker that took the id of a message it replaced,
    a repair's placeholder) compacted again with offload: they leave the history (the marker may instead be
    rewritten under its own id, extended by the new drop), none of them is an original to write, and none is named
    recallable (a cut of one names no handle)."""
    summary = HumanMessage("Here is a summary of the conversation to date: " + "s " * 100, id="h0",
                           additional_kwargs={"lc_source": "summarization"})
    marker = make_dropped_marker(message_id="a1", facts="identifiers: INV-0001Z")
    broken = [HumanMessage("look it up " + "w " * 100, id="h2"), ai_call("cx", "a2"), HumanMessage("next", id="h3")]
    repaired, _ = repair_history(broken)
    placeholder = next(m for m in repaired if is_missing_result(m))
    history = [summary, HumanMessage("first " + "f " * 50, id="h1"), AIMessage("ok", id="a0"), marker, *repaired,
               *[m for k in range(4, 10) for m in (HumanMessage(f"more {k} " + "z " * 120, id=f"h{k}"),
                                                    AIMessage(f"answer {k} " + "y " * 120, id=f"a{k}"))]]
    assert all(is_compaction_text(m) for m in (summary, marker, placeholder))
    policy = CompactionPolicy(max_input_tokens=1_200, strategies=[DropOldExchanges()], offload=InMemoryStore())
    result = compact(history, policy, offload=True)
    removed, kept = {m.id for m in result.removed}, {m.id: m for m in result.messages}
    assert placeholder.id in removed, "the placeholder left the history"
    # the old marker left: removed, or (since d2983a3) rewritten under its own id, extended by the new drop
    assert "a1" in removed or (is_dropped_marker(kept["a1"]) and kept["a1"].text != marker.text), \
        "the old marker left the history"
    written = [r.message for r in result.offloads]
    assert written and not any(is_compaction_text(m) for m in written)
    assert {"h2", "a2"} <= {m.id for m in written}, "what was the user's and the model's is written"
    keys = OffloadKeys(history)
    assert not any(keys.recallable(m) for m in (summary, marker, placeholder))
    assert keys.recallable(history[4])
