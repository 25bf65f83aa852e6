"""What lc-compaction writes into a history keeps the providers' order rules (issue 20): the family of tests.

1. Strict alternation (Mistral's instruct chat templates, and the vLLM / TGI servers that apply them): once tool
   results and assistant messages that call tools are left out, user and assistant turns alternate, the user's
   first. No drop marker, summary or progress note makes two turns of one role meet where the input alternated.
   Seen: steps dropped between a request and its reply left the marker right before the reply (two assistant
   turns); a summary put after the request's tool results (two user turns).
2. OpenAI Responses: a reasoning item stays directly before the item it pairs with (its function_call, or its
   message) in every message the package writes into: a progress note, the marker's identifiers folded into a
   reply, a last-resort cut. Checked on what langchain-openai's own payload builder sends.
3. Anthropic with thinking: a mid-history system note is sent as a user message with text, where Anthropic starts
   a new turn, so the first assistant message after it in a running tool loop must start with a thinking block.
4. The budget: a marker is optional, fitting is not. Whenever the history without its drop markers fits the
   budget, the result fits (a marker the roles need goes last, and the result says where roles then meet).

The rules are restated here without lc-compaction (the providers' words are in the docstrings), and the seen
cases and the properties (generated histories, tests/oracle/generators.py) fail on the code before the fix.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langchain_openai.chat_models.base import _construct_responses_api_input, _convert_message_to_dict

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults, compact
from lc_compaction.integrations import CompactionMiddleware, CompactionNode
from lc_compaction.markers import is_dropped_marker
from lc_compaction.progress import note_lines
from lc_compaction.shorten import shorten
from tests.agent_replay import ReplayChatModel
from tests.builders import ai_call, compact_model_tools, tool_result, tool_turn
from tests.oracle import FakeSummaryModel
from tests.oracle.checks import check_all_structural
from tests.oracle.generators import histories

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
KEEPS = st.one_of(st.tuples(st.just("turns"), st.integers(0, 3)), st.tuples(st.just("messages"), st.integers(0, 8)))
LADDERS = ("default", "drop", "summarize", "truncate_drop_summarize")


def policy_for(window: int, keep: Any, counter: str, ladder: str = "default") -> CompactionPolicy:
    strategies: list[Any] | None = {
        "default": None,
        "drop": [DropOldExchanges()],
        "summarize": [Summarize(model=FakeSummaryModel(summary_text="The user asked things."), initial_delay=0)],
        "truncate_drop_summarize": [TruncateToolResults(), DropOldExchanges(),
                                    Summarize(model=FakeSummaryModel(summary_text="Things were done."),
                                              initial_delay=0)],
    }[ladder]
    if counter == "messages":
        return CompactionPolicy(max_input_tokens=max(2, window // 200), reserve=0, keep=keep,
                                token_counter="messages", strategies=strategies)
    return CompactionPolicy(max_input_tokens=window, keep=keep, token_counter=counter, strategies=strategies)


# ------------------------------------------------------------------------------------------------ the rules, restated
def turns(messages: list[BaseMessage]) -> list[tuple[str, BaseMessage]]:
    """The turns a strict chat template checks: Mistral's (v0.3 with tools) leaves out the tool results and the
    assistant messages with tool calls (langchain-openai sends invalid calls as tool calls too), after the system
    message; the rest, with their roles."""
    out = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append(("user", m))
        elif isinstance(m, AIMessage) and not (m.tool_calls or m.invalid_tool_calls):
            out.append(("assistant", m))
    return out


def alternation_errors(messages: list[BaseMessage]) -> list[str]:
    """Where the turns do not alternate user/assistant/user/... ("conversation roles must alternate
    user/assistant/user/assistant/..."): "<id> then <id>" for two turns of one role side by side, and the first
    turn when it is not the user's."""
    found = turns(messages)
    errors = [f"the first turn is {found[0][1].id}, the assistant's"] if found and found[0][0] != "user" else []
    return errors + [f"{a.id} then {b.id}" for (ra, a), (rb, b) in zip(found, found[1:]) if ra == rb]


THINKING = ("thinking", "redacted_thinking", "reasoning")
"""Block types Anthropic reads as thinking (langchain-anthropic sends a v1 "reasoning" block as "thinking")."""


def starts_thinking(message: BaseMessage) -> bool:
    c = message.content
    return isinstance(c, list) and bool(c) and isinstance(c[0], dict) and c[0].get("type") in THINKING


def anthropic_thinking_errors(messages: list[BaseMessage]) -> list[str]:
    """Anthropic, thinking on (restated from its error: "When `thinking` is enabled, a final `assistant` message
    must start with a thinking block"): consecutive user-role messages (HumanMessages, ToolMessages) are one user
    message; one that holds anything but tool results (a HumanMessage: a request, a summary, a system note sent as
    one) starts a new turn. When the history ends with tool results (the turn goes on), the first assistant message
    after the last such user message must start with a thinking block."""
    if not messages or not isinstance(messages[-1], ToolMessage):
        return []
    last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    first = next((m for m in messages[last + 1:] if isinstance(m, AIMessage)), None)
    if first is None or starts_thinking(first):
        return []
    return [f"{first.id} opens the turn that starts at {messages[last].id} without a thinking block"]


def reasoning_pairs(messages: list[BaseMessage]) -> dict[str, tuple[str | None, str | None]]:
    """For each reasoning item of the OpenAI Responses request langchain-openai builds from `messages`
    (`_construct_responses_api_input`), the item right after it: (type, id or call_id; None at the end)."""
    items = _construct_responses_api_input(messages)
    out = {}
    for item, nxt in zip(items, [*items[1:], None]):
        if item.get("type") == "reasoning":
            out[item["id"]] = (None, None) if nxt is None else (nxt.get("type"), nxt.get("id") or nxt.get("call_id"))
    return out


def pairs_kept(before: list[BaseMessage], after: list[BaseMessage]) -> list[str]:
    """The reasoning items sent for both histories whose following item changed."""
    old, new = reasoning_pairs(before), reasoning_pairs(after)
    return [f"{rid}: {old[rid]} became {new[rid]}" for rid in old.keys() & new.keys() if old[rid] != new[rid]]


# ------------------------------------------------------------------------------------------------ 1. alternation
def test_seen_no_marker_between_a_request_and_its_reply():
    """Seen: the first request's tool step dropped, its reply kept (pinned here): the marker went right before the
    reply, two assistant turns in a row. The run held no turn, so the roles alternate without a marker; what it
    stood for goes into a progress note in the reply (the marker merged into it)."""
    history = [SystemMessage("You look orders up.", id="s"), HumanMessage("Where is my order?", id="h0"),
               ai_call("c0", "a0", name="lookup", args={"order": "ORD-7781"}),
               tool_result("c0", "t0", "Order ORD-7781 shipped with carrier UPS-552. " + "tracking " * 2000,
                           name="lookup"),
               AIMessage("It shipped.", id="r0"), HumanMessage("Thanks. And the invoice?", id="h1")]
    result = compact(history, CompactionPolicy(max_input_tokens=1_000, pin={"r0"}, strategies=[DropOldExchanges()]))
    out = result.messages
    assert {"a0", "t0"} <= {m.id for m in result.removed}
    assert alternation_errors(out) == [] and not any(is_dropped_marker(m) for m in out)
    reply = next(m for m in out if m.id == "r0")
    assert any("ORD-7781" in line for line in note_lines(reply))  # the lookup is named in the reply's note
    check_all_structural(history, out)


def test_seen_a_marker_stands_between_two_requests():
    """The place a marker is needed: the first request's reply dropped, the next request kept."""
    history = [HumanMessage("first", id="h0"), AIMessage("a long answer " * 500, id="r0"),
               HumanMessage("second", id="h1")]
    result = compact(history, CompactionPolicy(max_input_tokens=500, strategies=[DropOldExchanges()]))
    assert [m.id for m in result.messages][0::2] == ["h0", "h1"] and is_dropped_marker(result.messages[1])
    assert alternation_errors(result.messages) == []


@FAST
@given(history=histories(max_turns=6, max_steps=3), window=st.integers(150, 12_000), keep=KEEPS,
       counter=st.sampled_from(["approximate", "exact", "messages"]), ladder=st.sampled_from(LADDERS))
def test_turns_alternate_after_any_compaction_where_the_input_alternated(history, window, keep, counter, ladder):
    """On generated histories (which alternate: a request, tool steps, a reply), compacted again as they grow:
    the turns still alternate, except where the result says two user turns meet because the marker between them
    was left out to fit the budget (then it fits)."""
    assert alternation_errors(history) == []
    policy = policy_for(window, keep, counter, ladder)
    out = history
    for k in range(3):
        result = compact(out, policy)
        errors = alternation_errors(result.messages)
        met = result.details.get("roles_not_alternating", [])
        assert set(errors) <= set(met), (errors, met, [(m.type, m.id) for m in result.messages])
        assert not met or result.fits
        last = result.messages[-1]
        if errors or not isinstance(last, AIMessage) or last.tool_calls:
            break
        out = [*result.messages, *tool_turn(100 + k, 2_000)]


# ------------------------------------------------------------------------------------------------ 2. Responses
def responses_step(n: int, layout: str, result_chars: int = 4_400) -> list[BaseMessage]:
    """One step of a loop as ChatOpenAI with the Responses API returns it, in `layout` ("responses/v1", the
    default output_version; "v1", LangChain's standard blocks; "v0", reasoning in additional_kwargs), with its
    result."""
    call = {"name": "lookup", "args": {"item": n}, "id": f"call_{n}", "type": "tool_call"}
    arguments = json.dumps({"item": n})
    if layout == "responses/v1":
        ai = AIMessage([{"type": "reasoning", "id": f"rs_{n}", "summary": []},
                        {"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": arguments,
                         "id": f"fc_{n}"}],
                       tool_calls=[call], id=f"resp_{n}", response_metadata={"id": f"resp_{n}"})
    elif layout == "v1":
        ai = AIMessage([{"type": "reasoning", "id": f"rs_{n}", "reasoning": f"look up item {n}"},
                        {"type": "tool_call", "id": f"call_{n}", "name": "lookup", "args": {"item": n}}],
                       tool_calls=[call], id=f"resp_{n}",
                       response_metadata={"output_version": "v1", "model_provider": "openai"})
    else:
        ai = AIMessage([], tool_calls=[call], id=f"msg_{n}", response_metadata={"id": f"resp_{n}"},
                       additional_kwargs={"reasoning": {"id": f"rs_{n}", "type": "reasoning", "summary": []},
                                          "__openai_function_call_ids__": {f"call_{n}": f"fc_{n}"}})
    body = (f"item {n}: ORD-{1000 + n} in stock; " * result_chars)[:result_chars]
    return [ai, ToolMessage(body, tool_call_id=f"call_{n}", name="lookup", id=f"t{n}")]


LAYOUTS = ("responses/v1", "v1", "v0")


def test_the_progress_note_keeps_each_reasoning_item_before_its_call():
    """Seen: the note went after the reasoning block, so langchain-openai sent reasoning, message, function_call."""
    for layout in LAYOUTS:
        history: list[BaseMessage] = [SystemMessage("You look things up.", id="s"),
                                      HumanMessage("Look up items 0 to 7.", id="h")]
        for n in range(8):
            history += responses_step(n, layout)
        result = compact(history, CompactionPolicy(max_input_tokens=3_000))
        hosts = [m for m in result.messages if note_lines(m)]
        assert hosts, layout  # the scenario: steps were folded into a progress note
        assert pairs_kept(history, result.messages) == [], layout
        for rid, (kind, _) in reasoning_pairs(result.messages).items():
            assert kind == "function_call", (layout, rid, kind)
        if layout != "v0":  # Chat Completions sends the note with the calls (v0 is the Responses API's own layout)
            sent = _convert_message_to_dict(hosts[0])
            assert "progress note" in json.dumps(sent["content"]) and sent["tool_calls"]


def test_a_marker_merged_into_a_reply_keeps_the_reply_after_its_reasoning():
    """A dropped tool step before a Responses reply (pinned here, so the drop cannot end the run at a request):
    its identifiers go into a progress note in the reply; the reply's reasoning item still comes right before its
    message."""
    reply = AIMessage([{"type": "reasoning", "id": "rs_r", "summary": []},
                       {"type": "text", "text": "It shipped.", "id": "msg_r"}], id="resp_r",
                      response_metadata={"id": "resp_r"})
    history = [SystemMessage("s", id="s"), HumanMessage("Where is my order?", id="h0"), *responses_step(0, "v1"),
               reply, HumanMessage("Thanks. And the invoice?", id="h1")]
    result = compact(history, CompactionPolicy(max_input_tokens=800, pin={"resp_r"}, strategies=[DropOldExchanges()]))
    (host,) = [m for m in result.messages if note_lines(m)]
    assert host.id == "resp_r" and "t0" in {m.id for m in result.removed}
    assert reasoning_pairs(result.messages) == {"rs_r": ("message", "msg_r")}


def test_a_cut_keeps_the_item_a_reasoning_item_pairs_with():
    """The last resort cuts a reply whose text follows its reasoning item: the cut text block keeps its place (and
    id), even when none of its text is left (the first one holds the marker)."""
    reply = AIMessage([{"type": "reasoning", "id": "rs_r", "summary": []},
                       {"type": "text", "text": "word " * 5_000, "id": "msg_r"},
                       {"type": "reasoning", "id": "rs_s", "summary": []},
                       {"type": "text", "text": "more " * 5_000, "id": "msg_s"}], id="resp_r")
    history = [HumanMessage("q", id="h0"), reply, HumanMessage("next", id="h1")]
    for keep in (0, 10, 25_000, 30_000):
        cut = shorten(reply, keep)
        assert pairs_kept(history, [history[0], cut, history[2]]) == [], keep
    result = compact(history, CompactionPolicy(max_input_tokens=2_000, strategies=[]))
    assert result.fits and any(a.strategy == "last_resort" for a in result.actions)
    assert pairs_kept(history, result.messages) == []


def as_responses(history: list[BaseMessage], layout: str) -> list[BaseMessage]:
    """`history` with each AIMessage as the Responses API returns it in `layout`: a reasoning item first, then its
    text (a message item), then its calls."""
    out: list[BaseMessage] = []
    for k, m in enumerate(history):
        if not isinstance(m, AIMessage):  # (as text: the builder sends some of the generator's image forms badly)
            out.append(m if isinstance(m.content, str) else m.model_copy(update={"content": m.text}))
            continue
        text = m.text
        rid, mid = f"rs_{k}", f"msg_{k}"
        if layout == "v0":
            content: list[Any] = [{"type": "text", "text": text}] if text else []
            out.append(AIMessage(content, tool_calls=m.tool_calls, id=m.id,
                                 additional_kwargs={"reasoning": {"id": rid, "type": "reasoning", "summary": []}}))
            continue
        content = [{"type": "reasoning", "id": rid, "summary": []}]
        if text:
            content.append({"type": "text", "text": text, "id": mid})
        if layout == "responses/v1":
            content += [{"type": "function_call", "call_id": c["id"], "name": c["name"],
                         "arguments": json.dumps(c["args"]), "id": f"fc_{c['id']}"} for c in m.tool_calls]
        else:
            content += [{"type": "tool_call", "id": c["id"], "name": c["name"], "args": c["args"]}
                        for c in m.tool_calls]
        out.append(AIMessage(content, tool_calls=m.tool_calls, id=m.id))
    return out


@FAST
@given(history=histories(max_turns=5, max_steps=3), window=st.integers(300, 12_000), keep=KEEPS,
       layout=st.sampled_from(LAYOUTS), ladder=st.sampled_from(LADDERS))
def test_every_reasoning_item_keeps_its_pair_after_any_compaction(history, window, keep, layout, ladder):
    """Generated histories with Responses-style assistant messages, compacted by every ladder: each reasoning item
    still sent is followed by the item that followed it before."""
    history = as_responses(history, layout)
    result = compact(history, policy_for(window, keep, "approximate", ladder))
    assert pairs_kept(history, result.messages) == []


# ------------------------------------------------------------------------------------------------ 3. Anthropic thinking
THINK = {"type": "thinking", "thinking": "plan the lookups", "signature": "sig" * 20}


def thinking_step(n: int, thinking: bool, result_chars: int = 4_000) -> list[BaseMessage]:
    call = {"name": "lookup", "args": {"item": n}, "id": f"toolu_{n}", "type": "tool_call"}
    content = ([THINK] if thinking else []) + [{"type": "tool_use", "id": f"toolu_{n}", "name": "lookup",
                                                "input": {"item": n}}]
    return [AIMessage(content, tool_calls=[call], id=f"a{n}"),
            ToolMessage((f"item {n}: REC-{100 + n} " * result_chars)[:result_chars], tool_call_id=f"toolu_{n}",
                        name="lookup", id=f"t{n}")]


def test_seen_a_system_note_before_a_step_without_thinking_moves_after_it():
    """Seen: a note after the first step's results, then a step without thinking: the note opened a new turn whose
    first assistant message had no thinking block. The note goes after the loop's results (the model's next reply
    opens the turn with its thinking), or right before a later step that starts with thinking."""
    history = [SystemMessage("s", id="s"), HumanMessage("Look up items.", id="h"), *thinking_step(0, True),
               SystemMessage("Reminder: quote the record ids.", id="note"), *thinking_step(1, False),
               *thinking_step(2, False)]
    result = compact(history, CompactionPolicy(max_input_tokens=3_000))
    assert anthropic_thinking_errors(result.messages) == []
    assert [m.id for m in result.messages][-1] == "note" and "system_note_moved" in {r.kind for r in result.repairs}
    later = [*history[:5], *thinking_step(3, True), *thinking_step(4, False)]
    out = compact(later, CompactionPolicy(max_input_tokens=3_000)).messages
    assert anthropic_thinking_errors(out) == []
    ids = [m.id for m in out]
    assert ids.index("note") == ids.index("a3") - 1  # before the step that opened the turn


def test_the_step_that_opens_a_notes_turn_is_never_folded():
    """A note, then a step with thinking (the model's reply to it), then more steps: folding must not take that
    step (its thinking opens the note's turn)."""
    history = [SystemMessage("s", id="s"), HumanMessage("Look up items.", id="h"), *thinking_step(0, True),
               SystemMessage("Reminder: quote the record ids.", id="note"), *thinking_step(1, True)]
    for n in range(2, 8):
        history += thinking_step(n, False)
    folded = 0
    for window in (6_000, 4_000, 2_000):  # truncation alone may fit the widest; the narrower ones fold
        result = compact(history, CompactionPolicy(max_input_tokens=window))
        folded += any(note_lines(m) for m in result.messages)
        assert "a1" in {m.id for m in result.messages}
        assert anthropic_thinking_errors(result.messages) == []
    assert folded >= 2  # the scenario: the loop was folded


@tool
def lookup(item: int) -> str:
    """Look an item up by its number."""
    return f"item {item}: REC-{100 + item}"


THINKING_LOOP = [HumanMessage("Look up items.", id="h"), *thinking_step(0, True, 40),
                 SystemMessage("Reminder: quote the record ids.", id="note"), *thinking_step(1, False, 40)]
"""A note after the first step's result, then a step without thinking: what a door receives at once (a thread
written by another process, a history given whole), far under the trigger."""


def _agent_input(mode: str) -> list[BaseMessage]:
    model = ReplayChatModel(messages=iter([AIMessage("done", id="reply")]))
    agent = create_agent(model, [lookup], middleware=[CompactionMiddleware(max_input_tokens=100_000, mode=mode)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": THINKING_LOOP}, {"configurable": {"thread_id": mode}})
    return model.calls[0]


@pytest.mark.parametrize("mode", ["rewrite", "view"])
def test_seen_the_middleware_sent_a_thinking_loops_note_unplaced_under_the_trigger(mode):
    """Seen (issue 20, class 4, a new user's trial): under the trigger the doors sent the note as a user message
    but left it before the step without thinking, the very shape Anthropic rejects; compact() placed it."""
    sent = _agent_input(mode)
    assert anthropic_thinking_errors(sent) == [], [m.id for m in sent]
    assert [m.id for m in sent].count("note") == 1


def test_the_node_places_a_note_that_arrived_before_a_step_without_thinking():
    """A compiled graph, the note arriving between two calls of the node (the model node writes it before its reply,
    as a supervisor or a reminder hook would): the node's next call sees the note and the step without thinking as
    new messages, and the model receives a history Anthropic accepts; the stored history is placed too (rewrite
    mode, by id)."""
    replies = iter([[AIMessage([THINK, {"type": "tool_use", "id": "toolu_0", "name": "lookup",
                                          "input": {"item": 0}}], id="a0",
                               tool_calls=[{"name": "lookup", "args": {"item": 0}, "id": "toolu_0"}])],
                    [SystemMessage("Reminder: quote the record ids.", id="note"),
                     AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"item": 1}, "id": "toolu_1"}])],
                    [AIMessage("done", id="reply")]])
    received: list[list[BaseMessage]] = []

    def model(state):
        received.append(list(state["messages"]))
        return {"messages": next(replies)}

    graph = compact_model_tools(CompactionNode(max_input_tokens=100_000), model, [lookup])
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("Look up items 0 and 1.", id="h")]}, config)
    assert anthropic_thinking_errors(received[-1]) == [], [m.id for m in received[-1]]
    assert [m.id for m in received[-1]].count("note") == 1
    stored = graph.get_state(config).values["messages"]
    assert anthropic_thinking_errors(stored[:-1]) == [] and [m.id for m in stored].count("note") == 1


