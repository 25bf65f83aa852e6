"""Strategy 3: replace the evicted part with one summary, written by a chat model or by the deterministic ledger.

What is evicted is what the ladder allows (`LadderState.removable_exchanges()`: whole exchanges and whole steps,
tool blocks never split, outside the protected part), all of it in one pass, so the next calls do not summarize
again; an earlier summary (recognized by its marks, or by its text when they were lost) is passed to the summarizer
explicitly and replaced together with them: at most one summary message. A pass whose only evictable content is
the earlier summary does nothing.

Where the summary goes: never inside the running request's tool loop (its steps are never evicted; they are folded
into its progress note, `progress.py`), and never so that two user turns meet that were not side by side: it takes
the place of the first run of replaced messages whose removal would let two requests meet, in the role that keeps
the turns alternating (an assistant turn between two requests, a user turn between tool results and the next
assistant step: `ladder.summary_role`); steps between a request and a later assistant message of its exchange, where
no role fits, are folded into a progress note instead of summarized.

The model calls (`model.invoke` in `apply`, `model.ainvoke` in `aapply`; both drive one generator, `_pass`):

- input (transcript.py): the prompt (`summary_prompt`, a preset or a template with `{messages}`) with the earlier
  summary and the evicted messages as readable text (`render_transcript`: no reprs, no base64, long tool results
  cut). It never exceeds `trim_tokens_to_summarize` tokens: tool results are cut shorter first, then the messages
  are summarized in chunks, oldest first, each chunk's call carrying the summary so far (the beginning is never
  dropped; the reply to a chunk is capped so that it leaves room for the next one, and an earlier summary too
  long for that room is shortened, reported in `details["previous_summary_cut"]`). When the bound leaves too
  little room for chunks (`transcript.NoRoomError`: it depends on the history, so it is never refused at
  construction), the ledger is written instead, its reason in `details["fallback_reason"]`;
- the call (summary_call.py): config `{"tags": [TAG_NOSTREAM], "metadata": {"lc_source": "summarization"}}`, no
  tools; output at most `max_summary_tokens` tokens, asked of the model (`max_tokens` or its equivalent, when the
  model has such a field) AND enforced by cutting the reply with a marker (OpenAI-compatible servers such as
  llama.cpp's ignore `max_completion_tokens`); only text blocks are used: never reasoning blocks, signatures or
  reprs; transient errors are retried (`max_retries`), by one retry layer, ours: the model's own client retries
  are turned off in a copy (`summary_call.without_own_retries`), so they do not multiply;
- one deadline, `timeout` seconds from the first call, bounds the whole summarization of one compaction: every
  attempt, every wait between attempts, every chunk, both passes of the ladder. A pass after a failure in the
  same compaction does not call the model again: it reuses that failure;
- after a failure the model is not called for `cooldown` seconds (the failure is reported again, naming the
  error that started it), for every thread and task using this strategy; the ladder goes on meanwhile (the
  cheaper strategies, and the ledger when the history must shrink).

If the call fails, times out, or answers no text, nothing is removed on that account. By default
(`fallback="auto"`) the history is left as it is while it still fits the window (the soft pass: the next call
tries again), and the deterministic ledger (`ledger.build_ledger`) is written instead only when the history must
shrink to fit the window (the hard pass); `details["fallback_reason"]` says why either way. `fallback="ledger"`
always writes the ledger, `fallback="raise"` raises `SummarizationError` (the history is untouched), and
`fallback="skip"` always leaves the history to the next strategy. A failure is reported in
`details["failures"]["summarize"]` and `details["summarizer_failure"]` (its reason), and as
`stop_reason="strategy_failed"` when nothing else changed the history; the front doors' event and log line carry it.

Then the provenance guard (`provenance.ProvenanceGuard`) fences, attributed to their tool, the tool-derived text
the summary holds outside the data fence (`markers.UNTRUSTED_DATA_FENCE`: tool output never speaks in the user's
voice), and the fact guard (`facts.FactGuard`) appends the identifiers of the replaced messages that the summary
left out (the tool-derived ones fenced).
The output cap is lowered to the room the rest of the history leaves under the goal (minus the facts line; not
below `MIN_SUMMARY_TOKENS`), so the result lands under the target whenever the protected part allows it; a
summary that would not be smaller than what it replaces is not put in. Figures go to `state.details` (moved to
`CompactionResult.details`; the text to `CompactionResult.summary`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Union

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from lc_compaction._content import content_text
from lc_compaction._drive import adrive, drive
from lc_compaction.agent_request import AgentRequest, same_model
from lc_compaction.ladder import LadderState
from lc_compaction.markers import is_summary, make_summary_message, summary_text
from lc_compaction.progress import fold_steps, keep_progress
from lc_compaction.facts import FactGuard, Identifier, contains, tool_names, tool_of, trust
from lc_compaction.strategies.ahead import AheadJob, AheadJobs, Run, scope, start
from lc_compaction.strategies.ledger import build_ledger
from lc_compaction.strategies.prompts import opening, resolve_prompt, shared_instruction
from lc_compaction.strategies.provenance import ProvenanceGuard
from lc_compaction.strategies.summary_call import Cooldown, SummarizationError, SummaryCall, SummaryRequest
from lc_compaction.strategies.transcript import CUT_MARKER, NoRoomError, cut_to_tokens, render_input, summary_prompts
from lc_compaction.tokens import ApproximateCounter, TokenCounter

__all__ = ["CUT_MARKER", "DEFAULT_COOLDOWN", "DEFAULT_INITIAL_DELAY", "DEFAULT_MAX_RETRIES",
           "DEFAULT_MAX_SUMMARY_TOKENS", "DEFAULT_TIMEOUT", "DEFAULT_TRIM_TOKENS_TO_SUMMARIZE", "MIN_SUMMARY_TOKENS",
           "Fallback", "SummarizationError", "Summarize"]

DEFAULT_MAX_SUMMARY_TOKENS = 1000
"""Default output cap of the summary, in tokens (about 750 English words): room for the default prompt's five
parts on a long conversation, and small beside the 60% target of even an 8,000-token window (4,800 tokens).
LangChain's SummarizationMiddleware sets no cap; ours is needed to keep the result under the target."""

