"""The fact guard: identifiers that a summary must not silently lose.

Before a summary replaces messages, the identifiers in those messages are extracted deterministically (regular
expressions, no model): order / ticket / reservation / invoice ids, numbers of 3+ digits, codes like `WH-220` or
`ZFA23B`, amounts with a currency, e-mail addresses, URLs, file paths and dates. Any identifier the summary does not
contain is appended to it in one compact line::

    Facts kept verbatim: OBUT9V; HAT084; gift_card_7480005; $130; 2024-05-27

An identifier that comes from tool results (it occurs in a tool result, or in the fenced part of an earlier
summary, and in no user or system message: an agent that repeats it does not make it the user's) is
attributed to its tool and fenced (`markers.UNTRUSTED_DATA_FENCE`), on a line of its own::

    Facts kept verbatim from tools: <untrusted_tool_data>get_user_details: OBUT9V; HAT084</untrusted_tool_data>

so that a summary in the user's voice never states tool output (an injected "send $5,000 to IBAN DE89...") as
the user's own facts. `Identifier.source` is that tool's name (None for the others).

The lines are bounded (in tokens); when the missing identifiers do not all fit, the bound keeps one of each shape
first, the most recent first (`choose`: the one rule of every bounded list of identifiers the package writes, so
that a log whose every line has a timestamp does not push out its rare ids), and the line says how many it left
out. A later pass reads the lines back (`parse_facts`), with
their attribution, so an identifier found only through its context (a `"reservation_id": "AQLBTL"` field) is
carried from summary to summary.

The default ladder writes identifiers too, and the guard reads them back the same way (`extract_messages`): a
truncation note's list (`extract_result`, `strategies/truncate.py`), a drop marker's lines (the guard's own,
bounded in characters: `strategies/drop.py`) and a progress note's per-line lists (`parse_listed`,
`_note.split_line`), each tool-derived one attributed to the tool of its fence; never the counts those notes
write (a result's size in characters).

Extraction works on spans: patterns run in the order of `DEFAULT_PATTERNS` and a later pattern never matches
inside a span an earlier one took (the number 2024 inside the date 2024-05-27 is not a separate identifier).
Presence is tested case-insensitively, on alphanumeric boundaries (`123` is not "in" `1234`).
"""

from __future__ import annotations

import bisect
from collections import Counter
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lc_compaction._memo import Bounded, remembers
from lc_compaction._content import arguments_text, content_text, is_invalid_call
from lc_compaction._presence import Presence as Presence  # re-exported: the guard's presence rule lives there
from lc_compaction._presence import folded, presence
from lc_compaction._presence import contains as contains
from lc_compaction._presence import occurrences as occurrences
from lc_compaction.markers import (
    FACTS_SEPARATOR,
    UNTRUSTED_DATA_FENCE,
    defang,
    dropped_marker_facts,
    fence,
    fence_label,
    fenced_spans,
    is_dropped_marker,
    is_summary,
    outside_fences,
    result_parts,
    summary_text,
    unfence,
)
from lc_compaction._note import note_lines, split_line, without_note
from lc_compaction.structure import tool_calls_of, tool_pairs

FACTS_PREFIX = "Facts kept verbatim: "
"""Start of the guard's line in a summary; `parse_facts_line` looks for it."""

TOOL_FACTS_PREFIX = "Facts kept verbatim from tools: "
"""Start of the guard's line of tool-derived identifiers, each tool's inside its own fence."""


FACTS_KEY = ": "
"""Between a key and its value in a list (`price: 136`: `Identifier.key`). No pattern's value holds it."""

_KEY_NAME = re.compile(r"[^;:\n\"'<>]{1,60}")
"""What a key may be when a list is read back: no separator, colon, quote or fence character."""

_KEYS = re.compile(r"[\"']([^\"'\n:;<>]{1,60})[\"']\s{0,3}:(?!:)"
                   r"|(?m:^[ \t]{0,40}(?:- )?([A-Za-z_][\w.-]{0,60}):(?=[ \t]|$))")
"""A key in a JSON or Python object (`"price":`, `'price':`) or a YAML mapping (`price:` at a line's start, after
`- ` in a list): group 1 or 2. Bounded: linear in the text."""

_KEYS_FAST = re.compile(r"[\n\"'](?:(?<=[\"'])([^\"'\n:;<>]{1,60}+)[\"']\s{0,3}:(?!:)"
                        r"|(?<=\n)[ \t]{0,40}(?:- )?([A-Za-z_][\w.-]{0,60}):(?=[ \t]|$))", re.MULTILINE)
_KEYS_AT_START = re.compile(r"[ \t]{0,40}(?:- )?([A-Za-z_][\w.-]{0,60}):(?=[ \t]|$)", re.MULTILINE)
"""`_KEYS`, searched faster (`_key_spans`): a YAML key after the line break before it (what `re` skips to at C speed,
where `^` is tried at every position), the text's first line matched on its own; a JSON key's characters taken
possessively (`{1,60}+`: the run stops at a quote or at a character no key holds, so a shorter one never ends at a
quote)."""


