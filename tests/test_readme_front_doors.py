"""Every ```python block of the README and of the docs site's pages (docs/**/*.md) runs alone, as a reader who
copies only that block runs it: each in a fresh namespace, in an empty folder, with nothing from the blocks
above it. Every block runs: the one that opens a PostgreSQL database reads its address from `DATABASE_URL`, which
the test points at the server `scripts/postgres` starts (`conftest.postgres_uri`).

The blocks use `ChatOpenAI`; the tests point it at a local OpenAI-compatible server on 127.0.0.1 (no network)
and check what went over the wire: valid chat requests, the tool schemas the agents send, the compaction event
the events example prints, the history a chat-history chain sends. Some blocks have checks of their own
(`CHECKS`, found by a piece of their code). The `lc-compaction` command lines of the README and of the CLI page
run too, in a folder holding the files they name; the install lines name only extras pyproject.toml defines.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent_replay import ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").rglob("*.md")))
"""The Markdown files whose python blocks are run: the README and every page of the docs site."""

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Snippet:
    """One ```python block of a page: where it is (path, 1-based line of its fence) and its code."""

    path: Path
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def page_snippets(path: Path, text: str | None = None) -> list[Snippet]:
    """The ```python blocks of one Markdown file, in order (`text`: its text, read from `path` if None)."""
    text = path.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in FENCE.finditer(text):
        found.append(Snippet(path, text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


SNIPPETS = [snippet for page in PAGES for snippet in page_snippets(page)]


def section(title: str, path: Path = README) -> str:
    """The text of the section of `path` whose `## ` heading starts with `title`, up to the next `## ` heading."""
    text = path.read_text(encoding="utf-8")
    start = text.index("\n## " + title)
    end = text.find("\n## ", start + 4)
    return text[start:end if end != -1 else len(text)]


# --- checks of particular blocks: what the block shows must be what it does ------------------------------------

Verify = Callable[[dict, ScriptedOpenAIServer, Path, str], None]
"""(the block's namespace, the local model server, the folder it ran in, what it printed) -> None (asserts)."""


@dataclass(frozen=True)
class Check:
    marker: str
    """A piece of code that only the blocks this check is for hold."""
    verify: Verify
    replies: tuple[str, ...] = ()
    """The local model's replies, in order (then `default`)."""
    default: str = "Sunny in Lyon."
    postgres: bool = False
    """The block opens the PostgreSQL database named by `DATABASE_URL`: it runs on the session's server."""


def tools_sent(server: ScriptedOpenAIServer) -> set[str]:
    return {t["function"]["name"] for body in server.requests for t in body.get("tools", [])}


def check_core_example(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    result = ns["result"]
    assert result.triggered and result.tokens_after < result.tokens_before
    assert result.fits and result.stop_reason == "under_target"
    assert not server.requests  # the core calls no model


def check_agent(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert server.requests, "the agent called its model"
    assert tools_sent(server) == {"get_weather"}


def check_graph(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert len(server.requests) == 1
    assert [m["content"] for m in server.requests[0]["messages"]] == ["Hello!"]


def check_checkpoint(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert (cwd / "chat.sqlite").exists()
    assert ns["agent"].get_state(ns["config"]).values["compaction"]["last"]["reason"] == "under_trigger"


LOOKUP_TOOLS = {"recall_tool_result", "recall_message", "search_compacted_history"}
"""The tools offload gives the model (issue 22: the search and the message recall beside the result recall)."""


def check_offload(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert tools_sent(server) == {"get_weather", *LOOKUP_TOOLS}  # the lookup tools reach the model


def check_fleet(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert tools_sent(server) == {"get_weather", *LOOKUP_TOOLS}  # the lookup tools reach the model
    assert ns["DB_URI"] != "postgresql://agents:secret@db.internal:5432/agents"  # the local server, not the example


def check_events(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert re.search(r"^compacted under_\w+ \d+ -> \d+$", out, re.M), out
    assert len(server.requests[-1]["messages"]) < 21, "the model is sent a compacted history"


SUMMARY_REPLY = "The customer asked to change a reservation; the agent checked the flights."


def check_summarize(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    result = ns["result"]
    assert result.compacted and result.fits and result.tokens_after < result.tokens_before
    assert result.details["summarizer"] == "model" and result.summary.startswith(SUMMARY_REPLY)
    assert server.requests and all("tools" not in body for body in server.requests)  # the summarizer sends none


def check_fact_guard(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    guard = ns["FactGuard"]({"ticket": r"\bTCK-\d+\b"})
    assert [i.value for i in guard.extract("see TCK-12 and TCK-7")] == ["TCK-12", "TCK-7"]


def check_fence(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    summaries = [m for m in ns["summarized"].messages if ns["is_summary"](m)]
    assert len(summaries) == 1
    text = ns["summary_text"](summaries[0])
    start, end = ns["UNTRUSTED_DATA_FENCE"]
    outside = ns["outside_fences"](text)
    assert start in text and end in text and start not in outside and len(outside) < len(text)


def check_sql_chat_history(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert (cwd / "chat.db").exists()
    assert len(server.requests) == 2
    second = [(m["role"], m["content"]) for m in server.requests[1]["messages"]]
    assert second == [("system", "You are a helpful assistant."), ("user", "Weather in Lyon?"),
                      ("assistant", "Sunny, 21 C."), ("user", "And tomorrow?")]
    stored = ns["get_history"]("user-42").inner.messages
    assert [(m.type, m.content) for m in stored] == [("human", "Weather in Lyon?"), ("ai", "Sunny, 21 C."),
                                                    ("human", "And tomorrow?"), ("ai", "Rain.")]


def check_memory_chat_history(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    assert [(m["role"], m["content"]) for m in server.requests[0]["messages"]] == [
        ("system", "You are a helpful assistant."), ("user", "Weather in Lyon?")]
    assert [(m.type, m.content) for m in ns["stored"]["user-42"].messages] == [
        ("human", "Weather in Lyon?"), ("ai", "Sunny in Lyon.")]


def check_replay(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    replay, report = ns["replay"], ns["report"]
    assert report.to_dict()["conversations"] == len(ns["load_traces"](ns["bundled_traces"]()))
    assert len(ns["df"]) == len(replay.calls) > 0


def check_notebook_helpers(ns: dict, server: ScriptedOpenAIServer, cwd: Path, out: str) -> None:
    result, messages = ns["result"], ns["messages"]
    assert result.compacted
    assert len(ns["compaction_table"](messages, result, ns["policy"].counter)) >= len(messages)
    assert len(ns["summary_dataframe"](ns["replays"])) == 3


CHECKS = (
    Check("policy = CompactionPolicy(max_input_tokens=16_000)  # compacts only", check_core_example),
    Check("middleware=[CompactionMiddleware()]", check_agent),
    Check("pre_model_hook=compaction_hook(", check_agent),
    Check('builder.add_node("compact", CompactionNode(model=model))', check_graph),
    Check('CompactionNode(model=model, mode="view")', check_graph),
    Check("SqliteSaver(sqlite3.connect(", check_checkpoint),
    Check("InMemoryStore(), checkpointer=InMemorySaver()", check_offload),
    Check("PostgresStore.from_conn_string(DB_URI)", check_fleet, postgres=True),
    Check("small.astream_events(", check_events),
    Check('Summarize(model="openai:gpt-4o-mini"', check_summarize, default=SUMMARY_REPLY),
    Check("FactGuard({", check_fact_guard),
    Check("UNTRUSTED_DATA_FENCE", check_fence),
    Check("SQLChatMessageHistory(session_id=", check_sql_chat_history, replies=("Sunny, 21 C.", "Rain.")),
    Check("InMemoryChatMessageHistory()", check_memory_chat_history),
    Check("replay_files(bundled_traces(), policy)", check_replay),
    Check("compaction_table(messages, result", check_notebook_helpers),
)


def checks_of(snippet: Snippet) -> list[Check]:
    return [check for check in CHECKS if check.marker in snippet.code]


# --- the tests --------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")  # create_react_agent
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # langchain's own notices on RunnableWithMessageHistory
@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_snippet_runs_alone(snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture, request: pytest.FixtureRequest) -> None:
    checks = checks_of(snippet)
    assert len(checks) <= 1, f"{snippet.where}: more than one check matches: {[c.marker for c in checks]}"
    check = checks[0] if checks else None
    if check is not None and check.postgres:  # the server starts only for the blocks that need it
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("postgres_uri"))
    monkeypatch.chdir(tmp_path)  # a block may write files (chat.sqlite, chat.db)
    import matplotlib.pyplot as plt

    with ScriptedOpenAIServer(replies=check.replies if check else (),
                              default=check.default if check else "Sunny in Lyon.") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        namespace: dict = {"__name__": "snippet"}
        try:
            exec(compile(snippet.code, snippet.where, "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"{snippet.where} failed when run alone: {exc!r}\n{snippet.code}") from exc
        finally:
            plt.close("all")
    for body in server.requests:  # whatever a block sends is a valid chat request
        roles = [m["role"] for m in body["messages"]]
        assert roles and set(roles) <= {"system", "user", "assistant", "tool"} and "user" in roles, roles
    if check:
        check.verify(namespace, server, tmp_path, capsys.readouterr().out)


def test_every_check_has_its_block() -> None:
    """A check whose block was rewritten away would silently stop checking: each must match a block that runs."""
    for check in CHECKS:
        assert any(check.marker in s.code for s in SNIPPETS), f"no block holds {check.marker!r}"


def test_every_python_block_is_seen() -> None:
    """Python code the fence pattern does not see (an indented fence, ```py) would never be run: there is none."""
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            info = line.lstrip()[3:].split(" ")[0] if line.lstrip().startswith("```") else ""
            if info.startswith("py"):
                assert line.startswith("```python"), f"{page.relative_to(ROOT)}:{n}: {line!r} is not run"


def test_readme_shows_each_front_door() -> None:
    """The README keeps one runnable block per door: the core, the middleware, the LangGraph node, the chat
    history wrapper; the site holds the rest."""
    readme = [s.code for s in SNIPPETS if s.path == README]
    for door in ("compact(messages, policy)", "CompactionMiddleware(", "CompactionNode(",
                 "CompactingChatMessageHistory("):
        assert sum(door in code for code in readme) >= 1, door
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250, "the README stays a front page"


def test_command_lines_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `lc-compaction replay` / `compact` line of the README and of the CLI page, in a folder holding the
    files it names (a trace file for .jsonl, one conversation's messages for .json)."""
    import json

    from click.testing import CliRunner

    from lc_compaction.cli import main
    from lc_compaction.traces import bundled_traces

    monkeypatch.chdir(tmp_path)
    lines = []
    for page in (README, ROOT / "docs" / "cli.md"):
        for code in re.findall(r"^```bash\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M):
            lines += [line.split("#")[0].strip() for line in code.splitlines()]
    lines = [line for line in lines if line.startswith("lc-compaction ")]
    assert len(lines) >= 6
    trace = bundled_traces()[1].read_bytes()
    for name in {w for line in lines for w in shlex.split(line) if w.endswith((".jsonl", ".json"))}:
        if name.endswith(".jsonl"):
            (tmp_path / name).write_bytes(trace)
        else:
            (tmp_path / name).write_text(json.dumps(json.loads(trace.splitlines()[0])["messages"]), encoding="utf-8")
    for line in lines:
        result = CliRunner().invoke(main, shlex.split(line)[1:])
        assert result.exit_code == 0, f"{line}: {result.output}"
    assert (tmp_path / "context.png").read_bytes()[:4] == b"\x89PNG"


def test_install_lines_name_extras_that_exist() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib reads pyproject.toml from Python 3.11 on")

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    for text in (section("Install"), (ROOT / "docs" / "install.md").read_text(encoding="utf-8"),
                 (ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8")):
        named = re.findall(r'pip install (?:-e )?"[^"\[]*\[([a-z,]+)\]', text)
        assert named and all(set(n.split(",")) <= extras for n in named), (named, extras)
    assert 'pip install -e ".[offline]"' in section("Install")  # the form that works before the package is published
