"""Benchmark lc-compaction side by side with LangChain's anchors and regenerate ``benchmarks/RESULTS.md``.

    scripts/dev python benchmarks/run.py                     # the full run (about 2-3 minutes), writes RESULTS.md
    scripts/dev python benchmarks/run.py --sizes 250,2000 --repeat 5 --output /tmp/R.md --json /tmp/r.json
    scripts/dev python benchmarks/run.py --bill-windows 8000,32000 --bill-conversations 5   # a smaller bill table

What is measured (details in each module's docstring):

- ``session.py``: long histories (250, 1,000, 2,000, 8,000 messages) joined from the shared conversations;
- ``cells.py``: per model call, our node / middleware in the steady state and our compaction when it fires,
  against ``SummarizationMiddleware.before_model``, ``trim_messages``, ``ClearToolUsesEdit.apply``,
  ``ContextEditingMiddleware`` and an exact tiktoken recount;
- ``timing.py``: medians of ``time.perf_counter_ns`` samples after warm-ups, and peak memory with tracemalloc;
- ``accuracy.py``: token-count errors against a tiktoken count of the OpenAI chat format;
- ``profiling.py``: cProfile of our steady state at the largest size and of a compaction at 2,000 messages;
- ``bill.py``: the input bill of every shared conversation replayed under the provider's prompt cache at windows
  of 8k to 64k tokens, ours beside ``ContextEditingMiddleware`` and ``SummarizationMiddleware``; and the
  identifiers of the history still sent, on the tau-bench conversations;
- ``results.py``: the targets and the Markdown of RESULTS.md; ``machine.py``: the machine and versions.

Nothing here asserts speed; the targets are reported as met or missed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable as the `benchmarks` package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from tqdm import tqdm

from benchmarks.accuracy import accuracy
from benchmarks.bill import (
    BILL_WINDOWS,
    COMMAND_WINDOWS,
    IDENTIFIER_WINDOWS,
    bill_benchmark,
    command_benchmark,
    identifier_benchmark,
    limited,
)
from benchmarks.cells import HEADLINE, Cell, Situation, firing_cells, headline_cell, steady_cells
from benchmarks.machine import machine_info
from benchmarks.profiling import profile_calls
from benchmarks.results import bill_targets, coding_targets, render, render_bill, summary, targets
from benchmarks.session import (
    REPO_ROOT,
    build_session,
    interleaved_records,
    trace_files,
    typical_exchange,
)
from benchmarks.timing import flush_caches, measure, paired_ratio, peak_memory
from langchain_core.messages.utils import count_tokens_approximately
from lc_compaction import TiktokenCounter
from lc_compaction.billing import PromptCache
from tests.shared_data import traces_dir as default_traces_dir

DEFAULT_SIZES = (250, 1_000, 2_000, 8_000)
"""History sizes (messages) of the issue."""

FILLS = (0.85, 2.0)
"""History size over the window in the firing rows: just over their 80% trigger (`cells.FIRING_TRIGGER`), and twice
the window."""

PROFILE_SIZE = 2_000
"""Size (messages) at which a firing compaction is profiled (the size of the 20 ms target)."""


def _sizes(value: str) -> list[int]:
    try:
        sizes = sorted({int(v.replace("_", "")) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"expected comma-separated message counts, got {value!r}") from None
    if not sizes or sizes[0] < 10:
        raise click.BadParameter(f"sizes must be at least 10 messages each, got {value!r}")
    return sizes


def _load() -> list[float] | None:
    """The 1, 5 and 15-minute load averages (runnable processes), or None where the OS does not say."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _memory_bytes(result: Any) -> int | None:
    """Bytes of the JSON our front door stores in graph state between calls (None for other results)."""
    memory = None
    if isinstance(result, dict) and isinstance(result.get("compaction"), dict):
        memory = result["compaction"]
    command = getattr(result, "command", None)
    if command is not None and isinstance(getattr(command, "update", None), dict):
        memory = command.update.get("compaction")
    return len(json.dumps(memory, separators=(",", ":"))) if memory is not None else None


