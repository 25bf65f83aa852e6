"""The fact guard: identifiers that a summary must not silently lose.

Before a summary replaces messages, the identifiers in those messages are extracted deterministically (regular
expressions, no model): order / ticket / reservation / invoice ids, numbers of 3+ digits, codes like `WH-220` or
`ZFA23B`, amounts with a currency, e-mail addresses, URLs, file paths and dates. Any identifier the summary does not
contain is appended to it in one compact line::

    Facts kept verbatim: OBUT9V; HAT084; gift_card_7480005; $130; 2024-05-27

The line is bounded (in tokens); when the missing identifiers do not all fit, the most recent ones are kept and
the line says how many older ones were left out. A later pass reads the line back (`parse_facts_line`), so an
identifier found only through its context (a `"reservation_id": "AQLBTL"` field) is carried from summary to
summary.

Extraction works on spans: patterns run in the order of `DEFAULT_PATTERNS` and a later pattern never matches
inside a span an earlier one took (the number 2024 inside the date 2024-05-27 is not a separate identifier).
Presence is tested case-insensitively, on alphanumeric boundaries (`123` is not "in" `1234`).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, BaseMessage

from lc_compaction._content import content_text
from lc_compaction.markers import is_summary, summary_text

FACTS_PREFIX = "Facts kept verbatim: "
"""Start of the guard's line in a summary; `parse_facts_line` looks for it."""

FACTS_SEPARATOR = "; "
"""Between two identifiers in the facts line (no default pattern matches a `"; "`)."""

FACTS_OMITTED = " (+{n} older omitted)"
"""Appended to the facts line when the bound left `n` identifiers out."""

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

DEFAULT_PATTERNS: dict[str, str] = {
    # a URL, up to whitespace or a closing quote/bracket; trailing punctuation is trimmed by `_trim`
    "url": r"\b(?:https?|ftp)://[^\s<>\"'`\]\[)(}{]{1,2000}",
    "email": r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,6}\.[A-Za-z]{2,24}\b",
    # C:\dir\file, /abs/path (2+ parts), ~/x, ./x, dir/sub/file.ext, or a bare file name with a known extension
    "path": (r"\b[A-Za-z]:\\(?:[\w.-]{1,128}\\){0,32}[\w.-]{1,128}"
             r"|(?<![\w/.@+~-])(?:~|\.{1,2})?/(?:[\w.@+-]{1,128}/){1,32}[\w.@+-]{1,128}"
             r"|(?<![\w/.@+~-])(?:~|\.{1,2})/[\w.@+-]{1,128}"
             r"|(?<![\w/.@+-])(?:[\w.@+-]{1,128}/){1,32}[\w.@+-]{1,128}\.\w{1,8}"
             rf"|(?<![\w/.-])[\w-]{{1,128}}(?:\.[\w-]{{1,64}}){{0,8}}\.{_FILE_EXT}(?![\w.])"),
    "date": (r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
             r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
             rf"|\b{_MONTHS}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"
             rf"|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTHS},? \d{{4}}\b"),
    "amount": (rf"(?:[$€£¥₹]|\b{_CUR}\s?){_NUM}(?!\d)(?:\s?(?:k|K|M|bn)\b)?"
               rf"|(?<![\d,.]){_NUM}\s?(?:{_CUR}|dollars|euros|pounds)\b"),
    # the value of a JSON field named *id / *_number / *code / *ref (`"reservation_id": "AQLBTL"`): group 1
    "keyed_id": r"\"\w{0,40}(?:id|Id|ID|number|Number|code|Code|ref|reference)\"\s{0,3}:\s{0,3}\"([^\"\s]{3,64})\"",
    # an id named in prose: `order #W2378156`, `ticket no. 4471`, `reservation ID "OBUT9V"`: group 1
    "named_id": (r"(?i:\b(?:order|ticket|reservation|booking|invoice|confirmation|tracking|case|transaction|"
                 r"receipt|account)s?\b(?:\s{1,3}(?:id|number|no\.?|code|ref))?\s{0,3}(?:is|was|:)?\s{0,3}[\"'“]?)"
                 r"(#?(?=[\w-]{0,63}\d|[A-Z0-9-]{4,64}(?![\w-]))[A-Za-z0-9][\w-]{2,63})(?![\w-])"),
    # codes: WH-220, ZFA23B, HAT084, #W2378156 (upper-case letters and digits, at least one of each, 4+ chars)
    "code": (r"#[A-Za-z0-9]{0,32}\d[A-Za-z0-9]{0,32}(?!\w)"
             r"|(?<![\w-])(?=[A-Z0-9-]{0,40}\d)(?=[A-Z0-9-]{0,40}[A-Z])[A-Z0-9]{1,20}(?:-[A-Z0-9]{1,20}){1,5}(?![\w-])"
             r"|(?<![\w-])(?=[A-Z0-9]{0,40}\d)(?=[A-Z0-9]{0,40}[A-Z])[A-Z0-9]{4,40}(?![\w-])"),
    # slugs with a digit: sofia_kim_7287, gift_card_7480005, build-1142
    "slug": r"(?<![\w-])(?=[\w-]{0,80}\d)[A-Za-z][A-Za-z0-9]{0,40}(?:[_-][A-Za-z0-9]{1,40}){1,8}(?![\w-])",
    # numbers of 3+ digits: 4421486, 1,234, 255.0 (not part of a word, not the decimals of another number)
    "number": r"(?<![\w.,])(?:\d{1,3}(?:,\d{3}){1,6}|\d{3,30})(?:\.\d{1,6})?(?!\w)",
}
"""The identifier patterns, in priority order (kind -> regular expression). Where a pattern has a group 1, the
group is the identifier (the rest is context). Every repetition is bounded and a match cannot start inside a run
of the characters it consumes, so extraction stays linear in the text's length (no catastrophic backtracking on
a 40,000-character run of `A-A-A-...` or `1,000,1,000,...`). Sources: the issue's list (ids, 3+ digit numbers, codes, amounts,
e-mails, URLs, paths, dates); the shapes come from the shared traces (tau-bench's `OBUT9V`, `HAT084`,
`gift_card_7480005`, `"reservation_id": "AQLBTL"`) and the cases (`WH-220`, `ZFA23B`)."""

