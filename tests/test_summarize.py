"""The summarization strategy (lc_compaction/strategies/summarize.py) with scripted LangChain chat models.

The models here are real `BaseChatModel` subclasses (invoke / ainvoke / callbacks work as for any chat model);
each reply is scripted: a text, a message (content blocks), an exception, or a wait.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Annotated

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import ModelAPIError, ModelInvalidRequestError
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from lc_compaction import CompactionPolicy, acompact, compact
from lc_compaction.markers import SUMMARY_PREFIX, is_summary, summary_text
from lc_compaction.progress import note_lines
from lc_compaction.facts import FACTS_PREFIX, FactGuard, contains, is_facts_line, parse_facts_line
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.prompts import PRESETS
from lc_compaction.strategies.summarize import CUT_MARKER, SummarizationError, Summarize
from lc_compaction.tokens import TiktokenCounter

from tests.builders import reservation_history as history, reservation_turn as turn
from tests.fakes import ScriptedModel
from tests.oracle import check_all_structural, run_checks
from tests.oracle.checks import CheckContext, model_view
from tests.oracle.generators import histories

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

COUNTER = TiktokenCounter()


# ----------------------------------------------------------------------------------------------------- fakes
class CappedModel(ScriptedModel):
    """A scripted model whose class declares `max_tokens`, as OpenAI's and Anthropic's chat models do."""

    max_tokens: int | None = None


class Recorder(BaseCallbackHandler):
    """Records the tags and metadata of every chat-model run it sees."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[str], dict]] = []

    def on_chat_model_start(self, serialized, messages, *, tags=None, metadata=None, **kwargs) -> None:
        self.runs.append((list(tags or []), dict(metadata or {})))


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()  # ends any abandoned sync wait


# ----------------------------------------------------------------------------------------------------- histories
def requests_and_answers() -> list[BaseMessage]:
    """Twelve exchanges of a request and an answer (about 60 words each, no tools), then a last request."""
    msgs: list[BaseMessage] = []
    for n in range(12):
        msgs += [HumanMessage(f"request {n} " + "words " * 60, id=f"h{n}"),
                 AIMessage(f"answer {n} " + "more " * 60, id=f"a{n}")]
    msgs.append(HumanMessage("last", id="hl"))
    return msgs


def policy(strategy: Summarize, window: int = 3000, **kw: Any) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=window, strategies=[strategy], **kw)


def summaries(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if is_summary(m)]


def the_summary(result) -> str:
    (message,) = summaries(result.messages)
    return summary_text(message)


def fast(**kw: Any) -> Summarize:
    """A Summarize that does not wait between retries (the tests are not about the backoff)."""
    kw.setdefault("initial_delay", 0)
    return Summarize(**kw)


# ----------------------------------------------------------------------------------------------------- running summary
def test_previous_summary_reaches_the_next_call_and_only_one_summary_exists_after_many_passes():
    model = ScriptedModel(script=[f"Summary number {n}: the user checked several reservations." for n in range(50)],
                          repeat_last=False)
    strategy = fast(model=model)
    pol = policy(strategy, window=2500)
    msgs: list[BaseMessage] = [SystemMessage("You are a travel agent.", id="sys")]
    written: list[str] = []
    for k in range(30):
        msgs = msgs + turn(k)
        result = compact(msgs, pol)
        msgs = list(result.messages)
        assert len(summaries(msgs)) <= 1
        if result.summary is not None:
            if written:  # the earlier summary, facts line included, was handed to this call
                assert written[-1] in model.inputs[-1]
            written.append(result.summary)
        check_all_structural(msgs, msgs)
    assert len(written) >= 3, "the conversation should have been summarized several times"
    assert len(model.inputs) == len(written)  # one call per summary: the input always fit the default bound


