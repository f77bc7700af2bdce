"""Which stages a config may name: the built-in ones (the ``stages`` package) and those
other installed packages declare under the ``prep.stages`` entry-point group.

The stage contract (``pipeline.stage``) knows no stage; loading them is the engine's
job, here. So imports flow one way, stages -> contract <- registry -> stages, with no
circle. A package ships a stage by declaring, in its own pyproject.toml::

    [project.entry-points."prep.stages"]
    mystage = "mypackage.mystage:MyStage"     # a Stage subclass, or a module that registers one
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata

from pipeline.stage import Stage, register, registered

BUILT_IN = "stages"
ENTRY_POINT_GROUP = "prep.stages"


class PluginError(RuntimeError):
    """A stage plug-in that could not be loaded; the message names it."""


def registry() -> dict[str, type[Stage]]:
    """Every stage a config may name, by name."""
    _load()
    return registered()


@cache
def _load() -> None:
    importlib.import_module(BUILT_IN)  # each module registers its stage on import
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception as error:
            raise PluginError(f"stage plug-in {entry.name!r} ({entry.value}) failed to load: {error}") from error
        if isinstance(loaded, type) and issubclass(loaded, Stage):
            register(loaded)
