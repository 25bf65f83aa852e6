"""The load test on a real PostgreSQL server (benchmarks/fleet.py, smaller than the benchmark's run).

4 worker processes share one `PostgresSaver` and one `PostgresStore`; 12 conversation threads (3 a worker; the
benchmark runs 25 a worker, 100 threads: about a minute more than the suite should take), every thread a
replayed tau-bench conversation, all its turns, consecutive turns on different workers. After the run, every
thread's checkpoint and store namespace are checked (`run_fleet`'s checks): no lost or duplicated message, no
cross-thread recall, every offloaded result recalled byte-identical.
"""

from __future__ import annotations

import pytest

from benchmarks.fleet import run_fleet


@pytest.mark.slow
def test_fleet_of_workers_on_postgres_loses_nothing(postgres_uri: str) -> None:
    report = run_fleet(postgres_uri, workers=4, threads=3, timeout=480)
    assert report.problems == []
    assert report.turns > 12 * 3, "every thread replays all its turns"
    assert report.records > 0 and report.recalls > 0, "results were offloaded, and recalled by the model"
    assert report.cross_thread_recalls == 12, "each thread tried another thread's tool_call_id once"
    assert len(report.first_call_ms) == report.turns


def test_fleet_needs_two_workers() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run_fleet("postgresql://nobody@127.0.0.1:1/none", workers=1, threads=1)
