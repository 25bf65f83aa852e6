"""The LangChain v1 front door: an `AgentMiddleware` for `langchain.agents.create_agent`.

    agent = create_agent(model, tools, system_prompt="...", middleware=[CompactionMiddleware()])

Before each model call it compacts the messages the model will receive, counting beside them the system prompt
and the tool schemas of that very request (`extra_tokens`), with the same ladder, policy and memory as the
LangGraph node (`lc_compaction.integrations.plan.plan_compaction`).

Why `wrap_model_call` and not `before_model`: only the model request knows the system message and the tools the
model will receive (after other middleware changed them), so only there can they be counted. This is the hook
LangChain's `ContextEditingMiddleware` uses. In rewrite mode the stored history is updated through the
`ExtendedModelResponse` command the model node applies right after appending the model's reply: written by id
(`writes.py`: the removed messages as `RemoveMessage(id=...)`, changed and new messages replacing a stored one
in place), never with `REMOVE_ALL_MESSAGES` (as `SummarizationMiddleware` does), so the reply and whatever another
middleware writes in the same step are kept, and nothing compaction writes shows in `stream_mode="messages"`
(LangGraph streams a message a node writes only when its id is new, and every one written here reuses a stored
id).

Middleware order: the first middleware in the list is the outermost. Put `CompactionMiddleware` last (innermost)
so it sees the final system prompt, tools and messages. In rewrite mode the writes touch only messages the state
holds: a message another middleware put into `request.messages` is compacted with the rest but never stored.

The window: `max_input_tokens`, else the `model` given here, else the profile of the model of each request
(`request.model.profile["max_input_tokens"]`).

A SystemMessage in `request.messages` after the conversation started (another middleware's note, a tool's
`Command`) reaches the model as a HumanMessage on every call, compacting or not (see `plan_compaction`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, cast

try:  # the `agents` extra; without it, an ImportError that says how to install it
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
except ModuleNotFoundError as _exc:
    if not (_exc.name or "").startswith("langchain"):
        raise
    from lc_compaction._extras import missing_extra

    raise missing_extra("CompactionMiddleware", "agents", _exc) from _exc
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
from langgraph.types import Command
from typing_extensions import NotRequired

from lc_compaction.integrations.events import areport, report
from lc_compaction.integrations.plan import (
    CompactionPlan,
    Mode,
    aplan_compaction,
    check_mode,
    model_window,
    plan_compaction,
    resolve_policy,
    tokens_beside,
)
from lc_compaction.integrations.offload import OffloadTarget, offload_target
from lc_compaction.integrations.recall import recall_tool
from lc_compaction.policy import CompactionPolicy
from lc_compaction.structure import fill_missing_ids

__all__ = ["CompactionAgentState", "CompactionMiddleware"]

MEMORY_KEY = "compaction"
"""State key of the middleware's memory (plain JSON, see `plan_compaction`)."""


class CompactionAgentState(AgentState):
    """The agent state plus the compaction memory (`compaction`: plain JSON; private: not in the agent's input
    or output schema, but checkpointed and visible in `agent.get_state(config).values`)."""

    compaction: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class CompactionMiddleware(AgentMiddleware[CompactionAgentState, Any, Any]):
    """Compacts the history before each model call of a `create_agent` agent.

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
            the run needs a `thread_id`) and register the `recall_tool_result` tool (`self.tools`), or a
            `BaseStore` to use instead of the agent's. See `lc_compaction.offload`.
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
        self.policy: CompactionPolicy | None = None
        """The policy, when known before the first call (a policy, a window or a model was given)."""
        if policy is not None or max_input_tokens is not None or model is not None:
            self.policy = resolve_policy(policy, model=model, **self._settings)
        if (self.policy.offload if self.policy is not None else offload) not in (None, False):
            self.tools = [recall_tool()]  # the agent's ToolNode injects the runtime (store, thread)

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

    def _extra_tokens(self, policy: CompactionPolicy, request: ModelRequest) -> int:
        return tokens_beside(policy.counter, system=request.system_message, tools=request.tools or ())

    def _respond(self, plan: CompactionPlan, response: Any) -> ExtendedModelResponse:
        # The model node appends the reply first, then applies this command: the writes are by id, so the reply
        # stays after the compacted history.
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        writes = plan.messages_writes
        if len(writes) > 1:  # a repair added a message: the tail is appended again, then the reply after it
            reply = list(response.result)
            fill_missing_ids(reply)
            pairs = [("messages", [*writes[0], *(RemoveMessage(id=m.id) for m in reply)]),
                     ("messages", [*writes[1], *reply]), (MEMORY_KEY, plan.memory)]
            return ExtendedModelResponse(model_response=response, command=Command(update=pairs))
        update: dict[str, Any] = {MEMORY_KEY: plan.memory}
        if writes:
            update["messages"] = writes[0]
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
                        ) -> ExtendedModelResponse | ModelResponse | AIMessage:
        """Compact `request.messages`, call the model with the result, and store the update (see the module)."""
        if not request.messages:
            return handler(request)
        policy = self.policy_for(request.model)
        plan = plan_compaction(request.messages, request.state.get(MEMORY_KEY), policy, door="agent_middleware",
                               mode=self.mode, extra_tokens=self._extra_tokens(policy, request),
                               held=request.state.get("messages"), offload=_target(policy, request))
        report(plan.result, plan.event)
        return self._respond(plan, handler(request.override(messages=_any_messages(plan.model_input))))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> ExtendedModelResponse | ModelResponse | AIMessage:
        """Async twin of `wrap_model_call` (strategies run through `aapply`)."""
        if not request.messages:
            return await handler(request)
        policy = self.policy_for(request.model)
        plan = await aplan_compaction(request.messages, request.state.get(MEMORY_KEY), policy,
                                      door="agent_middleware", mode=self.mode,
                                      extra_tokens=self._extra_tokens(policy, request),
                                      held=request.state.get("messages"), offload=_target(policy, request))
        await areport(plan.result, plan.event)
        return self._respond(plan, await handler(request.override(messages=_any_messages(plan.model_input))))


def _any_messages(messages: list[BaseMessage]) -> list[AnyMessage]:
    """`messages` as `ModelRequest.override` annotates them (a union of langchain-core's message classes); the
    list is the request's own messages after compaction, so nothing is converted."""
    return cast("list[AnyMessage]", messages)


def _target(policy: CompactionPolicy, request: ModelRequest) -> OffloadTarget | None:
    """Where this call offloads (None when off): the agent's store and the run's thread (`offload_target`)."""
    if policy.offload is None:
        return None
    runtime = request.runtime
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    config = None
    if thread is None:
        from langgraph.config import get_config

        try:
            config = get_config()
        except RuntimeError:
            config = None
    return offload_target(policy, store=getattr(runtime, "store", None), config=config, thread_id=thread)
