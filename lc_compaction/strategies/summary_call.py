"""The summarizer's model call: one prompt in, the summary's text out, within a deadline, retried, capped.

`SummaryCall.invoke` and its async twin `ainvoke` answer one `SummaryRequest` (prompt, output cap, counter):

- the chat model is bound to the output cap (the first of `CAP_FIELDS` its class declares) and wrapped in
  `Runnable.with_retry`: transient errors (`is_transient`) are retried `max_retries` times, waiting
  `initial_delay` seconds first, then doubling, with up to as much jitter;
- config `SUMMARIZER_CONFIG` plus `tags=[TAG_NOSTREAM]`; no tools;
- the whole call, retries included, has a deadline of `timeout` seconds. Async: `asyncio.wait_for` (the call
  is cancelled). Sync: the call runs in a daemon thread that is abandoned at the deadline (its late answer is
  discarded). Works for any `BaseChatModel`;
- the reply: only its text blocks (`reply_text`: never reasoning blocks, signatures or reprs), a leading
  summary prefix dropped, cut at the cap with `CUT_MARKER` (OpenAI-compatible servers such as llama.cpp's
  ignore `max_completion_tokens`), the marker also appended when the server itself stopped at the cap.

Every failure is a `SummarizationError`: reason "timeout", "error" (the model raised, after its retries) or
"no_text" (empty, reasoning-only, or a placeholder reply), the original exception as `__cause__`.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.exceptions import ModelError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.retry import ExponentialJitterParams
from langgraph.constants import TAG_NOSTREAM

from lc_compaction._content import reply_text
from lc_compaction.markers import SUMMARY_PREFIX
from lc_compaction.strategies.transcript import CUT_MARKER, cut_to_tokens

CAP_FIELDS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
"""Fields through which chat-model classes take an output cap (OpenAI and Anthropic: `max_tokens`; Google:
`max_output_tokens`; Ollama: `num_predict`); the first one the model's class declares is bound."""

SUMMARIZER_CONFIG: RunnableConfig = {"metadata": {"lc_source": "summarization"}, "run_name": "lc_compaction.summarize"}
"""Config of every summarizer call (plus `tags=[TAG_NOSTREAM]`): the metadata LangChain's SummarizationMiddleware
sets, so tracing shows it, and the tag LangGraph uses to keep it out of a graph's message stream."""

PLACEHOLDER_REPLIES = frozenset({
    "error generating summary", "no previous conversation history", "previous conversation was too long to summarize",
    "too long to summarize", "summary unavailable", "n/a", "none", "null",
})
"""Replies that are not a summary (the placeholder texts compactors in this field have stored as summaries):
treated like an empty reply, lower-cased, without final punctuation."""


