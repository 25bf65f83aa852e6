"""The `lc-compaction` command: the real click command through CliRunner, and once as the installed console
script in a subprocess. Expected figures are derived from the trace files themselves, never copied from output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.messages import (
    AIMessage,
    convert_to_messages,
    convert_to_openai_messages,
    messages_from_dict,
    messages_to_dict,
)

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
    assert "trigger over the budget (7,200 tokens)," in result.stdout  # the default: only when the call won't fit
    explicit = _run("replay", "--trigger", "fraction=0.8", "--trigger", "messages=40,tokens=2000")
    assert "trigger fraction=0.8 or messages=40,tokens=2000," in explicit.stdout


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


@pytest.mark.parametrize("trigger", [None, "tokens=3000"])
def test_replay_plot_draws_the_window_the_budget_and_a_given_trigger(tmp_path: Path, monkeypatch, trigger):
    """With the default policy (no trigger: compaction when over the budget) the budget line is drawn; a
    --trigger's tokens are drawn beside it. The figure is the one the command saves (Figure.savefig watched)."""
    from matplotlib.figure import Figure

    from lc_compaction import CompactionPolicy

    saved: list[Figure] = []
    real_savefig = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    args = ["replay", "--plot", str(tmp_path / "c.png"), "--max-input-tokens", "4000"]
    result = _run(*args, *(["--trigger", trigger] if trigger else []))
    assert result.exit_code == 0, result.output
    (ax,) = saved[0].axes
    levels = {ln.get_label(): ln.get_ydata()[0] for ln in ax.get_lines()
              if ln.get_label().startswith(("window", "budget", "trigger"))}
    budget = CompactionPolicy(max_input_tokens=4_000).budget_tokens()
    expected = {"window (4,000 tokens)": 4_000, f"budget ({budget:,} tokens; compaction when over it)": budget}
    if trigger:
        expected["trigger (3,000 tokens)"] = 3_000
    assert levels == expected
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert set(expected) <= legend


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
    (["--max-input-tokens", "4000", "--trigger", "fraction=0.8", "--target", "fraction=0.9"], "target"),
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


