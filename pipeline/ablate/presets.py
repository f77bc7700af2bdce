"""The model presets of ``prep ablate``, apart from the model so that the command line
can list them without importing torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Preset:
    layers: int
    d_model: int
    heads: int
    seq_len: int  # default context of a trial
    batch_size: int  # default windows per step
    lr: float  # peak learning rate (AdamW, warmup then cosine)
    adaptive: bool  # adaptive softmax output (CPU presets); else a tied full softmax

    def describe(self) -> dict:
        return asdict(self)


PRESETS = {
    "tiny": Preset(layers=2, d_model=128, heads=4, seq_len=128, batch_size=16, lr=3e-3, adaptive=True),
    "small": Preset(layers=4, d_model=256, heads=4, seq_len=256, batch_size=16, lr=2e-3, adaptive=True),
    "medium": Preset(layers=6, d_model=512, heads=8, seq_len=512, batch_size=16, lr=1e-3, adaptive=False),
    "gpt2-124m": Preset(layers=12, d_model=768, heads=12, seq_len=1024, batch_size=16, lr=6e-4, adaptive=False),
}

# The adaptive softmax's cluster boundaries (ids in frequency order); each cluster is
# DIV_VALUE times narrower than the one before. A vocabulary under the first gets a full softmax.
CUTOFFS = (2048, 8192, 32768)
DIV_VALUE = 4.0
