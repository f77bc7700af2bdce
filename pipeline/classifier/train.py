"""``prep classifier train`` as a library: labeled documents in; a fastText model, its
sidecar and its held-out metrics out.

1. With ``max_per_label``, a first pass keeps the N smallest id hashes of each label
   (``sampling.Quota``); nothing else of the documents is held.
2. The second pass preprocesses each picked document (``fasttext_model.preprocess``, the
   one preprocessing the ``classify`` stage also uses) into a ``__label__<label> <text>``
   line: held-out documents (by a second hash of the id) to one temporary file, the rest
   to fastText's training file, in hash order (``shuffle.ShuffledLines``).
3. fastText's own trainer (``fasttext.train_supervised``) reads the training file, in a
   child process that saves the model under a temporary name beside ``out``: fastText's
   C++ loop does not answer Ctrl-C, and a thread it cannot start aborts its process, so
   the parent waits, kills the child on Ctrl-C and reports how it died otherwise.
4. The held-out lines are scored (``predict.score_lines``) and measured (``metrics``).
5. The model's temporary file is renamed, then the sidecar (what trained it on what, the
   counts, the metrics and the model's sha256) is written atomically: an older model's
   sidecar is removed first, so a kill at any moment leaves a model with its own sidecar
   or with none, never with another's (and ``read_sidecar`` refuses one whose sha256
   is not its model's).

Temporary files live beside the model (``.<name>.<pid>@<host>.<tag>.<random>.tmp``) and are
removed whatever happens; those of a training killed outright (SIGKILL, whose fastText
child dies with it) are removed by the next training of the same model. Problems the
user can fix are ``ClassifierError``; fastText's own complaints too.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline import __version__
from pipeline.classifier.inputs import ClassifierError, ReadLog, Source, describe, read_documents, skipped_lines
from pipeline.classifier.metrics import classification_metrics, positive_label
from pipeline.classifier.predict import score_lines
from pipeline.classifier.sampling import Quota, Selector, held_out, keys
from pipeline.classifier.shuffle import ShuffledLines, temp_file
from pipeline.formats import fasttext_model
from pipeline.formats.fasttext_model import LABEL_PREFIX, PREPROCESSING, preprocess
from pipeline.kernels.hashing import file_sha256, id_hashes
from pipeline.util.atomic import atomic_path, remove_dead_temporaries, write_json_atomic
from pipeline.util.numbers import counted
from pipeline.util.printable import error_line, printable, printable_path
from pipeline.util.processes import ChildDied, run_in_child

END_OF_LINE = "</s>"  # the word fastText adds at the end of every line


def default_threads() -> int:
    """fastText's training threads: the CPUs this process may use, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


@dataclass(frozen=True)
class Hyperparameters:
    """fastText's supervised options (the command's ``--help`` says why these defaults)."""

    epoch: int = 5
    lr: float = 0.1
    word_ngrams: int = 2
    dim: int = 100
    ws: int = 5
    min_count: int = 1
    bucket: int = 2_000_000
    loss: str = "softmax"
    threads: int = field(default_factory=default_threads)
    seed: int = 0

    def fasttext_args(self) -> dict:
        """The same, under ``fasttext.train_supervised``'s names."""
        names = {"word_ngrams": "wordNgrams", "min_count": "minCount", "threads": "thread"}
        return {names.get(key, key): value for key, value in asdict(self).items()}


