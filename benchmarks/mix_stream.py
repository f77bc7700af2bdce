"""The mixture the model sees: each source's share of the loader's stream, read in training
order, in every 1M-token window.

    python -m benchmarks.mix_stream [--tokens 20M] [--seq-len 1024] [--batch 8] [--world 1]
                                    [--lengths uniform|lognormal] [--shuffle-block N] [--workdir DIR]

Data: token shards of three sources written with prep's shard format (sidecar and docs
file, so ``prep mix``'s library takes them as a run), by default with the document
lengths of ``tests/test_mix.py``'s fixture (web 200-3000 tokens, code 100-4000, math
50-800; ``lognormal``: heavier tails, up to 16K tokens). The mixture is planned and
written by ``pipeline.mix`` (``--code 0.25 --math 0.08``, the rest web) and read by
``TokenDataset`` + ``build_dataloader`` exactly as a training job would: ``--world``
ranks of ``--batch`` windows, their batches put back in global step order.

Shares are counted from the mixture's own files, not from the loader's internals: the
source of every stream position comes from ``order_source.npy`` and the shards' ``.idx``
sizes; the loader only says which window (``sample_index``) it delivered when. The
training stream is the delivered windows' input tokens back to back; a 1M-token window
that cuts a sample, or a sample that holds several documents, counts tokens by source.

Printed per source, worst distance from its share in points: in aligned 1M-token windows
(starting at multiples of 1M tokens, as ``pipeline.mix.order.window_shares`` counts the
plan) and in sliding ones (one starting at every sample), for the stream in plain order
(the plan as the loader lays it out, no shuffle), for the shuffle the loader had before
(a plain seeded shuffle inside blocks of 4,096 windows, ``WindowOrder`` without source
counts: the same order, window for window) and for the loader's training order. Also
printed: how far a window moved from its place in the stream, and the document pieces
per window at each tenth of the shuffle blocks (a shuffle that put windows of one kind
early in its blocks would show here).

Measured (default arguments: 20M tokens, seq_len 1024, 8 windows per batch, seed 0):

    worst distance from share, points        code al/sl     math al/sl      web al/sl
    stream order (the plan)               0.182/0.328     0.046/0.093     0.160/0.302
    plain shuffle, 4,096 (before)         2.551/3.281     0.983/1.204     2.569/3.426
    training order (loader)               0.188/0.301     0.054/0.145     0.164/0.268

Seeds 1-4 of the former shuffle: 1.7 to 3.5 points aligned; of the loader's: 0.19 aligned,
0.27-0.28 sliding. ``--seq-len 2048``: 0.21/0.36 (the plan 0.18/0.33); ``--seq-len 512``:
0.16/0.21. ``--lengths lognormal`` (documents up to 16K tokens): the plan itself is off by
0.55/0.92, the loader's order by 0.55/0.63.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.mix import MixLayout
from pipeline.formats.token_shards import SIDECAR_FORMAT, SIDECAR_VERSION, ShardWriter, docs_path, sidecar_path
from pipeline.mix.build import plan_mixture
from pipeline.mix.output import write_mix
from pipeline.mix.plan import parse_tokens

WEIGHTS = {"code": 0.25, "math": 0.08}
SHARE_WINDOW = 1_000_000
SIDECAR = {
    "format": SIDECAR_FORMAT,
    "version": SIDECAR_VERSION,
    "tokenizer": "cl100k_base",
    "vocab_size": 100277,
    "vocab_sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "eod_id": 100257,
    "bos_id": None,
    "dtype": "int32",
}


def source_lengths(kind: str = "uniform", seed: int = 1, scale: float = 1.0) -> dict[str, list[np.ndarray]]:
    """Document lengths per source and shard: ``tests/test_mix.py``'s fixture (about 17.6M
    tokens), or heavier tails; ``scale`` multiplies the number of documents."""
    rng = np.random.default_rng(seed)

    def count(n: int) -> int:
        return max(1, int(n * scale))

    if kind == "uniform":
        return {
            "web": [rng.integers(200, 3000, count(4000)), rng.integers(200, 3000, count(3000))],
            "code": [rng.integers(100, 4000, count(2500))],
            "math": [rng.integers(50, 800, count(3000))],
        }
    if kind == "lognormal":

        def draw(n: int, mu: float) -> np.ndarray:
            return np.clip(rng.lognormal(mu, 1.0, count(n)), 16, 16384).astype(np.int64)

        return {"web": [draw(3500, 6.9), draw(3500, 6.9)], "code": [draw(2500, 7.0)], "math": [draw(3000, 5.6)]}
    raise ValueError(f"unknown length distribution {kind!r}")


def make_run(root: Path, sizes: dict[str, list[np.ndarray]], seed: int = 0, sidecar: dict = SIDECAR) -> Path:
    """A run folder with tokens/<source>/<shard>.{bin,idx,json,docs.parquet}: random tokens
    and a random ``quality_score`` per document (tests/test_mix.py builds its runs here too)."""
    rng = np.random.default_rng(seed)
    for source, shards in sizes.items():
        folder = root / "tokens" / source
        folder.mkdir(parents=True, exist_ok=True)
        for k, lengths in enumerate(shards):
            prefix = folder / f"{k:05d}-part"
            writer = ShardWriter(str(prefix) + ".bin", str(prefix) + ".idx", np.int32)
            writer.add_documents(rng.integers(0, 1000, int(lengths.sum())), lengths)
            writer.close()
            ids = [f"{source}-{k}-{i}" for i in range(len(lengths))]
            quality = rng.random(len(lengths))
            pq.write_table(
                pa.table({"id": ids, "source": [source] * len(ids), "n_tokens": lengths, "quality_score": quality}),
                docs_path(prefix),
            )
            meta = {**sidecar, "documents": len(lengths), "tokens": int(lengths.sum())}
            sidecar_path(prefix).write_text(json.dumps(meta))
    return root


def make_mixture(
    root: Path, budget: int, lengths: dict[str, list[np.ndarray]], weights: dict = WEIGHTS, seed: int = 0
) -> Path:
    """Shards under ``root/run``, a mixture of them under ``root/mix``, as ``prep mix`` makes it."""
    run = make_run(root / "run", lengths)
    description, order = plan_mixture([run], weights, budget=budget, seed=seed)
    write_mix(root / "mix", description, order)
    return root / "mix"


def target_shares(mix_dir: Path) -> dict[str, float]:
    """Each source's weight in the mixture's (first) phase."""
    description = json.loads(MixLayout(mix_dir).manifest.read_text())
    return {name: source["weights"][0] for name, source in description["sources"].items()}


def stream_sources(mix_dir: Path) -> np.ndarray:
    """The source number of every token of the mixture's stream (documents end to end)."""
    folder = MixLayout(mix_dir)
    description = json.loads(folder.manifest.read_text())
    sizes = [
        np.concatenate([IndexedShard(prefix).sizes.astype(np.int64) for prefix in source["shards"]])
        for source in description["sources"].values()
    ]
    source = np.load(folder.order_source).astype(np.int64)
    document = np.load(folder.order_document)
    length = np.zeros(len(source), dtype=np.int64)
    for index, per_document in enumerate(sizes):
        mine = source == index
        length[mine] = per_document[document[mine]]
    return np.repeat(source.astype(np.uint8), length)


