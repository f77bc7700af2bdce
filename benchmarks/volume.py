"""``configs/c4.toml`` on one box at 1 GB and 10 GB of JSON lines: does time stay linear,
memory flat and work-file disk bounded?

    python -m benchmarks.volume --scales 1,10 [--workers 2] [--work $TMPDIR/prep-volume]
    python -m benchmarks.volume --scales 0.1          # a minute: checks the harness

Corpus: the shared English web prose (the web files, the web pages with PII, the
presidential speeches), cut at line ends (a web page's paragraphs) into passages of about
``PASSAGE_WORDS`` words (``benchmarks.neardup_corpus.passages``, exact repeats passed
over: 33,677), of which the 15,925 that c4.toml's filters keep (``kept_by_filters``;
about 1 KB of JSON each, 15.7 MB) are repeated, as ``benchmarks.e2e`` builds its scales,
until the scale's gigabytes are written, each copy under a unique id
``<passage id>#<copy>``. Copy 0 is the passage; every ``EXACT_EVERY``-th copy after it is
an exact copy; every other copy has ``EDITS`` words replaced by other words of the same
passage (seeded), so it is a near duplicate (5-gram Jaccard about 0.85 to the passage)
that exact dedup does not see and MinHash must. Every document past the first copy is a
duplicate, so what is kept does not grow with the volume (clusters of about 64 documents
at 1 GB, 640 at 10 GB): the volume measures the pipeline's scaling, not its filtering
quality.

Why passages, not whole pages: C4's documents average about 2.2 KB of JSON (365M in
800 GB), so 10 GB of C4-sized documents would be only 4.5M; about 1 KB a document puts
10M+ documents in 10 GB, and past the filters into dedup, which the issue asks to measure
end to end. Code and math are left out: the chain's language and web rules drop them
before dedup, so they would add volume dedup never sees.

The files are plain JSON lines in shards of about ``SHARD_BYTES`` (prep cuts each into
64 MB units), each written atomically; a corpus folder that records the same parameters
is reused, and is deleted after its run unless ``--keep-corpus``. The builder is
deterministic: the same arguments give the same bytes. The 10 GB scale needs about 35 GB
free under ``--work``: the corpus, and the run's folder at about 2.1 bytes per byte of
input.

Each scale is one ``prep run`` of ``configs/c4.toml`` (its ``paths`` pointed at the
corpus) with ``--workers`` processes, timed in its own process tree by
``benchmarks.e2e.measure``: wall, CPU seconds and peak PSS of the tree. Beside it, every
``DISK_INTERVAL`` seconds, the bytes on disk of the run's folder and of its ``work/``
folder (documents between segments, dedup's band, partition and round files, id hashes)
are sampled; their peaks and what is left when the run ends are reported, with
documents read and kept, and the documents and clusters dedup saw. Time and memory
exponents (time ~ volume^k) are printed between the smallest and largest scale.

datatrove is not run: at the 0.56-0.62 MB/s ``benchmarks.e2e`` measured for it on a
lighter chain, 1 GB alone takes 27-30 minutes of both cores, which a 10 GB run of prep
on the same machine cannot share; README's e2e table gives the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from benchmarks.e2e import measure, prep_command, prep_kept
from benchmarks.neardup_corpus import passages
from benchmarks.paragraph_dedup import DATA
from benchmarks.paragraph_dedup import FILES as WEB_FILES
from pipeline.util.atomic import atomic_path

SOURCES = WEB_FILES + ["pii/web_pii_candidates.jsonl.gz", "eval/us_speeches.jsonl.gz"]
PASSAGE_WORDS = 120
EXACT_EVERY = 4
EDITS = 2
SEED = 44
SHARD_BYTES = 512 << 20
DISK_INTERVAL = 2.0
WARM_UP_GB = 0.01
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "c4.toml"
FIRST_GLOBAL = '[[stages]]\nname = "dedup"'
C4_PATHS = re.compile(r'^paths = \["[^"]*"\]$', re.M)
# A word the edits may swap: ASCII letters, not the letter after a JSON escape's backslash.
WORD = re.compile(r"(?<![\\A-Za-z0-9_])[A-Za-z]+(?![A-Za-z0-9_])")
RECIPE = "corpus.json"


def c4_config(corpus: Path, filters_only: bool = False) -> str:
    """configs/c4.toml with its ``paths`` pointed at ``corpus``'s JSON lines; with
    ``filters_only``, its per-document stages alone (up to dedup)."""
    text, found = C4_PATHS.subn(f"paths = [{json.dumps(str(corpus / '*.jsonl'))}]", CONFIG.read_text())
    if found != 1:
        raise SystemExit(f"{CONFIG}: expected one `paths = [...]` line to point at the corpus, found {found}")
    if filters_only:
        text = text[: text.index(FIRST_GLOBAL)]
    return text


def kept_by_filters(docs: list[dict], work: Path) -> list[dict]:
    """The passages c4.toml's filters keep (one ``prep run`` of its stages up to dedup),
    so that every copy of the corpus reaches dedup whole: about half the passages are
    dropped (too few sentences, not English, repeated lines), which would halve the
    documents dedup sees. Their original text is kept, not the filtered one."""
    folder = work / "filters"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "corpus").mkdir(parents=True)
    with open(folder / "corpus" / "passages.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": d["id"], "text": d["text"]}) + "\n" for d in docs)
    (folder / "filters.toml").write_text(c4_config(folder / "corpus", filters_only=True))
    command = prep_command(folder / "filters.toml", folder / "out", 2)
    if subprocess.run(command, cwd=CONFIG.parents[1]).returncode:
        raise SystemExit(f"prep run of c4.toml's filters over the passages failed: {' '.join(command)}")
    kept = set(prep_kept(folder / "out"))
    shutil.rmtree(folder)
    return [d for d in docs if d["id"] in kept]


class Base:
    """The distinct passages as JSON-escaped strings, with where their words are, so that
    each copy is sliced together from them instead of re-encoded."""

    def __init__(self, data: Path, work: Path):
        docs = kept_by_filters(passages(data, SOURCES, 10**9, PASSAGE_WORDS)[0], work)
        self.ids = [d["id"] for d in docs]
        self.texts = [json.dumps(d["text"], ensure_ascii=False) for d in docs]
        self.words = [np.array([m.span() for m in WORD.finditer(t)], dtype=np.int64).reshape(-1, 2) for t in self.texts]
        prefix = np.array([len(f'{{"id":"{i}#'.encode()) for i in self.ids])
        self.line_bytes = prefix + np.array([len(t.encode()) for t in self.texts]) + len('","text":}\n')

    def __len__(self) -> int:
        return len(self.texts)

    def copy(self, copy: int, count: int) -> bytes:
        """The first ``count`` lines of copy ``copy``, encoded."""
        picks = np.random.default_rng([SEED, copy]).random((count, EDITS, 2))
        lines = []
        for i in range(count):
            text, spans = self.texts[i], self.words[i]
            if copy % EXACT_EVERY and len(spans) > EDITS:
                text = _swap(text, spans, (picks[i] * len(spans)).astype(np.int64))
            lines.append(f'{{"id":"{self.ids[i]}#{copy}","text":{text}}}\n')
        return "".join(lines).encode()

    def lines_within(self, copy: int, budget: int) -> int:
        """How many lines of copy ``copy`` fit in ``budget`` bytes (edits change a line's
        length by a few bytes, which the count ignores)."""
        sizes = np.cumsum(self.line_bytes + len(str(copy)))
        return int(np.searchsorted(sizes, budget, side="right"))


def _swap(text: str, spans: np.ndarray, picks: np.ndarray) -> str:
    """``text`` with the word at each pick's first index replaced by the word at its second."""
    edits = sorted({int(t): int(s) for t, s in picks}.items())
    out, at = [], 0
    for target, source in edits:
        start, end = spans[target]
        out += [text[at:start], text[spans[source][0] : spans[source][1]]]
        at = end
    out.append(text[at:])
    return "".join(out)


