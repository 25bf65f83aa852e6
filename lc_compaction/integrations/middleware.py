"""The LangChain v1 front door: an `AgentMiddleware` for `langchain.agents.create_agent`.

    agent = create_agent(model, tools, system_prompt="...", middleware=[CompactionMiddleware()])

Before each model call it compacts the stored history, with the same ladder, policy and memory as the LangGraph
node (`lc_compaction.integrations.plan.plan_compaction`), in two hooks:

- `before_model` (its own graph node, "CompactionMiddleware.before_model", as LangChain's
  `SummarizationMiddleware` does): compacts the stored messages and returns the state update, written by id
  (`writes.py`: the removed messages as `RemoveMessage(id=...)`, changed and new messages replacing a stored one
  in place; never `REMOVE_ALL_MESSAGES`) together with the memory. So compaction's writes come from this node
  and never from the model node: in `stream_mode="updates"` the model node's update is the model's reply, as
  without the middleware (`update["messages"][-1]` is the reply), and every message written here reuses a stored
  id, so none of them shows in `stream_mode="messages"` (LangGraph streams a message a node writes only when
  its id is new; a message a repair adds has its own id and can show). View mode writes only the memory.
- `wrap_model_call`: only the model request knows the system message and the tools the model receives (after
  other middleware changed them), so only there can they be counted (`extra_tokens`; the hook LangChain's
  `ContextEditingMiddleware` uses). `before_model` counts beside the messages what the latest request of the
  same thread measured (kept in this process, and in the memory as "request" for another process; 0 before
  any), and here the request is checked with what it really carries: a second plan over `request.messages`
  with the memory `before_model` just wrote counts only what is new (nothing, as a rule) and passes the request
  on unchanged; when the request carries more than `before_model` counted (its first call, a longer system
  prompt, more tools, a model with a smaller window) it is compacted for this call alone (the stored history
  follows at the next call's `before_model`); in view mode it is the view the memory describes. Nothing is
  written from here.

The request passed on to the model is remembered per thread (in this process, `plan.REQUESTS_KEPT` threads):
a summary written at the next call by `Summarize(model=<the agent's model>)` repeats it with the instruction
appended, so the provider reads its prefix from the prompt cache (`lc_compaction.agent_request`); a request
that asks for a structured response is not remembered (`create_agent` binds other tools for it).

When the window comes from the request's model (no `policy`, `max_input_tokens` or `model` given), `before_model`
knows it only once a request was seen in this process: until then the `wrap_model_call` check alone compacts
the call (the model input; its event is the call's), and the memory is not updated.

Middleware order: the first middleware in the list is the outermost. Put `CompactionMiddleware` last (innermost)
so it sees the final system prompt, tools and messages: its `before_model` runs after the others' and its
`wrap_model_call` right around the model. A message another middleware put into `request.messages` is compacted
with the rest for the call but never stored.

The window: `max_input_tokens`, else the `model` given here, else the profile of the model of each request
(`request.model.profile["max_input_tokens"]`).

A SystemMessage in the stored messages after the conversation started (another middleware's note, a tool's
`Command`) reaches the model as a HumanMessage on every call, compacting or not (see `plan_compaction`). A
history that breaks a pairing or order rule (tool calls left without results by a run stopped before its tools
ran) is repaired on every call (or raises with `repair=False`), looking only at the messages added since the
previous call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, cast

try:  # the `agents` extra; without it, an ImportError that says how to install it
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
except ModuleNotFoundError as _exc:
    if not (_exc.name or "").startswith("langchain"):
        raise
    from lc_compaction._extras import missing_extra

    raise missing_extra("CompactionMiddleware", "agents", _exc) from _exc
try:  # how create_agent's model node answers invalid tool calls (langchain 1.x; absent: nothing to mirror)
    from langchain.agents.factory import _patch_invalid_tool_calls as _answer_invalid_calls
except ImportError:  # pragma: no cover - another langchain layout
    _answer_invalid_calls: Callable[[list[Any]], list[Any]] | None = None  # type: ignore[no-redef]
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Command
from typing_extensions import NotRequired

from lc_compaction.agent_request import AgentRequest
from lc_compaction.integrations.events import areport, report
from lc_compaction.integrations.offload import OffloadTarget, offload_target
from lc_compaction.integrations.plan import (
    REQUESTS_KEPT,
    CompactionPlan,
    Mode,
    ThreadLRU,
    aplan_compaction,
    check_mode,
    model_window,
    plan_compaction,
    resolve_policy,
    tokens_beside,
)
from lc_compaction.integrations.history import auncompact, uncompact
from lc_compaction.integrations.recall import recall_message_tool, recall_tool
from lc_compaction.integrations.search import search_tool
from lc_compaction.policy import CompactionPolicy

__all__ = ["CompactionAgentState", "CompactionMiddleware"]

MEMORY_KEY = "compaction"
"""State key of the middleware's memory (plain JSON, see `plan_compaction`; the middleware adds "request")."""

