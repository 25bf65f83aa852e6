"""The tau-bench airline conversations of ../shared/traces replayed at an 8,000-token window with summarization
on (the ledger, and a fake model that writes a fixed summary with no identifier in it).

The replay is the agent loop's: before each recorded assistant message the history is compacted and the
compacted history becomes the state (as a pre-model hook that writes back does); then the recorded message
is appended. Each compacted context is checked:

- with the fact guard, 100% of the identifiers of every message evicted so far are in it: by the product's
  definition of an identifier (`FactGuard`), and by an independent one written here for tau-bench's own
  shapes (reservation ids, user ids, payment ids, flight numbers, e-mails, dates);
- the oracle's structural checks hold, and there is at most one summary.

Without the guard the fake model's summaries keep none of them: the guard is what keeps them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.facts import FactGuard, contains, message_text
from lc_compaction.strategies.summarize import Summarize

from tests.oracle import check_all_structural, default_is_summary, load_traces
from tests.oracle.cases import FakeSummaryModel

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

WINDOW = 8_000
TAU = [(cid, msgs) for cid, msgs in load_traces() if cid.startswith("tau-bench")]

TAU_IDENTIFIERS = re.compile(
    r"\"reservation_id\":\s*\"([A-Z0-9]{6})\""      # reservation ids, also all-letter ones like AQLBTL
    r"|\b([a-z]+_[a-z]+_\d{4})\b"                    # user ids: mia_li_3668
    r"|\b((?:credit_card|gift_card|certificate)_\d{7})\b"
    r"|\b(HAT\d{3})\b"                               # flight numbers
    r"|\b([a-z]+\.[a-z]+\d+@example\.com)\b"
    r"|\b(\d{4}-\d{2}-\d{2})\b")
"""An identifier definition independent of the product's: the shapes tau-bench's airline data uses."""


def tau_identifiers(message: BaseMessage) -> set[str]:
    text = message.text if isinstance(message.content, str) else json.dumps(message.content)
    if isinstance(message, AIMessage):
        text += " " + " ".join(json.dumps(c["args"]) for c in message.tool_calls)
    return {next(g for g in m.groups() if g) for m in TAU_IDENTIFIERS.finditer(text)}


def context_text(messages: list[BaseMessage]) -> str:
    parts = []
    for m in messages:
        parts.append(m.content if isinstance(m.content, str) else json.dumps(m.content))
        if isinstance(m, AIMessage):
            parts.extend(json.dumps(c["args"]) for c in m.tool_calls)
    return "\n".join(parts)


def replay(messages: list[BaseMessage], policy: CompactionPolicy,
           on_call: Callable[[list[BaseMessage], object], None]) -> int:
    """Run the agent loop over a recorded conversation; call `on_call(input, result)` at every model call.
    Returns how many calls compacted the history."""
    state: list[BaseMessage] = []
    compacted = 0
    for m in messages:
        if isinstance(m, AIMessage):
            before = list(state)
            result = compact(state, policy)
            on_call(before, result)
            compacted += bool(result.actions)
            state = list(result.messages)
        state.append(m)
    return compacted


@pytest.mark.parametrize("summarizer", ["ledger", "fake_model"])
def test_every_evicted_identifier_is_in_every_later_context_with_the_guard(summarizer):
    guard = FactGuard()
    totals = {"compactions": 0, "checked": 0, "missing": 0, "independent_checked": 0}
    problems: list[str] = []
    for cid, messages in TAU:
        model = FakeSummaryModel() if summarizer == "fake_model" else None
        policy = CompactionPolicy(max_input_tokens=WINDOW, strategies=[Summarize(model=model, initial_delay=0)])
        evicted: dict[str, object] = {}  # casefolded value -> Identifier, in order of eviction
        evicted_tau: set[str] = set()

        def on_call(before, result, evicted=evicted, evicted_tau=evicted_tau, cid=cid):
            for m in result.removed:
                for i in guard.extract_messages([m]):
                    evicted.setdefault(i.value.casefold(), i)
                evicted_tau.update(tau_identifiers(m))
            check_all_structural(before, result.messages)
            assert sum(default_is_summary(m) for m in result.messages) <= 1
            ctx = "\n".join(message_text(m) for m in result.messages)
            missing = [i.value for i in evicted.values() if not contains(ctx, i)]
            raw = context_text(result.messages)
            missing_tau = sorted(v for v in evicted_tau if v not in raw)
            totals["checked"] += len(evicted)
            totals["missing"] += len(missing)
            totals["independent_checked"] += len(evicted_tau)
            if missing or missing_tau:
                problems.append(f"{cid}: missing {missing[:5]} / {missing_tau[:5]}")

        totals["compactions"] += replay(messages, policy, on_call)
    assert not problems, problems[:5]
    assert totals["compactions"] >= 8, totals  # summarization did happen on several conversations
    assert totals["checked"] > 1000 and totals["independent_checked"] > 500, totals


def test_without_the_guard_a_summary_that_writes_no_identifier_keeps_none():
    """The figure the guard changes: the fake model's fixed summary holds no identifier, so without the guard
    every evicted identifier is gone from the summary (those still elsewhere in the context aside)."""
    kept = evicted = 0
    for _cid, messages in TAU:
        # a trigger below the budget (the default is the budget itself): more compactions, more identifiers
        # evicted, so that "none kept" is a figure over hundreds of them
        policy = CompactionPolicy(max_input_tokens=WINDOW, trigger=("fraction", 0.7), strategies=[
            Summarize(model=FakeSummaryModel(), fact_guard=False, initial_delay=0)])

        def on_call(before, result):
            nonlocal kept, evicted
            if result.summary is not None:
                kept += result.details["identifiers_kept_by_summary"]
                evicted += result.details["identifiers_evicted"]
                assert result.details["identifiers_added_by_guard"] == 0

        replay(messages, policy, on_call)
    assert evicted > 500 and kept == 0
