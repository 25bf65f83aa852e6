"""Counting accuracy: our counters and LangChain's ``count_tokens_approximately`` against a tiktoken count of
the OpenAI chat format, over every shared conversation.

The reference is computed here from the recorded OpenAI dicts, independently of lc-compaction's code, by the
OpenAI cookbook's rule ("How to count tokens with tiktoken", ``num_tokens_from_messages``): per message 3 tokens
+ the tokens of the role + of the content + of the name (and 1 more when there is a name); 3 tokens once for the
reply priming. The cookbook does not cover tool calls, and OpenAI does not publish how it renders them, so three
conventions are reported:

- **"tool calls as JSON"**: an assistant message's ``tool_calls`` list costs the tokens
  of its JSON as it is sent in the request body (``json.dumps(tool_calls, separators=(",", ":"),
  ensure_ascii=False)``: ids, ``"type":"function"``, name and the arguments string with its quotes escaped).
- **"name + args (recorded)"**: each call costs its name + its ``arguments`` string as recorded + 3 tokens, the
  rule ``hmarr/openai-chat-tokens`` fitted against the API's ``prompt_tokens`` (lc-compaction's exact counter
  follows it, see ``lc_compaction.tokens.TOOL_CALL_OVERHEAD_TOKENS``); ids are not counted.
- **"name + args (as ChatOpenAI sends)"** (the target's reference): the same, with the arguments as LangChain's
  ``ChatOpenAI`` puts them on the wire: ``json.dumps(args, ensure_ascii=False)`` of the parsed arguments
  (``langchain_openai.chat_models.base._lc_tool_call_to_openai_tool_call``), i.e. what a LangChain agent is billed
  for. It differs from the recorded string when the model emitted compact JSON (tau-bench's gpt-4o did:
  ``{"user_id":"..."}``). It is the target's reference because it is what a LangChain agent sends, and the one
  fitted against the API's billing; the JSON convention also counts tool-call ids and ``"type"`` fields that are not
  rendered to the model as text.

``tool_call_id`` is counted in none (the cookbook's loop would count every string field, but the id is not
rendered to the model as text).

Relative error = (counter - reference) / reference, per conversation; reported as the median and the worst (largest
absolute value, sign kept) over the conversations. Content that is not a string (content blocks) is counted by
its text blocks. The messages without tool calls are also compared one by one (``facts["text_only"]``): there the
three conventions agree, so any gap is the counter's.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import tiktoken
from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

from benchmarks.session import Record
from lc_compaction import ApproximateCounter, TiktokenCounter
from lc_compaction._offline import ensure_encoding
from lc_compaction.tokens import encoding_name_for_model
from lc_compaction.traces import parse_messages

__all__ = ["REFERENCES", "AccuracyRow", "accuracy", "reference_tokens"]

MESSAGE_TOKENS = 3
"""Tokens every message costs besides its text [OpenAI cookbook, num_tokens_from_messages]."""

NAME_TOKENS = 1
"""Extra token when a message has a name [OpenAI cookbook]."""

REPLY_PRIMING_TOKENS = 3
"""Tokens once per request: every reply is primed with <|start|>assistant<|message|> [OpenAI cookbook]."""

CALL_TOKENS = 3
"""Tokens per tool call besides its name and arguments under the "name + args" conventions
[hmarr/openai-chat-tokens, messageTokensEstimate]."""

REFERENCES = ("name + args (as ChatOpenAI sends)", "name + args (recorded)", "tool calls as JSON")
"""The reference conventions (see the module docstring); the first is the target's."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                       if isinstance(b, (str, dict)))
    return str(content)


def reference_tokens(messages: Sequence[dict[str, Any]], encoding: tiktoken.Encoding, convention: str) -> int:
    """Tokens of OpenAI-format ``messages`` by the cookbook's rule and the tool-call ``convention`` (one of
    `REFERENCES`).

    Raises:
        ValueError: unknown ``convention``.
    """
    if convention not in REFERENCES:
        raise ValueError(f"convention: one of {REFERENCES}, got {convention!r}")

    def enc(text: str) -> int:
        return len(encoding.encode_ordinary(text)) if text else 0

    total = REPLY_PRIMING_TOKENS if messages else 0
    for m in messages:
        total += MESSAGE_TOKENS + enc(m["role"]) + enc(_text(m.get("content")))
        if m.get("name"):
            total += enc(m["name"]) + NAME_TOKENS
        calls = m.get("tool_calls") or []
        if calls and convention == "tool calls as JSON":
            total += enc(json.dumps(calls, separators=(",", ":"), ensure_ascii=False))
        for call in calls if convention != "tool calls as JSON" else ():
            fn = call.get("function") or {}
            args = fn.get("arguments") or ""
            if convention == "name + args (as ChatOpenAI sends)" and args:
                args = json.dumps(json.loads(args), ensure_ascii=False)
            total += CALL_TOKENS + enc(fn.get("name") or "") + enc(args)
    return total


