"""A real summarizer for end-to-end tests: llama.cpp's server with SmolLM2-135M-Instruct on 127.0.0.1.

Use it from a test module with `from tests.llama_fixture import llama_server  # noqa: F401` (pytest finds a
fixture imported into the module), and mark the module `LLAMA_MARKS`: slow, and in the xdist group "llama", so
that with `-n` every test using the server runs on one worker (`--dist loadgroup` in pyproject.toml) and one
server serves the whole session. The server is started once, on first use, and stopped by its pid at the end.

`real_summarizer(server)` gives a `ChatOpenAI` pointed at it plus a `WireLog` of its calls (what was asked:
tags, metadata, the bound cap; what came back: the reply with its usage and finish_reason; streamed tokens).
The model's text differs between runs: assert the shape of a reply, never its content.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI

from lc_compaction.testing.llama_server import LlamaServer

LLAMA_MARKS = [pytest.mark.slow, pytest.mark.xdist_group("llama")]
"""Marks of every test that uses the server."""

SERVER_THREADS = 1
"""CPU threads of the test server. The suite runs two xdist workers on CI's two cores; one thread leaves the
other worker its core (llama.cpp's threads wait for each other, so two threads on a busy core are slower than
one)."""

REQUEST_TIMEOUT = 300.0
"""Seconds one HTTP request to the server may take (the OpenAI client's timeout). A bound for a stalled server
on a loaded machine, not an expectation."""


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """The running server (one per session and worker), stopped by its pid when the session ends."""
    with LlamaServer(threads=SERVER_THREADS) as server:
        yield server


@dataclass
class WireCall:
    """One call of the model: its run id, tags, metadata and invocation params (the bound `max_tokens`), the
    tokens streamed (empty when not streamed), and the reply (None until it ends) or the error."""

    run_id: UUID
    tags: list[str]
    metadata: dict[str, Any]
    params: dict[str, Any]
    tokens: list[str] = field(default_factory=list)
    reply: BaseMessage | None = None
    error: BaseException | None = None

    @property
    def finish_reason(self) -> str | None:
        return (self.reply.response_metadata or {}).get("finish_reason") if self.reply is not None else None

    @property
    def output_tokens(self) -> int | None:
        usage = getattr(self.reply, "usage_metadata", None)
        return usage["output_tokens"] if usage else None


class WireLog(BaseCallbackHandler):
    """Callback handler attached to the summarizer model itself (`ChatOpenAI(callbacks=[log])`): one `WireCall`
    per chat model run, in order (`calls`)."""

    def __init__(self) -> None:
        self.calls: list[WireCall] = []
        self._by_run: dict[UUID, WireCall] = {}

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        call = WireCall(run_id, list(tags or []), dict(metadata or {}), dict(kwargs.get("invocation_params") or {}))
        self.calls.append(call)
        self._by_run[run_id] = call

    def on_llm_new_token(self, token: str, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self._by_run:
            self._by_run[run_id].tokens.append(token)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self._by_run:
            self._by_run[run_id].reply = response.generations[0][0].message

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self._by_run:
            self._by_run[run_id].error = error


def real_summarizer(server: LlamaServer, **kwargs: Any) -> tuple[ChatOpenAI, WireLog]:
    """`ChatOpenAI` against `server` (its own retries off: `Summarize` retries) and the `WireLog` of its calls.
    `kwargs` go to `ChatOpenAI` (e.g. `extra_body={"ignore_eos": True}`: llama.cpp then writes up to the cap)."""
    log = WireLog()
    model = ChatOpenAI(base_url=server.base_url, api_key="x", model=server.model, max_retries=0,
                       timeout=REQUEST_TIMEOUT, callbacks=[log], **kwargs)
    return model, log
