"""Giving up means nothing valid is left to do (issue 20, class 3).

`stop_reason == "pinned_over_budget"` says the history cannot fit the budget. It must still be the result of every
valid move the ladder knows: truncating a result, folding a step of the running loop into its progress note,
cutting a message that is not pinned. The case that failed: a running loop whose first step carries a large
thinking block was pinned whole, so the ladder gave up with its results uncut, though folding the earlier steps
into the latest step (which starts with its own thinking block, kept as it is) fits. Anthropic's rule is only
that the active turn's first assistant message leads with its thinking block, unmodified; earlier ones may go.
The checks below are the test's own (what a step, a pin, a cut is), apart from the oracle's structural checks.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, compact
from lc_compaction.markers import MARK_KEY, PROGRESS_PREFIX
from tests.oracle.checks import THINKING_BLOCK_TYPES, CheckContext, check, check_all_structural, \
    missing_running_calls


def thinking(n: int, chars: int) -> dict:
    return {"type": "thinking", "thinking": (f"Step {n}: I weigh the files to read next. " * chars)[:chars],
            "signature": f"sig{n}"}


def file_text(n: int, k: int, size: int) -> str:
    """The content (characters) of the k-th file that step n reads."""
    return (f"line {n}.{k}: def handler(request): return respond(request) # " * size)[:size]


def step(n: int, *, think: int = 0, results: tuple[int, ...] = (8_800,), said: int = 0,
         rereads: tuple[tuple[int, int], ...] = ()) -> list[BaseMessage]:
    """Step n: an assistant message (a thinking block of `think` characters first when > 0, then `said`
    characters of text) reading one file per entry of `results`, and the results of those sizes (characters);
    then, for each `(m, size)` of `rereads`, the first file of step m read again (the same path, the same content
    of `size` characters as step m's result), a repeat that deduplication turns into a note pointing at it."""
    calls = [{"name": "read_file", "args": {"path": f"src/mod_{n}_{k}.py"}, "id": f"c{n}_{k}", "type": "tool_call"}
             for k in range(len(results))]
    calls += [{"name": "read_file", "args": {"path": f"src/mod_{m}_0.py"}, "id": f"c{n}_r{m}", "type": "tool_call"}
              for m, _ in rereads]
    content: list = [thinking(n, think)] if think else []
    content += [{"type": "text", "text": (f"Reading part {n} of the module to compare handlers. " * said)[:said]}
                ] if said else []
    content += [{"type": "tool_use", "id": c["id"], "name": "read_file", "input": c["args"]} for c in calls]
    out: list[BaseMessage] = [AIMessage(content, tool_calls=calls, id=f"a{n}")]
    for k, size in enumerate(results):
        out.append(ToolMessage(file_text(n, k, size), tool_call_id=f"c{n}_{k}", id=f"t{n}_{k}", name="read_file"))
    for m, size in rereads:
        out.append(ToolMessage(file_text(m, 0, size), tool_call_id=f"c{n}_r{m}", id=f"t{n}_r{m}",
                               name="read_file"))
    return out


def loop(*steps: list[BaseMessage], system: str = "You are a coding agent.") -> list[BaseMessage]:
    msgs: list[BaseMessage] = [SystemMessage(system, id="s"), HumanMessage("Fix the failing handler.", id="h")]
    for s in steps:
        msgs += s
    return msgs


def leads_with_thinking(m: BaseMessage) -> bool:
    c = m.content
    return isinstance(c, list) and bool(c) and isinstance(c[0], dict) and c[0].get("type") in THINKING_BLOCK_TYPES


def loop_steps(messages: list[BaseMessage]) -> list[list[BaseMessage]]:
    """The assistant steps after the latest HumanMessage (an AIMessage and the results that follow it)."""
    last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    out: list[list[BaseMessage]] = []
    for m in messages[last + 1:]:
        if isinstance(m, AIMessage):
            out.append([m])
        elif out:
            out[-1].append(m)
    return out


POLICY = CompactionPolicy(max_input_tokens=2_000, reserve=0, token_counter="approximate")


# ------------------------------------------------------------------------------------------------ the case
def test_a_large_first_thinking_step_is_folded_into_the_latest_thinking_step():
    """The first step's thinking block alone is over the budget and the next step reads two 8.8k-character files:
    the earlier steps fold into the latest step, whose thinking block stays first and unmodified, and it fits."""
    msgs = loop(step(0, think=20_000, results=(800,)), step(1, results=(8_800, 8_800)), step(2, think=400,
                                                                                            results=(600,)))
    result = compact(msgs, POLICY)
    assert result.fits and result.stop_reason != "pinned_over_budget", result.stop_reason
    out = result.messages
    steps = loop_steps(out)
    first = steps[0][0]
    assert first.id == "a2" and first.content[0] == msgs[-2].content[0]  # its thinking block, as it was
    assert first.content[1]["text"].startswith(PROGRESS_PREFIX)  # the note, right after it
    assert missing_running_calls(msgs, out) == []  # every call of the loop still named
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=out))
    check_all_structural(msgs, out)


