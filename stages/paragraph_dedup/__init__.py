"""Exact paragraph (or line) dedup across the whole run: the ``paragraph_dedup`` global stage.

Boilerplate that pages share (menus, cookie banners, footers, licence notices) survives
document-level dedup because the rest of each page differs. This stage cuts every
document into units (``split``), keeps each unit's text in the first document that has
it, removes it from every later one, and drops a document left mostly made of text seen
earlier. Like C4's and dolma's paragraph dedup, and CCNet's line dedup, it is exact: the
unit's bytes, leading and trailing whitespace aside.

Options (``[[stages]] name = "paragraph_dedup"``):

``unit = "auto"``
    ``"paragraph"``: blocks of non-blank lines between blank lines; ``"line"``: every
    non-blank line, the unit of dolma (``\\n``-separated "paragraphs") and CCNet, and the
    right one for text extracted one paragraph a line (CommonCrawl WET, C4, CCNet);
    ``"auto"``: per document, blocks when a blank line separates two of its lines, else
    lines. C4 and CCNet pages have (almost) no blank line, so blocks would make each page
    one unit and catch nothing; a corpus written one way throughout is best named
    (``configs/c4.toml`` and ``configs/redpajama.toml`` say ``"line"``), since "auto"
    cuts its odd page with a blank line into blocks whose lines then match nothing.
``min_chars = 20``
    Units with fewer code points (whitespace trimmed) are *short*: "Home", "Menu",
    "Reply", a heading, ``}``. Shared by chance far more often than copied, they are never
    removed on their own and never counted in the seen fraction. A short unit goes only
    when the nearest counted units before and after it, in its document, are both removed
    (an item of a menu whose other lines are removed); at a document's edge it stays. For
    code use ``min_chars = 100`` or more, so that only long blocks (licence notices) go
    and common lines (``#include <stdio.h>``, ``return None``) stay.
``max_seen_fraction = 0.5``
    A document whose counted characters are more than this fraction seen earlier in the
    run is dropped as a partial copy (reason ``partial-copy``), whole, text untouched in
    the ledger. 0.5: more than half of it is text the run already keeps, so what is left
    is fragments around a copy. dolma's BFF drops a document above a threshold of
    duplicate n-grams in the same way (DCLM ran it at 0.8, as far as we know); C4 drops a
    page left with fewer than three sentences. 1.0: never drop, only cut.
``partitions = 0``
    Hash partitions (reduce tasks) and document ranges in finalize; memory per task is
    one partition's records. 0: one per GiB of input text (2 to 8,192), chosen when the
    run starts.

Which occurrence is first: input order. Every document has a global position: units
(input files) sorted by (source, unit name), then rows in order, the order dedup uses;
the first occurrence of a unit is the smallest (position, index in document). It
depends only on names, never on worker count or which worker ran what, so output is
byte-identical for any ``-w`` and after a resume. Name or order inputs so that the
copies you trust most (an older crawl, a curated source) come first.

Repeats inside one document are not this stage's business (quality's repetition rules
judge them): the document holding a unit's first occurrence keeps every copy of it, and
a later document loses every copy.

Ledger detail of a dropped document (JSON)::

    {"seen_fraction": 0.8312, "seen_chars": 4210, "chars": 5065, "threshold": 0.5,
     "first_seen_in": "<id of the document where its largest removed unit first occurred>"}

``threshold`` is ``max_seen_fraction``, the bound ``seen_fraction`` went over.

Rebuilding a cut document: each unit owns the separator after it, so removing a unit
removes it and the blank lines that follow; a document whose last unit goes ends where
its last kept unit's text ends. Empty and blank documents have no unit: they pass
unchanged.

Known limits: a unit first seen in a document that is then dropped as a partial copy is
still removed from later documents (as in BFF and C4, decisions are made in one pass),
so a paragraph that only such documents and later ones share is lost. A 64-bit hash
collision (about 3% odds for a billion distinct units) removes one unit wrongly.
"""

from stages.paragraph_dedup import warmup  # noqa: F401  (declares the kernels' warm-up step)
from stages.paragraph_dedup.stage import ParagraphDedup

__all__ = ["ParagraphDedup"]
