"""Answer pyarrow's "is this a pandas object?" without importing pandas.

pyarrow's first conversion of a Python object or numpy array (``pa.array``) asks whether
it is a pandas one, importing pandas to know: 0.25 s, once per process. A process that
runs prep's tasks (a worker, or the command itself when it runs them without a pool)
never holds a pandas object, so the question is answered with pandas out of reach:
"none", which stays true while pandas is not imported. What does need pandas
(``to_pandas``, converting a pandas object) imports it then, as always.
"""

from __future__ import annotations

import sys


def answer_without_pandas() -> None:
    """Make pyarrow settle the question now, with pandas hidden (a no-op once it has, or
    when pandas is already imported)."""
    import pyarrow as pa

    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array(["warm"])
    finally:
        sys.meta_path.remove(_NoPandas)


class _NoPandas:
    """A module finder for which pandas cannot be imported."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError("hidden while pyarrow first looks for it", name=name)
        return None
