"""Offload and recall through the front doors, in real agents with a scripted model.

- `create_agent(..., store=InMemoryStore(), middleware=[CompactionMiddleware(offload=True)])`: the middleware
  registers `recall_tool_result`; a tool result truncated at one model call is recalled by the model at a later
  call through the tool, with the handle its note names, slice by slice from the offsets the answers name,
  byte-identical; every model input (the recall's answers included) fits the window; a result over
  `offload_above` is offloaded on arrival (the model sees the preview).
- In a 4,000-token window with a 1,650-token system prompt: the result is cut by the last resort, whose marker
  names the handle; each recall answer is sized to the window (smaller than the default slice, which would not
  fit), reaches the model whole, and the slices make the original.
- `create_react_agent(..., pre_model_hook=CompactionNode(offload=True), tools=[..., recall_tool_result])` and a
  checkpointer: the same round trip through the LangGraph node; events carry the offload report.
- Without a thread id, or without a store, the run stops with a clear error (nothing is silently lost).

The two runs are made on InMemoryStore + InMemorySaver and on PostgresStore + PostgresSaver (a real server).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from lc_compaction.integrations import CompactionMiddleware, CompactionNode, recall_tool_result
from lc_compaction.integrations.recall import DEFAULT_RECALL_CHARS, load_offloaded
from lc_compaction.markers import is_truncated
from lc_compaction.offload import RECALL_TOOL_NAME, offload_namespace
from lc_compaction.progress import note_lines
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


HANDLE = re.compile(r'recall_tool_result\(tool_call_id=("(?:[^"\\]|\\.)*")\)')
"""The handle a note names (a JSON string), as the model reads it."""
MORE = re.compile(r"call again with offset=(\d+) for more\]$")
"""The line after a slice that is not the last: where the next slice starts."""


def script(calls: list, answers: list[ToolMessage], reports: tuple[int, ...] = (1, 2, 3, 4, 5)
           ) -> Iterator[AIMessage]:
    """A model that reads what it receives (`calls`: the model's inputs so far): reports 1 to 4 (the history grows
    over the trigger: the old ones are truncated) and 5 (over offload_above: offloaded on arrival), then recalls
    report 1 with the handle its note names, slice after slice, each from the offset the previous answer names
    (`answers`: each recall's answer as the model received it), and answers."""
    for n in reports:
        yield call("get_report", {"n": n}, f"c{n}")  # then the note, preview or cut of report 1 names its handle
    handle = json.loads(HANDLE.search(report_1_mention(calls[-1])).group(1))
    args: dict = {"tool_call_id": handle}
    for k in range(1, 50):
        yield call(RECALL_TOOL_NAME, args, f"r{k}")
        answers.append(by_call(calls[-1], f"r{k}"))
        more = MORE.search(answers[-1].content)
        if more is None:
            break
        args = {"tool_call_id": handle, "offset": int(more.group(1))}
    yield AIMessage("Report 1 recalled.", id="final")


def scripted(window: int, answers: list[ToolMessage], reports: tuple[int, ...] = (1, 2, 3, 4, 5)
             ) -> ReplayChatModel:
    """The scripted model (`script`) with a `window`-token profile; every input it receives must fit the window."""
    calls: list = []
    model = ReplayChatModel(messages=iter(()), profile={"max_input_tokens": window},
                            on_call=lambda i, received, kwargs: fits(received, kwargs, window))
    model.calls = calls
    model.messages = script(calls, answers, reports)
    return model


def fits(received: list, kwargs: dict, window: int = WINDOW) -> None:
    used = wire_tokens(received, kwargs.get("tools"))
    assert used <= window, f"a model input of {used} tokens, over the window of {window}"


def report_1_mention(messages: list) -> str:
    """Where the model reads report 1's handle: its truncation note, or, once the running loop folded its step,
    the progress note's line for its call (`progress.call_line` names the recall call)."""
    result = by_call_or_none(messages, "c1")
    if result is not None:
        return result.content
    return next(line for m in messages if isinstance(m, AIMessage) for line in note_lines(m)
                if line.startswith('- get_report({"n": 1})'))


def by_call(messages: list, cid: str) -> ToolMessage:
    return next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == cid)


def check_round_trip(model: ReplayChatModel, answers: list[ToolMessage], store: Any, thread: str) -> None:
    """The call before the first recall saw report 1 truncated with the handle; the recall answers the model
    received are report 1 byte for byte, slice after slice, each slice no longer than the record allows; report
    5 was a preview when it arrived."""
    recall_at = next(i for i, msgs in enumerate(model.calls) if by_call_or_none(msgs, "r1"))
    note = report_1_mention(model.calls[recall_at - 1])
    result = by_call_or_none(model.calls[recall_at - 1], "c1")
    assert result is None or is_truncated(result)  # truncated, or folded into the progress note
    assert f'{RECALL_TOOL_NAME}(tool_call_id="c1")' in note
    assert report_text(1, 2_000)[1_000:1_500] not in note
    original = report_text(1, SIZES[1])
    cap = store.get(offload_namespace(thread), "c1").value["recall_chars"]
    slices = []
    for answer in answers:
        art = answer.artifact
        part = answer.content[: art["end"] - art["offset"]]
        assert 0 < len(part) <= cap and len(part.encode("utf-8")) <= cap
        assert part == original[art["offset"]:art["end"]]
        slices.append(part)
    assert "".join(slices) == original and len(answers) >= 2
    preview = by_call(model.calls[5], "c5")
    assert preview.content.startswith(report_text(5, 1_500)) and "offloaded this result" in preview.content
    assert load_offloaded(store, thread, "c5").content == report_text(5, SIZES[5])


