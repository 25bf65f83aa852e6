"""The summarizer over the real wire: `ChatOpenAI` against a local HTTP server that speaks the OpenAI chat
completions API (started here on 127.0.0.1, a free port), which answers a 500, a slow reply, or an over-long
reply that ignores `max_completion_tokens` (as llama.cpp's server and other OpenAI-compatible servers do).

`ChatOpenAI(max_retries=0)` turns off the OpenAI client's own retries, so the retry seen here is ours.
"""

from __future__ import annotations

import asyncio

import pytest

from lc_compaction import CompactionPolicy, acompact, compact
from lc_compaction.markers import is_summary, summary_text
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.summarize import CUT_MARKER, SummarizationError, Summarize
from lc_compaction.tokens import TiktokenCounter
from tests.builders import lookups_history as history
from tests.fakes import FakeOpenAI  # noqa: F401 - the `server` fixture (tests/fakes.py) yields one

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


def policy(strategy: Summarize) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=4000, strategies=[strategy])


def summary_of(result) -> str:
    (message,) = [m for m in result.messages if is_summary(m)]
    return summary_text(message)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_500_is_retried_and_the_second_answer_is_the_summary(server, mode):
    server.script = [("status", 500), ("text", "The user checked reservations RES000Q to RES013Q.")]
    strategy = Summarize(model=server.chat_model(), max_retries=2, initial_delay=0)
    run = compact if mode == "sync" else (lambda m, p: asyncio.run(acompact(m, p)))
    result = run(history(), policy(strategy))
    assert len(server.requests) == 2
    assert summary_of(result).startswith("The user checked reservations RES000Q to RES013Q.")
    assert result.details["summarizer"] == "model"
    request = server.requests[-1]
    assert request["path"] == "/v1/chat/completions"
    assert "tools" not in request and "tool_choice" not in request and not request.get("stream")
    assert "Request 1: check reservation RES001Q." in request["messages"][0]["content"]


def test_a_500_on_every_attempt_falls_back_to_the_ledger(server):
    server.script = [("status", 500)]
    strategy = Summarize(model=server.chat_model(), max_retries=1, initial_delay=0, fallback="ledger")
    result = compact(history(), policy(strategy))
    assert len(server.requests) == 2
    assert summary_of(result).startswith(LEDGER_HEADER)
    assert "500" in result.details["fallback_reason"] or "server error" in result.details["fallback_reason"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_slow_reply_times_out_and_the_ledger_is_written(server, mode):
    server.script = [("slow", "too late")]
    strategy = Summarize(model=server.chat_model(), timeout=0.5, max_retries=0, fallback="ledger")
    run = compact if mode == "sync" else (lambda m, p: asyncio.run(acompact(m, p)))
    result = run(history(), policy(strategy))
    assert len(server.requests) == 1
    assert summary_of(result).startswith(LEDGER_HEADER)
    assert "timed out" in result.details["fallback_reason"]


def test_a_slow_reply_with_fallback_raise_propagates(server):
    server.script = [("slow", "too late")]
    strategy = Summarize(model=server.chat_model(), timeout=0.5, max_retries=0, fallback="raise")
    msgs = history()
    with pytest.raises(SummarizationError, match="timed out"):
        compact(msgs, policy(strategy))
    assert [m.id for m in msgs] == [m.id for m in history()]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_over_long_reply_is_cut_at_the_cap_the_server_ignored(server, mode):
    long_text = " ".join(f"The user talked about subject {n} in detail." for n in range(3000))
    server.script = [("text", long_text)]
    strategy = Summarize(model=server.chat_model(), max_summary_tokens=150, fact_guard=False)
    run = compact if mode == "sync" else (lambda m, p: asyncio.run(acompact(m, p)))
    result = run(history(), policy(strategy))
    sent_cap = server.requests[0]["max_completion_tokens"]
    assert 64 <= sent_cap <= 150  # the cap was asked for on the wire...
    text = summary_of(result)
    assert text.endswith(CUT_MARKER.format(cap=sent_cap))  # ...and enforced when the server ignored it
    assert TiktokenCounter().count_text(text) <= sent_cap
    assert text.startswith("The user talked about subject 0 in detail.")
