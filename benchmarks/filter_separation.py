"""When does the proxy see what a filter chain is worth? ``configs/c4.toml`` against the same pages unfiltered.

    nice -n 5 python -m benchmarks.filter_separation [--tokens 1M,2M,4M] [--seeds 3]
        [--presets tiny] [--threads 2] [--data ../shared/data] [--work /tmp/prep-bench-separation]

Why: ``prep ablate`` and ``prep mix search`` act on a difference only when it exceeds the
seed spread. A filter chain is the data choice users most want judged, and its effect is
small next to, say, shuffled words: at 1M tokens and 3 seeds of the tiny preset the two
runs below differ by about one seed spread. This finds the smallest budget, preset and eval
kind at which the difference is real, so that README can say what to run.

Data: the shared web_gold pages and the shared Common Crawl documents (CCNet style), one
source. ``c4`` is ``configs/c4.toml``'s chain over them (its paths replaced, nothing else
changed); ``unfiltered`` is the same files through ``tokenize`` alone (cl100k_base, as
c4.toml). Every trial of one budget trains the same tokens, so the filtered run (about a
third of the tokens) repeats more of its text: the trade a user makes.

Evals, none trained on: the shared US speeches (clean prose) in nats/token and bits/byte,
and a multiple-choice set made from them (``speech_choices``): a passage's next words
against the next words of other speeches, scored as ``prep ablate --eval-mc`` scores
HellaSwag (the right answer's log-likelihood per character, and accuracy). With one
tokenizer, bits per byte are nats per token times a constant of the eval text, so their
verdict is the same; the benchmark prints both to show it.

Printed, per preset and budget: each eval's difference, the seed spread and the verdict's
level (``clear`` above 2 spreads, ``suggestive`` above 1, else ``noise``). One ledger in
``--work``: a rerun trains only what is missing.

Measured: benchmarks/README.md ("When the proxy separates a filter chain").
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

from pipeline.ablate.ablation import AblationOptions, run_ablation
from pipeline.ablate.verdict import UNITS, choice_losses, compare_sets, final_losses
from pipeline.commands.options import Count
from pipeline.engine.run import run_pipeline

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
INPUTS = ["web/web_gold.jsonl.gz", "web/dolma_ccmain_20190717_00140.jsonl.gz"]
EVAL = "eval/us_speeches.jsonl.gz"
C4_PATHS = 'paths = ["../data/c4/en/c4-train.*-of-01024.json.gz"]'
CONTEXT_WORDS, ANSWER_WORDS, CHOICES, PER_SPEECH = 48, 16, 4, 4
EVAL_POINTS = 2  # the verdict reads the final point; every point costs three eval passes over ~360K tokens


def build_runs(work: Path, data: Path) -> list[Path]:
    """The c4.toml chain and tokenize alone over the same shared pages: two run folders."""
    paths = "paths = [" + ", ".join(json.dumps(str(data / name)) for name in INPUTS) + "]"
    chain = (REPO / "configs" / "c4.toml").read_text()
    if C4_PATHS not in chain:
        raise SystemExit(f"configs/c4.toml no longer reads {C4_PATHS}: update C4_PATHS")
    configs = {
        "c4": chain.replace(C4_PATHS, paths),
        "unfiltered": f'[sources.web]\n{paths}\n[[stages]]\nname = "tokenize"\ntokenizer = "cl100k_base"\n',
    }
    runs = []
    for name, text in configs.items():
        config = work / f"{name}.toml"
        config.write_text(text)
        run_pipeline(config, work / name, quiet=True)  # a finished run is found done
        runs.append(work / name)
    return runs


def speech_choices(speeches: list[str], seed: int = 0) -> list[dict]:
    """HellaSwag-shaped questions from held-out prose: ``PER_SPEECH`` passages of each speech,
    its next ``ANSWER_WORDS`` words against those of ``CHOICES - 1`` other speeches."""
    rng = random.Random(seed)
    words = [re.findall(r"\S+", text) for text in speeches]
    span = CONTEXT_WORDS + ANSWER_WORDS
    usable = [i for i, w in enumerate(words) if len(w) >= span * PER_SPEECH]
    questions = []
    for i in usable:
        for k in range(PER_SPEECH):
            start = k * len(words[i]) // PER_SPEECH
            context = " ".join(words[i][start : start + CONTEXT_WORDS])
            answer = " " + " ".join(words[i][start + CONTEXT_WORDS : start + span])
            endings = [answer]
            for j in rng.sample([j for j in usable if j != i], CHOICES - 1):
                at = rng.randrange(len(words[j]) - ANSWER_WORDS)
                endings.append(" " + " ".join(words[j][at : at + ANSWER_WORDS]))
            rng.shuffle(endings)
            questions.append({"ctx": context, "endings": endings, "label": endings.index(answer)})
    return questions


def build_evals(work: Path, data: Path) -> tuple[Path, Path]:
    with gzip.open(data / EVAL, "rt") as lines:
        speeches = [json.loads(line)["text"] for line in lines]
    prose = data / EVAL
    choices = work / "speech_choices.jsonl"
    choices.write_text("".join(json.dumps(q) + "\n" for q in speech_choices(speeches)))
    return prose, choices


def report(records: list[dict], preset: str, tokens: int) -> None:
    tables = [(name, by_data, UNITS[key]) for key in UNITS for name, by_data in final_losses(records, key).items()]
    tables += [(name, by_data, "nats/char") for name, by_data in choice_losses(records).items()]
    for name, by_data, unit in sorted(tables, key=lambda table: (table[0], table[2])):
        for c in compare_sets(name, by_data, unit):
            ratio = "-" if c.ratio is None else f"{c.ratio:.2f}"
            print(
                f"  {preset:<6} {tokens:>10,}  {name:<42} {c.winner:>10} by {c.difference:.4f} {unit:<10} "
                f"spread {c.spread or 0:.4f}  ratio {ratio:>5}  {c.level}"
            )
    accuracy: dict[str, list[float]] = {}
    for record in records:
        for scores in record.get("final_mc", {}).values():
            accuracy.setdefault(record["data"]["name"], []).append(scores["accuracy"])
    cells = ", ".join(f"{name} {sum(a) / len(a):.3f}" for name, a in sorted(accuracy.items()))
    print(f"  {preset:<6} {tokens:>10,}  multiple-choice accuracy (mean over seeds): {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1M,2M,4M", help="training tokens per trial, comma-separated")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--presets", default="tiny", help="model presets, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared corpora [default: ../shared/data]")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prep-bench-separation"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runs = build_runs(args.work, args.data)
    prose, choices = build_evals(args.work, args.data)
    for preset in args.presets.split(","):
        for tokens in (Count().convert(t, None, None) for t in args.tokens.split(",")):
            options = AblationOptions(
                data=runs, out=args.work / f"{preset}-{tokens}", tokens=tokens, preset=preset, seeds=args.seeds,
                eval_files=[prose], choice_files=[choices], device="cpu", threads=args.threads,
                ledger=args.work / "ledger", eval_points=EVAL_POINTS,
            )  # fmt: skip
            result = run_ablation(options, progress=lambda line: None)
            report(result.records, preset, tokens)


if __name__ == "__main__":
    main()
