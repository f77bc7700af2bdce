"""`prep report`: SVG charts, the numbers behind them, the page on a real run, and Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_mix import make_run
from test_mix import tokenized_run as make_tokenized_run
from test_run import SAMPLE_CONFIG

import pipeline.report.html as report_html
from pipeline.commands.report import report
from pipeline.engine.run import run_pipeline
from pipeline.formats.documents import LEDGER_SCHEMA
from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.layout import Layout
from pipeline.mix.build import plan_mixture
from pipeline.mix.output import write_mix
from pipeline.report import ReportError, collect, ledger, lengths, render_report, scores, svg, write_report
from pipeline.report.mixture import read_mixture

SVG_NS = "{http://www.w3.org/2000/svg}"
NASTY = "a <b>&\"quoted\"</b> 'label'"


def parse_svg(markup: str) -> ET.Element:
    root = ET.fromstring(markup)
    assert root.tag == f"{SVG_NS}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG_NS}text")]


# --- SVG helpers -------------------------------------------------------------------------


def test_hbars_is_valid_svg_and_escapes_labels():
    markup = svg.hbars([NASTY, "plain"], {"kept": [3, 1], NASTY: [2, 0]}, title=NASTY)
    root = parse_svg(markup)
    assert "<b>" not in markup
    assert NASTY in texts(root)  # the label survives, escaped, and parses back intact
    assert root.find(f"{SVG_NS}title").text == NASTY
    assert "5" in texts(root) and "1" in texts(root)  # totals at the bar ends
    # Two series stacked: the first row's bars are 3:2 in width.
    widths = [float(r.get("width")) for r in root.iter(f"{SVG_NS}rect") if r.find(f"{SVG_NS}title") is not None]
    assert widths[0] / widths[1] == pytest.approx(1.5, rel=1e-2)


def test_histogram_stacked_area_and_lines_are_valid_svg():
    edges = 10.0 ** np.arange(0, 4.1, 0.5)
    counts = np.arange(len(edges) - 1)
    root = parse_svg(svg.histogram(edges, {NASTY: counts, "after": counts // 2}, "h <1>", "x & y"))
    assert {"1", "10", "100", "1,000", "10,000"} <= set(texts(root))
    assert "x & y" in texts(root)
    x = np.linspace(0, 1000, 5)
    shares = {"web": np.full(5, 0.7), "<code>": np.full(5, 0.3)}
    root = parse_svg(svg.stacked_area(x, shares, "mix", "tokens", (0, 1000)))
    assert {"0%", "100%", "<code>"} <= set(texts(root))
    root = parse_svg(svg.lines(x, {"a": np.array([1, np.nan, 3, 4, 5.0]), "b": np.ones(5)}, "t", "x", "y"))
    polylines = list(root.iter(f"{SVG_NS}polyline"))
    assert len(polylines) == 2 and len(polylines[0].get("points").split()) == 4  # the NaN point is skipped


def test_number_formats_and_ticks():
    assert [svg.fmt(v) for v in (0, 7, 1234, 99999, 123456, 4.5e9, 0.25)] == [
        "0",
        "7",
        "1,234",
        "99,999",
        "123k",
        "4.5B",
        "0.25",
    ]
    assert svg.nice_ticks(87) == [0, 20, 40, 60, 80, 100]
    assert svg.nice_ticks(1.0) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])


# --- the numbers -------------------------------------------------------------------------


def test_log_counts_bins_by_tenths_of_a_decade():
    counts = lengths.log_counts(np.array([0, 1, 9, 10, 12, 999, 1000, 10**12]))
    assert counts[0] == 2  # 0 is counted as 1
    assert counts[9] == 1 and counts[10] == 2 and counts[29] == 1 and counts[30] == 1
    assert counts[-1] == 1 and counts.sum() == 8
    edges, (trimmed,) = lengths.trim(lengths.log_counts(np.array([10, 100])))
    assert edges[0] == pytest.approx(10) and edges[-1] == pytest.approx(10**2.1) and trimmed.sum() == 2


def test_char_lengths_sample_each_files_first_rows(tmp_path):
    files = []
    for k, sizes in enumerate(([5] * 30 + [500] * 30, [50] * 10)):
        files.append(tmp_path / f"{k}.parquet")
        pq.write_table(pa.table({"text": ["x" * n for n in sizes] + [None]}), files[-1], row_group_size=8)
    full = lengths.char_lengths(files, 1.0)
    assert (full.rows_seen, full.rows_total, full.counts.sum(), full.sampled) == (72, 72, 70, False)
    half = lengths.char_lengths(files, lengths.sample_fraction(72, cap=36))
    assert (half.rows_seen, half.rows_total, half.sampled) == (37, 72, True)  # ceil(61 / 2) + ceil(11 / 2)
    assert half.counts[6] == 30 and half.counts[16] == 6 and half.counts[26] == 1  # 5, 50, 500 characters


def test_survivor_and_cluster_buckets():
    assert ledger.survivor('{"survivor": "doc-7", "survivor_source": "web", "similarity": 0.9}') == ("web", "doc-7")
    assert ledger.survivor('{"survivor": "doc-7", "similarity": 0.9}') == ("", "doc-7")  # an older prep's
    assert ledger.survivor("kept doc-7") == ("", "kept doc-7")
    labels, counts = ledger.size_buckets(Counter({2: 5, 3: 1, 6: 2, 8: 1, 12: 4}))
    assert labels == ["2", "3", "4", "5–8", "9–16"]
    assert counts == [5, 1, 0, 3, 4]


@pytest.mark.parametrize("partitions", [1, 2])
def test_clusters_whose_survivors_share_an_id_across_sources_are_counted_apart(tmp_path, partitions):
    """Two sources each with an id "1" surviving its own duplicate: the report drew "1
    clusters" of 3 documents (it keyed survivors by id), and with one decide task the
    manifest said 1 too. Both count 2 now, by survivor document (source and id)."""
    texts = {"web": "the river bank in the morning " * 8, "code": "import numpy as np and print " * 8}
    for source, text in texts.items():
        rows = [{"id": "1", "text": text}, {"id": "2", "text": text}, {"id": "3", "text": f"only {source} " * 9}]
        (tmp_path / f"{source}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    sources = "".join(f'[sources.{s}]\npaths = ["{s}.jsonl"]\n' for s in texts)
    (tmp_path / "run.toml").write_text(f'{sources}[[stages]]\nname = "dedup"\npartitions = {partitions}\n')
    manifest = run_pipeline(tmp_path / "run.toml", tmp_path / "out", workers=1, quiet=True)
    assert manifest["stages"]["dedup"]["counters"]["dedup.clusters"] == 2
    rows = pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    named = {(row["source"], json.loads(row["detail"])["survivor_source"]) for row in rows}
    assert named == {("web", "web"), ("code", "code")}
    page = write_report(tmp_path / "out", tmp_path / "report.html").read_text()
    assert "2 clusters of documents sharing one survivor" in page


def test_a_count_of_one_takes_the_singular(tmp_path):
    """The page said "1 clusters ... and the 1 removed duplicates" for one pair of copies."""
    rows = [
        {"id": "a", "text": "the river bank in the morning " * 8},
        {"id": "b", "text": "the river bank in the morning " * 8},
    ]
    (tmp_path / "web.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "run.toml").write_text('[sources.web]\npaths = ["web.jsonl"]\n[[stages]]\nname = "dedup"\n')
    run_pipeline(tmp_path / "run.toml", tmp_path / "out", workers=1, quiet=True)
    page = write_report(tmp_path / "out", tmp_path / "report.html").read_text()
    caption = "1 cluster of documents sharing one survivor; a cluster&#x27;s size counts the survivor and the 1 removed"
    assert f"{caption} duplicate." in page
    assert "2 documents in, 1 kept, 1 rejected" in page
    assert ledger.size_buckets(Counter({2: 1})) == (["2"], [1])


# --- a fabricated run with the other stages' outputs ---------------------------------------


def _stage(rejected: dict, source: str, n_in: int, counters: dict | None = None) -> dict:
    dropped = sum(rejected.values())
    return {
        "input": n_in,
        "output": n_in - dropped,
        "rejected": rejected,
        "changed": 0,
        "counters": counters or {},
        "by_source": {source: {"input": n_in, "output": n_in - dropped, "rejected": dropped}},
    }


def ledger_table(rows: list[dict]) -> pa.Table:
    full = [
        {
            "id": None,
            "source": "web",
            "stage": None,
            "reason": None,
            "file": "in.jsonl",
            "line": i + 1,
            "detail": None,
            "text": None,
            "raw": None,
            **row,
        }
        for i, row in enumerate(rows)
    ]
    return pa.Table.from_pylist(full, schema=LEDGER_SCHEMA)


@pytest.fixture
def staged_run(tmp_path) -> Path:
    """A run folder shaped like one with langid, pii and dedup: lang column, pii.* counters,
    duplicate rows naming survivors (as JSON and as text), and a hostile rejected text."""
    run = tmp_path / "run"
    stages = {
        "langid": _stage({"lang:fr": 1}, "web", 10),
        "pii": _stage({}, "web", 9, {"pii.email": 5, "pii.phone": 2}),
        "dedup": _stage({"near-duplicate": 2, "exact-duplicate": 1}, "web", 9),
    }
    manifest = {
        "config_file": "staged.toml",
        "balance": {"input": 10, "output": 6, "rejected": 4},
        "sources": {
            "web": {
                "input": 10,
                "output": 6,
                "rejected": 4,
                "rejected_by": {"dedup:exact-duplicate": 1, "dedup:near-duplicate": 2, "langid:lang:fr": 1},
            }
        },
        "stages": stages,
        "bad_input": {},
        "warnings": [],
    }
    (run / "docs" / "web").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(manifest))
    pq.write_table(
        pa.table(
            {
                "id": [f"d{i}" for i in range(6)],
                "text": ["x" * 50 * (i + 1) for i in range(6)],
                "source": ["web"] * 6,
                "lang": ["en"] * 5 + [None],
            }
        ),
        run / "docs" / "web" / "0.parquet",
    )
    (run / "rejects" / "web").mkdir(parents=True)
    hostile = "<script>alert(1)</script>" + "é" * 400
    pq.write_table(
        ledger_table(
            [
                {
                    "id": "r1",
                    "stage": "dedup",
                    "reason": "near-duplicate",
                    "detail": '{"survivor": "d0", "similarity": 0.8}',
                    "text": "dup one",
                },
                {
                    "id": "r2",
                    "stage": "dedup",
                    "reason": "exact-duplicate",
                    "detail": '{"survivor": "d0", "similarity": 1.0}',
                    "text": "dup two",
                },
                {"id": "r3", "stage": "dedup", "reason": "near-duplicate", "detail": "kept d1", "text": "dup three"},
                {"id": "r4", "stage": "langid", "reason": "lang:fr", "text": hostile},
            ]
        ),
        run / "rejects" / "web" / "0.s0.parquet",
    )
    return run


def sections_of(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<h2>(.*?)</h2>", page)]


def test_stage_sections_from_their_outputs(staged_run):
    page = render_report(staged_run)
    assert {"Languages", "Duplicate clusters", "PII replacements", "Rejected examples"} <= set(sections_of(page))
    assert "Tokens per source" not in sections_of(page) and "tokens (no tokens/ folder" in page
    assert "Classifier scores" not in sections_of(page) and "classifier scores (no <name>_score" in html.unescape(page)
    # Duplicate clusters: d0 heads a cluster of 3 (JSON details), d1 one of 2 (a text detail).
    duplicates = page.split('id="duplicates"')[1].split("</section>")[0]
    assert "2 clusters" in duplicates and "3 removed duplicates" in duplicates
    bars = parse_svg(re.search(r"<svg.*?</svg>", duplicates).group(0))
    # Both axes say what they count: the rows are sizes in documents, the bars clusters.
    assert texts(bars) == ["cluster size (documents)", "clusters of that size", "2", "1", "3", "1"]
    languages = parse_svg(re.search(r"<svg.*?</svg>", page.split('id="languages"')[1]).group(0))
    assert {"en", "(none)", "fr", "5"} <= set(texts(languages))
    pii = parse_svg(re.search(r"<svg.*?</svg>", page.split('id="pii"')[1]).group(0))
    assert texts(pii)[:4] == ["email", "5", "phone", "2"]
    # The hostile text is escaped and cut at 300 characters.
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    example = re.search(r"<pre>(&lt;script.*?)</pre>", page).group(1)
    assert len(html.unescape(example)) == ledger.EXAMPLE_CHARS + 1 and example.endswith("…")


def test_examples_are_deterministic_and_at_most_three_per_rule(tmp_path):
    path = tmp_path / "ledger.parquet"
    rows = [{"id": f"doc-{i}", "stage": "length", "reason": "too-short", "text": f"text {i}"} for i in range(50)]
    pq.write_table(ledger_table(rows), path, row_group_size=7)
    first = ledger.examples([path])
    assert list(first) == ["length:too-short"] and len(first["length:too-short"]) == 3
    shuffled = tmp_path / "shuffled.parquet"
    pq.write_table(ledger_table(rows[::-1]), shuffled, row_group_size=5)
    again = ledger.examples([shuffled])
    assert [e.id for e in again["length:too-short"]] == [e.id for e in first["length:too-short"]]
    assert all(e.text == f"text {e.id[4:]}" for e in first["length:too-short"])


# --- classifier scores: a fabricated run with a classify stage ------------------------------

CLASSIFY_CONFIG = {
    "name": "classify",
    "skip_sources": ["code"],
    "models": [
        {"name": "quality", "path": "q.bin", "label": "hq", "keep_top": 0.75},
        {"name": "lang", "path": "lid.ftz", "label": "en", "min_score": 0.3},
    ],
}


@pytest.fixture
def classified_run(tmp_path) -> dict:
    """A run shaped like one with classify (two models; code skipped, with null scores) and
    tokenize: float32 score columns in docs/ and the token shards, drops with their detail."""
    run = make_tokenized_run(tmp_path / "run")
    rng = np.random.default_rng(8)
    quality = rng.random(80).astype(np.float32)
    threshold = float(str(np.sort(quality)[20]))  # keep_top 0.75 keeps the best 60; the detail's shortest form
    kept, dropped = quality[quality >= np.float32(threshold)], quality[quality < np.float32(threshold)]
    lang = rng.uniform(0.3, 1.0, len(kept)).astype(np.float32)  # min_score 0.3 dropped none of web
    (run / "docs" / "web").mkdir(parents=True)
    (run / "docs" / "code").mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "id": [f"w{i}" for i in range(len(kept))],
                "text": ["kept"] * len(kept),
                "source": ["web"] * len(kept),
                "quality_score": kept,
                "lang_score": lang,
            }
        ),
        run / "docs" / "web" / "0.parquet",
        row_group_size=16,
    )
    nulls = pa.nulls(5, pa.float32())
    pq.write_table(
        pa.table(
            {"id": [f"c{i}" for i in range(5)], "text": ["code"] * 5, "quality_score": nulls, "lang_score": nulls}
        ),
        run / "docs" / "code" / "0.parquet",
    )
    detail = '{{"score": {}, "threshold": {}, "keep_top": 0.75}}'
    rows = [
        {"id": f"d{i}", "stage": "classify", "reason": "classify:quality", "detail": detail.format(score, threshold)}
        for i, score in enumerate(float(str(s)) for s in dropped)
    ]
    rows.append(
        {"id": "dup", "stage": "dedup", "reason": "exact-duplicate", "detail": '{"survivor": "w0", "score": 0}'}
    )
    rows.append({"id": "short", "stage": "length", "reason": "too-short"})
    (run / "rejects" / "web").mkdir(parents=True)
    pq.write_table(ledger_table(rows), run / "rejects" / "web" / "0.s0.parquet", row_group_size=8)
    manifest = {
        "config_file": "classify.toml",
        "config": {"stages": [CLASSIFY_CONFIG, {"name": "dedup"}]},
        "balance": {"input": 87, "output": 65, "rejected": 22},
        "sources": {
            "code": {"input": 5, "output": 5, "rejected": 0, "rejected_by": {}},
            "web": {
                "input": 82,
                "output": 60,
                "rejected": 22,
                "rejected_by": {"classify:classify:quality": 20, "dedup:exact-duplicate": 1, "length:too-short": 1},
            },
        },
        "stages": {"classify": _stage({"classify:quality": 20}, "web", 80), "dedup": _stage({}, "web", 60)},
        "bad_input": {},
        "warnings": [],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return {"run": run, "kept": kept, "dropped": dropped, "lang": lang, "threshold": threshold}


def test_classifier_scores_kept_against_dropped_with_the_threshold(classified_run, tmp_path):
    run, threshold = classified_run["run"], classified_run["threshold"]
    found = scores.score_histograms(Layout(run), json.loads((run / "manifest.json").read_text()))
    assert list(found) == [("quality", "web"), ("lang", "web")]  # config order; code's scores are null
    quality, lang = found[("quality", "web")], found[("lang", "web")]
    assert np.array_equal(quality.kept, np.histogram(classified_run["kept"], scores.EDGES)[0])
    assert np.array_equal(quality.dropped, np.histogram(classified_run["dropped"], scores.EDGES)[0])
    assert quality.thresholds == {threshold}  # from the ledger detail
    assert np.array_equal(lang.kept, np.histogram(classified_run["lang"], scores.EDGES)[0]) and not lang.dropped.any()
    assert lang.thresholds == {0.3}  # nothing dropped: the configured min_score

    # A mixture ordered by the classifier's score: --curriculum quality finds quality_score
    # (web's first shard is empty, without the column).
    description, order = plan_mixture([run], {}, curriculum="quality")
    write_mix(tmp_path / "mix", description, order)
    page = render_report(run, tmp_path / "mix")
    assert "Classifier scores" in sections_of(page) and "Curriculum" in sections_of(page)
    assert "mean key (quality_score)" in page
    section = page.split('id="classify"')[1].split("</section>")[0]
    assert "<td>quality</td><td>web</td><td>60</td><td>20</td>" in section
    assert "<td>lang</td><td>web</td><td>60</td><td>0</td><td>0.3</td>" in section and "<td>code</td>" not in section
    assert re.findall(r"<h3>(.*?)</h3>", section) == ["quality_score in web", "lang_score in web"]
    charts = [parse_svg(m) for m in re.findall(r"<svg.*?</svg>", section, flags=re.S)]
    assert [c.find(f"{SVG_NS}title").text for c in charts] == [
        "quality_score in web: 60 in the output, 20 dropped",
        "lang_score in web: 60 in the output, 0 dropped",
    ]
    (line,) = [x for x in charts[0].iter(f"{SVG_NS}line") if x.get("stroke-dasharray")]
    label = f"threshold {threshold:g}"
    assert line.find(f"{SVG_NS}title").text == label and label in texts(charts[0])
    assert {"0", "0.2", "0.4", "0.6", "0.8", "1"} <= set(texts(charts[0]))  # a linear score axis
    tips = [p.find(f"{SVG_NS}title").text for p in charts[0].iter(f"{SVG_NS}path")]
    assert tips == ["in the output: 60 documents", "dropped (classify:quality): 20 documents"]
    # The threshold sits where the kept scores start.
    x_at = float(line.get("x1"))
    plot = svg._Plot((0.0, 1.0), 1)
    assert x_at == pytest.approx(plot.x(threshold), abs=0.1)


def test_classifier_models_per_source_and_from_reasons():
    manifest = {
        "sources": {"web": {}, "code": {}},
        "config": {
            "stages": [{**CLASSIFY_CONFIG, "per_source": {"code": {"models": [{"name": "lang", "min_score": 0.6}]}}}]
        },
        "stages": {"classify": {"rejected": {"classify:old": 3, "too-short": 1}}},
    }
    assert scores.classifiers(manifest) == {
        "quality": {"web": None},
        "lang": {"web": 0.3, "code": 0.6},
        "old": {},
    }
    assert scores.bin_counts(np.array([0.0, 0.019, 0.02, 0.5, 1.0, np.nan])).tolist() == [2, 1] + [0] * 23 + [1] + [
        0
    ] * 23 + [1]


# --- a real run and a mixture --------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    """The bundled sample run (token shards fabricated into it if its config does not
    tokenize), a length-curriculum mixture of its tokens, and the report of both."""
    root = tmp_path_factory.mktemp("report")
    run = root / "run"
    manifest = run_pipeline(SAMPLE_CONFIG, run, workers=1, quiet=True)
    if not collect.token_folders(Layout(run)):
        rng = np.random.default_rng(5)
        make_run(
            run,
            {
                "web": [rng.integers(50, 1500, 1200), rng.integers(50, 1500, 800)],
                "code": [rng.integers(100, 2000, 600)],
                "math": [rng.integers(30, 400, 1500)],
            },
        )
    description, order = plan_mixture([run], {"code": 0.25, "math": 0.1}, curriculum="length")
    write_mix(root / "mix", description, order)
    out = write_report(run, root / "report.html", root / "mix")
    return {
        "run": run,
        "mix": root / "mix",
        "manifest": manifest,
        "description": description,
        "page": out.read_text(),
        "path": out,
    }


MAIN_SECTIONS = [
    "Balance",
    "Drops per stage",
    "Drops per rule",
    "Document length",
    "Tokens per source",
    "Mixture composition",
    "Curriculum",
    "CPU time per stage",
    "Rejected examples",
]


def optional_sections(run: Path, manifest: dict) -> dict[str, bool]:
    """Whether the run has the data of each optional section (the sample config may grow stages)."""
    reasons = {r for stage in manifest["stages"].values() for r in stage["rejected"]}
    counters = {c for stage in manifest["stages"].values() for c in stage["counters"]}
    docs = list((run / "docs").rglob("*.parquet"))
    return {
        "Languages": any("lang" in pq.read_schema(p).names for p in docs),
        "Duplicate clusters": bool(reasons & set(ledger.DUPLICATE_REASONS)),
        "PII replacements": any(c.startswith("pii.") for c in counters),
    }


def test_report_of_a_real_run_and_mixture(sample_report):
    page, manifest = sample_report["page"], sample_report["manifest"]
    titles = sections_of(page)
    assert [t for t in titles if t in MAIN_SECTIONS] == MAIN_SECTIONS
    for title, present in optional_sections(sample_report["run"], manifest).items():
        assert (title in titles) == present, title
    # Self-contained: nothing loaded from elsewhere (rejected pages' text may quote URLs).
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", page) and "<script" not in page
    for svg_markup in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        parse_svg(svg_markup)
    b = manifest["balance"]
    assert f"<td>{b['input']:,}</td><td>{b['output']:,}</td><td>{b['rejected']:,}</td>" in page
    examples = page.split('id="examples"')[1].split("</section>")[0]
    # Each rule is folded (<details>, closed), its summary naming the rule and its count.
    folds = re.findall(r"<details>(.*?)</details>", examples, flags=re.S)
    assert folds and re.findall(r"<details[^>]*>", examples) == ["<details>"] * len(folds)  # none open
    rejected = Counter()
    for source in manifest["sources"].values():
        rejected.update(source["rejected_by"])
    summaries = {}
    for fold in folds:
        rule, count = re.match(r"<summary><b>(.*?)</b> · ([\d,]+) rejected, \d shown</summary>", fold).groups()
        summaries[html.unescape(rule)] = int(count.replace(",", ""))
        assert 1 <= fold.count('class="example"') <= ledger.EXAMPLES_PER_RULE
    assert summaries == {rule: n for rule, n in rejected.items() if n}
    for text in re.findall(r"<pre>(.*?)</pre>", examples, flags=re.S):
        assert len(html.unescape(text)) <= ledger.EXAMPLE_CHARS + 1
    total_tokens = sum(s["tokens_available"] for s in sample_report["description"]["sources"].values())
    assert f"{total_tokens:,} tokens in all" in page
    # Before (kept + rejected with text) and after (kept) length histograms.
    lengths_section = page.split('id="lengths"')[1].split("</section>")[0]
    assert "before (kept + rejected)" in lengths_section and "Tokens per document" in lengths_section


def test_drops_per_stage_are_in_pipeline_order(sample_report):
    # manifest.json's keys are sorted; its stage_order keeps the chain's order, which the chart follows.
    chain = ["normalize", "length", "langid", "quality", "pii", "dedup", "tokenize"]
    on_disk = json.loads((sample_report["run"] / "manifest.json").read_text())
    assert on_disk["stage_order"] == chain and list(on_disk["stages"]) == sorted(chain)
    chart = sample_report["page"].split('id="drops-stage"')[1].split("</section>")[0]
    labels = [t for t in texts(parse_svg(re.search(r"<svg.*?</svg>", chart, flags=re.S).group(0))) if t in chain]
    assert labels == chain


def test_stage_order_tolerates_an_old_or_edited_manifest():
    stages = {"dedup": {}, "length": {}, "quality": {}}
    assert collect.stage_order({"stages": stages}) == ["dedup", "length", "quality"]  # before stage_order
    edited = {"stages": stages, "stage_order": ["quality", "gone", "quality", "length"]}
    assert collect.stage_order(edited) == ["quality", "length", "dedup"]


def test_mixture_composition_matches_the_plan(sample_report):
    mix, description = read_mixture(sample_report["mix"]), sample_report["description"]
    assert len(mix.centres) == 200 and mix.tokens == description["tokens"]
    stacked = sum(mix.shares.values())
    assert np.allclose(stacked, 1.0)
    for name, source in description["sources"].items():
        # Bins are equal in tokens, so a source's mean share is exactly its share of the mixture.
        assert mix.shares[name].mean() == pytest.approx(source["tokens_used"] / description["tokens"], abs=1e-9)
        # One phase, curriculum length: each source's documents get longer along training
        # (a bin where none of a source's documents starts has no mean: long code files span many).
        means = mix.key_means[name][np.isfinite(mix.key_means[name])]
        assert len(means) > 5 and np.all(np.diff(means) >= 0), name


def test_mixture_chart_draws_each_phases_target_shares(sample_report, tmp_path):
    description, order = plan_mixture([sample_report["run"]], {}, phase_weights="code=0.1,math=0.05;code=0.4,math=0.3")
    write_mix(tmp_path / "mix", description, order)
    mix = read_mixture(tmp_path / "mix")
    (a0, a1, first), (b0, b1, second) = mix.targets
    assert (first, second) == tuple(phase["weights"] for phase in description["phases"])
    # The second phase starts at the token where its first document does: what came before.
    phase_one = slice(0, description["phases"][1]["start"])
    names = list(description["sources"])
    lengths = {n: np.concatenate([IndexedShard(p).sizes for p in description["sources"][n]["shards"]]) for n in names}
    source = np.load(tmp_path / "mix" / "order_source.npy")[phase_one]
    document = np.load(tmp_path / "mix" / "order_document.npy")[phase_one]
    before = sum(int(lengths[names[s]][d]) for s, d in zip(source, document))
    assert (a0, a1, b0, b1) == (0, before, before, mix.tokens) and 0 < before < mix.tokens
    root = parse_svg(svg.stacked_area(mix.centres, mix.shares, "mix", "tokens", (0, mix.tokens), mix.targets))
    dashed = [line for line in root.iter(f"{SVG_NS}line") if line.get("stroke-dasharray")]
    assert len(dashed) == 2 * (len(names) - 1)  # a boundary between each two bands, per phase
    plot = svg._Plot((0, mix.tokens), 1.0)
    assert float(dashed[0].get("y1")) == pytest.approx(plot.y(first[names[0]]), abs=0.1)
    assert f"target share of {names[0]}: {first[names[0]]:.1%}" in dashed[0].find(f"{SVG_NS}title").text
    assert 'id="mixture"' in sample_report["page"] and "dashed lines are the target shares" in sample_report["page"]
    edited = json.loads((tmp_path / "mix" / "mix.json").read_text())
    edited["phases"][1]["start"] = 10**30  # past the order, and past int64: an empty last phase, not a traceback
    (tmp_path / "mix" / "mix.json").write_text(json.dumps(edited))
    assert [span[:2] for span in read_mixture(tmp_path / "mix").targets] == [(0, mix.tokens), (mix.tokens, mix.tokens)]


def test_cli_writes_the_page_and_names_a_wrong_folder(sample_report, tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.html"
    result = runner.invoke(report, [str(sample_report["run"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Mixture composition" not in out.read_text() and "mixture (give a MIX_DIR" in out.read_text()
    result = runner.invoke(report, [str(tmp_path), "--out", str(out)])
    assert result.exit_code != 0 and "no manifest.json" in result.output
    result = runner.invoke(report, [str(sample_report["run"]), str(tmp_path), "--out", str(out)])
    assert result.exit_code != 0 and "not a mixture folder" in result.output
    with pytest.raises(ReportError):
        render_report(tmp_path)


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("tokens", -5, "tokens is -5"),
        ("tokens", "5", "tokens is a string"),
        ("tokens", 10**30, "tokens is beyond 64 bits"),
        ("shard_documents", [-1], "sources.{source}.shard_documents[0] is -1"),
    ],
)
def test_a_mixtures_nonsense_count_is_one_line_naming_the_file_and_field(sample_report, tmp_path, field, value, said):
    """tokens: -5 drew a mixture of negative tokens; every reader of mix.json takes a count
    as ``prep estimate`` did (``records.COUNT``)."""
    mix = tmp_path / "mix"
    shutil.copytree(sample_report["mix"], mix)
    edited = json.loads((mix / "mix.json").read_text())
    source = next(iter(edited["sources"]))
    (edited if field == "tokens" else edited["sources"][source])[field] = value
    (mix / "mix.json").write_text(json.dumps(edited))
    result = CliRunner().invoke(report, [str(sample_report["run"]), str(mix), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and not (tmp_path / "r.html").exists()
    assert result.output == f"Error: {mix / 'mix.json'}: {said.format(source=source)}, expected a count\n"


@pytest.fixture
def stub_render(monkeypatch):
    """Rendering stubbed out: the tests that use this are about writing the page."""
    monkeypatch.setattr(report_html, "render_report", lambda run_dir, mix_dir=None: "<!DOCTYPE html><p>page</p>\n")


def invoke_report_writing_to(out: Path):
    # Any existing folder does for RUN_DIR: rendering is stubbed.
    return CliRunner().invoke(report, [str(Path(__file__).parent), "--out", str(out)])


def assert_one_line_error(result, message: str) -> None:
    """A ClickException (exit 1, one "Error: ..." line), not an escaped exception."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.output == f"Error: {message}\n"


