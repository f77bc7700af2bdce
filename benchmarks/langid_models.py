"""Offline language-ID models from the package registries against the ``langid`` stage's lid.176.

Every model here runs with what its package ships (nothing is downloaded): lid.176.ftz
(bundled with prep), lingua (``lingua-language-detector``, high-accuracy mode, every
language), langid.py (``py3langid``), CLD2 (``pycld2``), CLD3 (``cld3-py``), ``langdetect``
and HeLI-OTS (``heliport``). A model the environment lacks is listed and skipped.

Accuracy is per language, then the mean over languages, on
  * documents of 1-2 KB joined from the odd-numbered lingua test sentences (67 languages
    lid.176 knows; the even half derived the stage's thresholds): a model's top-1 label;
    for the stage rows, kept with the right label when ``languages = "all"``;
  * UDHR paragraphs of those languages (66 of them have a UDHR version).
Speed is one core, the median CPU time of 3 passes over every 9th document, in documents and
MB per second; memory is the peak resident size a fresh process gains by loading and running the
model; install size is what the package's files take. Hybrids: the stage with a second
model asked only about documents below their threshold or in a confusable set
(``stages/langid/second_opinion.py``), on those documents and on the shared web pages,
where the slowdown against the stage alone is the median CPU time of 3 interleaved passes.

Run: python -m benchmarks.langid_models [--data DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import multiprocessing
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.langid import UDHR_TO_MODEL, default_data_dir, lingua_documents, multilingual_sets, read_jsonl
from stages.langid import LangId, bundled_model_path, detect, load_model
from stages.langid import second_opinion as second
from stages.langid.model import BUNDLED_MODEL

Ask = Callable[[list[str]], list[str | None]]

# ISO 639-3 (heliport) -> lid.176's label. heliport has one label for Serbo-Croatian (hbs) and
# one for Malay and Indonesian (msa): left as they are, they are never right.
HELIPORT_TO_MODEL = {k.split("_")[0]: v for k, v in UDHR_TO_MODEL.items()} | {
    "cmn": "zh", "nob": "no", "nno": "nn", "pes": "fa", "sqi": "sq", "swa": "sw", "ara": "ar",
    "aze": "az", "mon": "mn", "uzn": "uz", "mlg": "mg", "que": "qu", "grn": "gn", "hat": "ht",
    "ell": "el", "ron": "ro", "zul": "zu", "sna": "sn", "sot": "st", "tso": "ts", "lug": "lg",
}  # fmt: skip


def _lid176() -> Ask:
    model = load_model(str(bundled_model_path()))
    return lambda texts: detect(model, pa.array(texts, pa.large_string()), LangId.Options().max_chars).lang.to_pylist()


def _lingua() -> Ask:
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()

    def label(text: str) -> str | None:
        found = detector.detect_language_of(text)
        code = found.iso_code_639_1.name.lower() if found else None
        return "no" if code == "nb" else code

    return lambda texts: [label(t) for t in texts]


def _langid_py() -> Ask:
    import py3langid

    return lambda texts: [{"nb": "no"}.get(c, c) for c, _ in map(py3langid.classify, texts)]


def _cld2() -> Ask:
    return lambda texts: second.cld2_labels(texts, reliable_only=False)


def _cld3() -> Ask:
    import gcld3

    detector = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=LangId.Options().max_chars)
    spelled = {"iw": "he", "fil": "tl", "und": None}

    def label(text: str) -> str | None:
        code = detector.FindLanguage(text=text).language
        return spelled.get(code, code.split("-")[0])

    return lambda texts: [label(t) for t in texts]


def _langdetect() -> Ask:
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0

    def label(text: str) -> str | None:
        try:
            return detect(text).split("-")[0]
        except LangDetectException:
            return None

    return lambda texts: [label(t) for t in texts]


def _heliport() -> Ask:
    import heliport

    identifier = heliport.Identifier()
    return lambda texts: [HELIPORT_TO_MODEL.get(c, c) for c in map(identifier.identify, texts)]


# name -> (distributions it installs, factory)
MODELS: dict[str, tuple[tuple[str, ...], Callable[[], Ask]]] = {
    "lid.176": (("fasttext-community",), _lid176),
    "lingua": (("lingua-language-detector",), _lingua),
    "langid.py": (("py3langid",), _langid_py),
    "CLD2": (("pycld2",), _cld2),
    "CLD3": (("cld3-py",), _cld3),
    "langdetect": (("langdetect",), _langdetect),
    "heliport": (("heliport",), _heliport),
}
# The stage's hybrids: second opinion -> what answers (CLD2 with its reliability flag).
HYBRIDS: dict[str, Callable[[], Ask] | None] = {
    "stage (lid.176 alone)": None,
    "stage + CLD2 (default)": lambda: second.cld2_labels,
    "stage + langid.py": _langid_py,
    "stage + lingua": _lingua,
}


def install_mb(distributions: tuple[str, ...]) -> float:
    size = 0
    for name in distributions:
        files = importlib.metadata.distribution(name).files or []
        size += sum(f.locate().stat().st_size for f in files if f.locate().is_file())
    return size / 1e6


def _memory_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process from /proc, in MB: unlike
    ``ru_maxrss``, the peak starts afresh in a spawned process."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1e3


def cpu_seconds(fn: Callable[[], object]) -> float:
    """CPU time of one call (this process): on cores shared with other work, wall time
    swings by half from pass to pass, CPU time much less."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(name: str, sets: dict[str, list[str]], sample: list[str]) -> dict:
    """In a fresh process: labels per set, speed on ``sample``, memory the model added."""
    before = _memory_mb("VmRSS")
    ask = MODELS[name][1]()
    ask(sample[:5])  # lazy loads outside the timing
    took = statistics.median(cpu_seconds(lambda: ask(sample)) for _ in range(3))
    labels = {set_name: ask(texts) for set_name, texts in sets.items()}
    return {"labels": labels, "seconds": took, "memory_mb": _memory_mb("VmHWM") - before}


