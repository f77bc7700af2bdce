"""Text as stages and libraries share it: what a token, a word and a folded character are.

- ``tokenizers``: tokenizer specs and backends; ``tiktoken_encodings`` the bundled
  vocabularies (``vocab/``); ``tiktoken_fast`` runs tiktoken's encodings on the numba BPE
  kernels of ``bpe/``; ``tokenizer_training`` trains a SentencePiece model on a run.
- ``framing``: BOS and end-of-document tokens around each document of a token array,
  for the ``tokenize`` stage and ``prep ablate``'s eval windows alike.

One owner each, so that no stage copies another's text code and no library imports a
stage for it.
"""
