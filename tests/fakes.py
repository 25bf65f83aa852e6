"""Fake models and servers shared by the test modules (registered as a pytest plugin in conftest.py).

- `ScriptedModel`: a chat model that answers each call with the next scripted item (the behaviour under test is
  ours, not the model's).
- `FakeOpenAI` and the `server` fixture: a local HTTP server on 127.0.0.1 (a free port) speaking the OpenAI chat
  completions API, for `ChatOpenAI(base_url=...)` on the real wire.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI
from pydantic import Field


class ScriptedModel(BaseChatModel):
    """Answers each call with the next scripted item: a str (the reply text), a BaseMessage (returned as is), an
    Exception (raised), or ("wait", seconds) (blocks, then answers "late"). Records each call's input text,
    keyword arguments and path ("sync" / "async")."""

    script: list[Any] = Field(default_factory=list)
    repeat_last: bool = True
    inputs: list[str] = Field(default_factory=list)
    kwargs: list[dict] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    release: Any = None  # a threading.Event that ends a sync wait early (test teardown)

    @property
    def _llm_type(self) -> str:
        return "scripted-test-model"

    def _next(self, messages: list[BaseMessage], kwargs: dict, path: str) -> Any:
        self.inputs.append("\n".join(m.text for m in messages))
        self.kwargs.append(dict(kwargs))
        self.paths.append(path)
        if not self.script:
            raise AssertionError("the script is empty")
        item = self.script[0] if (len(self.script) == 1 and self.repeat_last) else self.script.pop(0)
        if isinstance(item, Exception):
            raise copy.copy(item)
        return item

    @staticmethod
    def _result(item: Any) -> ChatResult:
        message = AIMessage(content=item) if isinstance(item, str) else item
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        item = self._next(messages, kwargs, "sync")
        if isinstance(item, tuple) and item[0] == "wait":
            (self.release or threading.Event()).wait(item[1])
            item = "late"
        return self._result(item)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        item = self._next(messages, kwargs, "async")
        if isinstance(item, tuple) and item[0] == "wait":
            await asyncio.sleep(item[1])
            item = "late"
        return self._result(item)


class FakeOpenAI:
    """A local server for POST /v1/chat/completions. Each request takes the next scripted answer:
    ("status", code) an error status, ("slow", text) waits for `release` (at most `hold` seconds, 30 by default)
    then answers,
    ("text", text) answers at once (whatever `max_completion_tokens` says), ("tool", (name, arguments)) answers one
    tool call (ids call_1, call_2, ...), ("by", function) answers the item `function(request body)` returns.
    Request bodies are in `requests`."""

    def __init__(self) -> None:
        self.script: list[tuple[str, object]] = []
        self.requests: list[dict] = []
        self.calls = 0
        self.release = threading.Event()
        self.hold = 30.0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, **body})
                kind, value = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                if kind == "by":  # value(body) -> a script item: answers by what the request holds
                    kind, value = value(body)  # type: ignore[operator]
                if kind == "status":
                    self._send(int(value), {"error": {"message": "server error", "type": "server_error"}})
                    return
                if kind == "slow":
                    owner.release.wait(owner.hold)
                message: dict = {"role": "assistant", "content": value}
                if kind == "tool":  # value: (tool name, arguments): one call, with a fresh id
                    name, args = value  # type: ignore[misc]
                    owner.calls += 1
                    message = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"call_{owner.calls}", "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}]}
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if kind == "tool" else "stop"}],
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
