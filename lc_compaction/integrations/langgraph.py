"""The LangGraph front door: a pre-model node that compacts the history before each model call.

One object, `CompactionNode` (or the factory `compaction_hook(...)`), used either way:

- as `pre_model_hook` of `langgraph.prebuilt.create_react_agent(model, tools, pre_model_hook=node)`;
- as a node before the model node of a hand-built `StateGraph` over `MessagesState` (or any state whose
  messages live under a key of your choice):

      builder.add_node("compact", node)
      builder.add_edge(START, "compact"); builder.add_edge("compact", "model")

Two modes:

- **"rewrite"** (default): the stored history is replaced by the compacted one. When the only changes keep
  every message in place with its id (truncated tool results, a message cut in place), the node returns just
  the changed messages, which the `add_messages` reducer replaces in place (same ids: the messages before the
  first change stay byte-identical, so the provider's prompt-cache prefix stays valid). Otherwise it returns
  `[RemoveMessage(id=REMOVE_ALL_MESSAGES), *compacted]`. Needs the `add_messages` reducer on the messages key.
- **"view"**: the stored history is left whole; the compacted list goes to `output_key` (default
  "llm_input_messages", the key `create_react_agent`'s model node reads first). In a hand-built graph, the model
  node must read `state["llm_input_messages"]` instead of `state["messages"]`.

Memory between calls lives in graph state under `memory_key` (default "compaction") as plain JSON (see
`plan_compaction`), so it survives `InMemorySaver`, `SqliteSaver` and a process restart and resumes with the same
result. In view mode it remembers the last model input (as runs of the stored history, and the rewritten messages:
truncated results, summaries; see `view.py`), so the next call starts from that view plus the new messages instead
of the whole history:
the model input grows by appending (a stable prompt-cache prefix) and compaction runs only when that view crosses
the trigger again, exactly as in rewrite mode.

The node declares its input as `CompactionState` (messages, llm_input_messages, compaction), so adding it to a
graph also adds the `compaction` and `llm_input_messages` keys to the graph's state: no custom state schema is
needed with the default keys. With other keys, declare them in your state and add the node with
`builder.add_node("compact", node, input_schema=YourState)`.

Each call reports its outcome (a LangChain custom event and a log line, see `events.py`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import Required, TypedDict

from lc_compaction.compact import CompactionResult, acompact, compact
from lc_compaction.tally import CountTally
from lc_compaction.integrations.events import areport, event_payload, report
from lc_compaction.integrations.offload import OffloadTarget, acompact_offloaded, compact_offloaded, offload_target
from lc_compaction.integrations.view import Rebuilt, rebuild_view, view_memory
from lc_compaction.policy import CompactionPolicy

__all__ = [
    "MEMORY_VERSION",
    "CompactionNode",
    "CompactionPlan",
    "CompactionState",
    "Mode",
    "aplan_compaction",
    "compaction_hook",
    "model_window",
    "plan_compaction",
    "resolve_policy",
]

logger = logging.getLogger(__name__)

Mode = Literal["rewrite", "view"]
""""rewrite": replace the stored history by the compacted one; "view": store everything, send the compacted list."""

MEMORY_VERSION = 2
"""Version of the memory layout kept under `memory_key`; memory of another version is ignored (recomputed).
2: view mode describes its model input as runs of the stored history (1: as a list of every message id)."""

_MODES = ("rewrite", "view")


class CompactionState(TypedDict, total=False):
    """The state keys the node reads and writes (with the default key names).

    - `messages`: the conversation (`add_messages` reducer), as in `MessagesState`.
    - `llm_input_messages`: view mode's model input (last value wins), the key `create_react_agent` reads.
    - `compaction`: the node's memory, plain JSON (see `plan_compaction`).
    """

    messages: Required[Annotated[list[AnyMessage], add_messages]]
    llm_input_messages: list[AnyMessage]
    compaction: dict[str, Any]


# ----------------------------------------------------------------------------------------------- the policy


def model_window(model: Any) -> int | None:
    """The context window of a chat model, in tokens: `model.profile["max_input_tokens"]` (LangChain's model
    profile, the value `SummarizationMiddleware` reads for fractional limits). None when the model has no profile
    or the profile does not say."""
    profile = getattr(model, "profile", None)
    if not isinstance(profile, dict):
        return None
    window = profile.get("max_input_tokens")
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _model_name(model: Any) -> str | None:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def resolve_policy(policy: CompactionPolicy | None = None, *, model: BaseChatModel | None = None,
                   **settings: Any) -> CompactionPolicy:
    """The policy a front door uses: `policy` itself, or a `CompactionPolicy(**settings)`.

    Settings left at None are not passed (the policy's defaults apply). When `max_input_tokens` is not given
    and `model` is, the window (tokens) comes from the model's profile (`model_window`); `model_name` (which
    picks the tiktoken encoding) comes from the model's `model_name` / `model` attribute when not given.

    Raises:
        ValueError: both `policy` and settings are given; or the policy is invalid (the message names the
            setting, and says when the model's profile had no `max_input_tokens` to fall back on).
        TypeError: `policy` is not a `CompactionPolicy`, or a setting name is unknown.
    """
    given = {k: v for k, v in settings.items() if v is not None}
    if policy is not None:
        if not isinstance(policy, CompactionPolicy):
            raise TypeError(f"policy: expected a CompactionPolicy, got {type(policy).__name__}")
        if given:
            raise ValueError(f"give either policy or the settings {sorted(given)}, not both")
        return policy
    if model is not None:
        if given.get("max_input_tokens") is None and (window := model_window(model)) is not None:
            given["max_input_tokens"] = window
        if given.get("model_name") is None and (name := _model_name(model)) is not None:
            given["model_name"] = name
    try:
        return CompactionPolicy(**given)
    except ValueError as exc:
        if given.get("max_input_tokens") is None and model is not None:
            raise ValueError(f"{exc} (the model {type(model).__name__} has no profile['max_input_tokens']: "
                             "pass max_input_tokens=... or a trigger such as ('tokens', 100_000))") from exc
        raise


# ----------------------------------------------------------------------------------------------- the plan


@dataclass
class CompactionPlan:
    """What a front door does for one model call.

    Attributes:
        result: the `CompactionResult` of this call.
        model_input: the messages to send to the model (never empty, no `RemoveMessage`).
        messages_update: the update for the stored messages in rewrite mode: the changed messages alone
            (same ids, replaced in place) or `[RemoveMessage(id=REMOVE_ALL_MESSAGES), *compacted]`; None when
            the stored history stays as it is (view mode, or nothing changed).
        memory: the new memory (plain JSON) to store under the memory key.
    """

    result: CompactionResult
    model_input: list[BaseMessage]
    messages_update: list[BaseMessage] | None
    memory: dict[str, Any]

    @property
    def rewrites_all(self) -> bool:
        """True when `messages_update` replaces the whole stored history (starts with REMOVE_ALL_MESSAGES)."""
        first = self.messages_update[0] if self.messages_update else None
        return isinstance(first, RemoveMessage) and first.id == REMOVE_ALL_MESSAGES


def _as_messages(messages: Sequence[Any], key: str, start: int = 0) -> list[BaseMessage]:
    """The stored history as a list of messages; only `messages[start:]` is checked (the messages before were
    checked by the previous call: O(k) per call for k new messages)."""
    if isinstance(messages, list) and all(isinstance(m, BaseMessage) for m in messages[max(start - 1, 0):]):
        return messages
    try:
        return list(convert_to_messages(messages))
    except Exception as exc:  # convert_to_messages raises bare ValueError / NotImplementedError
        raise ValueError(f"state[{key!r}]: could not convert to LangChain messages: {exc}") from exc


def _memory(memory: Any, mode: str) -> dict[str, Any] | None:
    """The previous call's memory when it is of this version and mode (else None: start from scratch)."""
    if isinstance(memory, dict) and memory.get("version") == MEMORY_VERSION and memory.get("mode") == mode:
        return memory
    return None


def _prepare(messages: Sequence[Any], memory: Any, mode: str, key: str
             ) -> tuple[list[BaseMessage], Rebuilt | None, list[BaseMessage], CountTally | None]:
    """(stored history as messages with ids, the previous view plus the new messages (view mode), what to
    compact, the previous call's count tally). Only the messages added since the previous call are checked and
    given ids: O(k)."""
    if mode not in _MODES:
        raise ValueError(f"mode: must be 'rewrite' or 'view', got {mode!r}")
    previous = _memory(memory, mode)
    tally = _tally(memory)
    if mode == "view":
        view = previous.get("view") if previous is not None else None
        covered = view.get("covered") if isinstance(view, dict) else None
        start = covered if isinstance(covered, int) and 0 <= covered <= len(messages) else 0
    else:
        start = tally.length if tally is not None and tally.length <= len(messages) else 0
    stored = _as_messages(messages, key, start)
    if stored is not messages:
        start = 0  # converted: new objects, all of them to check
    # ids before any removal: given in place to the new messages (as SummarizationMiddleware does; LangGraph's
    # add_messages has normally given them already); compact() copies duplicates when it compacts
    for m in stored[start:]:
        if not m.id:
            m.id = str(uuid.uuid4())
    base = rebuild_view(stored, previous.get("view")) if mode == "view" and previous is not None else None
    return stored, base, base.messages if base is not None else stored, tally


def _tally(memory: Any) -> CountTally | None:
    """The counting tally the previous call stored (None when absent or from another memory version)."""
    if isinstance(memory, dict) and memory.get("version") == MEMORY_VERSION:
        return CountTally.from_dict(memory.get("tally"))
    return None


def _finish(stored: list[BaseMessage], base: Rebuilt | None, compacted_from: list[BaseMessage], memory: Any,
            mode: str, result: CompactionResult) -> CompactionPlan:
    out = result.messages
    if not out:  # compact never empties a non-empty history (the first request is pinned): a bug if it does
        raise AssertionError("compaction returned an empty history for a non-empty one; please report it")
    old = _memory(memory, mode) or {}
    new_memory: dict[str, Any] = {
        "version": MEMORY_VERSION,
        "mode": mode,
        "calls": int(old.get("calls", 0)) + 1,
        "compactions": int(old.get("compactions", 0)) + int(result.compacted),
        "last": {k: v for k, v in event_payload(result, mode=mode, door="langgraph_node").items()
                 if k not in ("door", "state_messages")},
    }
    if result.tally is not None:  # lets the next call count only the messages added since (O(k))
        new_memory["tally"] = result.tally.to_dict()
    update: list[BaseMessage] | None = None
    if mode == "view":
        new_memory["view"] = view_memory(stored, base, old.get("view"), out, unchanged=out is compacted_from)
    elif result.compacted:
        stored_ids = {m.id for m in stored if m.id}
        in_place = (len(out) == len(stored) and all(a.id == b.id for a, b in zip(out, stored))
                    and all(m.id in stored_ids for m in out))
        if in_place:
            update = [m for m, before in zip(out, stored) if m is not before]
        else:
            update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *out]
    # the compacted list is a new list; an unchanged one is the input list itself, passed on without a copy
    return CompactionPlan(result=result, model_input=out if mode == "rewrite" else list(out), messages_update=update,
                          memory=new_memory)


