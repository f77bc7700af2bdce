"""The DataLoader: windows and boundaries against the true stream, exactly-once sharding,
exact and elastic resume, caching, a mixture's shares in what the model sees, and a
two-process DDP run on CPU.

Corpora are written with ``ShardWriter`` into temporary folders. The expected token
stream is rebuilt here from what was written (never from the loader's internals, except
the document order, which is checked to be a permutation per epoch).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.mix_stream import (
    make_mixture,
    source_lengths,
    stream_sources,
    target_shares,
    training_counts,
    training_windows,
    worst,
)
from pipeline.formats.scratch import LOADER_CACHE as CACHE_DIRNAME
from pipeline.formats.token_shards import ShardWriter, write_index
from pipeline.loader import ShardCorpus, TokenDataset, build_dataloader
from pipeline.loader.sampler import SHARE_WINDOW_TOKENS, WindowOrder, balanced_order

REPO = Path(__file__).resolve().parents[1]


# -- corpora --------------------------------------------------------------------------


def write_shard(prefix: Path, docs: list[np.ndarray], dtype=np.int32) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(f"{prefix}.bin", f"{prefix}.idx", dtype)
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    flat = np.concatenate(docs) if docs else np.zeros(0, dtype=dtype)
    writer.add_documents(flat, lengths)
    writer.close()


def make_run(
    root: Path, rng: np.random.Generator, layout: dict[str, int], docs_per_shard: int, max_len: int, dtype=np.int32
) -> list[np.ndarray]:
    """A run folder ``root/tokens/<source>/shard-*`` of random documents (some empty).

    Returns the documents in the loader's global numbering: sources by name, shards by
    name, documents in file order. Token ids are unique across the corpus (when the
    dtype allows), so a wrong document or offset cannot go unnoticed.
    """
    docs: list[np.ndarray] = []
    next_id = 1
    for source in sorted(layout):
        for shard in range(layout[source]):
            shard_docs = []
            for _ in range(docs_per_shard):
                n = int(rng.integers(0, max_len + 1))
                shard_docs.append((np.arange(next_id, next_id + n) % np.iinfo(dtype).max).astype(dtype))
                next_id += n
            write_shard(root / "tokens" / source / f"shard-{shard:03d}", shard_docs, dtype)
            docs.extend(shard_docs)
    return docs


def expected_stream(docs: list[np.ndarray], order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token stream in ``order`` and the stream positions where each document starts."""
    ordered = [docs[i] for i in order]
    stream = np.concatenate(ordered).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum([len(d) for d in ordered])])[:-1]
    return stream, starts[[len(d) > 0 for d in ordered]]


def check_batch(batch: dict, stream: np.ndarray, doc_starts: np.ndarray, seq_len: int) -> None:
    """input_ids/labels/position_ids/cu_seqlens of ``batch`` against the true stream."""
    ids = batch["sample_index"].numpy()
    rows = len(ids)
    expected_cu = [0]
    for r, i in enumerate(ids):
        window = stream[i * seq_len : i * seq_len + seq_len + 1]
        assert np.array_equal(batch["input_ids"][r].numpy(), window[:-1])
        assert np.array_equal(batch["labels"][r].numpy(), window[1:])
        # Documents starting strictly inside the inputs open a segment.
        inside = doc_starts[(doc_starts > i * seq_len) & (doc_starts < i * seq_len + seq_len)] - i * seq_len
        bounds = [0, *inside.tolist(), seq_len]
        positions = np.concatenate([np.arange(b - a) for a, b in zip(bounds[:-1], bounds[1:])])
        assert np.array_equal(batch["position_ids"][r].numpy(), positions)
        expected_cu.extend((r * seq_len + np.array(bounds[1:])).tolist())
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["cu_seqlens"].tolist() == expected_cu
    assert batch["max_seqlen"] == int(np.diff(expected_cu).max())
    for name in ("input_ids", "labels", "position_ids"):
        assert batch[name].dtype == torch.int64 and batch[name].shape == (rows, seq_len)


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(7)
    docs = make_run(tmp_path / "run", rng, {"code": 2, "web": 3}, docs_per_shard=9, max_len=40)
    return tmp_path / "run", docs


