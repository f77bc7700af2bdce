"""The texts an eval set is made of, chosen once so that every tokenizer scores the same text.

Bits per byte divide by the UTF-8 bytes of the eval text itself, so two DATA tokenized
differently are compared on the same documents only if the documents are chosen by text,
not by token positions. ``EvalTexts`` is that choice: whole documents in order, the last
one cut (at a space, as text) so that the set fits ``max_tokens`` of the reference
tokenizer (the first DATA's); every tokenizer group then encodes these same strings.

Two sources of texts:

- an ``--eval`` file (JSON lines or Parquet with ``text``), read through prep's readers: a
  bad record is skipped and counted, never a crash;
- a run DATA's held-out documents: their ids (from the token shards' ``.docs.parquet``, in
  the corpus's order) looked up in the same unit's kept documents (``docs/``). A token-shard or
  ``prep mix`` folder keeps no text, so its held-out set stays in tokens (``None`` here).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.ablate.data import AblationData
from pipeline.ablate.multiple_choice import REPORTED
from pipeline.formats.layout import Layout, part_files
from pipeline.formats.token_shards import docs_path
from pipeline.kernels.hashing import file_sha256
from pipeline.readers import InputSpec, read_input
from pipeline.util.records import RecordError, read_json

ENCODE_CHUNK = 64  # documents encoded at a time while choosing


class EvalTextError(ValueError):
    """Eval text that cannot be had: an unreadable file, no text, a held-out id not in docs/."""


@dataclass
class EvalTexts:
    name: str
    texts: list[str]
    skipped: int = 0  # records of an eval file that could not be read
    problems: list[str] = field(default_factory=list)  # the first few of them, with their line


def framed_counts(tokenizer, texts: list[str], framing: int) -> np.ndarray:
    """Tokens per document as the tokenize stage frames it (``framing``: BOS/EOD added)."""
    _, counts = tokenizer.encode_batch(texts)
    return np.asarray(counts, dtype=np.int64) + framing


def choose(name: str, texts: Iterable[str], tokenizer, framing: int, max_tokens: int) -> EvalTexts:
    """Whole documents in order while they fit ``max_tokens``; the one that does not fit is cut
    to the budget left (a text prefix ending at a space), and the choice ends there."""
    chosen, total = [], 0
    for chunk in _chunks(texts):
        counts = framed_counts(tokenizer, chunk, framing)
        for text, count in zip(chunk, counts.tolist(), strict=True):
            if total + count <= max_tokens:
                chosen.append(text)
                total += count
                continue
            cut = _cut(text, count, max_tokens - total, tokenizer, framing)
            if cut:
                chosen.append(cut)
            return EvalTexts(name, chosen)
    return EvalTexts(name, chosen)


def _chunks(texts: Iterable[str]) -> Iterator[list[str]]:
    chunk = []
    for text in texts:
        if text:
            chunk.append(text)
        if len(chunk) == ENCODE_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _cut(text: str, count: int, budget: int, tokenizer, framing: int) -> str:
    """The longest prefix of ``text`` found by shrinking that ends at a space and fits ``budget``."""
    if budget <= framing + 1:
        return ""
    end = len(text) * (budget - framing) // max(1, count - framing)
    while end > 0:
        space = text.rfind(" ", 0, end)
        prefix = text[: space if space > 0 else end].rstrip()
        if prefix and int(framed_counts(tokenizer, [prefix], framing)[0]) <= budget:
            return prefix
        end = int(end * 0.9)
    return ""


def file_texts(path: Path, tokenizer, framing: int, max_tokens: int) -> EvalTexts:
    """The texts of an ``--eval`` file, read around bad records, chosen to fit ``max_tokens``."""
    name = f"eval:{path.name}"
    bad, problems = [0], []

    def texts() -> Iterator[str]:
        for chunk in read_input(path, InputSpec(source="eval", file_key=path.name)):
            if chunk.bad is not None:
                bad[0] += chunk.bad.num_rows
                for row in chunk.bad.slice(0, REPORTED - len(problems)).to_pylist():
                    # the row's file: the name, or name@offset after a zstd frame that could not be read
                    problems.append(f"{row.get('file')} line {row.get('line')}: {row.get('reason')}")
            if chunk.docs is not None and chunk.docs.num_rows:
                yield from chunk.docs.column("text").to_pylist()

    try:
        chosen = choose(name, texts(), tokenizer, framing, max_tokens)
        chosen.skipped, chosen.problems = bad[0], problems  # of the records read before the budget was full
    except ValueError as error:  # a file whose format cannot be told from its name
        raise EvalTextError(f"{name}: {error}") from None
    if not chosen.texts:
        found = f"; {'; '.join(problems)}" if problems else ", the file is empty"
        raise EvalTextError(f"{path}: no readable text (JSON lines or Parquet with a 'text' field expected{found})")
    return chosen


def training_inputs(eval_files: list[Path], runs: list[Path]) -> list[str]:
    """A warning per ``--eval`` file whose bytes are an input of one of ``runs`` (whose
    ``manifest.json`` records each input's sha256): only a DATA's held-out documents are
    kept out of training, so such a file's loss measures memorization, not the data."""
    inputs: dict[str, str] = {}  # sha256 -> where it was an input
    for run in dict.fromkeys(Path(run).resolve() for run in runs):
        try:
            manifest = read_json(Layout(run).manifest)
        except (OSError, RecordError):  # no manifest (a copied tokens folder): nothing to compare with
            continue
        listed = manifest.get("inputs") if isinstance(manifest, dict) else None
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, dict) and isinstance(item.get("sha256"), str):
                inputs.setdefault(item["sha256"], f"{item.get('path')} of {run} (source {item.get('source')})")
    warnings = []
    for path in eval_files:
        try:
            found = inputs.get(file_sha256(path)) if inputs else None
        except OSError:  # unreadable or remote: reading it for the eval set says what is wrong
            continue
        if found:
            warnings.append(
                f"warning: --eval {path} is the training input {found}: its loss measures memorization, "
                "not the data; evaluate on text none of the DATA trained on"
            )
    return warnings


