"""The bill counts the summary call (issue 21): what `Summarize` reports it sent, how `billing` bills it, and how
`replay` counts it beside the agent's calls."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, Summarize, compact
from lc_compaction.agent_request import AgentRequest
from lc_compaction.billing import DEFAULT_OUTPUT_PRICE, BillMeter, PromptCache
from lc_compaction.replay import areplay_conversation, replay_conversation, summarize_calls
from lc_compaction.testing import DEFAULT_SUMMARY_WORDS, ScriptedSummarizer

WINDOW = 8_000


def conversation(turns: int = 40) -> list[BaseMessage]:
    """A system prompt and `turns` user requests, each a tool call, its result (some 250 tokens) and an answer."""
    out: list[BaseMessage] = [SystemMessage("You are an airline agent. Look reservations up before answering.",
                                            id="sys")]
    for k in range(turns):
        rid = f"RES{k:03d}"
        result = " ".join(f"seat {j % 9}{'ABCDEF'[j % 6]} row {j % 30} fare {k * 7 + j}" for j in range(40))
        out += [HumanMessage(f"Please check reservation {rid} and tell me the seats.", id=f"h{k}"),
                AIMessage("", id=f"a{k}", tool_calls=[{"id": f"c{k}", "name": "get_reservation",
                                                       "args": {"reservation_id": rid}}]),
                ToolMessage(f"{rid}: confirmed; {result}", tool_call_id=f"c{k}", id=f"t{k}"),
                AIMessage(f"{rid} is confirmed; the seats are listed above.", id=f"b{k}")]
    return out


def policy(model: ScriptedSummarizer, *, share: bool = True) -> CompactionPolicy:
    return CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o",
                            strategies=[Summarize(model=model, share_agent_request=share)])


def over_window() -> tuple[list[BaseMessage], list[BaseMessage]]:
    """A history over the budget and the agent's previous request (the history without its last exchange)."""
    history = conversation(40)
    counter = CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o").counter
    for n in range(len(history), 0, -1):  # the longest prefix under the window, ending on an answer
        if counter.count_messages(history[:n]) < WINDOW - 1_000 and isinstance(history[n - 1], AIMessage) \
                and not history[n - 1].tool_calls:
            break
    previous = history[:n]
    return previous + history[n:n + 4], previous


# ------------------------------------------------------------------------------------------- the scripted model
def test_scripted_summarizer_is_deterministic_fixed_size_and_keeps_its_requests():
    model = ScriptedSummarizer()
    counter = CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o").counter
    history = conversation(5)
    a = model.invoke(history + [HumanMessage("Summarize.")])
    b = model.invoke(history + [HumanMessage("Summarize.")])
    c = model.invoke("Summarize this: " + "1234 5678 RES000 " * 300)
    assert a.content == b.content != c.content
    assert len(a.content.split()) == DEFAULT_SUMMARY_WORDS + 5  # "Summary {hash} of {n} messages:" and the words
    assert abs(counter.count_text(a.content) - counter.count_text(c.content)) <= 2  # same size whatever the input
    assert len(model.requests) == 3 and model.requests[0][-1].content == "Summarize."
    assert len(ScriptedSummarizer(words=10).invoke("short").content.split()) == 15


# ------------------------------------------------------------------------------------------- what was sent
def test_details_report_what_each_summary_call_sent():
    """`details["summary_requests"]` agrees with the requests the model received, counted again here."""
    history, previous = over_window()
    for share, form in ((True, "agent"), (False, "transcript")):
        model = ScriptedSummarizer()
        pol = policy(model, share=share)
        result = compact(history, pol, agent_request=AgentRequest(model=model, messages=tuple(previous)))
        sent = result.details["summary_requests"]
        assert len(sent) == len(model.requests) == result.details["summarizer_calls"] >= 1
        for entry, request in zip(sent, model.requests):
            assert entry["form"] == form
            assert entry["input_tokens"] == pol.counter.count_messages(request)
            assert entry["output_tokens"] == pol.counter.count_text(model.reply(request))
        if share:
            assert len(sent) == 1 and sent[0]["prefix_messages"] == len(previous)
            assert model.requests[0][:-1] == previous
            assert sent[0]["prefix_tokens"] == pol.counter.count_messages(previous) - 3  # no reply priming
        else:
            assert all(e["prefix_tokens"] == 0 and e["prefix_messages"] == 0 for e in sent)