_TRAILING = ".,;:!?)]}'\"»”’"


@dataclass(frozen=True)
class Identifier:
    """One identifier: its verbatim `value` (characters as written) and the `kind` of pattern that found it."""

    value: str
    kind: str


@dataclass
class GuardResult:
    """What the guard did to one summary.

    Attributes:
        text: the summary text with the facts line appended (unchanged when nothing was missing).
        identifiers: every identifier guarded (distinct values), oldest first.
        kept_by_summary: how many of them the summary contained on its own.
        added: how many the facts line added.
        omitted: how many were missing but did not fit the bound (the oldest ones).
    """

    text: str
    identifiers: list[Identifier] = field(default_factory=list)
    kept_by_summary: int = 0
    added: int = 0
    omitted: int = 0


def _trim(value: str) -> str:
    while value and value[-1] in _TRAILING:
        if value[-1] in ")]}" and value.count({")": "(", "]": "[", "}": "{"}[value[-1]]) >= value.count(value[-1]):
            break  # a balanced closing bracket belongs to the value (a URL with parentheses)
        value = value[:-1]
    return value


def message_text(message: BaseMessage) -> str:
    """The text the guard reads from a message: its readable content (text blocks; other blocks named by type,
    never dumped), the arguments of its tool calls as JSON, and for a summary its own text (without the prefix)."""
    if is_summary(message):
        return summary_text(message)
    parts = [content_text(message.content)]
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            parts.append(json.dumps(call.get("args") or {}, ensure_ascii=False))
    return "\n".join(p for p in parts if p)


def _presence_re(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])", re.IGNORECASE)


def contains(text: str, identifier: Identifier | str) -> bool:
    """Whether `text` contains the identifier: case-insensitive, not inside a longer alphanumeric run
    (`123` is not in `1234`, `HAT08` is not in `HAT084`)."""
    value = identifier.value if isinstance(identifier, Identifier) else identifier
    return bool(_presence_re(value).search(text))


def parse_facts_line(text: str) -> list[str]:
    """The identifiers listed in the facts line(s) of a summary text (empty when it has none)."""
    out: list[str] = []
    for line in text.splitlines():
        if not line.startswith(FACTS_PREFIX):
            continue
        body = re.sub(r" \(\+\d+ older omitted\)$", "", line[len(FACTS_PREFIX):].rstrip())
        out.extend(v for v in body.split(FACTS_SEPARATOR) if v)
    return out


