"""``prep mix``: the command line over ``pipeline.mix``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from pipeline.commands.options import Count, Finite

CURRICULA = (
    "none, length (shortest first), quality (best first: the quality_score column of a classify model named "
    "quality), or any numeric column of the documents, ascending "
    "(a signal such as n_chars, a classifier's <name>_score)"
)


def _clear_output(folder, force: bool) -> None:
    """Make room for a mixture in ``folder`` (a ``MixLayout``): an earlier mixture there is
    replaced with --force, by removing only what ``MixLayout.own`` lists (it removed the
    whole folder, with whatever else the user kept in it). What a ``prep mix`` stopped
    before its ``mix.json`` left (its writing mark says so) is replaced without --force:
    no mixture was made. A file the mixture would be written over in a folder that holds
    neither is the user's, and refused."""
    existing = [path for path in folder.own() if os.path.lexists(path)]
    stopped = folder.writing.exists() and not folder.manifest.exists()
    if not folder.manifest.exists() and not stopped:
        if existing:
            raise click.ClickException(
                f"{existing[0]} is there but {folder.manifest} is not, so it may be no mixture's: "
                "move it, or use another --out"
            )
        return
    if not force and not stopped:
        raise click.ClickException(f"{folder.folder} already holds a mixture; use --force to replace it")
    for path in existing:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _runs_and_weights(arguments: list[str]) -> tuple[list[Path], dict[str, float]]:
    """``RUN --code 0.25 --math=0.08`` -> ([RUN], {"code": 0.25, "math": 0.08}).

    Click cannot declare an option per source name, so the unknown ``--NAME`` options
    arrive among the positional arguments and are sorted out here.
    """
    from pipeline.mix.inventory import MixError
    from pipeline.mix.plan import parse_weight

    runs, weights, items = [], {}, list(arguments)
    while items:
        item = items.pop(0)
        if not item.startswith("--"):
            if not Path(item).is_dir():
                raise MixError(f"{item}: no such run folder")
            runs.append(Path(item))
            continue
        name, sep, value = item[2:].partition("=")
        if not sep:
            if not items:
                raise MixError(f"--{name} needs a weight, e.g. --{name} 0.25")
            value = items.pop(0)
        weights[name] = parse_weight(value, f"--{name}")
    if not runs:
        raise MixError("name at least one run folder (the --out of a prep run that tokenized)")
    return runs, weights


SEARCH = "search"


class MixCommand(click.Command):
    """``prep mix``, which also answers ``prep mix search`` (``pipeline.commands.mix_search``).

    A click group cannot hold both: ``prep mix`` takes free ``--SOURCE WEIGHT`` options and
    run folders as its arguments, so the first word decides (a run folder named ``search``
    is reached as ``./search``)."""

    def make_context(self, info_name, args, parent=None, **extra):
        if args and args[0] == SEARCH:
            from pipeline.commands.mix_search import mix_search

            return mix_search.make_context(f"{info_name} {SEARCH}", list(args[1:]), parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


@click.command(
    short_help="Mix runs' token shards to exact shares; mix search finds them.",
    cls=MixCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("arguments", nargs=-1, required=True, metavar="RUN_DIR... [--SOURCE WEIGHT]...")
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help="Mixture folder (mix.json + order); required unless --dry-run.",
)
@click.option(
    "--tokens",
    "budget",
    type=Count(),
    help="Token budget, e.g. 10B (K, M, B, T). Default: the most that repeats no source.",
)
@click.option("--rest", help="Give all weight left over to this source (default: unnamed sources share it by size).")
@click.option(
    "--max-epochs",
    type=Finite(min=0, min_open=True),
    default=4.0,
    show_default=True,
    help="Refuse plans repeating a source more.",
)
@click.option("--curriculum", default="none", show_default=True, help=f"Order within each source: {CURRICULA}.")
@click.option(
    "--phases", type=click.IntRange(min=1), default=1, show_default=True, help="Split training into N phases."
)
@click.option("--phase-weights", help='Weights per phase, e.g. "code=0.2,math=0.05;code=0.3,math=0.2".')
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Salts the hash that picks and orders each source's documents.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan as a table and write nothing.")
@click.option("--force", is_flag=True, help="Replace an existing mixture in --out.")
@click.pass_context
def mix(ctx, arguments, out, budget, rest, max_epochs, curriculum, phases, phase_weights, seed, dry_run, force):
    """Mix the token shards of one or more runs: prep mix RUN_DIR --code 0.25 --math 0.08 --out MIX_DIR.

    Each --SOURCE WEIGHT sets that source's share of the mixture's tokens; sources not
    named share the rest in proportion to their tokens. Documents are down- or up-sampled
    to hit the shares exactly (up to one document), picked by a hash of their id and the
    seed, and interleaved so that every window of the mixture holds the target shares.
    To find the shares instead of guessing them: prep mix search RUN_DIR... (see its --help).
    """
    from pipeline.formats.mix import MixLayout
    from pipeline.mix import inventory as inv
    from pipeline.mix.build import plan_mixture
    from pipeline.mix.output import plan_table, write_mix

    try:
        runs, weights = _runs_and_weights(list(arguments) + ctx.args)
        description, order = plan_mixture(
            runs,
            weights=weights,
            budget=budget,
            rest=rest,
            max_epochs=max_epochs,
            curriculum=curriculum,
            phases=phases,
            phase_weights=phase_weights,
            seed=seed,
        )
    except (inv.MixError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(plan_table(description))
    if dry_run:
        return
    if out is None:
        raise click.UsageError("--out MIX_DIR is required (or --dry-run)")
    _clear_output(MixLayout(out), force)
    write_mix(out, description, order)
    click.echo(f"wrote {MixLayout(out).manifest}")
