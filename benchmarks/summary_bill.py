"""The bill with the summary calls counted: a summarizing policy's summary requests (cache-sharing or transcript
prompt) and LangChain's SummarizationMiddleware, against the default (non-summarizing) policy (issue 21).

    scripts/dev python benchmarks/summary_bill.py --traces /path/to/traces --output benchmarks/SUMMARY_BILL.md

Every conversation is replayed as the agent loop runs it (`lc_compaction.replay`: before each recorded assistant
message, the history so far is compacted and the compacted history replaces it); every agent request is billed by
`lc_compaction.billing` (OpenAI's rule: the longest prefix shared with the previous request, 128-token steps from
1,024 tokens; cached tokens at 0.1 of the input price), and so is every summary call
(`BillMeter.bill_summary`: its input by the same rule against the agent's previous request, its output at
`billing.DEFAULT_OUTPUT_PRICE`, 4 uncached input tokens a token, OpenAI's gpt-4o ratio). Counts are the exact
counter's (tiktoken, gpt-4o's encoding); bills are in units of uncached input tokens. The agent's own replies are
not billed (the recorded ones, the same under every row). The summarizer is `lc_compaction.testing.ScriptedSummarizer`
(deterministic, no network: a digest of what it is sent, 400 words of one token each after a short head, so every
request form gets replies of the same size). Rows:

- **default policy**: `CompactionPolicy(max_input_tokens=window)` (truncate tool results, then drop old
  exchanges): no summary call.
- **Summarize, cache-sharing request**: the ladder `TruncateToolResults(), Summarize(model=summarizer)`, the
  replay given `agent_model=summarizer` (each compaction gets the agent's previous request, `compact(...,
  agent_request=...)`), so the summary request repeats the agent's request and appends the instruction
  (`Summarize.share_agent_request`, on by default). A summary whose messages the agent's request does not hold,
  or whose request would not fit the window, falls back to the transcript prompt (counted in its row).
- **Summarize, transcript prompt**: the same with `share_agent_request=False`: our domain prompt and a
  transcript, in chunks under `trim_tokens_to_summarize` (4,000 tokens).
- **SummarizationMiddleware**: LangChain's, `SummarizationMiddleware(summarizer, trigger=("tokens", 0.8 *
  window), keep=("tokens", 0.5 * window))` (its defaults otherwise: the approximate counter, a 4,000-token trim),
  its `before_model` at every call on the stored messages (without the system prompt, as `create_agent` passes
  them), an update replacing them (LangGraph's `RemoveMessage(REMOVE_ALL_MESSAGES)`). Each summary request it
  sends (its prompt and the trimmed messages as one user message) is billed as ours are.

Two sets: the recorded conversations as they are (many are too short to summarize at the larger windows: their
tool loops are one request, whose steps no summary replaces), and long sessions (`benchmarks/session.py`: the
recorded conversations joined round-robin, each a new user request, until the session holds `SESSION_MESSAGES`
messages), where summaries are written at every window.

Figures per row and window: compactions, summary calls (and how many were of the cache-sharing form), the summary
calls' input tokens and their cached share, their output tokens, the agent's billed input, the summary calls' bill,
the total, and the total against the default policy's (targets: cached share >= 80%, total within 10% of the
default's at 16k-64k). Nothing here asserts a figure.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage
from langgraph.runtime import Runtime

from benchmarks.session import build_session, interleaved_records
from lc_compaction import CompactionPolicy, Summarize, TruncateToolResults
from lc_compaction.billing import DEFAULT_OUTPUT_PRICE, BillMeter, PromptCache, bill_ratio
from lc_compaction.replay import CallRecord, replay_conversation, summarize_calls
from lc_compaction.testing import ScriptedSummarizer
from lc_compaction.traces import load_traces

__all__ = ["DEFAULT", "MIDDLEWARE", "ROWS", "SESSION_MESSAGES", "SHARED", "TRANSCRIPT", "WINDOWS", "markdown",
           "summary_bill"]

WINDOWS = (8_000, 16_000, 32_000, 64_000)
"""Windows of the tables, tokens."""

SESSION_MESSAGES = 2_000
"""Messages of a long session (`session.build_session`)."""

SESSIONS = 2
"""Long sessions: the first joins the conversations in `session.interleaved_records` order, the next ones start
further along that order (each a different mix)."""

DEFAULT = "default policy (no summary)"
SHARED = "Summarize, cache-sharing request"
TRANSCRIPT = "Summarize, transcript prompt"
MIDDLEWARE = "SummarizationMiddleware"
ROWS = (DEFAULT, SHARED, TRANSCRIPT, MIDDLEWARE)
"""The rows of each table: the baseline first."""

Conversation = tuple[str, list[BaseMessage]]


def _figures(calls: Sequence[CallRecord], window: int) -> dict[str, Any]:
    """One row's figures from its calls (`replay.summarize_calls`' keys that the tables show)."""
    s = summarize_calls(calls, max_input_tokens=window)
    keys = ("model_calls", "compactions", "summary_calls", "summary_agent_calls", "summary_input_tokens",
            "summary_cached_tokens", "summary_cached_fraction", "summary_output_tokens", "billed_input",
            "billed_input_uncompacted", "summary_billed", "billed_total", "bill_ratio_total", "over_window_calls")
    return {k: s[k] for k in keys}


def _ours(conversations: Sequence[Conversation], window: int, row: str, model_name: str,
          cache: PromptCache) -> dict[str, Any]:
    if row == DEFAULT:
        policy, agent = CompactionPolicy(max_input_tokens=window, model_name=model_name), None
    else:
        agent = ScriptedSummarizer()
        policy = CompactionPolicy(max_input_tokens=window, model_name=model_name, strategies=[
            TruncateToolResults(), Summarize(model=agent, share_agent_request=row == SHARED)])
    calls = [c for cid, msgs in conversations
             for c in replay_conversation(msgs, policy, conversation_id=cid, cache=cache, agent_model=agent).calls]
    return _figures(calls, window)


def _middleware(conversations: Sequence[Conversation], window: int, model_name: str,
                cache: PromptCache) -> dict[str, Any]:
    """SummarizationMiddleware's calls, billed as `replay` bills ours: a `CallRecord` per agent call, its summary
    calls (the scripted summarizer's new requests since the previous call) billed against the previous request."""
    counter = CompactionPolicy(max_input_tokens=window, model_name=model_name).counter
    summarizer = ScriptedSummarizer()
    middleware = SummarizationMiddleware(summarizer, trigger=("tokens", int(0.8 * window)),
                                         keep=("tokens", int(0.5 * window)))
    runtime = Runtime()
    records: list[CallRecord] = []
    for _, recording in conversations:
        system = recording[0] if recording and isinstance(recording[0], SystemMessage) else None
        meter, meter_unc = BillMeter(cache, counter), BillMeter(cache, counter)
        stored: list[BaseMessage] = []
        end = 1 if system is not None else 0
        n = 0
        for i, m in enumerate(recording):
            if not isinstance(m, AIMessage):
                continue
            stored = stored + recording[end:i]
            end = i
            seen = len(summarizer.requests)
            update = middleware.before_model({"messages": stored}, runtime)  # type: ignore[arg-type]
            if update is not None:
                stored = [x for x in update["messages"] if not isinstance(x, RemoveMessage)]
            bills = [meter.bill_summary(req, output_tokens=counter.count_text(summarizer.reply(req)),
                                        form="middleware") for req in summarizer.requests[seen:]]
            sent = [system, *stored] if system is not None else list(stored)
            bill, unc = meter.bill(sent), meter_unc.bill(recording[:i])
            records.append(CallRecord(
                index=n, message_index=i, tokens_uncompacted=unc.input_tokens, tokens_before=bill.input_tokens,
                tokens_sent=bill.input_tokens, messages_uncompacted=i, messages_before=len(sent),
                messages_sent=len(sent), compaction_ms=0.0, compacted=update is not None,
                triggered=update is not None, stop_reason="", fits=True, cached_tokens=bill.cached_tokens,
                billed_input=bill.billed, cached_tokens_uncompacted=unc.cached_tokens,
                billed_input_uncompacted=unc.billed, summary_calls=len(bills),
                summary_forms=[b.form for b in bills], summary_input_tokens=sum(b.input_tokens for b in bills),
                summary_cached_tokens=sum(b.cached_tokens for b in bills),
                summary_output_tokens=sum(b.output_tokens for b in bills),
                summary_billed=sum(b.billed for b in bills)))
            n += 1
    return _figures(records, window)


def sessions(traces_dir: Path, n_messages: int = SESSION_MESSAGES, count: int = SESSIONS) -> list[Conversation]:
    """`count` long sessions of about `n_messages` messages each (`session.build_session`), the k-th starting
    at the k-th of `count` equal parts of the interleaved conversations, cut at the last model call."""
    records = interleaved_records(traces_dir)
    out = []
    for k in range(count):
        start = k * len(records) // count
        session = build_session(records[start:] + records[:start], n_messages)
        last = max(i for i, m in enumerate(session) if isinstance(m, AIMessage))
        out.append((f"session-{k}", session[: last + 1]))
    return out


def summary_bill(conversations: Sequence[Conversation], *, windows: Sequence[int] = WINDOWS,
                 model_name: str = "gpt-4o", cache: PromptCache | None = None) -> dict[str, Any]:
    """`{"conversations": n, "messages": total, "windows": {window: {row: figures}}}`, each row with
    "ratio_to_default" (its billed_total over the default policy's; see the module docstring)."""
    cache = cache or PromptCache()
    out: dict[str, Any] = {"conversations": len(conversations),
                           "messages": sum(len(m) for _, m in conversations), "windows": {}}
    for window in windows:
        rows = {row: _ours(conversations, window, row, model_name, cache) for row in (DEFAULT, SHARED, TRANSCRIPT)}
        rows[MIDDLEWARE] = _middleware(conversations, window, model_name, cache)
        base = rows[DEFAULT]["billed_total"]
        for figures in rows.values():
            figures["ratio_to_default"] = bill_ratio(figures["billed_total"], base)
        out["windows"][str(window)] = rows
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _table(result: dict[str, Any]) -> list[str]:
    lines = ["| window | row | compactions | summary calls (cache-sharing) | summary input tokens | cached share | "
             "summary output tokens | agent's billed input | summary calls' bill | total bill | total vs default |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for window, rows in result["windows"].items():
        for row, f in rows.items():
            lines.append(f"| {int(window):,} | {row} | {f['compactions']:,} | {f['summary_calls']:,} "
                         f"({f['summary_agent_calls']:,}) | {f['summary_input_tokens']:,} | "
                         f"{_pct(f['summary_cached_fraction'])} | {f['summary_output_tokens']:,} | "
                         f"{f['billed_input']:,.0f} | {f['summary_billed']:,.0f} | {f['billed_total']:,.0f} | "
                         f"{f['ratio_to_default']:.3f} |")
    return lines


def _goals(result: dict[str, Any]) -> list[str]:
    out = []
    for window, rows in result["windows"].items():
        f = rows[SHARED]
        share = f["summary_cached_fraction"]
        ratio = f["ratio_to_default"]
        if share is None:
            cached = "no summary call"
        else:
            cached = f"cached share {_pct(share)} ({'met' if share >= 0.8 else 'missed'}: >= 80%)"
        within = ""
        if share is None:
            within = "; nothing to compare (the rows bill alike)"
        elif int(window) >= 16_000:
            verdict = "met" if ratio <= 1.1 else "missed"
            within = f"; total {ratio:.3f} of the default's ({verdict}: at most 1.100)"
        out.append(f"- {int(window):,}: {cached}{within}")
    return out


def _windows(windows: Sequence[int]) -> str:
    names = [f"{w:,}" for w in windows]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def markdown(recorded: dict[str, Any], long: dict[str, Any], *, session_messages: int, seconds: float) -> str:
    """SUMMARY_BILL.md from the two results of `summary_bill` (the recorded conversations, the long sessions)."""
    none = [int(w) for w, rows in recorded["windows"].items() if not rows[SHARED]["summary_calls"]]
    lines = ["# The bill with the summary calls counted", "",
             "Generated by `python benchmarks/summary_bill.py --output benchmarks/SUMMARY_BILL.md`; see its "
             "docstring for the rows and the method. Tokens by tiktoken (gpt-4o's encoding); bills in units of "
             "uncached input tokens: OpenAI's prompt-cache rule (the longest prefix shared with the previous "
             "request, 128-token steps from 1,024 tokens), cached tokens at 0.1 of the input price, summary output "
             f"tokens at {DEFAULT_OUTPUT_PRICE:g} (gpt-4o: $2.50 input, $10.00 output per 1M tokens). A summary "
             "call is billed against the agent's previous request; the agent's replies are not billed (the same "
             "recorded ones in every row). The summarizer is the scripted one (`lc_compaction.testing."
             "ScriptedSummarizer`: a digest of its input of about 420 tokens, the same for every request "
             "form). \"total vs default\" is the row's total bill over the default policy's at the same window; "
             "\"summary calls (cache-sharing)\" counts the calls and, in parentheses, those that repeated the "
             "agent's request.", "",
             f"## The recorded conversations ({recorded['conversations']} conversations, "
             f"{recorded['messages']:,} messages)", "",
             "As recorded, most conversations are one request and its tool loop: the loop's steps are never "
             "summarized (they are folded into a progress note), so summaries are rare"
             + (f"; at {_windows(none)} there are none (the conversations are too short to summarize there), "
                "and the summarizing rows bill as the default policy's" if none else "")
             + ". The long sessions below are where summaries are written at every window.",
             "", *_table(recorded), "",
             "Goals (cache-sharing row):", *_goals(recorded), "",
             f"## Long sessions ({long['conversations']} sessions of about {session_messages:,} messages: the "
             "recorded conversations joined, each a new user request; `benchmarks/session.py`)", "",
             *_table(long), "",
             "Goals (cache-sharing row):", *_goals(long), "",
             f"Run time: {seconds:.0f} s (wall clock, on a shared machine).", ""]
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--traces", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of the shared traces (*.jsonl); needed unless --from-json.")
@click.option("--session-messages", default=SESSION_MESSAGES, show_default=True, type=click.IntRange(50),
              help="Messages of each long session.")
@click.option("--sessions", "n_sessions", default=SESSIONS, show_default=True, type=click.IntRange(1))
@click.option("--windows", default=",".join(str(w) for w in WINDOWS), show_default=True,
              help="Comma-separated windows, tokens.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the markdown here (else print it).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the figures as JSON.")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Write the markdown from the figures a previous run wrote with --json (no replay).")
def main(traces: Path | None, session_messages: int, n_sessions: int, windows: str, output: Path | None,
         json_path: Path | None, from_json: Path | None) -> None:
    """Write the summary-call bill tables (see the module docstring)."""
    started = time.perf_counter()
    if from_json is not None:
        data = json.loads(from_json.read_text(encoding="utf-8"))
        first, second = data["recorded"], data["sessions"]
        session_messages, seconds = data.get("session_messages", session_messages), data.get("seconds", 0.0)
    else:
        if traces is None:
            raise click.UsageError("give --traces DIR (or --from-json FILE)")
        wins = tuple(int(w) for w in windows.split(","))
        recorded = [(t.id, t.messages) for p in sorted(traces.glob("*.jsonl")) for t in load_traces(p)]
        first = summary_bill(recorded, windows=wins)
        second = summary_bill(sessions(traces, session_messages, n_sessions), windows=wins)
        seconds = time.perf_counter() - started
    text = markdown(first, second, session_messages=session_messages, seconds=seconds)
    if json_path is not None:
        json_path.write_text(json.dumps({"recorded": first, "sessions": second, "session_messages": session_messages,
                                         "seconds": round(seconds, 1)}, indent=1) + "\n", encoding="utf-8")
    if output is None:
        click.echo(text)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


if __name__ == "__main__":
    main()
