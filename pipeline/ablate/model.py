"""The small GPT-style decoder an ablation trains (its sizes: ``presets``).

A standard pre-LayerNorm decoder (GPT-2's shape): learned position embeddings indexed by
the loader's ``position_ids`` (which restart at each document), causal self-attention
restricted to the current document, a 4x GELU MLP, tied input and output embeddings, no
dropout (a trial sees each token about once). The output layer of the CPU presets is an
adaptive softmax (Grave et al. 2017, ``torch.nn.AdaptiveLogSoftmaxWithLoss``): the most
frequent ids get a full-width softmax, rarer ones narrower clusters. It is still an exact,
normalized distribution over every id, so losses stay nats per token, at a twentieth of a
full softmax's cost over a 66k vocabulary on a CPU (58 ms against 1.3 s a step of 2,048
tokens; the trainer's vocabulary puts ids in frequency order, which it needs). The GPU
presets keep a full softmax with tied embeddings, as GPT-2. The document mask comes from the
``position_ids`` alone (a document starts where the position is 0), so packed windows never
attend across a document boundary, in training as in evaluation; PyTorch's
``scaled_dot_product_attention`` takes it as a boolean mask on CPU and GPU.

Presets go from ``tiny`` (trains a few million tokens in minutes on two CPU cores) to
``gpt2-124m`` (GPT-2 small: 12 layers, 768 wide, 1024 context). torch is imported here and
in the trainer only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.ablate.presets import CUTOFFS, DIV_VALUE, Preset


def document_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """``[B, 1, T, T]`` boolean: query i may attend key j when j <= i in the same document."""
    document = torch.cumsum(position_ids == 0, dim=1)
    same = document[:, :, None] == document[:, None, :]
    steps = position_ids.shape[1]
    causal = torch.ones(steps, steps, dtype=torch.bool, device=position_ids.device).tril()
    return (same & causal)[:, None]


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, steps, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, steps, 3, self.heads, width // self.heads).unbind(2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, steps, width))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, preset: Preset, vocab_size: int, max_positions: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, preset.d_model)
        self.positions = nn.Embedding(max_positions, preset.d_model)
        self.blocks = nn.ModuleList(Block(preset.d_model, preset.heads) for _ in range(preset.layers))
        self.norm = nn.LayerNorm(preset.d_model)
        cutoffs = [c for c in CUTOFFS if c < vocab_size]
        self.head = None
        if preset.adaptive and cutoffs:
            self.head = nn.AdaptiveLogSoftmaxWithLoss(preset.d_model, vocab_size, cutoffs, div_value=DIV_VALUE)
        self.output = "adaptive softmax, clusters at " + ", ".join(map(str, cutoffs)) if self.head else "full softmax"
        self.apply(self._init)
        for block in self.blocks:  # GPT-2: residual projections scaled by depth
            for layer in (block.proj, block.mlp[2]):
                nn.init.normal_(layer.weight, std=0.02 / (2 * preset.layers) ** 0.5)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    @property
    def parameters_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def compute_parameters(self) -> int:
        """Parameters that take part in matrix products (6·N·D's N): all but the
        embedding lookups; the tied output embedding of a full softmax counts."""
        lookups = self.positions.weight.numel() + (self.embed.weight.numel() if self.head is not None else 0)
        return self.parameters_count - lookups

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """The last hidden states, ``[B, T, d_model]``."""
        mask = document_mask(position_ids)
        x = self.embed(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)

    def loss(self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy per token, in nats."""
        hidden = self(input_ids, position_ids)
        hidden, labels = hidden.view(-1, hidden.shape[-1]), labels.reshape(-1)
        if self.head is not None:
            return self.head(hidden.float(), labels).loss
        return F.cross_entropy((hidden @ self.embed.weight.T).float(), labels)  # tied output embedding

    def label_log_probs(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        """``[B, T]``: the natural log of the probability the model gives each label (for
        evaluation, which sums them over a mask: real labels, the text's own tokens)."""
        hidden = self(input_ids, position_ids)
        flat, targets = hidden.view(-1, hidden.shape[-1]).float(), labels.reshape(-1)
        if self.head is not None:
            chosen = self.head(flat, targets).output
        else:
            logits = flat @ self.embed.weight.T.float()
            chosen = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
        return chosen.view(labels.shape)
