"""``prep shards`` (inspect, merge): the command line over ``pipeline.commands.shard_inspect``
and ``pipeline.formats.shard_merge``.

``shards_group`` is a click group that the main ``prep`` command attaches.
"""

from __future__ import annotations

import json
from typing import Any

import click

from pipeline.commands.shard_inspect import DecodeError, decode_document, describe_shard, resolve_shards
from pipeline.formats.shard_merge import merge_shards
from pipeline.formats.token_shards import IncompatibleShards, ShardError, shard_prefix
from pipeline.util.numbers import counted
from pipeline.util.printable import printable, printable_path


def _shards(path: str) -> list[str]:
    """The shard prefixes a PATH argument names; a path naming none is a bad argument."""
    try:
        return resolve_shards(path)
    except FileNotFoundError as e:
        raise click.BadParameter(str(e)) from None


@click.group("shards")
def shards_group() -> None:
    """Inspect and merge token shards (Megatron .bin + .idx)."""


@shards_group.command("inspect")
@click.argument("path", type=click.Path(exists=False))
@click.option("--decode", "decode_k", type=int, default=None, metavar="K", help="Print document K decoded.")
@click.option("--verify", is_flag=True, help="Recompute the .bin's sha256 and compare it with the sidecar.")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def inspect_command(path: str, decode_k: int | None, verify: bool, as_json: bool) -> None:
    """Counts, dtype and tokenizer of a shard: a prefix, one of its files, a folder of shards, a run or its tokens/."""
    try:
        _inspect(path, decode_k, verify, as_json)
    except ShardError as e:  # one line naming the file and the problem, not a traceback
        raise click.ClickException(str(e)) from e


def _inspect(path: str, decode_k: int | None, verify: bool, as_json: bool) -> None:
    prefixes = _shards(path)
    if decode_k is not None:
        if len(prefixes) != 1:
            raise click.BadParameter(f"{path} holds {len(prefixes)} shards; name one to decode from")
        try:
            text = decode_document(prefixes[0], decode_k)
        except IndexError as e:  # K is not a document of the shard
            raise click.BadParameter(str(e)) from None
        except DecodeError as e:
            raise click.ClickException(str(e)) from e
        click.echo(printable(text, text=True), nl=False)  # a document's escapes would act on the terminal
        return
    infos = [describe_shard(p, verify) for p in prefixes]
    if as_json:
        click.echo(json.dumps(infos if len(infos) > 1 else infos[0], indent=2))
    else:
        for info in infos:
            _print_info(info)
        if len(infos) > 1:
            docs = sum(i["documents"] for i in infos)
            tokens = sum(i["tokens"] for i in infos)
            click.echo(f"total: {len(infos)} shards, {counted(docs, 'document')}, {counted(tokens, 'token')}")


def _print_info(info: dict[str, Any]) -> None:
    tokenizer = info["tokenizer"] or "unknown (no sidecar)"
    if info["vocab_sha256"]:
        tokenizer += f"  (vocab sha256 {info['vocab_sha256'][:16]}...)"
    click.echo(printable_path(info["shard"]))
    click.echo(f"  documents  {info['documents']:,}")
    click.echo(
        f"  tokens     {info['tokens']:,}  (per document: min {info['min_tokens']}, "
        f"mean {info['mean_tokens']:.1f}, max {info['max_tokens']})"
    )
    click.echo(f"  dtype      {info['dtype']}")
    # The sidecar's name for its tokenizer is a file's words, shown as ``prep show`` shows a document's.
    click.echo(f"  tokenizer  {printable(tokenizer)}")
    click.echo(f"  eod id     {info['eod_id']}    bos id {info['bos_id']}")
    if "bin_sha256" in info:
        verdict = "matches its sidecar" if info["bin_sha256_matches"] else "not checked: no checksum in a sidecar"
        click.echo(f"  bin sha256 {info['bin_sha256']}  ({verdict})")


@shards_group.command("merge")
@click.argument("out_prefix", type=click.Path())
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
def merge_command(out_prefix: str, inputs: tuple[str, ...]) -> None:
    """Stream the shards INPUTS (prefixes, shard files or folders) into one shard OUT_PREFIX."""
    prefixes = [p for path in inputs for p in _shards(path)]
    try:
        meta = merge_shards(out_prefix, prefixes)
    except (IncompatibleShards, ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"merged {counted(len(prefixes), 'shard')} into {shard_prefix(out_prefix)}: "
        f"{counted(meta['documents'], 'document')}, {counted(meta['tokens'], 'token')} ({meta['dtype']})"
    )
