"""CompactingChatMessageHistory (lc_compaction/integrations/chat_history.py) with real chains and real stores.

Real parts: `RunnableWithMessageHistory` over a prompt and LangChain's `GenericFakeChatModel` (it replays the
recorded assistant messages of /work/shared/traces), `InMemoryChatMessageHistory`, `SQLChatMessageHistory` on
SQLite files (sync engine and aiosqlite), `FileChatMessageHistory`, the exact tiktoken counter, and a second
Python process. What the model was sent is recorded by a callback handler; every model input is checked by the
independent oracle (tests/oracle) against the uncompacted history the chain would have sent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core._api import suppress_langchain_deprecation_warning
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
    messages_from_dict,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import lc_compaction
from lc_compaction import CompactionPolicy, InvalidHistoryError, TiktokenCounter, TruncateToolResults, compact
from lc_compaction import is_dropped_marker
from lc_compaction.integrations.chat_history import CompactingChatMessageHistory
from lc_compaction.markers import make_summary_message, summary_text
from tests.builders import tool_exchange
from tests.oracle.cases import FakeSummaryModel
from tests.oracle.checks import check_all_structural, default_is_summary, model_view, same_message
from tests.oracle.traces import load_traces

TAU = "tau-bench/gpt-4o-airline/task002-trial1"  # 62 messages, 30 model calls, 8.7k tokens after the system prompt
DOJO_PARALLEL = "agentdojo/gpt-4o-2024-05-13/travel/user_task_19"  # parallel tool calls, 3.2k tokens
DOJO_LONG = "agentdojo/claude-3-sonnet-20240229/workspace/user_task_27"  # tool results of 7.5k tokens, 21k tokens
WINDOWS = {TAU: 6_000, DOJO_PARALLEL: 3_000, DOJO_LONG: 12_000}
"""Context windows (tokens) small enough that each conversation is compacted several times."""

READER = Path(__file__).with_name("_history_reader.py")
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------- helpers
def memory_history() -> InMemoryChatMessageHistory:
    """A user's InMemoryChatMessageHistory (langchain's own deprecation notice silenced, as a user may do)."""
    with suppress_langchain_deprecation_warning():
        return InMemoryChatMessageHistory()


def community() -> Any:
    """langchain_community.chat_message_histories (its import prints a sunset notice: not ours, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community import chat_message_histories

    return chat_message_histories


@functools.lru_cache(maxsize=None)
def _traces() -> dict[str, list[BaseMessage]]:
    return dict(load_traces())


def conversation(trace_id: str) -> tuple[SystemMessage, list[tuple[list[BaseMessage], AIMessage]]]:
    """(system prompt, model calls) of a recorded conversation: each assistant message is one model call, whose
    new input is the messages since the previous assistant message (a user request, or tool results)."""
    messages = [m.model_copy() for m in _traces()[trace_id]]
    assert isinstance(messages[0], SystemMessage)
    calls, pending = [], []
    for m in messages[1:]:
        assert not isinstance(m, SystemMessage)
        if isinstance(m, AIMessage):
            calls.append((pending, m))
            pending = []
        else:
            pending.append(m)
    return messages[0], calls


def room_for_prompt_and_input(system: SystemMessage, calls: list, counter: TiktokenCounter) -> int:
    """extra_tokens for a chain: the prompt's system message plus the largest new input of any call (tokens)."""
    largest_input = max(sum(counter.count_message(m) for m in inputs) for inputs, _ in calls)
    return counter.count_message(system) + largest_input


class ModelInputs(BaseCallbackHandler):
    """Records the messages of every call of the chain's chat model (a GenericFakeChatModel; a summarizer's model
    called during the read of the history is another class and is not recorded)."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        if (serialized or {}).get("id", [""])[-1] == GenericFakeChatModel.__name__:
            self.calls.append(list(messages[0]))


def chain_over(history: BaseChatMessageHistory, system: SystemMessage, outputs: list[AIMessage], *,
               history_key: bool) -> RunnableWithMessageHistory:
    """prompt | fake model, with message history. history_key=False: the history and the new input share the
    "messages" key and RunnableWithMessageHistory slices the run's input by the history's length at exit."""
    model = GenericFakeChatModel(messages=iter(outputs))
    if history_key:
        prompt = ChatPromptTemplate.from_messages([system, MessagesPlaceholder("history"),
                                                   MessagesPlaceholder("messages")])
        keys = {"input_messages_key": "messages", "history_messages_key": "history"}
    else:
        prompt = ChatPromptTemplate.from_messages([system, MessagesPlaceholder("messages")])
        keys = {"input_messages_key": "messages"}
    with suppress_langchain_deprecation_warning():
        return RunnableWithMessageHistory(prompt | model, lambda session_id: history, **keys)


class TurnChecker:
    """Checks each model input of a replayed conversation, and what the stores hold at the end."""

    def __init__(self, system: SystemMessage, budget: int) -> None:
        self.system = system
        self.budget = budget
        self.counter = TiktokenCounter()  # its own cache: counts independent of the policy's
        self.sent: list[BaseMessage] = []  # every message added to the history so far, uncompacted
        self.compacted_calls = 0
        self.peak = 0

    def check(self, model_input: list[BaseMessage], inputs: list[BaseMessage], output: AIMessage) -> None:
        full = [self.system, *self.sent, *inputs]
        tokens = self.counter.count_messages(model_input)
        self.peak = max(self.peak, tokens)
        assert tokens <= self.budget, f"model input of {tokens} tokens over the budget of {self.budget}"
        check_all_structural(full, model_input)
        assert [model_view(m) for m in model_input[len(model_input) - len(inputs):]] == [model_view(m) for m in inputs]
        if len(model_input) < len(full) or any(not same_message(a, b) for a, b in zip(full, model_input)):
            self.compacted_calls += 1
        self.sent += [*inputs, output]

    def assert_kept_everything(self, stored: list[BaseMessage]) -> None:
        """Non-destructive: the inner history holds every message added, unchanged, in order."""
        assert [(m.id, model_view(m)) for m in stored] == [(m.id, model_view(m)) for m in self.sent]

    def assert_nothing_lost(self, stored: list[BaseMessage], archived: list[BaseMessage]) -> None:
        """Persist: the inner history shrank (fewer messages, or, when compaction only cut messages in place, less
        text: the running request's steps are never removed, issue 12), and each message added is unchanged in it
        or in the archive."""
        def chars(messages: list[BaseMessage]) -> int:
            return sum(len(str(m.content)) for m in messages)

        assert len(stored) < len(self.sent) or chars(stored) < chars(self.sent)
        pool: dict[str, list[BaseMessage]] = {}
        for m in stored + archived:
            pool.setdefault(m.id, []).append(m)
        for m in self.sent:
            assert any(same_message(m, x) for x in pool.get(m.id, [])), f"message {m.id!r} lost"


def run_sync(history: CompactingChatMessageHistory, trace_id: str, *, history_key: bool = False) -> TurnChecker:
    system, calls = conversation(trace_id)
    checker = TurnChecker(system, history.policy.budget_tokens())
    chain = chain_over(history, system, [out for _, out in calls], history_key=history_key)
    recorder = ModelInputs()
    for inputs, output in calls:
        reply = chain.invoke({"messages": inputs}, {"configurable": {"session_id": "s"}, "callbacks": [recorder]})
        assert reply.id == output.id
        checker.check(recorder.calls[-1], inputs, output)
    assert len(recorder.calls) == len(calls)
    return checker


async def run_async(history: CompactingChatMessageHistory, trace_id: str, *, history_key: bool) -> TurnChecker:
    system, calls = conversation(trace_id)
    checker = TurnChecker(system, history.policy.budget_tokens())
    chain = chain_over(history, system, [out for _, out in calls], history_key=history_key)
    recorder = ModelInputs()
    for inputs, output in calls:
        reply = await chain.ainvoke({"messages": inputs}, {"configurable": {"session_id": "s"},
                                                           "callbacks": [recorder]})
        assert reply.id == output.id
        checker.check(recorder.calls[-1], inputs, output)
    assert len(recorder.calls) == len(calls)
    return checker


def wrapped(inner: BaseChatMessageHistory, trace_id: str, *, persist: bool = False,
            archive: BaseChatMessageHistory | None = None, strategies: tuple | None = None,
            **policy: Any) -> CompactingChatMessageHistory:
    """The wrapper with the trace's window and room for its prompt and largest input."""
    system, calls = conversation(trace_id)
    pol = CompactionPolicy(max_input_tokens=WINDOWS[trace_id], strategies=strategies, **policy)
    return CompactingChatMessageHistory(inner, pol, persist=persist, archive=archive,
                                        extra_tokens=room_for_prompt_and_input(system, calls, TiktokenCounter()))


class RecordingSummary:
    """A test strategy that summarizes every removable step (and the earlier summary) into one summary message
    naming the ids it replaced; counts its sync and async calls."""

    name = "recording_summary"

    def __init__(self) -> None:
        self.sync_calls = 0
        self.async_calls = 0

    def _summarize(self, state: Any) -> None:
        indices = [i for _, steps in state.removable_exchanges() for step in steps for i in step.indices]
        prior = state.summary_index()
        earlier = ""
        if prior is not None and not state.is_protected(prior):
            indices.append(prior)
            earlier = summary_text(state.messages[prior]) + "\n"
        if not indices:
            return
        text = earlier + "\n".join(f"{state.messages[i].type} {state.messages[i].id}" for i in sorted(indices)
                                   if i != prior)
        state.put_summary(indices, make_summary_message(text, message_id=f"summary-{uuid.uuid4().hex[:8]}"),
                          strategy=self.name)

    def apply(self, state: Any) -> None:
        self.sync_calls += 1
        self._summarize(state)

    async def aapply(self, state: Any) -> None:
        self.async_calls += 1
        self._summarize(state)


def sql_history(tmp_path: Path, session_id: str, name: str = "chat.db") -> BaseChatMessageHistory:
    return community().SQLChatMessageHistory(session_id=session_id, connection=f"sqlite:///{tmp_path / name}")


# ------------------------------------------------------------------------- RunnableWithMessageHistory, sync
@pytest.mark.parametrize("store", ["memory", "sql", "file"])
@pytest.mark.parametrize("persist", [False, True], ids=["view", "persist"])
def test_chain_on_a_real_conversation_fits_and_keeps_every_message(tmp_path: Path, store: str,
                                                                   persist: bool) -> None:
    """30 model calls of a tau-bench conversation through RunnableWithMessageHistory: every model input fits the
    budget and passes the oracle; the inner history keeps everything, or (persist) shrinks with the rest archived."""
    if store == "memory":
        inner, archive = memory_history(), (memory_history() if persist else None)
    elif store == "sql":
        inner = sql_history(tmp_path, "session-1")
        archive = sql_history(tmp_path, "session-1:archive") if persist else None
    else:
        fch = community().FileChatMessageHistory
        inner, archive = fch(str(tmp_path / "chat.json")), (fch(str(tmp_path / "archive.json")) if persist else None)
    history = wrapped(inner, TAU, persist=persist, archive=archive)
    checker = run_sync(history, TAU)
    assert checker.compacted_calls >= 3
    if persist:
        checker.assert_nothing_lost(inner.messages, archive.messages)
        assert [m.id for m in history.messages] == [m.id for m in inner.messages]
    else:
        checker.assert_kept_everything(inner.messages)


@pytest.mark.parametrize(("trace_id", "min_compacted"), [(DOJO_PARALLEL, 1), (DOJO_LONG, 10)])
@pytest.mark.parametrize("persist", [False, True], ids=["view", "persist"])
def test_chain_on_tool_heavy_conversations(trace_id: str, min_compacted: int, persist: bool) -> None:
    """AgentDojo runs: parallel tool calls, and tool results of 7.5k tokens each (the history is then cut down to
    fit); the open tool call at the end of the history between two calls never reaches compaction broken."""
    inner = memory_history()
    history = wrapped(inner, trace_id, persist=persist)
    checker = run_sync(history, trace_id)
    assert checker.compacted_calls >= min_compacted
    if persist:
        checker.assert_nothing_lost(inner.messages, history.archive.messages)
    else:
        checker.assert_kept_everything(inner.messages)


# ------------------------------------------------------------------------ RunnableWithMessageHistory, async
@pytest.mark.parametrize("store", ["memory", "sql-aiosqlite"])
@pytest.mark.parametrize("persist", [False, True], ids=["view", "persist"])
def test_ainvoke_uses_the_async_path_and_the_summary_is_part_of_the_view(tmp_path: Path, store: str,
                                                                          persist: bool) -> None:
    """ainvoke reads through aget_messages -> acompact: the summarizer runs through aapply only, its summary is
    in the model input (one summary at most), and with persist it is stored in the inner history."""
    async def scenario() -> None:
        if store == "memory":
            inner, archive = memory_history(), (memory_history() if persist else None)
        else:
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}")
            sql = community().SQLChatMessageHistory
            inner = sql(session_id="s", connection=engine)
            archive = sql(session_id="s:archive", connection=engine) if persist else None
        summary = RecordingSummary()
        history = wrapped(inner, TAU, persist=persist, archive=archive,
                          strategies=(TruncateToolResults(), summary))
        checker = await run_async(history, TAU, history_key=(store == "memory"))
        assert checker.compacted_calls >= 3
        assert summary.async_calls >= 1 and summary.sync_calls == 0
        view = await history.aget_messages()
        assert sum(default_is_summary(m) for m in view) == 1
        stored = await inner.aget_messages()
        if persist:
            checker.assert_nothing_lost(stored, await archive.aget_messages())
            assert sum(default_is_summary(m) for m in stored) == 1
        else:
            checker.assert_kept_everything(stored)
        if store != "memory":
            await engine.dispose()

    asyncio.run(scenario())


def test_summarize_ledger_in_the_view_and_persisted() -> None:
    """The summarizer strategy with model=None (the deterministic ledger), through invoke, persisted."""
    from lc_compaction.strategies.summarize import Summarize

    inner = memory_history()
    history = wrapped(inner, TAU, persist=True, strategies=(TruncateToolResults(), Summarize()))
    checker = run_sync(history, TAU)
    assert checker.compacted_calls >= 3
    assert sum(default_is_summary(m) for m in inner.messages) == 1
    checker.assert_nothing_lost(inner.messages, history.archive.messages)


def test_summarize_with_a_chat_model_is_called_per_compaction_not_per_turn() -> None:
    """The summarizer with a chat model, through ainvoke: its summary reaches the model input, and the model is
    called once per compaction. A wrapper that recompacted the whole stored history on each read would call
    it on nearly every turn once the history passed the trigger (here 18 of 30 model inputs are compacted)."""
    from lc_compaction.strategies.summarize import Summarize

    summarizer = FakeSummaryModel(behavior="fixed")
    inner = memory_history()
    history = wrapped(inner, TAU, persist=True, strategies=(TruncateToolResults(), Summarize(model=summarizer)))
    checker = asyncio.run(run_async(history, TAU, history_key=False))
    assert checker.compacted_calls >= 10
    assert 1 <= summarizer.calls <= checker.compacted_calls // 4
    (summary,) = [m for m in inner.messages if default_is_summary(m)]
    assert summarizer.summary_text in summary.text
    checker.assert_nothing_lost(inner.messages, history.archive.messages)


# --------------------------------------------------------------- every input form RunnableWithMessageHistory passes
FORMS = [  # one chain input per turn, in each form langchain_core.messages.convert_to_messages accepts
    [("human", "Where is order A-1001?")],
    [{"role": "user", "content": "And A-1002?"}],
    ["Thanks. And A-1003?"],
    [HumanMessage("And A-1004?", id="h4")],
    [("system", "Answer in one line."), ["user", "And A-1005?"]],
]


def _chain_turns(history: BaseChatMessageHistory, *, history_key: bool, use_async: bool,
                 caplog: pytest.LogCaptureFixture) -> list[list[tuple]]:
    """Run FORMS through prompt | fake model with `history`; the model_view of every model input."""
    replies = [AIMessage(f"Reply {i}.", id=f"r{i}") for i in range(len(FORMS))]
    chain = chain_over(history, SystemMessage("You are a support agent."), replies, history_key=history_key)
    recorder = ModelInputs()
    config = {"configurable": {"session_id": "s"}, "callbacks": [recorder]}

    async def run_all() -> None:
        for turn in FORMS:
            await chain.ainvoke({"messages": list(turn)}, config)

    with caplog.at_level("WARNING"):
        if use_async:
            asyncio.run(run_all())
        else:
            for turn in FORMS:
                chain.invoke({"messages": list(turn)}, config)
    assert not [r for r in caplog.records if "callback" in r.getMessage()], "a history callback failed"
    assert len(recorder.calls) == len(FORMS)
    return [[model_view(m) for m in call] for call in recorder.calls]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("history_key", [False, True], ids=["shared-key", "history-key"])
def test_chain_input_in_every_message_form_is_stored_and_sent_again(use_async: bool, history_key: bool,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """`{"messages": [("human", "...")]}` and the other forms convert_to_messages accepts (dicts, strings,
    message objects, 2-item lists): the wrapper stores each turn's input and reply as messages, and every model
    call receives the history, exactly as with LangChain's own InMemoryChatMessageHistory."""
    inner = memory_history()
    ours = _chain_turns(CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=16_000)),
                        history_key=history_key, use_async=use_async, caplog=caplog)
    theirs = _chain_turns(memory_history(), history_key=history_key, use_async=use_async, caplog=caplog)
    assert ours == theirs
    stored = inner.messages
    assert all(isinstance(m, BaseMessage) for m in stored)
    expected = [m for i, turn in enumerate(FORMS) for m in [*convert_to_messages(turn), AIMessage(f"Reply {i}.")]]
    assert [model_view(m) for m in stored] == [model_view(m) for m in expected]
    assert [m.id for m in stored if m.id in ("h4", "r0", "r4")] == ["r0", "h4", "r4"]
    # the last model input holds every earlier turn: the history was sent, not only the new input
    assert ours[-1][1:] == [model_view(m) for m in expected[:-1]]


