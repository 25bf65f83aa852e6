"""Offload and the running request's progress note, in a real `create_agent` with a scripted model.

One request, 30 `read_file` calls whose results (different, about 660 tokens each) do not fit a 3,000-token window
together, `CompactionMiddleware(max_input_tokens=3000, offload=True)`: the loop's oldest steps are folded into the
progress note, whose host (an assistant message) changes at every fold; in rewrite mode the state holds the note,
so the next call takes a note host out again.

- The record of an assistant message that held the note is the message's own original (no note in it), so the
  note growing from one call to the next is never "another content under the same key": no write fails, every
  model input fits the window and holds one note, whose lines name each call once.
- A real conflict (another content already stored under a note host's id) is still refused and reported, keeps
  the stored content, and leaves neither a second note nor an input over the window.

The runs are made on InMemoryStore + InMemorySaver and on PostgresStore + PostgresSaver (the `backend` fixture).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from lc_compaction.integrations import CompactionMiddleware
from lc_compaction.integrations.recall import load_offloaded
from lc_compaction.offload import OffloadRecord, offload_namespace
from lc_compaction.progress import note_lines
from tests.agent_replay import ReplayChatModel, wire_tokens

WINDOW = 3_000
CALLS = 30
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]


def file_text(n: int) -> str:
    r = random.Random(n)
    return f"file {n}: " + " ".join(r.choice(WORDS) + str(r.randint(0, 999)) for _ in range(300))


@tool
def list_files() -> str:
    """List the drive."""
    return "\n".join(f"file_{i:03d}.txt" for i in range(CALLS))


@tool
def read_file(n: int) -> str:
    """Read file n."""
    return file_text(n)


def replies() -> Iterator[AIMessage]:
    for k in range(CALLS):
        yield AIMessage("", id=f"ai{k}", tool_calls=[{"name": "read_file", "args": {"n": k}, "id": f"call_R{k}"}])
    yield AIMessage("all read", id=f"ai{CALLS}")


def run(mode: str, backend: Any, thread: str) -> tuple[ReplayChatModel, dict]:
    store, saver = backend
    model = ReplayChatModel(messages=replies())
    middleware = CompactionMiddleware(max_input_tokens=WINDOW, mode=mode, offload=True)
    agent = create_agent(model, [list_files, read_file], system_prompt="You manage a drive.", checkpointer=saver,
                         store=store, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("read them all", id="h0")]},
                       {"configurable": {"thread_id": thread}, "recursion_limit": 200})
    assert len(model.calls) == CALLS + 1
    return model, out


def check_inputs(model: ReplayChatModel) -> list[str]:
    """Every model input fits the window and holds at most one progress note, naming each call once; the lines of
    the last input's note."""
    last: list[str] = []
    for i, (received, kwargs) in enumerate(zip(model.calls, model.call_kwargs, strict=True)):
        used = wire_tokens(received, kwargs.get("tools"))
        assert used <= WINDOW, f"model call {i}: {used} tokens, over the window of {WINDOW}"
        notes = [note_lines(m) for m in received if note_lines(m)]
        assert len(notes) <= 1, f"model call {i}: {len(notes)} progress notes"
        if notes:
            calls = [line.split(" -> ", 1)[0] for line in notes[0]]
            assert len(calls) == len(set(calls)), f"model call {i}: a call named twice in the note"
            last = notes[0]
    return last


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_growing_progress_note_offloads_without_conflict(mode: str, backend: Any,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lc_compaction.integrations.offload")
    model, _ = run(mode, backend, f"note-{mode}")
    assert not [r for r in caplog.records if "Offload failed" in r.getMessage()], caplog.text
    lines = check_inputs(model)
    assert len(lines) >= 20  # the loop was folded: most of its calls are named by the note
    store = backend[0]
    hosts = 0
    for k in range(CALLS):
        result = load_offloaded(store, f"note-{mode}", f"call_R{k}")
        if result is not None:
            assert result.content == file_text(k)  # byte-identical
        step = load_offloaded(store, f"note-{mode}", f"ai{k}", kind="message")
        if step is not None:
            assert isinstance(step, AIMessage) and step.content == ""  # its own content, never the note
            assert not note_lines(step) and "lc_compaction" not in step.additional_kwargs
            assert [c["id"] for c in step.tool_calls] == [f"call_R{k}"]
            hosts += 1
    assert hosts >= 20  # the folded steps are kept one by one


def test_real_conflict_on_a_note_host_is_refused_without_a_second_note(backend: Any,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    store = backend[0]
    other = OffloadRecord(AIMessage("another message", id="ai1"), "removed").value()
    store.put(offload_namespace("note-conflict", "message"), "ai1", other, index=False)
    caplog.set_level(logging.WARNING, logger="lc_compaction.integrations.offload")
    model, out = run("rewrite", backend, "note-conflict")
    failures = [r.getMessage() for r in caplog.records if "Offload failed" in r.getMessage()]
    assert failures and all("ai1: another content is already stored" in f for f in failures)
    kept = store.get(offload_namespace("note-conflict", "message"), "ai1")
    assert kept is not None and kept.value == other  # the stored content is never overwritten
    check_inputs(model)
    assert any(isinstance(m, AIMessage) and m.id == "ai1" for m in out["messages"])  # it stays in the history
    assert len([m for m in out["messages"] if note_lines(m)]) <= 1  # one note in the state too