def test_a_pass_whose_only_evictable_content_is_the_previous_summary_does_not_run():
    previous = HumanMessage(SUMMARY_PREFIX + "Earlier: " + "the user booked many flights. " * 300,
                            additional_kwargs={"lc_source": "summarization"}, id="old-summary")
    msgs = [SystemMessage("You are a travel agent.", id="sys"), HumanMessage("First request.", id="h0"), previous,
            HumanMessage("Latest request.", id="h1")]
    model = ScriptedModel(script=["should not be called"])
    result = compact(msgs, policy(fast(model=model), window=100_000, trigger=("tokens", 1000)))
    assert result.triggered
    assert model.inputs == []
    assert [m.id for m in result.messages] == ["sys", "h0", "old-summary", "h1"]
    ctx = CheckContext(input=msgs, output=result.messages, summarizer_inputs=model.inputs)
    run_checks(["no_resummarize_summary_only", "single_summary"], ctx)


def test_the_result_lands_under_the_target_so_the_next_call_does_not_summarize_again():
    model = ScriptedModel(script=["The user checked reservations RES000Q to RES011Q; all are confirmed."])
    pol = policy(fast(model=model), window=4000)
    result = compact(history(12), pol)
    assert result.summary is not None
    assert result.tokens_after <= result.target_tokens
    again = compact(result.messages + [HumanMessage("And one more question?", id="next")], pol)
    assert again.stop_reason == "under_trigger" and len(model.inputs) == 1


# ----------------------------------------------------------------------------------------------------- the call
def test_sync_path_calls_invoke_and_async_path_calls_ainvoke():
    sync_model = ScriptedModel(script=["A summary."])
    compact(history(12), policy(fast(model=sync_model)))
    assert sync_model.paths == ["sync"]
    async_model = ScriptedModel(script=["A summary."])
    asyncio.run(acompact(history(12), policy(fast(model=async_model))))
    assert async_model.paths == ["async"]


def test_the_call_is_tagged_nostream_marked_as_summarization_and_sends_no_tools():
    recorder = Recorder()
    model = ScriptedModel(script=["A summary."], callbacks=[recorder])
    compact(history(12), policy(fast(model=model)))
    ((tags, metadata),) = recorder.runs
    assert TAG_NOSTREAM in tags
    assert metadata.get("lc_source") == "summarization"
    assert "tools" not in model.kwargs[0] and "tool_choice" not in model.kwargs[0]


class GraphState(TypedDict):
    messages: Annotated[list, add_messages]


def _graph_with_summarizer(summarizer: BaseChatModel, strategy_model: BaseChatModel | None) -> Any:
    """A compiled graph whose node compacts its history with the summarizer (or, for the control, calls the
    same kind of model directly without the tag)."""
    pol = policy(fast(model=strategy_model), window=3000) if strategy_model is not None else None

    def node(state: GraphState) -> dict:
        if pol is not None:
            compact(state["messages"], pol)
        else:
            summarizer.invoke("control call")
        return {}

    graph = StateGraph(GraphState)
    graph.add_node("compact", node)
    graph.add_edge(START, "compact")
    return graph.compile()


def test_in_a_langgraph_graph_the_summarizer_output_is_not_streamed_as_messages():
    text = "SUMMARY-TOKENS-SHOULD-NOT-STREAM"
    model = GenericFakeChatModel(messages=iter([AIMessage(content=text)]))
    chunks = list(_graph_with_summarizer(model, model).stream({"messages": history(12)}, stream_mode="messages"))
    assert not any(text in str(chunk.content) for chunk, _ in chunks)
    # control: the same model called in a node without the tag does stream (so the check above can fail)
    control = GenericFakeChatModel(messages=iter([AIMessage(content=text)]))
    streamed = list(_graph_with_summarizer(control, None).stream({"messages": history(2)}, stream_mode="messages"))
    assert any(text in str(chunk.content) for chunk, _ in streamed)


