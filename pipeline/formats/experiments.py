"""The experiments ledger of ``prep ablate``: one JSON record per trial, in a folder.

Why a file per trial and not one JSON lines file appended to: every write in prep is
atomic (temporary name, then rename), and an append is not; two ablations writing to one
ledger (a shared team folder) would also interleave their lines. A record is written once,
when its trial ends, and never changed; the ledger is the set of records in the folder,
read in date order. A record whose trial finished is also how an interrupted ablation knows
not to train it again (``find_trial``).

A record (``FORMAT``, ``VERSION``) holds: ``experiment`` (the id of the ``prep ablate``
call), ``trial`` (a key over everything that decides the trial's result: data
fingerprints, model, tokens, seed, evaluation sets), ``date``, ``prep_version``, ``data``
(name, path, kind, fingerprint, source shares, sample fraction, tokens), ``model``
(preset, shape, parameter count, vocabulary and whether it was remapped), ``device``,
``dtype``, ``seed``, ``tokens`` (trained), ``steps``, ``wall_s``, ``step_s``,
``tokens_per_s``, ``data_wait_share``, ``core_hours`` or ``gpu_hours``, ``train_curve``
(``[tokens, loss]`` pairs), ``eval`` (eval set name to ``[tokens, loss]`` pairs),
``final`` (eval set name to the last loss), ``health`` and ``projection``.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.formats.layout import Layout
from pipeline.formats.scratch import LOADER_CACHE
from pipeline.util.atomic import write_json_atomic
from pipeline.util.records import RecordError, check_shape, read_json

FORMAT = "prep-ablation-trial"
VERSION = 1
SUFFIX = ".trial.json"
LEDGER_DIR = "ledger"  # `prep ablate --out DIR` writes its records to DIR/ledger unless --ledger says otherwise

# The fields every record has; ``prep ablate --history`` and the report rely on them.
REQUIRED_FIELDS = (
    "experiment",
    "trial",
    "date",
    "prep_version",
    "data",
    "model",
    "device",
    "seed",
    "tokens",
    "wall_s",
    "step_s",
    "tokens_per_s",
    "data_wait_share",
    "train_curve",
    "eval",
    "final",
    "health",
    "projection",
)


class AblationFolder:
    """``prep ablate --out DIR``: its ledger (``ledger/``, unless ``--ledger`` names
    another), its verdict (``ablation.json``) and the loader's cache of its data."""

    SUMMARY = "ablation.json"

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)

    @property
    def ledger(self) -> Path:
        return self.out / LEDGER_DIR

    @property
    def summary(self) -> Path:
        return self.out / self.SUMMARY

    @property
    def loader_cache(self) -> Path:
        return self.out / LOADER_CACHE


class SearchFolder:
    """``prep mix search --out DIR``: the search's result (``search.json``, whose presence
    makes DIR a search), one folder per trial mixture (``trials/mix-<key>/``, the mixture
    and its ablation in ``ablation/``), the validation's mixtures (``validation/<name>/``,
    the validation's ablation in ``validation/``), and one ledger for every trial."""

    SUMMARY = "search.json"

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)

    @property
    def summary(self) -> Path:
        return self.out / self.SUMMARY

    @property
    def ledger(self) -> Path:
        return AblationFolder(self.out).ledger

    def trial(self, key: str) -> Path:
        """The folder of the trial mixture of ``key`` (a fingerprint of its shares)."""
        return self.out / "trials" / f"mix-{key}"

    @staticmethod
    def trial_ablation(trial: Path) -> Path:
        """Where a trial mixture's ablation writes (its ``--out``)."""
        return trial / "ablation"

    @property
    def validation(self) -> Path:
        """The validation's ablation folder; each of its mixtures is a folder in it."""
        return self.out / "validation"

    def validation_mixture(self, name: str) -> Path:
        return self.validation / name


class LedgerError(ValueError):
    """A ledger folder or record that cannot be read; the message names the file."""


def record_path(folder: str | os.PathLike, trial: str) -> Path:
    return Path(folder) / f"{trial}{SUFFIX}"


def write_record(folder: str | os.PathLike, record: dict) -> Path:
    """Write one trial's record atomically; the folder is made if needed."""
    missing = [name for name in REQUIRED_FIELDS if name not in record]
    if missing:
        raise ValueError(f"a trial record lacks {', '.join(missing)}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = record_path(folder, record["trial"])
    write_json_atomic(path, {"format": FORMAT, "version": VERSION, **record})
    return path


def read_record(path: Path) -> dict:
    try:
        record = read_json(path)  # refuses a FIFO named *.trial.json (reading one hung the report)
    except OSError as error:
        raise LedgerError(f"{path}: unreadable trial record ({error})") from None
    except RecordError as error:  # names the file: not UTF-8, not JSON, nested too deep
        raise LedgerError(f"{error} (an unreadable trial record)") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise LedgerError(f"{path}: not a prep ablation trial record")
    if record.get("version") != VERSION:
        raise LedgerError(f"{path}: trial record version {record.get('version')!r}, this prep reads {VERSION}")
    missing = [name for name in REQUIRED_FIELDS if name not in record]
    if missing:
        raise LedgerError(f"{path}: trial record lacks {', '.join(missing)}")
    try:  # what the ledger is sorted by (a date of another type ended the report in a TypeError)
        check_shape(record, {"date": str, "trial": str}, path)
    except RecordError as error:
        raise LedgerError(f"{error} (an unreadable trial record)") from None
    return record


def find_trial(folder: str | os.PathLike, trial: str) -> dict | None:
    """The record of a finished trial, or None if it was never finished here."""
    path = record_path(folder, trial)
    return read_record(path) if path.is_file() else None


def read_ledger(folder: str | os.PathLike) -> list[dict]:
    """Every record in ``folder``, oldest first; ``LedgerError`` if it is not a readable folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LedgerError(f"{folder}: no such ledger folder")
    records = [read_record(path) for path in sorted(folder.glob(f"*{SUFFIX}"))]
    return sorted(records, key=lambda record: (record["date"], record["trial"]))


def find_ledger(folder: Path) -> Path | None:
    """The ledger folder ``folder`` names: itself when it holds trial records, else its
    ``ledger/`` subfolder when that holds them (or exists in a folder that is no prep run:
    an ablation with no finished trial yet); None when it is no ledger."""
    folder = Path(folder)
    sub = AblationFolder(folder).ledger
    if any(folder.glob(f"*{SUFFIX}")):
        return folder
    if sub.is_dir() and (any(sub.glob(f"*{SUFFIX}")) or not Layout(folder).manifest.exists()):
        return sub
    return None
