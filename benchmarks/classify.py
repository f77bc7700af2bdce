"""The ``classify`` stage's scoring, side by side with fastText's own Python loops and
datatrove's ``FastTextClassifierFilter``: same web documents, same model files, same run,
one core each.

    python -m benchmarks.classify [--docs N] [--repeats R] [--data ../shared/data]

Models: a quality-style classifier trained here with ``fasttext.train_supervised`` (dim
100, wordNgrams 2, bucket 200,000, one thread; label ``hq`` = paragraphs of US speeches,
``lq`` = every shared web document: the model is only timed, its accuracy is not the
point) into a temporary folder, and the bundled ``stages/models/lid.176.ftz`` with label
``en``. Each model is loaded, and each side run once on a few documents, before any
timing; every side works from the same list of Python ``str``.

Sides, each producing one score per document (the probability of the model's label):

* ``prep score()``: ``stages.classify.models.score`` over Arrow batches of 8,192 rows
  (the engine's map batch), i.e. ``preprocess`` + one batched ``predict(k=-1)`` + picking
  the label: the stage's whole scoring path.
* ``prep map_unit``: ``Classify.map_unit`` over the same batches: the scoring above plus
  the id hashes and the Arrow IPC scores file it writes (to a temporary folder).
* ``fastText loop k=1``: ``model.predict(preprocess(text))`` one document at a time, the
  default top label, read as DCLM does (``p`` if it is the label, else ``1 - p``). The
  same scores for a two-label model only; for lid.176 it is shown for reference (a
  document whose top label is not ``en`` gets 0, not its ``en`` probability).
* ``fastText loop k=-1``: the same with every label, then the label's probability.
* ``fastText batch k=-1``: ``model.predict(list_of_lines, k=-1)`` per 8,192 documents.
* ``(fastText C++ predict alone)``: the C++ ``multilinePredict`` on lines already
  preprocessed, its Python read-out left untimed: not a way to run, but the floor for any
  scorer that uses fastText's inference, hence the ceiling of its speed-up over datatrove.
* ``datatrove``: ``FastTextClassifierFilter(model_url=<local path>, keep_labels=(label,
  0.5), newline_replacement=" ")`` and its ``filter`` on ``Document`` objects, as its
  pipeline calls it (without reader/writer/stats overhead, in its favour).
  ``newline_replacement=" "`` makes it show fastText the same text as the others (its
  default, "", glues the last word of a line to the first of the next). Two things in
  datatrove 0.10.1 are patched in this process only (``datatrove_filter_class``), neither
  on its scoring path: its dependency check wants the distribution
  ``fasttext-numpy2-wheel`` and ``fasteners``, where prep installs ``fasttext-community``
  (the same fastText module, which the filter imports as ``fasttext.FastText._FastText``)
  and no fasteners; and ``model`` passes ``model_url`` to
  ``cached_asset_path_or_download``, which copies even a local file into
  huggingface_hub's assets cache under a fasteners lock: it is made to return the local
  path, so the filter loads the very file the other sides load.

Rates are best of ``--repeats``, the sides interleaved in each repeat; the median shows
the run-to-run noise, which on a shared machine is as large as prep's gaps to fastText's
loops. CPU seconds (of the best repeat) show each side is single-threaded (fastText's
``predict`` runs on the calling thread). Scores are compared with prep's (max absolute
difference, and documents kept at 0.5) as a check that every side did the same work;
documents the preprocessing leaves empty are left out of that comparison: prep scores
them 0 by design, fastText answers with whatever its end-of-line token predicts.

Where the time goes (``py-spy --native``, this machine): for prep on the quality model
about 82% is fastText's C++ (tokenising, word lookup and bigram hashing about 34%,
summing rows of the 239 MB input matrix about 31%), the Python side (line splitting,
strings) about 15%; on lid.176, 65% is fastText splitting words into character n-grams
(34% in the quantized model's lookup of pruned n-grams). datatrove spends about 79% of
its filter in ``predict`` on the quality model and 55% on lid.176, where 39% goes to a
dict and an ``np.mean`` per label per document. So the speed-up over datatrove any
fastText-based scorer can reach is what the C++ line shows: about 1.1-1.2x on a 2-label
model and 2.1x on lid.176.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats.fasttext_model import preprocess

ROOT = Path(__file__).resolve().parents[1]
BATCH = 8192  # rows per batch: what the engine's map phase reads (pipeline/engine/unit.py)
THRESHOLD = 0.5
CPP = "(fastText C++ predict alone, lines ready)"


def read_texts(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def load_web(data: Path) -> list[str]:
    """Texts of the shared web corpora (all but the raw-HTML one), in a fixed order."""
    texts: list[str] = []
    for path in sorted((data / "web").glob("*.jsonl.gz")):
        if path.name != "web_html.jsonl.gz":
            texts += read_texts(path)
    return texts


def train_quality_model(speeches: list[str], web: list[str], folder: Path) -> Path:
    """A DCLM-sized-class quality classifier: ``hq`` speech paragraphs vs ``lq`` web text."""
    import fasttext

    hq = [p for s in speeches for p in (preprocess(p) for p in s.split("\n\n")) if len(p.split()) >= 20]
    lq = [line for line in (preprocess(t) for t in web) if line]
    rng = random.Random(0)
    examples = [f"__label__hq {line}" for line in hq] + [f"__label__lq {line}" for line in lq]
    rng.shuffle(examples)
    train = folder / "quality.train"
    train.write_text("\n".join(examples) + "\n", encoding="utf-8")
    model = fasttext.train_supervised(
        str(train), dim=100, wordNgrams=2, bucket=200_000, epoch=5, lr=0.1, thread=1, verbose=0
    )
    path = folder / "quality.bin"
    model.save_model(str(path))
    print(f"trained {path.name}: {len(hq)} hq speech paragraphs, {len(lq)} lq web documents, ", end="")
    print(f"{path.stat().st_size / 1e6:.0f} MB")
    return path


# -- the sides: each returns one float per document ------------------------------------


def batches_of(texts: list[str]) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pydict({"id": [f"doc-{i + j}" for j in range(len(chunk))], "text": chunk})
        for i in range(0, len(texts), BATCH)
        for chunk in [texts[i : i + BATCH]]
    ]


def prep_score(spec, batches: list[pa.RecordBatch]) -> np.ndarray:
    from stages.classify.models import score

    return np.concatenate([score(spec, batch.column("text")) for batch in batches])


def prep_map_unit(stage, batches: list[pa.RecordBatch], work: Path) -> np.ndarray:
    from pipeline.stage import UnitContext
    from stages.classify.stage import SCORES, _column, _field, _read

    unit = UnitContext(out_dir=work, source="web", unit="bench")
    stage.map_unit(iter(batches), unit, work)
    ((tmp, final),) = unit.pending.items()
    os.replace(tmp, final)
    return _column(_read(SCORES.path(work, "web", "bench")), _field(stage.specs[0].name))


def fasttext_loop_top(model, wanted: str, texts: list[str], binary: bool) -> np.ndarray:
    out = []
    for text in texts:
        labels, probs = model.predict(preprocess(text))
        out.append(probs[0] if labels[0] == wanted else 1.0 - probs[0] if binary else 0.0)
    return np.minimum(np.array(out, np.float32), 1.0)


def fasttext_loop_all(model, wanted: str, texts: list[str]) -> np.ndarray:
    out = []
    for text in texts:
        labels, probs = model.predict(preprocess(text), k=-1)
        out.append(probs[labels.index(wanted)] if wanted in labels else 0.0)
    return np.minimum(np.array(out, np.float32), 1.0)


def fasttext_batch_all(model, wanted: str, texts: list[str]) -> np.ndarray:
    out = []
    for i in range(0, len(texts), BATCH):
        labels, probs = model.predict([preprocess(t) for t in texts[i : i + BATCH]], k=-1)
        out += [p[ls.index(wanted)] if wanted in ls else 0.0 for ls, p in zip(labels, probs)]
    return np.minimum(np.array(out, np.float32), 1.0)


def datatrove_filter(flt, wanted: str, texts: list[str]) -> np.ndarray:
    from datatrove.data import Document

    out = []
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        flt.filter(doc)
        out.append(doc.metadata.get(wanted, 0.0))
    return np.minimum(np.array(out, np.float32), 1.0)


def fasttext_cpp_only(model, lines: list[str]):
    """fastText's C++ ``multilinePredict`` alone on lines already preprocessed (with the
    newline its Python wrapper appends): the floor for any scorer built on fastText."""
    return model.f.multilinePredict(lines, -1, 0.0, "strict")


def read_out(result, wanted: str) -> np.ndarray:
    labels, probs = result
    return np.minimum(np.array([p[ls.index(wanted)] if wanted in ls else 0.0 for ls, p in zip(labels, probs)]), 1.0)


def datatrove_filter_class():
    """datatrove's ``FastTextClassifierFilter``, reading ``model_url`` as a local path and
    accepting ``fasttext-community`` (see the module docstring). Patches this process only."""
    from datatrove.pipeline.filters import FastTextClassifierFilter, fasttext_filter

    FastTextClassifierFilter._requires_dependencies = [("fasttext", "fasttext-community")]
    fasttext_filter.cached_asset_path_or_download = lambda remote_path, **_: remote_path
    return FastTextClassifierFilter


def timed(fn: Callable[[], np.ndarray]) -> tuple[float, float, np.ndarray]:
    cpu, wall = time.process_time(), time.perf_counter()
    scores = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, scores


def bench_model(name: str, path: Path, label: str, texts: list[str], repeats: int, tmp: Path) -> dict[str, float]:
    import fasttext

    from stages.classify import Classify
    from stages.classify.models import load

    mb = sum(len(t.encode()) for t in texts) / 1e6
    wanted = "__label__" + label
    stage = Classify(Classify.Options(models=[{"name": name, "path": str(path), "label": label}]))
    spec = stage.specs[0]
    load(spec.path, spec.label)  # the stage's per-process model, loaded outside the timing
    model = fasttext.load_model(str(path))  # the plain loops' own copy
    flt = datatrove_filter_class()(model_url=str(path), keep_labels=(label, THRESHOLD), newline_replacement=" ")
    _ = flt.model  # loaded outside the timing
    batches = batches_of(texts)
    lines = [preprocess(t) + "\n" for t in texts]
    work = tmp / f"work-{name}"
    binary = len(model.labels) == 2
    sides: dict[str, Callable[[], np.ndarray]] = {
        "prep score()": lambda: prep_score(spec, batches),
        "prep map_unit": lambda: prep_map_unit(stage, batches, work),
        "fastText loop k=1" + ("" if binary else " (top label only)"): lambda: fasttext_loop_top(
            model, wanted, texts, binary
        ),
        "fastText loop k=-1": lambda: fasttext_loop_all(model, wanted, texts),
        "fastText batch k=-1": lambda: fasttext_batch_all(model, wanted, texts),
        "datatrove FastTextClassifierFilter": lambda: datatrove_filter(flt, wanted, texts),
        CPP: lambda: fasttext_cpp_only(model, lines),
    }
    warm = texts[:64]
    warm_batches = batches_of(warm)
    prep_score(spec, warm_batches)
    prep_map_unit(stage, warm_batches, tmp / f"warm-{name}")  # id hashing, Arrow IPC
    fasttext_loop_top(model, wanted, warm, binary)
    datatrove_filter(flt, wanted, warm)
    best: dict[str, tuple[float, float]] = {}
    walls: dict[str, list[float]] = {side: [] for side in sides}
    scores: dict[str, np.ndarray] = {}
    for _ in range(repeats):
        for side, fn in sides.items():
            wall, cpu, scores[side] = timed(fn)
            walls[side].append(wall)
            if side not in best or wall < best[side][0]:
                best[side] = (wall, cpu)

    scores[CPP] = read_out(scores[CPP], wanted)
    ours = scores["prep score()"]
    nonempty = np.array([bool(preprocess(t)) for t in texts])
    print(f"\n### {name}: {path.name}, label {label!r}, {len(model.labels)} labels")
    print(f"{len(texts)} documents ({len(texts) - nonempty.sum()} empty after preprocessing), {mb:.1f} MB")
    print()
    print("| side | best s | median s | CPU s | docs/s | MB/s | max abs diff vs prep | kept at 0.5 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for side, (wall, cpu) in best.items():
        diff = float(np.max(np.abs(scores[side] - ours)[nonempty], initial=0.0))
        kept = int(np.sum(scores[side][nonempty] >= THRESHOLD))
        rate = f"{len(texts) / wall:,.0f} | {mb / wall:.2f}"
        print(f"| {side} | {wall:.2f} | {np.median(walls[side]):.2f} | {cpu:.2f} | {rate} | {diff:.1e} | {kept} |")
    rates = {side: len(texts) / wall for side, (wall, _) in best.items()}
    return rates


def report(name: str, rates: dict[str, float], binary: bool) -> None:
    ours = rates["prep score()"]
    same = ["fastText loop k=-1", "fastText batch k=-1"] + (["fastText loop k=1"] if binary else [])
    best_ft = max(same, key=rates.__getitem__)
    print()
    print(f"{name}: prep score() vs best fastText loop with the same scores ({best_ft}): ", end="")
    print(f"{ours / rates[best_ft]:.2f}x (target >= 0.9x)")
    if not binary:
        top = next(s for s in rates if s.startswith("fastText loop k=1"))
        print(f"{name}: prep score() vs {top}: {ours / rates[top]:.2f}x (not the same scores)")
    print(f"{name}: prep map_unit vs best fastText loop: {rates['prep map_unit'] / rates[best_ft]:.2f}x")
    dt = rates["datatrove FastTextClassifierFilter"]
    print(f"{name}: prep score() vs datatrove: {ours / dt:.2f}x, map_unit vs datatrove: ", end="")
    print(f"{rates['prep map_unit'] / dt:.2f}x (target >= 5x); ", end="")
    print(f"fastText's C++ alone vs datatrove: {rates[CPP] / dt:.2f}x (about the most a scorer on fastText can reach)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3000, help="web documents timed (0: all of them)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--models", default="quality,lid", help="comma-separated: quality, lid")
    args = parser.parse_args()
    data = args.data if (args.data / "web").is_dir() else Path("/work/shared/data")
    web = load_web(data)
    if not web:
        sys.exit(f"no web corpora under {data}")
    rng = random.Random(1)
    order = list(range(len(web)))
    rng.shuffle(order)
    n = args.docs or len(web)
    timed_docs = [web[i] for i in order[:n]]

    cores = f"{os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"
    print(f"machine: {cores}, Python {platform.python_version()}; each side on one thread; best of {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="bench-classify-") as tmp_name:
        tmp = Path(tmp_name)
        wanted = args.models.split(",")
        runs = []
        if "quality" in wanted:
            speeches = read_texts(data / "eval" / "us_speeches.jsonl.gz")
            runs.append(("quality", train_quality_model(speeches, web, tmp), "hq", True))
        if "lid" in wanted:
            runs.append(("english", ROOT / "stages" / "models" / "lid.176.ftz", "en", False))
        results = [
            (name, bench_model(name, path, label, timed_docs, args.repeats, tmp), b) for name, path, label, b in runs
        ]
        print()
        for name, rates, binary in results:
            report(name, rates, binary)


if __name__ == "__main__":
    main()
