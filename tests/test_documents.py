"""A PDF costs its pages (issue 20, class 6).

A 40-page PDF was counted as a flat 1,000 tokens, so a history holding one looked far smaller than it is and was
not compacted. A PDF now costs its pages times the per-page figure its model's provider publishes (Anthropic
3,000, the top of its 1,500-3,000 a page; Gemini 258; OpenAI and others 3,000), the pages read from its bytes
(page objects, the page tree's count, a linearized file's count, compressed object streams), else from the
block's metadata, else one page. The PDFs here are built by the test, byte by byte, in the forms real writers
produce: plain objects, objects compressed in an object stream (pdfTeX, PDF 1.5+), a linearized file.
"""

from __future__ import annotations

import base64
import zlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from lc_compaction import CompactionPolicy, compact
from lc_compaction.tokens import (
    FILE_BLOCK_TOKENS,
    ApproximateCounter,
    TiktokenCounter,
    model_family,
    pdf_page_count,
    pdf_tokens_per_page,
    resolve_token_counter,
)


def pdf(pages: int, *, form: str = "plain") -> bytes:
    """A minimal PDF of `pages` pages: "plain" (every object in the file), "compressed" (the page tree and the
    pages in a Flate-compressed object stream, as pdfTeX writes them), "linearized" (plain, with a linearization
    dictionary first), "no_count" (plain pages, a page tree without /Count)."""
    kids = " ".join(f"{3 + k} 0 R" for k in range(pages))
    count = "" if form == "no_count" else f" /Count {pages}"
    objects = {1: "<< /Type /Catalog /Pages 2 0 R >>", 2: f"<< /Type /Pages /Kids [{kids}]{count} >>"}
    for k in range(pages):
        objects[3 + k] = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"
    out = b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n"
    if form == "linearized":
        out += f"99 0 obj\n<< /Linearized 1 /L 9999 /N {pages} /T 9000 >>\nendobj\n".encode()
    if form == "compressed":
        inner = {n: body for n, body in objects.items() if n != 1}
        header = " ".join(f"{n} {i}" for i, n in enumerate(inner))
        body = header + "\n" + "\n".join(inner.values())
        stream = zlib.compress(body.encode())
        out += b"1 0 obj\n" + objects[1].encode() + b"\nendobj\n"
        out += (f"50 0 obj\n<< /Type /ObjStm /N {len(inner)} /First {len(header) + 1} /Filter /FlateDecode "
                f"/Length {len(stream)} >>\nstream\n").encode() + stream + b"\nendstream\nendobj\n"
    else:
        for n, body in objects.items():
            out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    return out + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pdf_blocks(data: str) -> list[dict]:
    """The same base64 PDF in every format LangChain passes through."""
    return [
        {"type": "file", "base64": data, "mime_type": "application/pdf"},                       # LangChain v1
        {"type": "file", "source_type": "base64", "data": data, "mime_type": "application/pdf"},  # LangChain v0
        {"type": "file", "file": {"filename": "r.pdf", "file_data": f"data:application/pdf;base64,{data}"}},
        {"type": "input_file", "filename": "r.pdf", "file_data": f"data:application/pdf;base64,{data}"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}},
        {"type": "media", "mime_type": "application/pdf", "data": data},                       # Gemini (VertexAI)
        {"type": "image_url", "image_url": {"url": f"data:application/pdf;base64,{data}"}},    # a PDF as an image
    ]
"""Seen (issue 20, class 6, a new user's trial): the Gemini `media` block counted as 26 tokens and a PDF sent as an
`image_url` data URL as one image (1,452 tokens), so three 40-page PDFs in a 20,000-token Gemini window never
triggered."""


def block_cost(counter, block) -> int:
    return counter.count_message(HumanMessage([block])) - counter.count_message(HumanMessage([]))


MODELS = {"claude-sonnet-4-5": 3_000, "anthropic:claude-3-5-haiku-latest": 3_000,
          "us.anthropic.claude-3-7-sonnet-20250219-v1:0": 3_000, "gemini-2.5-flash": 258,
          "google_genai:gemini-2.0-flash": 258, "gpt-4o": 3_000, "o3-mini": 3_000, None: 3_000}


# ------------------------------------------------------------------------------------------------ page counts
@pytest.mark.parametrize("form", ["plain", "compressed", "linearized", "no_count"])
@pytest.mark.parametrize("pages", [1, 7, 40])
def test_the_page_count_is_read_from_the_bytes(form, pages):
    data = pdf(pages, form=form)
    assert pdf_page_count(data) == pages
    assert pdf_page_count(b64(data)) == pages
    assert pdf_page_count("data:application/pdf;base64," + b64(data)) == pages
    wrapped = "\n".join(b64(data)[i:i + 76] for i in range(0, len(b64(data)), 76))  # MIME line-wrapped base64
    assert pdf_page_count(wrapped) == pages


