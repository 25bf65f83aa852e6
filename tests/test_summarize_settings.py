"""A setting LangChain accepts never raises because of a history it has not seen (issue 20, class 7).

`Summarize(trim_tokens_to_summarize=700)` raised at construction: it wanted room for a 1,000-token earlier summary
that did not exist yet. Construction rejects only what no history can make work (the prompt alone over the
bound); what depends on the history is met at run time: an earlier summary too long for the bound is shortened
(reported), and when the bound leaves too little room to summarize the evicted part in chunks, the ledger is
written instead (reported). Each summarizer call stays within the bound, and the replies to the chunks are capped
so that the summary so far leaves room for the next chunk.
"""

from __future__ import annotations

import pytest
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import HumanMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.markers import SUMMARY_PREFIX, is_summary, summary_text
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.prompts import PRESETS
from lc_compaction.strategies.summarize import Summarize
from lc_compaction.tokens import TiktokenCounter

from tests.builders import reservation_history as history
from tests.fakes import ScriptedModel

COUNTER = TiktokenCounter()


def summarize(**kw) -> Summarize:
    kw.setdefault("initial_delay", 0)
    return Summarize(**kw)


def the_summary(result) -> str:
    (message,) = [m for m in result.messages if is_summary(m)]
    return summary_text(message)


@pytest.mark.parametrize("trim", [700, 1_000, 1_500])
def test_trim_values_langchain_accepts_construct(trim):
    """The values below the old minimum (1,773 tokens with the default prompt) that LangChain's own middleware
    takes without complaint."""
    SummarizationMiddleware(model=ScriptedModel(script=["x"]), trim_tokens_to_summarize=trim)
    assert Summarize(trim_tokens_to_summarize=trim).trim_tokens_to_summarize == trim
    assert Summarize(trim_tokens_to_summarize=trim, max_summary_tokens=5_000).max_summary_tokens == 5_000


@pytest.mark.parametrize("trim", [0, -5, 100, 400])
def test_a_bound_that_cannot_hold_the_prompt_alone_still_raises(trim):
    """Impossible for every history: the default prompt alone is over 400 tokens."""
    with pytest.raises(ValueError, match="trim_tokens_to_summarize"):
        Summarize(trim_tokens_to_summarize=trim)


def test_a_small_bound_summarizes_with_the_model_when_the_evicted_part_fits_one_call():
    """700 tokens hold the prompt and a short evicted part: the model writes the summary, within the bound."""
    model = ScriptedModel(script=["The user checked reservation RES000Q."])
    msgs = history(5, result_words=10)
    window = COUNTER.count_messages(msgs) - 20  # just over: a turn or two evicted
    result = compact(msgs, CompactionPolicy(max_input_tokens=window, reserve=0,
                                            strategies=[summarize(model=model, trim_tokens_to_summarize=700)]))
    assert result.details.get("summarizer") == "model", result.details
    assert model.inputs and all(COUNTER.count_text(text) <= 700 for text in model.inputs)


def test_a_bound_too_small_for_chunks_falls_back_to_the_ledger_and_says_why():
    """A long evicted part under a 700-token bound: chunks would leave under 256 tokens for their messages and as
    many for the summary so far, so the ledger is written, the model is not called, and the result says why."""
    model = ScriptedModel(script=["never used"])
    msgs = history(30, result_words=200)
    result = compact(msgs, CompactionPolicy(max_input_tokens=6_000,
                                            strategies=[summarize(model=model, trim_tokens_to_summarize=700)]))
    assert model.inputs == []
    assert result.details["summarizer"] == "ledger"
    assert "trim_tokens_to_summarize=700" in result.details["fallback_reason"]
    assert the_summary(result).startswith(LEDGER_HEADER)
    assert "failures" not in result.details  # no model failed: no cooldown, no "strategy_failed"


class CappedModel(ScriptedModel):
    """A scripted model whose class declares `max_tokens`, as OpenAI's and Anthropic's chat models do."""

    max_tokens: int | None = None


def test_an_earlier_summary_too_long_for_the_bound_is_shortened_and_reported():
    """An earlier summary of about 1,200 tokens under a 1,600-token bound, with chunks needed: it is shortened so
    that a chunk fits beside it (its beginning kept), the result reports it, every call stays within the bound,
    and the reply to every chunk but the last is capped so that the summary so far leaves a chunk's room
    (256 tokens) beside the prompt."""
    budget = 1_600
    model = CappedModel(script=["Summary so far: " + "reservations were checked and confirmed; " * 400])
    previous = HumanMessage(SUMMARY_PREFIX + "EARLIER-SUMMARY-START the user is Ana. " + "detail " * 1_200,
                            additional_kwargs={"lc_source": "summarization"}, id="prev")
    msgs = history(30, result_words=200)
    msgs.insert(2, previous)
    strategy = summarize(model=model, trim_tokens_to_summarize=budget, max_summary_tokens=1_000, fact_guard=False)
    result = compact(msgs, CompactionPolicy(max_input_tokens=8_000, strategies=[strategy]))
    cut = result.details["previous_summary_cut"]
    assert cut["tokens_before"] > cut["tokens_after"] >= 256
    assert result.details["summarizer"] == "model"
    assert len(model.inputs) > 1 and "EARLIER-SUMMARY-START the user is Ana." in model.inputs[0]
    assert all(COUNTER.count_text(text) <= budget for text in model.inputs)
    bare = COUNTER.count_text(PRESETS["default"].format(messages=""))
    for kwargs in model.kwargs[:-1]:
        assert kwargs["max_tokens"] <= budget - bare - 256, kwargs


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_accepts_the_smallest_bound_that_holds_it(preset):
    """For each preset: the bound just above its prompt constructs; the one at it does not."""
    from lc_compaction.strategies.transcript import render_input
    from lc_compaction.tokens import ApproximateCounter

    bare = ApproximateCounter().count_text(PRESETS[preset].format(messages=render_input(None, [])))
    assert Summarize(summary_prompt=preset, trim_tokens_to_summarize=bare + 1)
    with pytest.raises(ValueError, match="trim_tokens_to_summarize"):
        Summarize(summary_prompt=preset, trim_tokens_to_summarize=bare)