@st.composite
def thinking_loops(draw) -> list[BaseMessage]:
    """A running tool loop whose first step thinks, with 1..3 system notes between its steps (after an earlier
    exchange or none); later steps think or not."""
    msgs: list[BaseMessage] = [SystemMessage("You look things up.", id="s")]
    if draw(st.booleans()):
        msgs += tool_turn(90, draw(st.integers(10, 3_000)))
    msgs.append(HumanMessage("Look up the items.", id="h"))
    n = draw(st.integers(2, 7))
    spots = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    for k in range(n):
        msgs += thinking_step(k, k == 0 or draw(st.booleans()), draw(st.integers(10, 5_000)))
        if k in spots:
            msgs.append(SystemMessage(f"Reminder {k}: quote the record ids.", id=f"note{k}"))
    if isinstance(msgs[-1], SystemMessage):  # the loop goes on: its last message is a result
        msgs += thinking_step(n, draw(st.booleans()), 100)
    return msgs


@FAST
@given(history=thinking_loops(), window=st.integers(500, 15_000), ladder=st.sampled_from(LADDERS))
def test_a_thinking_loops_system_notes_are_followed_by_a_thinking_step(history, window, ladder):
    result = compact(history, policy_for(window, ("turns", 1), "approximate", ladder))
    # compacted or not (under the trigger the notes are converted and placed too, `structure.notes_out_of_place`)
    assert anthropic_thinking_errors(result.messages) == [], [(m.type, m.id) for m in result.messages]
    assert [m.id for m in result.messages if m.id and m.id.startswith("note")] == \
        [m.id for m in history if m.id and m.id.startswith("note")]  # the notes stay, in their order
    check_all_structural(history, result.messages)


