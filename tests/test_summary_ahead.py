"""Summaries ahead of time (`Summarize(ahead_at=...)`, issue 21): a call above `ahead_at` and below the trigger
starts the summary in the background; the call that triggers swaps it in for exactly the messages it read.

- Nothing lost or duplicated, messages that arrived while it ran included: through `compact()` and through
  `create_agent` + `CompactionMiddleware` with a real checkpointer (InMemorySaver), two threads with one job each.
- A summary covers only what it read: an edit or a removal of a covered message, or a summary not ready yet,
  means an inline compaction (the background summary unused); a restart (a new policy) too.
- A cancelled background summary (its event loop closed) and a failed one cost nothing but the request; a failure
  starts the cooldown, during which no call is made, in the background or inline.
- The background call carries none of the user's run's callbacks (it stays out of the stream).
- Property: the kept messages after the swapped-in summary are a superset of what an inline compaction keeps,
  and the result passes `check_invariants`.

The summarizer is scripted (`GateModel`): "block" waits until the test opens the gate. No timed assertions.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from lc_compaction import CompactionPolicy, Summarize, acompact, compact, is_summary
from lc_compaction.integrations import CompactionMiddleware
from lc_compaction.markers import summary_text
from lc_compaction.structure import check_invariants
from tests.builders import plain_chat

AHEAD_TEXT = "ahead summary of the earlier talk"
INLINE_TEXT = "inline summary of the earlier talk"


class GateModel(BaseChatModel):
    """Each call takes the next script item (the last one repeats): a str (the reply), an Exception (raised), or
    ("block", text): wait until `gate` is set, then answer `text`. Records each call's input text and the
    callback handlers it was given."""

    script: list[Any] = Field(default_factory=list)
    gate: Any = Field(default_factory=threading.Event)
    inputs: list[str] = Field(default_factory=list)
    handlers: list[list[str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "gate-test-model"

    def _next(self, messages: list[BaseMessage], run_manager: Any) -> Any:
        self.inputs.append("\n".join(m.text for m in messages))
        self.handlers.append([type(h).__module__ + "." + type(h).__name__
                              for h in (run_manager.handlers if run_manager else [])])
        item = self.script[0] if len(self.script) == 1 else self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        item = self._next(messages, run_manager)
        if isinstance(item, tuple):
            assert self.gate.wait(30), "the test never opened the gate"
            item = item[1]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(item))])

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        item = self._next(messages, run_manager)
        if isinstance(item, tuple):
            while not self.gate.is_set():
                await asyncio.sleep(0.005)
            item = item[1]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(item))])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def policy(model: GateModel, *, ahead: int | None = 12, trigger: int = 20, **settings: Any) -> CompactionPolicy:
    """Messages as the unit, so that crossing and triggering are exact: ahead of time above `ahead` messages,
    compaction above `trigger`, keep the last 4 messages."""
    summarize = Summarize(model=model, ahead_at=None if ahead is None else ("messages", ahead), **settings)
    return CompactionPolicy(max_input_tokens=200_000, trigger=("messages", trigger), keep=("messages", 4),
                            strategies=[summarize], token_counter="approximate")


def wait_jobs(pol: CompactionPolicy) -> None:
    """Wait until every background job of the policy's summarizer has ended."""
    for s in pol.strategies or ():
        for job in list(s._ahead._jobs.values()):  # type: ignore[attr-defined]
            assert job.done.wait(30)


def reached(model: GateModel, calls: int = 1) -> None:
    """Wait until the background call has reached the model (it waits at the gate)."""
    for _ in range(30_000):
        if len(model.inputs) >= calls:
            return
        time.sleep(0.001)
    raise AssertionError("the background summary never called the model")


