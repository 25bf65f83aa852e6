"""The fact guard's old home: it lives in `lc_compaction.facts` (identifier extraction sits below the rules that use
it: notes, markers, progress lines and summaries). Kept so that ``from lc_compaction.strategies.facts import
FactGuard`` goes on working."""

from lc_compaction.facts import (
    DEFAULT_MAX_FACT_TOKENS,
    FactGuard,
    GuardResult,
    Identifier,
    contains,
    occurrences,
)

__all__ = ["DEFAULT_MAX_FACT_TOKENS", "FactGuard", "GuardResult", "Identifier", "contains", "occurrences"]