def test_a_recorded_conversation_given_as_openai_dicts_is_compacted_and_kept_whole() -> None:
    """A tau-bench conversation whose every chain input is OpenAI-format dicts (tool calls and results
    included), at a window that compacts: each model input fits and passes the oracle, and the inner history
    holds every message added, as messages, in order."""
    history = wrapped(memory_history(), TAU)
    system, calls = conversation(TAU)
    checker = TurnChecker(system, history.policy.budget_tokens())
    chain = chain_over(history, system, [out for _, out in calls], history_key=False)
    recorder = ModelInputs()
    for inputs, output in calls:
        dicts = [{**d, "id": m.id} for d, m in zip(convert_to_openai_messages(inputs), inputs)]  # ids: the oracle's
        assert all(isinstance(d, dict) for d in dicts)
        chain.invoke({"messages": dicts}, {"configurable": {"session_id": "s"}, "callbacks": [recorder]})
        checker.check(recorder.calls[-1], inputs, output)
    assert checker.compacted_calls >= 3
    assert all(isinstance(m, BaseMessage) for m in history.inner.messages)
    checker.assert_kept_everything(history.inner.messages)


# ----------------------------------------------------------------------------- the view: stable and cheap
def test_reads_are_stable_and_cost_only_the_new_messages() -> None:
    """Reading twice without an add returns equal lists of the same messages and counts nothing; a read after
    k new messages tokenizes and looks up exactly those k (the earlier view and its count are carried forward, not
    recomputed)."""
    counter = TiktokenCounter()
    policy = CompactionPolicy(max_input_tokens=4_000, token_counter=counter)
    history = CompactingChatMessageHistory(memory_history(), policy)
    _, calls = conversation(TAU)
    for inputs, output in calls[:20]:
        history.add_messages([*inputs, output])
    if calls[19][1].tool_calls:  # close the open tool call with its recorded results, so a user turn may follow
        history.add_messages([m for m in calls[20][0] if isinstance(m, ToolMessage)])
    first = history.messages
    assert history.last_result is not None and history.last_result.compacted
    before = counter.cache_info()
    second = history.messages
    assert second == first and second is not first and all(a is b for a, b in zip(first, second))
    after = counter.cache_info()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])

    new = [HumanMessage("And the baggage allowance?", id="k1"), AIMessage("Two checked bags.", id="k2")]
    history.add_messages(new)
    before = counter.cache_info()
    third = history.messages
    after = counter.cache_info()
    assert after["misses"] - before["misses"] == len(new)
    # and only they are looked up: each compact() call gets the previous one's count tally
    assert (after["hits"] + after["misses"]) - (before["hits"] + before["misses"]) == len(new)
    assert third == first + new


