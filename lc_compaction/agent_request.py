"""The agent's latest model request, as a front door sent it: what a cache-sharing summary request repeats.

A provider's prompt cache reads a request's longest prefix that an earlier request already sent (OpenAI: the
prompt's first tokens, tools and messages in the order sent, from 1,024 tokens on; Anthropic: `tools`, then
`system`, then `messages`, up to a cache breakpoint). A summary written from a fresh prompt (our domain prompt
and a transcript) shares none of it: the largest request of a session is billed uncached. Claude Code, Codex,
VS Code Copilot (`CacheFriendlySummarizationPrompt`) and Letta send the summary request as the agent's own
request instead: the same model, system prompt, tools and messages, and the instruction appended last, so the
whole prefix is a cache read.

`AgentRequest` holds what a door sent (its model, system message, conversation messages, tools, `tool_choice`
and model settings); `AgentRequest.runnable()` binds the model the way LangChain's `create_agent` does for a
request without structured output (`model.bind_tools(tools, tool_choice=..., **model_settings)`, or
`model.bind(**model_settings)` without tools), and `AgentRequest.inputs(instruction)` is the same messages, the
system message first, with the instruction as the last user message. So the summary request's `tools` and
`messages` start byte for byte with the agent's request.

Telling the model not to call a tool is done in the instruction's words only, not with `tool_choice`: Anthropic
documents that a change of `tool_choice` invalidates the cached message blocks ("What invalidates the cache",
prompt-caching guide), and OpenAI's cache key is the request's prefix, which the tool definitions are part of.
A reply that calls a tool anyway carries no text and is treated as a failed summary (`summary_call`).

The front doors build it (`integrations/middleware.py` from the model request it passed on,
`integrations/langgraph.py` from the model and tools it was given and the model input it returned); `compact`
takes it as `agent_request=` and `strategies.summarize.Summarize` uses it when its model is the agent's
(`same_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable

__all__ = ["AgentRequest", "same_model"]


@dataclass(frozen=True)
class AgentRequest:
    """The agent's latest model request (what its door sent), for a cache-sharing summary request.

    Attributes:
        model: the agent's chat model (not a binding: `runnable` binds the tools and settings).
        messages: the conversation messages sent, oldest first, without the system message.
        system: the system message sent first, if any.
        tools: the tools bound (LangChain tools, functions or provider dicts, as `bind_tools` takes them).
        tool_choice: the `tool_choice` bound with them (None: not set).
        model_settings: the other settings bound (`ModelRequest.model_settings`).
    """

    model: BaseChatModel
    messages: Sequence[BaseMessage]
    system: BaseMessage | None = None
    tools: Sequence[Any] = ()
    tool_choice: Any = None
    model_settings: Mapping[str, Any] = field(default_factory=dict)

    def runnable(self, model: BaseChatModel | None = None) -> Runnable[Any, Any]:
        """`model` (default: the agent's; a copy of it without its own retries, for example) bound as
        `create_agent` binds a request without structured output."""
        model = self.model if model is None else model
        if self.tools:
            return model.bind_tools(list(self.tools), tool_choice=self.tool_choice, **dict(self.model_settings))
        return model.bind(**dict(self.model_settings))

    def inputs(self, instruction: str) -> list[BaseMessage]:
        """The request's messages (the system message first) and `instruction` as the last user message."""
        head = [self.system] if self.system is not None else []
        return [*head, *self.messages, HumanMessage(content=instruction)]

    def answers_in_text(self) -> bool:
        """Whether the model may answer this request with text: False when its `tool_choice` forces a tool call
        ("required", "any", a tool's name or a tool dict; None, "auto" and "none" do not), so a summary request
        that repeats it could only get a tool call back."""
        return self.tool_choice in (None, "auto", "none") or not self.tools

    def begins(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether `messages` (the history a compaction is given) starts with this request's messages, each the
        same message (the same object, or equal in every field): a request from another branch of the thread (a
        rewind to an earlier checkpoint) or of a message edited or removed since (`update_state`, a redaction)
        does not, and a summary that repeated it would bring back what the history no longer holds."""
        sent = self.messages
        return len(sent) <= len(messages) and all(a is b or a == b for a, b in zip(sent, messages))

    def position(self, ids: Sequence[str]) -> list[int] | None:
        """The index in `messages` of each id of `ids`, or None when one of them was not sent (a summary of
        messages the agent's request did not hold cannot point at them)."""
        at = {m.id: i for i, m in enumerate(self.messages) if m.id}
        found = [at.get(i) for i in ids]
        return None if any(i is None for i in found) else [i for i in found if i is not None]


def same_model(a: Any, b: Any) -> bool:
    """Whether two chat models are the same model for the provider: the same object, or the same class with the
    same identifying parameters (LangChain's `_identifying_params`: the model name, the endpoint, the sampling
    settings), as `create_agent(model="openai:gpt-4o")` and `Summarize(model="openai:gpt-4o")` build two objects
    of one model."""
    if a is b:
        return True
    if not isinstance(a, BaseChatModel) or type(a) is not type(b):
        return False
    try:
        return dict(a._identifying_params) == dict(b._identifying_params)
    except Exception:  # noqa: BLE001 - a model whose parameters cannot be read is not known to be the same
        return False
