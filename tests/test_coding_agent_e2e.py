"""A coding agent's long single-request loop finishes within the recursion limit, end to end (issue 24).

A scripted chat model (a LangChain fake model) REPLAYS a real coding run of the vendored traces
(`CONVERSATION`, mini-swe-agent on pvlib: one `bash` tool, results of up to about 2,000 tokens): one recorded
command per model call (its recorded thought and `bash({"command": ...})`), and the `bash` tool answers with the
recorded output of that command (by its position: a deterministic replay). It reacts the way a real model does:
before issuing command i+1 it checks that the result of command i is visible WHOLE in what it received (the
`ToolMessage` answering its latest call holds the recorded output byte for byte: not truncated, not folded into a
progress note); if not, it issues command i again. After the last command it answers `FINAL`. A package that cut
the newest result would make it ask again, and again: the run would stop at the recursion limit.

The recorded commands are a prefix of the run, long enough for the history to go well over the window (1.5 to 1.7
times it; the uncompacted history is checked to be over the window, and some input smaller than it): 25 commands
at 8,000 tokens, 50 at 16,000, all 94 at 32,000. Front doors: `create_agent` + `CompactionMiddleware` and a
compiled `StateGraph` with a `CompactionNode` before the model node, each in rewrite and in view mode; the
window comes from the model's profile.

Every model input passes `structure.check_invariants` and the oracle's structural checks (against the uncompacted
history), holds the first request as sent, and fits the window (`tests.agent_replay.wire_tokens`, counted
independently of the package, bound tool schemas included).

The recursion limit: LangGraph's default (25 steps) is too small for 25 commands. Each model call that calls a
tool takes three graph steps (the compaction node or the middleware's `before_model`, the model, the tools) and
the final answer two, so C commands with no repeat take 3 * C + 2 steps; the limit (`recursion_limit`) leaves
room for `repeats_allowed` (10%, at least 2) repeated commands on top, so a model that keeps asking again is
stopped after a few rounds. The model calls themselves are asserted to be exactly C + 1, no repeat at all: the
largest recorded result (1,953 tokens) fits the smallest window beside the request (1,135 tokens), so a correct
package never has a reason to hide the newest result, and one repeat means it did; the room left in the limit
makes such a failure say "a call was repeated" rather than end in `GraphRecursionError`.

The issue's "40-page listing": `read_page(page)` returns one page of a deterministic JSON listing (about 1,400
tokens each, `PAGES` pages: 57,000 tokens in all) through `create_agent` + `CompactionMiddleware` at 8,000
tokens; the model asks for page p+1 only when page p is visible whole, and the run reads every page once.

The tests can fail: shown its input with the latest result cut to half (`cut_latest`: what a package that cut
the newest result would send), the same scripted model, coding or reading pages, asks again until LangGraph
raises `GraphRecursionError` (`test_a_model_shown_a_cut_result_loops_until_the_limit`). Kept small: the file runs
in about 15 seconds on 2 cores.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import MessagesState
from pydantic import Field

from lc_compaction import load_traces
from lc_compaction.integrations import CompactionMiddleware, CompactionNode, CompactionState
from lc_compaction.integrations.plan import Mode
from lc_compaction.structure import check_invariants
from tests.agent_replay import wire_tokens
from tests.builders import compact_model_tools
from tests.oracle import check_all_structural
from tests.shared_data import traces_dir

CONVERSATION = "mini-swe-agent/deepseek-chat/deepseek_chat_dev/pvlib__pvlib-python-1707"
"""A vendored coding run (in the sample `tests.shared_data` keeps, so a bare clone has it): 94 `bash` commands,
results of up to 1,953 tokens, 47,000 tokens of history in all."""

COMMANDS = {8_000: 25, 16_000: 50, 32_000: 94}
"""Window (tokens) -> how many recorded commands are replayed: the history ends 1.5 to 1.7 times the window."""

FINAL = "Done: every recorded command was run."
STEPS_PER_CALL = 3
"""Graph steps per model call that calls a tool: the compaction node (or `before_model`), the model, the tools."""


def repeats_allowed(commands: int) -> int:
    """Repeated commands the recursion limit leaves room for: 10%, at least 2."""
    return max(2, commands // 10)


def recursion_limit(commands: int) -> int:
    """Steps for `commands` tool calls, the final answer, and `repeats_allowed` repeats (see the module)."""
    return STEPS_PER_CALL * (commands + repeats_allowed(commands)) + 2


@dataclass(frozen=True)
class Step:
    """One recorded command: the assistant's text before it, the command, and its recorded output."""

    thought: str
    command: str
    output: str