def train(
    sources: list[Source],
    out: Path,
    hyper: Hyperparameters,
    *,
    max_per_label: int | None = None,
    holdout: float = 0.1,
    positive: str | None = None,
    log: Callable[[str], None] = lambda _: None,
    verbose: int = 0,
) -> dict:
    """Train on ``sources``, write ``out`` and its sidecar; return the sidecar."""
    out = Path(out)
    if out.is_dir():
        raise ClassifierError(f"--out {printable_path(out)} is a folder; name the model file (MODEL.bin)")
    if out.exists():  # a model is replaced (atomically); a file of the user's never is
        try:
            fasttext_model.check_model_file(out)
        except fasttext_model.ModelError:
            raise ClassifierError(
                f"--out {printable_path(out)} exists and is not a fastText model: name another file, or remove it"
            ) from None
    sidecar_file = fasttext_model.sidecar_path(out)
    if sidecar_file.exists() and not sidecar_file.is_file():
        raise ClassifierError(f"{printable_path(sidecar_file)}, where the sidecar goes, is not a file: remove it")
    remove_dead_temporaries([out, sidecar_file])  # what a training killed before its renames left
    names = ", ".join(printable_path(s.origin) for s in sources)
    log(f"reading {counted(len(sources), 'input')}, {counted(sum(len(s.files) for s in sources), 'file')}: {names}")
    selector, available = Selector(), None
    if max_per_label is not None:
        quota = Quota(max_per_label)
        for batch in read_documents(sources, ReadLog()):
            quota.add(batch.labels, id_hashes(batch.ids))
        available = dict(sorted(quota.seen.items()))
        selector = quota.selector()
        log(f"found {_label_counts(available)}; keeping at most {max_per_label:,} per label, by id hash")
    read_log = ReadLog()
    shuffled = ShuffledLines(out)
    heldout_file = train_file = None
    with atomic_path(out) as model_file:
        try:
            heldout_file = temp_file(out, "heldout")
            counts = _split(sources, read_log, selector, holdout, shuffled, heldout_file)
            for line in skipped_lines(read_log):
                log(line)
            positive = _check_counts(counts, positive, names)
            train_file = shuffled.close()
            train_count = sum(c["train"] for c in counts.values())
            log(
                f"training fastText on {train_count:,} documents ({shuffled.bytes / 1e6:,.1f} MB), "
                f"holding out {sum(c['heldout'] for c in counts.values()):,}: epoch {hyper.epoch}, "
                f"lr {hyper.lr:g}, wordNgrams {hyper.word_ngrams}, dim {hyper.dim}, {counted(hyper.threads, 'thread')}"
            )
            started = time.monotonic()
            model = _fit(train_file, model_file, hyper, verbose)
            log(f"trained in {time.monotonic() - started:.1f} s")
            metrics = _heldout_metrics(model, heldout_file, positive)
        finally:
            shuffled.discard()
            for path in (heldout_file, train_file):
                if path is not None:
                    path.unlink(missing_ok=True)
        for label, count in counts.items():  # documents of the label before --max-per-label
            count["available"] = available[label] if available is not None else count["train"] + count["heldout"]
        sidecar = {
            "prep_version": __version__,
            "preprocessing": PREPROCESSING,
            "labels": fasttext_model.labels(model),
            "positive_label": positive,
            "hyperparameters": hyper.fasttext_args(),
            "sampling": {"max_per_label": max_per_label, "holdout": holdout, "by": "id hash"},
            "inputs": describe(sources, read_log),
            "counts": counts,
            "skipped": {file: dict(sorted(kinds.items())) for file, kinds in read_log.skipped.items()},
            "heldout_metrics": metrics,
            "model_sha256": file_sha256(model_file),
        }
        sidecar_file.unlink(missing_ok=True)  # an older model's: it never lies beside this one
    write_json_atomic(sidecar_file, sidecar)  # once the model it describes is in place
    log(f"wrote {printable_path(out)} ({out.stat().st_size / 1e6:,.1f} MB) and its sidecar")
    return sidecar


def _split(
    sources: list[Source],
    read_log: ReadLog,
    selector: Selector,
    holdout: float,
    shuffled: ShuffledLines,
    heldout_file: Path,
) -> dict[str, dict[str, int]]:
    """Write each picked document's line to the training lines or the held-out file."""
    train_counts: Counter = Counter()
    heldout_counts: Counter = Counter()
    with open(heldout_file, "w", encoding="utf-8") as heldout:
        for batch in read_documents(sources, read_log):
            sample, holdout_keys, order = keys(batch.ids)
            picked = selector.take(batch.labels, sample)
            held = held_out(holdout_keys, holdout)
            for i in np.flatnonzero(picked):
                label = batch.labels[i]
                line = f"{LABEL_PREFIX}{label} {preprocess(batch.texts[i])}"
                if held[i]:
                    heldout.write(line + "\n")
                    heldout_counts[label] += 1
                else:
                    shuffled.add(int(order[i]), line)
                    train_counts[label] += 1
    return {
        label: {"train": train_counts[label], "heldout": heldout_counts[label]}
        for label in sorted(set(train_counts) | set(heldout_counts))
    }


