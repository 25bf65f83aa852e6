"""Every trim/either case of ../shared/cases/cases.json, checked by the independent oracle.

Each case runs twice: with the case's own counter passed as a LangChain-style callable (the oracle measures
budgets with it), and with our own counter of the same kind ("messages" / "approximate"), so that our
counter's structural rules (tool-call arguments, bounded images, tool_use deduplication) are exercised too.
"""

from __future__ import annotations

import pytest

from lc_compaction import CompactionPolicy, compact

from tests.case_policy import policy_for
from tests.oracle.cases import load_cases
from tests.oracle.checks import check_all_structural

CASES = load_cases(modes=("trim", "either"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_with_case_counter(case):
    policy = policy_for(case.settings)
    messages = case.fresh_messages()
    result = compact(messages, policy)
    case.run_checks(result.messages)
    check_all_structural(case.fresh_messages(), result.messages)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_with_our_counter(case):
    base = policy_for(case.settings)
    ours = "messages" if case.settings.get("token_counter") == "messages" else "approximate"
    policy = CompactionPolicy(
        max_input_tokens=base.max_input_tokens, reserve=base.reserve, trigger=base.trigger, keep=base.keep,
        token_counter=ours,
    )
    result = compact(case.fresh_messages(), policy)
    checks = list(case.checks)
    if ours == "approximate" and "within_budget" in checks:
        # the budget is ours here: measure it with our counter
        checks.remove("within_budget")
        assert result.tokens_after <= case.settings["max_tokens"], result.to_dict()
    case.checks = checks
    case.run_checks(result.messages)
    check_all_structural(case.fresh_messages(), result.messages)


def test_every_trim_case_is_covered():
    """The file holds trim/either cases (a moved shared folder must not silently run nothing)."""
    assert len(CASES) >= 5