def test_strategies_run_once_per_compaction_not_on_every_read() -> None:
    """After a compaction the view is under the trigger: adding a short exchange and reading again does not run
    the strategies (a read that recompacted the full inner history would, on every turn)."""
    summary = RecordingSummary()
    # truncation first: the running request's tool loop (most of these 20 calls) is never summarized, only its
    # results truncated (issue 12), so without it the view cannot get under the trigger. The trigger is explicit
    # (80% of the window, under the budget): with the default trigger (the budget) the view grows back to within a
    # few tokens of the budget after 20 calls, and three more exchanges legitimately compact again; the gap the
    # trigger leaves is what this test needs. At 5,000 tokens (not 4,000) the notes, which carry each result's
    # identifiers, fit under it
    policy = CompactionPolicy(max_input_tokens=5_000, trigger=("fraction", 0.8),
                              strategies=(TruncateToolResults(), summary))
    history = CompactingChatMessageHistory(memory_history(), policy)
    _, calls = conversation(TAU)
    for inputs, output in calls[:20]:
        history.add_messages([*inputs, output])
    _ = history.messages
    calls_after_compaction = summary.sync_calls
    assert calls_after_compaction >= 1
    for i in range(3):
        history.add_messages([HumanMessage(f"short question {i}", id=f"q{i}"), AIMessage("short answer", id=f"r{i}")])
        _ = history.messages
    assert summary.sync_calls == calls_after_compaction


