"""Regular-expression subscriptions: RE2 syntax (Kafka compiles them with RE2/J), matched
against the whole topic name. The engine (google-re2, a declared dependency) is imported
when the first regex subscription arrives."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ENGINE = "re2"

__all__ = ["ENGINE", "InvalidRegex", "compile_regex", "matching_topics"]


class InvalidRegex(ValueError):
    """The pattern does not compile (INVALID_REGULAR_EXPRESSION)."""


def compile_regex(pattern: str) -> Any:
    import re2 as engine

    options = engine.Options()
    options.log_errors = False  # RE2 would write the client's pattern to stderr itself
    try:
        return engine.compile(pattern, options)
    except (engine.error, ValueError, TypeError) as exc:
        raise InvalidRegex(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {exc}."
        ) from None


def matching_topics(pattern: str, topics: Iterable[str]) -> tuple[str, ...]:
    """The topics whose whole name matches ``pattern``, sorted (internal topics never reach
    here: the ``TopicsView`` excludes them)."""
    compiled = compile_regex(pattern)
    return tuple(sorted(t for t in topics if compiled.fullmatch(t) is not None))
