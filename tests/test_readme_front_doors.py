"""Every ```python block of the README runs as written, as a reader would run it: the blocks of one `## `
section in order, in a fresh namespace (a section's examples may continue one another, never another
section's), and `test_every_python_block_is_run` fails when a section with code has no test here.

The blocks use `ChatOpenAI`; the tests point it at a local OpenAI-compatible server on 127.0.0.1 (no network)
and check what went over the wire: valid chat requests, with the tool schemas, the compaction event the
last agent block prints, the history a chat-history chain sends. The README's `lc-compaction replay` lines run
too, in a folder holding the files they name; the install lines name only extras pyproject.toml defines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.agent_replay import ScriptedOpenAIServer

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def section(title: str, path: Path = README) -> str:
    """The text of the README section whose `## ` heading starts with `title`, up to the next `## ` heading."""
    text = path.read_text(encoding="utf-8")
    start = text.index("\n## " + title)
    end = text.find("\n## ", start + 4)
    return text[start:end if end != -1 else len(text)]


def python_blocks(title: str = "Add it to an agent") -> list[str]:
    """The code of every ```python block of one README section, in order."""
    return BLOCK.findall(section(title))


def run_section(title: str) -> dict:
    """Run every ```python block of one README section, in order, in one fresh namespace; that namespace."""
    namespace: dict = {"__name__": "readme"}
    blocks = python_blocks(title)
    assert blocks, f"README section {title!r} has no python block"
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{README.name}[{title} {i}]", "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"README {title!r} block {i} failed: {exc!r}\n{code}") from exc
    return namespace


TESTED_SECTIONS = ("Use it from Python", "Add it to an agent", "Summarize", "Chat histories",
                   "Replay recorded conversations", "Explore it in notebooks")
"""The `## ` sections whose python blocks the tests below run (each test runs all blocks of its section)."""


def test_every_python_block_is_run() -> None:
    text = README.read_text(encoding="utf-8")
    for match in BLOCK.finditer(text):
        title = text[:match.start()].rsplit("\n## ", 1)[1].split("\n", 1)[0]
        assert title.startswith(TESTED_SECTIONS), f"README section {title!r} has python code no test runs"


@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_readme_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    blocks = python_blocks()
    assert len(blocks) >= 6, "the README should show each front door"
    monkeypatch.chdir(tmp_path)  # the persistence example writes chat.sqlite
    with ScriptedOpenAIServer(default="Sunny in Lyon.") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        namespace: dict = {"__name__": "readme"}
        for i, code in enumerate(blocks):
            try:
                exec(compile(code, f"{README.name}[block {i}]", "exec"), namespace)
            except Exception as exc:  # name the block that failed
                raise AssertionError(f"README block {i} failed: {exc!r}\n{code}") from exc
    assert (tmp_path / "chat.sqlite").exists()
    assert len(server.requests) >= 5
    for body in server.requests:
        roles = [m["role"] for m in body["messages"]]
        assert roles and set(roles) <= {"system", "user", "assistant", "tool"}
        assert "user" in roles
    assert any([t["function"]["name"] for t in body.get("tools", [])] == ["get_weather"] for body in server.requests)
    last = server.requests[-1]
    assert len(last["messages"]) < 21, "the last example sends a compacted history"
    assert re.search(r"^compacted under_\w+ \d+ -> \d+$", capsys.readouterr().out, re.M)


def test_readme_core_example_runs() -> None:
    """The `compact()` example of the README runs as shown and compacts the history it builds."""
    result = run_section("Use it from Python")["result"]
    assert result.triggered and result.tokens_after < result.tokens_before
    assert result.fits and result.stop_reason == "under_target"


def test_readme_summarize_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Summarize examples: a recorded conversation over the window is summarized by the model (here the
    local server), the summary is its reply plus the fact guard's line; the FactGuard example builds."""
    reply = "The customer asked to change a reservation; the agent checked the flights."
    with ScriptedOpenAIServer(default=reply) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        namespace = run_section("Summarize")
    result = namespace["result"]
    assert result.compacted and result.fits and result.tokens_after < result.tokens_before
    assert result.details["summarizer"] == "model" and result.summary.startswith(reply)
    assert server.requests and all("tools" not in body for body in server.requests)  # the summarizer sends none
    guard = namespace["FactGuard"]({"ticket": r"\bTCK-\d+\b"})
    assert [i.value for i in guard.extract("see TCK-12 and TCK-7")] == ["TCK-12", "TCK-7"]