def per_language(gold: list[str], labels: list[str | None], kept: list[bool] | None = None) -> dict[str, float]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for i, (want, got) in enumerate(zip(gold, labels)):
        counts[want][0] += int(got == want and (kept is None or kept[i]))
        counts[want][1] += 1
    return {lang: c / n for lang, (c, n) in counts.items()}


def mean(acc: dict[str, float]) -> float:
    return sum(acc.values()) / len(acc)


def stage_run(stage: LangId, texts: list[str]) -> tuple[list[str | None], list[bool]]:
    batch = pa.record_batch({"id": [str(i) for i in range(len(texts))], "text": pa.array(texts, pa.large_string()),
                             "source": ["web"] * len(texts)})  # fmt: skip
    out = stage.process(batch, "web")
    return out.batch.column("lang").to_pylist(), [r is None for r in out.drop_reason.to_pylist()]


def hybrid_stage(ask: Ask | None, routed: list[int]) -> LangId:
    """The stage with ``languages = "all"`` and ``ask`` as its second opinion, counting the
    documents it asks about into ``routed``."""
    stage = LangId(LangId.Options(languages="all", second_opinion=""))
    if ask is not None:

        def counted(texts: list[str]) -> list[str | None]:
            routed[0] += len(texts)
            return ask(texts)

        stage.ask = counted
    return stage


def load_sets(data: Path) -> tuple[dict[str, tuple[list[str], list[str]]], list[str]]:
    documents = lingua_documents(data, half=1)
    udhr_texts, udhr_gold = multilingual_sets(data)["UDHR paragraphs"]
    udhr = [(t, g) for t, g in zip(udhr_texts, udhr_gold) if g in documents]
    sets = {
        "documents": ([t for g in documents for t in documents[g]], [g for g in documents for _ in documents[g]]),
        "UDHR": ([t for t, _ in udhr], [g for _, g in udhr]),
    }
    web = [r["text"] for r in read_jsonl(data / "web" / "web_gold.jsonl.gz")]
    web += [r["text"] for r in read_jsonl(data / "web" / "dolma_ccmain_20190717_00140.jsonl.gz")]
    return sets, web


def models_table(sets: dict[str, tuple[list[str], list[str]]]) -> dict[str, dict[str, dict[str, float]]]:
    texts = {name: t for name, (t, _) in sets.items()}
    sample = texts["documents"][::9]
    megabytes = sum(len(t.encode()) for t in sample) / 1e6
    accuracy: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'model':<12}{'docs mean':>10}{'en':>6}{'>=0.97':>8}{'UDHR mean':>10}"
          f"{'docs/s':>8}{'MB/s':>7}{'install MB':>11}{'memory MB':>10}")  # fmt: skip
    context = multiprocessing.get_context("spawn")
    for name, (distributions, _) in MODELS.items():
        try:
            size = install_mb(distributions) + (BUNDLED_MODEL.stat().st_size / 1e6 if name == "lid.176" else 0)
        except importlib.metadata.PackageNotFoundError:
            print(f"{name:<12}not installed ({', '.join(distributions)}): skipped")
            continue
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            got = pool.submit(measure, name, texts, sample).result()
        accuracy[name] = {s: per_language(sets[s][1], got["labels"][s]) for s in sets}
        docs, udhr = accuracy[name]["documents"], accuracy[name]["UDHR"]
        at_97 = f"{sum(a >= 0.97 for a in docs.values())}/{len(docs)}"
        print(f"{name:<12}{mean(docs):>10.4f}{docs['en']:>6.2f}{at_97:>8}{mean(udhr):>10.4f}"
              f"{len(sample) / got['seconds']:>8.0f}{megabytes / got['seconds']:>7.2f}{size:>11.1f}"
              f"{got['memory_mb']:>10.0f}")  # fmt: skip
    return accuracy


