"""Dedup's decide round stays balanced when a corpus repeats itself.

A cluster's centre is its smallest gid, so in a corpus made of copies (a crawl and its
re-crawls, ``benchmarks.volume``'s repeated passages) every centre lies in the first
copy: decide tasks chosen by the centre's range would give one task every member of the
run. The tasks are chosen by a hash of the centre instead; this checks the members each
decide task receives, and that the decisions are those of the copies."""

from __future__ import annotations

import random

import pytest
from test_dedup import _synthetic, make_units, run_stage

from pipeline.formats import partfile
from stages.dedup import Dedup, clusters, rounds


@pytest.mark.parametrize("partitions", [4, 8])
def test_decide_tasks_share_the_members_of_a_repeated_corpus(tmp_path, monkeypatch, partitions):
    passages, copies = 240, 5
    base = _synthetic(random.Random(44), passages)
    ids = [f"p{i}#{c}" for c in range(copies) for i in range(passages)]
    texts = [text for _ in range(copies) for text in base]  # copy c of every passage after copy c - 1
    received = []
    decide = rounds.decide

    def counting(members, **kwargs):
        received.append(members.num_rows)
        return decide(members, **kwargs)

    monkeypatch.setattr(rounds, "decide", counting)
    summary, removed = run_stage(Dedup.Options(partitions=partitions), make_units(ids, texts, 6), tmp_path)
    assert len(received) == partitions
    assert sum(received) == passages * copies  # every document is in a cluster
    assert max(received) <= 2 * sum(received) / partitions
    assert summary["dedup.clusters"] == passages
    assert removed == {
        f"p{i}#{c}": ("exact-duplicate", {"survivor": f"p{i}#0", "survivor_source": "web", "similarity": 1.0})
        for c in range(1, copies)
        for i in range(passages)
    }


@pytest.mark.parametrize("partitions", [4, 8])
def test_every_finalize_round_shares_the_reads_of_a_repeated_corpus(tmp_path, monkeypatch, partitions):
    """Each round's tasks read about equal shares of the partitioned files: the component
    steps and the members round included, whose nodes are mostly centres of the first copy."""
    passages, copies = 240, 10
    base = _synthetic(random.Random(45), passages)
    ids = [f"p{i}#{c}" for c in range(copies) for i in range(passages)]
    texts = [text for _ in range(copies) for text in base]
    monkeypatch.setattr(clusters, "ENTRIES_PER_RANGE", 1)  # a step task per partition, as a large graph gets
    read_bytes: dict[str, list[int]] = {}  # per round, the bytes of partitioned records each task read
    running: list[str] = []
    run_task, read_range = rounds.run_task, partfile.read_range

    def tracked(stage, step, task, work_dir):
        read_bytes.setdefault(step.name, []).append(0)
        running.append(step.name)
        try:
            return run_task(stage, step, task, work_dir)
        finally:
            running.pop()

    def counting(path, parts, dtype):
        records = read_range(path, parts, dtype)
        if running:
            read_bytes[running[-1]][-1] += records.nbytes
        return records

    monkeypatch.setattr(rounds, "run_task", tracked)
    monkeypatch.setattr(partfile, "read_range", counting)
    summary, removed = run_stage(Dedup.Options(partitions=partitions), make_units(ids, texts, 6), tmp_path)
    assert summary["dedup.clusters"] == passages and len(removed) == passages * (copies - 1)
    shared = {name: tasks for name, tasks in read_bytes.items() if len(tasks) > 1}
    assert {"components step 0", "members", "decide"} <= set(shared)
    skew = {name: max(tasks) * len(tasks) / max(sum(tasks), 1) for name, tasks in shared.items()}
    assert max(skew.values()) <= 2, skew