def test_a_repeated_result_does_not_keep_the_large_thinking_step_it_repeats():
    """The latest step reads the first step's file again: its result is a deduplication note pointing at the first
    step's copy. Over the budget, that copy does not hold the first step (its 20,000-character thinking block) in
    place: the earlier steps fold into the latest, the note gets the file's content back, and it fits."""
    msgs = loop(step(0, think=20_000, results=(1_200,)), step(1, results=(8_800, 8_800)),
                step(2, think=400, results=(300,), rereads=((0, 1_200),)))
    result = compact(msgs, POLICY)
    assert result.fits and result.stop_reason != "pinned_over_budget", result.stop_reason
    out = result.messages
    assert any(a.kind == "deduplicated" for a in result.actions)  # the repeat was a note on the way
    by_id = {m.id: m for m in out}
    assert by_id["t2_r0"].content == file_text(0, 0, 1_200)  # the file, once, where the agent read it last
    assert loop_steps(out)[0][0].id == "a2" and loop_steps(out)[0][0].content[0] == msgs[-3].content[0]
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=out))
    check_all_structural(msgs, out)


@pytest.mark.parametrize("trigger_tokens", [3_000, 5_700])
def test_a_repeated_result_keeps_the_file_whole_once_when_the_history_fits(trigger_tokens):
    """The same history under a window it fits, above the trigger (3,000 tokens) or below it (5,700; the history
    is about 5,900 tokens, the note saves about 300): the file's content stays whole exactly once. Either the first
    step's copy stays and the latest step's result is a note pointing at it (nothing moved, the cached prefix
    kept), or the copy was truncated as an old result and the note got the content back."""
    msgs = loop(step(0, think=2_000, results=(1_200,)), step(1, results=(8_800, 8_800)),
                step(2, think=400, results=(300,), rereads=((0, 1_200),)))
    policy = CompactionPolicy(max_input_tokens=20_000, trigger=("tokens", trigger_tokens), reserve=0,
                              token_counter="approximate")
    result = compact(msgs, policy)
    assert result.fits, result.stop_reason
    by_id = {m.id: m for m in result.messages}
    whole = [i for i in ("t0_0", "t2_r0") if by_id[i].content == file_text(0, 0, 1_200)]
    assert len(whole) == 1, whole
    if whole == ["t0_0"]:
        assert (by_id["t2_r0"].response_metadata.get(MARK_KEY) or {}).get("same_as") == "t0_0"
    else:
        assert (by_id["t0_0"].response_metadata.get(MARK_KEY) or {}).get("kind") == "truncated"
    check_all_structural(msgs, result.messages)


def test_without_a_later_thinking_step_the_first_step_stays_and_its_results_are_cut():
    """No later step starts with thinking: the first step stays first, its thinking as it was, and its results
    (tool results like any other) are truncated by the strategy, not left whole behind a pin (which only the last
    resort could cut, and only as far as the budget needs)."""
    msgs = loop(step(0, think=2_000, results=(8_800, 8_800)), step(1, results=(8_800,)), step(2, results=(600,)))
    result = compact(msgs, POLICY)
    out = result.messages
    assert result.fits, result.stop_reason
    first = loop_steps(out)[0]
    assert first[0].id == "a0" and first[0].content[0] == msgs[2].content[0]
    assert all(t.response_metadata.get(MARK_KEY, {}).get("kind") == "truncated" for t in first[1:])
    assert "last_resort" not in result.strategies_applied
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=out))
    check_all_structural(msgs, out)


def test_a_middle_thinking_step_can_lead_the_loop_and_later_steps_fold_behind_it():
    """Thinking on the first and the third step only, the first too large to keep: the first two steps are folded
    into the third, and, the history still over the budget, the fourth (a long text, no thinking) into the latest,
    the third leading the loop; no cut is needed."""
    msgs = loop(step(0, think=12_000, results=(500,)), step(1, results=(500,)), step(2, think=300, results=(500,)),
                step(3, said=6_000, results=(500,)), step(4, results=(300,)))
    policy = CompactionPolicy(max_input_tokens=1_200, reserve=0, token_counter="approximate")
    result = compact(msgs, policy)
    out = result.messages
    assert result.fits, result.stop_reason
    assert [s[0].id for s in loop_steps(out)] == ["a2", "a4"] and loop_steps(out)[0][0].content[0] == msgs[6].content[0]
    assert "last_resort" not in result.strategies_applied
    check("thinking_leads_active_turn", CheckContext(input=msgs, output=out))
    check_all_structural(msgs, out)


