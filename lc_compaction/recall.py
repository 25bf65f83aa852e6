"""Which identifiers of the history so far are still in what is sent: a measure of any strategy's recall.

Deliberately independent of `lc_compaction.strategies.facts` (the fact guard that decides what a summary keeps):
its own small set of patterns, its own text, its own matching, so that a change to the guard cannot make the
measure agree with it.

**Identifiers** (`IDENTIFIER_PATTERNS`, run over a message's text: its content and its tool calls' arguments as
JSON, `message_text`), in order, the first kind that finds a value naming it:
- ``email``: `name@domain.tld`.
- ``flight``: two or three capital letters then three or four digits (`HAT017`).
- ``code``: 5 to 34 capital letters and digits, with at least one of each (reservation ids such as `OI5L9G`,
  IBANs, order numbers).
- ``keyed_code``: the value of a JSON key naming a reservation, booking, order, confirmation, ticket or
  transaction id (`"reservation_id": "AQLBTL"`: codes of letters only), or the 6-character code written after
  "reservation", "booking" or "confirmation" (and an optional "id" / "number" / "code", "is", ":").
- ``handle``: lower-case words joined by `_` ending in `_` and three or more digits (`sofia_kim_7287`,
  `credit_card_9879898`: user and payment-method ids).
- ``amount``: a number after `$`, or the number value (two digits or more, or with decimals) of a JSON key naming
  a price, amount, balance, total, cost, fee or refund.
- ``long_number``: five digits or more that are not part of a word or a longer number.

**Matching** (`words`, `canonical`): text is case-folded, the thousands commas inside numbers removed, and cut
into words (runs of letters, digits, `_`, `@`, `.`, `+`, `-`, with `.`, `+`, `-` stripped from both ends; a
decimal number loses its trailing zeros: `1234.50` is `1234.5`, `250.00` is `250`). An identifier is its
canonical form (the same steps applied to what its pattern matched) and is kept only when it is one whole word of
the text it came from; a history holds it when some message sent holds that word. So `HAT017` is held by
"flight HAT017." and by `{"flight_number": "HAT017"}`, not by "HAT0" (a cut preview) nor by "HAT0171".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from lc_compaction._content import content_text

__all__ = ["IDENTIFIER_PATTERNS", "Held", "IdentifierTracker", "canonical", "find_identifiers", "message_text",
           "words"]

_ID_KEYS = r"(?:reservation|booking|order|confirmation|ticket|transaction)"
_MONEY_KEYS = r"(?:price|amount|balance|total|cost|fee|refund)"

IDENTIFIER_PATTERNS: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,5}\.[A-Za-z]{2,24}"),
    "flight": re.compile(r"(?<![\w-])[A-Z]{2,3}\d{3,4}(?![\w-])"),
    "code": re.compile(r"(?<![\w-])(?=[A-Z0-9]{0,33}\d)(?=[A-Z0-9]{0,33}[A-Z])[A-Z0-9]{5,34}(?![\w-])"),
    "keyed_code": re.compile(rf"\"\w{{0,30}}{_ID_KEYS}\w{{0,20}}\"\s{{0,3}}:\s{{0,3}}\"([A-Za-z0-9]{{4,40}})\""
                             rf"|(?i:\b(?:reservation|booking|confirmation)(?:\s{{1,3}}(?:id|number|code))?"
                             rf"(?:\s{{1,3}}(?:is|was))?\s{{0,3}}[:#]?\s{{0,3}})([A-Z0-9]{{6}})(?![\w-])"),
    "handle": re.compile(r"(?<![\w@.-])[a-z][a-z0-9]{0,30}(?:_[a-z0-9]{1,30}){0,6}_\d{3,20}(?![\w@-])"),
    "amount": re.compile(rf"\$\s?(\d{{1,3}}(?:,\d{{3}})+(?:\.\d{{1,2}})?|\d{{1,12}}(?:\.\d{{1,2}})?)(?![\d,])"
                         rf"|\"{_MONEY_KEYS}\w{{0,20}}\"\s{{0,3}}:\s{{0,3}}(\d{{2,12}}(?:\.\d{{1,6}})?|\d\.\d{{1,6}})"
                         rf"(?![\d.])"),
    "long_number": re.compile(r"(?<![\w.,-])\d{5,30}(?:\.\d{1,6})?(?!\w|[.,]\d)"),
}
"""The patterns, by kind, in the order they are tried (see the module docstring). A pattern with groups gives the
first group that matched; one without gives the whole match."""

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_WORD = re.compile(r"[\w@.+-]+")
_DECIMAL = re.compile(r"\d+\.\d+")
_EDGES = ".+-"


def _norm(word: str) -> str:
    word = word.strip(_EDGES)
    if _DECIMAL.fullmatch(word):
        word = word.rstrip("0").rstrip(".")
    return word


def words(text: str) -> frozenset[str]:
    """The canonical words of `text` (see the module docstring): what a history is searched for."""
    folded = _THOUSANDS.sub("", text.casefold())
    return frozenset(w for w in (_norm(m) for m in _WORD.findall(folded)) if w)


def canonical(value: str) -> str | None:
    """The canonical form of an identifier as written (`"$1,234.50"` -> `"1234.5"`), or None when it is not
    one word (then it is not an identifier this measure can look up)."""
    found = [w for w in (_norm(m) for m in _WORD.findall(_THOUSANDS.sub("", value.casefold()))) if w]
    return found[0] if len(found) == 1 else None


def message_text(message: BaseMessage) -> str:
    """What a message sends as text: its content (`_content.content_text`), then, for an AIMessage, each tool
    call's name and arguments as JSON (`json.dumps(args, ensure_ascii=False)`, as langchain-openai sends them) and
    each invalid tool call's raw arguments, one a line."""
    parts = [content_text(message.content)]
    if isinstance(message, AIMessage):
        for tc in message.tool_calls:
            parts.append(f"{tc.get('name')} {json.dumps(tc.get('args'), ensure_ascii=False, default=str)}")
        for itc in message.invalid_tool_calls:
            parts.append(f"{itc.get('name')} {itc.get('args')}")
    return "\n".join(parts)