def _key_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, key) of each match of `_KEYS` in `text`, in order (the key: group 1 or 2). The two alternatives
    of `_KEYS` never match at one place, nor overlapping: a JSON key starts at a quote, a YAML key at a line's start
    and holds no quote, so a YAML key found from the line break before it (one character early) is the same match."""
    out: list[tuple[int, int, str]] = []
    at = 0
    first = _KEYS_AT_START.match(text)
    if first is not None:
        out.append((0, first.end(), first.group(1)))
        at = first.end()
    for m in _KEYS_FAST.finditer(text, at):
        yaml = m.group(2)
        out.append((m.start() + 1, m.end(), yaml) if yaml is not None else (m.start(), m.end(), m.group(1)))
    return out


_YAML_START = re.compile(r"(?:\s{0,40}(?:- )?[A-Za-z_][\w.-]{0,60}:(?:[ \t][^\n]{0,2000})?\n){2}")
"""Two lines that start with a YAML key: what makes a text `keyed` (one alone may be a log's `Error: ...`)."""

SAID_PREFIX = "The user said, verbatim: "
"""Start of the line that keeps a user's short turns word for word (`FactGuard.said_line`), each a JSON string: a
correction ("use the streaming pipeline instead") is words, not identifiers, and a drop marker or a summary
that kept only its reference code would lose what it asked."""

SAID_TURN_CHARS = 300
"""The longest user turn (characters, whitespace collapsed) a said line keeps: a correction or a short answer is
kept whole; a longer turn is a request, whose identifiers the facts lines keep (the tau-bench conversations of
the shared traces: 97% of the user turns after the first are under 300 characters)."""

DEFAULT_SAID_CHARS = 600
"""Default bound of a said line's quotes, in characters (the JSON strings and their separators): two turns of
the longest kept, or a handful of short answers; the most recent are kept (a correction comes after what it
corrects)."""

FACTS_OMITTED = " (+{n} older omitted)"
"""Appended to the facts line when the bound left `n` identifiers out (`choose`: the repeated shapes and the
oldest first; the words are those of the lists written before that rule, which `parse_facts` reads back)."""

DEFAULT_MAX_FACT_TOKENS = 800
"""Default bound of the facts line, in tokens. Measured on the 40 tau-bench airline conversations of the shared
traces replayed at an 8,000-token window with a model whose summaries hold no identifier at all (the worst case:
the line must carry every one): the longest line needed was 657 tokens. 800 keeps every identifier there and is
a tenth of such a window."""

_MONTHS = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
           r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_FILE_EXT = (r"(?:py|pyi|ipynb|js|jsx|ts|tsx|mjs|java|kt|go|rs|rb|php|c|cc|cpp|h|hpp|cs|swift|scala|sh|bash|"
             r"sql|md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|conf|csv|tsv|xml|html|css|lock|log|env|pdf|"
             r"docx?|xlsx?|pptx?|png|jpe?g|gif|svg|zip|gz|tar)")

_CUR = r"(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR)"
_NUM = r"(?:\d{1,3}(?:,\d{3}){1,6}|\d{1,15})(?:\.\d{1,4})?"
_NOT_IN_CODE = r"(?<![A-Za-z]-)"
"""Before an amount or a date: not right after a letter and a hyphen, inside a code (`TL-056CAD`, `INV-2024EUR`,
`build-2024-05-20`: the code is the identifier, not an amount or a date cut from it)."""
_HEX = r"[0-9A-Fa-f]"
_H16 = rf"{_HEX}{{1,4}}"
_IPV6 = (rf"(?:{_H16}:){{7}}{_H16}"
         rf"|(?:{_H16}:){{1,6}}(?::{_H16}){{1,6}}"
         rf"|(?:{_H16}:){{1,7}}:"
         rf"|::(?:{_H16}:){{0,6}}{_H16}")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_FILE = (rf"(?:(?:~|\.{{1,2}})?/)?(?:[\w.@+-]{{1,128}}/){{0,32}}[\w@+-][\w.@+-]{{0,127}}\.{_FILE_EXT}")

DEFAULT_PATTERNS: dict[str, str] = {
    # a URL, up to whitespace or a closing quote/bracket; trailing punctuation is trimmed by `_trim`
    "url": r"\b(?:https?|ftp)://[^\s<>\"'`\]\[)(}{]{1,2000}",
    "email": r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,6}\.[A-Za-z]{2,24}\b",
    # a test's node id: tests/test_x.py::TestY::test_z[param]
    "pytest_id": (r"(?<![\w/.@+~-])(?:(?:~|\.{1,2})?/)?(?:[\w.@+-]{1,128}/){0,32}[\w@+-][\w.@+-]{0,127}\.py"
                  r"::\w{1,200}(?:::\w{1,200}){0,8}(?:\[[^\]\s]{0,200}\])?"),
    # a file and its line (and column): src/mod.py:42, mod.py:42:7
    "file_line": rf"(?<![\w/.@+~-]){_FILE}:\d{{1,7}}(?::\d{{1,5}})?(?![\d])",
    # C:\dir\file, /abs/path (2+ parts), ~/x, ./x, dir/sub/file.ext, or a bare file name with a known extension
    "path": (r"\b[A-Za-z]:\\(?:[\w.-]{1,128}\\){0,32}[\w.-]{1,128}"
             r"|(?<![\w/.@+~-])(?:~|\.{1,2})?/(?:[\w.@+-]{1,128}/){1,32}[\w.@+-]{1,128}"
             r"|(?<![\w/.@+~-])(?:~|\.{1,2})/[\w.@+-]{1,128}"
             r"|(?<![\w/.@+-])(?:[\w.@+-]{1,128}/){1,32}[\w.@+-]{1,128}\.\w{1,8}"
             rf"|(?<![\w/.-])[\w-]{{1,128}}(?:\.[\w-]{{1,64}}){{0,8}}\.{_FILE_EXT}(?![\w.])"),
    "uuid": rf"(?<![\w-]){_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?![\w-])",
    # an IPv6 address, in brackets with its port ([2001:db8::1]:8080) or bare (2001:db8::1, ::1, fe80::1)
    # (a sentence's full stop may follow either: "listens on 10.0.12.7:8443." is one address and its port)
    "ipv6": rf"\[(?:{_IPV6})\](?::\d{{1,5}})?(?!\d)|(?<![\w:.])(?:{_IPV6})(?![\w:]|\.\d)",
    # an IPv4 address and its port: 10.0.0.12, 192.168.1.7:8080 (not four parts of 1.2.3.4.5)
    "ipv4": rf"(?<![\w.:]){_OCTET}(?:\.{_OCTET}){{3}}(?::\d{{1,5}})?(?!\w|\.\d)",
    # a digest with its algorithm: sha256:9f86d0..., md5-0cc175...
    "digest": rf"(?i:\b(?:sha(?:1|224|256|384|512)|md5|blake2[bs]?)[:-]){_HEX}{{16,128}}(?!\w)",
    "date": (rf"(?<!\w){_NOT_IN_CODE}\d{{4}}-\d{{2}}-\d{{2}}"
             r"(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
             r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
             rf"|\b{_MONTHS}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"
             rf"|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTHS},? \d{{4}}\b"),
    # an amount never starts or ends inside a code (`TL-056CAD`, `INV-2024EUR`, `TL-CAD123` are codes)
    "amount": (rf"[$€£¥₹]{_NUM}(?!\d)(?:\s?(?:k|K|M|bn)\b)?"
               rf"|{_NOT_IN_CODE}\b{_CUR}\s?{_NUM}(?:\s?(?:k|K|M|bn)\b|(?!\w))(?!-\w)"
               rf"|(?<![\w,.]){_NOT_IN_CODE}{_NUM}\s?(?:{_CUR}|dollars|euros|pounds)\b(?!-\w)"),
    # the value of a JSON field named *id / *_number / *code / *ref (`"reservation_id": "AQLBTL"`): group 1
    "keyed_id": r"\"\w{0,40}(?:id|Id|ID|number|Number|code|Code|ref|reference)\"\s{0,3}:\s{0,3}\"([^\"\s]{3,64})\"",
    # the number value of a JSON field naming money (`"price": 55`, `"amount": 12.5`): group 1; an amount of two
    # digits or more, or with decimals (3+ digit numbers are found anyway, a one-digit count is not an amount)
    "keyed_amount": (r"\"\w{0,40}(?:price|amount|balance|total|cost|fee|refund|fare|charge|paid)\w{0,20}\"\s{0,3}:"
                     r"\s{0,3}(\d{2,12}(?:\.\d{1,4})?|\d\.\d{1,4})(?![\d.])"),
    # the same fields as a note's preview writes them (`reservation_id: AQLBTL; price: 65`: `_preview.py`), or YAML:
    # the value, with a digit or a capital letter after its first character (not a word: `True`, `Failed`), after
    # the key and ": ": group 1; never markup, an escape or an unclosed bracket (`**ID: S61CZX**`, a doubly escaped
    # `Phone Number: 327-420-4923\\nAddress`, `tag: Union[int`: the value is S61CZX, 327-420-4923, none)
    "keyed_pair": (r"(?<![\w\"'])\w{0,40}(?:id|Id|ID|number|Number|code|Code|ref|reference|price|amount|balance|"
                   r"total|cost|fee|refund|fare|charge|paid)\w{0,20}: "
                   r"((?=[^\s;]{0,63}[0-9]|[^\s;]{1,63}[A-Z])[^\s;\"'*`\\()\[\]]{2,64}?)"
                   r"(?=[;,]?[*`]{0,3}(?:\s|$|\\n))"),
    # an id named in prose: `order #W2378156`, `ticket no. 4471`, `reservation ID "OBUT9V"`: group 1
    "named_id": (r"(?i:\b(?:order|ticket|reservation|booking|invoice|confirmation|tracking|case|transaction|"
                 r"receipt|account)s?\b(?:\s{1,3}(?:id|number|no\.?|code|ref))?\s{0,3}(?:is|was|:)?\s{0,3}[\"'“]?)"
                 r"(#?(?=[\w-]{0,63}\d|[A-Z0-9-]{4,64}(?![\w-]))[A-Za-z0-9][\w-]{2,63})(?![\w-])"),
    # a line of a file: `line 42` (a traceback's frame, a linter's message)
    "line": r"\b[Ll]ine \d{1,7}(?![\d.]\d|\w)",
    # an exception or warning type: ValueError, AssertionError, KeyboardInterrupt (not `Error` alone)
    "error_type": (r"(?<![\w.])(?:[A-Z][A-Za-z0-9]{0,60}(?:Error|Exception|Warning)|KeyboardInterrupt|SystemExit|"
                   r"StopIteration|GeneratorExit)(?!\w)"),
    # the name a Python `def` or `class` defines: group 1
    "definition": r"\b(?:def|class)\s{1,8}([A-Za-z_]\w{0,80})(?=\s{0,8}[(:])",
    # a dotted name: pkg.mod.func, self.opts, np.where (the first part of two characters or more: not `e.g`)
    "dotted": r"(?<![\w./@-])[A-Za-z_]\w{1,80}(?:\.[A-Za-z_]\w{0,80}){1,8}(?![\w-]|\.[A-Za-z_])",
    # long hexadecimal: a git sha (b0ff879), a hash; 7 to 64 digits, at least one 0-9 and one a-f
    "hex": r"(?<![\w-])(?=[0-9a-f]{0,63}\d)(?=[0-9a-f]{0,63}[a-f])[0-9a-f]{7,64}(?![\w-])|\b0x[0-9A-Fa-f]{4,32}\b",
    # codes: WH-220, ZFA23B, HAT084, #W2378156 (upper-case letters and digits, at least one of each, 4+ chars);
    # a hyphenated code of letters only (6+ characters) when a part of two letters or more has no vowel, or a part
    # of four or more is hexadecimal (RQ-FACADE, TL-BAAFFC; not NON-REFUNDABLE)
    "code": (r"#[A-Za-z0-9]{0,32}\d[A-Za-z0-9]{0,32}(?!\w)"
             r"|(?<![\w-])(?=[A-Z0-9-]{0,40}\d)(?=[A-Z0-9-]{0,40}[A-Z])[A-Z0-9]{1,20}(?:-[A-Z0-9]{1,20}){1,5}(?![\w-])"
             r"|(?<![\w-])(?=[A-Z0-9]{0,40}\d)(?=[A-Z0-9]{0,40}[A-Z])[A-Z0-9]{4,40}(?![\w-])"
             r"|(?<![\w-])(?=[A-Z-]{6})(?=[A-Z-]{0,60}(?<![A-Z])(?:[B-DF-HJ-NP-TV-XZ]{2,20}|[A-F]{4,20})(?![A-Z]))"
             r"(?![YMDHS]{2,4}(?:-[YMDHS]{2,4}){1,2}(?![\w-]))"  # a format (YYYY-MM-DD) is no code
             r"[A-Z]{1,20}(?:-[A-Z]{1,20}){1,5}(?![\w-])"),
    # slugs with a digit: sofia_kim_7287, gift_card_7480005, build-1142
    "slug": r"(?<![\w-])(?=[\w-]{0,80}\d)[A-Za-z][A-Za-z0-9]{0,40}(?:[_-][A-Za-z0-9]{1,40}){1,8}(?![\w-])",
    # numbers of 3+ digits: 4421486, 1,234, 255.0 (not part of a word, not the decimals of another number)
    "number": r"(?<![\w.,])(?:\d{1,3}(?:,\d{3}){1,6}|\d{3,30})(?:\.\d{1,6})?(?!\w)",
}
"""The identifier patterns, in priority order (kind -> regular expression). Where a pattern has a group 1, the
group is the identifier (the rest is context). Every repetition is bounded and a match cannot start inside a run
of the characters it consumes, so extraction stays linear in the text's length (no catastrophic backtracking on
a 40,000-character run of `A-A-A-...` or `1,000,1,000,...`). Sources: the issue's list (ids, 3+ digit numbers,
codes, amounts, e-mails, URLs, paths, dates); the shapes come from the shared traces (tau-bench's `OBUT9V`, `HAT084`,
`gift_card_7480005`, `"reservation_id": "AQLBTL"`, the two-digit `"price": 65` of a flight) and the cases
(`WH-220`, `ZFA23B`); issue 20 (class 8: UUIDs, IPv4 and IPv6 addresses with their port, `sha256:` digests and
long hexadecimal, codes whose tail has no digit, codes that end in a currency code) and issue 24 (what a coding
agent needs: `file.py:N`, `line N`, pytest ids, error types, def/class names, dotted names, git shas; the shapes
from the SWE-agent conversations of the shared traces)."""

_TRAILING = ".,;:!?)]}'\"»”’"

def _has(*literals: str) -> Callable[[str], bool]:
    """Whether a text holds one of `literals` (a plain loop: `any` over a generator costs more than the `in` tests of
    a short text it runs on every chunk read)."""
    if len(literals) == 1:
        literal = literals[0]
        return lambda text: literal in text

    def test(text: str) -> bool:
        for x in literals:
            if x in text:
                return True
        return False
    return test


def _has_word(*words: str, then: str | None = None) -> Callable[[str], bool]:
    """A case-insensitive word test exact to `re.IGNORECASE` (`_presence.folded`), for lower-case ASCII words;
    with `then` (an expression, lower-case: what a word must be followed by), a search of the folded text for each
    word it holds followed by `then`: what a search for the alternation of the words followed by `then` finds
    (a match of the alternation is a match of one word), each search starting with its word's letters, which `re`
    skips to at C speed (where the alternation is tried at every letter that starts a word)."""
    searches = [(w, re.compile(re.escape(w) + then)) for w in words] if then is not None else []

    def test(text: str) -> bool:
        lower = folded(text)
        if not searches:
            return any(w in lower for w in words)
        for word, search in searches:
            if word in lower and search.search(lower) is not None:
                return True
        return False
    return test


def _then(first: Callable[[str], bool], *exprs: str) -> Callable[[str], bool]:
    """`first`, a cheap test that every match of the expressions passes, then a search with each expression in turn
    (a match of the pattern holds a match of each)."""
    patterns = [re.compile(expr) for expr in exprs]
    return lambda text: first(text) and all(p.search(text) is not None for p in patterns)


_NAMED = ("order", "ticket", "reservation", "booking", "invoice", "confirmation", "tracking", "case", "transaction",
          "receipt", "account")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_HEX_PAIR = re.compile(r"[a-f](?:(?<=\d[a-f])|\d)")
"""A digit next to a letter a-f: what a run of hexadecimal digits with at least one of each holds."""

_HEX_AS_CLASSES = bytes.maketrans(b"0123456789abcdef", b"0000000000aaaaaa")
"""Each ASCII digit made 0 and each letter a-f made a (every other byte stays itself, never one of those two)."""


