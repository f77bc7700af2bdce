"""The ``prep`` command line."""

from __future__ import annotations

import errno
import importlib
import os
import re
import select
import sys
from pathlib import Path

from pipeline.commands.interrupts import (
    command_ends,
    command_starts,
    debug,
    end,
    exit_code,
    give_back_signals,
    leave,
    raise_pending,
    stopped,
    take_signals,
)

try:  # importing takes a second or two: a Ctrl-C then is as quiet as one later
    import click
    from click.core import ParameterSource

    from pipeline import __version__
    from pipeline.commands.options import Finite
    from pipeline.util.printable import error_line, printable, printable_path
except KeyboardInterrupt as stop:  # the console script, which imports this before ``program``
    if debug():
        raise
    end(stop)

# The other commands, imported when a command line names them (or --help lists them):
# importing them all took half a second (numba among it) before `prep run` could start
# the process its workers fork from.
COMMANDS = {
    "ablate": "pipeline.commands.ablate:ablate",
    "classifier": "pipeline.commands.classifier:classifier_group",
    "estimate": "pipeline.commands.estimate:estimate",
    "mix": "pipeline.commands.mix:mix",
    "report": "pipeline.commands.report:report",
    "rejects": "pipeline.commands.rejects:rejects",
    "shards": "pipeline.commands.shards:shards_group",
    "show": "pipeline.commands.show:show",
    "tokenizer": "pipeline.commands.tokenizer:tokenizer_group",
}


# Where the room to write ran out, and what frees it; a run resumes once it is freed.
OUT_OF_ROOM = {
    errno.ENOSPC: ("no space left on the device", "free some"),
    errno.EDQUOT: ("the disk quota is used up", "free some or raise the quota"),
    errno.EFBIG: ("a file reached the largest size this process may write", "raise `ulimit -f`"),
}
# Arrow's writers raise a bare OSError whose message holds the system's error number.
ARROW_ERRNO = re.compile(r"\[errno (\d+)\]")


def _error_number(error: OSError) -> int | None:
    if error.errno is not None:
        return error.errno
    found = ARROW_ERRNO.search(str(error))
    return int(found.group(1)) if found else None


def one_line(error: BaseException) -> str:
    """An error as the one line a user reads; the traceback is for PREP_DEBUG=1."""
    if isinstance(error, OSError) and _error_number(error) in OUT_OF_ROOM:
        what, remedy = OUT_OF_ROOM[_error_number(error)]
        where = f" writing {printable_path(error.filename)}" if error.filename else ""
        return f"{what}{where}: {remedy}, then run the same command again to resume"
    where = f": {printable_path(error.filename)}" if isinstance(error, OSError) and error.filename else ""
    return printable(error_line(error)) + where


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``| head`` done):
    then a broken pipe is the reader's choice, not an error of the command."""
    poller = select.poll()
    try:
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file
        return False
    return any(events & select.POLLERR for _, events in poller.poll(0))


