"""The measured calls: ours and LangChain's anchors, on the same histories, per model call.

Two situations, each at every history size (see ``session.py`` for how a history "of N messages" is built):

**Steady state** (nothing to compact; the common case, paid on every model call). Consecutive samples are
consecutive model calls of one session: the history at sample ``i`` is the one at sample ``i - 1`` plus one
exchange, the same at every size (``exchange``: the session's median tool exchange, see
``session.typical_exchange``, relabeled each time with fresh message and tool call ids and a tool result of its
own, see `grown`), so the sizes differ only by the history before it and every sample meets new messages. The
history before them is as our front door's state holds it (`settled`: a tool result that repeats an earlier one
is already the note it became when it arrived, ``lc_compaction.dedup``), and no new result repeats an earlier
one: a call that finds a repeat writes its note, which is not the steady state. Our front doors get what they
stored at the previous sample's call (the node's ``compaction`` memory; the per-message count cache of the
policy's counter), exactly as LangGraph passes state from one step to the next; the first sample's previous call
is made untimed (`_Previous`). Our nodes get a config like LangGraph's (`graph_config`). One more row of ours
(`RELOADED`) makes every call the first of a graph run on a checkpointed thread: the history comes back from
LangGraph's checkpoint serializer as new, equal objects. The window is `STEADY_WINDOW`, larger than every history
here, so no call compacts (checked after every call).

**Firing** (compaction runs, no LLM). The window is set so the history is at ``fill`` times it (0.85: just over
an 80% trigger; 2.0: twice the window, e.g. a long session resumed with a smaller model). Our rows use
`FIRING_TRIGGER` and `FIRING_TARGET` (80% and 60% of the window: the anchors' trigger and trim size below, and the
policy defaults these rows were first measured with; the default policy now compacts only when the call would not
fit, i.e. not at 0.85), so what is timed is the same work as the anchors' and as earlier RESULTS.md. Our rows
count ``prefix`` first (the previous call did), untimed, with a fresh counter per sample and the process's memos
of the texts cleared (`lc_compaction._memo.clear`: nothing of an earlier sample's extractions or notes is
remembered); then the timed call counts the new exchange and compacts (the node gets the memory that previous call
stored). Every call is checked
to have compacted and to fit.

Anchors (LangChain, same process, same histories):

- ``SummarizationMiddleware.before_model(state, runtime)``, built with a ``GenericFakeChatModel`` and
  ``trigger=("tokens", 10**9)`` (never fires); its default counter is ``count_tokens_approximately``. It reads
  only ``state["messages"]``; ``runtime`` is a bare ``langgraph.runtime.Runtime()``.
- ``trim_messages(strategy="last", token_counter=count_tokens_approximately, include_system=True,
  start_on="human", end_on=("human", "tool"))``, the LangChain docs' chat-history recipe; ``max_tokens`` is the
  window (steady state) or 60% of it (firing: the target our ladder compacts to).
- ``ClearToolUsesEdit.apply(messages, count_tokens=count_tokens_approximately)``, the call
  ``ContextEditingMiddleware`` makes with its default ``token_count_method="approximate"``, on a list copy;
  ``trigger`` is the window (steady) or 80% of it (firing; ``keep=3``, ``clear_at_least=0``, the defaults).
- ``ContextEditingMiddleware.wrap_model_call(request, handler)`` (steady state): the whole per-call cost of that
  middleware, which deep-copies the messages before applying its edits.
- An exact recount: ``TiktokenCounter(cache_size=0).count_messages(history)``, tiktoken on every message.
- Not a compaction, the scale for `RELOADED`: LangGraph's own checkpoint load of the history
  (``JsonPlusSerializer.loads_typed``, what InMemorySaver and SqliteSaver do at the start of every run).

The anchors' windows are scaled by their own counter (``count_tokens_approximately``), so they face the same
fill as ours.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.callbacks.manager import CallbackManager
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime

from benchmarks.session import call_points, cut_at
from benchmarks.timing import Timed
from lc_compaction import CompactionPolicy, TiktokenCounter, _memo, compact
from lc_compaction.integrations.langgraph import CompactionNode
from lc_compaction.integrations.middleware import CompactionMiddleware

__all__ = ["FIRING_TARGET", "FIRING_TRIGGER", "HEADLINE", "RELOADED", "STEADY_WINDOW", "Cell", "Situation",
           "firing_cells", "graph_config", "grown", "headline_cell", "settled", "steady_cells"]

STEADY_WINDOW = 100_000_000
"""Window (tokens) of the steady-state rows: larger than every history here (8,000 messages are ~2M tokens),
so nothing is compacted and what is measured is the cost of deciding that."""

FIRING_TRIGGER = ("fraction", 0.8)
"""Our trigger in the firing rows: 80% of the window, where the anchors' `ClearToolUsesEdit` triggers (and the
policy default before issue 13)."""

FIRING_TARGET = ("fraction", 0.6)
"""Our target in the firing rows: 60% of the window, what `trim_messages` trims to there (and the policy default
before issue 13)."""

_SERDE = JsonPlusSerializer()
"""LangGraph's checkpoint serializer (what InMemorySaver and SqliteSaver store messages with)."""

