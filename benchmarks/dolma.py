"""prep against dolma 1.2.1's tools, step by step, on the same shared text in the same run.

    python -m benchmarks.dolma [--fraction 0.1 | --mb 20] [--steps tokens,dedupe,quality,pii]
                               [--workers 2] [--prep-runs 3] [--dolma PATH] [--data DIR]

dolma is not a dependency of prep (its pins conflict with ours); install it in a venv of
its own and point ``--dolma`` at its executable (else ``dolma`` on PATH, else
``/work/venvs/dolma/bin/dolma``)::

    python -m venv /path/dolma && /path/dolma/bin/pip install dolma==1.2.1 boto3==1.26.161 aiobotocore==2.5.2

(without the two pins pip backtracks through boto3 for minutes).

Corpus: every shared web, code and math text file (e2e's files plus the CCNet "head"
sample and the C headers; raw HTML left out), ``--fraction`` of each file's text
(``--mb``: the fraction that gives about that many MB of text), as gzipped JSON lines in
dolma's document format, 4 files per source. Both sides read those files and write their
own output; each side runs with ``--workers`` processes (dolma's ``processes``).

The steps, the same work on each side:
  tokens   ``dolma tokens`` (a GPT-2 ``tokenizer.json`` built offline from the shared
           encoder.json and vocab.bpe, EOS 50256, uint16 memmaps) against a prep run with
           the tokenize stage alone (``gpt2``, Megatron .bin/.idx shards). Agreement: the
           token ids of each document, compared id by id.
  dedupe   ``dolma dedupe`` (paragraphs = lines, Bloom filter sized for the corpus'
           lines at a 1e-6 false-positive rate) and ``dolma mix`` removing the duplicate
           spans, against ``paragraph_dedup`` with ``unit = "line"``, ``min_chars = 0``,
           ``max_seen_fraction = 1.0`` (cut only, as dolma). Both write deduplicated
           documents; ``dedupe`` alone (attributes only) is timed too. Agreement: removed
           (document, line) pairs. Where they differ by design: dolma removes every copy after
           the first, the first document's own repeats too (prep leaves a document's own
           repeats to the repetition rules); with 2 processes, which file's copy is "first"
           depends on dolma's scheduling; a Bloom filter may call a new line seen (its rate
           is printed, from the filter's size and hash count, and the lines dolma removed
           that occur once in the corpus are counted).
  quality  ``dolma tag`` with ``gopher_v2`` and ``c4_v2`` and ``dolma mix`` with the Gopher
           thresholds as its filter (lorem ipsum and curly brackets drop a document) and
           C4's line rules as span removal, against the quality stage with the web rules
           for every source, FineWeb, the paragraph rules and the C4 rules dolma lacks
           (sentences, policy and javascript lines, citations) off. Agreement: kept or
           dropped per document. The rules differ in their definitions, so agreement is
           not 100%: dolma counts words by ``str.split`` (prep as datatrove, spaCy-like),
           takes the median word length (Gopher: the mean), one symbol ratio of words
           holding "#" or "..." (prep: "#" and ellipses per word, two rules), counts a
           repeated line's first copy as a duplicate and divides duplicate characters by
           word characters, counts duplicate n-grams with overlaps; bullets are only "*"
           and "-", ellipsis lines only "...".
  pii      ``dolma tag`` with ``pii_regex_with_counts_fast_v2`` (e-mail, phone, IPv4) and
           ``dolma mix`` replacing the spans, against the pii stage with the same three
           types for every source (its defaults otherwise: public IP addresses only, where
           dolma takes any dotted quad, version numbers and section numbers included;
           IPv6 too). Agreement: spans per type that overlap a span of the other side.

Timing: each side is one process tree timed from its start to its exit (dolma's two
commands as one shell); CPU seconds are sampled from /proc over the tree
(``benchmarks.proctree``). prep runs once untimed first (numba's cache), then
``--prep-runs`` times, half before dolma's run and half after, and its median run is
reported. What the comparison reads is read afterwards, untimed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import dolma_compare as cmp
from benchmarks.e2e import prep_command
from benchmarks.pii import default_data_dir
from benchmarks.proctree import cpu_and_peak_memory

REPO = Path(__file__).resolve().parents[1]
STEPS = ["tokens", "dedupe", "quality", "pii"]
BLOOM_FALSE_POSITIVE_RATE = 1e-6

SOURCES = "".join(f'[sources.{s}]\npaths = ["{{corpus}}/documents/{s}-*.jsonl.gz"]\n' for s in cmp.FILES)
PREP_STAGES = {
    "tokens": '[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n',
    "dedupe": '[[stages]]\nname = "paragraph_dedup"\nunit = "line"\nmin_chars = 0\nmax_seen_fraction = 1.0\n',
    "quality": """[[stages]]
