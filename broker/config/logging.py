r"""structlog set-up: JSON lines off a TTY, a console renderer on one.

Log lines carry what clients send (client ids, group ids, member ids, regular expressions,
...): nothing of it may start a line of its own or move a terminal's cursor. The JSON
renderer (``json.dumps``, ASCII only) escapes every control character and every non-ASCII
one; the console renderer shows a string with a space or a newline as its repr but any
other as it is, so ``escape_unprintable`` first escapes each character of a string that is
not printable (``\x1b``, ``\x85``, ``\u2028``, ...).
"""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def escape_unprintable(
    _logger: object, _name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    r"""Each string value with a character that is not printable gets that character escaped
    as Python writes it (a newline as ``\n``)."""
    for key, value in event_dict.items():
        if isinstance(value, str) and not value.isprintable():
            event_dict[key] = "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)
    return event_dict


def configure_logging(fmt: str | None, level: str) -> None:
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    last: list[structlog.typing.Processor]
    if fmt == "json":
        last = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        last = [structlog.dev.set_exc_info, escape_unprintable, structlog.dev.ConsoleRenderer()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *last,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