def epoch_stream(dataset: TokenDataset, docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return expected_stream(docs, np.asarray(dataset.stream.order))


def all_batches(loader) -> list[dict]:
    return [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in b.items()} for b in loader]


def sample_ids(batches: list[dict]) -> list[int]:
    return [i for b in batches for i in b["sample_index"].tolist()]


# -- windows and boundaries ------------------------------------------------------------


def test_order_is_a_fresh_permutation_each_epoch(corpus):
    path, docs = corpus
    dataset = TokenDataset(path, seq_len=16, seed=3, epochs=3)
    order = np.asarray(dataset.stream.order).reshape(3, len(docs))
    for epoch in order:
        assert sorted(epoch.tolist()) == list(range(len(docs)))
    assert not np.array_equal(order[0], order[1])
    # More epochs extend the stream without changing its beginning.
    two = TokenDataset(path, seq_len=16, seed=3, epochs=2)
    assert np.array_equal(np.asarray(two.stream.order), order[:2].ravel())


@pytest.mark.parametrize("seq_len", [1, 7, 64])
def test_windows_positions_and_cu_seqlens_match_the_true_stream(corpus, seq_len):
    path, docs = corpus
    dataset = TokenDataset(path, seq_len=seq_len, seed=1, epochs=2)
    stream, doc_starts = epoch_stream(dataset, docs)
    assert len(dataset) == (len(stream) - 1) // seq_len
    indices = np.random.default_rng(0).permutation(len(dataset))
    for chunk in np.array_split(indices, max(1, len(indices) // 5)):
        from pipeline.loader.dataset import unpack

        check_batch(unpack(dataset.__getitems__(chunk.tolist())), stream, doc_starts, seq_len)
    single = dataset[len(dataset) - 1]
    assert single["input_ids"].shape == (seq_len,)
    last = len(dataset) - 1
    assert np.array_equal(single["labels"].numpy(), stream[last * seq_len + 1 : last * seq_len + seq_len + 1])


def test_a_document_spanning_several_megatron_sequences_is_one_segment(tmp_path):
    # Megatron files from elsewhere may group several sequences into one document.
    prefix = tmp_path / "shard"
    tokens = np.arange(1, 31, dtype=np.uint16)
    Path(f"{prefix}.bin").write_bytes(tokens.tobytes())
    write_index(f"{prefix}.idx", np.uint16, np.array([5, 5, 10, 10]), document_index=np.array([0, 2, 4]))
    dataset = TokenDataset(tmp_path, seq_len=29, shuffle_block=1)
    assert dataset.corpus.document_sizes.tolist() == [10, 20]
    batch = dataset[0]
    first = int(np.asarray(dataset.stream.order)[0])
    boundary = 10 if first == 0 else 20
    assert batch["cu_seqlens"].tolist() == [0, boundary, 29]


def test_custom_document_order_is_followed(corpus):
    """The seam for mixtures: any provider of global document ids, repeats allowed."""
    path, docs = corpus

    class Repeat:
        def key(self):
            return "repeat-first-three"

        def build(self, corpus):
            return np.array([2, 0, 2, 1, 2])

    dataset = TokenDataset(path, seq_len=5, order=Repeat())
    stream, doc_starts = expected_stream(docs, np.array([2, 0, 2, 1, 2]))
    from pipeline.loader.dataset import unpack

    check_batch(unpack(dataset.__getitems__(list(range(len(dataset))))), stream, doc_starts, 5)


def test_sources_follow_the_run_folders(corpus):
    path, docs = corpus
    corpus_ = ShardCorpus(path)
    assert [(s.name, s.documents) for s in corpus_.sources] == [("code", 18), ("web", 27)]
    assert corpus_.num_documents == len(docs) and corpus_.num_tokens == sum(len(d) for d in docs)


# -- exactly once -----------------------------------------------------------------------


def ranks_samples(dataset, world_size, batch_size, drop_last, num_workers=0, **kw) -> list[list[int]]:
    return [
        sample_ids(
            all_batches(
                build_dataloader(
                    dataset,
                    batch_size,
                    rank=r,
                    world_size=world_size,
                    num_workers=num_workers,
                    drop_last=drop_last,
                    **kw,
                )
            )
        )
        for r in range(world_size)
    ]


def assert_exactly_once(per_rank: list[list[int]], total: int, batch_size: int, world: int, drop_last: bool):
    seen = [i for ids in per_rank for i in ids]
    assert len(seen) == len(set(seen)), "a sample was produced twice"
    assert set(seen) <= set(range(total))
    if drop_last:
        assert total - len(seen) < batch_size * world
        assert len({len(ids) for ids in per_rank}) == 1, "ranks must take the same number of steps"
    else:
        assert len(seen) == total


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.integers(1, 30),
    max_len=st.integers(0, 50),
    seq_len=st.integers(1, 20),
    batch_size=st.integers(1, 6),
    world=st.integers(1, 4),
    epochs=st.integers(1, 2),
    per_fetch=st.integers(1, 3),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_exactly_once_over_ranks_property(
    docs, max_len, seq_len, batch_size, world, epochs, per_fetch, drop_last, seed
):
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(seed)
        write_shard(
            Path(tmp) / "a", [np.arange(int(rng.integers(0, max_len + 1)), dtype=np.int32) + 1 for _ in range(docs)]
        )
        write_shard(Path(tmp) / "b", [np.arange(int(rng.integers(1, max_len + 2)), dtype=np.int32) + 1])
        tokens = epochs * sum(len(shard) for shard in (np.fromfile(Path(tmp) / f"{n}.bin", np.int32) for n in "ab"))
        if tokens <= seq_len:  # not a single window: refused, naming seq_len
            with pytest.raises(ValueError, match=f"no window of seq_len {seq_len}"):
                TokenDataset(tmp, seq_len=seq_len, seed=seed, epochs=epochs)
            return
        dataset = TokenDataset(tmp, seq_len=seq_len, seed=seed, epochs=epochs, shuffle_block=int(rng.integers(1, 9)))
        batches = len(dataset) // (batch_size * world) * world if drop_last else -(-len(dataset) // batch_size)
        if batches < world:  # some rank would get no batch of the pass: the first such is refused by name
            with pytest.raises(ValueError, match=f"rank {batches} would get no batch"):
                ranks_samples(dataset, world, batch_size, drop_last, batches_per_fetch=per_fetch)
            return
        per_rank = ranks_samples(dataset, world, batch_size, drop_last, batches_per_fetch=per_fetch)
        assert_exactly_once(per_rank, len(dataset), batch_size, world, drop_last)


@pytest.mark.parametrize("drop_last", [False, True])
def test_exactly_once_two_ranks_two_workers(corpus, drop_last):
    path, docs = corpus
    dataset = TokenDataset(path, seq_len=8, seed=5, epochs=2, shuffle_block=16)
    stream, doc_starts = epoch_stream(dataset, docs)
    per_rank = []
    for rank in range(2):
        loader = build_dataloader(
            dataset,
            3,
            rank=rank,
            world_size=2,
            num_workers=2,
            drop_last=drop_last,
            prefetch_factor=2,
            batches_per_fetch=2,
        )
        batches = all_batches(loader)
        for batch in batches:
            check_batch(batch, stream, doc_starts, 8)
        per_rank.append(sample_ids(batches))
    assert_exactly_once(per_rank, len(dataset), 3, 2, drop_last)
    # Same batches in the same order whatever the number of workers.
    solo = ranks_samples(dataset, 2, 3, drop_last, num_workers=0)
    assert solo == per_rank


# -- resume -----------------------------------------------------------------------------


def run_with_interruption(make_loader, stop: int, through_json: bool = True) -> list[dict]:
    first = make_loader()
    out = []
    for step, batch in enumerate(first):
        out.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in batch.items()})
        if step + 1 == stop:
            break
    state = first.state_dict()
    if through_json:
        state = json.loads(json.dumps(state))
    del first
    second = make_loader()
    second.load_state_dict(state)
    return out + all_batches(second)


