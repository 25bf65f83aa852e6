"""The load test on a real PostgreSQL server (benchmarks/fleet.py, smaller than the benchmark's run).

4 worker processes share one `PostgresSaver` and one `PostgresStore`; 12 conversation threads (3 a worker; the
benchmark runs 25 a worker, 100 threads: about a minute more than the suite should take), every thread a
replayed tau-bench conversation, all its turns, consecutive turns on different workers, search on: the scripted
model searches for rare words of a message compaction dropped from its own thread and reads the hit back, and
once for another thread's words. After the run, every thread's checkpoint and store namespaces are checked
(`run_fleet`'s checks): no lost or duplicated message (the lookup calls and answers included), no cross-thread
recall or search hit, every record recalled byte-identical, every compaction record well formed, every search
answer within its bound. Then every thread that compacted is undone by a worker process that did not make its
compactions, and the restored history is compared message for message with the checkpointer's history of the
thread and the recording (`undo_check`).
"""

from __future__ import annotations

import pytest

from benchmarks.fleet import run_fleet


@pytest.mark.slow
def test_fleet_of_workers_on_postgres_with_search_loses_nothing(postgres_uri: str) -> None:
    report = run_fleet(postgres_uri, workers=4, threads=3, timeout=480, search=True)
    assert report.problems == []
    assert report.turns > 12 * 3, "every thread replays all its turns"
    assert report.records > 0 and report.recalls > 0, "results were offloaded, and recalled by the model"
    assert report.cross_thread_recalls == 12, "each thread tried another thread's tool_call_id once"
    assert len(report.first_call_ms) == report.turns
    assert report.searches > 0 and report.searches_found == report.searches == report.search_recalls, \
        "every search for a dropped message of its own thread found it, and the hit was read back"
    assert report.cross_thread_searches == report.cross_thread_found_nothing == 12, \
        "each thread searched another thread's words once and found nothing"
    assert 0 < report.largest_answer_bytes <= 8_000
    assert report.compaction_records > 0 and report.undo_threads > 0
    assert report.undo_from_other_worker == report.undo_threads, "4 workers: always one that made neither"
    assert report.undo_to_first > 0, "some threads were undone back before their first compaction"


def test_fleet_needs_two_workers() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run_fleet("postgresql://nobody@127.0.0.1:1/none", workers=1, threads=1)