DEFAULT_TRIM_TOKENS_TO_SUMMARIZE = 4000
"""Default bound of the summarizer's input, in tokens: the value of LangChain's SummarizationMiddleware
(`_DEFAULT_TRIM_TOKEN_LIMIT`). Unlike LangChain, which keeps only the last 4,000 tokens, a larger evicted part
is condensed (tool results cut, then chunks), never dropped."""

DEFAULT_TIMEOUT = 60.0
"""Default deadline of the whole summarization of one compaction (every attempt, wait, chunk and pass), in
seconds. A judgment call: a minute bounds how long a stalled provider blocks the agent."""

DEFAULT_COOLDOWN = 60.0
"""Default time after a failure during which the summarizer is not called again, in seconds. A judgment call:
a failing provider then costs one call a minute instead of one per model call of the agent, and an outage
shorter than that is retried soon enough."""

DEFAULT_MAX_RETRIES = 2
"""Default retries of a transient error: 3 attempts in all, as `Runnable.with_retry` (`stop_after_attempt=3`)
and LangChain's SummarizationMiddleware."""

DEFAULT_INITIAL_DELAY = 1.0
"""Default first wait before a retry, in seconds, doubling each time with up to as much random jitter:
tenacity's `wait_exponential_jitter(initial=1, jitter=1)`, `Runnable.with_retry`'s default."""

MIN_SUMMARY_TOKENS = 64
"""Smallest output cap given to the model (tokens) when the room under the goal is tighter than that."""

logger = logging.getLogger(__name__)

ContextSize = tuple[str, Union[int, float]]
"""`("messages", N)`, `("tokens", N)` or `("fraction", f)` of the window: `policy.ContextSize`, the format of
`ahead_at` (validated against the trigger by the `CompactionPolicy` that holds the strategy)."""

Fallback = Literal["auto", "ledger", "raise", "skip"]
"""What `Summarize` does when the model fails: write the ledger, raise `SummarizationError`, or skip the pass."""


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
    at: int                        # index of the replaced message whose place the summary takes
    role: str                      # the summary's role there ("human" or "ai": `ladder.summary_role`)
    folds: list[list[str]]         # runs of steps (message ids) folded into a progress note instead
    calls: int = 0
    input_tokens: int = 0
    said_chars: int | None = None  # the said line's bound (characters; `said_room`), None: the guard's own
    keys: bool = True              # the facts line writes its numbers' keys (False: they do not fit the room)


@dataclass
class _Place:
    """Where a summary goes (`Summarize._place`): the index whose place it takes (None: nowhere keeps the roles
    alternating), its role, the indices it replaces, and the runs of steps (message ids) to fold instead."""

    at: int | None
    role: str
    replaced: list[int]
    folds: list[list[str]]


