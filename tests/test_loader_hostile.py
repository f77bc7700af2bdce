"""The loader under hostile conditions: shards that change while it reads them, loader
states that were edited or damaged, and datasets or ranks that would yield nothing.

A ``.bin`` cut short under a memory map kills the reading process with SIGBUS, so those
reads run in a subprocess: it must end with a ``ShardError`` naming the file (exit 1),
never by the signal (exit 135) or with torch's "worker exited unexpectedly".
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import remove_shards
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.token_shards import ShardError, ShardWriter, sidecar_path, write_index, write_sidecar
from pipeline.loader import ShardCorpus, TokenDataset, build_dataloader
from pipeline.loader.state import STATE_KEYS

REPO = Path(__file__).resolve().parents[1]


def write_shard(prefix: Path, docs: int, length: int, first: int = 1) -> None:
    """``docs`` documents of ``length`` int32 tokens, numbered from ``first``."""
    writer = ShardWriter(f"{prefix}.bin", f"{prefix}.idx", np.int32)
    writer.add_documents(np.arange(first, first + docs * length, dtype=np.int32), np.full(docs, length))
    writer.close()


def batches(loader) -> list[torch.Tensor]:
    return [batch["input_ids"].clone() for batch in loader]


# -- a shard that changes under the loader ------------------------------------------------

# Reads a batch, then truncates the .bin (as another process might) and reads on.
TRUNCATE_WHILE_READING = """
import os, sys
import numpy as np
from pipeline.formats.token_shards import ShardWriter
from pipeline.loader import TokenDataset, build_dataloader

folder, workers, worker_check = sys.argv[1], int(sys.argv[2]), sys.argv[3]
writer = ShardWriter(f"{folder}/s.bin", f"{folder}/s.idx", np.int32)
writer.add_documents(np.arange(1_000_000, dtype=np.int32), np.full(1000, 1000))
writer.close()


def without_the_check(worker_id):
    # A truncation that lands after a worker's check, during its read.
    from pipeline.formats.indexed_shard import ShardBin
    ShardBin.check = lambda self: None


init = without_the_check if worker_check == "off" else None
loader = build_dataloader(TokenDataset(folder, seq_len=64), 4, num_workers=workers, worker_init_fn=init)
iterator = iter(loader)
next(iterator)
os.truncate(f"{folder}/s.bin", 4096)
for batch in iterator:
    pass
"""


@pytest.mark.parametrize(
    "workers, worker_check",
    [(0, "on"), (2, "on"), (2, "off")],
    ids=["in-process", "workers", "worker-killed-mid-read"],
)
def test_a_bin_truncated_while_read_is_a_shard_error_naming_it_never_sigbus(tmp_path, workers, worker_check):
    script = tmp_path / "read.py"
    script.write_text(TRUNCATE_WHILE_READING)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(workers), worker_check],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert last.startswith(f"pipeline.formats.token_shards.ShardError: {tmp_path}/s.bin: 4096 bytes"), last
    assert "exited unexpectedly" not in done.stderr and "Caught ShardError" not in done.stderr


def test_a_bin_that_grew_under_the_loader_is_refused(tmp_path):
    write_shard(tmp_path / "s", 50, 100)
    iterator = iter(build_dataloader(TokenDataset(tmp_path, seq_len=16), 2, num_workers=0, batches_per_fetch=1))
    next(iterator)
    with open(tmp_path / "s.bin", "ab") as f:
        f.write(b"\0" * 64)
    with pytest.raises(ShardError, match=r"s\.bin: 20064 bytes.*changed after the shard was opened"):
        next(iterator)


class InOrder:
    """Documents in corpus order: shard ``a``'s windows first."""

    def key(self) -> str:
        return "in-order"

    def build(self, corpus: ShardCorpus) -> np.ndarray:
        return np.arange(corpus.num_documents)


