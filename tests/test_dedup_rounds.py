"""Dedup's finalize as rounds of tasks: the same decisions as one process holding the
whole graph, a task per range and round, and a crash inside a round resumes."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import write_config
from test_dedup import _plant, _reference_components, load_texts, make_units, needs_data, run_stage
from test_run import tree_digest

from pipeline.engine.run import run_pipeline
from pipeline.formats import partfile
from pipeline.formats.unit_table import DocStore, UnitTable
from stages.dedup import Dedup, clusters, rounds
from stages.dedup.store import BAND_RECORD, BANDS
from stages.dedup.survivors import decide


def _near_duplicate_corpus(data: Path) -> tuple[list[str], list[str]]:
    """Real web pages, each with chains of edited copies (a copy of a copy: components
    that take several star steps), and real paraphrase pairs (MRPC), shuffled."""
    rng = random.Random(3)
    ids, texts = [], []
    for i, text in enumerate(load_texts("web/web_gold.jsonl.gz", min_words=60, limit=300)):
        ids.append(f"w{i:04d}")
        texts.append(text)
        for k in range(rng.choice([0, 1, 3])):
            text = _plant(rng, text)
            ids.append(f"w{i:04d}_{k}")
            texts.append(text)
    with gzip.open(data / "neardup" / "mrpc_pairs.jsonl.gz", "rt") as f:
        for n, line in zip(range(800), f):
            pair = json.loads(line)
            ids += [f"m{n:04d}a", f"m{n:04d}b"]
            texts += [pair["text_a"], pair["text_b"]]
    order = list(range(len(ids)))
    rng.shuffle(order)
    return [ids[i] for i in order], [texts[i] for i in order]


def _one_process_decisions(options: Dedup.Options, work: Path) -> dict[int, tuple]:
    """The decisions with the whole graph in memory: one union-find over every pair of
    documents that share a band key (an imported index's documents by its index, as the
    reduce sees them), each component a star on its smallest gid."""
    table = UnitTable.load(work, "dedup")
    keys, gids = [], []
    for p in range(options.partitions):
        if options.index_from:
            index = np.load(Path(options.index_from) / "reduce" / f"p{p:05d}.index.npy")
            keys.append(index["key"])
            gids.append(index["gid"])
        for u in np.flatnonzero(~table.locked):
            records = partfile.read(BANDS.path(work, table.sources[u], table.units[u]), p, BAND_RECORD)
            keys.append(records["key"])
            gids.append(records["row"].astype(np.int64) + table.starts[u])
    keys, gids = np.concatenate(keys), np.concatenate(gids)
    order = np.lexsort((gids, keys))
    keys, gids = keys[order], gids[order]
    same = keys[1:] == keys[:-1]
    root = _reference_components(table.total, zip(gids[:-1][same], gids[1:][same]))
    leaves = np.flatnonzero(root != np.arange(table.total))
    centres = np.unique(root[leaves])
    members, comp = np.concatenate([centres, leaves]), np.concatenate([centres, root[leaves]])
    columns = ["id", "quality", "exact", "sig"] + (["shingles"] if options.verify else [])
    rows = DocStore(table).gather(members, columns).add_column(0, "comp", pa.array(comp))
    rows = decide(
        rows.add_column(0, "gid", pa.array(members)),
        imported=table.imported,
        verify=options.verify,
        min_similarity=options.min_similarity,
        exact=options.exact,
    )
    return {r["gid"]: (r["reason"], r["survivor"], r["similarity"]) for r in rows.to_pylist()}


def _decisions(work: Path) -> dict[int, tuple]:
    found = {}
    for path in sorted((work / "decisions").iterdir()):
        with pa.memory_map(str(path)) as source:
            for r in pa.ipc.open_file(source).read_all().to_pylist():
                found[r["gid"]] = (r["reason"], r["survivor"], r["similarity"])
    return found


@needs_data
@pytest.mark.parametrize(
    "verify, exact, imported, entries_per_range, ranges",
    [
        (False, True, False, None, 1),  # a small graph: one node range a component step
        (True, True, False, 1, 4),  # a range per partition, as a large graph gets
        (False, False, False, 2_000, 2),
        (True, False, True, 1, 4),
        (False, True, True, None, 1),
    ],
)
def test_rounds_decide_as_one_process_holding_the_whole_graph(
    tmp_path, monkeypatch, verify, exact, imported, entries_per_range, ranges
):
    from test_dedup import DATA

    if entries_per_range:
        monkeypatch.setattr(clusters, "ENTRIES_PER_RANGE", entries_per_range)
    star_step, taken = clusters.star_step, set()

    def counting(inputs, parts, step, out, step_ranges):
        taken.add(step_ranges)
        return star_step(inputs, parts, step, out, step_ranges)

    monkeypatch.setattr(clusters, "star_step", counting)

    ids, texts = _near_duplicate_corpus(DATA)
    index_from = ""
    if imported:  # a third of the corpus indexed by an earlier run, the rest deduplicated against it
        cut = len(ids) // 3
        index_from = str(tmp_path / "earlier")
        earlier = Dedup.Options(partitions=4, verify=verify, exact=exact)
        run_stage(earlier, make_units(ids[:cut], texts[:cut], 2, batch_size=128), Path(index_from))
        ids, texts = ids[cut:], texts[cut:]
    options = Dedup.Options(partitions=4, verify=verify, exact=exact, index_from=index_from)
    work = tmp_path / "run"
    summary, removed = run_stage(options, make_units(ids, texts, 4, batch_size=128), work)
    expected = _one_process_decisions(options, work)
    assert _decisions(work) == expected
    assert len(expected) == len(removed) > 100
    assert summary["dedup.cc_steps"] >= 3  # chains need more than one star step
    assert summary["dedup.exact_removed"] + summary["dedup.near_removed"] == len(expected)
    assert (summary["dedup.exact_removed"] > 0) == exact
    assert min(expected) >= UnitTable.load(work, "dedup").imported  # an imported document is never removed
    assert taken == {ranges}


def _dedup_config(tmp_path: Path, data: Path) -> Path:
    web = f'"{data}/web/dolma_ccmain_20190717_00140.jsonl.gz", "{data}/web/datajuicer_redpajama_pile_samples.jsonl.gz"'
    repo = Path(__file__).resolve().parents[1]
    return write_config(
        tmp_path / "dedup.toml",
        f'[sources.web]\npaths = [{web}, "{repo}/data/sample/web/*.gz"]\n[[stages]]\nname = "dedup"\npartitions = 3\n',
    )


@pytest.mark.parametrize("round_kind", ["step", "members", "decide"])
def test_a_crash_inside_a_finalize_round_resumes_to_the_same_bytes(shared_data, tmp_path, monkeypatch, round_kind):
    monkeypatch.setattr(clusters, "ENTRIES_PER_RANGE", 1)  # a step task per partition, as a large graph gets
    config = _dedup_config(tmp_path, shared_data)
    clean = tmp_path / "clean"
    manifest = run_pipeline(config, clean, workers=1, quiet=True)
    tasks = [m.stem.split("-")[1:] for m in (clean / "stats" / "global-1").glob("finalize-*-*.json")]
    per_round = {k: sum(1 for r, _ in tasks if r == k) for k, _ in tasks}
    # units, at least three star steps, members, decide, regroup, done: a task per range in between.
    assert len(per_round) >= 8 and per_round["0"] == 1 and per_round["1"] == 3
    assert manifest["stages"]["dedup"]["rejected"].get("exact-duplicate", 0) > 0
    assert not (clean / "work" / "global" / "1" / "cc").exists()  # the steps' files are removed
    assert not (clean / "work" / "global" / "1" / "members").exists()
    # workers=1 runs the tasks in this process: crash the second task of a round (star
    # step 1, members or decide), after the first one finished (tasks run in order there).
    run_task = rounds.run_task
    crashed = tmp_path / "crashed"

    def crashing(stage, step, task, work_dir):
        ours = step.spec[0] == round_kind and (round_kind != "step" or step.spec[1] == 1)
        if ours and task == 1 and Path(work_dir).is_relative_to(crashed):
            raise RuntimeError("killed inside a round")
        return run_task(stage, step, task, work_dir)

    monkeypatch.setattr(rounds, "run_task", crashing)  # not in the kernels' rehearsal
    with pytest.raises(RuntimeError, match="killed inside a round"):
        run_pipeline(config, crashed, workers=1, quiet=True)
    markers = crashed / "stats" / "global-1"
    halfway = [k for k in range(len(per_round)) if (markers / f"finalize-{k}-0.json").exists()]
    assert not (markers / f"finalize-{halfway[-1]}-1.json").exists()  # the round was cut in the middle
    monkeypatch.setattr(rounds, "run_task", run_task)
    run_pipeline(config, crashed, workers=1, quiet=True)
    assert tree_digest(clean) == tree_digest(crashed)
