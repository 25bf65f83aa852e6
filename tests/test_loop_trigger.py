"""A folded running loop folds again when its growth pays for the fold (issue 24, `progress.loop_trigger`).

A coding agent's one request and its hundred steps outgrow any window: once its loop was folded, it will fold
again, and the default trigger (the budget) would let it grow to the limit first, where every call pays the cached
price for all it sends. The loop's own trigger folds it again after the growth of least cost (the economic order
quantity of a fold's uncached prefix against the cached price of what the calls in between send), times
`LOOP_GROWTH_OF_LEAST`. Checked through `compact()` on real tiktoken counts: it fires only on a loop folded before,
only with the default trigger and a prompt cache, folds as deep as a fold the budget makes, and the agent loop
then compacts less often than the growth alone would make it fold and never twice in a row.
"""

from __future__ import annotations

import math

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.progress import LOOP_GROWTH_OF_LEAST, loop_trigger, note_lines

WINDOW = 32_000


def step(n: int, chars: int = 4_000) -> list[BaseMessage]:
    """One step of a coding loop: a bash call and its output of about `chars` characters."""
    call = {"name": "bash", "args": {"command": f"grep -n 'def f{n}' src/mod_{n}.py"}, "id": f"c{n}",
            "type": "tool_call"}
    out = f"src/mod_{n}.py: def f{n}(x)\n" + "the function reads its input and returns it unchanged\n" * (chars // 54)
    return [AIMessage(f"Looking at f{n}.", tool_calls=[call], id=f"a{n}"),
            ToolMessage(out, tool_call_id=f"c{n}", name="bash", id=f"t{n}")]


def start() -> list[BaseMessage]:
    return [SystemMessage("You fix bugs with bash.", id="s"), HumanMessage("Fix the bug in src/.", id="h")]


def policy(**kw) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o", **kw)


def folded(p: CompactionPolicy) -> list[BaseMessage]:
    """A loop grown until the budget made it fold once: what the agent sends after that fold."""
    history = start()
    for n in range(200):
        history = [*history, *step(n)]
        result = compact(history, p)
        history = list(result.messages)
        if any(note_lines(m) for m in history):
            return history
    raise AssertionError("the loop never folded")


def test_no_loop_trigger_without_a_note_a_running_loop_or_a_prompt_cache():
    p = policy()
    count = p.counter.count_message
    history = [*start(), *step(0), *step(1)]
    assert loop_trigger(history, count, 1_000, 0.1) is None  # a loop never folded: the budget alone
    noted = folded(p)
    grown = [*noted, *step(300)]
    assert loop_trigger(grown, count, 1_000, 0.1) is not None
    answered = [*grown, AIMessage("Done.", id="done")]
    assert loop_trigger(answered, count, 1_000, 0.1) is None  # the request has answered: no running loop
    assert loop_trigger(grown, count, 1_000, 1.0) is None  # no prompt cache: nothing to pay back
    assert loop_trigger(grown, count, 1_000, 0.0) is None


def test_the_threshold_grows_with_the_cost_of_a_fold_and_with_the_steps():
    p = policy()
    count = p.counter.count_message
    noted = folded(p)
    grown = [*noted, *step(500), *step(501)]
    total = p.counter.count_messages(grown)
    floor, threshold = loop_trigger(grown, count, total, 0.1)
    assert floor < total  # the floor is what the history was before its growth
    cheap = loop_trigger(grown, count, total, 0.5)  # a cheaper break (cached tokens at half price): sooner
    dear = loop_trigger(grown, count, total, 0.02)
    assert cheap[1] < threshold < dear[1]
    bigger = [*noted, *step(500, 12_000), *step(501, 12_000)]  # larger steps: more growth before the next fold
    t2 = p.counter.count_messages(bigger)
    floor2, threshold2 = loop_trigger(bigger, count, t2, 0.1)
    assert threshold2 - floor2 > threshold - floor
    assert math.isclose(LOOP_GROWTH_OF_LEAST, 1.5)


def test_a_folded_loop_folds_again_under_the_budget_once_its_growth_is_due():
    p = policy()
    history = folded(p)
    budget = p.budget_tokens()
    fired = None
    for n in range(1_000, 1_060):
        history = [*history, *step(n)]
        tokens = p.counter.count_messages(history)
        due = loop_trigger(history, p.counter.count_message, tokens, p.cached_price)
        result = compact(history, p)
        if result.triggered:
            fired = (tokens, due, result)
            break
        history = list(result.messages)
    assert fired is not None, "the loop never folded again"
    tokens, due, result = fired
    assert tokens <= budget  # under the budget: the loop's own trigger, not the budget, made it fold
    assert due is not None and tokens > due[1]
    hosts = [m for m in result.messages if note_lines(m)]
    assert len(hosts) == 1
    assert "f" + str(n - 1) in "\n".join(note_lines(hosts[0]))  # the step before the newest is in the note now
    assert p.counter.count_messages(result.messages) < tokens


def test_an_explicit_trigger_or_no_cache_keeps_the_budget_alone():
    for p in (policy(trigger=("fraction", 0.99)), policy(cached_price=1.0)):
        history = folded(p)
        fired = False
        for n in range(1_000, 1_060):
            history = [*history, *step(n)]
            result = compact(history, p)
            # only the policy's own trigger (the caller's, the early one without a cache) or the budget
            assert result.triggered == p.is_triggered(result.tokens_before, len(history))
            fired = fired or result.triggered
            history = list(result.messages)
        assert fired


def test_the_agent_loop_never_compacts_twice_in_a_row_and_every_call_fits():
    p = policy()
    history = start()
    previous = False
    early = 0
    for n in range(220):
        history = [*history, *step(n)]
        result = compact(history, p)
        assert result.fits
        assert not (previous and result.triggered), f"call {n} compacted right after the previous call"
        previous = result.triggered
        early += result.triggered and not p.is_triggered(result.tokens_before, len(history))
        history = list(result.messages)
    assert early >= 3  # the loop's own trigger folded it, under the budget, more than once
