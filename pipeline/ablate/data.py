"""What an ablation trains on: a DATA folder resolved, checked and described.

A DATA is a run folder (``tokens/<source>/`` shards), a folder of token shards, or a
``prep mix`` folder. The shards of one DATA must be tokenized alike (same vocabulary, EOD,
BOS, dtype: the sidecars' compatibility keys); two DATA may differ (``groups``: the
verdict then compares bits per byte). A shard without a sidecar is refused, since nothing
would say how to tokenize the eval sets for it.

The held-out slice: a document is held out when a hash of its id (salted, so that it is
independent of ``prep run --sample``, which keeps documents by the same id hash) falls
below ``fraction``. It depends on the id alone, so two DATA that share documents (a raw
run and a filtered run of the same input) hold out the same ones, and no DATA trains on a
document another holds out. The training order is the DATA's own (a shuffled epoch, or
the mixture's) with the held-out documents removed.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.formats.layout import Layout
from pipeline.formats.mix import MixLayout
from pipeline.formats.token_shards import (
    COMPATIBILITY_KEYS,
    IncompatibleShards,
    check_compatible,
    docs_path,
    read_sidecar,
)
from pipeline.kernels.hashing import id_hashes
from pipeline.kernels.mixing import splitmix64
from pipeline.loader.cache import fingerprint
from pipeline.loader.corpus import ShardCorpus
from pipeline.loader.mixture import MixtureOrder, is_mixture, mixture_corpus
from pipeline.loader.order import DocumentOrder, ShuffledEpochs
from pipeline.util.records import COUNT, Each, Optional, RecordError, read_json, read_record

HOLDOUT_SALT = np.uint64(0x5EED_AB1A_7E00_0001)


class AblationDataError(ValueError):
    """A DATA that cannot be used: not token shards, no sidecar, shards of two tokenizers."""


def held_out(ids, fraction: float) -> np.ndarray:
    """Boolean mask of the documents (by id) held out from training for evaluation."""
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    return splitmix64(id_hashes(ids) ^ HOLDOUT_SALT) < threshold


@dataclass(frozen=True)
class WithoutHeldOut:
    """A document order with the held-out documents removed (a ``DocumentOrder``)."""

    base: DocumentOrder
    mask: np.ndarray = field(compare=False)
    mask_key: str

    def key(self) -> str:
        return f"{self.base.key()}-without-held-out({self.mask_key})"

    def build(self, corpus: ShardCorpus) -> np.ndarray:
        order = np.asarray(self.base.build(corpus))
        return order[~self.mask[order]]


@dataclass
class AblationData:
    """One DATA: its corpus, tokenizer sidecar, held-out mask and what the ledger records of it."""

    name: str
    path: Path
    kind: str  # "run", "tokens" or "mix"
    corpus: ShardCorpus
    tokenizer: dict
    held_out: np.ndarray  # per global document id
    shares: dict[str, float]
    sample: float | None  # the --sample fraction of the run that made it, if any

    @cached_property
    def fingerprint(self) -> str:
        """What the data is, by content: the shards' checksums and the order that reads them
        (read once: every trial key, record and the experiment id ask for it)."""
        digest = hashlib.sha256()
        for prefix in self.corpus.prefixes:
            digest.update(str((read_sidecar(prefix) or {}).get("bin_sha256")).encode())
        if self.kind == "mix":
            digest.update(MixLayout(self.path).manifest.read_bytes())
        return digest.hexdigest()[:16]

    @cached_property
    def tokens(self) -> int:
        """The tokens a full pass reads: the mixture's (``mix.json``), or every shard's."""
        if self.kind == "mix":
            return _mix_record(self.path)["tokens"]
        return int(self.corpus.num_tokens)

    def full_input(self) -> tuple[int, str]:
        """The tokens of the full input, and what the figure is: the DATA's own tokens, or
        for a ``--sample`` run the run's projection (``cost.json``: tokens per byte of each
        source's input text; scaling by the fraction was 31% low on the bundled sample),
        or the tokens over the fraction when the run has no projection."""
        if not self.sample:
            return self.tokens, "target tokens: the DATA's tokens"
        projected = _projected_tokens(self.path)
        if projected is not None:
            return projected, f"target tokens: the full input's, as this --sample {self.sample:g} run projects them"
        return int(self.tokens / self.sample), f"target tokens: the DATA's tokens / {self.sample:g} (a --sample run)"

    @cached_property
    def train_tokens(self) -> int:
        sizes = np.asarray(self.corpus.document_sizes)
        return int(sizes[~self.held_out].sum())

    def train_order(self, seed: int, tokens: int) -> DocumentOrder:
        """The DATA's own order without the held-out documents, long enough for ``tokens``.

        A run or shard folder gets as many shuffled epochs as the budget needs; a mixture
        keeps its own order (the loader repeats it if the budget is larger).
        """
        mask_key = fingerprint("held-out", self.held_out.tobytes())
        if self.kind == "mix":
            return WithoutHeldOut(MixtureOrder(self.path), self.held_out, mask_key)
        epochs = max(1, math.ceil(tokens / max(1, self.train_tokens)))
        return WithoutHeldOut(ShuffledEpochs(seed, epochs), self.held_out, mask_key)

    def runs(self) -> list[Path]:
        """The prep runs whose tokens this DATA trains on (none known for a bare shard folder)."""
        if self.kind == "run":
            return [self.path]
        if self.kind == "mix":
            runs = _mix_record(self.path).get("runs")
            return [Path(run) for run in runs if isinstance(run, str)] if isinstance(runs, list) else []
        return []

    def held_out_documents(self) -> np.ndarray:
        return np.flatnonzero(self.held_out)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "path": str(self.path.resolve()),
            "kind": self.kind,
            "tokenizer": self.tokenizer.get("tokenizer"),
            "vocab_sha256": self.tokenizer.get("vocab_sha256"),
            "fingerprint": self.fingerprint,
            "shares": self.shares,
            "sample": self.sample,
            "tokens": self.tokens,
            "documents": int(self.corpus.num_documents),
            "held_out_documents": int(self.held_out.sum()),
        }


def open_data(path: Path, name: str, held_out_fraction: float, cache_dir: Path | None = None) -> AblationData:
    """Resolve and check one DATA folder; ``AblationDataError`` says why it cannot be used.

    ``cache_dir``: where the loader's index cache goes (a subfolder per DATA), so that a
    DATA on a read-only disk works and the DATA folders are not written to.
    """
    path = Path(path)
    if not path.is_dir():
        raise AblationDataError(
            f"{path}: not a folder (a DATA is a run folder, a token-shard folder or a prep mix folder)"
        )
    try:
        cache = None if cache_dir is None else cache_dir / fingerprint("data", str(path.resolve()))
        if is_mixture(path):
            kind, corpus = "mix", mixture_corpus(path, cache)
        else:
            kind = "run" if Layout(path).tokens_folder.is_dir() else "tokens"
            corpus = ShardCorpus(path, cache)
    except ValueError as error:
        raise AblationDataError(f"{path}: {error}") from None
    tokenizer = _common_tokenizer(corpus, path)
    return AblationData(
        name=name,
        path=path,
        kind=kind,
        corpus=corpus,
        tokenizer=tokenizer,
        held_out=_held_out_mask(corpus, held_out_fraction),
        shares=_shares(path, kind, corpus),
        sample=_sample_fraction(path, kind),
    )


def _common_tokenizer(corpus: ShardCorpus, path: Path) -> dict:
    first = None
    for prefix in corpus.prefixes:
        meta = read_sidecar(prefix)
        if meta is None:
            raise AblationDataError(
                f"{prefix}: a token shard without a prep sidecar ({prefix}.json): nothing says which tokenizer made it"
            )
        if first is None:
            first = meta
        else:
            try:
                check_compatible(first, meta, prefix)
            except IncompatibleShards as error:
                raise AblationDataError(str(error)) from None
    return {key: first.get(key) for key in (*COMPATIBILITY_KEYS, "tokenizer", "tokenizer_spec", "vocab_size")}


def _held_out_mask(corpus: ShardCorpus, fraction: float) -> np.ndarray:
    """Per global document: held out or not, from the ids in each shard's ``.docs.parquet``."""
    masks = []
    for prefix, first, end in zip(
        corpus.prefixes, corpus.shard_first_document[:-1], corpus.shard_first_document[1:], strict=True
    ):
        docs = docs_path(prefix)
        if not docs.is_file():
            raise AblationDataError(f"{docs}: missing; the held-out slice is chosen by document id")
        ids = pq.read_table(docs, columns=["id"]).column("id").combine_chunks()
        if len(ids) != end - first:
            raise AblationDataError(f"{docs} has {len(ids)} rows for {end - first} documents")
        masks.append(held_out(ids, fraction))
    return np.concatenate(masks) if masks else np.zeros(0, dtype=bool)


