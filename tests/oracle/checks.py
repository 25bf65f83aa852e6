"""Independent checks for compaction outputs (the "Checks vocabulary" of /work/shared/cases/README.md).

This module is the test oracle: it re-states the rules on its own and must never import ``lc_compaction``.

Every check has the same shape: ``fn(ctx: CheckContext) -> None``; it raises ``AssertionError`` with a message
that names the failing message (``output[i]``, its id) and tool_call_id.  ``check(name, ctx)`` dispatches by name,
``run_checks(names, ctx)`` runs several and reports every failure at once.

Conventions
-----------
* "unchanged" / "verbatim" compares what the model sees: message type, content, name, tool calls (id, name, args),
  tool_call_id, and the id when the input message had one.  ``additional_kwargs`` / ``response_metadata`` are not
  compared (marks live there).
* When compaction raised (``ctx.error`` is set) the output checks fail ("no output to check"), except
  ``history_preserved_on_failure`` and ``no_placeholder_summary`` (raising is an accepted outcome there).  Set
  ``ctx.allow_error=True`` when the case accepts an error (e.g. case-25 "or compaction raises a clear error"): then
  only ``no_exception`` fails.
* A check whose settings are missing (``within_budget`` without ``max_tokens``, ...) raises ``ValueError``: that is
  a mistake in the test, not a product failure.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

# --------------------------------------------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------------------------------------------

PLACEHOLDER_PHRASES: tuple[str, ...] = (
    "too long to summarize",
    "error generating summary",
    "no previous conversation history",
)
"""Placeholder / error texts that must never stand in for a summary (case-insensitive substrings)."""

FAKE_SUMMARY_ERROR = "oracle fake summary model: connection refused (simulated network error)"
"""Message of the ConnectionError raised by the "raises" fake summary model (see cases.FakeSummaryModel)."""

SUMMARY_PREFIXES: tuple[str, ...] = ("Here is a summary of the conversation to date:",)
"""Known lead-ins of summary messages (LangChain SummarizationMiddleware's words); stripped before comparing."""

THINKING_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking", "reasoning"})

IMAGE_LIKE_BLOCK_TYPES = frozenset(
    {
        "image",
        "image_url",
        "input_image",
        "file",
        "input_file",
        "audio",
        "input_audio",
        "video",
        "document",
        "media",
    }
)
"""Block types counted as a fixed cost by approx_counter (never as base64 text)."""

TOKENS_PER_IMAGE = 85
"""Cost of one image/file block in approx_counter (LangChain's count_tokens_approximately default)."""

_BLOCK_REPR_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        # a content block printed as a Python repr or JSON: {'type': 'text', ...}, {"type": "reasoning", ...}
        r"""\{\s*['"]type['"]\s*:\s*['"](?:text|reasoning|thinking|redacted_thinking|tool_use|tool_call|image|"""
        r"""image_url|input_image|file|input_file)['"]""",
        r"""['"]signature['"]\s*:""",
        r"""\bAIMessage\(""",
        r"""\bcontent=\[""",
    )
)
"""Signs of raw content blocks / message reprs leaking into a summary's text."""


# --------------------------------------------------------------------------------------------------------------
# summary detection
# --------------------------------------------------------------------------------------------------------------


def default_is_summary(message: BaseMessage) -> bool:
    """A summary message: additional_kwargs["lc_source"] == "summarization" (LangChain's SummarizationMiddleware)
    or additional_kwargs["lc_compaction"]["kind"] == "summary".  Any message type."""
    kwargs = getattr(message, "additional_kwargs", None) or {}
    if not isinstance(kwargs, dict):
        return False
    if kwargs.get("lc_source") == "summarization":
        return True
    mark = kwargs.get("lc_compaction")
    return isinstance(mark, dict) and mark.get("kind") == "summary"


# --------------------------------------------------------------------------------------------------------------
# token counters
# --------------------------------------------------------------------------------------------------------------


def messages_counter(messages: Sequence[BaseMessage]) -> int:
    """settings token_counter "messages": every message costs 1 (like token_counter=len)."""
    return len(list(messages))