def test_a_bin_replaced_by_rename_is_read_on_if_mapped_and_refused_if_not(tmp_path):
    for name, first in (("a", 1), ("b", 10_000)):
        write_shard(tmp_path / name, 20, 50, first)
    reference = batches(
        build_dataloader(TokenDataset(tmp_path, 16, order=InOrder(), shuffle_block=1), 2, num_workers=0)
    )
    dataset = TokenDataset(tmp_path, 16, order=InOrder(), shuffle_block=1)
    iterator = iter(build_dataloader(dataset, 2, num_workers=0, batches_per_fetch=1))
    seen = [next(iterator)["input_ids"].clone()]
    mapped = set(dataset.corpus._bins)
    for name in ("a", "b"):  # a file of the same size, other tokens, under each shard's name
        write_shard(tmp_path / "new", 20, 50, 50_000)
        os.replace(tmp_path / "new.bin", tmp_path / f"{name}.bin")
    assert len(mapped) == 1, "the first batch comes from one shard"
    with pytest.raises(ShardError, match=r"\.bin: replaced or written since the shard was opened"):
        for batch in iterator:  # the mapped shard's old file is read on, then the other is refused
            seen.append(batch["input_ids"].clone())
    assert all(torch.equal(a, b) for a, b in zip(seen, reference)) and len(seen) > 1


def test_an_idx_truncated_after_open_is_never_read_again_or_refused_by_name(tmp_path):
    write_shard(tmp_path / "s", 30, 40)
    reference = batches(build_dataloader(TokenDataset(tmp_path, seq_len=16), 2, num_workers=0))
    dataset = TokenDataset(tmp_path, seq_len=16)
    (tmp_path / "not-a-folder").write_text("")
    uncached = TokenDataset(tmp_path, seq_len=16, cache_dir=tmp_path / "not-a-folder" / "cache")
    os.truncate(tmp_path / "s.idx", 40)
    for workers in (0, 2):  # the arrays come from the open's cache
        loaded = batches(build_dataloader(dataset, 2, num_workers=workers))
        assert all(torch.equal(a, b) for a, b in zip(loaded, reference)) and len(loaded) == len(reference)
    # A process without that cache (a spawned worker) opens the shard again: the truncation is named.
    with pytest.raises(ShardError, match=r"s\.idx: index is 40 bytes"):
        pickle.loads(pickle.dumps(uncached.corpus))


def test_an_idx_rewritten_with_other_documents_is_refused_where_it_is_read_again(tmp_path):
    write_shard(tmp_path / "s", 30, 40)
    (tmp_path / "not-a-folder").write_text("")
    corpus = ShardCorpus(tmp_path, cache_dir=tmp_path / "not-a-folder" / "cache")
    write_index(tmp_path / "s.idx", np.int32, np.full(40, 30))  # the same tokens, 40 documents
    with pytest.raises(ShardError, match=r"s\.idx: now lists 40 documents .* but 30 documents"):
        pickle.loads(pickle.dumps(corpus))


# -- loader states ----------------------------------------------------------------------


