"""What prep writes and reads on disk, one owner per format.

- ``layout``: every path of a run's output folder, part-file names included.
- ``documents``: the document and ledger columns; ``document_lookup`` finds a document
  by id in a run.
- ``token_shards``: Megatron's indexed ``.bin``/``.idx`` pair and its sidecar, written;
  ``indexed_shard`` opens and checks one; ``shard_merge`` and ``shard_inspect`` are
  ``prep shards``' library.
- ``tokenizers``: tokenizer specs and backends; ``tiktoken_encodings`` the bundled
  vocabularies (``vocab/``); ``tokenizer_training`` trains a SentencePiece model on a run.
- ``mix``: a mixture folder's files.
"""