REPLY = AIMessage(content="ok", id="benchmark-reply")
"""What the fake model handler returns to the middlewares (never part of a measured history)."""


def settled(history: list[BaseMessage], model_name: str) -> list[BaseMessage]:
    """``history`` as our front door's state holds it after the calls that brought it there: its arrival edits
    applied (each tool result that repeats an earlier one is the note it became when it arrived, `compact` under
    the steady rows' window, `STEADY_WINDOW`), so that a call on it finds nothing to do. The same list object when
    there is nothing to edit.

    Raises:
        AssertionError: the history is over `STEADY_WINDOW`, or a call on the settled history would edit it again.
    """
    def policy() -> CompactionPolicy:
        return CompactionPolicy(max_input_tokens=STEADY_WINDOW, model_name=model_name)

    result = compact(history, policy())
    _expect(not result.triggered, f"a history of {len(history)} messages is over the steady window")
    _expect(compact(result.messages, policy()).messages is result.messages,
            "the settled history is edited again by the next call")
    return result.messages


@dataclass
class Situation:
    """One history size.

    Attributes:
        prefix: the history at the first model call (the session cut at a call point), `settled`.
        exchange: the messages each later call adds: an assistant message with tool calls and their results.
        model_name: chooses the tiktoken encoding of the exact counter.
    """

    prefix: list[BaseMessage]
    exchange: list[BaseMessage]
    model_name: str
    _added: list[BaseMessage] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def cut(cls, session: list[BaseMessage], size: int, exchange: list[BaseMessage], model_name: str
            ) -> Situation:
        """The situation of ``size`` messages: ``session`` cut at its last model call point leaving room for one
        ``exchange`` (``session.cut_at``), `settled`.

        Raises:
            ValueError: no call point early enough (``session.cut_at``).
        """
        p = cut_at(call_points(session), size - len(exchange))
        return cls(settled(session[:p], model_name), exchange, model_name)

    @property
    def messages(self) -> int:
        """Messages in the history of sample 0 (``prefix`` plus one ``exchange``)."""
        return len(self.prefix) + len(self.exchange)

    @property
    def history(self) -> list[BaseMessage]:
        """The history of sample 0 (see `grown`)."""
        return grown(self, 0)

    def added(self, exchanges: int) -> list[BaseMessage]:
        """The first ``exchanges`` exchanges added after ``prefix``, exchange ``j`` relabeled ``~j`` (built
        once, then the same objects every time, as messages stay in graph state)."""
        size = len(self.exchange)
        while len(self._added) < exchanges * size:
            self._added.extend(_relabeled(self.exchange, len(self._added) // size))
        return self._added[:exchanges * size]


@dataclass
class Cell:
    """One measured row at one size.

    Attributes:
        name: the row label in RESULTS.md.
        ours: True for lc-compaction's rows, False for LangChain's anchors.
        setup: builds sample ``i``'s argument (untimed; see ``timing.measure``).
        run: the measured call.
        check: raises ``AssertionError`` when a call's result is not what the situation requires (it compacted
            in the steady state, or did not when firing); given the argument and the result.
        self_timed: `run` returns a `timing.Timed` (only part of the call is ours); no peak-memory figure then.
    """

    name: str
    ours: bool
    setup: Callable[[int], Any]
    run: Callable[[Any], Any]
    check: Callable[[Any, Any], None]
    self_timed: bool = False


def _suffix(value: str, i: int) -> str:
    return f"{value}~{i}"


def _relabeled(exchange: list[BaseMessage], j: int) -> list[BaseMessage]:
    """Copies of ``exchange`` with ``~j`` appended to their ids and tool call ids (on both the call and its
    result), so no count cache has seen them, and to each tool result's text (a line ``[call ~j]``), so none
    repeats the exchange's original in the session or another copy (a repeat would be deduplicated on arrival)."""
    out: list[BaseMessage] = []
    for m in exchange:
        update: dict[str, Any] = {"id": _suffix(m.id or "m", j)}
        if isinstance(m, AIMessage) and m.tool_calls:
            update["tool_calls"] = [{**tc, "id": _suffix(tc["id"], j)} for tc in m.tool_calls]
        if isinstance(m, ToolMessage):
            update["tool_call_id"] = _suffix(m.tool_call_id, j)
            tag = f"\n[call ~{j}]"
            update["content"] = ([*m.content, {"type": "text", "text": tag}] if isinstance(m.content, list)
                                 else f"{m.content}{tag}")
        out.append(m.model_copy(update=update))
    return out


def grown(sit: Situation, i: int) -> list[BaseMessage]:
    """The history at sample ``i``: ``prefix`` plus one exchange per sample 0..i (relabeled, see
    `Situation.added`); a new list each time, the same message objects (as LangGraph's ``add_messages`` gives).

    Consecutive samples are consecutive model calls of one session: the history at sample ``i - 1`` is the
    history at sample ``i`` without its last exchange. ``grown(sit, -1)`` is ``prefix``.
    """
    return sit.prefix + sit.added(i + 1)


def _system_split(messages: list[BaseMessage]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    """(system prompt, the rest): ``create_agent`` keeps the system prompt out of the stored messages."""
    if messages and isinstance(messages[0], SystemMessage):
        return messages[0], messages[1:]
    return None, messages


def _handler(request: ModelRequest) -> ModelResponse:
    return ModelResponse(result=[REPLY])


def _fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(()))


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


# ------------------------------------------------------------------------------------------- steady state


class _Previous:
    """What our front door stored at the previous model call, for the next sample's setup.

    ``setup(i)`` takes the memory stored by sample ``i - 1``'s call when that was the last call made (the
    common case: samples run in order); otherwise (the first sample, or a sample out of sequence such as the
    peak-memory or profiling pass) it makes that previous call itself, untimed, on ``grown(sit, i - 1)``.
    """

    def __init__(self, call: Callable[[list[BaseMessage], Any], Any], memory_of: Callable[[Any], Any]) -> None:
        self.call = call
        self.memory_of = memory_of
        self.index: int | None = None
        self.memory: Any = None
        self.pending: int | None = None

    def before(self, sit: Situation, i: int) -> Any:
        """The memory stored at the call before sample ``i``; sample ``i`` is the next one recorded."""
        if self.index != i - 1:
            self.memory = self.memory_of(self.call(grown(sit, i - 1), None))
        self.pending = i
        return self.memory

    def after(self, out: Any) -> Any:
        """Record what sample ``pending``'s call stored; returns ``out``."""
        self.index, self.memory = self.pending, self.memory_of(out)
        return out


def graph_config() -> RunnableConfig:
    """A config like the one LangGraph gives a node: the callback manager of the node's run (a parent run id; no
    handler attached, as in an ``invoke`` without callbacks or tracing)."""
    return {"callbacks": CallbackManager(handlers=[], parent_run_id=uuid.uuid4())}


def _node_cell(sit: Situation, name: str, *, mode: str, token_counter: str) -> Cell:
    """Our node in the steady state, called as LangGraph calls it (`graph_config`)."""
    node = CompactionNode(CompactionPolicy(max_input_tokens=STEADY_WINDOW, token_counter=token_counter,
                                           model_name=sit.model_name), mode=mode)  # type: ignore[arg-type]
    config = graph_config()

    def call(messages: list[BaseMessage], memory: Any) -> dict:
        return node.invoke({"messages": messages, "compaction": memory}, config)

    previous = _Previous(call, lambda out: out["compaction"])

    def setup(i: int) -> dict:
        memory = previous.before(sit, i)
        return {"messages": grown(sit, i), "compaction": memory}

    def check(state: dict, out: dict) -> None:
        _expect(out["compaction"]["last"]["outcome"] == "skipped" and "messages" not in out,
                f"{name}: compacted in the steady state")

    return Cell(name, True, setup, lambda state: previous.after(node.invoke(state, config)), check)


class _ThreadState(MessagesState):
    compaction: dict


def _reloaded_cell(sit: Situation) -> Cell:
    """`RELOADED`: our node inside a compiled graph with an ``InMemorySaver``, one graph run per sample, so each
    call is the first of a run: LangGraph loads the history from the checkpoint (new, equal objects) and the
    previous run's objects are freed. Only the node's own call is timed (`timing.Timed`)."""
    node = CompactionNode(CompactionPolicy(max_input_tokens=STEADY_WINDOW, model_name=sit.model_name))
    timed: list[tuple[dict, int]] = []

    def compaction(state: _ThreadState, config: RunnableConfig) -> dict:
        t0 = time.perf_counter_ns()
        out = node.invoke(state, config)
        timed.append((out, time.perf_counter_ns() - t0))
        return out

    builder = StateGraph(_ThreadState)
    builder.add_node("compaction", compaction)
    builder.add_edge(START, "compaction")
    builder.add_edge("compaction", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    thread: dict[str, Any] = {"index": None, "config": None}

    def setup(i: int) -> tuple[dict, list[BaseMessage]]:
        if thread["index"] != i - 1:  # a new thread whose previous run ended on the history of sample i - 1
            thread["config"] = {"configurable": {"thread_id": f"{sit.messages}-{i}"}}
            graph.invoke({"messages": grown(sit, i - 1)}, thread["config"])
        thread["index"] = i
        return thread["config"], grown(sit, i)[-len(sit.exchange):]

    def run(arg: tuple[dict, list[BaseMessage]]) -> Timed:
        config, exchange = arg
        timed.clear()
        graph.invoke({"messages": exchange}, config)
        return Timed(*timed[-1])

    def check(arg: Any, out: dict) -> None:
        _expect(out["compaction"]["last"]["outcome"] == "skipped" and "messages" not in out,
                f"{RELOADED}: compacted in the steady state")

    return Cell(RELOADED, True, setup, run, check, self_timed=True)


def _middleware_cell(sit: Situation, name: str) -> Cell:
    """Our middleware in the steady state: its `before_model` (its own node, which compacts and writes) and its
    `wrap_model_call` (the request checked with its system prompt and tools), as `create_agent` calls them."""
    policy = CompactionPolicy(max_input_tokens=STEADY_WINDOW, model_name=sit.model_name)
    middleware = CompactionMiddleware(policy)
    model = _fake_model()
    system = _system_split(sit.prefix)[0]

    def state_of(messages: list[BaseMessage], memory: Any) -> dict[str, Any]:
        state: dict[str, Any] = {"messages": _system_split(messages)[1]}
        if memory is not None:
            state["compaction"] = memory
        return state

    def call(state: dict[str, Any]) -> Any:
        update = middleware.before_model(state, None)  # type: ignore[arg-type]
        after = {**state, "compaction": update["compaction"]}  # the steady state writes no message (checked)
        request = ModelRequest(model=model, messages=after["messages"], system_message=system, tools=[],
                               state=after, runtime=None)  # type: ignore[arg-type]
        middleware.wrap_model_call(request, _handler)
        return update

    previous = _Previous(lambda messages, memory: call(state_of(messages, memory)), lambda out: out["compaction"])

    def setup(i: int) -> dict[str, Any]:
        return state_of(grown(sit, i), previous.before(sit, i))

    def check(state: dict[str, Any], update: Any) -> None:
        _expect(update["compaction"]["last"]["outcome"] == "skipped" and "messages" not in update,
                f"{name}: compacted in the steady state")

    config = graph_config()

    def run(state: dict[str, Any]) -> Any:
        token = var_child_runnable_config.set(config)  # the nodes' config, as LangGraph sets it
        try:
            return previous.after(call(state))
        finally:
            var_child_runnable_config.reset(token)

    return Cell(name, True, setup, run, check)


HEADLINE = "CompactionNode rewrite, exact"
"""Our row the anchors are compared with in the steady state: what `create_react_agent(pre_model_hook=...)` runs
by default (rewrite mode, exact counts)."""


CHECKPOINT_LOAD = "LangGraph checkpoint load of the history (JsonPlusSerializer.loads_typed)"
"""Not a compaction: what LangGraph itself spends, at the start of every graph run on a checkpointed thread,
turning the stored history back into messages; the scale for `RELOADED`."""

RELOADED = "CompactionNode rewrite, exact, first call of a run (history from a checkpoint)"
"""The headline node when the call is the first of a graph run on a checkpointed thread (each user turn of a
chat app): the history is new objects, equal to those of the previous call, so it is compared by value."""


def headline_cell(sit: Situation) -> Cell:
    """Our headline steady-state row (`HEADLINE`): `CompactionNode`, rewrite mode, exact counts."""
    return _node_cell(sit, HEADLINE, mode="rewrite", token_counter="exact")


def steady_cells(sit: Situation) -> list[Cell]:
    """Our front doors and the anchors in the steady state at one size (see the module docstring)."""
    summarization = SummarizationMiddleware(_fake_model(), trigger=("tokens", 10**9))
    runtime = Runtime()
    clear = ClearToolUsesEdit(trigger=STEADY_WINDOW)
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=STEADY_WINDOW)])
    exact = TiktokenCounter(sit.model_name, cache_size=0)
    model = _fake_model()

    def editing_request(i: int) -> ModelRequest:
        system, rest = _system_split(grown(sit, i))
        return ModelRequest(model=model, messages=rest, system_message=system, tools=[], state={"messages": rest},  # type: ignore[arg-type]
                            runtime=None)

    def no_change(name: str) -> Callable[[Any, Any], None]:
        def check(arg: Any, out: Any) -> None:
            _expect(out is None, f"{name}: changed the history in the steady state")
        return check

    def trimmed_nothing(msgs: list[BaseMessage], out: list[BaseMessage]) -> None:
        _expect(len(out) == len(msgs), "trim_messages: trimmed in the steady state")

    def cleared_nothing(msgs: list[BaseMessage], out: list[BaseMessage]) -> None:
        _expect(not any(isinstance(m, ToolMessage) and m.response_metadata.get("context_editing") for m in out),
                "ClearToolUsesEdit: cleared in the steady state")

    def counted(msgs: list[BaseMessage], out: int) -> None:
        _expect(out > 0, "exact recount: no tokens")

    def apply_clear(msgs: list[BaseMessage]) -> list[BaseMessage]:
        clear.apply(msgs, count_tokens=count_tokens_approximately)
        return msgs

    def stored(i: int) -> tuple[tuple[str, bytes], int]:
        history = grown(sit, i)
        return _SERDE.dumps_typed(history), len(history)

    return [
        headline_cell(sit),
        _reloaded_cell(sit),
        _node_cell(sit, "CompactionNode view, exact", mode="view", token_counter="exact"),
        _middleware_cell(sit, "CompactionMiddleware rewrite, exact"),
        _node_cell(sit, "CompactionNode rewrite, approximate", mode="rewrite", token_counter="approximate"),
        Cell("SummarizationMiddleware.before_model", False, lambda i: {"messages": grown(sit, i)},
             lambda state: summarization.before_model(state, runtime), no_change("SummarizationMiddleware")),
        Cell("trim_messages (last, approximate)", False, lambda i: grown(sit, i),
             lambda msgs: trim_messages(msgs, strategy="last", max_tokens=STEADY_WINDOW,
                                        token_counter=count_tokens_approximately, include_system=True,
                                        start_on="human", end_on=("human", "tool")),
             trimmed_nothing),
        Cell("ClearToolUsesEdit.apply (approximate)", False, lambda i: grown(sit, i), apply_clear,
             cleared_nothing),
        Cell("ContextEditingMiddleware.wrap_model_call", False, editing_request,
             lambda req: editing.wrap_model_call(req, _handler),
             lambda req, out: _expect(bool(out.result), "ContextEditingMiddleware: no reply")),
        Cell("exact recount (TiktokenCounter, no cache)", False, lambda i: grown(sit, i), exact.count_messages,
             counted),
        Cell(CHECKPOINT_LOAD, False, stored, lambda arg: _SERDE.loads_typed(arg[0]),
             lambda arg, out: _expect(len(out) == arg[1], "checkpoint load: wrong number of messages")),
    ]


