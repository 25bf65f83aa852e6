"""One body for a sync function and its async twin: the work is a generator, the I/O is the driver's.

The generator yields a request each time it needs something done (a model call, a compaction), receives the
answer, and returns the result. `drive` answers with a plain call, `adrive` awaits one; an exception the call
raises is thrown into the generator where it yielded, so the generator's own `try` handles it (or lets it
propagate) the same way under both drivers. `compact` / `acompact` (compact.py) follow the same idea with a
plain iterator, their strategies' `apply` / `aapply` being the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")
Result = TypeVar("Result")


def drive(gen: Generator[Request, Answer, Result], call: Callable[[Request], Answer]) -> Result:
    """Run `gen` to its end, answering each request it yields with `call(request)`; returns what `gen` returns.

    Raises:
        whatever `gen` raises (an exception of `call` is thrown into `gen` first).
    """
    try:
        request = next(gen)
        while True:
            try:
                answer = call(request)
            except Exception as exc:  # noqa: BLE001 - handed to the generator, which decides
                request = gen.throw(exc)
            else:
                request = gen.send(answer)
    except StopIteration as done:
        result: Result = done.value  # StopIteration.value is typed Any; `gen` is declared to return Result
        return result


async def adrive(gen: Generator[Request, Answer, Result], call: Callable[[Request], Awaitable[Answer]]) -> Result:
    """Async twin of `drive`: each request is answered with `await call(request)`."""
    try:
        request = next(gen)
        while True:
            try:
                answer = await call(request)
            except Exception as exc:  # noqa: BLE001 - handed to the generator, which decides
                request = gen.throw(exc)
            else:
                request = gen.send(answer)
    except StopIteration as done:
        result: Result = done.value  # StopIteration.value is typed Any; `gen` is declared to return Result
        return result
