"""Without an optional extra, the parts that need it raise an ImportError that names the extra and both ways to
install it (from a package index, and from a clone of the repository, since lc-compaction is not on PyPI yet);
the rest of the package still imports. `langchain` (the `agents` extra) is blocked in a fresh interpreter, as it
is absent on a machine without the extra."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

BLOCK_LANGCHAIN = """
import importlib.abc, sys

class NoLangchain(importlib.abc.MetaPathFinder):
    # as on a machine without the `agents` extra: `langchain` and its submodules cannot be found
    # (langchain_core, langgraph and langchain_openai are other distributions and stay importable)
    def find_spec(self, name, path=None, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

for name in [m for m in sys.modules if m == "langchain" or m.startswith("langchain.")]:
    del sys.modules[name]
sys.meta_path.insert(0, NoLangchain())
"""


def _without_langchain(code: str) -> dict:
    """Run `code` (which sets `out`, a JSON-able dict) in a fresh interpreter where `langchain` cannot be imported."""
    script = BLOCK_LANGCHAIN + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", "import json\n" + script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_agents_message(message: str) -> None:
    assert "CompactionMiddleware" in message and "'langchain'" in message and "'agents'" in message
    assert 'pip install "lc-compaction[agents]"' in message
    assert 'pip install -e ".[agents]"' in message  # the repository form, until the package is published


def test_the_middleware_without_the_agents_extra_says_which_extra_to_install() -> None:
    out = _without_langchain("""
        out = {}
        for stmt in ("from lc_compaction.integrations import CompactionMiddleware",
                     "from lc_compaction import CompactionMiddleware",
                     "import lc_compaction.integrations.middleware"):
            try:
                exec(stmt)
            except ImportError as exc:
                out[stmt] = [type(exc).__name__, str(exc), exc.name, type(exc.__cause__).__name__]
            else:
                out[stmt] = None
        # the rest of the front doors and the core do not need langchain
        from lc_compaction import CompactionPolicy, compact
        from lc_compaction.integrations import CompactionNode, CompactingChatMessageHistory
        from langchain_core.messages import HumanMessage
        out["core"] = compact([HumanMessage("hi", id="h")], CompactionPolicy(max_input_tokens=1000)).tokens_after > 0
        out["langchain_loaded"] = "langchain" in sys.modules
    """)
    assert out.pop("core") is True and out.pop("langchain_loaded") is False
    for stmt, got in out.items():
        assert got is not None, f"{stmt} imported although langchain is blocked"
        kind, message, name, cause = got
        assert kind == "ImportError", stmt  # not a bare ModuleNotFoundError
        assert name == "langchain" and cause == "ModuleNotFoundError", stmt
        _check_agents_message(message)


def test_the_block_is_real_langchain_is_importable_here() -> None:
    """The same import works in this environment (the dev extra installs `agents`): the failure above comes
    from the missing package alone."""
    from lc_compaction.integrations import CompactionMiddleware

    assert CompactionMiddleware.__module__ == "lc_compaction.integrations.middleware"


def test_reports_without_the_plot_extra_say_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from lc_compaction.report import calls_dataframe

    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ModuleNotFoundError
    with pytest.raises(ImportError) as info:
        calls_dataframe([])
    message = str(info.value)
    assert "'pandas'" in message and 'pip install "lc-compaction[plot]"' in message
    assert 'pip install -e ".[plot]"' in message
