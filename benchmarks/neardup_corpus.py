"""Real passages with near duplicates planted at known 5-gram Jaccard similarities, so a
dedup's recall can be measured at volume (``benchmarks/dedup_volume.py``).

Passages: the shared data holds tens of MB of real text per kind, in documents of very
uneven size (a few hundred web pages, six whole web-text files). To reach 100,000
documents without repeating anything, every document is cut at line ends into passages
of about ``PASSAGE_WORDS`` words (a tail shorter than a quarter of that joins the passage
before it), taken in ``SOURCES`` order (web first) until there are enough; a passage
whose normalised words repeat an earlier one's is passed over.

Planting: a seeded sample of passages (at least ``MIN_PLANT_WORDS`` words) each gets one
edited copy under a new id, at a target similarity spread evenly over ``TARGETS``. An
edit is one of three styles: word edits only; a block of lines dropped (a paragraph),
then word edits; a web boilerplate header and/or footer added, then word edits. The word
edits (60 % replacements, 20 % insertions, 20 % deletions, at distinct positions, words
drawn from the sampled passages) come in a fixed random order, and a binary search picks
how many to apply so the copy's similarity is closest to the target. The recorded
similarity is the true one of the final copy: Jaccard of the sets of word 5-grams of
lower-cased alphanumeric words (``benchmarks.dedup.shingles``), the measure both dedups
estimate with 14 x 8 MinHash (their own word splitting differs a little).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

from benchmarks.dedup import shingles
from benchmarks.paragraph_dedup import FILES as WEB_FILES
from pipeline.util.atomic import atomic_path

SOURCES = WEB_FILES + [
    "pii/web_pii_candidates.jsonl.gz",
    "eval/us_speeches.jsonl.gz",
    "math/stacks_project_sections.jsonl.gz",
    "math/gsm8k.jsonl.gz",
    "math/datajuicer_arxiv_sample.jsonl.gz",
    "pii/debian_changelog_copyright.jsonl.gz",
    "code/c_headers_usr_include.jsonl.gz",
    "code/python_stdlib.jsonl.gz",
    "code/perl_usr_share_perl.jsonl.gz",
    "code/js_usr_lib_node_modules.jsonl.gz",
    "langid/udhr2_docs.jsonl.gz",
]
PASSAGE_WORDS = 200
MIN_PLANT_WORDS = 150
TARGETS = (0.6, 0.95)
STYLES = ("words", "paragraph", "boilerplate")
HEADERS = [
    "Home | About | Contact | Privacy Policy | Terms of Use",
    "Skip to main content. Menu: News, Sport, Business, Culture, Opinion. Subscribe now",
    "You are here: Home > Archive > Articles. Share this page on Facebook, Twitter, Email",
]
FOOTERS = [
    "Copyright 2019 All rights reserved. Powered by WordPress. Back to top",
    "Related posts: Leave a comment. Your email address will not be published. Required fields are marked",
    "Sign up for our newsletter to get the latest updates delivered to your inbox every week",
]
WORD = re.compile(r"[^\W_]+")


def passages(data: Path, sources: list[str], limit: int, words: int = PASSAGE_WORDS) -> tuple[list[dict], int]:
    """Up to ``limit`` passages of about ``words`` words ``{"id", "text"}`` (ids ``<file stem>:<doc>:<passage>``),
    and how many were passed over as exact duplicates of an earlier one's normalised words
    (licence texts, the same page in two files): a planted copy's twin must be unique, and
    repetition is not what this corpus measures."""
    out: list[dict] = []
    seen: set[str] = set()
    skipped = 0
    for rel in sources:
        try:
            with gzip.open(data / rel, "rt", encoding="utf-8") as f:
                records = [json.loads(line) for line in f]
        except (OSError, ValueError) as e:
            raise SystemExit(f"{data / rel}: cannot read it as gzipped JSON lines ({e})") from None
        stem = Path(rel).name.split(".")[0]
        for doc_no, record in enumerate(records):
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str) or not text.strip():
                continue
            for k, part in enumerate(_cut(text, words)):
                key = " ".join(WORD.findall(part.lower()))
                if key in seen:
                    skipped += 1
                    continue
                seen.add(key)
                out.append({"id": f"{stem}:{doc_no}:{k}", "text": part})
                if len(out) >= limit:
                    return out, skipped
    return out, skipped


def _cut(text: str, size: int = PASSAGE_WORDS) -> list[str]:
    parts, lines, words = [], [], 0
    for line in text.splitlines(keepends=True):
        lines.append(line)
        words += len(line.split())
        if words >= size:
            parts.append("".join(lines))
            lines, words = [], 0
    if lines and (words >= size // 4 or not parts):
        parts.append("".join(lines))
    elif lines:
        parts[-1] += "".join(lines)
    return [p for p in parts if p.strip()]


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _drop_block(text: str, rng: random.Random) -> str:
    """The text less a run of lines holding 3-12 % of its words (at least one line)."""
    lines = text.splitlines(keepends=True)
    goal = rng.uniform(0.03, 0.12) * len(text.split())
    start = rng.randrange(len(lines))
    end, dropped = start, 0
    while end < len(lines) and (end == start or dropped < goal):
        dropped += len(lines[end].split())
        end += 1
    return "".join(lines[:start] + lines[end:])


def _add_boilerplate(text: str, rng: random.Random) -> str:
    where = rng.choice(("header", "footer", "both"))
    head = rng.choice(HEADERS) + "\n\n" if where != "footer" else ""
    foot = "\n\n" + rng.choice(FOOTERS) if where != "header" else ""
    return head + text + foot


def plant(text: str, target: float, rng: random.Random, vocab: list[str]) -> tuple[str, float, str]:
    """An edited copy of ``text`` near ``target`` similarity: (copy, true similarity, style)."""
    original = set(shingles(text))
    style = rng.choice(STYLES)
    base = {"words": text, "paragraph": _drop_block(text, rng), "boilerplate": _add_boilerplate(text, rng)}[style]
    if jaccard(original, set(shingles(base))) < target:  # this passage is too short for it
        base, style = text, "words"
    tokens = re.split(r"(\s+)", base)  # words at even positions, whitespace runs between
    positions = [i for i in range(0, len(tokens), 2) if tokens[i]]
    rng.shuffle(positions)
    ops = [(i, rng.choices("rid", (3, 1, 1))[0], rng.choice(vocab)) for i in positions]

    def edited(k: int) -> str:
        out = list(tokens)
        for i, kind, word in ops[:k]:
            out[i] = word if kind == "r" else (f"{word} {out[i]}" if kind == "i" else "")
        return "".join(out)

    cache: dict[int, float] = {}

    def similarity(k: int) -> float:
        if k not in cache:
            cache[k] = jaccard(original, set(shingles(edited(k))))
        return cache[k]

    lo, hi = 0, len(ops)  # the fewest edits that reach the target (similarity falls as k grows)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if similarity(mid) > target else (lo, mid)
    best = min({max(lo - 1, 0), lo}, key=lambda k: abs(similarity(k) - target))
    return edited(best), similarity(best), style


def build(data: Path, sources: list[str], docs: int, pairs: int, seed: int) -> tuple[list[dict], list[dict], int]:
    """``docs`` distinct passages plus ``pairs`` planted copies; the planted pairs
    ``{"original", "copy", "target", "jaccard", "style"}``; and how many passages were
    passed over as exact duplicates."""
    base, skipped = passages(data, sources, docs)
    if len(base) < docs:
        raise SystemExit(f"only {len(base):,} distinct passages in the sources, {docs:,} asked for")
    candidates = [d for d in base if len(d["text"].split()) >= MIN_PLANT_WORDS]
    if len(candidates) < pairs:
        raise SystemExit(f"only {len(candidates):,} passages can take a planted copy, {pairs:,} asked for")
    chosen = random.Random(seed).sample(candidates, pairs)
    vocab = sorted({w for d in chosen for w in WORD.findall(d["text"]) if w.isalpha() and 3 <= len(w) <= 12})
    copies, planted = [], []
    low, high = TARGETS
    for k, original in enumerate(chosen):
        rng = random.Random(f"{seed}:{k}")
        target = low + (high - low) * (k + rng.random()) / pairs
        text, similarity, style = plant(original["text"], target, rng, vocab)
        copy_id = f"planted:{k:06d}"
        copies.append({"id": copy_id, "text": text})
        planted.append(
            {"original": original["id"], "copy": copy_id, "target": target, "jaccard": similarity, "style": style}
        )
    return base + copies, planted, skipped


def write_shards(documents: list[dict], folder: Path, shards: int, seed: int) -> list[Path]:
    """The documents in a seeded order, dealt round robin into ``shards`` JSON-lines files
    (originals and their copies mostly land in different files, so different workers)."""
    order = list(documents)
    random.Random(seed).shuffle(order)
    paths = []
    for s in range(shards):
        path = folder / f"part-{s:03d}.jsonl"
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for d in order[s::shards]:
                f.write(json.dumps({"id": d["id"], "text": d["text"]}) + "\n")
        paths.append(path)
    return paths
