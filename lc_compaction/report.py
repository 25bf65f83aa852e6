"""Reports and plots of compactions and replays (notebooks, `lc-compaction replay --plot`).

- one compaction: `compaction_table` (what happened to each message, with its tokens), `identifiers_table`
  (which identifiers of the removed or rewritten messages are still in the context) and
  `summary_identifiers_table` (which of them the summarizer wrote itself, and which the fact guard added);
- replays: `calls_dataframe` (one row per model call), `summary_dataframe` (one row per replay), `plot_context`
  (input tokens per call), `plot_cumulative` (cumulative input tokens sent), `plot_comparison` (several
  policies over one conversation, both views on one figure) and `plot_bill` (the input bill per call and in total
  under the provider's prompt cache, with and without compaction).

pandas and matplotlib are imported inside the functions (the `plot` extra: `pip install 'lc-compaction[plot]'`, or
`pip install -e '.[plot]'` in a clone of the repository), so the compaction core never needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Union

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from lc_compaction._content import arguments_text, content_text
from lc_compaction.compact import CompactionResult
from lc_compaction.markers import is_dropped_marker, is_shortened, is_summary, is_truncated
from lc_compaction.replay import CallRecord, ConversationReplay, ReplayReport
from lc_compaction.facts import FactGuard, contains, is_guard_line, message_text
from lc_compaction.structure import tool_calls_of, tool_pairs
from lc_compaction.tokens import TokenCounter, resolve_token_counter

if TYPE_CHECKING:
    import pandas
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CALL_COLUMNS", "COMPACTION_COLUMNS", "IDENTIFIER_COLUMNS", "OUTCOMES", "SUMMARY_COLUMNS",
           "SUMMARY_IDENTIFIER_COLUMNS", "calls_dataframe", "compaction_table", "identifiers_table", "plot_bill",
           "plot_comparison", "plot_context", "plot_cumulative", "summary_dataframe", "summary_identifiers_table"]

CALL_COLUMNS = ("conversation", "call", "message_index", "tokens_uncompacted", "tokens_before", "tokens_sent",
                "messages_uncompacted", "messages_before", "messages_sent", "compaction_ms", "compacted",
                "triggered", "stop_reason", "fits", "strategies", "violations", "first_request_present",
                "cached_tokens", "billed_input", "prefix_messages", "cached_tokens_uncompacted",
                "billed_input_uncompacted", "back_to_back", "identifiers_so_far", "identifiers_held",
                "tool_identifiers_so_far", "tool_identifiers_held")
"""Columns of `calls_dataframe`, in order (see `replay.CallRecord` for each; "strategies" is a comma-separated
string, "violations" a count; bills in units of uncached input tokens)."""

Replays = Union[ConversationReplay, ReplayReport, Mapping[str, ConversationReplay], Iterable[ConversationReplay]]


def _conversations(replay: Replays) -> list[tuple[str, ConversationReplay]]:
    if isinstance(replay, ConversationReplay):
        return [(replay.id, replay)]
    if isinstance(replay, ReplayReport):
        return [(c.id, c) for c in replay.conversations]
    if isinstance(replay, Mapping):
        return [(str(k), v) for k, v in replay.items()]
    return [(c.id, c) for c in replay]


def _require(module: str) -> ModuleType:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        from lc_compaction._extras import missing_extra

        raise missing_extra("replay reports and plots", "plot", exc, module=module) from exc


def calls_dataframe(replay: Replays) -> pandas.DataFrame:
    """One row per model call, with the `CALL_COLUMNS` (tokens, messages, milliseconds as in `CallRecord`).

    Args:
        replay: a `ConversationReplay`, a `ReplayReport`, a dict {name: ConversationReplay}, or a list of them;
            the "conversation" column holds the conversation id (or the dict key).

    Raises:
        ImportError: pandas is not installed (the message says how to install it).
    """
    pd = _require("pandas")
    rows: list[dict[str, Any]] = []
    for name, conv in _conversations(replay):
        for c in conv.calls:
            rows.append({"conversation": name, "call": c.index, "message_index": c.message_index,
                         "tokens_uncompacted": c.tokens_uncompacted, "tokens_before": c.tokens_before,
                         "tokens_sent": c.tokens_sent, "messages_uncompacted": c.messages_uncompacted,
                         "messages_before": c.messages_before, "messages_sent": c.messages_sent,
                         "compaction_ms": c.compaction_ms, "compacted": c.compacted, "triggered": c.triggered,
                         "stop_reason": c.stop_reason, "fits": c.fits, "strategies": ",".join(c.strategies),
                         "violations": len(c.violations), "first_request_present": c.first_request_present,
                         "cached_tokens": c.cached_tokens, "billed_input": c.billed_input,
                         "prefix_messages": c.prefix_messages,
                         "cached_tokens_uncompacted": c.cached_tokens_uncompacted,
                         "billed_input_uncompacted": c.billed_input_uncompacted, "back_to_back": c.back_to_back,
                         "identifiers_so_far": c.identifiers_so_far, "identifiers_held": c.identifiers_held,
                         "tool_identifiers_so_far": c.tool_identifiers_so_far,
                         "tool_identifiers_held": c.tool_identifiers_held})
    frame: pandas.DataFrame = pd.DataFrame(rows, columns=list(CALL_COLUMNS))
    return frame


MAX_LABELLED = 8
"""With more conversations than this, `plot_context` draws them all in two colours with one legend entry each
(with / without compaction) instead of one labelled pair of lines per conversation."""


def _axes(ax: Any) -> Any:
    """`ax`, or a new 9 x 5 inch figure's Axes (pyplot) when None; ImportError when matplotlib is missing."""
    if ax is None:
        plt = _require("matplotlib.pyplot")
        _, ax = plt.subplots(figsize=(9, 5))
        return ax
    _require("matplotlib")
    return ax


