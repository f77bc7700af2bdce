"""What a loader worker holds privately: no per-document table of its own, and nothing it
inherited copied by its garbage collector.

A worker gets the dataset pickled (the spawn and forkserver start methods, every DDP
rank) or forked. Either way the per-document tables (sizes, starts, the order, its
cumulative sizes) must be maps of cache files, shared through the page cache by every
process of the machine, never arrays built again in each process, even when the data sits
on a read-only disk. ``python -m benchmarks.loader`` measures the resulting memory.
"""

from __future__ import annotations

import gc
import mmap
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import torch
from test_loader import make_run

from pipeline.formats.scratch import LOADER_CACHE as CACHE_DIRNAME
from pipeline.loader import TokenDataset, build_dataloader


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file map (a view's chain of bases ends in one)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap)


def per_document_tables(dataset: TokenDataset) -> dict[str, np.ndarray]:
    corpus, stream = dataset.corpus, dataset.stream
    return {
        "sizes": corpus.document_sizes,
        "starts": corpus.document_starts,
        "order": stream.order,
        "cumulative": stream.cumulative,
    }


def a_worker_copy(dataset: TokenDataset) -> TokenDataset:
    """The dataset as a spawned worker or another rank receives it."""
    return pickle.loads(pickle.dumps(dataset))


def test_a_pickled_dataset_maps_its_tables_and_does_not_grow_with_the_corpus(tmp_path):
    rng = np.random.default_rng(3)
    small_docs = make_run(tmp_path / "small", rng, {"web": 1}, docs_per_shard=10, max_len=20)
    make_run(tmp_path / "large", rng, {"web": 2}, docs_per_shard=5_000, max_len=20)
    small, large = TokenDataset(tmp_path / "small", seq_len=8), TokenDataset(tmp_path / "large", seq_len=8)
    assert len(small_docs) == 10 and large.corpus.num_documents == 10_000
    # 10,000 documents more would be 280,000 bytes more if any table travelled.
    assert abs(len(pickle.dumps(large)) - len(pickle.dumps(small))) < 1_000
    copy = a_worker_copy(large)
    assert all(is_mapped(table) for table in per_document_tables(copy).values())
    assert torch.equal(copy[5]["input_ids"], large[5]["input_ids"])


def read_only_data(tmp_path, monkeypatch) -> Path:
    """A run folder whose shards' folder says it is read-only (tests run as root, who can
    write anywhere), with the temporary folder in ``tmp_path``."""
    make_run(tmp_path / "run", np.random.default_rng(4), {"code": 1, "web": 1}, docs_per_shard=20, max_len=30)
    data = tmp_path / "run" / "tokens"
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(data) else real_access(path, mode))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return data


def test_read_only_data_is_cached_in_the_temporary_folder_not_built_per_process(tmp_path, monkeypatch):
    data = read_only_data(tmp_path, monkeypatch)
    dataset = TokenDataset(data.parent, seq_len=8, seed=1)
    assert not (data / CACHE_DIRNAME).exists()
    assert dataset.corpus.cache_dir.is_relative_to(tmp_path / "tmp")
    assert len(list(dataset.corpus.cache_dir.glob("*.npy"))) == 4
    copy = a_worker_copy(dataset)
    assert all(is_mapped(table) for table in per_document_tables(copy).values())
    assert torch.equal(copy[2]["labels"], dataset[2]["labels"])


def test_a_temporary_cache_others_may_write_is_not_trusted(tmp_path, monkeypatch):
    data = read_only_data(tmp_path, monkeypatch)
    planted = tmp_path / "tmp" / f"prep-loader-cache-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    dataset = TokenDataset(data.parent, seq_len=8, seed=1)
    assert dataset.corpus.cache_dir is None and not list(planted.iterdir())
    assert not any(is_mapped(table) for table in per_document_tables(dataset).values())
    assert torch.equal(a_worker_copy(dataset)[2]["labels"], dataset[2]["labels"])


def test_workers_keep_what_they_inherited_out_of_their_garbage_collector(tmp_path):
    """A forked worker's full collection would write into every object it inherited, which
    copies the parent's pages; the loader freezes them (``gc.freeze``) as a worker starts."""
    make_run(tmp_path / "run", np.random.default_rng(5), {"web": 1}, docs_per_shard=30, max_len=20)
    dataset = TokenDataset(tmp_path / "run", seq_len=8)
    frozen = torch.zeros(2, dtype=torch.int64).share_memory_()

    def record(worker_id: int) -> None:  # runs after the loader's own worker set-up
        frozen[worker_id] = gc.get_freeze_count()

    loader = build_dataloader(dataset, 2, num_workers=2, pin_memory=False, worker_init_fn=record)
    batches = len(loader)
    assert batches and len(list(loader)) == batches
    assert frozen.min().item() > gc.get_freeze_count() + 1_000