class FactGuard:
    """Extracts identifiers and appends the ones a summary misses.

    Args:
        extra_patterns: more patterns, kind -> regular expression (a group 1, if any, is the identifier); they
            run after the built-in ones (a span already taken is not matched twice). A sequence of expressions
            is accepted too (kinds "custom_0", "custom_1", ...).
        patterns: replace the built-in patterns entirely (default `DEFAULT_PATTERNS`).
        max_tokens: bound of the facts line in tokens (default `DEFAULT_MAX_FACT_TOKENS`); the most recent
            identifiers are kept when they do not all fit.

    Raises:
        ValueError: a pattern does not compile (naming its kind), or `max_tokens` < 1.
    """

    def __init__(self, extra_patterns: Mapping[str, str] | Sequence[str] | None = None, *,
                 patterns: Mapping[str, str] | None = None, max_tokens: int = DEFAULT_MAX_FACT_TOKENS):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens: the facts line bound must be a positive int (tokens), got {max_tokens!r}")
        self.max_tokens = max_tokens
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

    # ------------------------------------------------------------------ extraction
    def extract(self, text: str) -> list[Identifier]:
        """Identifiers in `text`, distinct values in order of first appearance. O(m log m) in the matches."""
        starts: list[int] = []  # the spans taken so far, disjoint, sorted by start (bisect keeps it so)
        ends: list[int] = []
        found: list[tuple[int, Identifier]] = []
        for kind, pattern in self.patterns.items():
            for m in pattern.finditer(text):
                group = 1 if pattern.groups and m.group(1) is not None else 0
                start = m.start(group)
                value = _trim(m.group(group))
                end = start + len(value)
                k = bisect.bisect_left(starts, end)  # spans starting before `end`: only the last can overlap
                if not value.strip() or (k and ends[k - 1] > start):
                    continue
                starts.insert(k, start)
                ends.insert(k, end)
                found.append((start, Identifier(value, kind)))
        found.sort(key=lambda x: x[0])
        return _distinct(i for _, i in found)

    def extract_messages(self, messages: Iterable[BaseMessage]) -> list[Identifier]:
        """Identifiers of several messages, oldest first (distinct values). For a summary message the
        identifiers of its facts line come first (they are older than its prose), read back verbatim."""
        out: list[Identifier] = []
        for m in messages:
            if is_summary(m):
                out.extend(Identifier(v, "carried") for v in parse_facts_line(summary_text(m)))
            out.extend(self.extract(message_text(m)))
        return _distinct(out)

    # ------------------------------------------------------------------ the guard
    def facts_line(self, identifiers: Sequence[Identifier], count_text: Callable[[str], int],
                   max_tokens: int | None = None) -> tuple[str, int]:
        """The line listing `identifiers` (oldest first), bounded by `max_tokens` (default `self.max_tokens`)
        tokens of `count_text`; the most recent are kept. Returns (line, number omitted); ("", 0) for none."""
        if not identifiers:
            return "", 0
        bound = self.max_tokens if max_tokens is None else max_tokens
        values = [i.value for i in identifiers]
        # the largest k such that the k most recent fit (monotone in k: binary search, O(log n) counts)
        lo, hi = 0, len(values)
        while lo < hi:
            k = (lo + hi + 1) // 2
            if count_text(self._render(values[-k:], len(values) - k)) <= bound:
                lo = k
            else:
                hi = k - 1
        if lo == 0:
            return "", len(values)
        return self._render(values[-lo:], len(values) - lo), len(values) - lo

    @staticmethod
    def _render(values: Sequence[str], omitted: int) -> str:
        return FACTS_PREFIX + FACTS_SEPARATOR.join(values) + (FACTS_OMITTED.format(n=omitted) if omitted else "")

    def guard(self, summary: str, identifiers: Sequence[Identifier], count_text: Callable[[str], int],
              max_tokens: int | None = None) -> GuardResult:
        """Append to `summary` the identifiers it does not contain (see `facts_line`). Any facts line already in
        `summary` is replaced by the new one (one line at most)."""
        body = "\n".join(line for line in summary.splitlines() if not line.startswith(FACTS_PREFIX)).rstrip()
        missing = [i for i in identifiers if not contains(body, i)]
        kept = len(identifiers) - len(missing)
        line, omitted = self.facts_line(missing, count_text, max_tokens)
        text = f"{body}\n\n{line}" if line and body else (line or body)
        return GuardResult(text=text, identifiers=list(identifiers), kept_by_summary=kept,
                           added=len(missing) - omitted, omitted=omitted)


def _distinct(items: Iterable[Identifier]) -> list[Identifier]:
    seen: set[str] = set()
    out: list[Identifier] = []
    for i in items:
        key = i.value.casefold()
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out
