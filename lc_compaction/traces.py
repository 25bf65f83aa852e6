"""Load recorded agent conversations (OpenAI chat format, one conversation a JSON line) as LangChain messages.

The format (see `lc_compaction/examples/README.md` and the shared traces' README):

    {"id": str, "source": str, "license": str,
     "messages": [{"role": "system"|"developer"|"user"|"assistant"|"tool",
                   "content": str | [content block, ...] | null,          # null only for an assistant
                   "tool_calls": [{"id": str, "type": "function",
                                   "function": {"name": str, "arguments": str (a JSON object)}}],  # assistant
                   "tool_call_id": str,                                   # tool only, required
                   "name": str, "id": str}]}                              # optional

Each line is validated (pydantic models for the JSON shape, then the core's pairing rules from
`structure.check_invariants`) before `langchain_core.messages.convert_to_messages` turns the messages into
`BaseMessage`s. A message without an `id` gets the stable id `f"{conversation_id}:{index}"`; a line without an
`id` gets the conversation id `f"{file stem}:{line number}"`.

A file (or `parse_trace_input`'s bytes) may also hold one conversation as a JSON list of messages (OpenAI
format as above, or LangChain `messages_to_dict` dicts), or one trace object spread over several lines; the
format is detected from the text (see `parse_trace_input`), so `lc-compaction replay` and `lc-compaction compact`
read the same inputs.

Anything that is not a valid trace raises `TraceFormatError` naming the file, the line and the field, e.g.
`traces.jsonl line 3: messages[5].tool_calls[0].function.arguments: expected a string, got an object`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, Optional, Union

from langchain_core.messages import BaseMessage, ToolMessage, convert_to_messages, messages_from_dict
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from lc_compaction.structure import check_invariants

__all__ = ["Trace", "TraceFormatError", "TraceInput", "bundled_traces", "iter_traces", "load_traces",
           "parse_messages", "parse_record", "parse_trace_input"]

TOLERATED_VIOLATIONS = frozenset({"system_not_at_start"})
"""Invariant violations a trace may have: a mid-history system message is sent as a HumanMessage by
`compact` (lossless, reported), so it does not make a trace invalid. Every other violation does."""


class TraceFormatError(ValueError):
    """A trace file (or a message list) is not a valid recorded conversation.

    Attributes:
        path: the file as given (a string; "<stdin>" or similar for streams).
        line: the 1-based line number in the file, or None when the problem concerns the whole file.
        field: where in the line's JSON the problem is, e.g. "messages[5].tool_calls[0].function.arguments"
            (None when the line as a whole is wrong, e.g. not JSON).
        problem: what is wrong, in words.

    `str(error)` is "{path} line {line}: {field}: {problem}".
    """

    def __init__(self, path: str, line: int | None, field: str | None, problem: str):
        self.path, self.line, self.field, self.problem = path, line, field, problem
        where = path if line is None else f"{path} line {line}"
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


@dataclass
class Trace:
    """One recorded conversation.

    Attributes:
        id: the conversation id (the line's "id", else f"{file stem}:{line}").
        messages: the conversation as LangChain messages, each with a unique id.
        path: the file it was read from.
        line: its 1-based line number in that file.
        source: where the data comes from ("owner/repo:path"), if the line says.
        license: the data's license, if the line says.
        extra: the line's other top-level keys, as they were.
        message_format: how the messages were written: "openai" (chat format) or "langchain"
            (`messages_to_dict` dicts).
    """

    id: str
    messages: list[BaseMessage]
    path: Path
    line: int
    source: str | None = None
    license: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    message_format: Literal["openai", "langchain"] = "openai"


@dataclass
class TraceInput:
    """What `parse_trace_input` read: the format it detected and the conversations.

    Attributes:
        format: "jsonl" (one trace object a line), "object" (one trace object over several lines) or "list"
            (a JSON list of the messages of one conversation).
        traces: the conversations, in order.
        records: the decoded trace objects, one per trace ("jsonl" and "object"; empty for "list").
    """

    format: Literal["jsonl", "object", "list"]
    traces: list[Trace]
    records: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------- the shape
# Validators may raise ValueError whose text starts with "." or "[": that text continues the field path
# (e.g. ".tool_call_id: required ..." on a message) instead of being a problem of the field itself.

class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Function(_Model):
    name: str
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: str) -> str:
        try:
            parsed = json.loads(value, strict=False)  # strict=False: as convert_to_messages parses it
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at character {exc.pos}): {value[:80]!r}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"expected a JSON object of arguments, got JSON {type(parsed).__name__}: {value[:80]!r}")
        return value


class _ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: _Function


class _Message(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None
    tool_calls: Optional[list[_ToolCall]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None
    id: Optional[str] = None

    @field_validator("content")
    @classmethod
    def _content(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError(f"expected a string, a list of content blocks or null, got {_kind(value)}")
        for k, block in enumerate(value):
            if isinstance(block, str):
                continue
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                got = "an object without a string 'type'" if isinstance(block, dict) else _kind(block)
                raise ValueError(f"[{k}]: expected a content block (an object with a string 'type'), got {got}")
        return value

    @model_validator(mode="after")
    def _role_rules(self) -> _Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError(".tool_call_id: required for a tool message (it names the tool call it answers)")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f".tool_calls: only an assistant message may make tool calls, this one is {self.role!r}")
        if self.content is None and self.role != "assistant":
            raise ValueError(f".content: null is allowed only for an assistant message, this one is {self.role!r}")
        return self


class _Record(_Model):
    id: Optional[Union[str, int]] = None
    source: Optional[str] = None
    license: Optional[str] = None
    messages: list[_Message]


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


_EXPECTED = {"string_type": "expected a string", "list_type": "expected a list", "dict_type": "expected an object",
             "model_type": "expected an object", "model_attributes_type": "expected an object",
             "int_type": "expected a number"}


def _path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_problem(exc: ValidationError) -> tuple[str | None, str]:
    """(field path, problem) of the first error pydantic found, in words."""
    errors = exc.errors(include_url=False)
    # drop pydantic's union-member tags ("str", "int", "list[...]") from locations: they are not fields
    locs = [[p for p in e["loc"] if not (isinstance(p, str) and ("[" in p or p in ("str", "int")))] for e in errors]
    err, loc = errors[0], locs[0]
    field_path = _path(loc) or None
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        problem = "missing (required)"
    elif kind == "literal_error":
        problem = f"{err['msg'].replace('Input should be', 'expected')}, got {value!r}"
    elif kind in _EXPECTED:
        problem = f"{_EXPECTED[kind]}, got {_kind(value)}"
    elif kind == "value_error":
        problem = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        if problem[:1] in (".", "[") and ": " in problem:  # a validator's sub-path (see the note above)
            sub, problem = problem.split(": ", 1)
            field_path = (field_path or "") + sub
    else:
        problem = err["msg"]
    more = len({tuple(x) for x in locs[1:]} - {tuple(loc)})
    if more:
        problem += f" (and {more} more problem{'s' if more > 1 else ''} in this line)"
    return field_path, problem


# ---------------------------------------------------------------------------------------------------- parsing
def parse_messages(messages: Any, *, path: str = "<input>", line: int | None = None,
                   conversation_id: str = "conversation",
                   prefix: str = "messages", check_history: bool = True) -> list[BaseMessage]:
    """Validate a list of OpenAI-format message dicts and convert it to LangChain messages.

    Args:
        messages: the list (JSON-decoded).
        path, line: named in errors (the file, and the 1-based line the list came from; None when the list
            is the whole file).
        conversation_id: prefix of the ids given to messages without one (`f"{conversation_id}:{index}"`).
        prefix: the list's field path, named in errors ("messages" inside a trace line, "" for a bare list).
        check_history: False: only the shape is checked, and the history rules (a repeated message id, tool
            call / tool result pairing, order) are left to the caller: `compact(..., repair=True)` repairs them
            (what `lc-compaction compact --repair` does).

    Returns:
        One `BaseMessage` a message, in order, each with a unique id (the input's or the stable one).

    Raises:
        TraceFormatError: naming `path`, `line` and the field, when the list is not a valid conversation: a
            wrong shape or type, tool-call arguments that are not a JSON object, a repeated message id, or a
            tool call / tool result pairing error (the message index and tool_call_id; the rules are the
            core's `check_invariants`, except that a mid-history system message is accepted); the last two
            only with `check_history`.
    """
    if _is_langchain(messages):
        return _convert(_from_langchain(messages, path=path, line=line, prefix=prefix), path=path, line=line,
                        conversation_id=conversation_id, prefix=prefix, check_history=check_history)
    try:
        _Record.model_validate({"messages": messages})
    except ValidationError as exc:
        field_path, problem = _first_problem(exc)
        if field_path and prefix != "messages":
            field_path = prefix + field_path[len("messages"):]
        raise TraceFormatError(path, line, field_path, problem) from None
    return _convert(_from_openai(messages, path=path, line=line, prefix=prefix), path=path, line=line,
                    conversation_id=conversation_id, prefix=prefix, check_history=check_history)


def _is_langchain(messages: Any) -> bool:
    """Whether a (non-empty) list holds LangChain `messages_to_dict` dicts (`{"type": ..., "data": {...}}`)."""
    return (isinstance(messages, list) and bool(messages)
            and all(isinstance(m, dict) and "type" in m and isinstance(m.get("data"), dict) for m in messages))


def _from_openai(raw: list[Any], *, path: str, line: int | None, prefix: str) -> list[BaseMessage]:
    """OpenAI-format dicts (their shape already validated) as LangChain messages."""
    try:
        return list(convert_to_messages(raw))
    except Exception as exc:  # the shape was checked; anything left is langchain-core's own complaint
        raise TraceFormatError(path, line, prefix, f"could not convert to LangChain messages: {exc}") from exc


def _from_langchain(raw: list[dict[str, Any]], *, path: str, line: int | None, prefix: str) -> list[BaseMessage]:
    """LangChain `messages_to_dict` dicts as messages; a dict that does not load names its index."""
    out: list[BaseMessage] = []
    for i, item in enumerate(raw):
        try:
            out.extend(messages_from_dict([item]))
        except Exception as exc:  # noqa: BLE001 - messages_from_dict raises bare KeyError, ValueError, pydantic errors
            raise TraceFormatError(path, line, f"{prefix}[{i}]",
                                   f"not a LangChain message dict ({type(exc).__name__}: {exc})") from None
    return out


def _convert(converted: list[BaseMessage], *, path: str, line: int | None, conversation_id: str,
             prefix: str, check_history: bool = True) -> list[BaseMessage]:
    """Check ids and pairing rules of a converted conversation (with `check_history`; see `parse_messages`),
    and give stable ids to messages without one."""
    if not converted:
        raise TraceFormatError(path, line, prefix, "empty: a conversation needs at least one message")
    seen: dict[str, int] = {}
    for i, m in enumerate(converted):
        if m.id:
            if m.id in seen and check_history:
                raise TraceFormatError(path, line, f"{prefix}[{i}].id", f"{m.id!r} repeats {prefix}[{seen[m.id]}].id")
            seen[m.id] = i
    out: list[BaseMessage] = []
    for i, message in enumerate(converted):
        if not message.id:
            stable = f"{conversation_id}:{i}"
            if stable in seen:
                raise TraceFormatError(path, line, f"{prefix}[{seen[stable]}].id",
                                       f"{stable!r} is the id this loader gives {prefix}[{i}]; use another id")
            message = message.model_copy(update={"id": stable})
        out.append(message)
    for v in check_invariants(out) if check_history else ():
        if v.kind in TOLERATED_VIOLATIONS:
            continue
        where = "tool_call_id" if isinstance(out[v.index], ToolMessage) else "tool_calls" if v.tool_call_id else "role"
        tc = f" (tool_call_id {v.tool_call_id!r})" if v.tool_call_id else ""
        detail = f": {v.detail}" if v.detail else ""
        raise TraceFormatError(path, line, f"{prefix}[{v.index}].{where}", f"{v.kind.replace('_', ' ')}{tc}{detail}")
    return out


def parse_record(record: Any, *, path: str = "<input>", line: int = 1, check_history: bool = True) -> Trace:
    """Validate one JSON-decoded trace line (an object with "messages") and convert it to a `Trace`
    (`check_history`: see `parse_messages`).

    Raises:
        TraceFormatError: naming `path`, `line` and the field (see `parse_messages`).
    """
    if not isinstance(record, dict):
        raise TraceFormatError(path, line, None, f"expected a JSON object with \"messages\", got {_kind(record)}")
    langchain = _is_langchain(record.get("messages"))
    try:  # the LangChain dicts are checked by messages_from_dict below, the rest of the record here
        parsed = _Record.model_validate({**record, "messages": []} if langchain else record)
    except ValidationError as exc:
        field_path, problem = _first_problem(exc)
        raise TraceFormatError(path, line, field_path, problem) from None
    conv_id = str(parsed.id) if parsed.id is not None else f"{Path(path).stem}:{line}"
    raw = record["messages"]
    converted = (_from_langchain(raw, path=path, line=line, prefix="messages") if langchain
                 else _from_openai(raw, path=path, line=line, prefix="messages"))
    messages = _convert(converted, path=path, line=line, conversation_id=conv_id, prefix="messages",
                        check_history=check_history)
    extra = {k: v for k, v in record.items() if k not in ("id", "source", "license", "messages")}
    return Trace(id=conv_id, messages=messages, path=Path(path), line=line, source=parsed.source,
                 license=parsed.license, extra=extra, message_format="langchain" if langchain else "openai")


def _decode(data: bytes, path: str) -> str:
    """`data` as UTF-8 text (a leading byte-order mark, as Windows tools write, is dropped); otherwise
    TraceFormatError naming the line and the byte in that line (0-based)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceFormatError(path, line, None, f"not UTF-8 text (byte {exc.start - line_start})") from None


def _json_error(path: str, exc: json.JSONDecodeError, line_offset: int = 0) -> TraceFormatError:
    """A JSON syntax error as a TraceFormatError naming the line (`exc`'s line plus `line_offset`)."""
    return TraceFormatError(path, exc.lineno + line_offset, None, f"not valid JSON: {exc.msg} (column {exc.colno})")


def parse_trace_input(data: bytes | str, *, path: str = "<input>", check_history: bool = True) -> TraceInput:
    """Read conversations from the bytes (or text) of a file, detecting the format.

    Formats (after leading whitespace):
    - `[` : the whole text is one JSON list: the messages of one conversation, OpenAI chat format dicts or
      LangChain `messages_to_dict` dicts (format "list"; the conversation id is the file's stem, or
      "conversation" for a stream such as "<stdin>"; messages without an id get `f"{id}:{index}"`).
    - `{` : JSONL, one trace object a line, blank lines skipped (format "jsonl"); when the first line is not
      JSON on its own but the whole text is one JSON object, that object is the one trace (format "object": a
      pretty-printed trace line).

    Args:
        data: the file's content; bytes are decoded as UTF-8.
        path: named in errors and used for the conversation ids (its stem).
        check_history: False leaves the history rules to the caller (see `parse_messages`).

    Raises:
        TraceFormatError: naming `path`, the line and the field: not UTF-8 text (the line and the byte in it),
            not JSON, neither of the formats above, empty, or a conversation that is not valid (see
            `parse_messages`).
    """
    text = _decode(data, path) if isinstance(data, (bytes, bytearray)) else data
    body = text.lstrip()
    if not body:
        raise TraceFormatError(path, None, None, "no conversations (the input is empty; expected a JSON list of "
                                                 "messages or JSONL, one JSON object with \"messages\" a line)")
    first_line = text.count("\n", 0, len(text) - len(body)) + 1
    if body[0] == "[":
        try:
            messages = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc) from None
        name = Path(path).stem if not path.startswith("<") else "conversation"
        converted = parse_messages(messages, path=path, conversation_id=name, prefix="",
                                   check_history=check_history)
        trace = Trace(id=name, messages=converted, path=Path(path), line=first_line,
                      message_format="langchain" if _is_langchain(messages) else "openai")
        return TraceInput("list", [trace])
    if body[0] != "{":
        raise TraceFormatError(path, first_line, None, f"expected a JSON list of messages or JSONL (one JSON object "
                                                       f"with \"messages\" a line), got text starting {body[:20]!r}")
    traces: list[Trace] = []
    records: list[dict[str, Any]] = []
    for line_no, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may be inside a string
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if not traces:  # perhaps one trace object over several lines
                try:
                    whole = json.loads(text)
                except json.JSONDecodeError:
                    whole = None
                if isinstance(whole, dict):
                    return TraceInput("object", [parse_record(whole, path=path, line=first_line,
                                                              check_history=check_history)], [whole])
            raise _json_error(path, exc, line_no - 1) from None
        traces.append(parse_record(record, path=path, line=line_no, check_history=check_history))
        records.append(record)
    return TraceInput("jsonl", traces, records)


def iter_traces(path: str | Path) -> Iterator[Trace]:
    """Yield the conversations of one trace file, in file order: JSONL (blank lines are skipped), or one of the
    other formats `parse_trace_input` detects. The file is read and checked whole before the first one.

    Raises:
        TraceFormatError: a line is not JSON, not a valid trace (see `parse_messages`), the file is not UTF-8
            text, or it holds no conversation at all.
        OSError: the file cannot be opened.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    yield from parse_trace_input(data, path=str(path)).traces


def load_traces(paths: str | Path | Iterable[str | Path]) -> list[Trace]:
    """Every conversation of one or more JSONL trace files, in order (files in the order given).

    Raises:
        TraceFormatError: see `iter_traces` (the first problem found; nothing is returned partially).
        OSError: a file cannot be opened.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return [trace for p in paths for trace in iter_traces(p)]


def bundled_traces() -> list[Path]:
    """Paths of the example conversations shipped with the package (`lc_compaction/examples/*.jsonl`), sorted.

    They are what `lc-compaction replay` replays when given no file: two tau-bench airline conversations and
    two AgentDojo ones (MIT licensed; see `lc_compaction/examples/README.md`).

    Raises:
        FileNotFoundError: the package was installed without its data files.
    """
    folder = Path(str(files("lc_compaction") / "examples"))
    found = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not found:
        raise FileNotFoundError(f"no bundled example traces in {folder}: reinstall lc-compaction with its data files")
    return found