@pytest.mark.parametrize("num_workers,per_fetch", [(0, 1), (2, 3)])
def test_resume_at_random_steps_gives_the_uninterrupted_batches(corpus, num_workers, per_fetch):
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=6, seed=11, epochs=2, shuffle_block=32)

    def make():
        return build_dataloader(
            dataset,
            4,
            rank=1,
            world_size=2,
            num_workers=num_workers,
            prefetch_factor=2 if num_workers else None,
            batches_per_fetch=per_fetch,
        )

    reference = all_batches(make())
    rng = random.Random(num_workers)
    for stop in sorted({1, len(reference) - 1, *rng.sample(range(1, len(reference)), 3)}):
        resumed = run_with_interruption(make, stop)
        assert len(resumed) == len(reference)
        for a, b in zip(resumed, reference):
            for key in ("input_ids", "labels", "position_ids", "cu_seqlens", "sample_index"):
                assert torch.equal(a[key], b[key]), (stop, key)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_batches_kept_by_the_training_loop_are_never_overwritten(corpus, num_workers):
    """Batches are views of the workers' shared slots: kept ones must stay as delivered."""
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=4, seed=0, epochs=3)
    reference = all_batches(build_dataloader(dataset, 2, num_workers=0))
    loader = build_dataloader(dataset, 2, num_workers=num_workers, prefetch_factor=1, batches_per_fetch=2)
    kept = list(loader)  # no copies: every slot stays held
    assert len(kept) == len(reference) > 4 * num_workers * 3
    for a, b in zip(kept, reference):
        for key in ("input_ids", "labels", "position_ids", "cu_seqlens", "sample_index"):
            assert torch.equal(a[key], b[key]), key


