"""A deterministic summarizer for replays, benchmarks and tests: no network, no weights, the same reply for the
same input.

`ScriptedSummarizer` is a `BaseChatModel`. Its reply to a request is a fixed-size digest of what it was sent:
`"Summary {hash} of {n} messages:"` (the first 12 hex digits of the SHA-256 of the request's messages, roles and
texts; n the messages sent), then `words` words of `VOCABULARY` (common English words, each one token with its
leading space in o200k, gpt-4o's encoding), chosen by the bytes of that hash. So every reply has the same number of
tokens whatever it was sent: a summary request of either form (`Summarize(share_agent_request=...)`) and
LangChain's `SummarizationMiddleware` get replies of the same size, and a bill compares the requests, not the
replies. (A reply built from the input's own text would not: the same characters are more tokens in a seat
list than in prose.) Different requests get different replies.

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

__all__ = ["DEFAULT_SUMMARY_WORDS", "VOCABULARY", "ScriptedSummarizer"]

DEFAULT_SUMMARY_WORDS = 400
"""Default length of the reply after its head, words (tokens, `VOCABULARY`): the size of a short model summary
(the stub summary of `benchmarks/bill.py`, `STUB_SUMMARY_CHARS`, is about 400 tokens too)."""

VOCABULARY = ("the", "user", "asked", "agent", "checked", "booking", "flight", "seat", "and", "then", "found",
              "it", "was", "confirmed", "paid", "with", "card", "for", "next", "day", "change", "cancel", "refund",
              "tool", "result", "file", "test", "fixed", "error", "on", "line", "done")
"""The words of a reply: 32 common English words, each a single token after a space in o200k (gpt-4o's encoding)."""


class ScriptedSummarizer(BaseChatModel):
    """A chat model whose reply is a digest of its input, `chars` characters long (see the module docstring).

    Attributes:
        words: words of every reply after its head (each a token); >= 1.
        requests: the messages of every request received, in order (appended under a lock: the sync and async
            paths, threads and tasks may share one object).
    """

    words: int = Field(default=DEFAULT_SUMMARY_WORDS, ge=1)
    requests: list[list[BaseMessage]] = Field(default_factory=list, exclude=True)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "lc-compaction-scripted-summarizer"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"words": self.words}

    def reply(self, messages: list[BaseMessage]) -> str:
        """The reply to `messages`, without recording them (see the module docstring)."""
        digest = hashlib.sha256()
        for m in messages:
            digest.update(f"{m.type}\x00{m.text}\x00".encode())
        key = digest.digest()
        picks = (key[k % len(key)] ^ (k // len(key)) for k in range(self.words))
        body = " ".join(VOCABULARY[b % len(VOCABULARY)] for b in picks)
        return f"Summary {digest.hexdigest()[:12]} of {len(messages)} messages: {body}."

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
