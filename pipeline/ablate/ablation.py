"""``prep ablate`` as a library: every DATA x seed trial, the ledger, the verdict.

An ablation is identified by what decides its results (the DATA by content, the model,
the budget, the seeds, the eval sets), so running the same command again is the same
experiment: each trial whose record is already in the ledger is read back, not trained
again, and an interrupted ablation resumes at the first unfinished trial. A trial's
record is written once, when it ends (``pipeline.formats.experiments``).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import __version__
from pipeline.ablate.data import AblationData, AblationDataError, open_data
from pipeline.ablate.evalsets import check_names
from pipeline.ablate.evaltexts import training_inputs
from pipeline.ablate.groups import TokenizerGroup, build_groups
from pipeline.ablate.multiple_choice import MultipleChoiceSet
from pipeline.ablate.presets import PRESETS
from pipeline.ablate.projection import project
from pipeline.ablate.trial import TrialPlan, choose_device, describe_device, run_trial
from pipeline.ablate.verdict import verdict_lines
from pipeline.formats.experiments import AblationFolder, LedgerError, find_trial, write_record
from pipeline.loader.cache import fingerprint
from pipeline.util.atomic import write_json_atomic

TRIAL_SCHEME = 2  # bump when a change to the trainer changes what a trial computes


@dataclass
class AblationOptions:
    data: list[Path]
    out: Path
    tokens: int
    preset: str = "tiny"
    seq_len: int | None = None  # default: the preset's
    batch_size: int | None = None
    lr: float | None = None
    seeds: int = 1
    first_seed: int = 0
    eval_files: list[Path] = field(default_factory=list)
    choice_files: list[Path] = field(default_factory=list)  # multiple-choice questions (--eval-mc)
    weights: dict[str, float] = field(default_factory=dict)  # eval set name -> weight; default 1
    held_out_weight: float = 1.0
    held_out: float = 0.02
    eval_tokens: int = 65_536
    eval_points: int = 8
    workers: int = 1
    device: str = "auto"
    threads: int | None = None
    ledger: Path | None = None  # default: out/ledger
    remap_vocab: bool = True
    target_params: float = 1e9
    target_tokens: int | None = None  # default: each DATA's (full) tokens

    @property
    def ledger_dir(self) -> Path:
        return self.ledger if self.ledger is not None else AblationFolder(self.out).ledger


@dataclass
class AblationResult:
    experiment: str
    records: list[dict]
    verdict: list[str]
    trained: int  # trials trained in this call (the others were read from the ledger)


def data_names(paths: list[Path]) -> list[str]:
    """Each DATA's name: its folder's name, numbered when two folders share one."""
    names, seen = [], {}
    for path in paths:
        base = path.resolve().name or str(path)
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def prepare(options: AblationOptions, progress: Callable[[str], None]) -> list[TokenizerGroup]:
    """Open every DATA, group it by tokenizer, build each group's eval sets and vocabulary."""
    if options.preset not in PRESETS:
        raise ValueError(f"unknown model preset {options.preset!r}; choose one of {', '.join(PRESETS)}")
    check_names(options.eval_files, options.choice_files)
    cache = AblationFolder(options.out).loader_cache
    datas = [
        open_data(path, name, options.held_out, cache)
        for path, name in zip(options.data, data_names(options.data), strict=True)
    ]
    _check_distinct(datas)
    for warning in training_inputs(options.eval_files, [run for data in datas for run in data.runs()]):
        progress(warning)
    for data in datas:
        if data.sample:
            progress(
                f"{data.name} is a --sample {data.sample:g} run: the projection scales its tokens to the full input"
            )
    seq_len = options.seq_len or PRESETS[options.preset].seq_len
    groups = build_groups(
        datas, options.eval_files, options.choice_files, seq_len, options.eval_tokens, options.remap_vocab, progress,
        held_out_weighed=options.held_out_weight > 0,
    )  # fmt: skip
    _announce(groups, progress)
    return groups


def _check_distinct(datas: list[AblationData]) -> None:
    """Refuse a DATA without tokens, and two DATA of the same tokens (one folder given twice,
    or a copy): a trial is keyed by its data's content, so theirs would be one trial and the
    verdict would have one DATA where the command line named two."""
    seen: dict[str, AblationData] = {}
    for data in datas:
        if data.tokens <= 0:
            raise AblationDataError(f"{data.path}: no tokens (were all its documents dropped?): nothing to train on")
        if data.fingerprint in seen:
            first = seen[data.fingerprint].path
            raise AblationDataError(f"{data.path} holds the same tokens as {first}: give each DATA once")
        seen[data.fingerprint] = data


def _announce(groups: list[TokenizerGroup], progress: Callable[[str], None]) -> None:
    """Say what each tokenizer's eval sets hold (a file's malformed rows, once)."""
    if len(groups) > 1:
        names = ", ".join(group.name for group in groups)
        progress(f"the DATA use {len(groups)} tokenizers ({names}): the verdict compares bits per byte")
    for group in groups:
        for eval_set in group.sets:
            if isinstance(eval_set, MultipleChoiceSet):
                progress(f"eval set {eval_set.name} ({group.name}): {eval_set.questions:,} questions")
            else:
                size = f", {eval_set.text_bytes:,} bytes of text" if eval_set.text_bytes is not None else ", no text"
                progress(
                    f"eval set {eval_set.name} ({group.name}): {eval_set.tokens:,} tokens from "
                    f"{eval_set.documents:,} documents{size}"
                )
            if group is groups[0]:
                for problem in eval_set.problems:
                    progress(f"  skipped {problem}")
                if eval_set.skipped > len(eval_set.problems):
                    progress(f"  and {eval_set.skipped - len(eval_set.problems):,} more malformed rows skipped")
        if group.vocab.used is not None:
            progress(
                f"vocabulary ({group.name}): the {group.vocab.size:,} of {group.vocab.vocab_size:,} token ids "
                "that occur in the DATA and eval sets"
            )


