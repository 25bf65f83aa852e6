"""The trace loader (lc_compaction.traces): real files load as the oracle's independent loader reads them, the
bundled examples are unchanged copies with their notices, and every kind of bad input names file, line, field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction.traces import TraceFormatError, bundled_traces, iter_traces, load_traces, parse_messages
from tests.oracle import load_traces as oracle_load_traces
from tests.oracle import trace_files
from tests.oracle.checks import same_message


def test_shared_traces_load_like_the_oracle_reads_them():
    ours = load_traces(trace_files())
    theirs = oracle_load_traces()
    assert [t.id for t in ours] == [conv_id for conv_id, _ in theirs]
    for trace, (conv_id, messages) in zip(ours, theirs):
        assert len(trace.messages) == len(messages), conv_id
        for i, (a, b) in enumerate(zip(messages, trace.messages)):
            assert same_message(a, b), f"{conv_id} message {i}"
            assert b.id == f"{conv_id}:{i}"
        assert trace.source and trace.license == "MIT"


def test_line_numbers_ids_and_metadata(tmp_path: Path):
    f = tmp_path / "convs.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "id": "mine"}]},
        {"id": 7, "source": "me", "license": "MIT", "extra_field": [1],
         "messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": [
             {"type": "text", "text": "look"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
                 {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "r1"},
             {"role": "tool", "tool_call_id": "c2", "content": "r2", "name": "g"},
             {"role": "system", "content": "a reminder mid-conversation"}]},
    ]
    f.write_text("\n" + json.dumps(lines[0]) + "\n\n" + json.dumps(lines[1]) + "\n", encoding="utf-8")
    first, second = load_traces(f)
    assert (first.id, first.line, second.id, second.line) == ("convs:2", 2, "7", 4)
    assert [m.id for m in first.messages] == ["convs:2:0", "mine"]
    assert (second.source, second.license, second.extra) == ("me", "MIT", {"extra_field": [1]})
    sys_msg, human, ai, t1, t2, late = second.messages
    assert isinstance(sys_msg, SystemMessage) and isinstance(human, HumanMessage) and isinstance(late, SystemMessage)
    assert human.content[1]["type"] == "image_url"
    assert isinstance(ai, AIMessage) and ai.content == ""
    assert [(tc["id"], tc["name"], tc["args"]) for tc in ai.tool_calls] == [("c1", "f", {"a": 1}), ("c2", "g", {})]
    assert isinstance(t2, ToolMessage) and (t2.tool_call_id, t2.name) == ("c2", "g")


def test_bundled_examples_are_unchanged_copies_with_their_notices():
    paths = bundled_traces()
    assert [p.name for p in paths] == ["agentdojo.jsonl", "tau_bench_airline.jsonl"]
    assert sum(p.stat().st_size for p in paths) < 300_000
    shared = {p.name: {json.loads(line)["id"]: line.rstrip("\n") for line in p.read_text("utf-8").splitlines()}
              for p in trace_files()}
    traces = load_traces(paths)
    assert len(traces) == 4
    for p in paths:
        for line in p.read_text("utf-8").splitlines():
            record = json.loads(line)
            assert shared[p.name][record["id"]] == line, f"{record['id']} differs from the shared copy"
    folder = paths[0].parent
    for name in ("LICENSE.agentdojo.txt", "LICENSE.tau_bench_airline.txt"):
        assert (folder / name).read_text("utf-8") == (trace_files()[0].parent / name).read_text("utf-8")
    readme = (folder / "README.md").read_text("utf-8")
    assert "sierra-research/tau-bench" in readme and "agentdojo" in readme and "MIT" in readme
    # one AgentDojo conversation is a long tool loop with parallel calls
    parallel = [t for t in traces if sum(len(m.tool_calls) > 1 for m in t.messages if isinstance(m, AIMessage)) >= 3]
    assert parallel and parallel[0].id.startswith("agentdojo/")


GOOD_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _conv(*messages) -> dict:
    return {"id": "x", "messages": [{"role": "user", "content": "hi"}, *messages]}


BAD_LINES = [
    # (line text, field named, words of the problem)
    ("{\"id\": \"x\", \"messages\": [", None, "not valid JSON"),
    ("[1, 2]", None, "expected a JSON object"),
    (json.dumps({"id": "x"}), "messages", "missing"),
    (json.dumps({"id": "x", "messages": "hi"}), "messages", "expected a list"),
    (json.dumps({"id": "x", "messages": []}), "messages", "empty"),
    (json.dumps({"id": ["x"], "messages": [{"role": "user", "content": "hi"}]}), "id", "expected"),
    (json.dumps(_conv({"role": "bot", "content": "x"})), "messages[1].role", "expected 'system'"),
    (json.dumps(_conv({"content": "x"})), "messages[1].role", "missing"),
    (json.dumps(_conv("just text")), "messages[1]", "expected an object"),
    (json.dumps(_conv({"role": "assistant", "content": 5})), "messages[1].content", "expected a string, a list"),
    (json.dumps(_conv({"role": "user", "content": None})), "messages[1].content", "null is allowed only"),
    (json.dumps(_conv({"role": "user", "content": [{"text": "no type"}]})), "messages[1].content[0]",
     "content block"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})),
     "messages[1].tool_calls[0].function.arguments", "expected a string, got an object"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})),
     "messages[1].tool_calls[0].function.arguments", "not valid JSON"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})),
     "messages[1].tool_calls[0].function.arguments", "expected a JSON object"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})),
     "messages[1].tool_calls[0].function.name", "missing"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [{"id": 3, "function": {}}]})),
     "messages[1].tool_calls[0].id", "expected a string"),
    (json.dumps(_conv({"role": "tool", "content": "r"})), "messages[1].tool_call_id", "required for a tool message"),
    (json.dumps(_conv({"role": "user", "content": "x", "tool_calls": [GOOD_CALL]})), "messages[1].tool_calls",
     "only an assistant message"),
    (json.dumps(_conv({"role": "tool", "tool_call_id": "zz", "content": "r"})), "messages[1].tool_call_id",
     "orphan tool result (tool_call_id 'zz')"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [GOOD_CALL]},
                      {"role": "user", "content": "next"})), "messages[1].tool_calls",
     "dangling tool call (tool_call_id 'c1')"),
    (json.dumps(_conv({"role": "assistant", "content": "", "tool_calls": [GOOD_CALL]},
                      {"role": "tool", "tool_call_id": "c1", "content": "r"},
                      {"role": "tool", "tool_call_id": "c1", "content": "again"})),
     "messages[3].tool_call_id", "duplicate tool result"),
    (json.dumps({"id": "x", "messages": [{"role": "assistant", "content": "I start"}]}), "messages[0].role",
     "first message not human"),
    (json.dumps(_conv({"role": "assistant", "content": "a", "id": "dup"},
                      {"role": "user", "content": "b", "id": "dup"})),
     "messages[2].id", "repeats messages[1].id"),
]


@pytest.mark.parametrize(("text", "field", "problem"), BAD_LINES, ids=[f"{b[1]}:{b[2]}" for b in BAD_LINES])
def test_bad_line_names_file_line_and_field(tmp_path: Path, text: str, field: str | None, problem: str):
    good = json.dumps(_conv({"role": "assistant", "content": "hello"}))
    f = tmp_path / "traces.jsonl"
    f.write_text(good + "\n" + text + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        load_traces(f)
    err = info.value
    assert (err.path, err.line, err.field) == (str(f), 2, field)
    assert problem in err.problem
    assert str(err).startswith(f"{f} line 2: " + (f"{field}: " if field else ""))


def test_not_utf8_and_empty_files(tmp_path: Path):
    f = tmp_path / "bin.jsonl"
    f.write_bytes(b"\n\xff\xfe{}\n")
    with pytest.raises(TraceFormatError, match=r"bin.jsonl line 2: not UTF-8 text") as info:
        load_traces(f)
    assert info.value.line == 2
    e = tmp_path / "empty.jsonl"
    e.write_text("\n\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"empty.jsonl: no conversations") as info:
        list(iter_traces(e))
    assert info.value.line is None


def test_parse_messages_of_a_bare_list_names_the_index():
    with pytest.raises(TraceFormatError) as info:
        parse_messages([{"role": "user", "content": "hi"}, {"role": "user", "content": 3}], path="in.json", prefix="")
    assert (info.value.path, info.value.line, info.value.field) == ("in.json", None, "[1].content")
    assert str(info.value).startswith("in.json: [1].content: expected a string")
    messages = parse_messages([{"role": "user", "content": "hi"}], conversation_id="c")
    assert messages[0].id == "c:0" and isinstance(messages[0], HumanMessage)


def test_the_format_is_detected_from_the_text(tmp_path: Path):
    from lc_compaction.traces import parse_trace_input

    messages = [{"role": "user", "content": "a\u2028b"}, {"role": "assistant", "content": "ok"}]
    line = json.dumps({"id": "c", "messages": messages}, ensure_ascii=False)  # a raw U+2028 inside a string
    jsonl = parse_trace_input((line + "\n\n" + line.replace('"c"', '"d"') + "\n").encode(), path="t.jsonl")
    assert (jsonl.format, [t.id for t in jsonl.traces], [t.line for t in jsonl.traces]) == ("jsonl", ["c", "d"], [1, 3])
    assert jsonl.traces[0].messages[0].content == "a\u2028b" and jsonl.records[1]["id"] == "d"
    pretty = parse_trace_input("\n" + json.dumps({"id": "c", "messages": messages}, indent=2), path="t.json")
    assert (pretty.format, pretty.traces[0].id, pretty.traces[0].line) == ("object", "c", 2)
    listed = parse_trace_input(json.dumps(messages).encode(), path="dir/conv.json")
    assert (listed.format, listed.traces[0].id, [m.id for m in listed.traces[0].messages]) == \
        ("list", "conv", ["conv:0", "conv:1"])
    assert listed.traces[0].message_format == "openai"
    from langchain_core.messages import messages_to_dict

    lc = parse_trace_input(json.dumps(messages_to_dict(listed.traces[0].messages)), path="<stdin>")
    assert lc.traces[0].message_format == "langchain"
    assert [(m.id, m.content) for m in lc.traces[0].messages] == [(m.id, m.content) for m in listed.traces[0].messages]
    f = tmp_path / "list.json"
    f.write_text(json.dumps(messages), encoding="utf-8")
    assert [t.id for t in load_traces(f)] == ["list"]
