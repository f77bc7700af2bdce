"""README's snippets run as written (issue 48: a user copies them into a shell).

Each fenced block of README's quick start, the config reference, column_filter (and
docs/column_filter.md's), the classifier and the loader is taken from README itself, not
retyped here, and run from a folder that holds the repository's ``configs/`` and
``data/`` like a fresh clone: a snippet that names a file, a command or an option that
does not exist fails here, and what README says it prints or writes is checked against
what it did. The ablation block trains models, so it is marked ``slow``. Not run here:
``pip install`` and ``pytest`` (this is that run), the Common Crawl snapshot on S3 and
DCLM's classifier (downloads), the Ray cluster, and docs/ablate.md's example (two runs
of the user's and 5M tokens a trial); tests/test_commoncrawl_recipe.py runs README's
Common Crawl table. The last tests hold docs/stages.md to every option of every stage
and every link of README and its pages to a file and heading that exist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def blocks(section: str, language: str) -> list[str]:
    """The ``language`` code blocks under README's ``## section`` heading."""
    body = README.split(f"\n## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.S)


def page_blocks(page: str, language: str) -> list[str]:
    """The ``language`` code blocks of ``docs/<page>``, one of the pages README links to."""
    return re.findall(rf"```{language}\n(.*?)```", (REPO / "docs" / page).read_text(), flags=re.S)


def commands(block: str) -> list[list[str]]:
    """The shell commands of a block: continuation lines joined, ``&&`` chains parted,
    comments dropped, ``pip install`` left out (the test runs in the installed environment)."""
    argvs = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            argv, words = (words[: words.index("&&")], words[words.index("&&") + 1 :]) if "&&" in words else (words, [])
            argvs.append(argv)
    return [argv for argv in argvs if argv[:2] != ["pip", "install"]]


def run_prep(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    assert argv[0] == "prep", argv
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A folder laid out like a fresh clone, where the quick start's sample run was made."""
    folder = tmp_path_factory.mktemp("clone")
    for name in ("configs", "data"):
        (folder / name).symlink_to(REPO / name)
    quick_start = blocks("Install and run on the bundled sample", "bash")[0]
    for argv in commands(quick_start):
        run_prep(argv, folder)
    return folder


def test_the_quick_start_then_looking_at_the_run(clone):
    looks = [argv for block in blocks("Install and run on the bundled sample", "bash")[1:] for argv in commands(block)]
    assert [argv[1] for argv in looks] == ["report", "rejects", "show"]
    for argv in looks:
        done = run_prep(argv, clone)
        if argv[1] == "show":
            assert "DROPPED by stage 'dedup'" in done.stdout
        if argv[1] == "rejects":
            assert '"threshold"' in done.stdout
    assert (clone / "report.html").stat().st_size > 10_000


def test_the_run_folder_holds_what_readme_lists(clone):
    """README's table of what a run writes, against the quick start's run folder: every
    path it lists is there (for every source), the columns it names are in the files,
    and work/ is gone once the run completed."""
    run = clone / "out" / "sample"
    section = README.split("What you get in `out/sample`:", 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    assert listed[-1] == "work/" and not (run / "work").exists()
    for path in listed[:-1]:
        for source in ("code", "math", "web"):
            assert list(run.glob(path.replace("<source>", source).rstrip("/"))), path
    endings = (".bin", ".idx", ".json", ".docs.parquet")  # shards, sidecar, per-document table
    for source in ("code", "math", "web"):
        files = [f.name for f in (run / "tokens" / source).iterdir()]
        assert {ending for ending in endings for name in files if name.endswith(ending)} == set(endings)
    docs = pq.read_schema(next((run / "docs" / "web").glob("*.parquet"))).names
    assert {"id", "text", "source", "lang", "n_tokens"} <= set(docs)
    signals = ("gq_", "gr_", "c4_", "fw_", "code_")
    assert {prefix for prefix in signals for name in docs if name.startswith(prefix)} == set(signals)
    ledger = pq.read_schema(next((run / "rejects" / "web").glob("*.parquet"))).names
    assert {"stage", "reason", "file", "line", "detail"} <= set(ledger)
    manifest = json.loads((run / "manifest.json").read_text())
    assert {"config", "inputs", "versions", "stages", "warnings", "balance"} <= set(manifest)
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"]
    cost = json.loads((run / "cost.json").read_text())
    assert {"cpu_seconds", "core_hours_per_billion_output_tokens", "wall_seconds", "run_wall_seconds"} <= set(cost)
    assert {p.name for p in (run / ".prep").iterdir()} >= {"run.json", "lock"}
    assert (run / "stats" / "cost").is_dir() and (run / "stats" / "duplicate-ids.json").is_file()


def test_the_loader_snippet(clone):
    pytest.importorskip("torch")
    (snippet,) = blocks("Loading tokens for training", "python")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shown = snippet + "\nimport json; print(json.dumps([sorted(batch), sorted(state)]))\n"  # what its comments name
    done = subprocess.run([sys.executable, "-c", shown], cwd=clone, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    batch_keys, state_keys = json.loads(done.stdout)
    named = re.findall(r"\b(input_ids|labels|position_ids|cu_seqlens|max_seqlen)\b", snippet.split("each batch:")[1])
    assert len(named) == 5 and set(named) <= set(batch_keys)
    assert {"dataset", "samples", "seed"} <= set(state_keys)  # counters and the dataset's fingerprint
    assert (clone / "out" / "sample" / "tokens" / ".loader_cache").is_dir()  # where README's table says


def test_training_a_classifier_on_the_sample_and_scoring_with_it(clone):
    """The math-page finder trains as README says (its held-out AUC printed) and the
    classify config README gives scores the sample's web pages with it."""
    section = "Judging quality with a classifier"
    (train,) = [block for block in blocks(section, "bash") if "classifier train" in block]
    for argv in commands(train):
        done = run_prep(argv, clone)
    printed = re.search(r"accuracy (\d\.\d+), AUC (\d\.\d+) of P\(math\)", done.stdout + done.stderr)
    assert (round(float(printed[1]), 2), round(float(printed[2]), 2)) == (0.98, 0.99)  # README's figures
    # `prep classifier eval MODEL.bin LABELED.jsonl`, on documents labeled as README says
    labeled = [{"text": f"Let $x^{i} = {i}$. Then the theorem holds.", "label": "math"} for i in range(3)]
    labeled += [{"text": f"Buy our product number {i} today, free shipping.", "label": "web"} for i in range(3)]
    (clone / "labeled.jsonl").write_text("".join(json.dumps(row) + "\n" for row in labeled))
    evaluated = run_prep(["prep", "classifier", "eval", "out/math.bin", "labeled.jsonl"], clone)
    assert "6 documents, accuracy" in evaluated.stdout and "skipped" not in evaluated.stderr
    (config,) = [block for block in blocks(section, "toml") if 'name = "math"' in block]
    (clone / "math-pages.toml").write_text(config)
    run_prep(["prep", "run", "math-pages.toml", "--out", "out/math-pages", "-q"], clone)
    scored = run_prep(["prep", "rejects", "out/math-pages", "--reason", "classify:math", "--limit", "1"], clone)
    assert '"threshold": 0.5' in scored.stdout  # each drop with its score
    kept = pq.read_table(list((clone / "out" / "math-pages" / "docs" / "web").glob("*.parquet")))
    assert min(kept.column("math_score").to_pylist()) >= 0.5
    scored = pq.read_table(clone / "out" / "math-pages" / "rejects", filters=[("stage", "=", "classify")])
    assert (kept.num_rows, scored.num_rows) == (2, 444)  # README: keeps 2 of the 446 pages


@pytest.mark.slow
def test_the_ablation_snippet(clone):
    pytest.importorskip("torch")
    (block,) = blocks("Proving a data choice", "bash")
    for argv in commands(block):
        if argv[1] != "run":
            done = run_prep(argv, clone)
    assert "seed spread" in done.stdout


def test_the_config_reference_is_a_valid_config(tmp_path):
    """The config reference's example loads as written: every source a stage names is defined."""
    from pipeline.engine.config import load_config

    (block,) = blocks("Config reference", "toml")
    for folder in ("web", "code"):
        (tmp_path / "data" / folder).mkdir(parents=True)
        (tmp_path / "data" / folder / "a.jsonl.gz").write_bytes(b"")
    (tmp_path / "config.toml").write_text(block)
    config = load_config(tmp_path / "config.toml")
    assert set(config.sources) == {"web", "code"}


SIGNALS = [  # RedPajama-V2's signal columns, as a JSON lines input carries them
    {"id": "good", "rps_doc_word_count": 120, "rps_lines_start_with_bulletpoint_sum": 1, "ccnet_nlines": 10},
    {"id": "duplicate", "is_duplicate": True, "rps_doc_word_count": 120},
    {"id": "short", "rps_doc_word_count": 12},
    {"id": "no-curly-count", "rps_doc_word_count": 120, "rps_doc_curly_bracket": None},
    {"id": "no-word-count"},  # missing = "keep": a rule it cannot decide keeps it
    {"id": "all-bullets", "rps_doc_word_count": 120, "rps_lines_start_with_bulletpoint_sum": 10, "ccnet_nlines": 10},
    {"id": "few-sentences", "rps_doc_word_count": 120, "rps_doc_num_sentences": 3},
]
FLAGS = {"is_duplicate": False, "rps_doc_curly_bracket": 0, "rps_doc_lorem_ipsum": 0, "rps_doc_ldnoobw_words": 0}


@pytest.mark.parametrize(
    "block, dropped",
    [
        (
            blocks("Filtering on shipped signals", "toml")[0],
            {"duplicate": "duplicate", "short": "gopher_word_count", "no-curly-count": "c4_curly"},
        ),
        (
            page_blocks("column_filter.md", "toml")[0],
            {"duplicate": "duplicate", "short": "gopher_word_count", "no-curly-count": "c4_curly",
             "all-bullets": "gopher_bullets", "few-sentences": "c4_page"},
        ),
    ],
    ids=["README", "docs/column_filter.md"],
)  # fmt: skip
def test_the_column_filter_stage_as_written(tmp_path, block, dropped):
    """README's and docs/column_filter.md's column_filter stage, under a source of documents
    carrying the signals it names, drops what its rules say and keeps what they cannot decide."""
    rows = [{"text": f"document {row['id']}", **FLAGS, "rps_doc_num_sentences": 9, **row} for row in SIGNALS]
    (tmp_path / "signals.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "config.toml").write_text('[sources.web]\npaths = ["signals.jsonl"]\n\n' + block)
    run_prep(["prep", "run", "config.toml", "--out", "out", "-q"], tmp_path)
    ledger = pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    assert {row["id"]: row["reason"] for row in ledger} == {i: f"column_filter:{rule}" for i, rule in dropped.items()}
    kept = pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist()
    assert sorted(kept) == sorted({row["id"] for row in SIGNALS} - set(dropped))


def test_docs_stages_names_every_option_of_every_stage():
    """docs/stages.md promises every option: each stage's row names each field of its
    Options (as `name` or as a `[[stages.name]]` table), but for the quality stage's
    published thresholds, which it names by family and stages/quality/rules.py lists."""
    import dataclasses

    from pipeline.engine import stage_registry

    page = (REPO / "docs" / "stages.md").read_text()
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([a-z_]+)` \|.*$", page, flags=re.M)}

    def named(stage: str, option: str) -> bool:
        row = rows.get(stage, "")
        threshold = stage == "quality" and option.startswith(("gopher_", "c4_", "fineweb_", "code_", "math_"))
        return threshold or f"`{option}`" in row or f"`[[stages.{option}]]`" in row

    shipped = {  # not the toy stages other tests in this process register
        name: stage for name, stage in stage_registry.registry().items() if stage.__module__.startswith("stages.")
    }
    assert {"quality", "dedup", "tokenize"} <= set(shipped)
    missing = {
        name: [f.name for f in dataclasses.fields(stage.Options) if not named(name, f.name)]
        for name, stage in shipped.items()
    }
    assert {name: options for name, options in missing.items() if options} == {}


def test_every_link_of_readme_and_its_pages_leads_somewhere():
    """A relative link in README, docs/*.md or examples/*/README.md names a file of the
    repository, from the page's own folder (docs/cluster.md's link to the Slurm example
    was written from the root), and a link to a heading names a heading of that page."""
    pages = [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "examples").glob("*/README.md")),
    ]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in headings(linked.read_text()):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def headings(page: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, spaces to '-', punctuation dropped."""
    titles = re.findall(r"^#+ (.+)$", page, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}