def _hex_pair(text: str) -> bool:
    """Whether an ASCII digit stands next to a letter a-f in `text` (what a hexadecimal match holds: its run has a
    digit and a letter of `[0-9a-f]`): in the UTF-8 bytes with digits made 0 and a-f made a, `0a` or `a0` (a
    translation and two substring searches: C speed, where `_HEX_PAIR` tries every letter a-f); by `_HEX_PAIR`
    itself (which takes any Unicode digit too: never False where this is True) for a text with a lone surrogate."""
    try:
        raw = text.encode()
    except UnicodeEncodeError:
        return _HEX_PAIR.search(text) is not None
    classes = raw.translate(_HEX_AS_CLASSES)
    return b"0a" in classes or b"a0" in classes

_PAIR_VALUE = r"(?=[^\s;]{0,63}[0-9]|[^\s;]{1,63}[A-Z])[^\s;\"'*`\\()\[\]]{2}"
"""The start of a keyed pair's value (`DEFAULT_PATTERNS["keyed_pair"]`): a digit or a capital letter ahead, two
characters of the value."""

_NEEDS: dict[str, Callable[[str], bool]] = {
    "url": _has("://"),
    "email": _then(_has("@"), r"@(?<=[A-Za-z0-9._%+-]@)[A-Za-z0-9-]"),
    "path": _then(_has("/", "\\", "."), r"/(?:(?<=[\w.@+~-]/)[\w.@+-]|[\w.@+-]{1,128}/)|\\(?<=[A-Za-z]:\\)"
                                          r"|\." + _FILE_EXT + r"(?![\w.])"),
    "date": _then(lambda t: "-" in t or "/" in t or any(c in t for c in "JFMASOND"),
                  r"-(?<=\d-)\d\d-\d|/(?<=\d/)\d|" + "|".join(_MONTH_NAMES)),
    "amount": _has("$", "€", "£", "¥", "₹", "USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR", "dollars", "euros",
                   "pounds"),
    "keyed_id": _has('"'),
    "keyed_amount": _has('"'),
    "named_id": _has_word(*_NAMED, then=r"s?\b"),
    "keyed_pair": _then(_has(": "), r": (?<=\w: )" + _PAIR_VALUE,
                        r"(?:id|Id|ID|number|Number|code|Code|ref|price|amount|balance|total|cost|fee|fare|charge|paid)"
                        r"\w{0,20}: " + _PAIR_VALUE),
    "pytest_id": _has(".py::"),
    "file_line": _then(_has(":"), r"\.\w{1,8}:\d"),
    "uuid": _then(_has("-"), r"-" + _HEX + r"{4}-"),
    "ipv6": _then(_has(":"), rf"::(?:(?<={_HEX}::)|{_HEX})|:(?<={_HEX}:)(?:{_HEX}{{1,4}}:){{6}}{_HEX}"),
    "ipv4": _then(_has("."), r"\.(?<=\d\.)\d{1,3}\.\d"),
    "digest": _has_word("sha", "md5", "blake"),
    "line": _then(_has("ine "), r"ine \d(?<=[Ll]ine \d)"),
    "error_type": _has("Error", "Exception", "Warning", "KeyboardInterrupt", "SystemExit", "StopIteration",
                       "GeneratorExit"),
    "definition": _then(_has("def", "class"), r"(?:d(?<=\bd)ef|c(?<=\bc)lass)\s"),
    "dotted": _then(_has("."), r"\.(?<=\w\.)[A-Za-z_]"),
    "slug": _then(_has("_", "-"), r"[_\d-](?:(?<=[A-Za-z0-9][_-])[A-Za-z0-9]{0,39}\d"
                                  r"|(?<=\d)[A-Za-z0-9]{0,40}[_-](?<=[A-Za-z0-9][_-]))"),
    "hex": lambda text: "0x" in text or _hex_pair(text),
}
"""For a built-in pattern, what every one of its matches contains (a literal, or a simpler expression): a text
without it is not searched with the pattern at all, which gives the same matches (none) for less. Each entry follows
from its pattern in `DEFAULT_PATTERNS`: a URL has `://`, an e-mail a character of its name, `@` and one of its
domain, a path a slash between two of its characters (`a/b`, `~/x`) or before a part and its slash (`/a/`), a drive's
`X:\\` or a known extension, a date `d-dd-d`, `d/d` or a month's name, an amount a currency sign, code or word, the
keyed patterns a quote, a keyed pair a word character, a colon, a space and the start of its value (`_PAIR_VALUE`),
then its key's word before them (`ref` for `reference` and `refund`), a named id its noun and a word's end
(`order_id` is no noun), a pytest id `.py::`, a file's line `.ext:N`, a UUID `-hhhh-`, an IPv6 address `::` next to a
hex digit (`h::`, `::h`: a shortened one) or its eight groups, an IPv4 address `d.ddd.d`, a digest its algorithm's
name, a line `line N`, an error type its ending, a definition `def` or `class` at a word's start, a dotted name a
word character, a dot and a letter, a slug a digit in one of its parts (after the `_` or `-` before it, or before the
one after it), long hexadecimal `0x` or an ASCII digit next to a letter a-f (`_hex_pair`). Each test is a literal
(`in`, at C speed), or a cheap literal that every match holds before the expression (`_then`): the same condition,
read faster;
each expression starts with a literal or a set of characters (what `re` skips to at C speed), its context checked
after it by a lookbehind. Used only while the pattern is the built-in one."""

_NUM_REST = r"(?:\d{0,2}(?:,\d{3}){1,6}|\d{0,14})(?:\.\d{1,4})?"
"""`_NUM` after its first digit."""

_FAST: dict[str, str] = {
    "path": (r"[\w.@+~/-](?<!\w(?s:.))"
             r"(?:(?<=[A-Za-z]):\\(?:[\w.-]{1,128}+\\){0,32}[\w.-]{1,128}"
             r"|(?<=(?<![/.@+~-])[~./])(?:(?<=~)/|(?<=\.)\.?/|(?<=/))(?:[\w.@+-]{1,128}+/){1,32}[\w.@+-]{1,128}"
             r"|(?<=(?<![/.@+~-])[~.])(?:(?<=~)|(?<=\.)\.?)/[\w.@+-]{1,128}"
             r"|(?=[\w@+-]{0,127}+[./])"
             r"(?:(?<=(?<![/.@+-])[\w.@+-])[\w.@+-]{0,127}+/(?:[\w.@+-]{1,128}+/){0,31}[\w.@+-]{1,128}\.\w{1,8}"
             rf"|(?<=(?<![/.-])[\w-])[\w-]{{0,127}}+(?:\.[\w-]{{1,64}}+){{0,8}}\.{_FILE_EXT}(?![\w.])))"),
    "email": (r"[A-Za-z0-9._%+-](?<=(?<![\w.%+-])[A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9-]{1,63}"
              r"(?:\.[A-Za-z0-9-]{1,63}){0,6}\.[A-Za-z]{2,24}\b"),
    "uuid": (rf"{_HEX}(?<=(?<![\w-]){_HEX}){_HEX}{{7}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?![\w-])"),
    "date": (rf"[\dJFMASOND](?:(?<=(?<!\w){_NOT_IN_CODE}\d)\d{{3}}-\d{{2}}-\d{{2}}"
             r"(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
             r"|(?<=\b\d)\d?/\d{1,2}/\d{2,4}\b"
             r"|(?<=\b[JFMASOND])(?:(?<=J)an(?:uary)?|(?<=F)eb(?:ruary)?|(?<=M)ar(?:ch)?|(?<=A)pr(?:il)?|(?<=M)ay|"
             r"(?<=J)une?|(?<=J)uly?|(?<=A)ug(?:ust)?|(?<=S)ep(?:t(?:ember)?)?|(?<=O)ct(?:ober)?|(?<=N)ov(?:ember)?|"
             r"(?<=D)ec(?:ember)?)\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b"
             rf"|(?<=\b\d)\d?(?:st|nd|rd|th)? {_MONTHS},? \d{{4}}\b)"),
    "amount": (rf"[$€£¥₹UEGJCAI\d](?:(?<=[$€£¥₹]){_NUM}(?!\d)(?:\s?(?:k|K|M|bn)\b)?"
               rf"|(?<={_NOT_IN_CODE}\b[UEGJCAI])(?:(?<=U)SD|(?<=E)UR|(?<=G)BP|(?<=J)PY|(?<=C)HF|(?<=C)AD|(?<=A)UD|"
               rf"(?<=I)NR)\s?{_NUM}(?:\s?(?:k|K|M|bn)\b|(?!\w))(?!-\w)"
               rf"|(?<=(?<![\w,.]){_NOT_IN_CODE}\d){_NUM_REST}\s?(?:{_CUR}|dollars|euros|pounds)\b(?!-\w))"),
    "keyed_pair": (r"\w(?<![\w\"']\w)(?=\w{0,68}+: )"
                   r"(?:\w{0,39}(?:id|Id|ID|number|Number|code|Code|ref|reference|price|amount|balance|total|cost|"
                   r"fee|refund|fare|charge|paid)|(?<=i)d|(?<=I)d|(?<=I)D|(?<=n)umber|(?<=N)umber|(?<=c)ode|(?<=C)ode|"
                   r"(?<=r)ef|(?<=r)eference|(?<=p)rice|(?<=a)mount|(?<=b)alance|(?<=t)otal|(?<=c)ost|(?<=f)ee|"
                   r"(?<=r)efund|(?<=f)are|(?<=c)harge|(?<=p)aid)\w{0,20}: "
                   r"((?=[^\s;]{0,63}[0-9]|[^\s;]{1,63}[A-Z])[^\s;\"'*`\\()\[\]]{2,64}?)"
                   r"(?=[;,]?[*`]{0,3}(?:\s|$|\\n))"),
    "line": r"[Ll](?<=\b[Ll])ine \d{1,7}(?![\d.]\d|\w)",
    "error_type": (r"[A-Z](?<=(?<![\w.])[A-Z])(?:[A-Za-z0-9]{0,60}(?:Error|Exception|Warning)|(?<=K)eyboardInterrupt|"
                   r"(?<=S)ystemExit|(?<=S)topIteration|(?<=G)eneratorExit)(?!\w)"),
    "definition": r"[dc](?:(?<=\bd)ef|(?<=\bc)lass)\s{1,8}([A-Za-z_]\w{0,80})(?=\s{0,8}[(:])",
    "dotted": r"[A-Za-z_](?<![\w./@-][A-Za-z_])\w{1,80}+(?:\.[A-Za-z_]\w{0,80}+){1,8}+(?![\w-]|\.[A-Za-z_])",
    "hex": (r"[0-9a-f](?:(?<![\w-][0-9a-f])(?=[0-9a-f]{6})(?<=(?=[0-9a-f]{0,63}\d)(?=[0-9a-f]{0,63}[a-f])[0-9a-f])"
            r"[0-9a-f]{6,63}+(?![\w-])|(?<=\b0)x[0-9A-Fa-f]{4,32}\b)"),
    "code": (r"[#A-Z0-9](?:(?<=#)[A-Za-z0-9]{0,32}\d[A-Za-z0-9]{0,32}(?!\w)"
             r"|(?<![\w-][A-Z0-9])"  # what the three other alternatives ask before their first character
             r"(?:(?<=(?<![\w-])(?=[A-Z0-9-]{0,40}\d)(?=[A-Z0-9-]{0,40}[A-Z])[A-Z0-9])[A-Z0-9]{0,19}"
             r"(?:-[A-Z0-9]{1,20}){1,5}(?![\w-])"
             r"|(?<=(?<![\w-])(?=[A-Z0-9]{0,40}\d)(?=[A-Z0-9]{0,40}[A-Z])[A-Z0-9])[A-Z0-9]{3,39}(?![\w-])"
             r"|(?<=(?<![\w-])(?=[A-Z-]{6})(?=[A-Z-]{0,60}(?<![A-Z])(?:[B-DF-HJ-NP-TV-XZ]{2,20}|[A-F]{4,20})(?![A-Z]))"
             r"(?![YMDHS]{2,4}(?:-[YMDHS]{2,4}){1,2}(?![\w-]))[A-Z])"
             r"[A-Z]{0,19}(?:-[A-Z]{1,20}){1,5}(?![\w-])))"),
    "slug": (r"[A-Za-z](?<![\w-][A-Za-z])(?=[A-Za-z0-9]{0,40}+[_-])(?=[\w-]{0,79}\d)"
             r"[A-Za-z0-9]{0,40}+(?:[_-][A-Za-z0-9]{1,40}+){1,8}+(?![\w-])"),
    "number": r"\d(?<=(?<![\w.,])\d)(?:\d{0,2}(?:,\d{3}){1,6}|\d{2,29})(?:\.\d{1,6})?(?!\w)",
}
"""For a built-in pattern, an expression with the same matches (the same spans and groups, in the same order) that
`re` searches faster: it starts with the set of characters a match can start with (`re` skips to them at C speed,
where an expression that starts with a lookbehind or `\b` is tried at every position), and the context that the
pattern asks for before its first character is asked by a lookbehind of one character after it (`(?<=A[x])` after
`[x]`: the assertion A at the match's start; a lookahead inside a lookbehind looks on past it). A repetition that
starts the match gives its first character (`[x]{1,20}` is `[x]` then `[x]{0,19}`, tried longest first as before),
and the alternatives of a pattern keep their order, each after a lookbehind of its first character (a context all of
them ask for is asked once, first: the path's `(?<!\\w(?s:.))`, no word character before the first; the code's
`(?<![\\w-][A-Z0-9])`, no word character or hyphen before a first letter or digit: a digit inside a number fails
there once, not in each of three alternatives). A run that must be followed by a character it cannot hold is taken
possessively (`[x]{1,128}+/`: a shorter run is followed by an `x`, never by the `/`, so nothing is lost by not
trying it), and alternatives that read the same run first are tried only when a lookahead finds what ends it (the
path's `(?=[\\w@+-]{0,127}+[./])`: a part before its `/`, or a name before its extension's `.`; a text's words are
mostly neither, and are read once). Equal to `DEFAULT_PATTERNS` on the shared traces, the cases and generated texts
(`tests/test_extraction_equivalence.py`); used only while the pattern is the built-in one (as `_NEEDS`)."""

