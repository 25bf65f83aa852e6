"""Every ```python block of the front doors' README text runs, in order, as a reader would run it.

The blocks use `ChatOpenAI`; the test points it at a local OpenAI-compatible server on 127.0.0.1 (no network)
and checks what went over the wire: valid chat requests, with the tool schemas, and the compaction event the
last block prints.
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
    (code,) = python_blocks("Use it from Python")[:1]
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, "README.md[compact]", "exec"), namespace)
    result = namespace["result"]
    assert result.triggered and result.tokens_after < result.tokens_before
    assert result.fits and result.stop_reason == "under_target"