@dataclass(frozen=True)
class Recording:
    """The recorded system prompt, first request and commands."""

    system: str
    request: str
    steps: tuple[Step, ...]


@functools.cache
def recording() -> Recording:
    """`CONVERSATION`, read with the package's loader from the shared data (`tests.shared_data`)."""
    traces = load_traces(sorted(traces_dir().glob("*.jsonl")))
    coding = {t.id: t.messages for t in traces if t.id.startswith("mini-swe-agent/")}
    messages = coding[CONVERSATION]
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    steps = []
    for m in messages:
        if isinstance(m, AIMessage) and m.tool_calls:
            (call,) = m.tool_calls
            assert call["name"] == "bash" and set(call["args"]) == {"command"}
            output = results[str(call["id"])].content
            assert isinstance(output, str)
            steps.append(Step(m.text, call["args"]["command"], output))
    assert isinstance(messages[0], SystemMessage) and isinstance(messages[1], HumanMessage)
    return Recording(messages[0].text, messages[1].text, tuple(steps))


def _position(tool_call_id: str) -> int:
    """The recorded command a call replays: its id is `call-{position}-{model call}`."""
    return int(tool_call_id.split("-")[1])


def bash_tool(steps: tuple[Step, ...]) -> BaseTool:
    """The `bash` tool of the replay: the recorded output of the command at the call's position."""

    @tool
    def bash(command: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Run a bash command and return its output."""
        step = steps[_position(tool_call_id)]
        assert step.command == command, "the call does not replay the recorded command"
        return step.output

    return bash


def _answer(messages: list[BaseMessage], call_id: str) -> ToolMessage | None:
    return next((m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id), None)


class ScriptedAgentModel(GenericFakeChatModel):
    """Makes `count` tool calls in order, one per model call, each only when the previous one's result is
    visible whole (else the previous one again); then answers `final`. Checks and records every input.

    Subclasses say what a call is (`call`) and what its whole result is (`result`)."""

    system: str
    request: str
    count: int
    final: str
    window: int
    messages: Any = iter(())
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    issued: list[tuple[int, str]] = Field(default_factory=list)
    """(position, tool call id) of every tool call made, in order."""
    uncompacted: list[BaseMessage] = Field(default_factory=list)
    """The history without compaction: the system prompt, the request, every reply and the tool's result."""
    tool_name: str = "bash"
    cut_latest: bool = False
    """Cut the latest tool result of every input to half before reading it (the tests that show the loop)."""

    def call(self, position: int, call_id: str, n: int) -> AIMessage:
        raise NotImplementedError

    def result(self, position: int) -> str:
        raise NotImplementedError

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        n = len(self.calls)
        if self.cut_latest:
            messages = _cut_latest(messages)
        self.calls.append(list(messages))
        if not self.uncompacted:
            self.uncompacted.extend([SystemMessage(self.system, id="system"), HumanMessage(self.request, id="request")])
        elif self.issued:
            position, call_id = self.issued[-1]
            self.uncompacted.append(ToolMessage(self.result(position), tool_call_id=call_id, name=self.tool_name,
                                                id=f"result-{n}"))
        self.check(messages, kwargs)
        if not self.issued:
            todo = 0
        else:
            position, call_id = self.issued[-1]
            answer = _answer(messages, call_id)
            whole = answer is not None and answer.content == self.result(position)
            todo = position + 1 if whole else position
        if todo == self.count:
            reply = AIMessage(self.final, id=f"final-{n}")
        else:
            call_id = f"call-{todo}-{n}"
            self.issued.append((todo, call_id))
            reply = self.call(todo, call_id, n)
        self.uncompacted.append(reply)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def check(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> None:
        """What the model receives is a valid request (the core's invariant check, the independent oracle against
        the uncompacted history), starts with the system prompt, holds the first request as sent, and fits."""
        assert check_invariants(messages) == [], check_invariants(messages)
        check_all_structural(self.uncompacted, messages)
        assert isinstance(messages[0], SystemMessage) and messages[0].text == self.system, "the system prompt moved"
        assert any(isinstance(m, HumanMessage) and m.id == "request" and m.text == self.request for m in messages), \
            "the first request is not in the model input as sent"
        used = wire_tokens(messages, kwargs.get("tools"))
        assert used <= self.window, f"model call #{len(self.calls) - 1}: {used} tokens, over the window {self.window}"


class CodingModel(ScriptedAgentModel):
    """Replays the recorded commands (`steps`) as `bash` calls, each with its recorded thought."""

    steps: tuple[Step, ...]

    def call(self, position: int, call_id: str, n: int) -> AIMessage:
        step = self.steps[position]
        return AIMessage(step.thought, id=f"step-{n}", tool_calls=[
            {"name": "bash", "args": {"command": step.command}, "id": call_id, "type": "tool_call"}])

    def result(self, position: int) -> str:
        return self.steps[position].output


def _cut_latest(messages: list[BaseMessage]) -> list[BaseMessage]:
    """`messages` with the latest tool result cut to half of its text."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ToolMessage)), default=None)
    if last is None:
        return messages
    cut = messages[last]
    return [*messages[:last], cut.model_copy(update={"content": cut.text[:len(cut.text) // 2]}), *messages[last + 1:]]


def coding_model(window: int, *, cut_latest: bool = False) -> CodingModel:
    """The replay of the first `COMMANDS[window]` recorded commands, with a `window`-token profile."""
    rec = recording()
    commands = COMMANDS[window]
    return CodingModel(system=rec.system, request=rec.request, steps=rec.steps[:commands], count=commands,
                       final=FINAL, window=window, profile={"max_input_tokens": window}, cut_latest=cut_latest)


# ------------------------------------------------------------------------------------------------ front doors
def agent_with_middleware(model: ScriptedAgentModel, tools: list[BaseTool], mode: Mode) -> Any:
    system = SystemMessage(model.system, id="system")  # with an id, as every message the oracle checks
    return create_agent(model, tools, system_prompt=system, middleware=[CompactionMiddleware(mode=mode)],
                        checkpointer=InMemorySaver())


def graph_with_node(model: ScriptedAgentModel, tools: list[BaseTool], mode: Mode) -> Any:
    """compact -> model -> (tools -> compact)* over MessagesState; in view mode the model node reads
    `llm_input_messages` (it declares `CompactionState`)."""
    bound = model.bind_tools(tools)

    def call_model(state: CompactionState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["llm_input_messages"] if mode == "view" else state["messages"])]}

    node = CompactionNode(model=model, tools=tools, mode=mode)
    return compact_model_tools(node, call_model, tools, CompactionState if mode == "view" else MessagesState)


DOORS: dict[str, Callable[[ScriptedAgentModel, list[BaseTool], Mode], Any]] = {
    "create_agent": agent_with_middleware, "stategraph": graph_with_node}


def run(door: str, model: ScriptedAgentModel, tools: list[BaseTool], mode: Mode) -> dict[str, Any]:
    """One request through the door, within `recursion_limit(model.count)`; returns the final state's values."""
    graph = DOORS[door](model, tools, mode)
    first: list[BaseMessage] = [HumanMessage(model.request, id="request")]
    if door == "stategraph":  # the system prompt lives in the state (create_agent adds its own)
        first.insert(0, SystemMessage(model.system, id="system"))
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit(model.count)}
    graph.invoke({"messages": first}, config)
    values: dict[str, Any] = graph.get_state(config).values
    return values


def check_finished(model: ScriptedAgentModel, values: dict[str, Any], mode: Mode) -> None:
    """The run answered `final` after making every call once, in order, and compaction did its work."""
    assert values["messages"][-1].content == model.final
    assert [p for p, _ in model.issued] == list(range(model.count)), "a call was repeated (its result was not whole)"
    assert len(model.calls) == model.count + 1
    assert values["compaction"]["compactions"] >= 1
    assert wire_tokens(model.uncompacted[:-1]) > model.window, "the history never went over the window"
    assert any(wire_tokens(c) < wire_tokens(model.uncompacted[:2 + 2 * i]) for i, c in enumerate(model.calls)), \
        "no model input was smaller than the uncompacted history"
    if mode == "view":  # the stored history is whole: every result as the tool gave it
        stored = [m.content for m in values["messages"] if isinstance(m, ToolMessage)]
        assert stored == [model.result(p) for p, _ in model.issued]


@pytest.mark.parametrize("mode", ["rewrite", "view"])
@pytest.mark.parametrize("door", list(DOORS))
@pytest.mark.parametrize("window", list(COMMANDS))
def test_a_replayed_coding_run_finishes(window: int, door: str, mode: Mode) -> None:
    model = coding_model(window)
    values = run(door, model, [bash_tool(model.steps)], mode)
    check_finished(model, values, mode)


# ------------------------------------------------------------------------------------------------ 40 pages
PAGES = 40
PAGE_ITEMS = 24
"""Records per page: about 1,400 tokens of JSON."""
PAGES_FINAL = f"Read all {PAGES} pages of the listing."
WORDS = ["walnut desk", "oak shelf", "steel lamp", "linen chair", "glass vase", "cedar box", "wool rug", "brass hook"]


def page_text(page: int) -> str:
    """Page `page` of the listing: deterministic JSON records (id, name, price, stock, tags)."""
    items = [{"id": f"P{page:02d}-{i:03d}", "name": f"{WORDS[(page * 7 + i) % len(WORDS)]} {page * PAGE_ITEMS + i}",
              "price": round((page * 31 + i * 17) % 997 + 0.99, 2), "stock": (page * 13 + i * 29) % 120,
              "tags": [WORDS[(page + i) % len(WORDS)].split()[0], f"lot-{page * i % 17}"]} for i in range(PAGE_ITEMS)]
    return json.dumps({"page": page, "of": PAGES, "items": items}, indent=1)


@tool
def read_page(page: int) -> str:
    """Read one page (0-based) of the product listing."""
    return page_text(page)


class PagesModel(ScriptedAgentModel):
    """Reads the listing page after page: `read_page(p + 1)` only when page p is visible whole."""

    tool_name: str = "read_page"

    def call(self, position: int, call_id: str, n: int) -> AIMessage:
        return AIMessage("", id=f"step-{n}", tool_calls=[
            {"name": "read_page", "args": {"page": position}, "id": call_id, "type": "tool_call"}])

    def result(self, position: int) -> str:
        return page_text(position)


def pages_model(*, cut_latest: bool = False) -> PagesModel:
    return PagesModel(system="You read product listings.", request="Read every page of the listing, then report.",
                      count=PAGES, final=PAGES_FINAL, window=8_000, profile={"max_input_tokens": 8_000},
                      cut_latest=cut_latest)


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_forty_pages_of_a_listing_are_all_read(mode: Mode) -> None:
    assert 1_300 <= wire_tokens([HumanMessage(page_text(17))]) <= 1_500  # the "about 1,400 tokens" a page
    model = pages_model()
    values = run("create_agent", model, [read_page], mode)
    check_finished(model, values, mode)


# ------------------------------------------------------------------------------------------------ can fail
@pytest.mark.parametrize("task", ["coding", "pages"])
def test_a_model_shown_a_cut_result_loops_until_the_limit(task: str) -> None:
    """The scripted models are honest: shown the latest result cut, they ask again, until the recursion limit."""
    model: ScriptedAgentModel
    if task == "coding":
        coding = coding_model(8_000, cut_latest=True)
        model, tools = coding, [bash_tool(coding.steps)]
    else:
        model, tools = pages_model(cut_latest=True), [read_page]
    with pytest.raises(GraphRecursionError):
        run("create_agent", model, tools, "rewrite")
    assert {p for p, _ in model.issued} == {0}, "only the first call, again and again"
    assert len(model.issued) > model.count  # it got as far as the limit allows, then was stopped