EXTRACT_CHUNK = 1024
"""Characters read at a time when only the first identifiers of a text are wanted (`FactGuard.first`): a bounded
list (a truncation note's, a progress line's) reads as many chunks as it needs to fill up, not the whole result."""

EDGE_CHARS = 64
"""A match that ends within this many characters of a chunk's cut (`FactGuard.first`) is not taken from that chunk:
the next chunk starts where it starts, so an identifier the cut went through (`UA-1|234`, `Jan 5, |2024`) is read
whole. Longer than the identifiers that hold spaces (`5th September, 2024`, `USD 1,000,000.00`: under 30
characters), far under half a chunk (every chunk moves on); on the order listings of `benchmarks/dense.py` 200
characters cost about half as much again as 64 (more chunks read again)."""

_LEAD_CHARS = 8
"""Characters before a chunk that starts inside a word, read as context (`FactGuard._found_from`): more than the
widest lookbehind of the patterns (three characters: `(?<=\\w: )`, `(?<={_HEX}::)`)."""

_EXTRACT_CACHE = 4_096
"""Texts whose extraction a guard remembers (by content; all are forgotten when there are more, or when they
hold more than `_EXTRACT_CACHE_CHARS` characters): the same result is read by several strategies and passes of
one compaction, and a drop marker that grows over several drops reads again what its earlier drops read (a
2,000-message history dropped in 9 steps read 17,865 texts where 2,000 are distinct)."""

_EXTRACT_CACHE_CHARS = 8_000_000
"""Characters of the texts a guard's extraction cache may hold (the texts are referenced, not copied: most are
the history's own strings), so a few huge results cannot keep much memory alive."""


@dataclass(frozen=True)
class Identifier:
    """One identifier: its verbatim `value` (characters as written), the `kind` of pattern that found it, its
    `source`: the name of the tool whose result it came from when it comes from tool results only (see the
    module docstring), else None, and its `key`: the name of the field it is the value of, in a JSON, Python or
    YAML result (`"price": 136` gives value "136", key "price"; `keyed`), else None. A list writes it
    `key: value` (`FACTS_KEY`), and a reading of the list gives the key back."""

    value: str
    kind: str
    source: str | None = None
    key: str | None = None

    def with_source(self, source: str | None) -> Identifier:
        """The same identifier from `source` (what `dataclasses.replace` gives, built directly: a guard makes
        thousands of them in one compaction of identifier-dense results)."""
        return Identifier(self.value, self.kind, source, self.key)

    def with_key(self, key: str | None) -> Identifier:
        """The same identifier as the value of the field `key` (see `with_source`)."""
        return Identifier(self.value, self.kind, self.source, key)


@dataclass
class GuardResult:
    """What the guard did to one summary.

    Attributes:
        text: the summary text with the facts line appended (unchanged when nothing was missing).
        identifiers: every identifier guarded (distinct values), oldest first.
        kept_by_summary: how many of them the summary contained on its own.
        added: how many the guard's lines added (the said line's quotes, then the facts line).
        omitted: how many were missing but did not fit the bound (`choose`: repeated shapes, then the oldest).
    """

    text: str
    identifiers: list[Identifier] = field(default_factory=list)
    kept_by_summary: int = 0
    added: int = 0
    omitted: int = 0


def keyed(text: str) -> bool:
    """Whether `text` is a structured result whose identifiers are listed with their keys (`Identifier.key`): it
    starts with `{` or `[` (JSON, a Python repr), or its first two lines start with a YAML key (`price: 136`,
    `- id: 7`)."""
    lead = text.lstrip()[:1]
    if lead:
        return lead in ("{", "[") or _YAML_START.match(text) is not None
    return False


def _start(item: tuple[int, Identifier]) -> int:
    return item[0]


@functools.lru_cache(maxsize=None)
def _fast(kind: str) -> re.Pattern[str]:
    """`_FAST[kind]` compiled, once per process."""
    return re.compile(_FAST[kind])


def _trim(value: str) -> str:
    while value and value[-1] in _TRAILING:
        if value[-1] in ")]}" and value.count({")": "(", "]": "[", "}": "{"}[value[-1]]) >= value.count(value[-1]):
            break  # a balanced closing bracket belongs to the value (a URL with parentheses)
        value = value[:-1]
    return value


def _cut(text: str, at: int) -> int:
    """Where the chunk of `text` that starts at `at` ends (`FactGuard.first`): `EXTRACT_CHUNK` characters on, moved
    back to just after the last line break in its second half, else before the last `"` that opens a JSON key
    after `, `, else after the last space that follows neither a letter nor a digit nor a key's end
    (`_KEY_SEPARATORS`: a value is read with its key), else there. A cut that still goes through an identifier is
    mended by `EDGE_CHARS`."""
    end = at + EXTRACT_CHUNK
    if end >= len(text):
        return len(text)
    half = at + EXTRACT_CHUNK // 2
    k = text.rfind("\n", half, end)
    if k >= 0:
        return k + 1
    k = text.rfind(', "', half, end)
    if k >= 0:
        return k + 2
    k = end
    while k > half:
        k = text.rfind(" ", half, k)
        if k <= half:
            break
        if not text[k - 1].isalnum() and text[k - 1] not in _KEY_SEPARATORS:
            return k + 1
    return end


_KEY_SEPARATORS = ':="'
"""What ends a key (`"price": 55`, `price: 55`, `price = 55`): a chunk is never cut after them, where the value
would be read without the key that makes it an identifier (`keyed_amount`: a two-digit price is one only with
its key)."""


def message_text(message: BaseMessage) -> str:
    """The text the guard reads from a message: its readable content (text blocks; other blocks named by type,
    never dumped), the arguments of its tool calls as JSON (of an invalid call, its raw string), and for a summary
    its own text (without the prefix)."""
    if is_summary(message):
        return summary_text(message)
    parts = [content_text(message.content)]
    if isinstance(message, AIMessage):
        for call in tool_calls_of(message):  # an invalid call's raw argument string as it is
            parts.append(arguments_text(call.get("args") if is_invalid_call(call) else call.get("args") or {}))
    return "\n".join(p for p in parts if p)


def parse_facts_line(text: str) -> list[str]:
    """The identifiers listed in the facts line(s) of a summary text (empty when it has none), both lines."""
    return [i.value for i in parse_facts(text)]


def parse_facts(text: str) -> list[Identifier]:
    """The identifiers of the facts lines of a summary text, in order, kind "carried"; those of the tools' line
    with their tool as `source`."""
    out: list[Identifier] = []
    for line in text.splitlines():
        if line.startswith(FACTS_PREFIX):
            out.extend(_carried(v) for v in _values(line[len(FACTS_PREFIX):]))
        elif line.startswith(TOOL_FACTS_PREFIX):
            body = line[len(TOOL_FACTS_PREFIX):]
            for start, end in fenced_spans(body):
                tool, inner = unfence(body[start:end])
                out.extend(_carried(v, tool or "tool") for v in _values(inner))
    return out


def parse_listed(body: str) -> list[Identifier]:
    """The identifiers of a list written as `A; B; <untrusted_tool_data>tool: C; D</untrusted_tool_data>` (a
    progress note line's facts, `progress.call_line`), in order, kind "carried": the plain ones without a source,
    the fenced ones with the fence's tool; a trailing " (+n more)" or " (+more)" is not one."""
    body = re.sub(r" \(\+(?:\d+ )?more\)$", "", body.rstrip())
    out: list[Identifier] = []
    at = 0
    for start, end in [*fenced_spans(body), (len(body), len(body))]:
        out.extend(_carried(v.strip()) for v in body[at:start].split(FACTS_SEPARATOR.strip()) if v.strip())
        if start < end:
            tool, inner = unfence(body[start:end])
            out.extend(_carried(v, tool or "tool") for v in inner.split(FACTS_SEPARATOR) if v)
        at = end
    return out


def _values(body: str) -> list[str]:
    """The items of a list (`A; key: B; C`), a trailing " (+n older omitted)" or " (+n more)" left out."""
    body = re.sub(r" \(\+(?:\d+ older omitted|(?:\d+ )?more)\)$", "", body.rstrip())
    return [v for v in body.split(FACTS_SEPARATOR) if v]


