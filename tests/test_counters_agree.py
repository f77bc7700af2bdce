"""Every number a run reports agrees with every other: manifest, ledger, shards, report,
summary, ``prep rejects`` and ``prep shards inspect``.

The manifest once said ``dedup.exact_removed: 6`` for 3 ``exact-duplicate`` rows in the
ledger (finalize and each unit's filter both added it) and ``dedup.clusters: 5`` where
the report drew 3 (issue 48). Here real runs (``counters_runs``: every config in
``configs/`` that runs offline, on the bundled sample or the shared WARCs, and two chains
of the stages those leave out: url_filter, decontaminate cutting or dropping, classify by
``keep_top`` or ``min_score``, paragraph_dedup) are read against their ledgers: each
counter of removed documents equals the ledger's rows for its stage and reason, each
stage's input, output and rejections add up and chain from stage to stage per source,
the tokens are the shards', and the report, the summary and ``prep rejects`` print the
manifest's numbers. Each drop's detail names the value and the threshold that decided it.

Every counter must be named below, as a removal (with the ledger rows it equals) or as
something else (with what it counts): a new counter fails the test until it is, so a
removal counter cannot slip in unchecked.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA
from counters_runs import SHIPPED, filters_config, shipped_config
from test_classify import tiny_model  # noqa: F401 (a fixture)

from pipeline.commands.rejects import rejects as rejects_command
from pipeline.commands.shards import inspect_command
from pipeline.engine.config import load_config
from pipeline.engine.plan import stage_labels
from pipeline.engine.run import run_pipeline
from pipeline.engine.stage_registry import registry
from pipeline.engine.summary import print_summary
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
    r"extract\.charset_[a-z]+": "pages whose charset came from HTTP, <meta> or detection",
    r"extract\.(resiliparse|trafilatura)": "pages each extractor's text was taken from",
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


@pytest.fixture(scope="module", params=[*SHIPPED, "filters-cut", "filters-drop"])
def run(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param.removesuffix(".toml"))
    if request.param.startswith("filters"):
        config_path = filters_config(folder, request.getfixturevalue("tiny_model"), request.param.split("-")[1])
    else:
        if SHIPPED[request.param] == "warc" and SHARED_DATA is None:
            pytest.skip("../shared/data is not present")
        config_path = shipped_config(request.param, folder, SHARED_DATA)
    manifest = run_pipeline(config_path, folder / "out", workers=1, quiet=True)
    rejects = pq.read_table(folder / "out" / "rejects", columns=["source", "stage", "reason", "detail"]).to_pylist()
    ledger = Counter((r["stage"], r["reason"], r["source"]) for r in rejects)
    return {
        "config": load_config(config_path),
        "manifest": manifest,
        "ledger": ledger,
        "details": [(r["stage"], r["reason"], r["detail"]) for r in rejects],
        "out": folder / "out",
    }


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
    drawn = re.search(r"([\d,]+) clusters? of documents sharing one survivor", page)
    if "dedup" not in run["manifest"]["stages"]:
        assert not drawn
        return
    counters = run["manifest"]["stages"]["dedup"]["counters"]
    assert drawn, "the report has no duplicate clusters"
    assert int(drawn[1].replace(",", "")) == counters["dedup.clusters"] > 0


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _shard_tokens(out) -> tuple[int, int]:
    """Tokens and documents of the run's shards, as ``prep shards inspect --json`` says."""
    result = CliRunner().invoke(inspect_command, [str(out), "--json"])
    assert result.exit_code == 0, result.output
    shards = json.loads(result.output)
    shards = shards if isinstance(shards, list) else [shards]
    return sum(s["tokens"] for s in shards), sum(s["documents"] for s in shards)


def test_tokens_agree_from_manifest_to_shards_report_and_summary(run):
    manifest, out = run["manifest"], run["out"]
    tokens, documents = _shard_tokens(out)
    assert manifest["stages"]["tokenize"]["counters"]["tokens"] == tokens > 0
    assert documents == manifest["balance"]["output"]
    assert json.loads((out / "cost.json").read_text())["output_tokens"] == tokens
    page = write_report(out, out.parent / "report.html").read_text()
    assert _number(re.search(r"([\d,]+) tokens in all", page)[1]) == tokens
    summary = io.StringIO()
    print_summary(manifest, out, summary)
    assert _number(re.search(r"([\d,]+) tokens written", summary.getvalue())[1]) == tokens


