"""Offload, the I/O part: write what a compaction takes out to a LangGraph store before the result is used.

`compact_offloaded(messages, policy, target)` (and `acompact_offloaded`) is what the front doors call instead of
`compact()` when `policy.offload` is on:

1. `compact(..., offload=True)` decides (no I/O) and lists the originals to write (`result.offloads`).
2. One `store.batch` of `GetOp`s looks them up in the thread's namespace (`lc_compaction.offload`): a record
   already there with the same sha256 is not written again (so the next call, or another worker, never writes
   the same content twice); the others go in one `store.batch` of `PutOp`s (`index=False`: no embedding, unless
   the store has a semantic index: `index_fields`).
3. A tool result whose tool_call_id is already the key of another content in this thread (a server that numbers
   the calls of every turn from `call_0`, and the earlier `call_0` was offloaded when it left the history) gets
   its own key: compaction runs again with it in `offload_rekey`, so its note names "<tool_call_id>@<message id>"
   (`lc_compaction.offload.OffloadKeys`), and that record is written in turn.
4. If a write fails (the store raised, or another content is already stored under a message id, or under the key a
   reused tool_call_id was given), those messages stay as they were for this call: compaction runs again with them
   pinned, and what that run takes out instead is written in turn. When the store itself raised, every message is
   pinned for the rerun (nothing more could be written). A message the store could not take is never changed, not
   even by the last resort: if the call then exceeds the budget, `fits` is False and the model call may fail, but
   nothing is lost. (The progress note a fold put in an assistant message is compaction's text, not the
   message's: it may still move on to a later host, `_own_part`, so a failed host never leaves two notes.)
   The failure is in `result.offload["failed"]` (hence in the event data) and in a WARNING log
   line.

The thread comes from the run's config (`config["configurable"]["thread_id"]`); offload without one is a
configuration error (`ValueError`), never a silent loss.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, GetOp, PutOp

from lc_compaction._kinds import AI, kind
from lc_compaction.agent_request import AgentRequest
from lc_compaction.compact import CompactionResult, acompact, as_messages, compact
from lc_compaction.offload import OffloadRecord, offload_namespace
from lc_compaction.policy import CompactionPolicy
from lc_compaction._note import note_lines, without_note
from lc_compaction.structure import fill_missing_ids
from lc_compaction.tally import CountTally

__all__ = ["OffloadTarget", "acompact_offloaded", "compact_offloaded", "graph_store", "index_fields", "offload_target",
           "write_offloads"]

logger = logging.getLogger(__name__)

_MAX_RERUNS = 4
"""Reruns after failed writes before every message is pinned (each rerun pins at least one more message)."""


@dataclass(frozen=True)
class OffloadTarget:
    """Where one call offloads: a store and the thread whose namespace it writes (`offload_namespace`), and the
    number of the compaction the call's records are written under (`lc_compaction.history`; None: not said)."""

    store: BaseStore
    thread_id: str
    compaction: int | None = None

    def namespace(self, kind: str = "tool_result") -> tuple[str, ...]:
        return offload_namespace(self.thread_id, kind)


def index_fields(store: BaseStore) -> list[str] | Literal[False]:
    """How a record is put in `store`: embedded on its "message" field (the message's JSON text) when the store
    has a semantic index (`index=` config: `store.index_config`), so the search tool can ask it; else
    `False` (no embedding)."""
    return ["message"] if getattr(store, "index_config", None) else False


def graph_store(config: Any) -> BaseStore | None:
    """The store of the running graph (`compile(store=...)`, `create_agent(store=...)`), from a node's config or
    LangGraph's context; None outside a graph or when the graph has none."""
    runtime = ((config or {}).get("configurable") or {}).get("__pregel_runtime")
    store: BaseStore | None = getattr(runtime, "store", None)
    if store is not None:
        return store
    try:
        from langgraph.config import get_store

        return get_store()
    except Exception:  # noqa: BLE001 - outside a runnable context, or Python < 3.11 on the async path
        return None


def offload_target(policy: CompactionPolicy, *, config: Any = None, store: BaseStore | None = None,
                   thread_id: str | None = None) -> OffloadTarget | None:
    """The target of one call: None when `policy.offload` is off. The store is `policy.offload` when it is a
    `BaseStore`, else (`offload=True`) `store` or the graph's (`graph_store(config)`); the thread is `thread_id` or
    `config["configurable"]["thread_id"]`.

    Raises:
        ValueError: offload is on but there is no store, or no thread id.
    """
    if policy.offload is None:
        return None
    chosen = policy.offload if isinstance(policy.offload, BaseStore) else (store or graph_store(config))
    if chosen is None:
        raise ValueError("offload=True needs the graph's store: create_agent(..., store=InMemoryStore()) or "
                         "builder.compile(store=...); or pass a BaseStore as offload=")
    if thread_id is None:
        thread_id = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread_id is None or thread_id == "":
        raise ValueError("offload needs a thread id: invoke with config={'configurable': {'thread_id': ...}} (the "
                         "offloaded results are kept per thread)")
    return OffloadTarget(chosen, str(thread_id))


