"""Content blocks (_content.py): the one home of the block kinds, and the modules that read them agree.

The counters, the last resort and the ladder's thinking pin each read block kinds from `_content`; these tests check
each helper against a block of every kind it names, and that the modules using them treat a kind the same way.
"""

from __future__ import annotations

import base64
import os

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from lc_compaction import CompactionPolicy, DropOldExchanges, compact
from lc_compaction._content import (
    block_text,
    content_text,
    is_media,
    reply_text,
    starts_with_thinking,
    with_block_text,
)
from lc_compaction.markers import is_shortened
from lc_compaction.shorten import media_count, shorten
from lc_compaction.tokens import ApproximateCounter

PAYLOAD = base64.b64encode(os.urandom(3000)).decode()
"""A base64 payload (4,000 characters): never text."""

MEDIA = [
    {"type": "image", "base64": PAYLOAD, "mime_type": "image/png"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PAYLOAD}},
    {"type": "input_image", "image_url": "data:image/png;base64," + PAYLOAD},
    {"type": "file", "base64": PAYLOAD, "mime_type": "application/pdf"},
    {"type": "input_file", "file_data": "data:application/pdf;base64," + PAYLOAD, "filename": "a.pdf"},
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PAYLOAD}},
    {"type": "audio", "base64": PAYLOAD, "mime_type": "audio/wav"},
    {"type": "input_audio", "input_audio": {"data": PAYLOAD, "format": "wav"}},
    {"type": "video", "base64": PAYLOAD, "mime_type": "video/mp4"},
]
"""One block of every media format: LangChain v1, OpenAI Chat / Responses, Anthropic."""

THINKING = [
    {"type": "thinking", "thinking": "plan the steps", "signature": "sig"},
    {"type": "redacted_thinking", "data": "c2VjcmV0"},
    {"type": "reasoning", "reasoning": "plan the steps"},
]


def _double_payload(value):
    """A copy of `value` in which every occurrence of PAYLOAD is doubled."""
    if isinstance(value, str):
        return value.replace(PAYLOAD, PAYLOAD * 2)
    if isinstance(value, dict):
        return {k: _double_payload(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("block", MEDIA, ids=[b["type"] for b in MEDIA])
def test_every_media_block_is_removable_and_costs_the_same_whatever_its_payload(block):
    """The last resort may remove exactly the blocks whose cost the counter bounds: a media block is removed by
    `shorten(drop_media=True)` and named in its marker, and doubling its payload does not change its count."""
    assert is_media(block) and block_text(block) is None
    msg = HumanMessage([{"type": "text", "text": "look at this"}, block], id="h")
    assert media_count(msg.content) == 1
    cut = shorten(msg, 100, drop_media=True)
    assert block not in cut.content and cut.content[0] == {"type": "text", "text": "look at this"}
    assert cut.response_metadata["lc_compaction"]["removed_blocks"] == [block["type"]]
    counter = ApproximateCounter()
    doubled = HumanMessage([{"type": "text", "text": "look at this"}, _double_payload(block)], id="h2")
    assert PAYLOAD * 2 in repr(doubled.content)
    assert counter.count_message(doubled) == counter.count_message(msg)


def test_text_and_text_documents_are_text_not_media():
    text = {"type": "text", "text": "hello"}
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "report body"}}
    for block, inner in ((text, "hello"), (doc, "report body"), ({"type": "input_text", "text": "hi"}, "hi"),
                         ({"type": "output_text", "text": "yo"}, "yo"), ("bare", "bare")):
        assert not is_media(block)
        assert block_text(block) == inner
        assert block_text(with_block_text(block, inner[:2])) == inner[:2]
    assert doc["source"]["data"] == "report body"  # with_block_text copies, never edits in place
    for other in ({"type": "tool_use", "id": "c", "name": "f", "input": {}}, THINKING[0], 42,
                  {"type": ["not", "a", "string"], "text": "x"}):
        assert block_text(other) is None and not is_media(other)


@pytest.mark.parametrize("block", THINKING, ids=[b["type"] for b in THINKING])
def test_every_reasoning_kind_counts_as_thinking_first(block):
    assert starts_with_thinking(AIMessage([block, {"type": "text", "text": "answer"}]))
    assert not starts_with_thinking(AIMessage([{"type": "text", "text": "answer"}, block]))
    assert not starts_with_thinking(HumanMessage([block]))
    assert not starts_with_thinking(AIMessage("plain text"))


