"""Which identifiers of the history so far are still in what is sent: a measure of any strategy's recall.

Deliberately independent of `lc_compaction.facts` (the fact guard that decides what a summary keeps):
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

**The next command** (`IdentifierTracker.command`, issue 24): what a coding agent's next tool call needs. At each
model call, the identifiers of the command it made (the recorded assistant message's tool-call arguments: their
string values, `command_text`) that appeared earlier in the conversation must be present in what was sent. The
identifiers are those a coding agent reads and types again (`CODE_PATTERNS`, in order, a later kind never inside
an earlier one's span):
- ``pytest_id``: a test's node id, `tests/test_x.py::TestY::test_z[param]`.
- ``file_line``: a file and a line, `src/mod.py:42` (or `:42:7`).
- ``path``: an absolute path (`/testbed/src`, `~/x`, `./x`), a relative one of two parts or more (`src/mod`), or a
  file name with a known extension (`setup.cfg`).
- ``line``: `line 42` (a traceback's frame, a linter's message).
- ``error_type``: a capitalized name ending in `Error`, `Exception` or `Warning` (`ValueError`), and the built-in
  exceptions without that ending (`KeyboardInterrupt`, `SystemExit`, `StopIteration`, `GeneratorExit`).
- ``symbol``: the name after `def` or `class` (then `(` or `:`: `class economy` is no definition).
- ``dotted``: a dotted name, `pkg.mod.func`, `self.opts` (parts start with a letter or `_`, the first has two
  characters or more: `e.g` is not one).
- ``hash``: 7 to 64 lower-case hexadecimal digits with at least one digit and one letter (a git sha).

Its matching is exact (case-sensitive, as code is) on a message's plain text (`plain_text`: the content and the
string values of tool-call arguments, not JSON-escaped): a text holds an identifier where it occurs with no
letter, digit or `_` right before or after it (`code_present`): `src/mod.py` is held by `/testbed/src/mod.py` and
by `src/mod.py:42`, not by `src/mod.pyc` nor `test_mod.py` by `mod.py`. "Appeared earlier": held by a recorded
message before the call; "only in tool results": held by none of them but tool results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from lc_compaction._content import content_text

__all__ = ["CODE_PATTERNS", "IDENTIFIER_PATTERNS", "CommandHeld", "Held", "IdentifierTracker", "argument_strings",
           "canonical", "code_identifiers", "code_present", "command_text", "find_identifiers", "message_text",
           "plain_text", "words"]

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

_EXT = (r"(?:py|pyi|pyx|ipynb|js|jsx|ts|tsx|mjs|cjs|java|kt|go|rs|rb|php|c|cc|cpp|cxx|h|hpp|cs|swift|scala|sh|"
        r"bash|sql|md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|conf|csv|tsv|xml|html|htm|css|lock|log|env|diff|"
        r"patch|in)")
_SEG = r"[\w.@+-]{1,128}"
_FILE = rf"(?:(?:~|\.{{1,2}})?/)?(?:{_SEG}/){{0,32}}[\w@+-][\w.@+-]{{0,127}}\.{_EXT}"
_START = r"(?<![\w./~@+-])"
_END = r"(?!\w|\.\w)"

CODE_PATTERNS: dict[str, re.Pattern[str]] = {
    "pytest_id": re.compile(rf"{_START}(?:(?:~|\.{{1,2}})?/)?(?:{_SEG}/){{0,32}}[\w@+-][\w.@+-]{{0,127}}\.py"
                            r"::[\w.-]{1,200}(?:::[\w.-]{1,200}){0,8}(?:\[[^\]\n]{0,200}\])?"),
    "file_line": re.compile(rf"{_START}{_FILE}:\d{{1,7}}(?::\d{{1,5}})?(?!\d)"),
    "path": re.compile(rf"{_START}(?:(?:~|\.{{1,2}})?/(?:{_SEG}/){{0,32}}{_SEG}|(?:{_SEG}/){{1,32}}{_SEG}"
                       rf"|[\w@+-][\w.@+-]{{0,127}}\.{_EXT}{_END})/?(?![\w/])"),
    "line": re.compile(r"(?<!\w)[Ll]ine \d{1,7}(?!\d)"),
    "error_type": re.compile(r"(?<![\w.])(?:[A-Z][A-Za-z0-9]{0,60}(?:Error|Exception|Warning)|KeyboardInterrupt|"
                             r"SystemExit|StopIteration|GeneratorExit)(?!\w)"),
    "symbol": re.compile(r"\b(?:def|class)\s{1,8}([A-Za-z_]\w{0,80})(?=\s{0,8}[(:])"),
    "dotted": re.compile(r"(?<![\w./-])[A-Za-z_]\w{1,80}(?:\.[A-Za-z_]\w{0,80}){1,8}(?!\w|\.[A-Za-z_])"),
    "hash": re.compile(r"(?<![\w-])(?=[0-9a-f]{0,63}\d)(?=[0-9a-f]{0,63}[a-f])[0-9a-f]{7,64}(?![\w-])"),
}
"""The next command's identifier patterns, by kind, in the order they are tried (see the module docstring). A
pattern with a group gives the group; one without, the whole match. Every repetition is bounded."""

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


def plain_text(message: BaseMessage) -> str:
    """A message's text as the next-command measure reads it: its content (`_content.content_text`), then, for an
    AIMessage, the string values of its tool calls' arguments (`command_text`) and each invalid tool call's raw
    arguments, one a line; not JSON-escaped, so that a path at the start of a line of a command is not glued to
    an escape (`\\n`)."""
    parts = [content_text(message.content)]
    if isinstance(message, AIMessage):
        parts.append(command_text(message))
        parts.extend(str(itc.get("args") or "") for itc in message.invalid_tool_calls)
    return "\n".join(p for p in parts if p)


def argument_strings(value: object) -> Iterable[str]:
    """The string values of a tool call's arguments `value` (nested dicts, lists and tuples too, in order; other
    non-None values as `str`): the words of a command, as `command_text` and the recall exam read them."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from argument_strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from argument_strings(v)
    elif value is not None:
        yield str(value)