def test_state_is_small_constant_and_advances_by_batches_handed_over(corpus):
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=4, seed=0)
    loader = build_dataloader(dataset, 2, rank=0, world_size=3, num_workers=2, prefetch_factor=4)
    sizes = set()
    iterator = iter(loader)
    for step in range(1, 6):
        next(iterator)
        state = loader.state_dict()
        # Prefetched batches do not count: 3 ranks x 2 samples per step.
        assert state["samples"] == step * 6
        sizes.add(len(json.dumps(state)))
    assert max(sizes) < 400 and max(sizes) - min(sizes) <= 2
    del iterator
    bigger = TokenDataset(path, seq_len=4, seed=0, epochs=5)
    assert len(json.dumps(build_dataloader(bigger, 2, num_workers=0).state_dict())) < 400


@pytest.mark.parametrize("drop_last", [True, False])
def test_len_counts_the_batches_left_after_a_loop_broke_off(corpus, drop_last):
    """len(loader) after a loop broke off counted a whole pass, not what the next
    iteration yields (the sampler's start moved only when an iteration began)."""
    path, _ = corpus
    loader = build_dataloader(
        TokenDataset(path, seq_len=4), 2, rank=1, world_size=2, num_workers=0, drop_last=drop_last
    )
    whole = len(loader)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    assert len(loader) == whole - 3
    del iterator
    assert len(loader) == whole - 3 == len(all_batches(loader))
    assert len(loader) == whole


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works where there is an accelerator")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_memory_without_an_accelerator_warns_and_serves_unpinned(corpus, num_workers):
    """pin_memory=True on a machine without one raised RuntimeError ("Cannot access
    accelerator device") on the first batch; torch's own DataLoader warns and goes on."""
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=4)
    with pytest.warns(UserWarning, match="no accelerator is found"):
        loader = build_dataloader(dataset, 2, num_workers=num_workers, pin_memory=True)
    pinned = sample_ids(all_batches(loader))
    assert pinned == sample_ids(all_batches(build_dataloader(dataset, 2, num_workers=0)))


def test_elastic_resume_from_two_ranks_to_three(corpus):
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=5, seed=2, epochs=2)
    first = [iter(build_dataloader(dataset, 3, rank=r, world_size=2, num_workers=0)) for r in range(2)]
    seen = []
    for _ in range(7):  # ranks step in lockstep
        for it in first:
            seen.extend(next(it)["sample_index"].tolist())
    leader = build_dataloader(dataset, 3, rank=0, world_size=2, num_workers=0)
    leader_it = iter(leader)
    for _ in range(7):
        next(leader_it)
    state = leader.state_dict()
    assert state["samples"] == 7 * 2 * 3
    for rank in range(3):
        loader = build_dataloader(
            dataset, 4, rank=rank, world_size=3, num_workers=2 if rank == 0 else 0, drop_last=False
        )
        loader.load_state_dict(state)
        seen.extend(sample_ids(all_batches(loader)))
    assert sorted(seen) == list(range(len(dataset)))


