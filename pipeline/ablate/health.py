"""A trial's health, the checklist a careful team runs on a small training run.

- **NaN or inf**: the loss is not finite; the trial stops at that step with a message
  (continuing would only burn time, and its numbers would be meaningless).
- **Spikes**: a step whose loss is above ``SPIKE_FACTOR`` times the mean of the
  ``SPIKE_WINDOW`` steps before it. A falling loss never trips it; a learning rate too high
  for the model, or a run of garbage batches, does.
- **Loss falling**: the mean loss of the last tenth of the steps is below that of the
  first tenth.
- **Data wait**: the share of step time spent waiting for the loader. Over
  ``DATA_WAIT_LIMIT`` the GPU (or CPU) idles on data: more loader workers, or a faster disk.
"""

from __future__ import annotations

import math
from collections import deque

from pipeline.util.numbers import counted

SPIKE_FACTOR = 1.5
SPIKE_WINDOW = 20
DATA_WAIT_LIMIT = 0.05
MAX_SPIKES_KEPT = 20
SPIKE_RULE = f"loss above {SPIKE_FACTOR}x the mean of the previous {SPIKE_WINDOW} steps"


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf: the trial stops here."""


class HealthMonitor:
    """Watches every step's loss; ``summary`` gives the record's ``health`` field."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=SPIKE_WINDOW)
        self.losses: list[float] = []
        self.spikes: list[dict] = []
        self.spike_count = 0

    def observe(self, step: int, tokens: int, loss: float) -> None:
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"loss became {loss} at step {step} ({tokens:,} tokens): the trial was stopped")
        if len(self.recent) == SPIKE_WINDOW:
            mean = sum(self.recent) / SPIKE_WINDOW
            if loss > SPIKE_FACTOR * mean:
                self.spike_count += 1
                if len(self.spikes) < MAX_SPIKES_KEPT:
                    self.spikes.append({"step": step, "tokens": tokens, "loss": loss, "recent_mean": mean})
        self.recent.append(loss)
        self.losses.append(loss)

    def summary(self, data_wait_share: float, stopped: str | None = None) -> dict:
        tenth = max(1, len(self.losses) // 10)
        first, last = self.losses[:tenth], self.losses[-tenth:]
        falling = bool(first and last and sum(last) / len(last) < sum(first) / len(first))
        flags = []
        if stopped:
            flags.append(stopped)
        if self.losses and not falling:
            flags.append("the loss did not fall: compare the first and last tenth of the steps")
        if self.spike_count:
            flags.append(f"{counted(self.spike_count, 'loss spike')}: {SPIKE_RULE}")
        if data_wait_share > DATA_WAIT_LIMIT:
            flags.append(
                f"the model waited for data {data_wait_share:.1%} of the step time (over {DATA_WAIT_LIMIT:.0%}): "
                "add loader workers (--workers) or read from a faster disk"
            )
        return {
            "status": "stopped" if stopped else "ok",
            "message": "; ".join(flags) if flags else "healthy: loss falling, no spikes, data kept up",
            "loss_falling": falling,
            "spikes": self.spikes,
            "spike_count": self.spike_count,
            "spike_rule": SPIKE_RULE,
            "data_wait_flagged": data_wait_share > DATA_WAIT_LIMIT,
        }