def _carried(item: str, source: str | None = None) -> Identifier:
    """The identifier an item of a list gives back (kind "carried"): `key: value` its value with its key (no
    pattern's value holds ": "), else the item itself."""
    key, sep, value = item.partition(FACTS_KEY)
    if sep and value and _KEY_NAME.fullmatch(key):
        return Identifier(value, "carried", source, key)
    return Identifier(item, "carried", source)


_BARE_NUMBER = re.compile(r"[\d.,]{1,40}")


def _item(identifier: Identifier) -> str:
    """How a list writes an identifier: `key: value` (`FACTS_KEY`) when it has a key and is a bare number (a
    number alone says nothing: `price: 136; seats: 109`, not `136; 109`), else its value (`HAT170`, an e-mail, a
    date say what they are; their keys would take the room of other identifiers: on the tau-bench conversations
    replayed at 4,000 tokens, keys on every value let the bounded lists hold 95.1% of the (call, identifier)
    pairs instead of 99.2%)."""
    if identifier.key and _BARE_NUMBER.fullmatch(identifier.value):
        return f"{identifier.key}{FACTS_KEY}{identifier.value}"
    return identifier.value


_KEYED_NUMBER = re.compile(r"(?:^|(?<=; )|(?<=: ))[^;:\n\"'<>]{1,60}: (?=[\d.,]{1,40}(?:;|<|\n| \(|$))")
"""A key written before a bare number in a list (`_item`: `price: 136`), at its start, after a separator or after a
fence's label (`search: price: 136`); what `without_keys` takes out."""


def without_keys(listed: str) -> str:
    """`listed` (a list's text: `_item`s joined by `FACTS_SEPARATOR`, possibly fenced) with the keys of its numbers
    taken out (`price: 136; HAT170` -> `136; HAT170`): a terse list, where the identifiers stay and their keys give
    way first (`progress.terse` lines)."""
    return _KEYED_NUMBER.sub("", listed) if FACTS_KEY in listed else listed


def _value(identifier: Identifier) -> str:
    return identifier.value


def keys_fit(identifiers: Sequence[Identifier], max_chars: int) -> bool:
    """Whether `identifiers`, listed with their keys (`_item`) and joined by `FACTS_SEPARATOR`, fit `max_chars`
    characters. A bounded list chooses its identifiers by their values alone, as it did before keys were written
    (issue 20), and writes the keys only when this holds: a key tells what a number is, but it must not take the
    place of an identifier (with the keys counted in the bounds, benchmarks/BILL.md's identifiers table at 4,000
    tokens lost 15 of the 21,801 (call, identifier) pairs of the default policy's row and 14 of Summarize()'s)."""
    return sum(len(_item(i)) for i in identifiers) + len(FACTS_SEPARATOR) * max(0, len(identifiers) - 1) <= max_chars


def _items(identifiers: Sequence[Identifier], max_chars: int) -> list[str]:
    """How a list bounded by `max_chars` characters writes `identifiers`: with their keys when they fit
    (`keys_fit`), else their values."""
    keyed = keys_fit(identifiers, max_chars)
    return [_item(i) if keyed else i.value for i in identifiers]


_HEX_RUN = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|[0-9a-f]*\d[0-9a-f]*")
"""A UUID (case-folded), or a run of hexadecimal digits with a decimal digit in it, as long as it goes."""


def _run_shape(m: re.Match[str]) -> str:
    run = m.group()
    return "0" if run.isdigit() else "x-x-x-x-x" if len(run) == 36 and run[8] == "-" else "x"


def shape(value: str) -> str:
    """The shape of an identifier's value: the value case-folded, each UUID written `x-x-x-x-x` and each run of
    hexadecimal digits that holds a decimal digit written `0` when it is all decimal, else `x`. Values of one
    shape differ only in their digits: the timestamps of a log's lines (`2024-05-01T10:00:07Z`), its `line N`, its
    sequential numbers and numbered ids (`job 40012`, `HAT170`), and the request, trace and span ids or UUIDs a log
    writes on every line (`9f86d081884c7d65`, `123e4567-e89b-...`: a new user's trial of issue 20 found a span id
    on every line taking a log's whole list, each span id a shape of its own when only decimal runs were folded).
    Remembered (`_SHAPES`): a bounded list asks it of every value it may list, and the same values (a date, a
    status) recur across the results of a history."""
    found = _SHAPES.items.get(value)
    if found is None:
        found = _HEX_RUN.sub(_run_shape, value.casefold())
        _SHAPES.put(value, len(value), found)
    return found


_SHAPES: Bounded[str] = Bounded(65_536, 4_000_000)
"""The shapes of the values asked about (`shape`; at most 65,536 values, 4,000,000 characters of them): a firing
compaction of 8,000 messages asks 36,962 times about 5,795 values. Forgotten by `_memo.clear`."""
remembers(_SHAPES.clear)


def rarity_order(values: Sequence[str], *, newest_first: bool = True,
                 counts: Mapping[str, int] | None = None) -> list[int]:
    """The indices of `values` (identifiers' values, in their order of appearance) in the order a bounded list
    takes them: one value of each shape (`shape`) first, then a second of each, and so on (a shape counts once a
    round: a log whose every line has a timestamp, a `line N` or a sequential number gives one of each in the first
    round, beside its rare ids: a UUID, an address, a digest, a code); within a round, the values of the rarer
    shapes (fewer values) first; then by position, the most recent first with `newest_first`, else the earliest.
    A function of `values` alone: the same values give the same order (issue 20, class 8). `counts` (shape ->
    number of values), when `values` leaves out the later values of some shapes (`FactGuard.first`: those that
    cannot be listed), gives the shapes' counts in the whole list; the order of the values given is theirs in the
    order of the whole list (with `newest_first` False)."""
    shapes = [shape(v) for v in values]
    count: dict[str, int] = {}
    for s in shapes:
        count[s] = count.get(s, 0) + 1
    if counts is not None:
        count.update(counts)
    keys: list[tuple[int, int, int]] = [(0, 0, 0)] * len(values)
    taken: dict[str, int] = {}
    for rank, i in enumerate(range(len(values) - 1, -1, -1) if newest_first else range(len(values))):
        s = shapes[i]
        round_ = taken.get(s, 0)
        taken[s] = round_ + 1
        keys[i] = (round_, count[s], rank)
    return sorted(range(len(values)), key=keys.__getitem__)


def choose(values: Sequence[str], fits: Callable[[list[int]], bool], *, newest_first: bool = True,
           counts: Mapping[str, int] | None = None) -> list[int]:
    """The one rule of every bounded list of identifiers (a summary's or a drop marker's facts lines, a truncation
    note's list, a progress note's line and its counted line): the indices of `values` that the list keeps, in
    their own order (ascending), the largest prefix of `rarity_order(values, newest_first=...)` for which
    `fits(indices)` holds (`fits` monotone: more values never fit better; a binary search, O(log n) calls). All of
    them when they all fit; the list's text keeps the values' order, so it is byte-stable for the same input.
    `counts`: as in `rarity_order`."""
    ranked = rarity_order(values, newest_first=newest_first, counts=counts)
    if fits(list(range(len(values)))):
        return list(range(len(values)))
    lo, hi = 0, len(ranked) - 1
    while lo < hi:
        k = (lo + hi + 1) // 2
        if fits(sorted(ranked[:k])):
            lo = k
        else:
            hi = k - 1
    return sorted(ranked[:lo])


def fits_chars(values: Sequence[str], max_chars: int) -> Callable[[list[int]], bool]:
    """For `choose`: whether the values at the indices, joined by `FACTS_SEPARATOR`, fit `max_chars` characters."""
    def fits(indices: list[int]) -> bool:
        return sum(len(values[j]) for j in indices) + len(FACTS_SEPARATOR) * max(0, len(indices) - 1) <= max_chars
    return fits


def parse_said(text: str) -> list[str]:
    """The user turns kept by the said lines of `text` (`SAID_PREFIX`), in order."""
    out: list[str] = []
    decoder = json.JSONDecoder()
    for line in text.splitlines():
        if not line.startswith(SAID_PREFIX):
            continue
        at = len(SAID_PREFIX)
        while at < len(line) and line[at] == '"':
            try:
                turn, at = decoder.raw_decode(line, at)
            except ValueError:
                break
            if isinstance(turn, str):
                out.append(turn)
            at += len(FACTS_SEPARATOR) if line.startswith(FACTS_SEPARATOR, at) else 0
    return out


EXCERPT_GAP = " … "
"""Between the sentences of a long user turn that a said line quotes (`directive_excerpt`): what was left out."""

_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?=\S))*(?:[.!?]+|\n|$)")
"""A sentence of a user's turn: up to its end mark (`.`, `!`, `?` before a space or the end: the dots of
`10.0.12.7:8443` or `v2.1` end nothing) or a line break."""

_LOG_LINE = re.compile(r"(?i)\W{0,3}(?:\d|line \d)")
"""The start of a line of a log pasted in a user's turn (its timestamp, its number, `line N`): data, not an
instruction, even when it holds an imperative word ("12: use fallback"); `directive_excerpt` skips it."""

_DIRECTIVE = re.compile(
    r"(?i)\b(?:instead|don'?t|do not|never|always|must|stop|switch|prefer|rather|actually|wrong|correction|"
    r"avoid|use|only|make sure|from now on)\b")
"""The words that make a sentence an instruction or a correction ("do not use the batch pipeline, use the streaming
one", "actually, the date is wrong"): chosen by hand from English imperatives and correction words, not fitted to
data. In the shared tau-bench conversations, user turns hold "use" 30 times, "instead" 12, "actually" 6 and "do
not" once (counted with grep over the recorded user messages)."""


def directive_excerpt(text: str, max_chars: int = SAID_TURN_CHARS) -> str:
    """The sentences of a user turn longer than `max_chars` characters that give an instruction or a correction
    (`_DIRECTIVE`), each word for word, joined by `EXCERPT_GAP`, the latest that fit in `max_chars` characters (a
    correction comes after what it explains), in their order; "" when none does. A long turn is a request whose
    identifiers the facts lines keep; its words that change what the agent must do are kept this way (issue 20,
    class 8: "use the streaming pipeline", said at the end of a 300-character message, was lost). Sentences are
    read before whitespace is collapsed (a line break ends one) and each is then collapsed; a line of a pasted log
    (`_LOG_LINE`) is none, and one longer than `max_chars` alone is skipped (a numbered log pasted before the
    correction does not push it out)."""
    sentences = [" ".join(s.split()) for s in _SENTENCE.findall(text)]
    picked: list[str] = []
    size = 0
    for sentence in reversed([s for s in sentences if s and not _LOG_LINE.match(s) and _DIRECTIVE.search(s)]):
        if len(sentence) > max_chars:
            continue
        size += len(sentence) + (len(EXCERPT_GAP) if picked else 0)
        if size > max_chars:
            break
        picked.append(sentence)
    return EXCERPT_GAP.join(reversed(picked))


