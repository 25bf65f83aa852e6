"""The `lc-compaction` command (click).

    lc-compaction replay [TRACE.jsonl ...] [--max-input-tokens N] [--trigger KIND=VALUE ...] [--keep KIND=VALUE]
                         [--target KIND=VALUE] [--reserve N] [--token-counter exact|approximate]
                         [--model-name NAME] [--strategies LIST] [--cached-price P] [--json] [--plot PNG]
    lc-compaction compact [MESSAGES.json | TRACE.jsonl | -] [the same policy options] [--repair]
                          [--output-format ...] [--report]
    lc-compaction --version

Sizes on the command line are `KIND=VALUE` (the tuples of `CompactionPolicy`): `tokens=6000`, `fraction=0.8`,
`messages=40`, and for `--keep` also `turns=2`. `--trigger` may be repeated (any of them triggers); one
`--trigger tokens=4000,messages=10` is a clause whose thresholds must all be exceeded.

This module only translates: the policy is `CompactionPolicy`, the work is `replay.replay_files` and `compact`,
the bill's cache model is `billing.PromptCache`, the figures are `ReplayReport.to_dict()`, the plot is
`report.plot_context`.
Exit codes: 0 done; 1 an invariant violation was found or compaction failed; 2 bad usage or input
(a trace that is not valid names the file, line and field).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from langchain_core.messages import convert_to_openai_messages, messages_to_dict

from lc_compaction._offline import EncodingUnavailableError
from lc_compaction.billing import DEFAULT_CACHED_PRICE, PromptCache
from lc_compaction.compact import compact
from lc_compaction.policy import CompactionPolicy
from lc_compaction.replay import ReplayError, replay_files
from lc_compaction.strategies import DropOldExchanges, Summarize, TruncateToolResults
from lc_compaction.structure import InvalidHistoryError
from lc_compaction.traces import TraceFormatError, bundled_traces, parse_trace_input

DEFAULT_MAX_INPUT_TOKENS = 8_000
"""Default window for the command line, tokens. Small on purpose: the bundled conversations (up to about
21,000 tokens) then need compaction, so `lc-compaction replay` alone shows it at work."""


class InputError(click.ClickException):
    """Input that is not valid (a trace, a message list): exit code 2, the message only, no traceback."""

    exit_code = 2


class SizeType(click.ParamType):
    """`KIND=VALUE` -> `(kind, number)`; with `clause=True`, `KIND=VALUE,KIND=VALUE` -> a TriggerClause dict."""

    name = "KIND=VALUE"

    def __init__(self, kinds: tuple[str, ...], clause: bool = False):
        self.kinds = kinds
        self.clause = clause

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse `KIND=VALUE[,KIND=VALUE]` into a `(kind, number)` tuple (or a TriggerClause dict); click usage
        error otherwise."""
        if not isinstance(value, str):
            return value
        parts = [p.strip() for p in value.split(",")] if self.clause else [value.strip()]
        pairs: list[tuple[str, float | int]] = []
        for part in parts:
            kind, sep, number = part.partition("=")
            kind = kind.strip().lower()
            if not sep or kind not in self.kinds:
                self.fail(f"{value!r}: expected KIND=VALUE with KIND one of {', '.join(self.kinds)} "
                          f"(e.g. {self.kinds[0]}=...)", param, ctx)
            try:
                num: float | int = int(number) if number.strip().lstrip("+-").isdigit() else float(number)
            except ValueError:
                self.fail(f"{value!r}: {number.strip()!r} is not a number", param, ctx)
            pairs.append((kind, num))
        if self.clause and len(pairs) > 1:
            return dict(pairs)
        return pairs[0]