def _check_counts(counts: dict[str, dict[str, int]], wanted_positive: str | None, names: str) -> str:
    """The positive label, once the counts are fit to train on."""
    if not counts:
        raise ClassifierError(f"no documents in {names}")
    if len(counts) == 1:
        (label,) = counts
        raise ClassifierError(f"only one label ({printable(label)}) in {names}: a classifier needs two or more")
    for label, count in counts.items():
        if not count["train"]:
            raise ClassifierError(
                f"label {printable(label)} has no training documents ({count['heldout']} held out): "
                "add documents or lower --holdout"
            )
    return positive_label(list(counts), wanted_positive)


def _fit(train_file: Path, model_file: Path, hyper: Hyperparameters, verbose: int):
    """The model fastText trains on ``train_file``, saved to ``model_file`` by a child
    process (the module's docstring says why) and loaded back."""
    import fasttext  # fasttext-community

    try:
        complaint = run_in_child(_fit_in_child, str(train_file), str(model_file), hyper.fasttext_args(), verbose)
    except ChildDied as died:
        if died.exitcode > 0:  # a Python error in the child, whose traceback is above
            raise ClassifierError(f"fastText's training process failed ({died.how})") from None
        raise ClassifierError(
            f"fastText stopped with {died.how} while training (out of memory, or more --threads than the "
            "system lets it start?): lower --threads, --dim or --bucket"
        ) from None
    if complaint is not None:
        raise ClassifierError(f"fastText could not train: {complaint}")
    return fasttext.load_model(str(model_file))


def _fit_in_child(train_file: str, model_file: str, args: dict, verbose: int) -> str | None:
    """Train and save; None, or the complaint fastText raised as one line."""
    import fasttext  # fasttext-community

    try:
        model = fasttext.train_supervised(input=train_file, verbose=verbose, **args)
        if not [word for word in model.words if word != END_OF_LINE]:
            return _without_words(train_file, args["minCount"])
        model.save_model(model_file)
    except MemoryError:
        return "out of memory for its vectors ((words + --bucket) x --dim floats): lower --dim or --bucket"
    except (RuntimeError, ValueError) as error:
        return error_line(error)
    return None


def _without_words(train_file: str, min_count: int) -> str:
    """Why a model kept no word: ``min_count`` above every word's count, the highest found
    by a second, cheap pass (fastText's dictionary, without training). A document of no
    word never gets here: the reader skips text that is empty once stripped."""
    import fasttext  # fasttext-community

    counted = fasttext.train_supervised(
        input=train_file, minCount=1, epoch=0, dim=1, bucket=0, wordNgrams=1, thread=1, verbose=0
    )
    words, counts = counted.get_words(include_freq=True)
    highest = max((int(n) for word, n in zip(words, counts) if word != END_OF_LINE), default=0)
    return (
        f"--min-count {min_count} is above every word's count (the most frequent word occurs {highest:,} "
        f"times), so the classifier would have no words: lower --min-count to {highest} or less"
    )


def _heldout_metrics(model, heldout_file: Path, positive: str) -> dict | None:
    """The model's metrics on the held-out lines; None when there are none."""

    def items():
        with open(heldout_file, encoding="utf-8") as f:
            for line in f:
                label, _, text = line.rstrip("\n").partition(" ")
                yield label.removeprefix(LABEL_PREFIX), text

    truth, probs = score_lines(model, items())
    if not truth:
        return None
    return classification_metrics(truth, probs, fasttext_model.labels(model), positive)


def _label_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{printable(label)} {n:,}" for label, n in counts.items())
