"""Decision accuracy (DataDecide's metric): does the tiny proxy rank data recipes as a larger model does?

    nice -n 19 python -m benchmarks.decision_accuracy [--tokens 256K] [--presets tiny,small]
        [--recipes web,cc,...] [--seeds 1] [--threads 2] [--data ../shared/data]
        [--work /tmp/prep-bench-decision]

Why: ``prep ablate`` and ``prep mix search`` pick data on the ``tiny`` preset because it
trains in minutes on a CPU; that is only worth it if what wins at tiny size also wins at a
larger size. DataDecide (AI2, 2025) measures it as decision accuracy: over every pair of
recipes, the share where the small model's ranking agrees with the large model's. 1.0 is
perfect agreement; 0.5 is a coin.

Data: four shared corpora (``../shared/data``: web_gold pages, CommonCrawl documents in
CCNet style, the CPython standard library, GSM8K), ``SOURCE_BYTES`` of each, tokenized
with gpt2 in one ``prep run`` (built once into ``--work``). The recipes are ``prep mix``
folders of that run (``RECIPES``), each of ``--tokens`` tokens, made as ``prep mix search``
makes its trials. Every recipe is trained with each preset through ``run_ablation`` (one
ledger in ``--work``, so a rerun only trains what is missing) and scored on held-out clean
prose no recipe trained on (the shared US speeches), in nats/token (bits per byte rank the
same here: one tokenizer, one eval text). Printed: each preset's losses, the pairwise
agreements, and the decision accuracy of each preset against the largest.

Measured: benchmarks/README.md ("Decision accuracy").
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
import time
from pathlib import Path

from pipeline.ablate.ablation import AblationOptions, run_ablation
from pipeline.ablate.verdict import final_losses
from pipeline.commands.options import Count
from pipeline.engine.run import run_pipeline
from pipeline.mixsearch.trials import TrialSettings, make_mixture

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SOURCES = {
    "web": "web/web_gold.jsonl.gz",
    "cc": "web/dolma_ccmain_20190717_00140.jsonl.gz",
    "code": "code/python_stdlib.jsonl.gz",
    "math": "math/gsm8k.jsonl.gz",
}
EVAL = "eval/us_speeches.jsonl.gz"
SOURCE_BYTES = 1_500_000  # text taken from each corpus, in file order
RECIPES = {
    "web": {"web": 1.0},
    "cc": {"cc": 1.0},
    "web+cc": {"web": 0.5, "cc": 0.5},
    "web+code": {"web": 0.7, "code": 0.3},
    "web+math": {"web": 0.7, "math": 0.3},
    "code+math": {"code": 0.5, "math": 0.5},
}
EVAL_TOKENS = 16_384
SEED = 0


def _head(path: Path, limit: int) -> list[dict]:
    """The first documents of a gzipped JSON-lines corpus, ``limit`` bytes of text in all."""
    rows, size = [], 0
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            text = json.loads(line)["text"]
            rows.append({"id": f"{path.stem}-{index}", "text": text})
            size += len(text.encode("utf-8"))
            if size >= limit:
                break
    return rows


def build_run(work: Path, data: Path) -> Path:
    """One tokenized run of the four sources (built, or found built, in ``work/run``)."""
    config = [f'[sources.{name}]\npaths = ["{name}.jsonl"]' for name in SOURCES]
    for name, relative in SOURCES.items():
        rows = _head(data / relative, SOURCE_BYTES)
        (work / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (work / "run.toml").write_text("\n".join(config) + '\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n')
    run_pipeline(work / "run.toml", work / "run", quiet=True)
    prose = _head(data / EVAL, 10**9)
    (work / "prose.jsonl").write_text("".join(json.dumps(row) + "\n" for row in prose))
    return work / "run"


def recipes(work: Path, run: Path, tokens: int, names: list[str]) -> list[Path]:
    """Each named recipe as a ``prep mix`` folder of ``tokens`` tokens."""
    settings = TrialSettings(runs=[run], out=work, tokens=tokens, eval_files=[], weights={}, seed=SEED)
    sources = sorted(SOURCES)
    folders = []
    for name in names:
        row = [RECIPES[name].get(source, 0.0) for source in sources]
        folders.append(make_mixture(settings, sources, row, work / "recipes" / f"{tokens}" / name))
    return folders


def rank(work: Path, folders: list[Path], preset: str, tokens: int, seeds: int, threads: int) -> dict[str, float]:
    """Recipe -> mean final loss on the held-out prose, trained with ``preset``."""
    options = AblationOptions(
        data=folders, out=work / "ablation" / preset, tokens=tokens, preset=preset, seeds=seeds,
        eval_files=[work / "prose.jsonl"], held_out_weight=0.0, eval_tokens=EVAL_TOKENS, eval_points=1,
        workers=0, device="cpu", threads=threads, ledger=work / "ledger",
    )  # fmt: skip
    result = run_ablation(options, progress=lambda line: None)
    by_recipe = final_losses(result.records)["eval:prose.jsonl"]
    return {name: statistics.fmean(losses) for name, losses in by_recipe.items()}


def agreements(small: dict[str, float], large: dict[str, float]) -> list[tuple[str, str, bool]]:
    """Every pair of recipes and whether the two models order it the same way (a tie in
    either counts as disagreement: it decides nothing)."""
    pairs = []
    for a, b in itertools.combinations(sorted(small), 2):
        small_sign, large_sign = small[a] - small[b], large[a] - large[b]
        pairs.append((a, b, small_sign * large_sign > 0))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="256K", help="training tokens per recipe and preset")
    parser.add_argument("--presets", default="tiny,small", help="presets, smallest first; the last is the reference")
    parser.add_argument("--recipes", default=",".join(RECIPES), help="recipes to rank (of RECIPES)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared corpora [default: ../shared/data]")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prep-bench-decision"))
    args = parser.parse_args()
    tokens = Count().convert(args.tokens, None, None)
    presets, names = args.presets.split(","), args.recipes.split(",")
    unknown = sorted(set(names) - set(RECIPES))
    if unknown:
        parser.error(f"unknown recipe(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    folders = recipes(args.work, build_run(args.work, args.data), tokens, names)
    data_s = time.perf_counter() - started
    losses, wall = {}, {}
    for preset in presets:
        began = time.perf_counter()
        losses[preset] = rank(args.work, folders, preset, tokens, args.seeds, args.threads)
        wall[preset] = time.perf_counter() - began
    print(f"{len(names)} recipes, {tokens:,} tokens each, {args.seeds} seed(s); eval: held-out US speeches")
    print(f"data: {data_s:.0f} s; training: " + ", ".join(f"{p} {wall[p]:.0f} s" for p in presets))
    print(f"{'recipe':<10}" + "".join(f"{preset:>12}" for preset in presets) + "   (nats/token, lower is better)")
    for name in names:
        print(f"{name:<10}" + "".join(f"{losses[preset][name]:>12.4f}" for preset in presets))
    reference = presets[-1]
    for preset in presets[:-1]:
        pairs = agreements(losses[preset], losses[reference])
        agreed = sum(ok for _, _, ok in pairs)
        print(f"decision accuracy, {preset} against {reference}: {agreed}/{len(pairs)} = {agreed / len(pairs):.2f}")
        disagreed = [f"{a} vs {b}" for a, b, ok in pairs if not ok]
        if disagreed:
            print("  disagree on: " + ", ".join(disagreed))


if __name__ == "__main__":
    main()
