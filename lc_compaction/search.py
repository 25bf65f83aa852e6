"""Search over what compaction took out of a thread, the pure part: tokens, ranking, snippets, the answer.

The search tool (`lc_compaction.integrations.search`, `search_compacted_history(query, limit)`) reads the thread's
records (`lc_compaction.offload`: tool results and messages, kept whole) and answers with bounded snippets, best
first, each with its handle: `recall_tool_result(tool_call_id=...)` for a tool result, `recall_message(
message_id=...)` for a user or assistant message. A tool result's snippet sits inside the data fence
(`markers.fence`: tool output never speaks as the user or the agent).

Ranking: BM25 (the `bm25s` library: Lucene's variant, k1 1.5, b 0.75) over `search_tokens`, built for each search
from the thread's records (no index to keep in step with the store); when the store has a semantic index (a
LangGraph store with `index=`), its ranking is fused with BM25's by reciprocal rank (`fuse`, k = `RRF_K`). Why
BM25 and not PostgreSQL's full-text search: it works the same on every store (`InMemoryStore`, `PostgresStore`,
any `BaseStore`), it needs no table or index of our own beside LangGraph's, and the words agents look up are
identifiers (order ids, paths, error types) that a language's stemming and stop words would change or drop.

Tokens (`search_tokens`): the casefolded words (`\\w+`); each compound identifier (`A-1001`, `config.yaml`,
`user@host`) also whole; each path whole and its root (`/`, `./`, `../`, `~/`) as a token of its own, so a path
asked for as `./src/app.py` ranks that path above `/src/app.py`. A tool result's document is its text and the call
that asked for it (`offload.call_text`: the tool's name and arguments), so a search for an order id finds the
result of the call that looked it up even when the result does not repeat it. An assistant message's document is
its words and its calls, but only its words when the results of all its calls are records too: their documents
hold the calls (a search for a command's words then finds what the command returned, not first the shorter
message that asked for it). An earlier search's or recall's answer is no document (`markers.LOOKUP_TOOL_NAMES`):
what it showed is in the records it came from, and a stale answer would outrank them; nor is a lookup call in an
assistant message's document (its query would match what it looked for).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import BaseMessage, ToolMessage

from lc_compaction._kinds import AI, HUMAN, TOOL, kind
from lc_compaction.markers import (
    LOOKUP_TOOL_NAMES,
    RECALL_MESSAGE_TOOL_NAME,
    RECALL_TOOL_NAME,
    SEARCH_TOOL_NAME,
    defang,
    fence,
)
from lc_compaction.offload import call_text, record_message, recall_text

with warnings.catch_warnings():
    # bm25s imports tqdm.auto, which warns "IProgress not found" in a notebook without ipywidgets; no progress
    # bar is ever shown here (show_progress=False)
    warnings.simplefilter("ignore")
    import bm25s

__all__ = ["DEFAULT_SEARCH_LIMIT", "MAX_SEARCH_LIMIT", "RRF_K", "SNIPPET_CHARS", "Document", "bm25_ranking",
           "document", "fuse", "search_answer", "search_tokens", "snippet"]

SNIPPET_CHARS = 300
"""Characters of one hit's snippet (at most): about 75 tokens of English at 4 characters a token, enough for the
lines around an identifier; the whole text is one recall away."""

DEFAULT_SEARCH_LIMIT = 5
"""Hits of one search when the model does not say."""

MAX_SEARCH_LIMIT = 10
"""Most hits of one search: with `SNIPPET_CHARS` and the lines around each, an answer of at most about 5,000
characters, under `offload.DEFAULT_RECALL_CHARS` (and cut to the smaller slice a small window allows)."""

RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack, Clarke and Büttcher, 2009: 60, the value Elasticsearch and
OpenSearch use): a hit's fused score is the sum over the rankings of 1 / (RRF_K + rank)."""

QUERY_CHARS = 200
"""Characters of the query repeated in an answer's first line."""

CALL_SHOWN_CHARS = 120
"""Characters of a tool result's call shown in its hit's line (the arguments are the model's own words)."""

_WORD = re.compile(r"\w+")
_COMPOUND = re.compile(r"\w+(?:[.\-:@]\w+)+")
_PATH = re.compile(r"(?<![\w.~/-])(?:\.\.?/|~/|/)?[\w.-]+(?:/[\w.-]+)+/?|(?<![\w.~/-])(?:\.\.?/|~/|/)[\w.-]+")
_ROOT = re.compile(r"\.\.?/|~/|/")


