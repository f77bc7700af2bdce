"""How fast ``prep ablate`` trains, and how much of a step it waits for data: prep's loader vs a naive one.

    python -m benchmarks.ablate [--steps 400] [--workers 1] [--work /tmp/prep-bench-ablate]

Why: ``prep ablate`` ranks DATA by training a small model on each through prep's own
loader, so its tokens/s decides how many trials fit in an hour, and its data-wait share
says whether the loader or the model sets that pace. prep's loader does more per window
than slicing a flat token array (documents shuffled and packed, position ids, the
document mask they give); this measures what a trainer pays for it, if anything.

Data: ``web_gold.jsonl.gz`` (real web pages) through ``prep run`` with ``normalize`` and
``tokenize`` (cl100k_base), built once into ``--work`` (a rerun finds the run done and the
loader's index cached).

CPU, the ``tiny`` preset (adaptive softmax over the ids that occur, remapped in frequency
order by ``pipeline.ablate``'s ``Vocabulary``): ``--steps`` steps from the same
initialization through the same loop, ``run_trial``'s step (ids remapped, forward,
backward, clip at 1.0, fused AdamW, ``loss.item()``) at the preset's peak learning rate
(``run_trial``'s schedule changes no timing), fed by:
  (a) ``TokenDataset`` + ``build_dataloader`` as ``run_trial`` builds them: the run's
      documents less the held-out ones, shuffled and packed into windows, position ids
      that restart at each document, so attention stays inside documents;
  (b) a naive map-style ``Dataset``: windows of seq_len + 1 tokens sliced from an
      ``np.memmap`` of the run's tokens back to back, ``torch.utils.data.DataLoader`` with
      the default collate, shuffled, same batch size and workers; position ids
      0..seq_len-1 (plain causal attention, the same compute).
The two take turns, ``BLOCK`` steps each, so that a busy machine slows both alike.
Printed for each: tokens/s, ms per step, data-wait share (time in ``next()`` of the feed
over step time; the first step left out, as ``run_trial`` counts) and the loss of the last
steps; then (a)/(b) of tokens/s and of data-wait share.

GPU (only with CUDA): the ``gpt2-124m`` preset, bf16 autocast, ``GPU_STEPS`` steps fed by
(a): tokens/s, ms per step, data-wait share and MFU = 6 N tokens/s over the GPU's bf16
peak (N: the parameters in matrix products; peaks from ``pipeline.mix.estimate``). The
whole script stays under 5 minutes on an H200.

Measured (2 cores, nothing else running, the defaults; under 2 minutes):

    | (a) prep TokenDataset + build_dataloader | 15,882 tokens/s | 129.0 ms/step | data wait 0.27% |
    | (b) naive Dataset over np.memmap, DataLoader | 15,833 tokens/s | 129.3 ms/step | data wait 1.56% |
    prep / naive: tokens/s 1.00x, data-wait share 0.17x

Another quiet run: 19,652 against 18,637 tokens/s (1.05x), data wait 0.23% against 1.66%
(0.14x). The model sets the pace with either feed; prep's loader waits 6-7x less per step.
With other jobs on the same 2 cores the absolute figures fell up to 7x and the tokens/s
ratio wandered from 0.7x to 1.2x between runs, even taking turns (the data-wait ratio
stayed 0.10-0.15x): read tokens/s on a quiet machine. The GPU part is not measured yet.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from pipeline.ablate.data import AblationData, open_data
from pipeline.ablate.evalsets import Vocabulary
from pipeline.ablate.model import TinyGPT
from pipeline.ablate.presets import PRESETS, Preset
from pipeline.engine.run import run_pipeline
from pipeline.loader import TokenDataset, build_dataloader
from pipeline.mix.estimate import GPU_PEAK_FLOPS

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT = DATA / "web" / "web_gold.jsonl.gz"
CONFIG = """
[sources.web]
paths = ["{text}"]
[[stages]]
name = "normalize"
[[stages]]
name = "tokenize"
tokenizer = "cl100k_base"
"""
SEED = 0
HELD_OUT = 0.02  # prep ablate's default
LOSS_TAIL = 20  # steps averaged for the loss shown
BLOCK = 50  # CPU steps a feed takes before the other's turn
GPU_STEPS = 300

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # input_ids, position_ids, labels


def build_run(work: Path) -> tuple[AblationData, float]:
    """The tokenized run (built or resumed in ``work/run``) opened as ``prep ablate`` opens a DATA."""
    config = work / "ablate.toml"
    config.write_text(CONFIG.format(text=TEXT))
    start = time.perf_counter()
    run_pipeline(config, work / "run", quiet=True)
    built = time.perf_counter() - start
    return open_data(work / "run", "web_gold", HELD_OUT, work / "loader_cache"), built


def concatenated_tokens(data: AblationData, work: Path) -> np.memmap:
    """Every token of the run's shards back to back in one file, mapped."""
    shards = [data.corpus.shard_tokens(shard) for shard in range(len(data.corpus.prefixes))]
    path = work / "tokens.bin"
    if not path.exists() or path.stat().st_size != sum(shard.nbytes for shard in shards):
        with open(path, "wb") as f:
            for shard in shards:
                shard.tofile(f)
    return np.memmap(path, dtype=shards[0].dtype, mode="r")


