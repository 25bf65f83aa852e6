"""Media survives summaries (issue 12, item 8): the URLs of media blocks reach the summarizer's input and the
summary, as references, never as base64.

The text every strategy reads of a content (`_content.content_text`) names a media block by its type and its
reference (`_content.media_reference`): its URL, its file id or file name, or for inline data (base64, a `data:`
URL) only its media type. The summarizer's transcript, the ledger and the fact guard (which keeps URLs the
summary left out) read that text.
"""

from __future__ import annotations

import base64
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction import CompactionPolicy, Summarize, compact
from lc_compaction._content import content_text, media_reference
from lc_compaction.markers import is_summary
from tests.oracle.cases import FakeSummaryModel
from tests.oracle.generators import image_blocks

PAYLOAD = base64.b64encode(os.urandom(3000)).decode()
BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{200,}")

REFERENCED = [  # (block, what must name it)
    ({"type": "image_url", "image_url": {"url": "https://cdn.example.com/plots/q3.png", "detail": "high"}},
     "https://cdn.example.com/plots/q3.png"),
    ({"type": "image_url", "image_url": "https://cdn.example.com/a.jpg"}, "https://cdn.example.com/a.jpg"),
    ({"type": "input_image", "image_url": "https://cdn.example.com/b.webp"}, "https://cdn.example.com/b.webp"),
    ({"type": "image", "url": "https://cdn.example.com/c.png"}, "https://cdn.example.com/c.png"),
    ({"type": "image", "source_type": "url", "url": "https://cdn.example.com/d.gif"}, "https://cdn.example.com/d.gif"),
    ({"type": "image", "source": {"type": "url", "url": "https://cdn.example.com/e.png"}}, "https://cdn.example.com/e.png"),
    ({"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}, "title": "Q3 report"},
     "Q3 report, https://example.com/report.pdf"),
    ({"type": "file", "url": "https://example.com/data.csv", "mime_type": "text/csv"}, "https://example.com/data.csv"),
    ({"type": "input_file", "file_url": "https://example.com/spec.pdf"}, "https://example.com/spec.pdf"),
    ({"type": "file", "file": {"filename": "contract.pdf", "file_id": "file-abc123"}},
     "contract.pdf, file id file-abc123"),
    ({"type": "image", "source": {"type": "file", "file_id": "file_011"}}, "file id file_011"),
    ({"type": "audio", "url": "https://example.com/call.mp3"}, "https://example.com/call.mp3"),
]
INLINE = [  # (block, the media type that names it)
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + PAYLOAD}}, "image/png"),
    ({"type": "image", "base64": PAYLOAD, "mime_type": "image/jpeg"}, "image/jpeg"),
    ({"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": PAYLOAD}}, "image/webp"),
    ({"type": "file", "file": {"filename": "scan.pdf", "file_data": "data:application/pdf;base64," + PAYLOAD}},
     "application/pdf"),
    ({"type": "input_audio", "input_audio": {"data": PAYLOAD, "format": "wav"}}, "audio/wav"),
]


@pytest.mark.parametrize("block,reference", REFERENCED)
def test_a_media_block_is_named_by_its_reference(block, reference):
    assert media_reference(block) == reference
    assert content_text(["see", block]) == f"see\n[{block['type']}: {reference}]"


@pytest.mark.parametrize("block,mime", INLINE)
def test_inline_media_is_named_by_its_type_only(block, mime):
    text = content_text([block])
    assert f"inline {mime} data" in text and PAYLOAD not in text and not BASE64_RUN.search(text)


def test_media_inside_a_tool_result_block_is_named_too():
    block = {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "screenshot saved"}, REFERENCED[5][0]]}
    assert content_text([block]) == "screenshot saved\n[image: https://cdn.example.com/e.png]"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=image_blocks(), words=st.text(max_size=40))
def test_content_text_never_carries_base64(block, words):
    text = content_text([{"type": "text", "text": words}, block])
    assert not BASE64_RUN.search(text.replace(words, "")) and "inline image/png data" in text


def history_with_media() -> list:
    """The first request is pinned (never summarized): the media are in the exchanges after it."""
    return [SystemMessage("You analyse charts.", id="s"),
            HumanMessage("I will send you charts to analyse.", id="h0"), AIMessage("Send them over.", id="a0"),
            HumanMessage([{"type": "text", "text": "What does this chart show? " + "Please be thorough. " * 80},
                          REFERENCED[0][0], INLINE[0][0]], id="h1"),
            AIMessage("Revenue rises through Q3. " * 80, id="a1"),
            HumanMessage([{"type": "text", "text": "And this one? " + "Compare carefully. " * 80},
                          REFERENCED[6][0]], id="h2"),
            AIMessage("Costs are flat. " * 80, id="a2"),
            HumanMessage("Summarize both in one line.", id="h3")]


def _summarize(strategy: Summarize) -> tuple[str, list]:
    policy = CompactionPolicy(max_input_tokens=3_000, keep=("turns", 1), strategies=[strategy],
                              token_counter="approximate")
    result = compact(history_with_media(), policy)
    summaries = [m for m in result.messages if is_summary(m)]
    assert len(summaries) == 1, result.actions
    return summaries[0].content, result.messages


def test_the_urls_reach_the_summarizer_input_and_the_summary():
    model = FakeSummaryModel(summary_text="The user asked about two charts: revenue rises, costs are flat.")
    summary, _ = _summarize(Summarize(model=model))
    fed = "\n".join(model.inputs)
    for url in ("https://cdn.example.com/plots/q3.png", "https://example.com/report.pdf"):
        assert url in fed and url in summary  # the model left them out: the fact guard kept them
    assert "inline image/png data" in fed
    for text in (fed, summary):
        assert PAYLOAD not in text and not BASE64_RUN.search(text)


def test_the_ledger_keeps_the_urls_when_there_is_no_model():
    summary, _ = _summarize(Summarize())
    assert "https://cdn.example.com/plots/q3.png" in summary and "https://example.com/report.pdf" in summary
    assert PAYLOAD not in summary and not BASE64_RUN.search(summary)


def test_a_truncated_tool_result_names_its_image_url():
    from lc_compaction.strategies.truncate import TruncateToolResults

    result = ToolMessage([{"type": "image_url", "image_url": {"url": "https://cdn.example.com/shot.png"}},
                          {"type": "text", "text": "x" * 5000}], tool_call_id="c", id="t")
    note = TruncateToolResults().note(result)
    assert "https://cdn.example.com/shot.png" in note
