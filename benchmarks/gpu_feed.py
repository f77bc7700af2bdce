"""Does prep's DataLoader keep a GPU fed? Train a small GPT fed by it, then by random tokens on the GPU.

    python -m benchmarks.gpu_feed [--data RUN_OR_SHARD_DIR] [--steps 300] [--batch 16] [--seq 1024]
    python -m benchmarks.gpu_feed --tiny      # a few CPU steps of a tiny model: checks the script runs

A GPT-2-small-sized model (12 layers, 768 wide, ~124M parameters, bf16 autocast, fused
AdamW) trains ``--steps`` steps twice: (1) fed by ``TokenDataset`` + ``build_dataloader``
(pinned memory, non-blocking copies, ``position_ids`` used by the model); (2) fed by
random tokens already on the GPU (the upper bound: no input pipeline at all). The table
at the end gives tokens/s of each and the share of wall time the training loop spent
inside ``next(loader)`` and the host-to-device copy (time the GPU may have waited for
data). Target: (1) within 1% of (2). Without CUDA (and without ``--tiny``) it says so and
exits 0.

Data: ``--data`` (a run folder or shard folder) or, by default, synthetic shards written
to a temporary folder: uniform random GPT-2 token ids in documents whose lengths follow
a log-normal fitted to web text (median ~400 tokens); the loader's work does not depend
on the ids. Budget: well under 5 minutes on one H200 with the defaults.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.formats.token_shards import ShardWriter
from pipeline.loader import TokenDataset, build_dataloader

VOCAB = 50257
PADDED_VOCAB = 50304  # a multiple of 64, as nanoGPT does, for faster matmuls


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """GPT-2 shaped decoder; position embeddings looked up from ``position_ids``."""

    def __init__(self, layers: int, width: int, heads: int, seq_len: int):
        super().__init__()
        self.tokens = nn.Embedding(PADDED_VOCAB, width)
        self.positions = nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, PADDED_VOCAB, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1))


def synthetic_shards(folder: Path, tokens: int, seed: int = 0) -> None:
    """Random ids in documents of log-normal lengths (median ~400 tokens), one uint16 shard."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(math.log(400), 1.0, size=tokens // 300)).astype(np.int64)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), tokens) + 1]
    ids = rng.integers(0, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
    writer = ShardWriter(folder / "shard-00000.bin", folder / "shard-00000.idx", np.uint16)
    writer.add_documents(ids, lengths)
    writer.close()


def train(model, optimizer, batches, steps: int, warmup: int, device: torch.device, amp: bool):
    """Run ``warmup + steps`` steps; return (seconds for ``steps``, seconds spent getting data)."""
    waited = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start, waited = time.perf_counter(), 0.0
        t0 = time.perf_counter()
        input_ids, position_ids, labels = next(batches)
        waited += time.perf_counter() - t0
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids, position_ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, waited


def loader_batches(loader, device: torch.device):
    while True:
        for batch in loader:
            yield tuple(batch[k].to(device, non_blocking=True) for k in ("input_ids", "position_ids", "labels"))


def gpu_batches(batch: int, seq: int, device: torch.device):
    """A few random batches made on the device once, then reused: no input pipeline."""
    pool = [torch.randint(0, VOCAB, (batch, seq + 1), device=device) for _ in range(4)]
    positions = torch.arange(seq, device=device).expand(batch, seq)
    step = 0
    while True:
        tokens = pool[step % len(pool)]
        step += 1
        yield tokens[:, :-1], positions, tokens[:, 1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="run or shard folder (default: synthetic shards)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="tiny model, few steps, runs on CPU: a smoke test")
    args = parser.parse_args()

    if args.tiny:
        layers, width, heads = 2, 64, 2
        args.steps, args.warmup, args.batch, args.seq, args.workers = 6, 2, 2, 64, 2
    else:
        layers, width, heads = 12, 768, 12
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        print("No CUDA GPU here: this benchmark needs one (run with --tiny to check the script on CPU).")
        return 0
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp)
            needed = (args.steps + args.warmup + 10) * args.batch * args.seq
            synthetic_shards(data, needed)
        dataset = TokenDataset(data, seq_len=args.seq, seed=0, epochs=1)
        loader = build_dataloader(
            dataset, args.batch, num_workers=args.workers, pin_memory=cuda, persistent_workers=True
        )

        torch.manual_seed(0)
        model = GPT(layers, width, heads, args.seq).to(device)
        params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda)
        print(
            f"model: {params / 1e6:.1f}M parameters on {device}; batch {args.batch} x {args.seq}; "
            f"{args.steps} timed steps after {args.warmup} warm-up; loader workers {args.workers}"
        )

        results = []
        for name, batches in (
            ("prep DataLoader", loader_batches(loader, device)),
            ("random tokens on device", gpu_batches(args.batch, args.seq, device)),
        ):
            seconds, waited = train(model, optimizer, batches, args.steps, args.warmup, device, amp=cuda)
            tokens = args.steps * args.batch * args.seq
            results.append((name, tokens / seconds, 1e3 * seconds / args.steps, waited / seconds))
            batches.close()

    print()
    print("| feed | tokens/s | ms/step | time in next() + H2D copy | vs random tokens |")
    print("|---|---:|---:|---:|---:|")
    reference = results[1][1]
    for name, rate, ms, share in results:
        print(f"| {name} | {rate:,.0f} | {ms:.1f} | {100 * share:.2f}% | {100 * rate / reference:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
