"""lc-compaction: context compaction for LangChain and LangGraph agents.

Shrinks the history before each model call, cheapest strategy first, stopping as soon as it fits:
truncate old tool results, drop the oldest exchanges, summarize the older part. An AIMessage's
tool_calls and their ToolMessages are one unit: never orphaned, split or duplicated.
"""

from typing import Any

from lc_compaction.agent_request import AgentRequest
from lc_compaction.billing import PromptCache
from lc_compaction.compact import CompactionResult, acompact, compact
from lc_compaction.tally import CountTally
from lc_compaction.ladder import Action, AheadStrategy, LadderState, Strategy
from lc_compaction.markers import DROPPED_TEXT, is_dropped_marker, is_summary, is_truncated, pin_message
from lc_compaction.policy import CompactionPolicy, ContextSize
from lc_compaction.strategies import DropOldExchanges, FactGuard, SummarizationError, Summarize, TruncateToolResults
from lc_compaction.structure import (
    CompactionInvariantError,
    InvalidHistoryError,
    Repair,
    Violation,
    check_invariants,
    repair_history,
)
from lc_compaction.replay import (
    CallRecord,
    ConversationReplay,
    ReplayReport,
    areplay_conversation,
    replay_conversation,
    replay_files,
)
from lc_compaction.traces import Trace, TraceFormatError, bundled_traces, load_traces
from lc_compaction._offline import EncodingUnavailableError
from lc_compaction.tokens import (
    ApproximateCounter,
    MessageCounter,
    TiktokenCounter,
    TokenCounter,
    resolve_token_counter,
)

_LAZY = {
    # front doors, imported on first use (the core needs neither LangGraph nor LangChain's agents)
    "CompactionNode": "lc_compaction.integrations.langgraph",
    "CompactionState": "lc_compaction.integrations.langgraph",
    "compaction_hook": "lc_compaction.integrations.langgraph",
    "CompactionMiddleware": "lc_compaction.integrations.middleware",
    "CompactingChatMessageHistory": "lc_compaction.integrations.chat_history",
    "recall_tool_result": "lc_compaction.integrations.recall",
}


def __getattr__(name: str) -> Any:  # module-level lazy attributes (PEP 562)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lc_compaction' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "CompactingChatMessageHistory",
    "CompactionMiddleware",
    "CompactionNode",
    "CompactionState",
    "FactGuard",
    "SummarizationError",
    "Summarize",
    "compaction_hook",
    "recall_tool_result",
    "CallRecord",
    "ConversationReplay",
    "EncodingUnavailableError",
    "ReplayReport",
    "Trace",
    "TraceFormatError",
    "areplay_conversation",
    "bundled_traces",
    "load_traces",
    "replay_conversation",
    "replay_files",
    "Action",
    "AgentRequest",
    "AheadStrategy",
    "ApproximateCounter",
    "CompactionInvariantError",
    "CompactionPolicy",
    "CompactionResult",
    "CountTally",
    "ContextSize",
    "DROPPED_TEXT",
    "DropOldExchanges",
    "InvalidHistoryError",
    "LadderState",
    "MessageCounter",
    "PromptCache",
    "Repair",
    "Strategy",
    "TiktokenCounter",
    "TokenCounter",
    "TruncateToolResults",
    "Violation",
    "acompact",
    "check_invariants",
    "compact",
    "is_dropped_marker",
    "is_summary",
    "is_truncated",
    "pin_message",
    "repair_history",
    "resolve_token_counter",
]
