"""Where the data is (`tests/shared_data.py`): a fuller copy when one is given, the vendored copy otherwise (an
empty folder included), a clear error for a folder that holds only part of the data; the vendored copy unpacks to
the shared layout, and is what `scripts/refresh-data` writes from the fuller copy when one is present."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import shared_data
from tests.shared_data import ENV, SAMPLED, VENDORED, sample, vendor, vendored_files

ROOT = Path(__file__).resolve().parent.parent


def _where(env: str | None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`shared_data.shared_dir()` in a fresh process (it is read once per process), with `ENV` set to `env`."""
    environ = {k: v for k, v in os.environ.items() if k != ENV}
    if env is not None:
        environ[ENV] = env
    return subprocess.run([sys.executable, "-c", "from tests.shared_data import shared_dir; print(shared_dir())"],
                          cwd=cwd, env={**environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)


def _full_copy(folder: Path) -> Path:
    (folder / "traces").mkdir(parents=True)
    (folder / "cases").mkdir()
    (folder / "traces" / "t.jsonl").write_text('{"id": "c", "messages": []}\n', encoding="utf-8")
    (folder / "cases" / "cases.json").write_text("[]", encoding="utf-8")
    return folder


def test_an_empty_folder_means_the_vendored_copy(tmp_path: Path):
    out = _where(str(tmp_path))
    assert out.returncode == 0, out.stderr
    folder = Path(out.stdout.strip())
    assert VENDORED in folder.parents
    assert sorted(p.name for p in (folder / "traces").glob("*.jsonl")) == \
        sorted(p.name[:-3] for p in (VENDORED / "traces").glob("*.jsonl.gz"))
    assert (folder / "cases" / "cases.json").is_file()


def test_a_fuller_copy_is_used_when_given(tmp_path: Path):
    full = _full_copy(tmp_path / "shared")
    out = _where(str(full))
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == full.resolve()


@pytest.mark.parametrize("present", ["traces", "cases"])
def test_a_folder_with_part_of_the_data_is_an_error_naming_what_is_missing(tmp_path: Path, present: str):
    full = _full_copy(tmp_path / "shared")
    missing = {"traces": full / "cases" / "cases.json", "cases": full / "traces" / "t.jsonl"}[present]
    missing.unlink()
    out = _where(str(full))
    assert out.returncode != 0
    assert "DataLocationError" in out.stderr and f"{ENV}={full}" in out.stderr
    assert ("no cases/cases.json" if present == "traces" else "no traces/*.jsonl") in out.stderr


def test_a_missing_folder_is_an_error(tmp_path: Path):
    out = _where(str(tmp_path / "nowhere"))
    assert out.returncode != 0 and "not a folder" in out.stderr


def test_the_vendored_copy_unpacks_to_the_shared_layout(tmp_path: Path):
    folder = Path(_where(str(tmp_path)).stdout.strip())
    files = vendored_files()
    assert {str(p) for p in files} >= {"README.md", "cases/README.md", "cases/cases.json.gz", "traces/README.md"}
    for rel in files:
        data = (VENDORED / rel).read_bytes()
        if rel.suffix == ".gz":
            assert (folder / rel.with_suffix("")).read_bytes() == gzip.decompress(data), rel
        else:
            assert (folder / rel).read_bytes() == data, rel
    for trace in (folder / "traces").glob("*.jsonl"):  # each file keeps its licence notice beside it
        assert (folder / "traces" / f"LICENSE.{trace.stem}.txt").is_file(), trace.name


def test_sample_keeps_the_shortest_and_the_longest_spread_over_lengths_in_order():
    lines = [b"x" * n + b"\n" for n in (50, 10, 90, 30, 70, 20, 60, 80, 40, 100)]
    kept = sample(lines, 4)
    assert len(kept) == 4 and kept == [line for line in lines if line in kept]  # original order
    assert min(lines, key=len) in kept and max(lines, key=len) in kept
    assert sample(lines[:3], 4) == lines[:3]
    with pytest.raises(ValueError, match="at least the shortest and the longest"):
        sample(lines, 1)


def test_the_vendored_copy_is_what_refresh_writes_from_the_shared_data(tmp_path: Path):
    """`scripts/refresh-data` (`vendor`) from the shared data in use writes the vendored copy byte for byte: from
    a fuller copy (`LC_COMPACTION_SHARED` or ../shared), the vendored copy is up to date; from the vendored copy
    itself (a clone alone, CI), refreshing is a fixed point (the sample of a sample keeps it whole)."""
    source = shared_data.shared_dir()
    written = vendor(source, tmp_path)
    assert sorted(written) == [p for p in vendored_files() if p.parts[0] in ("traces", "cases")]
    for rel in written:
        fresh, ours = (tmp_path / rel).read_bytes(), (VENDORED / rel).read_bytes()
        if rel.suffix == ".gz":  # compared unpacked: zlib builds may compress the same bytes differently
            fresh, ours = gzip.decompress(fresh), gzip.decompress(ours)
        assert fresh == ours, f"tests/data/{rel} differs from what scripts/refresh-data writes from {source}"
    for name, n in SAMPLED.items():  # the sample keeps the longest conversation of the full file
        full = [line for line in (source / "traces" / name).read_bytes().split(b"\n") if line.strip()]
        kept = gzip.decompress((VENDORED / "traces" / f"{name}.gz").read_bytes()).split(b"\n")
        assert len([line for line in kept if line.strip()]) == min(n, len(full))
        assert max(full, key=len) in kept
        assert all(json.loads(line)["messages"] for line in kept if line.strip())


def test_refresh_command_refuses_a_folder_that_is_not_a_full_copy(tmp_path: Path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "refresh-data"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not a full copy" in out.stderr
    assert vendored_files()  # nothing of the vendored copy was touched
