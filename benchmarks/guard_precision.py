"""The fact guard's precision on the shared traces (issue 20, class 8: "measure that precision does not drop").

    python benchmarks/guard_precision.py                  # the guard of this checkout
    python benchmarks/guard_precision.py --before aff8c6f # beside the guard of a git revision (before issue 20)

What is measured: every identifier `FactGuard.extract` finds in the text of every message of the shared
conversations, one finding per distinct (conversation, value). A finding is **wrong** when, by the rules below
(stated here, applied without the guard's code), it is not a value a later call could need to repeat exactly:

- *residue*: it carries text that is not part of the value: markdown or escape characters (``*``, a backtick, a
  backslash: ``S61CZX**`` from ``**Reservation ID: S61CZX**``, ``327-420-4923\\nAddress`` from a doubly escaped
  newline), or a bracket it does not close (``Union[int``);
- *placeholder*: a date or time format written with letters (``YYYY-MM-DD``, ``HH:MM``);
- *word*: a plain word or a Python constant (``If``, ``Failed``, ``None``), unless the guard names it as what a
  ``def`` or ``class`` defines or as an error type;
- *version*: a value found as an IP address right after the word "version" (``version - 2.0.0.0``).

Precision = 1 - wrong / found, per trace file and over all of them. The rules find only these shapes of error, so
the figure is an upper bound of the true precision; the difference between two revisions is what matters, and
the wrong findings are listed so they can be read.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from io import BytesIO
from pathlib import Path

import click

if __package__ in (None, ""):  # run as a script: make the repository importable as the `benchmarks` package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.shared_data import traces_dir

ROOT = Path(__file__).resolve().parent.parent

DUMP = r"""
import json, sys
from pathlib import Path
from langchain_core.messages import convert_to_messages
try:
    from lc_compaction.facts import FactGuard, message_text
except ImportError:  # before the fact guard moved below the rules (98b88f0)
    from lc_compaction.strategies.facts import FactGuard, message_text
guard, out = FactGuard(), {}
for path in sorted(Path(sys.argv[1]).glob("*.jsonl")):
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        conv = str(record.get("id") or f"{path.stem}:{line_no}")
        for message in convert_to_messages(record["messages"]):
            text = message_text(message)
            for found in guard.extract(text):
                at = text.find(found.value)
                out.setdefault(json.dumps([path.stem, conv, found.value]), [found.kind, text[max(0, at - 30):at]])
json.dump(out, sys.stdout)
"""
"""Run in a subprocess with the lc_compaction to measure first on its path: {json [file, conv, value]: [kind,
the 30 characters before its first occurrence]}."""

_PLACEHOLDER = re.compile(r"[YMDHS]{2,4}(?:[-/:.][YMDHS]{2,4})+")
_WORD = re.compile(r"[A-Z]?[a-z]+|True|False|None")
_VERSION_BEFORE = re.compile(r"version\W{0,4}$", re.IGNORECASE)


def wrong(value: str, kind: str, before: str) -> str | None:
    """Why a finding is wrong by the module's rules, else None."""
    if re.search(r"[*`\\]", value) or value.count("[") != value.count("]") or value.count("(") != value.count(")"):
        return "residue"
    if _PLACEHOLDER.fullmatch(value):
        return "placeholder"
    if _WORD.fullmatch(value) and kind not in ("definition", "error_type"):
        return "word"
    if kind in ("ipv4", "ipv6") and _VERSION_BEFORE.search(before):
        return "version"
    return None


def findings(traces: Path, source: Path) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(file, conversation, value) -> (kind, text before it) with the lc_compaction found in `source`."""
    done = subprocess.run([sys.executable, "-c", DUMP, str(traces)], cwd=source, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"})
    return {tuple(json.loads(k)): (v[0], v[1]) for k, v in json.loads(done.stdout).items()}  # type: ignore[misc]


def precision(found: dict[tuple[str, str, str], tuple[str, str]]) -> dict[str, tuple[int, int, Counter]]:
    """file (and "all") -> (found, wrong, wrong by (reason, kind, value))."""
    out: dict[str, tuple[int, int, Counter]] = {}
    for (file, _, value), (kind, before) in found.items():
        for key in (file, "all"):
            n, bad, why = out.get(key, (0, 0, Counter()))
            reason = wrong(value, kind, before)
            if reason:
                why[(reason, kind, value)] += 1
            out[key] = (n + 1, bad + bool(reason), why)
    return out


def checkout(revision: str, into: Path) -> Path:
    """The lc_compaction package of a git revision, extracted under `into`."""
    data = subprocess.run(["git", "archive", revision, "lc_compaction"], cwd=ROOT, capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


@click.command()
@click.option("--traces", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of *.jsonl conversations [default: the shared data's traces/].")
@click.option("--before", "revision", default=None, help="A git revision whose guard is measured beside.")
@click.option("--show", default=8, show_default=True, help="Wrong findings listed per file.")
def main(traces: Path | None, revision: str | None, show: int) -> None:
    if traces is None:
        traces = traces_dir()
    columns = {"this checkout": precision(findings(traces, ROOT))}
    if revision:
        with tempfile.TemporaryDirectory() as tmp:
            columns = {revision: precision(findings(traces, checkout(revision, Path(tmp)))), **columns}
    names = list(columns)
    print("| traces | " + " | ".join(f"{n}: found | wrong | precision" for n in names) + " |")
    print("|---|" + "---|---|---|" * len(names))
    for file in sorted({f for c in columns.values() for f in c}, key=lambda f: (f == "all", f)):
        cells = []
        for n in names:
            found, bad, _ = columns[n].get(file, (0, 0, Counter()))
            cells.append(f"{found:,} | {bad:,} | {1 - bad / found:.4f}" if found else "0 | 0 | -")
        print(f"| {file} | " + " | ".join(cells) + " |")
    for n in names:
        for file, (_, _, why) in sorted(columns[n].items()):
            if file != "all" and why:
                listed = ", ".join(f"{r}/{k}: {v!r} x{c}" for (r, k, v), c in why.most_common(show))
                print(f"\n{n}, {file}, wrong: {listed}")


if __name__ == "__main__":
    main()