@dataclass
class Summarize:
    """Summarize the evicted part with a chat model (or the deterministic ledger), guarded by the fact guard.

    Args:
        model: a `BaseChatModel`, an `init_chat_model` string ("openai:gpt-4o-mini"), or None for the ledger.
            Pass the chat model itself, not a `bind_tools(...)` binding: no tools are sent.
        summary_prompt: a preset name ("default", "customer_support", "coding", "research") or a `str.format`
            template with `{messages}` (LangChain's `SummarizationMiddleware.summary_prompt` convention).
        trim_tokens_to_summarize: bound of one summarizer call's input, tokens (prompt, earlier summary and
            messages); None for no bound. Default 4,000 (LangChain's). Any bound that holds the prompt itself is
            accepted, as LangChain accepts any: what a history needs beyond that (room for an earlier summary,
            for chunks of a long evicted part) is met at run time (the earlier summary shortened; the ledger when
            chunks would not fit; both reported).
        max_summary_tokens: output cap, tokens (asked of the model and enforced by a cut). Default 1,000. It is
            lowered when the room under the goal is smaller (not below `MIN_SUMMARY_TOKENS`).
        timeout: deadline of the whole summarization of one compaction (its attempts, the waits between them,
            its chunks and both passes of the ladder), seconds; None for none. Default 60. Async:
            `asyncio.wait_for` (the call is cancelled). Sync: each attempt runs in a daemon thread that is
            abandoned at the deadline (its late answer is discarded). Works for any `BaseChatModel`.
        max_retries: retries of a transient error (`summary_call.is_transient`). Default 2 (3 attempts). These
            are the only retries: the model's own (`ChatOpenAI.max_retries` and the like) are turned off in a
            copy of the model (`summary_call.without_own_retries`; your model object is not changed).
        initial_delay: first wait before a retry, seconds (then doubling, with up to as much jitter). Default 1.
        cooldown: after a failure, seconds during which the model is not called again (the failure is
            reported again, `fallback` applies); 0 for none. Default 60. Shared by every thread and asyncio
            task that uses this strategy object.
        clock: the cooldown's clock, a monotonic clock in seconds (default `time.monotonic`; for tests).
        fallback: when the model fails: "auto" (default: "skip" while the history fits the window, "ledger"
            when it must shrink to fit it), "ledger" (write the ledger instead, reported in
            `details["fallback_reason"]`), "raise" (`SummarizationError`, history untouched) or "skip" (change
            nothing; the next strategy of the ladder goes on).
        fact_guard: True (default `FactGuard()`), False (off: identifiers are still counted for the report), or
            a `FactGuard` with your patterns and bound.
        role: "human" (default) or "ai": the summary message's preferred type. Never "system" (a mid-history system
            message is rejected by Anthropic and Gemini). Where the preferred role would put two user turns (or
            an assistant turn and a tool call) side by side, the summary takes the other one: between two requests
            it is an assistant turn, between tool results and the next assistant step a user turn
            (`ladder.summary_role`; the role used is `details["summary_role"]`). Steps between a request and a
            later assistant message of the same exchange, where no role fits, are folded into a progress note
            (`progress.fold_steps`), never summarized; so are the running request's old steps, when needed.
            Whatever the role, tool-derived text in the summary is fenced (see "Tool output" below).
        redact: a callable on text (str -> str), e.g. your PII redaction, applied to everything the summarizer
            receives (each message's text and arguments, the earlier summary; the ledger's entries) and to the
            identifiers of the fact guard's lines. None (default): nothing is redacted. It should leave the
            fence strings (`markers.UNTRUSTED_DATA_FENCE`) alone. A cache-sharing request (below) repeats the
            agent's own request, which is not redacted: the summary's text is redacted instead.
        share_agent_request: when the front door gives the agent's latest model request (`compact(...,
            agent_request=...)`: the middleware and the node do) and `model` is the agent's model
            (`agent_request.same_model`), the summary request repeats that request byte for byte (the same
            system message, messages, tools and settings) with the instruction appended as the last user
            message, so the provider bills its whole prefix as a cache read (`lc_compaction.agent_request`).
            It is one call (no chunks: the agent's request fit its window) and `trim_tokens_to_summarize` does
            not apply. Otherwise, or with False, the transcript prompt. `details["summary_request"]` says which
            ("agent" or "transcript"). Default True.
        ahead_at: write the summary ahead of time, in the background, once the history is above this size and
            still below the trigger: a `ContextSize` like the policy's trigger (`("fraction", f)` of the window,
            `("tokens", N)`, `("messages", N)`, strictly above; checked by the `CompactionPolicy` that holds
            the strategy to be below its trigger, or below the budget when the budget is the trigger: ValueError
            naming `ahead_at`). None (default): off, every summary is written inline by the call that compacts.
            The call that crosses it (`compact`: a daemon worker thread; `acompact` and the async doors: an
            asyncio task on the running loop) summarizes what this strategy's plan would summarize at that
            moment (the same `_plan`), recording exactly the messages it read (their ids and content hashes, in
            order: `strategies.ahead`); it runs in an empty context, without your run's callbacks, so it never
            shows in your stream. The call that triggers uses it when it is ready and the messages it read still
            start what the pass replaces, unchanged and in place: the summary takes their place (through the
            same commit as an inline one: provenance and fact guards, the cap of the room left now) and every
            message after them stays as it is, those that arrived meanwhile included; the ladder goes on if the
            history still does not fit (a hard pass may summarize the rest inline). Otherwise (not ready: the
            call does not wait; an edited or removed message; a summary no smaller than what it replaces) it
            compacts inline as without this option. At most one job per conversation (keyed by its first
            non-system message) and `ahead.AHEAD_SCOPES` conversations per strategy object, in memory only: after
            a restart (a new process or strategy object) the compaction is inline; no message is lost or
            duplicated either way. A background failure is logged, reported in `details["ahead"]` on the next
            call, and starts the cooldown as an inline one does; a cancelled task (its event loop closed:
            `asyncio.run` ends) costs only its request. The background call uses the transcript prompt or the
            agent's request as an inline one would (`share_agent_request`).

    Tool output: a summary speaks in the user's voice, so no text that came from tool results may read as the
    user's. The transcript fences each tool result (`markers.UNTRUSTED_DATA_FENCE`, after the tool's name), the
    presets tell the model to report instructions found there as content and never as requests, the ledger
    fences the error results it quotes, and after the summary is written the provenance guard
    (strategies/provenance.py) fences, attributed to their tool, the identifiers that come from tool results
    only and the runs of words copied from them; the fact guard puts tool-derived identifiers on a fenced line
    of their own. `markers.outside_fences(summary_text(m))` is the part that is not tool data.

    Reports, in `state.details` (then `CompactionResult.details`; the text goes to `CompactionResult.summary`):
        summarizer: "model", "ledger" (no model, or the fallback) or "none" (`fallback="skip"` after a failure).
        fallback_reason: why the model's summary was not used (only when it was not): the error's text, or why
            `trim_tokens_to_summarize` left no room for chunks (the model was not called).
        summarizer_failure: the failure's reason ("error", "timeout", "no_text", or "cooldown": not called).
        failures: {"summarize": the error's text} (see `LadderState.record_failure`).
        summarized_messages: conversation messages replaced (an earlier summary not counted), over the passes.
        summarizer_calls: model calls made (chunks; retries not counted); summary_input_tokens: the largest
            input of one call (tokens); summary_tokens: the summary message's tokens (the policy's counter).
        summary_requests: what each summary call that answered sent and received, in order (what a bill counts:
            `billing.BillMeter.bill_summary`, `replay`): `[{"form", "input_tokens", "prefix_tokens",
            "prefix_messages", "output_tokens"}]`. form: "agent" (the agent's request repeated, the instruction
            appended: `share_agent_request`) or "transcript" (the prompt as one user message; one entry per
            chunk); input_tokens: the request's messages and reply priming, by the policy's counter;
            prefix_tokens / prefix_messages: its leading messages that repeat the agent's request, sent alike
            (what a provider's cache can read; 0 for a transcript prompt); output_tokens: the reply's tokens as
            used (after the cut at the cap), by the counter of text. A call that failed is not listed (what a
            provider bills for it depends on where it failed). A summary written ahead of time reports its
            calls with the call that puts it in.
        identifiers_evicted: distinct identifiers in what the summary replaced (the earlier summary included;
        over the passes: a summary the first pass wrote and the second replaced counts what it replaced);
        identifiers_kept_by_summary: how many of them the summary's own text holds (the figure without the
        guard); identifiers_added_by_guard: how many the facts line added; identifiers_omitted: how many are
        in neither (the guard off, or over its bound).
        tool_text_fenced: pieces of tool-derived text the provenance guard fenced (the model's summary or the
            ledger's entries).
        summary_skipped: why a written summary was not put in (it would not have been smaller than what it
            replaced); the messages stay.
        previous_summary_cut: `{"tokens_before", "tokens_after"}` of an earlier summary shortened to leave room
            for the messages under `trim_tokens_to_summarize`.
        ahead: with `ahead_at`, what became of the background summary: {"status": "started" | "running" |
            "ready" | "used" | "changed" | "no_place" | "not_smaller" | "failed" | "cancelled" | "cooldown" |
            "not_started", "covered": messages it read, "error": the failure's text, "kept_after": messages the
            pass would have replaced that stayed as they were, "previous": the report of the job it replaced}.

    Raises:
        ValueError: a setting is invalid for every history (the message names it): a value of the wrong type or
            range, a prompt without `{messages}`, a `trim_tokens_to_summarize` that cannot hold the prompt alone
            (counted at 4 characters a token).
    """

    model: str | BaseChatModel | None = None
    summary_prompt: str = "default"
    trim_tokens_to_summarize: int | None = DEFAULT_TRIM_TOKENS_TO_SUMMARIZE
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    timeout: float | None = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = DEFAULT_INITIAL_DELAY
    cooldown: float = DEFAULT_COOLDOWN
    clock: Callable[[], float] = time.monotonic
    fallback: Fallback = "auto"
    fact_guard: bool | FactGuard = True
    role: Literal["human", "ai"] = "human"
    redact: Callable[[str], str] | None = None
    share_agent_request: bool = True
    ahead_at: ContextSize | None = None
    name: str = "summarize"
    _template: str = field(init=False, repr=False)
    _guard: FactGuard = field(init=False, repr=False)
    _call: SummaryCall | None = field(init=False, repr=False, compare=False, default=None)
    _cooldown: Cooldown = field(init=False, repr=False, compare=False)
    _ahead: AheadJobs = field(init=False, repr=False, compare=False)

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
            raise ValueError(f"max_summary_tokens: must be an int >= {MIN_SUMMARY_TOKENS} tokens, "
                             f"got {self.max_summary_tokens!r}")
        if self.trim_tokens_to_summarize is not None:
            # only what no history can change: the prompt alone must fit (an earlier summary, the evicted part's
            # size are met at run time: `summary_prompts` shortens the one, the ledger stands in when no room)
            bare = ApproximateCounter().count_text(self._template.format(messages=render_input(None, [])))
            if not _positive_int(self.trim_tokens_to_summarize) or self.trim_tokens_to_summarize <= bare:
                raise ValueError(
                    f"trim_tokens_to_summarize: {self.trim_tokens_to_summarize!r} tokens cannot hold the prompt "
                    f"alone (about {bare} tokens at 4 characters a token) and any message; give more (or None for "
                    "no bound)")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                                         or not self.timeout > 0):
            raise ValueError(f"timeout: must be a positive number of seconds or None, got {self.timeout!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries: must be an int >= 0, got {self.max_retries!r}")
        if (isinstance(self.initial_delay, bool) or not isinstance(self.initial_delay, (int, float))
                or self.initial_delay < 0):
            raise ValueError(f"initial_delay: must be >= 0 seconds, got {self.initial_delay!r}")
        if (isinstance(self.cooldown, bool) or not isinstance(self.cooldown, (int, float))
                or not self.cooldown >= 0):
            raise ValueError(f"cooldown: must be >= 0 seconds, got {self.cooldown!r}")
        if not callable(self.clock):
            raise ValueError(f"clock: expected a callable returning seconds, got {type(self.clock).__name__}")
        self._cooldown = Cooldown(float(self.cooldown), self.clock)
        self._ahead = AheadJobs()
        if isinstance(self.ahead_at, list):
            self.ahead_at = (self.ahead_at[0], self.ahead_at[1]) if len(self.ahead_at) == 2 else tuple(self.ahead_at)
        if self.ahead_at is not None and (not isinstance(self.ahead_at, tuple) or len(self.ahead_at) != 2
                                          or self.ahead_at[0] not in ("messages", "tokens", "fraction")):
            raise ValueError(f"ahead_at: expected None or a tuple like ('fraction', 0.6), ('tokens', N) or "
                             f"('messages', N), got {self.ahead_at!r}")
        if self.fallback not in ("auto", "ledger", "raise", "skip"):
            raise ValueError(f"fallback: must be 'auto', 'ledger', 'raise' or 'skip', got {self.fallback!r}")
        if self.redact is not None and not callable(self.redact):
            raise ValueError(f"redact: expected a callable str -> str or None, got {type(self.redact).__name__}")
        if not isinstance(self.fact_guard, (bool, FactGuard)):
            raise ValueError(f"fact_guard: expected True, False or a FactGuard, got {type(self.fact_guard).__name__}")
        self._guard = self.fact_guard if isinstance(self.fact_guard, FactGuard) else FactGuard()
        make_summary_message("", role=self.role)  # raises ValueError naming the role
        if self.model is not None:
            self._call = SummaryCall(self.model, self.timeout, self.max_retries, self.initial_delay)

    # ------------------------------------------------------------------ the pass
    def apply(self, state: LadderState) -> None:
        """Summarize the evicted part of `state` (model via `invoke`, or the ledger). See the module docstring.

        Raises:
            SummarizationError: the model failed and `fallback="raise"` (the state is unchanged).
        """
        drive(self._pass(state), self._call.invoke if self._call else _no_call)

    async def aapply(self, state: LadderState) -> None:
        """Async twin of `apply`: the model is called with `ainvoke` under `asyncio.wait_for`."""
        await adrive(self._pass(state), self._call.ainvoke if self._call else _no_call)

    def _pass(self, state: LadderState) -> Generator[SummaryRequest, str, None]:
        """One pass: the summary (`_summary_pass`), then, unless the model failed and the pass was skipped, the
        running request's progress note if the history is still over the limit (`progress.keep_progress`: the
        loop's steps are never summarized).

        In the relaxed second pass (the history fits and is under the trigger, only above the target) a model that
        already wrote this compaction's summary is not called again: one model call buys the compaction, and a
        second would only summarize the summary it just wrote."""
        if state.pass_name == "relaxed" and self._call is not None and self._written(state):
            return
        if (yield from self._summary_pass(state)):
            keep_progress(state, strategy=self.name, guard=self._fold_guard())

    def _summary_pass(self, state: LadderState) -> Generator[SummaryRequest, str, bool]:
        """Plan, yield each model call (`summary_prompts`) and receive its text, then commit the summary (the
        ledger when there is no model, or per `fallback` when the model failed) and the folds the plan holds.
        Returns False when the model failed and the history was left as it is."""
        if self.ahead_at is not None and self._swap_ahead(state):  # a summary written ahead of time
            return True
        plan = self._plan(state)
        if plan is None:
            return True
        if not plan.messages:  # only steps that no summary can stand in for: fold them, no model call
            self._fold(state, plan.folds)
            return True
        text, failure, reason = None, None, None
        if self._call is not None:
            # --- the call's failure handling (section "a failing summarizer costs one call") ---
            memo = state.memo.setdefault(("summarize", id(self)), {})
            failure = memo.get("failure") or self._cooldown.check()
            if failure is None:
                if self.timeout is not None:
                    memo.setdefault("deadline", time.monotonic() + self.timeout)
                try:
                    text = yield from self._model_text(state, plan, memo.get("deadline"), state.details)
                except NoRoomError as exc:  # the bound is too small for this history: the ledger, reported
                    self._commit(state, plan, None, str(exc))
                    self._fold(state, plan.folds)
                    return True
                except SummarizationError as exc:
                    failure = memo["failure"] = exc
                    self._cooldown.failed(exc)
            if failure is not None:
                reason = self._on_failure(state, failure)
                if self._skips(state):
                    self._record_skip(state, reason)
                    return False
        self._commit(state, plan, text, reason)
        self._fold(state, plan.folds)
        return True

    def _model_text(self, state: LadderState, plan: _Plan, deadline: float | None,
                    report: dict[str, Any]) -> Generator[SummaryRequest, str, str]:
        """Yield each model call of `plan`'s summary (`summary_prompts`, or one cache-sharing request) and return
        the model's text (redacted when the request was the agent's), counting the calls and the largest input
        in `plan`; `report` receives "summary_request" and the transcript's figures.

        Raises:
            NoRoomError: `trim_tokens_to_summarize` leaves no room for chunks of this history.
            SummarizationError: a call failed (thrown in by the driver).
        """
        count = plan.counter.count_text
        shared = self._shared_request(state, plan)
        agent, beside = (shared[0], shared[2]) if shared is not None else (None, 0)
        report["summary_request"] = "transcript" if shared is None else "agent"
        prompts = (summary_prompts(self._template, plan.messages, plan.previous_text,
                                   self.trim_tokens_to_summarize, count, redact=self.redact,
                                   report=report)
                   if shared is None else _one_call(shared[1]))
        try:
            prompt, cap = next(prompts)
            while True:
                plan.calls += 1
                sent = count(prompt) + beside
                plan.input_tokens = max(plan.input_tokens, sent)
                reply_cap = plan.reply_cap if cap is None else max(MIN_SUMMARY_TOKENS,
                                                                   min(plan.reply_cap, cap))
                request = SummaryRequest(prompt, reply_cap, count, deadline, agent)
                reply = yield request
                report.setdefault("summary_requests", []).append(
                    _sent(state, agent, prompt, beside, count(reply) if isinstance(reply, str) else 0))
                prompt, cap = prompts.send(reply)
        except StopIteration as done:
            text: str = done.value
            if agent is not None and self.redact is not None and text is not None:
                text = self.redact(text)  # the agent's request is not redacted: its summary is
            return text

    def _shared_request(self, state: LadderState, plan: _Plan) -> tuple[AgentRequest, str, int] | None:
        """The agent's request a cache-sharing summary request repeats (`agent_request`), the instruction
        appended to it and the request's own tokens (its messages, by the state's counter), or None for the
        transcript prompt: sharing is off, the front door gave no request
        (`compact(agent_request=...)`), the summarizer is another model (`same_model`), the request did not hold
        every message replaced (or not side by side), or with the instruction it is over the window
        (`LadderState.window_tokens`, tokens)."""
        agent = state.agent_request
        if not self.share_agent_request or agent is None or not same_model(self.model, agent.model):
            return None
        at = agent.position([state.slots[i].message.id or "" for i in plan.replaced])
        if not at or sorted(at) != list(range(min(at), max(at) + 1)):
            return None
        names = tool_names(agent.messages)
        first, last = (_opening(agent.messages[k], names) for k in (min(at), max(at)))
        instruction = shared_instruction(self._template, first, last, max(at) - min(at) + 1)
        window = state.window_tokens
        tokens = _tokens(state, agent)
        if window is not None and tokens + plan.counter.count_text(instruction) > window:
            return None
        return agent, instruction, tokens

    def _fold(self, state: LadderState, folds: list[list[str]]) -> None:
        """Fold each run of steps (given by their message ids: the summary moved the indices) into a progress
        note (`progress.fold_steps`), the latest run first."""
        for ids in reversed(folds):
            at = {m.id: i for i, m in enumerate(state.messages)}
            inside = {at[i] for i in ids if i in at}
            steps = [st for st in state.steps() if st.start in inside]
            if len(inside) == len(ids) and sum(len(st.indices) for st in steps) == len(inside):
                fold_steps(state, steps, strategy=self.name, guard=self._fold_guard())

    def _written(self, state: LadderState) -> dict[str, list[Identifier]]:
        """The summaries this strategy wrote in this compaction (by message id), each with the identifiers of
        what it replaced: a second pass that replaces such a summary counts them again (`_with_earlier_passes`)."""
        written: dict[str, list[Identifier]] = state.memo.setdefault(("summarize-written", id(self)), {})
        return written

    def _fold_guard(self) -> FactGuard | None:
        """The fact guard the progress note's lines use when this strategy folds (None when the guard is off)."""
        return None if self.fact_guard is False else self._guard

    def _skips(self, state: LadderState) -> bool:
        """After a failure: leave the history as it is (True) or write the ledger (False)."""
        if self.fallback == "auto":
            return state.pass_name != "hard"
        return self.fallback == "skip"

    def _on_failure(self, state: LadderState, exc: SummarizationError) -> str:
        """Report `exc` (`details["failures"]`, `details["summarizer_failure"]`), or raise it with
        `fallback="raise"`; returns its text."""
        if self.fallback == "raise":
            raise exc
        state.record_failure(self.name, str(exc))
        state.details["summarizer_failure"] = exc.reason
        return str(exc)

    @staticmethod
    def _record_skip(state: LadderState, reason: str) -> None:
        state.details["summarizer"] = "none"
        state.details["fallback_reason"] = reason

    # ------------------------------------------------------------------ summaries ahead of time
    def ahead_wanted(self, messages: Sequence[BaseMessage]) -> tuple[bool, dict[str, Any] | None]:
        """For a call that finds `messages` above `ahead_at` and below the trigger: whether to start a background
        summary (`start_ahead`), and the report for `details["ahead"]` (None: nothing to say). Cheap (one list
        comparison): no new job while this history's job runs or is ready with what it read still in place,
        nor without a model (the ledger costs no wait), nor during the cooldown. A job that ended without a
        summary (failed, cancelled) or whose messages changed is dropped here, its outcome reported once."""
        if self._call is None or self.ahead_at is None:
            return False, None
        key = scope(messages)
        job = self._ahead.get(key)
        report: dict[str, Any] | None = None
        if job is not None:
            status = job.outcome()
            if status in ("running", "ready") and job.in_place(messages):
                return False, None
            self._ahead.pop(key)
            report = None if status == "empty" else job.to_dict()
            if status in ("running", "ready"):
                report = {**job.to_dict(), "status": "changed"}
                _cancel(job)
        cooling = self._cooldown.check()
        if cooling is not None:
            return False, report or {"status": "cooldown", "error": str(cooling)}
        return True, report

    def start_ahead(self, messages: Sequence[BaseMessage], state: Callable[[], LadderState],
                    run: Run) -> dict[str, Any] | None:
        """Start summarizing in the background what this strategy would summarize now of `messages`, the
        history of the call: `state()` gives the ladder's state as a triggered soft pass would see it (built in
        the background too), `_plan` (the same rule as a triggered pass) says what to summarize, and the job
        records exactly the messages it read (`ahead.AheadJob`). In a worker thread (`run="thread"`) or an asyncio
        task on the running loop (`run="task"`; the planning in a worker thread, off the loop). Returns the report
        for `details["ahead"]` ({"status": "started"}), or None without a model. Its failure (logged; reported
        on the next call; the cooldown starts as after an inline failure) and its cancellation never raise into
        a call."""
        call = self._call
        key = scope(messages)
        if call is None or key is None:
            return None
        job = AheadJob(key=key)

        def plan() -> tuple[LadderState, _Plan] | None:
            st = state()
            p = self._plan(st)
            if p is None or not p.messages:
                return None
            job.read(st.messages, p.replaced)
            job.identifiers = p.identifiers  # what the guard extracts of them: not again at the compacting call
            return st, p

        def steps(st: LadderState, p: _Plan) -> Generator[SummaryRequest, str, str]:
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            return self._model_text(st, p, deadline, job.report)

        def work() -> str | None:
            planned = plan()
            if planned is None:
                return None
            text = drive(steps(*planned), call.invoke)
            job.calls, job.input_tokens = planned[1].calls, planned[1].input_tokens
            return text

        async def awork() -> str | None:
            planned = await asyncio.to_thread(plan)
            if planned is None:
                return None
            text = await adrive(steps(*planned), call.ainvoke)
            job.calls, job.input_tokens = planned[1].calls, planned[1].input_tokens
            return text

        self._ahead.put(job)
        start(job, run, work, awork, self._ahead_failed)
        return {"status": "started"}

    def _ahead_failed(self, exc: BaseException) -> str:
        """Report a background summary's failure (logged) and start the cooldown for a model failure, as an inline
        one does; returns its text."""
        if isinstance(exc, SummarizationError):
            self._cooldown.failed(exc)
            text = str(exc)
        else:
            text = f"{type(exc).__name__}: {exc}"
        logger.warning("lc-compaction: the background summary failed (the next compaction is inline): %s", text)
        return text

    def _swap_ahead(self, state: LadderState) -> bool:
        """Put in the summary this history's background job wrote, in place of exactly the messages it read,
        when they start what the pass would replace (`_where`), unchanged (`AheadJob.matches`), and a place for
        them alone keeps the roles alternating: through `_commit` (the provenance and fact guards, the cap of the
        room left now), everything after them kept as it is. Returns False (compact inline) when there is no
        job, it is not ready (a running task is cancelled: its summary would never be used), its part changed,
        or its summary would not be smaller than what it replaces. The job is taken out either way;
        `details["ahead"]` says what became of it."""
        job = self._ahead.pop(scope(state.messages))
        if job is None:
            return False
        info = state.details["ahead"] = job.to_dict()
        if info["status"] != "ready" or job.text is None:
            _cancel(job)
            return False
        where = self._where(state)
        n = len(job.covered)
        if where is None or where.at is None or not job.matches(state.messages, where.replaced):
            info["status"] = "changed"
            return False
        covered = where.replaced[:n]
        place = self._place(state, covered)
        evicted = [i for i in covered if not is_summary(state.slots[i].message)]
        if place.at is None or place.replaced != covered or not evicted:
            info["status"] = "no_place"
            return False
        swap = self._plan_at(state, place, evicted, job.identifiers)
        swap.calls, swap.input_tokens = job.calls, job.input_tokens
        text, _ = cut_to_tokens(job.text, swap.reply_cap, swap.counter.count_text)
        done = len(state.actions)
        self._commit(state, swap, text, None)
        if len(state.actions) == done:  # not put in (no smaller than what it replaces): compact inline
            info["status"] = "not_smaller"
            return False
        state.details.update(job.report)  # the call's figures ("summary_request", "previous_summary_cut")
        self._fold(state, place.folds)
        info["status"] = "used"
        info["kept_after"] = len(where.replaced) - n
        return True

    # ------------------------------------------------------------------ planning
    @staticmethod
    def _evictable(state: LadderState) -> list[int]:
        """The conversation messages a summary may replace (`LadderState.removable_exchanges`), in order."""
        slots = state.slots
        return sorted({i for _, steps in state.removable_exchanges() for st in steps for i in st.indices
                       if not is_summary(slots[i].message)})

    def _place(self, state: LadderState, indices: list[int]) -> _Place:
        """Where the summary of `indices` goes (see the module docstring and `ladder.summary_role`).

        The replaced messages form runs. A run between a user turn and an assistant message (an exchange's
        steps after its request or its tool results, when later ones stay: `SummaryRun.folds_instead`) admits no
        role: it is folded into a progress note. The summary
        takes the place of the first run whose removal alone would let two user turns meet (or leave the first
        turn after the system prompt not the user's), else of the first run that holds conversation messages and
        where a role fits. A later run whose removal alone would break the order is left in place."""
        msgs = state.messages
        steps = {st.start: st for st in state.steps()}
        runs, folds = [], []
        for run in state.summary_runs(indices):
            if run.folds_instead() and self._whole_steps(run.indices, steps):
                folds.append([msgs[i].id or "" for i in run.indices])
            else:
                runs.append(run)
        host = next((r for r in runs if r.breaks_order()), None)
        if host is None:
            placeable = [r for r in runs if r.role(self.role)]
            host = next((r for r in placeable if not all(is_summary(msgs[i]) for i in r.indices)),
                        placeable[0] if placeable else None)
        role = host.role(self.role) if host is not None else None
        if host is None or role is None:
            return _Place(None, self.role, [], folds)
        replaced = [i for r in runs if r is host or not r.breaks_order() for i in r.indices]
        return _Place(host.indices[0], role, replaced, folds)

    @staticmethod
    def _whole_steps(indices: list[int], steps: dict[int, Any]) -> bool:
        """Whether `indices` (consecutive) are whole assistant steps."""
        i = indices[0]
        while i <= indices[-1]:
            st = steps.get(i)
            if st is None or st.kind != "assistant":
                return False
            i = st.end
        return i == indices[-1] + 1

    def _where(self, state: LadderState) -> _Place | None:
        """Where a summary of everything evictable and the earlier summaries goes (`_place`); None when there is
        no conversation message to evict."""
        previous = [i for i, s in enumerate(state.slots) if is_summary(s.message) and not s.pinned]
        evicted = self._evictable(state)
        if not evicted:
            return None
        return self._place(state, sorted(set(evicted) | set(previous)))

    def _plan(self, state: LadderState) -> _Plan | None:
        """What to replace (everything evictable, plus the earlier summaries), where, what to fold, and the caps;
        None when there is no conversation message to evict (an earlier summary alone is never summarized again),
        or when no place for the summary keeps the roles alternating and nothing is to be folded
        (`details["summary_skipped"]` says so)."""
        slots = state.slots
        place = self._where(state)
        if place is None:
            return None
        evicted = [i for i in place.replaced if not is_summary(slots[i].message)]
        if place.at is None or not evicted:
            if place.at is None and not place.folds:
                state.details["summary_skipped"] = "no place for a summary keeps the roles alternating"
            if not place.folds:
                return None
            return _Plan(replaced=[], messages=[], previous_text=None, identifiers=[], reply_cap=0, facts_cap=None,
                         counter=state.counter, at=0, role=place.role, folds=place.folds)
        return self._plan_at(state, place, evicted)

    def _plan_at(self, state: LadderState, place: _Place, evicted: list[int],
                 extracted: list[Identifier] | None = None) -> _Plan:
        """The plan of a summary of `place` (`evicted`: its conversation messages): what the fact guard
        extracts (`extracted`: already extracted from these very messages), the facts and said lines' room and
        the reply cap under the goal (tokens)."""
        slots = state.slots
        replaced, at, role = place.replaced, place.at, place.role
        assert at is not None  # a place where a summary goes
        counter = _text_counter(state.counter)
        guard = self._guard
        if extracted is None:
            extracted = guard.extract_messages(slots[i].message for i in replaced)
        identifiers = _with_earlier_passes(extracted,
                                           [slots[i].message for i in replaced], self._written(state))
        facts_cap = guard.max_tokens if self.fact_guard is not False else None
        room: int | None = None  # what the goal leaves for the summary's text (tokens)
        if state.goal_tokens is not None and counter is state.counter:
            replaced_tokens = sum(slots[i].tokens for i in replaced)
            overhead = state.counter.count_message(make_summary_message("", role=role,
                                                                        hint=state.offload is not None))
            room = state.goal_tokens - (state.total() - replaced_tokens) - overhead
        facts_need = 0
        said_chars = guard.said_chars
        keys = True
        if facts_cap is not None:
            line, _ = guard.facts_line(identifiers, counter.count_text, facts_cap)
            if room is not None and counter.count_text(line) > room - MIN_SUMMARY_TOKENS:
                keys = False  # the keys give way to the room too (the identifiers stay: `FactGuard.facts_line`)
                line, _ = guard.facts_line(identifiers, counter.count_text, facts_cap, keys=False)
            facts_need = counter.count_text(line)
            said_from = [slots[i].message for i in replaced]  # the user's short turns, word for word
            said_chars = said_room(guard, said_from, counter.count_text,
                                   None if room is None else room - facts_need - MIN_SUMMARY_TOKENS)
            said = guard.said_line(said_from, said_chars)
            facts_need += counter.count_text(said) if said else 0
        reply_cap = self.max_summary_tokens
        if room is not None:
            reply_cap = max(MIN_SUMMARY_TOKENS, min(reply_cap, room - facts_need))
        previous_text = "\n\n".join(summary_text(slots[i].message) for i in replaced
                                  if is_summary(slots[i].message)) or None
        return _Plan(replaced=replaced, messages=[slots[i].message for i in evicted], previous_text=previous_text,
                     identifiers=identifiers, reply_cap=reply_cap, facts_cap=facts_cap, counter=counter, at=at,
                     role=role, folds=place.folds, said_chars=said_chars, keys=keys)

    # ------------------------------------------------------------------ committing
    def _commit(self, state: LadderState, plan: _Plan, text: str | None, fallback_reason: str | None) -> None:
        """Guard `text` (the ledger when None), put the summary in place of `plan.replaced` unless it would not
        be smaller than they are, and record the figures in `state.details`."""
        count = plan.counter.count_text
        summarizer = "model" if text is not None else "ledger"
        # --- tool output never speaks as the user: the provenance guard, then the fact guard ---
        replaced = [state.slots[i].message for i in plan.replaced]
        identifiers = trust(plan.identifiers, state.messages)  # what the user said anywhere is not tool data
        provenance = ProvenanceGuard(replaced, identifiers, trusted=state.messages)
        if text is None:
            text = build_ledger(replaced, max_tokens=plan.reply_cap, count_text=count, protect=provenance.guard,
                                redact=self.redact)
        else:
            text = provenance.guard(text)
        if plan.facts_cap is not None:
            result = self._guard.guard(text, identifiers, count, plan.facts_cap, redact=self.redact,
                                       said_from=replaced, said_chars=plan.said_chars, keys=plan.keys)
            text, kept, added, omitted = result.text, result.kept_by_summary, result.added, result.omitted
        else:
            kept = sum(1 for i in plan.identifiers if contains(text, i))
            added, omitted = 0, len(plan.identifiers) - kept
        message = make_summary_message(text, message_id=f"lc-compaction-summary-{uuid.uuid4().hex[:12]}",
                                       role=plan.role, hint=state.offload is not None)
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
        state.put_summary(plan.replaced, message, strategy=self.name, detail=detail, at=plan.at)
        self._written(state)[message.id or ""] = plan.identifiers
        d = state.details
        d["summary"] = text
        d["summary_role"] = plan.role
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
        d["tool_text_fenced"] = d.get("tool_text_fenced", 0) + provenance.fenced


