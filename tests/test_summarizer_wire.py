"""The summarizer over the real wire: `ChatOpenAI` against a local HTTP server that speaks the OpenAI chat
completions API (started here on 127.0.0.1, a free port), which answers a 500, a slow reply, or an over-long
reply that ignores `max_completion_tokens` (as llama.cpp's server and other OpenAI-compatible servers do).

`ChatOpenAI(max_retries=0)` turns off the OpenAI client's own retries, so the retry seen here is ours.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from langchain_openai import ChatOpenAI

from lc_compaction import CompactionPolicy, acompact, compact
from lc_compaction.markers import is_summary, summary_text
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.summarize import CUT_MARKER, SummarizationError, Summarize
from lc_compaction.tokens import TiktokenCounter
from tests.builders import conversation, tool_exchange

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


class FakeOpenAI:
    """A local server for POST /v1/chat/completions. Each request takes the next scripted answer:
    ("status", code) an error status, ("slow", text) waits for `release` (at most 30 s) then answers,
    ("text", text) answers at once (whatever `max_completion_tokens` says). Request bodies are in `requests`."""

    def __init__(self) -> None:
        self.script: list[tuple[str, object]] = []
        self.requests: list[dict] = []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, **body})
                kind, value = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                if kind == "status":
                    self._send(int(value), {"error": {"message": "server error", "type": "server_error"}})
                    return
                if kind == "slow":
                    owner.release.wait(30)
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": value},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def chat_model(self) -> ChatOpenAI:
        return ChatOpenAI(model="gpt-4o-mini", base_url=f"http://127.0.0.1:{self.port}/v1", api_key="sk-test",
                          max_retries=0)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.thread.start()
    yield fake
    fake.release.set()
    fake.server.shutdown()
    fake.server.server_close()


def history() -> list:
    record = " ".join(f"seat{j % 9} row{j % 30}" for j in range(90))
    return conversation("You are an airline agent.", (
        tool_exchange(k, f"Request {k}: check reservation RES{k:03d}Q.",
                      f'{{"reservation_id": "RES{k:03d}Q", "notes": "{record}"}}', f"RES{k:03d}Q is confirmed.",
                      tool="get_reservation", args={"reservation_id": f"RES{k:03d}Q"}, answer_id=f"b{k}")
        for k in range(14)))


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
