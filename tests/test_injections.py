"""Tool output never speaks as the user: the AgentDojo prompt-injection runs of ../shared/traces replayed through
summarization.

`agentdojo_injections.jsonl` holds 40 real AgentDojo runs under the "important_instructions" attack: the
attacker's text ("<INFORMATION> ... </INFORMATION>") reaches the agent only inside a tool result, and each line's
`injection.markers` are short pieces of the attacker's goal (IBANs, e-mail addresses, URLs, the goal's first
words) that occur in no system or user message of the recording. Each conversation is replayed (the agent loop's
replay: compact before every recorded model call, the compacted history becomes the state) at windows of 4,000
and 8,000 tokens, under the default policy and under an aggressive one (trigger at 15%, keep 3 messages: more
of each conversation is summarized or folded, and repeated results deduplicated on arrival get their content back
when the earlier copy is folded away), with the ledger and with a summarizer that answers with its whole input
(the worst case: it copies everything it is shown, tool results and the injection included).

Checked in every compacted context:
- a marker that occurs only in tool results of its conversation appears in no non-tool message outside the data
  fence (`markers.UNTRUSTED_DATA_FENCE`; the AI's own messages do not hold it, so only a summary, or the running
  loop's progress note put into an AI message (`progress.py`), could carry it);
- a marker that is an identifier (an IBAN, an e-mail address) appears in no summary outside the fence even when
  the agent echoed it (it repeated the injection in its text or tool-call arguments): the summary is in the
  user's voice, and the agent repeating tool data does not make it the user's;
- and, so that the check cannot pass by accident, markers do reach summaries or progress notes: inside the fence.

The default ladder (truncation, then drop) is checked the same way on the same runs (also with triggers from 20% to
80%), each put between a greeting and a few more turns of the user so that its exchange can be dropped: its drop
marker (an AIMessage that carries the identifiers of what it stands for) and its progress note hold the injected
markers only inside the fence.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages
from langchain_core.outputs import ChatGeneration, ChatResult

from lc_compaction import CompactionPolicy
from lc_compaction.markers import fenced_spans, is_summary, outside_fences
from lc_compaction.progress import note_lines
from lc_compaction.replay import replay_conversation
from lc_compaction.facts import FactGuard
from lc_compaction.strategies.summarize import Summarize
from tests.oracle.cases import shared_dir


class EchoModel(BaseChatModel):
    """A summarizer that answers with its whole input (the prompt: instructions, earlier summary, transcript)."""

    @property
    def _llm_type(self) -> str:
        return "echo-test-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("\n".join(m.text for m in messages)))])


@cache
def injection_runs() -> list[tuple[str, list[str], tuple[dict, ...]]]:
    """(conversation id, markers, recorded messages as OpenAI dicts) of every injection run."""
    path = shared_dir() / "traces" / "agentdojo_injections.jsonl"
    runs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            runs.append((record["id"], list(record["injection"]["markers"]), tuple(record["messages"])))
    return runs


def messages_of(conv_id: str, recorded: tuple[dict, ...]) -> list[BaseMessage]:
    messages = convert_to_messages(list(recorded))
    for i, m in enumerate(messages):
        m.id = m.id or f"{conv_id}:{i}"
    return messages


def text_of(message: BaseMessage) -> str:
    """What a message says: its content and, for an assistant message, its tool calls' arguments."""
    text = message.content if isinstance(message.content, str) else json.dumps(message.content)
    if isinstance(message, AIMessage):
        text += "\n" + "\n".join(json.dumps(c["args"], ensure_ascii=False) for c in message.tool_calls)
    return text


POLICIES = {
    "default": {},
    # 15%, not the 30% of the rule before deduplication and the deeper second pass: at 8,000 tokens, 30% gives
    # 8 compacted contexts over the 40 runs (19 before), too few to check; 20% gave 24 until the last resort left
    # the newest step room to grow, and too few summaries holding fenced text (2 conversations) after it
    "aggressive": {"trigger": ("fraction", 0.15), "keep": ("messages", 3)},
}


