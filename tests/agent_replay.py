"""Replay a recorded conversation (/work/shared/traces) through a real agent, for tests.

A recorded conversation becomes:

- `ReplayChatModel`: a LangChain fake chat model (a `GenericFakeChatModel`) that emits the recorded assistant
  messages in order (content, tool calls and ids as recorded, one per model call), records every input it
  receives (`calls`) with its keyword arguments (`call_kwargs`: the bound tool schemas are there), and can run a
  check on each input before replying (`on_call`);
- `Replay.tools()`: one tool per recorded tool name that returns the recorded result of the call it receives
  (found by its `tool_call_id`), as a `ToolMessage` with the recorded id, so two runs of the same conversation
  build identical states;
- `Replay.turns`: the user turns, fed as successive invocations of the graph or agent (`Replay.turn_input(k)`).

The recorded conversations are complete except that some end on a user message without reply or on tool results
(the recording stopped): such a turn is closed with a synthetic final reply `CLOSING_TEXT` (id
`"{conversation id}:closing:{turn}"`), so every turn ends, as the agent loop needs, with an assistant message
without tool calls.

`check_model_input` and `check_stored_history` are the assertions the front-door tests make after every model
call and every turn; `wire_tokens` is their own token count (tiktoken o200k_base, OpenAI's chat format), kept
independent of the product's counter. Only the tiktoken file loader comes from lc_compaction (no download).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field

from lc_compaction.integrations.events import EVENT_NAME
from tests.oracle import check_all_structural, default_is_summary, load_traces

CLOSING_TEXT = "[replay: the recording has no reply here]"
"""Content of the synthetic reply that closes a turn the recording left open."""


class ReplayChatModel(GenericFakeChatModel):
    """A fake chat model that replies with scripted `AIMessage`s and records what it receives.

    Attributes:
        messages: iterator over the replies (one per call, copied before being returned).
        calls: every input received, in order (the list of messages, system message included when sent).
        call_kwargs: the keyword arguments of each call (`tools` holds the bound tool schemas).
        on_call: called as `on_call(index, messages, kwargs)` before replying (assertions go there).
        profile: the model profile (set `{"max_input_tokens": N}` to give the window).

    Streaming (`stream_mode="messages"`, `astream_events`) yields each reply as one chunk carrying its tool calls.
    """

    calls: list[list[BaseMessage]] = Field(default_factory=list)
    call_kwargs: list[dict[str, Any]] = Field(default_factory=list)
    on_call: Callable[[int, list[BaseMessage], dict[str, Any]], None] | None = None

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind the tools' OpenAI schemas, as a real chat model does (they reach `_generate` as `tools`)."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        index = len(self.calls)
        self.calls.append(list(messages))
        self.call_kwargs.append(dict(kwargs))
        if self.on_call is not None:
            self.on_call(index, list(messages), dict(kwargs))
        try:
            reply = next(self.messages)
        except StopIteration:
            raise AssertionError(f"the script has no reply left for model call #{index}") from None
        reply = AIMessage(content=reply) if isinstance(reply, str) else reply.model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        reply = self._generate(messages, stop=stop, run_manager=run_manager, **kwargs).generations[0].message
        chunk = ChatGenerationChunk(message=AIMessageChunk(
            content=reply.content, id=reply.id, chunk_position="last",
            tool_call_chunks=[{"name": tc["name"], "args": json.dumps(tc["args"]), "id": tc["id"], "index": i}
                              for i, tc in enumerate(reply.tool_calls)]))
        if run_manager:
            run_manager.on_llm_new_token(reply.text, chunk=chunk)
        yield chunk


@dataclass
class Turn:
    """One user turn: the request, the model's replies in order (the last without tool calls), and the recorded
    results of the tool calls made in the turn (by tool_call_id)."""

    user: HumanMessage
    replies: list[AIMessage]
    results: dict[str, ToolMessage] = field(default_factory=dict)


@dataclass
class Replay:
    """A recorded conversation ready to be replayed (see the module docstring)."""

    conv_id: str
    system: SystemMessage | None
    turns: list[Turn]
    recorded: list[BaseMessage]
    """The recorded messages (system first when there is one), with the synthetic closing replies inserted."""

    def model(self, start_turn: int = 0, **kwargs: Any) -> ReplayChatModel:
        """A `ReplayChatModel` scripted with the replies of `turns[start_turn:]` (kwargs: profile, on_call...)."""
        replies = [r for t in self.turns[start_turn:] for r in t.replies]
        return ReplayChatModel(messages=iter(replies), **kwargs)

    def tool_names(self) -> list[str]:
        """Names of the tools the recording calls, in order of first use."""
        names: list[str] = []
        for t in self.turns:
            for r in t.replies:
                for tc in r.tool_calls:
                    if tc["name"] not in names:
                        names.append(tc["name"])
        return names

    def tools(self) -> list[BaseTool]:
        """One tool per recorded tool name; each returns the recorded result (same id and content) of its call."""
        results = {k: v for t in self.turns for k, v in t.results.items()}
        return [_recorded_tool(name, results) for name in self.tool_names()]

    def turn_input(self, k: int, *, include_system: bool = True) -> dict[str, list[BaseMessage]]:
        """The input of turn `k`: `{"messages": [user]}`, with the system message first on turn 0 when asked."""
        first = [self.system] if (k == 0 and include_system and self.system is not None) else []
        return {"messages": [*first, self.turns[k].user]}

    def history_before_call(self, call_index: int, *, include_system: bool = True) -> list[BaseMessage]:
        """The whole recorded history the agent holds when it makes model call `call_index` (0-based)."""
        out: list[BaseMessage] = []
        seen_calls = 0
        for m in self.recorded:
            if isinstance(m, SystemMessage) and not include_system:
                continue
            if isinstance(m, AIMessage):
                if seen_calls == call_index:
                    return out
                seen_calls += 1
            out.append(m)
        raise IndexError(f"the recording has no model call #{call_index}")

    def history_after_turn(self, k: int, *, include_system: bool = True) -> list[BaseMessage]:
        """The whole recorded history at the end of turn `k` (0-based)."""
        out: list[BaseMessage] = [self.system] if (include_system and self.system is not None) else []
        for t in self.turns[: k + 1]:
            out.append(t.user)
            for r in t.replies:
                out.append(r)
                out.extend(t.results[tc["id"]] for tc in r.tool_calls)
        return out


class _AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    tool_call_id: Annotated[str, InjectedToolCallId]


def _recorded_tool(name: str, results: dict[str, ToolMessage]) -> BaseTool:
    def run(tool_call_id: str, **kwargs: Any) -> ToolMessage:
        return results[tool_call_id].model_copy()

    return StructuredTool.from_function(func=run, name=name, description=f"Returns the recorded result of {name}.",
                                        args_schema=_AnyArgs)


def replay_from_messages(conv_id: str, messages: Sequence[BaseMessage]) -> Replay:
    """Split a recorded conversation (system message optional, then user turns) into a `Replay`.

    Raises:
        ValueError: a message before the first user message is not a system message, or a tool result answers
            no call of its turn.
    """
    system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
    turns: list[Turn] = []
    for i, m in enumerate(messages[1 if system else 0:], start=1 if system else 0):
        if isinstance(m, HumanMessage):
            turns.append(Turn(user=m, replies=[]))
        elif not turns:
            raise ValueError(f"{conv_id}: message {i} ({m.type}) comes before the first user message")
        elif isinstance(m, AIMessage):
            turns[-1].replies.append(m)
        elif isinstance(m, ToolMessage):
            turns[-1].results[m.tool_call_id] = m
        else:
            raise ValueError(f"{conv_id}: message {i} has unexpected type {m.type}")
    for k, t in enumerate(turns):
        for r in t.replies:
            missing = [tc["id"] for tc in r.tool_calls if tc["id"] not in t.results]
            if missing:
                raise ValueError(f"{conv_id}: turn {k}: tool calls {missing} have no recorded result")
            for tc in r.tool_calls:  # a ToolNode names each result after its tool
                t.results[tc["id"]] = t.results[tc["id"]].model_copy(update={"name": tc["name"]})
        if not t.replies or t.replies[-1].tool_calls:
            t.replies.append(AIMessage(content=CLOSING_TEXT, id=f"{conv_id}:closing:{k}"))
    replay = Replay(conv_id=conv_id, system=system, turns=turns, recorded=[])
    replay.recorded = replay.history_after_turn(len(turns) - 1)
    return replay


def load_replays(ids: Sequence[str] | None = None) -> list[Replay]:
    """Replays of the shared recorded conversations (all of them, or those whose id is in `ids`, in that order).

    Raises:
        KeyError: an id of `ids` is not in the recordings.
    """
    traces = dict(load_traces())
    chosen = list(ids) if ids is not None else list(traces)
    return [replay_from_messages(cid, traces[cid]) for cid in chosen]


# ------------------------------------------------------------------------------------------------- checks

_ENCODING: Any = None


def _encoding() -> Any:
    global _ENCODING
    if _ENCODING is None:
        from lc_compaction._offline import ensure_encoding  # the verified offline copy of OpenAI's file

        _ENCODING = ensure_encoding("o200k_base")
    return _ENCODING


def wire_tokens(messages: Sequence[BaseMessage], tools: Sequence[dict] | None = None) -> int:
    """Tokens of a chat request as OpenAI bills it, counted here independently of the product: per message 3
    tokens + its role + its text (+ its name); per tool call 3 + its name + its JSON arguments; each tool schema as
    its compact JSON (more than OpenAI's own rendering: an upper estimate); 3 for the reply priming."""
    enc = _encoding()
    total = 3
    roles = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
    for m in messages:
        total += 3 + len(enc.encode(roles.get(m.type, m.type))) + len(enc.encode(m.text, disallowed_special=()))
        if m.name:
            total += 1 + len(enc.encode(m.name))
        for tc in getattr(m, "tool_calls", None) or []:
            total += 3 + len(enc.encode(tc["name"])) + len(enc.encode(json.dumps(tc["args"], separators=(",", ":"))))
        for tc in getattr(m, "invalid_tool_calls", None) or []:  # sent as tool calls, raw arguments
            raw = tc.get("args") or ""
            total += 3 + len(enc.encode(tc.get("name") or "")) + len(enc.encode(raw, disallowed_special=()))
    for t in tools or []:
        total += len(enc.encode(json.dumps(t, separators=(",", ":"))))
    return total


def _ident(m: BaseMessage) -> tuple:
    """What identifies a message as sent: type, id, text and tool calls (hashable)."""
    calls = [(tc["id"], tc["name"], tc["args"]) for tc in getattr(m, "tool_calls", None) or []]
    return (m.type, m.id, m.text, json.dumps(calls, sort_keys=True, default=str))


def check_model_input(replay: Replay, call_index: int, received: list[BaseMessage], kwargs: dict[str, Any], *,
                      window: int) -> None:
    """Assert what one model call received: it is not empty, fits `window` (tokens, `wire_tokens` with the bound
    tool schemas), passes every structural check of the oracle against the whole recorded history at that point,
    and keeps the first and the latest user request word for word (same id)."""
    full = replay.history_before_call(call_index)
    where = f"{replay.conv_id} model call #{call_index}"
    assert received, f"{where}: empty model input"
    used = wire_tokens(received, kwargs.get("tools"))
    assert used <= window, f"{where}: the model input is {used} tokens, over the window of {window}"
    try:
        check_all_structural(full, received)
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}") from None
    requests = [m for m in full if isinstance(m, HumanMessage) and not default_is_summary(m)]
    got = {_ident(m) for m in received}
    for label, req in (("first", requests[0]), ("latest", requests[-1])):
        assert _ident(req) in got, f"{where}: the {label} user request {req.id!r} is not in the model input as sent"


