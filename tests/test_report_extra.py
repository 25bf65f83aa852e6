"""lc_compaction.report, the parts the notebooks use: the before/after table of one compaction, the identifiers
table, the per-replay summary and the cumulative / comparison plots.

The tables are checked against what the compaction result says and against figures computed here (token sums,
positions looked up by id, tool names read from the calls, identifiers searched in the text), on a real recorded
conversation (bundled tau-bench) and on small histories built for one outcome each.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import re

import matplotlib

matplotlib.use("Agg")  # plot_comparison uses pyplot: no display in tests

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from matplotlib.figure import Figure

from lc_compaction import (
    CompactionPolicy,
    DropOldExchanges,
    TruncateToolResults,
    bundled_traces,
    compact,
    is_dropped_marker,
    load_traces,
    replay_conversation,
)
from lc_compaction.report import (
    COMPACTION_COLUMNS,
    IDENTIFIER_COLUMNS,
    OUTCOMES,
    SUMMARY_COLUMNS,
    compaction_table,
    identifiers_table,
    plot_comparison,
    plot_cumulative,
    summary_dataframe,
)
from lc_compaction.strategies.summarize import Summarize

TAU_ID = "tau-bench/gpt-4o-airline/task002-trial1"  # 62 messages, about 10,000 tokens, 30 model calls
DOJO_ID = "agentdojo/claude-3-sonnet-20240229/workspace/user_task_27"


@functools.cache
def _trace(conv_id: str):
    return next(t for path in bundled_traces() for t in load_traces(path) if t.id == conv_id)


def _text(message) -> str:
    """Content and tool-call arguments as one string (this file's own reading, for substring checks)."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    args = [json.dumps(tc["args"], ensure_ascii=False) for tc in getattr(message, "tool_calls", None) or []]
    return "\n".join([content, *args])


def _compacted(strategies=None, window: int = 8_000):
    trace = _trace(TAU_ID)
    policy = CompactionPolicy(max_input_tokens=window, strategies=strategies)
    return trace.messages, policy, compact(trace.messages, policy)


# ------------------------------------------------------------------------------------------- compaction_table
def test_table_of_a_real_compaction_accounts_for_every_message_and_token():
    # default ladder: truncate, then drop (fold and truncate); at 4,500 tokens a truncated result stays (the
    # progress note, one fence for all its lines, is cheap enough at 5,000 that every truncated step is folded)
    before, policy, result = _compacted(window=4_500)
    assert result.compacted and {"truncate_tool_results", "drop_old_exchanges"} <= set(result.strategies_applied)
    df = compaction_table(before, result, policy.counter)
    assert list(df.columns) == list(COMPACTION_COLUMNS)
    assert set(df["outcome"]) <= set(OUTCOMES)

    rows = df[df["index"].notna()]
    assert rows["index"].tolist() == list(range(len(before)))  # every input message once, in input order
    overhead = policy.counter.reply_overhead
    assert int(df["tokens_before"].sum()) + overhead == result.tokens_before
    assert int(df["tokens_after"].sum()) + overhead == result.tokens_after

    position = {m.id: j for j, m in enumerate(result.messages)}
    for row in rows.itertuples():
        m = before[row.index]
        assert row.role == m.type
        if m.id in position:
            assert row.index_after == position[m.id]
            assert row.tokens_after == policy.counter.count_message(result.messages[position[m.id]])
        else:
            assert row.index_after is pd_na() and row.tokens_after == 0
    removed_ids = {m.id for m in result.removed}  # removed, and folded into the running request's progress note
    gone = df["outcome"].isin(["removed", "folded"])
    assert set(df.loc[gone, "index"].map(lambda i: before[i].id)) == removed_ids
    truncated = df[df["outcome"] == "truncated"]
    assert len(truncated) > 0
    for row in truncated.itertuples():
        new = result.messages[row.index_after]
        assert new.content.startswith("[tool result truncated") and new.content != before[row.index].content
        assert row.tokens_after < row.tokens_before
    kept = df[df["outcome"] == "kept"]
    assert all(result.messages[r.index_after].content == before[r.index].content for r in kept.itertuples())


def pd_na():
    import pandas as pd

    return pd.NA


def test_tool_column_names_the_tool_even_when_the_result_carries_no_name():
    before, policy, result = _compacted()
    df = compaction_table(before, result, policy.counter)
    calls = {tc["id"]: tc["name"] for m in before if isinstance(m, AIMessage) for tc in m.tool_calls}
    tools = df[df["role"] == "tool"]
    assert len(tools) > 10 and all(before[i].name is None for i in tools["index"])  # the trace names no result
    assert tools["tool"].tolist() == [calls[before[i].tool_call_id] for i in tools["index"]]
    ai = df[(df["role"] == "ai") & df["index"].notna()]
    assert ai["tool"].tolist() == [", ".join(tc["name"] for tc in before[i].tool_calls) for i in ai["index"]]
    markers = df[df["outcome"] == "marker"]  # the drop marker is not in the input: no index, no tool
    assert len(markers) == 1 and markers.iloc[0]["role"] == "ai" and markers.iloc[0]["tool"] == ""
    assert is_dropped_marker(result.messages[markers.iloc[0]["index_after"]])


def test_summary_row_sits_where_the_summary_is_and_replaced_messages_say_summarized():
    before, policy, result = _compacted([Summarize()])
    assert result.summary is not None
    df = compaction_table(before, result, policy.counter)
    summary_rows = df[df["outcome"] == "summary"]
    assert len(summary_rows) == 1
    row = summary_rows.iloc[0]
    assert row["index"] is pd_na() and row["tokens_before"] == 0
    message = result.messages[row["index_after"]]
    assert message.content.endswith(result.summary)
    # the row names the summary's role: the one its place called for (issue 12: an assistant turn between two
    # requests, so that no two user turns meet)
    assert row["role"] == message.type == result.details["summary_role"]
    # the rows around it follow the result's order: index_after increases down the table
    placed = df["index_after"].dropna().tolist()
    assert placed == sorted(placed) == list(range(len(result.messages)))
    input_ids = {m.id for m in before}  # an action may also name a summary written earlier in the same call
    summarized = {mid for a in result.actions if a.kind == "summarized" for mid in a.message_ids} & input_ids
    assert summarized and set(df.loc[df["outcome"] == "summarized", "index"].map(lambda i: before[i].id)) == summarized
    assert "removed" not in set(df["outcome"])
    # the running request's steps are folded into its progress note, never summarized (issue 12)
    folded = {mid for a in result.actions if a.kind == "folded" for mid in a.message_ids} & input_ids
    assert set(df.loc[df["outcome"] == "folded", "index"].map(lambda i: before[i].id)) == folded
    assert not folded & summarized
    # from the message list alone, a message that is gone can only be said to be removed
    plain = compaction_table(before, result.messages, policy.counter)
    assert set(plain.loc[plain["outcome"] == "removed", "index"]) == set(
        df.loc[df["outcome"].isin(["summarized", "folded"]), "index"])


def test_untriggered_compaction_keeps_everything():
    before = _trace(TAU_ID).messages
    policy = CompactionPolicy(max_input_tokens=128_000)
    result = compact(before, policy)
    assert not result.triggered
    df = compaction_table(before, result, "exact")
    assert set(df["outcome"]) == {"kept"} and (df["tokens_before"] == df["tokens_after"]).all()
    assert df["index"].tolist() == df["index_after"].tolist() == list(range(len(before)))


def _chat(*parts):
    return [m.model_copy(update={"id": f"m{k}"}) for k, m in enumerate(parts)]


def test_a_message_cut_in_place_is_shortened():
    history = _chat(HumanMessage("Hello"), AIMessage("Hi, how can I help?"), HumanMessage("word " * 6_000))
    policy = CompactionPolicy(max_input_tokens=2_000)
    result = compact(history, policy)
    df = compaction_table(history, result, policy.counter)
    last = df.iloc[-1]
    cut = result.messages[last["index_after"]]
    assert last["outcome"] == "shortened" and last["index"] == 2 and cut.id == "m2"
    assert last["tokens_after"] < last["tokens_before"] and len(cut.content) < len(history[2].content)


def test_a_mid_history_system_message_is_changed_and_a_repaired_result_is_added():
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "call-1"}])
    history = _chat(HumanMessage("First " * 50), call, SystemMessage("Be brief."), HumanMessage("Again " * 1_000))
    # triggered (over 800 tokens); truncation alone cannot remove the repaired tool block
    policy = CompactionPolicy(max_input_tokens=1_000, repair=True, strategies=[TruncateToolResults()])
    result = compact(history, policy)
    assert result.repairs
    df = compaction_table(history, result, policy.counter)
    by_id = {history[i].id: o for i, o in zip(df["index"], df["outcome"]) if i is not pd_na()}
    assert by_id["m2"] == "changed"  # same id, now a HumanMessage
    added = df[df["outcome"] == "added"]
    assert len(added) == 1 and added.iloc[0]["role"] == "tool" and added.iloc[0]["tool"] == "lookup"
    assert result.messages[added.iloc[0]["index_after"]].tool_call_id == "call-1"
    call_row = df.index[df["index"] == 1][0]  # the added result's row comes right after its call's row
    assert df.index.get_loc(added.index[0]) == df.index.get_loc(call_row) + 1
    assert added.iloc[0]["index_after"] == df.loc[call_row, "index_after"] + 1


