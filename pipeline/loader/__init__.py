"""The training-side loader: packed, document-aware, sharded, exactly resumable batches.

Three lines in a training script::

    from pipeline.loader import TokenDataset, build_dataloader
    dataset = TokenDataset("out/run1", seq_len=2048, seed=0, epochs=1)
    loader = build_dataloader(dataset, batch_size=8, rank=rank, world_size=world_size)

Modules: ``corpus`` (documents of the shards), ``order`` (the document order, pluggable:
shuffled epochs, or a mixture's from ``mixture``), ``ring`` (shared batch slots), ``windows``
(windows -> document pieces, and each source's tokens in them), ``sampler`` (rank sharding
and the window shuffle, which keeps a mixture's shares in every 1M tokens), ``dataset`` and
``dataloader`` (the torch side).
Only ``dataset`` and ``dataloader`` import torch.
"""

from pipeline.formats.token_shards import ShardError
from pipeline.loader.corpus import ShardCorpus, Source
from pipeline.loader.mixture import MixtureOrder
from pipeline.loader.order import DocumentOrder, DocumentStream, ShuffledEpochs

# The torch side is imported on first use, so that numpy-only users of this package
# (``prep mix`` building a DocumentOrder, say) never import torch.
_TORCH_NAMES = {
    "TokenDataLoader": "pipeline.loader.dataloader",
    "build_dataloader": "pipeline.loader.dataloader",
    "TokenDataset": "pipeline.loader.dataset",
    "unpack": "pipeline.loader.dataset",
}


def __getattr__(name: str):
    if name in _TORCH_NAMES:
        import importlib

        from pipeline.util.extras import require

        require(f"pipeline.loader.{name}", "loader", "torch")
        return getattr(importlib.import_module(_TORCH_NAMES[name]), name)
    raise AttributeError(f"module 'pipeline.loader' has no attribute {name!r}")


__all__ = [
    "DocumentOrder",
    "DocumentStream",
    "MixtureOrder",
    "ShardCorpus",
    "ShardError",
    "ShuffledEpochs",
    "Source",
    "TokenDataLoader",
    "TokenDataset",
    "build_dataloader",
    "unpack",
]
