"""The dedup global stage, driven through the runner's phase protocol with UnitContexts.

Quality is measured on real documents (../shared/data) with planted near duplicates
whose true Jaccard similarity is computed exactly by an independent Python shingler.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.formats import partfile
from pipeline.phases import partitions_for, sized
from pipeline.stage import UnitContext
from stages.dedup import Dedup, clusters
from stages.dedup.minhash import Signer, estimate_similarity
from stages.paragraph_dedup import ParagraphDedup

_HERE = Path(__file__).resolve()
DATA = next((p for p in (_HERE.parents[2] / "shared" / "data", Path("/work/shared/data")) if p.is_dir()), None)
needs_data = pytest.mark.skipif(DATA is None, reason="../shared/data is absent")


# -- driving the protocol ------------------------------------------------------------------


def _commit(ctx: UnitContext) -> None:
    for tmp, final in ctx.pending.items():
        os.replace(tmp, final)
    ctx.pending.clear()


def run_stage(
    options: Dedup.Options, units: dict[tuple[str, str], list[pa.RecordBatch]], work: Path, reduce_order=None
) -> tuple[dict, dict[str, tuple[str, dict]]]:
    """map every unit, reduce every partition, finalize, then filter every unit.

    Returns (finalize summary, {removed id: (reason, detail)})."""
    stage = Dedup(options)
    for (source, unit), batches in units.items():
        ctx = UnitContext(out_dir=work, source=source, unit=unit)
        stage.map_unit(iter(batches), ctx, work)
        _commit(ctx)
    for p in reduce_order or range(stage.partitions()):
        stage.reduce_partition(p, work)
    summary = stage.finalize(work)
    filtering = Dedup(options)  # a fresh process filters, as a separate worker would
    filtering.bind(work)
    removed = {}
    for (source, unit), batches in units.items():
        ctx = UnitContext(out_dir=work, source=source, unit=unit)
        filtering.open_unit(ctx)
        for batch in batches:
            out = filtering.process(batch, source)
            assert len(out.drop_reason) == batch.num_rows == len(out.detail)
            for doc_id, reason, detail in zip(
                batch.column("id").to_pylist(), out.drop_reason.to_pylist(), out.detail.to_pylist()
            ):
                if reason is not None:
                    removed[doc_id] = (reason, json.loads(detail))
                else:
                    assert detail is None
        filtering.close_unit(ctx)
    return summary, removed


def make_units(ids: list[str], texts: list[str], n_units: int, batch_size: int = 64, extra=None):
    """Split documents into ``n_units`` units of batches, in order."""
    units = {}
    bounds = np.linspace(0, len(ids), n_units + 1).astype(int)
    for u in range(n_units):
        lo, hi = bounds[u], bounds[u + 1]
        batches = []
        for s in range(lo, hi, batch_size):
            e = min(hi, s + batch_size)
            cols = {"id": ids[s:e], "text": texts[s:e], "source": ["web"] * (e - s)}
            for name, values in (extra or {}).items():
                cols[name] = values[s:e]
            batches.append(pa.RecordBatch.from_pydict(cols))
        units[("web", f"unit{u:03d}")] = batches
    return units


# -- independent reference shingling -------------------------------------------------------


def words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def shingles(text: str, n: int = 5) -> set[str]:
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def load_texts(rel: str, min_words: int = 0, limit: int | None = None) -> list[str]:
    out = []
    with gzip.open(DATA / rel, "rt") as f:
        for line in f:
            t = json.loads(line).get("text")
            if isinstance(t, str) and len(words(t)) >= min_words:
                out.append(t)
                if limit and len(out) >= limit:
                    break
    return out


# -- signatures ------------------------------------------------------------------------------


def _pair_with_jaccard(rng: random.Random, vocab: list[str], n_words: int, replace: int) -> tuple[str, str]:
    a = [rng.choice(vocab) for _ in range(n_words)]
    b = list(a)
    for pos in rng.sample(range(n_words), replace):
        b[pos] = rng.choice(vocab)
    return " ".join(a), " ".join(b)


def test_signature_estimates_match_datasketch():
    """Same shingles, two implementations: both estimate the true Jaccard within sampling
    error, and the spread of our estimates is what 112 independent hashes give."""
    datasketch = pytest.importorskip("datasketch")
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(50_000)]
    signer = Signer()
    ours_err, theirs_err, expected_var = [], [], []
    for k in range(120):
        a, b = _pair_with_jaccard(rng, vocab, 300, rng.randint(1, 40))
        sa, sb = shingles(a), shingles(b)
        truth = jaccard(sa, sb)
        signed = signer.sign(pa.array([a, b]))
        raw = (signed["sigs"][0] == signed["sigs"][1]).mean()
        stored = Signer.stored(signed["sigs"])
        ours = estimate_similarity(stored[0], stored[1])
        assert abs(ours - raw) <= 2 / 112  # 16-bit storage changes almost nothing
        ma = datasketch.MinHash(num_perm=112, seed=k)
        mb = datasketch.MinHash(num_perm=112, seed=k)
        ma.update_batch([s.encode() for s in sa])
        mb.update_batch([s.encode() for s in sb])
        theirs = ma.jaccard(mb)
        sigma = math.sqrt(truth * (1 - truth) / 112) + 1e-3
        assert abs(ours - truth) <= 5 * sigma, (truth, ours)
        assert abs(ours - theirs) <= 7 * sigma, (truth, ours, theirs)
        ours_err.append(ours - truth)
        theirs_err.append(theirs - truth)
        expected_var.append(truth * (1 - truth) / 112)
    n = len(ours_err)
    bound = 4 * math.sqrt(np.mean(expected_var) / n)
    assert abs(np.mean(ours_err)) <= bound  # unbiased
    assert abs(np.mean(ours_err) - np.mean(theirs_err)) <= 1.5 * bound
    # Variance as for independent hashes (correlated permutations would inflate it).
    assert np.mean(np.square(ours_err)) <= 2.0 * np.mean(expected_var)
    assert np.mean(np.square(ours_err)) <= 2.0 * np.mean(np.square(theirs_err)) + 1e-4


def test_signature_is_a_function_of_normalised_text():
    signer = Signer()
    text = "The Quick brown FOX, jumps over the lazy dog; again and again."
    same = signer.sign(pa.array([text, "the quick brown fox jumps over the lazy dog again and again"]))
    assert (same["sigs"][0] == same["sigs"][1]).all()  # case and punctuation do not matter to shingles
    assert same["exact"][0] != same["exact"][1]  # but punctuation matters to the exact hash
    exact = signer.sign(pa.array(["Hello   World\n", "hello world", None, ""]))
    assert exact["exact"][0] == exact["exact"][1]
    assert exact["exact"][2] == exact["exact"][3] and exact["n_shingles"][2] == 0
    sliced = signer.sign(pa.array(["skip me", text, None, "tail"]).slice(1, 2))  # non-zero array offset
    assert (sliced["sigs"][0] == same["sigs"][0]).all() and sliced["exact"][1] == exact["exact"][2]
    short = signer.sign(pa.array(["two words", "two words", "other words"]))
    assert short["n_shingles"].tolist() == [1, 1, 1]
    assert (short["sigs"][0] == short["sigs"][1]).all() and not (short["sigs"][0] == short["sigs"][2]).all()


def test_char_ngram_fallback_for_text_without_spaces():
    signer = Signer()
    zh = "我们需要字符级别的切分，这是一个没有空格的中文句子。因为中文里词与词之间没有空格，所以按照字符来切。"
    signed = signer.sign(pa.array([zh, "we split english text into words of five"]), keep_shingles=True)
    chars = len(re.findall(r"[^\W_]", zh))
    assert signed["n_shingles"][0] == chars - 5 + 1  # character 5-grams
    assert signed["n_shingles"][1] == 8 - 5 + 1  # word 5-grams


# -- connected components -------------------------------------------------------------------


def _reference_components(n: int, edges: np.ndarray) -> np.ndarray:
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return np.array([find(i) for i in range(n)])


@pytest.mark.parametrize("seed", range(4))
def test_connected_components_through_files_match_union_find(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n, partitions = 400, 5
    # Chains, stars and random edges, with ids shuffled so components cross ranges.
    perm = rng.permutation(n)
    chain = np.stack([perm[:150:1][:-1], perm[:150:1][1:]], axis=1)
    star = np.stack([np.full(60, perm[200]), perm[201:261]], axis=1)
    rand = rng.integers(0, n, size=(120, 2))
    edges = np.concatenate([chain, star, rand])
    edges = edges[edges[:, 0] != edges[:, 1]]
    # Split the edges over several "reduce" files as forests would be.
    files = []
    for k, part in enumerate(np.array_split(edges, 3)):
        rec = np.empty(len(part), clusters.EDGE)
        rec["u"], rec["v"] = part[:, 0], part[:, 1]
        files.append(tmp_path / f"f{k}.part")
        clusters.write_adjacency(files[-1], rec, partitions)
    # The steps as the finalize rounds run them: every range of a step, then the next step.
    history, inputs, steps = [], files, 0
    while not clusters.converged(history):
        outputs = [tmp_path / f"step{steps}" / f"q{q}.part" for q in range(partitions)]
        seen = [clusters.star_step(inputs, range(q, q + 1), steps, outputs[q], partitions) for q in range(partitions)]
        history.append((sum(e for e, _ in seen), sum(h for _, h in seen) & 0xFFFFFFFFFFFFFFFF))
        inputs, steps = outputs, steps + 1
    stars = [tmp_path / f"step{steps - 2}" / f"q{q}.part" for q in range(partitions)]  # the last step's input
    for q in range(partitions):
        adj = clusters.read_adjacency(stars, range(q, q + 1))
        leaf = adj[adj["v"] < adj["u"]]
        assert len(np.unique(leaf["u"])) == len(leaf)  # a leaf has exactly one (smaller) centre
    # The labels, regrouped by document range (3 of them, as the members round reads them).
    labels = [tmp_path / "labels" / f"q{q}.part" for q in range(partitions)]
    nodes = sum(clusters.label_nodes(stars, q, labels[q], n, 3) for q in range(partitions))
    root = np.arange(n)
    for r in range(3):
        labelled = clusters.read_labels(labels, r)
        assert (clusters.node_partition(labelled["gid"], n, 3) == r).all()
        assert (np.diff(labelled["gid"]) > 0).all()
        root[labelled["gid"]] = labelled["comp"]
    assert (root == _reference_components(n, edges)).all()
    assert nodes == len(np.unique(edges))  # every node of an edge, once
    assert steps < 40


def test_hash_ranges_nest_and_spread_crowded_gids():
    """A step's node range ``q`` of ``R`` is partitions ``q*k .. q*k+k-1`` of the forests'
    ``P = k*R`` (what its slices fetch), and gids crowded at the start of the corpus, as
    the centres of a repeating one are, still fill every range."""
    gids = np.arange(4_000, dtype=np.int64)
    fine = clusters.hash_partition(gids, 64)
    for ranges in (1, 2, 4, 8, 16, 32, 64):
        assert (clusters.hash_partition(gids, ranges) == fine // (64 // ranges)).all()
    counts = np.bincount(clusters.hash_partition(gids, 8), minlength=8)
    assert counts.max() <= 1.2 * counts.mean()
    assert (clusters.node_partition(gids, 400_000, 8) == 0).all()  # what ranges of gids did with them


def test_band_edges_forest():
    keys = np.array([5, 9, 5, 9, 7, 5], np.uint64)
    gids = np.array([10, 3, 4, 11, 1, 12], np.int64)
    uniq, first, forest, pairs = clusters.band_edges(keys, gids)
    assert uniq.tolist() == [5, 7, 9] and first.tolist() == [4, 1, 3]
    assert pairs == 3
    assert sorted(zip(forest["u"].tolist(), forest["v"].tolist())) == [(10, 4), (11, 3), (12, 4)]


def test_partfile_roundtrip_with_spills(tmp_path):
    dtype = np.dtype([("key", "<u8"), ("row", "<u4")])
    writer = partfile.Writer(tmp_path / "x.part", dtype, 4, limit=100)
    expected = {p: [] for p in range(4)}
    rng = np.random.default_rng(0)
    for _ in range(5):
        rec = np.empty(30, dtype)
        rec["key"] = rng.integers(0, 1 << 60, 30, dtype=np.uint64)
        rec["row"] = rng.integers(0, 1000, 30)
        part = rng.integers(0, 4, 30)
        writer.add(rec, part)
        for p in range(4):
            expected[p].append(rec[part == p])
    writer.close(count=150)
    assert partfile.header(tmp_path / "x.part")[1] == 150
    for p in range(4):
        assert (partfile.read(tmp_path / "x.part", p, dtype) == np.concatenate(expected[p])).all()
    assert sorted(os.listdir(tmp_path)) == ["x.part"]  # spill files are gone


# -- the stage on synthetic text -------------------------------------------------------------


def _synthetic(rng: random.Random, n: int, length: int = 60) -> list[str]:
    vocab = [f"tok{i}" for i in range(20_000)]
    return [" ".join(rng.choice(vocab) for _ in range(length)) for _ in range(n)]


def test_exact_duplicates(tmp_path):
    rng = random.Random(1)
    base = _synthetic(rng, 6)
    texts = base + ["  " + base[0].upper() + "\n", base[1], base[2].replace(" ", ", ", 3)]
    ids = [f"d{i}" for i in range(len(texts))]
    summary, removed = run_stage(Dedup.Options(partitions=3), make_units(ids, texts, 2, batch_size=4), tmp_path)
    assert removed["d6"] == ("exact-duplicate", {"survivor": "d0", "survivor_source": "web", "similarity": 1.0})
    assert removed["d7"] == ("exact-duplicate", {"survivor": "d1", "survivor_source": "web", "similarity": 1.0})
    reason, detail = removed["d8"]  # punctuation differs: same shingles, not the same text
    assert reason == "near-duplicate" and detail["survivor"] == "d2" and detail["similarity"] == 1.0
    assert set(removed) == {"d6", "d7", "d8"}
    assert summary["dedup.exact_removed"] == 2 and summary["dedup.near_removed"] == 1


def test_units_left_empty_before_dedup(tmp_path):
    """A unit whose documents were all dropped earlier maps nothing; first or last in
    the global order, its filter must still open (it once asked for range P)."""
    rng = random.Random(3)
    texts = _synthetic(rng, 4)
    texts = texts + [texts[0]]
    units = make_units([f"e{i}" for i in range(len(texts))], texts, 1)
    empty = pa.RecordBatch.from_pydict(
        {"id": pa.array([], pa.string()), "text": pa.array([], pa.string()), "source": pa.array([], pa.string())}
    )
    units = {("web", "a-empty"): [empty], **units, ("web", "z-empty"): []}
    _, removed = run_stage(Dedup.Options(partitions=3), units, tmp_path)
    assert removed == {"e4": ("exact-duplicate", {"survivor": "e0", "survivor_source": "web", "similarity": 1.0})}


def test_exact_dedup_of_documents_too_short_for_shingles(tmp_path):
    texts = ["", "...", "", "ok", "OK!", "ok"]
    ids = [f"s{i}" for i in range(len(texts))]
    _, removed = run_stage(Dedup.Options(partitions=2), make_units(ids, texts, 1), tmp_path)
    assert removed["s2"][0] == "exact-duplicate" and removed["s2"][1]["survivor"] == "s0"
    assert removed["s5"][0] == "exact-duplicate" and removed["s5"][1]["survivor"] == "s3"
    assert removed["s4"][0] == "near-duplicate"  # "ok!" has the word of "ok" but not its text
    assert set(removed) == {"s2", "s4", "s5"}


def test_survivor_is_highest_signal_then_smallest_id(tmp_path):
    rng = random.Random(2)
    text = _synthetic(rng, 1)[0]
    texts = [text, text + " extra", text + " tail", text]
    ids = ["c", "a", "b", "z"]
    score = [0.2, 0.5, 0.9, None]
    opts = Dedup.Options(partitions=2, survivor_signal="quality_score")
    _, removed = run_stage(opts, make_units(ids, texts, 2, extra={"quality_score": score}), tmp_path / "q")
    assert set(removed) == {"a", "c", "z"} and {d["survivor"] for _, d in removed.values()} == {"b"}
    _, removed = run_stage(Dedup.Options(partitions=2), make_units(ids, texts, 2), tmp_path / "id")
    assert set(removed) == {"b", "c", "z"} and {d["survivor"] for _, d in removed.values()} == {"a"}


def test_determinism_across_unit_splits_orders_and_partitions(tmp_path):
    rng = random.Random(3)
    base = _synthetic(rng, 150)
    texts, ids = [], []
    for i, t in enumerate(base):
        texts.append(t)
        ids.append(f"o{i:04d}")
        w = t.split()
        for k in range(rng.randint(0, 3)):
            v = list(w)
            for pos in rng.sample(range(len(v)), rng.randint(0, 4)):
                v[pos] = "edit"
            texts.append(" ".join(v[: rng.randint(50, 60)]))
            ids.append(f"v{i:04d}_{k}")
    order = list(range(len(texts)))
    results = []
    for split, partitions, shuffle in ((1, 4, False), (5, 4, True), (9, 7, True)):
        if shuffle:
            rng.shuffle(order)
        units = make_units([ids[i] for i in order], [texts[i] for i in order], split, batch_size=17)
        reduce_order = list(range(partitions))[::-1]
        _, removed = run_stage(
            Dedup.Options(partitions=partitions), units, tmp_path / f"r{split}", reduce_order=reduce_order
        )
        results.append(removed)
    assert len(results[0]) > 60
    assert results[0] == results[1] == results[2]


def test_finalize_is_safe_to_run_again(tmp_path):
    rng = random.Random(4)
    t = _synthetic(rng, 3)
    units = make_units(["x", "y", "z", "w"], t + [t[0]], 1)
    summary, removed = run_stage(Dedup.Options(partitions=2), units, tmp_path)
    again = Dedup(Dedup.Options(partitions=2)).finalize(tmp_path)
    assert again == summary and set(removed) == {"x"}  # "w" < "x": the smaller id survives


def test_process_rejects_documents_it_did_not_map(tmp_path):
    rng = random.Random(5)
    units = make_units(["a", "b"], _synthetic(rng, 2), 1)
    run_stage(Dedup.Options(partitions=2), units, tmp_path)
    stage = Dedup(Dedup.Options(partitions=2))
    stage.bind(tmp_path)
    stage.open_unit(UnitContext(out_dir=tmp_path, source="web", unit="unit000"))
    other = pa.RecordBatch.from_pydict({"id": ["b", "a"], "text": ["", ""], "source": ["web", "web"]})
    with pytest.raises(ValueError, match="differ"):
        stage.process(other, "web")


def test_incremental_against_previous_index(tmp_path):
    rng = random.Random(6)
    old = _synthetic(rng, 40)
    new_unique = _synthetic(rng, 20)
    near_old = [old[i] + " appended words here" for i in range(5)]
    run1 = tmp_path / "run1"
    _, removed1 = run_stage(Dedup.Options(partitions=3), make_units([f"old{i}" for i in range(40)], old, 2), run1)
    assert removed1 == {}
    texts2 = new_unique + near_old + [old[7], new_unique[0]]
    ids2 = [f"new{i}" for i in range(20)] + [f"near{i}" for i in range(5)] + ["copy7", "z_copy_new0"]
    run2 = tmp_path / "run2"
    opts = Dedup.Options(partitions=3, index_from=str(run1))
    summary, removed2 = run_stage(opts, make_units(ids2, texts2, 2), run2)
    assert summary["dedup.documents"] == len(texts2)
    assert removed2["copy7"] == ("exact-duplicate", {"survivor": "old7", "survivor_source": "web", "similarity": 1.0})
    assert removed2["z_copy_new0"][1]["survivor"] == "new0"
    for i in range(5):
        assert removed2[f"near{i}"][0] == "near-duplicate" and removed2[f"near{i}"][1]["survivor"] == f"old{i}"
    assert set(removed2) == {"copy7", "z_copy_new0"} | {f"near{i}" for i in range(5)}
    # The band index was not recomputed: run1's map outputs are not needed any more than its index.
    # A third run chained on run2 still sees run1's documents.
    run3 = tmp_path / "run3"
    opts3 = Dedup.Options(partitions=3, index_from=str(run2))
    _, removed3 = run_stage(opts3, make_units(["again_old3", "again_new5"], [old[3], new_unique[5]], 1), run3)
    assert removed3["again_old3"][1]["survivor"] == "old3"
    assert removed3["again_new5"][1]["survivor"] == "new5"
    with pytest.raises(ValueError, match="other dedup settings"):
        run_stage(
            Dedup.Options(partitions=3, bands=10, rows=8, index_from=str(run1)),
            make_units(["q"], ["x y"], 1),
            tmp_path / "bad",
        )


def test_verify_uses_exact_jaccard_against_the_survivor(tmp_path):
    rng = random.Random(8)
    base = _synthetic(rng, 1, length=200)[0].split()
    a = " ".join(base)
    b = " ".join(base[:180])  # J = 176/196
    c = " ".join(base[:150])  # J(a, c) = 146/196 ~ 0.745
    ids, texts = ["a", "b", "c"], [a, b, c]
    opts = Dedup.Options(partitions=2, verify=True, min_similarity=0.8)
    _, removed = run_stage(opts, make_units(ids, texts, 1), tmp_path)
    assert set(removed) == {"b"}
    assert removed["b"][1]["similarity"] == pytest.approx(jaccard(shingles(a), shingles(b)), abs=1e-4)


# -- real documents with planted near duplicates ----------------------------------------------


BOILERPLATE = (
    "Subscribe to our newsletter to get the latest news and exclusive offers delivered to your inbox "
    "every week. We respect your privacy and you can unsubscribe at any time."
)


def _plant(rng: random.Random, text: str) -> str:
    """A near duplicate: word edits, truncation or inserted boilerplate (or a mix)."""
    w = text.split()
    kind = rng.choice(["edit", "truncate", "boilerplate", "mix"])
    if kind in ("edit", "mix"):
        for _ in range(max(1, int(len(w) * rng.uniform(0.002, 0.03)))):
            pos = rng.randrange(len(w))
            op = rng.random()
            if op < 0.4:
                w[pos] = rng.choice(["the", "a", "new", "old", "big", "2019", "click"])
            elif op < 0.7 and len(w) > 10:
                del w[pos]
            else:
                w.insert(pos, rng.choice(["really", "very", "also", "just"]))
    if kind in ("truncate", "mix"):
        w = w[: max(5, int(len(w) * rng.uniform(0.8, 0.98)))]
    if kind == "boilerplate":
        bp = BOILERPLATE.split()
        where = rng.choice([0, len(w)])
        w = w[:where] + bp + w[where:]
    return " ".join(w)


@needs_data
def test_planted_near_duplicates_in_real_web_text(tmp_path):
    rng = random.Random(11)
    originals = load_texts("web/web_gold.jsonl.gz", min_words=150, limit=450)
    distractors = load_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", min_words=20)
    assert len(originals) >= 300
    ids, texts, family, pairs = [], [], [], []
    for i, t in enumerate(originals):
        orig_pos = len(ids)
        ids.append(f"orig{i:04d}")
        texts.append(t)
        family.append(i)
        if i % 3 == 2:
            continue  # a third of the originals get no planted duplicate
        for k in range(rng.choice([1, 1, 2])):
            ids.append(f"dup{i:04d}_{k}")
            texts.append(_plant(rng, t))
            family.append(i)
            pairs.append((len(ids) - 1, orig_pos))
    for j, t in enumerate(distractors):
        ids.append(f"cc{j:04d}")
        texts.append(t)
        family.append(-1 - j)
    order = list(range(len(ids)))
    rng.shuffle(order)
    sets = [shingles(t) for t in texts]
    units = make_units([ids[i] for i in order], [texts[i] for i in order], 4, batch_size=100)
    summary, removed = run_stage(Dedup.Options(partitions=8), units, tmp_path)

    index = {doc_id: k for k, doc_id in enumerate(ids)}
    # Recall: every planted pair with true J >= 0.8 must lose one of its two documents.
    high = [(a, b) for a, b in pairs if jaccard(sets[a], sets[b]) >= 0.8]
    found = [ids[a] in removed or ids[b] in removed for a, b in high]
    recall = sum(found) / len(high)
    # Precision: a removed document really resembles the survivor it names.
    true_j = [jaccard(sets[index[d]], sets[index[detail["survivor"]]]) for d, (_, detail) in removed.items()]
    precision = sum(j >= 0.7 for j in true_j) / len(true_j)
    print(
        f"\nplanted pairs {len(pairs)}, J>=0.8: {len(high)}, recall {recall:.3f}, removed {len(removed)}, "
        f"precision(J>=0.7) {precision:.3f}, summary {summary}"
    )
    assert len(high) >= 150
    assert recall >= 0.95
    assert precision >= 0.9
    # Nothing outside a planted family is removed against another family's document.
    assert all(
        family[index[d]] == family[index[det["survivor"]]] for d, (_, det) in removed.items() if family[index[d]] >= 0
    )


@needs_data
def test_cjk_near_duplicates_use_character_shingles(tmp_path):
    sentences = []
    with gzip.open(DATA / "langid/lingua_testdata.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            if row["lang"] == "zh" and row["kind"] == "sentences":
                sentences.append(row["text"])
    assert len(sentences) >= 300
    docs = ["".join(sentences[i : i + 6]) for i in range(0, 300, 6)]
    rng = random.Random(12)
    ids, texts = [f"zh{i:03d}" for i in range(len(docs))], list(docs)
    for i in range(0, len(docs), 2):
        chars = list(docs[i])
        pos = rng.randrange(len(chars))
        chars[pos] = "的" if chars[pos] != "的" else "是"  # one character changed
        ids.append(f"zhdup{i:03d}")
        texts.append("".join(chars))
    _, removed = run_stage(Dedup.Options(partitions=4), make_units(ids, texts, 2), tmp_path)
    expected = {f"zhdup{i:03d}" for i in range(0, len(docs), 2)}
    assert set(removed) == expected
    for doc_id in expected:
        reason, detail = removed[doc_id]
        assert reason == "near-duplicate" and detail["survivor"] == doc_id.replace("zhdup", "zh")
        assert detail["similarity"] >= 0.8


def test_partitions_left_to_the_run_follow_its_size():
    assert [partitions_for(size) for size in (0, 3 << 20, 2 << 30, 5 << 30, 1e15)] == [2, 2, 2, 8, 8192]
    assert sized(Dedup(Dedup.Options(partitions=5)), 1e12) == {}
    assert sized(Dedup(Dedup.Options()), 5 << 30) == {"partitions": 8}
    assert Dedup(Dedup.Options()).partitions() == 32  # built outside a run: the old default
    assert sized(ParagraphDedup(ParagraphDedup.Options()), 3 << 30) == {"partitions": 4}
    assert sized(ParagraphDedup(ParagraphDedup.Options(partitions=3)), 1e12) == {}
    assert ParagraphDedup(ParagraphDedup.Options()).partitions() == 32


@pytest.mark.parametrize(
    "units_json, expected",
    [
        ({"units": [], "config": {"partitions": 7}}, 7),  # an index's own count
        ([1, 2], 2),  # hostile or broken: sized from the input; the map phase reports it
        ({"units": [], "config": {"partitions": -3}}, 2),
        ({"units": [], "config": {"partitions": "many"}}, 2),
        (None, 2),  # no index there
    ],
)
def test_partitions_follow_an_imported_index(tmp_path, units_json, expected):
    if units_json is not None:
        (tmp_path / "units.json").write_text(json.dumps(units_json))
    assert sized(Dedup(Dedup.Options(index_from=str(tmp_path))), 1 << 20) == {"partitions": expected}


def test_an_index_of_another_dedup_version_is_refused(tmp_path, monkeypatch):
    rng = random.Random(7)
    run1 = tmp_path / "run1"
    run_stage(Dedup.Options(partitions=2), make_units([f"d{i}" for i in range(10)], _synthetic(rng, 10), 1), run1)
    monkeypatch.setattr(Dedup, "version", Dedup.version + 1)  # a change of its output alone: the index still fits
    run_stage(Dedup.Options(partitions=2, index_from=str(run1)), make_units(["q"], ["x y"], 1), tmp_path / "run2")
    monkeypatch.setattr(Dedup, "index_version", Dedup.index_version + 1)  # as a later fix of its hashing would
    with pytest.raises(ValueError, match=r"other dedup settings \(version\)"):
        run_stage(Dedup.Options(partitions=2, index_from=str(run1)), make_units(["q"], ["x y"], 1), tmp_path / "run3")


def test_a_runs_fingerprint_changes_with_a_stage_version_past_the_first(tmp_path, monkeypatch):
    from pipeline.engine.config import load_config
    from pipeline.engine.run import _fingerprint
    from pipeline.engine.run_options import RunOptions
    from stages.length import Length

    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n')
    config_file = tmp_path / "c.toml"
    stages = '[[stages]]\nname = "length"\n[[stages]]\nname = "dedup"\n'
    config_file.write_text('[sources.web]\npaths = ["in.jsonl"]\n' + stages)
    config = load_config(config_file)
    options = RunOptions(workers=1)
    prints = {_fingerprint(config, [], options)["fingerprint"]}
    monkeypatch.setattr(Length, "version", 2)
    prints.add(_fingerprint(config, [], options)["fingerprint"])
    monkeypatch.setattr(Dedup, "version", Dedup.version + 1)
    prints.add(_fingerprint(config, [], options)["fingerprint"])
    assert len(prints) == 3