def _shares(path: Path, kind: str, corpus: ShardCorpus) -> dict[str, float]:
    """Each source's share of the tokens the DATA trains on."""
    if kind == "mix":
        used = {name: source["tokens_used"] for name, source in _mix_record(path)["sources"].items()}
    else:
        sizes = np.asarray(corpus.document_sizes)
        used = {
            source.name or ".": int(sizes[source.first_document : source.first_document + source.documents].sum())
            for source in corpus.sources
        }
    total = sum(used.values()) or 1
    return {name: round(tokens / total, 6) for name, tokens in used.items()}


# What ablate reads of a mixture's ``mix.json`` beyond what the loader checks.
MIX_FIGURES = {"tokens": COUNT, "sources": Each({"tokens_used": COUNT})}


def _mix_record(path: Path) -> dict:
    """A mixture's ``mix.json``, checked: a damaged one is one line naming the file and key."""
    try:
        return read_record(MixLayout(path).manifest, MIX_FIGURES)
    except RecordError as error:
        raise AblationDataError(str(error)) from None


def _projected_tokens(path: Path) -> int | None:
    """A sampled run's projection of its full input's tokens, if its ``cost.json`` has one."""
    try:
        cost = read_json(Layout(path).cost_summary)
    except (OSError, RecordError):  # missing or damaged: the caller scales by the fraction
        return None
    projection = cost.get("projection") if isinstance(cost, dict) else None
    tokens = projection.get("output_tokens") if isinstance(projection, dict) else None
    return int(tokens) if isinstance(tokens, (int, float)) and tokens > 0 else None


def _sample_fraction(path: Path, kind: str) -> float | None:
    manifest = Layout(path).manifest if kind == "run" else None
    if manifest is None or not manifest.is_file():
        return None
    try:
        sample = read_record(manifest, {"sample": Optional(float)}).get("sample", 1.0)
    except RecordError as error:
        raise AblationDataError(str(error)) from None
    return float(sample) if sample < 1 else None
