"""The run's manifest: config, inputs, versions, and counts that must balance.

Every input document ends exactly once in the output or in the rejects ledger, so
``input == output + rejected`` overall, per source and per stage; ``build_manifest``
checks that and refuses to write a manifest that does not add up. Input records that
are no documents at all (a WARC's requests, metadata, redirects) are outside the
balance: ``skipped`` counts them by kind. The manifest holds
no timestamps, so an interrupted and resumed run writes the same bytes as a clean one.
"""

from __future__ import annotations

import json
import os
import platform
from collections import Counter, defaultdict
from collections.abc import Iterable
from importlib import metadata

import orjson

from pipeline import __version__
from pipeline.engine.config import Config
from pipeline.formats.documents import rule_name
from pipeline.util.atomic import atomic_path

VERSIONED_PACKAGES = ("pyarrow", "numpy", "numba", "orjson", "tiktoken", "sentencepiece", "datasketch")


class BalanceError(RuntimeError):
    """Counts that do not reconcile: a bug, never a property of the input."""


def package_versions() -> dict[str, str]:
    versions = {"prep": __version__, "python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def build_manifest(
    config: Config, labels: list[str], unit_stats: list[dict], global_stats: dict[str, dict], sampled: bool = False
) -> dict:
    """Add up the units' stats (every segment) into the manifest; its ``inputs``, one
    entry a file, are the run's ``InputLog``, which ``write_manifest`` streams in.
    ``sampled``: a ``--sample`` run's, whose few documents may all pass a stage."""
    last_segment = max(s["segment"] for s in unit_stats) if unit_stats else 0
    sources: dict[str, Counter] = defaultdict(Counter)
    by_reason: dict[str, Counter] = defaultdict(Counter)
    stages: dict[str, dict] = {}
    bad_input: Counter[str] = Counter()
    skipped: Counter[str] = Counter()  # input records that are no documents (``pipeline.readers.warc``)
    read_warnings: set[str] = set()  # the readers' (a RedPajama-V2 component never produced)
    for stats in unit_stats:
        source = sources[stats["source"]]
        if stats["segment"] == 0:
            source["input"] += stats["input"]
            read_warnings.update(stats.get("warnings", []))
            skipped.update(stats.get("skipped", {}))
        if stats["segment"] == last_segment:
            source["output"] += stats["output"]
        source["rejected"] += stats["rejected"]
        bad_input.update(stats["bad_input"])
        by_reason[stats["source"]].update(stats["bad_input"])
        for label, tally in stats["stages"].items():
            stage = stages.setdefault(
                label,
                {"input": 0, "output": 0, "rejected": Counter(), "changed": 0, "counters": Counter(), "by_source": {}},
            )
            per_source = stage["by_source"].setdefault(stats["source"], {"input": 0, "output": 0, "rejected": 0})
            for key in ("input", "output"):
                stage[key] += tally[key]
                per_source[key] += tally[key]
            stage["rejected"].update(tally["rejected"])
            per_source["rejected"] += sum(tally["rejected"].values())
            stage["changed"] += tally["changed"]
            stage["counters"].update(tally["counters"])
            by_reason[stats["source"]].update({rule_name(label, r): n for r, n in tally["rejected"].items()})
    for label, counters in global_stats.items():
        stage = stages.setdefault(
            label,
            {"input": 0, "output": 0, "rejected": Counter(), "changed": 0, "counters": Counter(), "by_source": {}},
        )
        _check_counted_once(label, counters, stage["counters"])
        stage["counters"].update(counters)
    balance = {key: sum(s[key] for s in sources.values()) for key in ("input", "output", "rejected")}
    _check_balance(balance, sources, stages)
    ordered_stages = {label: _plain(stages[label]) for label in labels if label in stages}
    return {
        "prep_version": __version__,
        "config_file": str(config.path),
        "config": config.raw,
        "versions": package_versions(),
        "balance": balance,
        "sources": {
            name: {
                **{k: sources[name][k] for k in ("input", "output", "rejected")},
                "rejected_by": dict(sorted(by_reason[name].items())),
            }
            for name in sorted(sources)
        },
        "stages": ordered_stages,
        # The file's keys are sorted (equal runs, equal bytes), so the chain's order is a list.
        "stage_order": list(ordered_stages),
        "bad_input": dict(sorted(bad_input.items())),
        "skipped": dict(sorted(skipped.items())),
        "warnings": _warnings(config, labels, ordered_stages, sampled) + sorted(read_warnings),
    }


def write_manifest(path: str | os.PathLike, manifest: dict, inputs: Iterable[dict]) -> None:
    """Write the manifest as ``write_json`` would with ``inputs`` (every file read, from
    ``InputLog.files``) under its key, streamed: at a million files the list alone was
    hundreds of MB in the driver."""
    text = json.dumps({**manifest, "inputs": []}, indent=2, sort_keys=True)
    head, _, tail = text.partition('\n  "inputs": []')  # a top-level key: the only one so indented
    entries = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(f'{head}\n  "inputs": ['.encode())
        for entry in inputs:
            item = orjson.dumps(entry, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).replace(b"\n", b"\n    ")
            f.write((b",\n    " if entries else b"\n    ") + item)
            entries += 1
        closing = "\n  ]" if entries else "]"
        f.write(f"{closing}{tail}\n".encode())


def _plain(stage: dict) -> dict:
    return {
        "input": stage["input"],
        "output": stage["output"],
        "rejected": dict(sorted(stage["rejected"].items())),
        "changed": stage["changed"],
        "counters": dict(sorted(stage["counters"].items())),
        "by_source": dict(sorted(stage["by_source"].items())),
    }


def _check_counted_once(label: str, whole_run: dict, per_unit: Counter) -> None:
    """A global stage's counter comes from its whole-run phases or from its units' filter,
    never both: added from both, each removed duplicate was counted twice (issue 48)."""
    both = sorted(set(whole_run) & set(per_unit))
    if both:
        raise BalanceError(f"stage {label}: counters {both} came from both its whole-run phases and its units")


def _check_balance(balance: dict, sources: dict, stages: dict) -> None:
    problems = []
    if balance["input"] != balance["output"] + balance["rejected"]:
        problems.append(f"run: {balance}")
    for name, counts in sources.items():
        if counts["input"] != counts["output"] + counts["rejected"]:
            problems.append(f"source {name}: {dict(counts)}")
    for label, stage in stages.items():
        if stage["input"] != stage["output"] + sum(stage["rejected"].values()):
            problems.append(
                f"stage {label}: input {stage['input']}, output {stage['output']}, rejected {dict(stage['rejected'])}"
            )
    if problems:
        raise BalanceError("counts do not reconcile (a bug in prep, please report it): " + "; ".join(problems))


def _warnings(config: Config, labels: list[str], stages: dict, sampled: bool) -> list[str]:
    """Stages that did nothing: the typo that silently filters nothing costs users days.
    On a sample a stage that kept and changed all of a few dozen documents is no sign
    of one (normalize changes 20 of the bundled sample's 1,426), so that is not warned of."""
    warnings = []
    for label in labels:
        stage = stages.get(label)
        if stage is None or stage["input"] == 0:
            warnings.append(f"stage {label!r} saw no documents (check its sources = [...] and the stages before it)")
        elif not sampled and not stage["rejected"] and not stage["changed"] and not any(stage["counters"].values()):
            warnings.append(
                f"stage {label!r} kept every document and changed none of {stage['input']:,}: check its options"
            )
    return warnings
