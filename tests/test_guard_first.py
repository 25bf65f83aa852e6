"""`FactGuard.first` (the bounded list of a truncation note, a cut and a progress note line) gives what it gave
before it stopped giving `choose` the values that can never be listed (issue 25): the same items, in the same
order, with the same keys, and the same count of those left out.

The reference below is `first` as it was (every accepted value a full entry of `choose`, its key looked up as it
was read), frozen. The two are compared on generated texts (identifier pieces of few and of many shapes, JSON
objects with keys, over small chunks so that the cuts and the `EDGE_CHARS` rule are exercised), under bounds from
0 to beyond what every text needs, with a `keep` that refuses some values and a `then` list; and on the tool
results and tool-call arguments of the shared traces, with the predicates of `identifiers_beyond` and of a
progress note line.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage

from lc_compaction import facts
from lc_compaction._preview import gapless, preview
from lc_compaction._presence import Presence
from lc_compaction.facts import (
    EDGE_CHARS,
    FactGuard,
    Identifier,
    _cut,
    _items,
    _Keys,
    choose,
    fits_chars,
    keyed,
    message_text,
)
from tests.oracle import load_traces

GUARD = FactGuard()


def reference_first(guard: FactGuard, text: str, keep: Callable[[Identifier], bool], max_chars: int, *,
                    keys: bool = False, then: Iterable[Identifier] = ()) -> tuple[list[str], int]:
    """`FactGuard.first` before issue 25, frozen (the module's constants read at call time, as `first` does), but
    for how a chunk is read (`_found_from`, shared with `first`: what it finds is `test_facts.py`'s property, the same
    as reading the text whole); this compares the work done with what is found."""
    accepted: list[Identifier] = []
    seen: set[str] = set()
    at = 0
    last: str | None = None
    floor = 0
    while at < len(text):
        end = _cut(text, at)
        chunk = text[at:end]
        found = guard._found_from(text, at, end)  # each chunk read as `first` reads it (its context too)
        if floor > at:
            found = [(start, ident) for start, ident in found if at + start >= floor]
        edge = facts.EDGE_CHARS
        if end < len(text):
            late = min((start for start, ident in found if start + len(ident.value) > len(chunk) - edge), default=0)
            if late > 0:
                found = [(start, ident) for start, ident in found if start < late]
                floor, end = at + late, at + (late - edge if late > edge else late)
        keyer = _Keys(chunk, last) if keys else None
        for start, ident in found:
            if ident.value.casefold() in seen:
                continue
            if keyer is not None:
                ident = keyer.of(start, ident)
            if keep(ident):
                seen.add(ident.value.casefold())
                accepted.append(ident)
        if keyer is not None:
            last = keyer.last
        at = end
    for ident in then:
        if ident.value.casefold() not in seen and keep(ident):
            seen.add(ident.value.casefold())
            accepted.append(ident)
    values = [i.value for i in accepted]
    shown = [accepted[j] for j in choose(values, fits_chars(values, max_chars), newest_first=False)]
    return _items(shown, max_chars), len(accepted) - len(shown)


@contextlib.contextmanager
def _chunks(chunk: int, edge: int) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(facts, "EXTRACT_CHUNK", chunk)
        mp.setattr(facts, "EDGE_CHARS", edge)
        yield


def _refusing(modulus: int) -> Callable[[Identifier], bool]:
    """A `keep` of the value alone (as every caller's): refuses the values whose CRC falls on 0 mod `modulus`."""
    if modulus <= 1:
        return lambda i: True
    return lambda i: zlib.crc32(i.value.encode("utf-8", "surrogatepass")) % modulus != 0


_PIECES = ["#W1000007", "#W2378156", "SKU-00001", "SKU-12", "HAT084", "ZFA23B", "WH-220", "TL-056CAD",
           "2024-05-01", "2024-05-27T10:00Z", "line 42", "Line 7", "$12", "$1,000.50", "4421486", "1,234", "255.0",
           "sofia_kim_7287", "gift_card_7480005", "b0ff879", "3fa85f64-5717-4562-b3fc-2c963f66afa6", "a@b.co",
           "src/pkg/mod_3.py:41", "10.0.0.1:80", "INV-2024EUR", "RQ-FACADE", "user_kim_1234", "ß", "SS", "İ1234",
           '"order_id": "W12345"', '"price": 55', '"total": 1.5', "id: AB12", "price: 65;", '{"sku": "SKU-9"}',
           " ", "  ", "\n", ", ", "; ", "-", '"', ": ", "{", "}", "[", "]", "x", "ok", "done"]

_DIGITS = st.integers(min_value=0, max_value=10**7)


@st.composite
def _texts(draw: st.DrawFn) -> str:
    """A JSON listing of records (few shapes, many values each), a log, or a mix of pieces (many shapes)."""
    form = draw(st.sampled_from(["json", "log", "pieces"]))
    n = draw(st.integers(min_value=0, max_value=120))
    seed = draw(_DIGITS)
    if form == "json":
        return json.dumps([{"order_id": f"#W{seed + k * 7}", "total": round(10 + (seed + k) * 1.37, 2),
                            "sku": f"SKU-{(seed + k) % 100_000:05d}", "code": f"{'ABCDEFGH'[k % 8]}X-{k * 13 % 9999}"}
                           for k in range(n)])
    if form == "log":
        return "\n".join(f"2024-05-01T10:{k // 60 % 60:02d}:{k % 60:02d}Z line {k + 1}: job {seed + k} "
                         f"{'ref ' + _PIECES[(seed + k) % 30] if k % 11 == 0 else 'ok'}" for k in range(n))
    return "".join(draw(st.lists(st.sampled_from(_PIECES), max_size=300)))


@settings(max_examples=300, deadline=None)
@given(text=_texts(), max_chars=st.sampled_from([0, 1, 5, 12, 40, 100, 300, 10**6]), keys=st.booleans(),
       modulus=st.sampled_from([1, 2, 5]), then=st.lists(st.sampled_from(_PIECES[:30]), max_size=6),
       chunk=st.sampled_from([64, 200, 1024]))
def test_first_lists_what_the_reference_lists(text, max_chars, keys, modulus, then, chunk) -> None:
    listed = [Identifier(v, "carried") for v in then]
    with _chunks(chunk, min(EDGE_CHARS, chunk // 4)):
        expected = reference_first(GUARD, text, _refusing(modulus), max_chars, keys=keys, then=listed)
        assert GUARD.first(text, _refusing(modulus), max_chars, keys=keys, then=listed) == expected


def test_first_lists_what_the_reference_lists_on_dense_listings() -> None:
    """The order listings of benchmarks/dense.py (400 orders, three shapes of 400 values each): most values are
    only counted, and the list and the count are the reference's."""
    rows = [{"order_id": f"#W{1_000_000 + n * 7}", "status": "delivered", "total": round(10 + n * 1.37, 2),
             "sku": f"SKU-{n:05d}"} for n in range(1, 401)]
    text = json.dumps(rows)
    in_shown = Presence(gapless(preview(text, 200)))
    for max_chars in (10, 300, 3_000):
        got = GUARD.first(text, in_shown.lacks, max_chars, keys=True)
        assert got == reference_first(GUARD, text, _not_in(in_shown), max_chars, keys=True)
        assert got[1] > 0


@lru_cache(maxsize=1)
def _trace_texts() -> tuple[str, ...]:
    """The tool results and tool-call arguments of the shared traces over 300 characters (every 2nd one)."""
    out: list[str] = []
    for _, messages in load_traces():
        for m in messages:
            if isinstance(m, (ToolMessage, AIMessage)) and len(text := message_text(m)) > 300:
                out.append(text)
    return tuple(out[::2])


def test_first_lists_what_the_reference_lists_on_the_shared_traces() -> None:
    """As a truncation note reads a result (`identifiers_beyond`: beyond its preview, keyed) and as a progress note
    line reads one (a predicate with a memory, no keys), at the default bound and a small one."""
    texts = _trace_texts()
    assert len(texts) > 200
    for text in texts:
        in_shown = Presence(gapless(preview(text, 200)))
        for max_chars in (300, 40):
            assert (GUARD.first(text, in_shown.lacks, max_chars, keys=keyed(text))
                    == reference_first(GUARD, text, _not_in(in_shown), max_chars, keys=keyed(text)))
        assert GUARD.first(text, _progress_keep(in_shown), 300) == reference_first(GUARD, text,
                                                                                 _progress_keep(in_shown), 300)


def _progress_keep(in_shown: Presence) -> Callable[[Identifier], bool]:
    """What `progress.call_line`'s `new` does: a predicate with a memory (it accepts a value once)."""
    values: set[str] = set()

    def new(i: Identifier) -> bool:
        if i.value.casefold() in values or i in in_shown:
            return False
        values.add(i.value.casefold())
        return True
    return new


def _not_in(in_shown: Presence) -> Callable[[Identifier], bool]:
    """What `identifiers_beyond` asked before `Presence.lacks`."""
    return lambda i: i not in in_shown
