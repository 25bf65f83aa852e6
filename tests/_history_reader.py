"""A second process for tests/test_chat_history.py: opens a SQLite chat history, wraps it and prints the view.

    python tests/_history_reader.py URL SESSION_ID '{"max_input_tokens": 6000}' EXTRA_TOKENS PERSIST

Prints `messages_to_dict(view)` as JSON on stdout (nothing else). The policy is built from the JSON keyword
arguments, so the test gives both processes the same policy.
"""

from __future__ import annotations

import json
import sys
import warnings


def main(argv: list[str]) -> None:
    url, session_id, policy_json, extra_tokens, persist = argv
    warnings.simplefilter("ignore")  # langchain-community's sunset notice goes to stderr otherwise
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from langchain_core.messages import messages_to_dict

    from lc_compaction import CompactionPolicy
    from lc_compaction.integrations.chat_history import CompactingChatMessageHistory

    inner = SQLChatMessageHistory(session_id=session_id, connection=url)
    history = CompactingChatMessageHistory(inner, CompactionPolicy(**json.loads(policy_json)),
                                           persist=persist == "1", extra_tokens=int(extra_tokens))
    json.dump(messages_to_dict(history.messages), sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
