"""Strategy 3: replace the evicted part with one summary, written by a chat model or by the deterministic ledger.

What is evicted is what the ladder allows (`LadderState.removable_exchanges()`: whole exchanges and whole steps,
tool blocks never split, outside the protected part), all of it in one pass, so the next calls do not summarize
again; an earlier summary is passed to the summarizer explicitly and replaced together with them (at most one
summary message, placed where the first replaced message was). A pass whose only evictable content is the earlier
summary does nothing.

The model call (`model.invoke` in `apply`, `model.ainvoke` in `aapply`):

- input: the prompt (`summary_prompt`, a preset or a template with `{messages}`) with the earlier summary and the
  evicted messages as readable text (`render_transcript`: no reprs, no base64, long tool results cut). It never
  exceeds `trim_tokens_to_summarize` tokens: tool results are cut shorter first, then the messages are summarized
  in chunks, oldest first, each chunk's call carrying the summary so far (the beginning is never dropped);
- config `{"tags": [TAG_NOSTREAM], "metadata": {"lc_source": "summarization"}}`, no tools;
- output: at most `max_summary_tokens` tokens, asked of the model (`max_tokens` or its equivalent, when the model
  has such a field) AND enforced by cutting the reply with a marker (OpenAI-compatible servers such as llama.cpp's
  ignore `max_completion_tokens`). Only text blocks are used: never reasoning blocks, signatures or reprs;
- transient errors are retried (`Runnable.with_retry`, `max_retries`), and the whole call has a `timeout`.

If the call fails, times out, or answers no text, nothing is removed on that account. By default
(`fallback="auto"`) the history is left as it is while it still fits the window (the soft pass: the next call
tries again), and the deterministic ledger (`ledger.build_ledger`) is written instead only when the history must
shrink to fit the window (the hard pass); `details["fallback_reason"]` says why either way. `fallback="ledger"`
always writes the ledger, `fallback="raise"` raises `SummarizationError` (the history is untouched), and
`fallback="skip"` always leaves the history to the next strategy.

Then the fact guard (`facts.FactGuard`) appends the identifiers of the replaced messages that the summary left out.
The output cap is lowered to the room the rest of the history leaves under the goal (minus the facts line; not
below `MIN_SUMMARY_TOKENS`), so the result lands under the target whenever the protected part allows it; a
summary that would not be smaller than what it replaces is not put in. Figures go to `state.details` (moved to `CompactionResult.details`; the text to `CompactionResult.summary`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.exceptions import ModelError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.constants import TAG_NOSTREAM

from lc_compaction._content import content_text, is_invalid_call
from lc_compaction.ladder import LadderState
from lc_compaction.markers import SUMMARY_PREFIX, is_summary, make_summary_message, summary_text
from lc_compaction.strategies.facts import FactGuard, Identifier, contains
from lc_compaction.strategies.ledger import build_ledger
from lc_compaction.strategies.prompts import resolve_prompt
from lc_compaction.structure import tool_calls_of
from lc_compaction.tokens import ApproximateCounter, TokenCounter

DEFAULT_MAX_SUMMARY_TOKENS = 1000
"""Default output cap of the summary, in tokens (about 750 English words): room for the default prompt's five
parts on a long conversation, and small beside the 60% target of even an 8,000-token window (4,800 tokens).
LangChain's SummarizationMiddleware sets no cap; ours is needed to keep the result under the target."""

DEFAULT_TRIM_TOKENS_TO_SUMMARIZE = 4000
"""Default bound of the summarizer's input, in tokens: the value of LangChain's SummarizationMiddleware
(`_DEFAULT_TRIM_TOKEN_LIMIT`). Unlike LangChain, which keeps only the last 4,000 tokens, a larger evicted part
is condensed (tool results cut, then chunks), never dropped."""

DEFAULT_TIMEOUT = 60.0
"""Default deadline of one summarizer call, retries included, in seconds. A judgment call: a summary of a
4,000-token input takes seconds on hosted models; a minute bounds how long a stalled provider blocks the agent."""

DEFAULT_MAX_RETRIES = 2
"""Default retries of a transient error: 3 attempts in all, as `Runnable.with_retry` (`stop_after_attempt=3`)
and LangChain's SummarizationMiddleware."""

DEFAULT_INITIAL_DELAY = 1.0
"""Default first wait before a retry, in seconds, doubling each time with up to as much random jitter:
tenacity's `wait_exponential_jitter(initial=1, jitter=1)`, `Runnable.with_retry`'s default."""

