"""Shared pytest set-up.

- Fixtures that need a service live in plugin modules registered here, so test modules use them by name
  without importing them: `tests/llama_fixture.py` (`llama_server`: a real llama.cpp server on 127.0.0.1,
  one per session, stopped by its pid), `tests/fakes.py` (`server`: a fake OpenAI-compatible server; and
  `ScriptedModel`, a scripted chat model).
- History builders are plain functions in `tests/builders.py`, imported by name where they are used: a test
  calls a builder several times with different arguments, which a fixture would only wrap.
"""

pytest_plugins = ["tests.llama_fixture", "tests.fakes"]
