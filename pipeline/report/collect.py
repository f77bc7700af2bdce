"""The report's numbers that come from small files: manifest.json, cost.json, sidecars.

Everything here is already counted by the run, so nothing reads documents. Each function
returns ``Bars`` (or None when the run has no such data) so the page can draw any of
them the same way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.layout import Layout
from pipeline.formats.token_shards import list_shards, read_sidecar, source_folders
from pipeline.util.numbers import counted
from pipeline.util.printable import printable_path
from pipeline.util.records import AMOUNT, COUNT, Each, Optional, RecordError, read_record

# Bad input is quarantined by the reader, before any stage; its ledger stage is "read".
READ_STAGE = "read"
BAD_INPUT_PREFIX = "bad-input:"
PII_PREFIX = "pii."
# langid's reasons: "lang:<code>" for a document in another language, "lang:low-score".
LANG_REASON_PREFIX = "lang:"
# Charts keep this many rules; the rest are summed into one "other" bar.
MAX_RULES = 30


@dataclass
class Bars:
    """Rows of a horizontal bar chart: a label per row, one or more stacked series."""

    labels: list[str]
    series: dict[str, list[float]]

    def total(self) -> float:
        return float(sum(sum(values) for values in self.series.values()))


# What the report reads of a run's manifest.json (``engine/manifest.py`` writes it) and its
# cost.json (``engine/cost.py``), checked where each file enters: a damaged one is one line
# naming the file and the key, not a TypeError or KeyError from inside a chart.
# Every number is a count or a measure (``records``' COUNT and AMOUNT, which bound them):
# a negative one (a manifest edited by hand) drew bars off the page's left edge, and one
# beyond 64 bits (JSON integers have no bound) ended the report in an ``OverflowError``.
COUNTS = {"input": COUNT, "output": COUNT, "rejected": COUNT}
MANIFEST = {
    "balance": COUNTS,
    "sources": Each({**COUNTS, "rejected_by": Each(COUNT)}),
    "stages": Each(
        {"rejected": Each(COUNT), "counters": Each(AMOUNT), "by_source": Each({"rejected": Optional(COUNT)})}
    ),
    "stage_order": Optional([str]),
    "config_file": Optional(str),
    "sample": Optional(AMOUNT),
    "config": Optional(dict),
}
COST = {
    "cpu_seconds": Optional(Each(AMOUNT)),
    "workers": Optional(COUNT),
    "projection": Optional((None, {"core_hours": AMOUNT, "note": str})),
}

# The longest source or stage name the report draws (a config allows 64 characters): every
# chart, table and caption repeats it, so a megabyte one made pages of several megabytes.
MAX_NAME_CHARS = 200


def load_json(path: Path, shape: object) -> dict | None:
    """The record in ``path`` checked against ``shape``, or None when there is no file.

    Source and stage names are also checked to be at most MAX_NAME_CHARS long."""
    if not path.exists():
        return None
    record = read_record(path, shape)
    for name in (*record.get("sources", ()), *record.get("stages", ())):
        if len(name) > MAX_NAME_CHARS:  # a config refuses such names: an edited manifest
            raise RecordError(f"{printable_path(path)}: a source or stage is named with {len(name):,} characters")
    return record


def balance(manifest: dict) -> Bars:
    """Per source: kept and rejected documents, stacked to the input count."""
    sources = manifest["sources"]
    names = list(sources)
    return Bars(
        names, {"kept": [sources[n]["output"] for n in names], "rejected": [sources[n]["rejected"] for n in names]}
    )


def stage_order(manifest: dict) -> list[str]:
    """The manifest's stages in pipeline order: its ``stage_order`` (``stages`` is written
    with sorted keys), then any stage it does not name (a manifest from before the list)."""
    stages = manifest["stages"]
    order = list(dict.fromkeys(s for s in manifest.get("stage_order", []) if s in stages))
    return order + [s for s in stages if s not in order]


def drops_per_stage(manifest: dict) -> Bars:
    """Documents each stage dropped, per source, in pipeline order (every configured stage,
    zeros included: a stage that dropped nothing is worth seeing)."""
    sources = list(manifest["sources"])
    labels = [READ_STAGE] + stage_order(manifest)
    series = {}
    for source in sources:
        rejected_by = manifest["sources"][source]["rejected_by"]
        read = sum(n for reason, n in rejected_by.items() if reason.startswith(BAD_INPUT_PREFIX))
        stages = [manifest["stages"][label]["by_source"].get(source, {}).get("rejected", 0) for label in labels[1:]]
        series[source] = [read, *stages]
    return Bars(labels, series)


def drops_per_rule(manifest: dict) -> Bars:
    """Documents per rule (``stage:reason``, or ``bad-input:kind``), per source, most first."""
    sources = list(manifest["sources"])
    totals: Counter[str] = Counter()
    for source in sources:
        totals.update(manifest["sources"][source]["rejected_by"])
    ranked = [rule for rule, _ in sorted(totals.items(), key=lambda item: (-item[1], item[0]))]
    kept, rest = ranked[:MAX_RULES], ranked[MAX_RULES:]
    labels = kept + ([f"other ({counted(len(rest), 'rule')})"] if rest else [])
    series = {}
    for source in sources:
        rejected_by = manifest["sources"][source]["rejected_by"]
        series[source] = [rejected_by.get(rule, 0) for rule in kept] + (
            [sum(rejected_by.get(r, 0) for r in rest)] if rest else []
        )
    return Bars(labels, series)


def pii_counts(manifest: dict) -> Bars | None:
    """Replacements per PII type, from the ``pii.<type>`` counters of every stage."""
    counts: Counter[str] = Counter()
    for stage in manifest["stages"].values():
        counts.update({k[len(PII_PREFIX) :]: v for k, v in stage["counters"].items() if k.startswith(PII_PREFIX)})
    if not counts:
        return None
    names = sorted(counts, key=lambda k: (-counts[k], k))
    return Bars(names, {"replacements": [counts[k] for k in names]})


def cpu_seconds(cost: dict | None) -> Bars | None:
    """CPU seconds per stage (``read+write`` included), most first; ``total`` left out."""
    if not cost or not cost.get("cpu_seconds"):
        return None
    stages = {k: v for k, v in cost["cpu_seconds"].items() if k != "total"}
    names = sorted(stages, key=lambda k: (-stages[k], k))
    return Bars(names, {"CPU seconds": [stages[k] for k in names]})


def token_folders(layout: Layout) -> dict[str, list[str]]:
    """Shard prefixes per source under ``tokens/``, sources in name order."""
    root = layout.tokens_folder
    if not root.is_dir():
        return {}
    folders = {p.name: list_shards(p) for p in source_folders(root)}
    return {name: shards for name, shards in folders.items() if shards}


def tokens_per_source(layout: Layout) -> Bars | None:
    """Tokens per source from the shards' sidecars (the index when a shard has none)."""
    folders = token_folders(layout)
    if not folders:
        return None
    totals = []
    for shards in folders.values():
        total = 0
        for prefix in shards:
            meta = read_sidecar(prefix)
            total += int(meta["tokens"]) if meta is not None else IndexedShard(prefix).num_tokens
        totals.append(total)
    return Bars(list(folders), {"tokens": totals})


def dropped_languages(manifest: dict) -> Counter:
    """Documents dropped per detected language (and for a low score), from stage reasons."""
    counts: Counter[str] = Counter()
    for stage in manifest["stages"].values():
        counts.update(
            {r[len(LANG_REASON_PREFIX) :]: n for r, n in stage["rejected"].items() if r.startswith(LANG_REASON_PREFIX)}
        )
    return counts