@dataclass
class AccuracyRow:
    """One counter's relative errors against one reference, over the conversations.

    Attributes:
        counter: the counter's label.
        reference: the reference convention (one of `REFERENCES`).
        errors: relative error per conversation (fractions, signed), in the conversations' order.
    """

    counter: str
    reference: str
    errors: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Median signed relative error (fraction)."""
        return statistics.median(self.errors)

    @property
    def median_abs(self) -> float:
        """Median absolute relative error (fraction)."""
        return statistics.median(abs(e) for e in self.errors)

    @property
    def worst(self) -> float:
        """The error of largest absolute value (fraction, signed)."""
        return max(self.errors, key=abs)

    @property
    def within_1pct(self) -> int:
        """Conversations whose absolute error is at most 1%."""
        return sum(abs(e) <= 0.01 for e in self.errors)


def accuracy(records: Sequence[Record], model_name: str) -> tuple[list[AccuracyRow], dict[str, Any]]:
    """Relative errors of our exact and approximate counters and of ``count_tokens_approximately`` against
    both references over ``records`` (each converted by ``lc_compaction.traces.parse_messages``).

    Returns:
        (rows, facts): one `AccuracyRow` per counter and reference; facts about the collection
        (``conversations``, ``messages``, ``tool_calls``, ``encoding``, ``reference_tokens``: each reference's total
        in tokens, ``text_only``: the exact counter on the messages without tool calls, compared one by one:
        ``messages``, ``differing`` (messages whose counts differ), ``tokens`` (reference total) and
        ``abs_diff_tokens``).

    Raises:
        ValueError: a record is not a valid trace (naming its file and line).
    """
    encoding_name = encoding_name_for_model(model_name)
    encoding = ensure_encoding(encoding_name)  # tiktoken's own Encoding; loaded offline when possible
    counters: dict[str, Callable[[list[BaseMessage]], int]] = {
        f"TiktokenCounter ({encoding_name})": TiktokenCounter(model_name, cache_size=0).count_messages,
        "ApproximateCounter (4 chars/token)": ApproximateCounter(cache_size=0).count_messages,
        "count_tokens_approximately (LangChain)": count_tokens_approximately,
    }
    rows = {(c, r): AccuracyRow(c, r) for c in counters for r in REFERENCES}
    facts: dict[str, Any] = {"conversations": len(records), "messages": 0, "tool_calls": 0,
                             "encoding": encoding_name, "reference_tokens": dict.fromkeys(REFERENCES, 0),
                             "text_only": {"messages": 0, "differing": 0, "tokens": 0, "abs_diff_tokens": 0}}
    exact_one = TiktokenCounter(model_name, cache_size=0)
    text_only = facts["text_only"]
    for rec in records:
        messages = parse_messages(rec.messages, path=str(rec.path), line=rec.line, conversation_id=rec.id)
        facts["messages"] += len(messages)
        facts["tool_calls"] += sum(len(m.get("tool_calls") or []) for m in rec.messages)
        refs = {r: reference_tokens(rec.messages, encoding, r) for r in REFERENCES}
        for r, v in refs.items():
            facts["reference_tokens"][r] += v
        for c, count in counters.items():
            tokens = count(messages)
            for r in REFERENCES:
                rows[(c, r)].errors.append((tokens - refs[r]) / refs[r])
        for raw, message in zip(rec.messages, messages):
            if raw.get("tool_calls"):
                continue
            ref = reference_tokens([raw], encoding, REFERENCES[0]) - REPLY_PRIMING_TOKENS
            diff = abs(exact_one.count_message(message) - ref)
            text_only["messages"] += 1
            text_only["tokens"] += ref
            text_only["abs_diff_tokens"] += diff
            text_only["differing"] += diff > 0
    return list(rows.values()), facts