def build(data: Path, folder: Path, gigabytes: float) -> dict:
    """Write the corpus of ``gigabytes`` (1e9 bytes) into ``folder``, or find it there:
    returns its recipe ``{"gigabytes", "documents", "bytes", "shards", ...}``."""
    recipe = {"gigabytes": gigabytes, "passage_words": PASSAGE_WORDS, "exact_every": EXACT_EVERY, "edits": EDITS}
    recipe |= {"seed": SEED, "shard_bytes": SHARD_BYTES, "passages_kept_by": f"{CONFIG.name} up to dedup"}
    done = folder / RECIPE
    if done.exists():
        found = json.loads(done.read_text())
        if {k: found.get(k) for k in recipe} == recipe:
            return found
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = Base(data, folder)
    target, size, documents, shard, copy = int(gigabytes * 1e9), 0, 0, [], 0
    shards = 0
    while size < target:
        count = min(len(base), max(1, base.lines_within(copy, target - size)))
        shard.append(base.copy(copy, count))
        documents += count
        size += len(shard[-1])
        copy += 1
        if sum(map(len, shard)) >= SHARD_BYTES or size >= target:
            _write_shard(folder / f"part-{shards:04d}.jsonl", shard)
            shard, shards = [], shards + 1
    recipe |= {"documents": documents, "bytes": size, "shards": shards, "copies": copy, "passages": len(base)}
    with atomic_path(done) as tmp:
        tmp.write_text(json.dumps(recipe, indent=1))
    return recipe