def _policy_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options shared by `replay` and `compact`, mapped onto `CompactionPolicy`'s arguments."""
    options = [
        click.option("--max-input-tokens", type=click.IntRange(min=1), default=DEFAULT_MAX_INPUT_TOKENS,
                     show_default=True, help="The model's context window, tokens."),
        click.option("--trigger", "triggers", multiple=True, type=SizeType(("tokens", "fraction", "messages"), True),
                     help="When to compact: tokens=N, fraction=F (of the window) or messages=N; repeat for any-of; "
                          "comma-join for all-of. [default: none: compact only when the call would not fit "
                          "(over the window less --reserve)]"),
        click.option("--keep", type=SizeType(("turns", "messages", "tokens", "fraction")),
                     help="Recent part kept verbatim: turns=N, messages=N, tokens=N, fraction=F. [default: turns=2]"),
        click.option("--target", type=SizeType(("tokens", "fraction", "messages")),
                     help="Size to compact down to (below the trigger). [default: 50% of the window, "
                          "or 3/4 of the budget or of a lower trigger]"),
        click.option("--reserve", type=click.IntRange(min=0),
                     help="Tokens left for the reply. [default: min(4096, window // 10)]"),
        click.option("--token-counter", type=click.Choice(["exact", "approximate"]), default="exact",
                     show_default=True, help="exact: tiktoken; approximate: characters / 4."),
        click.option("--model-name", default="gpt-4o", show_default=True,
                     help="Chooses the tiktoken encoding (o200k_base for gpt-4o and newer)."),
        click.option("--strategies", default="truncate,drop", show_default=True,
                     help="The ladder, cheapest first, comma-separated from: truncate, drop, summarize "
                          "(summarize: the deterministic ledger with the fact guard; no LLM)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


STRATEGY_NAMES = ("truncate", "drop", "summarize")


def _strategies(spec: str) -> list[Any]:
    make = {"truncate": TruncateToolResults, "drop": DropOldExchanges, "summarize": Summarize}
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in make]
    if unknown or not names:
        raise click.UsageError(
            f"--strategies: {', '.join(unknown) or 'empty'}: choose from {', '.join(STRATEGY_NAMES)}")
    return [make[n]() for n in names]


def _make_policy(max_input_tokens: int, triggers: tuple[Any, ...], keep: Any, target: Any, reserve: int | None,
                 token_counter: str, model_name: str, strategies: str = "truncate,drop", repair: bool = False,
                 cached_price: float = DEFAULT_CACHED_PRICE) -> CompactionPolicy:
    kwargs: dict[str, Any] = {"max_input_tokens": max_input_tokens, "trigger": list(triggers) or None,
                              "target": target, "reserve": reserve, "token_counter": token_counter,
                              "model_name": model_name, "strategies": _strategies(strategies),
                              "cached_price": cached_price,
                              "repair": True if repair else None}  # None: compact() raises (its default)
    if keep is not None:
        kwargs["keep"] = keep
    try:
        return CompactionPolicy(**kwargs)
    except EncodingUnavailableError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # CompactionPolicy names the setting
        raise click.UsageError(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lc-compaction", prog_name="lc-compaction")
def main() -> None:
    """Context compaction for LangChain and LangGraph agents."""


# ------------------------------------------------------------------------------------------------------ replay
def _finite(value: float, param: click.Parameter) -> float:
    """`value` unless it is NaN (click's FloatRange lets NaN through: every comparison with it is False)."""
    if value != value:
        raise click.BadParameter(f"{value} is not a number between 0 and 1", param=param)
    return value


@main.command(short_help="Replay recorded conversations through compaction and report the figures.")
@click.argument("traces", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_policy_options
@click.option("--cached-price", type=click.FloatRange(0, 1), default=DEFAULT_CACHED_PRICE, show_default=True,
              callback=lambda ctx, param, value: _finite(value, param),
              help="A cached input token's price over an uncached one: the policy's cached_price (at 0.5 or more "
                   "the default trigger is 80% of the window, else the budget) and the bill's (OpenAI's prompt-cache "
                   "rule: the prefix shared with the previous request, in 128-token steps from 1,024 tokens).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (totals, policy, cache model, per file, per conversation, per call).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), metavar="PNG",
              help="Draw the context size per call with and without compaction to this PNG file, with the window, "
                   "the budget (over it the policy compacts: the trigger by default) and --trigger's tokens.")
def replay(traces: tuple[Path, ...], cached_price: float, as_json: bool, plot: Path | None,
           **settings: Any) -> None:
    """Replay recorded conversations (OpenAI chat format JSONL, one conversation a line; or a JSON list of one
    conversation's messages, what `compact` reads) as the agent loop would have run them, compacting before
    every model call. With no TRACE, replays the bundled example conversations.

    Every call is billed with and without compaction under OpenAI's prompt-cache rule (cached tokens at
    --cached-price), and the identifiers of the history so far are looked up in what was sent."""
    policy = _make_policy(cached_price=cached_price, **settings)  # the price the rule decides with and bills at
    paths = list(traces) or bundled_traces()
    try:
        report = replay_files(paths, policy, progress=not as_json, cache=PromptCache(cached_price=cached_price))
    except TraceFormatError as exc:
        raise InputError(str(exc)) from None
    except ReplayError as exc:
        raise click.ClickException(str(exc)) from None
    if plot is not None:
        _plot(report, policy, plot)
    data = report.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(_table(data))
    if data["invariant_violations"] or data["first_request_missing_calls"]:
        click.echo(f"error: {data['invariant_violations']} invariant violation(s), first request missing in "
                   f"{data['first_request_missing_calls']} call(s): please report this", err=True)
        sys.exit(1)


def _plot(report: Any, policy: CompactionPolicy, path: Path) -> None:
    try:
        from matplotlib.figure import Figure  # no pyplot: renders with Agg, touches no global backend state
    except ImportError:
        from lc_compaction._extras import install_hint

        raise click.UsageError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    from lc_compaction.report import plot_context

    triggers = policy.trigger_tokens()  # the trigger's token thresholds (tokens); none by default: the budget
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    plot_context({c.id: c for c in report.conversations}, window=policy.max_input_tokens,
                 trigger=min(triggers) if triggers else None, budget=policy.budget_tokens(), ax=ax)
    fig.savefig(path, format="png", dpi=110)
    click.echo(f"plot written to {path}", err=True)


def _table(data: dict[str, Any]) -> str:
    p = data["policy"]
    trig = (" or ".join(",".join(f"{k}={v:g}" for k, v in c.items()) for c in p["trigger"])
            or f"over the budget ({p['budget_tokens']:,} tokens)")  # no trigger: compact when the call won't fit
    lines = [f"lc-compaction replay: window {p['max_input_tokens']:,} tokens, trigger {trig}, "
             f"target {p['target_tokens']:,} tokens, keep {p['keep'][0]}={p['keep'][1]:g}, "
             f"reserve {p['reserve']:,}, counter {p['token_counter']}",
             f"cache model: {data['cache_model']['rule']}", ""]
    head = ["file", "conv", "calls", "compactions", "back-to-back", "tokens sent: without", "with", "saved",
            "bill: without", "with", "ratio", "ids kept", "peak input", "over window", "violations", "ms median",
            "ms p95"]

    def row(name: str, d: dict[str, Any]) -> list[str]:
        ms = [f"{d[k]:.2f}" if d[k] is not None else "-" for k in ("compaction_ms_median", "compaction_ms_p95")]
        ratio = f"{d['bill_ratio']:.3f}" if d["bill_ratio"] is not None else "-"
        held = f"{d['identifiers_held_fraction']:.1%}" if d["identifiers_held_fraction"] is not None else "-"
        return [name, str(d["conversations"]), str(d["model_calls"]), str(d["compactions"]),
                str(d["back_to_back_compactions"]), f"{d['tokens_sent_uncompacted']:,}", f"{d['tokens_sent']:,}",
                f"{d['tokens_saved_fraction']:.1%}", f"{d['billed_input_uncompacted']:,.0f}",
                f"{d['billed_input']:,.0f}", ratio, held, f"{d['peak_input_tokens']:,}",
                str(d["over_window_calls"]), str(d["invariant_violations"]), *ms]

    rows = [row(Path(f["path"]).name, f) for f in data["files"]] + [row("total", data)]
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths)))

    lines += [fmt(head), fmt(["-" * w for w in widths]), *[fmt(r) for r in rows[:-1]],
              fmt(["-" * w for w in widths]), fmt(rows[-1]), "",
              "tokens sent: input tokens summed over every model call, without and with compaction;",
              "bill: those input tokens billed under the cache model above, in units of uncached input tokens,",
              "without and with compaction, and their ratio (with / without);",
              "back-to-back: compactions on the call right after another compaction;",
              "ids kept: (call, identifier) pairs whose identifier of the history so far is still in what was sent",
              "(every identifier counts, those of a tool result larger than the budget on its own too: no history",
              "that fits holds it whole, and the last resort cuts it on the call it arrives);",
              "peak input: the largest single call with compaction; ms: compaction time per model call."]
    notes = [textwrap.fill(note, width=116) for name, d in [(Path(f["path"]).name, f) for f in data["files"]]
             + [("total", data)] if (note := _bill_note(name, d))]
    return "\n".join(lines + ([""] + notes if notes else []))


