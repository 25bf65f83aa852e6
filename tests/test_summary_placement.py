"""Where a summary goes (issue 12, item 5): the family of tests of the fault class.

- Never inside a running tool loop (not between an assistant step and its results, not between those results and
  the request they serve). Seen: `s1 h1 a1 t1 SUMMARY a3 t3`.
- Never two user turns side by side that were not side by side in the input. Seen: `[s1, h1, summary(human), h3]`.
  The rule (`ladder.summary_role`): the summary is a user turn between assistant or tool turns, an assistant turn
  between two requests; where neither fits (between a request and a later assistant step of its exchange) those
  steps are folded into a progress note instead.
- Recognized again when its metadata is lost (history stored as plain role/content JSON): by its prefix, so it is
  never pinned as "the first request", is merged, and there are never two summaries.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)

from lc_compaction import CompactionPolicy, Summarize, TruncateToolResults, compact, is_summary
from lc_compaction.ladder import summary_role
from lc_compaction.markers import SUMMARY_PREFIX
from lc_compaction.structure import check_invariants
from tests.oracle import FakeSummaryModel
from tests.oracle.checks import (
    CheckContext,
    check,
    check_all_structural,
    missing_running_calls,
    new_adjacent_user_turns,
    text_of,
)
from tests.oracle.generators import histories

LEAD = "Here is a summary of the conversation to date:"


def by_prefix(message: BaseMessage) -> bool:
    """The oracle's summary test when metadata may be lost: the marks, or LangChain's lead-in words."""
    kwargs = message.additional_kwargs or {}
    return (kwargs.get("lc_source") == "summarization" or text_of(message.content).lstrip().startswith(LEAD)) \
        and not getattr(message, "tool_calls", None)


def summaries(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if by_prefix(m)]


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def policy(window: int = 2_000, **kw) -> CompactionPolicy:
    kw.setdefault("strategies", [Summarize(model=FakeSummaryModel(summary_text="The user asked things."),
                                           initial_delay=0)])
    return CompactionPolicy(max_input_tokens=window, **kw)


# ------------------------------------------------------------------------------------------------ the rule
def test_the_role_rule():
    h, a, t, s = HumanMessage("h"), AIMessage("a"), ToolMessage("t", tool_call_id="x"), SystemMessage("s")
    assert summary_role(h, h, "human") == "ai"        # between two requests: an assistant turn
    assert summary_role(t, a, "human") == "human"     # after tool results, before an assistant step
    assert summary_role(a, a, "ai") == "human"        # never two assistant turns
    assert summary_role(None, a, "ai") == "human"     # the first turn after the system prompt is the user's
    assert summary_role(h, None, "human") == "ai"     # at the end, after a request
    assert summary_role(h, a, "human") is None        # between a request and its assistant step: nothing fits
    assert summary_role(s, h, "human") is None and summary_role(None, h, "ai") is None


# ------------------------------------------------------------------------------------------------ seen cases
def test_seen_summary_between_two_requests_becomes_an_assistant_turn():
    """Seen: `[s1, h1, summary(human), h3, ...]`: three user turns in a row."""
    msgs = [SystemMessage("You help.", id="s1"), HumanMessage("first " + words(50, "q"), id="h1"),
            AIMessage(words(600, "a"), id="a1"), HumanMessage("second " + words(50, "r"), id="h2"),
            AIMessage(words(600, "b"), id="a2"), HumanMessage("third", id="h3")]
    result = compact(msgs, policy())
    out = result.messages
    assert [m.id for m in out][:2] == ["s1", "h1"] and out[-1].id == "h3"
    (summary,) = summaries(out)
    assert isinstance(summary, AIMessage) and out.index(summary) == 2
    assert new_adjacent_user_turns(msgs, out) == []
    check_all_structural(msgs, out)


def test_seen_summary_inside_a_running_loop_is_not_put_there():
    """Seen: `s1 h1 a1 t1 SUMMARY a3 t3`: the summary between a thinking step's results and the next step."""
    def step(n: int) -> list[BaseMessage]:
        calls = [{"name": "read", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}]
        return [AIMessage([{"type": "thinking", "thinking": f"plan {n}", "signature": "sig"}], tool_calls=calls,
                          id=f"a{n}"),
                ToolMessage(words(700, f"r{n}-"), tool_call_id=f"c{n}", id=f"t{n}")]

    msgs = [SystemMessage("You help.", id="s1"), HumanMessage("do it", id="h1"), *step(1), *step(2), *step(3)]
    result = compact(msgs, policy(window=3_000))
    out = result.messages
    assert summaries(out) == []  # nothing finished to summarize: the loop's steps are only ever folded
    # the loop still starts with a thinking step, its reasoning block as the model wrote it (a fold may take the
    # first step only into a step with its own thinking: issue 20)
    first = out[2]
    assert [m.id for m in out][:2] == ["s1", "h1"] and isinstance(first, AIMessage)
    assert first.content[0] == next(m for m in msgs if m.id == first.id).content[0]
    assert missing_running_calls(msgs, out) == []
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=out))
    check_all_structural(msgs, out)