def test_load_state_rejects_other_data(corpus):
    path, _ = corpus
    state = build_dataloader(TokenDataset(path, seq_len=4, seed=0), 2, num_workers=0).state_dict()
    for other in (TokenDataset(path, seq_len=5, seed=0), TokenDataset(path, seq_len=4, seed=1)):
        with pytest.raises(ValueError, match="other data"):
            build_dataloader(other, 2, num_workers=0).load_state_dict(state)
    # A state saved before the window order kept shares (no "window_order") names other windows.
    former = {key: value for key, value in state.items() if key != "window_order"}
    with pytest.raises(ValueError, match="saved under window order 'plain blocks.*other batches"):
        build_dataloader(TokenDataset(path, seq_len=4, seed=0), 2, num_workers=0).load_state_dict(former)


def test_a_finished_pass_starts_the_next_one_with_the_same_windows(corpus):
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=9)
    loader = build_dataloader(dataset, 2, num_workers=2, persistent_workers=True, prefetch_factor=2)
    one, two = sample_ids(all_batches(loader)), sample_ids(all_batches(loader))
    assert one == two and loader.state_dict()["epoch"] == 2 and loader.state_dict()["samples"] == 0
    assert len(loader) == len(one) // 2


# -- startup, cache, processes ---------------------------------------------------------------


def test_index_is_cached_once_beside_the_data_and_independent_of_world_size(corpus):
    path, _ = corpus
    TokenDataset(path, seq_len=8, seed=4, epochs=2)
    cache = path / "tokens" / CACHE_DIRNAME
    files = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert files and not [name for name in files if name.endswith(".tmp")]
    dataset = TokenDataset(path, seq_len=8, seed=4, epochs=2)
    for world in (1, 3):
        build_dataloader(dataset, 2, world_size=world, num_workers=0)
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == files
    # Another seq_len reuses the same stream index; another seed adds its own.
    TokenDataset(path, seq_len=3, seed=4, epochs=2)
    assert len(list(cache.iterdir())) == len(files)
    TokenDataset(path, seq_len=8, seed=5, epochs=2)
    assert len(list(cache.iterdir())) == len(files) + 2


@pytest.mark.parametrize("damage", ["cut short", "emptied", "not an array"])
def test_a_damaged_cache_file_is_built_again(tmp_path, damage):
    """A cache file that does not read back (cut short by a crash) stopped every loader on
    the data with numpy's "EOF: reading array header", naming no file."""
    write_shard(tmp_path / "a", [np.arange(n, dtype=np.int32) for n in (10, 7, 12)])
    expected = TokenDataset(tmp_path, seq_len=3, seed=1)[2]["input_ids"]
    for cached in (tmp_path / CACHE_DIRNAME).iterdir():
        if damage == "cut short":
            os.truncate(cached, 100)
        elif damage == "emptied":
            os.truncate(cached, 0)
        else:
            cached.write_bytes(b"\x00" * 300)
    dataset = TokenDataset(tmp_path, seq_len=3, seed=1)
    assert len(dataset) == (29 - 1) // 3 and torch.equal(dataset[2]["input_ids"], expected)


