"""The whole of ``prep mix search`` short of printing: sample, train, fit, propose, validate.

The result is also written to ``OUT/search.json`` (atomically) for ``prep report`` and
for a reader who wants the numbers; the trials themselves live in ``OUT/ledger``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.ablate.evalsets import check_names
from pipeline.ablate.evaltexts import file_texts, training_inputs
from pipeline.ablate.groups import framing_tokens, load_data_tokenizer
from pipeline.formats.experiments import SearchFolder
from pipeline.mix.inventory import Inventory, take_inventory
from pipeline.mix.plan import resolve_weights
from pipeline.mixsearch.fit import MODELS, Objective
from pipeline.mixsearch.propose import command_weights, mix_command, propose, trusted
from pipeline.mixsearch.sampling import BATCH, ROUNDS, make_space, sample
from pipeline.mixsearch.trials import TrialSettings, run_trials, runs_key, validate
from pipeline.util.atomic import is_temporary, write_json_atomic
from pipeline.util.numbers import counted

MIN_TRIALS = 4  # fewer healthy trials than this leave a leave-one-out error meaningless
MAX_TRIALS = BATCH * ROUNDS  # the most mixtures one call of ``sample`` can return


class SearchError(ValueError):
    """A search that cannot go on as asked; the message says why."""


@dataclass
class SearchOptions:
    trials: int
    settings: TrialSettings
    target_tokens: int | None = None  # default: every token of the runs
    max_epochs: float = 4.0
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    prior: dict[str, float] | None = None
    concentration: float = 3.0
    candidates: int = 20_000
    seeds: int = 0  # validation seeds (0: no validation)
    baseline: dict[str, float] | None = None


@dataclass
class SearchResult:
    sources: list[str]
    shares: np.ndarray  # the trials' mixtures, one row each
    records: list[dict]
    trained: int  # trainings this call ran (search trials and validation), the rest read from the ledger
    eval_sets: list[str]
    measured: dict[str, np.ndarray]  # eval set -> each healthy trial's final loss
    objective: np.ndarray  # each healthy trial's weighted loss
    fits: list[Objective]
    chosen: Objective  # the fit of least leave-one-out error on the objective
    proposal: np.ndarray
    natural: np.ndarray
    predicted: dict[str, float]  # "proposal", "natural" (and "baseline") -> predicted objective
    command: str
    notes: list[str]
    verdict: list[str] | None = None


def run_search(options: SearchOptions, progress: Callable[[str], None] = print) -> SearchResult:
    settings = options.settings
    if not settings.eval_files:
        raise SearchError("give at least one --eval FILE: the search minimizes the loss on it")
    if not MIN_TRIALS <= options.trials <= MAX_TRIALS:
        raise SearchError(f"--trials {options.trials:,}: give {MIN_TRIALS} to {MAX_TRIALS:,} (at least enough to fit)")
    if not any(settings.weights.get(f"eval:{path.name}", 1.0) > 0 for path in settings.eval_files):
        raise SearchError("every --eval file has weight 0: give one a positive weight, the search minimizes their loss")
    check_names(settings.eval_files, [])
    check_out(settings.out)
    inventory = take_inventory(settings.runs)
    tokens = {name: source.tokens for name, source in inventory.sources.items()}
    target = options.target_tokens or sum(tokens.values())
    space = make_space(tokens, options.bounds, target, options.max_epochs, options.prior)
    shares = sample(space, options.trials, options.concentration, settings.seed)
    baseline = {}  # resolved before any training: a typo in it must not cost the trials
    if options.baseline is not None:
        named = resolve_weights(options.baseline, inventory, None, "--baseline")
        baseline["baseline"] = np.array([named[name] for name in space.sources])
    settings.target_tokens, settings.runs_key = target, runs_key(inventory)
    reference = load_data_tokenizer(inventory.tokenizer)
    for path in settings.eval_files:  # an unreadable eval file is named before the first trial, not after it
        file_texts(path, reference, framing_tokens(inventory.tokenizer), settings.eval_tokens)
    warnings = [*training_inputs(settings.eval_files, settings.runs), *_merged_sources(inventory)]
    for warning in warnings:  # said again at the end, with the result
        progress(warning)
    records, trained = run_trials(settings, space.sources, shares, progress)
    healthy = [i for i, record in enumerate(records) if record["health"]["status"] == "ok"]
    notes = [*warnings]
    notes += [f"source {name!r} has no tokens: left out of the search (share 0)" for name in space.empty]
    if len(healthy) < len(records):
        unhealthy = len(records) - len(healthy)
        were = "was" if unhealthy == 1 else "were"
        notes.append(f"{counted(unhealthy, 'trial')} {were} unhealthy and left out of the fit")
    if len(healthy) < MIN_TRIALS:
        raise SearchError(f"only {len(healthy)} healthy trials: too few to fit; see prep ablate --history")
    eval_sets = sorted(settings.weights)
    measured = {name: np.array([records[i]["final"][name] for i in healthy]) for name in eval_sets}
    fitted = shares[healthy]
    fits = [Objective(model, fitted, measured, settings.weights) for model in MODELS]
    chosen = min(fits, key=lambda fit: fit.error)
    proposal = propose(space, chosen.predict, fitted, options.candidates, settings.seed + 1)
    natural = space.natural
    mixtures = {"proposal": proposal, "natural": natural, **baseline}
    predicted = {label: float(chosen.predict(row)[0]) for label, row in mixtures.items()}
    if not space.allowed(natural):
        notes.append("the natural mixture is outside the bounds or --max-epochs: it is shown for reference only")
    box = trusted(space, fitted)
    for label in (label for label, row in mixtures.items() if not box.allowed(row)):
        notes.append(f"the {label} mixture lies outside the trials' range of shares: its prediction is extrapolated")
    notes += comparison_notes(predicted, chosen)
    weights = command_weights(space.sources, proposal)
    command = mix_command(settings.runs, inventory, weights, target, options.max_epochs)
    result = SearchResult(
        space.sources, shares, records, trained, eval_sets, measured, _objective(chosen, measured),
        fits, chosen, proposal, natural, predicted, command, notes,
    )  # fmt: skip
    if options.seeds:
        validated = {"proposed" if label == "proposal" else label: row for label, row in mixtures.items()}
        validation = validate(settings, space.sources, validated, options.seeds, progress)
        result.verdict, result.trained = validation.verdict, result.trained + validation.trained
    write_json_atomic(SearchFolder(settings.out).summary, describe(result, settings))
    return result


def _merged_sources(inventory: Inventory) -> list[str]:
    """A note per source name that two runs share: like ``prep mix``, the search pools their
    shards into one source, which a user who meant two sources must be told."""
    notes = []
    for name, source in inventory.sources.items():
        runs = list(dict.fromkeys(str(Path(prefix).parents[2]) for prefix in source.shards))  # RUN/tokens/NAME/shard
        if len(runs) > 1:
            notes.append(
                f"source {name!r} is in {len(runs)} runs ({', '.join(runs)}): searched as one source, as prep mix "
                "pools them; rename one in its run's config to search them apart"
            )
    return notes


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that is a file or a folder holding anything a search does not
    write: a search writes its trials and ledger there and replaces ``search.json``, so a
    user's folder would be filled (or a file of theirs overwritten). A folder with a
    search's entries only (one cut short before ``search.json``) is resumed."""
    folder = SearchFolder(out)
    if folder.out.exists() and not folder.out.is_dir():
        raise SearchError(f"--out {out}: a file, not a folder; give a new folder for the search")
    ours = {folder.summary.name, folder.ledger.name, folder.validation.name, folder.trial("key").parent.name}
    if folder.out.is_dir():
        foreign = sorted(p.name for p in folder.out.iterdir() if p.name not in ours and not is_temporary(p.name))
        if foreign:
            raise SearchError(
                f"--out {out}: a folder that is not a prep mix search (it holds {', '.join(foreign[:3])}); "
                "give a new folder, or a search's own to resume it"
            )


