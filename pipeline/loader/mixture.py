"""Reading a ``prep mix`` folder: its shards and its global document order.

Why here: the mixture decides which documents the stream visits and in which order
(weights, up- and down-sampling, curriculum); the loader only has to follow it. A mixture
folder holds ``mix.json`` (``sources``: for each source, in order, its ``shards``) and
two arrays giving, for every position, the source number and the document's index
within that source (documents numbered across the source's shards in the listed order).
``mixture_corpus`` numbers the documents of all sources in that same order, and
``MixtureOrder`` turns (source, document) into those global ids. No torch here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pipeline.loader.cache import fingerprint
from pipeline.loader.corpus import ShardCorpus

MIX_JSON = "mix.json"


def is_mixture(path: str | os.PathLike) -> bool:
    return (Path(path) / MIX_JSON).is_file()


def _description(mix_dir: Path) -> dict:
    description = json.loads((mix_dir / MIX_JSON).read_text())
    if description.get("format") != "prep-mix":
        raise ValueError(f"{mix_dir / MIX_JSON} is not a prep mixture (format {description.get('format')!r})")
    return description


def mixture_corpus(mix_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> ShardCorpus:
    """The documents of every source of the mixture, numbered source after source."""
    mix_dir = Path(mix_dir)
    shards = [(name, prefix) for name, source in _description(mix_dir)["sources"].items() for prefix in source["shards"]]
    return ShardCorpus(mix_dir, cache_dir, shards=shards)


class MixtureOrder:
    """The document order of a mixture folder, as global ids of ``mixture_corpus``."""

    def __init__(self, mix_dir: str | os.PathLike):
        self.mix_dir = Path(mix_dir)
        self.description = _description(self.mix_dir)

    def key(self) -> str:
        files = [self.mix_dir / MIX_JSON] + [self.mix_dir / name for name in self.description["order"].values()]
        return "mixture-" + fingerprint([(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files])

    def build(self, corpus: ShardCorpus) -> np.ndarray:
        names = list(self.description["sources"])
        first = {source.name: source.first_document for source in corpus.sources}
        offsets = np.array([first[name] for name in names], dtype=np.int64)
        source = np.load(self.mix_dir / self.description["order"]["source"])
        document = np.load(self.mix_dir / self.description["order"]["document"])
        if len(source) != len(document):
            raise ValueError(f"{self.mix_dir}: order arrays differ in length")
        return offsets[source.astype(np.int64)] + document.astype(np.int64)