def grow(messages: list[BaseMessage], n: int, tag: str = "") -> list[BaseMessage]:
    """`messages` and `n` more exchanges (an answer, then a question), ids `{tag}m{k}` / `{tag}n{k}`."""
    out = list(messages)
    start = sum(1 for m in out if (m.id or "").startswith(f"{tag}m"))
    for k in range(start, start + n):
        out += [AIMessage(f"{tag}answer more {k}", id=f"{tag}m{k}"), HumanMessage(f"{tag}again {k}", id=f"{tag}n{k}")]
    return out


def assert_nothing_lost(before: list[BaseMessage], after: list[BaseMessage], summarizer_input: str) -> None:
    """Every message of `before` is in `after` unchanged (same id, same content), once, or was replaced by the
    one summary, whose call read it; `after` holds nothing else but that summary; and it is a valid history."""
    assert check_invariants(after) == []
    ids = [m.id for m in after]
    assert len(ids) == len(set(ids)), "a message is duplicated"
    summaries = [m for m in after if is_summary(m)]
    assert len(summaries) == 1
    kept = {m.id: m for m in after if not is_summary(m)}
    for m in before:
        if m.id in kept:
            assert kept[m.id].content == m.content
        else:
            assert m.text.strip() in summarizer_input, f"{m.id} was replaced by a summary that did not read it"
    assert set(kept) <= {m.id for m in before}


# ---------------------------------------------------------------------------------------------- compact()
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_swap_keeps_everything_after_including_what_arrived_meanwhile(mode: str) -> None:
    model = GateModel(script=[("block", AHEAD_TEXT), INLINE_TEXT])
    pol = policy(model)

    async def scenario() -> tuple[Any, Any, list[BaseMessage]]:
        first = plain_chat(7, 5)  # 15 messages: above 12, below 20
        run = compact if mode == "sync" else None
        r1 = run(first, pol) if run else await acompact(first, pol)
        assert not r1.triggered and r1.details["ahead"]["status"] == "started"
        arrived = grow(r1.messages, 2)  # 19 messages: arrive while the summary runs
        r_mid = run(arrived, pol) if run else await acompact(arrived, pol)
        assert not r_mid.triggered and "ahead" not in r_mid.details  # one job, not a second one
        model.gate.set()
        if run:
            wait_jobs(pol)
        else:
            for _ in range(2000):
                if all(j.done.is_set() for j in pol.strategies[0]._ahead._jobs.values()):  # type: ignore[index]
                    break
                await asyncio.sleep(0.005)
        final = grow(arrived, 1)  # 21 messages: triggers
        r2 = run(final, pol) if run else await acompact(final, pol)
        return r1, r2, final

    r1, r2, final = asyncio.run(scenario())
    assert r2.triggered and r2.details["ahead"]["status"] == "used"
    assert len(model.inputs) == 1, "the compacting call called the model again"
    summary = next(m for m in r2.messages if is_summary(m))
    assert AHEAD_TEXT in summary_text(summary)
    assert_nothing_lost(final, r2.messages, model.inputs[0])
    for m in final[15:]:  # what arrived while it ran and after: kept verbatim
        assert m.id in {k.id for k in r2.messages}

    # property: an inline compaction of the same history keeps no message the swap does not keep
    inline = compact(final, policy(GateModel(script=[INLINE_TEXT]), ahead=None))
    kept_inline = {m.id for m in inline.messages if not is_summary(m)}
    kept_swap = {m.id for m in r2.messages if not is_summary(m)}
    assert kept_inline <= kept_swap


def test_not_ready_compacts_inline_without_waiting() -> None:
    model = GateModel(script=[("block", AHEAD_TEXT), INLINE_TEXT])
    pol = policy(model)
    r1 = compact(plain_chat(7, 5), pol)
    reached(model)
    final = grow(r1.messages, 3)
    r2 = compact(final, pol)  # the gate is still closed: the background summary is not ready
    model.gate.set()
    assert r2.details["ahead"]["status"] == "running"
    summary = next(m for m in r2.messages if is_summary(m))
    assert INLINE_TEXT in summary_text(summary) and AHEAD_TEXT not in summary_text(summary)
    assert_nothing_lost(final, r2.messages, model.inputs[1])


