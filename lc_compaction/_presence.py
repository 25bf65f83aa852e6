"""Whether a text contains an identifier, for many identifiers at a time: the presence rule of the fact guard
(`facts.py`) and of every note that lists identifiers.

The rule: case-insensitive, and not inside a longer alphanumeric run (`123` is not in `1234`, `HAT08` is not in
`HAT084`); that is, where `(?<![A-Za-z0-9])VALUE(?![A-Za-z0-9])` with `re.IGNORECASE` finds it. A `Presence`
gives exactly the regular expression's answers (checked against it on random texts and on the shared traces:
`tests/test_presence.py`) while reading the text once, however many identifiers are asked about; compiling one
expression per identifier made a compaction of identifier-dense results take seconds.

This module depends on nothing else of the package: every rule that asks "is this identifier there?" sits above it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any


def _value(identifier: Any) -> str:
    """An identifier's text: a `str`, or an object with a `value` (`facts.Identifier`)."""
    return identifier if isinstance(identifier, str) else identifier.value


_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_FOLD = {**{c: c + 32 for c in range(ord("A"), ord("Z") + 1)},
         0x130: ord("i"), 0x131: ord("i"), 0x17F: ord("s"), 0x212A: ord("k")}
"""What `re.IGNORECASE` equates with an ASCII letter or digit: the upper-case letters, and the four non-ASCII
characters that Python's `re` matches with one (İ and ı with i, ſ with s, the Kelvin sign with k: found by testing
every code point against `[A-Za-z0-9]` with IGNORECASE). A text folded by this table has the same length, and an
ASCII identifier occurs in it exactly where the presence regex finds it in the original."""
_RUN = re.compile(r"[a-z0-9]+")


def folded(text: str) -> str:
    """`text` folded by `_FOLD` (same length): an ASCII word occurs in it where `re.IGNORECASE` finds it."""
    return text.lower() if text.isascii() else text.translate(_FOLD)

_WORDS_FROM = 2048
"""Texts of this many characters or more are first checked against the set of their words (alphanumeric runs,
collected at C speed once): an identifier with a run that is no word of the text is not in it, without a search.
Most queries of a long text are such misses (an old order id against a new listing)."""
_INDEX_FROM = 32_768
"""Texts shorter than this (characters) are always searched with `str.find`: below it, a find from where the last
query matched costs less than a query of the index (Python steps per place), measured on the queries of the
identifier-dense shapes of `benchmarks/dense.py` (results of 15,000 to 35,000 characters)."""
_INDEX_AFTER = 100
"""A longer text gets a word index once the finds have read more than this many times its length: a find reads a
text at C speed (a few GB/s), a word index costs a Python step per word (about six characters), so the index pays
only after about a hundred finds of the whole text (a few queries cost a find each, thousands cost one index)."""


@functools.lru_cache(maxsize=1024)
def _presence_re(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])", re.IGNORECASE)