# ------------------------------------------------------------------------------------------- billing
def _billed(share: bool) -> tuple[list, BillMeter, list[BaseMessage]]:
    history, previous = over_window()
    model = ScriptedSummarizer()
    pol = policy(model, share=share)
    meter = BillMeter(PromptCache(), pol.counter)
    meter.bill(previous)  # the agent's previous request
    compact(history, pol, agent_request=AgentRequest(model=model, messages=tuple(previous)))
    bills = [meter.bill_summary(r, output_tokens=pol.counter.count_text(model.reply(r))) for r in model.requests]
    return bills, meter, previous


def test_cache_sharing_request_is_billed_mostly_cached():
    bills, meter, previous = _billed(share=True)
    (bill,) = bills
    assert bill.form == ""
    assert bill.shared_tokens == meter.counter.count_messages(previous) - 3
    assert bill.cached_tokens / bill.input_tokens >= 0.8
    assert bill.billed_input < 0.3 * bill.input_tokens
    assert bill.billed == pytest.approx(bill.billed_input + DEFAULT_OUTPUT_PRICE * bill.output_tokens)


def test_transcript_prompt_is_billed_uncached():
    bills, _, _ = _billed(share=False)
    assert bills and all(b.cached_tokens == 0 and b.billed_input == b.input_tokens for b in bills)


def test_a_summary_call_does_not_become_the_previous_request():
    history, previous = over_window()
    counter = CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o").counter
    plain, aside = BillMeter(PromptCache(), counter), BillMeter(PromptCache(), counter)
    plain.bill(previous)
    aside.bill(previous)
    aside.bill_summary([HumanMessage("Summarize the conversation. " * 400)], output_tokens=10)
    assert aside.bill(history) == plain.bill(history)


def test_output_price():
    counter = CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o").counter
    meter = BillMeter(PromptCache(), counter)
    assert meter.bill_summary([HumanMessage("hi")], output_tokens=100, output_price=8).billed_output == 800
    assert meter.bill_summary((), input_tokens=50, output_tokens=10).billed == 50 + 40
    with pytest.raises(ValueError, match="output_price"):
        meter.bill_summary((), input_tokens=5, output_tokens=1, output_price=-1)
    with pytest.raises(ValueError, match="output_tokens"):
        meter.bill_summary((), input_tokens=5, output_tokens=-1)


# ------------------------------------------------------------------------------------------- replay
def _replay(share: bool, agent: bool = True):
    model = ScriptedSummarizer()
    rep = replay_conversation(conversation(40), policy(model, share=share), agent_model=model if agent else None)
    return model, rep


def test_replay_counts_the_summary_calls():
    model, rep = _replay(share=True)
    calls = rep.calls
    assert sum(c.summary_calls for c in calls) == len(model.requests) >= 2
    forms = [f for c in calls for f in c.summary_forms]
    assert forms.count("agent") >= len(forms) - 1  # the cache-sharing request, unless it would not fit
    for c in calls:
        assert c.billed_total == pytest.approx(c.billed_input + c.summary_billed)
        if not c.summary_calls:
            assert c.summary_billed == c.summary_input_tokens == c.summary_output_tokens == 0
    # the figures agree with the requests the model received, billed again here against each previous request
    counter = policy(model).counter
    requests = iter(model.requests)
    for c in calls:
        got = [next(requests) for _ in range(c.summary_calls)]
        assert c.summary_input_tokens == sum(counter.count_messages(r) for r in got)
        assert c.summary_output_tokens == sum(counter.count_text(model.reply(r)) for r in got)
    assert next(requests, None) is None
    totals = summarize_calls(calls, max_input_tokens=WINDOW)
    assert totals["summary_calls"] == len(model.requests)
    assert totals["summary_cached_fraction"] >= 0.8
    assert totals["billed_total"] == pytest.approx(totals["billed_input"] + totals["summary_billed"], abs=0.02)
    assert totals["bill_ratio_total"] == pytest.approx(totals["billed_total"] / totals["billed_input_uncompacted"],
                                                       abs=1e-4)
    assert totals["bill_ratio_total"] > totals["bill_ratio"]


