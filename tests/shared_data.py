"""Where the recorded conversations and the compaction cases are: the one home of that question.

The tests, the benchmarks (`benchmarks/run.py`, `benchmarks/fleet.py`) and the refresh command
(`scripts/refresh-data`) ask this module, and nothing else, for the data. It lives in one of two places:

- a **fuller copy**: the folder named by the environment variable `LC_COMPACTION_SHARED`, else ``../shared``
  beside the repository, when it holds ``traces/*.jsonl`` and ``cases/cases.json``;
- the **vendored copy** in the repository (``tests/data``: gzip files, their licence notices, a README saying
  where they come from), otherwise: so a bare clone runs every test. An empty folder (or no ``../shared``) means
  the vendored copy; ``LC_COMPACTION_SHARED="$(mktemp -d)"`` proves that a bare clone works (``.ci/run``).

Both have the same layout, the shared collection's: ``traces/*.jsonl`` (OpenAI chat format, one conversation a
line, with the ``LICENSE.*.txt`` notices and README beside them) and ``cases/cases.json`` (with its README). The
vendored copy is unpacked once into ``tests/data/.unpacked/<digest>/`` (ignored by git; the digest is that of
the vendored files, so a refresh unpacks again), so every reader opens plain files.

What is vendored (`vendor`): every case, every conversation of every trace file, except the large
``swe_agent_coding.jsonl``, of which `SAMPLED` says how many conversations are kept (`sample`: spread over the
lengths, the longest always among them). Lines are kept byte for byte, in their file's order.

Does not import lc_compaction (the oracle, `tests.oracle`, uses it, and is independent of the package).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["ENV", "REPO_ROOT", "SAMPLED", "VENDORED", "DataLocationError", "cases_path", "describe", "sample",
           "shared_dir", "traces_dir", "vendor", "vendored_files"]

ENV = "LC_COMPACTION_SHARED"
"""The environment variable naming a fuller copy of the shared data (a folder with ``traces/`` and ``cases/``)."""

REPO_ROOT = Path(__file__).resolve().parent.parent
VENDORED = REPO_ROOT / "tests" / "data"
"""The vendored copy: ``traces/*.jsonl.gz``, ``cases/cases.json.gz``, the notices and READMEs as they came."""

SAMPLED = {"swe_agent_coding.jsonl": 6}
"""Trace files vendored as a sample: file name -> conversations kept (`sample`). 6 of the 21 coding runs keep the
vendored copy near 0.6 MB while leaving the coding conversations' range of lengths (35 to 175 tool steps)."""

_UNPACKED = ".unpacked"


class DataLocationError(RuntimeError):
    """The folder named as the fuller copy cannot be used (missing, or holding only part of the data)."""


def _parts(folder: Path) -> tuple[bool, bool]:
    """(holds ``traces/*.jsonl``, holds ``cases/cases.json``)."""
    return any((folder / "traces").glob("*.jsonl")), (folder / "cases" / "cases.json").is_file()


def _fuller_copy() -> Path | None:
    """The fuller copy's folder, or None when there is none (an empty folder, or no ``../shared``).

    Raises:
        DataLocationError: `ENV` names something that is not a folder, or a folder with only part of the data.
    """
    env = os.environ.get(ENV)
    folder = Path(env).expanduser().resolve() if env else (REPO_ROOT.parent / "shared").resolve()
    if not folder.exists() and not env:
        return None
    if not folder.is_dir():
        raise DataLocationError(f"{ENV}={env}: not a folder (give a copy of the shared data, with traces/ and "
                                "cases/, or an empty folder for the vendored copy in tests/data)")
    traces, cases = _parts(folder)
    if traces and cases:
        return folder
    if not traces and not cases and not (folder / "traces").exists() and not (folder / "cases").exists():
        return None
    missing = " and ".join(p for p, ok in (("traces/*.jsonl", traces), ("cases/cases.json", cases)) if not ok)
    where = f"{ENV}={env}" if env else f"{folder} (beside the repository)"
    raise DataLocationError(f"{where}: holds part of the shared data, no {missing}; give a full copy, or an empty "
                            f"folder ({ENV}=$(mktemp -d)) for the vendored copy in tests/data")


def vendored_files() -> list[Path]:
    """Every file of the vendored copy (gzip files, notices, READMEs), sorted, relative to `VENDORED`."""
    return sorted(p.relative_to(VENDORED) for p in VENDORED.rglob("*")
                  if p.is_file() and _UNPACKED not in p.relative_to(VENDORED).parts and p.suffix != ".py"
                  and "__pycache__" not in p.parts)


def _digest() -> str:
    h = hashlib.sha256()
    for rel in vendored_files():
        h.update(str(rel).encode() + b"\0" + (VENDORED / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder (concurrent test workers may unpack the
    same files at once: each sees either no file or a whole one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _unpacked() -> Path:
    """The vendored copy as plain files (unpacked on first use; the same layout as the fuller copy)."""
    target = VENDORED / _UNPACKED / _digest()
    done = target / ".complete"
    if done.is_file():
        return target
    files = vendored_files()
    if not files:
        raise DataLocationError(f"no vendored data in {VENDORED} (scripts/refresh-data writes it from a full copy)")
    for rel in files:
        data = (VENDORED / rel).read_bytes()
        if rel.suffix == ".gz":
            _write_atomic(target / rel.with_suffix(""), gzip.decompress(data))
        else:
            _write_atomic(target / rel, data)
    _write_atomic(done, b"")
    for old in (VENDORED / _UNPACKED).iterdir():  # earlier unpackings (before a refresh)
        if old != target and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return target


@functools.cache
def shared_dir() -> Path:
    """The data folder (``traces/``, ``cases/``): the fuller copy when there is one, else the vendored copy
    (unpacked). Read once per process.

    Raises:
        DataLocationError: see `_fuller_copy`; or the vendored copy is missing.
    """
    return _fuller_copy() or _unpacked()


def traces_dir() -> Path:
    """The folder of the recorded conversations (``*.jsonl``)."""
    return shared_dir() / "traces"


def cases_path() -> Path:
    """The compaction cases file (``cases.json``)."""
    return shared_dir() / "cases" / "cases.json"


def describe() -> str:
    """One line saying which copy is used and where (the pytest header prints it)."""
    folder = shared_dir()
    if VENDORED in folder.parents:
        return f"shared data: the vendored copy ({VENDORED.relative_to(REPO_ROOT)}; {ENV} names a fuller copy)"
    return f"shared data: {folder}"


# ------------------------------------------------------------------------------------------------ vendoring
def sample(lines: list[bytes], n: int) -> list[bytes]:
    """`n` of the conversation `lines` (JSON Lines, one conversation each), spread over their lengths: the lines
    at ranks ``round(k * (len - 1) / (n - 1))``, k = 0..n-1, of the lines sorted by length (bytes), so the
    shortest and the longest are kept; returned in their original order. All of them when there are `n` or fewer.

    Raises:
        ValueError: `n` < 2.
    """
    if n < 2:
        raise ValueError(f"n: a sample keeps at least the shortest and the longest line, got {n}")
    if len(lines) <= n:
        return lines
    by_length = sorted(range(len(lines)), key=lambda i: (len(lines[i]), i))
    keep = {by_length[round(k * (len(lines) - 1) / (n - 1))] for k in range(n)}
    return [lines[i] for i in sorted(keep)]


def vendor(source: Path, dest: Path) -> list[Path]:
    """Write the vendored copy of the full copy `source` into `dest` (see the module docstring): each trace file
    as ``traces/<name>.gz`` (`SAMPLED` files sampled), ``cases/cases.json.gz``, the notices and READMEs copied
    as they are. Existing files of those folders are replaced; a file `source` no longer has is removed.
    Returns the files written, relative to `dest`. Deterministic: the gzip header carries no name and no time.

    Raises:
        DataLocationError: `source` does not hold ``traces/*.jsonl`` and ``cases/cases.json``.
    """
    if _parts(source) != (True, True):
        raise DataLocationError(f"{source}: not a full copy of the shared data (traces/*.jsonl, cases/cases.json)")
    written: list[Path] = []
    for part in ("traces", "cases"):
        (dest / part).mkdir(parents=True, exist_ok=True)
        for old in (dest / part).iterdir():
            if old.is_file():
                old.unlink()
        for path in sorted((source / part).iterdir()):
            if not path.is_file():
                continue
            rel = Path(part) / path.name
            if path.suffix in (".jsonl", ".json"):
                data = path.read_bytes()
                if path.name in SAMPLED:  # lines end at "\n" only (a JSON string may hold U+2028)
                    lines = [line + b"\n" for line in data.split(b"\n") if line.strip()]
                    data = b"".join(sample(lines, SAMPLED[path.name]))
                rel = rel.with_name(path.name + ".gz")
                (dest / rel).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
            elif path.suffix in (".txt", ".md"):
                shutil.copyfile(path, dest / rel)
            else:
                continue
            written.append(rel)
    return written
