"""The input bill of whole conversations under the provider's prompt cache, ours beside LangChain's anchors.

Every shared conversation is replayed as the agent loop runs it: before each recorded assistant message (one
model call), each row decides what is sent; every request is billed by `lc_compaction.billing` (OpenAI's rule:
the longest prefix shared with the previous request, 128-token steps from 1,024 tokens; cached tokens at
`PromptCache.cached_price`, 0.1 by default), counted with the exact counter, and compared with the same
conversation sent whole at every call (no compaction: the recording so far). Rows:

- **default policy**: `replay_files(..., CompactionPolicy(max_input_tokens=window))`, rewrite semantics (the
  compacted history replaces the history, `lc_compaction.replay`): compaction only when the call would not fit,
  down to 50% of the window, repeated tool results noted on arrival (`lc_compaction.dedup`).
- **default policy, target 60%**: the same with `target=("fraction", 0.6)` (the previous default target).
- **default policy without deduplication**: the same with `deduplicate=False`.
- **previous default (trigger 80%, target 60%, no deduplication)**: `trigger=("fraction", 0.8),
  target=("fraction", 0.6), deduplicate=False`, the policy defaults before issue 13, on the same ladder: the
  measurement the new defaults were chosen against. These three rows tell the parts of the rule apart.
- **ClearToolUsesEdit (ContextEditingMiddleware)**: `ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=
  0.8 * window)])` (its defaults otherwise: `keep=3`, `clear_at_least=0`, the approximate counter), its
  `wrap_model_call` called at every call with the whole history so far (the system prompt as the request's
  `system_message`, as `create_agent` passes it); what it hands to the model handler is what is sent. It edits a
  deep copy at every call and never changes the stored history, as the middleware does.
- **SummarizationMiddleware (stub summarizer)**: `SummarizationMiddleware(model, trigger=("tokens", 0.8 *
  window), keep=("tokens", 0.5 * window), summarizer=stub)`, its `before_model` at every call on the stored
  messages (without the system prompt, as in `create_agent`); an update replaces the stored messages, as
  LangGraph applies `RemoveMessage(REMOVE_ALL_MESSAGES)`. The stub writes no model call: the first
  `STUB_SUMMARY_CHARS` characters of the summarized messages' transcript (about 400 tokens, the size of a short
  model summary), deterministic. Its bill depends on that size; read it as an order of magnitude.

Figures per row and window: the bill relative to no compaction (summed billed input over summed uncompacted billed
input), compactions (calls that changed the history: ours, calls whose ladder ran and changed it,
`CallRecord.compacted`; ClearToolUsesEdit, calls where it cleared a result; SummarizationMiddleware, calls where it
summarized), arrival edits (ours: calls whose only change was to messages new since the previous call, a repeated
tool result noted, `lc_compaction.dedup`: the ladder did not run and the cached prefix is intact, so they are not
compactions), back-to-back compactions (on the call right after another), prefix breaks (calls whose sent history
does not start with the whole previous request),
tokens saved, calls over the window, and the conversations that never exceed the budget without compaction whose
bill rose anyway. The identifiers table replays the tau-bench conversations and counts the (call, identifier)
pairs whose identifier of the history so far the sent history still holds (`lc_compaction.recall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage, ToolMessage, get_buffer_string
from langgraph.runtime import Runtime

from lc_compaction import CompactionPolicy, DropOldExchanges, Summarize, TruncateToolResults
from lc_compaction.billing import BillMeter, PromptCache, bill_ratio
from lc_compaction.recall import IdentifierTracker
from lc_compaction.replay import command_figures, replay_conversation, replay_files
from lc_compaction.traces import Trace, load_traces

__all__ = ["BILL_WINDOWS", "COMMAND_WINDOWS", "IDENTIFIER_WINDOWS", "NO_DEDUP", "OURS", "POLICY_ROWS", "PREVIOUS",
           "ROWS", "STUB_SUMMARY_CHARS", "TARGET_60", "bill_benchmark", "command_benchmark", "identifier_benchmark",
           "limited"]

BILL_WINDOWS = (8_000, 16_000, 32_000, 64_000)
"""Windows (tokens) of the bill table."""

IDENTIFIER_WINDOWS = (4_000, 8_000)
"""Windows (tokens) of the identifiers table (the tau-bench conversations)."""

COMMAND_WINDOWS = (8_000, 32_000)
"""Windows (tokens) of the next-command table (the coding conversations; issue 24's targets: 95% and 99%)."""

STUB_SUMMARY_CHARS = 1_600
"""Length of the stub summary (characters, about 400 tokens)."""

OURS = "default policy"
TARGET_60 = "default policy, target 60%"
NO_DEDUP = "default policy without deduplication"
PREVIOUS = "previous default (trigger 80%, target 60%, no deduplication)"
CLEAR = "ClearToolUsesEdit (ContextEditingMiddleware)"
SUMMARIZATION = "SummarizationMiddleware (stub summarizer)"
ROWS = (OURS, TARGET_60, NO_DEDUP, PREVIOUS, CLEAR, SUMMARIZATION)
"""The rows of the bill table, ours first (the default, then its variants: `POLICY_ROWS`), then the anchors."""

POLICY_ROWS: dict[str, dict[str, Any]] = {
    OURS: {},
    TARGET_60: {"target": ("fraction", 0.6)},
    NO_DEDUP: {"deduplicate": False},
    PREVIOUS: {"trigger": ("fraction", 0.8), "target": ("fraction", 0.6), "deduplicate": False},
}
"""Our rows of the bill table: the `CompactionPolicy` settings each adds to the window and the model name."""


class _Tally:
    """One row's calls over many conversations: bills, compactions, prefix breaks."""

    def __init__(self) -> None:
        self.calls = self.compactions = self.back_to_back = self.breaks = self.over_window = self.arrivals = 0
        self.billed = self.billed_uncompacted = 0.0
        self.tokens = self.tokens_uncompacted = 0
        self.fitting_conversations = self.fitting_raised = 0
        self.ids = self.ids_held = self.tool_ids = self.tool_ids_held = 0
        self.command: list[dict[str, Any]] = []  # each call's next-command figures by kind (`recall.CommandHeld`)

    def conversation(self, calls: Sequence[dict[str, Any]], *, fits_uncompacted: bool) -> None:
        """Add one conversation's calls: dicts with "billed", "billed_uncompacted", "tokens", "tokens_uncompacted",
        "compacted", "prefix_broken", "over_window" and optionally the identifier counts."""
        previous = False
        billed = billed_unc = 0.0
        for c in calls:
            self.calls += 1
            self.compactions += c["compacted"]
            self.back_to_back += c["compacted"] and previous
            previous = c["compacted"]
            self.breaks += c["prefix_broken"]
            self.arrivals += c.get("arrival_edits", False)
            self.over_window += c["over_window"]
            billed += c["billed"]
            billed_unc += c["billed_uncompacted"]
            self.tokens += c["tokens"]
            self.tokens_uncompacted += c["tokens_uncompacted"]
            for key in ("ids", "ids_held", "tool_ids", "tool_ids_held"):
                setattr(self, key, getattr(self, key) + c.get(key, 0))
            if "command" in c:
                self.command.append(c["command"])
        self.billed += billed
        self.billed_uncompacted += billed_unc
        if fits_uncompacted:
            self.fitting_conversations += 1
            self.fitting_raised += billed > billed_unc + 1e-6

    def figures(self) -> dict[str, Any]:
        """The row as JSON data (tokens; bills in uncached-token units)."""
        unc = self.tokens_uncompacted
        return {"calls": self.calls, "bill_ratio": bill_ratio(self.billed, self.billed_uncompacted),
                "billed_input": round(self.billed, 1), "billed_input_uncompacted": round(self.billed_uncompacted, 1),
                "compactions": self.compactions, "back_to_back_compactions": self.back_to_back,
                "prefix_breaks": self.breaks, "arrival_edit_calls": self.arrivals,
                "tokens_saved_fraction": round((unc - self.tokens) / unc, 4) if unc else 0,
                "over_window_calls": self.over_window, "fitting_conversations": self.fitting_conversations,
                "fitting_conversations_bill_raised": self.fitting_raised,
                "identifiers_so_far": self.ids, "identifiers_held": self.ids_held,
                "identifiers_held_fraction": round(self.ids_held / self.ids, 4) if self.ids else None,
                "tool_identifiers_so_far": self.tool_ids, "tool_identifiers_held": self.tool_ids_held,
                "tool_identifiers_held_fraction": round(self.tool_ids_held / self.tool_ids, 4) if self.tool_ids
                else None, **command_figures(self.command)}


def _stub_summary(messages: Sequence[BaseMessage]) -> str:
    return get_buffer_string(list(messages))[:STUB_SUMMARY_CHARS]


def _call_points(trace: Trace) -> list[int]:
    return [i for i, m in enumerate(trace.messages) if isinstance(m, AIMessage)]


def _split(messages: list[BaseMessage]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    if messages and isinstance(messages[0], SystemMessage):
        return messages[0], messages[1:]  # type: ignore[return-value]
    return None, messages


class _Anchor:
    """Runs one LangChain anchor over one conversation, call by call, yielding what each call sends and whether
    the anchor changed the history at that call."""

    def __init__(self, kind: str, window: int):
        self.kind = kind
        self.window = window
        self.model = GenericFakeChatModel(messages=iter(()))
        if kind == CLEAR:
            self.middleware: Any = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=int(0.8 * window))])
        else:
            self.middleware = SummarizationMiddleware(self.model, trigger=("tokens", int(0.8 * window)),
                                                      keep=("tokens", int(0.5 * window)), summarizer=_stub_summary)
        self.runtime = Runtime()

    def run(self, trace: Trace) -> list[tuple[list[BaseMessage], bool]]:
        """[(messages sent, changed)] per recorded assistant message."""
        recording = trace.messages
        system, _ = _split(recording)
        stored: list[BaseMessage] = []
        out: list[tuple[list[BaseMessage], bool]] = []
        end = 1 if system is not None else 0
        for i in _call_points(trace):
            stored = stored + recording[end:i]
            end = i
            if self.kind == CLEAR:
                sent_rest, changed = self._clear(system, stored)
            else:
                update = self.middleware.before_model({"messages": stored}, self.runtime)
                changed = update is not None
                if changed:
                    stored = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
                sent_rest = stored
            out.append(([system, *sent_rest] if system is not None else list(sent_rest), changed))
        return out

    def _clear(self, system: SystemMessage | None, stored: list[BaseMessage]) -> tuple[list[BaseMessage], bool]:
        seen: list[list[BaseMessage]] = []

        def handler(request: ModelRequest) -> ModelResponse:
            seen.append(list(request.messages))
            return ModelResponse(result=[AIMessage("ok")])

        request = ModelRequest(model=self.model, messages=list(stored), system_message=system, tools=[],  # type: ignore[arg-type]
                               state={"messages": stored}, runtime=None)
        self.middleware.wrap_model_call(request, handler)
        sent = seen[-1]
        changed = any(isinstance(m, ToolMessage) and m.response_metadata.get("context_editing", {}).get("cleared")
                      for m in sent)
        return sent, changed


