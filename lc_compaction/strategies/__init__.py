"""The strategies of the ladder, one file each. Each follows `lc_compaction.ladder.Strategy`."""

from lc_compaction.strategies.drop import DropOldExchanges
from lc_compaction.facts import FactGuard
from lc_compaction.strategies.summarize import SummarizationError, Summarize
from lc_compaction.strategies.truncate import TruncateToolResults

__all__ = ["DropOldExchanges", "FactGuard", "SummarizationError", "Summarize", "TruncateToolResults"]
