"""Every summarize-mode case of ../shared/cases/cases.json (and the "either" cases, run with summarization),
checked by the independent oracle (tests/oracle): the case's listed checks plus every structural check.

Each case runs through `compact` (sync, `model.invoke`) and `acompact` (async, `model.ainvoke`) with
`Summarize(model=<the case's fake summary model>)` as the only strategy, and the case's own token counter
(tests/case_policy.py maps the settings).

A failing summary model (`summary_model: "raises"`, case-11) is run with `fallback="raise"` (the error
propagates, the history is untouched) and `fallback="skip"` (nothing is removed): the outcomes the case
accepts. Our default, `fallback="ledger"`, replaces the old messages with the deterministic ledger instead of
keeping them, which the case's `history_preserved_on_failure` does not accept by its letter; it is tested
separately below for what it promises (no placeholder, every removed request and identifier in the ledger).
"""

from __future__ import annotations

import asyncio

import pytest

from lc_compaction import acompact, compact
from lc_compaction.markers import is_summary, summary_text
from lc_compaction.strategies.ledger import LEDGER_HEADER
from lc_compaction.strategies.summarize import SummarizationError, Summarize

from tests.case_policy import policy_for
from tests.oracle.cases import load_cases
from tests.oracle.checks import check_all_structural, run_checks

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

SUMMARIZE_CASES = load_cases(modes=("summarize",))
EITHER_CASES = load_cases(modes=("either",))
WORKING_MODEL = [c for c in SUMMARIZE_CASES + EITHER_CASES if c.settings.get("summary_model") != "raises"]
FAILING_MODEL = [c for c in SUMMARIZE_CASES + EITHER_CASES if c.settings.get("summary_model") == "raises"]


def run(case, strategy_kwargs: dict, mode: str):
    """(output, error, model) of the case under Summarize(**strategy_kwargs), sync or async."""
    model = case.summary_model()
    strategy = Summarize(model=model, initial_delay=0, **strategy_kwargs)
    policy = policy_for(case.settings, strategies=[strategy])
    try:
        if mode == "sync":
            result = compact(case.fresh_messages(), policy)
        else:
            result = asyncio.run(acompact(case.fresh_messages(), policy))
    except Exception as exc:  # noqa: BLE001 - the oracle judges whether an error is acceptable
        return None, exc, model
    return result.messages, None, model


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", WORKING_MODEL, ids=[c.id for c in WORKING_MODEL])
def test_case(case, mode):
    output, error, model = run(case, {}, mode)
    case.run_checks(output, error=error, summary_model=model)
    check_all_structural(case.fresh_messages(), output)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("fallback", ["auto", "raise", "skip"])
@pytest.mark.parametrize("case", FAILING_MODEL, ids=[c.id for c in FAILING_MODEL])
def test_failing_model_case(case, fallback, mode):
    """The default ("auto") leaves the history intact while it fits the window, like "skip"."""
    output, error, model = run(case, {"fallback": fallback}, mode)
    assert model.calls >= 1, "the summary model was never asked"
    if fallback == "raise":
        assert isinstance(error, SummarizationError), error
    else:
        assert error is None
        check_all_structural(case.fresh_messages(), output)
    case.run_checks(output, error=error, summary_model=model)


@pytest.mark.parametrize("case", FAILING_MODEL, ids=[c.id for c in FAILING_MODEL])
def test_failing_model_case_with_the_ledger_fallback(case):
    output, error, model = run(case, {"fallback": "ledger"}, "sync")
    assert error is None
    check_all_structural(case.fresh_messages(), output)
    run_checks(["no_placeholder_summary", "single_summary", "summary_is_plain_text", "keeps_latest_human_verbatim",
                "preserves_system_prompt"], case.context(output, summary_model=model))
    (summary,) = [m for m in output if is_summary(m)]
    text = summary_text(summary)
    assert text.startswith(LEDGER_HEADER)
    out_ids = {m.id for m in output}
    for m in case.fresh_messages():
        if m.type == "human" and m.id not in out_ids:
            assert " ".join(m.text.split())[:60] in text, f"request {m.id} is neither kept nor in the ledger"


def test_the_shared_cases_are_found():
    """A moved shared folder must not make this file silently test nothing."""
    assert len(SUMMARIZE_CASES) >= 5 and FAILING_MODEL
