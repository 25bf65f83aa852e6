"""The benchmark (benchmarks/run.py) runs end to end, and its inputs and reference are what RESULTS.md says.

- The one command, at a tiny size, writes a RESULTS file with every section, every row of ours and of the
  anchors, the four targets, and the machine; nothing about speed is asserted (figures vary by machine).
- The joined session is the shared conversations in order (checked against the oracle's own loader), a valid
  history (the oracle's structural checks), with unique message and tool call ids across repeated joins.
- Every cell measures what it names at a size where the session repeats itself and holds a conversation whose
  tool results repeat: the steady-state rows compact nothing (no repeat is deduplicated on arrival), the firing
  rows compact; checked by the benchmark's own sampling loop (`timing.measure`) with the cells' own checks.
- The accuracy reference reproduces the OpenAI cookbook's published counts, and its "as ChatOpenAI sends"
  convention is what a real `ChatOpenAI` puts on the wire (captured by a local server on 127.0.0.1).
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage, convert_to_messages
from langchain_openai import ChatOpenAI

from benchmarks.accuracy import REFERENCES, reference_tokens
from benchmarks.cells import Situation, firing_cells, grown, settled, steady_cells
from benchmarks.run import FILLS
from benchmarks.session import build_session, call_points, cut_at, interleaved_records, pass_tag, typical_exchange
from benchmarks.timing import measure
from lc_compaction import CompactionPolicy, compact
from lc_compaction.dedup import duplicates
from lc_compaction._offline import ensure_encoding
from tests.agent_replay import ScriptedOpenAIServer
from tests.oracle import check_all_structural, load_traces, shared_dir, trace_files

ROOT = Path(__file__).resolve().parent.parent
TRACES = shared_dir() / "traces"

SECTIONS = ("## Machine", "## Targets (issue 7)", "## Histories", "## Steady state", "## Compaction when it fires",
            "### fill 0.85", "### fill 2.0", "## The bill under the provider's prompt cache (issue 13)",
            "## Counting accuracy", "## Where the time goes", "## How it is measured")
BILL_WINDOWS = (8_000, 32_000)
BILL_CONVERSATIONS = 3  # per file: the bill table replays 9 conversations here, all of them by default
OURS_STEADY = ("CompactionNode rewrite, exact",
               "CompactionNode rewrite, exact, first call of a run (history from a checkpoint)",
               "CompactionNode view, exact", "CompactionMiddleware rewrite, exact",
               "CompactionNode rewrite, approximate")
ANCHORS_STEADY = ("SummarizationMiddleware.before_model", "trim_messages (last, approximate)",
                  "ClearToolUsesEdit.apply (approximate)", "ContextEditingMiddleware.wrap_model_call",
                  "exact recount (TiktokenCounter, no cache)",
                  "LangGraph checkpoint load of the history (JsonPlusSerializer.loads_typed)")


def _conversation_count() -> int:
    return sum(1 for path in trace_files() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


RUN_GROUP = pytest.mark.xdist_group("benchmark_run")  # the tests sharing `run` go to one worker: it runs once


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[str, dict]:
    """The benchmark run the tests of `RUN_GROUP` read, made once per test session: with xdist, the first worker
    to need it makes it in the session's shared temporary folder under a lock and the others read it (the group
    alone did not keep them on one worker: each made its own, about 70 s each)."""
    if worker_id == "master":
        return _bench_run(tmp_path_factory.mktemp("bench"))
    shared = tmp_path_factory.getbasetemp().parent  # one folder for every worker of this session
    with open(shared / "bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = shared / "bench"
        if not (out / "results.json").exists():
            out.mkdir(exist_ok=True)
            return _bench_run(out)
    return (out / "RESULTS.md").read_text(encoding="utf-8"), json.loads((out / "results.json").read_text())


def _bench_run(out: Path) -> tuple[str, dict]:
    proc = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--sizes", "60", "--repeat", "1", "--warmup", "0", "--budget", "0",
         "--traces", str(TRACES), "--output", str(out / "RESULTS.md"), "--json", str(out / "results.json"),
         "--bill-windows", ",".join(str(w) for w in BILL_WINDOWS), "--identifier-windows", "4000",
         "--bill-conversations", str(BILL_CONVERSATIONS)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (out / "RESULTS.md").read_text(encoding="utf-8"), json.loads((out / "results.json").read_text())


@RUN_GROUP
def test_one_command_writes_every_section(run):
    markdown, _ = run
    positions = [markdown.find(s) for s in SECTIONS]
    assert -1 not in positions, [s for s, p in zip(SECTIONS, positions) if p == -1]
    assert positions == sorted(positions)
    for name in (*OURS_STEADY, *ANCHORS_STEADY):
        assert name in markdown


@RUN_GROUP
def test_every_row_was_measured_at_the_size_asked(run):
    _, results = run
    assert results["meta"]["sizes"] == [60]
    assert [h["size"] for h in results["histories"]] == [60]
    assert 50 <= results["histories"][0]["messages"] <= 60
    assert set(results["steady"]) == {*OURS_STEADY, *ANCHORS_STEADY}
    assert {n for n, row in results["steady"].items() if row["ours"]} == set(OURS_STEADY)
    for fill in ("0.85", "2.0"):
        assert len(results["firing"][fill]) == 4
        assert sum(row["ours"] for row in results["firing"][fill].values()) == 2
    for table in (results["steady"], *results["firing"].values()):
        for name, row in table.items():
            cell = row["by_size"]["60"]
            assert cell["n"] >= 1 and cell["median_ms"] > 0, name
            # the first call of a run is timed inside a compiled graph: no peak-memory figure of its own
            assert ("peak_kib" not in cell) if "first call of a run" in name else cell["peak_kib"] >= 0, name


@RUN_GROUP
def test_targets_and_machine_are_reported(run):
    markdown, results = run
    statuses = [t["status"] for t in results["targets"]]
    assert len(statuses) == 4
    assert statuses[:3] == ["n/a", "n/a", "n/a"]  # 2,000 and 8,000 messages were not run
    assert statuses[3] in ("met", "MISSED")
    meta = results["meta"]
    assert meta["cpu"] and meta["cores"] >= 1 and meta["python"].startswith(sys.version.split()[0])
    assert meta["packages"]["langchain-core"] != "not installed"
    assert meta["date"][:4] in markdown.split("## Machine")[0]


@RUN_GROUP
def test_bill_table_has_every_row_at_every_window_asked(run):
    markdown, results = run
    from benchmarks.bill import ROWS

    bill = results["bill"]  # the coding runs have tables of their own (issue 24)
    assert bill["conversations"] == BILL_CONVERSATIONS * len([f for f in trace_files()
                                                              if not f.name.startswith("swe_agent")])
    assert list(bill["windows"]) == [str(w) for w in BILL_WINDOWS]
    assert bill["cache_model"]["cached_price"] == 0.1 and bill["cache_model"]["min_tokens"] == 1_024
    for window, rows in bill["windows"].items():
        assert list(rows) == list(ROWS)
        for name, f in rows.items():
            assert f["calls"] > 0 and f["bill_ratio"] is not None and f["bill_ratio"] > 0, (window, name)
            assert f["back_to_back_compactions"] <= f["compactions"] <= f["calls"], (window, name)
            assert f["fitting_conversations_bill_raised"] <= f["fitting_conversations"] <= bill["conversations"]
            assert f"| {int(window):,} | " in markdown and name in markdown
    # the same calls are replayed by every row: their uncompacted bills agree
    for rows in bill["windows"].values():
        assert len({round(f["billed_input_uncompacted"], 1) for f in rows.values()}) == 1
    ids = results["identifiers"]
    assert list(ids["windows"]) == ["4000"] and ids["conversations"] == BILL_CONVERSATIONS
    for f in ids["windows"]["4000"].values():
        assert 0 <= f["identifiers_held"] <= f["identifiers_so_far"] and f["identifiers_so_far"] > 0
    assert "Goals of issue 13" in markdown


@RUN_GROUP
def test_accuracy_covers_every_shared_conversation(run):
    _, results = run
    rows = results["accuracy"]["rows"]
    assert len(rows) == 3 * len(REFERENCES)
    assert {r["conversations"] for r in rows} == {_conversation_count()}
    facts = results["accuracy"]["facts"]
    assert facts["messages"] == sum(len(m) for _, m in load_traces())


def test_session_joins_the_conversations_in_order():
    # the oracle's loader, file by file (sorted by name): (conversation id, messages)
    lists = [[messages for _, messages in load_traces([path])] for path in trace_files()]
    # round-robin across the files, first system prompt only
    order = []
    for i in range(max(len(x) for x in lists)):
        order += [x[i] for x in lists if i < len(x)]
    flat = [m for k, conv in enumerate(order) for m in conv if k == 0 or not isinstance(m, SystemMessage)]
    session = build_session(interleaved_records(TRACES), 2 * len(flat))
    assert [(m.type, m.text) for m in session[: len(flat)]] == [(m.type, m.text) for m in flat]
    # the second pass: the same without the system prompt, each tool result ending with the pass's tag
    second = [(m.type, m.text) for m in session[len(flat): 2 * len(flat) - 1]]
    assert second == [(m.type, m.text + pass_tag(1) if m.type == "tool" else m.text) for m in flat[1:]]
    assert sum(isinstance(m, SystemMessage) for m in session) == 1


def _repeating_session() -> tuple[list, int]:
    """A session of the first conversations (one of each file, and on until one whose tool results repeat, as an
    agent calling the same tool again), joined more than once: (session, messages in its first pass)."""
    records = interleaved_records(TRACES)
    repeats = next(i for i, r in enumerate(records) if duplicates(build_session([r], 1)))
    chosen = records[:max(len(trace_files()), repeats + 1)]
    session = build_session(chosen, 3 * sum(len(r.messages) for r in chosen))
    return session, next(i for i, m in enumerate(session) if m.id.startswith("1/"))


def test_every_cell_measures_what_it_names_where_the_session_repeats_itself():
    session, first_pass = _repeating_session()
    sit = Situation.cut(session, first_pass + first_pass // 2, typical_exchange(session), "gpt-4o")
    recorded = session[:len(sit.prefix)]
    assert any(m.id.startswith("1/") for m in recorded)  # the history holds the second pass
    assert duplicates(recorded)  # and tool results that repeat earlier ones, as recorded
    # as the state holds it: the repeats are notes already, and no new exchange repeats anything
    assert len(sit.prefix) == len(recorded) and sit.prefix != recorded
    assert duplicates(grown(sit, 3)) == {}
    cells = steady_cells(sit) + [c for fill in FILLS for c in firing_cells(sit, fill)]
    # the benchmark's own loop, every sample checked by its cell (steady: nothing compacted; firing: compacted)
    timings = measure([(c.setup, c.run) for c in cells], repeat=3, warmup=1, budget_s=0,
                      checks=[c.check for c in cells])
    assert [t.n for t in timings] == [3] * len(cells)


def test_settled_history_is_what_the_next_call_leaves_alone():
    session, first_pass = _repeating_session()
    history = session[:first_pass]
    out = settled(history, "gpt-4o")
    policy = CompactionPolicy(max_input_tokens=10**8, model_name="gpt-4o")
    assert out == compact(history, policy).messages and out != history  # the arrival edits, and only them
    assert compact(out, policy).messages is out  # nothing left to edit
    assert settled(out, "gpt-4o") is out


def test_benchmark_histories_are_valid_with_unique_ids():
    session = build_session(interleaved_records(TRACES), 6_500)  # two passes and more
    exchange = typical_exchange(session)
    assert isinstance(exchange[0], AIMessage) and exchange[0].tool_calls
    assert all(isinstance(m, ToolMessage) for m in exchange[1:])
    points = call_points(session)
    for size in (250, 3_000, 6_000):
        sit = Situation(session[: cut_at(points, size - len(exchange))], exchange, "gpt-4o")
        assert len(grown(sit, 0)) <= size
        for sample in (0, 1, 2):
            history = grown(sit, sample)
            check_all_structural(history, history)  # ids present and unique, tool pairing, order
            call_ids = [tc["id"] for m in history if isinstance(m, AIMessage) for tc in m.tool_calls]
            assert len(call_ids) == len(set(call_ids))
    previous, history = grown(sit, 0), grown(sit, 1)
    # consecutive samples are consecutive calls of one session: the previous history, the same objects, then one
    # exchange of new messages
    assert len(history) == len(previous) + len(exchange)
    assert all(a is b for a, b in zip(previous, history))
    assert not {m.id for m in previous} & {m.id for m in history[len(previous):]}


COOKBOOK = [  # OpenAI cookbook, How_to_count_tokens_with_tiktoken, section 6
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
                                  "into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch "
                                                         "base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to "
                                                              "do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                "deliverable."},
]


@pytest.mark.parametrize(("encoding", "published"), [("o200k_base", 124), ("cl100k_base", 129)])
def test_reference_reproduces_the_cookbook_published_counts(encoding, published):
    # "124 prompt tokens counted by the OpenAI API" for gpt-4o / gpt-4o-mini, 129 for gpt-4 / gpt-3.5-turbo
    for convention in REFERENCES:  # no tool calls: the conventions agree
        assert reference_tokens(COOKBOOK, ensure_encoding(encoding), convention) == published


@pytest.mark.parametrize("conv_id", ["tau-bench/gpt-4o-airline/task011-trial2",  # compact recorded arguments
                                     "agentdojo/gpt-3.5-turbo-0125/slack/user_task_13"])  # parallel calls
def test_chatopenai_convention_is_what_chatopenai_sends(conv_id):
    record = next(r for r in interleaved_records(TRACES) if r.id == conv_id)
    messages = convert_to_messages(record.messages)
    with ScriptedOpenAIServer() as server:
        ChatOpenAI(model="gpt-4o", base_url=server.base_url, api_key="sk-test", max_retries=0).invoke(messages)
    wire = server.requests[0]["messages"]
    enc = ensure_encoding("o200k_base")
    sent = reference_tokens(wire, enc, "name + args (recorded)")  # the arguments as they were on the wire
    assert reference_tokens(record.messages, enc, "name + args (as ChatOpenAI sends)") == sent
    assert [m["role"] for m in wire] == [m["role"] for m in record.messages]
    if conv_id.startswith("tau-bench"):  # the recording's compact JSON is re-serialized with spaces
        assert reference_tokens(record.messages, enc, "name + args (recorded)") < sent


def test_bill_only_writes_the_bill_tables_without_timing(tmp_path: Path):
    out = tmp_path / "BILL.md"
    proc = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--bill-only", "--bill-windows", "8000", "--identifier-windows", "",
         "--bill-conversations", "2", "--traces", str(TRACES), "--output", str(out),
         "--json", str(tmp_path / "b.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    markdown = out.read_text(encoding="utf-8")
    assert "| 8,000 | **default policy** |" in markdown and "Goals of issue 13" in markdown
    assert "## Steady state" not in markdown and "## Machine" not in markdown
    tables = json.loads((tmp_path / "b.json").read_text())
    files = trace_files()
    coding = [f for f in files if f.name.startswith("swe_agent")]
    assert coding  # the coding runs get their own tables, under both cache keys (issue 24)
    assert set(tables) == {"bill", "coding_bill", "coding_bill_whole", "commands"}
    assert tables["bill"]["conversations"] == 2 * (len(files) - len(coding))
    assert tables["coding_bill"]["conversations"] == tables["coding_bill_whole"]["conversations"] == 2
    assert tables["coding_bill_whole"]["cache_model"]["whole_messages"] is True
    assert "Goals of issue 24" in markdown and "Whole messages as the cache key" in markdown


def test_the_dense_shapes_are_valid_histories_and_their_script_runs():
    """benchmarks/dense.py (issue 25): its shapes are histories a provider accepts, with unique ids, and its command
    loads (an import it lost would only show when someone runs it)."""
    from click.testing import CliRunner

    from benchmarks import dense

    for history in (dense.orders(turns=3, per_page=20), dense.records(), dense.coding(), dense.fuzzed(0)):
        check_all_structural(history, history)
        assert len({m.id for m in history}) == len(history)
    result = CliRunner().invoke(dense.main, ["--help"])
    assert result.exit_code == 0 and "--traces" in result.output