# ----------------------------------------------------------------------------------------------------- failures
def _assert_ledger_fallback(result, msgs: list[BaseMessage], reason_part: str) -> None:
    text = the_summary(result)
    assert text.startswith(LEDGER_HEADER), text[:200]
    assert result.details["summarizer"] == "ledger"
    assert reason_part in result.details["fallback_reason"]
    ctx = CheckContext(input=msgs, output=result.messages)
    run_checks(["no_placeholder_summary", "single_summary", "summary_is_plain_text"], ctx)
    check_all_structural(msgs, result.messages)
    # nothing is lost on the model's account: every removed request is in the ledger
    for m in result.removed:
        if isinstance(m, HumanMessage):
            assert m.text in text


def test_a_model_that_raises_is_retried_then_the_ledger_is_written():
    model = ScriptedModel(script=[ConnectionError("connection refused")])
    msgs = history(12)
    result = compact(msgs, policy(fast(fallback="ledger", model=model, max_retries=2)))
    assert len(model.inputs) == 3  # 1 + 2 retries
    _assert_ledger_fallback(result, msgs, "ConnectionError: connection refused")


def test_a_transient_error_then_success_gives_the_model_summary():
    model = ScriptedModel(script=[ModelAPIError("502 bad gateway"), "Recovered summary."])
    result = compact(history(12), policy(fast(model=model)))
    assert len(model.inputs) == 2
    assert the_summary(result).startswith("Recovered summary.")
    assert result.details["summarizer"] == "model" and "fallback_reason" not in result.details


def test_a_non_retryable_error_is_not_retried():
    model = ScriptedModel(script=[ModelInvalidRequestError("400: bad request"), "never reached"])
    result = compact(history(12), policy(fast(fallback="ledger", model=model, max_retries=5)))
    assert len(model.inputs) == 1
    assert result.details["summarizer"] == "ledger"


def test_sync_timeout_falls_back_to_the_ledger(release):
    model = ScriptedModel(script=[("wait", 30)], release=release)
    msgs = history(12)
    result = compact(msgs, policy(fast(model=model, timeout=0.2, max_retries=0)))
    _assert_ledger_fallback(result, msgs, "timed out")


def test_async_timeout_cancels_the_call_and_falls_back_to_the_ledger():
    model = ScriptedModel(script=[("wait", 30)])
    msgs = history(12)
    result = asyncio.run(acompact(msgs, policy(fast(model=model, timeout=0.2, max_retries=0))))
    _assert_ledger_fallback(result, msgs, "timed out")


@pytest.mark.parametrize("reply, reason", [
    ("", "no text"),
    ("   \n ", "no text"),
    (AIMessage(content=[{"type": "reasoning", "reasoning": "I think...", "signature": "S" * 300}]), "only reasoning"),
    (AIMessage(content=[{"type": "thinking", "thinking": "hmm", "signature": "S" * 300}]), "only thinking"),
    (AIMessage(content=[]), "no text"),
])
@pytest.mark.parametrize("run", ["sync", "async"])
def test_an_empty_or_reasoning_only_reply_falls_back_to_the_ledger_never_a_placeholder(reply, reason, run):
    model = ScriptedModel(script=[reply])
    msgs = history(12)
    pol = policy(fast(fallback="ledger", model=model))
    result = compact(msgs, pol) if run == "sync" else asyncio.run(acompact(msgs, pol))
    assert len(model.inputs) == 1  # an unusable answer is not an error to retry
    _assert_ledger_fallback(result, msgs, reason)


def test_a_list_of_content_blocks_gives_plain_text_of_the_text_blocks_only():
    blocks = [{"type": "reasoning", "reasoning": "private chain of thought", "signature": "SIG" * 200},
              {"type": "text", "text": "The user checked reservations."},
              {"type": "text", "text": " All are confirmed."}]
    model = ScriptedModel(script=[AIMessage(content=blocks)])
    msgs = history(12)
    result = compact(msgs, policy(fast(model=model)))
    (message,) = summaries(result.messages)
    assert isinstance(message.content, str)
    text = summary_text(message)
    assert text.startswith("The user checked reservations. All are confirmed.")
    assert "private chain" not in text and "SIG" not in text
    ctx = CheckContext(input=msgs, output=result.messages, settings={"summary_reply_blocks": blocks},
                       summarizer_inputs=model.inputs)
    run_checks(["summary_is_plain_text"], ctx)


