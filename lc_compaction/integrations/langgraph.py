"""The LangGraph front door: a pre-model node that compacts the history before each model call.

One object, `CompactionNode` (or the factory `compaction_hook(...)`), used either way:

- as `pre_model_hook` of `langgraph.prebuilt.create_react_agent(model, tools, pre_model_hook=node)`;
- as a node before the model node of a hand-built `StateGraph` over `MessagesState` (or any state whose
  messages live under a key of your choice):

      builder.add_node("compact", node)
      builder.add_edge(START, "compact"); builder.add_edge("compact", "model")

Two modes:

- **"rewrite"** (default): the stored history becomes the compacted one, written by id (`writes.py`): the
  removed messages as `RemoveMessage(id=...)`, the changed ones (truncated tool results, a message cut in place)
  with their ids, which the `add_messages` reducer replaces in place, and a new one (a summary, a drop marker)
  with the id of the first removed message at its place, so it takes that place. Never
  `REMOVE_ALL_MESSAGES`: a message another node writes in the same step (a parallel branch, a `Send`) is kept,
  and the messages before the first change stay byte-identical (the provider's prompt-cache prefix stays
  valid). Needs the `add_messages` reducer on the messages key.
- **"view"**: the stored history is left whole; the compacted list goes to `output_key` (default
  "llm_input_messages", the key `create_react_agent`'s model node reads first). In a hand-built graph, the model
  node must read `state["llm_input_messages"]` instead of `state["messages"]`, and declare it: annotate its
  state `CompactionState` (or add it with `input_schema=CompactionState`); the graph can stay over
  `MessagesState`. LangGraph passes a node only the keys of its own input schema, so a model node annotated
  `MessagesState` is never given the key (a KeyError in that node, which this node cannot see or prevent);
  `create_react_agent` declares the key for its model node the same way (its `CallModelInputSchema`).

Memory between calls lives in graph state under `memory_key` (default "compaction") as plain JSON (see
`plan.plan_compaction`, which both this node and the agent middleware run), so it survives `InMemorySaver`,
`SqliteSaver` and a process restart and resumes with the same result. In view mode it remembers the last model input
(as runs of the stored history, and the rewritten messages: truncated results, summaries; see `view.py`), so the
next call starts from that view plus the new messages instead of the whole history: the model input grows by
appending (a stable prompt-cache prefix) and compaction runs only when that view crosses the trigger again, exactly
as in rewrite mode.

The node declares its input as `CompactionState` (messages, llm_input_messages, compaction), so adding it to a
graph also adds the `compaction` and `llm_input_messages` keys to the graph's state: no custom state schema is
needed with the default keys. With other keys, declare them in your state and add the node with
`builder.add_node("compact", node, input_schema=YourState)`.

On every call, compacting or not, a SystemMessage added after the conversation started is sent as a
HumanMessage (same id and text, marked; Anthropic and Gemini reject a system message mid-history), reported as a
repair; only the messages added since the previous call are looked at (O(new messages)). In rewrite mode the
stored message is replaced in place by the converted one; in view mode the view holds it. So is a history that
breaks a pairing or order rule (a run stopped by `interrupt_before=["tools"]`, a crash or a timeout leaves tool
calls without results): repaired on every call (or raises with `repair=False`), compacting or not, looking at the
messages added since the previous call (`compact`); a real result that arrives after the repair (in the same
graph step, a parallel branch) takes the place of the "no result was recorded" placeholder at the next call. In
rewrite mode, calls still open at the very end of the history (the model's latest calls, with the results received
so far) are neither repaired nor compacted, only counted: a tool node that runs in the same step as the node
answers them (`plan._Planning.hold_open_tail`); they are repaired once a message follows them.

With `model=` given, the node remembers the model input it returned, per thread (in this process): a summary
written at the next call by `Summarize(model=<that model>)` repeats it as the model call sent it (`model` bound
with `tools`, `system_prompt` first) with the instruction appended, so the provider reads its prefix from the
prompt cache (`lc_compaction.agent_request`). A model node that binds other settings gets a valid summary
request that shares less of the cache.

Each call reports its outcome (a LangChain custom event and a log line, see `events.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, ensure_config
from langgraph.graph.message import add_messages
from langgraph.store.base import BaseStore
from langgraph.types import Command
from typing_extensions import Required, TypedDict

from lc_compaction.agent_request import AgentRequest
from lc_compaction.integrations.events import areport, report
from lc_compaction.integrations.history import auncompact, uncompact
from lc_compaction.integrations.offload import offload_target
from lc_compaction.integrations.plan import (
    REQUESTS_KEPT,
    CompactionPlan,
    Mode,
    ThreadLRU,
    aplan_compaction,
    check_mode,
    plan_compaction,
    resolve_policy,
    tokens_beside,
)
from lc_compaction.policy import CompactionPolicy

__all__ = ["CompactionNode", "CompactionState", "compaction_hook"]


class CompactionState(TypedDict, total=False):
    """The state keys the node reads and writes (with the default key names).

    - `messages`: the conversation (`add_messages` reducer), as in `MessagesState`.
    - `llm_input_messages`: view mode's model input (last value wins), the key `create_react_agent` reads.
    - `compaction`: the node's memory, plain JSON (see `plan.plan_compaction`).

    In view mode, annotate the model node's state with it (`def call_model(state: CompactionState)`): LangGraph
    gives a node only the keys of its own annotation.
    """

    messages: Required[Annotated[list[AnyMessage], add_messages]]
    llm_input_messages: list[AnyMessage]
    compaction: dict[str, Any]


# ----------------------------------------------------------------------------------------------- the node


class CompactionNode(Runnable[dict, Any]):
    """A graph node (or `create_react_agent` pre_model_hook) that compacts the history before the model call.

    Args:
        policy: a `CompactionPolicy`; or leave it None and give the settings below (not both).
        mode: "rewrite" (default) or "view" (see the module docstring).
        model: the chat model the agent calls; its profile's `max_input_tokens` is the window (tokens) when
            neither `policy` nor `max_input_tokens` is given, and its name picks the tiktoken encoding. A
            `Summarize(model=<this model>)` then repeats the agent's request (see the module docstring).
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
            `thread_id`. Add `lc_compaction.integrations.recall.recall_tool_result`, `recall_message` and
            `lc_compaction.integrations.search.search_compacted_history` to the agent's tools so the model can
            find and read it back; in rewrite mode each rewrite is recorded and can be undone (`uncompact`).
        deduplicate: note a tool result identical to an earlier one on arrival (`lc_compaction.dedup`); default
            True (`CompactionPolicy.deduplicate`).
        cached_price: a cached input token's price over an uncached one (0 to 1) at the provider; at 0.5 or more
            (`policy.EARLY_TRIGGER_PRICE`) the default trigger is 80% of the window instead of the budget. Default
            0.1 (`CompactionPolicy.cached_price`, `billing.DEFAULT_CACHED_PRICE`).
        clear_at_least: the fewest tokens a compaction may reclaim (`CompactionPolicy.clear_at_least`, the
            meaning of LangChain's `ClearToolUsesEdit` and Anthropic's context editing); default 0.

    Returns (from `invoke` / `ainvoke` / calling it): the state update, a dict:
        rewrite: `{messages_key: [RemoveMessage(id=...) of each removed message, changed and new messages by
        id], memory_key: memory}` (no messages key when nothing changed); when a repair added a message where
        nothing was removed, a `Command` with two writes to `messages_key` (see `writes.by_id_writes`);
        view: `{output_key: compacted, memory_key: memory}`.
        An empty stored history gives `{}` (nothing to compact).

    Raises:
        ValueError: invalid settings (naming the setting); the state has no `messages_key`.
        InvalidHistoryError: the stored history breaks a pairing/order rule (index and tool_call_id named) and
            `repair=False` was asked for (by default the node repairs it, each repair reported).
    """

    def __init__(self, policy: CompactionPolicy | None = None, *, mode: Mode = "rewrite",
                 model: BaseChatModel | None = None, tools: Sequence[Any] | None = None,
                 system_prompt: str | SystemMessage | None = None, messages_key: str = "messages",
                 output_key: str = "llm_input_messages", memory_key: str = "compaction",
                 name: str = "compaction", max_input_tokens: int | None = None, trigger: Any = None,
                 keep: Any = None, target: Any = None, reserve: int | None = None,
                 strategies: Sequence[Any] | None = None, token_counter: Any = None, model_name: str | None = None,
                 pin: Any = None, repair: bool | None = None, offload: Any = None,
                 offload_above: int | None = None, deduplicate: bool | None = None,
                 cached_price: float | None = None, clear_at_least: int | None = None) -> None:
        self.mode: Mode = check_mode(mode)
        self.policy = resolve_policy(
            policy, model=model, max_input_tokens=max_input_tokens, trigger=trigger, keep=keep, target=target,
            reserve=reserve, strategies=strategies, token_counter=token_counter, model_name=model_name, pin=pin,
            repair=repair, offload=offload, offload_above=offload_above, deduplicate=deduplicate,
            cached_price=cached_price, clear_at_least=clear_at_least)
        self.messages_key = messages_key
        self.output_key = output_key
        self.memory_key = memory_key
        self.name = name
        if isinstance(system_prompt, str):
            system_prompt = SystemMessage(content=system_prompt)
        self.extra_tokens = tokens_beside(self.policy.counter, system=system_prompt, tools=tools or ())
        """Tokens sent beside the stored messages on every call (tool schemas, a system prompt not in state)."""
        self.model = model
        self.tools = tuple(tools or ())
        self.system_prompt = system_prompt
        self._sent: ThreadLRU[AgentRequest] = ThreadLRU(REQUESTS_KEPT)
        """The model input this node returned last, per thread, as the model call sends it (`model` bound with
        `tools`, `system_prompt` first): what a cache-sharing summary request repeats."""

    def __call__(self, state: CompactionState, config: RunnableConfig | None = None) -> dict[str, Any] | Command:
        """Same as `invoke(state, config)`. The annotation tells LangGraph which state keys the node uses."""
        return self.invoke(state, config)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any] | Command:
        """Compact `input[messages_key]` (sync strategies) and return the state update (see the class).

        In a graph, the node runs inside LangGraph's own run for it (events and the summarizer's calls attach
        there); called on its own with callbacks in `config`, it opens a run named `name`. Without callbacks it
        opens none (nothing would listen to it)."""
        config = ensure_config(config)
        if config.get("callbacks") is not None and not _inside_run(config):
            # langchain-core's annotation lists (input), (input, run_manager) and (input, run_manager, config), yet it
            # also passes `config=` by keyword to a function that takes it, as `_run` does.
            out: dict[str, Any] | Command = self._call_with_config(
                self._run, input, config, run_type="chain")  # type: ignore[arg-type]
            return out
        return self._run(input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> dict[str, Any] | Command:
        """Async twin of `invoke` (strategies run through `aapply`)."""
        config = ensure_config(config)
        if config.get("callbacks") is not None and not _inside_run(config):
            out: dict[str, Any] | Command = await self._acall_with_config(
                self._arun, input, config, run_type="chain")  # type: ignore[arg-type]  # as in invoke
            return out
        return await self._arun(input, config)

    def _read(self, state: Any) -> tuple[Any, Any]:
        get = state.get if isinstance(state, dict) else lambda k, d=None: getattr(state, k, d)
        messages = get(self.messages_key, None)
        if messages is None:
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"the state has no {self.messages_key!r} key (keys: {keys}); "
                "with a custom key, declare it in your state and add the node with input_schema=YourState")
        return messages, get(self.memory_key, None)

    def _update(self, plan: CompactionPlan) -> dict[str, Any] | Command:
        update: dict[str, Any] = {self.memory_key: plan.memory}
        if self.mode == "view":
            update[self.output_key] = plan.model_input
        elif len(plan.messages_writes) == 1:
            update[self.messages_key] = plan.messages_writes[0]
        elif plan.messages_writes:  # two writes to one key, in order: only a Command can say that
            return Command(update=[*((self.messages_key, w) for w in plan.messages_writes),
                                   (self.memory_key, plan.memory)])
        return update

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any] | Command:
        messages, memory = self._read(state)
        if not messages:
            return {}
        thread = _thread(config)
        plan = plan_compaction(messages, memory, self.policy, door="langgraph_node", mode=self.mode,
                               extra_tokens=self.extra_tokens, key=self.messages_key,
                               offload=offload_target(self.policy, config=config),
                               agent_request=self._sent.get(thread), hold_open_tail=True)
        report(plan.result, plan.event, config=config)
        self._remember(thread, plan)
        return self._update(plan)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any] | Command:
        messages, memory = self._read(state)
        if not messages:
            return {}
        thread = _thread(config)
        plan = await aplan_compaction(messages, memory, self.policy, door="langgraph_node", mode=self.mode,
                                      extra_tokens=self.extra_tokens, key=self.messages_key,
                                      offload=offload_target(self.policy, config=config),
                                      agent_request=self._sent.get(thread), hold_open_tail=True)
        await areport(plan.result, plan.event, config=config)
        self._remember(thread, plan)
        return self._update(plan)

    def uncompact(self, config: RunnableConfig, compaction: int | None = None, *, graph: Any) -> dict[str, Any]:
        """Restore the thread's stored history as it was before compaction `compaction` (its number; None: the
        latest whose ladder ran), keeping every message that arrived after it, written by id through `graph`
        (the compiled graph this node runs in, with a checkpointer and, with offload, a store). With offload on
        only: the records are in the store (`lc_compaction.integrations.history.uncompact`, which says what is
        returned). If the restored history no longer fits, the node's next call compacts it again.

        Raises:
            ValueError: offload is off, view mode, no thread id, or no such compaction to undo (see
                `integrations.history.uncompact`).
        """
        return uncompact(graph, config, compaction, messages_key=self.messages_key, memory_key=self.memory_key,
                         mode=self.mode, store=self._undo_store())

    async def auncompact(self, config: RunnableConfig, compaction: int | None = None, *,
                         graph: Any) -> dict[str, Any]:
        """Async twin of `uncompact`."""
        return await auncompact(graph, config, compaction, messages_key=self.messages_key,
                                memory_key=self.memory_key, mode=self.mode, store=self._undo_store())

    def _undo_store(self) -> BaseStore | None:
        """The store given as `offload=` (None: the graph's).

        Raises:
            ValueError: offload is off (nothing was recorded).
        """
        if self.policy.offload is None:
            raise ValueError("uncompact needs offload on: the compaction records are kept in the store")
        return self.policy.offload if isinstance(self.policy.offload, BaseStore) else None

    def _remember(self, thread: str | None, plan: CompactionPlan) -> None:
        """Keep the model input of `plan` as the thread's latest request (`self._sent`), when the node knows the
        model (given as `model=`)."""
        model: Any = self.model
        settings: dict[str, Any] = {}
        tools = self.tools
        if isinstance(model, RunnableBinding) and isinstance(model.bound, BaseChatModel):
            # `model.bind_tools(tools)` given: its bound settings (the tools' schemas among them) as they are
            model, settings, tools = model.bound, dict(model.kwargs), ()
        if isinstance(model, BaseChatModel):
            self._sent.put(thread, AgentRequest(model=model, messages=tuple(plan.model_input),
                                                system=self.system_prompt, tools=tools, model_settings=settings))

    def __repr__(self) -> str:
        return f"CompactionNode(mode={self.mode!r}, policy={self.policy!r})"


def _thread(config: RunnableConfig) -> str | None:
    """The run's thread id (None without a checkpointer)."""
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


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