name = "quality"
code_sources = []
math_sources = []
no_space_script_min_frac = 2.0
fineweb = false
gopher_dup_para_frac = 0
gopher_dup_para_char_frac = 0
c4_min_num_sentences = 0
c4_filter_policy = false
c4_filter_javascript = false
c4_remove_citations = false
""",
    "pii": """[[stages]]
name = "pii"
types = ["email", "phone", "ip"]
code_sources = []
math_sources = []
""",
}

G, C4 = "quality__gopher_v2__", "quality__c4_v2__"
# The Gopher rules as dolma's mixer filters on its tagger's attributes: (key, op, threshold),
# the thresholds prep's (datatrove's, the paper's).
QUALITY_RULES = [
    (G + "fraction_of_duplicate_lines", ">", 0.3),
    (G + "fraction_of_characters_in_duplicate_lines", ">", 0.2),
    *((G + f"fraction_of_characters_in_most_common_{n}grams", ">", t) for n, t in ((2, 0.2), (3, 0.18), (4, 0.16))),
    *(
        (G + f"fraction_of_characters_in_duplicate_{n}grams", ">", t)
        for n, t in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    ),
    (G + "word_count", "<", 50),
    (G + "word_count", ">", 100_000),
    (G + "median_word_length", "<", 3),
    (G + "median_word_length", ">", 10),
    (G + "symbol_to_word_ratio", ">", 0.1),
    (G + "fraction_of_lines_starting_with_bullet_point", ">", 0.9),
    (G + "fraction_of_lines_ending_with_ellipsis", ">", 0.3),
    (G + "fraction_of_words_with_alpha_character", "<", 0.8),
    (G + "required_word_count", "<", 2),
]
QUALITY_FLAGS = [C4 + "has_lorem_ipsum", C4 + "has_curly_brace"]
QUALITY_LINES = [C4 + "lines_with_no_ending_punctuation", C4 + "lines_with_too_few_words"]


def find_dolma(given: str | None) -> str:
    """The dolma executable: ``--dolma``, else ``dolma`` on PATH, else the host's venv."""
    for candidate in (given, shutil.which("dolma"), "/work/venvs/dolma/bin/dolma"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit("no dolma executable: pass --dolma PATH (see this module's docstring for the install)")


def gpt2_tokenizer_json(folder: Path) -> Path:
    """``benchmarks.tokenization``'s GPT-2 tokenizer.json, its merges written as "a b"
    strings: dolma's tokenizers 0.19 reads only that form, today's writes pairs."""
    from benchmarks.tokenization import gpt2_tokenizer_json as build

    path = build(folder)
    spec = json.loads(path.read_text())
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    path.write_text(json.dumps(spec))
    return path


def mix_config(corpus: Path, out: Path, name: str, workers: int, **stream) -> dict:
    return {
        "streams": [
            {
                "name": name,
                "documents": [str(corpus / "documents" / "*.jsonl.gz")],
                "output": {"path": str(out), "max_size_in_bytes": 1 << 40},
                **stream,
            }
        ],
        "processes": workers,
    }


def dolma_commands(step: str, dolma: str, corpus: Path, work: Path, workers: int, lines: int) -> list[list[str]]:
    """dolma's commands for ``step``, writing under ``work`` (attributes go to
    ``corpus/attributes``, where its mixer looks for them)."""
    docs = str(corpus / "documents" / "*.jsonl.gz")
    procs = ["--processes", str(workers)]
    if step == "tokens":
        tokenizer = gpt2_tokenizer_json(work)
        return [
            [dolma, "tokens", "--documents", docs, "--destination", str(work / "tokens")]
            + ["--tokenizer.name_or_path", str(tokenizer), "--tokenizer.eos_token_id", str(cmp.EOS)]
            + ["--fields.id_field_name", "id", "--dtype", "uint16", *procs]
        ]
    if step == "dedupe":
        dedupe = {
            "documents": [docs],
            "dedupe": {"name": "para", "paragraphs": {"attribute_name": "bff_duplicate_paragraph_spans"}},
            "bloom_filter": {
                "file": str(work / "bloom.bin"),
                "read_only": False,
                "estimated_doc_count": max(lines, 1),
                "desired_false_positive_rate": BLOOM_FALSE_POSITIVE_RATE,
            },
            "processes": workers,
        }
        removal = [{"span": "$.attributes.bff_duplicate_paragraph_spans", "min_score": 0.5, "replacement": ""}]
        mix = mix_config(corpus, work / "mixed", "dedupe", workers, attributes=["para"], span_replacement=removal)
        return [
            write_config(work / "dedupe.json", dedupe, dolma, "dedupe"),
            write_config(work / "mix.json", mix, dolma, "mix"),
        ]
    taggers = ["gopher_v2", "c4_v2"] if step == "quality" else ["pii_regex_with_counts_fast_v2"]
    tag = [dolma, "tag", "--documents", docs, "--experiment", step, "--taggers", *taggers, *procs]
    if step == "quality":
        # A missing or empty attribute never fires (jaq refuses to index null).
        exclude = [
            f"(.attributes.{key} // []) | (length > 0 and .[0][2] {op} {threshold})"
            for key, op, threshold in QUALITY_RULES
        ]
        exclude += [f"(.attributes.{key} // []) | length > 0" for key in QUALITY_FLAGS]
        stream = {
            "filter": {"syntax": "jq", "include": [], "exclude": exclude},
            "span_replacement": [
                {"span": f"$.attributes.{k}", "min_score": 0.5, "replacement": ""} for k in QUALITY_LINES
            ],
        }
    else:
        key = "pii__pii_regex_with_counts_fast_v2__"
        stream = {
            "span_replacement": [
                {"span": f"$.attributes.{key}{t}", "min_score": 0.5, "replacement": f"|||{t}|||"} for t in cmp.PII_TYPES
            ]
        }
    mix = mix_config(corpus, work / "mixed", step, workers, attributes=[step], **stream)
    return [tag, write_config(work / "mix.json", mix, dolma, "mix")]


def write_config(path: Path, config: dict, dolma: str, command: str) -> list[str]:
    path.write_text(json.dumps(config, indent=1))
    return [dolma, "-c", str(path), command]


def timed(command: list[str]) -> dict:
    """Wall and CPU seconds and peak PSS of ``command``'s process tree; output to /dev/null
    (dolma's progress bars), failure shown with its last lines."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)
    reader.start()
    code, cpu, peak = cpu_and_peak_memory(proc)
    wall = time.perf_counter() - start
    reader.join()
    if code != 0:
        shown = [line for line in errors if "ERROR" in line][:10] + errors[-15:]
        sys.exit(f"{shlex.join(command)[:300]} failed ({code}):\n{''.join(shown)}")
    return {"wall": wall, "cpu": cpu, "peak": peak}


def shell(commands: list[list[str]]) -> list[str]:
    """The commands as one process tree, run one after another."""
    return ["bash", "-c", " && ".join(shlex.join(c) for c in commands)]


def run_step(step: str, dolma: str, corpus: Path, work: Path, workers: int, prep_runs: int, lines: int) -> dict:
    """Time both sides of ``step``; their outputs stay in ``work/prep`` and ``work/dolma``."""
    config = work / f"{step}.toml"
    config.write_text(SOURCES.format(corpus=corpus) + PREP_STAGES[step])
    prep_out = work / "prep"

    def prep_run() -> dict:
        shutil.rmtree(prep_out, ignore_errors=True)
        return timed(prep_command(config, prep_out, workers))

    def dolma_run(commands: list[list[str]]) -> dict:
        shutil.rmtree(corpus / "attributes", ignore_errors=True)
        for name in ("tokens", "mixed", "bloom.bin"):
            target = dolma_work / name
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        return timed(shell(commands))

    prep_run()  # untimed: loads (or compiles) the kernels
    dolma_work = work / "dolma"
    dolma_work.mkdir()
    runs = [prep_run() for _ in range((prep_runs + 1) // 2)]
    commands = dolma_commands(step, dolma, corpus, dolma_work, workers, lines)
    result = {}
    if step == "dedupe":  # dedupe alone (attributes only), then with the mixer writing documents
        result["dolma dedupe alone"] = dolma_run(commands[:1])
    result["dolma"] = dolma_run(commands)
    runs += [prep_run() for _ in range(prep_runs // 2)]
    runs.sort(key=lambda r: r["wall"])
    result["prep"] = {**runs[len(runs) // 2], "walls": [r["wall"] for r in runs]}
    result["prep_cost"] = json.loads((prep_out / "cost.json").read_text())  # the last run's
    return result


def agreement(step: str, corpus: Path, work: Path, texts: dict[str, str], lines: int) -> list[str]:
    """Lines saying how far the two sides' outputs of ``step`` agree."""
    prep_out, dolma_work = work / "prep", work / "dolma"
    if step == "tokens":
        a = cmp.token_agreement(cmp.prep_tokens(prep_out), cmp.dolma_tokens(dolma_work / "tokens"))
        return [
            f"token ids identical for {a['identical']:,} of {a['documents']:,} documents; {a['different']:,} differ, "
            f"{a['prep_only']:,} only in prep's shards, {a['dolma_only']:,} only in dolma's memmaps",
            f"tokens: prep {a['prep_tokens']:,}, dolma {a['dolma_tokens']:,} (EOS included)",
        ]
    if step == "dedupe":
        a = cmp.dedup_agreement(texts, cmp.prep_documents(prep_out), cmp.dolma_documents(dolma_work / "mixed"))
        k, bits, rate = cmp.bloom_false_positive_rate(dolma_work / "bloom.bin", lines)
        either = a["both"] + a["prep_only"] + a["dolma_only"]
        rest = either - a["dolma_only_own_repeats"]
        return [
            f"removed lines: prep {a['prep']:,}, dolma {a['dolma']:,}; both {a['both']:,}, "
            f"prep only {a['prep_only']:,}, "
            f"dolma only {a['dolma_only']:,}: agreement {a['both'] / max(either, 1):.2%}",
            f"  {a['dolma_only_own_repeats']:,} of dolma's own removals repeat a line inside the document that first "
            f"has it; without those, agreement {a['both'] / max(rest, 1):.2%}",
            f"Bloom filter: {bits / 8 / 2**20:,.1f} MiB, {k} hashes, {lines:,} lines hashed: false-positive rate "
            f"{rate:.1e} as configured (asked {BLOOM_FALSE_POSITIVE_RATE:.0e}); "
            f"{a['dolma_false_positives']:,} removed lines occur once in the corpus",
        ]
    if step == "quality":
        attrs = cmp.attributes(corpus / "attributes" / "quality")
        rules = [*QUALITY_RULES]
        reasons = {}
        for doc_id, values in attrs.items():
            reasons[doc_id] = cmp.first_dolma_rule(values, rules) or next(
                (k.split("__")[-1] for k in QUALITY_FLAGS if values.get(k)), None
            )
        a = cmp.decision_agreement(
            list(texts),
            set(cmp.prep_documents(prep_out)),
            set(cmp.dolma_documents(dolma_work / "mixed")),
            cmp.prep_rejects(prep_out),
            reasons,
        )
        return [
            f"same decision for {a['same']:,} of {a['documents']:,} documents "
            f"({a['same'] / max(a['documents'], 1):.2%}): "
            f"both keep {a['both_keep']:,}, both drop {a['both_drop']:,}",
            f"  dropped by prep only {a['prep_only_drop']:,} ({cmp.format_counter(a['prep_only_reasons'])})",
            f"  dropped by dolma only {a['dolma_only_drop']:,} ({cmp.format_counter(a['dolma_only_reasons'])})",
        ]
    from stages.pii import Pii

    stage = Pii(Pii.Options(types=["email", "phone", "ip"], code_sources=[], math_sources=[]))
    ids = list(texts)
    ours = dict(zip(ids, stage.find(list(texts.values()))))
    theirs = cmp.dolma_pii_spans(cmp.attributes(corpus / "attributes" / "pii"))
    table = cmp.pii_agreement(ours, theirs)
    out = []
    for kind, c in table.items():
        out.append(
            f"{kind:<6} prep {c['prep']:>6,} spans "
            f"({c['prep_matched'] / max(c['prep'], 1):6.1%} overlap one of dolma's), "
            f"dolma {c['dolma']:>6,} ({c['dolma_matched'] / max(c['dolma'], 1):6.1%} overlap one of prep's)"
        )
    return out


def report(step: str, result: dict) -> list[str]:
    prep, dolma = result["prep"], result["dolma"]
    lines = [f"\n{step}: {'':<20}{'wall s':>8}{'CPU s':>8}{'peak PSS':>10}"]
    for name in [n for n in result if n != "prep_cost"]:
        r = result[name]
        lines.append(f"  {name:<26}{r['wall']:8.1f}{r['cpu']:8.1f}{r['peak'] / 2**20:9,.0f}M")
    walls = " / ".join(f"{w:.1f}" for w in prep["walls"])
    lines.append(f"  prep's runs: {walls} s wall (the row: the median)")
    cost = result["prep_cost"]
    parts = ", ".join(f"{k} {v:.2f}" for k, v in cost["cpu_seconds"].items() if k != "total")
    lines.append(
        f"  prep's cost.json (last run): {cost['wall_seconds']:.1f} s wall inside the run, CPU s {parts}; "
        f"the tree's other {prep['cpu'] - cost['cpu_seconds']['total']:.1f} CPU s: start-up, worker pool, planning"
    )
    lines.append(
        f"  prep vs dolma: {dolma['wall'] / prep['wall']:.2f}x faster (wall), "
        f"{dolma['cpu'] / prep['cpu']:.2f}x less CPU"
    )
    if "dolma dedupe alone" in result:
        alone = result["dolma dedupe alone"]
        lines.append(
            f"  prep vs dolma dedupe alone (attributes only): {alone['wall'] / prep['wall']:.2f}x (wall), "
            f"{alone['cpu'] / prep['cpu']:.2f}x (CPU)"
        )
    return lines


def fraction_for(data: Path, mb: float) -> float:
    texts = cmp.read_records(data, 1.0)
    total = sum(len(r["text"].encode()) for rows in texts.values() for r in rows) / 1e6
    return min(1.0, mb / total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--fraction", type=float, default=1.0, help="share of each shared file's documents to use")
    size.add_argument("--mb", type=float, help="about this many MB of text (sets --fraction)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {','.join(STEPS)}")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prep-runs", type=int, default=3)
    parser.add_argument("--dolma", help="dolma's executable (default: dolma on PATH, else /work/venvs/dolma/bin/dolma)")
    parser.add_argument("--data", type=Path, default=default_data_dir())
    args = parser.parse_args()
    steps = [s for s in args.steps.split(",") if s]
    if unknown := set(steps) - set(STEPS):
        parser.error(f"unknown steps: {sorted(unknown)}")
    dolma = find_dolma(args.dolma)
    fraction = fraction_for(args.data, args.mb) if args.mb else args.fraction
    with tempfile.TemporaryDirectory(prefix="prep-dolma-") as tmp:
        corpus = Path(tmp) / "corpus"
        documents, size_bytes = cmp.write_corpus(cmp.read_records(args.data, fraction), corpus)
        texts = cmp.corpus_texts(corpus)
        lines = cmp.hashed_paragraphs(texts)
        print(
            f"{documents:,} documents, {size_bytes / 1e6:,.1f} MB of text ({fraction:.1%} of each shared web, code "
            f"and math file), {args.workers} processes a side; dolma: {dolma}"
        )
        for step in steps:
            work = Path(tmp) / step
            work.mkdir()
            result = run_step(step, dolma, corpus, work, args.workers, args.prep_runs, lines)
            print("\n".join(report(step, result) + ["  " + x for x in agreement(step, corpus, work, texts, lines)]))
            sys.stdout.flush()
            shutil.rmtree(work)
            shutil.rmtree(corpus / "attributes", ignore_errors=True)


if __name__ == "__main__":
    main()
