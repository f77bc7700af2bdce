"""Text as stages and libraries share it: what a token, a word and a folded character are.

- ``tokenizers``: tokenizer specs and backends; ``tiktoken_encodings`` the named
  encodings (OpenAI's bundled in ``vocab/``, Qwen's in its package), which ``rank_files``
  reads; ``tiktoken_fast`` runs them on the numba BPE kernels of ``bpe/``;
  ``tokenizer_training`` trains a SentencePiece model on a run.
- ``framing``: BOS and end-of-document tokens around each document of a token array,
  for the ``tokenize`` stage and ``prep ablate``'s eval windows alike.
- ``casefold``: the one fold of ``dedup`` and ``decontaminate`` (lower case, whitespace,
  punctuation), pinned to their versions.
- ``char_tables``: each code point's classes (Python's ``str`` predicates and ``\\w``,
  spaCy's and datatrove's sets) and spaCy's special cases, generated into
  ``char_tables_data`` by ``_gen_char_tables``: the quality stage's word splitting and
  ``url_filter``'s word characters.

One owner each, so that no stage copies another's text code and no library imports a
stage for it.
"""
