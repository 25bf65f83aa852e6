"""Repeated tool results (lc_compaction/dedup.py): a result identical to an earlier one becomes a one-line note.

What is checked: a repeat is noted when it arrives, even under the trigger, and nothing before it changes (the
provider's cached prefix); what is never replaced (short results, pinned ones, repeats of a truncated result);
a repeat of a result cut in place by the last resort is recognised by the cut mark's sha256; when the earlier
copy leaves (dropped, folded into the progress note, summarized, truncated) the first note gets the content back
and later notes point at it, so no note ever points at a message that is not in the history (a property over
generated histories with repeated results, one compaction and an agent loop); notes are byte-identical from one
compaction to the next; view mode sends what rewrite mode sends (a real compiled graph, and a real agent over a
shared conversation whose tool results repeat).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages

from lc_compaction import (
    ApproximateCounter,
    CompactionPolicy,
    DropOldExchanges,
    Summarize,
    TiktokenCounter,
    TruncateToolResults,
    compact,
    pin_message,
)
from lc_compaction.dedup import DEDUP_MIN_CHARS, DEDUP_STRATEGY, content_sha256, duplicates, is_deduplicated
from lc_compaction import tally as count_tally
from lc_compaction.integrations import CompactionMiddleware, CompactionNode, CompactionState
from lc_compaction.integrations import view as view_cache
from lc_compaction.integrations.plan import plan_compaction
from lc_compaction.ladder import LadderState, Slot
from lc_compaction.markers import MARK_KEY, is_shortened, is_summary, is_truncated, make_summary_message
from lc_compaction.structure import check_invariants
from tests.agent_replay import check_model_input, check_stored_history, load_replays
from tests.builders import ai_call, tool_exchange, tool_result
from tests.oracle.checks import check_all_structural
from tests.oracle.generators import histories

LISTING = "".join(f"drive/file_{i:03d}.txt  {1_000 + 37 * i:,} bytes  modified 2024-05-{1 + i % 28:02d}\n"
                  for i in range(40))
"""A directory listing of about 2,000 characters: what an agent lists again at every step."""

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def notes_of(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if is_deduplicated(m)]


def same_as(note: BaseMessage) -> str:
    return note.response_metadata[MARK_KEY]["same_as"]


def dicts(messages: list[BaseMessage]) -> list[dict]:
    return [message_to_dict(m) for m in messages]


def listing_history(copies: int, *, result: str = LISTING, system: bool = True) -> list[BaseMessage]:
    """A system prompt, then `copies` exchanges whose tool results are all `result` (ids h{k}, a{k}, c{k}, t{k},
    r{k}), then a last request (id "last")."""
    out: list[BaseMessage] = [SystemMessage("You manage files.", id="sys")] if system else []
    for k in range(copies):
        out += tool_exchange(k, f"list the drive ({k})", result, f"there are 40 files ({k})", tool="list_files")
    out.append(HumanMessage("which file is the largest?", id="last"))
    return out


def check_notes(messages: list[BaseMessage]) -> None:
    """Every deduplication note points at an earlier tool result still in `messages`, whole or cut in place,
    never truncated nor a note itself, whose content is the one the note replaced (by size, and by sha256 for
    a cut one); the note keeps its own tool_call_id."""
    position = {m.id: i for i, m in enumerate(messages)}
    for i, note in enumerate(messages):
        if not is_deduplicated(note):
            continue
        target = same_as(note)
        assert target in position, f"note {note.id} points at {target}, which is not in the history"
        j = position[target]
        original = messages[j]
        assert j < i and isinstance(original, ToolMessage), (note.id, target)
        assert not is_truncated(original) and not is_deduplicated(original), (note.id, target)
        assert note.tool_call_id != original.tool_call_id and original.tool_call_id in note.content
        chars = note.response_metadata[MARK_KEY]["original_chars"]
        if is_shortened(original):
            assert original.response_metadata[MARK_KEY].get("sha256"), (note.id, target)
        else:
            content = original.content
            key = content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False,
                                                                      default=str)
            assert len(key) == chars, (note.id, target)


# ------------------------------------------------------------------------------------------------ on arrival
def test_a_repeat_becomes_a_note_on_arrival_under_the_trigger_and_the_prefix_is_unchanged() -> None:
    """The agent loop: call 1 sends the first listing, call 2 adds an identical one. Far under the trigger, the
    second is a note naming the first call, and every message before it is the same object as before."""
    policy = CompactionPolicy(max_input_tokens=100_000)
    first = listing_history(1)[:-1] + [HumanMessage("list it again", id="h1")]
    call1 = compact(first, policy)
    assert not call1.triggered and call1.messages is first and not call1.actions
    grown = list(call1.messages) + tool_exchange(1, "x", LISTING, "same", tool="list_files")[1:3]
    call2 = compact(grown, policy, tally=call1.tally)
    assert not call2.triggered and call2.stop_reason == "under_trigger"
    assert [(a.strategy, a.kind, a.message_ids) for a in call2.actions] == [(DEDUP_STRATEGY, "deduplicated", ["t1"])]
    out = call2.messages
    assert all(a is b for a, b in zip(out[:-1], grown[:-1]))  # the provider's prefix: the very same objects
    note = out[-1]
    assert isinstance(note, ToolMessage) and is_deduplicated(note)
    assert (note.id, note.tool_call_id, note.name, note.status) == ("t1", "c1", "list_files", "success")
    assert "c0" in note.content and f"{len(LISTING):,} characters" in note.content
    assert same_as(note) == "t0" and note.response_metadata[MARK_KEY]["original_chars"] == len(LISTING)
    assert call2.tokens_after < call2.tokens_before == policy.counter.count_messages(grown)
    assert call2.tokens_after == policy.counter.count_messages(out)
    check_notes(out)
    # the next call keeps the note as it is and the listing whole: nothing before the new message changes
    grown3 = list(out) + [AIMessage("40 files, twice the same", id="r1"), HumanMessage("thanks", id="h2")]
    call3 = compact(grown3, policy, tally=call2.tally)
    assert call3.messages is grown3 and not call3.actions


def test_only_new_messages_are_looked_at_when_the_prefix_was_counted_before() -> None:
    """With a tally (the previous call's), an old repeat (one that arrived when deduplication was off) is left
    as it is: only what the provider has not seen yet is edited."""
    history = listing_history(2)
    counter = TiktokenCounter()  # one counter for both policies: a tally is kept per counter
    off = CompactionPolicy(max_input_tokens=100_000, deduplicate=False, token_counter=counter)
    before = compact(history, off)
    assert before.messages is history and not before.actions
    grown = history + [AIMessage("the largest is file_039", id="r-last"), HumanMessage("ok", id="h-end")]
    on = CompactionPolicy(max_input_tokens=100_000, token_counter=counter)
    after = compact(grown, on, tally=before.tally)
    assert after.messages is grown and not after.actions
    # without the tally, the whole history is new to this call: the old repeat is noted
    fresh = compact(grown, on)
    assert [m.id for m in notes_of(fresh.messages)] == ["t1"]


def test_results_shorter_than_the_minimum_are_never_replaced() -> None:
    short = LISTING[:DEDUP_MIN_CHARS - 1]
    history = listing_history(3, result=short)
    result = compact(history, CompactionPolicy(max_input_tokens=100_000))
    assert result.messages is history and not result.actions
    assert duplicates(history) == {}
    at_least = LISTING[:DEDUP_MIN_CHARS]
    history = listing_history(3, result=at_least)
    assert [m.id for m in notes_of(compact(history, CompactionPolicy(max_input_tokens=100_000)).messages)] == [
        "t1", "t2"]


def test_an_answer_of_the_recall_tool_is_never_replaced_nor_pointed_at() -> None:
    """The recall tool's answer is content the model asked to read (integrations.recall): it is sent whole even
    when it repeats a result still in the history, and a later repeat is not pointed at it."""
    from lc_compaction.offload import RECALL_TOOL_NAME

    history = listing_history(3)
    recall = next(m for m in history if m.id == "t1")
    history[history.index(recall)] = recall.model_copy(update={"name": RECALL_TOOL_NAME})
    out = compact(history, CompactionPolicy(max_input_tokens=100_000)).messages
    by_id = {m.id: m for m in out}
    assert by_id["t1"].content == LISTING and same_as(by_id["t2"]) == "t0"
    check_notes(out)


@pytest.mark.parametrize("how", ["pin_setting", "pin_message"])
def test_a_pinned_result_is_never_replaced_nor_pointed_at(how: str) -> None:
    history = listing_history(3)
    if how == "pin_message":
        history = [pin_message(m) if m.id == "t1" else m for m in history]
        policy = CompactionPolicy(max_input_tokens=100_000)
    else:
        policy = CompactionPolicy(max_input_tokens=100_000, pin={"t1"})
    out = compact(history, policy).messages
    by_id = {m.id: m for m in out}
    assert by_id["t1"].content == LISTING  # pinned: never replaced
    assert by_id["t0"].content == LISTING and same_as(by_id["t2"]) == "t0"
    # pinned and first: never pointed at either, so the next copy stays whole and later ones point at that
    history = [pin_message(m) if m.id == "t0" else m for m in listing_history(3)]
    out = compact(history, CompactionPolicy(max_input_tokens=100_000)).messages
    by_id = {m.id: m for m in out}
    assert by_id["t0"].content == LISTING and by_id["t1"].content == LISTING and same_as(by_id["t2"]) == "t1"
    check_notes(out)


def test_a_repeat_of_a_truncated_result_is_never_replaced() -> None:
    """An agent calls the tool again because its earlier result was truncated: it gets the whole result."""
    history = listing_history(1)[:-1] + [HumanMessage("more", id="h1")]
    truncated = TruncateToolResults().truncated(history[3])  # t0 truncated to its note, as the ladder does
    history[3] = truncated
    grown = history + [ai_call("c1", "a1", name="list_files"), tool_result("c1", "t1", LISTING, name="list_files")]
    result = compact(grown, CompactionPolicy(max_input_tokens=100_000))
    assert result.messages is grown and not result.actions
    assert duplicates(grown) == {}


def test_a_repeat_of_a_result_cut_in_place_is_noted_by_the_cut_marks_sha256() -> None:
    """A result alone over the budget is cut in place by the last resort; its mark keeps the original's sha256,
    so the same result fetched again is recognised and noted (the model saw what fits of it there)."""
    big = "".join(f"row {i:05d}: {'x' * 60}\n" for i in range(600))  # ~40,000 characters
    policy = CompactionPolicy(max_input_tokens=6_000, token_counter="approximate")
    first = [SystemMessage("You read tables.", id="sys"), HumanMessage("read the table", id="h0"),
             ai_call("c0", "a0", name="read_table"), tool_result("c0", "t0", big, name="read_table")]
    call1 = compact(first, policy)
    cut = call1.messages[3]
    assert call1.fits and is_shortened(cut) and cut.id == "t0"
    assert cut.response_metadata[MARK_KEY]["sha256"] == content_sha256(big) == hashlib.sha256(
        big.encode("utf-8")).hexdigest()
    grown = list(call1.messages) + [ai_call("c1", "a1", name="read_table"),
                                    tool_result("c1", "t1", big, name="read_table")]
    call2 = compact(grown, policy, tally=call1.tally)
    note = call2.messages[-1]
    assert is_deduplicated(note) and same_as(note) == "t0" and "cut to fit the context window" in note.content
    assert call2.messages[3] is cut  # the cut copy stays as it was
    assert not call2.triggered and call2.fits
    check_notes(call2.messages)
    # a different result of the same size is not mistaken for it
    other = big.replace("row 00000", "row 99999")
    grown = list(call1.messages) + [ai_call("c1", "a1", name="read_table"),
                                    tool_result("c1", "t1", other, name="read_table")]
    assert duplicates(grown, len(call1.messages)) == {}


# -------------------------------------------------------------------------------------- when the copy leaves
def _noted_state() -> tuple[LadderState, list[BaseMessage]]:
    """A ladder state over `listing_history(3)` after arrival: t1 and t2 are notes pointing at t0."""
    history = compact(listing_history(3), CompactionPolicy(max_input_tokens=100_000)).messages
    assert [(m.id, same_as(m)) for m in notes_of(history)] == [("t1", "t0"), ("t2", "t0")]
    counter = ApproximateCounter()
    slots = [Slot(m, counter.count_message(m)) for m in history]
    state = LadderState(slots, counter, fixed_tokens=0, goal_tokens=None, goal_messages=None, pass_name="soft")
    return state, history


def _take_t0_out(state: LadderState, how: str) -> int:
    """Take the first listing (message 3, t0, answering a0 at 2) out of `state` the way a strategy does."""
    if how == "removed":
        return state.remove([2, 3], strategy="test")
    if how == "folded":
        return state.fold([2, 3], {}, {}, strategy="test")
    if how == "summarized":
        return state.put_summary([2, 3, 4], make_summary_message("the drive was listed", message_id="sum"),
                                 strategy="test")
    assert how == "truncated"
    truncated = TruncateToolResults().truncated(state.slots[3].message)  # type: ignore[arg-type]
    return state.replace(3, truncated, strategy="test", kind="truncated")


@pytest.mark.parametrize("how", ["removed", "folded", "summarized", "truncated"])
def test_when_the_earlier_copy_leaves_the_first_note_gets_the_content_back_and_the_next_points_at_it(
        how: str) -> None:
    state, history = _noted_state()
    before = state.total()
    saved = _take_t0_out(state, how)
    out = state.messages
    by_id = {m.id: m for m in out}
    assert "t0" not in by_id or is_truncated(by_id["t0"])
    t1, t2 = by_id["t1"], by_id["t2"]
    # the first note is the listing again: its own id, tool_call_id and name, no mark left
    original_t1 = next(m for m in listing_history(3) if m.id == "t1")
    assert t1.content == LISTING and not is_deduplicated(t1) and MARK_KEY not in (t1.response_metadata or {})
    assert message_to_dict(t1) == message_to_dict(original_t1)
    # the later one points at it, naming its call and the size it replaced
    assert is_deduplicated(t2) and same_as(t2) == "t1" and "tool call c1" in t2.content
    assert t2.response_metadata[MARK_KEY]["original_chars"] == len(LISTING)
    assert f"({len(LISTING):,} characters)" in t2.content
    check_notes(out)
    # recorded, and counted: what the content costs again is taken off what the change saved
    restored = [a for a in state.actions if a.kind == "restored"]
    assert [(a.strategy, a.message_ids) for a in restored] == [(DEDUP_STRATEGY, ["t1"]), (DEDUP_STRATEGY, ["t2"])]
    note_tokens = state.counter.count_message(next(m for m in history if m.id == "t1"))
    assert restored[0].tokens_saved == note_tokens - state.counter.count_message(t1) < 0
    assert saved == before - state.total() == sum(a.tokens_saved for a in state.actions)
    assert state.total() == state.counter.count_messages(out) - state.counter.reply_overhead
    assert check_invariants(out) == []


def test_when_every_copy_leaves_no_note_is_left() -> None:
    state, _ = _noted_state()
    state.remove(list(range(2, 10)), strategy="test")  # a0 t0 r0 h1 a1 t1 r1 h2: t0 and the first note go
    out = state.messages
    assert [m.id for m in out if isinstance(m, ToolMessage)] == ["t2"]
    assert out[-3].content == LISTING and not notes_of(out)  # the last note is the listing again
    check_notes(out)


def test_a_compaction_that_drops_the_earlier_copy_sends_the_listing_once_whole() -> None:
    """Through `compact`: the exchange holding the first listing is dropped (its step is large; the second pass
    protects only the most recent step, and the notes are not in it), the earliest repeat still there is sent whole
    in its place and every later one points at it."""
    history = listing_history(3)
    history[2] = ai_call("c0", "a0", "Let me look at the drive first. " * 250, name="list_files")
    policy = CompactionPolicy(max_input_tokens=2_000, token_counter="approximate", keep=("turns", 2),
                              strategies=[DropOldExchanges()])
    noted = compact(history, CompactionPolicy(max_input_tokens=100_000, token_counter="approximate")).messages
    result = compact(noted, policy)
    assert result.triggered and result.stop_reason == "under_target"
    by_id = {m.id: m for m in result.messages}
    assert "t0" not in by_id
    results = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert results[0].content == LISTING and all(same_as(m) == results[0].id for m in results[1:])
    check_notes(result.messages)
    assert result.tokens_after == policy.counter.count_messages(result.messages)
    assert sum(a.tokens_saved for a in result.actions) == result.tokens_before - result.tokens_after
    check_notes(result.messages)


# -------------------------------------------------------------------------------------- generated histories
@st.composite
def repeating_histories(draw: Any, **kw: Any) -> list[BaseMessage]:
    """A generated history (tests/oracle/generators.histories) in which tool results repeat: each result keeps
    its content or takes one of 1..3 shared contents (of 0..3,000 characters, some under `DEDUP_MIN_CHARS`), as a
    string or as one text block."""
    history = draw(histories(min_tool_steps=2, **kw))
    pool = draw(st.lists(st.sampled_from([LISTING, LISTING[:700], LISTING[:DEDUP_MIN_CHARS - 20], "ok " * 400,
                                          LISTING * 2]), min_size=1, max_size=3, unique=True))
    results = [i for i, m in enumerate(history) if isinstance(m, ToolMessage)]
    # at least one repeat long enough to be noted: two results (the first two, or two drawn) share LISTING
    forced = dict.fromkeys(draw(st.sampled_from([results[:2], results[-2:], results[::2][:2] or results[:2]])),
                           LISTING)
    out = []
    for i, m in enumerate(history):
        if isinstance(m, ToolMessage) and (i in forced or draw(st.integers(0, 2))):
            text = forced.get(i) or draw(st.sampled_from(pool))
            content: Any = [{"type": "text", "text": text}] if draw(st.integers(0, 4)) == 0 else text
            m = m.model_copy(update={"content": content})
        out.append(m)
    return out


def _policy(window: int, keep: Any, ladder: str) -> CompactionPolicy:
    strategies = {"default": None, "summarize": [TruncateToolResults(), Summarize()],
                  "drop": [DropOldExchanges()]}[ladder]
    return CompactionPolicy(max_input_tokens=window, keep=keep, token_counter="approximate", strategies=strategies)


KEEPS = st.one_of(st.tuples(st.just("turns"), st.integers(0, 3)), st.tuples(st.just("messages"), st.integers(0, 8)))
LADDERS = st.sampled_from(["default", "summarize", "drop"])


@FAST
@given(history=repeating_histories(max_turns=4, max_steps=3), window=st.integers(300, 12_000), keep=KEEPS,
       ladder=LADDERS)
def test_no_note_ever_points_at_a_message_not_in_the_history(history, window, keep, ladder) -> None:
    policy = _policy(window, keep, ladder)
    result = compact(history, policy)
    out = result.messages
    check_notes(out)
    check_all_structural(history, out)
    assert result.tokens_after == policy.counter.count_messages(out)
    # every repeat the history still holds whole has no whole earlier copy (it would have been noted)
    assert duplicates(out, 0, policy.is_pinned_by_caller) == {} or not policy.deduplicate
    # deterministic: the same history compacted again gives byte-identical notes, and the same messages (a
    # summary's id aside: Summarize gives each summary a new uuid4 id, which no provider receives)
    again = compact(history, policy).messages
    assert dicts(notes_of(again)) == dicts(notes_of(out))
    assert [_without_summary_id(m) for m in again] == [_without_summary_id(m) for m in out]


def _without_summary_id(message: BaseMessage) -> dict:
    data = message_to_dict(message)
    if is_summary(message):
        data["data"]["id"] = None
    return data


def _model_calls(history: list[BaseMessage]) -> list[int]:
    """Where the agent loop calls the model: after each request, and after each complete block of results."""
    ends = []
    for i, m in enumerate(history):
        nxt = history[i + 1] if i + 1 < len(history) else None
        if isinstance(m, HumanMessage) or (isinstance(m, ToolMessage) and not isinstance(nxt, ToolMessage)):
            ends.append(i + 1)
    return ends


@FAST
@given(history=repeating_histories(max_turns=4, max_steps=3), window=st.integers(300, 12_000), keep=KEEPS,
       ladder=LADDERS)
def test_in_an_agent_loop_notes_always_point_into_the_history_and_stay_byte_stable(history, window, keep,
                                                                                     ladder) -> None:
    """The agent loop in rewrite mode: before each model call, the previous call's output plus the messages new
    since. After every call no note dangles, and a note sent before is sent again byte for byte unless this call
    restored, re-pointed, truncated or removed it."""
    policy = _policy(window, keep, ladder)
    state: list[BaseMessage] = []
    tally = None
    done = 0
    previous: dict[str, dict] = {}
    for end in _model_calls(history):
        state = state + history[done:end]
        done = end
        result = compact(state, policy, tally=tally)
        out = result.messages
        check_notes(out)
        assert check_invariants(out) == []
        touched = {i for a in result.actions if a.kind != "deduplicated" for i in a.message_ids}
        for m in notes_of(out):
            if m.id in previous and m.id not in touched:
                assert message_to_dict(m) == previous[m.id], m.id
        previous = {m.id: message_to_dict(m) for m in notes_of(out) if m.id}
        state, tally = list(out), result.tally


# ------------------------------------------------------------------------------------------ view and rewrite
def _graph(mode: str) -> tuple[Any, list[list[BaseMessage]]]:
    """START -> compact -> model -> END over MessagesState with a checkpointer; and the model's inputs."""
    replies = (AIMessage(f"Answer {i}: the largest file is file_039.", id=f"ans{i}") for i in itertools.count())
    model = GenericFakeChatModel(messages=replies)
    sent: list[list[BaseMessage]] = []
    key = "llm_input_messages" if mode == "view" else "messages"

    def call_model(state: CompactionState) -> dict:
        sent.append(list(state[key]))
        return {"messages": [model.invoke(state[key])]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", CompactionNode(CompactionPolicy(max_input_tokens=2_000), mode=mode))
    builder.add_node("model", call_model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=InMemorySaver()), sent


def _noted_listings() -> list[BaseMessage]:
    """Three exchanges that read the same listing, the first step with a long text, the agent about to read the
    third listing (its result is the newest step); the repeats already deduplicated on arrival."""
    history = listing_history(3)[:-1]  # ends with the third exchange's answer: make its listing the newest step
    history = history[:-1]  # ... without the answer: the agent is about to read the third listing
    history[2] = ai_call("c0", "a0", "Let me look at the drive first. " * 250, name="list_files")
    return compact(history, CompactionPolicy(max_input_tokens=100_000, token_counter="approximate")).messages


def test_the_earlier_copy_stays_while_a_kept_note_points_at_it() -> None:
    """In a pass that need not fit the budget (the history fits, it is above the trigger), when a note pointing at
    an earlier copy is in the kept part (here the most recent step), the copy's step is kept too
    (`dedup.referenced`): dropping it would only move the listing forward. What goes instead is the rest."""
    noted = _noted_listings()
    policy = CompactionPolicy(max_input_tokens=4_000, trigger=("tokens", 2_000), token_counter="approximate",
                              strategies=[DropOldExchanges()])
    assert 2_000 < policy.counter.count_messages(noted) <= 4_000
    result = compact(noted, policy)
    by_id = {m.id: m for m in result.messages}
    assert result.triggered and by_id["t0"].content == LISTING and same_as(by_id["t2"]) == "t0"
    assert not [a for a in result.actions if a.kind == "restored"]
    check_notes(result.messages)


def test_over_the_budget_the_earlier_copy_may_go_and_the_note_follows_the_content() -> None:
    """Over the budget, the copy's step does not hold its place (its long text would keep the history over the
    budget): it may go, and the kept note gets the listing back (`dedup.restorations`), so the agent still sees it
    once."""
    noted = _noted_listings()
    policy = CompactionPolicy(max_input_tokens=2_000, token_counter="approximate", strategies=[DropOldExchanges()])
    assert policy.counter.count_messages(noted) > 2_000
    result = compact(noted, policy)
    by_id = {m.id: m for m in result.messages}
    assert result.triggered and result.fits, result.stop_reason
    listings = [m for m in result.messages if isinstance(m, ToolMessage) and m.content == LISTING]
    assert len(listings) == 1 and not is_deduplicated(listings[0])
    assert "t0" not in by_id or by_id["t0"].content != LISTING
    check_notes(result.messages)


def _turn(i: int) -> list[BaseMessage]:
    """A request and the listing fetched for it (every other turn a result of its own)."""
    result = LISTING if i % 2 == 0 else f"report {i}: " + "the quarterly figures are in order. " * 30
    return [HumanMessage(f"Question {i}: what is on the drive now? " + "please be thorough. " * 10, id=f"h{i}"),
            ai_call(f"c{i}", f"a{i}", name="list_files" if i % 2 == 0 else "read_report"),
            tool_result(f"c{i}", f"t{i}", result, name="list_files" if i % 2 == 0 else "read_report")]


@pytest.mark.parametrize("fresh_process", [False, True], ids=["same_process", "fresh_process"])
@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_view_mode_sends_what_rewrite_mode_sends_with_repeated_results(use_async: bool, fresh_process: bool) -> None:
    """Twelve turns through a real compiled graph in each mode; with `fresh_process`, view mode starts every turn
    as a new process would (no view nor count kept in memory: it rebuilds its input from the JSON memory)."""
    sent = {}
    stored = {}
    for mode in ("rewrite", "view"):
        graph, calls = _graph(mode)
        config = {"configurable": {"thread_id": mode}}
        for i in range(12):
            if fresh_process and mode == "view":
                view_cache.clear()
                count_tally.clear()
            payload = {"messages": ([SystemMessage("You manage files.", id="sys")] if i == 0 else []) + _turn(i)}
            if use_async:
                asyncio.run(graph.ainvoke(payload, config))
            else:
                graph.invoke(payload, config)
        sent[mode] = calls
        stored[mode] = graph.get_state(config).values["messages"]
    assert [dicts(c) for c in sent["view"]] == [dicts(c) for c in sent["rewrite"]]
    # deduplication and compaction both happened on the way, and a note's earlier copy left at least once: a
    # later listing is sent whole again (restored) where the first one is no longer sent
    assert any(notes_of(c) for c in sent["view"])
    assert any(len(b) < len(a) for a, b in zip(sent["view"], sent["view"][1:])), "compaction ran"
    assert any("t0" not in {m.id for m in c} and any(m.id != "t0" and m.content == LISTING for m in c)
               for c in sent["view"])
    for call in sent["view"]:
        check_notes(call)
    # view mode stores every message whole; rewrite mode stores what it sent
    assert [m.id for m in stored["view"]] == ["sys", *[x for i in range(12) for x in
                                                     (f"h{i}", f"a{i}", f"t{i}", f"ans{i}")]]
    assert not notes_of(stored["view"])
    assert dicts(stored["rewrite"][:-1]) == dicts(sent["rewrite"][-1])


@FAST
@given(history=repeating_histories(max_turns=4, max_steps=3), window=st.integers(300, 12_000), keep=KEEPS,
       ladder=st.sampled_from(["default", "drop"]), fresh_process=st.booleans())
def test_view_mode_sends_what_rewrite_mode_sends_on_generated_repeating_histories(history, window, keep, ladder,
                                                                                    fresh_process) -> None:
    """The agent loop through `plan_compaction` (what both doors run): rewrite mode applies its writes to the
    stored history with LangGraph's `add_messages`, view mode stores every message and passes its memory on as
    JSON (with `fresh_process`, every call starts without the in-process view and counts). Every call sends the
    same messages in both modes."""
    policy = _policy(window, keep, ladder)
    stored: dict[str, list[BaseMessage]] = {"rewrite": [], "view": []}
    memory: dict[str, Any] = {"rewrite": None, "view": None}
    done = 0
    for end in _model_calls(history):
        new = history[done:end]
        done = end
        sent = {}
        for mode in ("rewrite", "view"):
            stored[mode] = add_messages(stored[mode], new)
            if fresh_process and mode == "view":
                view_cache.clear()
                count_tally.clear()
            plan = plan_compaction(stored[mode], memory[mode], policy, door="langgraph_node", mode=mode)
            memory[mode] = json.loads(json.dumps(plan.memory))
            for write in plan.messages_writes:
                stored[mode] = add_messages(stored[mode], write)
            sent[mode] = plan.model_input
        assert dicts(sent["view"]) == dicts(sent["rewrite"])
        check_notes(sent["view"])
    assert dicts(stored["view"]) == dicts(history[:done])  # view mode stores every message as it came


REPEATING = "agentdojo/claude-3-haiku-20240307/workspace/user_task_35"
"""A shared conversation whose tool results repeat: 14 of its 16 results list the same 7,600-token drive."""


@pytest.mark.parametrize("window", [8_000, 16_000])
def test_a_real_agent_over_a_repeating_conversation_sends_the_same_in_both_modes(window: int) -> None:
    (replay,) = load_replays([REPEATING])
    calls = {}
    for mode in ("rewrite", "view"):
        def on_call(i: int, received: list, kwargs: dict) -> None:
            check_model_input(replay, i, received, kwargs, window=window)
            check_notes(received)

        model = replay.model(profile={"max_input_tokens": window}, on_call=on_call)
        agent = create_agent(model, replay.tools(), system_prompt=replay.system,
                             middleware=[CompactionMiddleware(mode=mode)], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": mode}}
        for k in range(len(replay.turns)):
            agent.invoke(replay.turn_input(k, include_system=False), config)
            check_stored_history(replay, k, agent.get_state(config).values["messages"], mode=mode,
                                 last_input=model.calls[-1], include_system=False)
        calls[mode] = model.calls
    assert [dicts(c) for c in calls["view"]] == [dicts(c) for c in calls["rewrite"]]
    assert sum(len(notes_of(c)) for c in calls["view"]) >= 5  # the repeats were sent as notes