# ------------------------------------------------------------------------------------------------ firing


def firing_cells(sit: Situation, fill: float) -> list[Cell]:
    """Our compaction and the anchors when the history is at ``fill`` times the window (see the module
    docstring).

    Raises:
        ValueError: ``fill`` is not above `FIRING_TRIGGER` (0.8), so nothing would fire.
    """
    if not fill > FIRING_TRIGGER[1]:
        raise ValueError(f"fill: must be above the firing rows' trigger ({FIRING_TRIGGER[1]}) to fire, got {fill}")
    history = sit.history
    prefix = sit.prefix
    exact_tokens = TiktokenCounter(sit.model_name).count_messages(history)
    window = math.ceil(exact_tokens / fill)
    approx_window = math.ceil(count_tokens_approximately(history) / fill)

    def firing_policy(counter: TiktokenCounter) -> CompactionPolicy:
        return CompactionPolicy(max_input_tokens=window, token_counter=counter, trigger=FIRING_TRIGGER,
                                target=FIRING_TARGET)

    def primed_counter() -> TiktokenCounter:
        """A fresh counter that has counted the history up to the previous call (as the previous call did)."""
        counter = TiktokenCounter(sit.model_name)
        counter.count_messages(prefix)
        return counter

    def compact_setup(i: int) -> tuple[CompactionPolicy, Any]:
        _memo.clear()  # nothing remembered of an earlier sample's texts (a first compaction, as in a new process)
        counter = primed_counter()
        previous = compact(prefix, CompactionPolicy(max_input_tokens=STEADY_WINDOW, token_counter=counter))
        return firing_policy(counter), previous.tally

    def compacted(name: str) -> Callable[[Any, Any], None]:
        def check(arg: Any, result: Any) -> None:
            _expect(result.compacted and result.fits, f"{name}: did not compact to fit ({result.stop_reason})")
        return check

    def node_setup(i: int) -> tuple[CompactionNode, dict]:
        _memo.clear()
        counter = primed_counter()
        # the previous model call (nothing to compact then): its memory carries the count tally
        memory = CompactionNode(CompactionPolicy(max_input_tokens=STEADY_WINDOW, token_counter=counter)).invoke(
            {"messages": prefix})["compaction"]
        node = CompactionNode(firing_policy(counter))
        return node, {"messages": history, "compaction": memory}

    def node_compacted(arg: Any, out: dict) -> None:
        last = out["compaction"]["last"]
        _expect(last["outcome"] == "compacted" and last["fits"] and "messages" in out,
                f"CompactionNode: did not compact to fit ({last['stop_reason']})")

    def trimmed(msgs: list[BaseMessage], out: list[BaseMessage]) -> None:
        _expect(len(out) < len(msgs), "trim_messages: trimmed nothing")

    def cleared(msgs: list[BaseMessage], out: list[BaseMessage]) -> None:
        _expect(any(isinstance(m, ToolMessage) and m.response_metadata.get("context_editing") for m in out),
                "ClearToolUsesEdit: cleared nothing")

    clear = ClearToolUsesEdit(trigger=int(FIRING_TRIGGER[1] * approx_window))

    def apply_clear(msgs: list[BaseMessage]) -> list[BaseMessage]:
        clear.apply(msgs, count_tokens=count_tokens_approximately)
        return msgs

    return [
        Cell("compact(), exact, tally from the previous call", True, compact_setup,
             lambda arg: compact(history, arg[0], tally=arg[1]), compacted("compact()")),
        Cell("CompactionNode rewrite, exact", True, node_setup, lambda arg: arg[0].invoke(arg[1]),
             node_compacted),
        Cell("trim_messages (last, approximate) to 60% of the window", False, lambda i: list(history),
             lambda msgs: trim_messages(msgs, strategy="last", max_tokens=int(FIRING_TARGET[1] * approx_window),
                                        token_counter=count_tokens_approximately, include_system=True,
                                        start_on="human", end_on=("human", "tool")),
             trimmed),
        Cell("ClearToolUsesEdit.apply (approximate), trigger 80%", False, lambda i: list(history), apply_clear,
             cleared),
    ]
