"""The last resort (shorten.py): content blocks keep their structure, text is cut before media are removed,
and the marker and the result say what went."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai.chat_models.base import _convert_message_to_dict

from lc_compaction import CompactionPolicy, TruncateToolResults, compact
from lc_compaction.facts import LISTED_IDENTIFIER_CHARS, FactGuard, identifiers_beyond
from lc_compaction.markers import (ARGUMENT_CUT_MARKER, CUT_IDENTIFIERS, ITEMS_CUT_KEY, MARK_KEY, cut_listing,
                                   is_shortened)
from lc_compaction.shorten import MIN_ARGUMENT_CHARS_TO_CUT, cut_arguments, shorten, text_length
from lc_compaction.structure import check_invariants
from tests.oracle.generators import JSON_VALUES, texts


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


# ------------------------------------------------------------------------------------------------ tool-call arguments
# (issue 12, item 6): when nothing else fits, the last resort cuts tool-call arguments too; they stay a JSON object
# that ChatOpenAI sends as it sends any call, and the cut is marked.

CODE = "def handler(event):\n    return {'status': 200, 'body': event}\n" * 2500  # about 40,000 tokens


def write_call(args: dict, *, text: str = "Writing the file.", blocks: bool = False) -> AIMessage:
    calls = [{"name": "write_file", "args": args, "id": "toolu_1", "type": "tool_call"}]
    content: object = text
    if blocks:  # Anthropic's form: the call repeated as a tool_use block
        content = [{"type": "text", "text": text}, {"type": "tool_use", "id": "toolu_1", "name": "write_file",
                                                     "input": args}]
    return AIMessage(content, id="a", tool_calls=calls)


def loop(ai: AIMessage) -> list:
    return [SystemMessage("You write code.", id="s"), HumanMessage("write the handler", id="h"), ai,
            ToolMessage("written", tool_call_id="toolu_1", id="t")]


def sent_arguments(message: AIMessage) -> list:
    """The arguments as ChatOpenAI puts them on the wire, parsed back."""
    return [json.loads(c["function"]["arguments"]) for c in _convert_message_to_dict(message)["tool_calls"]]


@pytest.mark.parametrize("blocks", [False, True])
def test_a_call_whose_arguments_exceed_the_window_is_cut_and_still_sent(blocks):
    ai = write_call({"path": "src/handler.py", "content": CODE, "overwrite": True}, blocks=blocks)
    policy = CompactionPolicy(max_input_tokens=4_000)
    result = compact(loop(ai), policy)
    assert result.fits and result.tokens_after <= policy.budget_tokens()
    out = result.messages[2]
    assert out.id == "a" and [tc["id"] for tc in out.tool_calls] == ["toolu_1"]
    args = out.tool_calls[0]["args"]
    assert isinstance(args, dict) and list(args) == ["path", "content", "overwrite"]
    assert args["path"] == "src/handler.py" and args["overwrite"] is True  # what makes the call meaningful stays
    assert CODE.startswith(args["content"].split("[... cut by lc-compaction")[0])
    assert args["content"].endswith(ARGUMENT_CUT_MARKER.format(removed=len(CODE) - args["content"].index("[...")))
    assert sent_arguments(out) == [args]
    assert out.response_metadata[MARK_KEY]["cut_tool_calls"] == ["toolu_1"]
    assert "tool-call arguments cut" in result.actions[-1].detail
    if blocks:
        assert out.content[1]["input"] == args  # ChatAnthropic sends the block: cut the same way
    assert check_invariants(result.messages) == []


def test_arguments_are_cut_only_when_the_text_alone_cannot_make_it_fit():
    big_text = "Let me explain the plan in detail. " * 2000
    ai = write_call({"path": "a.py", "content": "x = 1\n" * 200}, text=big_text)
    result = compact(loop(ai), CompactionPolicy(max_input_tokens=3_000))
    out = result.messages[2]
    assert result.fits and out.tool_calls == ai.tool_calls  # the text went first, and sufficed
    assert len(out.text) < len(big_text)


def test_an_invalid_calls_raw_arguments_are_cut_as_a_string():
    raw = '{"path": "big.txt", "content": "' + "y" * 60_000
    ai = AIMessage("", id="a", invalid_tool_calls=[{"name": "write_file", "args": raw, "id": "call_1",
                                                    "error": "truncated", "type": "invalid_tool_call"}])
    history = [SystemMessage("s", id="s"), HumanMessage("go", id="h"), ai,
               ToolMessage("could not be executed", tool_call_id="call_1", id="t", status="error")]
    result = compact(history, CompactionPolicy(max_input_tokens=4_000))
    assert result.fits
    cut = result.messages[2].invalid_tool_calls[0]["args"]
    assert isinstance(cut, str) and raw.startswith(cut.split("[... cut")[0]) and "cut by lc-compaction" in cut
    assert _convert_message_to_dict(result.messages[2])["tool_calls"][0]["function"]["arguments"] == cut


def test_long_lists_and_objects_below_the_top_level_keep_their_first_items():
    args = {"rows": [{"id": i, "name": f"row {i}"} for i in range(1000)], "mapping": {f"k{i}": i for i in range(500)},
            "short": "kept", "n": 7}
    cut, removed = cut_arguments(args, 0.1)
    assert list(cut) == list(args) and cut["short"] == "kept" and cut["n"] == 7
    assert cut["rows"][:100] == args["rows"][:100] and "900 more items removed" in cut["rows"][-1]
    assert ITEMS_CUT_KEY in cut["mapping"] and len(cut["mapping"]) == 51
    assert removed > 0 and len(json.dumps(cut)) < len(json.dumps(args)) // 5


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=JSON_VALUES, body=texts(min_size=0, max_size=30_000), fraction=st.floats(0, 1),
       items=st.integers(0, 2_000))
def test_cut_arguments_stay_a_json_object_with_every_top_level_key(value, body, fraction, items):
    args = {"path": "file.txt", "body": body, "value": value, "many": list(range(items))}
    cut, removed = cut_arguments(args, fraction)
    assert isinstance(cut, dict) and list(cut) == list(args)
    assert json.loads(json.dumps(cut)) == cut  # valid JSON
    assert cut["path"] == "file.txt"
    size, cut_size = len(json.dumps(args, ensure_ascii=False)), len(json.dumps(cut, ensure_ascii=False))
    if removed:
        assert "cut by lc-compaction" in json.dumps(cut, ensure_ascii=False) and cut_size < size
    else:
        assert cut == args
    if len(body) <= MIN_ARGUMENT_CHARS_TO_CUT:
        assert cut["body"] == body


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(size=st.integers(5_000, 120_000), window=st.integers(1_500, 8_000), blocks=st.booleans(),
       counter=st.sampled_from(["approximate", "exact"]))
def test_a_single_oversized_call_always_fits_once_cut(size, window, blocks, counter):
    ai = write_call({"path": "out/data.json", "content": "z1 " * (size // 3), "lines": list(range(size // 50))},
                    blocks=blocks)
    policy = CompactionPolicy(max_input_tokens=window, token_counter=counter)
    result = compact(loop(ai), policy)
    assert result.fits and result.tokens_after <= policy.budget_tokens()
    out = result.messages[2]
    assert sent_arguments(out) == [out.tool_calls[0]["args"]]
    assert check_invariants(result.messages) == []


def _listing_history(rows: int) -> tuple[list, list[str]]:
    """A request, a `search_flights` call and its JSON result of `rows` flights (distinct flight numbers, the
    later ones far past any cut of a small window); the flight numbers, in order."""
    flights = [f"HAT{100 + k * 3}" for k in range(rows)]
    listing = json.dumps([{"flight_number": f, "origin": "ATL", "destination": "PHL", "status": "available",
                           "prices": {"economy": 100 + k}} for k, f in enumerate(flights)])
    history = [SystemMessage("You book flights.", id="sys"), HumanMessage("Find me a flight to PHL", id="h0"),
               AIMessage("", id="a0", tool_calls=[{"name": "search_flights", "args": {"to": "PHL"}, "id": "c0",
                                                   "type": "tool_call"}]),
               ToolMessage(listing, tool_call_id="c0", id="t0")]
    return history, flights


def test_a_tool_result_cut_to_fit_lists_the_identifiers_of_what_it_removed():
    """The latest result, too large for the window, is cut by the last resort: the flight numbers its kept text
    lost are listed in the cut marker (fenced, attributed to the tool), within the bound and the budget."""
    history, flights = _listing_history(120)
    policy = CompactionPolicy(max_input_tokens=2_000)
    result = compact(history, policy)
    assert result.fits
    out = next(m for m in result.messages if m.id == "t0")
    assert is_shortened(out)
    kept, marker = out.content.split("\n[... cut by lc-compaction", 1)
    gone = [f for f in flights if f not in kept]
    assert gone and CUT_IDENTIFIERS in marker
    listed = cut_listing(out.content)
    assert listed and marker.count("<untrusted_tool_data>search_flights: ") == 1
    named = [f for f in gone if f in listed.split("; ")]
    assert named == gone[:len(named)] and len(named) >= 5  # the first ones removed, in order
    assert len(listed) <= LISTED_IDENTIFIER_CHARS


def test_a_cut_results_listed_identifiers_survive_its_later_truncation():
    """Once the cut result is old, truncation replaces it with a note: the identifiers the cut marker listed are
    read as the result's own (`markers.cut_listing`), not lost with the marker, and the note keeps them."""
    history, flights = _listing_history(120)
    guard = FactGuard()
    cut = shorten(history[-1], 150,
                  beyond=lambda text, kept: identifiers_beyond(guard, text, kept, "search_flights", 300))
    kept = cut.content.split("\n[... cut by")[0]
    listed = [f for f in cut_listing(cut.content).split("; ") if f in flights and f not in kept]
    assert listed
    note = TruncateToolResults().note(cut)
    assert listed[0] in note and "cut by" not in note.split("identifiers beyond the preview")[1]


def test_a_cut_with_offload_lists_its_identifiers_before_the_recall_hint():
    """With a recall key the marker lists the identifiers of what it cut, then says how to read the original back,
    as a truncation note does (issue 20, class 12: offload on keeps what offload off keeps; a new user's trial found
    a result cut with offload on listing none of its rare ids, and a drop marker later reading none from it)."""
    history, _ = _listing_history(120)
    cut = shorten(history[-1], 200, recall="k1", beyond=lambda text, kept: "<untrusted_tool_data>t: X</...>")
    assert CUT_IDENTIFIERS in cut.content and "recall_tool_result" in cut.content
    assert cut.content.index(CUT_IDENTIFIERS) < cut.content.index("recall_tool_result")
    assert CUT_IDENTIFIERS in shorten(history[-1], 200, beyond=lambda text, kept: "X").content
