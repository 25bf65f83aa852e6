"""The summarizer with a real model on the wire: `ChatOpenAI` against llama.cpp's server (SmolLM2-135M-Instruct,
tests/llama_fixture.py), through each front door.

- `create_agent` + `CompactionMiddleware` (the agent's own model stays a scripted fake), `CompactionNode` in a
  compiled `StateGraph` (async path), and `CompactingChatMessageHistory` in a `RunnableWithMessageHistory` chain
  each put a summary written by the server into what the agent's model receives;
- the cap holds: the cap is bound on the request (`max_tokens`), the reply's `output_tokens` stay within it,
  and a reply stopped at the cap (`finish_reason="length"`, forced with llama.cpp's `ignore_eos`) is marked cut;
- a `stream_mode="messages"` run streams the agent's tokens and none of the summarizer's.

What is asserted is what a real model gives every time (a round trip, non-empty text, usage, finish_reason at
the cap, the stream), never the text itself, which differs between runs. The history is the start of a real
tau-bench airline conversation (the bundled one): its system prompt, pinned, and nine messages, of which five
(about 550 tokens) are summarized, so each summarizer call is short.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core._api import suppress_langchain_deprecation_warning
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, MessagesState, StateGraph

from lc_compaction import CompactionPolicy, Summarize, bundled_traces, compact, is_summary, load_traces
from lc_compaction.integrations import CompactingChatMessageHistory, CompactionMiddleware, CompactionNode
from lc_compaction.markers import fenced_spans, summary_text, unfence
from lc_compaction.facts import FactGuard, contains
from lc_compaction.strategies.summarize import CUT_MARKER
from tests.llama_fixture import LLAMA_MARKS, WireLog, real_summarizer

pytestmark = LLAMA_MARKS

CONVERSATION = "tau-bench/gpt-4o-airline/task002-trial1"
WINDOW = 2_400
"""Tokens: the ten messages (2,037 tokens, 1,252 of them the system prompt) cross `EARLY`'s trigger (80%: 1,920)
and fit the budget (2,160)."""
CHAIN_WINDOW = 2_300
"""Tokens: the window of the chat-history test, where the wrapper (which folds the stored messages in one by one)
crosses the trigger once, so the summarizer is called once (a smaller one compacts twice on the way: slower)."""
EARLY = {"trigger": ("fraction", 0.8), "target": ("fraction", 0.75)}
"""The policy settings of these tests: a trigger below the budget (the default trigger is the budget, which the
ten messages fit), and a target the soft pass reaches (75% of 2,400: 1,800 tokens; the summary of five messages
leaves about 1,700), so that one compaction makes one summarizer call: with the default target (50%: 1,200
tokens, below the pinned system prompt alone) or 60%, the soft pass stops above the target and the second pass
calls the summarizer again."""
CAP = 80
"""The summary's output cap (tokens) asked of `Summarize` in these tests."""
AGENT_REPLY = "Thank you, I am downgrading the reservations now."


def conversation() -> list[BaseMessage]:
    """The system prompt and the first nine messages of the conversation (ends with a user message)."""
    trace = next(t for path in bundled_traces() for t in load_traces(path) if t.id == CONVERSATION)
    messages = trace.messages[:10]
    assert isinstance(messages[0], SystemMessage) and isinstance(messages[-1], HumanMessage)
    return messages


def summarize(model: Any, **settings: Any) -> Summarize:
    """`Summarize` with the real model; a failure raises (never a silent ledger), its own retries off."""
    return Summarize(model=model, max_summary_tokens=settings.pop("max_summary_tokens", CAP), fallback="raise",
                     max_retries=0, timeout=None, **settings)


def the_summary(messages: list[BaseMessage]) -> str:
    (summary,) = [m for m in messages if is_summary(m)]
    return summary_text(summary)


