"""Maps a shared case's `settings` (see /work/shared/cases/README.md) onto a CompactionPolicy.

This is the one place that translates the cases' vocabulary into our API; the summarizer tests reuse it
with their own strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lc_compaction import CompactionPolicy
from lc_compaction.tokens import CallableCounter

from tests.oracle.checks import counter_for


def _size(spec: dict[str, Any]) -> tuple[str, int]:
    (kind, value), = spec.items()
    return kind, value


def policy_for(settings: dict[str, Any], strategies: Sequence[Any] | None = None) -> CompactionPolicy:
    """A policy for the case settings: the case's own counter (messages, or LangChain's approximate count with
    bounded images), `max_tokens` as the window with no reply reserve, and the trigger (`max_tokens` when the
    case gives none)."""
    kwargs: dict[str, Any] = {"token_counter": CallableCounter(counter_for(settings)), "strategies": strategies}
    if "max_tokens" in settings:
        kwargs["max_input_tokens"] = settings["max_tokens"]
        kwargs["reserve"] = 0
    if "trigger" in settings:
        kwargs["trigger"] = dict(settings["trigger"])
    elif "max_tokens" in settings:
        kwargs["trigger"] = ("tokens", settings["max_tokens"])
    if "keep" in settings:
        kwargs["keep"] = _size(settings["keep"])
    return CompactionPolicy(**kwargs)