def _is_data_string(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("data:") and ";base64," in value[:200]


def _is_image_like(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    btype = block.get("type")
    if btype in IMAGE_LIKE_BLOCK_TYPES:
        return True
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return True
    if block.get("source_type") == "base64" and btype not in ("text",):
        return True
    for key in ("image_url", "url", "file_data", "data"):
        value = block.get(key)
        if isinstance(value, dict):
            value = value.get("url")
        if _is_data_string(value):
            return True
    return False


def _bounded_media(message: BaseMessage) -> BaseMessage:
    content = message.content
    if not isinstance(content, list) or not any(_is_image_like(b) for b in content):
        return message
    new = [{"type": "image"} if _is_image_like(b) else b for b in content]
    return message.model_copy(update={"content": new})


def approx_counter(messages: Sequence[BaseMessage]) -> int:
    """settings token_counter "approx": LangChain's ``count_tokens_approximately`` (4 chars a token, 3 tokens a
    message, tool calls of string-content AI messages as repr, tool_call_id, role, name), except that every
    image / file / audio block (any of IMAGE_LIKE_BLOCK_TYPES, an Anthropic base64 ``source``, or a ``data:`` URL)
    costs TOKENS_PER_IMAGE instead of its base64 length.  (LangChain 1.8 only bounds "image"/"image_url"; its count
    of an ``input_image`` block is the repr of ~400k base64 characters, which contradicts case-16.)"""
    msgs = [_bounded_media(m) for m in messages if not isinstance(m, RemoveMessage)]
    if not msgs:
        return 0
    return count_tokens_approximately(msgs, tokens_per_image=TOKENS_PER_IMAGE)


COUNTERS: dict[str, Callable[[Sequence[BaseMessage]], int]] = {
    "messages": messages_counter,
    "approx": approx_counter,
    "approximate": approx_counter,
}


def counter_for(settings_or_name: dict | str | None) -> Callable[[Sequence[BaseMessage]], int]:
    """The oracle counter for settings["token_counter"] (default "approx")."""
    name = settings_or_name.get("token_counter") if isinstance(settings_or_name, dict) else settings_or_name
    name = name or "approx"
    try:
        return COUNTERS[name]
    except KeyError:
        raise ValueError(f"unknown token_counter {name!r}; expected one of {sorted(COUNTERS)}") from None


# --------------------------------------------------------------------------------------------------------------
# context
# --------------------------------------------------------------------------------------------------------------


@dataclass
class CheckContext:
    input: list[BaseMessage]
    output: list[BaseMessage] | None
    settings: dict = field(default_factory=dict)
    token_count: Callable[[list[BaseMessage]], int] | None = None
    summarizer_inputs: list[str] = field(default_factory=list)
    error: BaseException | None = None
    is_summary: Callable[[BaseMessage], bool] = default_is_summary
    allow_error: bool = False
    """True when the case accepts an exception as a correct outcome (then output checks pass on error)."""

    def count(self, messages: Sequence[BaseMessage]) -> int:
        counter = self.token_count or counter_for(self.settings)
        return counter(list(messages))

    @property
    def out(self) -> list[BaseMessage]:
        return list(self.output or [])


# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------


def _role(message: BaseMessage) -> str | None:
    return message.role.lower() if isinstance(message, ChatMessage) and isinstance(message.role, str) else None


def is_human(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) or _role(message) in ("user", "human")


def is_converted_system(message: BaseMessage) -> bool:
    """A mid-history SystemMessage sent as a HumanMessage: additional_kwargs["lc_compaction"]["converted_from"] ==
    "system" (the documented mark).  It carries the system's words, not the user's: never "the user's request"."""
    kwargs = getattr(message, "additional_kwargs", None) or {}
    mark = kwargs.get("lc_compaction") if isinstance(kwargs, dict) else None
    return isinstance(mark, dict) and mark.get("converted_from") == "system"


def is_user_turn(message: BaseMessage) -> bool:
    """A HumanMessage that is the user's (not a converted system message)."""
    return is_human(message) and not is_converted_system(message)


def is_system(message: BaseMessage) -> bool:
    return isinstance(message, SystemMessage) or _role(message) in ("system", "developer")


def is_tool(message: BaseMessage) -> bool:
    return isinstance(message, ToolMessage)


def is_ai(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage)


def wire_tool_calls(message: BaseMessage) -> list[dict]:
    """The tool calls an AIMessage makes on the wire, in order: its tool_calls, then its invalid_tool_calls (calls
    whose arguments did not parse), which langchain-openai sends as tool_calls too (id, name, the raw argument
    string) and which create_agent answers with an error ToolMessage."""
    if not isinstance(message, AIMessage):
        return []
    return [*(message.tool_calls or []), *(message.invalid_tool_calls or [])]


def tool_call_ids(message: BaseMessage) -> list[str]:
    """The ids of the tool calls an AIMessage makes on the wire (`wire_tool_calls`), in order."""
    return [tc.get("id") for tc in wire_tool_calls(message)]


def result_owners(messages: Sequence[BaseMessage]) -> dict[int, int]:
    """The wire's pairing: {index of a ToolMessage: index of the closest AIMessage before it that makes a call of
    its tool_call_id}.  A ToolMessage no earlier AIMessage calls for (an orphan) is left out.  A tool_call id is
    only unique within one AIMessage: servers that number calls per assistant turn send call_0 in every turn."""
    latest: dict[str, int] = {}
    owners: dict[int, int] = {}
    for i, m in enumerate(messages):
        for tcid in tool_call_ids(m):
            latest[tcid] = i
        if is_tool(m) and m.tool_call_id in latest:
            owners[i] = latest[m.tool_call_id]
    return owners


def _results_by_call(messages: Sequence[BaseMessage]) -> dict[tuple[int, str], list[int]]:
    """{(index of an AIMessage, call id): indices of the ToolMessages that answer it (`result_owners`)}."""
    out: dict[tuple[int, str], list[int]] = {}
    for t, a in result_owners(messages).items():
        out.setdefault((a, messages[t].tool_call_id), []).append(t)
    return out


def _call_key(messages: Sequence[BaseMessage], i: int) -> Any:
    """What identifies the AIMessage at i across the input and the output: its id, else what the model sees."""
    m = messages[i]
    return m.id or model_view(m)


def text_of(content: Any) -> str:
    """Plain text of a message content: the str itself, or the text blocks (and bare strings) joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return "" if content is None else str(content)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


def model_view(message: BaseMessage) -> tuple:
    """What the model sees of a message (no id, no metadata): the basis of "unchanged"."""
    calls = tuple((tc.get("id"), tc.get("name"), _canon(tc.get("args"))) for tc in wire_tool_calls(message))
    return (
        message.type,
        _role(message),
        _canon(message.content),
        message.name,
        calls,
        getattr(message, "tool_call_id", None),
    )


def same_message(original: BaseMessage, candidate: BaseMessage) -> bool:
    """candidate is original unchanged: same model view, and the same id when original has one."""
    if original.id and candidate.id != original.id:
        return False
    return model_view(original) == model_view(candidate)


def _desc(i: int, m: BaseMessage, where: str = "output") -> str:
    return f"{where}[{i}] {type(m).__name__}(id={m.id!r})"


def _short(value: Any, n: int = 80) -> str:
    s = value if isinstance(value, str) else repr(value)
    return s if len(s) <= n else s[:n] + f"...(+{len(s) - n} chars)"


def _diff_lists(expected: Sequence[BaseMessage], got: Sequence[BaseMessage]) -> str | None:
    """None when got is expected unchanged, else a description of the first difference."""
    for i, (a, b) in enumerate(zip(expected, got)):
        if not same_message(a, b):
            if a.id and b.id != a.id:
                return f"position {i}: expected id {a.id!r} ({type(a).__name__}), got {_desc(i, b)}"
            return (
                f"position {i}: {_desc(i, b)} differs from input[{i}] (id={a.id!r}): "
                f"expected content {_short(a.content)}, got {_short(b.content)}"
            )
    if len(expected) != len(got):
        return f"length {len(got)} != expected {len(expected)}"
    return None


def _present_in(message: BaseMessage, messages: Sequence[BaseMessage]) -> bool:
    """message (an input message) is still in messages: same id when it has one, else same model view."""
    if message.id:
        return any(m.id == message.id for m in messages)
    view = model_view(message)
    return any(model_view(m) == view for m in messages)


def _new_summaries(ctx: CheckContext) -> list[tuple[int, BaseMessage]]:
    """Summary messages in the output that are not input messages carried over unchanged."""
    found = []
    for i, m in enumerate(ctx.out):
        if ctx.is_summary(m) and not any(same_message(a, m) for a in ctx.input):
            found.append((i, m))
    return found


def _normalize_ws(s: str) -> str:
    return " ".join(s.split())


def _strip_summary_prefix(text: str) -> str:
    t = text.strip()
    for prefix in SUMMARY_PREFIXES:
        if t.startswith(prefix):
            t = t[len(prefix) :].strip()
    return t


def _summary_expected(ctx: CheckContext) -> bool:
    """settings say a summary must be made: mode "summarize", a working summary model, input above the trigger."""
    s = ctx.settings
    if s.get("mode") != "summarize" or s.get("summary_model") not in ("fixed", "blocks") or not s.get("trigger"):
        return False
    return not _fits(ctx, ctx.input)


def _fits(ctx: CheckContext, messages: Sequence[BaseMessage]) -> bool:
    """The settings' "this needs no compaction" test: not above trigger and within max_tokens."""
    trigger = ctx.settings.get("trigger")
    max_tokens = ctx.settings.get("max_tokens")
    if not trigger and max_tokens is None:
        raise ValueError("settings need 'trigger' or 'max_tokens' to tell whether the input fits")
    ok = True
    if trigger:
        if "tokens" in trigger:
            ok = ok and ctx.count(messages) <= trigger["tokens"]
        if "messages" in trigger:
            ok = ok and len(messages) <= trigger["messages"]
    if max_tokens is not None:
        ok = ok and ctx.count(messages) <= max_tokens
    return ok


# --------------------------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------------------------

CHECKS: dict[str, Callable[[CheckContext], None]] = {}
_ERROR_TOLERANT = {"no_exception", "history_preserved_on_failure", "no_placeholder_summary"}


def _register(fn: Callable[[CheckContext], None]) -> Callable[[CheckContext], None]:
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(ctx: CheckContext) -> None:
        if ctx.error is not None and name not in _ERROR_TOLERANT:
            if ctx.allow_error:
                return
            raise AssertionError(f"{name}: compaction raised {ctx.error!r}; there is no output to check")
        fn(ctx)

    CHECKS[name] = wrapper
    return wrapper


def check(name: str, ctx: CheckContext) -> None:
    """Run the check called name (a word of the cases README "Checks vocabulary")."""
    try:
        fn = CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown check {name!r}; known: {sorted(CHECKS)}") from None
    fn(ctx)


def run_checks(names: Iterable[str], ctx: CheckContext) -> None:
    """Run every named check; raise one AssertionError listing all failures."""
    failures = []
    for name in names:
        try:
            check(name, ctx)
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
    if failures:
        raise AssertionError("\n".join(failures))


# --------------------------------------------------------------------------------------------------------------
# tool pairing
# --------------------------------------------------------------------------------------------------------------


@_register
def no_orphan_tool_results(ctx: CheckContext) -> None:
    owners = result_owners(ctx.out)
    for i, m in enumerate(ctx.out):
        if is_tool(m) and i not in owners:
            raise AssertionError(
                f"{_desc(i, m)} answers tool_call_id={m.tool_call_id!r}, "
                "but no earlier AIMessage in the result has that tool call (orphan tool result)"
            )


@_register
def tool_results_adjacent(ctx: CheckContext) -> None:
    out = ctx.out
    run_owner: int | None = None  # index of the AIMessage whose result run we are in
    for i, m in enumerate(out):
        if is_tool(m):
            if run_owner is None:
                prev = _desc(i - 1, out[i - 1]) if i > 0 else "the start of the list"
                raise AssertionError(
                    f"{_desc(i, m)} (tool_call_id={m.tool_call_id!r}) does not sit in a run of ToolMessages "
                    f"directly after an AIMessage with tool calls (it follows {prev})"
                )
            if m.tool_call_id not in tool_call_ids(out[run_owner]):
                raise AssertionError(
                    f"{_desc(i, m)} (tool_call_id={m.tool_call_id!r}) sits in the tool-result run of "
                    f"{_desc(run_owner, out[run_owner])}, which calls {tool_call_ids(out[run_owner])}, "
                    "not that id (result not adjacent to its call)"
                )
        elif tool_call_ids(m):
            run_owner = i
        else:
            run_owner = None


@_register
def no_dangling_tool_calls(ctx: CheckContext) -> None:
    """Every tool call has a ToolMessage answering it: a later one whose closest calling AIMessage is this one
    (`result_owners`; an id reused by a later turn is another call).  Two calls of one AIMessage with the same id
    need two answers."""
    out = ctx.out
    answers = _results_by_call(out)
    for i, m in enumerate(out):
        ids = tool_call_ids(m)
        for tcid in dict.fromkeys(ids):
            need, got = ids.count(tcid), len(answers.get((i, tcid), []))
            if got < need:
                what = "no later ToolMessage in the result answers" if not got else (
                    f"{need} calls of this message share, but {got} ToolMessage(s) answer")
                raise AssertionError(f"{_desc(i, m)} has tool_call id={tcid!r} that {what} (dangling tool call)")


@_register
def no_duplicate_tool_results(ctx: CheckContext) -> None:
    """No tool call is answered by more than one ToolMessage (pairing as on the wire, `result_owners`); an id
    shared by two calls of one AIMessage is a duplicate as soon as two results answer it."""
    for (a, tcid), idx in _results_by_call(ctx.out).items():
        if len(idx) > 1:
            raise AssertionError(
                f"tool_call_id={tcid!r} of {_desc(a, ctx.out[a])} is answered by {len(idx)} ToolMessages: "
                + ", ".join(_desc(i, ctx.out[i]) for i in idx)
            )


@_register
def tool_pairs_atomic(ctx: CheckContext) -> None:
    """For every tool call of the input (its AIMessage and its id: a reused id in another turn is another call),
    the call and its result are both in the output or both absent."""
    out = ctx.out
    call_at = {(_call_key(out, i), tcid): i for i, m in enumerate(out) for tcid in tool_call_ids(m)}
    result_at = {(_call_key(out, a), tcid): idx[0] for (a, tcid), idx in _results_by_call(out).items()}
    inp = ctx.input
    for j, m in enumerate(inp):
        for tcid in tool_call_ids(m):
            key = (_call_key(inp, j), tcid)
            has_call, has_result = key in call_at, key in result_at
            if has_call != has_result:
                if has_call:
                    raise AssertionError(
                        f"tool_call_id={tcid!r} (input[{j}] id={m.id!r}): the call survives at "
                        f"output[{call_at[key]}] but its result was removed"
                    )
                raise AssertionError(
                    f"tool_call_id={tcid!r} (input[{j}] id={m.id!r}): the result survives at "
                    f"output[{result_at[key]}] (id={out[result_at[key]].id!r}) but its call was removed"
                )
    # a result in the output that no call before it makes any more (its call was removed)
    owners = result_owners(out)
    for t, m in enumerate(out):
        if is_tool(m) and t not in owners:
            for j, src in enumerate(inp):
                if m.tool_call_id in tool_call_ids(src):
                    raise AssertionError(
                        f"tool_call_id={m.tool_call_id!r} (input[{j}] id={src.id!r}): the result survives at "
                        f"output[{t}] (id={m.id!r}) but its call was removed"
                    )


# --------------------------------------------------------------------------------------------------------------
# provider order
# --------------------------------------------------------------------------------------------------------------


@_register
def first_non_system_is_human(ctx: CheckContext) -> None:
    for i, m in enumerate(ctx.out):
        if is_system(m):
            continue
        if not is_human(m):
            raise AssertionError(f"the first non-system message is {_desc(i, m)}, not a HumanMessage")
        return


@_register
def tool_call_follows_user_or_tool(ctx: CheckContext) -> None:
    out = ctx.out
    for i, m in enumerate(out):
        if tool_call_ids(m):
            if i == 0:
                raise AssertionError(f"{_desc(i, m)} with tool calls {tool_call_ids(m)} starts the result")
            prev = out[i - 1]
            if not (is_human(prev) or is_tool(prev)):
                raise AssertionError(
                    f"{_desc(i, m)} with tool calls {tool_call_ids(m)} follows {_desc(i - 1, prev)}, "
                    "not a HumanMessage or ToolMessage"
                )


@_register
def system_only_at_start(ctx: CheckContext) -> None:
    started = False
    for i, m in enumerate(ctx.out):
        if is_system(m):
            if started:
                raise AssertionError(f"{_desc(i, m)} appears after a non-system message")
        else:
            started = True


@_register
def thinking_leads_active_turn(ctx: CheckContext) -> None:
    def active_first_ai(messages: Sequence[BaseMessage], human: Callable[[BaseMessage], bool]):
        last = max((i for i, m in enumerate(messages) if human(m)), default=-1)
        for i in range(last + 1, len(messages)):
            if is_ai(messages[i]):
                return last, i
        return last, None

    def leads_with_thinking(m: BaseMessage) -> bool:
        c = m.content
        return (
            isinstance(c, list) and bool(c) and isinstance(c[0], dict) and c[0].get("type") in THINKING_BLOCK_TYPES
        )

    _, j = active_first_ai(ctx.input, lambda m: is_user_turn(m) and not ctx.is_summary(m))
    if j is None or not leads_with_thinking(ctx.input[j]):
        return
    last, k = active_first_ai(ctx.out, is_user_turn)
    if k is None:
        return
    m = ctx.out[k]
    first = m.content[0] if isinstance(m.content, list) and m.content else m.content
    if not leads_with_thinking(m):
        raise AssertionError(
            f"the input's active turn starts with a thinking block (input[{j}] id={ctx.input[j].id!r}), but the "
            f"first AIMessage after the result's last HumanMessage (output[{last}]), {_desc(k, m)}, "
            f"starts with {_short(first)}"
        )


# --------------------------------------------------------------------------------------------------------------
# must survive
# --------------------------------------------------------------------------------------------------------------


@_register
def preserves_system_prompt(ctx: CheckContext) -> None:
    """The input's leading SystemMessage is the result's first message with its content unchanged.

    Lenient on one point (case-07 allows merging a summary INTO the leading SystemMessage): the result's first
    message may also be a SystemMessage whose text starts with the original text, when the original is a str."""
    if not ctx.input or not is_system(ctx.input[0]):
        return
    original = ctx.input[0]
    out = ctx.out
    if not out:
        raise AssertionError(f"the result is empty; the system prompt (input[0] id={original.id!r}) was lost")
    first = out[0]
    if not is_system(first):
        raise AssertionError(
            f"the result starts with {_desc(0, first)}, not the input's SystemMessage (id={original.id!r})"
        )
    if _canon(first.content) == _canon(original.content):
        return
    if isinstance(original.content, str) and text_of(first.content).startswith(original.content):
        return
    raise AssertionError(
        f"{_desc(0, first)}: system prompt content changed: expected {_short(original.content)}, "
        f"got {_short(first.content)}"
    )


def _latest_human(ctx: CheckContext) -> tuple[int, BaseMessage] | None:
    for j in range(len(ctx.input) - 1, -1, -1):
        m = ctx.input[j]
        if is_user_turn(m) and not ctx.is_summary(m):
            return j, m
    return None


@_register
def keeps_latest_human_verbatim(ctx: CheckContext) -> None:
    found = _latest_human(ctx)
    if found is None:
        return
    j, latest = found
    want = _canon(latest.content)
    for m in ctx.out:
        if is_human(m) and not ctx.is_summary(m) and _canon(m.content) == want:
            return
    raise AssertionError(
        f"the input's last HumanMessage (input[{j}] id={latest.id!r}, content {_short(latest.content)}) "
        "is not in the result with identical content (outside a summary)"
    )


@_register
def keeps_tail_verbatim(ctx: CheckContext) -> None:
    keep = ctx.settings.get("keep") or {}
    inp = ctx.input
    if "messages" in keep:
        n = int(keep["messages"])
    elif "tokens" in keep:
        n = 0
        while n < len(inp) and ctx.count(inp[len(inp) - n - 1 :]) <= keep["tokens"]:
            n += 1
    else:
        raise ValueError(f"keeps_tail_verbatim needs settings['keep'] with 'messages' or 'tokens', got {keep!r}")
    n = min(n, len(inp))
    if n <= 0:
        return
    tail = inp[-n:]
    out = ctx.out
    if len(out) < n:
        raise AssertionError(f"the result has {len(out)} messages, fewer than the {n} tail messages to keep")
    got = out[-n:]
    for k, (a, b) in enumerate(zip(tail, got)):
        if not same_message(a, b):
            i_in, i_out = len(inp) - n + k, len(out) - n + k
            raise AssertionError(
                f"tail message input[{i_in}] {type(a).__name__}(id={a.id!r}) is not kept unchanged at "
                f"output[{i_out}]: found {type(b).__name__}(id={b.id!r}) content {_short(b.content)}"
            )


@_register
def nonempty_with_human(ctx: CheckContext) -> None:
    """At least one HumanMessage that is not a summary (a summary does not carry the user's request), nor a
    converted system message."""
    if not any(is_user_turn(m) and not ctx.is_summary(m) for m in ctx.out):
        kinds = [type(m).__name__ for m in ctx.out]
        raise AssertionError(f"the result has no (non-summary) HumanMessage: {kinds}")


@_register
def history_preserved_on_failure(ctx: CheckContext) -> None:
    """Applies when the summary model fails (settings summary_model "raises", or no summary_model given)."""
    if ctx.settings.get("summary_model") not in (None, "raises"):
        return
    if ctx.error is not None:
        return  # the error propagated: nothing was deleted
    diff = _diff_lists(ctx.input, ctx.out)
    if diff is not None:
        missing = [f"input[{j}] id={m.id!r}" for j, m in enumerate(ctx.input) if not _present_in(m, ctx.out)]
        raise AssertionError(
            "the summary model failed but the input was not returned unchanged: "
            f"{diff}; missing from the result: {missing}"
        )


@_register
def no_placeholder_summary(ctx: CheckContext) -> None:
    phrases = [*PLACEHOLDER_PHRASES, FAKE_SUMMARY_ERROR.lower(), "traceback (most recent call last)"]
    if ctx.error is not None and len(str(ctx.error)) >= 12:
        phrases.append(str(ctx.error).lower())
    for i, m in enumerate(ctx.out):
        if not ctx.is_summary(m) and any(same_message(a, m) for a in ctx.input):
            continue  # carried over from the input, not written by compaction
        text = (text_of(m.content) if not isinstance(m.content, list) else _canon(m.content)).lower()
        for p in phrases:
            if p in text:
                raise AssertionError(f"{_desc(i, m)} carries placeholder/error text {p!r}: {_short(m.content)}")


@_register
def no_exception(ctx: CheckContext) -> None:
    if ctx.error is not None:
        raise AssertionError(f"compaction raised {type(ctx.error).__name__}: {ctx.error}")


# --------------------------------------------------------------------------------------------------------------
# budget
# --------------------------------------------------------------------------------------------------------------


@_register
def within_budget(ctx: CheckContext) -> None:
    budget = ctx.settings.get("max_tokens")
    if budget is None:
        raise ValueError("within_budget needs settings['max_tokens']")
    used = ctx.count(ctx.out)
    if used > budget:
        per = [ctx.count([m]) for m in ctx.out]
        biggest = max(range(len(per)), key=per.__getitem__) if per else None
        hint = f"; largest is {_desc(biggest, ctx.out[biggest])} at {per[biggest]}" if biggest is not None else ""
        raise AssertionError(
            f"token_count(result) = {used} > max_tokens {budget} "
            f"(counter {ctx.settings.get('token_counter', 'custom' if ctx.token_count else 'approx')}){hint}"
        )


@_register
def unchanged_if_under_budget(ctx: CheckContext) -> None:
    if not _fits(ctx, ctx.input):
        return
    diff = _diff_lists(ctx.input, ctx.out)
    if diff is not None:
        raise AssertionError(
            f"the input fits (count {ctx.count(ctx.input)}, {len(ctx.input)} messages, settings "
            f"trigger={ctx.settings.get('trigger')} max_tokens={ctx.settings.get('max_tokens')}) "
            f"but was changed: {diff}"
        )


@_register
def no_remove_messages(ctx: CheckContext) -> None:
    for i, m in enumerate(ctx.out):
        if isinstance(m, RemoveMessage) or getattr(m, "type", None) == "remove":
            raise AssertionError(f"{_desc(i, m)} is a RemoveMessage in the model-facing result")


@_register
def ids_present_and_unique(ctx: CheckContext) -> None:
    input_ids = {m.id for m in ctx.input if m.id}
    input_views = {model_view(m) for m in ctx.input}
    seen: dict[str, int] = {}
    for i, m in enumerate(ctx.out):
        carried = (m.id and m.id in input_ids) or model_view(m) in input_views
        if carried and not m.id:
            raise AssertionError(f"{_desc(i, m)} is carried over from the input but has no id")
        if m.id:
            if m.id in seen:
                raise AssertionError(
                    f"output[{seen[m.id]}] and output[{i}] share the id {m.id!r} "
                    f"({type(ctx.out[seen[m.id]]).__name__}, {type(m).__name__})"
                )
            seen[m.id] = i


# --------------------------------------------------------------------------------------------------------------
# summary lifecycle
# --------------------------------------------------------------------------------------------------------------


def _string_values(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "type":
                yield from _string_values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _string_values(v)


@_register
def summary_is_plain_text(ctx: CheckContext) -> None:
    blocks = ctx.settings.get("summary_reply_blocks")
    new = _new_summaries(ctx)
    if not new and blocks and (ctx.summarizer_inputs or _summary_expected(ctx)):
        raise AssertionError(
            "the result has no new summary although "
            + ("the summary model was called" if ctx.summarizer_inputs else "the input is above the trigger")
            + " (its reply blocks were never checked)"
        )
    for i, m in new:
        if not isinstance(m.content, str):
            raise AssertionError(
                f"{_desc(i, m)} summary content is a {type(m.content).__name__}, not a str: {_short(m.content)}"
            )
        content = m.content
        for pat in _BLOCK_REPR_PATTERNS:
            hit = pat.search(content)
            if hit:
                raise AssertionError(
                    f"{_desc(i, m)} summary holds block repr/JSON ({hit.group(0)!r} at {hit.start()}): "
                    f"{_short(content[max(0, hit.start() - 30):], 120)}"
                )
        if not blocks:
            continue
        texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "text":
                continue
            for s in _string_values(b):
                if len(s) >= 8 and s in content:
                    raise AssertionError(
                        f"{_desc(i, m)} summary contains text of a non-text {b.get('type')!r} block: {_short(s)}"
                    )
        for t in texts:
            if t.strip() and _normalize_ws(t) not in _normalize_ws(content):
                raise AssertionError(f"{_desc(i, m)} summary is missing the model's text block {_short(t)}")
        limit = 2 * sum(len(t) for t in texts) + 500
        # the product's quote of the user's short turns (lc_compaction's said line) is not the model's text
        content = "\n".join(line for line in content.splitlines() if not line.startswith("The user said, verbatim: "))
        if len(content) > limit:
            raise AssertionError(
                f"{_desc(i, m)} summary is {len(content)} chars, more than {limit} for "
                f"{sum(len(t) for t in texts)} chars of text blocks"
            )


@_register
def single_summary(ctx: CheckContext) -> None:
    idx = [i for i, m in enumerate(ctx.out) if ctx.is_summary(m)]
    if len(idx) > 1:
        raise AssertionError(
            f"{len(idx)} summary messages in the result: " + ", ".join(_desc(i, ctx.out[i]) for i in idx)
        )


@_register
def prior_summary_fed_to_summarizer(ctx: CheckContext) -> None:
    priors = [(j, m) for j, m in enumerate(ctx.input) if ctx.is_summary(m)]
    if not priors:
        return
    if ctx.summarizer_inputs:
        haystack = _normalize_ws("\n".join(ctx.summarizer_inputs))
        where = "the summarizer input"
    else:
        new = _new_summaries(ctx)
        if not new:
            if _summary_expected(ctx):
                raise AssertionError(
                    "the input is above the trigger in summarize mode, but the summary model was never called and "
                    f"no new summary was made (earlier summary at input[{priors[0][0]}] id={priors[0][1].id!r})"
                )
            return  # no new summary was made
        haystack = _normalize_ws("\n".join(text_of(m.content) for _, m in new))
        where = "the new summary (the summarizer was never called)"
    for j, prior in priors:
        body = _normalize_ws(_strip_summary_prefix(text_of(prior.content)))
        if body and body not in haystack:
            raise AssertionError(
                f"the earlier summary input[{j}] (id={prior.id!r}) text {_short(body)} is not in {where}"
            )


@_register
def no_resummarize_summary_only(ctx: CheckContext) -> None:
    removed_real = [
        (j, m)
        for j, m in enumerate(ctx.input)
        if not is_system(m) and not ctx.is_summary(m) and not _present_in(m, ctx.out)
    ]
    if removed_real:
        return
    new = _new_summaries(ctx)
    if new:
        i, m = new[0]
        raise AssertionError(
            f"{_desc(i, m)} is a new summary although no conversation message was summarized away "
            "(only earlier summaries): summary of a summary"
        )
    if ctx.summarizer_inputs:
        raise AssertionError(
            f"the summary model was called {len(ctx.summarizer_inputs)} time(s) although the only summarizable "
            "content was an earlier summary (no conversation message was removed)"
        )


# --------------------------------------------------------------------------------------------------------------
# structural checks for every output
# --------------------------------------------------------------------------------------------------------------

ALL_STRUCTURAL: list[str] = [
    "no_orphan_tool_results",
    "tool_results_adjacent",
    "no_dangling_tool_calls",
    "no_duplicate_tool_results",
    "tool_pairs_atomic",
    "first_non_system_is_human",
    "tool_call_follows_user_or_tool",
    "system_only_at_start",
    "preserves_system_prompt",
    "single_summary",
    "summary_is_plain_text",
    "no_remove_messages",
    "ids_present_and_unique",
]
"""Checks that must hold for every compaction output (with the conditions of CONDITIONAL_STRUCTURAL)."""

# --------------------------------------------------------------------------------------------------------------
# the running request's calls (issue 12)
# --------------------------------------------------------------------------------------------------------------


def running_calls(history: Sequence[BaseMessage]) -> list[dict]:
    """The tool calls of the running request of `history` (in order): when the history ends with tool results
    (the model is about to be called with them), every tool call made after its latest user request (a
    HumanMessage that is not a summary: marks or the summary prefix); else none."""
    if not history or not is_tool(history[-1]):
        return []
    request = max((i for i, m in enumerate(history) if is_human(m) and not default_is_summary(m)
                   and not text_of(m.content).lstrip().startswith(SUMMARY_PREFIXES)), default=-1)
    return [c for m in history[request + 1:] if is_ai(m) for c in (m.tool_calls or [])]


def _named(text: str, call: dict) -> bool:
    """Whether `text` names `call` as a progress note line does: `name({json arguments...` (the arguments as JSON,
    the first 60 characters; a note cuts long arguments)."""
    args = json.dumps(call.get("args") or {}, ensure_ascii=False)
    return f"{call.get('name')}({args[:60]}" in text


COUNTED_LINE = re.compile(r"^- \[(\d+) earlier calls: ([^\];]*)(?:; (\d+) failed)?\]", re.M)
"""A progress note's line that counts its oldest calls instead of naming them (issue 24: a bounded note), by
tool: `- [37 earlier calls: bash x35, edit x2; 3 failed]`."""


def counted_calls(text: str) -> dict[str, int]:
    """Calls by tool name that the counted lines of `text` stand for."""
    counts: dict[str, int] = {}
    for m in COUNTED_LINE.finditer(text):
        for part in m.group(2).split(", "):
            name, _, n = part.rpartition(" x")
            if name and n.isdigit():
                counts[name] = counts.get(name, 0) + int(n)
    return counts


def missing_running_calls(history: Sequence[BaseMessage], sent: Sequence[BaseMessage]) -> list[str]:
    """The tool calls of the running request of `history` (the uncompacted history before a model call) that
    `sent` (what the model received) neither holds (an AIMessage with a tool call of the same id and name) nor
    names in the text of an assistant message (a progress note) nor counts there (a counted line: the oldest
    calls of its tool that are not named, as many as it says); each as "name(args) id"."""
    held = {(c.get("id"), c.get("name")) for m in sent if is_ai(m) for c in (m.tool_calls or [])}
    texts = "\n".join(text_of(m.content) for m in sent if is_ai(m))
    counted = counted_calls(texts)
    missing = []
    for c in running_calls(history):
        if (c.get("id"), c.get("name")) in held or _named(texts, c):
            continue
        if counted.get(c.get("name"), 0) > 0:
            counted[c.get("name")] -= 1
            continue
        missing.append(f"{c.get('name')}({json.dumps(c.get('args'), ensure_ascii=False)[:80]}) {c.get('id')}")
    return missing


def new_adjacent_user_turns(input: Sequence[BaseMessage], output: Sequence[BaseMessage]) -> list[str]:
    """Pairs of user turns (HumanMessages, summaries included) side by side in `output` that were not side by side
    in `input` (compared by id; a message new in the output was side by side with nothing). Providers and chat
    templates that require alternating roles reject them."""
    pos = {m.id: i for i, m in enumerate(input) if m.id}
    out = []
    for a, b in zip(output, output[1:]):
        if is_human(a) and is_human(b):
            ia, ib = pos.get(a.id), pos.get(b.id)
            if ia is None or ib is None or ib != ia + 1:
                out.append(f"{a.id} then {b.id}")
    return out


CONDITIONAL_STRUCTURAL = frozenset(
    {
        "first_non_system_is_human",
        "tool_call_follows_user_or_tool",
        "system_only_at_start",
        "single_summary",
        "ids_present_and_unique",
    }
)
"""Of ALL_STRUCTURAL, the properties required of the output only when the input already had them (an input that
breaks them is a case-specific matter: a mid-history SystemMessage, an input without ids, a provider rule)."""


def check_all_structural(
    input: list[BaseMessage],
    output: list[BaseMessage],
    *,
    is_summary: Callable[[BaseMessage], bool] = default_is_summary,
    names: Iterable[str] | None = None,
) -> None:
    """Run ALL_STRUCTURAL (or names) on output; conditional checks only when the input satisfied them.
    Raises one AssertionError listing every failure."""
    ctx = CheckContext(input=list(input), output=list(output), is_summary=is_summary)
    self_ctx = CheckContext(input=list(input), output=list(input), is_summary=is_summary)
    failures = []
    for name in names if names is not None else ALL_STRUCTURAL:
        if name in CONDITIONAL_STRUCTURAL:
            try:
                check(name, self_ctx)
            except AssertionError:
                continue
        try:
            check(name, ctx)
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
    if failures:
        raise AssertionError("\n".join(failures))


__all__ = [
    "ALL_STRUCTURAL",
    "CHECKS",
    "CONDITIONAL_STRUCTURAL",
    "COUNTERS",
    "CheckContext",
    "FAKE_SUMMARY_ERROR",
    "PLACEHOLDER_PHRASES",
    "approx_counter",
    "check",
    "check_all_structural",
    "counter_for",
    "default_is_summary",
    "messages_counter",
    "missing_running_calls",
    "new_adjacent_user_turns",
    "model_view",
    "run_checks",
    "running_calls",
    "same_message",
    "text_of",
    *CHECKS,
]