def _anchor_calls(trace: Trace, anchor: _Anchor, counter: Any, cache: PromptCache,
                  identifiers: bool) -> list[dict[str, Any]]:
    meter, meter_unc = BillMeter(cache, counter), BillMeter(cache, counter)
    tracker = IdentifierTracker() if identifiers else None
    calls: list[dict[str, Any]] = []
    previous_len = 0
    added = 0
    for (sent, changed), i in zip(anchor.run(trace), _call_points(trace)):
        unc = trace.messages[:i]
        bill, bill_unc = meter.bill(sent), meter_unc.bill(unc)
        row: dict[str, Any] = {"billed": bill.billed, "billed_uncompacted": bill_unc.billed,
                               "tokens": bill.input_tokens, "tokens_uncompacted": bill_unc.input_tokens,
                               "compacted": changed,
                               "prefix_broken": bool(calls) and bill.shared_messages < previous_len,
                               "over_window": bill.input_tokens > anchor.window}
        if tracker is not None:
            tracker.extend(trace.messages[added:i])
            added = i
            held = tracker.held(sent)
            row.update(ids=held.so_far, ids_held=held.held, tool_ids=held.tool_so_far, tool_ids_held=held.tool_held,
                       command=tracker.command(trace.messages[i], sent).by_kind)
        previous_len = len(sent)
        calls.append(row)
    return calls


