"""`lc_compaction.report.summary_identifiers_table`: which identifiers of the summarized messages the summarizer
wrote itself, and which the summary holds with the fact guard's line (the table notebook 05 shows for a real
model; here the summarizer is a fake chat model whose reply names one identifier on purpose)."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, FactGuard, Summarize, compact
from lc_compaction.report import SUMMARY_IDENTIFIER_COLUMNS, summary_identifiers_table


def history() -> list:
    msgs = [SystemMessage("You are an airline agent.", id="sys")]
    for k in range(8):
        msgs += [HumanMessage(f"Please check reservation RES{k:03d}Q, flight HAT{k:03d}. " + "thanks " * 40,
                              id=f"h{k}"),
                 AIMessage("", tool_calls=[{"name": "get", "args": {"id": f"RES{k:03d}Q"}, "id": f"c{k}"}], id=f"a{k}"),
                 ToolMessage(f'{{"reservation_id": "RES{k:03d}Q", "amount": "$1{k}5"}}', tool_call_id=f"c{k}",
                             name="get", id=f"t{k}"),
                 AIMessage(f"RES{k:03d}Q is confirmed.", id=f"b{k}")]
    return msgs


def run(reply: str, **settings):
    model = FakeListChatModel(responses=[reply] * 4)
    policy = CompactionPolicy(max_input_tokens=800, strategies=[Summarize(model=model, **settings)])
    return compact(history(), policy)


def test_the_model_column_is_what_the_reply_holds_and_the_guard_column_holds_all():
    result = run("The user asked about reservation RES001Q.")
    table = summary_identifiers_table(result)
    assert list(table.columns) == list(SUMMARY_IDENTIFIER_COLUMNS)
    assert list(table.identifier) == [i.value for i in FactGuard().extract_messages(result.removed)]
    assert list(table.identifier[table.in_model_summary]) == ["RES001Q"]
    assert table.in_summary.all() and len(table) > 1
    assert table.in_model_summary.sum() == result.details["identifiers_kept_by_summary"]
    assert (~table.in_model_summary).sum() == result.details["identifiers_added_by_guard"]


def test_without_the_guard_both_columns_agree():
    result = run("The user asked about reservation RES001Q and flight HAT002.", fact_guard=False)
    table = summary_identifiers_table(result)
    assert (table.in_model_summary == table.in_summary).all()
    assert sorted(table.identifier[table.in_summary]) == ["HAT002", "RES001Q"]


def test_a_result_without_a_summary_is_refused():
    result = compact(history()[:5], CompactionPolicy(max_input_tokens=100_000))  # a whole first exchange
    with pytest.raises(ValueError, match="wrote no summary"):
        summary_identifiers_table(result)