def test_table_errors_name_the_message():
    ok = _chat(HumanMessage("a"), AIMessage("b"))
    with pytest.raises(ValueError, match=r"before\[1\] has no id"):
        compaction_table([ok[0], AIMessage("b")], ok)
    with pytest.raises(ValueError, match=r"before\[1\] has the same id as before\[0\]"):
        compaction_table([ok[0], ok[0]], ok)
    with pytest.raises(TypeError, match=r"before\[0\]: expected a LangChain BaseMessage, got dict"):
        compaction_table([{"role": "user", "content": "a"}], ok)
    with pytest.raises(ValueError, match="token_counter"):
        compaction_table(ok, ok, counter="bogus")


# ------------------------------------------------------------------------------------------- identifiers_table
def _present(text: str, value: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])", text, re.IGNORECASE) is not None


WITHOUT_THE_GUARD = [TruncateToolResults(fact_guard=False), DropOldExchanges(fact_guard=False)]


@pytest.mark.parametrize("strategies", [None, WITHOUT_THE_GUARD, [Summarize()]],
                         ids=["truncate+drop", "without-the-guard", "summarize"])
def test_identifiers_table_lists_what_left_and_says_truthfully_whether_it_is_still_there(strategies):
    before, _, result = _compacted(strategies)
    df = identifiers_table(before, result)
    assert list(df.columns) == list(IDENTIFIER_COLUMNS) and len(df) > 50
    assert df["identifier"].str.casefold().is_unique
    after_text = "\n".join(_text(m) for m in result.messages)
    unchanged = {m.id for m in result.messages} - {
        mid for a in result.actions for mid in a.message_ids}
    for row in df.itertuples():
        source = before[row.index]
        assert source.id not in unchanged  # only identifiers of removed or rewritten messages
        assert row.identifier.casefold() in _text(source).casefold()
        assert row.kept == _present(after_text, row.identifier), row.identifier
    if strategies is None:  # the default ladder: its notes and its drop marker carry the identifiers, within
        # their bounds: what a bounded list left out it counts ("(+N more)")
        listed_as_more = sum(int(n) for n in re.findall(r"\(\+(\d+) more\)", after_text))
        assert (~df["kept"]).sum() <= listed_as_more
        assert df["kept"].mean() > 0.95
    elif len(strategies) == 2:
        assert 0 < df["kept"].sum() < len(df)  # dropping and truncating without them lose identifiers
    else:
        assert result.details["identifiers_omitted"] == 0
        assert df["kept"].all()  # the fact guard keeps every identifier the ledger and its line can hold