def _write_shard(path: Path, blocks: list[bytes]) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for block in blocks:
            f.write(block)


def disk_bytes(folder: Path) -> int:
    """Bytes ``folder``'s files take on disk (allocated blocks; 0 when it is gone)."""
    total = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += disk_bytes(Path(entry.path))
            else:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:  # written or removed while we looked
            pass
    return total


class DiskPeak:
    """Samples, on a thread, the disk taken by every run folder (``<root>/*/out``) and by
    its ``work/`` folder; ``peak`` holds the largest of each seen."""

    def __init__(self, root: Path):
        self.root = root
        self.peak = {"out": 0, "work": 0}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._done.wait(DISK_INTERVAL):
            for out in self.root.glob("*/out"):
                self.peak["out"] = max(self.peak["out"], disk_bytes(out))
                self.peak["work"] = max(self.peak["work"], disk_bytes(out / "work"))

    def __enter__(self) -> DiskPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def side_command(side: str, corpus: Path, work: Path, workers: int) -> list[str]:
    """``prep run`` of configs/c4.toml with its paths pointed at the corpus
    (``benchmarks.e2e.measure`` runs it); not quiet, so its phase times reach the log."""
    config = work / "c4.toml"
    config.write_text(c4_config(corpus))
    return [arg for arg in prep_command(config, work / "out", workers) if arg != "-q"]


def collect(side: str, work: Path) -> dict:
    """What the run counted (its manifest) and the disk its folder still takes."""
    out = work / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    phases = json.loads((out / "cost.json").read_text())["cpu_seconds"]
    return {"manifest": manifest, "phases": phases, "left": {"out": disk_bytes(out), "work": disk_bytes(out / "work")}}