class NaiveWindows(Dataset):
    """Window ``i``: tokens ``i * seq_len .. (i + 1) * seq_len`` of the flat array, inputs and labels."""

    def __init__(self, tokens: np.memmap, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.tokens[i * self.seq_len : (i + 1) * self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


def prep_feed(data: AblationData, preset: Preset, steps: int, workers: int, device: torch.device) -> Iterator[Batch]:
    """Batches as ``run_trial`` gets them: the DATA's training order, enough of it for ``steps``
    (pinned only for a GPU, as the naive loader's are not)."""
    tokens = steps * preset.batch_size * preset.seq_len
    dataset = TokenDataset(
        data.path,
        preset.seq_len,
        seed=SEED,
        order=data.train_order(SEED, tokens),
        cache_dir=data.corpus.cache_dir,
    )
    loader = build_dataloader(
        dataset,
        preset.batch_size,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=device.type == "cuda",
    )
    while True:
        for batch in loader:
            yield batch["input_ids"], batch["position_ids"], batch["labels"]


def naive_feed(tokens: np.memmap, preset: Preset, workers: int) -> Iterator[Batch]:
    loader = DataLoader(
        NaiveWindows(tokens, preset.seq_len),
        batch_size=preset.batch_size,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        persistent_workers=workers > 0,
    )
    positions = torch.arange(preset.seq_len).expand(preset.batch_size, -1)
    while True:
        for inputs, labels in loader:
            yield inputs, positions, labels


class Trainer:
    """``run_trial``'s step on one feed from seed ``SEED``'s initialization, timed as it times
    them: from asking the feed for a batch to ``loss.item()``, the first step left out."""

    def __init__(self, preset: Preset, vocab: Vocabulary, feed: Iterator[Batch], device: torch.device):
        torch.manual_seed(SEED)
        self.preset, self.feed, self.device = preset, feed, device
        self.model = TinyGPT(preset, vocab.size, preset.seq_len).to(device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=preset.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True
        )
        self.table = torch.from_numpy(vocab.table).to(device)
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
        self.wait = self.busy = 0.0
        self.losses = []

    def step(self) -> None:
        begin = time.perf_counter()
        batch = next(self.feed)
        fetched = time.perf_counter()
        inputs, positions, labels = (t.to(self.device, non_blocking=True) for t in batch)
        with self.autocast:
            loss = self.model.loss(self.table[inputs], positions, self.table[labels])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.losses.append(loss.item())
        if len(self.losses) > 1:  # the first step starts the workers
            self.wait += fetched - begin
            self.busy += time.perf_counter() - begin

    def finish(self) -> dict:
        self.feed.close()
        timed = len(self.losses) - 1
        return {
            "tokens_per_s": timed * self.preset.batch_size * self.preset.seq_len / self.busy,
            "step_ms": 1e3 * self.busy / timed,
            "wait_share": self.wait / self.busy,
            "loss": float(np.mean(self.losses[-LOSS_TAIL:])),
            "compute_params": self.model.compute_parameters,
            "output": self.model.output,
        }


def mfu(device_name: str, flops_per_s: float) -> str:
    """``flops_per_s`` as a share of the bf16 peak of the GPU called ``device_name`` (``NVIDIA H200``: ``h200``)."""
    key = next((key for key in GPU_PEAK_FLOPS if key in device_name.lower()), None)
    if key is None:
        return f"n/a (no bf16 peak known for {device_name})"
    peak = GPU_PEAK_FLOPS[key]
    return f"{flops_per_s / peak:.1%} of {key}'s {peak / 1e12:,.0f} TFLOP/s"


def compare_on_cpu(data: AblationData, vocab: Vocabulary, tokens: np.memmap, steps: int, workers: int) -> None:
    """The two feeds take turns, ``BLOCK`` steps each, so that both see the same machine
    (another job on it slows both, not the one that happens to run then)."""
    tiny, cpu = PRESETS["tiny"], torch.device("cpu")
    trainers = {
        "(a) prep TokenDataset + build_dataloader": Trainer(
            tiny, vocab, prep_feed(data, tiny, steps, workers, cpu), cpu
        ),
        "(b) naive Dataset over np.memmap, DataLoader": Trainer(tiny, vocab, naive_feed(tokens, tiny, workers), cpu),
    }
    for begin in range(0, steps, BLOCK):
        for trainer in trainers.values():
            for _ in range(min(BLOCK, steps - begin)):
                trainer.step()
    results = {name: trainer.finish() for name, trainer in trainers.items()}
    prep, naive = results.values()
    print(
        f"\ntiny on cpu ({torch.get_num_threads()} threads): {tiny.layers} layers x {tiny.d_model}, "
        f"batch {tiny.batch_size} x {tiny.seq_len}, {prep['output']}; {steps} steps per feed, "
        f"{workers} loader worker(s)"
    )
    print(f"| feed | tokens/s | ms/step | data wait | loss, last {LOSS_TAIL} steps |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {r['wait_share']:.2%} | {r['loss']:.3f} |")
    wait_ratio = f"{prep['wait_share'] / naive['wait_share']:.2f}x" if naive["wait_share"] else "n/a"
    print(f"prep / naive: tokens/s {prep['tokens_per_s'] / naive['tokens_per_s']:.2f}x, data-wait share {wait_ratio}")


def gpt2_on_gpu(data: AblationData, vocab: Vocabulary, workers: int) -> None:
    gpt2, gpu = PRESETS["gpt2-124m"], torch.device("cuda")
    name = torch.cuda.get_device_name(gpu)
    trainer = Trainer(gpt2, vocab, prep_feed(data, gpt2, GPU_STEPS, workers, gpu), gpu)
    for _ in range(GPU_STEPS):
        trainer.step()
    r = trainer.finish()
    print(
        f"\ngpt2-124m on {name} (bf16 autocast): {r['compute_params'] / 1e6:.1f}M parameters in matrix products, "
        f"batch {gpt2.batch_size} x {gpt2.seq_len}, {GPU_STEPS} steps fed by (a), {workers} loader worker(s)"
    )
    print(
        f"{r['tokens_per_s']:,.0f} tokens/s, {r['step_ms']:.1f} ms/step, data wait {r['wait_share']:.2%}, "
        f"loss {r['loss']:.3f}, MFU {mfu(name, 6 * r['compute_params'] * r['tokens_per_s'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="CPU steps per feed (the first is not timed)")
    parser.add_argument("--workers", type=int, default=1, help="loader worker processes (prep ablate's default)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "prep-bench-ablate")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is not timed)")

    args.work.mkdir(parents=True, exist_ok=True)
    data, built = build_run(args.work)
    vocab = Vocabulary.occurring(int(data.tokenizer["vocab_size"]), [data], [])
    tokens = concatenated_tokens(data, args.work)
    print(
        f"data: {TEXT.name} -> {len(tokens):,} {data.tokenizer['tokenizer']} tokens in "
        f"{data.corpus.num_documents:,} documents ({data.held_out.sum():,} held out; run built or found in "
        f"{built:.1f} s); {vocab.size:,} of {vocab.vocab_size:,} ids occur"
    )
    compare_on_cpu(data, vocab, tokens, args.steps, args.workers)
    if torch.cuda.is_available():
        gpt2_on_gpu(data, vocab, args.workers)
    else:
        print("\ngpt2-124m on GPU: skipped (no CUDA device)")


if __name__ == "__main__":
    main()
