"""`acompact` keeps the event loop free (issue 25): a ladder of `SyncStrategy`s (nothing to await) runs in a
worker thread, so other tasks go on while it compacts; a ladder with an async strategy (an LLM summarizer) runs
on the loop, where its model call is awaited; a call with nothing to compact never leaves the loop."""

from __future__ import annotations

import asyncio
import threading

from langchain_core.messages import AIMessage, HumanMessage

from lc_compaction import CompactionPolicy, acompact, compact
from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.strategies.drop import DropOldExchanges
from lc_compaction.strategies.summarize import Summarize
from tests.fakes import ScriptedModel


def chat(turns: int) -> list:
    out = []
    for k in range(turns):
        out += [HumanMessage(f"Question {k}: " + "words " * 60, id=f"h{k}"),
                AIMessage(f"Answer {k}: " + "words " * 60, id=f"a{k}")]
    return out


class Where(SyncStrategy):
    """Records the thread each `apply` runs in, then changes nothing."""

    name = "where"

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def apply(self, state: LadderState) -> None:
        self.threads.append(threading.current_thread())


class AsyncWhere(Where):
    """The same, through an `aapply` of its own (a ladder with a model summarizer beside it runs on the loop)."""

    async def aapply(self, state: LadderState) -> None:
        self.threads.append(threading.current_thread())


def test_a_sync_ladder_runs_off_the_event_loop_with_the_same_result():
    where = Where()
    policy = CompactionPolicy(max_input_tokens=2000, strategies=[where, DropOldExchanges()])
    history = chat(20)

    async def run():
        return await acompact(history, policy), threading.current_thread()

    result, loop_thread = asyncio.run(run())
    assert where.threads and all(t is not loop_thread for t in where.threads)
    expected = compact(history, policy)
    assert [m.id for m in result.messages] == [m.id for m in expected.messages]
    assert result.actions and result.stop_reason == expected.stop_reason


def test_a_ladder_with_an_async_strategy_runs_on_the_loop():
    where = AsyncWhere()
    summarizer = Summarize(model=ScriptedModel(script=["The user asked twenty questions."]))
    policy = CompactionPolicy(max_input_tokens=2000, strategies=[where, summarizer])

    async def run():
        return await acompact(chat(20), policy), threading.current_thread()

    result, loop_thread = asyncio.run(run())
    assert where.threads and all(t is loop_thread for t in where.threads)
    assert result.details["summarizer"] == "model"


def test_nothing_to_compact_stays_on_the_loop():
    where = Where()
    policy = CompactionPolicy(max_input_tokens=100_000, strategies=[where])
    result = asyncio.run(acompact(chat(2), policy))
    assert not where.threads and result.stop_reason == "under_trigger"
