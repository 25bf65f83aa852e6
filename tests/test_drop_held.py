"""A drop marker leaves out what a message left holds with the same attribution (`strategies.drop._marker`), and
reads a tool result left only when its tool is the source of one of the marker's identifiers: a tool result read
alone gives identifiers of its own tool only (`facts.source_alone`). That rule is checked here against what it
stands for, on the shared traces' tool results and on what compaction writes of them (truncation notes, cuts);
the marker's bytes themselves are checked by the replay and benchmark tests."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.facts import FactGuard, source_alone
from lc_compaction.traces import load_traces
from tests.shared_data import traces_dir


def test_a_tool_result_alone_gives_identifiers_of_its_tool() -> None:
    guard = FactGuard()
    checked = 0
    for path in sorted(traces_dir().glob("*.jsonl")):
        for trace in load_traces(path)[:6]:
            policy = CompactionPolicy(max_input_tokens=8_000, token_counter="approximate", repair=True,
                                      trigger=("fraction", 0.2), target=("fraction", 0.1))
            for m in [*trace.messages, *compact(trace.messages, policy).messages]:
                if not isinstance(m, ToolMessage):
                    continue
                source = source_alone(m)
                assert source is not None
                for ident in guard.extract_messages([m]):
                    assert ident.source == source, (m.id, ident)
                    checked += 1
    assert checked > 1_000


def test_source_alone_of_other_messages_is_unknown() -> None:
    summary = ToolMessage("x", tool_call_id="c", additional_kwargs={"lc_source": "summarization"})
    assert source_alone(summary) is None
    assert source_alone(HumanMessage("HAT170")) is None
    assert source_alone(AIMessage("HAT170")) is None
    assert source_alone(ToolMessage("HAT170", tool_call_id="c", name="get_reservation")) == "get_reservation"
    assert source_alone(ToolMessage("HAT170", tool_call_id="c")) == "tool"
