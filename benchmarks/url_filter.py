"""``url_filter`` and ``bad_words`` against datatrove's ``URLFilter`` and ``C4BadWordsFilter``,
on the same real documents with the same lists, one core each.

    python -m benchmarks.url_filter [--repeat N] [--data ../shared/data] [--domains FILE]

Documents: every document with a URL in the shared web corpora (``web_gold``'s ``url``,
the Dolma files' ``metadata.url``), repeated ``--repeat`` times for volume (the same
documents again: neither side caches by document, ours caches verdicts by host, which a
real crawl's repeated hosts also give it).

Lists: the UT1 ``domains`` file and ``banned_words.txt`` that datatrove bundles (read
from its wheel, so nothing is downloaded), fed to both sides: datatrove's URLFilter
takes them as ``extra_domains`` / ``banned_words`` with ``use_integrated_lists=False``;
its ``tldextract`` is given the public-suffix snapshot it ships (``suffix_list_urls=()``)
instead of fetching one. C4BadWordsFilter has no way to take a local file: its
download helper is replaced for the run by one that returns our bundled copy of the
same LDNOOBW file (same commit, so the same words). datatrove's URLFilter needs
``tldextract``, ``pyahocorasick`` and ``fasteners``; without them its side is skipped and said so.

Where they disagree, by design: datatrove blocks a host only when its registered
domain (by the public-suffix list) or its whole name is listed, ours when any parent
domain is (a listed ``b.example.com`` blocks ``a.b.example.com``); datatrove splits the
raw URL (scheme and query included, case kept) at non-alphanumerics for banned words,
ours the lowercase, percent-decoded host and path. numba compilation is timed apart
(cached on disk after the first run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import pyarrow as pa

from stages.url_filter.bad_words import BadWords
from stages.url_filter.lists import bundled_ldnoobw_en
from stages.url_filter.stage import UrlFilter

ROOT = Path(__file__).resolve().parents[1]


def load(data: Path) -> list[tuple[str, str, str]]:
    """(id, text, url) of every web document with a URL, in a fixed order."""
    docs = []
    for path in sorted((data / "web").glob("*.jsonl.gz")):
        if path.name == "web_html.jsonl.gz":
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                record = json.loads(line)
                url = record.get("url") or (record.get("metadata") or {}).get("url")
                if isinstance(url, str) and url:
                    docs.append((f"{path.name}:{i}", record["text"], url))
    return docs


def datatrove_lists(folder: Path) -> tuple[Path, Path]:
    """datatrove's bundled UT1 ``domains`` (unpacked into ``folder``) and banned words."""
    from datatrove.utils._import_utils import ASSETS_PATH

    with tarfile.open(Path(ASSETS_PATH) / "url_filterblacklistsv0_3_0.tar.gz") as tar:
        tar.extract("domains", folder, filter="data")
    return folder / "domains", Path(ASSETS_PATH) / "banned_words.txt"


def batches(docs: list[tuple[str, str, str]], size: int = 1024) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pydict(
            {
                "id": [d[0] for d in docs[i : i + size]],
                "text": [d[1] for d in docs[i : i + size]],
                "source": ["web"] * len(docs[i : i + size]),
                "url": [d[2] for d in docs[i : i + size]],
            }
        )
        for i in range(0, len(docs), size)
    ]


def run_ours(stage, parts: list[pa.RecordBatch]) -> tuple[float, list[bool]]:
    stage.process(parts[0].slice(0, 1), "web")  # compile (or load the cached kernel)
    t0 = time.perf_counter()
    dropped = []
    for batch in parts:
        dropped += stage.process(batch, "web").drop_reason.is_valid().to_pylist()
    return time.perf_counter() - t0, dropped


def run_datatrove(flt, docs) -> tuple[float, list[bool]]:
    t0 = time.perf_counter()
    dropped = []
    for doc in docs:
        verdict = flt.filter(doc)
        dropped.append((verdict[0] if isinstance(verdict, tuple) else verdict) is False)
    return time.perf_counter() - t0, dropped


def datatrove_url_filter(domains: Path, banned: Path):
    try:
        import tldextract
        from datatrove.pipeline.filters.url_filter import URLFilter
    except ImportError as error:
        print(f"datatrove URLFilter skipped: {error} (pip install tldextract pyahocorasick fasteners)")
        return None
    try:
        with open(domains) as f_domains, open(banned) as f_banned:
            flt = URLFilter(extra_domains=f_domains, banned_words=f_banned, use_integrated_lists=False)
    except ImportError as error:  # datatrove checks fasteners and pyahocorasick itself
        print(f"datatrove URLFilter skipped: {error}")
        return None
    flt.tldextractor = tldextract.TLDExtract(suffix_list_urls=())  # its bundled snapshot, offline
    return flt


def datatrove_bad_words():
    from datatrove.pipeline.filters import c4_filters

    c4_filters.cached_asset_path_or_download = lambda *args, **kwargs: bundled_ldnoobw_en()
    return c4_filters.C4BadWordsFilter()


def report(name: str, ours: tuple, theirs: tuple | None, n: int, mb: float) -> None:
    t_ours, d_ours = ours
    print(f"{name}: {n:,} documents, {mb:.1f} MB of text")
    print(f"  prep      {n / t_ours:12,.0f} docs/s {mb / t_ours:9.1f} MB/s   dropped {sum(d_ours):,}")
    if theirs is None:
        return
    t_dt, d_dt = theirs
    agree = sum(a == b for a, b in zip(d_ours, d_dt)) / n
    print(f"  datatrove {n / t_dt:12,.0f} docs/s {mb / t_dt:9.1f} MB/s   dropped {sum(d_dt):,}")
    print(f"  prep is {t_dt / t_ours:.1f}x datatrove; decisions agree on {agree:.2%} of documents")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--domains", type=Path, help="a UT1 domains file (default: datatrove's bundled one)")
    args = parser.parse_args()
    from datatrove.data import Document

    docs = load(args.data) * args.repeat
    n, mb = len(docs), sum(len(d[1].encode()) for d in docs) / 1e6
    parts = batches(docs)
    dt_docs = [Document(text=d[1], id=d[0], metadata={"url": d[2]}) for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        domains, banned = datatrove_lists(Path(tmp))
        domains = args.domains or domains
        t0 = time.perf_counter()
        ours = UrlFilter(UrlFilter.Options(blocklists=[str(domains)], banned_words=[str(banned)]))
        print(f"url_filter lists loaded in {time.perf_counter() - t0:.1f} s ({domains})")
        flt = datatrove_url_filter(domains, banned)
        report("url_filter", run_ours(ours, parts), flt and run_datatrove(flt, dt_docs), n, mb)
        del ours, flt
    t0 = time.perf_counter()
    stage = BadWords(BadWords.Options())
    stage.process(parts[0].slice(0, 1), "web")
    print(f"bad_words: table and kernel ready in {time.perf_counter() - t0:.1f} s (numba compile or cache load)")
    report("bad_words", run_ours(stage, parts), run_datatrove(datatrove_bad_words(), dt_docs), n, mb)


if __name__ == "__main__":
    main()
