"""The compaction policy: the window, when to compact (`trigger`), what to protect (`keep`), how far to go
(`target`), room for the reply (`reserve`), the strategies, the token counter and the pins.

`trigger` and `keep` use the tuple format of LangChain's `SummarizationMiddleware` (`ContextSize`):
`("messages", N)`, `("tokens", N)`, `("fraction", f)` of `max_input_tokens`; a trigger may also be a
`TriggerClause` dict (`{"tokens": 4000, "messages": 10}`: all must be met) and a list of either means any.
`keep` also accepts `("turns", N)`: the last N user requests and everything after them.

Defaults (issue 13): no trigger of its own, so compaction runs only when the call would not fit (the history is
over the budget, `max_input_tokens - reserve`); then down to 50% of the window; keep the last 2 turns; leave
`min(4096, max_input_tokens // 10)` tokens for the reply; and, on every call, a tool result identical to an
earlier one becomes a one-line note when it arrives (`deduplicate`, `lc_compaction.dedup`). Why not earlier:
providers bill a cached prompt prefix at a fraction of the input price (about 10% for OpenAI's gpt-5 family and
Anthropic cache reads), and every compaction rewrites the history and makes the next call pay its prefix again,
so compacting before it is needed costs more than it saves. Measured in `benchmarks/BILL.md` (the 150 shared
conversations replayed, OpenAI's caching rule, cached tokens at 10%; bill relative to not compacting), the
previous defaults (trigger at 80%, target 60%) against the budget as trigger, both without deduplication: 0.728
vs 0.698 at an 8,000-token window (and 2 of 134 conversations that fit billed more, vs none), 0.978 vs 0.908 at
32,000, 1.050 vs 1.013 at 64,000. With deduplication (the default), 0.599 at 8,000 and 0.644 from 16,000 up.
The 50% target (was 60%) buys headroom so that the next calls, while the history grows, do not compact again
(0.599 vs 0.610 at 8,000 with a 60% target; the same from 16,000 up).

The rule depends on the price of a cached token (`cached_price`): a compaction that reclaims R tokens and makes the
next call pay its T-token prefix again pays back after about `(1 - p) / p * T / R` calls at price p: 9 T/R calls at
0.1, but T/R at 0.5 and none at 1 (no caching). So with `cached_price >= EARLY_TRIGGER_PRICE` (0.5: gpt-4o's
cached-input price is half its input price; providers without a prompt cache are 1.0) the default trigger is 80%
of the window (`EARLY_TRIGGER_FRACTION`, the harness pattern of compacting before the window is full): measured
without deduplication at a price of 0.5, 0.569 against 0.581 with the budget as trigger at 8,000 tokens, 0.896
against 0.907 at 64,000 (and no conversation that fits billed more).

A running tool loop that was folded before is the exception to "only when the call would not fit": it will
outgrow the window again, so with the default trigger it folds again once its growth pays for the fold
(`progress.loop_trigger`, asked by `compact` beside `is_triggered`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from langchain_core.messages import BaseMessage

from lc_compaction.billing import DEFAULT_CACHED_PRICE
from lc_compaction.markers import is_converted_system, is_pinned_mark
from lc_compaction.strategies import DropOldExchanges, TruncateToolResults
from lc_compaction.structure import is_request
from lc_compaction.tokens import TokenCounter, resolve_token_counter

if TYPE_CHECKING:
    from lc_compaction.ladder import Strategy

ContextSize = tuple[str, Union[int, float]]
"""`("messages", N)`, `("tokens", N)`, `("fraction", f)` (of `max_input_tokens`), or, for `keep` only,
`("turns", N)`."""

TriggerSpec = Union[ContextSize, dict, Sequence[Union[ContextSize, dict]]]
"""One `ContextSize`, one `TriggerClause` dict (all of its thresholds must be met), or a list of them (any)."""

DEFAULT_TARGET_FRACTION = 0.5
"""Default target: half the window (see the module docstring for its measurement)."""
LOOP_TARGET_OF_TARGET = 0.3
"""Inside a running tool loop that is most of the history (a coding agent's one request and its hundred steps),
the second pass folds down to this share of the target (`loop_goal`: 15% of the window by default). Issue 24: a
loop grows by a step at every call, and each of its compactions breaks the cached prefix right after the request,
so each should buy many calls of headroom. Replayed on the shared SWE-bench runs (cached price 0.1, bill relative
to not compacting at 8,000 / 16,000 / 32,000 / 64,000 tokens): 0.469 / 0.646 / 0.873 / 0.980 folding to the
target, 0.460 / 0.590 / 0.811 / 0.957 at half of it, 0.460 / 0.590 / 0.807 / 0.953 at 0.3; the tau-bench
conversations kept 99.2% of their identifiers at 4,000 tokens with each (`benchmarks/BILL.md` has the current
figures)."""
DEFAULT_TARGET_OF_TRIGGER = 0.75
"""A default target is at most 3/4 of the lowest token threshold that triggers (a trigger, or the budget), so a
compaction that reaches it leaves a quarter of that threshold for the history to grow into before the next one."""
DEFAULT_KEEP: ContextSize = ("turns", 2)
EARLY_TRIGGER_PRICE = 0.5
"""At or above this `cached_price` the default trigger is `EARLY_TRIGGER_FRACTION` of the window instead of the
budget (module docstring: a broken prefix pays back within about T/R calls)."""
EARLY_TRIGGER_FRACTION = 0.8
"""The default trigger (fraction of the window) when cached tokens cost `EARLY_TRIGGER_PRICE` or more."""
DEFAULT_OFFLOAD_ABOVE = 5_000
"""Default `offload_above` (tokens): a tool result larger than this is offloaded when it arrives. From the 1,349
tool results of the shared traces (tau-bench airline, AgentDojo; o200k_base): 95% are under 1,218 tokens and
none lies between 2,885 and 6,524 tokens; the 58 above that gap (4.3% of the results) hold 69% of the
tool-result tokens. Any threshold in the gap offloads the same results; 5,000 sits in its middle. deepagents
uses 20,000 tokens for 200,000-token windows: none of these traces' results would reach it."""
DEFAULT_RESERVE_CAP = 4096
"""Default reply room: min(4096, window // 10) tokens. 4,096 is a common completion cap (OpenAI's
`max_tokens` default for many models was 4,096); a tenth of the window scales it down for small windows."""

_TRIGGER_KINDS = ("messages", "tokens", "fraction")
_KEEP_KINDS = ("messages", "tokens", "fraction", "turns")


def _parse_size(setting: str, value: Any, kinds: Sequence[str]) -> tuple[str, float]:
    if isinstance(value, dict):
        raise ValueError(f"{setting}: expected a tuple like ('tokens', 3000), got a dict {value!r}")
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{setting}: expected a tuple (kind, value) with kind in {list(kinds)}, got {value!r}")
    kind, number = value
    if kind not in kinds:
        raise ValueError(f"{setting}: unknown kind {kind!r}; use one of {list(kinds)}")
    if isinstance(number, bool) or not isinstance(number, (int, float)) or math.isnan(number):
        raise ValueError(f"{setting}: {kind} must be a number, got {number!r}")
    if kind == "fraction":
        if not 0 < number <= 1:
            raise ValueError(f"{setting}: fraction must be in (0, 1], got {number!r}")
    elif number < 0 or (kind != "tokens" and number != int(number)):
        raise ValueError(f"{setting}: {kind} must be a non-negative whole number, got {number!r}")
    return kind, float(number)


@dataclass
class CompactionPolicy:
    """What to compact, when, and how far. Validated on construction.

    Args:
        max_input_tokens: the model's context window in tokens (its profile's `max_input_tokens`).
            Needed for `("fraction", f)` sizes and for the default trigger.
        trigger: when to compact (see module docstring). Compaction runs when ANY clause is exceeded
            (strictly above its threshold: an input that exactly fits is left alone) or when the history is
            over the budget. Default None: the budget alone (`trigger_clauses == []`), i.e. only when the call
            would not fit (measured in `benchmarks/BILL.md`, see the module docstring). Without
            `max_input_tokens` a trigger is required.
        keep: the recent part protected from the first (soft) pass. Default `("turns", 2)`.
            When the soft pass cannot get under the budget, a second pass shrinks the protected part to the
            pins and the most recent step.
        target: the size to compact down to, below every trigger threshold so the next call does not compact
            again. Default: 50% of the window (`DEFAULT_TARGET_FRACTION`), or 75% of the lowest trigger token
            threshold or of the budget when that is lower (`DEFAULT_TARGET_OF_TRIGGER`).
        reserve: tokens left for the model's reply; the budget is `max_input_tokens - reserve`.
            Default `min(4096, max_input_tokens // 10)`.
        strategies: the ladder, cheapest first. Default `(TruncateToolResults(), DropOldExchanges())`.
        token_counter: "exact" (tiktoken, default), "approximate", "messages", a `TokenCounter`, or a
            LangChain-style callable `(list[BaseMessage]) -> int`.
        model_name: chooses the tiktoken encoding of the exact counter (o200k_base for gpt-4o and newer).
        pin: messages no strategy may remove, truncate or summarize: a predicate or a collection of message
            ids. Messages marked with `pin_message` are pinned too. The leading system prompt, the first and
            the latest user request are always pinned.
        repair: repair a broken input history (every repair reported in the result) instead of raising
            `InvalidHistoryError`. None (default): `compact()` raises (as False) and the front doors (the
            LangGraph node, the agent middleware, the chat-history wrapper) repair (as True), so an agent's
            thread is never left unusable by a history its provider accepts; see `repairs_by_default`.
        offload: keep what compaction takes out of the history in a LangGraph store, recallable by the model
            (`lc_compaction.offload`): a `BaseStore`, or True for the graph's own store (front doors only).
            None (default) or False: off. `compact()` itself does no I/O: use a front door or
            `lc_compaction.integrations.offload.compact_offloaded`.
        offload_above: with offload on, a tool result larger than this many tokens is offloaded when it
            arrives (the model sees a head and tail preview and the handle). Default `DEFAULT_OFFLOAD_ABOVE`
            (5,000; see its docstring); None: only what compaction truncates, drops or summarizes.
        deduplicate: on every call, even under the trigger, a tool result identical (character for character) to
            an earlier one still in the history becomes a one-line note naming that earlier result's tool call
            (`lc_compaction.dedup`): lossless, and made before the provider sees the new result, so the cached
            prefix is never rewritten. Default True.
        cached_price: what a cached input token costs over an uncached one (0 to 1) at the provider: what breaking
            the cached prefix costs, and so when the default trigger fires (module docstring). Default
            `billing.DEFAULT_CACHED_PRICE` (0.1: Anthropic cache reads, OpenAI's gpt-5 family, DeepSeek); 0.5 for
            gpt-4o, 0.25 for Gemini, 1.0 for a provider without prompt caching. The replay bills at this price
            unless given another `billing.PromptCache`.
        clear_at_least: the fewest tokens a compaction may reclaim, with the name and both meanings of the
            parameter in LangChain's `ClearToolUsesEdit` and Anthropic's context editing: once triggered, the
            ladder goes on until it has reclaimed at least this many tokens (the goal is lowered to the size
            before minus this, when that is below the target), and a compaction that still reclaims fewer while
            the history fits the budget is not applied (`stop_reason` "below_clear_at_least"): a small compaction
            costs the provider's cached prefix and buys little. Default 0: the target's distance below the trigger
            is the minimum (with the default trigger, the budget, at least `budget - target` tokens).

    Raises:
        ValueError: naming the setting (`trigger`, `keep`, `target`, `reserve`, `max_input_tokens`,
            `token_counter`, `strategies`, `offload`, `offload_above`, `deduplicate`, `cached_price`,
            `clear_at_least`, a strategy's `ahead_at`: not below the trigger) that is invalid.
    """

    max_input_tokens: int | None = None
    trigger: TriggerSpec | None = None
    keep: ContextSize = DEFAULT_KEEP
    target: ContextSize | None = None
    reserve: int | None = None
    strategies: Sequence[Strategy] | None = None
    token_counter: Any = "exact"
    model_name: str | None = None
    pin: Callable[[BaseMessage], bool] | Collection[str] | None = None
    repair: bool | None = None
    offload: Any = None
    offload_above: int | None = DEFAULT_OFFLOAD_ABOVE
    deduplicate: bool = True
    cached_price: float = DEFAULT_CACHED_PRICE
    clear_at_least: int = 0
    counter: TokenCounter = field(init=False, repr=False)
    trigger_clauses: list[dict[str, float]] = field(init=False, repr=False)
    ahead_strategies: tuple[Any, ...] = field(init=False, repr=False, default=())
    """The strategies that work ahead of time (an `ahead_at` set: `ladder.AheadStrategy`), in ladder order."""

    def __post_init__(self) -> None:
        w = self.max_input_tokens
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
            raise ValueError(f"max_input_tokens: must be a positive int (tokens), got {w!r}")
        price = self.cached_price
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price <= 1:
            raise ValueError(f"cached_price: must be a number from 0 to 1 (a cached token's price over an uncached "
                             f"one), got {price!r}")
        least = self.clear_at_least
        if isinstance(least, bool) or not isinstance(least, int) or least < 0:
            raise ValueError(f"clear_at_least: must be a non-negative int (tokens), got {least!r}")
        if not isinstance(self.deduplicate, bool):
            raise ValueError(f"deduplicate: must be True or False, got {self.deduplicate!r}")
        if self.repair is not None and not isinstance(self.repair, bool):
            raise ValueError(f"repair: must be True, False or None, got {self.repair!r}")
        if self.reserve is None:
            self.reserve = min(DEFAULT_RESERVE_CAP, w // 10) if w else 0
        if isinstance(self.reserve, bool) or not isinstance(self.reserve, int) or self.reserve < 0:
            raise ValueError(f"reserve: must be a non-negative int (tokens), got {self.reserve!r}")
        if w is not None and self.reserve >= w:
            raise ValueError(f"reserve: {self.reserve} tokens leaves no room in a window of {w} tokens")
        self.trigger_clauses = self._parse_trigger(self.trigger)
        if isinstance(self.keep, list):
            self.keep = tuple(self.keep)
        kind, value = _parse_size("keep", self.keep, _KEEP_KINDS)
        if kind == "fraction" and w is None:
            raise ValueError("keep: ('fraction', f) needs max_input_tokens")
        if self.target is not None:
            if isinstance(self.target, list):
                self.target = tuple(self.target)
            tkind, tvalue = _parse_size("target", self.target, _TRIGGER_KINDS)
            if tkind == "fraction" and w is None:
                raise ValueError("target: ('fraction', f) needs max_input_tokens")
            self._check_target_below_trigger(tkind, tvalue)
        if self.strategies is None:
            self.strategies = (TruncateToolResults(), DropOldExchanges())
        else:
            self.strategies = tuple(self.strategies)
            for s in self.strategies:
                if not (hasattr(s, "apply") and hasattr(s, "aapply") and hasattr(s, "name")):
                    raise ValueError(f"strategies: {s!r} is not a Strategy (needs name, apply, aapply)")
        self.counter = resolve_token_counter(self.token_counter, model_name=self.model_name)
        self._check_ahead()
        self._check_offload()
        self._check_offload_above()

    def _check_offload(self) -> None:
        if self.offload is False:
            self.offload = None
        if self.offload is not None and self.offload is not True:
            from langgraph.store.base import BaseStore  # only when a store is given: the core needs no LangGraph

            if isinstance(self.offload, BaseStore):
                return
            raise ValueError(f"offload: expected a LangGraph BaseStore, True (the graph's store) or None, "
                             f"got {type(self.offload).__name__}")

    def _check_offload_above(self) -> None:
        above = self.offload_above
        if above is not None and (isinstance(above, bool) or not isinstance(above, int) or above <= 0):
            raise ValueError(f"offload_above: must be a positive int (tokens) or None, got {above!r}")

    def repairs_by_default(self, default: bool) -> bool:
        """Whether to repair a broken input: `repair` when set, else `default` (False for `compact()`, True for
        the front doors)."""
        return default if self.repair is None else self.repair

    # ------------------------------------------------------------------ trigger
    def _parse_trigger(self, trigger: Any) -> list[dict[str, float]]:
        w = self.max_input_tokens
        if trigger is None:
            if w is None:
                raise ValueError("trigger: give a trigger such as ('tokens', 100_000) or set max_input_tokens")
            if self.cached_price >= EARLY_TRIGGER_PRICE:  # a broken prefix is cheap: compact before it is full
                return [{"fraction": EARLY_TRIGGER_FRACTION}]
            return []  # the budget alone: `is_triggered` is True when the history is over it
        items = [trigger] if isinstance(trigger, (tuple, dict)) else list(trigger)
        if not items:
            raise ValueError("trigger: an empty list never triggers; give at least one threshold")
        clauses: list[dict[str, float]] = []
        for item in items:
            if isinstance(item, dict):
                if not item:
                    raise ValueError("trigger: an empty TriggerClause dict")
                clause = {}
                for k, v in item.items():
                    kind, value = _parse_size("trigger", (k, v), _TRIGGER_KINDS)
                    clause[kind] = value
            else:
                kind, value = _parse_size("trigger", item, _TRIGGER_KINDS)
                clause = {kind: value}
            if "fraction" in clause and w is None:
                raise ValueError("trigger: ('fraction', f) needs max_input_tokens")
            clauses.append(clause)
        return clauses

    def trigger_tokens(self) -> list[float]:
        """The token thresholds of the trigger (tokens, and fractions times the window), in tokens."""
        out = []
        for c in self.trigger_clauses:
            if "tokens" in c:
                out.append(c["tokens"])
            if "fraction" in c:
                out.append(c["fraction"] * self._window())
        return out

    def _message_thresholds(self) -> list[float]:
        return [c["messages"] for c in self.trigger_clauses if "messages" in c]

    def _check_target_below_trigger(self, kind: str, value: float, setting: str = "target") -> None:
        if kind == "messages":
            lows = self._message_thresholds()
            if lows and value >= min(lows):
                raise ValueError(f"{setting}: {int(value)} messages is not below the trigger "
                                 f"({int(min(lows))} messages)")
            return
        tokens = value * self._window() if kind == "fraction" else value
        lows = self.trigger_tokens()
        budget = self.budget_tokens()
        what = "the trigger ("
        if not lows and budget is not None and not self._message_thresholds():  # the default: the budget triggers
            lows = [budget]
            what = "the budget (the default trigger: max_input_tokens - reserve, "
        elif self.trigger is None and lows:  # the default trigger at a cached_price >= EARLY_TRIGGER_PRICE
            what = f"the default trigger ({EARLY_TRIGGER_FRACTION:.0%} of the window at cached_price >= "
            what += f"{EARLY_TRIGGER_PRICE}, "
        if lows and tokens >= min(lows):
            raise ValueError(f"{setting}: {tokens:.0f} tokens is not below {what}{min(lows):.0f} tokens)")

    def _check_ahead(self) -> None:
        """Each strategy's `ahead_at` (`Summarize`): a `ContextSize` of the trigger's kinds, below the trigger (or
        the budget) where that can be known: a size in tokens below every token threshold, a size in messages
        below every message threshold."""
        w = self.max_input_tokens
        ahead = []
        for s in self.strategies or ():
            size = getattr(s, "ahead_at", None)
            if size is None:
                continue
            kind, value = _parse_size("ahead_at", size, _TRIGGER_KINDS)
            if kind == "fraction" and w is None:
                raise ValueError("ahead_at: ('fraction', f) needs max_input_tokens")
            self._check_target_below_trigger(kind, value, setting="ahead_at")
            if not (callable(getattr(s, "ahead_wanted", None)) and callable(getattr(s, "start_ahead", None))):
                raise ValueError(f"strategies: {s!r} has an ahead_at but is not an AheadStrategy (needs "
                                 "ahead_wanted and start_ahead)")
            ahead.append(s)
        self.ahead_strategies = tuple(ahead)

    def is_ahead(self, size: ContextSize, tokens: int, n_messages: int) -> bool:
        """True when a history of `tokens` tokens and `n_messages` messages is strictly above `size` (a
        strategy's `ahead_at`: `("tokens", N)`, `("fraction", f)` of the window, `("messages", N)`)."""
        kind, value = size
        if kind == "messages":
            return n_messages > value
        return tokens > (value * self._window() if kind == "fraction" else value)

    def is_triggered(self, tokens: int, n_messages: int) -> bool:
        """True when any trigger clause is exceeded (all thresholds of a clause strictly above), or the
        history is over the budget."""
        budget = self.budget_tokens()
        if budget is not None and tokens > budget:
            return True
        for c in self.trigger_clauses:
            ok = True
            if "tokens" in c:
                ok &= tokens > c["tokens"]
            if "messages" in c:
                ok &= n_messages > c["messages"]
            if "fraction" in c:
                ok &= tokens > c["fraction"] * self._window()
            if ok:
                return True
        return False

    # ------------------------------------------------------------------ budget and target
    def _window(self) -> int:
        """`max_input_tokens`, for a `("fraction", f)` size: `__post_init__` rejects a fraction without it."""
        assert self.max_input_tokens is not None, "a fraction needs max_input_tokens (checked in __post_init__)"
        return self.max_input_tokens

    def budget_tokens(self) -> int | None:
        """The hard limit in tokens the compacted history must fit: `max_input_tokens - reserve`; None without
        a window (a trigger says when to compact, not what must fit: then only the soft pass runs)."""
        if self.max_input_tokens is not None:
            return self.max_input_tokens - (self.reserve or 0)
        return None

    def target_goal(self) -> tuple[int | None, int | None]:
        """(tokens, messages) the soft pass compacts down to; None where that unit has no goal."""
        if self.target is not None:
            kind, value = self.target
            if kind == "messages":
                return None, int(value)
            if kind == "fraction":
                return int(value * self._window()), None
            return int(value), None
        tok_lows = self.trigger_tokens()
        candidates = [low * DEFAULT_TARGET_OF_TRIGGER for low in tok_lows]
        window, budget = self.max_input_tokens, self.budget_tokens()
        if window is not None and budget is not None:  # a budget exactly when there is a window
            candidates.append(DEFAULT_TARGET_FRACTION * window)
            candidates.append(budget * DEFAULT_TARGET_OF_TRIGGER)
        tokens = int(min(candidates)) if candidates else None
        msg_lows = self._message_thresholds()
        messages = int(min(msg_lows) * DEFAULT_TARGET_OF_TRIGGER) if msg_lows else None
        return tokens, messages

    def loop_goal(self) -> int | None:
        """The token goal of the second pass inside a running tool loop: `LOOP_TARGET_OF_TARGET` of the target's
        tokens; None when the target has no token goal."""
        tokens, _ = self.target_goal()
        return None if tokens is None else int(tokens * LOOP_TARGET_OF_TARGET)

    # ------------------------------------------------------------------ keep and pins
    def keep_start(self, messages: Sequence[BaseMessage], counts: Sequence[int]) -> int:
        """Index where the protected recent part starts, before aligning it to a step boundary."""
        kind, value = self.keep
        n = len(messages)
        if kind == "messages":
            return max(0, n - int(value))
        if kind == "turns":
            if value == 0:
                return n
            seen = 0
            for i in range(n - 1, -1, -1):
                if is_request(messages[i]):
                    seen += 1
                    if seen == value:
                        return i
            return 0
        limit = value if kind == "tokens" else value * self._window()
        acc = 0
        i = n
        while i > 0 and acc + counts[i - 1] <= limit:
            acc += counts[i - 1]
            i -= 1
        return i

    def is_pinned_by_caller(self, message: BaseMessage) -> bool:
        """True when the caller pinned the message (the `pin` setting or `pin_message`), or when it is a
        mid-history SystemMessage sent as a HumanMessage (an instruction: it is kept like the system prompt)."""
        if message.additional_kwargs and (is_pinned_mark(message) or is_converted_system(message)):
            return True
        if self.pin is None:
            return False
        if callable(self.pin):
            return bool(self.pin(message))
        return message.id is not None and message.id in self.pin
