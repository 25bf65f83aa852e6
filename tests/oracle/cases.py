"""The shared compaction cases (/work/shared/cases/cases.json) and a fake summary model for them.

Does not import lc_compaction.  Where the cases file is: `tests.shared_data` (a fuller copy named by
``LC_COMPACTION_SHARED`` or at ``../shared``, else the copy vendored in ``tests/data``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from ..shared_data import cases_path, shared_dir
from .checks import FAKE_SUMMARY_ERROR, CheckContext, counter_for, run_checks

FIXED_SUMMARY_TEXT = (
    "The user and the assistant discussed the earlier part of the conversation; "
    "the user's requests and the facts found so far are noted."
)
"""What the "fixed" fake summary model answers (short, plain text)."""


# --------------------------------------------------------------------------------------------------------------
# fake summary model
# --------------------------------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                parts.append(json.dumps(block, ensure_ascii=False, default=repr))
        return "\n".join(parts)
    return str(content)


def messages_as_text(messages: Sequence[BaseMessage]) -> str:
    """The text a model was given: one "<type>: <text>" paragraph a message (non-text blocks as JSON)."""
    return "\n\n".join(f"{m.type}: {_content_text(m.content)}" for m in messages)


class FakeSummaryModel(BaseChatModel):
    """A stub summary model (a real BaseChatModel: invoke / ainvoke / stream / batch work).

    behavior: "fixed"  -> AIMessage(FIXED_SUMMARY_TEXT or summary_text)
              "raises" -> ConnectionError(FAKE_SUMMARY_ERROR) on every call
              "blocks" -> AIMessage(content=<deep copy of reply_blocks>)
    Every call (sync or async, also the failing ones) appends the input as text to ``inputs``.
    """

    behavior: str = "fixed"
    summary_text: str = FIXED_SUMMARY_TEXT
    reply_blocks: list | None = None
    inputs: list[str] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "oracle-fake-summary"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"behavior": self.behavior}

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        self.inputs.append(messages_as_text(messages))
        self.calls += 1
        if self.behavior == "raises":
            raise ConnectionError(FAKE_SUMMARY_ERROR)
        if self.behavior == "blocks":
            content: Any = copy.deepcopy(self.reply_blocks or [])
        elif self.behavior == "fixed":
            content = self.summary_text
        else:
            raise ValueError(f"unknown fake summary behavior {self.behavior!r}")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=content))])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._answer(messages)


def fake_summary_model(settings_or_kind: dict | str | None) -> FakeSummaryModel | None:
    """The stub for settings["summary_model"] ("fixed" | "raises" | "blocks", with settings["summary_reply_blocks"]);
    None when the settings name no summary model.  A str selects the behavior directly."""
    if isinstance(settings_or_kind, dict):
        kind = settings_or_kind.get("summary_model")
        blocks = settings_or_kind.get("summary_reply_blocks")
    else:
        kind, blocks = settings_or_kind, None
    if kind is None:
        return None
    if kind not in ("fixed", "raises", "blocks"):
        raise ValueError(f"unknown summary_model {kind!r}")
    if kind == "blocks" and blocks is None:
        raise ValueError('summary_model "blocks" needs settings["summary_reply_blocks"]')
    return FakeSummaryModel(behavior=kind, reply_blocks=copy.deepcopy(blocks))


# --------------------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    fault_class: str
    symptom: str
    messages: list[BaseMessage]
    settings: dict
    expect: str
    checks: list[str]
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def mode(self) -> str | None:
        return self.settings.get("mode")

    def fresh_messages(self) -> list[BaseMessage]:
        """A new copy of the input messages (a product must not be able to mutate the case)."""
        return messages_from_dict(copy.deepcopy(self.raw["messages"]))

    def summary_model(self) -> FakeSummaryModel | None:
        return fake_summary_model(self.settings)

    def token_counter(self):
        return counter_for(self.settings)

    def context(
        self,
        output: list[BaseMessage] | None,
        *,
        error: BaseException | None = None,
        summary_model: FakeSummaryModel | None = None,
        summarizer_inputs: Iterable[str] | None = None,
        token_count=None,
        is_summary=None,
        allow_error: bool = False,
    ) -> CheckContext:
        inputs = list(summarizer_inputs) if summarizer_inputs is not None else []
        if summary_model is not None:
            inputs.extend(summary_model.inputs)
        kwargs: dict[str, Any] = {}
        if is_summary is not None:
            kwargs["is_summary"] = is_summary
        return CheckContext(
            input=self.fresh_messages(),
            output=output,
            settings=self.settings,
            token_count=token_count,
            summarizer_inputs=inputs,
            error=error,
            allow_error=allow_error,
            **kwargs,
        )

    def run_checks(self, output: list[BaseMessage] | None, **context_kwargs: Any) -> None:
        """Run this case's checks on output; one AssertionError (prefixed with the case id) listing all failures."""
        try:
            run_checks(self.checks, self.context(output, **context_kwargs))
        except AssertionError as exc:
            raise AssertionError(f"{self.id} ({self.fault_class}): {exc}") from None


def load_cases(modes: Iterable[str] | None = ("trim", "either"), path: str | Path | None = None) -> list[Case]:
    """Cases whose settings["mode"] is in modes (None: all cases), messages via messages_from_dict."""
    p = Path(path) if path is not None else cases_path()
    data = json.loads(p.read_text(encoding="utf-8"))
    wanted = None if modes is None else set(modes)
    cases = []
    for raw in data:
        settings = raw.get("settings") or {}
        if wanted is not None and settings.get("mode") not in wanted:
            continue
        cases.append(
            Case(
                id=raw["id"],
                fault_class=raw.get("fault_class", ""),
                symptom=raw.get("symptom", ""),
                messages=messages_from_dict(copy.deepcopy(raw["messages"])),
                settings=copy.deepcopy(settings),
                expect=raw.get("expect", ""),
                checks=list(raw.get("checks") or []),
                raw=raw,
            )
        )
    return cases


__all__ = [
    "Case",
    "FIXED_SUMMARY_TEXT",
    "FakeSummaryModel",
    "cases_path",
    "fake_summary_model",
    "load_cases",
    "messages_as_text",
    "shared_dir",
]
