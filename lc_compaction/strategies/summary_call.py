"""The summarizer's model call: one prompt in, the summary's text out, within a deadline, retried, capped.

`SummaryCall.invoke` and its async twin `ainvoke` answer one `SummaryRequest` (prompt, output cap, counter,
deadline):

- one retry layer, ours: transient errors (`is_transient`) are retried `max_retries` times, waiting
  `initial_delay` seconds first, then doubling, with up to as much random jitter (tenacity's
  `wait_exponential_jitter`, which `Runnable.with_retry` uses). The model's own client retries are turned off
  in a copy (`without_own_retries`: `max_retries=0`), so they do not multiply ours; the caller's model object is
  not changed;
- the deadline (`SummaryRequest.deadline`, a `time.monotonic()` instant) bounds every attempt and every wait
  between them: no attempt starts and no wait runs past it. `Summarize` gives all the calls of one compaction
  (its chunks, both passes of the ladder) the same deadline. Async: `asyncio.wait_for` (the call is
  cancelled). Sync: each attempt runs in a daemon thread that is abandoned at the deadline (its late answer is
  discarded; it makes no further request). Works for any `BaseChatModel`;
- the chat model is bound to the output cap (the first of `CAP_FIELDS` its class declares); config
  `SUMMARIZER_CONFIG` plus `tags=[TAG_NOSTREAM]`; no tools;
- the reply: only its text blocks (`reply_text`: never reasoning blocks, signatures or reprs), a leading
  summary prefix dropped, cut at the cap with `CUT_MARKER` (OpenAI-compatible servers such as llama.cpp's
  ignore `max_completion_tokens`), the marker also appended when the server itself stopped at the cap.

Every failure is a `SummarizationError`: reason "timeout", "error" (the model raised, after its retries) or
"no_text" (empty, reasoning-only, or a placeholder reply), the original exception as `__cause__`.

`Cooldown` is the memory `Summarize` keeps between compactions: after a failure, the model is not called again
for a number of seconds (reason "cooldown"), for every thread and task that uses the same strategy.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.exceptions import ModelError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.constants import TAG_NOSTREAM

from lc_compaction._content import reply_text
from lc_compaction.agent_request import AgentRequest
from lc_compaction.markers import SUMMARY_PREFIX
from lc_compaction.strategies.transcript import CUT_MARKER, cut_to_tokens

logger = logging.getLogger(__name__)

CAP_FIELDS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
"""Fields through which chat-model classes take an output cap (OpenAI and Anthropic: `max_tokens`; Google:
`max_output_tokens`; Ollama: `num_predict`); the first one the model's class declares is bound."""

CLIENT_FIELDS: tuple[str, ...] = ("client", "async_client", "root_client", "root_async_client")
"""Fields holding the SDK clients a chat model's validator builds from its settings (`ChatOpenAI` and the
integrations built on it, `ChatGroq`): left out of the copy `without_own_retries` makes, so they are built
again with `max_retries=0`."""

MAX_WAIT = 60.0
"""Longest wait between two attempts, seconds: tenacity's `wait_exponential_jitter` default `max`."""

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
        reason: "timeout", "error" (the model raised, after its retries), "no_text" (empty or reasoning-only)
            or "cooldown" (not called: an earlier failure, named in the message, started a cooldown).
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


def without_own_retries(model: BaseChatModel) -> BaseChatModel:
    """`model` with its own client retries off, so that ours are the only retry layer.

    When the model's class declares a `max_retries` field (ChatOpenAI, ChatAnthropic, ChatGroq, ChatMistralAI,
    ... pass it to their SDK client or their own retry loop) and its value is not 0, a new instance is built
    from the model's field values with `max_retries=0`, leaving out the SDK clients its validator made
    (`CLIENT_FIELDS`), so they are made again without retries; a client you passed in (`http_client`) is
    kept. Otherwise, or if that copy cannot be built (it is logged), `model` itself is returned. The caller's
    model object is never changed.
    """
    cls = type(model)
    fields = cls.model_fields
    if "max_retries" not in fields or getattr(model, "max_retries", None) == 0:
        return model
    config = cls.model_config
    by_name = bool(config.get("populate_by_name") or config.get("validate_by_name"))
    values: dict[str, Any] = {}
    for name in model.model_fields_set:
        info = fields.get(name)
        if info is None or name in CLIENT_FIELDS or name == "max_retries":
            continue
        key = info.alias if isinstance(info.alias, str) and not by_name else name
        values[key] = getattr(model, name)
    values["max_retries"] = 0
    try:
        return cls.model_validate(values)
    except Exception as exc:  # noqa: BLE001 - an integration whose settings do not round-trip: keep the model
        logger.warning("lc-compaction could not turn off the retries of %s (%s: %s); its own retries add to "
                       "the summarizer's", cls.__name__, type(exc).__name__, exc)
        return model


