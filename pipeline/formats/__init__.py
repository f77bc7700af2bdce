"""What prep writes and reads on disk, one owner per format.

- ``layout``: every path of a run's output folder, part-file names included.
- ``documents``: the document and ledger columns, and how their Parquet files are written
  (``COMPRESSION``, ``LONG_COLUMNS``).
- ``token_shards``: Megatron's indexed ``.bin``/``.idx`` pair and its sidecar, written;
  ``indexed_shard`` opens and checks one; ``shard_merge`` joins shards (``prep shards merge``).
- ``partfile``: partitioned record files and their one-partition slices.
- ``fasttext_model``: a fastText model file; ``experiments``: ``prep ablate``'s ledger.
- ``mix``: a mixture folder's files; ``unreadable``: a damaged file of a folder, named.

Tokenizers, their vocabularies and tokenizer training are text, not a layout:
``pipeline/text/``.
"""