def plan_compaction(messages: Sequence[Any], memory: Any, policy: CompactionPolicy, *, mode: Mode = "rewrite",
                    extra_tokens: int = 0, key: str = "messages", offload: OffloadTarget | None = None
                    ) -> CompactionPlan:
    """Compact the stored history for one model call and say how to update the state. Used by both doors.

    Args:
        messages: the stored history (non-empty): `BaseMessage`s, or anything `convert_to_messages` accepts.
            Messages without an id get one, in place, before anything is removed.
        memory: what the previous call stored under the memory key (None on the first call; anything that does
            not match the stored history is ignored and the whole history is compacted).
        policy: the `CompactionPolicy`.
        mode: "rewrite" or "view" (see the module docstring).
        extra_tokens: tokens sent beside the messages (a system prompt or tool schemas not in `messages`).
        key: the state key the messages come from (named in errors).
        offload: where to write what compaction takes out (`integrations.offload.offload_target`), when
            `policy.offload` is on: the writes happen here, before the plan is returned.

    The memory written (plain JSON; in view mode it holds the messages compaction rewrote):
    `{"version": 2, "mode": ..., "calls": int, "compactions": int, "last": <event data of this call>,
    "tally": <CountTally.to_dict(): what was counted, so the next call counts only the new messages>,
    "view": <the model input as runs of the stored history and rewritten messages (truncated results,
    summaries), see `lc_compaction.integrations.view`>}`; "view" only in view mode.

    Raises:
        ValueError: `messages` is empty or cannot be converted; `mode` is unknown.
        InvalidHistoryError: the history breaks a pairing/order rule and the policy does not repair
            (names the message index and tool_call_id).
    """
    if not messages:
        raise ValueError(f"state[{key!r}] is empty: there is nothing to send to the model")
    stored, base, to_compact, tally = _prepare(messages, memory, mode, key)
    result = (compact(to_compact, policy, extra_tokens=extra_tokens, tally=tally) if offload is None else
              compact_offloaded(to_compact, policy, offload, extra_tokens=extra_tokens, tally=tally))
    return _finish(stored, base, to_compact, memory, mode, result)


