"""The recall exam's mechanics (`benchmarks/recall_exam.py`, issue 22), on small conversations; nothing timed.

- A constructed conversation whose early tool result holds an order code and whose user planted a correction:
  compaction removes the code (checked on the sent messages by a plain substring test, not the exam's rule), the
  exam says it is not in the context and finds it by search + recall; the recall tools' own answers hold it. The
  correction stays in the drop marker's said line (the exam then counts it in the context), or is found the same
  way once removed.
- A conversation that never compacts: its facts count as found in the context, and no search is made.
- The exam's driver (the node invoked and its update applied with `add_messages`) records in the store exactly
  what the same node records inside a compiled `StateGraph` with the store.
- The figures are computed: an empty store makes every lookup a "not recorded" miss; the report's shares are
  those of the rows; and they change when the search finds nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore

import benchmarks.recall_exam as exam
from benchmarks.recall_exam import Fact, ask, exam_conversation, figures, markdown, pick_facts, plant_correction
from lc_compaction.integrations import CompactionNode, recall_message, recall_tool_result, search_compacted_history
from lc_compaction.integrations.recall import read_recall
from lc_compaction.integrations.search import search_history
from lc_compaction.offload import offload_namespace
from tests.shared_data import traces_dir

CODE = "QX7731K"
PATH = "/srv/billing/ledger_config.yaml"
WINDOW = 2_000


def _conversation(steps: int, filler: int, turns: int = 3) -> list[BaseMessage]:
    """`turns` user requests, each a tool loop of `steps` lookups (results of `filler` words and 12 order codes of
    their own, so that the drop marker's bounded list of identifiers keeps only the latest), then an answer. The
    first result holds `CODE` and `PATH`; the second user turn gets the planted correction."""
    out: list[BaseMessage] = [SystemMessage("You are a billing agent.", id="s")]
    for turn in range(turns):
        out.append(HumanMessage(f"Please reconcile the invoices of region {turn}.", id=f"u{turn}"))
        for k in range(steps):
            cid = f"c{turn}-{k}"
            call = {"name": "lookup", "args": {"q": f"batch {turn}-{k}"}, "id": cid, "type": "tool_call"}
            out.append(AIMessage("", id=f"a{turn}-{k}", tool_calls=[call]))
            codes = " ".join(f"ZB{turn}{k:02d}{j:02d}X" for j in range(12))
            body = f"orders {codes}. " + " ".join(["ledger entry reconciled"] * filler)
            if turn == 0 and k == 0:
                body = f"order code {CODE} stored in {PATH} for the March batch. " + body
            out.append(ToolMessage(body, tool_call_id=cid, id=f"t{turn}-{k}", name="lookup"))
        out.append(AIMessage(f"Region {turn} reconciled.", id=f"r{turn}"))
    return out


def test_a_removed_fact_is_not_in_the_context_and_search_then_recall_finds_it() -> None:
    recording = _conversation(steps=6, filler=60)
    store = InMemoryStore()
    sent_last: list[list[BaseMessage]] = []
    result = exam_conversation(("conv", recording), WINDOW, store, on_call=lambda i, sent: sent_last.append(sent))
    assert result["compactions"] > 0
    sent = "\n".join(str(m.content) for m in sent_last[-1])
    rows = {r["value"]: r for r in result["last"]}
    assert CODE in rows and PATH in rows, rows.keys()
    planted = exam.correction("conv")[2]
    if CODE in sent:
        pytest.fail(f"{CODE} is still sent: the conversation does not test removal")
    for value in (CODE, planted):
        row = rows[value]
        if value in sent:  # the correction: a drop marker's said line keeps it word for word (issue 20, class 8)
            assert value == planted and row["in_context"] is True and row["queries"] == {}
            continue
        assert row["in_context"] is False
        assert row["queries"]["value"]["found"] is True and row["queries"]["value"]["recalls"] >= 1
    assert rows[CODE]["origin"] == "tool result" and rows[CODE]["queries"]["call"]["query"] == "lookup batch 0-0"
    assert rows[planted]["origin"] == "correction"
    # the tools' own answers hold it (not only the exam's bookkeeping)
    text, artifact = search_history(store, "conv", CODE)
    assert artifact["hits"] and artifact["hits"][0]["key"] == "c0-0" and CODE in text
    assert CODE in read_recall(store, "conv", "c0-0")[0]
    assert {r["value"] for r in result["removed"]} >= {CODE} | ({planted} if planted not in sent else set())


def test_a_fact_that_stays_in_context_is_found_without_search(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = _conversation(steps=2, filler=5)
    searched: list[str] = []
    real = exam.search_history
    monkeypatch.setattr(exam, "search_history", lambda *a, **k: (searched.append(a[2]), real(*a, **k))[1])
    result = exam_conversation(("short", recording), 64_000, InMemoryStore())
    assert result["compactions"] == 0
    rows = {r["value"]: r for r in result["last"]}
    assert rows[CODE]["in_context"] is True and rows[CODE]["queries"] == {}
    assert searched == [] and result["removed"] == []
    f = figures(result["last"])
    assert f["in_context"] == f["facts"] == len(result["last"]) and f["by_kind"]["value"]["share"] == 1.0


def test_facts_come_from_early_user_turns_and_tool_results_and_the_correction_is_planted() -> None:
    recording = _conversation(steps=3, filler=5)
    planted, fact = plant_correction(recording, "conv")
    assert fact is not None and fact.origin == "correction"
    assert exam.correction("conv")[0] in planted[fact.source_index].content
    assert isinstance(planted[fact.source_index], HumanMessage) and planted[fact.source_index].id == "u1"
    facts = pick_facts(planted)
    assert facts and all(f.source_index < len(planted) // 2 for f in facts)
    assert {f.value for f in facts} >= {CODE, PATH}
    one_turn = _conversation(steps=3, filler=5, turns=1)
    planted1, fact1 = plant_correction(one_turn, "solo")
    assert len(planted1) == len(one_turn) + 1 and isinstance(planted1[fact1.source_index], HumanMessage)
    assert isinstance(planted1[fact1.source_index - 1], ToolMessage), "after the first tool exchange"


def test_an_empty_store_makes_every_lookup_a_not_recorded_miss() -> None:
    fact = Fact(CODE, "identifier", "tool result", "t0", 3, (CODE.casefold(),), "order code", "lookup batch 0")
    for query in fact.queries().values():
        a = ask(InMemoryStore(), "nobody", fact, query)
        assert not a.found and a.miss == "not recorded"


def _graph_store(recording: list[BaseMessage]) -> InMemoryStore:
    """The same conversation through the node inside a compiled StateGraph with the store (offload=True)."""
    store = InMemoryStore()
    node = CompactionNode(max_input_tokens=WINDOW, model_name="gpt-4o", offload=True,
                          tools=[search_compacted_history, recall_tool_result, recall_message])
    replies: list[BaseMessage] = []

    def model(state: Any) -> dict[str, Any]:
        return {"messages": [replies.pop(0)]}

    builder = StateGraph(MessagesState)
    builder.add_node("compact", node)
    builder.add_node("model", model)
    builder.add_edge(START, "compact")
    builder.add_edge("compact", "model")
    builder.add_edge("model", END)
    from langgraph.checkpoint.memory import InMemorySaver
    graph = builder.compile(checkpointer=InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "conv"}}
    end = 0
    for i, m in enumerate(recording):
        if isinstance(m, AIMessage):
            replies.append(m)
            graph.invoke({"messages": recording[end:i]}, config)
            end = i + 1
    return store


def _records(store: InMemoryStore) -> dict[tuple, Any]:
    return {(tuple(item.namespace), item.key): item.value
            for kind in ("tool_result", "message", "compaction")
            for item in store.search(offload_namespace("conv", kind), limit=10_000)}


def test_the_driver_records_what_the_node_records_in_a_compiled_graph() -> None:
    recording, _ = plant_correction(_conversation(steps=5, filler=60), "conv")
    driven = InMemoryStore()
    exam_conversation(("conv", _conversation(steps=5, filler=60)), WINDOW, driven)
    in_graph = _records(_graph_store(recording))
    assert in_graph and _records(driven) == in_graph


def test_the_figures_are_computed_from_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = sorted(traces_dir().glob("*.jsonl"))
    swe = [p for p in paths if p.name.startswith("swe_agent")]
    result = exam.recall_exam(swe, windows=(4_000,), conversations=1)
    g = result["windows"]["4000"]["all"]["last"]
    assert g["facts"] > 0 and g["in_context"] < g["facts"], "the coding run compacts at 4k"
    text = markdown(result, command="test", machine={"cpu": "x", "usable_cores": 1, "python": "3", "date": "d"},
                    seconds=1.0)
    assert f"{100 * g['in_context_share']:.1f}% ({g['in_context']})" in text
    assert f"{100 * g['by_kind']['value']['share']:.1f}%" in text
    # a search that finds nothing: the shares fall to the context's, and the misses say why
    monkeypatch.setattr(exam, "search_history", lambda *a, **k: ("", {"hits": []}))
    blind = exam.recall_exam(swe, windows=(4_000,), conversations=1)["windows"]["4000"]["all"]["last"]
    assert blind["facts"] == g["facts"] and blind["in_context"] == g["in_context"]
    assert blind["by_kind"]["value"]["found"] == blind["in_context"] < g["by_kind"]["value"]["found"]
    assert set(blind["by_kind"]["value"]["misses"]) <= {"no hit", "not recorded"}
