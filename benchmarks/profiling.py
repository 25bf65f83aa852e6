"""Where the time goes: ``cProfile`` over a few calls, summarized per function.

cProfile adds a cost per Python function call, so its times are larger than the timed medians and favour code
that makes many small calls; the *shares* are what to read. Functions are named ``path:line(name)`` with the
path relative to the repository or to ``site-packages``.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from typing import Any

__all__ = ["profile_calls"]


def _label(key: tuple[str, int, str]) -> str:
    path, line, name = key
    if path == "~":  # built-ins
        return name
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})"


def profile_calls(setup: Callable[[int], Any], run: Callable[[Any], Any], *, calls: int, top: int = 12,
                  first_index: int = 0) -> dict[str, Any]:
    """Profile ``run(setup(i))`` for ``calls`` samples (setup not profiled) and summarize.

    Returns:
        ``{"calls": n, "total_ms": profiled time per call (milliseconds, under cProfile), "own": [...],
        "ours": [...]}``: ``own`` is every function sorted by own time, ``ours`` the functions of ``lc_compaction``
        sorted by cumulative time (callees included); at most ``top`` each, as ``{"function", "calls" (per
        profiled call), "own_pct", "cum_pct"}`` (percent of the profiled total).

    Raises:
        ValueError: ``calls`` < 1.
    """
    if calls < 1:
        raise ValueError(f"calls: must be >= 1, got {calls}")
    profiler = cProfile.Profile()
    for i in range(calls):
        arg = setup(first_index + i)
        profiler.enable()
        run(arg)
        profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in stats.values()) or 1e-12

    def row(key: tuple[str, int, str], value: tuple[Any, ...]) -> dict[str, Any]:
        _, nc, tt, ct, _ = value
        return {"function": _label(key), "calls": nc / calls, "own_pct": 100 * tt / total, "cum_pct": 100 * ct / total}

    own = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    ours = sorted(((k, v) for k, v in stats.items() if "lc_compaction/" in k[0]), key=lambda kv: kv[1][3],
                  reverse=True)[:top]
    return {"calls": calls, "total_ms": total * 1000 / calls, "own": [row(k, v) for k, v in own],
            "ours": [row(k, v) for k, v in ours]}