class PrepGroup(click.Group):
    """Every command ends in one line, never a traceback, unless PREP_DEBUG=1.

    Errors that users cause (a bad config, a busy folder, a full disk) say what to do;
    anything else is a bug, reported as one line with a pointer to PREP_DEBUG."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:
            module, attribute = COMMANDS[name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        command_starts()
        try:
            result = super().invoke(ctx)
            raise_pending()
            return result
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt as stop:
            if debug():
                raise
            hint = getattr(stop, "resume_hint", "")
            click.echo(f"\n{stopped(stop)}{': ' + hint if hint else ''}", err=True)
            sys.exit(exit_code(stop))
        except Exception as error:
            if isinstance(error, BrokenPipeError) and stdout_reader_gone():
                # `prep rejects RUN | head`: the reader took what it wanted. End quietly, as
                # click and Python's documentation do, with stdout on /dev/null so that the
                # last flush cannot fail again.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(1)
            if debug():
                for line in getattr(error, "worker_traceback", "").splitlines():
                    click.echo(f"worker: {line}", err=True)
                raise
            message = one_line(error)
            if not isinstance(error, user_errors()):
                message = f"{type(error).__name__}: {message} (PREP_DEBUG=1 prints the traceback)"
            raise click.ClickException(message) from None
        finally:
            command_ends()


@click.group(cls=PrepGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="prep")
def main() -> None:
    """prep: turn raw pretraining text into clean, deduplicated, tokenized shards.

    Start with `prep run configs/sample.toml --out out/sample`.
    """


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "-o",
    required=True,
    help="Output folder: docs/, rejects/, tokens/, stats/, manifest.json and cost.json go here. "
    "A URI (s3://bucket/run) writes to an object store; PREP_SCRATCH names the local scratch folder.",
)
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: [run] workers in the config, else all cores); at most one per task.",
)
@click.option("--strict", is_flag=True, help="Stop at the first bad input line instead of quarantining it.")
@click.option(
    "--force",
    is_flag=True,
    help="Delete the run found in --out (only what a run wrote) and start over; in a folder prep did not make, "
    "write a run beside its files.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary.")
@click.option(
    "--progress",
    type=click.Choice(["bar", "json", "none"]),
    default="bar",
    show_default=True,
    help="Live progress on stderr: a bar, or one JSON line a second for logs, the summary the last one.",
)
@click.option(
    "--sample",
    type=Finite(min=0, max=1, min_open=True),
    default=1.0,
    help="Process a hash-sampled fraction of every source (e.g. 0.01) and project the full run in cost.json.",
)
@click.option(
    "--sample-seed",
    type=click.IntRange(min=0, max=2**64 - 1),
    default=0,
    show_default=True,
    help="Which documents --sample picks: another seed draws another sample of the same size.",
)
@click.option(
    "--keep-work",
    is_flag=True,
    help="Keep work/ when the run completes (it is removed by default): dedup's index, for a later run's "
    'index_from = "OUT/work/global/K" to deduplicate against this run.',
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: worker processes on this machine; ray: Ray tasks on a cluster (pip install -e '.[ray]').",
)
@click.option("--address", help="Ray cluster to join (auto, or ray://HOST:PORT); default: start a local one.")
def run(
    config: Path,
    out: str,
    workers: int | None,
    strict: bool,
    force: bool,
    quiet: bool,
    progress: str,
    sample: float,
    sample_seed: int,
    keep_work: bool,
    executor: str,
    address: str | None,
) -> None:
    """Run the pipeline described by CONFIG (a TOML file) into --out.

    Running the same command again after an interruption (Ctrl-C, kill, crash) resumes:
    finished units of work are kept, the rest are redone, and the result is byte-identical
    to an uninterrupted run. Every input document ends in docs/ or, with its reason, in
    the rejects ledger (rejects/); manifest.json has the balance.

    CONFIG's keys and stages: README's "Config reference" and docs/stages.md; configs/
    holds ready pipelines (configs/sample.toml runs on the bundled sample).
    """
    seed_given = click.get_current_context().get_parameter_source("sample_seed") is not ParameterSource.DEFAULT
    if seed_given and sample == 1.0:
        raise click.UsageError("--sample-seed picks the documents --sample keeps: give a --sample below 1 (e.g. 0.05)")
    options = dict(
        workers=workers,
        strict=strict,
        force=force,
        quiet=quiet,
        progress=progress,
        sample=sample,
        sample_seed=sample_seed,
        keep_work=keep_work,
    )
    try:
        manifest = _start_and_run(config, out, executor=executor, address=address, **options)
    except KeyboardInterrupt as stop:  # from the first step on: the same line whenever it comes
        stop.resume_hint = "finished units are kept; run the same command again to resume"
        raise
    if not quiet:
        from pipeline.engine.summary import print_summary, print_summary_json

        (print_summary_json if progress == "json" else print_summary)(manifest, out)


def program() -> None:
    """``prep`` as a process (the console script, ``python -m pipeline``); tests call ``main``.

    It ends as ``interrupts`` says: a Ctrl-C or SIGTERM at any moment gives one line and
    130 or 143, and every end is ``os._exit`` after the ``atexit`` handlers (Ray's stop
    the cluster it started), without the interpreter's teardown. By then the workers are
    joined, every file is in place and closed.

    One BLAS thread per process unless the user says otherwise: prep runs a process per
    core already, and OpenBLAS's pool of a thread per core cost the command and the
    process its workers fork from 0.1 CPU-second each at start (made, then spinning),
    on the run's critical path. prep's kernels never call BLAS."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    previous = take_signals()
    try:
        main()
    except SystemExit as ended:  # click's way to end, always
        leave(ended.code)
    give_back_signals(previous)  # ``main`` returned: a stand-in for it, in a test


def _start_and_run(config: Path, out: str, **options) -> dict:
    """The fork server (while the run plans), then ``run_pipeline`` with these options."""
    if options["executor"] == "local" and options["workers"] != 1:
        from pipeline.engine.executor import start_fork_server

        # Now, while the run plans; with this module, which a worker re-imports as `prep`.
        start_fork_server(also_preload=[__name__])
    from pipeline.util.pyarrow_no_pandas import answer_without_pandas

    answer_without_pandas()  # as the workers do: a stage module makes an Arrow scalar as the run loads it
    from pipeline.engine.run import run_pipeline
    from pipeline.readers.common import StrictModeError

    try:
        return run_pipeline(config, out, **options)
    except StrictModeError as error:
        raise click.ClickException(f"--strict: {error}") from None


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message is the whole story: no exception class name in front of it."""
    from pipeline.engine.config import ConfigError
    from pipeline.engine.executor import WorkerDied
    from pipeline.engine.runlock import OutputBusy
    from pipeline.util.extras import MissingExtra

    return (ConfigError, MissingExtra, OutputBusy, WorkerDied, OSError, ValueError)


if __name__ == "__main__":
    program()