def search_tokens(text: str) -> list[str]:
    """The tokens of `text` (casefolded) the search ranks by: its words, its compound identifiers whole, its paths
    whole and each path's root (`/`, `./`, `../`, `~/`) alone (see the module docstring). O(len(text))."""
    low = text.casefold()
    out = _WORD.findall(low)
    out += _COMPOUND.findall(low)
    for m in _PATH.finditer(low):
        path = m.group().rstrip("/")
        out.append(path)
        root = _ROOT.match(path)
        if root:
            out.append(root.group())
    return out


@dataclass
class Document:
    """One record the search reads: its namespace kind ("tool_result" or "message"), its store key, the message,
    the text a snippet is cut from, the call of a tool result, and the record's position and compaction."""

    kind: str
    key: str
    message: BaseMessage
    text: str
    call: str = ""
    position: int | None = None
    compaction: int | None = None

    indexed: str | None = None
    """An assistant message's own words (its `text` without its calls): what BM25 indexes of it when the results
    of all its calls are records too (`tokens`)."""

    def tokens(self, answered: Collection[str] = ()) -> list[str]:
        """What BM25 indexes: the text's tokens and the call's; of an assistant message whose calls all have their
        results among the records (`answered`: their tool_call_ids), its own words only: the results' documents
        hold the calls, and rank for them (a search for a command's words finds what it returned)."""
        calls = _searchable_calls(self.message) if kind(self.message) == AI else []
        own = self.text
        if self.indexed is not None and calls and all(c.get("id") in answered for c in calls):
            own = self.indexed
        return search_tokens(own) + (search_tokens(self.call) if self.call else [])


def document(kind_: str, key: str, value: dict[str, Any]) -> Document | None:
    """The document of a record's store value (`offload.OffloadRecord.value`); None when it is no record."""
    try:
        message = record_message(value)
    except ValueError:
        return None
    content = message.content
    text = content if isinstance(content, str) else (message.text or recall_text(content))
    raw = value.get("call")
    call: str = raw if isinstance(raw, str) else ""
    if kind(message) == TOOL and (message.name in LOOKUP_TOOL_NAMES or _lookup_call(call)):
        return None  # an earlier search's or recall's answer: what it showed is the records' own
    indexed = None
    if kind(message) == AI:  # its calls are its own words, in its snippet; ranked with their results (`tokens`)
        calls = [call_text(c["name"], c.get("args")) for c in _searchable_calls(message)]
        indexed, text, call = text, "\n".join(x for x in (text, *calls) if x), ""
    position = value.get("position")
    compaction = value.get("compaction")
    return Document(kind_, key, message, text, call or "",
                    position if isinstance(position, int) else None,
                    compaction if isinstance(compaction, int) else None, indexed)


def _lookup_call(call: str) -> bool:
    """Whether `call` (`offload.call_text`) is a call of a lookup tool (`markers.LOOKUP_TOOL_NAMES`)."""
    return call.split("(", 1)[0] in LOOKUP_TOOL_NAMES


def _searchable_calls(message: BaseMessage) -> list[dict[str, Any]]:
    """An assistant message's tool calls but its lookups (a search's query would match what it looked for)."""
    return [c for c in getattr(message, "tool_calls", None) or [] if c.get("name") not in LOOKUP_TOOL_NAMES]