def _run_group(cells: list[Cell], *, repeat: int, warmup: int, budget_s: float, memory: bool
               ) -> list[dict[str, Any]]:
    """Time the cells of one group (round-robin), check each last result, then measure peak memory.

    Each row also holds ``ratio_to_ours``: the median over rounds of the cell's time over our headline row's
    time in the same round (`timing.paired_ratio`), when the group has the headline row."""
    timings = measure([(c.setup, c.run) for c in cells], repeat=repeat, warmup=warmup, budget_s=budget_s,
                      checks=[c.check for c in cells])
    ours = next((t for c, t in zip(cells, timings) if c.name == HEADLINE), None)
    out = []
    for cell, timing in zip(cells, timings):
        row: dict[str, Any] = {"median_ms": timing.median_ms, "min_ms": timing.min_ms, "n": timing.n}
        if ours is not None and not cell.ours:
            row["ratio_to_ours"] = paired_ratio(timing, ours)
        state = _memory_bytes(timing.last)
        if state is not None:
            row["state_bytes"] = state
        if memory and not cell.self_timed:
            # the next sample in sequence: a chained setup continues from the last timed call
            row["peak_kib"] = peak_memory(cell.setup, cell.run, index=warmup + timing.n) / 1024
        out.append(row)
    return out


def _conditions(situations: dict[int, Situation], *, repeat: int, warmup: int, budget_s: float
                ) -> dict[str, Any]:
    """Our headline steady state at every size in one round-robin group with nothing else in between, twice:
    "warm" (each call finds what the previous calls left in the CPU caches) and "cold" (the caches are flushed
    before every call, `timing.flush_caches`). Every size meets the same conditions, which the main table cannot
    give: there the anchors between our samples walk the whole history and evict more of the caches the longer
    it is. ``{condition: {"by_size": {size: {"median_ms", "min_ms", "n"}}, "ratio": median over rounds of the
    largest size's time over the smallest's}}``."""
    sizes = sorted(situations)
    out: dict[str, Any] = {}
    for condition, before_each in (("warm", None), ("cold", flush_caches)):
        cells = [headline_cell(situations[s]) for s in sizes]
        timings = measure([(c.setup, c.run) for c in cells], repeat=repeat, warmup=warmup, budget_s=budget_s,
                          checks=[c.check for c in cells], before_each=before_each)
        out[condition] = {"by_size": {str(s): {"median_ms": t.median_ms, "min_ms": t.min_ms, "n": t.n}
                                      for s, t in zip(sizes, timings)},
                          "ratio": paired_ratio(timings[-1], timings[0])}
    return out


def _situation(session: list, exchange: list, size: int, model_name: str) -> Situation:
    """The history of ``size`` messages (`cells.Situation.cut`)."""
    try:
        return Situation.cut(session, size, exchange, model_name)
    except ValueError:
        raise click.ClickException(f"size {size}: no model call point early enough; use a larger size") from None