def test_fallback_raise_propagates_and_leaves_the_input_untouched():
    model = ScriptedModel(script=[ConnectionError("down")])
    msgs = history(12)
    before = [model_view(m) for m in msgs]
    with pytest.raises(SummarizationError, match="ConnectionError: down") as info:
        compact(msgs, policy(fast(model=model, fallback="raise", max_retries=0)))
    assert info.value.reason == "error" and isinstance(info.value.__cause__, ConnectionError)
    assert [model_view(m) for m in msgs] == before and len(msgs) == len(before)


def test_fallback_raise_on_timeout_and_on_an_empty_reply(release):
    slow = ScriptedModel(script=[("wait", 30)], release=release)
    with pytest.raises(SummarizationError, match="timed out") as info:
        compact(history(12), policy(fast(model=slow, fallback="raise", timeout=0.2)))
    assert info.value.reason == "timeout"
    empty = ScriptedModel(script=[""])
    with pytest.raises(SummarizationError) as info:
        asyncio.run(acompact(history(12), policy(fast(model=empty, fallback="raise"))))
    assert info.value.reason == "no_text"


def test_fallback_skip_changes_nothing_and_reports_why():
    model = ScriptedModel(script=[ConnectionError("down")])
    msgs = history(12)
    pol = policy(fast(model=model, fallback="skip", max_retries=0), window=100_000, trigger=("tokens", 1500))
    result = compact(msgs, pol)
    assert result.triggered
    assert [model_view(m) for m in result.messages] == [model_view(m) for m in msgs]
    assert result.details["summarizer"] == "none" and "down" in result.details["fallback_reason"]
    ctx = CheckContext(input=msgs, output=result.messages, settings={"summary_model": "raises"})
    run_checks(["history_preserved_on_failure", "no_placeholder_summary"], ctx)


# ----------------------------------------------------------------------------------------------------- output cap
def test_an_over_long_reply_is_cut_at_the_cap_with_a_marker():
    long_reply = " ".join(f"The user discussed topic number {n} at length." for n in range(2000))
    model = ScriptedModel(script=[long_reply])
    result = compact(history(12), policy(fast(model=model, max_summary_tokens=120, fact_guard=False)))
    text = the_summary(result)
    marker = CUT_MARKER.format(cap=120)
    assert text.endswith(marker)
    assert COUNTER.count_text(text) <= 120
    assert text.startswith("The user discussed topic number 0")


def test_the_cap_is_bound_on_a_model_that_declares_max_tokens_and_not_on_one_that_does_not():
    capped = CappedModel(script=["Short."])
    compact(history(12), policy(fast(model=capped, max_summary_tokens=150)))
    assert 64 <= capped.kwargs[0]["max_tokens"] <= 150
    plain = ScriptedModel(script=["Short."])
    compact(history(12), policy(fast(model=plain, max_summary_tokens=150)))
    assert "max_tokens" not in plain.kwargs[0]


def test_a_reply_the_server_stopped_at_the_cap_gets_the_marker_too():
    reply = AIMessage(content="The user asked about reservations and", response_metadata={"finish_reason": "length"})
    model = ScriptedModel(script=[reply])
    result = compact(history(12), policy(fast(model=model, max_summary_tokens=100, fact_guard=False)))
    assert the_summary(result) == "The user asked about reservations and" + CUT_MARKER.format(cap=100)


