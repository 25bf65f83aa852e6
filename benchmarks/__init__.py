"""Benchmarks of lc-compaction against LangChain's anchors; run ``python benchmarks/run.py`` (see run.py)."""