class SummarizationError(RuntimeError):
    """The summarizer model failed, timed out or answered no usable text (with `fallback="raise"`).

    Attributes:
        reason: "timeout", "error" (the model raised, after its retries) or "no_text" (empty or reasoning-only).
    The original exception, if any, is `__cause__`. The history was not changed.
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def is_transient(error: BaseException) -> bool:
    """Whether a summarizer error is worth retrying: LangChain's rule (`ModelError.is_retryable` for the
    provider errors it classifies: rate limits, 5xx, timeouts, connection errors; any other `Exception` too)."""
    if not isinstance(error, Exception):
        return False
    if isinstance(error, ModelError):
        return error.is_retryable
    return True


@dataclass(frozen=True)
class SummaryRequest:
    """One summarizer call: the prompt (text), the output cap (tokens) and the counter of text the cap is
    measured with (tokens)."""

    prompt: str
    cap: int
    count_text: Callable[[str], int]


@dataclass
class SummaryCall:
    """The summarizer model and how it is called (see the module docstring).

    Args:
        model: the chat model (not a binding: the output cap is bound here).
        timeout: deadline of one call, retries included, seconds; None for none.
        max_retries: retries of a transient error (`is_transient`).
        initial_delay: first wait before a retry, seconds.
    """

    model: BaseChatModel
    timeout: float | None
    max_retries: int
    initial_delay: float
    cap_field: str | None = field(init=False)

    def __post_init__(self) -> None:
        declared = type(self.model).model_fields
        self.cap_field = next((f for f in CAP_FIELDS if f in declared), None)

    def invoke(self, request: SummaryRequest) -> str:
        """The summary's text for `request` (`model.invoke` in a thread with the deadline).

        Raises:
            SummarizationError: the model timed out, failed after its retries, or answered no usable text.
        """
        runnable, inputs = self._runnable(request.cap), [HumanMessage(content=request.prompt)]
        try:
            reply = _run_with_deadline(lambda: runnable.invoke(inputs, config=_config()), self.timeout)
        except TimeoutError as exc:
            raise self._timed_out() from exc
        except Exception as exc:
            raise self._error(exc) from exc
        return _usable(reply, request)

    async def ainvoke(self, request: SummaryRequest) -> str:
        """Async twin of `invoke` (`model.ainvoke` under `asyncio.wait_for`)."""
        runnable, inputs = self._runnable(request.cap), [HumanMessage(content=request.prompt)]
        try:
            reply = await asyncio.wait_for(runnable.ainvoke(inputs, config=_config()), self.timeout)
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise self._timed_out() from exc
        except Exception as exc:
            raise self._error(exc) from exc
        return _usable(reply, request)

    def _runnable(self, cap: int) -> Runnable[Any, Any]:
        model: Runnable[Any, Any] = self.model
        if self.cap_field:
            model = model.bind(**{self.cap_field: cap})
        return model.with_retry(retry_if_exception_type=is_transient, stop_after_attempt=self.max_retries + 1,
                                wait_exponential_jitter=True,
                                exponential_jitter_params=_jitter_params(self.initial_delay))

    def _timed_out(self) -> SummarizationError:
        return SummarizationError(f"summarizer model timed out after {self.timeout:g} s", "timeout")

    def _error(self, exc: Exception) -> SummarizationError:
        attempts = self.max_retries + 1 if is_transient(exc) else 1
        return SummarizationError(f"summarizer model failed ({attempts} attempt(s)): {type(exc).__name__}: {exc}",
                                  "error")


def _config() -> RunnableConfig:
    return {**SUMMARIZER_CONFIG, "tags": [TAG_NOSTREAM], "metadata": dict(SUMMARIZER_CONFIG["metadata"])}


def _usable(reply: Any, request: SummaryRequest) -> str:
    """The reply's text, cut at `request.cap` tokens with a marker; raises SummarizationError("no_text") when it
    has no text (empty, or only reasoning / other blocks) or is a placeholder."""
    if not isinstance(reply, BaseMessage):
        raise SummarizationError(f"summarizer model returned a {type(reply).__name__}, not a message", "no_text")
    text = reply_text(reply).strip()
    if text.startswith(SUMMARY_PREFIX.strip()):
        text = text[len(SUMMARY_PREFIX.strip()):].strip()
    if text.rstrip(".!").strip().lower() in PLACEHOLDER_REPLIES:
        raise SummarizationError(f"summarizer model answered a placeholder ({text[:60]!r}), not a summary",
                                 "no_text")
    if not text:
        blocks = reply.content if isinstance(reply.content, list) else []
        kinds = sorted({b.get("type", "?") for b in blocks if isinstance(b, dict)})
        what = f"only {', '.join(kinds)} blocks" if kinds else "no text"
        raise SummarizationError(f"summarizer model answered {what}: nothing usable as a summary", "no_text")
    text, cut = cut_to_tokens(text, request.cap, request.count_text)
    if not cut and _stopped_at_cap(reply):
        text += CUT_MARKER.format(cap=request.cap)
    return text


def _stopped_at_cap(message: BaseMessage) -> bool:
    meta = message.response_metadata or {}
    return meta.get("finish_reason") == "length" or meta.get("stop_reason") == "max_tokens"


def _run_with_deadline(fn: Callable[[], Any], timeout: float | None) -> Any:
    """`fn()` in a daemon thread (with the caller's context variables, so LangChain callbacks and LangGraph's
    config follow it), waiting at most `timeout` seconds. Raises TimeoutError at the deadline (the thread is
    abandoned: it cannot be killed; its late result is discarded) or whatever `fn` raised."""
    if timeout is None:
        return fn()
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = ctx.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="lc-compaction-summarizer", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _jitter_params(initial_delay: float) -> ExponentialJitterParams:
    """`Runnable.with_retry`'s `exponential_jitter_params` for a first wait of `initial_delay` seconds. Its
    TypedDict only knows `initial` (tenacity >= 9.1 calls it `multiplier` and warns about `initial`: a
    DeprecationWarning when `initial_delay` is not the default 1 s; `multiplier` would be dropped by LangChain)."""
    if initial_delay == 1:
        return {}  # tenacity's own default: initial 1 s, jitter up to 1 s
    return {"initial": initial_delay, "jitter": initial_delay}