def training_windows(dataset, batch_size: int, world_size: int = 1) -> np.ndarray:
    """Window ids as the loader delivers them, the ranks' batches in global step order."""
    from pipeline.loader import build_dataloader

    per_rank = []
    for rank in range(world_size):
        loader = build_dataloader(dataset, batch_size, rank=rank, world_size=world_size, num_workers=0)
        per_rank.append([batch["sample_index"].numpy().copy() for batch in loader])
    steps = zip(*per_rank)  # drop_last: every rank takes the same number of steps
    return np.concatenate([batch for step in steps for batch in step]).astype(np.int64)


def training_counts(
    sources: np.ndarray, windows: np.ndarray, seq_len: int, count: int, window_tokens: int = SHARE_WINDOW
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of each source in 1M-token windows of the training stream: (aligned, sliding).

    The training stream is the inputs of ``windows`` (``seq_len`` tokens each, stream
    positions ``w * seq_len ..``) back to back. Aligned windows start at multiples of
    ``window_tokens``; sliding ones at every sample. Rows: windows; columns: sources.
    """
    total = len(windows) * seq_len
    tokens = sources[: (int(windows.max()) + 1) * seq_len].reshape(-1, seq_len)[windows]  # training order
    per_window = np.stack([(tokens == s).sum(axis=1) for s in range(count)], axis=1)
    before = np.zeros((len(windows) + 1, count), dtype=np.int64)
    np.cumsum(per_window, axis=0, out=before[1:])

    def upto(t: np.ndarray) -> np.ndarray:
        """Tokens of each source in the first ``t`` tokens of the training stream."""
        j, r = np.divmod(t, seq_len)
        rows = tokens[np.minimum(j, len(windows) - 1)]
        cut = np.arange(seq_len)[None, :] < r[:, None]
        partial = np.stack([((rows == s) & cut).sum(axis=1) for s in range(count)], axis=1)
        return before[j] + partial

    edges = np.arange(total // window_tokens + 1, dtype=np.int64) * window_tokens
    aligned = np.diff(upto(edges), axis=0)
    starts = np.arange(0, total - window_tokens + 1, seq_len, dtype=np.int64)
    sliding = upto(starts + window_tokens) - before[starts // seq_len]
    return aligned, sliding


def worst(counts: np.ndarray, names: list[str], targets: dict[str, float], window_tokens: int) -> dict[str, float]:
    """Each source's largest distance from its share, in points."""
    shares = counts / window_tokens
    return {name: float(np.abs(shares[:, i] - targets[name]).max() * 100) for i, name in enumerate(names)}


def pieces_by_tenth(dataset, windows: np.ndarray) -> np.ndarray:
    """Mean document pieces per window at each tenth of its shuffle block, in training order:
    the shuffle should not put windows of one kind (many short documents) early in blocks."""
    order = dataset.window_order()
    cumulative = np.asarray(dataset.stream.cumulative)
    starts = np.unique(cumulative[:-1])  # where documents start (empty ones share a start)
    begin = np.arange(dataset.num_samples) * dataset.seq_len
    inside = np.searchsorted(starts, begin + dataset.seq_len, "left") - np.searchsorted(starts, begin, "right")
    pieces = inside + 1  # documents starting inside the window, plus the one it opens in
    position = np.arange(len(windows))
    block = np.array([order.block_of(p) for p in position])
    first = np.array([order.block_start(b) for b in range(block.max() + 2)])
    tenth = (position - first[block]) * 10 // (first[block + 1] - first[block])
    return np.array([pieces[windows[tenth == t]].mean() if (tenth == t).any() else np.nan for t in range(10)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="20M")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--lengths", choices=("uniform", "lognormal"), default="uniform")
    parser.add_argument("--shuffle-block", type=int, default=None, help="windows (default: the loader's)")
    parser.add_argument("--seed", type=int, default=0, help="the loader's seed")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    from pipeline.loader import TokenDataset
    from pipeline.loader.sampler import WindowOrder

    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        start = time.perf_counter()
        mix = make_mixture(root, parse_tokens(args.tokens), source_lengths(args.lengths))
        built = time.perf_counter() - start
        options = {} if args.shuffle_block is None else {"shuffle_block": args.shuffle_block}
        dataset = TokenDataset(mix, seq_len=args.seq_len, seed=args.seed, **options)
        start = time.perf_counter()
        windows = training_windows(dataset, args.batch, args.world)
        read = time.perf_counter() - start
        targets = target_shares(mix)
        names = list(targets)
        sources = stream_sources(mix)
        plain = np.arange(len(windows), dtype=np.int64)
        before = WindowOrder(len(dataset), args.seed, 4096).span(0, len(windows))
        rows = {}
        orders = (("stream order (the plan)", plain), ("plain shuffle, 4,096 (before)", before))
        for label, order in (*orders, ("training order (loader)", windows)):
            aligned, sliding = training_counts(sources, order, args.seq_len, len(names))
            rows[label] = (worst(aligned, names, targets, SHARE_WINDOW), worst(sliding, names, targets, SHARE_WINDOW))
        moved = np.abs(windows - np.arange(len(windows))).max() * args.seq_len
        tenths = pieces_by_tenth(dataset, windows)
    block = "1M-token share windows" if args.shuffle_block is None else f"{args.shuffle_block:,} windows"
    print(
        f"{dataset.stream.num_tokens:,} tokens ({args.lengths} lengths), seq_len {args.seq_len}, "
        f"{args.world} x {args.batch} windows per step, shuffle blocks: {block}; "
        f"{len(windows):,} windows read ({aligned.shape[0]} aligned 1M-token windows, {sliding.shape[0]:,} sliding)"
    )
    print(f"mixture built in {built:.1f} s, the pass read in {read:.1f} s")
    print(f"targets: {', '.join(f'{n} {targets[n]:.4f}' for n in names)}")
    print(f"{'worst distance from share, points':<36} " + " ".join(f"{n + ' al/sl':>14}" for n in names))
    for label, (al, sl) in rows.items():
        print(f"{label:<36} " + " ".join(f"{al[n]:>6.3f}/{sl[n]:<6.3f}  " for n in names))
    print(f"farthest a window moved from its stream place: {moved:,} tokens")
    print(f"document pieces per window, by tenth of the shuffle block: {' '.join(f'{x:.2f}' for x in tenths)}")


if __name__ == "__main__":
    main()
