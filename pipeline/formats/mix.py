"""The file names of a mixture folder, shared by the writer and every reader.

``prep mix`` writes them (``pipeline.mix.output``); the loader (``pipeline.loader.mixture``),
the report and the CLIs read them. This module imports nothing, so a reader can take the
names without importing the planner (numpy, pyarrow, the shard inventory).
"""

# The manifest: sources, shards, weights, phases and the names of the two order arrays.
# Written last, so a folder holding it is a complete mixture.
MIX_JSON = "mix.json"
# The global order: for every position, the source number (uint16) and the document's
# index within that source (int64).
ORDER_SOURCE = "order_source.npy"
ORDER_DOCUMENT = "order_document.npy"