def by_call_or_none(messages: list, cid: str) -> ToolMessage | None:
    return next((m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == cid), None)


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_create_agent_truncates_then_recalls_through_the_tool(backend: Any, mode: str) -> None:
    store, checkpointer = backend
    answers: list[ToolMessage] = []
    model = scripted(WINDOW, answers)
    middleware = CompactionMiddleware(offload=True, mode=mode)
    assert [t.name for t in middleware.tools] == [RECALL_TOOL_NAME, "recall_message", "search_compacted_history"]
    agent = create_agent(model, [get_report], middleware=[middleware], store=store, checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "alice"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "Get reports 1 to 5, then read report 1 again."}]},
                       config)
    assert out["messages"][-1].content == "Report 1 recalled."
    assert RECALL_TOOL_NAME in [t["function"]["name"] for t in model.call_kwargs[0]["tools"]]
    check_round_trip(model, answers, store, "alice")
    stored = agent.get_state(config).values["messages"]
    kept = "".join(str(m.content) for m in stored if getattr(m, "tool_call_id", "")[:1] == "c")
    if mode == "rewrite":  # the stored history holds no original that was offloaded: the notes and previews only
        assert report_text(1, SIZES[1])[3_000:3_200] not in kept
    else:  # view mode stores everything, and only the model input is compacted
        assert report_text(1, SIZES[1]) in kept


def test_create_react_agent_with_the_node_recalls_and_reports(backend: Any) -> None:
    from langgraph.prebuilt import create_react_agent

    store, checkpointer = backend
    answers: list[ToolMessage] = []
    model = scripted(WINDOW, answers)
    tools = [get_report, recall_tool_result]
    node = CompactionNode(model=model, tools=tools, offload=True)
    agent = create_react_agent(model, tools, pre_model_hook=node, store=store, checkpointer=checkpointer)
    log = EventLog()
    agent.invoke({"messages": [{"role": "user", "content": "Get reports 1 to 5, then read report 1 again."}]},
                 {"configurable": {"thread_id": "bob"}, "callbacks": [log]})
    check_round_trip(model, answers, store, "bob")
    written = [e["offload"] for e in log.events if "offload" in e]
    assert written and sum(w["written"] for w in written) >= 5 and not any(w["failed"] for w in written)
    assert load_offloaded(store, "alice", "c1") is None  # nothing in another thread


SMALL_WINDOW = 4_000
LONG_PROMPT = "".join(f"Rule {i}: confirm the order number A-{i:04d} with the customer before any refund, and never "
                      f"read out more than the last four digits of a card.\n" for i in range(50))
"""A system prompt of about 1,600 tokens: 40% of the small window."""


def test_a_recall_answer_fits_a_small_window_with_a_long_system_prompt(backend: Any) -> None:
    store, checkpointer = backend
    answers: list[ToolMessage] = []
    model = scripted(SMALL_WINDOW, answers, (1,))  # every model input is checked against the 4,000-token window
    agent = create_agent(model, [get_report], system_prompt=LONG_PROMPT, store=store, checkpointer=checkpointer,
                         middleware=[CompactionMiddleware(offload=True)])
    out = agent.invoke({"messages": [{"role": "user", "content": "Get report 1 and read it all."}]},
                       {"configurable": {"thread_id": "carol"}})
    assert out["messages"][-1].content == "Report 1 recalled."
    original = report_text(1, SIZES[1])
    slices = [a.content[: a.artifact["end"] - a.artifact["offset"]] for a in answers]
    assert "".join(slices) == original, "the recalls, slice after slice, are not report 1"
    for answer, part in zip(answers, slices, strict=True):  # each answer reached the model whole, as the tool gave it
        received = next(by_call(c, answer.tool_call_id) for c in model.calls if by_call_or_none(c, answer.tool_call_id))
        assert received.content == answer.content and not is_truncated(received)
        assert part == original[answer.artifact["offset"]:answer.artifact["end"]]
    # the slice followed the window: smaller than the default, and an answer of the default size, beside the
    # system prompt and the tool schemas alone, would not have fit
    cap = store.get(offload_namespace("carol"), "c1").value["recall_chars"]
    assert cap < DEFAULT_RECALL_CHARS and max(map(len, slices)) <= cap
    tools = model.call_kwargs[0]["tools"]
    default_answer = ToolMessage(original[:DEFAULT_RECALL_CHARS], tool_call_id="r1", name=RECALL_TOOL_NAME)
    assert wire_tokens([SystemMessage(LONG_PROMPT), default_answer], tools) > SMALL_WINDOW
    assert wire_tokens([SystemMessage(LONG_PROMPT)]) > 1_500


def test_offload_without_a_thread_id_or_a_store_is_a_clear_error() -> None:
    def agent(store: Any) -> Any:
        model = scripted(WINDOW, [])
        return create_agent(model, [get_report], middleware=[CompactionMiddleware(offload=True)], store=store)

    with pytest.raises(ValueError, match="thread id"):
        agent(InMemoryStore()).invoke({"messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(ValueError, match="store"):
        agent(None).invoke({"messages": [{"role": "user", "content": "hi"}]}, {"configurable": {"thread_id": "x"}})
