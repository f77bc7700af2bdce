"""``python -m pipeline`` is ``prep``.

The signal handlers first, before click and the commands are imported: a Ctrl-C during
those imports ends the process with its one line too (see ``pipeline.commands.interrupts``).
"""

from pipeline.commands.interrupts import take_signals

take_signals()

from pipeline.commands.main import program  # noqa: E402

program()