# ------------------------------------------------------------------ input formats, run as the installed command
def _cli(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    """The installed `lc-compaction` console script in a subprocess (bytes in, bytes out)."""
    exe = Path(sys.executable).with_name("lc-compaction")
    return subprocess.run([str(exe), *args], input=input, capture_output=True, timeout=180, check=False)


def _ids_in(value: object) -> list[str]:
    """Every string anywhere in a JSON value (the ids a report names, among other text)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _ids_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _ids_in(v)]
    return []


def test_compact_and_replay_on_non_utf8_input_exit_2_naming_line_and_byte(tmp_path: Path):
    line = json.loads(bundled_traces()[1].read_text("utf-8").splitlines()[0])
    good = json.dumps(line["messages"][:2], indent=1).encode("utf-8")
    bad = good.replace(b'"content"', b'"c\xe9ntent"', 3)  # a Latin-1 byte in the third "content"
    at = bad.index(b"\xe9")
    line_no, byte = bad.count(b"\n", 0, at) + 1, at - (bad.rfind(b"\n", 0, at) + 1)
    assert line_no > 1
    src = tmp_path / "latin1.json"
    src.write_bytes(bad)
    for args, given, name in [(("compact", str(src)), None, str(src)), (("compact", "-"), bad, "<stdin>"),
                              (("replay", str(src)), None, str(src))]:
        proc = _cli(*args, input=given)
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        assert err.strip() == f"Error: {name} line {line_no}: not UTF-8 text (byte {byte})"
        assert proc.stdout == b""


def test_compact_reads_trace_jsonl_and_writes_jsonl_that_replay_reads(tmp_path: Path):
    src = bundled_traces()[0]  # two conversations, one a line
    records = [json.loads(line) for line in src.read_text("utf-8").splitlines()]
    proc = _cli("compact", str(src), "--max-input-tokens", "3000")
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == len(records)
    counter = TiktokenCounter("gpt-4o")
    compacted = 0
    for record, out_line in zip(records, lines):
        out = json.loads(out_line)
        assert {k: v for k, v in out.items() if k != "messages"} == {k: v for k, v in record.items()
                                                                       if k != "messages"}
        given, messages = convert_to_messages(record["messages"]), convert_to_messages(out["messages"])
        check_all_structural(given, messages)
        assert counter.count_messages(messages) <= 3000 - 300
        # compacted: fewer tokens (a running tool loop keeps every message: its old results become notes)
        compacted += counter.count_messages(messages) < counter.count_messages(given)
    assert compacted >= 1
    # the output is trace JSONL again: replay reads it, one conversation a line, ids kept
    out_file = tmp_path / "compacted.jsonl"
    out_file.write_bytes(proc.stdout)
    replayed = _cli("replay", str(out_file), "--json", "--max-input-tokens", "3000")
    assert replayed.returncode == 0, replayed.stderr.decode()
    by_conv = json.loads(replayed.stdout)["files"][0]["by_conversation"]
    assert [c["id"] for c in by_conv] == [r["id"] for r in records]


def test_replay_reads_a_json_list_of_messages_like_the_same_conversation_as_jsonl(tmp_path: Path):
    record = json.loads(bundled_traces()[1].read_text("utf-8").splitlines()[0])
    as_list = tmp_path / "one.json"
    as_list.write_text(json.dumps(record["messages"], indent=2), encoding="utf-8")
    as_line = tmp_path / "one.jsonl"
    as_line.write_text(json.dumps({"messages": record["messages"]}) + "\n", encoding="utf-8")
    runs = [_cli("replay", str(p), "--json", "--max-input-tokens", "4000") for p in (as_list, as_line)]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr.decode()
    from_list, from_line = (json.loads(proc.stdout) for proc in runs)
    assert from_list["model_calls"] == sum(m["role"] == "assistant" for m in record["messages"])
    assert from_list["files"][0]["by_conversation"][0]["id"] == "one"
    for key in ("model_calls", "compactions", "tokens_sent_uncompacted", "tokens_sent", "peak_input_tokens"):
        assert from_list[key] == from_line[key], key


def test_compact_report_names_every_removed_message_once():
    from lc_compaction.traces import load_traces

    given = load_traces(bundled_traces()[1])[0].messages  # every message with an id
    proc = _cli("compact", "--max-input-tokens", "3000", "--report",
                input=json.dumps(messages_to_dict(given)).encode())
    assert proc.returncode == 0, proc.stderr.decode()
    out = messages_from_dict(json.loads(proc.stdout))
    report = json.loads(proc.stderr)
    removed = [m.id for m in given if m.id not in {o.id for o in out}]
    assert removed, "the window is small enough to remove messages"
    named = [i for a in report["actions"] if a["kind"] in ("removed", "summarized", "folded")
             for i in a["message_ids"]]
    assert sorted(named) == sorted(removed)  # each removed id in exactly one removal action
    truncated = {i for a in report["actions"] if a["kind"] == "truncated" for i in a["message_ids"]}
    everywhere = _ids_in(report)
    for i in removed:
        assert everywhere.count(i) == 1 + (i in truncated), i  # and nowhere else (truncated first: once more)


@pytest.mark.parametrize(("text", "words"), [
    (b"hello", "line 1: expected a JSON list of messages or JSONL"),
    (b"\n\n  [{\"role\": \"user\", \"content\": \"hi\"},\n {\"role\": \"user\", \"content\": 3}]",
     ": [1].content: expected a string"),
    (b"[{\"role\": \"user\", \"content\": \"hi\"},\n {\"role\": \"user\"", "line 2: not valid JSON"),
    (b"[{\"type\": \"human\", \"data\": {\"content\": \"hi\"}}, {\"type\": \"robot\", \"data\": {}}]",
     ": [1]: not a LangChain message dict"),
    (b"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n[1]\n", "line 2: expected a JSON object"),
    (b"  \n", "no conversations"),
])
def test_compact_and_replay_name_what_is_wrong_with_the_input(tmp_path: Path, text: bytes, words: str):
    src = tmp_path / "in.json"
    src.write_bytes(text)
    for proc in (_cli("compact", str(src)), _cli("replay", str(src))):
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        assert err.startswith(f"Error: {src}") and words in err and "Traceback" not in err


def test_compact_keeps_a_pretty_printed_trace_object_an_object(tmp_path: Path):
    record = json.loads(bundled_traces()[1].read_text("utf-8").splitlines()[0])
    src = tmp_path / "trace.json"
    src.write_text(json.dumps(record, indent=2), encoding="utf-8")
    proc = _cli("compact", str(src), "--max-input-tokens", "4000")
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["id"] == record["id"] and out["source"] == record["source"]
    given = convert_to_messages(record["messages"])
    check_all_structural(given, convert_to_messages(out["messages"]))
    assert len(out["messages"]) < len(record["messages"])


def test_a_utf8_byte_order_mark_is_read_like_plain_utf8():
    messages = [{"role": "user", "content": "hi"}]
    plain = _cli("compact", "-", input=json.dumps(messages).encode("utf-8"))
    marked = _cli("compact", "-", input=b"\xef\xbb\xbf" + json.dumps(messages).encode("utf-8"))
    assert plain.returncode == 0 and marked.returncode == 0, marked.stderr.decode()
    assert json.loads(marked.stdout) == json.loads(plain.stdout)


def test_a_cached_price_that_is_not_a_number_is_a_usage_error():
    proc = _cli("replay", "--cached-price", "nan", str(bundled_traces()[1]))
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr
    assert b"--cached-price" in proc.stderr and b"nan" in proc.stderr


# ------------------------------------------------------------------------------------------------ compact --repair
def _broken_conversation() -> list[dict]:
    """The bundled tau-bench conversation (about 10,000 tokens) with two faults: its first tool result is gone
    (a call without its result) and a later result answers a call that no assistant message made."""
    messages = json.loads(bundled_traces()[1].read_text("utf-8").splitlines()[0])["messages"]
    first = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    broken = messages[:first] + messages[first + 1:]
    later = max(i for i, m in enumerate(broken) if m["role"] == "tool")
    broken[later] = {**broken[later], "tool_call_id": "call_nobody_made"}
    return broken


def test_compact_repair_repairs_a_broken_history_as_the_policy_does(tmp_path: Path):
    from lc_compaction import CompactionPolicy, compact
    from lc_compaction.traces import parse_messages

    broken = _broken_conversation()
    src = tmp_path / "broken.json"
    src.write_text(json.dumps(broken), encoding="utf-8")
    refused = CliRunner().invoke(main, ["compact", str(src)])
    assert refused.exit_code == 2 and "dangling tool call" in refused.output and "--repair" in refused.output
    res = CliRunner().invoke(main, ["compact", "--repair", "--report", str(src)])
    assert res.exit_code == 0, res.output
    out = convert_to_messages(json.loads(res.stdout))
    check_all_structural(out, out)  # paired, ordered: a history a provider accepts
    report = json.loads(res.stderr)
    kinds = {r["kind"] for r in report["repairs"]}
    assert len(report["repairs"]) >= 2 and report["triggered"], report["repairs"]
    # what CompactionPolicy(repair=True) does with the same history, the CLI's other settings left as they are
    policy = CompactionPolicy(max_input_tokens=8_000, repair=True)
    expected = compact(parse_messages(broken, path=str(src), conversation_id="broken", prefix="",
                                      check_history=False), policy)
    assert json.loads(res.stdout) == json.loads(json.dumps(convert_to_openai_messages(expected.messages)))
    assert kinds == {r.kind for r in expected.repairs}


def test_compact_repair_repairs_a_broken_history_under_the_trigger_too(tmp_path: Path):
    """With a repair decision, compact() checks and repairs the new messages on every call, under the trigger
    too (a front door never passes a broken history on): the CLI prints the repaired history and reports the
    repairs, and compacts nothing."""
    from lc_compaction import CompactionPolicy, compact
    from lc_compaction.traces import parse_messages

    broken = _broken_conversation()
    src = tmp_path / "broken.json"
    src.write_text(json.dumps(broken), encoding="utf-8")
    res = CliRunner().invoke(main, ["compact", "--repair", "--report", "--max-input-tokens", "100000", str(src)])
    assert res.exit_code == 0, res.output
    out = convert_to_messages(json.loads(res.stdout))
    check_all_structural(out, out)  # paired, ordered: a history a provider accepts
    report = json.loads(res.stderr)
    assert not report["triggered"] and not report["actions"] and report["repairs"]
    expected = compact(parse_messages(broken, path=str(src), conversation_id="broken", prefix="",
                                      check_history=False), CompactionPolicy(max_input_tokens=100_000, repair=True))
    assert json.loads(res.stdout) == json.loads(json.dumps(convert_to_openai_messages(expected.messages)))
    assert "not repaired" not in res.stderr


# ------------------------------------------------------------------------------------- why a bill ratio is above 1
def _break_figures(conversations: list[dict]) -> tuple[int, int]:
    """(prefix breaks, calls after their conversation's first compaction), recomputed from the per-call records:
    a break is a call that does not resend all of the previous call's history."""
    breaks = after = 0
    for conv in conversations:
        calls = conv["calls"]
        breaks += sum(c["prefix_messages"] < p["messages_sent"] for p, c in zip(calls, calls[1:]))
        first = next((k for k, c in enumerate(calls) if c["compacted"]), None)
        after += 0 if first is None else len(calls) - first - 1
    return breaks, after


@pytest.mark.parametrize("args", [("6000",), ("4000",), ("6000", "--target", "fraction=0.75")])
def test_replay_table_says_why_a_bill_ratio_is_above_1_and_only_then(args: tuple[str, ...]):
    """The notes under the table explain every bill ratio above 1, and only those. A target of 75% of a
    6,000-token window leaves too little headroom on the bundled tau-bench conversations: the next calls compact
    again and break the cached prefix, so that file pays more than it saves (the default target, half the
    window, does not)."""
    data = json.loads(_run("replay", "--json", "--max-input-tokens", *args).stdout)
    table = _run("replay", "--max-input-tokens", *args).stdout
    notes = " ".join(table.split("peak input:", 1)[1].split())  # the text under the table, unwrapped
    rows = [(Path(f["path"]).name, f, f["by_conversation"]) for f in data["files"]]
    rows.append(("total", data, [c for f in data["files"] for c in f["by_conversation"]]))
    above = 0
    for name, figures, conversations in rows:
        assert (figures["prefix_breaks"], figures["calls_after_first_compaction"]) == _break_figures(conversations)
        said = f"{name}: bill ratio" in notes
        assert said == (figures["bill_ratio"] > 1), (name, figures["bill_ratio"])
        if said:
            above += 1
            assert f"{name}: bill ratio {figures['bill_ratio']:.3f}, above 1" in notes
            assert f"cached prefix {figures['prefix_breaks']} time" in notes
            assert f"{figures['calls_after_first_compaction']} of the {figures['model_calls']} calls" in notes
    if "--target" in args:  # one of the bundled pair pays more than it saves there
        assert above > 0
