"""The `BaseChatMessageHistory` front door: wrap a chat history so that a chain sees it compacted.

People who keep a conversation in a chat-message history (in memory, in SQL, in a file) and run chains with
`RunnableWithMessageHistory` wrap their history in `CompactingChatMessageHistory`; reading `messages` then
returns the compacted history, while adding and clearing go to the wrapped ("inner") history::

    history = CompactingChatMessageHistory(SQLChatMessageHistory(session_id, connection="sqlite:///chat.db"),
                                           CompactionPolicy(max_input_tokens=16_000))
    chain = RunnableWithMessageHistory(prompt | model, lambda session_id: history, input_messages_key="messages")

What the view is. The view is what you get by running `compact` after every message added, in order:
`view = compact(view + [message])` for each message of the inner history. Compacting one message at a time
makes the view a function of the inner history alone, whenever and in whichever process it is read (given
deterministic strategies: truncation, dropping, the ledger summary), and it carries the previous compaction
forward, so the trigger/target gap of the policy works as designed: the strategies run once in a while, not on
every read, and an LLM summarizer is called once per compaction, not once per turn.

Reads are cached and incremental: the wrapper remembers the view and the inner messages it covers (as read).
A read whose inner history does not start with those messages, the same or equal ones (cleared, or rewritten by
another process: a message redacted in place), rebuilds the view from the first message. Reading again with no
add in between returns the same list (RunnableWithMessageHistory reads the history when a run starts and again
when it ends, and slices the run's input by that length); a read after k new messages folds only those k: k
tokenizations and k calls of `compact` over the view, each counting only its new message (it gets the previous
call's count tally). The first read in a new process folds the whole stored history once, O(history).

A SystemMessage added after the conversation started is sent as a HumanMessage in the view, on every read
(reported in `last_result.repairs`; providers such as Anthropic and Gemini reject a system message mid-history).

An open tool call at the end of the history (an AIMessage whose ToolMessages have not all been added yet: the
chain returned tool calls, and the caller will send the results as the next input) is left out of compaction
and appended to the view unchanged (its tokens still count toward the budget).

Persistence. By default nothing is written: the inner history keeps every message ever added. With
`persist=True`, a read that changed the view writes it back through the inner history's public API
(`clear()` then `add_messages(view)`), so SQL and file histories really shrink, and first adds to `archive`
every stored message the write-back no longer holds unchanged (removed, summarized, and the original form of a
truncated or cut message), so nothing is lost. The rewrite is skipped when the inner history changed since it
was read (another process wrote to it); `clear()` + `add_messages()` is not atomic across processes, so use
one writer process per session with `persist=True`.

The core never imports this module. `BaseChatMessageHistory` and `RunnableWithMessageHistory` are deprecated in
langchain-core (since 1.6.4 and 1.3.3, removal in 2.0); subclassing emits no warning, and the one deprecated
class this module instantiates itself (the default archive, an `InMemoryChatMessageHistory`) is built under
`suppress_langchain_deprecation_warning()`. For new code prefer the LangGraph pre-model node or the agent
middleware (`lc_compaction.integrations.langgraph`, `lc_compaction.integrations.middleware`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Generator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, NamedTuple, TypeVar

from langchain_core._api import suppress_langchain_deprecation_warning
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import (
    BaseMessage,
    MessageLikeRepresentation,
    convert_to_messages,
    message_to_dict,
)
from langchain_core.prompt_values import PromptValue

from lc_compaction.compact import CompactionResult, acompact, compact
from lc_compaction.policy import CompactionPolicy
from lc_compaction.structure import (
    InvalidHistoryError,
    Repair,
    Violation,
    normalize_system_messages,
    open_tool_block_start,
)
from lc_compaction.tally import CountTally, starts_with

__all__ = ["CompactingChatMessageHistory"]

_ASYNC_LOCK_POLL_SECONDS = 0.002
"""How often (seconds) an async caller retries the wrapper's lock while another thread or task holds it.
Polling never blocks the event loop and cannot deadlock on a full thread pool (a thread-pool wait could)."""


_T = TypeVar("_T")


class _Io(NamedTuple):
    """One call of the outside world that a read, a write-back or a clear makes, yielded by those steps and carried
    out by `CompactingChatMessageHistory._run` (sync) or `_arun` (async).

    - "read": the messages of `target` (a list); "add": `target.add_messages(messages)`; "clear": `target.clear()`;
    - "compact": `compact(messages, policy, extra_tokens=..., tally=...)` (a strategy may call a model).
    """

    what: Literal["read", "add", "clear", "compact"]
    target: Any = None  # the history to read, add to or clear (the inner history or the archive)
    messages: Sequence[BaseMessage] = ()
    extra_tokens: int = 0
    tally: CountTally | None = None


def _stored_id(message: BaseMessage, position: int) -> str:
    """The message's id, or for a message stored without one a deterministic id derived from its position in the
    inner history and its content (so that every process derives the same id and the view is the same)."""
    if message.id:
        return message.id
    body = json.dumps(message_to_dict(message), sort_keys=True, default=str)
    digest = hashlib.sha1(f"{position}\n{body}".encode()).hexdigest()[:16]
    return f"lc-compaction-{position}-{digest}"


def _with_ids(messages: Sequence[BaseMessage], start: int) -> list[BaseMessage]:
    """The messages, copied with `_stored_id` where the id is missing (positions counted from `start`)."""
    return [m if m.id else m.model_copy(update={"id": _stored_id(m, start + k)}) for k, m in enumerate(messages)]


class CompactingChatMessageHistory(BaseChatMessageHistory):
    """A chat history whose `messages` are compacted by a `CompactionPolicy`; writes go to the inner history.

    Args:
        inner: the history that stores the conversation (any `BaseChatMessageHistory`: in memory, SQL, file...).
        policy: the `CompactionPolicy` (window, trigger, keep, strategies, token counter). Its counter caches
            per-message counts, which is what makes repeated reads cheap.
        persist: False (default): the inner history keeps every message; only the view is compacted. True: a
            read that compacted writes the view back to the inner history and the evicted messages to `archive`.
        archive: where evicted messages go when `persist` is True (any `BaseChatMessageHistory`, e.g. a second
            `SQLChatMessageHistory` session such as `f"{session_id}:archive"`). Default: a new
            `InMemoryChatMessageHistory`. Not allowed when `persist` is False (nothing is evicted).
        extra_tokens: tokens sent with every model call besides the history (default 0): the prompt's system
            message and other template text, tool schemas (`policy.counter.count_tools(tools)`), and room for
            the new input. `RunnableWithMessageHistory` appends the run's new messages after the view, so the
            view cannot see them: leave room for the largest input you expect here (or in `policy.reserve`).
            Passed to `compact(..., extra_tokens=...)`, so the view fits `policy.budget_tokens() - extra_tokens`.

    Attributes:
        inner, policy, persist, archive, extra_tokens: as given (`archive` is None when `persist` is False).
        last_result: the `CompactionResult` of the latest compaction that changed the view (None before any).

    Raises:
        TypeError: `inner` or `archive` is not a `BaseChatMessageHistory`, or `policy` is not a
            `CompactionPolicy`.
        ValueError: `extra_tokens` is negative or not an int, `archive` is given without `persist`, or
            `archive` is `inner`.

    Reading (`messages`, `aget_messages`) repairs a history that breaks a pairing or order rule (the repairs are
    in `last_result.repairs`; the inner history is not changed unless `persist`); with `policy.repair=False` it
    raises `InvalidHistoryError` instead (its violations give the index in the inner history). It raises
    `ValueError` for a message `compact` cannot read.

    Thread safety: one lock serializes adds, reads, write-backs and clears of this wrapper (sync and async), so
    two threads adding and reading lose no message. Do not call the sync methods from inside a running event
    loop while an async call of the same wrapper is in progress (the sync call would block the loop that the
    async call needs).
    """

    def __init__(self, inner: BaseChatMessageHistory, policy: CompactionPolicy, *, persist: bool = False,
                 archive: BaseChatMessageHistory | None = None, extra_tokens: int = 0) -> None:
        super().__init__()
        if not isinstance(inner, BaseChatMessageHistory):
            raise TypeError(f"inner: expected a BaseChatMessageHistory, got {type(inner).__name__}")
        if not isinstance(policy, CompactionPolicy):
            raise TypeError(f"policy: expected a CompactionPolicy, got {type(policy).__name__}")
        if isinstance(extra_tokens, bool) or not isinstance(extra_tokens, int) or extra_tokens < 0:
            raise ValueError(f"extra_tokens: must be a non-negative int (tokens), got {extra_tokens!r}")
        if archive is not None:
            if not persist:
                raise ValueError("archive: only used with persist=True (without it nothing is evicted)")
            if not isinstance(archive, BaseChatMessageHistory):
                raise TypeError(f"archive: expected a BaseChatMessageHistory, got {type(archive).__name__}")
            if archive is inner:
                raise ValueError("archive: must not be the inner history itself")
        if persist and archive is None:
            with suppress_langchain_deprecation_warning():
                archive = InMemoryChatMessageHistory()
        self.inner = inner
        self.policy = policy
        self.persist = persist
        self.archive = archive
        self.extra_tokens = extra_tokens
        self.last_result: CompactionResult | None = None
        self._lock = threading.Lock()
        self._view: list[BaseMessage] = []
        self._covered = 0  # inner messages the view covers (messages)
        self._read: list[BaseMessage] = []  # those messages as read: the next read must start with them
        self._tally: CountTally | None = None  # what the last compact() counted: the next one counts only the new

    def __repr__(self) -> str:
        return (f"CompactingChatMessageHistory(inner={type(self.inner).__name__}, persist={self.persist}, "
                f"covered={self._covered}, view={len(self._view)})")

    # ------------------------------------------------------------------ reading
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # the base class declares a plain attribute
        """The compacted view: a new list each call, equal to the previous one when nothing was added; its
        messages are shared with the wrapper's cache (do not mutate them).

        Reads the inner history once (plus once more before a write-back), folds the messages added since the
        last read, and with `persist` writes a changed view back.

        Raises:
            InvalidHistoryError: with `policy.repair=False`, a compaction met a stored history that breaks a
                pairing or order rule (the violations name the index in the inner history).
            Whatever the inner history or a strategy raises (after a failed write-back, the inner history's
                messages are put back first).
        """
        with self._lock:
            return self._run(self._reading())

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of `messages`: reads through `inner.aget_messages()`, compacts with `acompact` (so an LLM
        summarizer is awaited) and writes back with `inner.aclear()` / `aadd_messages()`."""
        async with self._alocked():
            return await self._arun(self._reading())

    # ------------------------------------------------------------------ writing
    def add_message(self, message: MessageLikeRepresentation) -> None:
        """Add one message to the inner history (see `add_messages`)."""
        self.add_messages([message])

    def add_messages(self, messages: Sequence[MessageLikeRepresentation] | PromptValue) -> None:
        """Add messages to the inner history, in one `inner.add_messages` call.

        Args:
            messages: every form `langchain_core.messages.convert_to_messages` accepts: `BaseMessage`s (stored
                as they are, the same objects), `(role, content)` tuples, OpenAI-style dicts, strings (a human
                message), or a `PromptValue`. `RunnableWithMessageHistory` passes the chain's input as the user
                gave it (`{"messages": [("human", "...")]}` arrives as tuples), so they are converted here,
                once, and the inner history always receives `BaseMessage`s.

        Raises:
            TypeError: `messages` is a single string, message or dict instead of a list of them, or an item
                cannot be converted to a message (naming its index and why); nothing is added then.
        """
        batch = _checked(messages)
        with self._lock:
            self.inner.add_messages(batch)

    async def aadd_messages(self, messages: Sequence[MessageLikeRepresentation] | PromptValue) -> None:
        """Async twin of `add_messages` (through `inner.aadd_messages`); the same forms and errors."""
        batch = _checked(messages)
        async with self._alocked():
            await self.inner.aadd_messages(batch)

    def clear(self) -> None:
        """Clear the inner history and forget the view. The archive is left as it is (clear it yourself)."""
        with self._lock:
            self._run(self._clearing())

    async def aclear(self) -> None:
        """Async twin of `clear` (through `inner.aclear`)."""
        async with self._alocked():
            await self._arun(self._clearing())

    # ------------------------------------------------------------------ the steps, written once
    # `_reading` and `_clearing` are generators: each yields the I/O it needs (an `_Io`) and gets its result
    # back; `_run` carries them out with the sync calls, `_arun` with the async ones (as compact / acompact
    # drive one ladder). An error of a call is thrown back into the generator at that step.
    def _reading(self) -> Generator[_Io, Any, list[BaseMessage]]:
        """Read the inner history, fold the messages added since the last read into the view, and with `persist`
        write a changed view back; return the view (a new list)."""
        raw = yield _Io("read", self.inner)
        plan = self._plan(raw)
        if plan is None:
            return list(self._view)
        view, new = plan
        changed = False
        for message in new:
            # a mid-history SystemMessage is sent as a HumanMessage: the new message only, O(1)
            messages, converted = normalize_system_messages(view + [message], len(view))
            head, tail, extra = self._split(messages)
            try:
                result = yield _Io("compact", messages=head, extra_tokens=extra, tally=self._tally)
            except InvalidHistoryError as exc:
                raise _located(exc, head, raw, self.inner) from exc
            view, step_changed = self._after(result, messages, tail, converted)
            changed |= step_changed
        if self.persist and changed:
            yield from self._writing_back(raw, view)
        else:
            self._remember(view, raw)
        return list(view)

    def _writing_back(self, raw: list[BaseMessage], view: list[BaseMessage]) -> Generator[_Io, Any, None]:
        """Archive the evicted messages, then replace the inner history by `view`. Skipped (the view is still
        returned; the cache keeps its earlier state, so the next read folds again) when the inner history changed
        since `raw` was read (another process or a direct write to the inner history)."""
        evicted = self._eviction(raw, view)
        current = yield _Io("read", self.inner)
        if not _same(current, raw):
            return
        if evicted:
            yield _Io("add", self.archive, evicted)
        yield _Io("clear", self.inner)
        try:
            yield _Io("add", self.inner, view)
        except GeneratorExit:  # the generator is being closed, not a failed write: nothing to put back
            raise
        except BaseException:
            yield _Io("clear", self.inner)
            yield _Io("add", self.inner, raw)
            raise
        self._remember(view, view)

    def _clearing(self) -> Generator[_Io, Any, None]:
        yield _Io("clear", self.inner)
        self._remember([], [])
        self.last_result = None

    def _run(self, steps: Generator[_Io, Any, _T]) -> _T:
        """Carry out `steps` with the sync calls (`inner.messages`, `add_messages`, `clear`, `compact`)."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                io = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                result: _T = stop.value  # StopIteration.value is typed Any; `steps` is declared to return _T
                return result
            value, error = None, None
            try:
                if io.what == "read":
                    value = list(io.target.messages)
                elif io.what == "add":
                    io.target.add_messages(io.messages)
                elif io.what == "clear":
                    io.target.clear()
                else:
                    value = compact(io.messages, self.policy, extra_tokens=io.extra_tokens, tally=io.tally,
                                    repair=self.policy.repairs_by_default(True))
            except BaseException as exc:  # noqa: BLE001 - thrown back into `steps`, which re-raises it
                error = exc

    async def _arun(self, steps: Generator[_Io, Any, _T]) -> _T:
        """Carry out `steps` with the async calls (`inner.aget_messages`, `aadd_messages`, `aclear`, `acompact`)."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                io = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                result: _T = stop.value  # StopIteration.value is typed Any; `steps` is declared to return _T
                return result
            value, error = None, None
            try:
                if io.what == "read":
                    value = list(await io.target.aget_messages())
                elif io.what == "add":
                    await io.target.aadd_messages(io.messages)
                elif io.what == "clear":
                    await io.target.aclear()
                else:
                    value = await acompact(io.messages, self.policy, extra_tokens=io.extra_tokens, tally=io.tally,
                                           repair=self.policy.repairs_by_default(True))
            except BaseException as exc:  # noqa: BLE001 - thrown back into `steps`, which re-raises it
                error = exc

    # ------------------------------------------------------------------ internals
    def _plan(self, raw: list[BaseMessage]) -> tuple[list[BaseMessage], list[BaseMessage]] | None:
        """None when the cached view covers `raw` exactly; else (view to continue from, the new messages with
        their stored ids). When the inner history no longer starts with what the view covered, the same messages
        or equal ones (cleared, rewritten elsewhere: a message redacted in place, same length and ids), the view
        is rebuilt from the first message. One comparison of the covered messages per read (by pointer for an
        in-memory history, by value for one that deserializes on every read), beside reading them."""
        n, covered = len(raw), self._covered
        if n < covered or (covered and not starts_with(self._read, raw, adopt=True)):
            return [], _with_ids(raw, 0)
        if n == covered:
            return None
        return list(self._view), _with_ids(raw[covered:], covered)

    def _split(self, messages: list[BaseMessage]) -> tuple[list[BaseMessage], list[BaseMessage], int]:
        """(what to compact, the open tool block at the end kept out of it, the extra tokens: `extra_tokens`
        plus the tokens of that block)."""
        cut = open_tool_block_start(messages)
        head, tail = messages[:cut], messages[cut:]
        extra = self.extra_tokens + sum(self.policy.counter.count_message(m) for m in tail)
        return head, tail, extra

    def _after(self, result: CompactionResult, messages: list[BaseMessage], tail: list[BaseMessage],
               converted: list[Repair]) -> tuple[list[BaseMessage], bool]:
        self._tally = result.tally
        if converted:  # a mid-history SystemMessage is sent as a HumanMessage even when nothing is compacted
            result = dataclasses.replace(result, repairs=[*converted, *result.repairs])
        if not result.compacted:
            return messages, False
        self.last_result = result
        return list(result.messages) + tail, True

    def _remember(self, view: list[BaseMessage], read: Sequence[BaseMessage]) -> None:
        """Keep `view` as the view of the inner messages `read` (as read, or as written back)."""
        self._view = view
        self._covered = len(read)
        self._read = list(read)

    def _eviction(self, raw: list[BaseMessage], view: list[BaseMessage]) -> list[BaseMessage]:
        """Stored messages (with their stored ids) that the view does not hold unchanged, in stored order."""
        kept = {m.id: m for m in view}
        out = []
        for m in _with_ids(raw, 0):
            other = kept.get(m.id)
            if other is None or (other is not m and other != m):
                out.append(m)
        return out

    @asynccontextmanager
    async def _alocked(self) -> AsyncIterator[None]:
        """Hold the wrapper's thread lock from a coroutine without blocking the event loop."""
        while not self._lock.acquire(blocking=False):
            await asyncio.sleep(_ASYNC_LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            self._lock.release()


def _checked(messages: Sequence[MessageLikeRepresentation] | PromptValue) -> list[BaseMessage]:
    """`messages` as `BaseMessage`s: the edge where what a chain passes is converted, once (see `add_messages`)."""
    if isinstance(messages, PromptValue):
        return messages.to_messages()
    if isinstance(messages, (str, BaseMessage, dict)):  # iterating them would give characters, fields or keys
        raise TypeError(f"messages: expected a list of messages, got one {type(messages).__name__} "
                        "(use add_message for a single message)")
    batch: list[BaseMessage] = []
    for i, m in enumerate(messages):
        if isinstance(m, BaseMessage):
            batch.append(m)
            continue
        try:
            batch.extend(convert_to_messages([m]))
        except Exception as exc:  # convert_to_messages raises bare ValueError / NotImplementedError
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TypeError(f"messages[{i}]: cannot be converted to a langchain message "
                            f"({type(m).__name__}: {detail})") from exc
    return batch


def _same(current: Sequence[BaseMessage], raw: Sequence[BaseMessage]) -> bool:
    """Whether the inner history still holds what was read: the same messages, or equal ones (`starts_with`), so
    that a message rewritten elsewhere in the meantime (a redaction) is never overwritten by a write-back."""
    return len(current) == len(raw) and starts_with(list(raw), list(current))


def _located(exc: InvalidHistoryError, head: list[BaseMessage], raw: list[BaseMessage],
             inner: BaseChatMessageHistory) -> InvalidHistoryError:
    """The same violations, with the index of each message in the inner history (the core's indices refer to
    the compacted view it was given)."""
    positions = {m.id: i for i, m in enumerate(_with_ids(raw, 0))}
    out = []
    for v in exc.violations:
        mid = head[v.index].id if 0 <= v.index < len(head) else None
        where = positions.get(mid)
        note = (f"message {where} of the inner {type(inner).__name__}" if where is not None
                else "a message written by an earlier compaction")
        detail = f"{v.detail}; " if v.detail else ""
        out.append(Violation(v.kind, where if where is not None else v.index, v.tool_call_id,
                             f"{detail}{note} (message {v.index} of the compacted view)"))
    return InvalidHistoryError(out)
