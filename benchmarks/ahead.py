"""What a summary written ahead of time saves the turn that compacts (`Summarize(ahead_at=...)`, issue 21).

    scripts/dev python benchmarks/ahead.py                                # about 3 minutes (the summarizer sleeps)
    scripts/dev python benchmarks/ahead.py --output benchmarks/AHEAD.md

What is measured: a conversation of plain exchanges (`exchange`: about 150 tokens each) grows one exchange at a
time in a 16,000-token window under the default trigger (the budget: 14,400 tokens), with `Summarize` as the
ladder and a scripted summarizer that takes `SUMMARIZER_SECONDS` (2 s) to answer (`SlowSummarizer`: it sleeps,
then answers a fixed text). Each run builds a new policy (no job carried over) and:

- "inline" (today, `ahead_at=None`): times the `compact` call that triggers;
- "ahead" (`ahead_at=("fraction", 0.6)`): the first call above 60% of the window starts the summary in the
  background; the conversation grows to the trigger meanwhile; the run then waits until the background summary
  is done (a user who takes longer than the summarizer to write the next turn) and times the call that
  triggers. `compact` (a worker thread) and `acompact` (an asyncio task, all in one event loop).

"Added to the turn" is the compacting call's time minus the median time of a `compact` call of the history before that
compacts nothing (the call every turn makes anyway). Wall time, `time.perf_counter`, median of `--runs` runs.
Nothing here asserts a figure.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from lc_compaction import CompactionPolicy, CompactionResult, Summarize, acompact, compact

try:
    from benchmarks.machine import machine_info
except ImportError:  # run from benchmarks/ itself
    from machine import machine_info  # type: ignore[no-redef]

SUMMARIZER_SECONDS = 2.0
"""How long the scripted summarizer takes to answer, seconds (the issue's figure)."""

WINDOW = 16_000
"""The model's window (tokens): the default trigger is its budget, 14,400 tokens (a reserve of 1,600)."""

AHEAD_AT = ("fraction", 0.6)
"""The soft threshold of the "ahead" runs: 60% of the window, 9,600 tokens."""

SUMMARY = ("The user asked about their reservations; the assistant looked them up and answered each question. "
           "Open points: none. ") * 6
"""The scripted summarizer's reply (about 130 tokens)."""


class SlowSummarizer(BaseChatModel):
    """A scripted summarizer: sleeps `seconds`, then answers `SUMMARY` (`asyncio.sleep` when awaited)."""

    seconds: float = SUMMARIZER_SECONDS

    @property
    def _llm_type(self) -> str:
        return "slow-scripted-summarizer"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        time.sleep(self.seconds)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(SUMMARY))])

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        await asyncio.sleep(self.seconds)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(SUMMARY))])


def exchange(k: int) -> list[BaseMessage]:
    """The k-th exchange: a question and an answer of plain text (about 150 tokens together)."""
    return [HumanMessage(f"Question {k}: what about reservation RES{k:04d}? " + "Please check the dates again. " * 6,
                         id=f"h{k}"),
            AIMessage(f"Answer {k}: reservation RES{k:04d} is confirmed. " + "The flight leaves on time today. " * 8,
                      id=f"a{k}")]


def policy(ahead: bool, seconds: float = SUMMARIZER_SECONDS) -> CompactionPolicy:
    """The policy of a run: `Summarize` with a summarizer that takes `seconds`, ahead of time or not."""
    return CompactionPolicy(max_input_tokens=WINDOW,
                            strategies=[Summarize(model=SlowSummarizer(seconds=seconds), trim_tokens_to_summarize=None,
                                                  ahead_at=AHEAD_AT if ahead else None)])


def histories(pol: CompactionPolicy) -> tuple[list[list[BaseMessage]], int]:
    """The history after each exchange, up to the first one over the trigger, and the index of the first one
    above `AHEAD_AT` (by the policy's counter)."""
    out: list[list[BaseMessage]] = []
    done: list[BaseMessage] = [SystemMessage("You are an airline agent.", id="sys")]
    crossing = None
    k = 0
    while True:
        question, answer = exchange(k)
        out.append([*done, question])  # the model is called with the new question
        done = [*done, question, answer]
        tokens = compact(out[-1], policy(False)).tokens_before
        if crossing is None and pol.is_ahead(AHEAD_AT, tokens, len(out[-1])):
            crossing = len(out) - 1
        if pol.is_triggered(tokens, len(out[-1])):
            assert crossing is not None and crossing < len(out) - 1
            return out, crossing
        k += 1


def _timed(fn: Callable[[], CompactionResult]) -> tuple[float, CompactionResult]:
    t0 = time.perf_counter()
    result = fn()
    return (time.perf_counter() - t0) * 1000, result


def _wait(pol: CompactionPolicy) -> None:
    for s in pol.strategies or ():
        for job in list(s._ahead._jobs.values()):  # type: ignore[attr-defined]
            job.done.wait(60)


Run = tuple[float, CompactionResult, float]
"""The compacting call's time (ms), its result, and the time of the call that crossed `AHEAD_AT` (ms)."""