def _objective(fit: Objective, measured: dict[str, np.ndarray]) -> np.ndarray:
    return sum(fit.weights[name] * values for name, values in measured.items())


def comparison_notes(predicted: dict[str, float], chosen: Objective) -> list[str]:
    """A sentence per mixture compared with the proposal: whether its predicted gain exceeds
    the fit's cross-validated error. A gain within that error is one the regression cannot
    vouch for, so the search says so instead of presenting the proposal as better."""
    notes = []
    for label in (name for name in predicted if name != "proposal"):
        gain = predicted[label] - predicted["proposal"]
        head = f"the proposal's predicted gain over the {label} mixture ({gain:.4f})"
        error = f"the {chosen.name} fit's cross-validated error ({chosen.error:.4f})"
        if gain <= chosen.error:
            advice = "the proxy cannot tell them apart; add trials or validate with --seeds 3"
            notes.append(f"{head} is within {error}: {advice}")
        else:
            notes.append(f"{head} exceeds {error}")
    return notes


def describe(result: SearchResult, settings: TrialSettings) -> dict:
    def shares(row) -> dict[str, float]:
        return {name: round(float(share), 6) for name, share in zip(result.sources, row, strict=True)}

    return {
        "format": "prep-mix-search",
        "version": 1,
        "runs": [str(Path(run).resolve()) for run in settings.runs],
        "tokens": settings.tokens,
        "target_tokens": settings.target_tokens,
        "weights": result.chosen.weights,
        "trials": [
            {
                "trial": record["trial"],
                "mixture": record["data"]["name"],
                "shares": shares(row),
                "final": record["final"],
                "health": record["health"]["status"],
            }
            for row, record in zip(result.shares, result.records, strict=True)
        ],
        "fits": [
            {
                "model": fit.name,
                "loo_error": fit.error,
                "loo_errors": fit.errors,
                "loo_objective": [float(value) for value in fit.loo_objective],
            }
            for fit in result.fits
        ],
        "chosen": result.chosen.name,
        "proposal": shares(result.proposal),
        "natural": shares(result.natural),
        "predicted": result.predicted,
        "notes": result.notes,
        "verdict": result.verdict,
        "command": result.command,
    }
