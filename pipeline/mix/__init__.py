"""``prep mix``: token-exact mixtures of a run's sources, with curriculum ordering.

``inventory`` finds every source's token shards and per-document facts, ``plan`` turns
weights and a budget into per-phase token targets and epochs, ``order`` picks documents
(by a hash of id and seed) and interleaves sources so every window holds the target
shares, and ``output`` writes ``mix.json`` plus the global order for the loader;
``estimate`` projects the GPU-hours of training on a mixture. ``pipeline/formats/mix.py``
names the mixture folder's files; readers (the loader, the report) import them from there.
"""