def _our_rows(paths: list[Path], policy: CompactionPolicy, cache: PromptCache) -> _Tally:
    tally = _Tally()
    report = replay_files(paths, policy, progress=False, cache=cache)
    budget = policy.budget_tokens()
    for conv in report.conversations:
        calls = [{"billed": c.billed_input, "billed_uncompacted": c.billed_input_uncompacted, "tokens": c.tokens_sent,
                  "tokens_uncompacted": c.tokens_uncompacted, "compacted": c.compacted,
                  "arrival_edits": c.arrival_edits,
                  "prefix_broken": c.prefix_broken,
                  "over_window": c.tokens_sent > (policy.max_input_tokens or 0),
                  "ids": c.identifiers_so_far, "ids_held": c.identifiers_held,
                  "tool_ids": c.tool_identifiers_so_far, "tool_ids_held": c.tool_identifiers_held,
                  "command": c.command_identifiers_by_kind}
                 for c in conv.calls]
        fits = max((c.tokens_uncompacted for c in conv.calls), default=0) <= (budget or 0)
        tally.conversation(calls, fits_uncompacted=fits)
    return tally


def limited(paths: list[Path], conversations: int | None, tmp: Path) -> list[Path]:
    """The trace files, or copies holding only their first `conversations` lines."""
    if conversations is None:
        return paths
    out = []
    for p in paths:
        lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()][:conversations]
        copy_path = tmp / p.name
        copy_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(copy_path)
    return out