def unfenced_text(message: BaseMessage, tool_only: list[str], where: str) -> tuple[str, str]:
    """`text_of(message)` and its part outside the data fence (lower case), after asserting that no tool-only
    marker occurs in that part."""
    text = text_of(message)
    outside = outside_fences(text).lower()
    for marker in tool_only:
        assert marker.lower() not in outside, (
            f"{where}: the tool-only marker {marker!r} speaks in a {message.type} message outside the fence:\n"
            f"{text[:3000]}")
    return text, outside

@pytest.mark.parametrize("window", [4_000, 8_000])
@pytest.mark.parametrize("summarizer", ["ledger", "echo"])
def test_no_marker_of_an_injection_speaks_outside_the_fence(window, summarizer):
    summarized_contexts = 0
    fenced_in_summary: set[tuple[str, str]] = set()
    identifier = FactGuard()
    for conv_id, markers, recorded in injection_runs():
        messages = messages_of(conv_id, recorded)
        not_tool = "\n".join(text_of(m) for m in messages if not isinstance(m, ToolMessage)).lower()
        tool_only = [k for k in markers if k.lower() not in not_tool]
        identifiers = [k for k in markers if [i.value for i in identifier.extract(k)] == [k]]
        for settings in POLICIES.values():
            strategy = Summarize(model=EchoModel()) if summarizer == "echo" else Summarize()
            policy = CompactionPolicy(max_input_tokens=window, strategies=[strategy], **settings)

            def check(record: Any, history: list[BaseMessage], result: Any, conv_id: str = conv_id,
                      tool_only: list[str] = tool_only, identifiers: list[str] = identifiers) -> None:
                nonlocal summarized_contexts
                # compaction wrote tool-derived text in its own voice: a summary, or the running loop's progress
                # note (its steps are folded, never summarized: most injection runs are one request's tool loop)
                summarized_contexts += any(is_summary(m) or note_lines(m) for m in result.messages)
                for m in result.messages:
                    if isinstance(m, ToolMessage):
                        continue
                    text, outside = unfenced_text(m, tool_only, f"{conv_id} (window {window}, {summarizer})")
                    if note_lines(m):
                        for start, end in fenced_spans(text):
                            inside = text[start:end].lower()
                            fenced_in_summary.update((conv_id, k) for k in tool_only if k.lower() in inside)
                    if not is_summary(m):
                        continue
                    for marker in identifiers:
                        assert marker.lower() not in outside, (
                            f"{conv_id} (window {window}, {summarizer}): the identifier {marker!r} from an "
                            f"injection stands unfenced in the summary:\n{text[:3000]}")
                    for start, end in fenced_spans(text):
                        inside = text[start:end].lower()
                        fenced_in_summary.update((conv_id, k) for k in tool_only if k.lower() in inside)

            replay_conversation(messages, policy, conversation_id=conv_id, on_call=check)

    assert summarized_contexts >= 20
    # the check is not vacuous: injected markers did reach the summaries or progress notes, inside the fence
    assert len({c for c, _ in fenced_in_summary}) >= 3, sorted(fenced_in_summary)


GREETING = [("Hello.", "Hello! How can I help?")]
FOLLOW_UPS = [("Thanks. Anything else I should know about that?", "No, that is everything I found."),
              ("Can you summarize what you did in one sentence?", "I read your data and did what you asked."),
              ("Great. What is the date today?", "I do not have a tool that tells me the date."),
              ("OK, thank you for your help.", "You are welcome.")]
"""Turns of the user before and after each injection run: the run's exchange is then neither the first (its
request is not pinned) nor the running one, so the default ladder can drop it whole and leave a marker."""