# ----------------------------------------------------------------------------------------------------- bounded input
def test_the_summarizer_input_stays_within_its_budget_and_never_drops_the_beginning():
    budget = 2200
    model = ScriptedModel(script=["Running summary so far: reservations were checked."])
    msgs = history(40, result_words=600)
    previous = HumanMessage(SUMMARY_PREFIX + "PREVIOUS-SUMMARY-TEXT: the user is Ana.",
                            additional_kwargs={"lc_source": "summarization"}, id="prev")
    msgs.insert(2, previous)  # after the first request: [sys, h0, prev, a0, ...]
    strategy = fast(model=model, trim_tokens_to_summarize=budget, max_summary_tokens=200)
    result = compact(msgs, policy(strategy, window=8000))
    assert len(model.inputs) > 1, "a large evicted part is summarized in several calls"
    assert all(COUNTER.count_text(text) <= budget for text in model.inputs)
    assert result.details["summary_input_tokens"] <= budget
    assert "PREVIOUS-SUMMARY-TEXT: the user is Ana." in model.inputs[0]
    removed_requests = [m.text for m in result.removed if isinstance(m, HumanMessage)]
    assert removed_requests, "some requests should have been summarized"
    for request in removed_requests:
        assert any(request in text for text in model.inputs), f"{request!r} never reached the summarizer"
    for later in model.inputs[1:]:
        assert "Running summary so far" in later  # each call carries the summary so far
    assert len(summaries(result.messages)) == 1


def test_long_tool_results_are_cut_for_the_summarizer_but_their_identifiers_survive():
    model = ScriptedModel(script=["The user checked reservations."])
    msgs = history(12, result_words=3000)
    msgs[3] = msgs[3].model_copy(update={"content": msgs[3].content + " final code ZQ9876X"})
    result = compact(msgs, policy(fast(model=model), window=12000))
    assert "ZQ9876X" not in model.inputs[0]  # the end of a long result is not shown to the model...
    assert "ZQ9876X" in parse_facts_line(the_summary(result))  # ...but the guard keeps its identifier
    assert "base64" not in model.inputs[0] and "AIMessage(" not in model.inputs[0]


# ----------------------------------------------------------------------------------------------------- fact guard
def test_the_guard_appends_what_the_summary_left_out_and_reports_the_figures():
    model = ScriptedModel(script=["The user checked reservations RES000Q and RES001Q."])
    result = compact(history(12), policy(fast(model=model)))
    text = the_summary(result)
    d = result.details
    removed = [m for m in result.removed]
    evicted_ids = FactGuard().extract_messages(removed)
    assert d["identifiers_evicted"] == len(evicted_ids) > 2
    assert d["identifiers_kept_by_summary"] == 2
    assert d["identifiers_added_by_guard"] == d["identifiers_evicted"] - 2
    assert all(contains(text, i) for i in evicted_ids)
    assert is_facts_line(text.splitlines()[-1])


def test_with_the_guard_off_nothing_is_appended_but_the_figures_are_still_reported():
    model = ScriptedModel(script=["The user checked reservation RES000Q."])
    result = compact(history(12), policy(fast(model=model, fact_guard=False)))
    text = the_summary(result)
    assert FACTS_PREFIX not in text
    d = result.details
    assert d["identifiers_kept_by_summary"] == 1 and d["identifiers_added_by_guard"] == 0
    assert d["identifiers_evicted"] > 1


def test_the_figures_cover_every_pass_of_one_compaction():
    """When the soft pass stops over the budget (here the kept 3 turns alone are), the second (hard) pass summarizes
    again, replacing the first pass's summary: the compaction's figures count the identifiers of every message
    summarized in either pass (not only the last pass's), also when the first summary's text holds none of them
    (the guard off)."""
    model = ScriptedModel(script=["The user checked reservations."])
    result = compact(history(12), policy(fast(model=model, fact_guard=False), window=1000, keep=("turns", 3)))
    passes = [a for a in result.actions if a.kind == "summarized"]
    assert len(passes) == 2 and len(model.inputs) == 2  # the scenario: a summary in each pass
    summarized = {i for a in passes for i in a.message_ids}
    evicted = FactGuard().extract_messages(m for m in result.removed if m.id in summarized and not is_summary(m))
    d = result.details
    assert d["summarized_messages"] == len(summarized) - 1  # the first pass's summary is not a conversation message
    assert d["identifiers_evicted"] == len(evicted) > 12
    assert d["identifiers_kept_by_summary"] == 0 and d["identifiers_omitted"] == len(evicted)