TOOL_RESULT_CHARS: tuple[int, ...] = (2000, 500, 0)
"""Characters of each tool result shown to the summarizer, tried in turn until the input fits its bound (0: only
the result's size). 2,000 characters (about 500 tokens) holds a typical JSON record whole; 500 a preview. The
fact guard keeps the identifiers of the part not shown."""

CHUNK_TOOL_RESULT_CHARS = 500
"""Characters of each tool result when the evicted part is summarized in chunks."""

MIN_SUMMARY_TOKENS = 64
"""Smallest output cap given to the model (tokens) when the room under the goal is tighter than that."""

MIN_CHUNK_TOKENS = 256
"""Smallest part of the input bound left for the messages of one chunk (tokens); `trim_tokens_to_summarize`
must leave at least this beside the prompt and the running summary."""

CUT_MARKER = "\n[... summary cut at {cap:,} tokens by lc-compaction ...]"
"""Appended where a reply over the output cap was cut (or where the server itself stopped at the cap)."""

CAP_FIELDS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
"""Fields through which chat-model classes take an output cap (OpenAI and Anthropic: `max_tokens`; Google:
`max_output_tokens`; Ollama: `num_predict`); the first one the model's class declares is bound."""

SUMMARIZER_CONFIG: RunnableConfig = {"metadata": {"lc_source": "summarization"}, "run_name": "lc_compaction.summarize"}
"""Config of every summarizer call (plus `tags=[TAG_NOSTREAM]`): the metadata LangChain's SummarizationMiddleware
sets, so tracing shows it, and the tag LangGraph uses to keep it out of a graph's message stream."""

Fallback = Literal["auto", "ledger", "raise", "skip"]
"""What `Summarize` does when the model fails: write the ledger, raise `SummarizationError`, or skip the pass."""


class SummarizationError(RuntimeError):
    """The summarizer model failed, timed out or answered no usable text (with `fallback="raise"`).

    Attributes:
        reason: "timeout", "error" (the model raised, after its retries) or "no_text" (empty or reasoning-only).
    The original exception, if any, is `__cause__`. The history was not changed.
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------------------------------- text helpers
PLACEHOLDER_REPLIES = frozenset({
    "error generating summary", "no previous conversation history", "previous conversation was too long to summarize",
    "too long to summarize", "summary unavailable", "n/a", "none", "null",
})
"""Replies that are not a summary (the placeholder texts compactors in this field have stored as summaries):
treated like an empty reply, lower-cased, without final punctuation."""


def reply_text(message: BaseMessage) -> str:
    """The text of a model reply: the string content, or the text blocks of a block list joined (bare strings
    included). Reasoning / thinking blocks, signatures, tool-use blocks and anything else are left out."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in ("text", "output_text") and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def render_message(message: BaseMessage, tool_result_chars: int) -> str:
    """One message as readable text for the summarizer: "User: ...", "Assistant: ...", "Assistant called
    name({json args})", "Tool result (name): ..." (cut to `tool_result_chars` characters, with the size left out)."""
    if isinstance(message, ToolMessage):
        text = content_text(message.content)
        name = f" ({message.name})" if message.name else ""
        status = " [error]" if message.status == "error" else ""
        if len(text) <= tool_result_chars:
            return f"Tool result{name}{status}: {text}"
        if tool_result_chars <= 0:
            return f"Tool result{name}{status}: [{len(text):,} characters, not shown]"
        rest = len(text) - tool_result_chars
        return f"Tool result{name}{status}: {text[:tool_result_chars]} [... {rest:,} more characters]"
    if isinstance(message, AIMessage):
        lines = []
        if message.text.strip():
            lines.append(f"Assistant: {message.text.strip()}")
        for call in tool_calls_of(message):  # invalid calls too: their raw arguments, marked
            if is_invalid_call(call):
                lines.append(f"Assistant called {call.get('name') or '?'}({call.get('args') or ''}) [malformed arguments]")
            else:
                lines.append(f"Assistant called {call.get('name') or '?'}({json.dumps(call.get('args') or {}, ensure_ascii=False)})")
        return "\n".join(lines) or "Assistant: (no text)"
    if is_summary(message):
        return f"Earlier summary: {summary_text(message)}"
    role = "User" if isinstance(message, HumanMessage) else "System" if isinstance(message, SystemMessage) else (
        getattr(message, "role", None) or message.type).capitalize()
    return f"{role}: {content_text(message.content)}"


