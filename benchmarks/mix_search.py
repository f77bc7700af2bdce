"""Where the time of ``prep mix search`` goes: the proxy's training against fitting and data.

    nice -n 19 python -m benchmarks.mix_search [--trials 16] [--tokens 1M] [--threads 2]
        [--data ../shared/data] [--work /tmp/prep-bench-mix-search]

Why: a search is ``--trials`` trainings of the proxy plus everything around them (making each
trial's ``prep mix`` folder, the loader's index, the eval sets, the regressions and the
proposal). If the trainings are not nearly all of the wall time, the machinery around them
is what to make faster; if they are, the lever is the proxy (its preset, its tokens). No
peer tool runs this search (RegMix, olmix and CLIMB are research code over their own
trainers), so there is no ratio to print: the split of the time is the figure.

Data: three shared corpora (``../shared/data``: web_gold pages, the CPython standard
library, GSM8K), ``SOURCE_BYTES`` of each, tokenized with gpt2 in one ``prep run`` (built
once into ``--work``; its time is printed apart, since a user's runs exist before a search).
Eval: held-out clean prose (the shared US speeches). The search is ``run_search`` with the
tiny preset on the CPU, seed 0, the defaults of ``prep mix search``; a rerun with the same
``--work`` reads every trial from the ledger, so each measurement uses a fresh folder.

Printed: the search's wall time, and its split into
  training     the trials' training loops, their in-training evaluations included
               (each trial record's ``wall_s``), less the loader's wait inside them;
  data wait    the time those loops waited for batches (``data_wait_share``);
  fitting      both regressions with their leave-one-out refits and the proposal
               (timed again on the search's own numbers: the same work);
  data, setup  the rest: trial mixtures (``prep mix``), loader indexes, eval sets, vocabulary.

Measured: benchmarks/README.md ("prep mix search").
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.decision_accuracy import DATA, EVAL, _head
from pipeline.commands.options import Count
from pipeline.engine.run import run_pipeline
from pipeline.mix.inventory import take_inventory
from pipeline.mixsearch.fit import MODELS, Objective
from pipeline.mixsearch.propose import propose
from pipeline.mixsearch.sampling import make_space
from pipeline.mixsearch.search import SearchOptions, run_search
from pipeline.mixsearch.trials import TrialSettings

SOURCES = {"web": "web/web_gold.jsonl.gz", "code": "code/python_stdlib.jsonl.gz", "math": "math/gsm8k.jsonl.gz"}
SOURCE_BYTES = 4_000_000  # about a million gpt2 tokens of each
EVAL_TOKENS = 16_384  # prep mix search's default


def build_run(work: Path, data: Path) -> tuple[Path, Path]:
    """The three-source run in ``work/run`` and the eval file beside it."""
    for name, relative in SOURCES.items():
        rows = _head(data / relative, SOURCE_BYTES)
        (work / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = "\n".join(f'[sources.{name}]\npaths = ["{name}.jsonl"]' for name in SOURCES)
    (work / "run.toml").write_text(config + '\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n')
    run_pipeline(work / "run.toml", work / "run", quiet=True)
    prose = work / "prose.jsonl"
    prose.write_text("".join(json.dumps(row) + "\n" for row in _head(data / EVAL, 10**9)))
    return work / "run", prose


def fitting_seconds(options: SearchOptions, result) -> float:
    """The fits and the proposal of ``result``, timed again on its own numbers."""
    inventory = take_inventory(options.settings.runs)
    tokens = {name: source.tokens for name, source in inventory.sources.items()}
    space = make_space(tokens, options.bounds, options.settings.target_tokens, options.max_epochs, options.prior)
    healthy = np.array([record["health"]["status"] == "ok" for record in result.records])
    began = time.perf_counter()
    fits = [Objective(model, result.shares[healthy], result.measured, options.settings.weights) for model in MODELS]
    chosen = min(fits, key=lambda fit: fit.error)
    propose(space, chosen.predict, result.shares[healthy], options.candidates, options.settings.seed + 1)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--tokens", default="1M", help="training tokens per trial")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared corpora [default: ../shared/data]")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prep-bench-mix-search"))
    args = parser.parse_args()
    tokens = Count().convert(args.tokens, None, None)
    args.work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    run, prose = build_run(args.work, args.data)
    built = time.perf_counter() - began
    out = args.work / "search"
    shutil.rmtree(out, ignore_errors=True)  # a fresh search: a kept ledger would train nothing
    settings = TrialSettings(
        runs=[run], out=out, tokens=tokens, eval_files=[prose], weights={f"eval:{prose.name}": 1.0},
        eval_tokens=EVAL_TOKENS, device="cpu", threads=args.threads, workers=1,
    )  # fmt: skip
    options = SearchOptions(trials=args.trials, settings=settings)
    began = time.perf_counter()
    result = run_search(options, progress=lambda line: None)
    wall = time.perf_counter() - began
    loops = sum(record["wall_s"] for record in result.records)
    waited = sum(record["data_wait_share"] * record["step_s"] * (record["steps"] - 1) for record in result.records)
    fitting = fitting_seconds(options, result)
    split = {
        "training": loops - waited,
        "data wait": waited,
        "fitting": fitting,
        "data, setup": wall - loops - fitting,
    }
    rates = [record["tokens_per_s"] for record in result.records]
    print(f"prep run of the three sources (apart): {built:.1f} s")
    print(f"search: {args.trials} trials x {tokens:,} tokens, tiny preset, {args.threads} threads: {wall:.1f} s")
    for name, seconds in split.items():
        print(f"  {name:<12} {seconds:>8.1f} s  {seconds / wall:>6.1%}")
    print(f"  the proxy's share (training + its data wait): {(loops) / wall:.1%}")
    print(f"  tokens/s per trial: median {np.median(rates):,.0f} (min {min(rates):,.0f}, max {max(rates):,.0f})")
    print(f"  chosen fit {result.chosen.name}, cross-validated error {result.chosen.error:.4f}")


if __name__ == "__main__":
    main()
