"""Independent test oracle for lc-compaction: checks, case / trace loaders, history generators.

Never imports lc_compaction, so tests built on it are not circular.
"""

from .cases import Case, FakeSummaryModel, fake_summary_model, load_cases, shared_dir
from .checks import (
    ALL_STRUCTURAL,
    CHECKS,
    CONDITIONAL_STRUCTURAL,
    CheckContext,
    approx_counter,
    check,
    check_all_structural,
    counter_for,
    default_is_summary,
    messages_counter,
    run_checks,
)
from .traces import load_traces, trace_files

__all__ = [
    "ALL_STRUCTURAL",
    "CHECKS",
    "CONDITIONAL_STRUCTURAL",
    "Case",
    "CheckContext",
    "FakeSummaryModel",
    "approx_counter",
    "check",
    "check_all_structural",
    "counter_for",
    "default_is_summary",
    "fake_summary_model",
    "load_cases",
    "load_traces",
    "messages_counter",
    "run_checks",
    "shared_dir",
    "trace_files",
]
