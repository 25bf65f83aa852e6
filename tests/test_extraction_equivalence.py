"""The fast extraction (`FactGuard._search` with `_NEEDS` and `_FAST`, lc_compaction/facts.py) finds exactly what the
plain algorithm finds: every pattern of `DEFAULT_PATTERNS` searched on the whole text, in order, a match kept when its
trimmed value overlaps no span an earlier one kept (frozen here as `reference_search`, the algorithm before issue 25's
speed-up, without its prefilters).

Checked three ways, on the shared traces' message texts (a sample, cut to a few thousand characters), the cases and
generated identifier-dense texts: the whole search, each `_FAST` expression against its pattern (the same spans and
groups, in order), and each `_NEEDS` test (true wherever its pattern matches)."""

from __future__ import annotations

import bisect
import random
import re
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lc_compaction.facts import (
    _FAST,
    _KEYS,
    _NEEDS,
    DEFAULT_PATTERNS,
    FactGuard,
    Identifier,
    _key_spans,
    _trim,
    message_text,
)
from lc_compaction.traces import load_traces
from tests.oracle.cases import load_cases
from tests.shared_data import traces_dir

TEXT_CHARS = 3_000
"""Characters of each trace message read (its start): the texts stay many and the test quick."""


def reference_search(guard: FactGuard, text: str) -> list[tuple[int, Identifier]]:
    """The search before the speed-up, frozen: every pattern of `guard.patterns` on the whole text (no prefilter)."""
    starts: list[int] = []
    ends: list[int] = []
    found: list[tuple[int, Identifier]] = []
    for kind, pattern in guard.patterns.items():
        for m in pattern.finditer(text):
            group = 1 if pattern.groups and m.group(1) is not None else 0
            start = m.start(group)
            value = _trim(m.group(group))
            end = start + len(value)
            k = bisect.bisect_left(starts, end)
            if not value.strip() or (k and ends[k - 1] > start):
                continue
            starts.insert(k, start)
            ends.insert(k, end)
            found.append((start, Identifier(value, kind)))
    found.sort(key=lambda x: x[0])
    return found


@lru_cache(maxsize=1)
def trace_texts() -> tuple[str, ...]:
    """A sample of the shared traces' message texts: every 3rd message of each file's first conversations."""
    out: list[str] = []
    for path in sorted(traces_dir().glob("*.jsonl")):
        messages = [m for trace in load_traces(path)[:12] for m in trace.messages]
        out.extend(message_text(m)[:TEXT_CHARS] for m in messages[::3])
    return tuple(t for t in out if t)


@lru_cache(maxsize=1)
def case_texts() -> tuple[str, ...]:
    return tuple(t for case in load_cases(None) for m in case.messages if (t := message_text(m)))


_PIECES = ["order", "ORDER ", "Ticket", "reservation ID ", "tranſaction", "SHA256:", "md5-", "İnvoice", "line 42",
           "Line 7", "def f(", "class C:", "x.py::test_a", "a.py:12", "src/pkg/mod_3.py:41:7", "::1", "fe80::1",
           "[2001:db8::1]:8080", "10.0.0.1:80", "256.1.1.1", "2024-05-01", "2024-05-27T10:00Z", "12/31/2024",
           "Jan 5, 2024", "5th September, 2024", "Sept. 3", "$12", "$1,000.50", "€5k", "12 EUR", "USD 5",
           "USD 1,000,000", "42 dollars", "TL-056CAD", "INV-2024EUR", "ValueError", "KeyboardInterrupt", "Warning",
           "pkg.mod", "np.where", "/usr/bin/x", "~/x", "./a", "../b/c", "C:\\dir\\f", "file.txt", "a/b.tar.gz",
           '"order_id": "W12345"', '"price": 55', '"total": 1.5', "id: AB12", "price: 65;", "#W2378156", "TL-BAAFFC",
           "RQ-FACADE", "YYYY-MM-DD", "NON-REFUNDABLE", "WH-220", "ZFA23B", "HAT084", "sofia_kim_7287",
           "gift_card_7480005", "build-1142", "abc1234def", "b0ff879", "0x1F2E",
           "3fa85f64-5717-4562-b3fc-2c963f66afa6", "a@b.co", "x.y+z@ex-1.org", "https://x.io/a(b)", "ftp://h/p.",
           "4421486", "1,234", "255.0", "12.345.678", " ", "  ", "\n", ", ", "; ", "-", "_", "/", ".", ":", ": ",
           "\"", "'", "#", "@", "(", ")", "[", "]", "K", "ſ", "ı", "日本", "٣", "x", "A", "7", "f", "Z9", "SKU-00001",
           "CAD 5", "5 CAD", "July 4", "Jul 4th, 2024", "4 July, 2024", "AUD", "INR 3",
           '{"order_id": "#W1000007", "status": "delivered", "total": 11.37, "sku": "SKU-00001"}',
           # the alternatives of the rewritten patterns (`_FAST`, `_NEEDS`): paths, addresses, keyed and named ids
           "C:\\dir\\f.txt", "d:\\x\\", "\\", "~/a/b", "../a/b", "./x", "..", "~", ".git/config", "a/b/c.txt",
           "pkg/mod.py", "setup.cfg", "x.tar.gz", "/a/b/", "//", "@scope/pkg.js", "+a/b.c", "-a.py", "a-b.json",
           "</tag>", "and/or", "1.2.3.4", "1.2.3.4:8080", "1.2.3.4.5", "01.2.3.4", "2001:db8:0:0:0:0:2:1",
           "::ffff:10.0.0.1", "fe80::", "1::", "a::b::c", "[::1]", "[fe80::1]:443", '"order_id": "X1"',
           '"ref":"ABC123"', '"Id" : "a-b-c"', "order_id: X1;", "Total: 12.5, ", "code: `Z9`", "Order #W123",
           "booking no. 4471", 'reservation ID "OBUT9V"', "confirmation is ZZ9Z", "ORDERS: AB-1234", "CASE 12345",
           "a1_b", "ab-c_d-", "x_1-", "os.path.join", "self.x.y_1", "a.b.", "deadbeef1", "0xG", "cafe-1234567"]