def run_sync(ahead: bool, steps: list[list[BaseMessage]], crossing: int, seconds: float) -> Run:
    """One run through `compact`: the calls from the crossing on (the first one timed), then the timed call
    that triggers."""
    pol = policy(ahead, seconds)
    tally = compact(steps[crossing - 1], pol).tally  # the turns before, as a door keeps their tally
    crossed, result = _timed(lambda: compact(steps[crossing], pol, tally=tally))
    tally = result.tally
    for history in steps[crossing + 1:-1]:
        tally = compact(history, pol, tally=tally).tally
    _wait(pol)
    ms, result = _timed(lambda: compact(steps[-1], pol, tally=tally))
    return ms, result, crossed


def run_async(ahead: bool, steps: list[list[BaseMessage]], crossing: int, seconds: float) -> Run:
    """One run through `acompact`, in one event loop (the background task lives on it)."""

    async def scenario() -> Run:
        pol = policy(ahead, seconds)
        tally = (await acompact(steps[crossing - 1], pol)).tally
        t0 = time.perf_counter()
        tally = (await acompact(steps[crossing], pol, tally=tally)).tally
        crossed = (time.perf_counter() - t0) * 1000
        for history in steps[crossing + 1:-1]:
            tally = (await acompact(history, pol, tally=tally)).tally
        for s in pol.strategies or ():
            for job in list(s._ahead._jobs.values()):  # type: ignore[attr-defined]
                while not job.done.is_set():
                    await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        result = await acompact(steps[-1], pol, tally=tally)
        return (time.perf_counter() - t0) * 1000, result, crossed

    return asyncio.run(scenario())


def measure(runs: int, seconds: float = SUMMARIZER_SECONDS) -> dict[str, Any]:
    """The figures of `render`: `runs` runs of each door, inline and ahead, with a summarizer of `seconds`."""
    steps, crossing = histories(policy(True))
    pol = policy(False)
    before = compact(steps[-3], pol).tally
    quiet = [_timed(lambda: compact(steps[-2], pol, tally=before))[0] for _ in range(runs)]
    figures: dict[str, Any] = {"exchanges": len(steps), "crossing": crossing, "quiet_ms": statistics.median(quiet),
                               "seconds": seconds, "rows": {}}
    for door, run in (("compact", run_sync), ("acompact", run_async)):
        for ahead in (False, True):
            times, crossings, statuses = [], [], set()
            for _ in range(runs):
                ms, result, crossed = run(ahead, steps, crossing, seconds)
                assert result.triggered and result.summary, "the timed call did not compact"
                times.append(ms)
                crossings.append(crossed)
                statuses.add((result.details.get("ahead") or {}).get("status", "inline"))
            figures["rows"][(door, ahead)] = {"median_ms": statistics.median(times), "min_ms": min(times),
                                              "crossing_ms": statistics.median(crossings),
                                              "max_ms": max(times), "status": ", ".join(sorted(statuses)),
                                              "tokens_before": result.tokens_before,
                                              "tokens_after": result.tokens_after}
    return figures


def render(figures: dict[str, Any], runs: int) -> str:
    info = machine_info()
    quiet = figures["quiet_ms"]
    lines = ["# Summaries ahead of time", "",
             "Generated by `python benchmarks/ahead.py --output benchmarks/AHEAD.md`; see its docstring. A scripted "
             f"summarizer that takes {figures['seconds']:g} s; a {WINDOW:,}-token window, the default trigger (the "
             f"budget), `Summarize(ahead_at={AHEAD_AT!r})` against `Summarize()`; the conversation crosses 60% of "
             f"the window at exchange {figures['crossing'] + 1} and triggers at exchange {figures['exchanges']}. "
             f"Median of {runs} runs of the call that compacts; \"added\" is that minus the median `compact` call of "
             f"the history before, which compacts nothing ({quiet:.1f} ms).", "",
             "\"Crossing call\" is the median time of the call that crossed 60% of the window (the one that "
             "starts the background summary with `ahead_at`, which plans it in the background too; a call that "
             "compacts nothing without it).",
             "",
             "| door | summary | status of the background job | tokens before -> after | compacting call, median "
             "(ms) | min - max (ms) | added to the turn (ms) | crossing call, median (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for (door, ahead), f in figures["rows"].items():
        lines.append(f"| `{door}` | {'ahead of time' if ahead else 'inline (today)'} | {f['status']} | "
                     f"{f['tokens_before']:,} -> {f['tokens_after']:,} | {f['median_ms']:,.1f} | "
                     f"{f['min_ms']:,.1f} - {f['max_ms']:,.1f} | {f['median_ms'] - quiet:,.1f} | "
                     f"{f['crossing_ms']:,.1f} |")
    lines += ["", f"Machine: {info.get('cpu', '?')}, {info.get('cores', '?')} cores, Python {info.get('python', '?')}, "
              f"{info.get('date', '')}."]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the table to this Markdown file.")
@click.option("--runs", type=int, default=20, show_default=True, help="Runs of each row (the median is reported).")
def main(output: Path | None, runs: int) -> None:
    """Time the call that compacts, with the summary written ahead of time and inline."""
    text = render(measure(runs), runs)
    click.echo(text)
    if output is not None:
        output.write_text(text)


if __name__ == "__main__":
    main()
