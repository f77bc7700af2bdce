"""URL and bad-word filtering (issue 18): two stages.

``url_filter`` (``stage.py``): a document's URL host against domain block- and
allowlists in the UT1 format FineWeb uses, and its words against banned words.
``bad_words`` (``bad_words.py``): C4's page-level rule, any word of LDNOOBW's list (or
another) in the text drops the document. ``urls.py`` takes URLs apart, ``lists.py``
reads the list files, ``word_kernel.py`` is the numba pass over the text.
"""

from stages.url_filter import bad_words, stage  # noqa: F401  (registers both stages)
