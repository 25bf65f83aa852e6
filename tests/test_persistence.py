"""Compaction survives a real SQLite checkpointer and a restart.

A recorded conversation runs once uninterrupted, and once with the graph (and its node or middleware, policy,
counter caches, model and database connection) thrown away after half of the user turns and rebuilt on the same
database file. Both runs must send the same inputs to the model at every call and end in the same stored state
(messages and compaction memory); the memory is plain JSON and the checkpoint serializer logs no warning.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import message_to_dict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent

from tests.agent_replay import Replay, ReplayChatModel, load_replays
from lc_compaction.integrations import CompactionMiddleware, compaction_hook

pytestmark = pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")

CONV_ID = "tau-bench/gpt-4o-airline/task046-trial3"  # 13 user turns, compacted three times in a 4,000-token window
WINDOW = 4_000
REPLAY: Replay = load_replays([CONV_ID])[0]
THREAD = {"configurable": {"thread_id": "conversation"}}


def _build(door: str, mode: str, saver: SqliteSaver, start_turn: int) -> tuple[Any, ReplayChatModel]:
    model = REPLAY.model(start_turn, profile={"max_input_tokens": WINDOW})
    tools = REPLAY.tools()
    if door == "react_hook":
        hook = compaction_hook(model=model, tools=tools, mode=mode)
        return create_react_agent(model, tools, pre_model_hook=hook, checkpointer=saver), model
    agent = create_agent(model, tools, system_prompt=REPLAY.system, middleware=[CompactionMiddleware(mode=mode)],
                         checkpointer=saver)
    return agent, model


def _run(door: str, mode: str, db: Path, turns: range) -> list[list]:
    """Run `turns` on a fresh graph over `db`; close everything afterwards. Returns the model inputs."""
    conn = sqlite3.connect(str(db), check_same_thread=False)
    try:
        graph, model = _build(door, mode, SqliteSaver(conn), turns.start)
        for k in turns:
            graph.invoke(REPLAY.turn_input(k, include_system=door == "react_hook"), THREAD)
        return model.calls
    finally:
        conn.close()


def _stored(db: Path) -> dict[str, Any]:
    """The latest checkpoint's channel values, read back through a new connection."""
    conn = sqlite3.connect(str(db), check_same_thread=False)
    try:
        return SqliteSaver(conn).get_tuple(THREAD).checkpoint["channel_values"]
    finally:
        conn.close()


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "elapsed_ms"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@pytest.mark.parametrize(("door", "mode"), [("react_hook", "rewrite"), ("react_hook", "view"),
                                            ("agent_middleware", "rewrite"), ("agent_middleware", "view")])
def test_restart_halfway_ends_in_the_same_state(door: str, mode: str, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="langgraph")
    n = len(REPLAY.turns)
    half = n // 2
    straight = _run(door, mode, tmp_path / "straight.sqlite", range(n))
    first = _run(door, mode, tmp_path / "restarted.sqlite", range(half))
    second = _run(door, mode, tmp_path / "restarted.sqlite", range(half, n))

    dump = lambda calls: [[message_to_dict(m) for m in call] for call in calls]  # noqa: E731
    assert dump(first + second) == dump(straight)

    a, b = _stored(tmp_path / "straight.sqlite"), _stored(tmp_path / "restarted.sqlite")
    assert [message_to_dict(m) for m in b["messages"]] == [message_to_dict(m) for m in a["messages"]]
    memory = b["compaction"]
    assert _without_timings(memory) == _without_timings(a["compaction"])
    # the middleware takes the window from the request's model: its first call of a process, before any request
    # was seen, is compacted by the request's own check alone (not stored); the restarted process reads the
    # window its memory remembers, so both runs end in the same state
    first_call = 1 if door == "agent_middleware" else 0
    assert memory["calls"] == len(straight) - first_call and memory["compactions"] >= 1
    assert json.loads(json.dumps(memory)) == memory  # plain JSON: no custom classes in the checkpoint
    if mode == "view":
        assert len(b["messages"]) == len(REPLAY.history_after_turn(n - 1, include_system=door == "react_hook"))
    serde_warnings = [r for r in caplog.records if r.name.startswith("langgraph") and r.levelno >= logging.WARNING]
    assert not serde_warnings, [r.getMessage() for r in serde_warnings]
