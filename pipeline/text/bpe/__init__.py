"""tiktoken's encodings in numba: the split patterns as scanners (``pretokenize``), the
byte-pair merges (``merge``), each piece's tokens remembered by its bytes."""
