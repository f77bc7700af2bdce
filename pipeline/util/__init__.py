"""Small helpers every room uses: atomic writes (``atomic``), safe globbing
(``globbing``), printable names and error lines (``printable``), did-you-mean hints
(``suggest``)."""