def _levels(ax: Axes, window: int | None, budget: float | None, trigger: float | None) -> None:
    """The horizontal lines of a per-call plot: the window (solid), the budget (dash-dot) and the trigger (dotted),
    each labelled with its tokens."""
    if window is not None:
        ax.axhline(window, color="black", linewidth=1.5, label=f"window ({window:,} tokens)")
    if budget is not None:
        ax.axhline(budget, color="black", linestyle="-.", linewidth=1.2,
                   label=f"budget ({budget:,.0f} tokens; compaction when over it)")
    if trigger is not None:
        ax.axhline(trigger, color="black", linestyle=":", linewidth=1.2, label=f"trigger ({trigger:,.0f} tokens)")


def plot_context(replays: Replays, window: int | None = None, trigger: float | None = None,
                 ax: Axes | None = None, *, title: str | None = None, budget: float | None = None) -> Axes:
    """Draw the input tokens of every model call, with compaction (solid) and without (dashed, same colour).

    Args:
        replays: {name: ConversationReplay} (or one replay, a list, a `ReplayReport`); x is the call number in
            its conversation, y its input tokens.
        window: the model's window in tokens (`max_input_tokens`), drawn as a black horizontal line.
        trigger: the trigger threshold in tokens (`policy.trigger_tokens()`), drawn as a black dotted line.
        ax: the matplotlib Axes to draw on; a new figure (pyplot) when None.
        title: the plot's title (default "Context size per model call").
        budget: the budget in tokens (`policy.budget_tokens()`: the window less the reply's reserve), a black
            dash-dot line: a history over it is always compacted, and with no trigger set it is the trigger.

    Returns:
        The Axes drawn on.

    Raises:
        ImportError: matplotlib is not installed.
    """
    ax = _axes(ax)
    convs = _conversations(replays)
    many = len(convs) > MAX_LABELLED
    for k, (name, conv) in enumerate(convs):
        x = [c.index for c in conv.calls]
        color = "tab:blue" if many else f"C{k % 10}"
        alpha = 0.4 if many else 1.0
        ax.plot(x, [c.tokens_uncompacted for c in conv.calls], linestyle="--", color="tab:gray" if many else color,
                alpha=alpha, linewidth=1)
        ax.plot(x, [c.tokens_sent for c in conv.calls], linestyle="-", color=color, alpha=alpha, linewidth=1.5,
                label=("with compaction" if k == 0 else None) if many else name)
    ax.plot([], [], linestyle="--", color="tab:gray", linewidth=1, label="dashed: without compaction")
    _levels(ax, window, budget, trigger)
    ax.set_xlabel("model call")
    ax.set_ylabel("input tokens")
    ax.set_title(title or "Context size per model call")
    ax.legend(fontsize="small")
    return ax