def bill_benchmark(paths: list[Path], *, windows: Sequence[int] = BILL_WINDOWS, model_name: str = "gpt-4o",
                   cache: PromptCache | None = None) -> dict[str, Any]:
    """The bill table: `{"cache_model": ..., "conversations": n, "windows": {window: {row: figures}}}`
    (see the module docstring; figures from `_Tally.figures`)."""
    cache = cache or PromptCache()
    traces = [t for p in paths for t in load_traces(p)]
    out: dict[str, Any] = {"cache_model": cache.to_dict(), "conversations": len(traces), "windows": {}}
    for window in windows:
        policy = CompactionPolicy(max_input_tokens=window, model_name=model_name)
        rows = {name: _our_rows(paths, CompactionPolicy(max_input_tokens=window, model_name=model_name, **settings),
                                cache).figures()
                for name, settings in POLICY_ROWS.items()}
        budget = policy.budget_tokens() or 0
        for kind in (CLEAR, SUMMARIZATION):
            tally = _Tally()
            anchor = _Anchor(kind, window)
            for trace in traces:
                calls = _anchor_calls(trace, anchor, policy.counter, cache, identifiers=False)
                fits = max((c["tokens_uncompacted"] for c in calls), default=0) <= budget
                tally.conversation(calls, fits_uncompacted=fits)
            rows[kind] = tally.figures()
        out["windows"][str(window)] = rows
    return out


IDENTIFIER_ROWS = {
    "default policy (truncate, drop)": None,
    "Summarize() (the ledger with the fact guard)": "summarize",
    "truncate, then Summarize()": "truncate,summarize",
    CLEAR: "clear",
}
"""The rows of the identifiers table: a ladder for `CompactionPolicy` (None: the default) or the anchor."""


