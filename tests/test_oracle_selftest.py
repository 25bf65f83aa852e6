"""Self-tests of the independent oracle (tests/oracle): each check can fail, and passes on correct outputs;
generated, broken and recorded histories behave as the oracle claims.  Nothing here imports lc_compaction."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.oracle import cases as oracle_cases  # noqa: E402
from tests.oracle.checks import (  # noqa: E402
    ALL_STRUCTURAL,
    CHECKS,
    CONDITIONAL_STRUCTURAL,
    FAKE_SUMMARY_ERROR,
    CheckContext,
    approx_counter,
    check,
    check_all_structural,
    default_is_summary,
    messages_counter,
    run_checks,
)
from tests.oracle.generators import DEFECT_CHECKS, broken_histories, histories  # noqa: E402
from tests.oracle.traces import load_traces, trace_files  # noqa: E402

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------------------------------------
# hand-made messages
# ------------------------------------------------------------------------------------------------------------------

SUMMARY_KW = {"lc_source": "summarization", "lc_compaction": {"kind": "summary"}}


def S(id, text="You are a helpful assistant."):
    return SystemMessage(content=text, id=id)


def H(id, text):
    return HumanMessage(content=text, id=id)


def SUM(id, text="Here is a summary of the conversation to date:\n\nThe user asked about A and B."):
    return HumanMessage(content=text, id=id, additional_kwargs=dict(SUMMARY_KW))


def A(id, content="", calls=()):
    return AIMessage(
        content=content, id=id,
        tool_calls=[{"name": "search", "args": {"q": c}, "id": c, "type": "tool_call"} for c in calls],
    )


def T(id, call_id, text="result"):
    return ToolMessage(content=text, tool_call_id=call_id, id=id)


s1 = S("s1")
h1 = H("h1", "first question")
a1 = A("a1", "", ["c1", "c2"])
t1 = T("t1", "c1", "result one")
t2 = T("t2", "c2", "result two")
a2 = A("a2", "the answer")
h2 = H("h2", "latest question")
VALID = [s1, h1, a1, t1, t2, a2, h2]

THINK = {"type": "thinking", "thinking": "let me think", "signature": "sig123456789"}
a_think = AIMessage(
    content=[THINK, {"type": "text", "text": "calling"},
             {"type": "tool_use", "id": "c9", "name": "search", "input": {}}],
    tool_calls=[{"name": "search", "args": {}, "id": "c9", "type": "tool_call"}],
    id="at",
)
a_think_stripped = a_think.model_copy(update={"content": a_think.content[1:]})
t9 = T("t9", "c9")
THINK_INPUT = [s1, h1, a2, h2, a_think, t9]

REPLY_BLOCKS = [
    {"type": "reasoning", "reasoning": "thinking about what matters", "signature": "S" * 300},
    {"type": "text", "text": "User asked about <MOD_A> and <MOD_B>."},
    {"type": "text", "text": " <MOD_B> consumes <MOD_A> output."},
]
PRIOR = SUM("prev", "Here is a summary of the conversation to date:\n\nUser name is Ada; preferred language Lisp.")


def ctx(output, input=VALID, **kw):
    return CheckContext(input=list(input), output=None if output is None else list(output), **kw)


# name -> (passing context, failing context, substrings the failure message must contain)
PAIRS = {
    "no_orphan_tool_results": (ctx(VALID), ctx([s1, h1, t1, a2, h2]), ["output[2]", "'c1'"]),
    "tool_results_adjacent": (ctx(VALID), ctx([s1, h1, a1, t1, a2, t2, h2]), ["output[5]", "'c2'"]),
    "no_dangling_tool_calls": (ctx(VALID), ctx([s1, h1, a1, t1, a2, h2]), ["output[2]", "'c2'"]),
    "no_duplicate_tool_results": (
        ctx(VALID),
        ctx([s1, h1, a1, t1, T("t1b", "c1"), t2, a2, h2]),
        ["output[3]", "output[4]", "'c1'"],
    ),
    # a1 (calls c1, c2) and t1 kept, t2 dropped
    "tool_pairs_atomic": (ctx([s1, h2]), ctx([s1, h1, a1, t1, a2, h2]), ["'c2'", "output[2]"]),
    "first_non_system_is_human": (ctx([s1, SUM("sm"), a2, h2]), ctx([s1, a2, h2]), ["output[1]", "a2"]),
    "tool_call_follows_user_or_tool": (ctx(VALID), ctx([s1, h1, a2, a1, t1, t2, h2]), ["output[3]", "output[2]"]),
    "system_only_at_start": (ctx(VALID), ctx([s1, h1, S("s2", "note"), a2, h2]), ["output[2]", "s2"]),
    "preserves_system_prompt": (
        ctx([S("s1", "You are a helpful assistant.\n\nSummary: A and B."), h2]),
        ctx([S("s1", "You are a helpful bot."), h2]),
        ["output[0]", "changed"],
    ),
    "keeps_latest_human_verbatim": (ctx([s1, SUM("sm"), h2]), ctx([s1, SUM("sm", "latest question"), a2]), ["h2"]),
    "keeps_tail_verbatim": (
        ctx([s1, SUM("sm"), a2, h2], settings={"keep": {"messages": 2}}),
        ctx([s1, h1, a2, H("h2", "latest question [cut]")], settings={"keep": {"messages": 2}}),
        ["input[6]", "output[3]"],
    ),
    "within_budget": (
        ctx([s1, h2], settings={"max_tokens": 3, "token_counter": "messages"}),
        ctx(VALID, settings={"max_tokens": 3, "token_counter": "messages"}),
        ["7 > max_tokens 3"],
    ),
    "unchanged_if_under_budget": (
        ctx(VALID, settings={"trigger": {"messages": 10}, "token_counter": "messages"}),
        ctx([s1, h1, a1, t1, t2, h2], settings={"trigger": {"messages": 10}, "token_counter": "messages"}),
        ["position 5", "a2"],
    ),
    "nonempty_with_human": (ctx([s1, h2]), ctx([s1, SUM("sm")]), ["no (non-summary) HumanMessage"]),
    "no_exception": (ctx(VALID), ctx(None, error=ValueError("boom")), ["ValueError", "boom"]),
    "no_placeholder_summary": (
        ctx([s1, SUM("sm"), h2]),
        ctx([s1, SUM("sm", "Error generating summary: timeout"), h2]),
        ["output[1]", "error generating summary"],
    ),
    "history_preserved_on_failure": (
        ctx(None, settings={"summary_model": "raises"}, error=ConnectionError(FAKE_SUMMARY_ERROR)),
        ctx([s1, SUM("sm"), h2], settings={"summary_model": "raises"}),
        ["input[1]", "'h1'"],
    ),
    "summary_is_plain_text": (
        ctx(
            [s1, SUM("sm", "Here is a summary of the conversation to date:\n\n"
                     + REPLY_BLOCKS[1]["text"] + REPLY_BLOCKS[2]["text"]), h2],
            settings={"summary_reply_blocks": REPLY_BLOCKS},
            summarizer_inputs=["..."],
        ),
        ctx([s1, SUM("sm", str(REPLY_BLOCKS)), h2], settings={"summary_reply_blocks": REPLY_BLOCKS}),
        ["output[1]", "summary"],
    ),
    "single_summary": (ctx([s1, SUM("sm"), h2]), ctx([s1, SUM("sm"), SUM("sm2"), h2]), ["output[1]", "output[2]"]),
    "prior_summary_fed_to_summarizer": (
        ctx([s1, SUM("new"), h2], input=[s1, PRIOR, h1, a2, h2],
            summarizer_inputs=["human: User name is Ada; preferred language Lisp.\nhuman: first question"]),
        ctx([s1, SUM("new"), h2], input=[s1, PRIOR, h1, a2, h2],
            summarizer_inputs=["human: first question\nai: the answer"]),
        ["input[1]", "'prev'"],
    ),
    "no_resummarize_summary_only": (
        ctx([s1, PRIOR, h2], input=[s1, PRIOR, h2]),
        ctx([s1, SUM("new"), h2], input=[s1, PRIOR, h2], summarizer_inputs=["human: User name is Ada"]),
        ["output[1]", "summary of a summary"],
    ),
    "thinking_leads_active_turn": (
        ctx([s1, SUM("sm"), h2, a_think, t9], input=THINK_INPUT),
        ctx([s1, h2, a_think_stripped, t9], input=THINK_INPUT),
        ["output[2]", "input[4]"],
    ),
    "no_remove_messages": (ctx([s1, h2]), ctx([RemoveMessage(id="h1"), s1, h2]), ["output[0]", "RemoveMessage"]),
    "ids_present_and_unique": (
        ctx(VALID),
        ctx([s1, H(None, "first question"), a2, h2]),
        ["output[1]", "no id"],
    ),
}

EXTRA_FAILURES = {
    "tool_pairs_atomic": ctx([s1, h1, t2, a2, h2]),  # a result whose call was dropped
    "preserves_system_prompt": ctx([h1, a2, h2]),  # system prompt dropped
    "keeps_latest_human_verbatim": ctx([s1, h1, a1, t1, t2, a2]),  # latest request dropped
    "summary_is_plain_text": ctx(
        [s1, HumanMessage(content=REPLY_BLOCKS[1:], id="sm", additional_kwargs=SUMMARY_KW), h2]),
    "ids_present_and_unique": ctx([s1, h1, A("h1", "dup id"), h2]),
    "keeps_tail_verbatim": ctx([s1, h2], settings={"keep": {"messages": 2}}),
    "thinking_leads_active_turn": ctx([s1, h2, A("new", "plain"), a_think, t9], input=THINK_INPUT),
    "history_preserved_on_failure": ctx([s1, h1, a1, t1, t2, a2, SUM("sm")], settings={"summary_model": "raises"}),
}


def test_every_vocabulary_check_is_implemented_and_self_tested():
    readme = (oracle_cases.shared_dir() / "cases" / "README.md").read_text()
    section = readme.split("Checks vocabulary", 1)[1]
    names = set(re.findall(r"^([a-z_]+) +\S", section, flags=re.M))
    assert len(names) == 24, names
    assert names == set(CHECKS)
    assert set(PAIRS) == set(CHECKS)
    used = {n for c in oracle_cases.load_cases(None) for n in c.checks}
    assert used <= set(CHECKS)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_check_passes_on_good_and_fails_on_bad(name):
    good, bad, fragments = PAIRS[name]
    check(name, good)
    with pytest.raises(AssertionError) as info:
        check(name, bad)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    if name in EXTRA_FAILURES:
        with pytest.raises(AssertionError):
            check(name, EXTRA_FAILURES[name])


def test_failing_pairs_are_precise():
    """Each hand-made tool-pairing violation breaks only what it claims (plus adjacency, which an orphan or a
    missing result also breaks)."""
    tool_checks = ["no_orphan_tool_results", "tool_results_adjacent", "no_dangling_tool_calls",
                   "no_duplicate_tool_results"]
    also_breaks = {"no_orphan_tool_results": {"tool_results_adjacent"}}
    for name in tool_checks:
        bad = PAIRS[name][1]
        for other in tool_checks:
            if other != name and other not in also_breaks.get(name, set()):
                check(other, bad)


def test_error_handling_and_misconfiguration():
    err = ctx(None, error=RuntimeError("single message exceeds budget"))
    with pytest.raises(AssertionError, match="no output to check"):
        check("no_orphan_tool_results", err)
    check("no_placeholder_summary", err)
    allowed = ctx(None, error=RuntimeError("single message exceeds budget"), allow_error=True)
    for name in ("nonempty_with_human", "within_budget", "preserves_system_prompt"):
        check(name, allowed)
    with pytest.raises(AssertionError):
        check("no_exception", allowed)
    with pytest.raises(ValueError):
        check("within_budget", ctx(VALID))
    with pytest.raises(ValueError):
        check("unchanged_if_under_budget", ctx(VALID))
    with pytest.raises(ValueError):
        check("no_such_check", ctx(VALID))
    # unchanged_if_under_budget is vacuous over the trigger; keep tail by tokens
    check("unchanged_if_under_budget",
          ctx([s1, h2], settings={"trigger": {"messages": 3}, "token_counter": "messages"}))
    check("keeps_tail_verbatim", ctx([s1, a2, h2], settings={"keep": {"tokens": 2}, "token_counter": "messages"}))
    with pytest.raises(AssertionError):
        check("keeps_tail_verbatim", ctx([s1, h2], settings={"keep": {"tokens": 2}, "token_counter": "messages"}))
    # summary expected in summarize mode above the trigger
    s13 = {"mode": "summarize", "summary_model": "fixed", "trigger": {"messages": 3}, "token_counter": "messages"}
    with pytest.raises(AssertionError, match="never called"):
        check("prior_summary_fed_to_summarizer",
              ctx([s1, PRIOR, h1, a2, h2], input=[s1, PRIOR, h1, a2, h2], settings=s13))
    s14 = {"mode": "summarize", "summary_model": "blocks", "summary_reply_blocks": REPLY_BLOCKS,
           "trigger": {"messages": 3}}
    with pytest.raises(AssertionError, match="no new summary"):
        check("summary_is_plain_text", ctx(VALID, settings=s14))


def test_run_checks_reports_every_failure():
    with pytest.raises(AssertionError) as info:
        run_checks(["no_orphan_tool_results", "system_only_at_start", "no_remove_messages"], ctx([s1, t1, S("s2"), h2]))
    text = str(info.value)
    assert "no_orphan_tool_results:" in text and "system_only_at_start:" in text
    assert "no_remove_messages" not in text


def test_check_all_structural_conditions():
    check_all_structural(VALID, VALID)
    check_all_structural(VALID, [s1, SUM("sm"), a2, h2])
    with pytest.raises(AssertionError, match="no_orphan_tool_results"):
        check_all_structural(VALID, [s1, h1, t1, t2, a2, h2])
    # an input that already breaks a conditional property is not blamed for it ...
    mid_system = [s1, h1, S("s2", "note"), a2, h2]
    check_all_structural(mid_system, mid_system)
    # ... but a property that held must keep holding
    with pytest.raises(AssertionError, match="system_only_at_start"):
        check_all_structural(VALID, [s1, h1, S("s2", "note"), a2, h2])
    with pytest.raises(AssertionError, match="first_non_system_is_human"):
        check_all_structural(VALID, [s1, a2, h2])
    with pytest.raises(AssertionError, match="preserves_system_prompt"):
        check_all_structural(VALID, [h1, a2, h2])
    # orphans are never acceptable, even when the input had them
    orphaned = [s1, h1, t1, h2]
    with pytest.raises(AssertionError):
        check_all_structural(orphaned, orphaned)
    assert CONDITIONAL_STRUCTURAL <= set(ALL_STRUCTURAL) <= set(CHECKS)


def test_summary_detection():
    assert default_is_summary(SUM("x"))
    assert default_is_summary(HumanMessage(content="s", additional_kwargs={"lc_source": "summarization"}))
    assert default_is_summary(AIMessage(content="s", additional_kwargs={"lc_compaction": {"kind": "summary"}}))
    assert not default_is_summary(HumanMessage(content="s", additional_kwargs={"lc_compaction": {"pinned": True}}))
    assert not default_is_summary(h1)
    custom = ctx([s1, h1, a2, h2], is_summary=lambda m: m.id in ("h1", "h2"))
    with pytest.raises(AssertionError):
        check("single_summary", custom)


# ------------------------------------------------------------------------------------------------------------------
# counters
# ------------------------------------------------------------------------------------------------------------------


def test_counters():
    assert messages_counter(VALID) == 7
    assert approx_counter(VALID) == count_tokens_approximately(VALID)
    assert approx_counter([]) == 0
    data = "data:image/png;base64," + "A" * 400_000
    forms = [
        {"type": "image_url", "image_url": {"url": data}},
        {"type": "input_image", "image_url": data},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 400_000}},
        {"type": "image", "base64": "A" * 400_000, "mime_type": "image/png"},
    ]
    costs = {approx_counter([HumanMessage(content=[{"type": "text", "text": "look"}, f])]) for f in forms}
    assert len(costs) == 1 and costs.pop() < 200
    by_case = {c.id: c for c in oracle_cases.load_cases(None)}
    # the "fits" premises of the unchanged_if_under_budget cases hold under the oracle's counters
    for case in by_case.values():
        if "unchanged_if_under_budget" in case.checks:
            check("unchanged_if_under_budget", case.context(case.fresh_messages()))
            limit = min(v for v in (case.settings.get("max_tokens"), case.settings["trigger"].get("tokens")) if v)
            assert case.token_counter()(case.messages) <= limit, case.id
    assert approx_counter(by_case["case-16"].messages) < 8000
    assert approx_counter(by_case["case-17"].messages) > 600  # tool_call arguments count


# ------------------------------------------------------------------------------------------------------------------
# cases and the fake summary model
# ------------------------------------------------------------------------------------------------------------------


def test_load_cases():
    default = oracle_cases.load_cases()
    assert default and {c.settings["mode"] for c in default} <= {"trim", "either"}
    everything = oracle_cases.load_cases(None)
    assert len(everything) == 18 and len({c.id for c in everything}) == 18
    summarize_ids = {c.id for c in oracle_cases.load_cases(("summarize",))}
    assert summarize_ids | {c.id for c in default} == {c.id for c in everything}
    case27 = next(c for c in everything if c.id == "case-27")
    assert all(m.id is None for m in case27.messages)
    first = default[0]
    first.messages.clear()
    assert first.fresh_messages()  # the case data is not shared with callers


def test_identity_output_fails_cases_that_need_work():
    """Returning the input unchanged must fail the cases whose input is over budget / broken.

    It passes the case checks of case-02, 05, 06, 09 (their checks are all structural and hold on the input),
    case-08 (input 922 approx tokens <= max_tokens 1200), case-11 (unchanged is the right answer) and the
    under-budget cases 15, 16, 22."""
    expect_fail = {"case-01", "case-04", "case-07", "case-13", "case-14", "case-17", "case-24", "case-25", "case-27"}
    for case in oracle_cases.load_cases(None):
        model = case.summary_model()
        try:
            case.run_checks(case.fresh_messages(), summary_model=model)
            failed = False
        except AssertionError:
            failed = True
        assert failed == (case.id in expect_fail), case.id


def test_fake_summary_models():
    fixed = oracle_cases.fake_summary_model({"summary_model": "fixed"})
    assert isinstance(fixed, BaseChatModel)
    reply = fixed.invoke([SystemMessage("Summarize."), HumanMessage("hello world")])
    assert reply.content == oracle_cases.FIXED_SUMMARY_TEXT
    reply = asyncio.run(fixed.ainvoke([HumanMessage([{"type": "text", "text": "async text"}])]))
    assert isinstance(reply.content, str) and reply.content
    assert len(fixed.inputs) == 2 and "hello world" in fixed.inputs[0] and "async text" in fixed.inputs[1]

    raises = oracle_cases.fake_summary_model({"summary_model": "raises"})
    with pytest.raises(ConnectionError):
        raises.invoke("x")
    with pytest.raises(ConnectionError):
        asyncio.run(raises.ainvoke("y"))
    assert raises.inputs == ["human: x", "human: y"]

    blocks = oracle_cases.fake_summary_model({"summary_model": "blocks", "summary_reply_blocks": REPLY_BLOCKS})
    out = blocks.invoke("z")
    assert out.content == REPLY_BLOCKS and out.content is not REPLY_BLOCKS
    assert oracle_cases.fake_summary_model({}) is None
    with pytest.raises(ValueError):
        oracle_cases.fake_summary_model({"summary_model": "blocks"})
    other = oracle_cases.fake_summary_model("fixed")
    assert other.inputs == []  # no shared state between instances


# ------------------------------------------------------------------------------------------------------------------
# generated, broken and recorded histories
# ------------------------------------------------------------------------------------------------------------------


@FAST
@given(histories(prior_summary=True, invalid_calls=True))
def test_histories_with_invalid_tool_calls_and_their_error_results_are_valid(messages):
    """An invalid tool call is a call on the wire (langchain-openai sends it as one); its error result answers it."""
    run_checks(ALL_STRUCTURAL + ["tool_pairs_atomic"], CheckContext(input=messages, output=messages))


def test_an_invalid_tool_call_is_a_call():
    bad = AIMessage("", id="ax", invalid_tool_calls=[{"name": "search", "args": '{"q": ', "id": "cx", "error": "e",
                                                      "type": "invalid_tool_call"}])
    answer = T("tx", "cx", "Tool call search with id cx could not be executed")
    run_checks(ALL_STRUCTURAL, ctx([s1, h1, bad, answer, h2]))
    with pytest.raises(AssertionError, match="'cx'.*dangling"):
        check("no_dangling_tool_calls", ctx([s1, h1, bad, h2]))
    with pytest.raises(AssertionError, match="'cx'.*result was removed"):
        check("tool_pairs_atomic", ctx([s1, h1, bad, h2], input=[s1, h1, bad, answer, h2]))


@FAST
@given(histories(prior_summary=True, reuse_call_ids=True))
def test_histories_with_call_ids_reused_across_turns_are_valid(messages):
    """call_0 in every AIMessage: valid on the wire, so every structural check passes."""
    ids = [m.id for m in messages]
    assert all(ids) and len(set(ids)) == len(ids)
    run_checks(ALL_STRUCTURAL + ["tool_pairs_atomic"], CheckContext(input=messages, output=messages))


def test_pairing_is_by_position_when_ids_are_reused():
    """A call_0 of turn 2 left without its result is dangling even though turn 1 answered a call_0; a call_0
    result of turn 1 kept while its call was dropped breaks atomicity; two calls of one id in one AIMessage
    answered twice are duplicates."""
    first, r1 = A("x1", "", ["call_0"]), T("r1", "call_0", "turn one")
    second, r2 = A("x2", "", ["call_0"]), T("r2", "call_0", "turn two")
    full = [s1, h1, first, r1, h2, second, r2]
    run_checks(ALL_STRUCTURAL + ["tool_pairs_atomic"], CheckContext(input=full, output=full))
    with pytest.raises(AssertionError, match="output\\[5\\].*'call_0'.*dangling"):
        check("no_dangling_tool_calls", ctx([s1, h1, first, r1, h2, second], input=full))
    with pytest.raises(AssertionError, match="'call_0'.*result was removed"):
        check("tool_pairs_atomic", ctx([s1, h1, first, h2, second, r2], input=full))
    twice = A("x3", "", ["call_0", "call_0"])
    with pytest.raises(AssertionError, match="answered by 2 ToolMessages"):
        check("no_duplicate_tool_results", ctx([s1, h1, twice, T("u1", "call_0"), T("u2", "call_0")], input=full))
    with pytest.raises(AssertionError, match="2 calls of this message share"):
        check("no_dangling_tool_calls", ctx([s1, h1, twice, T("u1", "call_0")], input=full))


@FAST
@given(histories(prior_summary=True))
def test_generated_histories_are_valid(messages):
    ids = [m.id for m in messages]
    assert all(ids) and len(set(ids)) == len(ids)
    run_checks(ALL_STRUCTURAL + ["tool_pairs_atomic"], CheckContext(input=messages, output=messages))
    check_all_structural(messages, messages)


_PRECISE = {
    "orphan_tool_result": ["no_dangling_tool_calls", "no_duplicate_tool_results", "system_only_at_start"],
    "dangling_tool_call": ["no_orphan_tool_results", "no_duplicate_tool_results", "tool_results_adjacent"],
    "duplicate_tool_result": ["no_orphan_tool_results", "no_dangling_tool_calls", "tool_results_adjacent"],
    "non_adjacent_tool_result": ["no_orphan_tool_results", "no_dangling_tool_calls", "no_duplicate_tool_results"],
    "system_in_middle": ["no_orphan_tool_results", "tool_results_adjacent", "no_dangling_tool_calls",
                         "first_non_system_is_human"],
    "starts_with_ai": ["no_orphan_tool_results", "tool_results_adjacent", "no_dangling_tool_calls",
                       "system_only_at_start"],
    "duplicate_call_id_in_message": ["no_orphan_tool_results", "tool_results_adjacent", "no_dangling_tool_calls",
                                     "system_only_at_start"],
}


@FAST
@given(broken_histories(reuse_call_ids=None, invalid_calls=None))
def test_broken_histories_fail_their_check(example):
    messages, defect = example
    assert DEFECT_CHECKS[defect.kind] == defect.check
    context = CheckContext(input=messages, output=messages)
    with pytest.raises(AssertionError) as info:
        check(defect.check, context)
    assert f"[{defect.index}]" in str(info.value), (defect, str(info.value))
    if defect.tool_call_id:
        assert repr(defect.tool_call_id) in str(info.value)
    for other in _PRECISE[defect.kind]:
        check(other, context)


def test_all_traces_pass_structural_checks():
    files = trace_files()
    assert {"agentdojo.jsonl", "agentdojo_injections.jsonl", "tau_bench_airline.jsonl"} <= {p.name for p in files}
    traces = load_traces()
    lines = sum(1 for p in files for line in p.read_text(encoding="utf-8").splitlines() if line.strip())
    assert len(traces) == lines and len({cid for cid, _ in traces}) == lines
    for cid, messages in traces:
        ids = [m.id for m in messages]
        assert all(ids) and len(set(ids)) == len(ids), cid
        try:
            run_checks(ALL_STRUCTURAL + ["tool_pairs_atomic"], CheckContext(input=messages, output=messages))
        except AssertionError as exc:  # pragma: no cover - message for the reader
            raise AssertionError(f"trace {cid}: {exc}") from None


def test_oracle_is_independent_of_the_package():
    pattern = re.compile(r"^\s*(from|import)\s+lc_compaction\b", re.M)
    for path in (Path(__file__).parent / "oracle").glob("*.py"):
        assert not pattern.search(path.read_text()), path


# ------------------------------------------------------------------------------------------------------------------
# the correct outcomes described in the cases' "expect" prose pass the cases' checks
# ------------------------------------------------------------------------------------------------------------------


def _summary(text="Here is a summary of the conversation to date:\n\n" + oracle_cases.FIXED_SUMMARY_TEXT,
             id="summary-1"):
    return HumanMessage(content=text, id=id, additional_kwargs=dict(SUMMARY_KW))


def _pick(case, *ids):
    by_id = {m.id: m for m in case.fresh_messages()}
    return [by_id[i] if isinstance(i, str) else i for i in ids]


def _correct_outputs(case):
    """(output, summarizer_inputs, error, allow_error) for each correct outcome the case's expect text allows."""
    c = case.id
    fixed_input = ["human: earlier conversation"]
    if c == "case-01":
        return [(_pick(case, "h2", "a2", "h3"), [], None, False)]
    if c == "case-02":
        tools = [f"t{n:02d}" for n in range(1, 11)]
        return [
            (_pick(case, _summary(), "a1", *tools, "a2", "h2"), fixed_input, None, False),
            (_pick(case, _summary(), "a2", "h2"), fixed_input, None, False),
        ]
    if c == "case-04":
        return [(_pick(case, _summary(), "a2", "h2"), fixed_input, None, False)]
    if c == "case-05":
        return [(_pick(case, _summary()), fixed_input, None, False), (case.fresh_messages(), [], None, False)]
    if c == "case-06":
        return [
            (_pick(case, "s1", _summary(), "h2", "a3", "t2", "a4", "h3"), fixed_input, None, False),
            (_pick(case, "s1", "h2", "a3", "t2", "a4", "h3"), [], None, False),
        ]
    if c == "case-07":
        merged = SystemMessage(content="You are a travel assistant.\n\nSummary of earlier conversation: 3-day trip.",
                               id="s1")
        return [
            (_pick(case, merged, "h2", "a2", "h3"), [], None, False),
            (_pick(case, "s1", _summary(), "h2", "a2", "h3"), fixed_input, None, False),
        ]
    if c == "case-08":
        return [(_pick(case, "s1", _summary(), "a3", "h4"), fixed_input, None, False)]
    if c == "case-09":
        return [
            (_pick(case, "s1", "h1", _summary(), "a2", "t2"), fixed_input, None, False),
            (_pick(case, "s1", _summary(), "h1", "a2", "t2"), fixed_input, None, False),
        ]
    if c == "case-11":
        return [
            (case.fresh_messages(), ["human: ..."], None, False),
            (None, ["human: ..."], ConnectionError(FAKE_SUMMARY_ERROR), False),
        ]
    if c == "case-13":
        prior = next(m for m in case.fresh_messages() if m.id == "prev_summary")
        fed = ["human: " + prior.content + "\nhuman: Switch my preferred language to <LANG_2>."]
        return [(_pick(case, "s1", _summary(id="summary-2"), "h3"), fed, None, False)]
    if c == "case-14":
        text = ("Here is a summary of the conversation to date:\n\n"
                "User asked about <MOD_A> and <MOD_B>. <MOD_B> consumes <MOD_A> output.")
        return [(_pick(case, "s1", _summary(text), "a3", "h4"), fixed_input, None, False)]
    if c in ("case-15", "case-16", "case-22"):
        return [(case.fresh_messages(), [], None, False)]
    if c == "case-17":
        return [(_pick(case, "h1", "a2", "h2"), [], None, False)]
    if c == "case-24":
        t2 = next(m for m in case.fresh_messages() if m.id == "t2")
        cut = t2.model_copy(update={"content": t2.content[:2000] + "\n[... truncated ...]"})
        return [(_pick(case, "h1", "a1", "t1", cut, "a2", "h2"), [], None, False)]
    if c == "case-25":
        h1 = next(m for m in case.fresh_messages() if m.id == "h1")
        cut = h1.model_copy(update={"content": h1.content[:4000] + "\n[... cut ...]"})
        return [
            (_pick(case, "s1", cut), [], None, False),
            (None, [], ValueError("single message exceeds budget"), True),
        ]
    if c == "case-27":
        msgs = case.fresh_messages()
        for i, m in enumerate(msgs):
            m.id = f"assigned-{i}"
        return [([msgs[0], _summary(), msgs[-2], msgs[-1]], fixed_input, None, False)]
    raise AssertionError(f"no correct outcome written for {c}")