def test_the_summary_prints_the_manifests_counts(run):
    manifest, summary = run["manifest"], io.StringIO()
    print_summary(manifest, run["out"], summary)
    text, balance = summary.getvalue(), manifest["balance"]
    done = f"done: {balance['input']:,} documents in, {balance['output']:,} kept, {balance['rejected']:,} rejected"
    assert done in text
    for name, source in manifest["sources"].items():
        line = rf"\n  {name} +in +{source['input']:,}  kept +{source['output']:,}  rejected +{source['rejected']:,}\n"
        assert re.search(line, text), name
    for label, stage in manifest["stages"].items():
        rejected = sum(stage["rejected"].values())
        line = rf"\n  stage {label} +{stage['input']:,} in +{rejected:,} rejected +{stage['changed']:,} changed"
        assert re.search(line, text), label


def test_the_reports_tables_are_the_manifests(run):
    """The balance table, each bar of drops per stage (per source), and each rule's count."""
    manifest, ledger = run["manifest"], run["ledger"]
    page = write_report(run["out"], run["out"].parent / "report.html").read_text()
    for name, counts in [*manifest["sources"].items(), ("all", manifest["balance"])]:
        cells = [name, *(f"{counts[key]:,}" for key in ("input", "output", "rejected"))]
        assert "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) in page, name
    section = re.search(r'<section id="drops-stage">(.*?)</section>', page, re.S)[1]
    drawn = {
        (html.unescape(label), html.unescape(source)): _number(value)
        for label, value, source in re.findall(r"<title>([^<:]+): ([\d,]+) \(([^)]+)\)</title>", section)
    }
    if len(manifest["sources"]) == 1:  # one series: the bars' tips name no source
        (source,) = manifest["sources"]
        found = re.findall(r"<rect[^>]*><title>([^<:]+): ([\d,]+)</title>", section)
        drawn = {(html.unescape(label), source): _number(value) for label, value in found}
    expected = {
        (label, source): counts["rejected"]
        for label, stage in manifest["stages"].items()
        for source, counts in stage["by_source"].items()
        if counts["rejected"]
    }
    expected.update({("read", s): _rows(ledger, "read", sources={s}) for s in manifest["sources"]})
    assert drawn == {key: n for key, n in expected.items() if n}
    for rule, count in re.findall(r"<summary><b>([^<]+)</b> · ([\d,]+) rejected", page):
        rule = html.unescape(rule)
        assert _number(count) == sum(s["rejected_by"].get(rule, 0) for s in manifest["sources"].values()), rule


def test_the_reports_classifier_table_counts_the_output_and_the_ledger(run):
    """Its first count is the scored documents in the output, so named: a partial copy that
    paragraph_dedup dropped after classify kept it is in neither column (it once read
    "kept": 209 of web's pages, where the manifest's classify had kept 218)."""
    if "classify" not in run["manifest"]["stages"]:
        return
    page = write_report(run["out"], run["out"].parent / "report.html").read_text()
    section = re.search(r'<section id="classify">(.*?)</section>', page, re.S)[1]
    assert "<th>in the output</th><th>dropped</th>" in section
    for source, counts in run["manifest"]["sources"].items():
        dropped = _rows(run["ledger"], "classify", sources={source})
        assert f"<td>tiny</td><td>{source}</td><td>{counts['output']:,}</td><td>{dropped:,}</td>" in section


def test_prep_rejects_lists_each_reasons_rows(run):
    """``prep rejects --stage S --reason R`` lists the ledger's rows of that rule, for the
    run's four largest rules (each listing reads the whole ledger)."""
    by_rule = Counter()
    for (stage, reason, _), n in run["ledger"].items():
        by_rule[(stage, reason)] += n
    for (stage, reason), n in by_rule.most_common(4):
        args = [str(run["out"]), "--stage", stage, "--reason", reason, "--limit", str(n + 1)]
        result = CliRunner().invoke(rejects_command, args)
        assert result.exit_code == 0, result.output
        assert len(result.output.splitlines()) == 1 + n, (stage, reason)  # a header, then one line a row


# Drops decided by no number: bad input, a listed host or word, an exact copy.
NO_THRESHOLD = {("read", None), ("url_filter", None), ("bad_words", None), ("dedup", "exact-duplicate")}


def test_each_drops_detail_names_its_value_and_threshold(run):
    """The README's promise: a drop's detail says the value and the threshold that decided."""
    missing = Counter()
    for stage, reason, detail in run["details"]:
        if (stage, None) in NO_THRESHOLD or (stage, reason) in NO_THRESHOLD:
            continue
        found = json.loads(detail) if detail and detail.startswith("{") else {}
        if "threshold" not in found or len(found) < 2:
            missing[(stage, reason)] += 1
    assert not missing, f"drops whose detail lacks its value or threshold: {dict(missing)}"