# ------------------------------------------------------------------------------------------- one compaction
COMPACTION_COLUMNS = ("index", "index_after", "role", "tool", "tokens_before", "tokens_after", "outcome", "text")
"""Columns of `compaction_table`, in order: the message's position in the input and in the result (`<NA>` where it
is not there), its `type` ("system", "human", "ai", "tool"), the tool (a ToolMessage's `name`, else the name in
the call it answers; the names an AIMessage calls, comma-separated), its tokens in the input and in the result
(0 where it is not there), the outcome (see `OUTCOMES`) and the start of its text (one line)."""

OUTCOMES: dict[str, str] = {
    "kept": "in the result unchanged (same id, same content)",
    "truncated": "a tool result replaced by a one-line note with its size and a preview (same id)",
    "shortened": "cut in place because it alone did not fit the budget (same id)",
    "changed": "in the result with the same id but other content (e.g. a mid-history system message sent as human)",
    "summarized": "replaced by the summary (known only from a CompactionResult's actions)",
    "folded": "a step of the running request folded into its progress note, which names its calls (known only "
              "from a CompactionResult's actions)",
    "removed": "not in the result",
    "summary": "a summary message of the result that was not in the input",
    "marker": "the one-line marker left where exchanges were dropped, not in the input (markers.DROPPED_TEXT)",
    "added": "another message of the result that was not in the input (a repair)",
}
"""What `compaction_table`'s "outcome" column can say, and what each value means."""

IDENTIFIER_COLUMNS = ("identifier", "kind", "index", "kept")
"""Columns of `identifiers_table`: the identifier as written, the fact-guard pattern that found it, the index (in
the input) of the first removed or rewritten message holding it, and whether the result still contains it."""

Messages = Union[CompactionResult, ConversationReplay, Sequence[BaseMessage]]


def _message_list(value: Messages, name: str) -> list[BaseMessage]:
    messages = value.messages if isinstance(value, (CompactionResult, ConversationReplay)) else value
    out = list(messages)
    for i, m in enumerate(out):
        if not isinstance(m, BaseMessage):
            raise TypeError(f"{name}[{i}]: expected a LangChain BaseMessage, got {type(m).__name__}")
    return out


def _positions_by_id(messages: Sequence[BaseMessage], name: str, *, required: bool) -> dict[str, int]:
    """{id: index}; raises ValueError naming the index of a missing (when `required`) or repeated id."""
    out: dict[str, int] = {}
    for i, m in enumerate(messages):
        if not m.id:
            if required:
                raise ValueError(f"{name}[{i}] has no id: messages are matched by id (compact gives a message "
                                 "without one a new random id); give every input message an id")
            continue
        if m.id in out:
            raise ValueError(f"{name}[{i}] has the same id as {name}[{out[m.id]}] ({m.id!r}): ids must be unique")
        out[m.id] = i
    return out


def _call_names(*lists: Sequence[BaseMessage]) -> dict[str, str]:
    """{ToolMessage id: name of the tool it answers} in the lists (a ToolMessage may carry no `name`), paired by
    position as on the wire (`structure.tool_pairs`: a tool-call id may be reused by another turn)."""
    out: dict[str, str] = {}
    for messages in lists:
        for t, (a, tcid) in tool_pairs(messages).items():
            name = next((tc.get("name") for tc in tool_calls_of(messages[a]) if tc.get("id") == tcid), None)
            if messages[t].id and name:
                out.setdefault(str(messages[t].id), name)
    return out


def _tool(message: BaseMessage, call_names: Mapping[str, str]) -> str:
    if isinstance(message, ToolMessage):
        return message.name or call_names.get(message.id or "", "")
    if isinstance(message, AIMessage):
        return ", ".join(tc.get("name") or "?" for tc in tool_calls_of(message))
    return ""


def _preview(message: BaseMessage, chars: int) -> str:
    text = content_text(message.content)
    if not text.strip() and isinstance(message, AIMessage) and tool_calls_of(message):
        text = "; ".join(f"{tc.get('name') or '?'}({arguments_text(tc.get('args'))})" for tc in tool_calls_of(message))
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: max(chars - 3, 0)] + "..."


def _outcome(old: BaseMessage, new: BaseMessage) -> str:
    if new is old or new == old:
        return "kept"
    if is_truncated(new) and not is_truncated(old):
        return "truncated"
    if is_shortened(new) and not is_shortened(old):
        return "shortened"
    return "changed"


