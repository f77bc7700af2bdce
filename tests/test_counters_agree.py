"""Every number in a run's manifest agrees with the rejects ledger and with the report.

The manifest once said ``dedup.exact_removed: 6`` for 3 ``exact-duplicate`` rows in the
ledger (finalize and each unit's filter both added it) and ``dedup.clusters: 5`` where
the report drew 3 (issue 48). Here three real runs on the bundled sample (the README's
whole chain, ``configs/redpajama.toml``, which adds fix_text and paragraph_dedup, and a
chain of the stages those two leave out: url_filter, decontaminate cutting paragraphs,
classify keeping the best half) are read against their ledgers: each counter of removed documents equals the ledger's
rows for its stage and reason, each stage's input, output and rejections add up and
chain from stage to stage per source, and the report's clusters are the manifest's.

Every counter must be named below, as a removal (with the ledger rows it equals) or as
something else (with what it counts): a new counter fails the test until it is, so a
removal counter cannot slip in unchecked.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REPO, SAMPLE, SAMPLE_CONFIG
from test_classify import tiny_model  # noqa: F401 (a fixture)
from test_configs import with_paths

from pipeline.engine.config import load_config
from pipeline.engine.plan import stage_labels
from pipeline.engine.run import run_pipeline
from pipeline.engine.stage_registry import registry
from pipeline.formats.documents import rule_name
from pipeline.report import write_report
from stages.paragraph_dedup.stage import REASON as PARTIAL_COPY
from stages.tokenize import EMPTY as EMPTY_TOKENS

# Counters of removed documents -> the ledger's (stage, reason) rows they count. A
# ``{reason}`` is the counter's own group; ``quality.<rule set>.<rule>`` counts only the
# sources that stage judges with that rule set.
REMOVALS = {
    r"dedup\.exact_removed": ("dedup", "exact-duplicate"),
    r"dedup\.near_removed": ("dedup", "near-duplicate"),
    r"quality\.(?P<rule_set>web|code|math)\.(?P<reason>.+)": ("quality", "{reason}"),
    r"paragraph_dedup\.partial_copies": ("paragraph_dedup", PARTIAL_COPY),
    r"tokenize\.empty": ("tokenize", EMPTY_TOKENS),
}

# Counters checked against another counter: removals are (kept, of) -> ledger rows of
# the stage's reason are ``of`` less ``kept``.
KEPT_OF = {"classify.tiny.keep_top_kept": ("classify.tiny.keep_top_documents", ("classify", "classify:tiny"))}

# Counters that count no removed document, and what they count instead.
NOT_REMOVALS = {
    r"pii\.[a-z_]+": "placeholders written into kept documents",
    r"fix_text\.flagged(_mojibake|_html)?": "documents the fast check handed to ftfy; all kept",
    r"tokens": "tokens written",
    r"dedup\.documents": "documents into dedup (equal to the stage's input, checked below)",
    r"dedup\.clusters": "survivors with a removed duplicate (the report's clusters, checked below)",
    r"dedup\.components": "components of the LSH candidate graph, removals or not",
    r"dedup\.cc_steps": "connected-components iterations",
    r"paragraph_dedup\.documents": "documents into paragraph_dedup (equal to its input, checked below)",
    r"paragraph_dedup\.documents_changed": "documents kept with units cut (equal to its changed, checked below)",
    r"paragraph_dedup\.(units|chars)_removed": "paragraphs and characters cut from kept documents",
    r"url_filter\.(missing|malformed)_url": "URLs absent or unreadable; kept (the default), else a missing-url row",
    r"url_filter\.allowlisted": "documents an allowlist kept whatever the other rules say",
    r"decontaminate\.cut_documents": "documents kept with matching paragraphs cut (equal to its changed)",
    r"decontaminate\.cut_paragraphs": "paragraphs cut from kept documents",
    r"classify\.[a-z_]+\.keep_top_documents": "documents the keep_top fraction is of (equal to its input)",
    r"classify\.[a-z_]+\.keep_top_kept": "documents keep_top kept (the input less the ledger's rows, checked below)",
}

# Counters that restate a stage's own numbers.
SAME_AS_STAGE = {
    "dedup.documents": "input",
    "paragraph_dedup.documents": "input",
    "paragraph_dedup.documents_changed": "changed",
    "decontaminate.cut_documents": "changed",
    "classify.tiny.keep_top_documents": "input",
}

SAMPLE_SOURCES = {"web": ["web/*.json*.gz"], "code": ["code/*.jsonl.gz"], "math": ["math/*.jsonl.gz"]}


def _config(name: str, folder: Path) -> Path:
    if name == "sample.toml":
        return SAMPLE_CONFIG
    config = folder / name
    config.write_text(with_paths((REPO / "configs" / name).read_text(), SAMPLE_SOURCES, SAMPLE))
    return config


def _filters_config(folder: Path, model: Path) -> Path:
    """The sample's web pages through url_filter (the c4 pages' ``subdomain`` as URL, their
    domain blocked; the other pages have none), decontaminate (an eval set
    of the pages' own paragraphs: whole pages that are one such paragraph go, others are
    cut) and classify keeping the best half by a tiny model."""
    pages = [json.loads(line) for path in sorted(SAMPLE.glob("web/*.json*.gz")) for line in gzip.open(path, "rt")]
    (folder / "block.txt").write_text("theguardian.com\n")
    paragraphs = [p for page in pages[::7] for p in page["text"].split("\n") if len(p.split()) >= 20][:40]
    with gzip.open(folder / "eval.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text in paragraphs)
    config = folder / "filters.toml"
    config.write_text(
        f"""
