"""lc_compaction.report: the per-call DataFrame and the context plot, on real replays of the bundled examples."""

from __future__ import annotations

import functools

import matplotlib

matplotlib.use("Agg")  # plot_context(ax=None) uses pyplot: no display in tests

import pytest
from matplotlib.figure import Figure

from lc_compaction import CompactionPolicy
from lc_compaction.replay import replay_files
from lc_compaction.report import CALL_COLUMNS, MAX_LABELLED, calls_dataframe, plot_context
from lc_compaction.traces import bundled_traces

WINDOW = 6_000


@functools.cache
def _report():
    return replay_files(bundled_traces(), CompactionPolicy(max_input_tokens=WINDOW), progress=False)


def test_calls_dataframe_has_one_row_per_call_with_the_record_values():
    conv = _report().conversations[1]
    df = calls_dataframe(conv)
    assert list(df.columns) == list(CALL_COLUMNS)
    assert len(df) == len(conv.calls)
    assert df["tokens_sent"].tolist() == [c.tokens_sent for c in conv.calls]
    assert df["tokens_uncompacted"].tolist() == [c.tokens_uncompacted for c in conv.calls]
    assert df["call"].tolist() == list(range(len(conv.calls)))
    assert df["strategies"].tolist() == [",".join(c.strategies) for c in conv.calls]
    assert df["violations"].sum() == 0 and bool(df["first_request_present"].all())
    assert set(df["conversation"]) == {conv.id}
    assert bool(df["compacted"].any())  # this long tool loop is compacted at 6,000 tokens


def test_calls_dataframe_of_a_whole_report_and_of_a_dict():
    report = _report()
    df = calls_dataframe(report)
    assert len(df) == len(report.calls)
    assert df.groupby("conversation", sort=False).size().to_dict() == {c.id: len(c.calls) for c in report.conversations}
    named = calls_dataframe({"a": report.conversations[0], "b": report.conversations[2]})
    assert named["conversation"].unique().tolist() == ["a", "b"]
    assert df["tokens_sent"].sum() == report.totals()["tokens_sent"]


def test_plot_context_draws_with_and_without_compaction_and_the_lines():
    report = _report()
    replays = {c.id: c for c in report.conversations}
    fig = Figure()
    ax = fig.subplots()
    out = plot_context(replays, window=WINDOW, trigger=4_800, ax=ax, budget=5_400)
    assert out is ax
    lines = ax.get_lines()
    solid = [ln for ln in lines if ln.get_label() in replays]
    dashed = [ln for ln in lines if ln.get_linestyle() == "--" and len(ln.get_xdata()) > 0]
    sent = sorted(tuple(c.tokens_sent for c in conv.calls) for conv in report.conversations)
    unc = sorted(tuple(c.tokens_uncompacted for c in conv.calls) for conv in report.conversations)
    assert sorted(tuple(ln.get_ydata()) for ln in solid) == sent
    assert all(ln.get_linestyle() == "-" for ln in solid)
    assert sorted(tuple(ln.get_ydata()) for ln in dashed) == unc
    hlines = {ln.get_label(): tuple(ln.get_ydata()) for ln in ax.get_lines()
              if ln.get_label().startswith(("window", "trigger", "budget"))}
    assert hlines == {f"window ({WINDOW:,} tokens)": (WINDOW, WINDOW), "trigger (4,800 tokens)": (4_800, 4_800),
                      "budget (5,400 tokens; compaction when over it)": (5_400, 5_400)}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(replays) <= set(labels) and "dashed: without compaction" in labels
    fig.savefig(__import__("io").BytesIO(), format="png")  # renders without a display


def test_plot_context_with_many_conversations_has_a_short_legend():
    conv = _report().conversations[0]
    many = {f"c{k}": conv for k in range(MAX_LABELLED + 1)}
    ax = Figure().subplots()
    plot_context(many, ax=ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["with compaction", "dashed: without compaction"]


def test_plot_context_makes_its_own_figure():
    ax = plot_context(_report().conversations[0])
    assert ax.get_xlabel() == "model call" and ax.get_ylabel() == "input tokens"
    import matplotlib.pyplot as plt

    plt.close(ax.figure)


def test_missing_plot_library_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    import importlib

    monkeypatch.setattr(importlib, "import_module", lambda name, *a: fake_import(name))
    with pytest.raises(ImportError, match=r"needs the 'pandas' package .*pip install \"lc-compaction\[plot\]\""):
        calls_dataframe(_report().conversations[0])
