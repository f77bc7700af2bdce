"""``prep show`` (one document and what happened to it) and ``prep estimate`` (training
GPU-hours for a mixture)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.formats.mix import MIX_JSON
from pipeline.mix.inventory import MixError
from pipeline.util.printable import error_line, printable
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


@dataclass
class Match:
    """One document found under the id: kept (``docs/``) or rejected (``rejects/``), the
    Parquet file it is in, and its row."""

    kind: str
    path: Path
    row: dict


def find_documents(run: Path, doc_id: str) -> list[Match]:
    """Every document with ``doc_id``, kept ones first: an id can repeat (two inputs with the
    same ids, or a document kept once and dropped as a duplicate elsewhere), and showing only
    the first would hide the others. Each file is read with a filter on ``id``, so Parquet
    skips the row groups whose statistics rule the id out and reads little of most files."""
    found = []
    for kind, folder in (("kept", run / "docs"), ("rejected", run / "rejects")):
        for path in parquet_files(folder):
            found += [Match(kind, path, row) for row in read_rows(path, doc_id)]
    return found


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet files under ``folder``, sorted; none if it does not exist. A folder that
    cannot be listed raises (``Path.rglob`` would skip it, and ``show`` would then wrongly
    report that the document is not there)."""
    try:
        os.stat(folder)
    except FileNotFoundError:
        return []
    files = []
    for root, _dirs, names in os.walk(folder, onerror=_raise):
        files += [Path(root) / name for name in names if name.endswith(".parquet")]
    return sorted(files)


def _raise(error: OSError) -> None:
    raise error


def read_rows(path: Path, doc_id: str) -> list[dict]:
    """The rows of ``path`` whose id is ``doc_id``. A file that cannot be read (permissions,
    a dangling link, a truncated or foreign file) is a one-line error naming it."""
    try:
        return pq.read_table(path, filters=[("id", "=", doc_id)]).to_pylist()
    except (OSError, pa.ArrowException) as error:
        raise click.ClickException(f"cannot read {printable(path)}: {printable(error_line(error))}") from None


def _value(value, limit: int = 300) -> str:
    """A field value on one line, cut at ``limit`` characters, safe to print."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    elif isinstance(value, bytes):
        text = repr(value)
    else:
        text = str(value)
    text = text if len(text) <= limit else text[:limit] + f" ... ({len(text):,} chars)"
    return printable(text)


@click.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("doc_id")
@click.option("--chars", type=int, default=2000, show_default=True, help="Show at most this much text (0: all).")
def show(run: Path, doc_id: str, chars: int) -> None:
    """Print document DOC_ID of RUN with its signals, and the stage and rule that dropped it.

    Every document with that id is shown, kept and rejected, each with the file it was
    found in."""
    try:
        matches = find_documents(run, doc_id)
    except OSError as error:  # a folder of the run that cannot be listed
        where = error.filename or run
        raise click.ClickException(f"cannot read {printable(where)}: {printable(error_line(error))}") from None
    if not matches:
        raise click.ClickException(f"no document '{printable(doc_id)}' in {printable(run)}/docs or {printable(run)}/rejects")
    if len(matches) > 1:
        kept = sum(m.kind == "kept" for m in matches)
        click.echo(f"{len(matches)} documents have id '{printable(doc_id)}': {kept} kept, {len(matches) - kept} rejected")
    for match in matches:
        if len(matches) > 1:
            click.echo()
        echo_match(doc_id, match, chars)


def echo_match(doc_id: str, match: Match, chars: int) -> None:
    """One document: kept or the stage and rule that dropped it, where it is, its fields and
    its text (cut at ``chars``)."""
    row = dict(match.row)
    text = row.pop("text", None)
    name = printable(doc_id)
    if match.kind == "kept":
        click.echo(f"{name}: kept ({printable(row.get('source'))})")
    else:
        where = f"{printable(row.get('file'))}:{row.get('line')}" if row.get("file") else "?"
        click.echo(f"{name}: DROPPED by stage '{printable(row['stage'])}', rule '{printable(row['reason'])}' "
                   f"({printable(row.get('source'))}, {where})")
    click.echo(f"  found in: {printable(match.path)}")
    if match.kind == "rejected" and row.get("detail"):
        click.echo(f"  detail: {_value(row['detail'])}")
    for field, value in row.items():
        if field not in ("id", "stage", "reason", "detail") and value is not None:
            click.echo(f"  {printable(field)}: {_value(value)}")
    if text is not None:
        shown = text if chars <= 0 else text[:chars]
        click.echo(f"--- text ({len(text):,} chars) ---\n{printable(shown, text=True)}" + ("\n[...]" if len(shown) < len(text) else ""))


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
    mix_json = mix_dir / MIX_JSON
    if not mix_json.exists():
        raise click.ClickException(f"{mix_dir} has no {MIX_JSON} (make one with prep mix)")
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