async def aplan_compaction(messages: Sequence[Any], memory: Any, policy: CompactionPolicy, *, mode: Mode = "rewrite",
                           extra_tokens: int = 0, key: str = "messages", offload: OffloadTarget | None = None
                           ) -> CompactionPlan:
    """Async twin of `plan_compaction` (strategies run through `aapply`, so an LLM summarizer is awaited)."""
    if not messages:
        raise ValueError(f"state[{key!r}] is empty: there is nothing to send to the model")
    stored, base, to_compact, tally = _prepare(messages, memory, mode, key)
    result = (await acompact(to_compact, policy, extra_tokens=extra_tokens, tally=tally) if offload is None else
              await acompact_offloaded(to_compact, policy, offload, extra_tokens=extra_tokens, tally=tally))
    return _finish(stored, base, to_compact, memory, mode, result)


# ----------------------------------------------------------------------------------------------- the node


class CompactionNode(Runnable[dict, dict]):
    """A graph node (or `create_react_agent` pre_model_hook) that compacts the history before the model call.

    Args:
        policy: a `CompactionPolicy`; or leave it None and give the settings below (not both).
        mode: "rewrite" (default) or "view" (see the module docstring).
        model: the chat model the agent calls; its profile's `max_input_tokens` is the window (tokens) when
            neither `policy` nor `max_input_tokens` is given, and its name picks the tiktoken encoding.
        tools: the tools bound to the model (their schemas are sent with every call and are counted: tokens
            by `policy.counter.count_tools`). Pass the same list you give `create_react_agent`.
        system_prompt: a system prompt the model receives but that is not in the stored messages
            (`create_react_agent(prompt="...")`); counted, never stored. Leave None when the system message is
            in the state (then it is counted as a message and always kept).
        messages_key / output_key / memory_key: the state keys for the history, view mode's model input, and
            the memory. With non-default keys add the node with `input_schema=` a state that declares them.
        name: the node's run name in traces.
        max_input_tokens, trigger, keep, target, reserve, strategies, token_counter, model_name, pin, repair:
            `CompactionPolicy` settings (same names and units; `trigger`, `keep` and `token_counter` are the
            names LangChain's `SummarizationMiddleware` uses).
        offload, offload_above: offload what compaction takes out (`lc_compaction.offload`): a `BaseStore`, or
            True for the graph's store (`builder.compile(store=...)`); the run's config must carry a
            `thread_id`. Add `lc_compaction.integrations.recall.recall_tool_result` to the agent's tools so the
            model can read it back.

    Returns (from `invoke` / `ainvoke` / calling it): the state update, a dict:
        rewrite: `{messages_key: changed messages or [RemoveMessage(REMOVE_ALL_MESSAGES), *compacted],
        memory_key: memory}` (no messages key when nothing changed);
        view: `{output_key: compacted, memory_key: memory}`.
        An empty stored history gives `{}` (nothing to compact).

    Raises:
        ValueError: invalid settings (naming the setting); the state has no `messages_key`.
        InvalidHistoryError: the stored history breaks a pairing/order rule (index and tool_call_id named) and
            the policy does not repair.
    """

    def __init__(self, policy: CompactionPolicy | None = None, *, mode: Mode = "rewrite",
                 model: BaseChatModel | None = None, tools: Sequence[Any] | None = None,
                 system_prompt: str | SystemMessage | None = None, messages_key: str = "messages",
                 output_key: str = "llm_input_messages", memory_key: str = "compaction",
                 name: str = "compaction", max_input_tokens: int | None = None, trigger: Any = None,
                 keep: Any = None, target: Any = None, reserve: int | None = None,
                 strategies: Sequence[Any] | None = None, token_counter: Any = None, model_name: str | None = None,
                 pin: Any = None, repair: bool | None = None, offload: Any = None,
                 offload_above: int | None = None) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode: must be 'rewrite' or 'view', got {mode!r}")
        self.policy = resolve_policy(
            policy, model=model, max_input_tokens=max_input_tokens, trigger=trigger, keep=keep, target=target,
            reserve=reserve, strategies=strategies, token_counter=token_counter, model_name=model_name, pin=pin,
            repair=repair, offload=offload, offload_above=offload_above)
        self.mode: Mode = mode
        self.messages_key = messages_key
        self.output_key = output_key
        self.memory_key = memory_key
        self.name = name
        counter = self.policy.counter
        if isinstance(system_prompt, str):
            system_prompt = SystemMessage(content=system_prompt)
        self.extra_tokens = (counter.count_tools(list(tools or ()))
                             + (counter.count_message(system_prompt) if system_prompt is not None else 0))
        """Tokens sent beside the stored messages on every call (tool schemas, a system prompt not in state)."""

    def __call__(self, state: CompactionState, config: RunnableConfig | None = None) -> dict[str, Any]:
        """Same as `invoke(state, config)`. The annotation tells LangGraph which state keys the node uses."""
        return self.invoke(state, config)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Compact `input[messages_key]` (sync strategies) and return the state update (see the class).

        In a graph, the node runs inside LangGraph's own run for it (events and the summarizer's calls attach
        there); called on its own with callbacks in `config`, it opens a run named `name`. Without callbacks it
        opens none: the steady-state cost stays a fraction of a millisecond."""
        config = ensure_config(config)
        if config.get("callbacks") is not None and not _inside_run(config):
            return self._call_with_config(self._run, input, config, run_type="chain")
        return self._run(input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Async twin of `invoke` (strategies run through `aapply`)."""
        config = ensure_config(config)
        if config.get("callbacks") is not None and not _inside_run(config):
            return await self._acall_with_config(self._arun, input, config, run_type="chain")
        return await self._arun(input, config)

    def _read(self, state: Any) -> tuple[Any, Any]:
        get = state.get if isinstance(state, dict) else lambda k, d=None: getattr(state, k, d)
        messages = get(self.messages_key, None)
        if messages is None:
            raise ValueError(
                f"the state has no {self.messages_key!r} key (keys: {sorted(state) if isinstance(state, dict) else type(state).__name__}); "
                "with a custom key, declare it in your state and add the node with input_schema=YourState")
        return messages, get(self.memory_key, None)

    def _update(self, plan: CompactionPlan) -> dict[str, Any]:
        update: dict[str, Any] = {self.memory_key: plan.memory}
        if self.mode == "view":
            update[self.output_key] = plan.model_input
        elif plan.messages_update:
            update[self.messages_key] = plan.messages_update
        return update

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, memory = self._read(state)
        if not messages:
            return {}
        plan = plan_compaction(messages, memory, self.policy, mode=self.mode, extra_tokens=self.extra_tokens,
                               key=self.messages_key, offload=offload_target(self.policy, config=config))
        report(plan.result, mode=self.mode, door="langgraph_node", config=config, state_messages=len(messages),
               base=plan.memory["last"])
        return self._update(plan)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, memory = self._read(state)
        if not messages:
            return {}
        plan = await aplan_compaction(messages, memory, self.policy, mode=self.mode,
                                      extra_tokens=self.extra_tokens, key=self.messages_key,
                                      offload=offload_target(self.policy, config=config))
        await areport(plan.result, mode=self.mode, door="langgraph_node", config=config,
                      state_messages=len(messages), base=plan.memory["last"])
        return self._update(plan)

    def __repr__(self) -> str:
        return f"CompactionNode(mode={self.mode!r}, policy={self.policy!r})"


def _inside_run(config: RunnableConfig) -> bool:
    """Whether `config` carries a parent run's callback manager (the node runs as part of a graph step)."""
    from langchain_core.callbacks.base import BaseCallbackManager

    callbacks = config.get("callbacks")
    return isinstance(callbacks, BaseCallbackManager) and callbacks.parent_run_id is not None


def compaction_hook(policy: CompactionPolicy | None = None, **kwargs: Any) -> CompactionNode:
    """Build a `CompactionNode`: `create_react_agent(model, tools, pre_model_hook=compaction_hook(model=model))`.

    Takes the same arguments as `CompactionNode` (a policy, or the policy settings plus `mode`, `model`, `tools`,
    `system_prompt` and the state keys). Raises what `CompactionNode` raises.
    """
    return CompactionNode(policy, **kwargs)