@pytest.mark.parametrize("block", THINKING, ids=[b["type"] for b in THINKING])
def test_the_active_turn_step_keeps_its_thinking_for_every_reasoning_kind(block):
    """The step after the latest request that starts with a reasoning block (of any kind) survives compaction, its
    message as it was (no later step starts with thinking, so no fold may take it); its result is a tool result
    like any other (issue 20: what may be cut of it is cut)."""
    think = AIMessage([block, {"type": "tool_use", "id": "k0", "name": "read", "input": {"p": 0}}], id="think",
                      tool_calls=[{"name": "read", "args": {"p": 0}, "id": "k0", "type": "tool_call"}])
    msgs = [HumanMessage("q " * 1000, id="h0"), AIMessage("a " * 1000, id="a0"),
            HumanMessage("now do it", id="h1"), think, ToolMessage("z" * 6000, tool_call_id="k0", id="t0")]
    for n in range(1, 6):  # distinct results (identical ones would be deduplicated on arrival and fit)
        msgs += [AIMessage("", id=f"a{n}", tool_calls=[{"name": "read", "args": {"p": n}, "id": f"k{n}",
                                                       "type": "tool_call"}]),
                 ToolMessage(str(n) * 6000, tool_call_id=f"k{n}", id=f"t{n}")]
    policy = CompactionPolicy(max_input_tokens=4000, token_counter="approximate", keep=("messages", 2),
                              strategies=[DropOldExchanges()])
    result = compact(msgs, policy)
    assert result.triggered and result.fits
    kept = [m.id for m in result.messages]
    assert "think" in kept and "t0" in kept
    assert len(kept) < len(msgs)  # something was dropped, and the thinking step was not
    # neither the second pass nor the last resort (which both ran: the history is still over the budget when
    # the drop has done what it can) touched the thinking message: the same object, content untouched
    by_id = {m.id: m for m in result.messages}
    assert by_id["think"] is think
    assert {a.strategy for a in result.actions} >= {"drop_old_exchanges", "last_resort"}
    assert not any("think" in a.message_ids for a in result.actions)


@pytest.mark.parametrize("block", THINKING, ids=[b["type"] for b in THINKING])
def test_the_last_resort_cuts_the_active_turn_steps_result_never_its_thinking(block):
    """When only the thinking step's own (huge) result can make the history fit, the last resort cuts that result
    in place (a tool result: toward the target, as any unpinned message), and the thinking message itself stays
    as it was, its reasoning block first (issue 20: its pin covered its results, which then stayed whole)."""
    think = AIMessage([block, {"type": "tool_use", "id": "k0", "name": "read", "input": {"p": 0}}], id="think",
                      tool_calls=[{"name": "read", "args": {"p": 0}, "id": "k0", "type": "tool_call"}])
    msgs = [HumanMessage("q " * 1000, id="h0"), AIMessage("a " * 1000, id="a0"),
            HumanMessage("now do it", id="h1"), think, ToolMessage("z" * 24_000, tool_call_id="k0", id="t0"),
            AIMessage("", id="a1", tool_calls=[{"name": "read", "args": {"p": 1}, "id": "k1", "type": "tool_call"}]),
            ToolMessage("w" * 800, tool_call_id="k1", id="t1")]
    policy = CompactionPolicy(max_input_tokens=4000, token_counter="approximate", keep=("messages", 2),
                              strategies=[DropOldExchanges()])
    budget, (target, _) = policy.budget_tokens(), policy.target_goal()
    assert budget is not None and target is not None
    result = compact(msgs, policy)
    by_id = {m.id: m for m in result.messages}
    assert result.fits and result.tokens_after <= budget
    assert by_id["think"] is think and starts_with_thinking(by_id["think"])
    cut = by_id["t0"]
    assert is_shortened(cut) and cut.content.startswith("z" * 1000)
    assert any(a.strategy == "last_resort" and a.message_ids == ["t0"] for a in result.actions)


def test_content_text_names_non_text_blocks_and_reply_text_keeps_only_written_text():
    content = ["bare", {"type": "text", "text": "visible"}, MEDIA[0], THINKING[0],
               {"type": "output_text", "text": "out"}, {"type": "input_text", "text": "in"}]
    readable = content_text(content)
    assert readable.split("\n") == ["bare", "visible", "[image: inline image/png data]", "[thinking]", "out", "in"]
    assert PAYLOAD not in readable
    assert content_text([{"text": "untyped"}, {"no": "text"}]) == "untyped\n[block]"
    assert reply_text(AIMessage(content)) == "bare" + "visible" + "out"  # no reasoning, media or input text
    assert reply_text(AIMessage("just a string")) == "just a string"
