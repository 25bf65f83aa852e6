"""Summaries ahead of time (`Summarize(ahead_at=...)`): the background jobs and how a finished one is recognized.

A job is started by a call that finds the history above `ahead_at` and below the trigger (`compact` /
`acompact`, through `Summarize.start_ahead`): it plans and summarizes what the strategy's plan would summarize
of that call's history (so the call itself pays neither), in a worker thread (`run="thread"`, the sync doors)
or an asyncio task on the running loop (`run="task"`, the async doors; its planning in a worker thread).
Neither runs inside the caller's context: the thread's target and the task run in an empty
`contextvars.Context`, so no LangChain callbacks, LangGraph config or stream writer of the user's run reach the
summary call (it never shows in the user's stream; the call's own config adds `TAG_NOSTREAM` too).

A job is keyed by its history's scope (`scope`: the id and content hash of the first message that is not a
system message, so each conversation, each thread, has its own) and records exactly what it read: the id and
content hash of each message (`fingerprint`), in order, and their positions relative to the first (`offsets`).
`AheadJobs` holds at most one job per scope, `AHEAD_SCOPES` scopes at most (the least recently used goes first),
per strategy object. A job is taken out when a triggered pass of the strategy looks at its scope (used or not),
when its part of the history changed, and when it ended without a summary (its failure or cancellation reported
once, on the next call).

Memory only: a job does not survive its process (a restart, a new strategy object): the compaction is inline
then, as without this option. No message is lost or duplicated either way: a summary only ever replaces the
very messages it read (same ids, same hashes, same positions); otherwise it is not used.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage

from lc_compaction._kinds import SYSTEM, kind

logger = logging.getLogger(__name__)

AHEAD_SCOPES = 256
"""Scopes (conversations) whose background job a `Summarize` keeps, least recently used first out: a judgment
call, bounded like the doors' per-thread memory (`integrations.plan.REQUESTS_KEPT`) but smaller, since a job
holds the messages it read."""

Run = Literal["thread", "task"]
"""Where a background summary runs: a worker thread (sync doors) or an asyncio task (async doors)."""

Fingerprint = tuple[str, str]
"""A message's id and the hash of its content (`fingerprint`)."""