def test_steps_between_a_request_and_a_later_step_are_folded_not_summarized():
    """In the middle of an exchange (its first steps evicted, later ones kept) no summary role fits."""
    msgs = [SystemMessage("You help.", id="s"), HumanMessage("do it", id="h1")]
    for n in range(4):
        msgs += [AIMessage("", tool_calls=[{"name": "read", "args": {"n": n}, "id": f"c{n}"}], id=f"a{n}"),
                 ToolMessage(words(400, f"r{n}-"), tool_call_id=f"c{n}", id=f"t{n}")]
    msgs += [AIMessage("All read.", id="done")]  # a finished exchange (a chat history between two turns)
    result = compact(msgs, policy(window=100_000, trigger=("tokens", 1_500), keep=("messages", 3)))
    out = result.messages
    assert summaries(out) == [] and any(a.kind == "folded" for a in result.actions)
    assert new_adjacent_user_turns(msgs, out) == [] and check_invariants(out) == []
    assert "read({\"n\": 0})" in text_of(out[2].content)


# ------------------------------------------------------------------------------------------------ metadata lost
def _as_plain_json(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The history stored as plain role/content JSON (OpenAI format) and read back: marks and ids are lost."""
    return list(convert_to_messages(convert_to_openai_messages(messages)))


def test_a_summary_stored_as_plain_json_is_recognized_merged_and_never_pinned():
    model = FakeSummaryModel(summary_text="Summary two.")
    old = [SystemMessage("You help.", id="s"), HumanMessage(f"{SUMMARY_PREFIX}Summary one: booked 4471.", id="old",
                                                            additional_kwargs={"lc_source": "summarization"}),
           HumanMessage("first " + words(40, "q"), id="h1"), AIMessage(words(500, "a"), id="a1"),
           HumanMessage("second " + words(40, "r"), id="h2"), AIMessage(words(500, "b"), id="a2"),
           HumanMessage("third", id="h3")]
    plain = _as_plain_json(old)
    assert plain[1].additional_kwargs == {} and is_summary(plain[1])  # only its words say what it is
    result = compact(plain, policy(strategies=[Summarize(model=model, initial_delay=0)]))
    out = result.messages
    assert len(summaries(out)) == 1 and "Summary one" in model.inputs[0]  # merged: fed to the summarizer
    assert out[1].content == plain[2].content  # the first real request is pinned, not the old summary
    assert new_adjacent_user_turns(plain, out) == []
    check_all_structural(plain, out, is_summary=by_prefix)


def test_langchain_middleware_layout_without_marks():
    """SummarizationMiddleware keeps `[summary(human), recent...]`; stored without marks it is still a summary."""
    msgs = _as_plain_json([SystemMessage("You help.")]) + [
        HumanMessage(f"{SUMMARY_PREFIX}The user wants a refund for order 8812.", id="lc"),
        AIMessage(words(400, "x"), id="x1"), HumanMessage("and then? " + words(30, "y"), id="h1"),
        AIMessage(words(400, "z"), id="x2"), HumanMessage("now " + words(30, "w"), id="h2"),
        AIMessage(words(400, "v"), id="x3"), HumanMessage("last", id="h3")]
    result = compact(msgs, policy())
    out = result.messages
    assert len(summaries(out)) <= 1 and "lc" not in [m.id for m in out[2:]]
    assert new_adjacent_user_turns(msgs, out) == []
    check_all_structural(msgs, out, is_summary=by_prefix)


# ------------------------------------------------------------------------------------------------ properties
def _strip(history: list[BaseMessage], strip: bool) -> list[BaseMessage]:
    if not strip:
        return history
    return [m.model_copy(update={"additional_kwargs": {}}) if isinstance(m, HumanMessage) else m for m in history]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=histories(max_turns=5, max_steps=3, max_parallel=3, prior_summary=True),
       window=st.integers(400, 12_000), keep=st.sampled_from([("turns", 1), ("turns", 2), ("messages", 4),
                                                              ("tokens", 800)]),
       strip=st.booleans(), truncate=st.booleans(), role=st.sampled_from(["human", "ai"]))
def test_a_summary_keeps_the_turns_alternating_and_stays_out_of_the_running_loop(history, window, keep, strip,
                                                                                   truncate, role):
    history = _strip(history, strip)
    strategies = [Summarize(role=role)]
    if truncate:
        strategies.insert(0, TruncateToolResults())
    result = compact(history, CompactionPolicy(max_input_tokens=window, keep=keep, token_counter="approximate",
                                               strategies=strategies))
    out = result.messages
    check_all_structural(history, out, is_summary=by_prefix)
    assert new_adjacent_user_turns(history, out) == [], [m.type for m in out]
    found = summaries(out)
    assert len(found) <= 1
    before = summaries(history)
    if result.summary is not None and before:  # an earlier summary is merged, never left beside the new one
        assert not {m.id for m in before} & {m.id for m in out}
    requests = [i for i, m in enumerate(out) if isinstance(m, HumanMessage) and not by_prefix(m)]
    if found and requests and isinstance(history[-1], ToolMessage):  # a running loop: the summary is before it
        assert out.index(found[0]) < requests[-1]
    missing = missing_running_calls(history, out)
    assert not missing or any(a.strategy == "last_resort" for a in result.actions), missing