def hybrids_table(sets: dict[str, tuple[list[str], list[str]]], web: list[str]) -> dict[str, dict[str, float]]:
    asks = {name: factory() if factory else None for name, factory in HYBRIDS.items()}
    stages = {name: hybrid_stage(ask, [0]) for name, ask in asks.items()}
    for stage in stages.values():
        stage_run(stage, web[:50])  # models and lazy tables load outside the timing
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(3):  # interleaved, so that load on the shared cores falls on every row alike
        for name, stage in stages.items():
            times[name].append(cpu_seconds(lambda: stage_run(stage, web)))  # noqa: B023 (called at once)
    alone = statistics.median(times["stage (lid.176 alone)"])
    print(f"\n{'stage, languages = all':<24}{'docs mean':>10}{'en':>6}{'>=0.97':>8}{'kept wrong':>11}"
          f"{'UDHR mean':>10}{'asked docs':>11}{'asked web':>10}{'web docs/s':>11}{'vs alone':>9}")  # fmt: skip
    accuracy = {}
    for name, ask in asks.items():
        asked = {}
        for set_name, (texts, gold) in [*sets.items(), ("web", (web, []))]:
            routed = [0]
            labels, kept = stage_run(hybrid_stage(ask, routed), texts)
            asked[set_name] = routed[0] / len(texts)
            if set_name == "documents":
                docs = per_language(gold, labels, kept)
                wrong = sum(k and lab != g for k, lab, g in zip(kept, labels, gold))
            elif set_name == "UDHR":
                udhr = per_language(gold, labels, kept)
        accuracy[name] = docs
        seconds = statistics.median(times[name])
        at_97 = f"{sum(a >= 0.97 for a in docs.values())}/{len(docs)}"
        print(f"{name:<24}{mean(docs):>10.4f}{docs['en']:>6.2f}{at_97:>8}{wrong:>11}{mean(udhr):>10.4f}"
              f"{asked['documents']:>11.3f}{asked['web']:>10.3f}{len(web) / seconds:>11.0f}"
              f"{seconds / alone:>9.2f}")  # fmt: skip
    print("3 interleaved passes over the web pages, CPU time; per row the spread (max/min):",
          ", ".join(f"{max(t) / min(t):.2f}" for t in times.values()))  # fmt: skip
    return accuracy


def language_table(columns: dict[str, dict[str, float]]) -> None:
    names = list(columns)
    print("\nper language, 1-2 KB documents (models: top-1; stage rows: kept with the right label)")
    print(f"{'lang':<6}" + "".join(f"{n[:11]:>12}" for n in names))
    for lang in sorted(next(iter(columns.values()))):
        print(f"{lang:<6}" + "".join(f"{columns[n].get(lang, 0.0):>12.2f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    args = parser.parse_args()
    if not (args.data / "langid").is_dir():
        sys.exit(f"no shared data at {args.data}")
    sets, web = load_sets(args.data)
    (docs, langs), (udhr, udhr_langs) = ((len(t), len(set(g))) for t, g in sets.values())
    print(f"documents: {docs:,} of 1-2 KB in {langs} languages; UDHR: {udhr:,} paragraphs in {udhr_langs}; "
          f"web: {len(web):,} pages")  # fmt: skip
    print("WARNING: the documents are lingua's own test sentences (lingua-py's testdata): its published")
    print("accuracy is measured on them and its models come from the same Leipzig corpora, so its numbers")
    print("there are likely optimistic; the UDHR set is fairer.\n")
    models = models_table(sets)
    hybrids = hybrids_table(sets, web)
    language_table({name: acc["documents"] for name, acc in models.items()} | hybrids)


if __name__ == "__main__":
    main()