def test_the_relaxed_second_pass_calls_the_model_no_second_time():
    """When the soft pass's summary leaves the history within the budget but above the target, the relaxed second
    pass does not call the model again to summarize the summary it just wrote: one model call per compaction."""
    model = ScriptedModel(script=["The user checked reservations."] * 3)
    strategy = fast(model=model, fact_guard=FactGuard(said_chars=0))  # the scenario's sizes: no quotes of the user
    result = compact(history(12), policy(strategy, window=1000, keep=("turns", 2)))
    assert result.fits and result.tokens_after > result.target_tokens  # the scenario: fits, above the target
    assert len(model.inputs) == 1 and len(summaries(result.messages)) == 1


def test_user_patterns_reach_the_guard():
    model = ScriptedModel(script=["The user checked reservations."])
    msgs = history(12)
    assert msgs[5].id == "h1"
    msgs[5] = HumanMessage("Request 1: my loyalty tier is gold-star please.", id="h1")
    result = compact(msgs, policy(fast(model=model, fact_guard=FactGuard({"tier": r"gold-star"}, said_chars=0))))
    assert "h1" in {m.id for m in result.removed}
    assert "gold-star" in parse_facts_line(the_summary(result))
    plain = compact(msgs, policy(fast(model=ScriptedModel(script=["The user checked reservations."]),
                                      fact_guard=FactGuard(said_chars=0))))
    assert "gold-star" not in the_summary(plain)  # not an identifier without the user's pattern


# ---------------------------------------------------------------------------------------- message, prompts, settings
def test_the_summary_message_is_marked_and_takes_the_role_its_place_calls_for():
    """The summary is a marked message starting with the prefix; `role` is the preferred role, taken where it keeps
    the turns alternating: between two requests only an assistant turn does, whatever the preference (issue 12)."""
    for preferred in ("human", "ai"):
        result = compact(history(12), policy(fast(model=ScriptedModel(script=["S."]), role=preferred)))
        (message,) = summaries(result.messages)
        assert message.content.startswith(SUMMARY_PREFIX) and message.additional_kwargs["lc_source"] == "summarization"
        i = result.messages.index(message)
        before, after = result.messages[i - 1], result.messages[i + 1]
        assert isinstance(before, HumanMessage) and isinstance(after, HumanMessage)  # it sits between two requests
        assert isinstance(message, AIMessage) and result.details["summary_role"] == "ai"
    # tool results are no turns (issue 20: strict templates leave them out before checking): after the request's
    # tool results a user turn would be a second one after the request, so the steps there are folded into a
    # progress note and the summary is the assistant turn before the next request, whatever the preference
    def call(k: int) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "f", "args": {"k": k}, "id": f"c{k}"}], id=f"a{k}")

    msgs = [SystemMessage("s", id="s"), HumanMessage("do it", id="h1"), call(1), ToolMessage("r", tool_call_id="c1"),
            call(2), ToolMessage("r " * 400, tool_call_id="c2", id="t2"), call(3), ToolMessage("r", tool_call_id="c3"),
            AIMessage("done " * 200, id="a4"), HumanMessage("next", id="h2")]
    for preferred in ("human", "ai"):
        result = compact(msgs, CompactionPolicy(max_input_tokens=100_000, trigger=("tokens", 600), keep=("messages", 1),
                                                pin={"a1", "a3"}, strategies=[fast(model=ScriptedModel(script=["S."]),
                                                                                   role=preferred)]))
        (message,) = summaries(result.messages)
        assert [m.id for m in result.messages] == ["s", "h1", "a1", msgs[3].id, "a3", msgs[7].id, message.id, "h2"]
        assert isinstance(message, AIMessage) and result.details["summary_role"] == "ai"
        assert note_lines(result.messages[4]) and "a2" in {m.id for m in result.removed}  # folded into a3's note
    # a user turn fits between two assistant turns (a reply, then a tool loop, then the next reply: the run between
    # them), whatever the preference
    msgs = [SystemMessage("s", id="s"), HumanMessage("do it", id="h1"), AIMessage("On it.", id="intro"), call(1),
            ToolMessage("r", tool_call_id="c1"), call(2), ToolMessage("r " * 800, tool_call_id="c2", id="t2"),
            call(3), ToolMessage("r", tool_call_id="c3"), AIMessage("done", id="a4"), HumanMessage("next", id="h2")]
    for preferred in ("human", "ai"):
        summarize = fast(model=ScriptedModel(script=["S."]), role=preferred)
        result = compact(msgs, CompactionPolicy(max_input_tokens=100_000, trigger=("tokens", 600), keep=("messages", 1),
                                                pin={"intro", "a4"}, strategies=[summarize]))
        (message,) = summaries(result.messages)
        assert [m.id for m in result.messages] == ["s", "h1", "intro", "a1", msgs[4].id, message.id, "a4", "h2"]
        assert isinstance(message, HumanMessage) and result.details["summary_role"] == "human"
    with pytest.raises(ValueError, match="system"):
        Summarize(role="system")