def test_replay_transcript_prompt_is_counted_uncached():
    model, rep = _replay(share=False)
    totals = summarize_calls(rep.calls, max_input_tokens=WINDOW)
    assert totals["summary_calls"] == len(model.requests) > 0
    assert totals["summary_agent_calls"] == 0 and totals["summary_cached_tokens"] == 0
    assert totals["summary_billed"] > totals["summary_input_tokens"]  # uncached input, plus the output


def test_replay_without_the_agent_model_uses_the_transcript_prompt_and_still_bills_it():
    model, rep = _replay(share=True, agent=False)
    totals = summarize_calls(rep.calls, max_input_tokens=WINDOW)
    assert totals["summary_calls"] == len(model.requests) > 0
    assert totals["summary_agent_calls"] == 0 and totals["summary_cached_fraction"] == 0.0


def test_a_cache_sharing_request_pays_full_price_only_for_its_instruction():
    """Of a cache-sharing request, only the instruction (and what the cache's 128-token steps leave) is billed
    uncached; of a transcript prompt, everything. (Which costs less in all depends on the sizes: the cache-sharing
    request also pays the cached price on the whole agent request, a transcript prompt of a small evicted part
    can cost less; SUMMARY_BILL.md measures it.)"""
    model, rep = _replay(share=True)
    counter = policy(model).counter
    requests = iter(model.requests)
    checked = 0
    for c in rep.calls:
        got = [next(requests) for _ in c.summary_forms]
        if c.summary_forms == ["agent"]:
            instruction = counter.count_messages(got[0][-1:])
            assert 0 < c.summary_input_tokens - c.summary_cached_tokens <= instruction + 128
            checked += 1
    assert checked >= 2
    _, transcript = _replay(share=False)
    assert all(c.summary_cached_tokens == 0 for c in transcript.calls)


def test_agent_model_without_a_summarizer_changes_no_bill():
    model = ScriptedSummarizer()
    pol = CompactionPolicy(max_input_tokens=WINDOW, model_name="gpt-4o")
    with_agent = replay_conversation(conversation(40), pol, agent_model=model)
    without = replay_conversation(conversation(40), pol)
    assert [c.billed_input for c in with_agent.calls] == [c.billed_input for c in without.calls]
    assert all(c.summary_calls == 0 and c.billed_total == c.billed_input for c in with_agent.calls)
    assert not model.requests
    assert "summary_billed" in with_agent.calls[0].to_dict()


def test_async_replay_counts_the_same():
    model, rep = _replay(share=True)
    amodel = ScriptedSummarizer()
    arep = asyncio.run(areplay_conversation(conversation(40), policy(amodel), agent_model=amodel))
    assert [c.summary_input_tokens for c in arep.calls] == [c.summary_input_tokens for c in rep.calls]
    assert [c.summary_billed for c in arep.calls] == pytest.approx([c.summary_billed for c in rep.calls])


# ------------------------------------------------------------------------------------------- the benchmark
def test_summary_bill_benchmark_rows():
    from benchmarks.summary_bill import DEFAULT, MIDDLEWARE, SHARED, TRANSCRIPT, markdown, summary_bill

    result = summary_bill([("c", conversation(40))], windows=(WINDOW,))
    rows = result["windows"][str(WINDOW)]
    assert rows[DEFAULT]["ratio_to_default"] == 1.0 and rows[DEFAULT]["summary_calls"] == 0
    assert rows[SHARED]["summary_agent_calls"] > 0 and rows[SHARED]["summary_cached_fraction"] >= 0.8
    assert rows[TRANSCRIPT]["summary_cached_tokens"] == 0 < rows[TRANSCRIPT]["summary_calls"]
    assert rows[MIDDLEWARE]["summary_calls"] > 0 and rows[MIDDLEWARE]["summary_billed"] > 0
    for f in rows.values():
        assert f["billed_total"] == pytest.approx(f["billed_input"] + f["summary_billed"], abs=0.02)
    text = markdown(result, result, session_messages=160, seconds=1.0)
    assert "| 8,000 | Summarize, cache-sharing request |" in text
