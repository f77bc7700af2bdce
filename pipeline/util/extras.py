"""Optional packages, imported only where their feature runs.

The base install (``pip install -e .``) runs ``prep run``, ``report``, ``mix`` and the rest of
the main job; torch, scikit-learn, Ray, huggingface_hub and the Common Crawl libraries come
with extras named for what users do (``loader``, ``ablate``, ``ray``, ``hub``,
``commoncrawl``). A feature checks for its packages here before importing them, so that a
missing one is a line naming the extra to install, not a ModuleNotFoundError from deep
inside an import chain.
"""

from __future__ import annotations

import importlib


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def require(feature: str, extra: str, *modules: str) -> None:
    """Import ``modules`` (the ones ``feature`` needs), or raise one line naming ``extra``."""
    absent = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            absent.append(name)
    if absent:
        raise MissingExtra(f'{feature} needs {" and ".join(absent)}: pip install -e ".[{extra}]"')