def bm25_ranking(docs: Sequence[Document], query: str) -> list[int]:
    """Indices of `docs` that share a token with `query`, by BM25 score, best first (ties: the earlier record
    first). O(total tokens)."""
    wanted = search_tokens(query)
    if not docs or not wanted:
        return []
    answered = {cast(ToolMessage, d.message).tool_call_id for d in docs if kind(d.message) == TOOL}
    corpus = [d.tokens(answered) for d in docs]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    vocab = retriever.vocab_dict
    known = [t for t in dict.fromkeys(wanted) if t in vocab and t]
    if not known:
        return []
    scores = retriever.get_scores(known)
    order = sorted((i for i in range(len(docs)) if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
    return order


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion of `rankings` (each a list of document indices, best first): the indices by the sum
    of 1 / (k + rank) (rank from 1), best first; ties by the first ranking's order."""
    score: dict[int, float] = {}
    first: dict[int, int] = {}
    for ranking in rankings:
        for rank, i in enumerate(ranking, start=1):
            score[i] = score.get(i, 0.0) + 1.0 / (k + rank)
            first.setdefault(i, len(first))
    return sorted(score, key=lambda i: (-score[i], first[i]))


def snippet(text: str, query: str, chars: int = SNIPPET_CHARS) -> str:
    """At most `chars` characters of `text` around the place where most of `query`'s words occur together (the
    start when none does), its runs of white space made one space, "…" where it was cut."""
    words = [t for t in dict.fromkeys(search_tokens(query)) if not _ROOT.fullmatch(t)][:32]
    hits: list[tuple[int, str]] = []
    for w in words:
        for n, m in enumerate(re.finditer(re.escape(w), text, re.IGNORECASE)):
            if n >= 64:
                break
            hits.append((m.start(), w))
    start = 0
    if hits:
        hits.sort()
        best, best_n = hits[0][0], 0
        for p, _ in hits:
            n = len({w for q, w in hits if p <= q < p + chars * 2 // 3})
            if n > best_n:
                best, best_n = p, n
        start = max(0, best - chars // 3)
    piece = " ".join(text[start:start + chars * 2].split())[:chars]
    lead = "…" if start > 0 else ""
    tail = "…" if start + len(piece) < len(" ".join(text[start:].split())) else ""
    return lead + piece + tail


def _role(message: BaseMessage) -> str:
    k = kind(message)
    return {HUMAN: "user message", AI: "assistant message", TOOL: "tool result"}.get(k, f"{message.type} message")


def _hit(n: int, doc: Document, query: str, chars: int) -> str:
    where = []
    if doc.compaction is not None:
        where.append(f"compaction {doc.compaction}")
    if doc.position is not None:
        where.append(f"position {doc.position}")
    at = f" ({', '.join(where)})" if where else ""
    piece = snippet(doc.text, query, chars)
    if doc.kind == "tool_result":
        call = doc.call[:CALL_SHOWN_CHARS] + ("…" if len(doc.call) > CALL_SHOWN_CHARS else "")
        asked = f" of {defang(call)}" if call else ""
        handle = f"{RECALL_TOOL_NAME}(tool_call_id={json.dumps(doc.key)})"
        return f"{n}. tool result{asked}{at}: {handle}\n{fence(piece, doc.message.name)}"
    handle = f"{RECALL_MESSAGE_TOOL_NAME}(message_id={json.dumps(doc.key)})"
    return f"{n}. {_role(doc.message)}{at}: {handle}\n{defang(piece)}"


def _size(text: str) -> int:
    """The larger of a text's characters and UTF-8 bytes (a cap in characters holds for both)."""
    return len(text.encode("utf-8", "surrogatepass"))


def search_answer(query: str, docs: Sequence[Document], order: Sequence[int], limit: int, cap: int,
                  searched: int) -> tuple[str, dict[str, Any]]:
    """The tool's answer and its artifact: the first `limit` documents of `order` (indices in `docs`), each a
    line naming it and its handle then its snippet, after one line saying what was searched; at most `cap`
    characters and UTF-8 bytes in all (hits that would pass it are left out, the first one's snippet cut to fit).
    `searched`: how many records were read. The first line says how many match (`order`'s length), how many
    follow, and when the size bound left out some of the `limit` asked for. The artifact: `{"query", "hits":
    [{"kind", "key", "message_id", "compaction", "position"}], "searched", "matched"}`."""
    q = query[:QUERY_CHARS]
    shown = [docs[i] for i in order[:limit]]
    if not shown:
        text = (f"[{SEARCH_TOOL_NAME}: nothing kept from this conversation matches {json.dumps(defang(q))} "
                f"({searched} kept messages searched)]")
        return text, {"query": query, "hits": [], "searched": searched}

    def header(listed: int, cut: bool) -> str:
        """How many match, how many are shown, and why fewer than asked (the answer's size bound)."""
        why = " (the answer's size bound leaves out the rest of those asked for)" if cut else ""
        return (f"[{SEARCH_TOOL_NAME}: {len(order)} of the {searched} kept messages of this conversation match "
                f"{json.dumps(defang(q))}; the best {listed} follow{why}, best first; each names the call that "
                f"reads it whole]")

    parts = [""]
    used = _size(header(len(shown), True))  # the longest header this answer can have
    listed: list[Document] = []
    for doc in shown:
        block = _hit(len(listed) + 1, doc, query, SNIPPET_CHARS)
        if used + 1 + _size(block) > cap:
            if listed:
                break
            room = SNIPPET_CHARS - (used + 1 + _size(block) - cap)
            block = _hit(1, doc, query, max(room, 0))
            if used + 1 + _size(block) > cap:
                break
        parts.append(block)
        used += 1 + _size(block)
        listed.append(doc)
    parts[0] = header(len(listed), len(listed) < len(shown))
    hits = [{"kind": d.kind, "key": d.key, "message_id": d.message.id, "compaction": d.compaction,
             "position": d.position} for d in listed]
    return "\n".join(parts), {"query": query, "hits": hits, "searched": searched, "matched": len(order)}