def _windows(value: str) -> list[int]:
    try:
        windows = sorted({int(v.replace("_", "")) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"expected comma-separated windows in tokens, got {value!r}") from None
    if any(w < 1_000 for w in windows):
        raise click.BadParameter(f"windows must be at least 1,000 tokens each, got {value!r}")
    return windows


CODING_FILE_PREFIX = "swe_agent"
"""Trace files of coding-agent runs (one request, a hundred tool steps): their bill gets its own tables (issue 24),
beside the other conversations'."""


def bill_tables(traces: Path, *, model_name: str, bill_windows: list[int] | None = None,
                identifier_windows: list[int] | None = None, bill_conversations: int | None = None
                ) -> dict[str, Any]:
    """`{"bill": ..., "identifiers": ...}` (`bill.bill_benchmark`, `bill.identifier_benchmark`; a table whose
    window list is empty is left out; None: the default windows)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bill-") as tmp:
        paths = limited(trace_files(traces), bill_conversations, Path(tmp))
        bill_windows = list(BILL_WINDOWS) if bill_windows is None else bill_windows
        identifier_windows = list(IDENTIFIER_WINDOWS) if identifier_windows is None else identifier_windows
        coding = [p for p in paths if p.name.startswith(CODING_FILE_PREFIX)]
        others = [p for p in paths if p not in coding]
        if bill_windows and others:
            out["bill"] = bill_benchmark(others, windows=bill_windows, model_name=model_name)
        if bill_windows and coding:  # issue 24: the coding runs beside the others, under both cache keys
            out["coding_bill"] = bill_benchmark(coding, windows=bill_windows, model_name=model_name)
            out["coding_bill_whole"] = bill_benchmark(coding, windows=bill_windows, model_name=model_name,
                                                      cache=PromptCache(whole_messages=True))
            out["commands"] = command_benchmark(coding, windows=[w for w in COMMAND_WINDOWS if w in bill_windows]
                                                or list(COMMAND_WINDOWS), model_name=model_name)
        if identifier_windows:
            out["identifiers"] = identifier_benchmark(paths, windows=identifier_windows, model_name=model_name)
    return out


def run_benchmark(*, sizes: list[int], repeat: int, warmup: int, budget_s: float, traces: Path, model_name: str,
                  memory: bool = True, profile: bool = True, progress: bool = True,
                  bill_windows: list[int] | None = None, identifier_windows: list[int] | None = None,
                  bill_conversations: int | None = None) -> dict[str, Any]:
    """Run every measurement and return the results as plain JSON data (what `results.render` writes).

    `bill_windows` / `identifier_windows` (tokens; default `bill.BILL_WINDOWS` / `bill.IDENTIFIER_WINDOWS`, an
    empty list skips the table) and `bill_conversations` (the first N conversations of each file; default all)
    shape the bill and identifier tables.

    Raises:
        FileNotFoundError: no trace file in ``traces``.
        ValueError: a trace is not valid (naming its file and line).
        AssertionError: a measured call did not behave as its situation requires (it compacted in the steady
            state, or did not compact when firing): the figures would be meaningless.
    """
    started = time.perf_counter()
    exact_counter = TiktokenCounter(model_name)
    records = interleaved_records(traces)
    session = build_session(records, max(sizes) + 200)
    exchange = typical_exchange(session)
    situations = {size: _situation(session, exchange, size, model_name) for size in sizes}
    results: dict[str, Any] = {
        "meta": {**machine_info(), "load_before": _load(), "sizes": sizes, "repeat": repeat, "warmup": warmup,
                 "budget_s": budget_s,
                 "traces": str(traces), "conversations": len(records), "model_name": model_name,
                 "exchange": {"messages": len(exchange), "tool_calls": len(exchange[0].tool_calls),  # type: ignore[attr-defined]
                              "tokens": exact_counter.count_messages(exchange) - exact_counter.reply_overhead,
                              "first_id": exchange[0].id}},
        "histories": [], "steady": {}, "firing": {str(f): {} for f in FILLS}, "profiles": [],
    }
    for size, sit in situations.items():
        h = sit.history
        results["histories"].append({
            "size": size, "messages": sit.messages,
            "tool_messages": sum(m.type == "tool" for m in h), "user_messages": sum(m.type == "human" for m in h),
            "tokens_exact": exact_counter.count_messages(h),
            "tokens_count_tokens_approximately": count_tokens_approximately(h),
        })
    plan = [(size, "steady", None) for size in sizes] + [(size, "firing", f) for size in sizes for f in FILLS]
    bar = tqdm(plan, desc="benchmark", unit="group", disable=not progress, file=sys.stderr)
    for size, kind, fill in bar:
        sit = situations[size]
        bar.set_postfix_str(f"{kind} {size}" + (f" fill {fill}" if fill else ""))
        cells = steady_cells(sit) if kind == "steady" else firing_cells(sit, fill)  # type: ignore[arg-type]
        table = results["steady"] if kind == "steady" else results["firing"][str(fill)]
        figures = _run_group(cells, repeat=repeat if kind == "steady" else max(1, repeat // 3),
                             warmup=warmup if kind == "steady" else 1, budget_s=budget_s, memory=memory)
        for cell, row in zip(cells, figures):
            table.setdefault(cell.name, {"ours": cell.ours, "by_size": {}})["by_size"][str(size)] = row
    if len(sizes) > 1:
        results["conditions"] = _conditions(situations, repeat=2 * repeat, warmup=warmup, budget_s=budget_s)
    if profile:
        largest = situations[max(sizes)]
        node = headline_cell(largest)
        results["profiles"].append({"title": f"{node.name}, steady state, {largest.messages:,} messages",
                                    **profile_calls(node.setup, node.run, calls=10)})
        psize = min(sizes, key=lambda s: abs(s - PROFILE_SIZE))
        fire = firing_cells(situations[psize], FILLS[0])[0]
        title = f"{fire.name}, firing at fill {FILLS[0]}, {situations[psize].messages:,} messages"
        results["profiles"].append({"title": title,
                                    **profile_calls(fire.setup, fire.run, calls=3)})
    results.update(bill_tables(traces, model_name=model_name, bill_windows=bill_windows,
                               identifier_windows=identifier_windows, bill_conversations=bill_conversations))
    rows, facts = accuracy(records, model_name)
    results["accuracy"] = {"facts": facts, "rows": [
        {"counter": r.counter, "reference": r.reference, "median": r.median, "median_abs": r.median_abs,
         "worst": r.worst, "within_1pct": r.within_1pct, "conversations": len(r.errors)} for r in rows]}
    results["targets"] = targets(results)
    results["meta"]["elapsed_s"] = time.perf_counter() - started
    results["meta"]["load_after"] = _load()
    return results


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), show_default=True,
              help="History sizes, messages, comma-separated.")
@click.option("--repeat", default=21, show_default=True, type=click.IntRange(1),
              help="Timed samples per steady-state cell at most (a third of it, at least 1, when firing).")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(0),
              help="Discarded samples before timing each steady-state cell (1 when firing).")
@click.option("--budget", "budget_s", default=2.0, show_default=True, type=click.FloatRange(0),
              help="Seconds per cell after which sampling stops (at least 3 samples are always taken).")
@click.option("--traces", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of *.jsonl recorded conversations [default: the shared data's traces/: "
                   "$LC_COMPACTION_SHARED, else ../shared, else the copy vendored in tests/data].")
@click.option("--model-name", default="gpt-4o", show_default=True, help="Chooses the tiktoken encoding.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The Markdown report. [default: benchmarks/RESULTS.md, or benchmarks/BILL.md with --bill-only]")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the raw results as JSON here.")
@click.option("--no-memory", is_flag=True, help="Skip the tracemalloc pass (peak memory).")
@click.option("--no-profile", is_flag=True, help="Skip the cProfile pass.")
@click.option("--bill-windows", default=",".join(str(w) for w in BILL_WINDOWS), show_default=True,
              help="Windows (tokens) of the bill table, comma-separated; empty to skip it.")
@click.option("--identifier-windows", default=",".join(str(w) for w in IDENTIFIER_WINDOWS), show_default=True,
              help="Windows (tokens) of the identifiers table (tau-bench), comma-separated; empty to skip it.")
@click.option("--bill-conversations", type=click.IntRange(1), default=None,
              help="Replay only the first N conversations of each file in the bill and identifier tables "
                   "[default: all].")
@click.option("--bill-only", is_flag=True,
              help="Only the bill and identifier tables (no timing: their figures do not depend on the machine).")
def main(sizes: str, repeat: int, warmup: int, budget_s: float, traces: Path | None, model_name: str,
         output: Path | None, json_path: Path | None, no_memory: bool, no_profile: bool, bill_windows: str,
         identifier_windows: str, bill_conversations: int | None, bill_only: bool) -> None:
    """Benchmark compaction per model call against LangChain's anchors; write the Markdown report."""
    warnings.simplefilter("ignore")  # deprecation notices of the anchors would drown the progress bar
    traces_dir = traces or default_traces_dir()
    if not traces_dir.is_dir():
        raise click.ClickException(f"no traces folder at {traces_dir}; give --traces DIR")
    command = "python benchmarks/run.py" + "".join(f" {a}" for a in sys.argv[1:])
    windows = {"bill_windows": _windows(bill_windows) if bill_windows.strip() else [],
               "identifier_windows": _windows(identifier_windows) if identifier_windows.strip() else []}
    if bill_only:
        output = output or REPO_ROOT / "benchmarks" / "BILL.md"
        started = time.perf_counter()
        tables = bill_tables(traces_dir, model_name=model_name, bill_conversations=bill_conversations, **windows)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(render_bill(tables, command=command), encoding="utf-8")
        if json_path is not None:
            json_path.write_text(json.dumps(tables, indent=1), encoding="utf-8")
        click.echo("\n".join(f"{t['status']:>7}  {t['target']}: {t['measured']}"
                              for t in [*bill_targets(tables), *coding_targets(tables)]))
        click.echo(f"wrote {output} ({time.perf_counter() - started:.0f} s)")
        return
    output = output or REPO_ROOT / "benchmarks" / "RESULTS.md"
    results = run_benchmark(sizes=_sizes(sizes), repeat=repeat, warmup=warmup, budget_s=budget_s,
                            traces=traces_dir, model_name=model_name, memory=not no_memory,
                            profile=not no_profile, progress=sys.stderr.isatty(),
                            bill_conversations=bill_conversations, **windows)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(results, command=command), encoding="utf-8")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
    click.echo(summary(results))
    click.echo(f"wrote {output} ({results['meta']['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
