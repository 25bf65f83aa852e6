"""Shared pytest set-up.

- A real PostgreSQL server (`postgres_uri`: scripts/postgres, from Debian's packages, on 127.0.0.1, stopped by its
  pid) and the offload stores the offload tests run on (`backend`: InMemoryStore or PostgresStore).
- Fixtures that need a service live in plugin modules registered here, so test modules use them by name
  without importing them: `tests/llama_fixture.py` (`llama_server`: a real llama.cpp server on 127.0.0.1,
  one per session, stopped by its pid), `tests/fakes.py` (`server`: a fake OpenAI-compatible server; and
  `ScriptedModel`, a scripted chat model).
- Where the recorded conversations and cases are: `tests/shared_data.py` (a fuller copy named by
  LC_COMPACTION_SHARED or at ../shared, else the copy vendored in tests/data); the header of a run says which.
- History builders are plain functions in `tests/builders.py`, imported by name where they are used: a test
  calls a builder several times with different arguments, which a fixture would only wrap.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import describe

pytest_plugins = ["tests.llama_fixture", "tests.fakes"]

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "postgres"


def pytest_report_header(config: pytest.Config) -> str:
    """Which copy of the shared data the run reads (`tests.shared_data`)."""
    return describe()


@pytest.fixture(scope="session")
def postgres_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server for this test process (`scripts/postgres start`), stopped by its pid at the end."""
    state = tmp_path_factory.mktemp("postgres")
    out = subprocess.run([str(SCRIPT), "start", str(state)], check=True, capture_output=True, text=True,
                         timeout=900).stdout
    fields = dict(part.split("=", 1) for part in out.split())
    try:
        yield fields["URI"]
    finally:
        subprocess.run([str(SCRIPT), "stop", str(state)], check=True, timeout=60)


@pytest.fixture(scope="session")
def postgres_backend(postgres_uri: str) -> Iterator[tuple[Any, Any]]:
    """`(PostgresStore, PostgresSaver)` on the session's server, tables set up once."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with ExitStack() as stack:
        store = stack.enter_context(PostgresStore.from_conn_string(postgres_uri))
        saver = stack.enter_context(PostgresSaver.from_conn_string(postgres_uri))
        store.setup()
        saver.setup()
        yield store, saver


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """`(store, checkpointer)`: InMemoryStore + InMemorySaver, or PostgresStore + PostgresSaver emptied first."""
    if request.param == "memory":
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.store.memory import InMemoryStore

        return InMemoryStore(), InMemorySaver()
    import psycopg

    store, saver = request.getfixturevalue("postgres_backend")
    with psycopg.connect(request.getfixturevalue("postgres_uri"), autocommit=True) as conn:
        conn.execute("DELETE FROM store")
        conn.execute("DELETE FROM checkpoint_writes")
        conn.execute("DELETE FROM checkpoint_blobs")
        conn.execute("DELETE FROM checkpoints")
    return store, saver