def test_identifiers_table_of_a_replay_reads_its_final_history():
    trace = _trace(TAU_ID)
    replay = replay_conversation(trace, CompactionPolicy(max_input_tokens=4_000, strategies=[DropOldExchanges()]))
    df = identifiers_table(trace.messages, replay)
    assert df.equals(identifiers_table(trace.messages, replay.messages))
    assert not df["kept"].all()


# ------------------------------------------------------------------------------------------- replays
@functools.cache
def _replays(window: int = 4_000) -> dict:
    trace = _trace(TAU_ID)
    ladders = {"truncate": [TruncateToolResults()], "drop": [DropOldExchanges()], "summarize": [Summarize()]}
    return {name: replay_conversation(trace, CompactionPolicy(max_input_tokens=window, strategies=s))
            for name, s in ladders.items()}


def test_summary_dataframe_has_one_row_per_replay_with_its_figures():
    replays = _replays()
    df = summary_dataframe(replays)
    assert df.index.tolist() == list(replays) and list(df.columns) == list(SUMMARY_COLUMNS)
    for name, rep in replays.items():
        assert df.loc[name, "tokens_sent"] == sum(c.tokens_sent for c in rep.calls)
        assert df.loc[name, "peak_input_tokens"] == max(c.tokens_sent for c in rep.calls)
        assert df.loc[name, "model_calls"] == len(rep.calls) == 30
        assert df.loc[name, "compactions"] == sum(c.compacted for c in rep.calls) > 0