def _bill_note(name: str, d: dict[str, Any]) -> str | None:
    """Why a row's bill ratio is above 1, in its own figures (`summarize_calls`' prefix_breaks and
    calls_after_first_compaction); None when it is not above 1."""
    ratio = d["bill_ratio"]
    if ratio is None or ratio <= 1:
        return None
    breaks, after, calls = d["prefix_breaks"], d["calls_after_first_compaction"], d["model_calls"]
    head = (f"{name}: bill ratio {ratio:.3f}, above 1: compaction broke the provider's cached prefix {breaks} "
            f"time{'s' if breaks != 1 else ''}, and each break bills the rest of that call's history uncached; ")
    if 2 * after <= calls:
        return head + (f"only {after} of the {calls} calls came after a conversation's first compaction: it was "
                       "needed only near the end, and the few smaller calls after it did not pay the breaks back.")
    return head + (f"the {after} of the {calls} calls after a conversation's first compaction sent smaller "
                   "histories, but saved less than the breaks cost.")


# ----------------------------------------------------------------------------------------------------- compact
REPAIR_HINT = " (--repair repairs it)"
"""Added to the error of an input whose only fault is one `compact --repair` repairs."""


def _repair_hint(data: bytes, name: str) -> str:
    """`REPAIR_HINT` when `data` is refused only for a history rule (it reads without them), else ""."""
    try:
        parse_trace_input(data, path=name, check_history=False)
    except TraceFormatError:
        return ""
    return REPAIR_HINT