def without_fences(text: str) -> str:
    """`text` with each fenced piece replaced by its inner text (the provenance guard fences tool-derived pieces of
    the model's reply, attributed to their tool: what remains is the reply's own text)."""
    out, at = [], 0
    for start, end in fenced_spans(text):
        out += [text[at:start], unfence(text[start:end])[1]]
        at = end
    return "".join(out) + text[at:]


def check_round_trip(log: WireLog, summary: str, evicted: list[BaseMessage], calls: int | None = 1,
                     sent: list[BaseMessage] | None = None) -> None:
    """The summarizer's calls (`calls` of them; None: at least one), each tagged and capped as `Summarize`
    documents, with a reply that has text and usage within the cap; the summary holds the last reply's text and
    (the fact guard) every identifier of the evicted messages; with `sent` (the history sent, where some of the
    evicted messages may have been folded into a progress note instead), what is sent holds them."""
    assert log.calls and [c.error for c in log.calls] == [None] * len(log.calls)
    if calls is not None:
        assert len(log.calls) == calls
    for call in log.calls:
        assert TAG_NOSTREAM in call.tags and call.metadata.get("lc_source") == "summarization"
        cap = call.params["max_tokens"]
        assert 0 < cap <= CAP
        assert call.reply is not None and call.reply.text.strip()
        assert call.finish_reason in ("stop", "length")
        usage = call.reply.usage_metadata
        assert usage and usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= cap
    last = log.calls[-1]
    if last.finish_reason == "length":
        assert last.output_tokens == last.params["max_tokens"]
        assert CUT_MARKER.format(cap=last.params["max_tokens"]) in summary
    assert without_fences(summary).startswith(last.reply.text.strip()[:20])
    identifiers = FactGuard().extract_messages(evicted)
    held = summary if sent is None else "\n".join(m.text for m in sent)
    assert identifiers and [i for i in identifiers if not contains(held, i)] == [], held


class Received(BaseCallbackHandler):
    """What a chat model was sent, one list per call."""

    def __init__(self) -> None:
        self.inputs: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.inputs.append(list(messages[0]))


def agent_model() -> tuple[GenericFakeChatModel, Received]:
    received = Received()
    model = GenericFakeChatModel(messages=iter([AIMessage(AGENT_REPLY)]), callbacks=[received])
    return model, received


# --------------------------------------------------------------------------------------------- the front doors
def test_create_agent_with_the_middleware_sends_a_real_summary(llama_server):
    model, log = real_summarizer(llama_server)
    history = conversation()
    agent_llm, received = agent_model()
    agent = create_agent(agent_llm, [], system_prompt=history[0].content, checkpointer=InMemorySaver(),
                         middleware=[CompactionMiddleware(max_input_tokens=WINDOW, **EARLY,
                                                         strategies=[summarize(model)])])
    config = {"configurable": {"thread_id": "real"}}
    agent.invoke({"messages": history[1:]}, config)

    # the first call of a thread: `before_model` does not know the system prompt's tokens yet, so the request's
    # own check (`wrap_model_call`) compacts this call; the stored history follows at the next `before_model`
    (sent,) = received.inputs
    summary = the_summary(sent)  # the agent's model received it
    kept = {m.id for m in sent}
    evicted = [m for m in history[1:] if m.id not in kept]
    assert evicted
    check_round_trip(log, summary, evicted, sent=sent)
    stored = agent.get_state(config).values["messages"]
    assert stored[-1].text == AGENT_REPLY and [m.id for m in stored[:-1]] == [m.id for m in history[1:]]


def test_langgraph_node_in_a_compiled_graph_sends_a_real_summary_async(llama_server):
    model, log = real_summarizer(llama_server)
    agent_llm, received = agent_model()

    async def call_model(state: MessagesState) -> dict:
        return {"messages": [await agent_llm.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(max_input_tokens=WINDOW, **EARLY, strategies=[summarize(model)]))
    builder.add_node("model", call_model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "real"}}
    history = conversation()
    asyncio.run(graph.ainvoke({"messages": history}, config))

    stored = graph.get_state(config).values["messages"]
    summary = the_summary(stored)
    evicted = [m for m in history if m.id not in {s.id for s in stored}]
    check_round_trip(log, summary, evicted, sent=stored)
    (sent,) = received.inputs
    assert the_summary(sent) == summary
    assert graph.get_state(config).values["compaction"]["last"]["strategies_applied"] == ["summarize"]


