"""A message's kind by its class, in one dict lookup: what the passes over a whole history use instead of chains
of ``isinstance`` checks.

LangChain's messages are pydantic models, and pydantic's model metaclass derives from ``ABCMeta``, so
``isinstance(message, SomeMessageClass)`` goes through ``ABCMeta.__instancecheck__``, slower than a plain class
check on a miss, and a pass that asks "tool? system? human? AI?" of each of thousands of messages pays it several
times per message. The kind depends only on the class, so it is worked out once per class
(subclasses such as ``AIMessageChunk`` included) and then read from a dict.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage

SYSTEM = "system"
HUMAN = "human"
AI = "ai"
TOOL = "tool"
REMOVE = "remove"
OTHER = "other"
"""The kinds: `SystemMessage`, `HumanMessage`, `AIMessage`, `ToolMessage`, LangGraph's `RemoveMessage`, and any other
message class (``ChatMessage``, ``FunctionMessage``, custom); each includes its subclasses."""

_BY_CLASS: dict[type, str] = {}


def kind(message: object) -> str:
    """The kind of `message` (one of the constants above), cached per class."""
    cls = type(message)
    found = _BY_CLASS.get(cls)
    if found is None:
        found = _BY_CLASS[cls] = _classify(message)
    return found


def _classify(message: object) -> str:
    if isinstance(message, RemoveMessage):
        return REMOVE
    if isinstance(message, ToolMessage):
        return TOOL
    if isinstance(message, AIMessage):
        return AI
    if isinstance(message, HumanMessage):
        return HUMAN
    if isinstance(message, SystemMessage):
        return SYSTEM
    return OTHER