@dataclass(frozen=True)
class SummaryRequest:
    """One summarizer call: the prompt (text), the output cap (tokens), the counter of text the cap is
    measured with (tokens), the deadline (a `time.monotonic()` instant, seconds; None for none), and the agent's
    request it repeats (`agent_request.AgentRequest`: its messages, then the prompt as the last user message,
    through the agent's model bound with its tools and settings; None: the prompt alone, no tools)."""

    prompt: str
    cap: int
    count_text: Callable[[str], int]
    deadline: float | None = None
    agent: AgentRequest | None = None


class _Deadline(TimeoutError):
    """The request's deadline passed (distinct from a TimeoutError the model itself raises)."""


@dataclass
class SummaryCall:
    """The summarizer model and how it is called (see the module docstring).

    Args:
        model: the chat model (not a binding: the output cap is bound here). A copy without its own retries
            is called (`without_own_retries`).
        timeout: the deadline's length, seconds (named in the error); the deadline itself comes with each request.
        max_retries: retries of a transient error (`is_transient`).
        initial_delay: first wait before a retry, seconds.
    """

    model: BaseChatModel
    timeout: float | None
    max_retries: int
    initial_delay: float
    cap_field: str | None = field(init=False)
    _model: BaseChatModel = field(init=False, repr=False)

    def __post_init__(self) -> None:
        declared = type(self.model).model_fields
        self.cap_field = next((f for f in CAP_FIELDS if f in declared), None)
        self._model = without_own_retries(self.model)

    def invoke(self, request: SummaryRequest) -> str:
        """The summary's text for `request` (`model.invoke`, each attempt in a thread within the deadline).

        Raises:
            SummarizationError: the model timed out, failed after its retries, or answered no usable text.
        """
        runnable, inputs = self._runnable(request)
        attempt = 0
        while True:
            attempt += 1
            try:
                reply = _run_with_deadline(lambda: runnable.invoke(inputs, config=_config()),
                                           _remaining(request.deadline, self))
            except _Deadline as exc:
                raise self._timed_out() from exc
            except Exception as exc:
                wait = self._wait(exc, attempt, request.deadline)
                if wait is None:
                    raise self._error(exc, attempt, request.deadline) from exc
                time.sleep(wait)
                continue
            return _usable(reply, request)

    async def ainvoke(self, request: SummaryRequest) -> str:
        """Async twin of `invoke` (`model.ainvoke` under `asyncio.wait_for`, waits with `asyncio.sleep`)."""
        runnable, inputs = self._runnable(request)
        own: list[BaseException] = []  # a TimeoutError the model raised itself (not the deadline's)

        async def attempt() -> Any:
            try:
                return await runnable.ainvoke(inputs, config=_config())
            except (asyncio.TimeoutError, TimeoutError) as exc:
                own.append(exc)
                raise

        tries = 0
        while True:
            tries += 1
            own.clear()
            try:
                reply = await asyncio.wait_for(attempt(), _remaining(request.deadline, self))
            except _Deadline as exc:
                raise self._timed_out() from exc
            except (asyncio.TimeoutError, TimeoutError) as exc:
                if not own:
                    raise self._timed_out() from exc
                error: Exception = exc
            except Exception as exc:  # noqa: BLE001 - any model error is a failed attempt (retried if transient)
                error = exc
            else:
                return _usable(reply, request)
            wait = self._wait(error, tries, request.deadline)
            if wait is None:
                raise self._error(error, tries, request.deadline) from error
            await asyncio.sleep(wait)

    def _runnable(self, request: SummaryRequest) -> tuple[Runnable[Any, Any], list[BaseMessage]]:
        """The runnable and its input: the summarizer model and the prompt; or, for a request that repeats the
        agent's (`request.agent`), the agent's model without its own retries, bound as the agent's request was,
        and that request's messages with the prompt last. The output cap is bound either way (it is not part of
        a provider's prompt-cache key)."""
        agent = request.agent
        if agent is None:
            model: Runnable[Any, Any] = self._model
            cap_field = self.cap_field
            inputs: list[BaseMessage] = [HumanMessage(content=request.prompt)]
        else:
            declared = type(agent.model).model_fields
            cap_field = next((f for f in CAP_FIELDS if f in declared), None)
            own = self._model if agent.model is self.model else without_own_retries(agent.model)
            model, inputs = agent.runnable(own), agent.inputs(request.prompt)
        if cap_field:
            model = model.bind(**{cap_field: request.cap})
        return model, inputs

    def _wait(self, exc: Exception, attempt: int, deadline: float | None) -> float | None:
        """Seconds to wait before the next attempt after `exc` ended attempt number `attempt`, or None to
        stop: the error is not transient, the retries are used up, or the wait would end past the deadline.
        The wait: `initial_delay * 2 ** (attempt - 1)` plus up to `initial_delay` of jitter, at most `MAX_WAIT`."""
        if not is_transient(exc) or attempt > self.max_retries:
            return None
        wait: float = min(MAX_WAIT, self.initial_delay * 2 ** (attempt - 1) + random.uniform(0, self.initial_delay))
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        return wait

    def _timed_out(self) -> SummarizationError:
        return SummarizationError(f"summarizer model timed out: no summary within the {self.timeout:g} s timeout",
                                  "timeout")

    def _error(self, exc: Exception, attempts: int, deadline: float | None) -> SummarizationError:
        late = (is_transient(exc) and attempts <= self.max_retries and deadline is not None)
        note = f"; no time left for a retry within the {self.timeout:g} s timeout" if late else ""
        return SummarizationError(f"summarizer model failed ({attempts} attempt(s)): {type(exc).__name__}: "
                                  f"{exc}{note}", "error")


