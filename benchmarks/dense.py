"""Identifier-dense histories and arrival edits: what one compaction costs when tool results hold many distinct
identifiers, and what a call with only an arrival edit costs as the history grows (issue 25).

    scripts/dev python benchmarks/dense.py                      # all of it (a few minutes on 2 cores)
    scripts/dev python benchmarks/dense.py --quick              # fewer repeats and fuzzed histories
    scripts/dev python benchmarks/dense.py --json /tmp/dense.json
    scripts/dev python benchmarks/dense.py --output benchmarks/DENSE.md   # the page, with the machine and its load

What is measured (nothing here asserts speed; the targets are printed as met or missed):

- **Shapes.** Four identifier-dense histories, each compacted at an 8,000-token window with the default policy:
  ``orders`` (161 messages: 40 turns, each a JSON listing of 400 orders with ids, totals and SKUs), ``records``
  (7 messages: two results of 500 record ids), ``coding`` (26 messages: 12 ``write_file`` calls of 400-line files)
  and ``fuzz`` (random histories from a seeded generator of identifier-dense tool results, one compaction each).
  A compaction is timed as a front door makes it: the messages were counted when they arrived (the per-message
  count cache is warm: one untimed compaction of an equal copy first), and the timed call gets fresh message
  objects; by the policy that compacted it before (its notes remembered, as in the view mode), by a new
  policy with the same counter (a policy built per request: what the process remembers of the texts is shared,
  `lc_compaction._memo`), and by a new policy after `_memo.clear()` (a first compaction of counted messages in a
  new process: nothing of ours remembered but the counts). Median and maximum over the repeats (over the
  histories for ``fuzz``), in milliseconds. The first call (a new policy and counter, the memos cleared: nothing
  cached, the messages counted too) is reported beside them; the agent loop starts with the memos cleared.
- **Arrival edits.** Sessions of 250 to 8,000 messages joined from the shared conversations (``session.py``) at a
  window large enough that nothing needs compacting; the agent loop's call ``compact(previous.messages + new,
  tally=previous.tally)`` after appending a tool exchange whose result is new, or repeats an earlier result (an
  arrival edit: the repeat becomes a note), with deduplication on and off (the loop's first call, which indexes
  the history, is not timed), beside ``SummarizationMiddleware.before_model`` on the same history.
- **Event loop.** A 50 ms heartbeat task beside ``acompact`` of the largest shape (``orders``): the longest pause.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable as the `benchmarks` package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime

from benchmarks.session import build_session, interleaved_records
from benchmarks.machine import machine_info
from tests.shared_data import traces_dir as default_traces_dir
from lc_compaction import CompactionPolicy, _memo, acompact, compact
from lc_compaction.replay import replay_conversation

WINDOW = 8_000
"""Tokens: the window the shapes are compacted at (the shared traces' smallest bill window)."""

ARRIVAL_SIZES = (250, 1_000, 2_000, 8_000)
"""Messages: the session sizes of the arrival-edit calls (those of ``run.py``)."""

TARGET_MEDIAN_MS, TARGET_MAX_MS = 50.0, 200.0
"""The issue's targets for one compaction of every shape, in milliseconds, on 2 cores."""


# ------------------------------------------------------------------------------------------------ the shapes
def orders(turns: int = 40, per_page: int = 400) -> list[BaseMessage]:
    """A system prompt and `turns` turns, each a request, a `list_orders(page)` call, its JSON listing of
    `per_page` orders (distinct order ids, totals, SKUs) and an answer: 1 + 4 * turns messages."""
    out: list[BaseMessage] = [SystemMessage("You are a shop assistant.", id="sys")]
    n = 0
    for t in range(turns):
        rows = []
        for _ in range(per_page):
            n += 1
            rows.append({"order_id": f"#W{1_000_000 + n * 7}", "status": "delivered",
                         "total": round(10 + n * 1.37, 2), "sku": f"SKU-{n:05d}"})
        out += [HumanMessage(f"Show me page {t} of my orders", id=f"h{t}"),
                AIMessage("", id=f"a{t}", tool_calls=[{"name": "list_orders", "args": {"page": t}, "id": f"c{t}",
                                                       "type": "tool_call"}]),
                ToolMessage(json.dumps(rows), tool_call_id=f"c{t}", id=f"t{t}", name="list_orders"),
                AIMessage(f"Here is page {t}.", id=f"r{t}")]
    return out


def records() -> list[BaseMessage]:
    """Seven messages: a system prompt, a request, two calls whose results list 500 record ids each, an answer."""
    out: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys"), HumanMessage("list records", id="h0")]
    for j in range(2):
        out += [AIMessage("", id=f"a{j}", tool_calls=[{"name": "records", "args": {"page": j}, "id": f"c{j}",
                                                       "type": "tool_call"}]),
                ToolMessage("\n".join(f"rec_{j}_{k:04d} REC{j}X{k:04d} id={j * 100_000 + k * 13}"
                                      for k in range(500)), tool_call_id=f"c{j}", id=f"t{j}", name="records")]
    return [*out, AIMessage("done", id="fin")]


def coding() -> list[BaseMessage]:
    """26 messages: a system prompt, one request, then 12 `write_file` calls of 400-line files and their results."""
    out: list[BaseMessage] = [SystemMessage("You are a coding agent.", id="sys"),
                              HumanMessage("Implement the package.", id="h0")]
    for j in range(12):
        src = "\n".join(f"def func_{j}_{k}(x):\n    return x + {j * 1000 + k}  # line {k} of mod_{j}.py"
                        for k in range(200))
        out += [AIMessage("", id=f"a{j}", tool_calls=[{"name": "write_file", "id": f"c{j}", "type": "tool_call",
                                                       "args": {"path": f"src/pkg/mod_{j}.py", "content": src}}]),
                ToolMessage(f"wrote src/pkg/mod_{j}.py (400 lines)", tool_call_id=f"c{j}", id=f"t{j}",
                            name="write_file")]
    return out


def _identifier(rng: random.Random) -> str:
    kinds: list[Callable[[], str]] = [
        lambda: f"#W{rng.randrange(10**6, 10**7)}",
        lambda: f"{rng.choice('ABCDEFGH')}{rng.choice('XYZ')}-{rng.randrange(100, 9999)}",
        lambda: "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(6)),
        lambda: f"user_{rng.choice(['kim', 'lee', 'ng'])}_{rng.randrange(1000, 9999)}",
        lambda: f"${rng.randrange(10, 5000)}.{rng.randrange(10, 99)}",
        lambda: f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
        lambda: f"src/{rng.choice(['core', 'api', 'db'])}/m{rng.randrange(100)}.py:{rng.randrange(1, 900)}",
        lambda: f"{rng.choice(['ana', 'bo', 'cy'])}{rng.randrange(100)}@example.com",
        lambda: str(rng.randrange(1000, 10**8)),
    ]
    return rng.choice(kinds)()


def fuzzed(seed: int) -> list[BaseMessage]:
    """A random history (seeded): 1 to 12 turns, each a request and 1 to 4 tool steps whose results hold 20 to
    800 random identifiers (ids, codes, slugs, amounts, dates, paths, e-mails, numbers) in JSON, CSV or log
    lines."""
    rng = random.Random(seed)
    out: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys")]
    k = 0
    for t in range(rng.randint(1, 12)):
        out.append(HumanMessage(f"request {t}: check {_identifier(rng)}", id=f"h{t}"))
        for _ in range(rng.randint(1, 4)):
            k += 1
            ids = [_identifier(rng) for _ in range(rng.randint(20, 800))]
            shape = rng.choice(["json", "csv", "log"])
            if shape == "json":
                text = json.dumps([{"id": a, "ref": b} for a, b in zip(ids[::2], ids[1::2])])
            elif shape == "csv":
                text = "id,ref\n" + "\n".join(f"{a},{b}" for a, b in zip(ids[::2], ids[1::2]))
            else:
                text = "\n".join(f"[{i}] event for {a}" for i, a in enumerate(ids))
            out += [AIMessage("", id=f"a{k}", tool_calls=[{"name": f"tool_{shape}", "args": {"q": ids[0]},
                                                           "id": f"c{k}", "type": "tool_call"}]),
                    ToolMessage(text, tool_call_id=f"c{k}", id=f"t{k}", name=f"tool_{shape}")]
        out.append(AIMessage(f"answer {t}", id=f"r{t}"))
    return out


def _fresh(messages: list[BaseMessage]) -> list[BaseMessage]:
    """New message objects with the same fields (what a history loaded from a checkpoint is)."""
    return [m.model_copy() for m in messages]


def _ms(ns: int) -> float:
    return ns / 1e6


def _loop(history: list[BaseMessage], policy: CompactionPolicy) -> list[float]:
    """The history replayed as an agent makes it, call by call (`lc_compaction.replay`: each call gets the previous
    call's output plus the messages since, with its tally): the time (ms) of each call that compacted."""
    replay = replay_conversation(history, policy, conversation_id="shape")
    return [c.compaction_ms for c in replay.calls if c.compacted]


def _new_policy_ms(history: list[BaseMessage], policy: CompactionPolicy, *, forget: bool = False) -> float:
    """One compaction (ms) of new message objects equal to `history` by a new policy sharing `policy`'s counter
    (its token counts warm); with `forget`, the process's memos cleared first (`_memo.clear`: nothing of ours
    remembered but the counts)."""
    msgs = _fresh(history)
    new_policy = CompactionPolicy(max_input_tokens=WINDOW, token_counter=policy.counter)
    if forget:
        _memo.clear()
    t0 = time.perf_counter_ns()
    compact(msgs, new_policy)
    return _ms(time.perf_counter_ns() - t0)


def shape_timings(repeat: int, fuzz: int) -> dict[str, dict[str, Any]]:
    """For each shape: median and max (ms) of the timed compactions, the first call's time, and what it did;
    and the compactions of the agent loop that builds the history call by call."""
    policy = CompactionPolicy(max_input_tokens=WINDOW)
    out: dict[str, dict[str, Any]] = {}
    for name, build in (("orders", orders), ("records", records), ("coding", coding)):
        history = build()
        _memo.clear()
        t0 = time.perf_counter_ns()
        first = compact(_fresh(history), CompactionPolicy(max_input_tokens=WINDOW))
        first_ms = _ms(time.perf_counter_ns() - t0)
        _memo.clear()
        looped = _loop(history, policy)
        samples, fresh, cold = [], [], []
        for _ in range(repeat):
            msgs = _fresh(history)
            t0 = time.perf_counter_ns()
            compact(msgs, policy)
            samples.append(_ms(time.perf_counter_ns() - t0))
            fresh.append(_new_policy_ms(history, policy))
            cold.append(_new_policy_ms(history, policy, forget=True))
        out[name] = {"messages": len(history), "chars": sum(len(str(m.content)) for m in history),
                     "median_ms": statistics.median(samples), "max_ms": max(samples), "first_call_ms": first_ms,
                     "new_policy_median_ms": statistics.median(fresh), "new_policy_max_ms": max(fresh),
                     "cold_median_ms": statistics.median(cold), "cold_max_ms": max(cold),
                     "tokens_before": first.tokens_before, "tokens_after": first.tokens_after,
                     "stop_reason": first.stop_reason, "samples": len(samples),
                     "loop_compactions": len(looped), "loop_median_ms": statistics.median(looped) if looped else None,
                     "loop_max_ms": max(looped) if looped else None}
    samples, firsts, sizes, looped, fresh, cold = [], [], [], [], [], []
    for seed in range(fuzz):
        history = fuzzed(seed)
        _memo.clear()
        t0 = time.perf_counter_ns()
        compact(_fresh(history), CompactionPolicy(max_input_tokens=WINDOW))
        firsts.append(_ms(time.perf_counter_ns() - t0))
        _memo.clear()
        looped += _loop(history, policy)
        fresh.append(_new_policy_ms(history, policy))
        cold.append(_new_policy_ms(history, policy, forget=True))
        msgs = _fresh(history)
        t0 = time.perf_counter_ns()
        compact(msgs, policy)
        samples.append(_ms(time.perf_counter_ns() - t0))
        sizes.append(len(history))
    out["fuzz"] = {"messages": f"{min(sizes)}-{max(sizes)}", "histories": fuzz, "median_ms": statistics.median(samples),
                   "max_ms": max(samples), "first_call_ms": max(firsts), "samples": len(samples),
                   "new_policy_median_ms": statistics.median(fresh), "new_policy_max_ms": max(fresh),
                   "cold_median_ms": statistics.median(cold), "cold_max_ms": max(cold),
                   "loop_compactions": len(looped), "loop_median_ms": statistics.median(looped) if looped else None,
                   "loop_max_ms": max(looped) if looped else None}
    return out


# ------------------------------------------------------------------------------------------------ arrival edits
def _exchange(result: ToolMessage, tag: str) -> list[BaseMessage]:
    """An assistant call and its result with `result`'s content and tool, under new ids (`tag`)."""
    return [AIMessage("", id=f"{tag}-a", tool_calls=[{"name": result.name or "tool", "args": {}, "id": f"{tag}-c",
                                                      "type": "tool_call"}]),
            ToolMessage(result.content, tool_call_id=f"{tag}-c", id=f"{tag}-t", name=result.name)]


def arrival_timings(traces_dir: Path, repeat: int) -> dict[int, dict[str, float]]:
    """Per session size: the median (ms) of one call after appending a tool exchange, new or repeated, with
    deduplication on and off, and `SummarizationMiddleware.before_model` on the same history."""
    recs = interleaved_records(traces_dir)
    summarization = SummarizationMiddleware(GenericFakeChatModel(messages=iter(())), trigger=("tokens", 10**9))
    runtime = Runtime()
    out: dict[int, dict[str, float]] = {}
    for size in ARRIVAL_SIZES:
        session = build_session(recs, size)[:size]
        while session and isinstance(session[-1], AIMessage) and session[-1].tool_calls:
            session.pop()  # end on a complete step
        results = [m for m in session if isinstance(m, ToolMessage) and len(str(m.content)) >= 2_000]
        repeated = results[len(results) // 2]
        novel = ToolMessage("fresh output " + " ".join(f"id{i}" for i in range(400)), tool_call_id="x", name="t")
        row: dict[str, float] = {}
        for dedup in (True, False):
            policy = CompactionPolicy(max_input_tokens=10**8, deduplicate=dedup)
            for label, result in (("new", novel), ("repeated", repeated)):
                # the agent loop: each call gets the previous call's output plus one new exchange, and its tally
                previous = compact(list(session), policy)
                previous = compact([*previous.messages, *_exchange(result, f"{label}-warm")], policy,
                                   tally=previous.tally)  # first call of the loop: the index of earlier copies
                samples = []
                for r in range(repeat):
                    history = [*previous.messages, *_exchange(result, f"{label}{r}")]
                    t0 = time.perf_counter_ns()
                    res = compact(history, policy, tally=previous.tally)
                    samples.append(_ms(time.perf_counter_ns() - t0))
                    if dedup and label == "repeated" and not res.actions:
                        raise AssertionError(f"{size} messages: the repeated result was not deduplicated")
                    if res.triggered:
                        raise AssertionError(f"{size} messages: compacted in an arrival-edit call")
                    previous = res
                row[f"{label}, dedup {'on' if dedup else 'off'}"] = statistics.median(samples)
        samples = []
        for r in range(repeat):
            state = {"messages": [*session, *_exchange(repeated, f"s{r}")]}
            t0 = time.perf_counter_ns()
            summarization.before_model(state, runtime)  # type: ignore[arg-type]
            samples.append(_ms(time.perf_counter_ns() - t0))
        row["SummarizationMiddleware.before_model"] = statistics.median(samples)
        out[size] = row
    return out


# ------------------------------------------------------------------------------------------------ event loop
async def _heartbeat_pause(messages: list[BaseMessage], policy: CompactionPolicy) -> tuple[float, float]:
    """(longest pause of a 50 ms heartbeat beside `acompact(messages)`, the compaction's own time), in ms."""
    pauses: list[float] = []
    done = asyncio.Event()

    async def beat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.05)
            now = time.perf_counter()
            pauses.append((now - last - 0.05) * 1000)
            last = now

    task = asyncio.create_task(beat())
    await asyncio.sleep(0.12)
    t0 = time.perf_counter()
    await acompact(messages, policy)
    took = (time.perf_counter() - t0) * 1000
    await asyncio.sleep(0.12)
    done.set()
    await task
    return max(pauses), took


def heartbeat() -> dict[str, float]:
    policy = CompactionPolicy(max_input_tokens=WINDOW)
    history = orders()
    compact(_fresh(history), policy)  # the messages were counted as they arrived
    pause, took = asyncio.run(_heartbeat_pause(_fresh(history), policy))
    return {"longest_pause_ms": pause, "compaction_ms": took}


# ------------------------------------------------------------------------------------------------ report
def render(shapes: dict[str, dict[str, Any]], arrivals: dict[int, dict[str, float]], beat: dict[str, float]) -> str:
    lines = ["### Identifier-dense shapes (compactions at 8,000 tokens, default policy; ms)", "",
             "In the agent loop: the compactions of the history built call by call (`replay`), as an agent makes "
             "them. Whole history: one compaction of the finished history at once (every result still whole), "
             "with the tokenizer's cache warm: by the policy that compacted it before (its truncation notes "
             "remembered: the view mode, which compacts the same originals at every call), by a new policy "
             "(a policy built per request: the process's memos of the texts, `_memo`, are shared), and by a new "
             "policy with those memos cleared (nothing of ours remembered but the counts: a first compaction of "
             "counted messages in a new process); the first call (a new policy and a new counter, the memos "
             "cleared: nothing cached; for `fuzz`, the largest first call) beside them. The agent loop starts with "
             "the memos cleared. The target is read on each.", "",
             "| shape | messages | loop: compactions | loop: median | loop: max | whole: median | whole: max | "
             "whole, new policy: median | whole, new policy: max | whole, memos cleared: median | "
             "whole, memos cleared: max | first call | target (median < 50, max < 200) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    def status(med: float | None, top: float | None) -> str:
        return "-" if med is None or top is None else "met" if med < TARGET_MEDIAN_MS and top < TARGET_MAX_MS \
            else "missed"

    for name, s in shapes.items():
        verdicts = (f"loop {status(s['loop_median_ms'], s['loop_max_ms'])}, whole {status(s['median_ms'], s['max_ms'])}"
                    f", new policy {status(s['new_policy_median_ms'], s['new_policy_max_ms'])}"
                    f", memos cleared {status(s['cold_median_ms'], s['cold_max_ms'])}")
        lines.append(f"| {name} | {s['messages']} | {s['loop_compactions']} | {f(s['loop_median_ms'])} | "
                     f"{f(s['loop_max_ms'])} | {f(s['median_ms'])} | {f(s['max_ms'])} | "
                     f"{f(s['new_policy_median_ms'])} | {f(s['new_policy_max_ms'])} | {f(s['cold_median_ms'])} | "
                     f"{f(s['cold_max_ms'])} | {f(s['first_call_ms'])} | "
                     f"{verdicts} |")
    lines += ["", "### One call after appending a tool exchange (nothing to compact; median ms)", ""]
    cols = list(next(iter(arrivals.values())))
    lines += ["| messages | " + " | ".join(cols) + " | repeated / Summarization |",
              "|---|" + "---|" * (len(cols) + 1)]
    for size, row in arrivals.items():
        ratio = row["repeated, dedup on"] / row["SummarizationMiddleware.before_model"]
        lines.append(f"| {size:,} | " + " | ".join(f"{row[c]:.2f}" for c in cols) + f" | {ratio:.2f} |")
    first, last = arrivals[ARRIVAL_SIZES[0]], arrivals[ARRIVAL_SIZES[-1]]
    growth = last["repeated, dedup on"] / first["repeated, dedup on"]
    lines += ["", f"Repeated result, {ARRIVAL_SIZES[0]:,} to {ARRIVAL_SIZES[-1]:,} messages: x{growth:.2f} "
              "(target: within 2x; at most 1/10 of SummarizationMiddleware.before_model at 2,000 and 8,000).", "",
              f"Event loop: a 50 ms heartbeat beside `acompact` of `orders` paused at most "
              f"{beat['longest_pause_ms']:.1f} ms (the compaction took {beat['compaction_ms']:.1f} ms)."]
    return "\n".join(lines)


def page(body: str, *, command: str, seconds: float, load: tuple[list[float], list[float]]) -> str:
    """DENSE.md: the tables of `render` under a header naming the command, the machine and its load."""
    info = machine_info()
    before, after = load
    return "\n".join([
        "# Identifier-dense histories and arrival edits (issue 25)", "",
        f"Generated by `{command}` on {info['date']} in {seconds:.0f} s. Do not edit by hand: run the command again "
        "(see docs/benchmarks.md). Milliseconds of wall clock; nothing here is asserted by tests.", "",
        f"Machine: {info['cpu']}, {info['usable_cores']} usable cores, Python {info['python']}; load average "
        f"(1/5/15 min) before {before} / after {after} (other work on the machine adds to every figure).", "",
        body, ""])


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@click.command()
@click.option("--repeat", default=15, show_default=True, help="Timed calls per cell.")
@click.option("--fuzz", default=178, show_default=True, help="Random histories (the issue's fuzzer count).")
@click.option("--quick", is_flag=True, help="5 repeats, 40 random histories.")
@click.option("--traces", type=click.Path(path_type=Path), default=None,
              help="The recorded conversations. [default: the shared data's traces/ (tests/shared_data.py)]")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Also write the figures.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the page (benchmarks/DENSE.md), with the machine and its load.")
def main(repeat: int, fuzz: int, quick: bool, traces: Path | None, json_path: Path | None,
         output: Path | None) -> None:
    """Time compactions of identifier-dense histories and arrival-edit calls; print Markdown tables."""
    if quick:
        repeat, fuzz = 5, 40
    before, t0 = _load(), time.perf_counter()
    shapes = shape_timings(repeat, fuzz)
    arrivals = arrival_timings(traces or default_traces_dir(), repeat)
    beat = heartbeat()
    body = render(shapes, arrivals, beat)
    click.echo(body)
    if json_path is not None:
        json_path.write_text(json.dumps({"shapes": shapes, "arrivals": arrivals, "heartbeat": beat}, indent=2))
    if output is not None:
        command = "python benchmarks/dense.py" + (" --quick" if quick else "") + f" --output {output}"
        output.write_text(page(body, command=command, seconds=time.perf_counter() - t0, load=(before, _load())),
                          encoding="utf-8")


if __name__ == "__main__":
    main()