def compaction_table(before: Sequence[BaseMessage], after: CompactionResult | Sequence[BaseMessage],
                     counter: TokenCounter | str | Any = "exact", *, text_chars: int = 60) -> pandas.DataFrame:
    """What a compaction did to each message: one row per input message (in input order), plus one row per message
    of the result that was not in the input (a summary, a repair), placed where it stands in the result.

    Args:
        before: the input of `compact` (`list[BaseMessage]`); every message needs a unique id (messages are matched
            by id, and `compact` gives a message without one a new random id). Recorded traces have ids.
        after: the `CompactionResult`, or the compacted message list. Only a result tells "summarized" from
            "removed" (from its actions); with a list, a message that is gone is "removed".
        counter: counts the "tokens_before" / "tokens_after" columns (tokens, per message with its overhead, no
            reply priming): a `TokenCounter`, or any `token_counter` setting of `CompactionPolicy` ("exact",
            "approximate", "messages", a callable). Pass `policy.counter` to match the result's figures, so that
            `tokens_after.sum() + counter.reply_overhead == result.tokens_after` (without `extra_tokens`).
        text_chars: length of the "text" preview, characters.

    Returns:
        A DataFrame with the `COMPACTION_COLUMNS`; "outcome" takes the values of `OUTCOMES`; "index" and
        "index_after" are nullable integers (`<NA>` where the message is not in that list). "text" is the start of
        the input message's text (for new messages, of the result's), tool calls written as `name({args})`.

    Raises:
        ValueError: a message of `before` has no id, or two have the same id (the message index is named); two
            messages of the result share an id; `counter` is not a valid counter setting.
        TypeError: an element of `before` or of the result is not a `BaseMessage` (its index is named).
        ImportError: pandas is not installed.
    """
    pd = _require("pandas")
    tc = resolve_token_counter(counter)
    old = _message_list(before, "before")
    new = _message_list(after, "after")
    old_pos = _positions_by_id(old, "before", required=True)
    new_pos = _positions_by_id(new, "after", required=False)
    actions = after.actions if isinstance(after, CompactionResult) else []
    summarized = {mid for a in actions if a.kind == "summarized" for mid in a.message_ids}
    folded = {mid for a in actions if a.kind == "folded" for mid in a.message_ids}
    names = _call_names(old, new)
    rows: list[dict[str, Any]] = []
    shown = 0  # result messages before this position have been placed

    def place_new_until(stop: int) -> None:
        for j in range(shown, stop):
            m = new[j]
            if m.id in old_pos:
                continue
            rows.append({"index": None, "index_after": j, "role": m.type, "tool": _tool(m, names),
                         "tokens_before": 0, "tokens_after": tc.count_message(m),
                         "outcome": "summary" if is_summary(m) else "marker" if is_dropped_marker(m) else "added",
                         "text": _preview(m, text_chars)})

    for i, m in enumerate(old):
        j = new_pos.get(m.id) if m.id is not None else None
        row = {"index": i, "index_after": j, "role": m.type, "tool": _tool(m, names),
               "tokens_before": tc.count_message(m), "text": _preview(m, text_chars)}
        if j is None:
            row.update(tokens_after=0, outcome="summarized" if m.id in summarized else
                       "folded" if m.id in folded else "removed")
        else:
            if j >= shown:
                place_new_until(j)
                shown = j + 1
            row.update(tokens_after=tc.count_message(new[j]), outcome=_outcome(m, new[j]))
        rows.append(row)
    place_new_until(len(new))
    frame: pandas.DataFrame = pd.DataFrame(rows, columns=list(COMPACTION_COLUMNS)).astype(
        {"index": "Int64", "index_after": "Int64", "tokens_before": "int64", "tokens_after": "int64"})
    return frame


