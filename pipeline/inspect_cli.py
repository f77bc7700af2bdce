"""``prep show`` (one document and what happened to it) and ``prep estimate`` (training
GPU-hours for a mixture)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pyarrow.parquet as pq

from pipeline.mix.inventory import MixError
from pipeline.mix.plan import parse_tokens


# Dense BF16 peak FLOP/s per GPU (vendor data sheets, without sparsity).
GPU_PEAK_FLOPS = {
    "a100": 312e12,
    "h100": 989e12,
    "h200": 989e12,
    "b200": 2250e12,
    "l40s": 362e12,
    "mi300x": 1307e12,
}


def find_document(run: Path, doc_id: str) -> tuple[str, dict] | None:
    """("kept", row) or ("rejected", ledger row) for ``doc_id``, searching file by file
    (row-group statistics on ``id`` let Parquet skip most of each file)."""
    for kind, folder in (("kept", run / "docs"), ("rejected", run / "rejects")):
        for path in sorted(folder.rglob("*.parquet")) if folder.exists() else []:
            table = pq.read_table(path, filters=[("id", "=", doc_id)])
            if table.num_rows:
                return kind, table.slice(0, 1).to_pylist()[0]
    return None


def _value(value, limit: int = 300) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    elif isinstance(value, bytes):
        text = repr(value)
    else:
        text = str(value)
    return text if len(text) <= limit else text[:limit] + f" ... ({len(text):,} chars)"


@click.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("doc_id")
@click.option("--chars", type=int, default=2000, show_default=True, help="Show at most this much text (0: all).")
def show(run: Path, doc_id: str, chars: int) -> None:
    """Print document DOC_ID of RUN with its signals, and the stage and rule that dropped it."""
    found = find_document(run, doc_id)
    if found is None:
        raise click.ClickException(f"no document {doc_id!r} in {run}/docs or {run}/rejects")
    kind, row = found
    text = row.pop("text", None)
    if kind == "kept":
        click.echo(f"{doc_id}: kept ({row.get('source')})")
    else:
        where = f"{row.get('file')}:{row.get('line')}" if row.get("file") else "?"
        click.echo(f"{doc_id}: DROPPED by stage {row['stage']!r}, rule {row['reason']!r} ({row.get('source')}, {where})")
        if row.get("detail"):
            click.echo(f"  detail: {row['detail']}")
    for name, value in row.items():
        if name not in ("id", "stage", "reason", "detail") and value is not None:
            click.echo(f"  {name}: {_value(value)}")
    if text is not None:
        shown = text if chars <= 0 else text[:chars]
        click.echo(f"--- text ({len(text):,} chars) ---\n{shown}" + ("\n[...]" if len(shown) < len(text) else ""))


def estimate_hours(tokens: int, params: float, gpus: int, mfu: float, peak: float) -> dict:
    """Training compute by the 6·N·D rule (forward + backward, dense transformer)."""
    flops = 6.0 * params * tokens
    gpu_hours = flops / (mfu * peak) / 3600
    return {"tokens": tokens, "flops": flops, "gpu_hours": gpu_hours, "wall_hours": gpu_hours / gpus}


@click.command()
@click.argument("mix_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--params", required=True, help="Model parameters, e.g. 1B, 350M, 7e9.")
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--mfu", type=click.FloatRange(min=0, max=1, min_open=True), default=0.4, show_default=True,
              help="Model FLOPs utilisation you expect.")
@click.option("--gpu", type=click.Choice(sorted(GPU_PEAK_FLOPS)), default="h100", show_default=True,
              help="GPU whose dense BF16 peak to use.")
@click.option("--peak-flops", type=float, help="Peak FLOP/s per GPU (overrides --gpu).")
def estimate(mix_dir: Path, params: str, gpus: int, mfu: float, gpu: str, peak_flops: float | None) -> None:
    """Project training GPU-hours on a mixture: 6 x params x tokens / (MFU x peak FLOP/s)."""
    mix_json = mix_dir / "mix.json"
    if not mix_json.exists():
        raise click.ClickException(f"{mix_dir} has no mix.json (make one with prep mix)")
    tokens = json.loads(mix_json.read_text())["tokens"]
    try:
        n_params = float(params) if "e" in params.lower() else parse_tokens(params)
    except (ValueError, MixError) as error:
        raise click.ClickException(f"--params: {error}") from None
    peak = peak_flops or GPU_PEAK_FLOPS[gpu]
    result = estimate_hours(tokens, n_params, gpus, mfu, peak)
    click.echo(
        f"{tokens:,} tokens x {n_params:,.0f} parameters = {result['flops']:.3e} FLOPs\n"
        f"at MFU {mfu:g} on {gpus} x {'custom' if peak_flops else gpu} ({peak:.3g} FLOP/s each): "
        f"{result['gpu_hours']:,.4g} GPU-hours, {result['wall_hours']:,.4g} hours of wall time"
    )
