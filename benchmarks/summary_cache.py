"""How much of a summary call the provider reads from its prompt cache: a cache-sharing summary request (the
agent's own request with the instruction appended, `lc_compaction.agent_request`) against today's transcript
prompt, on a real model server (issue 21).

    scripts/dev python benchmarks/summary_cache.py                 # a few minutes on 2 cores
    scripts/dev python benchmarks/summary_cache.py --output benchmarks/SUMMARY_CACHE.md

What is measured: llama.cpp's server (`lc_compaction.testing.llama_server.LlamaServer`, SmolLM2-135M) keeps the
previous prompt in its KV cache and reports, in each reply's `timings`, how many prompt tokens it reused
(`cache_n`) and how many it had to process (`prompt_n`), in the model's own tokens. An agent conversation (a
system prompt, reservation lookups with their results; `conversation`) is sent as the agent's request, then the
next call compacts with `Summarize(model=<the same model>)`: once with `share_agent_request=True` (the summary
request repeats the agent's request) and once with False (the transcript prompt). Before each summary call the
agent's request is sent again, so the cache holds what a provider's would. The cached share of a summary call
is `cache_n / (cache_n + prompt_n)`. Nothing here asserts a figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from lc_compaction import CompactionPolicy, compact
from lc_compaction.agent_request import AgentRequest
from lc_compaction.strategies.summarize import MIN_SUMMARY_TOKENS, Summarize
from lc_compaction.testing.llama_server import LlamaServer

LOOKUPS = 22
"""Reservation lookups in the conversation (each a user turn, a call, its result and an answer): about 6,000
tokens, so that the agent's request and the instruction fit a window whose budget the request fit (the default
reserve is a tenth of the window; the instruction is some 700 tokens)."""

CONTEXT_TOKENS = 16_384
"""The server's context (`LlamaServer(context_tokens=...)`, the model's tokens): room for the conversation twice
over (the cache figures, not the model's text, are what is measured)."""


@tool
def get_reservation(reservation_id: str) -> str:
    """Look a reservation up by its id."""
    return reservation_id


def conversation(lookups: int = LOOKUPS) -> list[BaseMessage]:
    """A system prompt and `lookups` reservation lookups, each result about 120 words."""
    out: list[BaseMessage] = [SystemMessage("You are an airline agent. Look reservations up before you answer.",
                                            id="sys")]
    for k in range(lookups):
        rid = f"RES{k:03d}Q"
        seats = " ".join(f"seat {j % 9}{'ABCDEF'[j % 6]} row {j % 30}" for j in range(30))
        out += [HumanMessage(f"Please check reservation {rid}.", id=f"h{k}"),
                AIMessage("", tool_calls=[{"id": f"c{k}", "name": "get_reservation", "args": {"reservation_id": rid}}],
                          id=f"a{k}"),
                ToolMessage(json.dumps({"reservation_id": rid, "status": "confirmed", "seats": seats}),
                            tool_call_id=f"c{k}", id=f"t{k}"),
                AIMessage(f"{rid} is confirmed.", id=f"b{k}")]
    return out


class Timings:
    """An httpx client that keeps the `timings` of every reply (llama.cpp's cache figures)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.client = httpx.Client(timeout=600, event_hooks={"response": [self._keep]})

    def _keep(self, response: httpx.Response) -> None:
        response.read()
        timings = response.json().get("timings") if response.status_code == 200 else None
        self.seen.append(timings or {})


def share(timings: dict[str, Any]) -> float:
    cached, fresh = timings.get("cache_n", 0), timings.get("prompt_n", 0)
    return cached / (cached + fresh) if cached + fresh else 0.0


def measure(server: LlamaServer) -> dict[str, dict[str, Any]]:
    """The summary call's timings with and without cache sharing (see the module docstring)."""
    record = Timings()
    model = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model, max_retries=0,
                       http_client=record.client)
    question = ("And one more: is RES000Q still confirmed? "
                + "I need the seat map of every flight on it, with the row numbers and the meal of each seat. " * 10)
    history = [*conversation(), HumanMessage(question, id="next")]
    system, sent = history[0], history[1:-2]  # the agent's previous request: up to the last lookup's result
    agent = AgentRequest(model=model, messages=sent, system=system, tools=(get_reservation,))
    counter = CompactionPolicy(max_input_tokens=10_000).counter
    low, high = counter.count_messages([system, *sent]), counter.count_messages(history)
    window = low
    while (CompactionPolicy(max_input_tokens=window).budget_tokens() or 0) < (low + high) // 2:
        window += 10
    out: dict[str, dict[str, Any]] = {}
    for shared in (True, False):
        agent.runnable().invoke(agent.inputs("Go on.")[:-1], max_tokens=1)  # the agent's call: the cache holds it
        before = len(record.seen)
        strategy = Summarize(model=model, share_agent_request=shared, max_summary_tokens=MIN_SUMMARY_TOKENS,
                             timeout=600, max_retries=0)
        result = compact(history[1:], CompactionPolicy(max_input_tokens=window, strategies=[strategy]),
                         agent_request=agent)
        calls = record.seen[before:]
        out["agent" if shared else "transcript"] = {
            "request": result.details.get("summary_request"), "calls": len(calls),
            "cache_n": sum(t.get("cache_n", 0) for t in calls), "prompt_n": sum(t.get("prompt_n", 0) for t in calls),
            "prompt_ms": sum(t.get("prompt_ms", 0.0) for t in calls)}
        out["agent" if shared else "transcript"]["share"] = share(out["agent" if shared else "transcript"])
    return out


def render(figures: dict[str, dict[str, Any]]) -> str:
    lines = ["# The summary call under the prompt cache (llama.cpp)", "",
             "Generated by `python benchmarks/summary_cache.py --output benchmarks/SUMMARY_CACHE.md`; see its "
             "docstring. Tokens are the model's own (SmolLM2's tokenizer); prompt time depends on the machine.", "",
             "| summary request | calls | prompt tokens from the cache (`cache_n`) | processed (`prompt_n`) | cached "
             "share | prompt time (ms) |", "|---|---|---|---|---|---|"]
    names = {"agent": "the agent's request + the instruction (cache-sharing)", "transcript": "transcript prompt"}
    for key, f in figures.items():
        lines.append(f"| {names[key]} | {f['calls']} | {f['cache_n']:,} | {f['prompt_n']:,} | {f['share']:.1%} | "
                     f"{f['prompt_ms']:,.0f} |")
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the table to this Markdown file.")
@click.option("--threads", type=int, default=2, show_default=True, help="CPU threads of the llama.cpp server.")
def main(output: Path | None, threads: int) -> None:
    """Measure the summary call's cached share with and without cache sharing."""
    with LlamaServer(threads=threads, context_tokens=CONTEXT_TOKENS) as server:
        figures = measure(server)
    text = render(figures)
    click.echo(text)
    if output is not None:
        output.write_text(text)


if __name__ == "__main__":
    main()
