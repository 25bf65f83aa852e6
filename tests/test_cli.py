"""The `lc-compaction` command: the real click command through CliRunner, and once as the installed console
script in a subprocess. Expected figures are derived from the trace files themselves, never copied from output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, convert_to_messages, messages_from_dict, messages_to_dict

from lc_compaction import is_dropped_marker
from lc_compaction.cli import main
from lc_compaction.tokens import TiktokenCounter
from lc_compaction.traces import bundled_traces
from tests.oracle import check_all_structural
from tests.oracle.checks import same_message

TOP_KEYS = ("conversations", "model_calls", "compactions", "tokens_sent_uncompacted", "tokens_sent",
            "peak_input_tokens", "over_window_calls", "invariant_violations", "compaction_ms_median",
            "compaction_ms_p95")
ADDITIVE = ("conversations", "model_calls", "compactions", "tokens_sent_uncompacted", "tokens_sent",
            "over_window_calls", "invariant_violations")


def _bundled_facts() -> tuple[int, int]:
    """(conversations, assistant messages) in the bundled files, read straight from the JSON."""
    convs = calls = 0
    for p in bundled_traces():
        for line in p.read_text("utf-8").splitlines():
            convs += 1
            calls += sum(m["role"] == "assistant" for m in json.loads(line)["messages"])
    return convs, calls


def _run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def _check_report(data: dict, window: int) -> None:
    for key in TOP_KEYS:
        assert key in data, key
    convs, calls = _bundled_facts()
    assert data["conversations"] == convs and data["model_calls"] == calls
    assert data["tokens_sent"] <= data["tokens_sent_uncompacted"]
    assert data["peak_input_tokens"] <= window
    assert data["over_window_calls"] == 0 and data["invariant_violations"] == 0
    assert 0 <= data["compaction_ms_median"] <= data["compaction_ms_p95"]
    assert data["policy"]["max_input_tokens"] == window
    assert [Path(f["path"]).name for f in data["files"]] == [p.name for p in bundled_traces()]
    for key in ADDITIVE:
        assert sum(f[key] for f in data["files"]) == data[key], key
    assert max(f["peak_input_tokens"] for f in data["files"]) == data["peak_input_tokens"]
    for f in data["files"]:
        assert len(f["by_conversation"]) == f["conversations"]
        assert sum(c["model_calls"] for c in f["by_conversation"]) == f["model_calls"]


def test_replay_json_on_the_bundled_examples():
    result = _run("replay", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    _check_report(data, 8_000)
    # the bundled conversations are longer than the default window: compaction must have done something
    assert data["peak_input_tokens_uncompacted"] > 8_000
    assert data["compactions"] > 0 and data["tokens_sent"] < data["tokens_sent_uncompacted"]


def test_replay_as_an_installed_command_prints_one_json_object():
    exe = Path(sys.executable).with_name("lc-compaction")
    proc = subprocess.run([str(exe), "replay", "--json", "--max-input-tokens", "6000"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # exactly one JSON document: json.loads rejects trailing text
    _check_report(data, 6_000)
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal


def test_replay_table_names_files_and_total():
    result = _run("replay")
    assert result.exit_code == 0
    for p in bundled_traces():
        assert p.name in result.stdout
    assert "total" in result.stdout and "window 8,000 tokens" in result.stdout


def test_replay_options_reach_the_policy(tmp_path: Path):
    shared = tmp_path / "t.jsonl"
    shared.write_text(bundled_traces()[1].read_text("utf-8"), encoding="utf-8")
    result = _run("replay", str(shared), "--json", "--max-input-tokens", "5000", "--trigger", "tokens=3000",
                  "--trigger", "messages=40,tokens=2000", "--keep", "messages=6", "--target", "tokens=1500",
                  "--reserve", "100", "--token-counter", "approximate")
    assert result.exit_code == 0, result.output
    p = json.loads(result.stdout)["policy"]
    assert p["trigger"] == [{"tokens": 3000}, {"messages": 40, "tokens": 2000}]
    assert p["keep"] == ["messages", 6] and p["target_tokens"] == 1500 and p["reserve"] == 100
    assert p["budget_tokens"] == 4900 and p["token_counter"] == "approximate"
    default = json.loads(_run("replay", str(shared), "--json", "--max-input-tokens", "5000").stdout)
    eager = json.loads(result.stdout)
    assert eager["tokens_sent"] < default["tokens_sent"]  # an earlier trigger and a lower target send less


def test_replay_plot_writes_a_png(tmp_path: Path):
    out = tmp_path / "context.png"
    result = _run("replay", "--plot", str(out), "--max-input-tokens", "4000")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    height, width = matplotlib.image.imread(out).shape[:2]
    assert width > 500 and height > 300


def test_malformed_trace_exits_2_naming_file_line_and_field(tmp_path: Path):
    good = bundled_traces()[0].read_text("utf-8").splitlines()[0]
    record = json.loads(good)
    ai = next(i for i, m in enumerate(record["messages"]) if m.get("tool_calls"))
    record["messages"][ai]["tool_calls"][0]["function"]["arguments"] = {"not": "a string"}
    bad = tmp_path / "broken.jsonl"
    bad.write_text(good + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["replay", str(bad)])
    assert result.exit_code == 2
    assert f"{bad} line 2: messages[{ai}].tool_calls[0].function.arguments: expected a string" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(("args", "words"), [
    (["--trigger", "tokens"], "--trigger"),
    (["--trigger", "size=3"], "--trigger"),
    (["--keep", "turns=two"], "--keep"),
    (["--keep", "turns=2.5"], "keep"),
    (["--max-input-tokens", "4000", "--reserve", "4000"], "reserve"),
    (["--max-input-tokens", "4000", "--target", "fraction=0.9"], "target"),
])
def test_bad_settings_exit_2_naming_the_setting(args, words):
    result = CliRunner().invoke(main, ["replay", *args])
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output


def test_version():
    from importlib.metadata import version

    result = _run("--version")
    assert result.exit_code == 0 and version("lc-compaction") in result.output


def test_compact_reads_openai_messages_from_stdin_and_prints_the_compacted_list():
    record = json.loads(bundled_traces()[1].read_text("utf-8").splitlines()[0])
    result = _run("compact", "--max-input-tokens", "4000", input=json.dumps(record["messages"]))
    assert result.exit_code == 0, result.output
    out = convert_to_messages(json.loads(result.stdout))
    given = convert_to_messages(record["messages"])
    assert len(out) < len(given)
    check_all_structural(given, out)
    assert same_message(given[0], out[0]) and out[0].content == given[0].content
    assert TiktokenCounter("gpt-4o").count_messages(out) <= 4000 - 400


def test_compact_keeps_langchain_format_and_ids(tmp_path: Path):
    from lc_compaction.traces import load_traces

    trace = load_traces(bundled_traces()[1])[0]
    src = tmp_path / "messages.json"
    src.write_text(json.dumps(messages_to_dict(trace.messages)), encoding="utf-8")
    result = _run("compact", str(src), "--max-input-tokens", "4000", "--report")
    assert result.exit_code == 0, result.output
    out = messages_from_dict(json.loads(result.stdout))
    ids = {m.id for m in trace.messages}
    assert out and all(m.id in ids for m in out if not is_dropped_marker(m))
    assert sum(map(is_dropped_marker, out)) == 1  # where exchanges were dropped (recognized by its text too)
    check_all_structural(trace.messages, out)
    report = json.loads(result.stderr)
    assert report["messages_after"] == len(out) and report["compacted"]


def test_compact_bad_input_exits_2():
    result = CliRunner().invoke(main, ["compact"], input='[{"role": "user", "content": 3}]')
    assert result.exit_code == 2 and "<stdin>: [0].content: expected a string" in result.output
    result = CliRunner().invoke(main, ["compact"], input='[{"role": "user"')
    assert result.exit_code == 2 and "not valid JSON" in result.output


def test_replay_reports_calls_and_tools_consistently_with_the_recording():
    """Per conversation, the JSON has one model call per recorded assistant message."""
    data = json.loads(_run("replay", "--json").stdout)
    from lc_compaction.traces import load_traces

    expected = {t.id: sum(isinstance(m, AIMessage) for m in t.messages) for t in load_traces(bundled_traces())}
    got = {c["id"]: c["model_calls"] for f in data["files"] for c in f["by_conversation"]}
    assert got == expected


def test_replay_with_the_summarizer_reports_identifiers_kept_without_the_guard():
    """--strategies summarize (the ledger with the fact guard): the JSON says how many identifiers the evicted
    messages held and how many the summary kept on its own; every call still fits and stays valid."""
    res = CliRunner().invoke(main, ["replay", "--strategies", "summarize", "--max-input-tokens", "8000", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["identifiers_evicted"] > 0
    assert 0 <= data["identifiers_kept"] <= data["identifiers_evicted"]
    assert data["invariant_violations"] == 0 and data["over_window_calls"] == 0
    assert data["tokens_sent"] < data["tokens_sent_uncompacted"]


def test_unknown_strategy_is_a_usage_error():
    res = CliRunner().invoke(main, ["replay", "--strategies", "truncate,shrink"])
    assert res.exit_code == 2 and "shrink" in res.output