def render_transcript(messages: Sequence[BaseMessage], tool_result_chars: int) -> list[str]:
    """The messages as readable text entries, one per message, oldest first (see `render_message`)."""
    return [render_message(m, tool_result_chars) for m in messages]


def render_input(previous_summary: str | None, entries: Sequence[str]) -> str:
    """What fills the prompt's `{messages}`: the previous summary (when there is one) and the entries."""
    parts = []
    if previous_summary:
        parts.append(f"<previous_summary>\n{previous_summary}\n</previous_summary>")
    parts.append("<conversation>\n" + "\n\n".join(entries) + "\n</conversation>")
    return "\n\n".join(parts)


def cut_to_tokens(text: str, cap: int, count_text: Callable[[str], int]) -> tuple[str, bool]:
    """`text` cut so that it, with `CUT_MARKER`, is at most `cap` tokens; (text, False) when it already fits.
    The cut falls on a whitespace when one is near (in the last fifth of the kept part)."""
    if count_text(text) <= cap:
        return text, False
    marker = CUT_MARKER.format(cap=cap)
    room = max(0, cap - count_text(marker))
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix within `room` tokens
        mid = (lo + hi + 1) // 2
        if count_text(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    prefix = text[:lo]
    space = max(prefix.rfind(" "), prefix.rfind("\n"))
    if space > lo * 4 // 5:
        prefix = prefix[:space]
    return prefix.rstrip() + marker, True


def _stopped_at_cap(message: BaseMessage) -> bool:
    meta = message.response_metadata or {}
    return meta.get("finish_reason") == "length" or meta.get("stop_reason") == "max_tokens"


def is_transient(error: BaseException) -> bool:
    """Whether a summarizer error is worth retrying: LangChain's rule (`ModelError.is_retryable` for the
    provider errors it classifies: rate limits, 5xx, timeouts, connection errors; any other `Exception` too)."""
    if not isinstance(error, Exception):
        return False
    if isinstance(error, ModelError):
        return error.is_retryable
    return True


def _text_counter(counter: TokenCounter) -> TokenCounter:
    """The state's counter when it counts text; the approximate one for a counter of messages."""
    return counter if counter.count_text("lc compaction summary") > 0 else ApproximateCounter()


# ---------------------------------------------------------------------------------------------------- the strategy
@dataclass
class _Plan:
    """What one pass replaces and under which caps (all token figures by `counter`)."""

    replaced: list[int]            # indices replaced: the evicted messages and the earlier summaries
    messages: list[BaseMessage]    # the evicted conversation messages (no summary), oldest first
    previous_text: str | None      # the earlier summaries' text, joined
    identifiers: list[Identifier]
    reply_cap: int
    facts_cap: int | None
    counter: TokenCounter
    calls: int = 0
    input_tokens: int = 0


@dataclass
class _Call:
    prompt: str
    cap: int


@dataclass
class Summarize:
    """Summarize the evicted part with a chat model (or the deterministic ledger), guarded by the fact guard.

    Args:
        model: a `BaseChatModel`, an `init_chat_model` string ("openai:gpt-4o-mini"), or None for the ledger.
            Pass the chat model itself, not a `bind_tools(...)` binding: no tools are sent.
        summary_prompt: a preset name ("default", "customer_support", "coding", "research") or a `str.format`
            template with `{messages}` (LangChain's `SummarizationMiddleware.summary_prompt` convention).
        trim_tokens_to_summarize: bound of one summarizer call's input, tokens (prompt, earlier summary and
            messages); None for no bound. Default 4,000 (LangChain's).
        max_summary_tokens: output cap, tokens (asked of the model and enforced by a cut). Default 1,000. It is
            lowered when the room under the goal is smaller (not below `MIN_SUMMARY_TOKENS`).
        timeout: deadline of one summarizer call, retries included, seconds; None for none. Default 60.
            Async: `asyncio.wait_for` (the call is cancelled). Sync: the call runs in a daemon thread that is
            abandoned at the deadline (its late answer is discarded). Works for any `BaseChatModel`.
        max_retries: retries of a transient error (`is_transient`). Default 2 (3 attempts).
        initial_delay: first wait before a retry, seconds (then doubling, with up to as much jitter). Default 1.
        fallback: when the model fails: "auto" (default: "skip" while the history fits the window, "ledger"
            when it must shrink to fit it), "ledger" (write the ledger instead, reported in
            `details["fallback_reason"]`), "raise" (`SummarizationError`, history untouched) or "skip" (change
            nothing; the next strategy of the ladder goes on).
        fact_guard: True (default `FactGuard()`), False (off: identifiers are still counted for the report), or
            a `FactGuard` with your patterns and bound.
        role: "human" (default) or "ai": the summary message's type. Never "system" (a mid-history system
            message is rejected by Anthropic and Gemini). With "ai", a kept tool call right after the summary
            breaks Gemini's rule that a tool call follows a user or tool turn.

    Reports, in `state.details` (then `CompactionResult.details`; the text goes to `CompactionResult.summary`):
        summarizer: "model", "ledger" (no model, or the fallback) or "none" (`fallback="skip"` after a failure).
        fallback_reason: why the model's summary was not used (only when it was not).
        summarized_messages: conversation messages replaced (an earlier summary not counted), over the passes.
        summarizer_calls: model calls made (chunks; retries not counted); summary_input_tokens: the largest
            input of one call (tokens); summary_tokens: the summary message's tokens (the policy's counter).
        identifiers_evicted: distinct identifiers in what the summary replaced (the earlier summary included);
        identifiers_kept_by_summary: how many of them the summary's own text holds (the figure without the
        guard); identifiers_added_by_guard: how many the facts line added; identifiers_omitted: how many are
        in neither (the guard off, or over its bound).
        summary_skipped: why a written summary was not put in (it would not have been smaller than what it
            replaced); the messages stay.

    Raises:
        ValueError: a setting is invalid (the message names it).
    """

    model: str | BaseChatModel | None = None
    summary_prompt: str = "default"
    trim_tokens_to_summarize: int | None = DEFAULT_TRIM_TOKENS_TO_SUMMARIZE
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    timeout: float | None = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = DEFAULT_INITIAL_DELAY
    fallback: Fallback = "auto"
    fact_guard: bool | FactGuard = True
    role: Literal["human", "ai"] = "human"
    name: str = "summarize"
    _template: str = field(init=False, repr=False)
    _guard: FactGuard = field(init=False, repr=False)
    _cap_field: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if isinstance(self.model, str):
            try:
                from langchain.chat_models import init_chat_model
            except ImportError as exc:
                raise ValueError(f"model: the string {self.model!r} needs langchain's init_chat_model; install "
                                 "`lc-compaction[agents]` (or pass a BaseChatModel instance)") from exc
            self.model = init_chat_model(self.model)
        if self.model is not None and not isinstance(self.model, BaseChatModel):
            raise ValueError(f"model: expected a BaseChatModel, an init_chat_model string or None, got "
                             f"{type(self.model).__name__} (pass the chat model itself, not a binding or chain)")
        self._template = resolve_prompt(self.summary_prompt)
        if not _positive_int(self.max_summary_tokens) or self.max_summary_tokens < MIN_SUMMARY_TOKENS:
            raise ValueError(f"max_summary_tokens: must be an int >= {MIN_SUMMARY_TOKENS} tokens, got {self.max_summary_tokens!r}")
        if self.trim_tokens_to_summarize is not None:
            need = ApproximateCounter().count_text(self._template) + self.max_summary_tokens + MIN_CHUNK_TOKENS
            if not _positive_int(self.trim_tokens_to_summarize) or self.trim_tokens_to_summarize < need:
                raise ValueError(
                    f"trim_tokens_to_summarize: {self.trim_tokens_to_summarize!r} tokens leaves no room for the "
                    f"messages beside the prompt and a {self.max_summary_tokens}-token summary; give at least "
                    f"{need} tokens (or None for no bound)")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                                         or not self.timeout > 0):
            raise ValueError(f"timeout: must be a positive number of seconds or None, got {self.timeout!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries: must be an int >= 0, got {self.max_retries!r}")
        if isinstance(self.initial_delay, bool) or not isinstance(self.initial_delay, (int, float)) or self.initial_delay < 0:
            raise ValueError(f"initial_delay: must be >= 0 seconds, got {self.initial_delay!r}")
        if self.fallback not in ("auto", "ledger", "raise", "skip"):
            raise ValueError(f"fallback: must be 'auto', 'ledger', 'raise' or 'skip', got {self.fallback!r}")
        if not isinstance(self.fact_guard, (bool, FactGuard)):
            raise ValueError(f"fact_guard: expected True, False or a FactGuard, got {type(self.fact_guard).__name__}")
        self._guard = self.fact_guard if isinstance(self.fact_guard, FactGuard) else FactGuard()
        make_summary_message("", role=self.role)  # raises ValueError naming the role
        if self.model is not None:
            declared = type(self.model).model_fields
            self._cap_field = next((f for f in CAP_FIELDS if f in declared), None)

    # ------------------------------------------------------------------ the pass
    def apply(self, state: LadderState) -> None:
        """Summarize the evicted part of `state` (model via `invoke`, or the ledger). See the module docstring.

        Raises:
            SummarizationError: the model failed and `fallback="raise"` (the state is unchanged).
        """
        plan = self._plan(state)
        if plan is None:
            return
        text, reason = None, None
        if self.model is not None:
            try:
                text = self._drive(self._calls(plan), lambda call: self._invoke(call, plan))
            except SummarizationError as exc:
                reason = self._on_failure(exc)
                if self._skips(state):
                    self._record_skip(state, reason)
                    return
        self._commit(state, plan, text, reason)

    async def aapply(self, state: LadderState) -> None:
        """Async twin of `apply`: the model is called with `ainvoke` under `asyncio.wait_for`."""
        plan = self._plan(state)
        if plan is None:
            return
        text, reason = None, None
        if self.model is not None:
            try:
                gen = self._calls(plan)
                call = next(gen)
                while True:
                    reply = await self._ainvoke(call, plan)
                    call = gen.send(reply)
            except StopIteration as done:
                text = done.value
            except SummarizationError as exc:
                reason = self._on_failure(exc)
                if self._skips(state):
                    self._record_skip(state, reason)
                    return
        self._commit(state, plan, text, reason)

    def _skips(self, state: LadderState) -> bool:
        """After a failure: leave the history as it is (True) or write the ledger (False)."""
        if self.fallback == "auto":
            return state.pass_name != "hard"
        return self.fallback == "skip"

    def _on_failure(self, exc: SummarizationError) -> str:
        if self.fallback == "raise":
            raise exc
        return str(exc)

    @staticmethod
    def _record_skip(state: LadderState, reason: str) -> None:
        state.details["summarizer"] = "none"
        state.details["fallback_reason"] = reason

    # ------------------------------------------------------------------ planning
    def _plan(self, state: LadderState) -> _Plan | None:
        """What to replace (everything evictable, plus the earlier summaries) and the caps; None when there is
        no conversation message to evict (an earlier summary alone is never summarized again)."""
        slots = state.slots
        previous = [i for i, s in enumerate(slots) if is_summary(s.message) and not s.pinned]
        evicted = sorted({i for _, steps in state.removable_exchanges() for st in steps for i in st.indices
                          if not is_summary(slots[i].message)})
        if not evicted:
            return None
        replaced = sorted(set(evicted) | set(previous))
        counter = _text_counter(state.counter)
        guard = self._guard
        identifiers = guard.extract_messages(slots[i].message for i in replaced)
        facts_cap = guard.max_tokens if self.fact_guard is not False else None
        facts_need = 0
        if facts_cap is not None:
            line, _ = guard.facts_line(identifiers, counter.count_text, facts_cap)
            facts_need = counter.count_text(line)
        reply_cap = self.max_summary_tokens
        if state.goal_tokens is not None and counter is state.counter:
            replaced_tokens = sum(slots[i].tokens for i in replaced)
            overhead = state.counter.count_message(make_summary_message("", role=self.role))
            room = state.goal_tokens - (state.total() - replaced_tokens) - overhead - facts_need
            reply_cap = max(MIN_SUMMARY_TOKENS, min(reply_cap, room))
        previous_text = "\n\n".join(summary_text(slots[i].message) for i in previous) or None
        return _Plan(replaced=replaced, messages=[slots[i].message for i in evicted], previous_text=previous_text,
                     identifiers=identifiers, reply_cap=reply_cap, facts_cap=facts_cap, counter=counter)

    def _calls(self, plan: _Plan) -> Generator[_Call, str, str]:
        """The model calls of one summary: yields each call, receives its reply text, returns the summary.

        One call when the input fits `trim_tokens_to_summarize` (tool results cut to each of `TOOL_RESULT_CHARS`
        in turn); otherwise chunks of the messages, oldest first, each call given the summary so far.
        """
        count = plan.counter.count_text
        budget = self.trim_tokens_to_summarize
        prev = plan.previous_text
        for chars in TOOL_RESULT_CHARS:
            prompt = self._template.format(messages=render_input(prev, render_transcript(plan.messages, chars)))
            if budget is None or count(prompt) <= budget:
                return (yield _Call(prompt, plan.reply_cap))
        assert budget is not None
        entries = render_transcript(plan.messages, CHUNK_TOOL_RESULT_CHARS)
        running = prev
        if running and budget - count(self._template.format(messages=render_input(running, []))) < MIN_CHUNK_TOKENS:
            # an earlier summary too large to leave room for any message: cut it, with a marker (never silently)
            bare = count(self._template.format(messages=render_input("", [])))
            running, _ = cut_to_tokens(running, max(1, budget - MIN_CHUNK_TOKENS - bare - 16), count)

        def fits(chunk: list[str]) -> bool:
            return count(self._template.format(messages=render_input(running, chunk))) <= budget

        while entries:
            chunk, entries = _take_chunk(entries, fits)
            running = yield _Call(self._template.format(messages=render_input(running, chunk)), plan.reply_cap)
        return running or ""

    @staticmethod
    def _drive(gen: Generator[_Call, str, str], call: Callable[[_Call], str]) -> str:
        try:
            request = next(gen)
            while True:
                request = gen.send(call(request))
        except StopIteration as done:
            return done.value

    # ------------------------------------------------------------------ the model call
    def _runnable(self, cap: int) -> Runnable:
        model: Runnable = self.model  # type: ignore[assignment]
        if self._cap_field:
            model = model.bind(**{self._cap_field: cap})
        return model.with_retry(retry_if_exception_type=is_transient, stop_after_attempt=self.max_retries + 1,
                                wait_exponential_jitter=True, exponential_jitter_params=_jitter_params(self.initial_delay))

    @staticmethod
    def _config() -> RunnableConfig:
        return {**SUMMARIZER_CONFIG, "tags": [TAG_NOSTREAM], "metadata": dict(SUMMARIZER_CONFIG["metadata"])}

    def _invoke(self, call: _Call, plan: _Plan) -> str:
        runnable, inputs = self._runnable(call.cap), [HumanMessage(content=call.prompt)]
        plan.calls += 1
        plan.input_tokens = max(plan.input_tokens, plan.counter.count_text(call.prompt))
        try:
            reply = _run_with_deadline(lambda: runnable.invoke(inputs, config=self._config()), self.timeout)
        except TimeoutError as exc:
            raise SummarizationError(f"summarizer model timed out after {self.timeout:g} s", "timeout") from exc
        except Exception as exc:
            raise self._error(exc) from exc
        return self._usable(reply, call.cap, plan.counter)

    async def _ainvoke(self, call: _Call, plan: _Plan) -> str:
        runnable, inputs = self._runnable(call.cap), [HumanMessage(content=call.prompt)]
        plan.calls += 1
        plan.input_tokens = max(plan.input_tokens, plan.counter.count_text(call.prompt))
        try:
            reply = await asyncio.wait_for(runnable.ainvoke(inputs, config=self._config()), self.timeout)
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise SummarizationError(f"summarizer model timed out after {self.timeout:g} s", "timeout") from exc
        except Exception as exc:
            raise self._error(exc) from exc
        return self._usable(reply, call.cap, plan.counter)

    def _error(self, exc: Exception) -> SummarizationError:
        attempts = self.max_retries + 1 if is_transient(exc) else 1
        return SummarizationError(f"summarizer model failed ({attempts} attempt(s)): {type(exc).__name__}: {exc}", "error")

    @staticmethod
    def _usable(reply: Any, cap: int, counter: TokenCounter) -> str:
        """The reply's text, cut at `cap` tokens with a marker; raises SummarizationError("no_text") when it has
        no text (empty, or only reasoning / other blocks)."""
        if not isinstance(reply, BaseMessage):
            raise SummarizationError(f"summarizer model returned a {type(reply).__name__}, not a message", "no_text")
        text = reply_text(reply).strip()
        if text.startswith(SUMMARY_PREFIX.strip()):
            text = text[len(SUMMARY_PREFIX.strip()):].strip()
        if text.rstrip(".!").strip().lower() in PLACEHOLDER_REPLIES:
            raise SummarizationError(f"summarizer model answered a placeholder ({text[:60]!r}), not a summary",
                                     "no_text")
        if not text:
            kinds = sorted({b.get("type", "?") for b in reply.content if isinstance(b, dict)}) if isinstance(reply.content, list) else []
            what = f"only {', '.join(kinds)} blocks" if kinds else "no text"
            raise SummarizationError(f"summarizer model answered {what}: nothing usable as a summary", "no_text")
        text, cut = cut_to_tokens(text, cap, counter.count_text)
        if not cut and _stopped_at_cap(reply):
            text += CUT_MARKER.format(cap=cap)
        return text

    # ------------------------------------------------------------------ committing
    def _commit(self, state: LadderState, plan: _Plan, text: str | None, fallback_reason: str | None) -> None:
        """Guard `text` (the ledger when None), put the summary in place of `plan.replaced` unless it would not
        be smaller than they are, and record the figures in `state.details`."""
        count = plan.counter.count_text
        summarizer = "model" if text is not None else "ledger"
        if text is None:
            text = build_ledger([state.slots[i].message for i in plan.replaced], max_tokens=plan.reply_cap,
                                count_text=count)
        if plan.facts_cap is not None:
            result = self._guard.guard(text, plan.identifiers, count, plan.facts_cap)
            text, kept, added, omitted = result.text, result.kept_by_summary, result.added, result.omitted
        else:
            kept = sum(1 for i in plan.identifiers if contains(text, i))
            added, omitted = 0, len(plan.identifiers) - kept
        message = make_summary_message(text, message_id=f"lc-compaction-summary-{uuid.uuid4().hex[:12]}", role=self.role)
        replaced_tokens = sum(state.slots[i].tokens for i in plan.replaced)
        if state.counter.count_message(message) >= replaced_tokens:
            # a summary no smaller than what it replaces saves nothing: keep the messages themselves
            state.details["summary_skipped"] = (f"the {summarizer}'s summary would not be smaller than the "
                                                f"{replaced_tokens} tokens it replaces")
            return
        n = len(plan.messages)
        merged = len(plan.replaced) - n
        detail = (f"{n} message(s) summarized by the {summarizer}" + (", earlier summary merged" if merged else "")
                  + (f" (fallback: {fallback_reason})" if fallback_reason else ""))
        state.put_summary(plan.replaced, message, strategy=self.name, detail=detail)
        d = state.details
        d["summary"] = text
        d["summarizer"] = summarizer
        if fallback_reason:
            d["fallback_reason"] = fallback_reason
        d["summarized_messages"] = d.get("summarized_messages", 0) + n
        d["summarizer_calls"] = d.get("summarizer_calls", 0) + plan.calls
        if plan.calls:
            d["summary_input_tokens"] = max(d.get("summary_input_tokens", 0), plan.input_tokens)
        d["summary_tokens"] = state.counter.count_message(message)
        d["identifiers_evicted"] = len(plan.identifiers)
        d["identifiers_kept_by_summary"] = kept
        d["identifiers_added_by_guard"] = added
        d["identifiers_omitted"] = omitted


def _take_chunk(entries: list[str], fits: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
    """The longest run of leading `entries` for which `fits` holds (at least one entry: a single entry too long
    for the room is split by characters and its rest left for the next chunk). Returns (chunk, rest)."""
    if not fits(entries[:1]):
        first = entries[0]
        keep = len(first)
        while keep > 1 and not fits([first[:keep] + " [continued]"]):
            keep = keep * 3 // 4
        rest = ("[continued] " if keep >= 64 else "") + first[keep:]  # the mark never outgrows the progress
        return [first[:keep] + " [continued]"], [rest, *entries[1:]]
    lo, hi = 1, len(entries)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(entries[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return entries[:lo], entries[lo:]


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


def _jitter_params(initial_delay: float) -> dict[str, float]:
    """`Runnable.with_retry`'s `exponential_jitter_params` for a first wait of `initial_delay` seconds. Its
    TypedDict only knows `initial` (tenacity >= 9.1 calls it `multiplier` and warns about `initial`: a
    DeprecationWarning when `initial_delay` is not the default 1 s; `multiplier` would be dropped by LangChain)."""
    if initial_delay == 1:
        return {}  # tenacity's own default: initial 1 s, jitter up to 1 s
    return {"initial": initial_delay, "jitter": initial_delay}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