def find_identifiers(text: str, *, text_words: frozenset[str] | None = None) -> dict[str, str]:
    """The identifiers in `text`: `{canonical value: kind}`, in order of the patterns, then of appearance; only
    values that are whole words of `text` (`words`).

    Args:
        text: the text (see `message_text` for a message's).
        text_words: `words(text)` when already computed.
    """
    own = words(text) if text_words is None else text_words
    found: dict[str, str] = {}
    for kind, pattern in IDENTIFIER_PATTERNS.items():
        for match in pattern.finditer(text):
            raw = next((g for g in match.groups() if g), None) if pattern.groups else match.group(0)
            value = canonical(raw) if raw else None
            if value and value in own and value not in found:
                found[value] = kind
    return found


@dataclass(frozen=True)
class Held:
    """The identifiers of a history so far and how many a sent history holds (counts of distinct identifiers).

    Attributes:
        so_far: identifiers in the history so far (every message recorded up to the call).
        held: of them, those some sent message holds.
        tool_so_far: identifiers found so far only in tool results (in no system, user or assistant message,
            nor in a tool call's arguments).
        tool_held: of them, those held.
    """

    so_far: int
    held: int
    tool_so_far: int
    tool_held: int


class IdentifierTracker:
    """The identifiers of one conversation's history as it is recorded (`add`), and how many of them a sent
    history holds (`held`). Each message's words and identifiers are found once (cached by object, for the
    tracker's lifetime: one conversation)."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        """`{canonical value: kind}` of every identifier added so far, in order of first appearance."""
        self._outside_tools: set[str] = set()
        self._words: dict[int, tuple[BaseMessage, frozenset[str]]] = {}

    def words_of(self, message: BaseMessage) -> frozenset[str]:
        """`words(message_text(message))`, cached for this message object."""
        entry = self._words.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        found = words(message_text(message))
        self._words[id(message)] = (message, found)
        return found

    def add(self, message: BaseMessage) -> None:
        """Record a message of the history (its identifiers join those so far)."""
        text = message_text(message)
        own = self.words_of(message)
        for value, kind in find_identifiers(text, text_words=own).items():
            self.kinds.setdefault(value, kind)
            if not isinstance(message, ToolMessage):
                self._outside_tools.add(value)

    def extend(self, messages: Iterable[BaseMessage]) -> None:
        """`add` each message."""
        for m in messages:
            self.add(m)

    def held(self, sent: Sequence[BaseMessage]) -> Held:
        """How many identifiers so far the messages `sent` hold (see `Held`)."""
        present: set[str] = set()
        for m in sent:
            present |= self.words_of(m)
        held = tool = tool_held = 0
        for value in self.kinds:
            inside = value in present
            held += inside
            if value not in self._outside_tools:
                tool += 1
                tool_held += inside
        return Held(len(self.kinds), held, tool, tool_held)