def said_room(guard: FactGuard, said_from: Sequence[BaseMessage], count_text: Callable[[str], int],
              room: int | None) -> int:
    """The said line's bound (characters) for a summary of `said_from` when `room` tokens (of `count_text`) are
    left for it beside the facts line and the smallest text (`MIN_SUMMARY_TOKENS`): the guard's own
    (`FactGuard.said_chars`) when its line fits or `room` is None (no goal in tokens), else the largest bound whose
    line fits (0: none). The quotes give way first: a turn left out of the line still has its identifiers on the
    facts line (`FactGuard.guard` lists what the line does not give back), while a summary over its room makes
    the last resort cut the kept messages, the recent context (issue 20's must-show: added beyond the room, the
    said line cost the Summarize() row of benchmarks/BILL.md's identifiers table 165 of its 21,801 (call,
    identifier) pairs at 4,000 tokens)."""
    bound = guard.said_chars
    if room is None or not bound:
        return bound
    if room <= 0:
        return 0
    line = guard.said_line(said_from, bound)
    if not line or count_text(line) <= room:
        return bound
    lo, hi = 0, bound  # the largest bound whose line fits: the line grows with the bound (binary search)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_text(guard.said_line(said_from, mid)) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _with_earlier_passes(identifiers: list[Identifier], replaced: list[BaseMessage],
                         written: dict[str, list[Identifier]]) -> list[Identifier]:
    """`identifiers` (of `replaced`), preceded by those of what the summaries among `replaced` that an earlier pass
    of this compaction wrote had replaced (`written`), distinct values, oldest first: one compaction's figures and
    guard cover every message it summarized, not only the last pass's, also when that summary's text left some
    out (the guard off, or over its bound)."""
    earlier = [i for m in replaced if is_summary(m) for i in written.get(m.id or "", ())]
    if not earlier:
        return identifiers
    seen: dict[str, Identifier] = {}
    for i in (*earlier, *identifiers):
        seen.setdefault(i.value.casefold(), i)
    return list(seen.values())


