"""Click parameter types for numbers (and files with a weight), shared by every command.

click's ``FLOAT`` and ``FloatRange`` read ``nan``, ``inf`` and ``1e999`` as floats, and a
NaN passes every range check (each comparison with it is false): ``--max-epochs nan`` once
turned off the cap it sets. Every float option of every command is a ``Finite``
(``tests/test_command_inputs.py`` finds them all), and every count written with a suffix
(``10B`` tokens, ``1B`` parameters) a ``Count``.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.util.numbers import is_number


class Finite(click.FloatRange):
    """A finite float, within the bounds ``click.FloatRange`` takes (none: any finite float)."""

    name = "float"

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not is_number(number):
            self.fail(f"{value} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        """The bounds for ``--help``; nothing when there are none (click would print ``x<=None``)."""
        return "" if self.min is None and self.max is None else super()._describe_range()


class Count(click.ParamType):
    """A count of tokens or parameters: ``10B``, ``2.5M``, ``7e9`` (at least 1, finite)."""

    name = "count"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        # Here, not at the top: `prep run` imports this module, and the planner's imports
        # (numba among them) would slow its start.
        from pipeline.mix.inventory import MixError
        from pipeline.mix.plan import parse_tokens

        try:
            return parse_tokens(str(value))
        except MixError as error:
            self.fail(str(error), param, ctx)


class WeightedFile(click.ParamType):
    """``FILE`` or ``FILE:WEIGHT`` (a finite weight >= 0, 1 when not given): an eval file and
    its weight in the objective. A path that exists as given is a file even if it holds a colon."""

    name = "file[:weight]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        path = Path(value)
        if path.is_file():
            return path, 1.0
        base, colon, weight = str(value).rpartition(":")
        if not colon or not Path(base).is_file():
            self.fail(f"{value}: no such file", param, ctx)
        number = Finite(min=0).convert(weight, param, ctx)
        return Path(base), float(number)


def training_device_options(command):
    """``--device`` and ``--threads``: where the proxy model trains (``prep ablate`` and
    ``prep mix search`` train the same one)."""
    command = click.option("--threads", type=click.IntRange(min=1), help="CPU threads for torch [default: torch's].")(
        command
    )
    return click.option(
        "--device",
        type=click.Choice(["auto", "cpu", "cuda"]),
        default="auto",
        show_default=True,
        help="Where to train: auto takes the GPU when torch sees one.",
    )(command)