def identifier_benchmark(paths: list[Path], *, windows: Sequence[int] = IDENTIFIER_WINDOWS,
                         model_name: str = "gpt-4o", prefix: str = "tau-bench/") -> dict[str, Any]:
    """The identifiers table over the conversations whose id starts with `prefix`: `{"conversations": n,
    "windows": {window: {row: figures}}}` (the identifier keys of `_Tally.figures`)."""
    traces = [t for p in paths for t in load_traces(p) if t.id.startswith(prefix)]
    out: dict[str, Any] = {"conversations": len(traces), "prefix": prefix, "windows": {}}
    cache = PromptCache()
    for window in windows:
        rows: dict[str, Any] = {}
        for name, spec in IDENTIFIER_ROWS.items():
            tally = _Tally()
            if spec == "clear":
                anchor = _Anchor(CLEAR, window)
                counter = CompactionPolicy(max_input_tokens=window, model_name=model_name).counter
                for trace in traces:
                    tally.conversation(_anchor_calls(trace, anchor, counter, cache, identifiers=True),
                                       fits_uncompacted=False)
            else:
                make = {"truncate": TruncateToolResults, "drop": DropOldExchanges, "summarize": Summarize}
                strategies = None if spec is None else [make[s]() for s in spec.split(",")]
                policy = CompactionPolicy(max_input_tokens=window, model_name=model_name, strategies=strategies)
                for trace in traces:
                    conv = replay_conversation(trace, policy, cache=cache)
                    tally.conversation([{"billed": 0.0, "billed_uncompacted": 0.0, "tokens": 0, "tokens_uncompacted": 0,
                                         "compacted": c.compacted, "prefix_broken": False, "over_window": False,
                                         "ids": c.identifiers_so_far, "ids_held": c.identifiers_held,
                                         "tool_ids": c.tool_identifiers_so_far,
                                         "tool_ids_held": c.tool_identifiers_held} for c in conv.calls],
                                       fits_uncompacted=False)
            figures = tally.figures()
            rows[name] = {k: figures[k] for k in ("calls", "compactions", "identifiers_so_far", "identifiers_held",
                                                  "identifiers_held_fraction", "tool_identifiers_so_far",
                                                  "tool_identifiers_held", "tool_identifiers_held_fraction")}
        out["windows"][str(window)] = rows
    return out


def command_benchmark(paths: list[Path], *, windows: Sequence[int] = COMMAND_WINDOWS, model_name: str = "gpt-4o",
                      prefix: str = "mini-swe-agent/") -> dict[str, Any]:
    """The next-command table over the conversations whose id starts with `prefix` (the coding agents): at each
    model call, the identifiers of the recorded command (paths, `file.py:N`, pytest ids, error types, def/class
    names, dotted names, hashes: `recall.CODE_PATTERNS`) that appeared earlier, and how many the sent history
    holds, with the default policy and with ClearToolUsesEdit: `{"conversations": n, "windows": {window: {row:
    figures}}}` (`replay.command_figures`' keys, with "calls" and "compactions")."""
    traces = [t for p in paths for t in load_traces(p) if t.id.startswith(prefix)]
    out: dict[str, Any] = {"conversations": len(traces), "prefix": prefix, "windows": {}}
    cache = PromptCache()
    keys = ("calls", "compactions", *command_figures([]))
    for window in windows:
        policy = CompactionPolicy(max_input_tokens=window, model_name=model_name)
        ours, clear = _Tally(), _Tally()
        for trace in traces:
            conv = replay_conversation(trace, policy, cache=cache)
            ours.conversation([{"billed": 0.0, "billed_uncompacted": 0.0, "tokens": 0, "tokens_uncompacted": 0,
                                "compacted": c.compacted, "prefix_broken": False, "over_window": False,
                                "command": c.command_identifiers_by_kind} for c in conv.calls],
                              fits_uncompacted=False)
            clear.conversation(_anchor_calls(trace, _Anchor(CLEAR, window), policy.counter, cache, identifiers=True),
                               fits_uncompacted=False)
        out["windows"][str(window)] = {name: {k: t.figures()[k] for k in keys}
                                       for name, t in ((OURS, ours), (CLEAR, clear))}
    return out
