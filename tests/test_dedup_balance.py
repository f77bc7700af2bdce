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

from stages.dedup import Dedup, rounds


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
        f"p{i}#{c}": ("exact-duplicate", {"survivor": f"p{i}#0", "similarity": 1.0})
        for c in range(1, copies)
        for i in range(passages)
    }