def fingerprint(message: BaseMessage) -> Fingerprint:
    """The message's id and a hash (blake2b, 16 bytes, hex) of what a model and compaction read of it: its type,
    name, content, tool calls (name, args, id), tool_call_id and `additional_kwargs` (where the marks are). The
    response metadata (usage, finish reason) is left out."""
    calls = [[c.get("name"), c.get("args"), c.get("id")] for c in getattr(message, "tool_calls", None) or []]
    body = [message.type, message.name, message.content, calls, getattr(message, "tool_call_id", None),
            message.additional_kwargs]
    digest = hashlib.blake2b(json.dumps(body, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()
    return message.id or "", digest


def scope(messages: Sequence[BaseMessage]) -> Fingerprint | None:
    """The key of a history's job: the fingerprint of its first message that is not a system message (None for
    a history of system messages only)."""
    for m in messages:
        if kind(m) != SYSTEM:
            return fingerprint(m)
    return None


@dataclass
class AheadJob:
    """One background summary of the history whose scope is `key`. Once planned (in the background), what it read:
    `covered` (fingerprints, in order), `offsets` (positions relative to the first), `start` (the first one's
    index) and `span` (the history's messages from the first read to the last, as objects, for a cheap check that
    they are still in place). Then its outcome: `text` (the model's reply, before the guards), `error` (its text:
    the failure or cancellation), `cancelled`, `empty` (nothing to summarize). `done` is set when it ends;
    `report` holds the call's figures (`summary_request`, `previous_summary_cut`); `calls`, `input_tokens` its
    model calls and the largest input of one (tokens); `identifiers` what the fact guard extracted of what it
    read."""

    key: Fingerprint
    covered: tuple[Fingerprint, ...] = ()
    offsets: tuple[int, ...] = ()
    start: int = 0
    span: list[BaseMessage] = field(default_factory=list)
    text: str | None = None
    error: str | None = None
    cancelled: bool = False
    empty: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    report: dict[str, Any] = field(default_factory=dict)
    calls: int = 0
    input_tokens: int = 0
    identifiers: Any = None
    handle: Any = None  # the thread or the task (a task must be referenced to stay alive)

    def read(self, messages: Sequence[BaseMessage], indices: Sequence[int]) -> None:
        """Record that it reads `indices` of `messages` (sorted, not empty)."""
        first, last = indices[0], indices[-1]
        self.offsets = tuple(i - first for i in indices)
        self.start = first
        self.span = list(messages[first:last + 1])
        self.covered = tuple(fingerprint(messages[i]) for i in indices)

    def in_place(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether the messages it read are still at their place in `messages`: the same objects or equal ones
        (one list comparison), else the same fingerprints (a history loaded again whose metadata differ). True
        while it is not planned yet (it reads the history of the call that started it)."""
        if not self.covered:
            return not self.done.is_set()
        if messages[self.start:self.start + len(self.span)] == self.span:
            return True
        at = [self.start + o for o in self.offsets]
        return at[-1] < len(messages) and self.matches(messages, at)

    def matches(self, messages: Sequence[BaseMessage], indices: Sequence[int]) -> bool:
        """Whether `indices` of `messages` (what a plan would replace) start with exactly the messages this job
        read: the same ids and hashes, at the same distances from one another (nothing inserted or removed in
        between)."""
        n = len(self.covered)
        if not n or len(indices) < n:
            return False
        first = indices[0]
        if tuple(i - first for i in indices[:n]) != self.offsets:
            return False
        return all(fingerprint(messages[i]) == f for i, f in zip(indices[:n], self.covered))

    def outcome(self) -> str:
        """"running", "ready", "empty", "cancelled" or "failed"."""
        if not self.done.is_set():
            return "running"
        if self.text is not None:
            return "ready"
        if self.empty:
            return "empty"
        return "cancelled" if self.cancelled else "failed"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON for `details["ahead"]`."""
        data: dict[str, Any] = {"status": self.outcome(), "covered": len(self.covered)}
        if self.error:
            data["error"] = self.error
        return data


class AheadJobs:
    """The background jobs of one strategy object: at most one per scope, `size` scopes at most (least recently
    used first out); thread-safe (a lock, never held while waiting)."""

    def __init__(self, size: int = AHEAD_SCOPES) -> None:
        self.size = size
        self._jobs: OrderedDict[Fingerprint, AheadJob] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Fingerprint | None) -> AheadJob | None:
        with self._lock:
            return None if key is None else self._jobs.get(key)

    def pop(self, key: Fingerprint | None) -> AheadJob | None:
        with self._lock:
            return None if key is None else self._jobs.pop(key, None)

    def put(self, job: AheadJob) -> None:
        with self._lock:
            self._jobs[job.key] = job
            self._jobs.move_to_end(job.key)
            while len(self._jobs) > self.size:
                self._jobs.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def __getstate__(self) -> dict[str, Any]:  # a copy of the strategy starts with no jobs (a lock cannot be copied)
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["size"])  # type: ignore[misc]


def start(job: AheadJob, run: Run, work: Callable[[], str | None], awork: Callable[[], Awaitable[str | None]],
          failed: Callable[[BaseException], str]) -> None:
    """Start `job`: `work()` in a daemon worker thread (`run="thread"`) or `awork()` as a task on the running
    loop (`run="task"`), both in an empty context (no callbacks, config or stream writer of the caller's run).
    Their reply becomes `job.text` (None: nothing to summarize, `job.empty`); an exception becomes `job.error`
    through `failed` (which reports it, and starts the cooldown for a model failure) and is never raised into
    anyone's call; a cancelled task sets `job.cancelled`.

    Raises:
        RuntimeError: `run="task"` outside a running event loop.
    """

    def target() -> None:
        try:
            job.text = work()
            job.empty = job.text is None
        except BaseException as exc:  # noqa: BLE001 - a background failure is reported, never raised
            job.error = failed(exc)
        finally:
            job.done.set()

    async def atarget() -> None:
        try:
            job.text = await awork()
            job.empty = job.text is None
        except asyncio.CancelledError:
            job.cancelled = True
            job.error = "the background summary was cancelled (its event loop closed, or its task was cancelled)"
            logger.info("lc-compaction: %s", job.error)
            raise
        except BaseException as exc:  # noqa: BLE001 - a background failure is reported, never raised
            job.error = failed(exc)
        finally:
            job.done.set()

    empty = contextvars.Context()
    if run == "task":
        loop = asyncio.get_running_loop()  # raises RuntimeError outside a running loop, before the coroutine is made
        # a task runs in a copy of the context current when it is created: the empty one (Python 3.10 has no
        # `context=` argument)
        job.handle = empty.run(loop.create_task, atarget(), name="lc-compaction-summary-ahead")
    else:
        job.handle = threading.Thread(target=lambda: empty.run(target), name="lc-compaction-summary-ahead",
                                      daemon=True)
        job.handle.start()