# ------------------------------------------------------------------------------------------------ 4. the budget
def test_seen_the_marker_alone_pushed_the_result_over_the_budget():
    """Seen: dropping the short reply and leaving a marker cost more than the reply, nothing else could be cut
    (the system prompt never is; the rest is too short), and the result ended over the budget (and was given back
    unchanged) where the drop alone fits."""
    history = [SystemMessage("You answer briefly. " * 30, id="s"), HumanMessage("hi", id="h0"),
               AIMessage("ok", id="a0"), HumanMessage("bye", id="h1")]
    counter = CompactionPolicy(max_input_tokens=1_000, token_counter="approximate").counter
    budget = counter.count_messages(history) - 1
    result = compact(history, CompactionPolicy(max_input_tokens=budget, reserve=0, token_counter="approximate",
                                               strategies=[DropOldExchanges()]))
    assert result.fits and [m.id for m in result.messages] == ["s", "h0", "h1"]
    assert result.details["roles_not_alternating"] == ["h0 then h1"]  # said, since the roles then meet
    assert result.removed == [history[2]]  # the marker this call wrote is no input message


def test_a_marker_that_fits_stays():
    history = [HumanMessage("hi", id="h0"), AIMessage("ok " * 300, id="a0"), HumanMessage("bye", id="h1")]
    result = compact(history, CompactionPolicy(max_input_tokens=200, reserve=0, token_counter="approximate",
                                               strategies=[DropOldExchanges()]))
    assert result.fits and is_dropped_marker(result.messages[1]) and "roles_not_alternating" not in result.details


@FAST
@given(history=histories(max_turns=6, max_steps=3), window=st.integers(100, 3_000), keep=KEEPS,
       counter=st.sampled_from(["messages", "messages", "approximate", "exact"]), ladder=st.sampled_from(LADDERS))
def test_whenever_dropping_without_a_marker_fits_the_result_fits(history, window, keep, counter, ladder):
    """Tiny budgets (in messages, a marker saves nothing): the result without its markers fits, so the result does."""
    policy = policy_for(window, keep, counter, ladder)
    result = compact(history, policy)
    budget = policy.budget_tokens()
    beside = result.tokens_after - policy.counter.count_messages(result.messages)  # reply priming, extra tokens
    bare = [m for m in result.messages if not is_dropped_marker(m)]
    if policy.counter.count_messages(bare) + beside <= budget:
        assert result.fits, (result.stop_reason, result.tokens_after, budget)
