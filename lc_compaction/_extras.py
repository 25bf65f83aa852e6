"""How to install an optional part of lc-compaction (an extra of pyproject.toml), in the words every error uses.

lc-compaction is not published on PyPI yet, so `pip install "lc-compaction[extra]"` only works once it is (or
from a private index that has it); until then the extra installs from the repository: `pip install -e
".[extra]"` in a clone (or `pip install "lc-compaction[extra] @ git+<repository URL>"`). See the README's Install
section.
"""

from __future__ import annotations

__all__ = ["install_hint", "missing_extra"]


def install_hint(extra: str) -> str:
    """The install command for `extra`, both forms: from a package index, and from a clone of the repository."""
    return (f'pip install "lc-compaction[{extra}]" (from a clone of the repository, until lc-compaction is '
            f'published on PyPI: pip install -e ".[{extra}]")')


def missing_extra(what: str, extra: str, exc: ImportError, module: str | None = None) -> ImportError:
    """An ImportError saying that `what` needs the `extra` and how to install it; its `name` is the missing
    module (`exc.name`, else `module`, the one that was imported).

    Raise it `from exc` (the original ModuleNotFoundError stays the cause)."""
    missing = exc.name or module
    package = f"the {missing!r} package" if missing else "a package"
    return ImportError(f"{what} needs {package} (the lc-compaction extra {extra!r}): {install_hint(extra)}",
                       name=missing)