@main.command("compact", short_help="Compact a message list (JSON) or trace JSONL and print the result.")
@click.argument("source", type=click.File("rb"), default="-")
@_policy_options
@click.option("--repair", is_flag=True,
              help="Repair a broken history (a tool result without its call, a call without its result, a repeated "
                   "id, ...) instead of stopping on it: CompactionPolicy(repair=True), so when compaction runs "
                   "(over the trigger or the budget; under them the history is printed as it is, with a warning); "
                   "every repair is reported (--report: \"repairs\"). [default: a broken history is an error naming "
                   "the message]")
@click.option("--output-format", type=click.Choice(["auto", "openai", "langchain"]), default="auto",
              show_default=True, help="auto: the input's format (OpenAI dicts, or LangChain messages_to_dict).")
@click.option("--report", is_flag=True, help="Also print what was done to stderr: CompactionResult.to_dict() "
                                             "without removed_ids (the actions name every removed message once).")
def compact_command(source: Any, repair: bool, output_format: str, report: bool, **settings: Any) -> None:
    """Compact conversations read from SOURCE (a file, or - for stdin) and print them compacted, in the input's
    layout: a JSON list of messages (OpenAI format or LangChain messages_to_dict) gives a JSON list; trace JSONL
    (one {"messages": [...]} object a line, what `replay` reads) gives JSONL, each line the same object with its
    messages compacted; one trace object over several lines gives that object. A broken history (tool calls and
    results not paired, a repeated id) is an error naming the message, or with --repair is repaired."""
    policy = _make_policy(repair=repair, **settings)
    name = source.name if isinstance(getattr(source, "name", None), str) else "<stdin>"
    data = source.read()
    try:  # with --repair the history rules are compact()'s to repair, not the reader's to refuse
        read = parse_trace_input(data, path=name, check_history=not repair)
    except TraceFormatError as exc:
        raise InputError(f"{exc}{'' if repair else _repair_hint(data, name)}") from None
    outputs: list[Any] = []
    reports: list[dict[str, Any]] = []
    for trace in read.traces:
        try:
            result = compact(trace.messages, policy)
        except InvalidHistoryError as exc:  # with --repair: a fault repair could not fix
            raise InputError(f"{name} line {trace.line}: {exc}{'' if repair else REPAIR_HINT}") from None
        fmt = output_format if output_format != "auto" else trace.message_format
        outputs.append(messages_to_dict(result.messages) if fmt == "langchain"
                       else convert_to_openai_messages(result.messages))
        done = {k: v for k, v in result.to_dict().items() if k != "removed_ids"}
        reports.append(done if read.format == "list" else {"id": trace.id, "line": trace.line, **done})
    if read.format == "jsonl":
        for record, messages, done in zip(read.records, outputs, reports):
            click.echo(json.dumps({**record, "messages": messages}, ensure_ascii=False))
            if report:
                click.echo(json.dumps(done), err=True)
        return
    out = outputs[0] if read.format == "list" else {**read.records[0], "messages": outputs[0]}
    click.echo(json.dumps(out, indent=2, ensure_ascii=False))
    if report:
        click.echo(json.dumps(reports[0], indent=2), err=True)


if __name__ == "__main__":  # python -m lc_compaction.cli
    main()