def identifiers_table(before: Sequence[BaseMessage], after: Messages, *,
                      fact_guard: FactGuard | None = None) -> pandas.DataFrame:
    """Did the identifiers survive? The identifiers (ids, codes, amounts, dates, e-mails, URLs, paths: the fact
    guard's patterns) of the input messages that the result does not hold unchanged (removed, summarized,
    truncated, cut), and whether each is still anywhere in the result.

    Args:
        before: the messages before compaction (for a replay: the recorded conversation, `trace.messages`);
            every message needs a unique id (see `compaction_table`).
        after: a `CompactionResult`, a `ConversationReplay` (its final history) or the compacted message list.
        fact_guard: the `FactGuard` whose patterns find the identifiers (default `FactGuard()`, the summarizer's).

    Returns:
        A DataFrame with the `IDENTIFIER_COLUMNS`, one row per distinct identifier (case-insensitive), in order of
        first appearance: "kept" is True when the text of some message of the result contains it (its content, the
        arguments of its tool calls; case-insensitive, not inside a longer alphanumeric run: `facts.contains`).

    Raises:
        ValueError / TypeError: as `compaction_table` (a message without an id, a repeated id, not a message).
        ImportError: pandas is not installed.
    """
    pd = _require("pandas")
    guard = fact_guard or FactGuard()
    old = _message_list(before, "before")
    new = _message_list(after, "after")
    _positions_by_id(old, "before", required=True)
    unchanged = {m.id: m for m in new if m.id}
    text = "\n".join(message_text(m) for m in new)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, m in enumerate(old):
        kept_as_is = unchanged.get(m.id) if m.id is not None else None
        if kept_as_is is not None and (kept_as_is is m or kept_as_is == m):
            continue
        for ident in guard.extract_messages([m]):
            key = ident.value.casefold()
            if key in seen:
                continue
            seen.add(key)
            rows.append({"identifier": ident.value, "kind": ident.kind, "index": i, "kept": contains(text, ident)})
    frame: pandas.DataFrame = pd.DataFrame(rows, columns=list(IDENTIFIER_COLUMNS)).astype(
        {"index": "int64", "kept": "bool"})
    return frame


SUMMARY_IDENTIFIER_COLUMNS = ("identifier", "kind", "in_model_summary", "in_summary")
"""Columns of `summary_identifiers_table`."""


def summary_identifiers_table(result: CompactionResult, *, fact_guard: FactGuard | None = None) -> pandas.DataFrame:
    """What the summarizer kept on its own, and what the summary holds with the fact guard's line.

    Args:
        result: a `CompactionResult` whose call wrote a summary (`result.summary`).
        fact_guard: the `FactGuard` whose patterns find the identifiers (default `FactGuard()`, the summarizer's).

    Returns:
        A DataFrame with the `SUMMARY_IDENTIFIER_COLUMNS`, one row per distinct identifier of `result.removed`
        (the messages this call removed or summarized; an earlier summary's facts line included), oldest first,
        as the guard extracts them: "in_model_summary" is True when the summary's text without the guard's lines
        (its facts and said lines: what remains is what the summarizer wrote) contains it, "in_summary" when the
        summary as stored does (`facts.contains`).

    Raises:
        ValueError: `result` has no summary.
        ImportError: pandas is not installed.
    """
    pd = _require("pandas")
    if not result.summary:
        raise ValueError("result: this compaction wrote no summary (result.summary is empty)")
    guard = fact_guard or FactGuard()
    written = "\n".join(line for line in result.summary.splitlines() if not is_guard_line(line))
    rows = [{"identifier": i.value, "kind": i.kind, "in_model_summary": contains(written, i),
             "in_summary": contains(result.summary, i)} for i in guard.extract_messages(result.removed)]
    frame: pandas.DataFrame = pd.DataFrame(rows, columns=list(SUMMARY_IDENTIFIER_COLUMNS)).astype(
        {"in_model_summary": "bool", "in_summary": "bool"})
    return frame


# ------------------------------------------------------------------------------------------- replays compared
SUMMARY_COLUMNS = ("model_calls", "compactions", "tokens_sent_uncompacted", "tokens_sent", "tokens_saved",
                   "tokens_saved_fraction", "peak_input_tokens", "peak_input_tokens_uncompacted", "over_window_calls",
                   "over_budget_calls", "not_fitting_calls", "invariant_violations", "first_request_missing_calls",
                   "cached_tokens", "cached_tokens_uncompacted", "billed_input", "billed_input_uncompacted",
                   "bill_ratio", "back_to_back_compactions", "identifiers_so_far", "identifiers_held",
                   "identifiers_held_fraction", "tool_identifiers_so_far", "tool_identifiers_held",
                   "tool_identifiers_held_fraction", "compaction_ms_median", "compaction_ms_p95", "compaction_ms_max")
"""Columns of `summary_dataframe`: keys of `replay.summarize_calls` (tokens, calls, bills in uncached-token
units, identifiers, milliseconds)."""


