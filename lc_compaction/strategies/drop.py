"""Strategy 2: drop the oldest exchanges whole (no LLM, nothing rewritten).

From the oldest, an exchange (a user request and everything up to the next request) is removed as one
unit, so no answer is left without its question and no tool call without its result. The very first
request is pinned: its answers may go, one step at a time, but the request stays. In an exchange whose
request is protected (the first, the latest, or one holding a kept or pinned message), the removable
steps go one at a time, oldest first. It stops as soon as the history is under the goal.

The running request's steps are never removed: in the second pass, when the history is still over the limit
(budget or trigger), its oldest steps are folded into its progress note instead (`progress.keep_progress`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lc_compaction.ladder import LadderState, SyncStrategy
from lc_compaction.progress import keep_progress


@dataclass
class DropOldExchanges(SyncStrategy):
    """Remove whole old exchanges, oldest first, keeping the first request. No parameters."""

    name: str = "drop_old_exchanges"

    def apply(self, state: LadderState) -> None:
        """Remove whole exchanges (or steps after a protected request), oldest first, until under the goal; then
        fold the running request's oldest steps if the rule says so (`progress.keep_progress`)."""
        # Plan once over the current structure (O(n)), then remove in one batch.
        chosen: list[int] = []
        saved = 0
        units = 0
        for whole, steps in state.removable_exchanges():
            groups = [steps] if whole else [[s] for s in steps]
            for group in groups:
                if not state.would_be_over_goal(saved, len(chosen)):
                    break
                indices = [i for s in group for i in s.indices]
                chosen.extend(indices)
                saved += sum(state.slots[i].tokens for i in indices)
                units += 1
        if chosen:
            state.remove(chosen, strategy=self.name, detail=f"{units} exchange(s) or step(s), {len(chosen)} messages")
        keep_progress(state, strategy=self.name)