@pytest.mark.parametrize("change", ["edit", "remove"])
def test_changed_covered_part_is_compacted_inline(change: str) -> None:
    model = GateModel(script=[AHEAD_TEXT, INLINE_TEXT])
    pol = policy(model)
    r1 = compact(plain_chat(7, 5), pol)
    wait_jobs(pol)
    final = grow(r1.messages, 4)  # 23 messages: over the trigger even with an exchange removed
    k = next(i for i, m in enumerate(final) if m.id == "a2")  # read by the background summary
    assert "answer 2" in model.inputs[0]
    if change == "edit":
        final[k] = AIMessage("answer 2, corrected: the order is B-2002", id="a2")
    else:
        del final[k - 1:k + 1]  # a whole exchange (h2, a2) removed
    r2 = compact(final, pol)
    assert r2.details["ahead"]["status"] == "changed"
    summary = next(m for m in r2.messages if is_summary(m))
    assert INLINE_TEXT in summary_text(summary) and AHEAD_TEXT not in summary_text(summary)
    assert len(model.inputs) == 2
    assert_nothing_lost(final, r2.messages, model.inputs[1])
    if change == "edit":
        assert "B-2002" in model.inputs[1]


def test_restart_between_crossing_and_compacting_is_inline() -> None:
    model = GateModel(script=[AHEAD_TEXT, INLINE_TEXT])
    before = policy(model)
    r1 = compact(plain_chat(7, 5), before)
    assert r1.details["ahead"]["status"] == "started"
    wait_jobs(before)  # its summary is ready, in the old process's memory
    final = grow(r1.messages, 3)
    restarted = policy(model)  # a new process: a new policy and strategy, no memory of the job
    r2 = compact(final, restarted)
    assert "ahead" not in r2.details
    summary = next(m for m in r2.messages if is_summary(m))
    assert INLINE_TEXT in summary_text(summary)
    assert_nothing_lost(final, r2.messages, model.inputs[-1])


def test_cancelled_when_its_event_loop_closes() -> None:
    model = GateModel(script=[("block", AHEAD_TEXT), INLINE_TEXT])
    pol = policy(model)
    async def cross() -> Any:
        result = await acompact(plain_chat(7, 5), pol)
        while not model.inputs:  # the task has reached the model call (it waits at the gate)
            await asyncio.sleep(0)
        return result

    r1 = asyncio.run(cross())  # asyncio.run cancels the task as the loop closes
    assert r1.details["ahead"]["status"] == "started"
    job = next(iter(pol.strategies[0]._ahead._jobs.values()))  # type: ignore[index]
    assert job.done.is_set() and job.cancelled
    model.gate.set()
    final = grow(r1.messages, 3)
    r2 = asyncio.run(acompact(final, pol))
    assert r2.details["ahead"]["status"] == "cancelled"
    summary = next(m for m in r2.messages if is_summary(m))
    assert INLINE_TEXT in summary_text(summary)
    assert_nothing_lost(final, r2.messages, model.inputs[-1])


def test_failure_starts_the_cooldown_and_nothing_is_called_during_it() -> None:
    clock = Clock()
    model = GateModel(script=[ConnectionError("provider down"), INLINE_TEXT])
    pol = policy(model, cooldown=60, clock=clock, max_retries=0)
    r1 = compact(plain_chat(7, 5), pol)
    wait_jobs(pol)
    assert len(model.inputs) == 1
    r_mid = compact(grow(r1.messages, 1), pol)  # the next call reports the failure, starts nothing (cooldown)
    assert r_mid.details["ahead"]["status"] == "failed" and "provider down" in r_mid.details["ahead"]["error"]
    final = grow(r1.messages, 3)
    r2 = compact(final, pol)  # triggered during the cooldown: inline, but not called (auto: skip while it fits)
    assert len(model.inputs) == 1
    assert r2.stop_reason == "strategy_failed" and r2.details["summarizer_failure"] == "cooldown"
    assert r2.messages == final
    clock.now += 61
    r3 = compact(final, pol)  # after the cooldown: inline, called
    assert len(model.inputs) == 2
    assert_nothing_lost(final, r3.messages, model.inputs[1])


