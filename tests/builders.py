"""The hand-made histories the tests share: a tool call and its result, a four-message tool exchange, a system
prompt followed by turns, a tool loop, a plain chat; and the smallest compiled graph around a compaction node.

Every builder returns new message objects with fixed ids, so a test can name the messages it checks: in an
exchange k, `h{k}` is the request, `a{k}` the assistant message calling a tool, `c{k}` the tool call's id, `t{k}`
the result and `r{k}` the answer. A size is a number of characters, or of repetitions of a phrase where the
builder says so; nothing here is random.

These are plain functions imported by name (`from tests.builders import history`), not pytest fixtures: a test
calls a builder several times with different arguments (a history, then the turns that grow it), which a fixture
would only wrap in a factory, and a name imported from a module can be followed to its definition. The
independent oracle (`tests/oracle/`) does not use them: it builds its own messages so that it shares nothing
with the code it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


# ----------------------------------------------------------------------------------------------------- messages
def ai_call(call_id: str, id: str | None = None, content: Any = "", *, name: str = "f",
            args: dict[str, Any] | None = None) -> AIMessage:
    """An assistant message (id `id`, text `content`) making one tool call `name(**args)` whose id is `call_id`."""
    return AIMessage(content, id=id, tool_calls=[{"name": name, "args": args or {}, "id": call_id,
                                                  "type": "tool_call"}])


def tool_result(call_id: str, id: str | None = None, content: str = "r", *, name: str | None = None) -> ToolMessage:
    """The result (id `id`, text `content`) of the tool call `call_id`; `name` is the tool's name, or none."""
    return ToolMessage(content, tool_call_id=call_id, id=id, name=name)


# ----------------------------------------------------------------------------------------------------- exchanges
def tool_exchange(k: int, request: str, output: str, answer: str, *, tool: str = "search",
                  args: dict[str, Any] | None = None, call_id: str | None = None, answer_id: str | None = None,
                  prefix: str = "", named: bool = True) -> list[BaseMessage]:
    """One exchange of four messages: the request, an assistant message calling `tool(**args)`, the tool's
    `output` (carrying the tool's name unless `named` is false) and the `answer`.

    Ids: `h{k}`, `a{k}`, call id `c{k}` (or `call_id`), `t{k}`, `r{k}` (or `answer_id`), each after `prefix`.
    """
    cid = call_id or f"{prefix}c{k}"
    return [
        HumanMessage(request, id=f"{prefix}h{k}"),
        ai_call(cid, f"{prefix}a{k}", name=tool, args=args),
        tool_result(cid, f"{prefix}t{k}", output, name=tool if named else None),
        AIMessage(answer, id=answer_id or f"{prefix}r{k}"),
    ]


def tool_turn(n: int, result_chars: int, name: str = "search") -> list[BaseMessage]:
    """A request, one tool call `name(q=n)` with a result of `result_chars` characters plus its label ("result n "),
    and an answer; ids `h{n}`, `a{n}`, `c{n}`, `t{n}`, `r{n}`."""
    return tool_exchange(n, f"request {n}", f"result {n} " + "x" * result_chars, f"answer {n}", tool=name,
                         args={"q": n})


def conversation(system: str, turns: Iterable[list[BaseMessage]]) -> list[BaseMessage]:
    """A system prompt (id "sys") followed by the messages of each turn, in order."""
    out: list[BaseMessage] = [SystemMessage(system, id="sys")]
    for turn in turns:
        out += turn
    return out


def history(turns: int = 6, result_chars: int = 4000) -> list[BaseMessage]:
    """The system prompt "You are helpful." and `turns` tool turns (`tool_turn(0..turns-1, result_chars)`)."""
    return conversation("You are helpful.", (tool_turn(n, result_chars) for n in range(turns)))


def tool_loop(n: int, size: int, *, tool: str = "lookup", args: Callable[[int], dict[str, Any]] = lambda i: {"q": i},
              last: str = "thanks, one more question") -> list[BaseMessage]:
    """One request ("look things up", id `h0`) followed by `n` tool calls in a row (`tool(**args(i))`, ids `a{i}`,
    `c{i}`), each result "lorem ipsum dolor sit amet " repeated `size` times (id `t{i}`), then "done" (id `final`)
    and the next request `last` (id `h1`)."""
    out: list[BaseMessage] = [HumanMessage("look things up", id="h0")]
    for i in range(n):
        out.append(ai_call(f"c{i}", f"a{i}", name=tool, args=args(i)))
        out.append(tool_result(f"c{i}", f"t{i}", f"result {i}: " + "lorem ipsum dolor sit amet " * size, name=tool))
    out.append(AIMessage("done", id="final"))
    out.append(HumanMessage(last, id="h1"))
    return out


