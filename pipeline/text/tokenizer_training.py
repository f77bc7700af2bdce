"""Training a SentencePiece tokenizer on a hash sample of a run's kept documents, behind
``prep tokenizer train``.

A library function so that tests and scripts train without click; problems the user can
fix (no kept documents, an empty sample, a vocabulary too large for the sample) are a
``TrainingError`` whose message says so, which the command prints as its one error line.
SentencePiece trains in a child process (``util.processes.run_in_child``): its C++ loop
does not answer Ctrl-C, and it can end the process that runs it.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.layout import Layout
from pipeline.formats.unreadable import reading
from pipeline.kernels.hashing import id_hashes
from pipeline.text.tokenizers import SentencePieceTokenizer, TokenizerError, default_threads
from pipeline.util.atomic import atomic_path, remove_dead_temporaries
from pipeline.util.processes import ChildDied, run_in_child


class TrainingError(ValueError):
    """A tokenizer that cannot be trained on the run as asked; the message says why."""


# SentencePiece skips sentences longer than its max_sentence_length; documents are cut at
# line ends into segments no longer than this (bytes), keeping the newlines so the model
# learns code and paragraph layout.
SEGMENT_BYTES = 8192
# The pieces every model holds whatever the sample: 256 byte pieces (byte fallback) and
# unk, bos, eos. The sample's characters come on top.
FIXED_PIECES = 256 + 3
# SentencePiece's own words for a vocabulary size the sample cannot fit, and ours for them.
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")
_TOO_LARGE = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)")


def run_doc_files(run_dir: Path, sources: tuple[str, ...] = ()) -> list[Path]:
    """The kept-document Parquet files of a run: ``RUN_DIR/docs/<source>/*.parquet``, sorted."""
    layout = Layout(run_dir)
    docs = layout.docs_folder
    if not sources:
        sources = tuple(sorted(p.name for p in docs.iterdir() if p.is_dir())) if docs.is_dir() else ()
    files = sorted(f for source in sources for f in layout.doc_files(source))
    if not files:
        raise TrainingError(f"no kept documents under {docs}/<source>/*.parquet")
    return files


def hash_threshold(files: list[Path], fraction: float, max_chars: int) -> int | None:
    """The id-hash bound at or below which documents form the sample (None: empty sample).

    Documents are taken in the order of their id's hash, a uniform random order that
    does not depend on files or workers, until ``fraction`` of them or ``max_chars``
    characters (UTF-8 bytes, counted cheaply) are in. Memory: two integers per document.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    hashes, sizes = [], []
    for f in files:
        with reading(f):
            for batch in pq.ParquetFile(f).iter_batches(columns=["id", "text"], batch_size=8192):
                hashes.append(id_hashes(batch.column(0)))
                sizes.append(pc.binary_length(batch.column(1)).fill_null(0).to_numpy(zero_copy_only=False))
    if not hashes:
        return None
    h = np.concatenate(hashes)
    s = np.concatenate(sizes).astype(np.int64)
    order = np.argsort(h, kind="stable")
    take = min(len(h), int(np.ceil(fraction * len(h))), int(np.searchsorted(np.cumsum(s[order]), max_chars, "right")))
    return int(h[order[take - 1]]) if take else None


def sample_segments(files: list[Path], threshold: int) -> Iterator[str]:
    """The text of the sampled documents, cut at line ends into segments of at most SEGMENT_BYTES."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bound = np.uint64(threshold)
    for f in files:
        with reading(f):
            for batch in pq.ParquetFile(f).iter_batches(columns=["id", "text"], batch_size=8192):
                chosen = batch.column(1).filter(pa.array(id_hashes(batch.column(0)) <= bound))
                for text in chosen.to_pylist():
                    if text:
                        yield from _segments(text)


def _segments(text: str) -> Iterator[str]:
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if current and size + n > SEGMENT_BYTES:
            yield "".join(current)
            current, size = [], 0
        while n > SEGMENT_BYTES:  # one very long line: cut it (characters <= 4 bytes each)
            yield line[: SEGMENT_BYTES // 4]
            line = line[SEGMENT_BYTES // 4 :]
            n = len(line.encode("utf-8"))
        current.append(line)
        size += n
    if current:
        yield "".join(current)


def train_sentencepiece(
    run_dir: Path,
    out: Path,
    vocab_size: int,
    model_type: str = "bpe",
    *,
    fraction: float = 1.0,
    max_chars: int = 100_000_000,
    sources: tuple[str, ...] = (),
    threads: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """Train a SentencePiece model on a hash sample of a run's kept documents; write it atomically.

    The model keeps text as it is (identity normalisation, whitespace kept, bytes as a
    fallback), so decoding gives back the exact text, as pretraining needs.
    """
    if vocab_size < FIXED_PIECES:
        raise TrainingError(
            f"--vocab-size {vocab_size} is too small: every model holds 256 byte pieces and 3 control "
            f"pieces, so at least {FIXED_PIECES}, plus the sample's characters"
        )
    out = Path(out)
    if out.exists():  # a model is replaced (atomically); a file of the user's never is
        try:
            SentencePieceTokenizer(str(out), out)
        except (TokenizerError, OSError):
            raise TrainingError(
                f"--out {out} exists and is not a SentencePiece model: name another file, or remove it"
            ) from None
    remove_dead_temporaries([out])  # a model a command killed outright (SIGKILL) left unrenamed
    files = run_doc_files(run_dir, sources)
    threshold = hash_threshold(files, fraction, max_chars)
    if threshold is None:
        raise TrainingError(f"the sample of {run_dir} is empty")
    options = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=0.9995,
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        max_sentence_length=SEGMENT_BYTES,
        num_threads=threads or default_threads(),
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    try:  # SentencePiece's C++ trainer does not answer Ctrl-C: it trains in a child process
        data, complaint = run_in_child(_train_in_child, files, threshold, options, seed)
    except ChildDied as died:
        raise TrainingError(f"SentencePiece stopped with {died.how} while training (out of memory?)") from None
    if complaint is not None:
        raise TrainingError(_training_failure(complaint, vocab_size, run_dir))
    with atomic_path(out) as tmp:
        tmp.write_bytes(data)
    return {"model": str(out), "sha256": hashlib.sha256(data).hexdigest(), "files": len(files)}


def _train_in_child(files: list[Path], threshold: int, options: dict, seed: int) -> tuple[bytes | None, str | None]:
    """(the model, None), or (None, SentencePiece's complaint)."""
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sample_segments(files, threshold), model_writer=model, **options
        )
    except RuntimeError as e:  # SentencePiece reports a vocabulary the sample cannot fit here
        return None, str(e)
    return model.getvalue(), None


def _training_failure(message: str, vocab_size: int, run_dir: Path) -> str:
    """SentencePiece's complaint (a C++ check and its source line) as what the user can do."""
    if found := _TOO_SMALL.search(message):
        return (
            f"--vocab-size {vocab_size} is too small for the sample of {run_dir}: its characters, 256 byte "
            f"pieces and 3 control pieces need at least {found[1]}"
        )
    if found := _TOO_LARGE.search(message):
        return (
            f"--vocab-size {vocab_size} is more pieces than the sample of {run_dir} holds (at most {found[1]}): "
            "lower it, or train on more text (--sample, --max-chars)"
        )
    if "sentences_.empty()" in message:
        return f"the sample of {run_dir} has no text (its documents are empty)"
    return f"SentencePiece training failed: {message.strip().splitlines()[0] if message.strip() else 'no reason given'}"