def test_a_hopeless_budget_still_cuts_what_is_not_pinned():
    """The system prompt alone is over the budget: nothing fits, and the result says so; the loop's results (not
    pinned) are cut all the same, the requests and the system prompt stay as they were."""
    msgs = loop(step(0, results=(6_000,)), step(1, results=(6_000,)), system="Follow the policy. " * 600)
    result = compact(msgs, POLICY)
    assert not result.fits and result.stop_reason == "pinned_over_budget"
    by_id = {m.id: m for m in result.messages}
    assert by_id["s"] is msgs[0] and by_id["h"] is msgs[1]
    assert all(m.response_metadata.get(MARK_KEY, {}).get("kind") in ("truncated", "shortened")
               for m in result.messages if isinstance(m, ToolMessage))


# ------------------------------------------------------------------------------------------------ the property
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CUTTABLE_CHARS = 400
"""A text longer than this (characters) can be cut to a shorter marker (the marker is about 90 characters)."""

FOLD_WORTH_TOKENS = 400
"""A step of more tokens than this (approximate: 4 characters a token) is larger than its note line can be (the
call's arguments, a preview and identifiers: at most about 850 characters), so folding it saves."""


@st.composite
def thinking_loops(draw):
    n = draw(st.integers(2, 6))
    steps = []
    drawn: list[tuple[int, ...]] = []  # each step's result sizes, for a later step's re-read
    for k in range(n):
        think = draw(st.sampled_from([0, 0, 300, 4_000, 20_000]))
        results = tuple(draw(st.lists(st.integers(1_500, 9_000), min_size=1, max_size=2)))
        earlier = [(m, sizes[0]) for m, sizes in enumerate(drawn)]
        rereads = tuple(draw(st.lists(st.sampled_from(earlier), max_size=1, unique=True))) if earlier else ()
        drawn.append(results)
        steps.append(step(k, think=think, results=results, rereads=rereads))
    system = draw(st.sampled_from(["You are a coding agent.", "Follow the policy. " * 300]))
    return loop(*steps, system=system)


def text_chars(m: BaseMessage) -> int:
    """Characters of the text a cut may shorten: string content, text blocks (never reasoning or tool-use
    blocks), without the progress note."""
    if isinstance(m.content, str):
        return len(m.content)
    return sum(len(b.get("text", "")) for b in m.content if isinstance(b, dict) and b.get("type") == "text"
               and not b.get("text", "").startswith(PROGRESS_PREFIX))


def tokens(m: BaseMessage) -> int:
    return POLICY.counter.count_message(m)


@FAST
@given(history=thinking_loops(), window=st.integers(1_000, 12_000), summarize=st.booleans())
def test_pinned_over_budget_means_no_valid_move_is_left(history, window, summarize):
    """On generated running loops (thinking blocks on some steps, large results, sometimes a system prompt over
    the budget): the first assistant message of the loop leads with an unmodified thinking block whenever the
    input's did, and whenever the result says "pinned_over_budget", no valid move is left: no step of the loop
    that a fold may take is larger than its note line, no result is whole, and no message that is not pinned (the
    system prompt, the requests) holds text a cut could shorten (the progress note: every line terse)."""
    strategies = [TruncateToolResults(), Summarize(model=None)] if summarize else [TruncateToolResults(),
                                                                                  DropOldExchanges()]
    policy = CompactionPolicy(max_input_tokens=window, token_counter="approximate", strategies=strategies)
    result = compact(history, policy)
    out = result.messages
    check_all_structural(history, out)
    check("thinking_leads_active_turn", CheckContext(input=history, output=out))
    originals = {m.id: m for m in history}
    steps = loop_steps(out)
    if leads_with_thinking(steps[0][0]):
        assert steps[0][0].content[0] == originals[steps[0][0].id].content[0]
    if result.stop_reason != "pinned_over_budget":
        return
    # fold: a step that is not the latest may go when the loop's first step stays first, or when a later one
    # that starts with thinking can lead (everything before it folded)
    big = [k for k, s in enumerate(steps[:-1]) if sum(map(tokens, s)) > FOLD_WORTH_TOKENS]
    thinking_led = leads_with_thinking(steps[0][0])
    for k in big:
        if k > 0 or not thinking_led:
            raise AssertionError(f"step {steps[k][0].id} ({sum(map(tokens, steps[k]))} tokens) could be folded")
        if any(leads_with_thinking(s[0]) for s in steps[1:]):
            raise AssertionError(f"the first step {steps[0][0].id} could be folded into a later thinking step")
    # truncate / cut: nothing that is not pinned is whole
    pinned = {"s", "h"}
    for m in out:
        if m.id in pinned:
            assert m is originals[m.id]
            continue
        mark = (m.response_metadata or {}).get(MARK_KEY, {}).get("kind")
        if isinstance(m, ToolMessage):
            assert mark in ("truncated", "shortened") or len(str(m.content)) <= CUTTABLE_CHARS, m.id
        elif text_chars(m) > CUTTABLE_CHARS:
            assert mark == "shortened", m.id
        if isinstance(m, AIMessage) and PROGRESS_PREFIX in m.text:
            lines = m.text.split(PROGRESS_PREFIX, 1)[1].strip().split("\n")
            assert all(" characters" not in line and "| facts" not in line for line in lines), lines