def test_one_job_per_history_and_a_new_one_after_a_change() -> None:
    model = GateModel(script=[AHEAD_TEXT])
    pol = policy(model)
    a = compact(plain_chat(7, 5), pol)
    b_history = [m.model_copy(update={"id": "B" + (m.id or ""), "content": "B " + m.text}) for m in plain_chat(7, 5)]
    b = compact(b_history, pol)
    wait_jobs(pol)
    assert a.details["ahead"]["status"] == b.details["ahead"]["status"] == "started"
    # the two jobs run in their own threads: in either order, one read history A and the other history B
    assert len(model.inputs) == 2 and sorted("B question" in text for text in model.inputs) == [False, True]
    compact(grow(a.messages, 1), pol)
    compact(grow(b.messages, 1, "B"), pol)
    assert len(model.inputs) == 2  # no second job while each one's messages are in place


def test_invalid_ahead_at_is_refused() -> None:
    with pytest.raises(ValueError, match="ahead_at"):
        policy(GateModel(), ahead=25, trigger=20)
    with pytest.raises(ValueError, match="ahead_at"):
        Summarize(model=GateModel(), ahead_at="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ahead_at"):
        CompactionPolicy(max_input_tokens=10_000, strategies=[Summarize(model=GateModel(),
                                                                        ahead_at=("tokens", 9_500))])