@pytest.mark.parametrize("name, words", [
    ("default", ["Goal", "Decisions", "next step"]),
    ("customer_support", ["order", "ticket", "reservation", "Resolution state"]),
    ("coding", ["Files", "Commands", "Tests", "next steps"]),
    ("research", ["Sources", "Findings", "Open questions"]),
])
def test_each_preset_says_what_must_survive_and_reaches_the_model(name, words):
    assert "{messages}" in PRESETS[name]
    for word in words:
        assert word in PRESETS[name]
    model = ScriptedModel(script=["S."])
    compact(history(12), policy(fast(model=model, summary_prompt=name)))
    first_line = PRESETS[name].splitlines()[0]
    assert model.inputs[0].startswith(first_line)
    assert "Request 1: please check reservation RES001Q" in model.inputs[0]


def test_a_custom_template_is_used_with_its_literal_braces():
    model = ScriptedModel(script=["S."])
    template = 'Summarize as JSON like {{"goal": ...}}:\n{messages}'
    compact(history(12), policy(fast(model=model, summary_prompt=template)))
    assert model.inputs[0].startswith('Summarize as JSON like {"goal": ...}:\n')


def test_a_model_string_is_resolved_with_init_chat_model(monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    strategy = Summarize(model="openai:gpt-4o-mini")
    assert isinstance(strategy.model, ChatOpenAI)


@pytest.mark.parametrize("kwargs, setting", [
    ({"summary_prompt": "no placeholder here"}, "summary_prompt"),
    ({"summary_prompt": "bad {field} and {messages}"}, "summary_prompt"),
    ({"max_summary_tokens": 10}, "max_summary_tokens"),
    ({"trim_tokens_to_summarize": 500}, "trim_tokens_to_summarize"),
    ({"timeout": 0}, "timeout"),
    ({"max_retries": -1}, "max_retries"),
    ({"initial_delay": -1}, "initial_delay"),
    ({"fallback": "placeholder"}, "fallback"),
    ({"fact_guard": "yes"}, "fact_guard"),
    ({"model": object()}, "model"),
])
def test_invalid_settings_raise_errors_that_name_them(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        Summarize(**kwargs)


def test_sync_and_async_give_the_same_result():
    pol_sync = policy(fast(model=ScriptedModel(script=["Same summary RES003Q."])))
    pol_async = policy(fast(model=ScriptedModel(script=["Same summary RES003Q."])))
    a = compact(history(12), pol_sync)
    b = asyncio.run(acompact(history(12), pol_async))
    assert a.summary == b.summary
    assert [m.id for m in a.messages if not is_summary(m)] == [m.id for m in b.messages if not is_summary(m)]


# ---------------------------------------------------------------------------------------------- generated histories
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(msgs=histories(max_turns=6, max_steps=3, prior_summary=True), window=st.integers(300, 6000),
       keep=st.sampled_from([("turns", 1), ("turns", 2), ("messages", 3), ("tokens", 500)]),
       use_model=st.booleans())
def test_generated_histories_keep_every_rule_and_one_summary(msgs, window, keep, use_model):
    model = ScriptedModel(script=["The user and the assistant worked through several requests."]) if use_model else None
    pol = CompactionPolicy(max_input_tokens=window, keep=keep, token_counter="approximate",
                           strategies=[fast(model=model)])
    result = compact(msgs, pol)
    out = result.messages
    check_all_structural(msgs, out)
    assert len(summaries(out)) <= 1
    requests = [m for m in msgs if isinstance(m, HumanMessage) and not is_summary(m)]
    for pinned in (requests[0], requests[-1]) if requests else ():
        assert any(m.id == pinned.id for m in out), f"request {pinned.id} lost"  # (last resort may cut it)
    assert result.tokens_after <= result.tokens_before
    if result.summary is not None:
        # no summary of a summary alone: a conversation message went into it
        assert any(not is_summary(m) for m in result.removed)


def test_default_fallback_keeps_the_history_while_it_fits_and_writes_the_ledger_when_it_must_shrink():
    """fallback="auto": a failed model removes nothing while the history fits the window (the next call tries
    again); over the window, the deterministic ledger replaces the old part so the call fits."""
    from lc_compaction import CompactionPolicy, compact
    from tests.oracle.cases import fake_summary_model

    msgs = requests_and_answers()
    total = CompactionPolicy(max_input_tokens=10**6, token_counter="approximate").counter.count_messages(msgs)
    # above an explicit trigger below the budget (80% of the window: 0.88 x the history), within the window
    # (the default trigger is the budget, where "fits" and "triggered" never hold together)
    soft = CompactionPolicy(max_input_tokens=int(total * 1.1), reserve=0, trigger=("fraction", 0.8),
                            token_counter="approximate", strategies=[fast(model=fake_summary_model("raises"))])
    result = compact(msgs, soft)
    assert result.triggered and result.fits and [m.id for m in result.messages] == [m.id for m in msgs]
    assert result.details["summarizer"] == "none" and result.details["fallback_reason"]
    # over the window: the ledger is written in the hard pass
    hard = CompactionPolicy(max_input_tokens=int(total * 0.6), reserve=0, token_counter="approximate",
                            strategies=[fast(model=fake_summary_model("raises"))])
    result = compact(msgs, hard)
    assert result.fits and result.details["summarizer"] == "ledger"
    assert len(summaries(result.messages)) == 1


def test_a_placeholder_reply_is_not_stored_as_a_summary():
    """A model that answers "Error generating summary." (or another placeholder) has failed: the ledger is
    written instead, never the placeholder."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from lc_compaction import CompactionPolicy, compact

    msgs = requests_and_answers()
    for placeholder in ("Error generating summary.", "No previous conversation history"):
        model = FakeListChatModel(responses=[placeholder] * 10)
        policy = CompactionPolicy(max_input_tokens=1500, reserve=0, token_counter="approximate",
                                  strategies=[fast(model=model, fallback="ledger")])
        result = compact(msgs, policy)
        (summary,) = summaries(result.messages)
        assert placeholder.rstrip(".") not in summary.content
        assert result.details["summarizer"] == "ledger" and "placeholder" in result.details["fallback_reason"]