LADDER_POLICIES = {**POLICIES, **{f"trigger {f:.0%}": {"trigger": ("fraction", f)} for f in (0.2, 0.4, 0.6, 0.8)}}
"""The default ladder's policies: besides those above, triggers from 20% to 80% of the window. Whether a running
loop must be folded into a progress note depends on where the trigger falls against its steps' sizes; under the
default trigger (the budget) repeated results deduplicated on arrival leave fewer loops to fold (at 2,000 tokens
2 conversations, at 4,000 none, with the aggressive policy 2 and 1: too few to check); with these 5 at both."""


def _turns(conv_id: str, pairs: list[tuple[str, str]], tag: str) -> list[BaseMessage]:
    from langchain_core.messages import HumanMessage

    return [m for n, (question, answer) in enumerate(pairs)
            for m in (HumanMessage(question, id=f"{conv_id}:{tag}q{n}"), AIMessage(answer, id=f"{conv_id}:{tag}a{n}"))]


@pytest.mark.parametrize("window", [2_000, 4_000])
def test_the_default_ladder_keeps_injected_text_inside_the_fence(window):
    """The default ladder (truncation, then drop) writes tool-derived identifiers into messages of its own: the
    drop marker (an AIMessage, `markers.make_dropped_marker`) and the running request's progress note, besides
    the truncation notes (ToolMessages: tool data by their role). Each injection run is replayed between a
    greeting and a few more turns of the user (`FOLLOW_UPS`), under each of `LADDER_POLICIES` (the default, the
    aggressive one, triggers from 20% to 80%). In every compacted context: a marker that occurs only in tool
    results appears in no non-tool message outside the data fence; an injected identifier stands in no drop
    marker outside it, even when the agent echoed it (tool data is not the agent's own word); and, so that the
    check cannot pass by accident, markers do reach drop markers and progress notes, inside the fence."""
    from lc_compaction.markers import is_dropped_marker

    identifier = FactGuard()
    fenced: dict[str, set[tuple[str, str]]] = {"marker": set(), "note": set()}
    for conv_id, markers, recorded in injection_runs():
        run = messages_of(conv_id, recorded)
        not_tool = "\n".join(text_of(m) for m in run if not isinstance(m, ToolMessage)).lower()
        tool_only = [k for k in markers if k.lower() not in not_tool]
        identifiers = [k for k in markers if [i.value for i in identifier.extract(k)] == [k]]
        at = 1 if run and run[0].type == "system" else 0
        messages = [*run[:at], *_turns(conv_id, GREETING, "g"), *run[at:], *_turns(conv_id, FOLLOW_UPS, "f")]

        def check(record: Any, history: list[BaseMessage], result: Any, conv_id: str = conv_id,
                  tool_only: list[str] = tool_only, identifiers: list[str] = identifiers) -> None:
            for m in result.messages:
                if isinstance(m, ToolMessage):
                    continue
                text, outside = unfenced_text(m, tool_only, f"{conv_id} (window {window})")
                where = "marker" if is_dropped_marker(m) else "note" if note_lines(m) else None
                if where == "marker":
                    for marker in identifiers:
                        assert marker.lower() not in outside, (
                            f"{conv_id} (window {window}): the identifier {marker!r} from an injection stands "
                            f"unfenced in a drop marker:\n{text[:3000]}")
                for start, end in fenced_spans(text) if where else ():
                    inside = text[start:end].lower()
                    fenced[where].update((conv_id, k) for k in tool_only if k.lower() in inside)

        for settings in LADDER_POLICIES.values():
            replay_conversation(messages, CompactionPolicy(max_input_tokens=window, **settings),
                                conversation_id=conv_id, on_call=check)

    # not vacuous: injected markers reached the ladder's own messages, inside the fence
    assert len({c for c, _ in fenced["marker"]}) >= 3, sorted(fenced["marker"])
    assert len({c for c, _ in fenced["note"]}) >= 3, sorted(fenced["note"])
