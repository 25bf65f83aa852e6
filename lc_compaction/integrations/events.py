"""What the front doors report after each compaction: a LangChain custom event and one log line.

Both doors (the LangGraph pre-model node and the `AgentMiddleware`) call `report(...)` / `areport(...)` once per
model call, with the `CompactionResult` of that call and its event data (the `CompactionPlan`'s `event`):

- a **custom event** named `EVENT_NAME` ("lc_compaction") through
  `langchain_core.callbacks.manager.dispatch_custom_event` / `adispatch_custom_event`: seen by callback handlers
  (`on_custom_event`) and by `astream_events(version="v2")` as `{"event": "on_custom_event", "name":
  "lc_compaction", "data": {...}}`. Its data is `event_payload(...)`: `CompactionResult.to_dict()` plus the
  outcome ("compacted" or "skipped"), the reason (the result's `stop_reason`), the mode and the door.
  `dispatch_custom_event` raises `RuntimeError` when there is no parent run (a direct call outside any
  runnable); that case is detected first and the event is skipped (the log line is still written). It is also
  skipped when no handler would receive it (no callbacks, no tracing configured): nothing listens.
- a **log line** through the standard `logging` module (logger `lc_compaction.integrations.events`):
  INFO  "Context optimized: 12,345 -> 6,789 tokens (truncate_tool_results, drop_old_exchanges), 14 messages
  affected" when the history was changed, followed by "; repaired: <kind> at <index> (<tool_call_id>); ..." when
  the input was repaired (`repairs_text`); INFO "Context compaction skipped (nothing_removable): ..." when the
  trigger fired but nothing could be removed; WARNING when the result is still over the budget (the pinned part
  alone is over the window: the model call will likely fail), and WARNING when a strategy failed (the summarizer's
  model failed, timed out or is cooling down after a failure): the line then ends with
  "; summarize failed: <the error's text>" (from `details["failures"]`, also in the event's data, whose `reason`
  is then "strategy_failed" when nothing else changed the history); DEBUG for a call under the trigger.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, get_callback_manager_for_config

from lc_compaction.compact import CompactionResult

__all__ = ["EVENT_NAME", "Door", "areport", "event_payload", "log_line", "messages_affected", "outcome_payload",
           "repairs_text", "report"]

EVENT_NAME = "lc_compaction"
"""Name of the custom event dispatched after every compaction decision (ran or skipped)."""

logger = logging.getLogger(__name__)

Door = Literal["langgraph_node", "agent_middleware"]
"""Which front door ran: the LangGraph pre-model node or the LangChain v1 `AgentMiddleware`."""


def messages_affected(result: CompactionResult) -> int:
    """Number of distinct messages (count of messages, not tokens) that an action of `result` removed, truncated,
    shortened or summarized, plus the repairs made to the input (each repair touches one message)."""
    ids = {mid for action in result.actions for mid in action.message_ids}
    return len(ids) + len(result.repairs)


def outcome_payload(result: CompactionResult, *, mode: str) -> dict[str, Any]:
    """The part of the event data that does not depend on the door: plain JSON (str, int, float, bool, None,
    list, dict). The front doors keep it in their memory as "last".

    Keys: everything `CompactionResult.to_dict()` gives (`tokens_before`, `tokens_after` (tokens),
    `messages_before`, `messages_after` (messages), `strategies_applied`, `actions`, `stop_reason`, `fits`, ...)
    plus `outcome` ("compacted" when the history was changed, else "skipped"), `reason` (= `stop_reason`:
    "under_trigger", "under_target", "under_budget", "nothing_removable", "strategy_failed", "pinned_over_budget"),
    `messages_affected` (messages, see `messages_affected`) and `mode` ("rewrite" or "view").
    Values the result holds that JSON cannot encode are written as their `str()`.
    """
    data = result.to_dict()
    if result.actions or result.repairs or result.details or result.removed:
        data = json.loads(json.dumps(data, default=str))  # what a strategy reported may not be plain JSON
    data.update({
        "outcome": "compacted" if result.compacted else "skipped",
        "reason": result.stop_reason,
        "messages_affected": messages_affected(result),
        "mode": mode,
    })
    return data


def repairs_text(result: CompactionResult) -> str:
    """The repairs of `result` for the log line: each kind with the input index (and tool_call_id) of every
    repair of that kind, e.g. "system_message_converted at 5; missing_tool_result_added at 3 (call_0)"."""
    by_kind: dict[str, list[str]] = {}
    for r in result.repairs:
        where = f"{r.index}" + (f" ({r.tool_call_id})" if r.tool_call_id else "")
        by_kind.setdefault(r.kind, []).append(where)
    return "; ".join(f"{kind} at {', '.join(places)}" for kind, places in by_kind.items())


def event_payload(result: CompactionResult, *, mode: str, door: Door, state_messages: int | None = None,
                  outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    """The data of the custom event: plain JSON, `outcome_payload(result, mode=mode)` plus `door` (which front
    door ran) and `state_messages` (messages in graph state, which in view mode can exceed `messages_before`).

    `outcome`: the `outcome_payload` already made for `result` (the front doors keep one in their memory), to
    reuse (copied, not changed) instead of serializing the result again.
    """
    base = outcome_payload(result, mode=mode) if outcome is None else outcome
    return {**base, "door": door, "state_messages": state_messages}


def _level(result: CompactionResult) -> int:
    """The logging level of `result`'s log line (see `log_line`)."""
    if not result.fits or _failures(result):
        return logging.WARNING
    if result.compacted or result.stop_reason != "under_trigger":
        return logging.INFO
    return logging.DEBUG