def said_turns(messages: Iterable[BaseMessage]) -> list[str]:
    """The user's words of `messages` that a said line keeps, oldest first: the text of each user message (not a
    summary) of at most `SAID_TURN_CHARS` characters once its whitespace is collapsed, of a longer one its
    instructions and corrections (`directive_excerpt`), and the turns that the said lines of a drop marker or a
    summary among them keep (`parse_said`)."""
    out: list[str] = []
    for m in messages:
        if is_summary(m):
            out.extend(parse_said(summary_text(m)))
        elif is_dropped_marker(m):
            out.extend(parse_said(dropped_marker_facts(m)))
        elif isinstance(m, HumanMessage):
            raw = content_text(m.content)
            text = " ".join(raw.split())
            if text and len(text) <= SAID_TURN_CHARS:
                out.append(text)
            elif text and (excerpt := directive_excerpt(raw)):
                out.append(excerpt)
    return out


def is_facts_line(line: str) -> bool:
    """Whether `line` is one of the guard's identifier lines (identifiers, or tool-derived identifiers)."""
    return line.startswith((FACTS_PREFIX, TOOL_FACTS_PREFIX))


def is_guard_line(line: str) -> bool:
    """Whether `line` is one the guard appends: a facts line (`is_facts_line`) or a said line (`SAID_PREFIX`)."""
    return line.startswith((FACTS_PREFIX, TOOL_FACTS_PREFIX, SAID_PREFIX))


Extraction = tuple[tuple[int, str, str], ...]
"""What a guard's patterns found in a text (`FactGuard._found`): its matches as (start, value, kind). Tuples of
strings and numbers, which the garbage collector stops tracking: a memo of `Identifier` objects (hundreds of
thousands for identifier-dense results) made every full collection of the process walk them all, a pause of its own
in whichever call it fell on."""

_SHARED_EXTRACTIONS: Bounded[Extraction] = Bounded(_EXTRACT_CACHE, _EXTRACT_CACHE_CHARS)
"""The extractions of every guard with the built-in patterns (`DEFAULT_PATTERNS`, no extra ones): the same result
read by a new policy's guard (a restarted door, another thread's policy, the view mode's compaction of the same
originals) is not read again; what the patterns find depends on the text alone. Forgotten by `_memo.clear`."""
remembers(_SHARED_EXTRACTIONS.clear)


