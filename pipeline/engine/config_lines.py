"""Where in a config file a refusal points: the line that opens the table it is about
(``[sources.web]``, the k-th ``[[stages]]``), found in the file's text since TOML parsers
keep no positions."""

from __future__ import annotations

import contextlib
import re
import typing

from pipeline.engine.config_error import ConfigError


class TableError(ConfigError):
    """A refusal about one table; ``header`` matches the line that opens it."""

    def __init__(self, message: str, header: tuple[str, int]):
        super().__init__(message)
        self.header = header


def header_line(text: str, header: tuple[str, int]) -> str:
    """ ", line N" for the ``occurrence``-th line ``header`` matches, or "" (a table
    written inline, or as dotted keys, has no line of its own)."""
    pattern, occurrence = header
    lines = [n for n, line in enumerate(text.splitlines(), 1) if re.fullmatch(pattern, line)]
    return f", line {lines[occurrence]}" if occurrence < len(lines) else ""


@contextlib.contextmanager
def in_table(header: tuple[str, int]) -> typing.Iterator[None]:
    """A refusal within, tied to the table ``header`` finds."""
    try:
        yield
    except TableError:
        raise
    except ConfigError as error:
        raise TableError(str(error), header) from None


def source_header(name: str) -> tuple[str, int]:
    quoted = "|".join(re.escape(form) for form in (name, f'"{name}"', f"'{name}'"))
    return rf"\s*\[\s*sources\s*\.\s*(?:{quoted})\s*\]\s*(?:#.*)?", 0


def stage_header(index: int) -> tuple[str, int]:
    return r"\s*\[\[\s*stages\s*\]\]\s*(?:#.*)?", index