def held_out_texts(data: AblationData, tokenizer, framing: int, max_tokens: int) -> EvalTexts | None:
    """A run DATA's held-out documents as text, in corpus order, chosen to fit ``max_tokens``;
    ``None`` for a DATA that keeps no text (token shards, a mixture). Shards are read one at
    a time and only until the budget is full: a large run's text is not read for 64K tokens."""
    layout = Layout(data.path)
    if data.kind != "run" or not layout.docs_folder.is_dir():
        return None
    return choose(f"held-out:{data.name}", _held_out_stream(data, layout), tokenizer, framing, max_tokens)


def _held_out_stream(data: AblationData, layout: Layout) -> Iterator[str]:
    """The held-out documents' texts, shard by shard: their ids from the shard's
    ``.docs.parquet``, their text from the unit's kept documents (``docs/<source>/<unit>``)."""
    corpus = data.corpus
    bounds = zip(corpus.prefixes, corpus.shard_first_document[:-1], corpus.shard_first_document[1:], strict=True)
    for prefix, first, end in bounds:
        mask = data.held_out[first:end]
        if not mask.any():
            continue
        ids = pq.read_table(docs_path(prefix), columns=["id"]).column("id").combine_chunks().filter(pa.array(mask))
        shard = Path(prefix)
        found: dict[str, str] = {}
        for path in part_files(layout.docs(shard.parent.name), shard.name):
            table = pq.read_table(path, columns=["id", "text"], filters=pc.field("id").isin(ids))
            found.update(zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True))
        for doc_id in ids.to_pylist():
            if doc_id not in found:
                raise EvalTextError(f"{data.path}: held-out document {doc_id!r} of {shard} is not in docs/")
            yield found[doc_id]