def command_text(message: BaseMessage) -> str:
    """The command an AIMessage makes: the string values of its tool calls' arguments (nested ones too, numbers
    as written by `str`), one a line; "" for a message without tool calls."""
    if not isinstance(message, AIMessage):
        return ""
    return "\n".join(s for tc in message.tool_calls for s in argument_strings(tc.get("args")))


def code_identifiers(text: str) -> dict[str, str]:
    """The next-command identifiers of `text` (`CODE_PATTERNS`): `{value: kind}`, values as written, in order of
    the patterns and then of appearance; a match inside the span of an earlier kind's match is not one."""
    taken: list[tuple[int, int]] = []
    found: dict[str, str] = {}
    for kind, pattern in CODE_PATTERNS.items():
        for m in pattern.finditer(text):
            g = 1 if pattern.groups else 0
            start, end = m.span(g)
            if any(a < end and start < b for a, b in taken):
                continue
            taken.append((start, end))
            found.setdefault(m.group(g), kind)
    return found


_CODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def code_present(text: str, value: str) -> bool:
    """Whether `text` holds the next-command identifier `value`: an occurrence (case-sensitive) with no letter,
    digit or `_` right before or after it."""
    at = text.find(value)
    n = len(value)
    while at >= 0:
        end = at + n
        if (at == 0 or text[at - 1] not in _CODE_CHARS) and (end == len(text) or text[end] not in _CODE_CHARS):
            return True
        at = text.find(value, at + 1)
    return False


@dataclass(frozen=True)
class CommandHeld:
    """The identifiers of one command that appeared earlier in the conversation, and how many of them what was
    sent holds (`IdentifierTracker.command`), in total and by kind (`CODE_PATTERNS`).

    Attributes:
        by_kind: `{kind: (seen, held, tool_seen, tool_held)}`: the distinct identifiers of that kind in the command
            that appeared earlier; of them, those held; of them, those that appeared only in tool results; and of
            those, the ones held.
    """

    by_kind: dict[str, tuple[int, int, int, int]]

    def _total(self, k: int) -> int:
        return sum(v[k] for v in self.by_kind.values())

    @property
    def seen(self) -> int:
        """Identifiers of the command that appeared earlier."""
        return self._total(0)

    @property
    def held(self) -> int:
        """Of them, those held by what was sent."""
        return self._total(1)

    @property
    def tool_seen(self) -> int:
        """Of `seen`, those that appeared earlier only in tool results."""
        return self._total(2)

    @property
    def tool_held(self) -> int:
        """Of `tool_seen`, those held."""
        return self._total(3)


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
        self._texts: list[tuple[str, bool]] = []  # the plain text of each message added, and whether a tool result
        self._earlier: dict[str, tuple[int, bool, bool]] = {}  # value -> (texts read, outside tools, in tools)
        self._plain: dict[int, tuple[BaseMessage, str, dict[str, bool]]] = {}

    def words_of(self, message: BaseMessage) -> frozenset[str]:
        """`words(message_text(message))`, cached for this message object."""
        entry = self._words.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        found = words(message_text(message))
        self._words[id(message)] = (message, found)
        return found

    def _plain_of(self, message: BaseMessage) -> tuple[str, dict[str, bool]]:
        entry = self._plain.get(id(message))
        if entry is None or entry[0] is not message:
            entry = (message, plain_text(message), {})
            self._plain[id(message)] = entry
        return entry[1], entry[2]

    def add(self, message: BaseMessage) -> None:
        """Record a message of the history (its identifiers join those so far)."""
        self._texts.append((self._plain_of(message)[0], isinstance(message, ToolMessage)))
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

    def _appeared(self, value: str) -> tuple[bool, bool]:
        """(outside tool results, in tool results): where `value` appeared in the messages added so far (read
        once: later asks read only the messages added since)."""
        read, outside, inside = self._earlier.get(value, (0, False, False))
        for text, tool in self._texts[read:]:
            if (inside if tool else outside):
                continue
            if code_present(text, value):
                inside, outside = (True, outside) if tool else (inside, True)
        self._earlier[value] = (len(self._texts), outside, inside)
        return outside, inside

    def command(self, message: BaseMessage, sent: Sequence[BaseMessage]) -> CommandHeld:
        """The next-command measure of one call (module docstring): the identifiers of `message`'s command
        (`command_text`, `code_identifiers`) that appeared in the messages added so far, and how many of them
        `sent` holds (`code_present` on `plain_text`), by kind. Call it before adding `message`."""
        by_kind: dict[str, list[int]] = {}
        for value, kind in code_identifiers(command_text(message)).items():
            outside, inside = self._appeared(value)
            if not (outside or inside):
                continue
            held = False
            for m in sent:
                text, known = self._plain_of(m)
                found = known.get(value)
                if found is None:
                    found = known[value] = code_present(text, value)
                if found:
                    held = True
                    break
            row = by_kind.setdefault(kind, [0, 0, 0, 0])
            row[0] += 1
            row[1] += held
            if not outside:
                row[2] += 1
                row[3] += held
        return CommandHeld({k: (v[0], v[1], v[2], v[3]) for k, v in by_kind.items()})
