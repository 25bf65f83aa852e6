"""The presence rule (`lc_compaction._presence`): a `Presence` answers exactly what the regular expression
`(?<![A-Za-z0-9])VALUE(?![A-Za-z0-9])` with IGNORECASE answers (the rule the fact guard had, one compiled
expression per identifier), and the whole pipeline gives byte-identical output with either.

- generated texts and values over an alphabet of the characters that matter (letters of both cases, digits,
  separators, line breaks, the four non-ASCII characters `re` folds to ASCII letters, other non-ASCII), through
  `str.find` and through the word index, for one text and for a text grown a line at a time;
- the shared conversations (a fixed sample of every file) replayed at 4,000 and 8,000 tokens, and every shared
  case compacted under its own settings, once with `Presence` and once with the regular expression in its place:
  every sent history is the same, message for message (`message_to_dict`).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import message_to_dict

from lc_compaction import CompactionPolicy, compact
from lc_compaction import _memo, _presence
from lc_compaction._presence import Presence, contains, occurrences
from lc_compaction.replay import replay_conversation
from tests.case_policy import policy_for
from tests.oracle import load_traces, trace_files
from tests.oracle.cases import load_cases

ALPHABET = "aA1-_ .\n$#İıſKkSsIi9éΣσς/:"


def _regex(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])", re.IGNORECASE)


def _reference_spans(text: str, value: str) -> list[tuple[int, int]]:
    return [m.span() for m in _regex(value).finditer(text)]


@contextlib.contextmanager
def _indexing(mode: str) -> Iterator[None]:
    """Every text searched with `str.find` alone ("find"), after its set of words ("words"), or through the
    index of its words' places ("index"), from the first query."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_presence, "_WORDS_FROM", 0 if mode == "words" else 10**9)
        if mode == "index":
            mp.setattr(_presence, "_INDEX_FROM", 0)
            mp.setattr(_presence, "_INDEX_AFTER", -1)
        yield


texts = st.text(alphabet=ALPHABET, max_size=40)
values = st.text(alphabet=ALPHABET, min_size=1, max_size=5)


@settings(max_examples=600, deadline=None)
@given(text=texts, value=values, indexed=st.sampled_from(["find", "words", "index"]))
def test_presence_answers_what_the_regular_expression_answers(text, value, indexed) -> None:
    """Spans and membership equal the regular expression's, with `str.find`, the word set and the word index."""
    with _indexing(indexed):
        presence = Presence(text)
        expected = _reference_spans(text, value)
        assert presence.spans(value) == expected
        assert (value in presence) == bool(expected)
        assert Presence(text).lacks(value) == (not expected)  # its fast path first, on a fresh one
        assert presence.lacks(value) == (not expected)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(texts, min_size=1, max_size=5), value=values, indexed=st.sampled_from(["find", "words", "index"]))
def test_a_presence_grown_a_line_at_a_time_is_that_of_the_joined_text(lines, value, indexed) -> None:
    """`add` appends a line: the answers are those for the lines joined by newlines, a value across a line break
    included."""
    with _indexing(indexed):
        presence = Presence()
        for line in lines:
            presence.add(line)
        joined = "\n".join(lines)
        assert presence.text() == joined
        assert presence.spans(value) == _reference_spans(joined, value)
        assert (value in presence) == bool(_reference_spans(joined, value))
        assert presence.lacks(value) == (not _reference_spans(joined, value))


def test_the_word_index_is_built_only_when_it_pays() -> None:
    """A few queries of a long text read it with `str.find` (no index); thousands build the index once and give
    the same answers."""
    text = " ".join(f"ORD-{k:05d} item_{k}" for k in range(3_000))
    presence = Presence(text)
    assert "ORD-00042" in presence and "ORD-99999" not in presence
    assert presence._index is None and "99999" not in presence._words  # the miss was answered by the word set
    for k in range(0, 3_000, 3):
        assert f"ord-{k:05d}" in presence
    assert presence._index is not None
    assert "item_2999" in presence and "item_3000" not in presence and "ORD-0004" not in presence


def test_contains_and_occurrences_keep_the_boundary_rule() -> None:
    """The module functions: case-insensitive, never inside a longer alphanumeric run."""
    assert contains("order #W123 and HAT084", "hat084")
    assert not contains("HAT0845", "HAT084")
    assert not contains("1234", "123")
    assert occurrences("a-a-a", "a-a") == [(0, 3)]
    assert occurrences("x İd y", "id") == [(2, 4)]  # İ is folded to i by `re`, and so here


# ------------------------------------------------------------------------------------------ the whole pipeline
def _with_reference_presence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the regular expression in place of `Presence`'s answers (the rule as it was)."""
    monkeypatch.setattr(Presence, "__contains__", lambda self, i: bool(_regex(_presence._value(i)).search(self.text())))
    monkeypatch.setattr(Presence, "spans", lambda self, i: _reference_spans(self.text(), _presence._value(i)))
    monkeypatch.setattr(Presence, "lacks", lambda self, i: not _regex(_presence._value(i)).search(self.text()))
    _presence.presence.cache_clear()
    _memo.clear()  # nothing remembered of the run with `Presence` (the notes are made again)


@functools.cache
def _sample() -> list[tuple[str, list]]:
    """Per trace file, its longest conversation and its first two (a fixed choice)."""
    out = []
    for path in trace_files():
        convs = load_traces([path])
        chosen = {c for c, _ in sorted(convs, key=lambda c: -len(c[1]))[:1]} | {c for c, _ in convs[:2]}
        out += [(c, m) for c, m in convs if c in chosen]
    return out


def _sent(messages, window: int) -> list[list[dict]]:
    sent: list[list[dict]] = []
    replay_conversation(messages, CompactionPolicy(max_input_tokens=window),
                        on_call=lambda record, history, result: sent.append(
                            [message_to_dict(m) for m in result.messages]))
    return sent


@pytest.mark.slow
@pytest.mark.parametrize("window", [4_000, 8_000])
def test_replays_are_byte_identical_with_the_reference_presence(window, monkeypatch) -> None:
    """The shared conversations (sample) send the same histories with `Presence` as with the regular
    expression."""
    ours = {conv: _sent(messages, window) for conv, messages in _sample()}
    _with_reference_presence(monkeypatch)
    for conv, messages in _sample():
        assert _sent(messages, window) == ours[conv], conv


def test_the_cases_compact_byte_identically_with_the_reference_presence(monkeypatch) -> None:
    """Every shared case, compacted under its own settings (and at half its budget), gives the same history with
    `Presence` as with the regular expression."""
    def outputs() -> dict[str, list]:
        out = {}
        for case in load_cases(modes=None):
            for scale in (1.0, 0.5):
                settings = dict(case.settings)
                if scale != 1.0 and "max_tokens" in settings:
                    settings["max_tokens"] = max(1, int(settings["max_tokens"] * scale))
                policy = policy_for(settings)
                messages = case.fresh_messages()
                for i, m in enumerate(messages):  # fixed ids: compaction would give the missing ones random ones
                    m.id = m.id or f"{case.id}:{i}"
                result = compact(messages, policy, repair=True)
                out[f"{case.id}@{scale}"] = [message_to_dict(m) for m in result.messages]
        return out

    ours = outputs()
    _with_reference_presence(monkeypatch)
    assert outputs() == ours