class CompactionAgentState(AgentState):
    """The agent state plus the compaction memory (`compaction`: plain JSON; private: not in the agent's input
    or output schema, but checkpointed and visible in `agent.get_state(config).values`)."""

    compaction: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class CompactionMiddleware(AgentMiddleware[CompactionAgentState, Any, Any]):
    """Compacts the history before each model call of a `create_agent` agent, in its own `before_model` node
    (the state writes) and in `wrap_model_call` (the request checked with its system prompt and tools); see the
    module docstring.

    The memory (`state["compaction"]`, `plan.plan_compaction`'s layout) also holds "request": `{"messages": int
    and "last_id": the stored history `before_model` left (its length in messages and last id), "extra_tokens":
    the tokens it counted beside the messages, "max_input_tokens" and "model_name": its policy's}`, so another
    process's `before_model` plans with the same policy and `wrap_model_call` knows the call was planned.

    Args:
        policy: a `CompactionPolicy`; or leave it None and give the settings below (not both).
        model: the chat model (or a `init_chat_model` string such as "openai:gpt-4o") whose profile gives the
            window (tokens) when `max_input_tokens` is not given; as in `SummarizationMiddleware`, it is read
            for its profile and name, not called. Default: the model of each request.
        mode: "rewrite" (default: the stored history is replaced by the compacted one) or "view" (the stored
            history is kept whole; only the model input is compacted).
        trigger, keep, token_counter: as in `SummarizationMiddleware` (same names; `keep` also accepts
            `("turns", N)`; `token_counter` also accepts "exact", "approximate", "messages" or a `TokenCounter`).
        max_input_tokens, target, reserve, strategies, model_name, pin, repair: the other `CompactionPolicy`
            settings (tokens for sizes).
        offload: True to keep what compaction takes out in the agent's store (`create_agent(..., store=...)`;
            the run needs a `thread_id`) and register the `recall_tool_result`, `recall_message` and
            `search_compacted_history` tools (`self.tools`), or a `BaseStore` to use instead of the agent's. See
            `lc_compaction.offload`; each rewrite is recorded and can be undone (`uncompact`).
        offload_above: with offload, a tool result over this many tokens is offloaded on arrival (head and tail
            preview plus the handle). Default `policy.DEFAULT_OFFLOAD_ABOVE`.
        deduplicate: note a tool result identical to an earlier one on arrival (`lc_compaction.dedup`); default
            True (`CompactionPolicy.deduplicate`).
        cached_price: a cached input token's price over an uncached one (0 to 1) at the provider; at 0.5 or more
            (`policy.EARLY_TRIGGER_PRICE`) the default trigger is 80% of the window instead of the budget. Default
            0.1 (`CompactionPolicy.cached_price`, `billing.DEFAULT_CACHED_PRICE`).
        clear_at_least: the fewest tokens a compaction may reclaim (`CompactionPolicy.clear_at_least`, the
            meaning of LangChain's `ClearToolUsesEdit` and Anthropic's context editing); default 0.

    Raises:
        ValueError: invalid settings (naming the setting), both a policy and settings, or (at the first model
            call) no window anywhere and no token trigger.
        InvalidHistoryError: the history breaks a pairing/order rule and `repair=False` was asked for (by
            default the middleware repairs it: each repair in the event and the log line).
    """

    state_schema = CompactionAgentState

    def __init__(self, policy: CompactionPolicy | None = None, *, model: str | BaseChatModel | None = None,
                 mode: Mode = "rewrite", trigger: Any = None, keep: Any = None, token_counter: Any = None,
                 max_input_tokens: int | None = None, target: Any = None, reserve: int | None = None,
                 strategies: Sequence[Any] | None = None, model_name: str | None = None, pin: Any = None,
                 repair: bool | None = None, offload: Any = None, offload_above: int | None = None,
                 deduplicate: bool | None = None, cached_price: float | None = None,
                 clear_at_least: int | None = None) -> None:
        super().__init__()
        check_mode(mode)
        if isinstance(model, str):
            from langchain.chat_models import init_chat_model

            model = init_chat_model(model)
        self.mode: Mode = mode
        self._settings = dict(trigger=trigger, keep=keep, token_counter=token_counter, target=target,
                              reserve=reserve, strategies=strategies, model_name=model_name, pin=pin, repair=repair,
                              max_input_tokens=max_input_tokens, offload=offload, offload_above=offload_above,
                              deduplicate=deduplicate, cached_price=cached_price,
                              clear_at_least=clear_at_least)
        self._policies: dict[int | None, CompactionPolicy] = {}
        # what the latest request of each thread measured (and the request passed on), for before_model
        self._requests: ThreadLRU[_Seen] = ThreadLRU(REQUESTS_KEPT)
        self.policy: CompactionPolicy | None = None
        """The policy, when known before the first call (a policy, a window or a model was given)."""
        if policy is not None or max_input_tokens is not None or model is not None:
            self.policy = resolve_policy(policy, model=model, **self._settings)
        if (self.policy.offload if self.policy is not None else offload) not in (None, False):
            # the agent's ToolNode injects the runtime (store, thread)
            self.tools = [recall_tool(), recall_message_tool(), search_tool()]

    def policy_for(self, model: BaseChatModel) -> CompactionPolicy:
        """The policy for a request to `model`: the fixed one, else one built from `model`'s profile window
        (built once per window size and kept).

        Raises:
            ValueError: the settings are invalid for that model (e.g. no window in its profile and no trigger).
        """
        if self.policy is not None:
            return self.policy
        window = model_window(model)
        if window not in self._policies:
            self._policies[window] = resolve_policy(None, model=model, **self._settings)
        return self._policies[window]

    # ------------------------------------------------------------------------------------ before the call
    def before_model(self, state: CompactionAgentState, runtime: Runtime[Any]  # type: ignore[override]
                     ) -> dict[str, Any] | Command | None:
        """Compact the stored history and return the state update (see the module): `{"messages": writes by id,
        "compaction": memory}` (no "messages" when nothing changed, or in view mode); a `Command` with two writes
        to "messages" when a repair added a message where nothing was removed (`writes.by_id_writes`); None when
        there is nothing to compact or the window is not known yet.

        Raises:
            InvalidHistoryError: the history breaks a pairing/order rule and `repair=False` was asked for.
        """
        before = self._before(state, runtime)
        if before is None:
            return None
        stored, messages, memory, policy, extra = before
        plan = plan_compaction(messages, memory, policy, door="agent_middleware", mode=self.mode,
                               extra_tokens=extra, held=None if messages is stored else stored,
                               offload=_target(policy, runtime), agent_request=self._sent(runtime))
        report(plan.result, plan.event)
        return self._update(plan, stored, messages, policy, extra)

    async def abefore_model(self, state: CompactionAgentState, runtime: Runtime[Any]  # type: ignore[override]
                            ) -> dict[str, Any] | Command | None:
        """Async twin of `before_model` (strategies run through `aapply`)."""
        before = self._before(state, runtime)
        if before is None:
            return None
        stored, messages, memory, policy, extra = before
        plan = await aplan_compaction(messages, memory, policy, door="agent_middleware", mode=self.mode,
                                      extra_tokens=extra, held=None if messages is stored else stored,
                                      offload=_target(policy, runtime), agent_request=self._sent(runtime))
        await areport(plan.result, plan.event)
        return self._update(plan, stored, messages, policy, extra)

    def _before(self, state: Any, runtime: Any
                ) -> tuple[list[Any], list[Any], Any, CompactionPolicy, int] | None:
        """What `before_model` compacts with: the stored messages, the messages the model node will send
        (`_as_sent`), the memory, the policy and the tokens beside the messages, from the latest request of this
        thread in this process, else from the memory's "request" entry (another process), else from the latest
        request of any thread (0 tokens before any); None when there is nothing to compact, or when the policy
        depends on a request's model and none was seen."""
        stored = state.get("messages")
        if not stored:
            return None
        memory = state.get(MEMORY_KEY)
        seen = self._requests.get(_thread(runtime))
        latest = self._requests.latest()
        remembered = memory.get("request") if isinstance(memory, dict) else None
        remembered = remembered if isinstance(remembered, dict) else {}
        policy = (self.policy or (seen.policy if seen is not None else None) or self._remembered_policy(remembered)
                  or (latest.policy if latest is not None else None))
        if policy is None:
            return None
        extra = remembered.get("extra_tokens")
        if seen is not None:
            extra = seen.extra_tokens
        elif not (isinstance(extra, int) and not isinstance(extra, bool) and extra >= 0):
            extra = latest.extra_tokens if latest is not None else 0
        return stored, _as_sent(stored, remembered), memory, policy, extra

    def _remembered_policy(self, request: dict[str, Any]) -> CompactionPolicy | None:
        """The policy of the request a memory's "request" entry describes (its window and model name), built once
        per window as `policy_for` does; None when the entry has none or the settings need a window it lacks."""
        if "max_input_tokens" not in request:
            return None
        window = request["max_input_tokens"]
        if window in self._policies:
            return self._policies[window]
        settings = dict(self._settings)
        if settings.get("max_input_tokens") is None:
            settings["max_input_tokens"] = window
        if settings.get("model_name") is None:
            settings["model_name"] = request.get("model_name")
        try:
            policy = resolve_policy(None, **settings)
        except (TypeError, ValueError):  # a malformed entry: the request's own check compacts this call
            return None
        return self._policies.setdefault(window, policy)

    def _update(self, plan: CompactionPlan, stored: list[Any], sent: list[Any], policy: CompactionPolicy,
                extra: int) -> dict[str, Any] | Command:
        memory = plan.memory
        after = plan.model_input if self.mode == "rewrite" else stored  # the stored history once written
        if sent is not stored and self.mode == "rewrite":  # create_agent's answers to invalid calls: not ours
            held = {m.id for m in stored}
            ours = {m.id for m in sent}
            after = [m for m in after if m.id in held or m.id not in ours]
        memory["request"] = {"messages": len(after), "last_id": after[-1].id, "extra_tokens": extra,
                             "max_input_tokens": policy.max_input_tokens, "model_name": policy.model_name}
        writes = plan.messages_writes
        if len(writes) > 1:  # two writes to one key, in order: only a Command can say that
            return Command(update=[*(("messages", w) for w in writes), (MEMORY_KEY, memory)])
        update: dict[str, Any] = {MEMORY_KEY: memory}
        if writes:
            update["messages"] = writes[0]
        return update

    # ---------------------------------------------------------------------------------------- undo
    def uncompact(self, config: Any, compaction: int | None = None, *, graph: Any) -> dict[str, Any]:
        """Restore the thread's stored history as it was before compaction `compaction` (its number; None: the
        latest whose ladder ran), keeping every message that arrived after it, written by id through `graph`
        (the agent `create_agent` built with this middleware, a checkpointer and, with offload, a store).
        With offload on only: the records are in the store (`lc_compaction.integrations.history.uncompact`, which
        says what is returned). If the restored history no longer fits, the next model call compacts it again.

        Raises:
            ValueError: offload is off, view mode, no thread id, or no such compaction to undo (see
                `integrations.history.uncompact`).
        """
        return uncompact(graph, config, compaction, messages_key="messages", memory_key=MEMORY_KEY,
                         mode=self.mode, store=self._undo_store())

    async def auncompact(self, config: Any, compaction: int | None = None, *, graph: Any) -> dict[str, Any]:
        """Async twin of `uncompact`."""
        return await auncompact(graph, config, compaction, messages_key="messages", memory_key=MEMORY_KEY,
                                mode=self.mode, store=self._undo_store())

    def _undo_store(self) -> BaseStore | None:
        """The store given as `offload=` (None: the graph's).

        Raises:
            ValueError: offload is off (nothing was recorded).
        """
        offload = self.policy.offload if self.policy is not None else self._settings["offload"]
        if offload in (None, False):
            raise ValueError("uncompact needs offload on: the compaction records are kept in the store")
        return offload if isinstance(offload, BaseStore) else None

    # ---------------------------------------------------------------------------------------- the call
    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
                        ) -> ModelResponse | AIMessage:
        """Check the request with its system prompt and tools counted, compact it for this call when it
        carries more than `before_model` counted (see the module), and call the model; nothing is written."""
        if not request.messages:
            return handler(request)
        previous = self._sent(request.runtime)
        policy, extra, planned = self._measure(request)
        if planned == "holds":  # before_model's decision stands for this very request: O(1) beyond a compare
            return handler(self._sending(request))
        plan = plan_compaction(request.messages, request.state.get(MEMORY_KEY), policy, door="agent_middleware",
                               mode=self.mode, extra_tokens=extra, offload=_target(policy, request.runtime),
                               agent_request=previous, record=False)
        if not planned or plan.result.compacted:  # one event a call: before_model's, unless this one changed it
            report(plan.result, plan.event)
        return handler(self._sending(_with_messages(request, plan)))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> ModelResponse | AIMessage:
        """Async twin of `wrap_model_call` (strategies run through `aapply`)."""
        if not request.messages:
            return await handler(request)
        previous = self._sent(request.runtime)
        policy, extra, planned = self._measure(request)
        if planned == "holds":
            return await handler(self._sending(request))
        plan = await aplan_compaction(request.messages, request.state.get(MEMORY_KEY), policy,
                                      door="agent_middleware", mode=self.mode, extra_tokens=extra,
                                      offload=_target(policy, request.runtime), agent_request=previous,
                                      record=False)
        if not planned or plan.result.compacted:
            await areport(plan.result, plan.event)
        return await handler(self._sending(_with_messages(request, plan)))

    def _sent(self, runtime: Any) -> AgentRequest | None:
        """The latest model request this process passed on for the run's thread (None before any, or in another
        process): what a cache-sharing summary request repeats (`lc_compaction.agent_request`)."""
        seen = self._requests.get(_thread(runtime))
        return seen.sent if seen is not None else None

    def _sending(self, request: ModelRequest) -> ModelRequest:
        """`request`, remembered for its thread as the latest request passed on (`_sent`), unless it asks for a
        structured response (`create_agent` then binds other tools: no summary request can repeat it)."""
        thread = _thread(request.runtime)
        seen = self._requests.get(thread)
        if seen is not None:
            sent = None if request.response_format is not None else AgentRequest(
                model=request.model, messages=tuple(request.messages), system=request.system_message,
                tools=tuple(request.tools or ()), tool_choice=request.tool_choice,
                model_settings=dict(request.model_settings or {}))
            self._requests.put(thread, dataclasses.replace(seen, sent=sent))
        return request

    def _measure(self, request: ModelRequest) -> tuple[CompactionPolicy, int, str]:
        """The request's policy and tokens beside its messages (kept for this thread's next `before_model`), and
        what `before_model` planned: "" (not this stored history: its memory names another), "planned", or
        "holds" (rewrite mode, the request is the stored messages, its policy and no more tokens beside them
        than it counted: its plan is this request's, nothing to check)."""
        policy = self.policy_for(request.model)
        extra = tokens_beside(policy.counter, system=request.system_message, tools=request.tools or ())
        self._requests.put(_thread(request.runtime), _Seen(policy, extra))
        memory = request.state.get(MEMORY_KEY)
        stored: list[Any] = request.state.get("messages") or []
        entry = memory.get("request") if isinstance(memory, dict) else None
        if not (isinstance(entry, dict) and stored and entry.get("messages") == len(stored)
                and entry.get("last_id") == stored[-1].id):
            return policy, extra, ""
        counted = entry.get("extra_tokens")
        same_policy = self.policy is not None or (entry.get("max_input_tokens") == policy.max_input_tokens
                                                  and entry.get("model_name") == policy.model_name)
        holds = (self.mode == "rewrite" and same_policy and isinstance(counted, int) and extra <= counted
                 and request.messages == stored)  # the same objects: a C-level pointer comparison
        return policy, extra, "holds" if holds else "planned"