@pytest.fixture
def loader(tmp_path):
    write_shard(tmp_path / "s", 40, 30)
    return build_dataloader(TokenDataset(tmp_path, seq_len=8, seed=3, epochs=2), 2, num_workers=0)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("epoch", -5, "epoch is -5, below its least value 0"),
        ("epoch", 1e20, "epoch must be an integer, not float 1e+20"),
        ("samples", 2.0, "samples must be an integer, not float"),
        ("samples", "4", "samples must be an integer, not str"),
        ("samples", True, "samples must be an integer, not bool"),
        ("samples", -1, "samples is -1, below"),
        ("samples", 10**6, "samples consumed, outside 0"),
        ("world_size", 0, "world_size is 0, below its least value 1"),
        ("batch_size", None, "batch_size must be an integer, not NoneType"),
        ("version", True, "version must be an integer, not bool"),
        ("version", 2, "unsupported loader state version 2"),
        ("dataset", 7, "dataset must be a string, not int"),
        ("seed", 4, "other data: seed 4 != 3"),
    ],
)
def test_a_bad_value_in_a_state_is_refused_naming_its_key(loader, key, value, message):
    state = {**loader.state_dict(), key: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        loader.load_state_dict(state)


@pytest.mark.parametrize("key", [key for key in STATE_KEYS if key != "window_order"])
def test_a_missing_key_is_named(loader, key):
    state = {k: v for k, v in loader.state_dict().items() if k != key}
    with pytest.raises(ValueError, match=f"loader state has no '{key}'"):
        loader.load_state_dict(state)


def test_an_unknown_key_or_a_state_that_is_no_dict_is_refused(loader):
    with pytest.raises(ValueError, match="unknown key 'step'"):
        loader.load_state_dict({**loader.state_dict(), "step": 3})
    with pytest.raises(ValueError, match="loader state must be a dict, not list"):
        loader.load_state_dict([1, 2])


def test_a_refused_state_leaves_the_loader_where_it_was(loader):
    iterator = iter(loader)
    next(iterator)
    before = loader.state_dict()
    with pytest.raises(ValueError):
        loader.load_state_dict({**before, "epoch": -1})
    assert loader.state_dict() == before


def test_a_state_of_another_world_and_batch_size_is_accepted(loader):
    state = {**loader.state_dict(), "world_size": 5, "batch_size": 7, "samples": 12, "epoch": 1}
    loader.load_state_dict(state)
    assert {k: loader.state_dict()[k] for k in ("samples", "epoch")} == {"samples": 12, "epoch": 1}


NOT_AN_INT = st.one_of(st.floats(), st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(), max_size=2))
NOT_A_STR = st.one_of(st.integers(), st.floats(), st.booleans(), st.none())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.integers(0, 20),
    key=st.sampled_from(sorted(STATE_KEYS)),
    data=st.data(),
)
def test_states_round_trip_and_every_mutation_is_refused_by_key(loader, steps, key, data):
    loader.load_state_dict({**loader.state_dict(), "epoch": 0, "samples": 0})
    iterator = iter(loader)
    for _ in range(min(steps, len(loader))):
        next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    loader.load_state_dict(state)
    assert loader.state_dict() == state
    if STATE_KEYS[key] is None:
        bad = data.draw(NOT_A_STR)
    else:
        bad = data.draw(st.one_of(NOT_AN_INT, st.integers(max_value=STATE_KEYS[key] - 1)))
    with pytest.raises(ValueError, match=key):
        loader.load_state_dict({**state, key: bad})
    assert loader.state_dict() == state


# -- datasets and ranks with nothing to yield -----------------------------------------------


def test_a_seq_len_longer_than_the_stream_is_refused_naming_both(tmp_path):
    write_shard(tmp_path / "s", 3, 10)
    with pytest.raises(ValueError, match="no window of seq_len 30 fits: a window takes 31 tokens, .* holds 30"):
        TokenDataset(tmp_path, seq_len=30)
    assert len(TokenDataset(tmp_path, seq_len=30, epochs=2)) == 1  # two passes make one window


@pytest.mark.parametrize(
    "option, value, least",
    [
        ("seed", -1, 0),
        ("seed", 1.5, 0),
        ("seed", True, 0),
        ("seq_len", 4.0, 1),
        ("seq_len", True, 1),
        ("seq_len", 0, 1),
        ("epochs", 2.0, 1),
        ("shuffle_block", -5, 1),
        ("shuffle_block", 2.5, 1),
    ],
)
def test_a_count_that_is_no_whole_number_in_range_is_refused_naming_it(tmp_path, option, value, least):
    """A negative seed failed inside numpy's generator, a float seq_len or epochs deep in
    numpy or range(), True served windows of 1 token, a negative shuffle_block meant
    stream order: each with no word of the option at fault."""
    write_shard(tmp_path / "s", 3, 10)
    with pytest.raises(ValueError, match=rf"^{option} must be an integer of at least {least}, not {value!r}$"):
        TokenDataset(tmp_path, **{"seq_len": 4, option: value})


@pytest.mark.parametrize(
    "option, value, least",
    [("batch_size", 2.0, 1), ("world_size", 2.0, 1), ("rank", True, 0), ("rank", -1, 0), ("batches_per_fetch", 1.5, 1)],
)
def test_a_loader_count_that_is_no_whole_number_in_range_is_refused_naming_it(tmp_path, option, value, least):
    """A float batch_size, world_size or batches_per_fetch failed in range() with a
    TypeError; rank=True served rank 1."""
    write_shard(tmp_path / "s", 10, 10)
    options = {"batch_size": 2, "rank": 0, "world_size": 2, option: value}
    with pytest.raises(ValueError, match=rf"^{option} must be an integer of at least {least}, not {value!r}$"):
        build_dataloader(TokenDataset(tmp_path, seq_len=4), num_workers=0, **options)