def _scored(eval_set) -> np.ndarray:
    """What decides a set's scores besides its labels: the real labels, or the continuations."""
    return eval_set.continuation if isinstance(eval_set, MultipleChoiceSet) else eval_set.real


def weights_of(options: AblationOptions, groups: list[TokenizerGroup]) -> dict[str, float]:
    """Every eval set's weight in the objective: ``--eval FILE:WEIGHT`` (1 by default),
    ``--held-out-weight`` for the held-out sets."""
    names = {s.name for group in groups for s in group.sets}
    default = {name: options.held_out_weight if name.startswith("held-out:") else 1.0 for name in names}
    return {name: options.weights.get(name, default[name]) for name in sorted(names)}


def _group_settings(group: TokenizerGroup) -> dict:
    vocab = group.vocab
    return {
        "vocab": [vocab.size, fingerprint("ids", vocab.used.tobytes()) if vocab.used is not None else None],
        "eval_sets": [(s.name, fingerprint("set", s.labels.tobytes(), _scored(s).tobytes())) for s in group.sets],
    }


def run_ablation(options: AblationOptions, progress: Callable[[str], None] = print) -> AblationResult:
    groups = prepare(options, progress)
    device = choose_device(options.device, options.threads)
    preset = PRESETS[options.preset]
    seq_len, batch_size = options.seq_len or preset.seq_len, options.batch_size or preset.batch_size
    settings = {
        "scheme": TRIAL_SCHEME,
        "preset": options.preset,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "lr": options.lr or preset.lr,
        "tokens": options.tokens,
        "held_out": options.held_out,
        "eval_points": options.eval_points,
        "dtype": describe_device(device)["dtype"],
    }
    per_group = [_group_settings(group) for group in groups]
    datas = [(data, group, own) for group, own in zip(groups, per_group, strict=True) for data in group.datas]
    order = data_names(options.data)
    datas.sort(key=lambda item: order.index(item[0].name))  # the command line's order
    seeds = list(range(options.first_seed, options.first_seed + options.seeds))
    fingerprints = [data.fingerprint for data, _, _ in datas]
    experiment = "exp-" + fingerprint("experiment", settings, per_group, fingerprints, seeds)[:12]
    records, trained = [], 0
    for seed in seeds:
        for data, group, own in datas:
            trial = "trial-" + fingerprint("trial", {**settings, **own}, data.fingerprint, seed)[:16]
            try:
                record = find_trial(options.ledger_dir, trial)
            except LedgerError as error:  # a damaged record of this very trial: nothing of it can be trusted
                raise LedgerError(f"{error}; delete that file to train {data.name} seed {seed} again") from None
            if record is not None:
                progress(f"{data.name} seed {seed}: done before ({record['date']}), read from the ledger")
            else:
                plan = TrialPlan(
                    data, seed, options.tokens, preset, seq_len, batch_size, settings["lr"], options.eval_points,
                    options.workers,
                )  # fmt: skip
                progress(f"{data.name} seed {seed}: training {plan.steps:,} steps of {batch_size} x {seq_len} tokens")
                measured = run_trial(plan, group.vocab, group.sets, device, progress)
                record = _record(options, experiment, trial, data, seed, plan, group, device, measured)
                write_record(options.ledger_dir, record)
                trained += 1
            records.append(record)
    weights = weights_of(options, groups)
    verdict = verdict_lines(records, weights)
    write_json_atomic(
        AblationFolder(options.out).summary,
        {
            "experiment": experiment,
            "trials": [r["trial"] for r in records],
            "verdict": verdict,
            "weights": weights,
            "settings": {**settings, "tokenizers": {group.name: own for group, own in zip(groups, per_group)}},
        },
    )
    return AblationResult(experiment, records, verdict, trained)


def _record(options, experiment, trial, data, seed, plan, group, device, measured) -> dict:
    described = describe_device(device)
    wall_hours = measured["wall_s"] / 3600
    if described["kind"] == "cuda":
        compute = {"gpu_hours": wall_hours}
    else:
        compute = {"core_hours": wall_hours * described["threads"]}
    if options.target_tokens:
        target_tokens, basis = options.target_tokens, "target tokens: --target-tokens"
    else:
        target_tokens, basis = data.full_input()
    projection = project(
        trial_params=measured["compute_params"],
        tokens_per_s=measured["tokens_per_s"] or 0.0,
        target_params=options.target_params,
        target_tokens=target_tokens,
        note=basis,
    )
    return {
        "experiment": experiment,
        "trial": trial,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "prep_version": __version__,
        "data": data.describe(),
        "model": {
            "preset": options.preset,
            **plan.preset.describe(),
            "seq_len": plan.seq_len,
            "batch_size": plan.batch_size,
            "lr": plan.lr,
            "params": measured["params"],
            "output": measured["output"],
            "vocab": group.vocab.describe(),
        },
        "device": described["device"],
        "dtype": described["dtype"],
        "host": os.uname().nodename,
        "seed": seed,
        "eval_sets": {s.name: s.describe() for s in group.sets},
        **{key: measured[key] for key in measured if key not in ("params", "compute_params", "output")},
        **compute,
        "projection": projection,
    }