def test_plot_cumulative_draws_running_sums_and_one_no_compaction_line():
    replays = _replays()
    ax = Figure().subplots()
    assert plot_cumulative(replays, ax=ax) is ax
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for name, rep in replays.items():
        assert list(lines[name].get_ydata()) == list(itertools.accumulate(c.tokens_sent for c in rep.calls))
        assert lines[name].get_linestyle() == "-"
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_label() == "no compaction"
    first = next(iter(replays.values()))
    assert list(dashed[0].get_ydata()) == list(itertools.accumulate(c.tokens_uncompacted for c in first.calls))


def test_plot_cumulative_of_two_conversations_draws_each_uncompacted_series():
    policy = CompactionPolicy(max_input_tokens=4_000)
    replays = {"tau": replay_conversation(_trace(TAU_ID), policy), "dojo": replay_conversation(_trace(DOJO_ID), policy)}
    ax = plot_cumulative(replays, ax=Figure().subplots())
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert sorted(ln.get_ydata()[-1] for ln in dashed) == sorted(
        sum(c.tokens_uncompacted for c in r.calls) for r in replays.values())
    assert "dashed: without compaction" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_plot_comparison_puts_both_views_on_one_figure():
    import matplotlib.pyplot as plt

    replays = _replays()
    fig = plot_comparison(replays, window=4_000, trigger=3_200, figsize=(10, 4), budget=3_600)
    try:
        left, right = fig.axes
        assert tuple(fig.get_size_inches()) == (10, 4)
        by_label = {ln.get_label(): ln for ln in left.get_lines()}
        for name, rep in replays.items():
            assert list(by_label[name].get_ydata()) == [c.tokens_sent for c in rep.calls]
        first = next(iter(replays.values()))
        assert list(by_label["no compaction"].get_ydata()) == [c.tokens_uncompacted for c in first.calls]
        assert tuple(by_label["window (4,000 tokens)"].get_ydata()) == (4_000, 4_000)
        assert tuple(by_label["trigger (3,200 tokens)"].get_ydata()) == (3_200, 3_200)
        assert tuple(by_label["budget (3,600 tokens; compaction when over it)"].get_ydata()) == (3_600, 3_600)
        assert right.get_title() == "Cumulative input tokens sent"
        fig.savefig(io.BytesIO(), format="png")
    finally:
        plt.close(fig)


def test_plot_comparison_refuses_replays_of_different_conversations():
    policy = CompactionPolicy(max_input_tokens=4_000)
    replays = {"tau": _replays()["drop"], "dojo": replay_conversation(_trace(DOJO_ID), policy)}
    with pytest.raises(ValueError, match=r"'dojo' is not the conversation of 'tau'.*model call 0"):
        plot_comparison(replays)
    with pytest.raises(ValueError, match="at least one"):
        plot_comparison({})
