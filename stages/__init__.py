"""Built-in stages. Importing this package registers each of them under its config name."""

from stages import (  # noqa: F401
    classify,
    column_filter,
    decontaminate,
    dedup,
    extract,
    fix_text,
    langid,
    length,
    normalize,
    paragraph_dedup,
    pii,
    quality,
    tokenize,
    url_filter,
)
