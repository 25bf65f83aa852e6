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

from langchain_core.messages import BaseMessage, ToolMessage, convert_to_messages
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from lc_compaction.structure import check_invariants

__all__ = ["Trace", "TraceFormatError", "bundled_traces", "iter_traces", "load_traces", "parse_messages",
           "parse_record"]

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
    """

    id: str
    messages: list[BaseMessage]
    path: Path
    line: int
    source: str | None = None
    license: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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
                   prefix: str = "messages") -> list[BaseMessage]:
    """Validate a list of OpenAI-format message dicts and convert it to LangChain messages.

    Args:
        messages: the list (JSON-decoded).
        path, line: named in errors (the file, and the 1-based line the list came from; None when the list
            is the whole file).
        conversation_id: prefix of the ids given to messages without one (`f"{conversation_id}:{index}"`).
        prefix: the list's field path, named in errors ("messages" inside a trace line, "" for a bare list).

    Returns:
        One `BaseMessage` a message, in order, each with a unique id (the input's or the stable one).

    Raises:
        TraceFormatError: naming `path`, `line` and the field, when the list is not a valid conversation: a
            wrong shape or type, tool-call arguments that are not a JSON object, a repeated message id, or a
            tool call / tool result pairing error (the message index and tool_call_id; the rules are the
            core's `check_invariants`, except that a mid-history system message is accepted).
    """
    try:
        record = _Record.model_validate({"messages": messages})
    except ValidationError as exc:
        field_path, problem = _first_problem(exc)
        if field_path and prefix != "messages":
            field_path = prefix + field_path[len("messages"):]
        raise TraceFormatError(path, line, field_path, problem) from None
    return _convert(record, messages, path=path, line=line, conversation_id=conversation_id, prefix=prefix)


def _convert(record: _Record, raw: list[Any], *, path: str, line: int | None, conversation_id: str,
             prefix: str) -> list[BaseMessage]:
    if not record.messages:
        raise TraceFormatError(path, line, prefix, "empty: a conversation needs at least one message")
    seen: dict[str, int] = {}
    for i, m in enumerate(record.messages):
        if m.id is not None:
            if m.id in seen:
                raise TraceFormatError(path, line, f"{prefix}[{i}].id", f"{m.id!r} repeats {prefix}[{seen[m.id]}].id")
            seen[m.id] = i
    try:
        converted = list(convert_to_messages(raw))
    except Exception as exc:  # the shape was checked; anything left is langchain-core's own complaint
        raise TraceFormatError(path, line, prefix, f"could not convert to LangChain messages: {exc}") from exc
    out: list[BaseMessage] = []
    for i, message in enumerate(converted):
        if not message.id:
            stable = f"{conversation_id}:{i}"
            if stable in seen:
                raise TraceFormatError(path, line, f"{prefix}[{seen[stable]}].id",
                                       f"{stable!r} is the id this loader gives {prefix}[{i}]; use another id")
            message = message.model_copy(update={"id": stable})
        out.append(message)
    for v in check_invariants(out):
        if v.kind in TOLERATED_VIOLATIONS:
            continue
        where = "tool_call_id" if isinstance(out[v.index], ToolMessage) else "tool_calls" if v.tool_call_id else "role"
        tc = f" (tool_call_id {v.tool_call_id!r})" if v.tool_call_id else ""
        detail = f": {v.detail}" if v.detail else ""
        raise TraceFormatError(path, line, f"{prefix}[{v.index}].{where}", f"{v.kind.replace('_', ' ')}{tc}{detail}")
    return out


def parse_record(record: Any, *, path: str = "<input>", line: int = 1) -> Trace:
    """Validate one JSON-decoded trace line (an object with "messages") and convert it to a `Trace`.

    Raises:
        TraceFormatError: naming `path`, `line` and the field (see `parse_messages`).
    """
    if not isinstance(record, dict):
        raise TraceFormatError(path, line, None, f"expected a JSON object with \"messages\", got {_kind(record)}")
    try:
        parsed = _Record.model_validate(record)
    except ValidationError as exc:
        field_path, problem = _first_problem(exc)
        raise TraceFormatError(path, line, field_path, problem) from None
    conv_id = str(parsed.id) if parsed.id is not None else f"{Path(path).stem}:{line}"
    messages = _convert(parsed, record["messages"], path=path, line=line, conversation_id=conv_id, prefix="messages")
    extra = {k: v for k, v in record.items() if k not in ("id", "source", "license", "messages")}
    return Trace(id=conv_id, messages=messages, path=Path(path), line=line, source=parsed.source,
                 license=parsed.license, extra=extra)


def iter_traces(path: str | Path) -> Iterator[Trace]:
    """Yield the conversations of one JSONL trace file, in file order (blank lines are skipped).

    Raises:
        TraceFormatError: a line is not JSON, not a valid trace (see `parse_messages`), the file is not UTF-8
            text, or it holds no conversation at all.
        OSError: the file cannot be opened.
    """
    name = str(path)
    found = 0
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceFormatError(name, line_no, None, f"not UTF-8 text (byte {exc.start})") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(name, line_no, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
            found += 1
            yield parse_record(record, path=name, line=line_no)
    if not found:
        raise TraceFormatError(name, None, None,
                               "no conversations (the file is empty; expected one JSON object a line)")


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
