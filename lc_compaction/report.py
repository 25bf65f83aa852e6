"""Per-call reports and plots of replays (notebooks, `lc-compaction replay --plot`).

pandas and matplotlib are imported inside the functions (the `plot` extra: `pip install 'lc-compaction[plot]'`),
so the compaction core never needs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from lc_compaction.replay import ConversationReplay, ReplayReport

if TYPE_CHECKING:
    import pandas
    from matplotlib.axes import Axes

__all__ = ["CALL_COLUMNS", "calls_dataframe", "plot_context"]

CALL_COLUMNS = ("conversation", "call", "message_index", "tokens_uncompacted", "tokens_before", "tokens_sent",
                "messages_uncompacted", "messages_before", "messages_sent", "compaction_ms", "compacted",
                "triggered", "stop_reason", "fits", "strategies", "violations", "first_request_present")
"""Columns of `calls_dataframe`, in order (see `replay.CallRecord` for each; "strategies" is a comma-separated
string, "violations" a count)."""

Replays = Union[ConversationReplay, ReplayReport, Mapping[str, ConversationReplay], Iterable[ConversationReplay]]


def _conversations(replay: Replays) -> list[tuple[str, ConversationReplay]]:
    if isinstance(replay, ConversationReplay):
        return [(replay.id, replay)]
    if isinstance(replay, ReplayReport):
        return [(c.id, c) for c in replay.conversations]
    if isinstance(replay, Mapping):
        return [(str(k), v) for k, v in replay.items()]
    return [(c.id, c) for c in replay]


def _require(module: str):  # noqa: ANN202 - returns the module
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module} is needed for replay reports and plots: pip install 'lc-compaction[plot]'") from exc


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
                         "violations": len(c.violations), "first_request_present": c.first_request_present})
    return pd.DataFrame(rows, columns=list(CALL_COLUMNS))


MAX_LABELLED = 8
"""With more conversations than this, `plot_context` draws them all in two colours with one legend entry each
(with / without compaction) instead of one labelled pair of lines per conversation."""


def plot_context(replays: Replays, window: int | None = None, trigger: float | None = None,
                 ax: Axes | None = None, *, title: str | None = None) -> Axes:
    """Draw the input tokens of every model call, with compaction (solid) and without (dashed, same colour).

    Args:
        replays: {name: ConversationReplay} (or one replay, a list, a `ReplayReport`); x is the call number in
            its conversation, y its input tokens.
        window: the model's window in tokens (`max_input_tokens`), drawn as a black horizontal line.
        trigger: the trigger threshold in tokens, drawn as a black dotted line.
        ax: the matplotlib Axes to draw on; a new figure (pyplot) when None.
        title: the plot's title (default "Context size per model call").

    Returns:
        The Axes drawn on.

    Raises:
        ImportError: matplotlib is not installed.
    """
    if ax is None:
        plt = _require("matplotlib.pyplot")
        _, ax = plt.subplots(figsize=(9, 5))
    else:
        _require("matplotlib")
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
    if window is not None:
        ax.axhline(window, color="black", linewidth=1.5, label=f"window ({window:,} tokens)")
    if trigger is not None:
        ax.axhline(trigger, color="black", linestyle=":", linewidth=1.2, label=f"trigger ({trigger:,.0f} tokens)")
    ax.set_xlabel("model call")
    ax.set_ylabel("input tokens")
    ax.set_title(title or "Context size per model call")
    ax.legend(fontsize="small")
    return ax