def _cancel(job: AheadJob) -> None:
    """Cancel `job` if it is a task still running (thread-safe; a closed loop has cancelled it already). A worker
    thread cannot be stopped: its late summary is never used."""
    task = job.handle
    if isinstance(task, asyncio.Task) and not task.done():
        try:
            task.get_loop().call_soon_threadsafe(task.cancel)
        except RuntimeError:  # its loop is closed
            pass


def _one_call(prompt: str) -> Generator[tuple[str, int | None], str, str]:
    """The driver of a single summary call (a cache-sharing request: no chunks), shaped like `summary_prompts`:
    yields the prompt and no cap of its own, returns the reply."""
    reply = yield prompt, None
    return reply


def _sent(state: LadderState, agent: AgentRequest | None, prompt: str, beside: int, output_tokens: int
          ) -> dict[str, Any]:
    """What one summary call sent and received, for `details["summary_requests"]` (tokens by the state's counter,
    the output by the text counter): its form ("agent": the agent's request and the instruction; "transcript":
    the prompt as one user message), its input (messages and reply priming), the leading part that repeats the
    agent's request (`prefix_tokens`, `prefix_messages`: 0 for a transcript prompt) and the reply's tokens."""
    counter = state.counter
    if agent is None:
        return {"form": "transcript", "input_tokens": counter.count_messages([HumanMessage(content=prompt)]),
                "prefix_tokens": 0, "prefix_messages": 0, "output_tokens": output_tokens}
    head = 1 if agent.system is not None else 0
    instruction = counter.count_messages([HumanMessage(content=prompt)])
    return {"form": "agent", "input_tokens": beside + instruction, "prefix_tokens": beside,
            "prefix_messages": head + len(agent.messages), "output_tokens": output_tokens}


def _tokens(state: LadderState, agent: AgentRequest) -> int:
    """Tokens of the agent's request's messages (its system message included), by the state's counter."""
    head = [agent.system] if agent.system is not None else []
    return sum(state.counter.count_message(m) for m in (*head, *agent.messages))


def _opening(message: BaseMessage, names: dict[Any, str]) -> str:
    """How the instruction names `message` (`prompts.opening`)."""
    role = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    if isinstance(message, ToolMessage):
        role = f"tool result of {tool_of(message, names)}"
    calls = [f"{c.get('name', '?')} {json.dumps(c.get('args') or {}, ensure_ascii=False)}"
             for c in getattr(message, "tool_calls", None) or []]
    return opening(role, content_text(message.content), calls)


def _text_counter(counter: TokenCounter) -> TokenCounter:
    """The state's counter when it counts text; the approximate one for a counter of messages."""
    return counter if counter.count_text("lc compaction summary") > 0 else ApproximateCounter()


def _no_call(request: SummaryRequest) -> NoReturn:
    """The driver's call when there is no model: never made (`Summarize._pass` yields only with a model)."""
    raise AssertionError("Summarize without a model made a model call")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