class _Offloads:
    """The state of one offloading call, shared by the sync and async drivers."""

    def __init__(self, policy: CompactionPolicy, target: OffloadTarget):
        self.policy, self.target = policy, target
        self.done: set[tuple[str, str]] = set()  # (kind, key) written or found already stored by this call
        self.written: list[str] = []
        self.already = 0
        self.failed: dict[str, dict[str, str]] = {}  # message id -> {"id", "key", "error"}
        self.down: str | None = None  # the store's error, once it raised
        self.rekey: set[str] = set()  # ids of tool results whose tool_call_id another content holds in the store
        self.runs = 0
        self.run_policy = policy  # the policy of the next run (failed messages pinned)
        self.index = index_fields(target.store)

    def todo(self, result: CompactionResult) -> list[OffloadRecord]:
        return [r for r in result.offloads if (r.kind, r.key) not in self.done]

    def gets(self, todo: list[OffloadRecord]) -> list[GetOp]:
        return [GetOp(self.target.namespace(r.kind), r.key) for r in todo]

    def puts(self, todo: list[OffloadRecord], found: Sequence[Any]) -> list[tuple[OffloadRecord, PutOp]]:
        out = []
        for r, item in zip(todo, found, strict=True):
            if item is None:
                if r.compaction is None:
                    r.compaction = self.target.compaction
                out.append((r, PutOp(self.target.namespace(r.kind), r.key, r.value(), index=self.index)))
            elif isinstance(item.value, dict) and item.value.get("sha256") == r.sha256():
                self.done.add((r.kind, r.key))
                self.already += 1
            elif (r.kind == "tool_result" and r.key == r.message.tool_call_id  # type: ignore[attr-defined]
                  and r.message.id and r.message.id not in self.rekey):
                self.rekey.add(r.message.id)  # a reused tool_call_id: the rerun keys it by its message id too
            else:
                self.fail(r, "another content is already stored under this key in this thread")
        return out

    def fail(self, record: OffloadRecord, error: str) -> None:
        mid = record.message.id or ""
        self.failed.setdefault(mid, {"id": mid, "key": record.key, "error": error})

    def wrote(self, puts: list[tuple[OffloadRecord, PutOp]]) -> None:
        for r, _ in puts:
            self.done.add((r.kind, r.key))
            self.written.append(r.key)

    def write(self, todo: list[OffloadRecord]) -> None:
        """Write `todo` (sync): failures are recorded, never raised."""
        if self.down is not None:
            for r in todo:
                self.fail(r, self.down)
            return
        try:
            puts = self.puts(todo, self.target.store.batch(self.gets(todo)))
            if puts:
                self.target.store.batch([op for _, op in puts])
                self.wrote(puts)
        except Exception as exc:  # noqa: BLE001 - any store error: the messages stay as they were (reported)
            self.store_failed(todo, exc)

    async def awrite(self, todo: list[OffloadRecord]) -> None:
        """Async twin of `write`."""
        if self.down is not None:
            for r in todo:
                self.fail(r, self.down)
            return
        try:
            puts = self.puts(todo, await self.target.store.abatch(self.gets(todo)))
            if puts:
                await self.target.store.abatch([op for _, op in puts])
                self.wrote(puts)
        except Exception as exc:  # noqa: BLE001 - any store error: the messages stay as they were (reported)
            self.store_failed(todo, exc)

    def store_failed(self, records: Sequence[OffloadRecord], exc: BaseException) -> None:
        self.down = f"{type(exc).__name__}: {exc}"
        for r in records:
            self.fail(r, self.down)

    def progress(self) -> tuple[int, int]:
        """(failed messages, rekeyed tool results) so far: a run that changes either is followed by another."""
        return len(self.failed), len(self.rekey)

    def again(self, before: tuple[int, int]) -> bool:
        """After one run's writes (`before`: `progress()` before them): True when compaction must run again,
        with the failed messages pinned (`next_policy`) and the rekeyed results given their own keys."""
        self.runs += 1
        now = self.progress()
        if now == before:
            return False
        if now[0] != before[0]:
            self.run_policy = self.next_policy()
        return True

    def next_policy(self) -> CompactionPolicy:
        """The policy of the rerun: the failed messages pinned (every message once the store raised)."""
        ids = set(self.failed)
        caller = self.policy.is_pinned_by_caller
        all_pinned = self.down is not None or self.runs > _MAX_RERUNS

        def pin(m: BaseMessage) -> bool:
            return all_pinned or m.id in ids or caller(m)

        policy = dataclasses.replace(self.policy, pin=pin)
        policy.counter = self.policy.counter  # the same counter and its count cache
        return policy

    def finish(self, result: CompactionResult, original: Sequence[BaseMessage]) -> CompactionResult:
        if self.failed:
            _restore(result, original, set(self.failed), self.policy)
            logger.warning("Offload failed for %d message(s) in thread %r; kept as they were for this call: %s",
                           len(self.failed), self.target.thread_id,
                           "; ".join(f"{f['key']}: {f['error']}" for f in list(self.failed.values())[:3]))
        if self.written or self.already or self.failed:
            result.offload = {"namespace": list(self.target.namespace()[:-1]), "thread_id": self.target.thread_id,
                              "written": len(self.written), "already_stored": self.already,
                              "failed": list(self.failed.values()), "written_keys": list(self.written)}
        return result