@pytest.mark.parametrize(
    "array, damage",
    [
        ("order", lambda a: a.__setitem__(0, 3)),  # past the last of 3 documents: an IndexError in a worker
        ("order", lambda a: a.__setitem__(0, -1)),
        ("cumulative", lambda a: a.__setitem__(slice(2, None), a[2:] + 1)),  # every window after it shifted
        ("sizes", lambda a: a.__setitem__(1, 10**6)),
        ("starts", lambda a: a.__setitem__(2, 25)),  # its 12 tokens run past the shard's 29
    ],
)
def test_a_cache_file_that_does_not_fit_the_shards_is_built_again(tmp_path, array, damage):
    """The cached arrays were trusted once they read back as integers of the right length:
    a stale or damaged one gave wrong samples, or an IndexError deep in a worker."""
    write_shard(tmp_path / "a", [np.arange(n, dtype=np.int32) for n in (10, 7, 12)])
    expected = [TokenDataset(tmp_path, seq_len=3, seed=1)[k]["input_ids"] for k in range(9)]
    (cached,) = (tmp_path / CACHE_DIRNAME).glob(f"*-{array}.npy")
    values = np.load(cached)
    damage(values)
    np.save(cached, values)
    with pytest.warns(UserWarning, match=rf"loader cache {re.escape(str(cached))} does not fit the shards \("):
        dataset = TokenDataset(tmp_path, seq_len=3, seed=1)
    assert all(torch.equal(dataset[k]["input_ids"], expected[k]) for k in range(9))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # saved again whole: the next open trusts it
        TokenDataset(tmp_path, seq_len=3, seed=1)


def test_changed_shards_get_a_new_index(tmp_path):
    write_shard(tmp_path / "a", [np.arange(10, dtype=np.int32)])
    assert len(TokenDataset(tmp_path, seq_len=3)) == 3
    write_shard(tmp_path / "b", [np.arange(20, dtype=np.int32)])
    assert len(TokenDataset(tmp_path, seq_len=3)) == 9


def test_dataset_pickles_without_its_arrays(corpus):
    path, _ = corpus
    dataset = TokenDataset(path, seq_len=8)
    dataset[0]
    blob = pickle.dumps(dataset)
    assert len(blob) < 10_000
    again = pickle.loads(blob)
    assert torch.equal(again[3]["input_ids"], dataset[3]["input_ids"])


def test_numpy_side_does_not_import_torch():
    code = (
        "import sys, pipeline.loader, pipeline.loader.order, pipeline.loader.windows, "
        "pipeline.loader.sampler, pipeline.loader.corpus; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _ddp_worker(rank: int, world: int, path: str, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    dataset = TokenDataset(path, seq_len=8, seed=0)
    loader = build_dataloader(dataset, 2, rank=rank, world_size=world, num_workers=1, prefetch_factor=2)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Embedding(2**16, 8), torch.nn.Linear(8, 2**16))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mine, losses = [], []
    for step, batch in enumerate(loader):
        logits = model(batch["input_ids"] % 2**16)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten() % 2**16)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mine.extend(batch["sample_index"].tolist())
        losses.append(loss.item())
        if step == 2:
            break
    gathered = [None] * world
    dist.all_gather_object(gathered, {"samples": mine, "losses": losses, "state": loader.state_dict()})
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


@pytest.mark.slow  # spawning two ranks imports torch twice and builds DDP: ~40 s on 2 CPUs
def test_two_process_ddp_smoke_on_cpu(corpus, tmp_path):
    import socket

    import torch.multiprocessing as mp

    path, _ = corpus
    TokenDataset(path, seq_len=8, seed=0)  # build the cache once, as a launcher would
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp.json"
    mp.spawn(_ddp_worker, args=(2, str(path), port, str(out)), nprocs=2, join=True)
    results = json.loads(out.read_text())
    samples = [r["samples"] for r in results]
    assert all(len(s) == 6 for s in samples) and not set(samples[0]) & set(samples[1])
    assert all(np.isfinite(r["losses"]).all() for r in results)
    assert results[0]["state"] == results[1]["state"] and results[0]["state"]["samples"] == 3 * 2 * 2