def run_scale(data: Path, work: Path, gigabytes: float, workers: int, keep: bool) -> dict:
    """Build (or find) one scale's corpus, run prep on it, measure; the row."""
    corpus = work / f"corpus-{gigabytes:g}GB"
    recipe = build(data, corpus, gigabytes)
    print(f"\n== {gigabytes:g} GB: {recipe['documents']:,} documents, {recipe['shards']} files", flush=True)
    with DiskPeak(work) as disk:
        result = measure("prep", corpus, workers, module=__spec__.name)
    if not keep:
        shutil.rmtree(corpus)
    stages = result["manifest"]["stages"]
    dedup = stages["dedup"]["counters"]
    return {
        "gigabytes": gigabytes,
        "bytes": recipe["bytes"],
        "documents": recipe["documents"],
        "kept": result["manifest"]["balance"]["output"],
        "dedup_documents": dedup["dedup.documents"],
        "clusters": dedup["dedup.clusters"],
        "wall": result["wall"],
        "cpu": result["cpu"],
        "peak_pss": result["peak_pss"],
        "phases": result["phases"],
        "disk_left": result["left"],
        # the last samples may miss the end of the run, which is then the peak
        "disk_peak": {k: max(v, result["left"][k]) for k, v in disk.peak.items()},
    }


def report(rows: list[dict]) -> None:
    print(
        f"\n{'GB':>6} {'docs in':>12} {'to dedup':>12} {'clusters':>9} {'kept':>8} {'wall s':>8} {'CPU s':>8} "
        f"{'MB/s':>6} {'peak PSS':>9} {'work peak':>10} {'out peak':>9} {'work left':>10} {'out left':>9}"
    )
    for r in rows:
        gb = [r["disk_peak"]["work"], r["disk_peak"]["out"], r["disk_left"]["work"], r["disk_left"]["out"]]
        print(
            f"{r['gigabytes']:6g} {r['documents']:12,} {r['dedup_documents']:12,} {r['clusters']:9,} {r['kept']:8,} "
            f"{r['wall']:8.1f} {r['cpu']:8.1f} {r['bytes'] / r['wall'] / 1e6:6.2f} {r['peak_pss'] / 2**20:8,.0f}M "
            + " ".join(f"{b / 1e9:{w}.2f}G" for b, w in zip(gb, (9, 8, 9, 8)))
        )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        span = math.log(b["bytes"] / a["bytes"])
        print(f"\nfrom {a['gigabytes']:g} to {b['gigabytes']:g} GB (volume x{b['bytes'] / a['bytes']:.2f}):")
        for name, key in (("wall time", "wall"), ("CPU time", "cpu"), ("peak PSS", "peak_pss")):
            print(f"  {name:<10} x{b[key] / a[key]:6.2f}   exponent {math.log(b[key] / a[key]) / span:5.2f}")
        for name in ("work", "out"):
            ratio = b["disk_peak"][name] / max(a["disk_peak"][name], 1)
            share = b["disk_peak"][name] / b["bytes"]
            print(f"  {name + ' disk':<10} x{ratio:6.2f}   (peak: {share:.2f} bytes per byte of input)")
        print("  CPU seconds by phase (cost.json; tasks only, not the driver or start-up):")
        for phase, seconds in sorted(b["phases"].items(), key=lambda kv: -kv[1]):
            first = a["phases"].get(phase, 0)
            exponent = f"{math.log(seconds / first) / span:5.2f}" if first > 0 and seconds > 0 else "    -"
            print(f"    {phase:<26} {first:9.1f} -> {seconds:9.1f}   exponent {exponent}")
    print(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1,10", help="comma-separated gigabytes of JSON lines, e.g. 1,10")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "prep-volume", help="corpora and run folders"
    )
    parser.add_argument("--keep-corpus", action="store_true", help="keep each built corpus for a later run")
    args = parser.parse_args()
    scales = sorted(float(s) for s in args.scales.split(",") if s)
    warm = args.work / "corpus-warm-up"
    build(args.data, warm, WARM_UP_GB)
    measure("prep", warm, args.workers, module=__spec__.name)  # untimed: compiles the kernels if the cache is cold
    shutil.rmtree(warm)
    rows = []
    for gigabytes in scales:
        rows.append(run_scale(args.data, args.work, gigabytes, args.workers, args.keep_corpus))
        report(rows)


if __name__ == "__main__":
    main()