def summary_dataframe(replays: Replays) -> pandas.DataFrame:
    """One row per replay with its figures (`ConversationReplay.summary()`: tokens sent with and without
    compaction, peak input tokens, calls over the window, invariant violations, the input bill with and without
    compaction and back-to-back compactions, identifiers held, compaction milliseconds).

    Args:
        replays: {name: ConversationReplay} (e.g. one conversation under several policies), one replay, a list or
            a `ReplayReport`; the index holds the names (or conversation ids).

    Returns:
        A DataFrame indexed by name, with the `SUMMARY_COLUMNS`.

    Raises:
        ImportError: pandas is not installed.
    """
    pd = _require("pandas")
    convs = _conversations(replays)
    rows = [{k: conv.summary()[k] for k in SUMMARY_COLUMNS} for _, conv in convs]
    frame: pandas.DataFrame = pd.DataFrame(rows, index=pd.Index([name for name, _ in convs], name="replay"),
                                           columns=list(SUMMARY_COLUMNS))
    return frame


def _cumulative(values: Iterable[float]) -> list[float]:
    out: list[float] = []
    total: float = 0
    for v in values:
        total += v
        out.append(total)
    return out


def _tokens(c: CallRecord) -> tuple[float, float]:
    return c.tokens_sent, c.tokens_uncompacted


def _bills(c: CallRecord) -> tuple[float, float]:
    return c.billed_input, c.billed_input_uncompacted


def _draw(ax: Axes, convs: list[tuple[str, ConversationReplay]], cumulative: bool,
          values: Callable[[CallRecord], tuple[float, float]] = _tokens) -> None:
    """Each replay's series with compaction (solid, one colour each) and without (dashed), drawn once per
    distinct series: in grey and labelled "no compaction" when every replay has the same one (one conversation
    under several policies), else in the colour of the first replay that has it. `values(call)` gives a call's
    (with, without) figures: input tokens by default."""
    many = len(convs) > MAX_LABELLED
    series = [(name, conv, [values(c)[0] for c in conv.calls], [values(c)[1] for c in conv.calls])
              for name, conv in convs]
    if cumulative:
        series = [(name, conv, _cumulative(sent), _cumulative(unc)) for name, conv, sent, unc in series]
    shared = len({tuple(unc) for *_, unc in series}) == 1
    drawn: set[tuple[float, ...]] = set()
    for k, (name, conv, sent, unc) in enumerate(series):
        x = [c.index for c in conv.calls]
        color = "tab:blue" if many else f"C{k % 10}"
        alpha = 0.4 if many else 1.0
        if tuple(unc) not in drawn:
            drawn.add(tuple(unc))
            ax.plot(x, unc, linestyle="--", color="tab:gray" if shared or many else color, alpha=alpha,
                    linewidth=1.2, label="no compaction" if shared else None)
        ax.plot(x, sent, linestyle="-", color=color, alpha=alpha, linewidth=1.5,
                label=("with compaction" if k == 0 else None) if many else name)
    if not shared:
        ax.plot([], [], linestyle="--", color="tab:gray", linewidth=1, label="dashed: without compaction")
    ax.set_xlabel("model call")
    ax.yaxis.set_major_formatter(_require("matplotlib.ticker").StrMethodFormatter("{x:,.0f}"))


def plot_cumulative(replays: Replays, ax: Axes | None = None, *, title: str | None = None) -> Axes:
    """Draw the cumulative input tokens sent (the sum of every model call's input so far: what is billed as
    input) with compaction (solid, one colour per replay) and without (dashed, drawn once per distinct series; one
    grey "no compaction" line when all replays are of the same conversation).

    Args:
        replays: {name: ConversationReplay} (or one replay, a list, a `ReplayReport`); x is the call number.
        ax: the matplotlib Axes to draw on; a new figure (pyplot, 9 x 5 inches) when None.
        title: the plot's title (default "Cumulative input tokens sent").

    Returns:
        The Axes drawn on.

    Raises:
        ImportError: matplotlib is not installed.
    """
    ax = _axes(ax)
    _draw(ax, _conversations(replays), cumulative=True)
    ax.set_ylabel("input tokens sent so far")
    ax.set_title(title or "Cumulative input tokens sent")
    ax.legend(fontsize="small")
    return ax