def test_mixture_folder_order_is_followed(corpus, tmp_path):
    """A ``prep mix`` folder: mix.json lists sources and shards, two arrays the order."""
    path, docs = corpus
    sources = {}
    for name in ("web", "code"):  # the mixture's own source order, not the folder order
        shards = sorted(str(p.with_suffix("")) for p in (path / "tokens" / name).glob("*.idx"))
        sources[name] = {"shards": shards}
    mix = tmp_path / "mix"
    mix.mkdir()
    source = np.array([1, 0, 0, 1, 0], dtype=np.uint16)  # code, web, web, code, web
    document = np.array([3, 26, 0, 3, 5], dtype=np.int64)
    np.save(mix / "order_source.npy", source)
    np.save(mix / "order_document.npy", document)
    (mix / "mix.json").write_text(
        json.dumps(
            {
                "format": "prep-mix",
                "version": 1,
                "sources": sources,
                "order": {"source": "order_source.npy", "document": "order_document.npy"},
            }
        )
    )
    dataset = TokenDataset(mix, seq_len=4, shuffle_block=1)
    # The corpus fixture numbers code (18 documents) before web.
    global_ids = np.where(source == 0, 18 + document, document)
    stream, doc_starts = expected_stream(docs, global_ids)
    batches = all_batches(build_dataloader(dataset, 2, num_workers=0, drop_last=False))
    assert sample_ids(batches) == list(range(len(dataset)))
    for batch in batches:
        check_batch(batch, stream, doc_starts, 4)
    described = json.loads((mix / "mix.json").read_text())
    described["sources"]["web"]["tokens_used"] = -5  # read as a count, as every reader of mix.json does
    (mix / "mix.json").write_text(json.dumps(described))
    said = f"{mix / 'mix.json'}: sources.web.tokens_used is -5, expected a count"
    with pytest.raises(ValueError, match=re.escape(said)):
        TokenDataset(mix, seq_len=4, shuffle_block=1)


# -- a mixture's shares in training order ------------------------------------------------


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    """``prep mix``'s library on token shards: --code 0.25 --math 0.08 (web the rest), 8M
    tokens, documents of 50-4,000 tokens (``tests/test_mix.py``'s fixture, half the size)."""
    return make_mixture(tmp_path_factory.mktemp("mixture"), 8_000_000, source_lengths(scale=0.5))