def plain_chat(n: int, size: int) -> list[BaseMessage]:
    """`n` exchanges of long plain text ("tell me more " / "here is more " repeated `size` times; no tools, so
    nothing to truncate and compaction drops whole exchanges), then a last question; ids `h0`.., `a0`.., "last"."""
    out: list[BaseMessage] = []
    for i in range(n):
        out.append(HumanMessage(f"question {i}: " + "tell me more " * size, id=f"h{i}"))
        out.append(AIMessage(f"answer {i}: " + "here is more " * size, id=f"a{i}"))
    out.append(HumanMessage("and finally?", id="last"))
    return out


# ----------------------------------------------------------------------------------------------------- graphs
def compact_then_model(node: Any, model: Callable[[Any], dict], state: type = MessagesState, *,
                       input_schema: type | None = None) -> Any:
    """START -> "compact" (`node`, reading `input_schema` if given) -> "model" (`model`, a node function) -> END
    over `state`, compiled with an InMemorySaver checkpointer."""
    builder = StateGraph(state)
    builder.add_node("compact", node, input_schema=input_schema)
    builder.add_node("model", model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=InMemorySaver())


def compact_model_tools(node: Any, model: Callable[[Any], dict], tools: list, state: type = MessagesState, *,
                        checkpointer: Any = None, **compile_settings: Any) -> Any:
    """START -> "compact" (`node`) -> "model" (`model`, a node function) -> "tools" (a `ToolNode` of `tools`, when
    the reply calls one) -> "compact" ... -> END over `state`, compiled with `checkpointer` (default a new
    InMemorySaver) and `compile_settings` (`interrupt_before=["tools"]`, say)."""
    builder = StateGraph(state)
    builder.add_node("compact", node)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "compact")
    return builder.compile(checkpointer=InMemorySaver() if checkpointer is None else checkpointer,
                           **compile_settings)


# ----------------------------------------------------------------------------------------------------- counting
def lookups(counter: Any) -> int:
    """How many count-cache lookups `counter` (an ApproximateCounter or TiktokenCounter) has made so far: one per
    message counted, found or not."""
    info = counter.cache_info()
    return info["hits"] + info["misses"]


# ------------------------------------------------------------------------------------- summarizer histories
def reservation_turn(k: int, result_words: int = 120) -> list[BaseMessage]:
    """A user request naming a reservation, the lookup tool call (id `call{k}`), its (long) result and the answer
    (id `b{k}`)."""
    record = " ".join(f"seat{j % 9} row{j % 30} meal{j % 4}" for j in range(result_words // 3))
    return tool_exchange(k, f"Request {k}: please check reservation RES{k:03d}Q and seat map.",
                         f'{{"reservation_id": "RES{k:03d}Q", "amount": {1000 + k}, "notes": "{record}"}}',
                         f"Reservation RES{k:03d}Q is confirmed for you.", tool="get_reservation",
                         args={"reservation_id": f"RES{k:03d}Q"}, call_id=f"call{k}", answer_id=f"b{k}")


def reservation_history(turns: int, result_words: int = 120) -> list[BaseMessage]:
    return conversation("You are a travel agent.", (reservation_turn(k, result_words) for k in range(turns)))


def lookups_history() -> list:
    """Fourteen reservation lookups with long results (the summarizer wire tests' history)."""
    record = " ".join(f"seat{j % 9} row{j % 30}" for j in range(90))
    return conversation("You are an airline agent.", (
        tool_exchange(k, f"Request {k}: check reservation RES{k:03d}Q.",
                      f'{{"reservation_id": "RES{k:03d}Q", "notes": "{record}"}}', f"RES{k:03d}Q is confirmed.",
                      tool="get_reservation", args={"reservation_id": f"RES{k:03d}Q"}, answer_id=f"b{k}")
        for k in range(14)))