_ALPHABET = "AaBbCcDdEeFfXx0123456789-_#.,:;/\\@$€ \n\"'()[]{}+%~*`sTtl"


def _texts() -> st.SearchStrategy[str]:
    pieces = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)
    chars = st.text(alphabet=_ALPHABET, max_size=120)
    return st.lists(st.one_of(pieces, chars), min_size=1, max_size=4).map("".join)


def _matches(pattern: re.Pattern[str], text: str) -> list[tuple[tuple[int, int], tuple[str | None, ...]]]:
    return [(m.span(), m.groups()) for m in pattern.finditer(text)]


def _random_texts(n: int, seed: int = 25) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(_PIECES) if rng.random() < 0.5 else
                 "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 30))) for _ in range(rng.randint(1, 12))]
        out.append("".join(parts))
    return out


def _run_texts() -> list[str]:
    """Runs of every length up to past the patterns' bounds (20, 40, 64, 80, 128 characters), between the contexts
    the patterns look at: what a fast form's shifted bound (`{0,19}` for `{1,20}`) must get exactly right."""
    runs = ["A", "1", "f", "a", "A1", "1a", "Z-", "a_", "a.", "1,000", "12.", "x@", "a/"]
    sides = [("", ""), (" ", " "), ("#", ""), ("-", "-"), ("x.", ".py"), ("", "@ex.com"), ("", ":1"), ("SKU-", "Z"),
             ("0x", ""), ("", "-1"), ("", " USD"), ("$", "k"), ("", "1"), ("", ".b"), ("b_", "1"), ("", "_1"),
             ("/", "/a.py"), ("C:\\", "\\f"), ("~/", ".txt"), ("", "/b.c")]
    near = [n for b in (1, 8, 16, 20, 30, 40, 60, 64, 80, 128) for n in range(b - 2, b + 3) if n > 0]
    out = [before + run * (n // len(run) + 1) + after for run in runs for n in near for before, after in sides]
    # segmented tokens (`AB-12-CD`, `a_b_1`, `x.y.z`) of lengths near the bounds of their patterns
    rng = random.Random(20)
    sets = ["A", "ABZ19", "a", "az09", "1", "0f9a", "ABCDEF", "BCDFG", "YMDHS", "AEIOU", "a_Z"]
    lengths = [1, 2, 3, 4, 5, 6, 7, 8, 16, 19, 20, 21, 39, 40, 41, 60, 61, 62, 63, 64, 65, 79, 80, 81]
    for _ in range(2_000):
        joiner = rng.choice("-_.")
        token = joiner.join("".join(rng.choice(rng.choice(sets)) for _ in range(rng.choice(lengths)))
                            for _ in range(rng.randint(1, 9)))
        before, after = rng.choice(sides)
        out.append(before + token + after)
    # a slug, a code whose digit is its 60th to 90th character (the bounds of their lookaheads)
    for k in range(60, 90):
        out += ["a" * 40 + "_" + "a" * (k - 41) + "1", "A" * 20 + "-" + "A" * (k - 21) + "1",
                "A" * 39 + "1", "-".join(["ABCDEFGHIJ"] * 6)[:k] + "1"]
    return out


def test_the_guard_uses_the_fast_forms_of_the_built_in_patterns():
    guard = FactGuard()
    assert set(guard._fast) == set(_FAST) and set(guard._needs) == set(_NEEDS)
    assert set(_FAST) <= set(DEFAULT_PATTERNS) and set(_NEEDS) <= set(DEFAULT_PATTERNS)
    # a replaced pattern is searched as written, with no prefilter or fast form of the built-in one
    other = FactGuard(patterns={**DEFAULT_PATTERNS, "code": r"[A-Z]{3}\d"})
    assert "code" not in other._fast and "code" not in other._needs
    assert [i.value for i in other.extract("ABC1 ZFA23B")] == ["ABC1", "ZFA2"]


@pytest.mark.parametrize("source", ["traces", "cases", "random", "runs"])
def test_each_fast_form_matches_its_pattern(source: str):
    texts = {"traces": trace_texts, "cases": case_texts, "random": lambda: _random_texts(3_000),
             "runs": _run_texts}[source]()
    for kind, expr in _FAST.items():
        plain, fast = re.compile(DEFAULT_PATTERNS[kind]), re.compile(expr)
        for text in texts:
            assert _matches(fast, text) == _matches(plain, text), (kind, text[:200])
    if source == "runs":  # and the prefilters (on the other sources: `test_each_prefilter_holds_...`)
        for kind, need in _NEEDS.items():
            plain = re.compile(DEFAULT_PATTERNS[kind])
            assert all(need(text) or plain.search(text) is None for text in texts), kind


@pytest.mark.parametrize("source", ["traces", "cases", "random"])
def test_each_prefilter_holds_wherever_its_pattern_matches(source: str):
    texts = {"traces": trace_texts, "cases": case_texts, "random": lambda: _random_texts(3_000),
             "runs": _run_texts}[source]()
    for kind, need in _NEEDS.items():
        plain = re.compile(DEFAULT_PATTERNS[kind])
        for text in texts:
            assert need(text) or plain.search(text) is None, (kind, text[:200])


@pytest.mark.parametrize("source", ["traces", "cases"])
def test_the_search_finds_what_the_reference_finds(source: str):
    texts = trace_texts() if source == "traces" else case_texts()
    assert len(texts) > (500 if source == "traces" else 50)
    guard = FactGuard()
    for text in texts:
        assert guard._search(text) == reference_search(guard, text), text[:200]


def test_the_search_finds_what_the_reference_finds_on_dense_listings():
    """The shapes of `benchmarks/dense.py`, whole and in the chunks `FactGuard.first` reads."""
    from benchmarks.dense import coding, fuzzed, orders, records
    from lc_compaction.facts import _cut

    guard = FactGuard()
    for history in (orders(turns=2, per_page=100), records(), coding()[:6], fuzzed(1)):
        for m in history:
            text = message_text(m)
            assert guard._search(text) == reference_search(guard, text)
            at = 0
            while at < len(text):
                end = _cut(text, at)
                assert guard._search(text[at:end]) == reference_search(guard, text[at:end])
                at = end


@settings(max_examples=400, deadline=None)
@given(_texts())
def test_the_search_finds_what_the_reference_finds_on_generated_texts(text: str):
    guard = FactGuard()
    assert guard._search(text) == reference_search(guard, text)


@settings(max_examples=300, deadline=None)
@given(_texts())
def test_each_fast_form_and_prefilter_on_generated_texts(text: str):
    for kind, expr in _FAST.items():
        assert _matches(re.compile(expr), text) == _matches(re.compile(DEFAULT_PATTERNS[kind]), text), kind
    for kind, need in _NEEDS.items():
        assert need(text) or re.compile(DEFAULT_PATTERNS[kind]).search(text) is None, kind


_KEY_PIECES = ["\n", " ", "\t", "- ", "a", "key", "_x.y-", ":", ": ", "::", "\"", "'", '"k"', "1", ";", "<",
               '"price": 5']


def _reference_keys(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(1) or m.group(2)) for m in _KEYS.finditer(text)]


@pytest.mark.parametrize("source", ["traces", "cases", "random"])
def test_the_key_spans_are_those_of_the_keys_expression(source: str):
    texts = {"traces": trace_texts, "cases": case_texts, "random": lambda: _random_texts(3_000)}[source]()
    for text in texts:
        assert _key_spans(text) == _reference_keys(text), text[:200]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_KEY_PIECES), max_size=40).map("".join))
def test_the_key_spans_on_generated_texts(text: str):
    assert _key_spans(text) == _reference_keys(text)