def check_stored_history(replay: Replay, turn: int, stored: list[BaseMessage], *, mode: str,
                         last_input: list[BaseMessage], include_system: bool) -> None:
    """Assert the stored history after `turn` matches the mode.

    view: the stored history is the whole recorded history, message for message.
    rewrite: the stored history is exactly the last model input (the system message aside when the agent sends it
    from outside the state) followed by the final reply; every stored message comes from the recording or is a
    summary; and it is no larger (tokens) than the recording.
    """
    full = replay.history_after_turn(turn, include_system=include_system)
    where = f"{replay.conv_id} after turn {turn} ({mode})"
    if mode == "view":
        assert [_ident(m) for m in stored] == [_ident(m) for m in full], f"{where}: the stored history changed"
        return
    sent = [m for m in last_input if include_system or not isinstance(m, SystemMessage)]
    assert [_ident(m) for m in stored[:-1]] == [_ident(m) for m in sent], \
        f"{where}: the stored history is not the last model input"
    assert stored[-1].id == replay.turns[turn].replies[-1].id, (
        f"{where}: the stored history does not end with the reply")
    known = {m.id for m in full}
    strangers = [m.id for m in stored if m.id not in known and not default_is_summary(m)]
    assert not strangers, f"{where}: stored messages that are neither recorded nor summaries: {strangers}"
    assert wire_tokens(stored) <= wire_tokens(full), f"{where}: the stored history grew"