class FactGuard:
    """Extracts identifiers and appends the ones a summary misses.

    Args:
        extra_patterns: more patterns, kind -> regular expression (a group 1, if any, is the identifier); they
            run after the built-in ones (a span already taken is not matched twice). A sequence of expressions
            is accepted too (kinds "custom_0", "custom_1", ...).
        patterns: replace the built-in patterns entirely (default `DEFAULT_PATTERNS`).
        max_tokens: bound of the facts line in tokens (default `DEFAULT_MAX_FACT_TOKENS`); when the identifiers
            do not all fit, `choose` keeps one of each shape first, the most recent first.
        said_chars: bound of the said line (`said_line`: a user's short turns kept word for word in a drop
            marker or a summary), in characters (default `DEFAULT_SAID_CHARS`; 0: no said line).

    Raises:
        ValueError: a pattern does not compile (naming its kind), `max_tokens` < 1 or `said_chars` < 0.
    """

    def __init__(self, extra_patterns: Mapping[str, str] | Sequence[str] | None = None, *,
                 patterns: Mapping[str, str] | None = None, max_tokens: int = DEFAULT_MAX_FACT_TOKENS,
                 said_chars: int = DEFAULT_SAID_CHARS):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens: the facts line bound must be a positive int (tokens), got {max_tokens!r}")
        if isinstance(said_chars, bool) or not isinstance(said_chars, int) or said_chars < 0:
            raise ValueError(f"said_chars: the said line bound must be an int >= 0 (characters), got {said_chars!r}")
        self.max_tokens = max_tokens
        self.said_chars = said_chars
        base = dict(DEFAULT_PATTERNS if patterns is None else patterns)
        if extra_patterns is not None and not isinstance(extra_patterns, Mapping):
            if isinstance(extra_patterns, str):
                extra_patterns = [extra_patterns]
            extra_patterns = {f"custom_{i}": p for i, p in enumerate(extra_patterns)}
        base.update(extra_patterns or {})
        self.patterns: dict[str, re.Pattern[str]] = {}
        for kind, expr in base.items():
            try:
                self.patterns[kind] = re.compile(expr)
            except re.error as exc:
                raise ValueError(f"fact guard pattern {kind!r} does not compile: {exc}") from exc
        self._needs = {k: _NEEDS[k] for k, expr in base.items() if k in _NEEDS and DEFAULT_PATTERNS.get(k) == expr}
        self._fast = {k: _fast(k) for k, expr in base.items() if k in _FAST and DEFAULT_PATTERNS.get(k) == expr}
        default = patterns is None and not extra_patterns
        self._cache: Bounded[Extraction] = (_SHARED_EXTRACTIONS if default
                                             else Bounded(_EXTRACT_CACHE, _EXTRACT_CACHE_CHARS))

    @property
    def builtin(self) -> bool:
        """Whether the guard extracts with the built-in patterns alone (`DEFAULT_PATTERNS`, no extra ones): then
        what it finds in a text is what every such guard finds (they share their extractions,
        `_SHARED_EXTRACTIONS`), and what is made of it may be shared too (`strategies.truncate`'s notes)."""
        return self._cache is _SHARED_EXTRACTIONS

    # ------------------------------------------------------------------ extraction
    def extract(self, text: str) -> list[Identifier]:
        """Identifiers in `text`, distinct values in order of first appearance. Linear in the text's length, and
        O(m log m) in the matches."""
        return _distinct(i for _, i in self._found(text))

    def read_back(self, text: str) -> Presence:
        """What a later compaction finds in `text`: the values the guard extracts from it (`extract`), to ask
        `identifier in read_back(text)` (`Presence`: case-insensitive, whole alphanumeric runs). Text that merely
        contains an identifier may not give it back: a letter-only code (`IFOYYZ`) that the guard took from its
        key in a tool result (`"reservation_id": "IFOYYZ"`) is no identifier in a user's words ("the codes are
        IFOYYZ and ..."). A list that leaves out what a text holds must ask this, not `contains`: when that text
        is itself left out later (a quote the said line's bound omits, a ledger entry its bound drops), the
        identifier is read from it or lost."""
        return presence("\n".join(i.value for i in self.extract(text)))

    def first(self, text: str, keep: Callable[[Identifier], bool], max_chars: int, *,
              keys: bool = False, then: Iterable[Identifier] = ()) -> tuple[list[str], int]:
        """The identifiers of `text` that `keep` accepts (distinct values), then those of `then` it accepts (a
        truncated result's listed ones), as many as fit in `max_chars` characters joined by `FACTS_SEPARATOR`,
        chosen by `choose` (the earliest of each round of shapes first: a log's timestamps count once, its rare ids
        are kept) and listed in their order; and how many accepted ones were left out. The text is read
        `EXTRACT_CHUNK` characters at a time (cut after a line or a JSON value, `_cut`), to its end (a rare id may be
        its last). `keep` is asked about an identifier by its value (it gets it without its key), once per value: a
        value it refused is not asked about again. With `keys` (for a `keyed` text), each listed one is written
        `key: value` when it is the value of a field (`Identifier.key`, `_item`), if the list with its keys fits
        `max_chars` too: the bound chooses the identifiers by their values alone, so a key never takes an
        identifier's place (`keys_fit`).

        Only the values that can be listed enter `choose`: the values of one shape are taken in their order, one a
        round, so the k-th value of a shape is listed only with the k - 1 before it; once those values and their
        separators are over `max_chars`, that value (kept to stop `choose` there) and the later ones of its shape
        are only counted (in the "left out" count, and in their shape's count, which orders the rounds). The keys
        are looked up for the listed ones alone."""
        accepted = 0  # distinct values `keep` accepted
        entries: list[Identifier] = []  # those that may be listed, in order (`choose` reads these)
        places: list[tuple[int, int]] = []  # each entry's (chunk, start in it), for its key
        chunks: list[tuple[int, int]] = []  # (at, end) of each chunk read
        seen: set[str] = set()  # accepted values, case-folded
        refused: set[str] = set()  # values `keep` refused
        shapes: dict[str, list[int]] = {}  # shape -> [values accepted, characters of the first ones and separators]
        sep = len(FACTS_SEPARATOR)

        def accept(ident: Identifier, chunk: int, start: int) -> None:
            nonlocal accepted
            accepted += 1
            value = ident.value
            tally = shapes.get(s := shape(value))
            if tally is None:
                tally = shapes[s] = [0, -sep]
            tally[0] += 1
            if tally[1] <= max_chars:  # a shape still listable: this value enters `choose` (the last one over it too)
                tally[1] += len(value) + sep
                entries.append(ident)
                places.append((chunk, start))

        at = 0
        floor = 0  # matches starting before this were read from the chunk before (its context read again)
        while at < len(text):
            end = _cut(text, at)
            chunk = text[at:end]
            found = self._found_from(text, at, end)
            if floor > at:
                found = [(start, ident) for start, ident in found if at + start >= floor]
            if end < len(text):  # a match near the cut may be a piece of one that goes on: read it with the next
                late = min((start for start, ident in found if start + len(ident.value) > len(chunk) - EDGE_CHARS),
                           default=0)
                if late > 0:
                    found = [(start, ident) for start, ident in found if start < late]
                    # the next chunk starts EDGE_CHARS before it: its context too (a key before its value)
                    floor, end = at + late, at + (late - EDGE_CHARS if late > EDGE_CHARS else late)
            number = len(chunks)
            chunks.append((at, at + len(chunk)))
            for start, ident in found:
                value = ident.value
                if value in refused:
                    continue
                folded_value = value.casefold()
                if folded_value in seen:
                    continue
                if keep(ident):
                    seen.add(folded_value)
                    accept(ident, number, start)
                else:
                    refused.add(value)
            at = end
        for ident in then:
            if ident.value not in refused and ident.value.casefold() not in seen:
                if keep(ident):
                    seen.add(ident.value.casefold())
                    accept(ident, -1, 0)
                else:
                    refused.add(ident.value)
        values = [i.value for i in entries]
        counts = {s: tally[0] for s, tally in shapes.items()}
        picked = choose(values, fits_chars(values, max_chars), newest_first=False, counts=counts)
        shown = [entries[j] for j in picked]
        if keys and shown:
            shown = self._keyed(text, chunks, [places[j] for j in picked], shown)
        return _items(shown, max_chars), accepted - len(shown)

    @staticmethod
    def _keyed(text: str, chunks: Sequence[tuple[int, int]], places: Sequence[tuple[int, int]],
               identifiers: Sequence[Identifier]) -> list[Identifier]:
        """`identifiers` (found at `places`: (chunk, start in it), chunk -1 for one not of `text`) each with its key
        as `first` reads it: the last key of its chunk before it (`_Keys`), else the last key of the chunks before
        it (of the nearest one that has one); the chunks' keys searched only as far back as that."""
        spans: dict[int, list[tuple[int, int, str]]] = {}
        lasts: dict[int, str | None] = {0: None}  # chunk -> the last key of the chunks before it

        def spans_of(c: int) -> list[tuple[int, int, str]]:
            if c not in spans:
                a, b = chunks[c]
                spans[c] = _key_spans(text[a:b])
            return spans[c]

        def last_before(c: int) -> str | None:
            k = c
            while k not in lasts:  # chunk k - 1 has a key, or the last key before it is chunk k - 1's
                found = spans_of(k - 1)
                if found:
                    lasts[k] = found[-1][2]
                    break
                k -= 1
            for j in range(k + 1, c + 1):  # the chunks between have no key
                lasts[j] = lasts[k]
            return lasts[c]

        keyers: dict[int, _Keys] = {}
        out = []
        for (c, start), ident in zip(places, identifiers):
            if c < 0:
                out.append(ident)
                continue
            keyer = keyers.get(c)
            if keyer is None:
                a, b = chunks[c]
                keyer = keyers[c] = _Keys(text[a:b], last_before(c), spans_of(c))
            out.append(keyer.of(start, ident))
        return out

    def _found(self, text: str, pos: int = 0) -> list[tuple[int, Identifier]]:
        """Every identifier match in `text` with its start, sorted by start (spans disjoint), from `pos` on (`_search`);
        remembered for the last `_EXTRACT_CACHE` texts (`_EXTRACT_CACHE_CHARS` characters), by every guard of the
        built-in patterns (`_SHARED_EXTRACTIONS`), under the text (with `pos`, when it is not 0)."""
        key = (pos, text) if pos else text
        cached = self._cache.items.get(key)
        if cached is not None:
            return [(start, Identifier(value, kind)) for start, value, kind in cached]
        found = self._search(text, pos)
        self._cache.put(key, len(text), tuple([(start, ident.value, ident.kind) for start, ident in found]))
        return found

    def _found_from(self, text: str, at: int, end: int) -> list[tuple[int, Identifier]]:
        """`_found(text[at:end])` for a chunk of `text` (`first`), with starts in the chunk; a chunk that starts
        inside a word (after no whitespace: a cut that found no line break or space, a chunk read again from
        `EDGE_CHARS` before a match) is searched with what comes before it as context (`_search`'s `pos`: a
        lookbehind sees it, as in the whole text), so that no match starts inside that word and takes the place of
        the one after it (a hypothesis example of `test_facts.py`: `...tranſactionx.py::test_ax.py::test_aJan`
        read from inside the first word lost the pytest id). Remembered as `_found` remembers a text (a text read
        again in the same chunks: the head of a cut result, read again for the truncation note of the cut)."""
        if at == 0 or text[at - 1].isspace():
            return self._found(text[at:end])
        lead = min(at, _LEAD_CHARS)
        return [(start - lead, ident) for start, ident in self._found(text[at - lead:end], lead)]

    def _search(self, text: str, pos: int = 0) -> list[tuple[int, Identifier]]:
        """Every identifier match in `text` with its start, sorted by start: each pattern in order (`_NEEDS`
        skips those that cannot match, `_FAST` searches a built-in one), a match kept when its value (`_trim`)
        overlaps no span an earlier one kept; from `pos` on (a lookbehind sees the characters before it)."""
        starts: list[int] = []  # the spans taken so far, disjoint, sorted by start (bisect keeps it so)
        ends: list[int] = []
        found: list[tuple[int, Identifier]] = []
        needs, fast = self._needs, self._fast
        for kind, pattern in self.patterns.items():
            need = needs.get(kind)
            if need is not None and not need(text):
                continue
            grouped = pattern.groups > 0
            for m in fast.get(kind, pattern).finditer(text, pos):
                group = 1 if grouped and m.group(1) is not None else 0
                start = m.start(group)
                value = m.group(group)
                if value and value[-1] in _TRAILING:
                    value = _trim(value)
                end = start + len(value)
                k = bisect.bisect_left(starts, end)  # spans starting before `end`: only the last can overlap
                if (k and ends[k - 1] > start) or not value.strip():
                    continue
                starts.insert(k, start)
                ends.insert(k, end)
                found.append((start, Identifier(value, kind)))
        found.sort(key=_start)
        return found

    def extract_result(self, message: BaseMessage) -> list[Identifier]:
        """Identifiers of a tool result as it was before any truncation, distinct, in order: of a result compaction
        shortened (a truncation note, an arrival preview, a cut: `markers.result_parts`), those of what it shows of
        the original, then those its note lists (read back verbatim, kind "carried", with their keys), never the
        note's own words, sizes, store key or recall instruction; of a `keyed` tool result, each with the key of its
        field (`Identifier.key`); of any other message, `extract(message_text(m))`."""
        if not isinstance(message, ToolMessage):
            return self.extract(message_text(message))
        text = message_text(message)
        own, listed = result_parts(text)
        found = _with_keys(own, self._found(own))[0] if keyed(own) else self._found(own)
        if own is text:
            return _distinct(i for _, i in found)
        return _distinct([*(i for _, i in found), *(_carried(v) for v in _values(listed))])

    def extract_messages(self, messages: Iterable[BaseMessage], *,
                         memo: dict[Any, Any] | None = None) -> list[Identifier]:
        """Identifiers of several messages, oldest first (distinct values), each with its `source`: the tool
        whose result it first occurs in, when it occurs in tool results (or the fenced part of an earlier
        summary, drop marker or progress note) and in no user or system message (nor the unfenced part of an
        earlier summary); else None. For a summary message, and for a drop marker (`markers.make_dropped_marker`),
        the identifiers of its facts lines come first (they are older than its prose), read back verbatim with
        their attribution; a truncation note gives the identifiers of the original it names
        (`extract_result`); in an assistant message, an identifier inside a fence (a progress note's results) is
        its fence's tool's.

        `memo` (a dict the caller keeps, e.g. for one compaction): each message's own identifiers and trusted text
        are remembered there by message object (and a result's tool), so a list read again with more messages
        (a drop marker that grows over several drops) reads each message once; the result is the same."""
        messages = list(messages)
        found: list[Identifier] = []
        trusted: list[str] = []  # what the user (or the system) said: its identifiers are never tool-derived
        names = tool_names(messages)
        for m in messages:
            tool = tool_of(m, names) if isinstance(m, ToolMessage) else None
            key = ("extract_messages", id(m), tool)
            seen = memo.get(key) if memo is not None else None
            if seen is None or seen[0] is not m:
                own: list[Identifier] = []
                said: list[str] = []
                self._message_identifiers(m, tool, own, said)
                seen = (m, own, said)
                if memo is not None:
                    memo[key] = seen
            found.extend(seen[1])
            trusted.extend(seen[2])
        return _attributed(found, "\n".join(trusted))

    def _message_identifiers(self, m: BaseMessage, tool: str | None, found: list[Identifier],
                             trusted: list[str]) -> None:
        """One message's part of `extract_messages`: its identifiers (`found`) and what of it is trusted text."""
        if is_summary(m):
            text = summary_text(m)
            carried = parse_facts(text)
            found.extend(carried)
            trusted.extend(i.value for i in carried if i.source is None)
            body = "\n".join(line for line in text.splitlines() if not is_facts_line(line))
            found.extend(self._fenced(body))
            trusted.append(outside_fences(body))
        elif isinstance(m, ToolMessage):
            found.extend(i.with_source(tool) for i in self.extract_result(m))
        elif isinstance(m, (HumanMessage, SystemMessage)):
            trusted.append(message_text(m))
            found.extend(self.extract(message_text(m)))
        elif is_dropped_marker(m):  # the agent's voice: its plain identifiers are not the user's
            facts = dropped_marker_facts(m)
            said = "\n".join(parse_said(facts))  # but its quotes of the user are (`said_line`)
            trusted.append(said)
            found.extend(self.extract(said))
            found.extend(parse_facts(facts))
        elif isinstance(m, AIMessage) and note_lines(m):  # a progress note, then the message's own text
            for line in note_lines(m):
                call, listed = split_line(line)
                found.extend(self._fenced(call))
                found.extend(parse_listed(listed))
            found.extend(self._fenced(message_text(without_note(m))))
        else:
            found.extend(self._fenced(message_text(m)))

    def _fenced(self, text: str) -> list[Identifier]:
        """Every identifier match in `text` (not made distinct: `_attributed` does), each one inside a fence
        attributed to the fence's tool (`markers.fence_label`, "tool" when it names none)."""
        if UNTRUSTED_DATA_FENCE[0] not in text:
            return self.extract(text)
        spans = fenced_spans(text)
        out = []
        for start, ident in self._found(text):
            tool = next((fence_label(text[a:b]) or "tool" for a, b in spans if a <= start < b), None)
            out.append(ident.with_source(tool))
        return out

    # ------------------------------------------------------------------ the guard
    def facts_line(self, identifiers: Sequence[Identifier], count_text: Callable[[str], int],
                   max_tokens: int | None = None, redact: Callable[[str], str] | None = None, *,
                   keys: bool = True) -> tuple[str, int]:
        """The line(s) listing `identifiers` (oldest first), bounded by `max_tokens` (default `self.max_tokens`)
        tokens of `count_text`; when they do not all fit, those `choose` takes (one of each shape a round, the most
        recent first: a log's timestamps do not push out its rare ids), listed in their order, chosen by their values
        alone: their keys (`_item`: `price: 136`) are written only if the line with them still fits (`keys_fit`),
        and never with `keys` False. Identifiers with a `source` go on the tools' line, each tool's fenced. `redact`
        (a callable on text) is applied to each value. Returns (the lines joined by a newline, number omitted);
        ("", 0) for none."""
        if not identifiers:
            return "", 0
        bound = self.max_tokens if max_tokens is None else max_tokens
        shown = [replace(i, value=redact(i.value)) for i in identifiers] if redact else list(identifiers)

        def rendered(indices: list[int], *, keyed: bool = False) -> str:
            return self._render([shown[j] for j in indices], len(shown) - len(indices), keys=keyed)

        picked = choose([i.value for i in shown], lambda indices: count_text(rendered(indices)) <= bound)
        if not picked:
            return "", len(shown)
        line = rendered(picked)
        if keys and any(shown[j].key for j in picked):
            keyed = rendered(picked, keyed=True)
            if count_text(keyed) <= bound:
                line = keyed
        return line, len(shown) - len(picked)

    @staticmethod
    def _render(identifiers: Sequence[Identifier], omitted: int, *, keys: bool = True) -> str:
        item = _item if keys else _value
        plain = [defang(item(i)) for i in identifiers if i.source is None]
        tools: dict[str, list[str]] = {}
        for i in identifiers:
            if i.source is not None:
                tools.setdefault(i.source, []).append(item(i))
        lines = []
        if plain:
            lines.append(FACTS_PREFIX + FACTS_SEPARATOR.join(plain))
        if tools:
            lines.append(TOOL_FACTS_PREFIX + " ".join(fence(FACTS_SEPARATOR.join(v), t) for t, v in tools.items()))
        return "\n".join(lines) + (FACTS_OMITTED.format(n=omitted) if omitted else "")

    def said_line(self, messages: Iterable[BaseMessage], max_chars: int | None = None, *, besides: str = "") -> str:
        """The line that keeps the short user turns of `messages` word for word (`said_turns`): `SAID_PREFIX`, then
        each turn as a JSON string (its fence strings neutralized, `markers.defang`), `FACTS_SEPARATOR` between
        them, oldest first; as many as fit in `max_chars` characters (default `self.said_chars`), taken in this
        order: one turn of each shape a round (`shape`: turns that differ only in their numbers, "look at the logs of
        service 3", count once a round), in a round the turns that give an instruction or a correction
        (`_DIRECTIVE`: "Correction for RQ-FACADE: use the streaming pipeline") first, then the rarer shapes, then
        the most recent (issue 20, class 8: a correction older than a run of routine turns was left out while its
        reference code survived); then
        " (+n older omitted)" when some did not fit. A turn that `besides` (the text the line goes with) holds word
        for word, and a repeated one, is not quoted again. "" when there is none (or the bound is 0)."""
        bound = self.said_chars if max_chars is None else max_chars
        if not bound:
            return ""
        near = " ".join(besides.split())
        turns = list(dict.fromkeys(t for t in said_turns(messages)
                                   if not all(part in near for part in t.split(EXCERPT_GAP))))
        quoted = [json.dumps(defang(turn), ensure_ascii=False) for turn in turns]
        # one turn of each shape a round (turns that differ only in their numbers are one shape: `shape`), in a
        # round the instructions and corrections first, then the rarer shapes, then the most recent
        shapes = [shape(t) for t in turns]
        count = Counter(shapes)
        rounds: Counter[str] = Counter()
        keys: dict[int, tuple[int, bool, int, int]] = {}
        for rank, j in enumerate(range(len(turns) - 1, -1, -1)):
            keys[j] = (rounds[shapes[j]], not _DIRECTIVE.search(turns[j]), count[shapes[j]], rank)
            rounds[shapes[j]] += 1
        order = sorted(range(len(turns)), key=keys.__getitem__)
        kept: set[int] = set()
        size = 0
        for j in order:  # the longest run of that order that fits
            size += len(quoted[j]) + (len(FACTS_SEPARATOR) if kept else 0)
            if size > bound:
                break
            kept.add(j)
        if not kept:
            return ""
        omitted = len(turns) - len(kept)
        return (SAID_PREFIX + FACTS_SEPARATOR.join(quoted[j] for j in sorted(kept))
                + (FACTS_OMITTED.format(n=omitted) if omitted else ""))

    def guard(self, summary: str, identifiers: Sequence[Identifier], count_text: Callable[[str], int],
              max_tokens: int | None = None, redact: Callable[[str], str] | None = None,
              said_from: Sequence[BaseMessage] = (), said_chars: int | None = None, *,
              keys: bool = True) -> GuardResult:
        """Append to `summary` the short user turns of `said_from` (the messages it replaces) that it does not hold
        word for word (`said_line`, bounded by `said_chars` characters, default `self.said_chars`), then the
        identifiers it does not contain (see `facts_line`, and `keys`; `redact` applies to their values): those
        it does not hold as the guard reads it back (`read_back`), so a merge of this summary finds them all. Any
        said or facts line already in `summary` is replaced by the new ones."""
        own = "\n".join(line for line in summary.splitlines() if not is_guard_line(line)).rstrip()
        said = self.said_line(said_from, said_chars, besides=own) if said_from else ""
        body = (f"{own}\n\n{said}" if own else said) if said else own
        kept = sum(1 for i in identifiers if contains(own, i))  # what the summary's own text holds
        back = self.read_back(body)  # a merge reads the summary again: what it would not find is listed
        missing = [i for i in identifiers if not (contains(body, i) and i in back)]
        line, omitted = self.facts_line(missing, count_text, max_tokens, redact, keys=keys)
        text = f"{body}\n\n{line}" if line and body else (line or body)
        return GuardResult(text=text, identifiers=list(identifiers), kept_by_summary=kept,
                           added=len(identifiers) - kept - omitted, omitted=omitted)