def test_readme_fence_example_runs_alone() -> None:
    """The fence example ("Tool output never speaks as the user") runs on its own, in a fresh namespace with
    nothing from the blocks above it, as a reader who copies only it runs it; the summary it writes holds tool
    data inside the fence, and the part outside the fences is the rest."""
    (code,) = [b for b in python_blocks("Summarize") if "UNTRUSTED_DATA_FENCE" in b]
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, f"{README.name}[fence example]", "exec"), namespace)
    summaries = [m for m in namespace["summarized"].messages if namespace["is_summary"](m)]
    assert len(summaries) == 1
    text = namespace["summary_text"](summaries[0])
    start, end = namespace["UNTRUSTED_DATA_FENCE"]
    outside = namespace["outside_fences"](text)
    assert start in text and end in text and start not in outside and len(outside) < len(text)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # langchain's own notices on the deprecated classes
def test_readme_chat_history_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chat-history example: two turns through RunnableWithMessageHistory over a SQLite file; the second
    request carries the first exchange, and the SQL table stores both."""
    monkeypatch.chdir(tmp_path)
    with ScriptedOpenAIServer(replies=["Sunny, 21 C.", "Rain."]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        namespace = run_section("Chat histories")
    assert (tmp_path / "chat.db").exists()
    assert len(server.requests) == 2
    second = [(m["role"], m["content"]) for m in server.requests[1]["messages"]]
    assert second == [("system", "You are a helpful assistant."), ("user", "Weather in Lyon?"),
                      ("assistant", "Sunny, 21 C."), ("user", "And tomorrow?")]
    stored = namespace["get_history"]("user-42").inner.messages
    assert [(m.type, m.content) for m in stored] == [("human", "Weather in Lyon?"), ("ai", "Sunny, 21 C."),
                                                    ("human", "And tomorrow?"), ("ai", "Rain.")]


def test_readme_replay_from_python_example_runs() -> None:
    import matplotlib.pyplot as plt

    namespace = run_section("Replay recorded conversations")
    plt.close("all")
    replay, report = namespace["replay"], namespace["report"]
    assert report.to_dict()["conversations"] == len(namespace["load_traces"](namespace["bundled_traces"]()))
    assert len(namespace["df"]) == len(replay.calls) > 0


def test_readme_notebook_helpers_example_runs() -> None:
    import matplotlib.pyplot as plt

    namespace = run_section("Explore it in notebooks")
    plt.close("all")
    result, messages = namespace["result"], namespace["messages"]
    assert result.compacted
    table = namespace["compaction_table"](messages, result, namespace["policy"].counter)
    assert len(table) >= len(messages)
    assert len(namespace["summary_dataframe"](namespace["replays"])) == 3


def test_readme_replay_command_lines_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `lc-compaction replay` line of the README, in a folder holding the trace files it names."""
    import shlex

    from click.testing import CliRunner

    from lc_compaction.cli import main
    from lc_compaction.traces import bundled_traces

    monkeypatch.chdir(tmp_path)
    bash = re.findall(r"^```bash\n(.*?)^```", section("Replay recorded conversations"), re.S | re.M)
    lines = [line.split("#")[0].strip() for code in bash for line in code.splitlines()]
    lines = [line for line in lines if line.startswith("lc-compaction ")]
    assert len(lines) >= 4
    for name in {w for line in lines for w in shlex.split(line) if w.endswith(".jsonl")}:
        (tmp_path / name).write_bytes(bundled_traces()[1].read_bytes())
    for line in lines:
        result = CliRunner().invoke(main, shlex.split(line)[1:])
        assert result.exit_code == 0, f"{line}: {result.output}"
    assert (tmp_path / "context.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_install_lines_name_extras_that_exist() -> None:
    from importlib.metadata import metadata

    extras = set(metadata("lc-compaction").get_all("Provides-Extra") or ())  # pyproject.toml's, as installed
    text = section("Install")
    named = re.findall(r'pip install (?:-e )?"[^"\[]*\[([a-z,]+)\]', text)
    assert named and all(set(n.split(",")) <= extras for n in named), (named, extras)
    assert 'pip install -e ".[offline]"' in text  # the form that works before the package is published
