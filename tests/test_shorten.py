"""The last resort (shorten.py): content blocks keep their structure, text is cut before media are removed,
and the marker and the result say what went."""

from __future__ import annotations

import base64
import struct

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.markers import MARK_KEY
from lc_compaction.shorten import shorten, text_length


def png_b64(width: int, height: int) -> str:
    header = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
              + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return base64.b64encode(header + b"\0" * 3000).decode()


def test_a_text_document_is_cut_like_text_and_the_request_keeps_its_words():
    big = "The quarterly report says revenue grew. " * 5000
    msg = HumanMessage([{"type": "text", "text": "analyse:"},
                        {"type": "document",
                         "source": {"type": "text", "media_type": "text/plain", "data": big}}], id="h")
    policy = CompactionPolicy(max_input_tokens=8000)
    result = compact([msg], policy)
    assert result.fits and result.tokens_after <= policy.budget_tokens()
    out = result.messages[0]
    assert out.id == "h" and out.content[0] == {"type": "text", "text": "analyse:"}
    kept = out.content[1]["source"]["data"]
    assert big.startswith(kept) and len(kept) > 10_000  # cut to what the budget needs, not to nothing
    assert "cut by lc-compaction" in out.content[-1]["text"]
    assert out.response_metadata[MARK_KEY]["original_chars"] == text_length(msg.content)


def test_an_image_goes_only_when_the_text_alone_is_not_enough_and_the_marker_names_it():
    msg = HumanMessage([{"type": "text", "text": "What is in this picture? " * 3},
                        {"type": "image_url",
                         "image_url": {"url": "data:image/png;base64," + png_b64(2048, 2048)}}], id="h")
    result = compact([SystemMessage("s", id="s"), msg], CompactionPolicy(max_input_tokens=500))
    out = result.messages[1]
    assert result.fits
    assert out.content[0]["text"] == "What is in this picture? " * 3  # the request's text kept whole
    assert not any(b.get("type") == "image_url" for b in out.content)
    assert "image_url" in out.content[-1]["text"] and "image_url" in result.actions[-1].detail
    assert out.response_metadata[MARK_KEY]["removed_blocks"] == ["image_url"]


def test_tool_calls_and_tool_use_blocks_are_never_cut_away():
    ai = AIMessage([{"type": "text", "text": "x" * 400},
                    {"type": "tool_use", "id": "c1", "name": "f", "input": {}}],
                   id="a", tool_calls=[{"name": "f", "args": {}, "id": "c1", "type": "tool_call"}])
    cut = shorten(ai, 10, drop_media=True)
    assert cut.tool_calls == ai.tool_calls and cut.id == "a"
    assert any(b.get("type") == "tool_use" for b in cut.content)
    assert cut.content[0]["text"] == "x" * 10


def test_media_blocks_go_one_at_a_time_oldest_first():
    """Three images and room for one: two go (the oldest), the newest and the text stay."""
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_b64(2048, 2048)}}
    newest = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_b64(2048, 2049)}}
    msg = HumanMessage([{"type": "text", "text": "compare these"}, img, img, newest], id="h")
    result = compact([SystemMessage("sys", id="s"), msg], CompactionPolicy(max_input_tokens=1_500))
    out = result.messages[-1]
    assert result.fits
    assert out.content[0] == {"type": "text", "text": "compare these"}
    images = [b for b in out.content if b.get("type") == "image_url"]
    assert images == [newest]
    assert out.response_metadata[MARK_KEY]["removed_blocks"] == ["image_url", "image_url"]
