"""The extractors, one page at a time: resiliparse (the fast default), trafilatura, and the
two combined. Both libraries are imported here, when the stage first runs, so the default
install (which has them only in the ``commoncrawl`` extra) imports ``stages`` without them.

Every page is parsed once by resiliparse's lexbor parser, for its ``<title>``, whichever
extractor then reads it: the title is the same column under every option.

Settings, chosen on the shared gold set (``benchmarks/extract.py``):

- resiliparse: ``main_content=True`` (its boilerplate heuristics), with paragraphs and list
  items on lines of their own (the later stages read lines: C4's line rules, paragraph
  dedup); no alt texts and no list bullets (image captions such as "logo" are
  boilerplate: F1 0.840 -> 0.847 on 500 pages). Comments stay, as in trafilatura's
  default: the gold keeps them (without, trafilatura's F1 falls 0.864 -> 0.813 and
  resiliparse's 0.847 -> 0.801). It writes minimal HTML with its links marked, so that
  ``boilerplate.py`` drops the lines that are only links and short copyright notices
  (F1 0.845 -> 0.858 on all 2,899 pages); ``<title>`` is skipped, as the title is its own
  column (0.001 of it).
- trafilatura: ``deduplicate=False`` always. Its deduplication keeps an LRU cache of text
  segments across calls, so a page's output depends on which pages the same process read
  before it (trafilatura issue 778, found while FineWeb-2 was built): a run split over other
  workers would give other bytes. ``mode`` picks ``favor_precision`` / ``favor_recall``.
- combined: trafilatura, and resiliparse's text where trafilatura finds none (about 2% of
  the gold set's pages; lxml gives up on some, and it returns nothing for HTML nested past
  libxml2's 256 levels). It is the best on the gold set (recall mode: F1 0.884 against
  trafilatura's default 0.864 on 500 pages); taking the longer of the two, or resiliparse's
  where trafilatura's is under a third of its length, scores lower (0.859, 0.877).
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.extract import boilerplate

RESILIPARSE, TRAFILATURA = "resiliparse", "trafilatura"
EXTRACTORS = (RESILIPARSE, TRAFILATURA, "combined")
MODES = ("default", "precision", "recall")


def missing_library(extractor: str) -> str | None:
    """The pip requirement an extractor needs and this environment lacks, or None."""
    import importlib.util

    needed = ["resiliparse"] + (["trafilatura"] if extractor != RESILIPARSE else [])
    absent = [name for name in needed if importlib.util.find_spec(name) is None]
    return " and ".join(absent) or None


@dataclass
class Extracted:
    text: str
    title: str
    extractor: str  # which one's text this is


class Extractor:
    """Main text and title of one page's HTML, under the stage's options."""

    def __init__(self, extractor: str, mode: str):
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        self.extractor = extractor
        self._parse = HTMLTree.parse
        self._plain_text = extract_plain_text
        self._trafilatura = None
        if extractor != RESILIPARSE:
            import trafilatura

            self._trafilatura = trafilatura.extract
            self._mode = {"favor_precision": mode == "precision", "favor_recall": mode == "recall"}

    def _resiliparse(self, tree) -> str:
        minimal_html = self._plain_text(
            tree,
            main_content=True,
            preserve_formatting="minimal_html",
            links=True,
            alt_texts=False,
            list_bullets=False,
            skip_elements=["title"],
        )
        return boilerplate.plain_text(minimal_html)

    def _trafilatura_text(self, html: str) -> str:
        return self._trafilatura(html, deduplicate=False, **self._mode) or ""

    def __call__(self, html: str) -> Extracted:
        tree = self._parse(html)
        title = (tree.title or "").strip()
        if self.extractor == RESILIPARSE:
            return Extracted(self._resiliparse(tree), title, RESILIPARSE)
        text = self._trafilatura_text(html)
        if self.extractor == "combined" and not text.strip():
            return Extracted(self._resiliparse(tree), title, RESILIPARSE)
        return Extracted(text, title, TRAFILATURA)
