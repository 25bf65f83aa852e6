"""What a model call's input is billed when the provider caches prompt prefixes: a cache model and a meter.

Units: tokens are input tokens by a `TokenCounter` (the policy's); a bill is in **units of uncached input
tokens**: `uncached + cached_price * cached`, so a call with nothing cached is billed its input tokens.

**The rule** (`PromptCache`, OpenAI's by default). A request's cached tokens are the longest prefix it shares with
the previous request of the same conversation, counted in steps of `step_tokens` from `min_tokens`: 0 below
1,024 shared tokens, else `1,024 + 128 * floor((shared - 1,024) / 128)`. Source: OpenAI, Prompt caching guide
(developers.openai.com/api/docs/guides/prompt-caching: "Cache hits are only possible for exact prefix matches",
caching "for prompts that are 1024 tokens or longer") and the OpenAI cookbook, Prompt Caching 201 ("cache hits
occurring in increments of 128 tokens"). The model assumes the previous request's prefix is still in the cache
(OpenAI keeps it for minutes of inactivity; an agent loop calls again within seconds) and nothing older:
a prefix shared only with an earlier request is not counted. Cache writes cost nothing extra (OpenAI before the
GPT-5.6 family, DeepSeek; Anthropic bills writes at 1.25x and GPT-5.6 and later at 1.25x: not modelled).

**Prices** (`cached_price`: a cached token's price over an uncached one; default `DEFAULT_CACHED_PRICE` = 0.1).
Published figures, which change; check the provider's pricing page for a model:
- Anthropic: cache reads 0.1x the base input price (Anthropic pricing, prompt caching: "Cache reads 0.1x").
- OpenAI gpt-5 family: 0.1 (gpt-5 $1.25 input, $0.125 cached input per 1M tokens, OpenAI API pricing);
  gpt-4.1 family 0.25; gpt-4o and the o1 models 0.5 (gpt-4o $2.50 / $1.25).
- DeepSeek: about 0.1 on its current models (cache-hit $0.028 vs cache-miss $0.28 per 1M input tokens,
  api-docs.deepseek.com, Models & Pricing); 0.26 for the older deepseek-chat ($0.07 / $0.27).
- Gemini: 0.25 for implicit caching on the Gemini 2.5 models (a 75% discount, Gemini API pricing); Google Cloud
  now documents a 90% discount (0.1) for implicit caching (Vertex / Gemini Enterprise, Context cache overview).

**Summary calls** (`BillMeter.bill_summary`, `SummaryBill`). A summary call is billed like an agent call, by the
same rule, against the agent's previous request (the one the meter holds): a cache-sharing summary request
(`Summarize(share_agent_request=True)`: the agent's request repeated, the instruction appended) shares the whole
of it, so most of its input is a cache read; a transcript prompt (one user message: our domain prompt and a
transcript) shares at most a role header, under the 1,024-token minimum, and is billed uncached. The summary call
does not become the previous request: the agent's next call is billed against the agent's previous one (a
provider keeps both prefixes for minutes), so the agent's bills are the same with and without summary calls
counted. Its output tokens are billed at `output_price` uncached input tokens each (default
`DEFAULT_OUTPUT_PRICE`, 4). The agent's own replies are not billed: they are the recorded ones under every policy.

**The shared prefix** (`shared_prefix_tokens`), exact for the counter and cheap: requests are compared message by
message, as sent (role, name, content, tool calls' ids, names and arguments, a tool result's tool_call_id; ids and
metadata are not sent). The leading messages that are the same count whole (`counter.count_message`, cached per
message). In the first message that differs, when both have the same role and name, the tokens before its content
(the message overhead but its closing token, the role, the name) are shared too, and so is the common prefix of
the two contents' token sequences: tiktoken's encodings of both strings compared token by token with
`TiktokenCounter`, the count of the common character prefix with other `StructuredCounter`s; nothing for list
contents or other counters (conservative). Equal contents with different tool calls share the header and the
content. The reply priming (3 tokens) ending the previous request is never counted as shared. The traces record
no tool schemas; those sent before the messages would add the same cached tokens with and without compaction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from lc_compaction._count_cache import _role
from lc_compaction.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    NAME_OVERHEAD_TOKENS,
    StructuredCounter,
    TiktokenCounter,
    TokenCounter,
)

__all__ = ["DEFAULT_CACHED_PRICE", "DEFAULT_OUTPUT_PRICE", "OPENAI_CACHE_MIN_TOKENS", "OPENAI_CACHE_STEP_TOKENS",
           "BillMeter", "CallBill", "PromptCache", "SummaryBill", "bill_ratio", "same_on_wire", "shared_prefix_tokens"]

OPENAI_CACHE_MIN_TOKENS = 1_024
"""Shortest prefix OpenAI caches, tokens (Prompt caching guide: prompts of 1,024 tokens or longer)."""

OPENAI_CACHE_STEP_TOKENS = 128
"""Granularity of OpenAI cache hits above the minimum, tokens (OpenAI cookbook, Prompt Caching 201)."""

DEFAULT_CACHED_PRICE = 0.1
"""A cached input token's price over an uncached one: Anthropic cache reads, OpenAI's gpt-5 family and DeepSeek's
current models (see the module docstring for the sources and other providers)."""

DEFAULT_OUTPUT_PRICE = 4.0
"""An output token's price over an uncached input token's, for the summary calls' replies: OpenAI's ratio for
gpt-4o ($2.50 input, $10.00 output per 1M tokens, OpenAI API pricing). Published figures, which change: other
models' ratios are higher (gpt-5: $1.25 / $10.00, 8; Anthropic's Claude Sonnet 4: $3 / $15, 5)."""


@dataclass(frozen=True)
class PromptCache:
    """A provider's prompt-cache rule and price (OpenAI's rule and a 0.1 price by default).

    Attributes:
        name: names the rule in reports ("openai").
        min_tokens: the shortest shared prefix that is cached, tokens.
        step_tokens: cached tokens are `min_tokens` plus a whole number of these steps, tokens.
        cached_price: a cached token's price over an uncached one (0 <= price <= 1).
        whole_messages: True to share whole messages only (no credit inside the first message that differs: the
            cache key of a replay that compares requests message by message, as issue 24's reference figures
            do); False (default): the common token prefix inside that message counts too (`shared_prefix_tokens`),
            closer to OpenAI's cache, which works on token prefixes of the request.

    Raises:
        ValueError: a negative `min_tokens`, a `step_tokens` below 1, or `cached_price` outside [0, 1].
    """

    name: str = "openai"
    min_tokens: int = OPENAI_CACHE_MIN_TOKENS
    step_tokens: int = OPENAI_CACHE_STEP_TOKENS
    cached_price: float = DEFAULT_CACHED_PRICE
    whole_messages: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise ValueError(f"min_tokens: a number of tokens >= 0, got {self.min_tokens!r}")
        if isinstance(self.step_tokens, bool) or not isinstance(self.step_tokens, int) or self.step_tokens < 1:
            raise ValueError(f"step_tokens: a number of tokens >= 1, got {self.step_tokens!r}")
        price = self.cached_price
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not (0 <= price <= 1):
            raise ValueError(f"cached_price: a cached token's price over an uncached one, between 0 and 1, "
                             f"got {price!r}")

    def cached_tokens(self, shared_prefix_tokens: int) -> int:
        """Cached tokens of a request sharing `shared_prefix_tokens` tokens with the previous one: 0 below
        `min_tokens`, else `min_tokens` plus the whole steps of `step_tokens` that fit in the rest."""
        if shared_prefix_tokens < self.min_tokens:
            return 0
        return self.min_tokens + (shared_prefix_tokens - self.min_tokens) // self.step_tokens * self.step_tokens

    def billed(self, input_tokens: int, cached_tokens: int) -> float:
        """The input bill in uncached-token units: `(input_tokens - cached_tokens) + cached_price * cached_tokens`."""
        return (input_tokens - cached_tokens) + self.cached_price * cached_tokens

    def describe(self) -> str:
        """One line naming the rule and the price, for reports."""
        unit = "whole messages" if self.whole_messages else "tokens"
        return (f"{self.name} prompt cache: the longest prefix shared with the previous request ({unit}), in "
                f"{self.step_tokens:,}-token steps from {self.min_tokens:,} tokens; cached tokens at "
                f"{self.cached_price:g} of the input price")

    def to_dict(self) -> dict[str, Any]:
        """The settings and `describe()` as JSON-serializable values."""
        return {"name": self.name, "min_tokens": self.min_tokens, "step_tokens": self.step_tokens,
                "cached_price": self.cached_price, "whole_messages": self.whole_messages, "rule": self.describe()}


# ------------------------------------------------------------------------------------------ the shared prefix
def _calls(message: BaseMessage) -> tuple[Any, ...]:
    if not isinstance(message, AIMessage):
        return ()
    return (tuple((tc.get("id"), tc.get("name"), tc.get("args")) for tc in message.tool_calls),
            tuple((tc.get("id"), tc.get("name"), tc.get("args")) for tc in message.invalid_tool_calls))


def _same_header(a: BaseMessage, b: BaseMessage) -> bool:
    return _role(a) == _role(b) and a.name == b.name


def same_on_wire(a: BaseMessage, b: BaseMessage) -> bool:
    """True when `a` and `b` are sent alike: same role, name, content, tool calls (id, name, arguments) and, for
    tool results, tool_call_id. Message ids, `additional_kwargs` and `response_metadata` are not compared (chat
    model integrations do not send them; lc-compaction's marks live there)."""
    if a is b:
        return True
    if not _same_header(a, b) or a.content != b.content:
        return False
    if isinstance(a, ToolMessage) and a.tool_call_id != getattr(b, "tool_call_id", None):
        return False
    return _calls(a) == _calls(b)


def _common_tokens(a: str, b: str, counter: StructuredCounter) -> int:
    """Tokens of the common prefix of two contents (see the module docstring)."""
    k = 0
    n = min(len(a), len(b))
    while k < n and a[k] == b[k]:
        k += 1
    if k == 0:
        return 0
    if isinstance(counter, TiktokenCounter):
        ta, tb = counter.encoding.encode_ordinary(a), counter.encoding.encode_ordinary(b)
        j = 0
        m = min(len(ta), len(tb))
        while j < m and ta[j] == tb[j]:
            j += 1
        return j
    return counter.count_text(a[:k])


def _partial_tokens(a: BaseMessage, b: BaseMessage, counter: TokenCounter) -> int:
    """Tokens shared inside the first differing message (0 unless both have the same role and name)."""
    if not isinstance(counter, StructuredCounter) or not _same_header(a, b):
        return 0
    header = MESSAGE_OVERHEAD_TOKENS - 1 + counter.count_text(_role(a))
    if a.name:
        header += counter.count_text(str(a.name)) + NAME_OVERHEAD_TOKENS
    ca, cb = a.content, b.content
    if not (isinstance(ca, str) and isinstance(cb, str)):
        return header
    if ca == cb:
        return header + counter.count_text(ca)
    return header + _common_tokens(ca, cb, counter)


def shared_prefix_tokens(previous: Sequence[BaseMessage], current: Sequence[BaseMessage],
                         counter: TokenCounter, *, whole_messages: bool = False) -> tuple[int, int]:
    """The prefix `current` shares with `previous`, as `(tokens, messages)`: its tokens by `counter` (see the
    module docstring for the method; with `whole_messages`, only the leading messages sent alike) and the number
    of leading messages sent alike (`same_on_wire`).

    Never more than `counter.count_messages(previous)` minus its reply priming. 0 tokens when either is empty.
    """
    n = 0
    tokens = 0
    for a, b in zip(previous, current):
        if not same_on_wire(a, b):
            break
        tokens += counter.count_message(b)
        n += 1
    if n < len(previous) and n < len(current) and not whole_messages:
        tokens += _partial_tokens(previous[n], current[n], counter)
    return tokens, n


# ------------------------------------------------------------------------------------------------- the meter
@dataclass(frozen=True)
class CallBill:
    """One request's input bill.

    Attributes:
        input_tokens: the request's input tokens (`counter.count_messages`).
        shared_tokens: tokens of the prefix shared with the previous request (`shared_prefix_tokens`).
        shared_messages: leading messages sent alike in both requests.
        cached_tokens: what the cache rule bills as cached (`PromptCache.cached_tokens`), tokens.
        billed: the input bill, in uncached-token units (`PromptCache.billed`).
    """

    input_tokens: int
    shared_tokens: int
    shared_messages: int
    cached_tokens: int
    billed: float


@dataclass(frozen=True)
class SummaryBill:
    """One summary call's bill (`BillMeter.bill_summary`): its input billed like an agent call's, plus its output.

    Attributes:
        form: what was sent: "agent" (the agent's request and the instruction), "transcript" (our transcript
            prompt), or another name a caller gives (e.g. "middleware" for LangChain's SummarizationMiddleware).
        input_tokens: the request's input tokens (messages and reply priming).
        shared_tokens: tokens of the prefix it shares with the agent's previous request.
        cached_tokens: what the cache rule bills as cached (`PromptCache.cached_tokens`), tokens.
        output_tokens: the reply's tokens.
        billed_input: the input bill, in uncached-token units (`PromptCache.billed`).
        billed_output: `output_price * output_tokens`, in uncached-token units.
    """

    form: str
    input_tokens: int
    shared_tokens: int
    cached_tokens: int
    output_tokens: int
    billed_input: float
    billed_output: float

    @property
    def billed(self) -> float:
        """The call's bill, in uncached-token units: `billed_input + billed_output`."""
        return self.billed_input + self.billed_output


class BillMeter:
    """Bills the requests of one conversation in order, each against the previous one.

    Args:
        cache: the `PromptCache` (rule and price).
        counter: counts the tokens (the policy's counter, so bills and replay figures agree).
    """

    def __init__(self, cache: PromptCache, counter: TokenCounter):
        self.cache = cache
        self.counter = counter
        self._previous: list[BaseMessage] = []

    def bill(self, messages: Sequence[BaseMessage], *, input_tokens: int | None = None) -> CallBill:
        """The bill of the next request, `messages` (then remembered as the previous request).

        Args:
            messages: what the request sends.
            input_tokens: its input tokens when already counted (`counter.count_messages(messages)`).
        """
        sent = list(messages)
        total = self.counter.count_messages(sent) if input_tokens is None else input_tokens
        shared, n = shared_prefix_tokens(self._previous, sent, self.counter, whole_messages=self.cache.whole_messages)
        shared = min(shared, total)
        cached = min(self.cache.cached_tokens(shared), total)
        self._previous = sent
        return CallBill(total, shared, n, cached, self.cache.billed(total, cached))

    def bill_summary(self, messages: Sequence[BaseMessage], *, output_tokens: int, input_tokens: int | None = None,
                     output_price: float = DEFAULT_OUTPUT_PRICE, form: str = "") -> SummaryBill:
        """The bill of a summary call made before the agent's next request (see the module docstring): its input
        against the previous request (which stays the previous request), plus its output.

        Args:
            messages: what the summary request sends; or, with `input_tokens`, only its leading messages known to
                be sent alike (a `details["summary_requests"]` entry of the "agent" form: the agent's request it
                repeats; of the "transcript" form: none, `()`).
            output_tokens: the reply's tokens.
            input_tokens: the request's input tokens when already counted (default
                `counter.count_messages(messages)`).
            output_price: an output token's price over an uncached input token's (default `DEFAULT_OUTPUT_PRICE`).
            form: names what was sent (`SummaryBill.form`).

        Raises:
            ValueError: a negative `output_tokens` or `output_price`.
        """
        if isinstance(output_price, bool) or not isinstance(output_price, (int, float)) or output_price < 0:
            raise ValueError(f"output_price: an output token's price over an uncached input token's, >= 0, "
                             f"got {output_price!r}")
        if output_tokens < 0:
            raise ValueError(f"output_tokens: a number of tokens >= 0, got {output_tokens!r}")
        sent = list(messages)
        total = self.counter.count_messages(sent) if input_tokens is None else input_tokens
        shared, _ = shared_prefix_tokens(self._previous, sent, self.counter, whole_messages=self.cache.whole_messages)
        shared = min(shared, total)
        cached = min(self.cache.cached_tokens(shared), total)
        return SummaryBill(form, total, shared, cached, output_tokens, self.cache.billed(total, cached),
                           output_price * output_tokens)


def bill_ratio(billed: float, billed_uncompacted: float) -> float | None:
    """`billed / billed_uncompacted` rounded to 4 places; None when nothing was billed without compaction."""
    return round(billed / billed_uncompacted, 4) if billed_uncompacted > 0 and math.isfinite(billed) else None
