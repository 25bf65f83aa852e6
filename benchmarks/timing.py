"""How one benchmark cell is measured: wall time per call (median of repeats) and peak memory of one call.

A cell is a pair of functions (cells measured together form a group):

- ``setup(i) -> arg``: builds the input of sample ``i`` (fresh objects, a primed state); **not timed**;
- ``run(arg) -> result``: the call being measured; timed with ``time.perf_counter_ns`` (nanoseconds).

``measure`` runs ``warmup`` samples of each cell first (discarded: imports, first-use caches, branch warm-up),
then up to ``repeat`` timed samples of each, in rounds across the group's cells (a shuffled order in each
round); a cell stops early once it has
``min_samples`` samples and ``budget_s`` seconds of wall time (setup included) were spent on it, so a slow cell
cannot blow the run's time budget. The garbage
collector runs once before the cell and is left on during it (a real call pays its own collections). It does not
run before each sample: a full collection walks every object of the process and leaves the CPU caches cold, which
made the next call of a few hundred microseconds 2-3 times slower on the machine of RESULTS.md.

``peak_memory`` runs one more sample under ``tracemalloc`` and returns the peak of memory allocated *during the
call* (bytes, Python allocations only: tracemalloc does not see the Rust tokenizer's own buffers), above what
was allocated when the call started. tracemalloc slows Python down several times, so it never runs while timing.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Timed", "Timing", "flush_caches", "measure", "paired_ratio", "peak_memory"]


class Timed(NamedTuple):
    """What a call that times itself returns: its result, and the nanoseconds of the part that is measured (our
    node's own call inside a compiled graph, say); `measure` then records ``ns`` instead of the whole call."""

    result: Any
    ns: int

_FLUSH: list[bytearray] = []


def flush_caches() -> None:
    """Evict the CPU caches: write one byte in every 64-byte line of a 64 MiB buffer (more than the last-level
    cache of the machines this runs on; allocated on first use), as a model call, the tools and a checkpoint
    write do between two compactions of a real agent loop."""
    if not _FLUSH:
        _FLUSH.append(bytearray(64 * 1024 * 1024))
    buffer = _FLUSH[0]
    buffer[::64] = b"\x01" * len(range(0, len(buffer), 64))


@dataclass
class Timing:
    """The timed samples of one cell.

    Attributes:
        samples_ns: wall time of each timed call, nanoseconds, in the order taken.
        last: what the last timed call returned (for sanity checks: did it fire or not).
    """

    samples_ns: list[int] = field(default_factory=list)
    last: Any = None

    @property
    def median_ms(self) -> float:
        """Median wall time per call, milliseconds (NaN when there is no sample)."""
        return statistics.median(self.samples_ns) / 1e6 if self.samples_ns else float("nan")

    @property
    def min_ms(self) -> float:
        """Fastest call, milliseconds (NaN when there is no sample)."""
        return min(self.samples_ns) / 1e6 if self.samples_ns else float("nan")

    @property
    def n(self) -> int:
        """Number of timed samples."""
        return len(self.samples_ns)


def measure(cells: Sequence[tuple[Callable[[int], Any], Callable[[Any], Any]]], *, repeat: int, warmup: int,
            budget_s: float, min_samples: int = 3, seed: int = 0,
            checks: Sequence[Callable[[Any, Any], None] | None] | None = None,
            before_each: Callable[[], None] | None = None) -> list[Timing]:
    """Time ``run(setup(i))`` for each ``(setup, run)`` of ``cells``, round-robin (see the module docstring).

    The cells of a group are sampled in rounds (one sample of each, then the next round), so a burst of load
    from other processes hits them alike and their ratios stay meaningful on a busy machine. The order within a
    round is shuffled (``random.Random(seed)``): a call leaves the CPU caches in its own state (an anchor that
    walks the whole history evicts the tokenizer's tables), so a fixed order would always hand one cell the
    leftovers of the same neighbour.

    Args:
        cells: ``(setup, run)`` pairs: ``setup(i)`` builds the argument of sample ``i`` (0-based over warm-ups then
            timed samples), not timed; ``run`` is the measured call.
        repeat: at most this many timed samples per cell (>= 1).
        warmup: samples run first and discarded, per cell (>= 0).
        budget_s: seconds of wall time (setup, warm-ups and samples) after which a cell stops sampling, once it
            has ``min_samples`` timed samples.
        min_samples: timed samples always taken per cell (capped by ``repeat``).
        seed: seeds the order of the cells within each round.
        checks: per cell, ``check(arg, result)`` run after every timed sample (untimed), or None.
        before_each: run before every timed sample, untimed (e.g. to flush the CPU caches).

    Returns:
        One `Timing` per cell, in order.

    Raises:
        ValueError: ``repeat`` < 1 or ``warmup`` < 0.
        Whatever ``setup`` or ``run`` raise (a failing cell is a bug to see, not to skip).
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    gc.collect()
    spent = [0.0] * len(cells)
    for k, (setup, run) in enumerate(cells):
        start = time.perf_counter()
        for i in range(warmup):
            run(setup(i))
        spent[k] += time.perf_counter() - start
    timings = [Timing() for _ in cells]
    floor = min(min_samples, repeat)
    rng = random.Random(seed)
    order = list(range(len(cells)))
    for j in range(repeat):
        sampled = False
        rng.shuffle(order)
        for k in order:
            setup, run = cells[k]
            timing = timings[k]
            if timing.n >= floor and spent[k] > budget_s:
                continue
            sampled = True
            start = time.perf_counter()
            arg = setup(warmup + j)
            if before_each is not None:
                before_each()
            t0 = time.perf_counter_ns()
            result = run(arg)
            t1 = time.perf_counter_ns()
            if isinstance(result, Timed):
                result, t0, t1 = result.result, 0, result.ns
            if checks is not None and checks[k] is not None:
                checks[k](arg, result)  # type: ignore[misc]
            spent[k] += time.perf_counter() - start
            timing.samples_ns.append(t1 - t0)
            timing.last = result
            del arg, result  # nothing of this sample outlives it (a freed history is paid by the call that frees it)
        if not sampled:
            break
    return timings


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of ``numerator``'s sample over ``denominator``'s sample of the same round (NaN when they
    share no round).

    Cells of one group are sampled round-robin, so samples ``j`` of two cells ran back to back: a burst of load
    from other processes slows both, and their ratio cancels it, which a ratio of medians does not. A cell that
    stopped early (its time budget) has fewer samples; its first ``n`` are paired with the other's first ``n``.
    """
    ratios = [a / b for a, b in zip(numerator.samples_ns, denominator.samples_ns) if b > 0]
    return statistics.median(ratios) if ratios else float("nan")


def peak_memory(setup: Callable[[int], Any], run: Callable[[Any], Any], *, index: int) -> int:
    """Peak Python memory allocated during one ``run(setup(index))`` call, bytes (see the module docstring).

    ``index`` is passed to ``setup``: the sample after the last timed one, so that it is a sample no timed run
    used (fresh ids, new messages) and a chained setup continues from the last timed call.
    """
    arg = setup(index)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run(arg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return max(0, peak - base)
