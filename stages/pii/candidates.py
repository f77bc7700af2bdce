"""A candidate span, as the ``pii`` types' scans find it and their validators read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A candidate span of ``string``; mirrors the parts of ``re.Match`` validators use."""

    string: str
    begin: int
    finish: int

    def group(self) -> str:
        return self.string[self.begin : self.finish]

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish
