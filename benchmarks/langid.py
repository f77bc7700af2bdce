"""Accuracy and speed of the ``langid`` stage on the shared labeled sets.

Accuracy is top-1 label agreement (the threshold plays no part) on:
  * lingua's test sentences (``kind == "sentences"``, 1000 per language) for the 20 most
    common web languages, then every language fastText knows;
  * UDHR paragraphs and whole documents, for the UDHR versions whose language fastText knows.
Speed is documents per second through ``LangId.process`` on the shared web pages, at
several ``max_chars`` settings, with how often the capped label equals the whole-text label.

Run: python -m benchmarks.langid [--data DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.langid import LangId, bundled_model_path, detect, load_model

# Common Crawl's 20 largest languages by share of pages (CC-MAIN language statistics).
TOP20 = ["en", "ru", "de", "ja", "zh", "es", "fr", "it", "nl", "pt",
         "pl", "vi", "cs", "id", "tr", "sv", "fa", "ko", "hu", "ar"]  # fmt: skip

# Labels of the test sets that fastText spells differently.
LINGUA_TO_MODEL = {"nb": "no"}

# UDHR version (ISO 639-3 stem, script/variant suffix) -> fastText label, for the languages
# fastText knows. 'als' in UDHR is Tosk Albanian (fastText's 'als' is Alemannic).
UDHR_TO_MODEL = {
    "afr": "af", "als": "sq", "amh": "am", "arb": "ar", "ast": "ast", "azj_latn": "az",
    "bel": "be", "ben": "bn", "bod": "bo", "bos_latn": "bs", "bre": "br", "bul": "bg",
    "cat": "ca", "ceb": "ceb", "ces": "cs", "ckb": "ckb", "cmn_hans": "zh", "cmn_hant": "zh",
    "cos": "co", "cym": "cy", "dan": "da", "deu": "de", "deu_1901": "de", "div": "dv",
    "ell_monotonic": "el", "eng": "en", "epo": "eo", "est": "et", "eus": "eu", "fin": "fi",
    "fra": "fr", "gla": "gd", "gle": "ga", "glg": "gl", "gug": "gn", "guj": "gu",
    "hat_kreyol": "ht", "heb": "he", "hin": "hi", "hrv": "hr", "hsb": "hsb", "hun": "hu",
    "hye": "hy", "ido": "io", "ilo": "ilo", "ina": "ia", "ind": "id", "isl": "is", "ita": "it",
    "jav": "jv", "jpn": "ja", "kan": "kn", "kat": "ka", "kaz": "kk", "khk": "mn", "khm": "km",
    "kir": "ky", "kor": "ko", "lao": "lo", "lat": "la", "lav": "lv", "lit": "lt", "ltz": "lb",
    "mai": "mai", "mal": "ml", "mar": "mr", "min": "min", "mkd": "mk", "mlt": "mt",
    "mly_latn": "ms", "mya": "my", "nds": "nds", "nep": "ne", "nld": "nl", "nno": "nn",
    "nob": "no", "oss": "os", "pam": "pam", "pan": "pa", "pes_1": "fa", "pes_2": "fa",
    "plt": "mg", "pnb": "pnb", "pol": "pl", "por_BR": "pt", "por_PT": "pt", "quy": "qu",
    "roh": "rm", "ron_1993": "ro", "rus": "ru", "sah": "sah", "san": "sa", "sco": "sco",
    "slk": "sk", "slv": "sl", "som": "so", "spa": "es", "srp_cyrl": "sr", "sun": "su",
    "swe": "sv", "swh": "sw", "tam": "ta", "tat": "tt", "tgk": "tg", "tgl": "tl", "tha": "th",
    "tuk_latn": "tk", "tur": "tr", "tyv": "tyv", "uig_arab": "ug", "ukr": "uk", "urd": "ur",
    "uzn_latn": "uz", "vec": "vec", "vep": "vep", "vie": "vi", "war": "war", "wln": "wa",
    "ydd": "yi", "yor": "yo",
}  # fmt: skip

# UDHR languages of the top-20 list (the >= 0.99 document-length target applies to these).
UDHR_TOP20 = {k for k, v in UDHR_TO_MODEL.items() if v in TOP20}


def default_data_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else Path("/work/shared/data")


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def accuracy(texts: list[str], gold: list[str], keys: list[str]) -> dict[str, tuple[int, int]]:
    """Per key: (correct, total), where correct means the model's top-1 label equals ``gold``."""
    model = load_model(str(bundled_model_path()))
    labels = detect(model, pa.array(texts, pa.string()), LangId.Options().max_chars).lang
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, want, got in zip(keys, gold, labels.to_pylist()):
        counts[key][1] += 1
        counts[key][0] += int(want == got)
    return {k: (c, n) for k, (c, n) in counts.items()}


def lingua_documents(data: Path, half: int, seed: int = 0) -> dict[str, list[str]]:
    """Per language (the model's label), documents of 1-2 KB (UTF-8) joined from lingua's
    test sentences: the even-numbered ones (``half=0``, where the thresholds are derived)
    or the odd-numbered ones (``half=1``, where they are measured). Only the languages the
    model knows."""
    known = {label.removeprefix("__label__") for label in load_model(str(bundled_model_path())).getLabels("")[0]}
    sentences: dict[str, list[str]] = defaultdict(list)
    for r in read_jsonl(data / "langid" / "lingua_testdata.jsonl.gz"):
        if r["kind"] == "sentences":
            sentences[LINGUA_TO_MODEL.get(r["lang"], r["lang"])].append(r["text"])
    rng = random.Random(seed)
    documents: dict[str, list[str]] = {}
    for lang, texts in sorted(sentences.items()):
        if lang not in known:
            continue
        current, target, out = "", rng.randint(1000, 2000), []
        for text in texts[half::2]:
            current = f"{current} {text}" if current else text
            if len(current.encode()) >= target:
                out.append(current)
                current, target = "", rng.randint(1000, 2000)
        documents[lang] = out
    return documents


def lingua_sentences(data: Path, per_lang: int | None) -> dict[str, tuple[int, int]]:
    taken: Counter = Counter()
    texts, gold = [], []
    for r in read_jsonl(data / "langid" / "lingua_testdata.jsonl.gz"):
        if r["kind"] != "sentences" or (per_lang and taken[r["lang"]] >= per_lang):
            continue
        taken[r["lang"]] += 1
        texts.append(r["text"])
        gold.append(LINGUA_TO_MODEL.get(r["lang"], r["lang"]))
    return accuracy(texts, gold, gold)


def udhr_accuracy(data: Path, name: str) -> dict[str, tuple[int, int]]:
    """UDHR accuracy keyed by UDHR version, gold mapped to the model's label."""
    rows = [r for r in read_jsonl(data / "langid" / name) if r["lang"] in UDHR_TO_MODEL]
    keys = [r["lang"] for r in rows]
    return accuracy([r["text"] for r in rows], [UDHR_TO_MODEL[k] for k in keys], keys)


def pooled(acc: dict[str, tuple[int, int]], keys) -> float:
    c = sum(acc[k][0] for k in keys if k in acc)
    n = sum(acc[k][1] for k in keys if k in acc)
    return c / n if n else float("nan")


def print_table(title: str, acc: dict[str, tuple[int, int]], keys: list[str]) -> None:
    print(f"\n{title}")
    print(f"{'lang':<14}{'accuracy':>9}{'n':>7}")
    for k in keys:
        if k in acc:
            c, n = acc[k]
            print(f"{k:<14}{c / n:>9.4f}{n:>7}")


SCHEMES = {
    "single 0.65": LangId.Options(languages="all", min_score=0.65, groups={}, second_opinion=""),
    "per-language + groups": LangId.Options(languages="all", second_opinion=""),
    "+ CLD2 (default)": LangId.Options(languages="all"),
}


def kept_correct(texts: list[str], gold: list[str], options: LangId.Options) -> dict[str, tuple[int, int, int]]:
    """Per gold label: (kept with the right label, dropped below a threshold, total) when
    the stage keeps every language ("all")."""
    batch = pa.record_batch({"id": [str(i) for i in range(len(texts))], "text": pa.array(texts, pa.large_string()),
                             "source": ["web"] * len(texts)})  # fmt: skip
    out = LangId(options).process(batch, "web")
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    labels = out.batch.column("lang").to_pylist()
    for want, got, reason in zip(gold, labels, out.drop_reason.to_pylist()):
        counts[want][0] += int(reason is None and got == want)
        counts[want][1] += int(reason == "lang:low-score")
        counts[want][2] += 1
    return {k: (c, d, n) for k, (c, d, n) in counts.items()}


def multilingual_sets(data: Path) -> dict[str, tuple[list[str], list[str]]]:
    """(texts, gold labels) of each set: lingua sentences and 1-2 KB documents (the odd
    half, never used to derive the thresholds), UDHR paragraphs."""
    documents = lingua_documents(data, half=1)
    known = set(documents)
    sentences = [(r["text"], LINGUA_TO_MODEL.get(r["lang"], r["lang"])) for r in read_jsonl(
        data / "langid" / "lingua_testdata.jsonl.gz") if r["kind"] == "sentences"]  # fmt: skip
    sentences = [(t, g) for i, (t, g) in enumerate(sentences) if g in known and i % 2 == 1]
    udhr = [(r["text"], UDHR_TO_MODEL[r["lang"]]) for r in read_jsonl(data / "langid" / "udhr2_paragraphs.jsonl.gz")
            if r["lang"] in UDHR_TO_MODEL]  # fmt: skip
    return {
        "lingua documents 1-2 KB": (
            [t for g in documents for t in documents[g]],
            [g for g in documents for _ in documents[g]],
        ),
        "lingua sentences": ([t for t, _ in sentences], [g for _, g in sentences]),
        "UDHR paragraphs": ([t for t, _ in udhr], [g for _, g in udhr]),
    }


def multilingual_table(data: Path) -> None:
    """Accuracy (kept with the right label) and drop rate per language, every language
    kept ("all"), the single threshold beside the per-language scheme."""
    for name, (texts, gold) in multilingual_sets(data).items():
        results = {scheme: kept_correct(texts, gold, options) for scheme, options in SCHEMES.items()}
        langs = sorted(set(gold))
        print(f'\n{name}: {len(texts):,} texts, {len(langs)} languages, languages = "all"')
        print(f"{'lang':<6}" + "".join(f"{s + ' acc':>28}{'drop':>7}" for s in SCHEMES) + f"{'n':>7}")
        for lang in langs:
            cells = "".join(
                f"{r[lang][0] / r[lang][2]:>28.3f}{r[lang][1] / r[lang][2]:>7.3f}" for r in results.values()
            )
            print(f"{lang:<6}{cells}{results['single 0.65'][lang][2]:>7}")
        for scheme, r in results.items():
            mean = sum(c / n for c, _, n in r.values()) / len(r)
            pooled_acc = sum(c for c, _, _ in r.values()) / sum(n for _, _, n in r.values())
            at_97 = sum(c / n >= 0.97 for c, _, n in r.values())
            print(
                f"  {scheme:<24} mean accuracy {mean:.4f}, pooled {pooled_acc:.4f}, languages >= 0.97: {at_97}/{len(r)}"
            )


def speed(data: Path, limit: int | None) -> None:
    docs = [r["text"] for r in read_jsonl(data / "web" / "web_gold.jsonl.gz", limit)]
    docs += [r["text"] for r in read_jsonl(data / "web" / "dolma_ccmain_20190717_00140.jsonl.gz", limit)]
    chars = sum(len(d) for d in docs)
    print(f"\nspeed: {len(docs)} web documents, {chars / len(docs):.0f} characters on average, one core")
    print(f"{'max_chars':>9}{'docs/s':>9}{'MB/s':>7}{'same label as whole text':>26}")
    batch = pa.record_batch({"id": pa.array([str(i) for i in range(len(docs))]), "text": pa.array(docs),
                             "source": pa.array(["web"] * len(docs))})  # fmt: skip
    whole = None
    for max_chars in (0, 500, 1000, 2000, 4000):
        stage = LangId(LangId.Options(languages=["en"], max_chars=max_chars))
        stage.process(batch.slice(0, 10), "web")  # load the model outside the timing
        start = time.perf_counter()
        labels = stage.process(batch, "web").batch.column("lang").to_pylist()
        took = time.perf_counter() - start
        whole = whole or labels
        same = sum(a == b for a, b in zip(labels, whole)) / len(docs)
        mb = sum(len(d.encode()) for d in docs) / 1e6
        print(f"{max_chars or 'all':>9}{len(docs) / took:>9.0f}{mb / took:>7.1f}{same:>26.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--limit", type=int, default=None, help="sentences per language / documents")
    args = parser.parse_args()
    if not (args.data / "langid").is_dir():
        sys.exit(f"no shared data at {args.data}")

    sentences = lingua_sentences(args.data, args.limit)
    print_table("lingua sentences, top-20 web languages", sentences, TOP20)
    print(
        f"pooled top-20: {pooled(sentences, TOP20):.4f}   "
        f"languages >= 0.97: {sum(sentences[k][0] / sentences[k][1] >= 0.97 for k in TOP20 if k in sentences)}/20"
    )
    others = sorted(k for k in sentences if k not in TOP20)
    print_table("lingua sentences, other languages", sentences, others)

    for name in ("udhr2_paragraphs.jsonl.gz", "udhr2_docs.jsonl.gz"):
        acc = udhr_accuracy(args.data, name)
        top = sorted(k for k in acc if k in UDHR_TOP20)
        print_table(f"{name}: top-20 web languages", acc, top)
        print(
            f"pooled top-20: {pooled(acc, top):.4f}; pooled over all {len(acc)} UDHR versions "
            f"fastText knows: {pooled(acc, acc):.4f}"
        )
        if "paragraphs" in name:
            worst = sorted(acc, key=lambda k: acc[k][0] / acc[k][1])[:10]
            print("weakest:", ", ".join(f"{k} {acc[k][0] / acc[k][1]:.2f}" for k in worst))

    multilingual_table(args.data)
    speed(args.data, args.limit)


if __name__ == "__main__":
    main()
