"""``python -m pipeline`` is ``prep``."""

from pipeline.commands.main import program

program()