def write_offloads(records: Sequence[OffloadRecord], target: OffloadTarget) -> dict[str, Any]:
    """Write `records` to `target` as `compact_offloaded` does (one batched lookup, one batched put of the missing
    ones); return `{"written", "already_stored", "failed"}` (counts, and `[{"id", "key", "error"}]`). Never raises
    for a store error (it is in "failed")."""
    state = _Offloads(CompactionPolicy(max_input_tokens=1), target)
    state.write(list(records))
    return {"written": len(state.written), "already_stored": state.already, "failed": list(state.failed.values())}


def _restore(result: CompactionResult, original: Sequence[BaseMessage], ids: set[str],
             policy: CompactionPolicy) -> None:
    """Put back the original of every message in `ids` that the result still changed (only the last resort can
    change a pinned message), fixing the result's figures: a message the store could not take is never changed."""
    if result.messages is original:
        return
    by_id = {m.id: m for m in original if m.id in ids}
    counter = policy.counter
    changed = False
    messages = list(result.messages)
    for i, m in enumerate(messages):
        before = by_id.get(m.id or "")
        if before is None or m is before:
            continue
        target = _own_part(before, m)
        if target is m:
            continue
        result.tokens_after += counter.count_message(target) - counter.count_message(m)
        messages[i] = target
        changed = True
    if not changed:
        return
    result.messages = messages
    result.actions = [a for a in result.actions if not set(a.message_ids) <= set(by_id)]
    result.fits = result.budget_tokens is None or result.tokens_after <= result.budget_tokens
    if not result.fits:
        result.stop_reason = "pinned_over_budget"
    result.tally = None  # the next call recounts (this failure path only)


def _own_part(before: BaseMessage, after: BaseMessage) -> BaseMessage:
    """What a message whose write failed must be in the result (`before`: the input's, `after`: the result's):
    `before`, except for the progress note a fold keeps in an assistant message's content (`progress.py`), which
    is compaction's own text, not the message's: when `after` differs from `before` only in its note (the note
    moved on to a later host, whose note has its lines; grew; or was made terse), `after` stays; when its own
    content was changed too, it gets it back, without the note if the note moved on (its lines are in the new
    host: two notes would name those calls twice)."""
    if kind(before) != AI or not note_lines(before):
        return before
    target = without_note(before) if not note_lines(after) else before  # type: ignore[arg-type]
    if without_note(after) == without_note(target):  # type: ignore[arg-type]
        return after
    return target


def compact_offloaded(messages: Sequence[Any], policy: CompactionPolicy, target: OffloadTarget, *,
                      extra_tokens: int = 0, repair: bool | None = None, tally: CountTally | None = None,
                      agent_request: AgentRequest | None = None) -> CompactionResult:
    """`compact()` that writes every original it takes out to `target` before returning (see the module).

    Args: those of `compact` (tokens for `extra_tokens`), and `target` (`offload_target(...)`).

    Returns:
        The `CompactionResult` to use: its notes and previews point at records that are in the store; what could
        not be written is unchanged; `result.offload` says what was written, found already stored, or failed.

    Raises:
        What `compact` raises. A store error is never raised: it is reported (see the module).
    """
    state = _Offloads(policy, target)
    messages = _messages(messages)
    while True:
        result = compact(messages, state.run_policy, extra_tokens=extra_tokens, repair=repair, tally=tally,
                         offload=True, offload_rekey=frozenset(state.rekey), agent_request=agent_request)
        before = state.progress()
        todo = state.todo(result)
        if todo:
            state.write(todo)
        if not state.again(before):
            return state.finish(result, messages)


async def acompact_offloaded(messages: Sequence[Any], policy: CompactionPolicy, target: OffloadTarget, *,
                             extra_tokens: int = 0, repair: bool | None = None, tally: CountTally | None = None,
                             agent_request: AgentRequest | None = None) -> CompactionResult:
    """Async twin of `compact_offloaded` (`acompact`, `store.abatch`)."""
    state = _Offloads(policy, target)
    messages = _messages(messages)
    while True:
        result = await acompact(messages, state.run_policy, extra_tokens=extra_tokens, repair=repair, tally=tally,
                                offload=True, offload_rekey=frozenset(state.rekey), agent_request=agent_request)
        before = state.progress()
        todo = state.todo(result)
        if todo:
            await state.awrite(todo)
        if not state.again(before):
            return state.finish(result, messages)


def _messages(messages: Sequence[Any]) -> list[BaseMessage]:
    """The input for compact(): a list of messages as it is (O(1): compact checks the new ones), anything else
    converted once (`compact.as_messages`) to messages with ids (a rerun must see the same objects and ids)."""
    if isinstance(messages, list) and (not messages or (isinstance(messages[0], BaseMessage)
                                                        and isinstance(messages[-1], BaseMessage))):
        return messages
    converted = as_messages(messages)
    fill_missing_ids(converted)
    return converted