def _remaining(deadline: float | None, call: SummaryCall) -> float | None:
    """Seconds left until `deadline` (None: no deadline); raises `_Deadline` when none are left."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline(f"the {call.timeout} s deadline passed")
    return left


class Cooldown:
    """After a failure, no summarizer call for `seconds` (measured by `clock`, seconds): what `Summarize`
    shares between compactions, and between every thread and asyncio task that uses the same strategy (a lock
    guards it; nothing is awaited while it is held).

    Args:
        seconds: length of the cooldown, seconds (0: none).
        clock: a monotonic clock in seconds (default `time.monotonic`; a test passes its own).
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._until: float | None = None
        self._error = ""

    def check(self) -> SummarizationError | None:
        """The error to report instead of calling the model while the cooldown runs (reason "cooldown",
        naming the failure that started it), or None when the model may be called."""
        with self._lock:
            if self._until is None:
                return None
            left = self._until - self.clock()
            if left <= 0:
                self._until = None
                return None
            error = self._error
        return SummarizationError(f"summarizer not called: cooling down for {left:.0f} s more after a failure "
                                  f"({error})", "cooldown")

    def failed(self, error: SummarizationError) -> None:
        """Start (or restart) the cooldown after `error`."""
        if self.seconds <= 0 or error.reason == "cooldown":
            return
        with self._lock:
            self._until = self.clock() + self.seconds
            self._error = str(error)

    def __getstate__(self) -> dict[str, Any]:  # a lock cannot be copied or pickled: a copy gets its own
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


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
    if not text and getattr(reply, "tool_calls", None):
        names = ", ".join(c.get("name", "?") for c in reply.tool_calls)  # type: ignore[attr-defined]
        raise SummarizationError(f"summarizer model called a tool ({names}) instead of answering a summary",
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
    config follow it), waiting at most `timeout` seconds. Raises `_Deadline` (a TimeoutError) at the deadline (the
    thread is abandoned: it cannot be killed; its late result is discarded) or whatever `fn` raised."""
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
        raise _Deadline(f"no answer within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