def test_chat_history_wrapper_in_a_chain_sends_a_real_summary(llama_server):
    model, log = real_summarizer(llama_server)
    history = conversation()
    with suppress_langchain_deprecation_warning():
        inner = InMemoryChatMessageHistory(messages=history[1:-1])
    policy = CompactionPolicy(max_input_tokens=CHAIN_WINDOW, **EARLY, strategies=[summarize(model)])
    # the system prompt and the question are sent besides the history: counted as extra tokens
    extra = policy.counter.count_message(history[0]) + policy.counter.count_message(history[-1])
    wrapper = CompactingChatMessageHistory(inner, policy, extra_tokens=extra)
    agent_llm, received = agent_model()
    prompt = ChatPromptTemplate.from_messages([("system", "{system}"), MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    with suppress_langchain_deprecation_warning():
        chain = RunnableWithMessageHistory(prompt | agent_llm, lambda session_id: wrapper,
                                           input_messages_key="question", history_messages_key="history")
    reply = chain.invoke({"system": history[0].content, "question": history[-1].content},
                         {"configurable": {"session_id": "real"}})

    assert reply.text == AGENT_REPLY
    (sent,) = received.inputs
    summary = the_summary(sent)
    evicted = [m for m in history[1:-1] if m.id not in {s.id for s in sent}]
    # the wrapper folds the stored messages in one by one, as if they had come turn by turn: it may compact
    # (call the summarizer) more than once on the way, each later call merging the earlier summary
    check_round_trip(log, summary, evicted, calls=None, sent=sent)
    assert wrapper.last_result is not None and wrapper.last_result.details["summarizer"] == "model"
    assert len(inner.messages) == len(history)  # all it held, the question and the reply: nothing removed


# --------------------------------------------------------------------------------------------- the cap
def test_a_reply_stopped_at_the_cap_is_marked_cut(llama_server):
    # ignore_eos: llama.cpp writes until the cap, so the reply stops there every time
    model, log = real_summarizer(llama_server, extra_body={"ignore_eos": True})
    result = compact(conversation(), CompactionPolicy(max_input_tokens=WINDOW, **EARLY,
                                                      strategies=[summarize(model, max_summary_tokens=64)]))
    (call,) = log.calls
    cap = call.params["max_tokens"]
    assert cap == 64
    assert call.finish_reason == "length" and call.output_tokens == cap
    assert CUT_MARKER.format(cap=cap) in result.summary
    assert result.details["summarizer"] == "model" and result.fits


# --------------------------------------------------------------------------------------------- streaming
def test_stream_mode_messages_shows_the_agent_tokens_and_none_of_the_summarizer(llama_server):
    model, log = real_summarizer(llama_server)
    history = conversation()
    agent_llm, _ = agent_model()
    agent = create_agent(agent_llm, [], system_prompt=history[0].content,
                         middleware=[CompactionMiddleware(max_input_tokens=WINDOW, **EARLY,
                                                         strategies=[summarize(model)])])
    streamed = [(chunk, meta) for chunk, meta in agent.stream({"messages": history[1:]}, stream_mode="messages")]

    (call,) = log.calls  # the summarizer ran during this run...
    assert call.reply is not None and call.reply.text.strip()
    chunks = [c for c, _ in streamed if isinstance(c, AIMessageChunk)]
    assert "".join(c.text for c in chunks) == AGENT_REPLY  # ...and only the agent's tokens were streamed
    assert len(chunks) > 1
    assert not any(str(call.run_id) in (c.id or "") for c in chunks)
    assert not any(TAG_NOSTREAM in meta.get("tags", []) or meta.get("lc_source") == "summarization"
                   for _, meta in streamed)