def plot_bill(replays: Replays, ax: Axes | None = None, *, cumulative: bool = False,
              title: str | None = None) -> Axes:
    """Draw the input bill of every model call (`CallRecord.billed_input`: uncached input tokens plus the cached
    ones at the cache model's price, in units of uncached input tokens) with compaction (solid, one colour per
    replay) and without (dashed, once per distinct series; one grey "no compaction" line when all replays are of
    the same conversation), with a dot on each call that compacted. A call whose compaction broke the cached
    prefix shows as a spike above the dashed line.

    Args:
        replays: {name: ConversationReplay} (or one replay, a list, a `ReplayReport`); x is the call number.
        ax: the matplotlib Axes to draw on; a new figure (pyplot, 9 x 5 inches) when None.
        cumulative: draw the bill summed over the calls so far instead of each call's.
        title: the plot's title (default "Input bill per model call", or "Cumulative input bill").

    Returns:
        The Axes drawn on.

    Raises:
        ImportError: matplotlib is not installed.
    """
    ax = _axes(ax)
    convs = _conversations(replays)
    _draw(ax, convs, cumulative=cumulative, values=_bills)
    if len(convs) <= MAX_LABELLED:  # a dot on each call that compacted
        for k, (_, conv) in enumerate(convs):
            ys = _cumulative(c.billed_input for c in conv.calls) if cumulative else [c.billed_input for c in conv.calls]
            hits = [(c.index, y) for c, y in zip(conv.calls, ys) if c.compacted]
            if hits:
                ax.plot(*zip(*hits), linestyle="none", marker="o", markersize=4, color=f"C{k % 10}",
                        label="compacted" if k == 0 else None)
    price = convs[0][1].cache.cached_price if convs else None
    unit = "uncached input tokens" + (f"; cached at {price:g}" if price is not None else "")
    ax.set_ylabel(f"bill so far ({unit})" if cumulative else f"bill ({unit})")
    ax.set_title(title or ("Cumulative input bill" if cumulative else "Input bill per model call"))
    ax.legend(fontsize="small")
    return ax


def plot_comparison(replays: Mapping[str, ConversationReplay], window: int | None = None,
                    trigger: float | None = None, *, title: str | None = None,
                    figsize: tuple[float, float] = (13, 5), budget: float | None = None) -> Figure:
    """One conversation replayed under several policies, on one figure: input tokens per model call (left, with
    the window and the trigger) and cumulative input tokens sent (right), each policy in its colour, and the same
    conversation without compaction once, as a grey dashed line.

    Args:
        replays: {name: ConversationReplay}, every replay of the same conversation counted with the same counter
            (e.g. `{"truncate": replay_conversation(trace, policy_1), "drop": ...}`).
        window: the model's window in tokens (`max_input_tokens`), a black line on the left panel.
        trigger: the trigger threshold in tokens (`policy.trigger_tokens()`), a black dotted line.
        title: the figure's title (none by default).
        figsize: (width, height) in inches; default (13, 5).
        budget: the budget in tokens (`policy.budget_tokens()`), a black dash-dot line (see `plot_context`).

    Returns:
        The matplotlib Figure (made with pyplot, so `plt.show()` and notebooks display it).

    Raises:
        ValueError: `replays` is empty, or two replays do not have the same uncompacted input tokens at every call
            (another conversation, or another counter): the replay and the call are named.
        ImportError: matplotlib is not installed.
    """
    convs = _conversations(replays)
    if not convs:
        raise ValueError("replays: give at least one ConversationReplay")
    first_name, first = convs[0]
    ref = [c.tokens_uncompacted for c in first.calls]
    for name, conv in convs[1:]:
        unc = [c.tokens_uncompacted for c in conv.calls]
        if unc != ref:
            at = next((k for k, (a, b) in enumerate(zip(unc, ref)) if a != b), min(len(unc), len(ref)))
            raise ValueError(f"replays: {name!r} is not the conversation of {first_name!r} counted the same way: "
                             f"their uncompacted input tokens differ at model call {at}")
    plt = _require("matplotlib.pyplot")
    fig: Figure
    fig, (left, right) = plt.subplots(1, 2, figsize=figsize, layout="constrained")
    _draw(left, convs, cumulative=False)
    _levels(left, window, budget, trigger)
    left.set_ylabel("input tokens")
    left.set_title("Input tokens per model call")
    left.legend(fontsize="small")
    plot_cumulative(replays, ax=right)
    if title:
        fig.suptitle(title)
    return fig