def fact_guard_of(setting: Any) -> FactGuard | None:
    """The guard a strategy's `fact_guard` setting names: a `FactGuard` itself, True for `FactGuard()`, False for
    none.

    Raises:
        ValueError: `setting` is of another type.
    """
    if not isinstance(setting, (bool, FactGuard)):
        raise ValueError(f"fact_guard: expected True, False or a FactGuard, got {type(setting).__name__}")
    return setting if isinstance(setting, FactGuard) else FactGuard() if setting else None


def tool_names(messages: Iterable[BaseMessage]) -> dict[Any, str]:
    """The tool names of the calls of `messages`, for the results that carry none (OpenAI-format recordings): each
    result paired with its call by position, as on the wire (`structure.tool_pairs`: a tool-call id may be
    reused by another turn), under `id(result)`; and under each tool-call id the name of its latest call, for a
    result outside a tool block. Read it with `tool_of`."""
    msgs = list(messages)
    calls = {i: found for i, m in enumerate(msgs) if (found := tool_calls_of(m))}  # each message's calls, read once
    out: dict[Any, str] = {c.get("id") or "": c.get("name") or "tool" for made in calls.values() for c in made}
    for t, (a, tcid) in tool_pairs(msgs).items():
        out[id(msgs[t])] = next((c.get("name") for c in calls[a] if c.get("id") == tcid), None) or "tool"
    return out


LISTED_IDENTIFIER_CHARS = 300
"""Bound of the identifiers a truncation note (by default) and the last resort's cut of a tool result list, in
characters (the values and their `"; "` separators). Measured on the tool results of the shared traces that
truncation takes (over `preview_chars` + 120 characters) with the default preview: the longest list a tau-bench
airline result needed was 260 characters (median 110), so every one fits whole; AgentDojo's file listings and
inboxes need up to 3,012 (median 108), where the bound keeps the note a small part of the result. The same bound as
a progress note line's (`progress.FACTS_CHARS`)."""


def identifiers_beyond(guard: FactGuard, text: str, shown: str, tool: str | None, max_chars: int) -> str:
    """The identifiers of `text` that `shown` (what a note or a cut keeps of it) does not hold, in order, fenced and
    attributed to `tool`, at most `max_chars` characters of them (`FactGuard.first`: chosen by `choose`, with keys
    for a `keyed` text), then "(+n more)" when some were left out; "" when there are none. What a truncation note
    (`strategies.truncate`) and the last resort's cut of a tool result (`shorten`) list of what they remove."""
    in_shown = Presence(shown)
    listed, left = guard.first(text, in_shown.lacks, max_chars, keys=keyed(text))
    if not listed:
        return ""
    return f"{fence(FACTS_SEPARATOR.join(listed), tool)}{f' (+{left} more)' if left else ''}"


def tool_of(message: ToolMessage, names: dict[Any, str]) -> str:
    """The name of the tool that returned `message`: its own `name`, else its call's (`tool_names`), else "tool"."""
    return message.name or names.get(id(message)) or names.get(message.tool_call_id) or "tool"


def source_alone(message: BaseMessage) -> str | None:
    """The `source` of every identifier of a tool result read alone (`FactGuard.extract_messages([message])`: the
    tool that returned it, by its own name, `tool_of`; no other message of the list, so no call, names it), for a
    caller that compares such identifiers with others by value and source; None for any other message (a summary
    too): its identifiers may carry any source."""
    if not isinstance(message, ToolMessage) or is_summary(message):
        return None
    return tool_of(message, tool_names([message]))


def trusted_text(messages: Iterable[BaseMessage]) -> str:
    """What the user (or the system) said in `messages`: the text of their user and system messages and the
    unfenced part of their summaries (facts lines included). An identifier found there is never tool-derived."""
    parts = []
    for m in messages:
        if is_summary(m):
            parts.append(outside_fences(summary_text(m)))
        elif isinstance(m, (HumanMessage, SystemMessage)):
            parts.append(message_text(m))
    return "\n".join(parts)


def trust(identifiers: Sequence[Identifier], messages: Iterable[BaseMessage]) -> list[Identifier]:
    """`identifiers` with no `source` for those that `trusted_text(messages)` contains (the user said them
    somewhere in the history, e.g. in a request the summary does not replace)."""
    said = trusted_text(messages)
    return [i.with_source(None) if i.source is not None and contains(said, i) else i for i in identifiers]


def _attributed(found: Iterable[Identifier], trusted: str) -> list[Identifier]:
    """Distinct identifiers (first occurrence), each with the first tool it came from, unless `trusted` (what
    the user or the system said) contains it."""
    first: dict[str, Identifier] = {}
    tool: dict[str, str] = {}
    for i in found:
        key = i.value.casefold()
        first.setdefault(key, i)
        if i.source is not None:
            tool.setdefault(key, i.source)
    out = []
    for key, i in first.items():
        source = tool.get(key)
        if source is not None and trusted and contains(trusted, i):
            source = None
        out.append(i if i.source == source else i.with_source(source))
    return out


class _Keys:
    """The keys of one text (`_KEYS`, searched once, or `spans`: its `_key_spans`), for identifiers asked about one
    at a time by their start: `of(start, ident)` is what `_with_keys` gives it, and `last` the text's last key (or
    `before`, the one before the text)."""

    __slots__ = ("_spans", "_ends", "_before", "last")

    def __init__(self, text: str, before: str | None, spans: list[tuple[int, int, str]] | None = None):
        self._spans = _key_spans(text) if spans is None else spans
        self._ends = [e for _, e, _ in self._spans]
        self._before = before
        self.last = self._spans[-1][2] if self._spans else before

    def of(self, start: int, ident: Identifier) -> Identifier:
        spans = self._spans
        k = bisect.bisect_right(self._ends, start)
        if k < len(spans) and spans[k][0] <= start:
            return ident  # inside the next key: the identifier is a key
        key = spans[k - 1][2] if k else self._before
        return ident.with_key(key.strip()) if key and key.strip() else ident


def _with_keys(text: str, found: Sequence[tuple[int, Identifier]], last: str | None = None
               ) -> tuple[list[tuple[int, Identifier]], str | None]:
    """`found` (the matches of `text`, by start) each with its key (`Identifier.key`): the last key of `text`
    (`_KEYS`) before it, `last` (the key before `text`, for a text read in chunks) when there is none; an
    identifier that is itself a key (`{"HAT170": {...}}`) gets none. Returns them and the last key of `text` (or
    `last`). One search of `text` for its keys, then a bisection per identifier."""
    keyer = _Keys(text, last)
    return [(start, keyer.of(start, ident)) for start, ident in found], keyer.last


def _distinct(items: Iterable[Identifier]) -> list[Identifier]:
    seen: set[str] = set()
    out: list[Identifier] = []
    for i in items:
        key = i.value.casefold()
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out
