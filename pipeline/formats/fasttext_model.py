"""A fastText classifier on disk: the model file, its sidecar, and the one preprocessing.

``prep classifier train`` writes a model and its sidecar; the ``classify`` stage and
``prep classifier eval`` read them. Both sides must show the model the same text, so the
preprocessing lives here, once. It follows DCLM's fastText quality classifier
(``classify_fasttext_hq_prob`` in mlfoundations/dclm): strip the document, then join its
lines with single spaces, case kept. fastText reads one line per example and turns a line
break into an end-of-sentence token, so a multi-line document must become one line; runs
of spaces need no collapsing, since fastText splits on any run of whitespace.

A model file is checked before any work starts: a missing file, or one that does not
begin with fastText's magic number and version, is one line naming the file.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from pathlib import Path
from typing import Any

from pipeline.kernels.hashing import file_sha256
from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import printable_path
from pipeline.util.records import Optional, read_record

PREPROCESSING = "dclm"  # the name the sidecar records
LABEL_PREFIX = "__label__"
# fastText's file header: FASTTEXT_FILEFORMAT_MAGIC_INT32 and FASTTEXT_VERSION, little-endian.
MAGIC = 793712314
VERSION = 12


class ModelError(ValueError):
    """A model file that is missing or is not a fastText model."""


def preprocess(text: str | None) -> str:
    """The one line fastText reads for ``text`` (None reads as empty)."""
    return " ".join((text or "").strip().splitlines())


def sidecar_path(model: str | os.PathLike) -> Path:
    """``model.bin`` -> ``model.bin.json``: what trained it and how well it did."""
    model = Path(model)
    return model.with_name(model.name + ".json")


def check_model_file(path: str | os.PathLike) -> Path:
    """``path`` if it holds a fastText model (``.bin`` or ``.ftz``); ``ModelError`` otherwise."""
    file_labels(path)
    return Path(path)


def file_labels(path: str | os.PathLike) -> tuple[str, ...]:
    """The labels of the fastText model at ``path`` (without ``__label__``), read from its
    dictionary without loading the model (so a config can be checked against them before
    any work); ``ModelError`` where ``path`` holds no fastText model. Read once per
    version of the file."""
    path = Path(path)
    try:
        refuse_special(path)  # a FIFO would block the open for good
        with open(path, "rb") as file:
            header, stat = file.read(8), os.fstat(file.fileno())
    except OSError as error:
        raise ModelError(f"cannot read model {path}: {error.strerror}") from None
    if len(header) < 8 or struct.unpack("<i", header[:4])[0] != MAGIC:
        raise ModelError(f"{path} is not a fastText model (no fastText header)")
    version = struct.unpack("<i", header[4:])[0]
    if version != VERSION:
        raise ModelError(
            f"{path} is a fastText model of file version {version}; prep reads version {VERSION} "
            "(fastText 0.9 and later): save it again with a recent fastText"
        )
    return _dictionary_labels(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


# After the header: 12 int32 arguments and one double, then the dictionary's counts.
_ARGS_END = 8 + 12 * 4 + 8
_COUNTS = struct.Struct("<iiiqq")  # size, nwords, nlabels, ntokens, pruneidx_size
_LABEL_ENTRY = 1  # a dictionary entry's type byte: 0 a word, 1 a label
_MATRIX_SHAPE = struct.Struct("<qq")  # rows, columns; then rows x columns float32


@functools.lru_cache(maxsize=8)
def _dictionary_labels(path: Path, *version: int) -> tuple[str, ...]:
    """The labels in the dictionary, which is walked with the two matrices as fastText
    will read them (``version``: the file's, so a rewritten model is read again). fastText reads
    each word up to its NUL byte without looking for the end of the file, so a model cut
    inside its dictionary would make it loop forever instead of failing; one cut inside
    its matrices loaded, and failed on the first document ("Vector::mul: size mismatch",
    naming no file). Refuse such a file here."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if len(data) < _ARGS_END + _COUNTS.size:
            raise ModelError(f"{path} is cut short (a fastText model of {len(data)} bytes)")
        (dim,) = struct.unpack_from("<i", data, 8)  # the first argument
        size, nwords, nlabels, _, pruned = _COUNTS.unpack_from(data, _ARGS_END)
        if not 0 <= nwords <= size or nlabels != size - nwords or pruned < -1:
            raise ModelError(f"{path} is damaged (fastText dictionary counts {size}, {nwords}, {nlabels})")
        at, labels = _ARGS_END + _COUNTS.size, []
        for _ in range(size):
            end = data.find(b"\0", at)
            if end < 0 or end + 10 > len(data):
                raise ModelError(f"{path} is cut short inside its fastText dictionary")
            if data[end + 9] == _LABEL_ENTRY:
                labels.append(data[at:end].decode("utf-8", "replace").removeprefix(LABEL_PREFIX))
            at = end + 10  # the word's NUL, its int64 count and its int8 type
        at += max(pruned, 0) * 8  # pairs of int32
        for which in ("input", "output"):  # each: a "quantized" byte, then the matrix
            if at + 1 + _MATRIX_SHAPE.size > len(data):
                raise ModelError(f"{path} is cut short before its fastText vectors")
            quantized = data[at]
            if quantized > 1 or (quantized and which == "output"):  # fastText quantizes the input first
                raise ModelError(f"{path} is damaged (fastText's quantized flag of its {which} vectors)")
            if quantized:  # a quantized (.ftz) model: its layout is not walked here
                return tuple(labels)
            rows, columns = _MATRIX_SHAPE.unpack_from(data, at + 1)
            at += 1 + _MATRIX_SHAPE.size + rows * columns * 4
            if rows < 0 or columns != dim:
                raise ModelError(f"{path} is damaged (fastText vectors of {columns} numbers, not dim {dim})")
            if at > len(data):
                raise ModelError(f"{path} is cut short inside its fastText vectors")
    return tuple(labels)


def load(path: str):
    """The fastText model at ``path``, loaded once per process while the file stays the
    same (checked first; a model rewritten in place is loaded again)."""
    check_model_file(path)
    version = os.stat(path)
    return _load(str(path), version.st_mtime_ns, version.st_size, version.st_ino)


@functools.lru_cache(maxsize=8)
def _load(path: str, *version: int):
    import fasttext  # fasttext-community

    try:
        return fasttext.load_model(path)
    except (ValueError, MemoryError) as error:  # a header that looks right over a damaged body
        raise ModelError(f"{path} is not a readable fastText model: {error}") from None


def labels(model) -> list[str]:
    """The model's labels without fastText's ``__label__`` prefix, in the model's order."""
    return [label.removeprefix(LABEL_PREFIX) for label in model.get_labels()]


# What readers take from a model's sidecar (``prep classifier train`` writes more).
SIDECAR_SHAPE = {"positive_label": Optional((str, None)), "model_sha256": Optional(str)}


def read_sidecar(model: str | os.PathLike) -> dict[str, Any] | None:
    """The sidecar of ``model``, or None when it has none (a published model, say). It is
    a file beside one the user names, so it is checked where it enters: a damaged one is
    a ``RecordError`` naming it, and a FIFO in its place is refused, never read (that hung).
    One that describes another model (its ``model_sha256`` is not the model's: a model
    copied over another, or a training killed between its two renames by an older prep)
    is a ``ModelError``: its labels and metrics would be taken for this model's."""
    path = sidecar_path(model)
    try:
        sidecar = read_record(path, SIDECAR_SHAPE)
    except FileNotFoundError:
        return None
    recorded = sidecar.get("model_sha256")
    if recorded is not None and recorded != file_sha256(model):
        raise ModelError(
            f"{printable_path(path)} describes another model than {printable_path(model)} (its sha256 differs): "
            "remove the sidecar, or put back the model it describes"
        )
    return sidecar