@pytest.mark.parametrize("data", [b"", b"not a pdf at all", b"%PDF-1.4 no objects here", b"\x89PNG\r\n\x1a\n"])
def test_what_is_not_a_readable_pdf_has_no_page_count(data):
    assert pdf_page_count(data) is None
    assert pdf_page_count(b64(data)) is None


def test_a_broken_object_stream_does_not_break_counting():
    data = pdf(5, form="compressed").replace(b"stream\nx", b"stream\nZ")  # the zlib header corrupted
    assert pdf_page_count(data) is None


# ------------------------------------------------------------------------------------------------ per model
@pytest.mark.parametrize("model, per_page", list(MODELS.items()))
def test_a_pdf_costs_its_pages_times_its_providers_figure(model, per_page):
    data = b64(pdf(40))
    assert pdf_tokens_per_page(model) == per_page
    for counter in (TiktokenCounter(model), ApproximateCounter(model_name=model),
                    resolve_token_counter("approximate", model_name=model)):
        for block in pdf_blocks(data):
            assert block_cost(counter, block) == 40 * per_page, (model, block["type"])


def test_model_families():
    assert {m: model_family(m) for m in MODELS} == {
        "claude-sonnet-4-5": "anthropic", "anthropic:claude-3-5-haiku-latest": "anthropic",
        "us.anthropic.claude-3-7-sonnet-20250219-v1:0": "anthropic", "gemini-2.5-flash": "gemini",
        "google_genai:gemini-2.0-flash": "gemini", "gpt-4o": "openai", "o3-mini": "openai", None: "openai"}


def test_without_bytes_the_pages_come_from_metadata_else_one_page():
    counter = TiktokenCounter("claude-sonnet-4-5")
    by_url = {"type": "document", "source": {"type": "url", "url": "https://example.com/q3.pdf"}}
    assert block_cost(counter, by_url) == 3_000
    for block in ({**by_url, "pages": 12}, {"type": "file", "file_id": "file-1", "mime_type": "application/pdf",
                                            "extras": {"page_count": 12}},
                  {"type": "file", "url": "https://example.com/q3.pdf", "metadata": {"num_pages": 12}}):
        assert block_cost(counter, block) == 12 * 3_000, block


def test_a_gemini_media_image_costs_an_image_and_other_media_their_bounded_figure():
    counter = TiktokenCounter("gemini-2.5-flash")
    png = b64(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (512).to_bytes(4, "big") + (512).to_bytes(4, "big")
              + bytes(64))
    as_image = block_cost(counter, {"type": "image", "base64": png, "mime_type": "image/png"})
    assert block_cost(counter, {"type": "media", "mime_type": "image/png", "data": png}) == as_image
    assert block_cost(counter, {"type": "media", "mime_type": "video/mp4", "file_uri": "gs://b/v.mp4"}) == \
        FILE_BLOCK_TOKENS


def test_other_files_keep_their_bounded_figure():
    counter = TiktokenCounter("claude-sonnet-4-5")
    audio = b64(b"RIFF" + bytes(40_000))
    assert block_cost(counter, {"type": "audio", "base64": audio, "mime_type": "audio/wav"}) == FILE_BLOCK_TOKENS
    docx = {"type": "input_file", "filename": "notes.docx", "file_id": "file-2"}
    assert block_cost(counter, docx) == FILE_BLOCK_TOKENS


# ------------------------------------------------------------------------------------------------ the issue
def test_a_history_with_a_long_pdf_is_compacted_when_it_does_not_fit():
    """About 30k tokens of conversation and a 40-page PDF, sent to a Claude model with a 64k window: the PDF makes
    it about 150k tokens, so compaction runs (with the flat figure it looked like 31k and was sent as it was)."""
    msgs = [HumanMessage([{"type": "text", "text": "Summarize this report."},
                          {"type": "file", "base64": b64(pdf(40)), "mime_type": "application/pdf"}], id="h0"),
            AIMessage("The report covers " + "the quarterly figures and their drivers, " * 700, id="a0")]
    for n in range(1, 6):
        msgs += [HumanMessage(f"Question {n}: " + "what about the regional breakdown? " * 100, id=f"h{n}"),
                 AIMessage(f"Answer {n}: " + "the regions differ in growth and margin; " * 400, id=f"a{n}")]
    msgs.append(HumanMessage("And the outlook?", id="hl"))
    policy = CompactionPolicy(max_input_tokens=64_000, model_name="claude-sonnet-4-5", token_counter="approximate")
    counted = policy.counter.count_messages(msgs)
    assert counted > 40 * 3_000
    result = compact(msgs, policy)
    assert result.triggered and result.tokens_before == counted
