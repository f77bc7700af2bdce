"""Each sampled mixture as a ``prep mix`` folder, trained with the ``prep ablate`` proxy.

A trial is a real mixture (``plan_mixture`` + ``write_mix``, what ``prep mix`` does) of the
trial's budget, trained by ``run_ablation`` with one seed, so the proxy, its loader path,
its eval sets and its ledger are the ablation's own. Every trial uses the same seed, and
since every mixture lists every source's shards, the same vocabulary: each starts from
the same weights. Records go to one ledger under ``--out``; a trial's mixture folder is
named by a hash of its shares and of what the runs hold, so a search run again (or with
more ``--trials``) finds its finished trials there and trains only the rest, and a run
rebuilt in place gets new mixtures. A mixture folder is complete once its
``mix.json`` exists (written last, atomically), so one cut short is simply made again.

The trial mixture is not held to ``--max-epochs``: the repetition limit is about the big
run (``sampling`` enforces it at ``--target-tokens``), while a trial of a few million
tokens may well repeat a small source more than the big run would.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.ablate.ablation import AblationOptions, run_ablation
from pipeline.formats.experiments import SearchFolder
from pipeline.formats.mix import MixLayout
from pipeline.loader.cache import fingerprint
from pipeline.mix.build import plan_mixture
from pipeline.mix.inventory import Inventory
from pipeline.mix.output import write_mix

ANY_REPETITION = 1e9  # the trial mixture's own --max-epochs (see the module docstring)


@dataclass
class TrialSettings:
    """What every trial shares: the runs, the proxy and its evaluation."""

    runs: list[Path]
    out: Path
    tokens: int
    eval_files: list[Path]
    weights: dict[str, float]  # "eval:NAME" -> weight in the objective
    preset: str = "tiny"
    seed: int = 0
    eval_tokens: int = 16_384
    eval_points: int = 1
    held_out: float = 0.02
    device: str = "auto"
    threads: int | None = None
    workers: int = 1
    target_tokens: int | None = None
    runs_key: str = ""  # what the runs hold (``runs_key``): a trial mixture is planned from it
    extra: dict = field(default_factory=dict)  # further AblationOptions (seq_len, batch_size, lr)

    def options(self, data: list[Path], out: Path, seeds: int = 1) -> AblationOptions:
        return AblationOptions(
            data=data,
            out=out,
            tokens=self.tokens,
            preset=self.preset,
            seeds=seeds,
            first_seed=self.seed,
            eval_files=self.eval_files,
            weights=self.weights,
            held_out_weight=0.0,  # each mixture's own held-out slice differs: not an objective
            held_out=self.held_out,
            eval_tokens=self.eval_tokens,
            eval_points=self.eval_points,
            workers=self.workers,
            device=self.device,
            threads=self.threads,
            ledger=SearchFolder(self.out).ledger,
            target_tokens=self.target_tokens,
            **self.extra,
        )


def make_mixture(settings: TrialSettings, sources: list[str], shares: np.ndarray, folder: Path) -> Path:
    """The ``prep mix`` folder of ``shares`` at the trial budget (made unless complete)."""
    if not MixLayout(folder).manifest.exists():
        weights = {name: float(share) for name, share in zip(sources, shares, strict=True)}
        # Enough tokens that the held-out documents' removal still leaves one pass.
        budget = math.ceil(settings.tokens / (1 - settings.held_out))
        description, order = plan_mixture(
            settings.runs, weights, budget=budget, max_epochs=ANY_REPETITION, seed=settings.seed
        )
        write_mix(folder, description, order)
    return folder


def runs_key(inventory: Inventory) -> str:
    """The runs' shards and documents (ids and token counts), for a trial mixture's key: a run
    rebuilt in place must not resume onto mixtures planned from its old shards."""
    held = [
        (name, source.shards, fingerprint(source.lengths.tobytes(), source.id_hashes.tobytes()))
        for name, source in sorted(inventory.sources.items())
    ]
    return fingerprint("runs", held)


def trial_folder(settings: TrialSettings, sources: list[str], shares: np.ndarray) -> Path:
    rounded = [round(float(s), 12) for s in shares]
    key = fingerprint("mixture", sources, rounded, settings.tokens, settings.seed, settings.runs_key)
    return SearchFolder(settings.out).trial(key[:10])


def run_trials(
    settings: TrialSettings, sources: list[str], shares: np.ndarray, progress: Callable[[str], None]
) -> tuple[list[dict], int]:
    """Every mixture's trial record (in the order of ``shares``) and how many were trained now."""
    records, trained = [], 0
    for index, row in enumerate(shares):
        folder = make_mixture(settings, sources, row, trial_folder(settings, sources, row))
        described = ", ".join(f"{name} {share:.3f}" for name, share in zip(sources, row, strict=True))
        progress(f"trial {index + 1}/{len(shares)}: {described}")
        result = run_ablation(settings.options([folder], SearchFolder.trial_ablation(folder)), progress)
        records.append(result.records[0])
        trained += result.trained
    return records, trained


def validate(
    settings: TrialSettings,
    sources: list[str],
    mixtures: dict[str, np.ndarray],
    seeds: int,
    progress: Callable[[str], None],
):
    """Train each named mixture with ``seeds`` seeds in one ablation: its verdict compares them."""
    search = SearchFolder(settings.out)
    folders = []
    for name, shares in mixtures.items():
        folder = search.validation_mixture(name)
        if MixLayout(folder).manifest.exists():
            MixLayout(folder).manifest.unlink()  # the proposal may have moved: plan it again
        folders.append(make_mixture(settings, sources, shares, folder))
    return run_ablation(settings.options(folders, search.validation, seeds=seeds), progress)
