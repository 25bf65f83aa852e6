"""Long histories for the benchmark: the shared recorded conversations joined into one session.

The shared collection (``traces/*.jsonl`` of the shared data, `tests.shared_data.traces_dir`: a fuller copy, else
the copy vendored in the repository; OpenAI chat format, one conversation a line) holds short conversations. A
long-running agent session is built by joining them:

- conversations are taken round-robin across the files (one from each file in turn, then the rest of the longer
  file), so every size mixes tau-bench's many short user turns with AgentDojo's long tool outputs;
- only the very first system prompt is kept (later conversations' system messages are dropped);
- every message id becomes ``"{pass}/{conversation id}:{index}"`` and every tool call id
  ``"{pass}/{conversation id}:{original id}"`` (on the ``AIMessage``'s tool call and on its ``ToolMessage``), so
  they stay unique when the same conversations are joined again;
- the join is repeated (pass 0, 1, 2, ...) until the session holds the number of messages asked for; from pass 1
  on, every tool result ends with `pass_tag` (a line naming its pass), so a later pass is new work, not a repeat
  of the earlier one: a tool result identical to an earlier one is deduplicated when it arrives
  (``lc_compaction.dedup``), and a session repeating its first pass verbatim would be mostly such repeats. The
  repeats within one conversation (an agent calling the same tool again) are kept as recorded.

The session is cut at *model call points* (`call_points`, `cut_at`): positions where the next recorded message is
an assistant message, i.e. where the agent loop calls the model; cutting there never leaves a tool call without
its result. A benchmark history "of N messages" is such a cut followed by `typical_exchange` (the messages added
since that call), N messages at most in all.

Raw records are read with the standard ``json`` module (the accuracy benchmark needs the OpenAI dicts as recorded);
each conversation is then validated and converted by ``lc_compaction.traces.parse_messages`` (the package's own
loader: clear errors naming the file, line and field).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from lc_compaction.traces import parse_messages

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Record:
    """One recorded conversation as read from its file.

    Attributes:
        id: the conversation id (the line's ``id``, else ``"{file stem}:{line}"``).
        messages: the messages as OpenAI-format dicts, exactly as recorded.
        path: the file.
        line: the 1-based line number in the file.
    """

    id: str
    messages: list[dict[str, Any]]
    path: Path
    line: int


def trace_files(traces_dir: Path) -> list[Path]:
    """The ``*.jsonl`` files of ``traces_dir``, sorted by name.

    Raises:
        FileNotFoundError: the folder does not exist or holds no ``*.jsonl`` file.
    """
    files = sorted(Path(traces_dir).glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no *.jsonl trace file in {traces_dir} (give --traces DIR)")
    return files


def read_records(path: Path) -> list[Record]:
    """Every conversation of one JSONL file, as recorded (blank lines skipped).

    Raises:
        ValueError: a line is not a JSON object with a ``messages`` list (naming the file and line).
    """
    out: list[Record] = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {line_no}: not JSON: {exc}") from None
            if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
                raise ValueError(f"{path} line {line_no}: expected an object with a 'messages' list")
            conv_id = str(data.get("id") or f"{path.stem}:{line_no}")
            out.append(Record(conv_id, data["messages"], path, line_no))
    return out


def interleaved_records(traces_dir: Path) -> list[Record]:
    """All conversations of ``traces_dir``, round-robin across its files (file order: by name).

    Raises:
        FileNotFoundError, ValueError: see `trace_files` and `read_records`.
    """
    per_file = [read_records(p) for p in trace_files(traces_dir)]
    return [r for group in zip_longest(*per_file) for r in group if r is not None]


def pass_tag(k: int) -> str:
    """What ends every tool result of pass ``k`` >= 1 of a session (see the module docstring)."""
    return f"\n[session pass {k}]"


def _renamed(record: Record, k: int) -> list[dict[str, Any]]:
    """The record's messages for pass ``k`` (a deep copy): message ids and tool call ids prefixed ``"{k}/"``, and
    from pass 1 on each tool result's content ending with `pass_tag` (a text part appended to a list content)."""
    prefix = f"{k}/"
    msgs = copy.deepcopy(record.messages)
    for i, m in enumerate(msgs):
        m["id"] = f"{prefix}{record.id}:{m.get('id', i)}"
        for tc in m.get("tool_calls") or []:
            tc["id"] = f"{prefix}{record.id}:{tc['id']}"
        if "tool_call_id" in m:
            m["tool_call_id"] = f"{prefix}{record.id}:{m['tool_call_id']}"
        if k and m.get("role") == "tool":
            content = m.get("content")
            if isinstance(content, list):
                m["content"] = [*content, {"type": "text", "text": pass_tag(k)}]
            else:
                m["content"] = f"{content or ''}{pass_tag(k)}"
    return msgs


def build_session(records: list[Record], n_messages: int) -> list[BaseMessage]:
    """Join ``records`` (repeating the join as needed) into one session of at least ``n_messages`` messages
    (it may hold up to one conversation more); see the module docstring for the rules.

    Raises:
        ValueError: ``records`` is empty or ``n_messages`` < 1; a conversation is not a valid trace
            (``lc_compaction.TraceFormatError``, a ``ValueError``, names the file, line and field).
    """
    if n_messages < 1:
        raise ValueError(f"n_messages: must be >= 1 message, got {n_messages}")
    if not records:
        raise ValueError("records: no conversation to build a session from")
    session: list[BaseMessage] = []
    k = 0
    while len(session) < n_messages:
        for rec in records:
            msgs = parse_messages(_renamed(rec, k), path=str(rec.path), line=rec.line,
                                  conversation_id=f"{k}/{rec.id}")
            if session:
                msgs = [m for m in msgs if not isinstance(m, SystemMessage)]
            session.extend(msgs)
            if len(session) >= n_messages:
                break
        k += 1
    return session


def call_points(session: list[BaseMessage]) -> list[int]:
    """Lengths ``p`` at which the agent calls the model: ``session[p]`` is an ``AIMessage`` (the model's reply),
    so ``session[:p]`` is the history sent on that call. Increasing; the gaps are one exchange each (a model
    reply with its tool results, or a new user request)."""
    return [p for p in range(1, len(session)) if isinstance(session[p], AIMessage)]


def cut_at(points: list[int], n_messages: int) -> int:
    """The last call point at or before ``n_messages`` (messages).

    Raises:
        ValueError: no call point at or before ``n_messages``.
    """
    eligible = [p for p in points if p <= n_messages]
    if not eligible:
        raise ValueError(f"no model call point at or before {n_messages} messages")
    return eligible[-1]


def typical_exchange(session: list[BaseMessage]) -> list[BaseMessage]:
    """The session's median tool exchange: an ``AIMessage`` with tool calls and the ``ToolMessage``s that follow
    it, the one of median size (characters of content and tool-call arguments) among all of them.

    The benchmark appends it (relabeled) to every history as "what was added since the previous call", so every
    size meets the same new messages and only the history before them differs.

    Raises:
        ValueError: the session has no assistant message with tool calls.
    """
    blocks: list[tuple[int, int, list[BaseMessage]]] = []
    for i, m in enumerate(session):
        if isinstance(m, AIMessage) and m.tool_calls:
            j = i + 1
            while j < len(session) and session[j].type == "tool":
                j += 1
            size = sum(len(str(x.content)) for x in session[i:j]) + sum(
                len(json.dumps(tc["args"])) for tc in m.tool_calls)
            blocks.append((size, i, session[i:j]))
    if not blocks:
        raise ValueError("the session has no assistant message with tool calls")
    blocks.sort(key=lambda b: (b[0], b[1]))
    return blocks[len(blocks) // 2][2]