@dataclass(frozen=True)
class _Seen:
    """What the latest model request of a thread measured: its policy and the tokens beside its messages; and
    the request passed on (for a cache-sharing summary request)."""

    policy: CompactionPolicy
    extra_tokens: int
    sent: AgentRequest | None = None
    """The request passed on to the model (`CompactionMiddleware._sending`)."""


def _as_sent(stored: list[Any], request: dict[str, Any]) -> list[Any]:
    """The stored messages as create_agent's model node sends them: each invalid tool call without a result
    answered by LangChain's own error ToolMessage (`langchain.agents.factory._patch_invalid_tool_calls`, which the
    model node stores itself), so the compaction before the call neither repairs nor counts them otherwise. Only
    the messages stored since the previous call (`request`: the memory's entry) are looked at, O(new), unless
    one of them carries an invalid call; `stored` itself when none does."""
    if _answer_invalid_calls is None:
        return stored
    n, last_id = request.get("messages"), request.get("last_id")
    start = n if isinstance(n, int) and 0 < n <= len(stored) and stored[n - 1].id == last_id else 0
    if not any(isinstance(m, AIMessage) and m.invalid_tool_calls for m in stored[start:]):
        return stored
    sent = _answer_invalid_calls(stored)
    return stored if len(sent) == len(stored) else sent


def _with_messages(request: ModelRequest, plan: CompactionPlan) -> ModelRequest:
    """`request` with the plan's model input (the request itself when the input is its own messages)."""
    if plan.model_input is request.messages:
        return request
    # the model input is the request's own messages after compaction, so nothing is converted
    return request.override(messages=cast("list[AnyMessage]", plan.model_input))


def _thread(runtime: Any) -> str | None:
    """The run's thread id (None without a checkpointer): the key of what the latest request measured."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is None:
        from langgraph.config import get_config

        try:
            thread = (get_config().get("configurable") or {}).get("thread_id")
        except RuntimeError:
            thread = None
    return None if thread is None else str(thread)


def _target(policy: CompactionPolicy, runtime: Any) -> OffloadTarget | None:
    """Where this call offloads (None when off): the agent's store and the run's thread (`offload_target`)."""
    if policy.offload is None:
        return None
    return offload_target(policy, store=getattr(runtime, "store", None), thread_id=_thread(runtime))