@pytest.mark.parametrize(
    "drop_last, rank, message",
    [
        (True, 0, "rank 0 would get no batch: 9 windows of seq_len 3 make no full round of 2 batches of 5"),
        (False, 1, "rank 1 would get no batch: 9 windows of seq_len 3 make 1 batches of 9, fewer than the world"),
    ],
)
def test_a_rank_that_would_get_no_batch_is_refused_naming_it(tmp_path, drop_last, rank, message):
    write_shard(tmp_path / "s", 4, 7)  # 28 tokens: 9 windows of 3
    dataset = TokenDataset(tmp_path, seq_len=3)
    batch_size = 5 if drop_last else 9
    with pytest.raises(ValueError, match=message):
        build_dataloader(dataset, batch_size, rank=rank, world_size=2, num_workers=0, drop_last=drop_last)
    if not drop_last:  # rank 0 has its batch
        assert len(build_dataloader(dataset, 9, rank=0, world_size=2, num_workers=0, drop_last=False)) == 1


# -- shards of different tokenizers --------------------------------------------------------


def write_sidecar_of(prefix: Path, docs: int, length: int, vocab: str) -> None:
    """A sidecar saying the shard of ``write_shard`` was made by tokenizer ``vocab``."""
    bin_sha256 = hashlib.sha256(Path(f"{prefix}.bin").read_bytes()).hexdigest()
    meta = {"format": "prep.token_shard", "version": 1, "tokenizer": vocab, "tokenizer_spec": vocab}
    meta |= {"vocab_size": 1 << 16, "vocab_sha256": vocab * 8, "eod_id": 0, "bos_id": None, "dtype": "int32"}
    write_sidecar(sidecar_path(prefix), meta | {"documents": docs, "tokens": docs * length, "bin_sha256": bin_sha256})


def test_sources_of_different_tokenizers_are_refused_naming_the_shard(tmp_path):
    """A tokens folder whose sources were tokenized differently (one copied in from another
    run) used to load, serving one source's ids as ids of the other's vocabulary."""
    for source, vocab in (("code", "aaaa"), ("web", "bbbb")):
        (tmp_path / source).mkdir()
        write_shard(tmp_path / source / "s", 10, 100)
        write_sidecar_of(tmp_path / source / "s", 10, 100, vocab)
    with pytest.raises(ShardError, match=r"^\S*web/s\.json was made by tokenizer 'bbbb', not 'aaaa'"):
        TokenDataset(tmp_path, seq_len=16)
    write_sidecar_of(tmp_path / "web" / "s", 10, 100, "aaaa")
    assert len(TokenDataset(tmp_path, seq_len=16)) == (2000 - 1) // 16


@pytest.mark.parametrize("removed", ["one shard", "the source's folder"])
def test_a_finished_run_missing_shards_its_manifest_counts_is_refused(tmp_path, removed):
    """Given a run folder, the loader read the shards it found: a source whose shards were
    removed after the run, or its whole tokens/<source>/, was trained on without a word,
    its share going to the others. It now asks the run's manifest, as prep mix does."""
    from benchmarks.mix_stream import make_run
    from pipeline.formats.layout import Layout

    run = make_run(tmp_path / "run", {"web": [np.full(40, 30), np.full(30, 30)], "code": [np.full(25, 40)]})
    manifest = {"stages": {"tokenize": {"by_source": {"web": {"output": 70}, "code": {"output": 25}}}}}
    Layout(run).manifest.write_text(json.dumps(manifest))
    assert ShardCorpus(run, cache_dir=tmp_path / "cache").num_documents == 95
    web = run / "tokens" / "web"
    remove_shards(web, removed)
    with pytest.raises(ShardError) as error:
        ShardCorpus(run, cache_dir=tmp_path / "cache")
    held = 30 if removed == "one shard" else 0
    assert str(error.value) == (
        f"{web}: its shards hold {held:,} documents, but {Layout(run).manifest} counts 70 tokenized: shards "
        "removed or replaced since the run finished; run its config into it again (prep run says whether it can "
        "redo them alone)"
    )