def test_cli_says_in_one_line_why_the_page_cannot_be_written(tmp_path, stub_render):
    # Tests run as root, where a chmod'ed folder stays writable: a regular file where a folder
    # has to be fails the same way (an OSError from the same write), and is portable.
    (tmp_path / "file.txt").write_text("not a folder")
    out = tmp_path / "file.txt" / "report.html"
    assert_one_line_error(invoke_report_writing_to(out), f"cannot write {out}: {out.parent} is not a directory")
    out = tmp_path / "file.txt" / "sub" / "report.html"  # a parent that cannot be created
    assert_one_line_error(invoke_report_writing_to(out), f"cannot write {out}: Not a directory: {out.parent}")
    # --out an existing directory: click refuses it before anything runs...
    result = invoke_report_writing_to(tmp_path)
    assert result.exit_code == 2 and "is a directory" in result.output
    # ...and write_report itself names it too.
    with pytest.raises(ReportError, match=f"cannot write {re.escape(str(tmp_path))}: Is a directory"):
        write_report(tmp_path, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # no temporary left behind


def test_cli_says_in_one_line_that_the_folder_is_read_only(tmp_path, stub_render, monkeypatch):
    """What a non-root user gets from a read-only folder: the temporary beside the page
    cannot be created."""
    import tempfile

    def read_only(*args, dir=None, **kw):
        raise PermissionError(13, "Permission denied", str(Path(dir) / ".report.html.x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    out = tmp_path / "report.html"
    assert_one_line_error(invoke_report_writing_to(out), f"cannot write {out}: Permission denied")
    assert not out.exists()


def test_cli_says_in_one_line_which_file_of_the_run_it_cannot_read(tmp_path, monkeypatch):
    def unreadable(run_dir, mix_dir=None):
        raise PermissionError(13, "Permission denied", str(tmp_path / "manifest.json"))

    monkeypatch.setattr(report_html, "render_report", unreadable)
    out = tmp_path / "report.html"
    assert_one_line_error(invoke_report_writing_to(out), f"cannot read {tmp_path / 'manifest.json'}: Permission denied")
    assert not out.exists()


# --- a real browser --------------------------------------------------------------------------


def chromium() -> str | None:
    return next(
        (
            p
            for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
            if p and Path(p).exists()
        ),
        None,
    )


@pytest.mark.browser
def test_page_renders_in_headless_chromium_without_console_errors(sample_report, tmp_path):
    binary = chromium()
    if binary is None:
        if os.environ.get("CI"):  # .ci/run installs it: a skip there would hide a broken page
            pytest.fail("no chromium binary in CI (.ci/run installs the distribution's chromium package)")
        pytest.skip("no chromium binary (apt-get install chromium)")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    url = sample_report["path"].resolve().as_uri()
    dom = subprocess.run([binary, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Chromium logs every console message as "...:CONSOLE:<line>] ..." (errors too, at INFO);
    # the page has no script, so any console line at all is a fault.
    errors = [line for line in dom.stderr.splitlines() if "Uncaught" in line or ":CONSOLE" in line]
    assert not errors, errors
    for title in MAIN_SECTIONS:
        assert f"<h2>{title}</h2>" in dom.stdout
    assert dom.stdout.count("<svg") >= 9
    shot = tmp_path / "report.png"
    subprocess.run(
        [binary, *flags, "--hide-scrollbars", "--window-size=900,3000", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
