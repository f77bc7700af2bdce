"""Whether a finished run's token shards are all still there: per source, the documents
its tokenize stage counted in ``manifest.json`` against those its shards hold now.

Why: a source whose shards (or whole ``tokens/<source>/``) were removed after the run was
left out without a word by everything that reads a run folder, its share going to the
other sources; ``prep mix`` and the DataLoader both ask here.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.formats.layout import Layout
from pipeline.util.records import COUNT, Each, Optional, check_shape, read_record

# The label of the stage that writes the shards, in a manifest's ``stages`` (it comes last,
# so it is never numbered).
TOKENIZE = "tokenize"


def missing_shards(run: Path, documents: dict[str, int]) -> str | None:
    """What is missing from ``run``'s shards, given the documents they hold per source
    (``documents``), in one line; None if nothing is, or if the run has no manifest (a
    tokens folder without one has nothing to be checked against). A damaged manifest
    raises ``RecordError`` naming it."""
    path = Layout(run).manifest
    if not path.exists():
        return None
    written = read_record(path, {"stages": Optional(Each(dict))}).get("stages", {}).get(TOKENIZE)
    if written is None:
        return None
    check_shape(written, {"by_source": Each({"output": COUNT})}, path, f"stages.{TOKENIZE}")
    for source, counts in written["by_source"].items():
        found = documents.get(source, 0)
        if found != counts["output"]:
            return (
                f"{Layout(run).tokens_folder / source}: its shards hold {found:,} documents, but {path} counts "
                f"{counts['output']:,} tokenized: shards removed or replaced since the run finished; run its "
                "config into it again (prep run says whether it can redo them alone)"
            )
    return None