class Presence:
    """Where a text contains identifiers, by the rule of `contains` (case-insensitive, not inside a longer
    alphanumeric run), with the text read once however many identifiers are asked about.

    An ASCII identifier's alphanumeric runs can only occur as whole runs of the text (the boundary rule), so the
    text's set of runs (lower-cased, `_FOLD`) answers most misses at once (a run of the identifier that is no run of
    the text), and the rest are searched with `str.find`; a text asked about very often is indexed by its runs'
    places, and a query then checks only the places where the identifier's rarest run occurs: a query costs what
    those places cost, not the text's length. An identifier with a
    non-ASCII character, or a line break, is searched with the regular expression itself (its case rules are
    Unicode's).

    `Presence(text)` indexes one text; `add(text)` appends a line to it (the text joined so far, a newline, then
    `text`), for a text that grows a line at a time (a progress note's lines, `progress.call_line`).
    """

    __slots__ = ("_raw", "_folded", "_sizes", "_index", "_indexed", "_read", "_joined", "_words", "_worded",
                 "_flat", "_hint")

    def __init__(self, text: str = ""):
        self._raw: list[str] = []
        self._folded: list[str] = []
        self._sizes = 0
        self._index: dict[str, list[tuple[int, int]]] | None = None
        self._indexed = 0
        self._read = 0
        self._joined: str | None = None
        self._words: set[str] = set()
        self._worded = 0
        self._flat: str | None = None  # the folded lines joined by newlines (a boundary, as between lines)
        self._hint = 0  # where the last find matched: queries in text order start there
        self.add(text) if text else None

    def add(self, text: str) -> None:
        """Append `text` as a new line."""
        self._raw.append(text)
        self._folded.append(folded(text))
        self._sizes += len(text) + 1
        self._joined = None
        self._flat = None

    def text(self) -> str:
        """The text indexed: the lines added, joined by newlines."""
        if self._joined is None:
            self._joined = "\n".join(self._raw)
        return self._joined

    def __contains__(self, identifier: Any) -> bool:
        value = identifier if type(identifier) is str else _value(identifier)
        if not value.isascii() or "\n" in value:
            return _presence_re(value).search(self.text()) is not None
        value = value.lower()
        if self._sizes >= _WORDS_FROM:
            if value.isalnum():  # one run: there exactly when it is a run of the text
                return value in self._word_set()
            if not self._word_set().issuperset(_RUN.findall(value)):  # a run of it is no word of the text
                return False
        return self._located(value)

    def _located(self, value: str) -> bool:
        """`__contains__` for the folded ASCII `value` (no line break) once the word set has not ruled it out: the
        word index's places, for a long text asked about very often, else a find."""
        if self._sizes >= _INDEX_FROM and self._read > _INDEX_AFTER * self._sizes:
            return next(self._places(value), None) is not None
        return self._find(value)

    def lacks(self, identifier: Any) -> bool:
        """`identifier not in self`, for a predicate asked about many identifiers that are mostly absent (what a
        note lists beyond what it shows): an ASCII identifier (no line break) is absent when one of its alphanumeric
        runs is no word of a long text (a set lookup each: what `__contains__` asks first, and the one step for a
        single run), or, in a short text, when its folded value is nowhere in the folded text (one `str.find` at C
        speed), before any other step."""
        value = identifier if type(identifier) is str else _value(identifier)
        if value.isascii() and "\n" not in value:
            low = value.lower()
            if self._sizes >= _WORDS_FROM:
                words = self._word_set()
                if low.isalnum():
                    return low not in words  # `__contains__`'s answer for one run
                if not words.issuperset(_RUN.findall(low)):
                    return True
                return not self._located(low)  # a find from where the last one matched, or the index
            flat = self._flat
            if flat is None:
                flat = self._flat = "\n".join(self._folded)
            if low not in flat:
                return True
        return not self.__contains__(identifier)

    def _find(self, value: str) -> bool:
        """Whether the folded ASCII `value` is in the text by the boundary rule, with `str.find` over the folded
        lines joined: from where the last query matched to the end, then from the start (identifiers asked in the
        order they appear in the text are each found where the one before was)."""
        flat = self._flat
        if flat is None:
            flat = self._flat = "\n".join(self._folded)
        n, size, hint = len(flat), len(value), self._hint
        for lo, hi in ((hint, n), (0, min(hint + size, n))):
            self._read += hi - lo
            p = flat.find(value, lo, hi)
            while p >= 0:
                end = p + size
                if (p == 0 or flat[p - 1] not in _ASCII_ALNUM) and (end == n or flat[end] not in _ASCII_ALNUM):
                    self._hint = p
                    return True
                p = flat.find(value, p + 1, hi)
        return False

    def _word_set(self) -> set[str]:
        """The runs of the text (folded), collected for the lines added since the last call."""
        words = self._words
        for c in range(self._worded, len(self._folded)):
            words.update(_RUN.findall(self._folded[c]))
        self._worded = len(self._folded)
        return words

    def spans(self, identifier: Any) -> list[tuple[int, int]]:
        """The (start, end) spans of the identifier in `text()`, left to right and not overlapping (what
        `re.finditer` gives)."""
        value = _value(identifier)
        if not value.isascii() or "\n" in value:
            return [m.span() for m in _presence_re(value).finditer(self.text())]
        offset = [0]
        for f in self._folded:
            offset.append(offset[-1] + len(f) + 1)
        places = sorted(offset[c] + p for c, p in self._places(value.lower()))
        out: list[tuple[int, int]] = []
        for p in places:
            if not out or p >= out[-1][1]:
                out.append((p, p + len(value)))
        return out

    def _places(self, value: str) -> Iterator[tuple[int, int]]:
        """(line, position) of each occurrence of the folded ASCII `value` that the boundary rule admits."""
        if self._sizes >= _INDEX_FROM and self._read > _INDEX_AFTER * self._sizes:
            runs = [(m.group(), m.start()) for m in _RUN.finditer(value)]
            if runs:
                yield from self._indexed_places(value, runs)
                return
        if self._sizes >= _WORDS_FROM:  # a run of the value that is no word of the text: not there at all
            if not self._word_set().issuperset(_RUN.findall(value)):
                return
        for c, line in enumerate(self._folded):
            self._read += len(line)
            p = line.find(value)
            while p >= 0:
                if self._admits(line, p, value):
                    yield c, p
                p = line.find(value, p + 1)

    def _indexed_places(self, value: str, runs: list[tuple[str, int]]) -> Iterator[tuple[int, int]]:
        """`_places` through the word index: only where the value's rarest run occurs."""
        index = self._ensure_index()
        counts = [len(index.get(r, ())) for r, _ in runs]
        k = min(range(len(runs)), key=counts.__getitem__)
        if counts[k] == 0:
            return
        at = runs[k][1]
        for c, q in index[runs[k][0]]:
            if self._admits(self._folded[c], q - at, value):
                yield c, q - at

    @staticmethod
    def _admits(line: str, p: int, value: str) -> bool:
        end = p + len(value)
        return (p >= 0 and line.startswith(value, p) and (p == 0 or line[p - 1] not in _ASCII_ALNUM)
                and (end == len(line) or line[end] not in _ASCII_ALNUM))

    def _ensure_index(self) -> dict[str, list[tuple[int, int]]]:
        if self._index is None:
            self._index = {}
        index = self._index
        for c in range(self._indexed, len(self._folded)):
            for m in _RUN.finditer(self._folded[c]):
                index.setdefault(m.group(), []).append((c, m.start()))
        self._indexed = len(self._folded)
        return index


@functools.lru_cache(maxsize=16)
def presence(text: str) -> Presence:
    """The `Presence` of `text`, kept for the last texts asked about (a loop of `contains(text, i)` over many
    identifiers reads `text` once)."""
    return Presence(text)


def occurrences(text: str, identifier: Any) -> list[tuple[int, int]]:
    """The (start, end) spans where `text` contains the identifier (the same rule as `contains`), left to right,
    not overlapping."""
    return presence(text).spans(identifier)


def contains(text: str, identifier: Any) -> bool:
    """Whether `text` contains the identifier: case-insensitive, not inside a longer alphanumeric run
    (`123` is not in `1234`, `HAT08` is not in `HAT084`). Linear in `text` once, then per identifier in the
    places its rarest word occurs (`Presence`)."""
    return identifier in presence(text)
