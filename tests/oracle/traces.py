"""Recorded agent conversations (the shared traces/*.jsonl, OpenAI chat format) as LangChain messages.

Does not import lc_compaction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from langchain_core.messages import BaseMessage, convert_to_messages

from ..shared_data import traces_dir


def trace_files() -> list[Path]:
    """Every *.jsonl file of the shared traces folder (`tests.shared_data.traces_dir`), sorted by name."""
    return sorted(traces_dir().glob("*.jsonl"))


def load_traces(files: Iterable[str | Path] | None = None) -> list[tuple[str, list[BaseMessage]]]:
    """(conversation id, messages) for every conversation; a message without an id gets f"{conv_id}:{i}"."""
    result = []
    for path in files if files is not None else trace_files():
        with open(path, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                conv_id = str(record.get("id") or f"{Path(path).stem}:{line_no}")
                messages = convert_to_messages(record["messages"])
                for i, m in enumerate(messages):
                    if not m.id:
                        m.id = f"{conv_id}:{i}"
                result.append((conv_id, messages))
    return result


__all__ = ["load_traces", "trace_files"]
