"""A failing summarizer costs one call, not a minute: a real `ChatOpenAI(base_url=...)` against a local HTTP
server (tests/test_summarizer_wire.py's `FakeOpenAI`, on 127.0.0.1) that answers 500 or hangs.

- One retry layer: one `compact()` sends exactly `max_retries + 1` HTTP requests, although `ChatOpenAI`'s own
  client would retry each of them twice more (its default), and the second pass of the ladder reuses the first
  pass's failure instead of calling again. The user's model object is not changed.
- `timeout` bounds the whole summarization of one compaction: a hang costs one request and about `timeout`
  seconds, not `timeout` per attempt and per pass; a slow model summarizing in chunks stops at the same deadline.
- After a failure the summarizer is not called for `cooldown` seconds (an injected clock, no sleeps): the next
  `compact()` sends nothing, the ladder goes on (the ledger when the history must shrink, the cheaper strategies),
  and when the cooldown ends the model is called again. Threads and asyncio tasks share one strategy's cooldown.
- The result (`stop_reason`, `details`), the front doors' event and the log line name the failure and its text.

Times are asserted generously (the machine is shared): an upper bound well above the setting, never a tight one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from lc_compaction import CompactionPolicy, TruncateToolResults, acompact, compact
from lc_compaction.integrations import CompactionMiddleware, CompactionNode
from lc_compaction.integrations.events import log_line
from lc_compaction.markers import is_summary, summary_text
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.summarize import Summarize
from lc_compaction.strategies.summary_call import without_own_retries
from tests.agent_replay import EventLog, ReplayChatModel
from tests.builders import lookups_history as history, reservation_history as long_history
from tests.fakes import FakeOpenAI, ScriptedModel

BETWEEN = 7_000
"""A window for which `history()` (about 6,000 tokens) is over `EARLY` (80%) but within the budget (90%): the soft
pass runs, fails, and the relaxed pass runs again: the case where the failure used to cost twice."""

EARLY = ("fraction", 0.8)
"""A trigger below the budget (the default trigger is the budget itself), so that `history()` at `BETWEEN` is
compacted while it still fits."""

OVER = 4_000
"""A window for which `history()` is over the budget: after the failure the hard pass writes the ledger."""


def openai_model(fake: FakeOpenAI, **kwargs: Any) -> ChatOpenAI:
    """ChatOpenAI as a new user makes it: its own client retries left at their default (2)."""
    return ChatOpenAI(model="gpt-4o-mini", base_url=f"http://127.0.0.1:{fake.port}/v1", api_key="sk-test", **kwargs)


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def release():
    """Ends a scripted model's sync wait at teardown (an abandoned attempt's thread)."""
    event = threading.Event()
    yield event
    event.set()


def run(mode: str, messages: list, pol: CompactionPolicy):
    return compact(messages, pol) if mode == "sync" else asyncio.run(acompact(messages, pol))


# ----------------------------------------------------------------------------------------------------- one retry layer
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_500_costs_exactly_the_configured_attempts_and_names_the_failure(server, mode):
    server.script = [("status", 500)]
    model = openai_model(server)
    strategy = Summarize(model=model, max_retries=2, initial_delay=0)
    result = run(mode, history(), CompactionPolicy(max_input_tokens=BETWEEN, trigger=EARLY, strategies=[strategy]))
    assert len(server.requests) == 3  # 3 attempts; not x3 by the client's retries, not x2 by the second pass
    assert result.triggered and not result.compacted
    assert result.stop_reason == "strategy_failed"
    error = result.details["failures"]["summarize"]
    assert "3 attempt(s)" in error and "Error code: 500 - server error" in error
    assert result.details["summarizer_failure"] == "error" and result.details["fallback_reason"] == error
    level, line = log_line(result)
    assert level == logging.WARNING and "strategy_failed" in line and "summarize failed:" in line and "500" in line
    # the user's model is not changed: its own client still retries
    assert model.max_retries is None and model.root_client.max_retries == 2


def test_only_a_model_with_its_own_retries_is_copied_without_them(server):
    model = openai_model(server, max_retries=0)
    assert without_own_retries(model) is model
    retrying = openai_model(server)
    copy = without_own_retries(retrying)
    assert copy is not retrying and copy.max_retries == 0 and copy.root_client.max_retries == 0
    assert copy.model_name == retrying.model_name and copy.openai_api_base == retrying.openai_api_base
    scripted = ScriptedModel(script=["x"])  # no max_retries field: nothing to turn off
    assert without_own_retries(scripted) is scripted


def test_over_the_budget_the_failure_is_reused_and_the_ledger_written(server):
    server.script = [("status", 500)]
    strategy = Summarize(model=openai_model(server), max_retries=1, initial_delay=0)
    result = compact(history(), CompactionPolicy(max_input_tokens=OVER, strategies=[strategy]))
    assert len(server.requests) == 2
    (summary,) = [m for m in result.messages if is_summary(m)]
    assert summary_text(summary).startswith(LEDGER_HEADER)
    assert result.details["summarizer"] == "ledger" and "500" in result.details["failures"]["summarize"]
    assert result.stop_reason != "strategy_failed"  # the ledger changed the history
    level, line = log_line(result)
    assert level == logging.WARNING and line.startswith("Context optimized") and "500" in line


# ----------------------------------------------------------------------------------------------------- one deadline
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hang_costs_one_request_and_the_timeout_for_the_whole_compaction(server, mode):
    server.script = [("slow", "too late")]
    timeout = 1.5
    strategy = Summarize(model=openai_model(server), timeout=timeout, max_retries=2, initial_delay=0)
    start = time.monotonic()
    result = run(mode, history(), CompactionPolicy(max_input_tokens=OVER, strategies=[strategy]))
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 2  # not timeout x attempts x passes
    assert len(server.requests) == 1
    assert result.details["summarizer_failure"] == "timeout"
    assert "1.5 s timeout" in result.details["failures"]["summarize"]
    assert result.details["summarizer"] == "ledger"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_slow_model_summarizing_in_chunks_stops_at_one_deadline(release, mode):
    model = ScriptedModel(script=[("wait", 0.4)], release=release)
    strategy = Summarize(model=model, timeout=1.0, max_retries=0, trim_tokens_to_summarize=2200,
                         max_summary_tokens=200)
    start = time.monotonic()
    result = run(mode, long_history(40, result_words=600), CompactionPolicy(max_input_tokens=8000,
                                                                           strategies=[strategy]))
    elapsed = time.monotonic() - start
    assert result.details["summarizer_failure"] == "timeout"
    assert 2 <= len(model.inputs) <= 4  # chunks answered in 0.4 s each until the 1 s deadline, none after it
    assert elapsed < 1.0 + 2


# ----------------------------------------------------------------------------------------------------- the cooldown
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_a_failure_the_cooldown_skips_the_call_and_its_end_calls_again(server, mode):
    server.script = [("status", 500)]
    clock = Clock()
    strategy = Summarize(model=openai_model(server), max_retries=1, initial_delay=0, cooldown=60, clock=clock)
    pol = CompactionPolicy(max_input_tokens=OVER, strategies=[strategy])
    run(mode, history(), pol)
    assert len(server.requests) == 2

    clock.now += 59
    during = run(mode, history(), pol)
    assert len(server.requests) == 2  # not called
    assert during.details["summarizer_failure"] == "cooldown"
    reason = during.details["failures"]["summarize"]
    assert "cooling down" in reason and "Error code: 500" in reason  # names the failure that started it
    assert during.details["summarizer"] == "ledger"  # the ledger meanwhile, the history being over the budget
    cheaper = run(mode, history(), CompactionPolicy(max_input_tokens=OVER,
                                                    strategies=[TruncateToolResults(keep=1), strategy]))
    assert len(server.requests) == 2
    assert cheaper.strategies_applied == ["truncate_tool_results"] and cheaper.fits  # the cheaper strategy goes on
    assert cheaper.details["summarizer_failure"] == "cooldown"

    clock.now += 2  # 61 s after the failure
    server.script = [("text", "The user checked reservations RES000Q to RES013Q.")]
    after = run(mode, history(), pol)
    assert len(server.requests) == 3
    assert after.details["summarizer"] == "model" and "failures" not in after.details


def test_cooldown_zero_calls_again_at_the_next_compaction(server):
    server.script = [("status", 500)]
    strategy = Summarize(model=openai_model(server), max_retries=0, cooldown=0)
    pol = CompactionPolicy(max_input_tokens=BETWEEN, trigger=EARLY, strategies=[strategy])
    compact(history(), pol)
    compact(history(), pol)
    assert len(server.requests) == 2  # one per compaction: the second pass still reuses the failure


def test_threads_and_tasks_share_the_cooldown(server):
    server.script = [("status", 500)]
    clock = Clock()
    strategy = Summarize(model=openai_model(server), max_retries=0, cooldown=60, clock=clock)
    pol = CompactionPolicy(max_input_tokens=BETWEEN, trigger=EARLY, strategies=[strategy])
    compact(history(), pol)
    assert len(server.requests) == 1
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: compact(history(), pol), range(8)))

    async def tasks() -> list:
        return await asyncio.gather(*(acompact(history(), pol) for _ in range(8)))

    results += asyncio.run(tasks())
    assert len(server.requests) == 1
    assert all(r.details["summarizer_failure"] == "cooldown" for r in results)


@pytest.mark.parametrize("kwargs, setting", [({"cooldown": -1}, "cooldown"), ({"cooldown": True}, "cooldown"),
                                             ({"clock": 3}, "clock")])
def test_invalid_cooldown_settings_are_named(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        Summarize(**kwargs)


# ----------------------------------------------------------------------------------------------------- front doors
def test_the_node_event_and_log_line_name_the_failure(server, caplog):
    caplog.set_level(logging.INFO, logger="lc_compaction.integrations.events")
    server.script = [("status", 500)]
    node = CompactionNode(max_input_tokens=BETWEEN, trigger=EARLY,
                          strategies=[Summarize(model=openai_model(server), max_retries=0)])
    log = EventLog()
    node.invoke({"messages": history()}, {"callbacks": [log]})
    (event,) = log.events
    assert event["reason"] == "strategy_failed" and event["outcome"] == "skipped"
    assert "500" in event["details"]["failures"]["summarize"]
    (record,) = [r for r in caplog.records if r.name == "lc_compaction.integrations.events"]
    assert record.levelno == logging.WARNING and "summarize failed" in record.getMessage()
    assert "500" in record.getMessage()


@tool
def get_reservation(reservation_id: str) -> str:
    """Look up a reservation."""
    return f'{{"reservation_id": "{reservation_id}", "status": "confirmed", "notes": "{"seat row " * 200}"}}'


def test_in_create_agent_a_turn_with_a_tool_call_costs_one_failed_summarization(server):
    server.script = [("status", 500)]
    agent_model = ReplayChatModel(messages=iter([
        AIMessage("", tool_calls=[{"name": "get_reservation", "args": {"reservation_id": "RES777Q"}, "id": "call-x"}]),
        AIMessage("RES777Q is confirmed."),
    ]))
    middleware = CompactionMiddleware(max_input_tokens=BETWEEN, trigger=EARLY,
                                      strategies=[Summarize(model=openai_model(server), initial_delay=0)])
    agent = create_agent(agent_model, [get_reservation], middleware=[middleware])
    start = time.monotonic()
    out = agent.invoke({"messages": [*history()[1:], HumanMessage("And RES777Q?", id="q")]})
    elapsed = time.monotonic() - start
    assert out["messages"][-1].content == "RES777Q is confirmed."
    assert len(agent_model.calls) == 2  # two model calls, each compacted first...
    assert len(server.requests) == 3  # ...but only the first called the failing summarizer (3 attempts)
    assert elapsed < 10
