"""The ``extract`` stage: HTML to main text (``stage.py``), with the byte scan that drops
hostile pages before they are parsed (``scan.py``), the charset decoding (``decode.py``)
and the extractors themselves (``extractors.py``)."""

from stages.extract.stage import Extract  # noqa: F401