# ------------------------------------------------------------------------------------------------- the wire


class ScriptedOpenAIServer:
    """A local OpenAI-compatible server on 127.0.0.1 (a free port) for `ChatOpenAI(base_url=server.base_url)`.

    `POST /v1/chat/completions` answers with the next scripted reply (an `AIMessage`, text and tool calls, or a
    string; `default` once the script is used up; its `invalid_tool_calls` go out as tool calls with their raw
    arguments), as one JSON completion or, when the request asks
    `stream: true`, as server-sent events. Every request body is kept in `requests` (parsed JSON).
    Use it as a context manager (starts and stops the server thread).
    """

    def __init__(self, replies: Sequence[AIMessage | str] = (), default: str = "ok") -> None:
        self.replies = list(replies)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self._server: Any = None
        self._thread: Any = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _next(self) -> tuple[str, list[dict[str, Any]]]:
        reply = self.replies.pop(0) if self.replies else self.default
        if isinstance(reply, str):
            return reply, []
        calls = [{"id": tc["id"], "type": "function",
                  "function": {"name": tc["name"], "arguments": json.dumps(tc["args"])}} for tc in reply.tool_calls]
        # an invalid tool call of the script goes out with its raw (malformed) arguments, as a model wrote them
        calls += [{"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["args"]}}
                  for tc in reply.invalid_tool_calls]
        return reply.text, calls

    def _handler(self) -> type:
        from http.server import BaseHTTPRequestHandler

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(body)
                text, calls = outer._next()
                finish = "tool_calls" if calls else "stop"
                base = {"id": f"chatcmpl-{len(outer.requests)}", "created": 0, "model": body.get("model", "")}
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                if not body.get("stream"):
                    message: dict[str, Any] = {"role": "assistant", "content": text or None}
                    if calls:
                        message["tool_calls"] = calls
                    payload = {**base, "object": "chat.completion", "usage": usage,
                               "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
                    data = json.dumps(payload).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                chunk = {**base, "object": "chat.completion.chunk"}
                events = []
                for i, word in enumerate(text.split(" ") if text else []):
                    delta = {"content": word if i == 0 else " " + word}
                    if i == 0:
                        delta["role"] = "assistant"
                    events.append({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                for i, call in enumerate(calls):
                    events.append({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]},
                                                         "finish_reason": None}]})
                events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    events.append({**chunk, "choices": [], "usage": usage})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler

    def __enter__(self) -> ScriptedOpenAIServer:
        import threading
        from http.server import ThreadingHTTPServer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


LOOKUP_RESULT = "record " + "lorem ipsum dolor " * 120
"""What `lookup` returns after its query: about 500 tokens."""


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"{q}: {LOOKUP_RESULT}"


class EventLog(BaseCallbackHandler):
    """A callback handler that collects the data of every lc_compaction custom event (`events`)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == EVENT_NAME:
            self.events.append(data)
