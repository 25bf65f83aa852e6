"""The search tool: the model finds what compaction took out of its thread (`lc_compaction.search` ranks).

    search_compacted_history(query: str, limit: int = 5) -> str

It reads the run's thread's records only (the tool runtime's store and `config["configurable"]["thread_id"]`:
its "tool_result" and "message" namespaces, `lc_compaction.offload`), so another thread's content never shows,
and answers with at most `limit` (1 to `search.MAX_SEARCH_LIMIT`) snippets of at most `search.SNIPPET_CHARS`
characters, best first, each with the call that reads it whole (`recall_tool_result` or `recall_message`), a tool
result's snippet inside the data fence. The whole answer is at most the smallest recall slice the thread's
records were planned with (`offload.recall_chars`, their "recall_chars"; at most the tool's `max_chars`), in
characters and UTF-8 bytes: it never overflows the window by itself. The artifact (`ToolMessage.artifact`) lists
the hits as JSON (`search.search_answer`).

Ranking: BM25 over the records (`search.bm25_ranking`); when the store has a semantic index (`index=` config),
also the store's own ranking for the query in the thread's namespaces, fused by reciprocal rank (`search.fuse`).
Its answers, like the recall tools', are never offloaded on arrival nor deduplicated (`markers.LOOKUP_TOOL_NAMES`).

`CompactionMiddleware(offload=True)` registers it; with the node, add `search_compacted_history` (and
`recall_message`) to the agent's tools and compile with a store.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.store.base import BaseStore, SearchOp

from lc_compaction._drive import adrive, drive
from lc_compaction.integrations.recall import runtime_thread
from lc_compaction.markers import SEARCH_TOOL_NAME
from lc_compaction.offload import DEFAULT_RECALL_CHARS, offload_namespace
from lc_compaction.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    Document,
    bm25_ranking,
    document,
    fuse,
    search_answer,
)

__all__ = ["PAGE", "asearch_history", "search_compacted_history", "search_history", "search_tool"]

PAGE = 1_000
"""Records read in one store search (a page); a thread's records are read page by page."""

_KINDS = ("tool_result", "message")

_DESCRIPTION = (
    "Search what was left out of this conversation to fit the context window (earlier user and assistant "
    "messages, tool results): give a few keywords (an id, a path, a name, the words of an instruction). Each hit "
    f"is a short snippet with the call that reads it whole. limit: 1 to {MAX_SEARCH_LIMIT} hits. Only this "
    "conversation is searched.")


def _search(thread_id: str, query: str, limit: int, max_chars: int, semantic: bool
            ) -> Generator[list[SearchOp], list[Any], tuple[str, dict[str, Any]]]:
    """The body for both drivers: reads the thread's records page by page (and the store's semantic ranking),
    ranks, answers."""
    docs: list[Document] = []
    caps: list[int] = []
    where: dict[tuple[str, str], int] = {}
    offset = 0
    kinds = list(_KINDS)
    while kinds:
        pages = yield [SearchOp(offload_namespace(thread_id, k), limit=PAGE, offset=offset) for k in kinds]
        more = []
        for k, items in zip(kinds, pages, strict=True):
            for item in items:
                doc = document(k, item.key, item.value) if isinstance(item.value, dict) else None
                if doc is None or item.namespace != offload_namespace(thread_id, k):
                    continue
                where[(k, item.key)] = len(docs)
                docs.append(doc)
                planned = item.value.get("recall_chars")
                if isinstance(planned, int) and planned > 0:
                    caps.append(planned)
            if len(items) == PAGE:
                more.append(k)
        kinds, offset = more, offset + PAGE
    rankings = [bm25_ranking(docs, query)]
    if semantic and docs:
        found = yield [SearchOp(offload_namespace(thread_id, k), query=query, limit=limit * 4) for k in _KINDS]
        scored = sorted(((item.score or 0.0, where[(k, item.key)]) for k, items in zip(_KINDS, found, strict=True)
                         for item in items if (k, item.key) in where), key=lambda x: -x[0])
        rankings.append([i for _, i in scored])
    order = fuse(rankings) if len(rankings) > 1 else rankings[0]
    return search_answer(query, docs, order, limit, min([max_chars, *caps]), len(docs))


def _checked(store: BaseStore | None, thread_id: str | None, query: str, limit: int) -> tuple[str, dict] | None:
    """The one-line answer when there is nothing to search or the arguments are wrong; None to search."""
    info: dict[str, Any] = {"query": query, "hits": []}
    if store is None:
        return f"[{SEARCH_TOOL_NAME}: this agent has no store, so nothing was kept]", info
    if not thread_id:
        return f"[{SEARCH_TOOL_NAME}: no thread id in this run's config, so nothing can be searched]", info
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        return f"[{SEARCH_TOOL_NAME}: limit must be an integer from 1 to {MAX_SEARCH_LIMIT}; got {limit!r}]", info
    if not query.strip():
        return f"[{SEARCH_TOOL_NAME}: give a query (keywords)]", info
    return None


def search_history(store: BaseStore | None, thread_id: str | None, query: str, limit: int = DEFAULT_SEARCH_LIMIT,
                   *, max_chars: int = DEFAULT_RECALL_CHARS) -> tuple[str, dict[str, Any]]:
    """What the tool answers, and its artifact (see the module docstring): the best `limit` hits for `query` among
    `thread_id`'s records in `store`, at most `max_chars` characters (and UTF-8 bytes) in all, or a one-line
    reason (no store, no thread, a bad limit, an empty query). Never raises for a missing record."""
    early = _checked(store, thread_id, query, limit)
    if early is not None or store is None or not thread_id:
        return early or ("", {})
    semantic = bool(getattr(store, "index_config", None))
    return drive(_search(thread_id, query, limit, max_chars, semantic), store.batch)


async def asearch_history(store: BaseStore | None, thread_id: str | None, query: str,
                          limit: int = DEFAULT_SEARCH_LIMIT, *, max_chars: int = DEFAULT_RECALL_CHARS
                          ) -> tuple[str, dict[str, Any]]:
    """Async twin of `search_history`."""
    early = _checked(store, thread_id, query, limit)
    if early is not None or store is None or not thread_id:
        return early or ("", {})
    semantic = bool(getattr(store, "index_config", None))
    return await adrive(_search(thread_id, query, limit, max_chars, semantic), store.abatch)


def search_tool(*, max_chars: int = DEFAULT_RECALL_CHARS, name: str = SEARCH_TOOL_NAME) -> BaseTool:
    """Build the search tool (sync and async) whose answers are at most `max_chars` characters (and UTF-8 bytes),
    less when the thread's records say their window allows less (see the module docstring).

    Raises:
        ValueError: `max_chars` is not a positive int.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ValueError(f"max_chars: must be a positive int (characters), got {max_chars!r}")

    def search(query: str, runtime: ToolRuntime, limit: int = DEFAULT_SEARCH_LIMIT) -> tuple[str, dict[str, Any]]:
        return search_history(runtime.store, runtime_thread(runtime), query, limit, max_chars=max_chars)

    async def asearch(query: str, runtime: ToolRuntime, limit: int = DEFAULT_SEARCH_LIMIT
                      ) -> tuple[str, dict[str, Any]]:
        return await asearch_history(runtime.store, runtime_thread(runtime), query, limit, max_chars=max_chars)

    return StructuredTool.from_function(func=search, coroutine=asearch, name=name, description=_DESCRIPTION,
                                        response_format="content_and_artifact")


search_compacted_history = search_tool()
"""The search tool, answers of at most `DEFAULT_RECALL_CHARS` characters (less where the window needs it)."""
