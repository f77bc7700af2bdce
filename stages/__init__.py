"""Built-in stages. Importing this package registers each of them under its config name."""

from stages import classify, dedup, langid, length, normalize, pii, quality, tokenize  # noqa: F401