def test_a_mixture_read_in_training_order_holds_its_shares_in_every_1m_window(mixture):
    """Shares per 1M tokens of what the loader delivers, counted from the mixture's own
    files (``order_source.npy`` and the shards' sizes), never from the loader's internals."""
    dataset = TokenDataset(mixture, seq_len=1024, seed=0)
    windows = training_windows(dataset, batch_size=8)
    assert len(windows) * 1024 > 7 * SHARE_WINDOW_TOKENS
    targets, sources = target_shares(mixture), stream_sources(mixture)
    names = list(targets)
    assert targets == pytest.approx({"code": 0.25, "math": 0.08, "web": 0.67})

    def worst_points(order):
        aligned, sliding = training_counts(sources, order, 1024, len(names))
        return max(worst(aligned, names, targets, SHARE_WINDOW_TOKENS).values()), max(
            worst(sliding, names, targets, SHARE_WINDOW_TOKENS).values()
        )

    aligned, sliding = worst_points(windows)
    assert aligned <= 0.25 and sliding <= 0.25, (aligned, sliding)  # 0.14 and 0.20 when written
    # The same data under the former plain shuffle in blocks of 4,096 windows drifts by points.
    before = WindowOrder(len(dataset), 0, 4096).span(0, len(windows))
    assert min(worst_points(before)) > 1.0
    # Curriculum order beyond the share window: no window leaves its 1M tokens of the stream.
    positions = np.arange(len(windows))
    assert np.array_equal(positions * 1024 // SHARE_WINDOW_TOKENS, windows * 1024 // SHARE_WINDOW_TOKENS)
    # Two ranks deliver the same global order, and so does a dataset opened afresh.
    again = TokenDataset(mixture, seq_len=1024, seed=0)
    assert np.array_equal(training_windows(again, batch_size=4, world_size=2), windows)
    # A window's kind does not depend on its place in its block: documents per window alike
    # in the first and last tenth of the blocks.
    starts = np.unique(np.asarray(dataset.stream.cumulative))
    begin = windows * 1024
    pieces = np.searchsorted(starts, begin + 1024, "left") - np.searchsorted(starts, begin, "right")
    order = dataset.window_order()
    block = positions * 1024 // SHARE_WINDOW_TOKENS
    first, end = (np.array([order.block_start(b) for b in block + k]) for k in (0, 1))
    tenth = (positions - first) * 10 // (end - first)
    assert abs(pieces[tenth == 0].mean() - pieces[tenth >= 9].mean()) < 0.1


def test_window_order_starts_anywhere_and_is_a_permutation_of_each_block(mixture, corpus):
    dataset = TokenDataset(mixture, seq_len=1024, seed=3)
    # What the order balances: each source's tokens per window, as the mixture's files say.
    per_token = stream_sources(mixture)[: len(dataset) * 1024].reshape(-1, 1024)
    counts = np.stack([(per_token == s).sum(axis=1) for s in range(3)], axis=1)
    assert np.array_equal(dataset.window_order().sources(0, len(dataset)), counts)
    full = dataset.window_order().span(0, len(dataset))
    assert sorted(full.tolist()) == list(range(len(dataset)))
    rng = np.random.default_rng(0)
    for start, stop in [(0, 1), (976, 978), (len(dataset) - 5, len(dataset))] + [
        tuple(sorted(rng.integers(0, len(dataset), 2))) for _ in range(5)
    ]:
        assert np.array_equal(dataset.window_order().span(start, stop), full[start:stop]), (start, stop)
    # Another seed, another order; shuffle_block sets blocks of that many windows, still balanced.
    assert not np.array_equal(TokenDataset(mixture, seq_len=1024, seed=4).window_order().span(0, 977), full[:977])
    blocks = TokenDataset(mixture, seq_len=1024, seed=3, shuffle_block=100).window_order().span(0, 1000)
    assert np.array_equal(np.sort(blocks.reshape(10, 100), axis=1), np.arange(1000).reshape(10, 100))
    # One source: nothing to balance, exactly the seeded permutation of each block.
    path, _ = corpus
    single = TokenDataset(path / "tokens" / "web", seq_len=2, seed=5, shuffle_block=16)
    plain = WindowOrder(len(single), 5, 16).span(0, len(single))
    assert np.array_equal(single.window_order().span(0, len(single)), plain)


@settings(max_examples=30, deadline=None)
@given(
    size=st.integers(1, 60),
    sources=st.integers(1, 4),
    seq_len=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_balanced_order_is_a_permutation_and_leaves_one_source_alone(size, sources, seq_len, seed):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, seq_len + 1, (size, sources - 1)), axis=1)
    tokens = np.diff(np.concatenate([np.zeros((size, 1), int), cuts, np.full((size, 1), seq_len)], axis=1), axis=1)
    shuffled = rng.permutation(size)
    order = balanced_order(tokens, shuffled)
    assert sorted(order.tolist()) == list(range(size))
    assert np.array_equal(balanced_order(tokens, shuffled), order)
    if sources == 1:
        assert np.array_equal(order, shuffled)


def batch_digest(batch: dict) -> tuple:
    """What a batch is, small: its window ids and a hash of its tensors."""
    h = hashlib.sha256()
    for key in ("input_ids", "labels", "position_ids", "cu_seqlens"):
        h.update(batch[key].numpy().tobytes())
    return tuple(batch["sample_index"].tolist()), h.hexdigest()


def test_resume_from_a_middle_step_of_a_mixture_gives_the_same_stream(mixture):
    dataset = TokenDataset(mixture, seq_len=1024, seed=1)

    def make():
        return build_dataloader(dataset, 8, rank=1, world_size=2, num_workers=2, prefetch_factor=2, batches_per_fetch=3)

    reference = [batch_digest(b) for b in make()]
    global_order = dataset.window_order().span(0, len(reference) * 16)
    assert [i for ids, _ in reference for i in ids] == global_order.reshape(-1, 2, 8)[:, 1].ravel().tolist()
    # Resume at the first step, inside a block, at a step whose batches straddle two blocks
    # (positions 2928-2943; block 3 starts at 2930), and late in the pass.
    for stop in (1, 100, 183, len(reference) - 3):
        first = make()
        resumed = []
        for step, batch in enumerate(first):
            resumed.append(batch_digest(batch))
            if step + 1 == stop:
                break
        state = json.loads(json.dumps(first.state_dict()))
        del first
        second = make()
        second.load_state_dict(state)
        resumed.extend(batch_digest(b) for b in second)
        assert resumed == reference, stop