# ---------------------------------------------------------------------------------------------- the agent door
class _Agent(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def test_agent_two_threads_nothing_lost_with_a_checkpointer() -> None:
    model = GateModel(script=[("block", AHEAD_TEXT)])
    pol = policy(model, ahead=8, trigger=14)
    replies = [AIMessage(f"agent reply {k}: " + "the details you asked for " * 20) for k in range(100)]
    agent = create_agent(_Agent(messages=iter(replies)), [], middleware=[CompactionMiddleware(pol)],
                         checkpointer=InMemorySaver())
    said: dict[str, list[str]] = {"A": [], "B": []}

    def turn(thread: str, k: int) -> list[BaseMessage]:
        text = f"{thread} says request number {k}: " + "please tell me more about it " * 10
        said[thread].append(text)
        out = agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}})
        return out["messages"]

    for k in range(5):  # 10 messages stored each: the 5th turn's model call sees 9 > 8: both threads start a job
        turn("A", k)
        turn("B", k)
    reached(model, 2)
    assert len(model.inputs) == 2
    assert all("A says" in model.inputs[i] or "B says" in model.inputs[i] for i in range(2))
    assert not any("A says" in s and "B says" in s for s in model.inputs)
    for t in "AB":  # the door's memory (and its event) reports the job the last call started
        last = agent.get_state({"configurable": {"thread_id": t}}).values["compaction"]["last"]
        assert last["details"]["ahead"]["status"] == "started" and not last["triggered"]
    for k in range(5, 7):  # arrive while the summaries run
        turn("A", k)
        turn("B", k)
    model.gate.set()
    wait_jobs(pol)
    before = {t: agent.get_state({"configurable": {"thread_id": t}}).values["messages"] for t in "AB"}
    chunks = []
    for t in "AB":  # the compacting turn (14 stored + 1 > 14), streamed: nothing of the summary in it
        text = f"{t} says request number 7: " + "please tell me more about it " * 10
        said[t].append(text)
        for chunk, _meta in agent.stream({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": t}},
                                         stream_mode="messages"):
            chunks.append(chunk)
    assert len(model.inputs) == 2, "the compacting turns called the summarizer again"
    assert not any(AHEAD_TEXT in (c.text or "") for c in chunks)
    assert all(not h or not any(x.startswith("langgraph") for x in h) for h in model.handlers)
    for t in "AB":
        after = agent.get_state({"configurable": {"thread_id": t}}).values["messages"]
        read = next(s for s in model.inputs if f"{t} says" in s)
        summary = [m for m in after if is_summary(m)]
        assert len(summary) == 1 and AHEAD_TEXT in summary_text(summary[0])
        prior = before[t] + [m for m in after if m.id not in {b.id for b in before[t]} and not is_summary(m)]
        assert_nothing_lost(prior, after, read)
        for text in said[t]:  # each request the user made is kept, or was read by the summary
            assert any(m.text == text for m in after) or text in read
        other = "B" if t == "A" else "A"
        assert not any(f"{other} says" in m.text for m in after)


def test_background_call_is_not_given_the_callers_callbacks() -> None:
    from langchain_core.callbacks import BaseCallbackHandler

    class Seen(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0

        def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

    seen = Seen()
    model = GateModel(script=[AHEAD_TEXT])
    pol = policy(model, ahead=6, trigger=30)
    agent = create_agent(_Agent(messages=iter([AIMessage(f"reply {k}") for k in range(20)])), [],
                         middleware=[CompactionMiddleware(pol)], checkpointer=InMemorySaver())
    for k in range(4):
        agent.invoke({"messages": [HumanMessage(f"request {k}")]},
                     {"configurable": {"thread_id": "t"}, "callbacks": [seen]})
    wait_jobs(pol)
    assert len(model.inputs) == 1
    assert seen.starts == 4  # the agent's four model calls; not the summary's
    assert model.handlers == [[]]


def test_async_agent_door_runs_it_as_a_task_and_swaps_it_in() -> None:
    model = GateModel(script=[("block", AHEAD_TEXT)])
    pol = policy(model, ahead=8, trigger=14)
    replies = [AIMessage(f"agent reply {k}: " + "the details you asked for " * 20) for k in range(100)]
    agent = create_agent(_Agent(messages=iter(replies)), [], middleware=[CompactionMiddleware(pol)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "async"}}

    async def scenario() -> tuple[list[BaseMessage], list[BaseMessage]]:
        for k in range(7):  # the 5th turn starts the task; two more turns arrive while it waits at the gate
            await agent.ainvoke({"messages": [HumanMessage(f"request {k}: " + "tell me more " * 10)]}, config)
        assert len(model.inputs) == 1
        job = next(iter(pol.strategies[0]._ahead._jobs.values()))  # type: ignore[index]
        assert isinstance(job.handle, asyncio.Task)
        model.gate.set()
        while not job.done.is_set():
            await asyncio.sleep(0.005)
        before = (await agent.aget_state(config)).values["messages"]
        await agent.ainvoke({"messages": [HumanMessage("request 7: " + "tell me more " * 10)]}, config)
        return before, (await agent.aget_state(config)).values["messages"]

    before, after = asyncio.run(scenario())
    assert len(model.inputs) == 1
    summary = [m for m in after if is_summary(m)]
    assert len(summary) == 1 and AHEAD_TEXT in summary_text(summary[0])
    prior = before + [m for m in after if m.id not in {b.id for b in before} and not is_summary(m)]
    assert_nothing_lost(prior, after, model.inputs[0])


@pytest.mark.parametrize("turns,more", [(4, 1), (4, 3), (5, 2), (6, 4)])
def test_property_swap_keeps_a_superset_of_what_inline_keeps(turns: int, more: int) -> None:
    """Over tool turns (calls and results, never split): crossing after `turns` turns, triggering `more` turns
    later; the swapped-in result is valid, loses nothing, and keeps every message an inline compaction keeps."""
    from tests.builders import history, tool_turn

    start = history(turns, 300)
    n_cross = len(start)
    model = GateModel(script=[AHEAD_TEXT])
    pol = policy(model, ahead=n_cross - 1, trigger=n_cross + 4 * more - 1)
    r1 = compact(start, pol)
    assert r1.details["ahead"]["status"] == "started"
    wait_jobs(pol)
    final = list(r1.messages)
    for k in range(turns, turns + more):
        final += tool_turn(k, 300)
    r2 = compact(final, pol)
    assert r2.triggered and r2.details["ahead"]["status"] == "used", r2.details.get("ahead")
    assert_nothing_lost(final, r2.messages, model.inputs[0])
    inline = compact(final, policy(GateModel(script=[INLINE_TEXT]), ahead=None, trigger=n_cross + 4 * more - 1))
    assert {m.id for m in inline.messages if not is_summary(m)} <= {m.id for m in r2.messages if not is_summary(m)}


def test_no_background_summary_during_the_cooldown_of_an_inline_failure() -> None:
    clock = Clock()
    model = GateModel(script=[ConnectionError("provider down"), AHEAD_TEXT])
    pol = policy(model, cooldown=60, clock=clock, max_retries=0)
    over = grow(plain_chat(7, 5), 3)  # 21 messages: triggered, the inline call fails
    failed = compact(over, pol)
    assert failed.details["summarizer_failure"] == "error" and len(model.inputs) == 1
    crossing = plain_chat(7, 5)  # another conversation's history above ahead_at, during the cooldown
    crossing = [m.model_copy(update={"id": "X" + (m.id or "")}) for m in crossing]
    r = compact(crossing, pol)
    assert r.details["ahead"]["status"] == "cooldown" and len(model.inputs) == 1
    clock.now += 61
    r = compact(crossing, pol)  # the cooldown is over: the job starts
    assert r.details["ahead"]["status"] == "started"
    wait_jobs(pol)
    assert len(model.inputs) == 2


def test_benchmark_script_measures_what_it_names() -> None:
    """benchmarks/ahead.py (with a summarizer of 0.05 s, one run): the ahead rows used the background summary,
    the inline rows did not, and every row compacted (the script asserts it)."""
    from benchmarks.ahead import measure, render

    figures = measure(1, seconds=0.05)
    statuses = {key: row["status"] for key, row in figures["rows"].items()}
    assert statuses == {("compact", False): "inline", ("compact", True): "used",
                        ("acompact", False): "inline", ("acompact", True): "used"}
    assert figures["crossing"] < figures["exchanges"] - 1
    assert render(figures, 1).count("\n| `") == 4


def test_agent_restart_between_crossing_and_compacting_is_inline_with_nothing_lost() -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "r"}}

    def agent_for(model: GateModel) -> Any:
        replies = [AIMessage(f"agent reply {k}: " + "the details you asked for " * 20) for k in range(100)]
        return create_agent(_Agent(messages=iter(replies)), [],
                            middleware=[CompactionMiddleware(policy(model, ahead=8, trigger=14))], checkpointer=saver)

    old = GateModel(script=[AHEAD_TEXT])
    first = agent_for(old)
    for k in range(6):  # crosses at the 5th turn: the old process's job
        first.invoke({"messages": [HumanMessage(f"request {k}: " + "tell me more " * 10)]}, config)
    assert len(old.inputs) == 1
    new = GateModel(script=[INLINE_TEXT])
    restarted = agent_for(new)  # a new process: same checkpointer, new middleware and policy
    before = restarted.get_state(config).values["messages"]
    restarted.invoke({"messages": [HumanMessage("request 6: " + "tell me more " * 10)]}, config)
    restarted.invoke({"messages": [HumanMessage("request 7: " + "tell me more " * 10)]}, config)
    after = restarted.get_state(config).values["messages"]
    summary = [m for m in after if is_summary(m)]
    assert len(summary) == 1 and INLINE_TEXT in summary_text(summary[0]) and len(new.inputs) == 1
    prior = before + [m for m in after if m.id not in {b.id for b in before} and not is_summary(m)]
    assert_nothing_lost(prior, after, new.inputs[0])
