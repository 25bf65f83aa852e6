"""Offload and recall through the front doors, in real agents with a scripted model.

- `create_agent(..., store=InMemoryStore(), middleware=[CompactionMiddleware(offload=True)])`: the middleware
  registers `recall_tool_result`; a tool result truncated at one model call is recalled by the model at a later
  call through the tool, slice by slice, byte-identical; every model input (the recall's answers included) fits
  the window; a result over `offload_above` is offloaded on arrival (the model sees the preview).
- `create_react_agent(..., pre_model_hook=CompactionNode(offload=True), tools=[..., recall_tool_result])` and a
  checkpointer: the same round trip through the LangGraph node; events carry the offload report.
- Without a thread id, or without a store, the run stops with a clear error (nothing is silently lost).

The two runs are made on InMemoryStore + InMemorySaver and on PostgresStore + PostgresSaver (a real server).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from lc_compaction.integrations import CompactionMiddleware, CompactionNode, recall_tool_result
from lc_compaction.integrations.recall import DEFAULT_RECALL_CHARS, load_offloaded
from lc_compaction.markers import is_truncated
from lc_compaction.offload import RECALL_TOOL_NAME
from tests.agent_replay import EventLog, ReplayChatModel, wire_tokens

WINDOW = 8_000


def report_text(n: int, chars: int) -> str:
    """A deterministic report of about `chars` characters, non-ASCII included."""
    lines, i = [], 0
    while sum(map(len, lines)) < chars:
        lines.append(f"report {n} row {i}: Zürich→東京 order A-{n}{i:04d} amount {i * 37 % 1000}.{i % 100:02d} EUR\n")
        i += 1
    return "".join(lines)[:chars]


SIZES = {1: 12_000, 2: 7_000, 3: 7_000, 4: 7_000, 5: 30_000}


@tool
def get_report(n: int) -> str:
    """Fetch report number n."""
    return report_text(n, SIZES[n])


def call(name: str, args: dict, cid: str) -> AIMessage:
    return AIMessage("", id=f"ai-{cid}", tool_calls=[{"name": name, "args": args, "id": cid}])


def script() -> list[AIMessage]:
    """Reports 1 to 4 (the history grows over the trigger: the old ones are truncated), report 5 (over
    offload_above: offloaded on arrival), then two recalls of report 1 (12,000 characters: two slices), an answer."""
    return [call("get_report", {"n": n}, f"c{n}") for n in (1, 2, 3, 4, 5)] + [
        call(RECALL_TOOL_NAME, {"tool_call_id": "c1"}, "r1"),
        call(RECALL_TOOL_NAME, {"tool_call_id": "c1", "offset": DEFAULT_RECALL_CHARS}, "r2"),
        AIMessage("Report 1 recalled.", id="final")]


def fits(received: list, kwargs: dict) -> None:
    used = wire_tokens(received, kwargs.get("tools"))
    assert used <= WINDOW, f"a model input of {used} tokens, over the window of {WINDOW}"


def by_call(messages: list, cid: str) -> ToolMessage:
    return next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == cid)


def check_round_trip(model: ReplayChatModel, store: Any, thread: str) -> None:
    """The call before the first recall saw report 1 truncated with the handle; the two recall answers the model
    received are report 1 byte for byte; report 5 was a preview when it arrived."""
    recall_at = next(i for i, msgs in enumerate(model.calls) if by_call_or_none(msgs, "r1"))
    before = model.calls[recall_at - 1]
    note = by_call(before, "c1")
    assert is_truncated(note) and f'{RECALL_TOOL_NAME}(tool_call_id="c1")' in note.content
    assert report_text(1, 2_000)[1_000:1_500] not in note.content
    final_input = model.calls[-1]
    first, second = by_call(final_input, "r1"), by_call(final_input, "r2")
    original = report_text(1, SIZES[1])
    assert first.content.startswith(original[:DEFAULT_RECALL_CHARS])
    assert first.content[:DEFAULT_RECALL_CHARS] + second.content == original
    preview = by_call(model.calls[5], "c5")
    assert preview.content.startswith(report_text(5, 1_500)) and "offloaded this result" in preview.content
    assert load_offloaded(store, thread, "c5").content == report_text(5, SIZES[5])


def by_call_or_none(messages: list, cid: str) -> ToolMessage | None:
    return next((m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == cid), None)


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_truncates_then_recalls_through_the_tool(backend: Any, mode: str) -> None:
    store, checkpointer = backend
    model = ReplayChatModel(messages=iter(script()), profile={"max_input_tokens": WINDOW},
                            on_call=lambda i, received, kwargs: fits(received, kwargs))
    middleware = CompactionMiddleware(offload=True, mode=mode)
    assert [t.name for t in middleware.tools] == [RECALL_TOOL_NAME]
    agent = create_agent(model, [get_report], middleware=[middleware], store=store, checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "alice"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "Get reports 1 to 5, then read report 1 again."}]},
                       config)
    assert out["messages"][-1].content == "Report 1 recalled."
    assert RECALL_TOOL_NAME in [t["function"]["name"] for t in model.call_kwargs[0]["tools"]]
    check_round_trip(model, store, "alice")
    stored = agent.get_state(config).values["messages"]
    kept = "".join(str(m.content) for m in stored if getattr(m, "tool_call_id", "")[:1] == "c")
    if mode == "rewrite":  # the stored history holds no original that was offloaded: the notes and previews only
        assert report_text(1, SIZES[1])[3_000:3_200] not in kept
    else:  # view mode stores everything, and only the model input is compacted
        assert report_text(1, SIZES[1]) in kept


def test_create_react_agent_with_the_node_recalls_and_reports(backend: Any) -> None:
    from langgraph.prebuilt import create_react_agent

    store, checkpointer = backend
    model = ReplayChatModel(messages=iter(script()), profile={"max_input_tokens": WINDOW},
                            on_call=lambda i, received, kwargs: fits(received, kwargs))
    tools = [get_report, recall_tool_result]
    node = CompactionNode(model=model, tools=tools, offload=True)
    agent = create_react_agent(model, tools, pre_model_hook=node, store=store, checkpointer=checkpointer)
    log = EventLog()
    agent.invoke({"messages": [{"role": "user", "content": "Get reports 1 to 5, then read report 1 again."}]},
                 {"configurable": {"thread_id": "bob"}, "callbacks": [log]})
    check_round_trip(model, store, "bob")
    written = [e["offload"] for e in log.events if "offload" in e]
    assert written and sum(w["written"] for w in written) >= 5 and not any(w["failed"] for w in written)
    assert load_offloaded(store, "alice", "c1") is None  # nothing in another thread


def test_offload_without_a_thread_id_or_a_store_is_a_clear_error() -> None:
    def agent(store: Any) -> Any:
        model = ReplayChatModel(messages=iter(script()), profile={"max_input_tokens": WINDOW})
        return create_agent(model, [get_report], middleware=[CompactionMiddleware(offload=True)], store=store)

    with pytest.raises(ValueError, match="thread id"):
        agent(InMemoryStore()).invoke({"messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(ValueError, match="store"):
        agent(None).invoke({"messages": [{"role": "user", "content": "hi"}]}, {"configurable": {"thread_id": "x"}})
