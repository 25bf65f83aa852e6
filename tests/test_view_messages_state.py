"""View mode in a hand-built `StateGraph(MessagesState)`, as the README shows it, in real compiled graphs.

LangGraph gives a node only the keys of its own input schema (the annotation of its first parameter, or
`add_node(..., input_schema=...)`; the graph's state schema otherwise). The compaction node declares
`llm_input_messages` (its `__call__` takes a `CompactionState`), so the channel exists in a `MessagesState`
graph; the model node reads it when it declares it too: annotated `CompactionState`, as `create_react_agent`'s
model node does (its `CallModelInputSchema` adds `llm_input_messages` to the state schema). The last test pins
the reason: a model node annotated `MessagesState` is never given the key.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from lc_compaction import CompactionPolicy, TiktokenCounter
from lc_compaction.integrations import CompactionNode, CompactionState

WINDOW = 2_000  # tokens: the conversation below passes the trigger (the budget, 1,800) after a few turns, and again
TURNS = [f"Question {i} about order A-{1000 + i}: " + "please give me every detail of the shipment. " * 25
         for i in range(10)]


def _graph(mode: str, *, annotate: bool) -> tuple[Any, list[list[BaseMessage]]]:
    """START -> compact -> model -> END over MessagesState, with a checkpointer; and the model's inputs.

    The model node reads `llm_input_messages` in view mode, `messages` in rewrite mode; `annotate=False` adds
    an unannotated model node with `input_schema=CompactionState` instead of annotating it."""
    replies = (AIMessage(f"Answer {i}: " + "here is the detail. " * 20, id=f"a{i}") for i in itertools.count())
    model = GenericFakeChatModel(messages=replies)
    sent: list[list[BaseMessage]] = []
    key = "llm_input_messages" if mode == "view" else "messages"

    def call_model(state: CompactionState) -> dict:
        sent.append(list(state[key]))
        return {"messages": [model.invoke(state[key])]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(CompactionPolicy(max_input_tokens=WINDOW), mode=mode))
    if annotate:
        builder.add_node("model", call_model)
    else:
        builder.add_node("model", lambda state: call_model(state), input_schema=CompactionState)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=InMemorySaver()), sent


def _run(graph: Any, use_async: bool) -> dict:
    """Every turn of TURNS on one thread (ainvoke: the compaction node's async path); the final state."""
    config = {"configurable": {"thread_id": "t"}}
    first = [SystemMessage("You are a support agent.", id="sys")]

    async def turns() -> None:
        for i, text in enumerate(TURNS):
            await graph.ainvoke({"messages": (first if i == 0 else []) + [HumanMessage(text, id=f"h{i}")]}, config)

    if use_async:
        asyncio.run(turns())
    else:
        for i, text in enumerate(TURNS):
            graph.invoke({"messages": (first if i == 0 else []) + [HumanMessage(text, id=f"h{i}")]}, config)
    return graph.get_state(config).values


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("annotate", [True, False], ids=["annotated", "input_schema"])
def test_view_mode_over_messages_state_sends_what_rewrite_mode_sends_and_keeps_the_history(
        use_async: bool, annotate: bool) -> None:
    view_graph, view_sent = _graph("view", annotate=annotate)
    rewrite_graph, rewrite_sent = _graph("rewrite", annotate=True)
    view_state = _run(view_graph, use_async)
    _run(rewrite_graph, use_async)
    assert set(view_state) >= {"messages", "llm_input_messages", "compaction"}
    stored = view_state["messages"]
    # the stored history is whole: the system prompt, every request and every reply, in order
    assert [m.id for m in stored] == ["sys", *[x for i in range(len(TURNS)) for x in (f"h{i}", f"a{i}")]]
    assert [m.content for m in stored if isinstance(m, HumanMessage)] == TURNS
    counter = TiktokenCounter()
    budget = CompactionPolicy(max_input_tokens=WINDOW).budget_tokens()
    assert len(view_sent) == len(TURNS)
    compacted = 0
    for i, call in enumerate(view_sent):
        assert counter.count_messages(call) <= budget
        assert call[-1].id == f"h{i}" and call[0].id == "sys"
        compacted += len(call) < 2 * i + 2
    assert compacted >= 3, "the window is small enough for compaction to run on several turns"
    runs = sum(len(call) < len(before) + 2 for before, call in zip(view_sent, view_sent[1:]))
    assert runs >= 2, "compaction runs again on a history compacted before"
    # the model sees exactly what rewrite mode sends, while the stored history stays whole
    assert [[message_to_dict(m) for m in call] for call in view_sent] == \
        [[message_to_dict(m) for m in call] for call in rewrite_sent]


def test_a_model_node_annotated_messages_state_is_not_given_the_view() -> None:
    """Why the model node declares the key: LangGraph filters a node's input to its own annotation, although
    the channel exists in the graph (the compaction node declared it)."""
    seen: list[list[str]] = []

    def call_model(state: MessagesState) -> dict:
        seen.append(sorted(state))
        return {"messages": [AIMessage("ok")]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(max_input_tokens=WINDOW, mode="view"))
    builder.add_node("model", call_model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    graph = builder.compile()
    assert "llm_input_messages" in graph.channels
    graph.invoke({"messages": [HumanMessage("hi")]})
    assert seen == [["messages"]]
