"""What prep writes and reads on disk, one owner per format: ``layout`` (every path of an
output folder, part-file names included), ``documents`` (the document table's columns),
``token_shards`` (Megatron's indexed ``.bin``/``.idx`` pair and its sidecar),
``tokenizers`` (tokenizer specs and the bundled vocabularies) and ``mix`` (a mixture
folder's manifest)."""