def _log(result: CompactionResult) -> None:
    """Write `result`'s log line, formatting it only when the logger would emit it."""
    level = _level(result)
    if logger.isEnabledFor(level):
        logger.log(*log_line(result))


def _failures(result: CompactionResult) -> dict[str, str]:
    failures = result.details.get("failures") if result.details else None
    return failures if isinstance(failures, dict) else {}


def log_line(result: CompactionResult) -> tuple[int, str]:
    """`(logging level, message)` for `result` (see the module docstring for the wording and levels)."""
    if result.compacted:
        applied = ", ".join(result.strategies_applied) or "repairs only"
        text = (f"Context optimized: {result.tokens_before:,} -> {result.tokens_after:,} tokens ({applied}), "
                f"{messages_affected(result)} messages affected")
        if result.repairs:
            text += "; repaired: " + repairs_text(result)
        if not result.fits:
            text += (f"; still over the budget of {result.budget_tokens:,} tokens "
                     "(the pinned part alone is over the window)")
    else:
        text = (f"Context compaction skipped ({result.stop_reason}): {result.tokens_before:,} tokens, "
                f"{result.messages_before} messages")
        if not result.fits:
            text += f"; over the budget of {result.budget_tokens:,} tokens and nothing can be removed"
    for strategy, error in _failures(result).items():
        text += f"; {strategy} failed: {error}"
    return _level(result), text


def _has_parent_run(config: RunnableConfig | None) -> bool:
    """Whether `config` (or the running context when None) belongs to a run an event can be attached to (the
    condition under which `dispatch_custom_event` does not raise) and some handler would receive it (tracing
    configured by environment variables included)."""
    config = ensure_config(config)
    callbacks = config.get("callbacks")
    if not callbacks:
        return False  # no handlers and no parent run: nothing to attach to (and no manager to build)
    manager = get_callback_manager_for_config(config)
    return manager.parent_run_id is not None and bool(manager.handlers)


def _announce(result: CompactionResult, config: RunnableConfig | None) -> bool:
    """Write `result`'s log line; whether its custom event has a run to attach to and a handler to receive it."""
    _log(result)
    return _has_parent_run(config)


def report(result: CompactionResult, event: dict[str, Any], *, config: RunnableConfig | None = None
           ) -> dict[str, Any]:
    """Write the log line for `result` and dispatch `event` as the custom event `EVENT_NAME`; return `event`.

    Args:
        result: the compaction result of this model call.
        event: the event data (`event_payload(result, ...)`; the front doors get it from their `CompactionPlan`).
        config: the runnable config of the current run (None: taken from the running context, as LangChain does).

    The event is skipped, without error, when there is no parent run to attach it to or no handler to receive it.
    """
    if _announce(result, config):
        dispatch_custom_event(EVENT_NAME, event, config=config)
    return event


async def areport(result: CompactionResult, event: dict[str, Any], *, config: RunnableConfig | None = None
                  ) -> dict[str, Any]:
    """Async twin of `report` (dispatches with `adispatch_custom_event`)."""
    if _announce(result, config):
        await adispatch_custom_event(EVENT_NAME, event, config=config)
    return event
