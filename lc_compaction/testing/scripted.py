"""A deterministic summarizer for replays, benchmarks and tests: no network, no weights, the same reply for the
same input.

`ScriptedSummarizer` is a `BaseChatModel`. Its reply to a request is a fixed-size digest of what it was sent:
`"Summary {hash}: "` (the first 12 hex digits of the SHA-256 of the request's messages, roles and texts) followed
by the text of the conversation it was sent (every message but the last when there are several: the last is the
instruction a cache-sharing request appends; the one message of a transcript prompt otherwise), whitespace
collapsed, cut so that the whole reply is `chars` characters (shorter only when the input is). So a summary
request of either form (`Summarize(share_agent_request=...)`) gets a reply of the same size, and the bill compares
the requests, not the replies.

Every request is kept, in order, in `requests` (the messages as received, a list per call): what a test or a
benchmark bills (`billing.BillMeter.bill_summary`) or compares with the agent's request.

It has no output-cap field (`summary_call.CAP_FIELDS`) and no `max_retries` field: `Summarize` calls this very
object (no copy), and cuts its reply at the cap itself.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

__all__ = ["DEFAULT_SUMMARY_CHARS", "ScriptedSummarizer"]

DEFAULT_SUMMARY_CHARS = 1_600
"""Default length of the reply, characters: about 400 tokens at 4 characters a token, the size of a short model
summary (the stub summary of `benchmarks/bill.py`, `STUB_SUMMARY_CHARS`, is the same size)."""


class ScriptedSummarizer(BaseChatModel):
    """A chat model whose reply is a digest of its input, `chars` characters long (see the module docstring).

    Attributes:
        chars: length of every reply, characters (shorter only when the input's text is); >= 20.
        requests: the messages of every request received, in order (appended under a lock: the sync and async
            paths, threads and tasks may share one object).
    """

    chars: int = Field(default=DEFAULT_SUMMARY_CHARS, ge=20)
    requests: list[list[BaseMessage]] = Field(default_factory=list, exclude=True)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "lc-compaction-scripted-summarizer"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"chars": self.chars}

    def reply(self, messages: list[BaseMessage]) -> str:
        """The reply to `messages`, without recording them (see the module docstring)."""
        digest = hashlib.sha256()
        for m in messages:
            digest.update(f"{m.type}\x00{m.text}\x00".encode())
        head = f"Summary {digest.hexdigest()[:12]}: "
        body = messages[:-1] if len(messages) > 1 else messages
        text = " ".join(" ".join(m.text for m in body).split())
        return (head + text)[: self.chars]

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        with self._lock:
            self.requests.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply(messages)))])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        return self._answer(messages)