def test_correct_outcomes_from_the_case_prose_pass():
    for case in oracle_cases.load_cases(None):
        for output, fed, error, allow in _correct_outputs(case):
            case.run_checks(output, summarizer_inputs=fed, error=error, allow_error=allow)
            if output is not None:
                check_all_structural(case.fresh_messages(), output)


def _symptom_outputs(case):
    """Outputs showing each case's symptom (the failure people met): the case's checks must reject them."""
    c = case.id
    ms = case.fresh_messages()
    if c == "case-01":
        return _pick(case, "t1", "h2", "a2", "h3")
    if c == "case-02":
        return _pick(case, _summary(), "t06", "t07", "t08", "t09", "t10", "a2", "h2")
    if c == "case-04":
        return _pick(case, _summary(), "t2", "a2", "h2")
    if c == "case-05":
        return _pick(case, _summary(), "a1", "t1", "t2", "t2")
    if c == "case-06":
        return _pick(case, "s1", SystemMessage(content="Summary: searched <TOPIC_1>.", id="sum"),
                     "a3", "t2", "a4", "h3")
    if c == "case-07":
        return _pick(case, "s1", "h2", "s_sum", "a2", "h3")
    if c == "case-08":
        return [_summary("Here is a summary of the conversation to date:\n\n" + ms[0].content[:300]), *ms[-2:]]
    if c == "case-09":
        return _pick(case, "s1", _summary(), "a2", "t2")
    if c == "case-11":
        return [ms[0], _summary("Error generating summary: connection refused"), *ms[-2:]]
    if c == "case-13":
        return _pick(case, "s1", "prev_summary", _summary(), "h3")
    if c == "case-14":
        return [ms[0], _summary(str(case.settings["summary_reply_blocks"])), *ms[-2:]]
    if c in ("case-15", "case-16", "case-22"):
        return ms[:-1] if c == "case-22" else ms[2:]
    if c == "case-17":
        return _pick(case, "t1", "a2", "h2")
    if c == "case-24":
        return _pick(case, "h1", "a1", "t1", "a2", "h2")
    if c == "case-25":
        return _pick(case, "s1")
    if c == "case-27":
        return [ms[0], RemoveMessage(id="x"), _summary(), *ms[-2:]]
    raise AssertionError(f"no symptom written for {c}")


def test_symptoms_of_the_cases_fail_their_checks():
    for case in oracle_cases.load_cases(None):
        with pytest.raises(AssertionError):
            case.run_checks(_symptom_outputs(case), summarizer_inputs=["human: earlier conversation"])
