"""Front doors for agents: the LangGraph pre-model node and the LangChain v1 AgentMiddleware.

- `CompactionNode` / `compaction_hook(...)` (`integrations/langgraph.py`): `create_react_agent(...,
  pre_model_hook=node)` or a node before the model node of a `StateGraph`.
- `CompactionMiddleware` (`integrations/middleware.py`): `create_agent(..., middleware=[CompactionMiddleware()])`.
  Needs the `langchain` package (extra "agents"); imported on first use.
- `CompactingChatMessageHistory` (`integrations/chat_history.py`): a `BaseChatMessageHistory` wrapper for chains
  run with `RunnableWithMessageHistory` (both deprecated in langchain-core; prefer the doors above for new code).
  Imported on first use.
- `EVENT_NAME` (`integrations/events.py`): the name of the custom event both doors dispatch.
- `recall_tool_result` and `recall_message` (`integrations/recall.py`): the tools that read back what offload kept
  (`offload=True` on either door; `integrations/offload.py` does the writes); `search_compacted_history`
  (`integrations/search.py`): the tool that searches it; undo (`uncompact` on both doors) in
  `integrations/history.py`.

What the node and the middleware share (`resolve_policy`, `plan_compaction`, `CompactionPlan`, the memory layout,
the offload writes) lives in `integrations/plan.py`; rewrite mode's state writes (by id) in
`integrations/writes.py`; view mode's memory in `integrations/view.py`.
"""

from typing import Any

from lc_compaction.integrations.events import EVENT_NAME
from lc_compaction.integrations.langgraph import CompactionNode, CompactionState, compaction_hook
from lc_compaction.integrations.recall import recall_message, recall_tool_result
from lc_compaction.integrations.search import search_compacted_history

__all__ = ["EVENT_NAME", "CompactingChatMessageHistory", "CompactionAgentState", "CompactionMiddleware",
           "CompactionNode", "CompactionState", "compaction_hook", "recall_message", "recall_tool_result",
           "search_compacted_history"]


def __getattr__(name: str) -> Any:
    """Import the middleware (which needs `langchain`) and the chat-history wrapper only when asked for."""
    if name in ("CompactionMiddleware", "CompactionAgentState"):
        from lc_compaction.integrations import middleware

        return getattr(middleware, name)
    if name == "CompactingChatMessageHistory":
        from lc_compaction.integrations.chat_history import CompactingChatMessageHistory

        return CompactingChatMessageHistory
    raise AttributeError(f"module 'lc_compaction.integrations' has no attribute {name!r}")
