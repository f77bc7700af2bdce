"""Live progress on stderr: documents/s, MB/s, units done and an ETA from input bytes.

Modes: "bar" redraws one line in place a few times a second on a terminal; in a log (not
a TTY) it prints a plain line at most every ``LOG_INTERVAL`` seconds and the phase's last
line when it ends, never the same line twice; a step of a phase (a global stage's finalize
round, many of them short) prints in a log only when no line came for that long, its last
line too. So a short run's log has a line a phase and CI logs stay short. "json" prints
one JSON object a second for machines; "none" prints nothing. A phase with no task
planned (all done by an earlier run) prints nothing.
"""

from __future__ import annotations

import json
import sys
import time

LOG_INTERVAL = 5.0  # seconds between a phase's lines in a log (stderr not a terminal)


def _rate(value: float, seconds: float) -> float:
    return value / seconds if seconds > 0 else 0.0


class ProgressBar:
    # When this process last wrote a line in a log: what a step waits on.
    last_log_line = float("-inf")

    def __init__(
        self,
        label: str,
        total_bytes: int,
        total_units: int,
        mode: str = "bar",
        stream=None,
        quiet_for: float = 0.0,
        step: bool = False,
        eta: bool = True,
    ):
        """``quiet_for``: seconds to wait before the first line, so a phase that is usually
        instant (loading compiled kernels) says nothing unless it is not. ``step``: one of
        a phase's rounds; in a log it waits on every bar's last line, not its own.
        ``eta=False`` for a phase whose units differ too much for the share done to foretell
        the rest: a compile step takes 0.1 s or 20 s, so "3 of 7 steps in 19 s" said "ETA
        76s" for a compile that ended at 38 s; no ETA beats a wrong one."""
        if mode not in ("bar", "json", "none"):
            raise ValueError(f"progress mode must be bar, json or none, not {mode!r}")
        self.label = label
        # A phase that reads no input (after dedup, compiling) measures progress in units.
        self.by_units = total_bytes <= 0
        self.total_bytes = max(total_bytes, 1)
        self.total_units = total_units
        self.stream = stream or sys.stderr
        self.mode = mode
        self.enabled = mode != "none"
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 1.0 if mode == "json" else 0.2 if self.tty else LOG_INTERVAL
        self.eta = eta
        self.start = time.monotonic()
        self.quiet_until = self.start + quiet_for
        # In a log the first line waits an interval too: a phase shorter than that prints
        # only its last line (``close``).
        self.log = mode == "bar" and not self.tty
        self.step = step and self.log
        self.last_draw = self.start if self.log else 0.0
        self.last_line = ""
        self.documents = 0
        self.bytes = 0  # read by this process: what rates are made of
        self.resumed_bytes = 0  # of units a previous run finished: they count as done, not as speed
        self.tokens = 0
        self.units = 0

    def update(self, documents: int = 0, nbytes: int = 0, tokens: int = 0) -> None:
        self.documents += documents
        self.bytes += nbytes
        self.tokens += tokens
        self._maybe_draw()

    def unit_done(self, resumed_bytes: int = 0) -> None:
        """A unit finished; ``resumed_bytes``: its input, when a previous run did the work."""
        self.units += 1
        self.resumed_bytes += resumed_bytes
        self._maybe_draw()

    def _maybe_draw(self, force: bool = False) -> None:
        now = time.monotonic()
        last = max(self.last_draw, ProgressBar.last_log_line) if self.step else self.last_draw
        if not self.enabled or now < self.quiet_until or ((self.step or not force) and now - last < self.interval):
            return
        elapsed = now - self.start
        if self.by_units:
            done = self.units / self.total_units if self.total_units else 1.0
            eta = elapsed * (1 - done) / done if done > 0 else float("nan")
        else:
            done = min((self.bytes + self.resumed_bytes) / self.total_bytes, 1.0)
            speed = _rate(self.bytes, elapsed)
            eta = (1 - done) * self.total_bytes / speed if speed > 0 else 0.0 if done >= 1 else float("nan")
        if self.mode == "json":
            record = {
                "phase": self.label,
                "elapsed_s": round(elapsed, 2),
                "units_done": self.units,
                "units_total": self.total_units,
                "documents": self.documents,
                "bytes": self.bytes,
                "resumed_bytes": self.resumed_bytes,
                "docs_per_s": round(_rate(self.documents, elapsed), 1),
                "mb_per_s": round(_rate(self.bytes, elapsed) / 1e6, 2),
                "tokens": self.tokens,
                "tokens_per_s": round(_rate(self.tokens, elapsed), 1),
                "fraction": round(done, 4),
                "eta_s": None if eta != eta or not self.eta else round(eta, 1),
            }
            self._write(json.dumps(record) + "\n", now)
            return
        fields = [
            f"{self.label}: {done:6.1%}",
            f"units {self.units}/{self.total_units}",
            f"{self.documents:,} docs {_rate(self.documents, elapsed):,.0f}/s",
            f"{_rate(self.bytes, elapsed) / 1e6:,.1f} MB/s",
        ]
        if self.tokens:
            fields.append(f"{_rate(self.tokens, elapsed) / 1e6:,.2f}M tokens/s")
        if self.eta:
            fields.append("ETA --" if eta != eta else f"ETA {eta:,.0f}s")
        line = " | ".join(fields)
        self._write("\r\x1b[2K" + line if self.tty else line + "\n", now)

    def _write(self, text: str, now: float) -> None:
        """Write ``text`` unless it is the line written last (a phase that ended between
        two lines would repeat its last one)."""
        self.last_draw = now
        if text == self.last_line:
            return
        self.last_line = text
        if self.log:
            ProgressBar.last_log_line = now
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        """The phase's last line; none for a phase that had nothing to do."""
        if not self.enabled or not self.total_units:
            return
        self._maybe_draw(force=True)
        if self.tty and self.mode == "bar" and self.last_line:
            self.stream.write("\n")
        self.stream.flush()