[sources.web]
paths = ["{SAMPLE}/web/*.json*.gz"]

[[stages]]
name = "url_filter"
url_field = "subdomain"
blocklists = ["{folder}/block.txt"]

[[stages]]
name = "decontaminate"
mode = "cut"
[[stages.benchmarks]]
name = "own"
path = "{folder}/eval.jsonl.gz"
fields = ["text"]

[[stages]]
name = "classify"
[[stages.models]]
name = "tiny"
path = "{model}"
label = "prose"
keep_top = 0.5

[[stages]]
name = "tokenize"
tokenizer = "cl100k_base"
"""
    )
    return config


@pytest.fixture(scope="module", params=["sample.toml", "redpajama.toml", "filters"])
def run(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param.removesuffix(".toml"))
    if request.param == "filters":
        config_path = _filters_config(folder, request.getfixturevalue("tiny_model"))
    else:
        config_path = _config(request.param, folder)
    manifest = run_pipeline(config_path, folder / "out", workers=1, quiet=True)
    rejects = pq.read_table(folder / "out" / "rejects", columns=["source", "stage", "reason"]).to_pylist()
    ledger = Counter((r["stage"], r["reason"], r["source"]) for r in rejects)
    return {"config": load_config(config_path), "manifest": manifest, "ledger": ledger, "out": folder / "out"}


def _rows(ledger: Counter, stage: str, reason: str | None = None, sources=None) -> int:
    return sum(
        n
        for (s, r, src), n in ledger.items()
        if s == stage and (reason is None or r == reason) and (sources is None or src in sources)
    )


def _kind(counter: str) -> tuple[str, re.Match] | None:
    for table in (REMOVALS, NOT_REMOVALS):
        for pattern in table:
            if match := re.fullmatch(pattern, counter):
                return ("removal" if table is REMOVALS else "other"), match
    return None


def _quality_sources(config, rule_set: str) -> set[str]:
    entry = next(s for s in config.stages if s.name == "quality")
    options = registry()["quality"].Options
    return {
        source
        for source in config.sources
        if options(**{**entry.options, **entry.per_source.get(source, {})}).rule_set(source) == rule_set
    }


def test_every_counter_is_named_as_a_removal_or_not(run):
    """A counter nobody classified fails here: say whether it counts removed documents."""
    unnamed = [
        f"{label}: {counter}"
        for label, stage in run["manifest"]["stages"].items()
        for counter in stage["counters"]
        if _kind(counter) is None
    ]
    assert not unnamed, f"add these to REMOVALS (with their ledger reason) or NOT_REMOVALS: {unnamed}"


def test_removal_counters_equal_the_ledger(run):
    manifest, ledger, config = run["manifest"], run["ledger"], run["config"]
    checked = 0
    for label, stage in manifest["stages"].items():
        removals = 0
        for counter, value in stage["counters"].items():
            kind, match = _kind(counter) or (None, None)
            if kind != "removal":
                continue
            ledger_stage, reason = REMOVALS[match.re.pattern]
            reason = reason.format(**match.groupdict())
            sources = _quality_sources(config, match["rule_set"]) if "rule_set" in match.groupdict() else None
            assert value == _rows(ledger, ledger_stage, reason, sources), (counter, value)
            removals += value
            checked += 1
        if any((_kind(c) or ("",))[0] == "removal" for c in stage["counters"]):
            # Together a stage's removal counters cover every row it put in the ledger.
            assert removals == _rows(ledger, label), label
        for counter, key in SAME_AS_STAGE.items():
            if counter in stage["counters"]:
                assert stage["counters"][counter] == stage[key], counter
    for counter, (of, (ledger_stage, reason)) in KEPT_OF.items():
        counters = manifest["stages"].get(ledger_stage, {}).get("counters", {})
        if counter in counters:
            assert counters[of] - counters[counter] == _rows(ledger, ledger_stage, reason) > 0, counter
            checked += 1
    # dedup's two and tokenize's, or classify's kept: the check cannot pass on nothing
    assert checked >= (1 if "classify" in manifest["stages"] else 3)


def test_each_stage_balances_against_the_ledger(run):
    manifest, ledger = run["manifest"], run["ledger"]
    for label, stage in manifest["stages"].items():
        assert stage["input"] == stage["output"] + sum(stage["rejected"].values()), label
        by_reason = Counter()
        for (s, r, _), n in ledger.items():
            if s == label:
                by_reason[r] += n
        assert stage["rejected"] == dict(by_reason), label
        for source, counts in stage["by_source"].items():
            assert counts["input"] == counts["output"] + counts["rejected"], (label, source)
            assert counts["rejected"] == _rows(ledger, label, sources={source}), (label, source)
    for source, counts in manifest["sources"].items():
        by_rule = Counter()
        for (s, r, src), n in ledger.items():
            if src == source:
                by_rule[rule_name(s, r)] += n
        assert counts["rejected_by"] == dict(by_rule), source
        assert counts["rejected"] == sum(by_rule.values()), source
    balance = manifest["balance"]
    assert balance["rejected"] == sum(ledger.values())
    assert balance["output"] == pq.read_table(run["out"] / "docs", columns=["id"]).num_rows


def test_stages_chain_per_source(run):
    """Per source, each stage takes what the stage before it kept: read's bad input aside,
    the first stage's input is the source's, the last stage's output what the run kept."""
    manifest, ledger, config = run["manifest"], run["ledger"], run["config"]
    for source, counts in manifest["sources"].items():
        flowing = counts["input"] - _rows(ledger, "read", sources={source})
        for entry, label in zip(config.stages, stage_labels(config)):
            if not entry.applies_to(source):
                continue
            tally = manifest["stages"][label]["by_source"].get(source, {"input": 0, "output": 0})
            assert tally["input"] == flowing, (source, label)
            flowing = tally["output"]
        assert flowing == counts["output"], source


def test_the_report_draws_the_manifests_clusters(run):
    page = write_report(run["out"], run["out"].parent / "report.html").read_text()
    drawn = re.search(r"([\d,]+) clusters of documents sharing one survivor", page)
    if "dedup" not in run["manifest"]["stages"]:
        assert not drawn
        return
    counters = run["manifest"]["stages"]["dedup"]["counters"]
    assert drawn, "the report has no duplicate clusters"
    assert int(drawn[1].replace(",", "")) == counters["dedup.clusters"] > 0