# --------------------------------------------------------------------------------- a second process
@pytest.mark.parametrize("persist", [False, True], ids=["view", "persist"])
def test_a_second_process_reading_the_sqlite_file_sees_the_same_view(tmp_path: Path, persist: bool) -> None:
    """Reads at irregular points in this process, then one read in a fresh process on the same SQLite file:
    the same messages, ids (also for a message stored without one) and content."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    inner = community().SQLChatMessageHistory(session_id="shared", connection=url)
    system, calls = conversation(TAU)
    extra = room_for_prompt_and_input(system, calls, TiktokenCounter())
    policy_kwargs = {"max_input_tokens": 5_000}
    history = CompactingChatMessageHistory(inner, CompactionPolicy(**policy_kwargs), persist=persist,
                                           extra_tokens=extra)
    added = 0
    for n, (inputs, output) in enumerate(calls[:24]):
        history.add_messages([*inputs, output])
        added += len(inputs) + 1
        if n % 5 == 2:
            _ = history.messages
    (open_call,) = calls[23][1].tool_calls  # the history ends with an open tool call: answer it, with no id
    history.add_message(ToolMessage("A result stored without an id.", tool_call_id=open_call["id"]))
    view = history.messages
    assert len(view) < added + 1  # compacted
    out = subprocess.run([sys.executable, str(READER), url, "shared", json.dumps(policy_kwargs), str(extra),
                          "1" if persist else "0"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr
    other = messages_from_dict(json.loads(out.stdout))
    assert [(m.id, model_view(m)) for m in other] == [(m.id, model_view(m)) for m in view]
    assert view[-1].id  # the id-less message got a derived id, the same in both processes


# --------------------------------------------------------------------------------------- concurrency
@pytest.mark.parametrize("persist", [False, True], ids=["view", "persist"])
def test_two_threads_adding_and_reading_lose_no_message(tmp_path: Path, persist: bool) -> None:
    """Two threads each add 30 tool-using exchanges to a FileChatMessageHistory (whose add is a read-modify-write
    of the whole file) and read after each add; compaction, and with persist the write-back that clears and
    rewrites the file, runs often. No message is lost or duplicated."""
    files = community().FileChatMessageHistory
    inner = files(str(tmp_path / "chat.json"))
    archive = files(str(tmp_path / "archive.json")) if persist else None
    policy = CompactionPolicy(max_input_tokens=1_500)
    history = CompactingChatMessageHistory(inner, policy, persist=persist, archive=archive)
    start = threading.Barrier(2)
    added: dict[str, list[BaseMessage]] = {"A": [], "B": []}
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            start.wait()
            for i in range(30):
                block = tool_exchange(i, f"{name} request {i}: " + "details " * 15,
                                      f"{name} result {i}: " + "row " * 60, f"{name} answer {i}", tool="lookup",
                                      args={"i": i}, call_id=f"{name}-call-{i}", prefix=f"{name}-", named=False)
                history.add_messages(block)
                added[name] += block
                view = history.messages
                assert policy.counter.count_messages(view) <= policy.budget_tokens()
                check_all_structural(view, view)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in added]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    everything = added["A"] + added["B"]
    stored = inner.messages
    if persist:
        assert history.last_result is not None and len(stored) < len(everything)
        pool: dict[str, list[BaseMessage]] = {}
        for m in stored + archive.messages:
            pool.setdefault(m.id, []).append(m)
        assert all(any(same_message(m, x) for x in pool.get(m.id, [])) for m in everything)
    else:
        assert sorted(m.id for m in stored) == sorted(m.id for m in everything)
        for name in added:  # each thread's messages in its order, each exchange contiguous
            assert [m.id for m in stored if m.id.startswith(name)] == [m.id for m in added[name]]
        for i in range(0, len(stored), 4):
            assert len({m.id.split("-")[0] for m in stored[i:i + 4]}) == 1


# ------------------------------------------------------------------------------- edges and errors
def test_an_open_tool_call_at_the_end_stays_out_of_compaction() -> None:
    """A history that ends with parallel tool calls answered in part (the chain returned the calls; the
    results come with the next input): compaction runs on the rest, the open block is appended unchanged, and
    it is compacted with the rest once answered. Given straight to compact() it is an invalid history."""
    policy = CompactionPolicy(max_input_tokens=1_200)
    inner = memory_history()
    history = CompactingChatMessageHistory(inner, policy)
    for i in range(12):
        history.add_messages(tool_exchange(i, f"request {i} " + "x " * 40, "y " * 80, f"done {i}", tool="f",
                                           named=False))
    open_call = AIMessage("", id="open", tool_calls=[{"name": "f", "args": {"n": 1}, "id": "p1"},
                                                     {"name": "g", "args": {"n": 2}, "id": "p2"}])
    first_result = ToolMessage("first", tool_call_id="p1", id="p1-result")
    history.add_messages([HumanMessage("last request", id="last"), open_call, first_result])
    with pytest.raises(InvalidHistoryError):
        compact(inner.messages, policy)
    view = history.messages
    assert len(view) < len(inner.messages)
    assert view[-2:] == [open_call, first_result]
    assert policy.counter.count_messages(view) <= policy.budget_tokens()
    history.add_message(ToolMessage("second", tool_call_id="p2", id="p2-result"))
    view = history.messages
    assert [m.id for m in view[-3:]] == ["open", "p1-result", "p2-result"]
    check_all_structural(inner.messages, view)


def test_an_invalid_history_names_the_message_in_the_inner_history() -> None:
    """An orphan ToolMessage stored after earlier compactions: the error gives its index in the inner history
    (not in the shorter compacted view); with repair=True the view is repaired and the inner history untouched."""
    def fill(history: CompactingChatMessageHistory, start: int, n: int) -> None:
        for i in range(start, start + n):
            history.add_messages([HumanMessage(f"request {i} " + "x " * 60, id=f"h{i}"),
                                  AIMessage(f"answer {i} " + "y " * 60, id=f"a{i}")])
            _ = history.messages

    inner = memory_history()
    history = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_000, repair=False))
    fill(history, 0, 12)
    orphan_at = len(inner.messages)
    history.add_message(ToolMessage("a result nobody asked for", tool_call_id="nobody", id="orphan"))
    with pytest.raises(InvalidHistoryError) as err:
        fill(history, 100, 12)
    (violation,) = [v for v in err.value.violations if v.tool_call_id == "nobody"]
    assert violation.index == orphan_at
    assert f"message {orphan_at} of the inner InMemoryChatMessageHistory" in str(err.value)

    repaired = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_000, repair=True))
    view = repaired.messages
    assert "orphan" not in [m.id for m in view]
    assert "orphan" in [m.id for m in inner.messages]
    # the default (repair=None) repairs too
    default = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_000))
    assert [m.id for m in default.messages] == [m.id for m in view]


class FlakyHistory(InMemoryChatMessageHistory):
    """An in-memory history whose next add_messages can be made to fail (a full disk, a dropped connection)."""

    fail_next_add: bool = False

    def add_messages(self, messages: Any) -> None:
        if self.fail_next_add:
            self.fail_next_add = False
            raise OSError("simulated write failure")
        super().add_messages(messages)


@pytest.mark.parametrize("read", ["sync", "async"])
def test_a_failed_write_back_restores_the_inner_history(read: str) -> None:
    """persist: when rewriting the inner history fails after it was cleared, its messages are put back and the
    error propagates; the next read persists normally. Nothing is lost either way (`messages` and
    `aget_messages` alike)."""
    inner = FlakyHistory()
    history = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_000), persist=True)
    everything = []
    for i in range(12):
        block = [HumanMessage(f"request {i} " + "x " * 60, id=f"h{i}"), AIMessage(f"answer {i} " + "y " * 60,
                                                                                  id=f"a{i}")]
        inner.add_messages(block)
        everything += block
    def messages() -> list:
        return history.messages if read == "sync" else asyncio.run(history.aget_messages())

    inner.fail_next_add = True
    with pytest.raises(OSError, match="simulated write failure"):
        messages()
    assert [m.id for m in inner.messages] == [m.id for m in everything]
    view = messages()
    assert [m.id for m in inner.messages] == [m.id for m in view] and len(view) < len(everything)
    kept = {m.id for m in inner.messages if not is_dropped_marker(m)} | {m.id for m in history.archive.messages}
    assert kept == {m.id for m in everything}
    assert sum(map(is_dropped_marker, inner.messages)) == 1  # where the old exchanges were dropped


def test_clear_empties_the_inner_history_and_the_view_but_keeps_the_archive() -> None:
    inner = memory_history()
    history = CompactingChatMessageHistory(inner, CompactionPolicy(max_input_tokens=1_000), persist=True)
    for i in range(12):
        history.add_messages([HumanMessage(f"request {i} " + "x " * 60), AIMessage(f"answer {i} " + "y " * 60)])
    _ = history.messages
    archived = list(history.archive.messages)
    assert archived
    history.clear()
    assert inner.messages == [] and history.messages == [] and history.archive.messages == archived
    asyncio.run(history.aadd_messages([HumanMessage("again", id="again")]))
    assert [m.id for m in asyncio.run(history.aget_messages())] == ["again"]
    asyncio.run(history.aclear())
    assert inner.messages == [] and asyncio.run(history.aget_messages()) == []


def test_constructor_and_add_errors_name_the_problem() -> None:
    inner = memory_history()
    policy = CompactionPolicy(max_input_tokens=1_000)
    with pytest.raises(TypeError, match="inner"):
        CompactingChatMessageHistory([], policy)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy"):
        CompactingChatMessageHistory(inner, {"max_input_tokens": 1_000})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra_tokens"):
        CompactingChatMessageHistory(inner, policy, extra_tokens=-1)
    with pytest.raises(ValueError, match="persist"):
        CompactingChatMessageHistory(inner, policy, archive=memory_history())
    with pytest.raises(ValueError, match="archive"):
        CompactingChatMessageHistory(inner, policy, persist=True, archive=inner)
    history = CompactingChatMessageHistory(inner, policy)
    for bad, words in [({"role": "robot", "content": "x"}, "dict: Unexpected message type: 'robot'"),
                       (("human",), "tuple: Message as a sequence must be"), (3, "int: Unsupported message type")]:
        with pytest.raises(TypeError, match=r"messages\[2\]: cannot be converted") as info:
            history.add_messages([HumanMessage("ok"), ("ai", "fine"), bad])  # type: ignore[list-item]
        assert words in str(info.value)
        with pytest.raises(TypeError, match=r"messages\[2\]"):
            asyncio.run(history.aadd_messages([HumanMessage("ok"), ("ai", "fine"), bad]))  # type: ignore[list-item]
    for whole in ("hello", HumanMessage("hello"), {"role": "user", "content": "hello"}):
        with pytest.raises(TypeError, match="expected a list of messages"):
            history.add_messages(whole)  # type: ignore[arg-type]
    assert inner.messages == []  # nothing of a rejected batch was added


# ------------------------------------------------------------------------- deprecation and layering
def _scenario(history: BaseChatMessageHistory) -> None:
    """10 model calls of a chain over `history`, with the chain built the way a user builds it."""
    system, calls = conversation(TAU)
    chain = RunnableWithMessageHistory(
        ChatPromptTemplate.from_messages([system, MessagesPlaceholder("messages")])
        | GenericFakeChatModel(messages=iter([out for _, out in calls])),
        lambda session_id: history, input_messages_key="messages")
    for inputs, _ in calls[:10]:
        chain.invoke({"messages": inputs}, {"configurable": {"session_id": "s"}})
    asyncio.run(history.aget_messages())


def scenario_plain() -> None:
    _scenario(memory_history())


def scenario_compacted() -> None:
    _scenario(wrapped(memory_history(), TAU, persist=True))  # persist: the default archive is built too


def test_the_wrapper_adds_no_warning_to_those_langchain_emits() -> None:
    """In a fresh process (langchain warns once per class and process), the same chain wrapped and plain: the
    wrapped run emits no warning from lc_compaction's files, none that the plain run does not, and no more."""
    code = (
        "import json, warnings\n"
        "import tests.test_chat_history as t\n"
        "out = {}\n"
        "for name in ('compacted', 'plain'):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        getattr(t, 'scenario_' + name)()\n"
        "    out[name] = [[w.category.__name__, str(w.message), w.filename] for w in caught]\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    caught = json.loads(run.stdout)
    package = str(Path(lc_compaction.__file__).resolve().parent)
    ours = [w for w in caught["compacted"] if str(Path(w[2]).resolve()).startswith(package)]
    assert not ours, ours
    assert {(c, m) for c, m, _ in caught["compacted"]} <= {(c, m) for c, m, _ in caught["plain"]}
    assert len(caught["compacted"]) <= len(caught["plain"])


def test_the_core_never_imports_the_chat_history_module() -> None:
    code = (
        "import importlib, pkgutil, sys, lc_compaction\n"
        "for m in pkgutil.walk_packages(lc_compaction.__path__, 'lc_compaction.'):\n"
        "    if not m.name.startswith('lc_compaction.integrations'):\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.startswith('lc_compaction.integrations')))\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "chat_history" not in out.stdout


@pytest.mark.parametrize("persist", [False, True])
def test_an_earlier_message_redacted_in_the_inner_history_is_seen_and_never_written_back(tmp_path: Path,
                                                                                         persist: bool) -> None:
    """Another process rewrites the stored history with one earlier message redacted (same length, same ids):
    the wrapper serves the redacted text, and with persist=True its later write-backs keep it redacted."""
    inner = sql_history(tmp_path, "redact")
    policy = CompactionPolicy(max_input_tokens=3_000, token_counter="approximate")
    history = CompactingChatMessageHistory(inner, policy, persist=persist)
    history.add_messages([HumanMessage("my card is 4111 1111 1111 1111", id="h0"), AIMessage("noted", id="a0"),
                          HumanMessage("thanks", id="h1"), AIMessage("welcome", id="a1")])
    assert "4111" in history.messages[0].content
    stored = list(inner.messages)
    stored[0] = HumanMessage("my card is [REDACTED]", id="h0")
    inner.clear()
    inner.add_messages(stored)
    assert history.messages[0].content == "my card is [REDACTED]"
    for n in range(2, 12):  # enough to compact (and, with persist, to write the view back) several times
        history.add_messages([HumanMessage(f"q{n} " + "blah " * 300, id=f"h{n}"),
                              AIMessage(f"a{n} " + "blah " * 300, id=f"a{n}")])
        view = history.messages
    assert history.last_result is not None and history.last_result.compacted
    assert not any("4111" in str(m.content) for m in view)
    assert not any("4111" in str(m.content) for m in inner.messages)
    assert [m.content for m in view] == [m.content for m in CompactingChatMessageHistory(inner, policy).messages]


def test_a_redaction_made_between_the_read_and_the_write_back_is_not_overwritten() -> None:
    """persist=True: another writer redacts an earlier message (same length, same ids) after the wrapper read
    the inner history and before it writes the compacted view back: the write-back is skipped, the redaction
    stays."""

    class RedactedAfterOneRead(BaseChatMessageHistory):
        """A stored history that another writer redacts right after the next read (when armed)."""

        def __init__(self) -> None:
            self.stored: list[BaseMessage] = []
            self.armed = False

        @property
        def messages(self) -> list[BaseMessage]:  # type: ignore[override]
            out = list(self.stored)
            if self.armed:
                self.armed = False
                self.stored[0] = HumanMessage("my card is [REDACTED]", id="h0")
            return out

        def add_messages(self, messages: Any) -> None:
            self.stored.extend(messages)

        def clear(self) -> None:
            self.stored = []

    inner = RedactedAfterOneRead()
    policy = CompactionPolicy(max_input_tokens=3_000, token_counter="approximate")
    history = CompactingChatMessageHistory(inner, policy, persist=True)
    inner.add_messages([HumanMessage("my card is 4111 1111 1111 1111", id="h0"), AIMessage("noted", id="a0")])
    for n in range(1, 12):
        inner.add_messages([HumanMessage(f"q{n} " + "blah " * 300, id=f"h{n}"),
                            AIMessage(f"a{n} " + "blah " * 300, id=f"a{n}")])
    length = len(inner.stored)
    inner.armed = True
    _ = history.messages  # reads, compacts, then finds the inner history changed: no write-back
    assert history.last_result is not None and history.last_result.compacted
    assert len(inner.stored) == length
    assert inner.stored[0].content == "my card is [REDACTED]"
