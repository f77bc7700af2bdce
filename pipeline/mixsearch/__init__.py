"""``prep mix search``: find the mixture instead of guessing it (RegMix-style).

``sampling`` draws mixtures (Dirichlet around the natural token shares) within per-source
bounds and the big run's repetition limit, ``trials`` makes each a ``prep mix`` folder and
trains the ``prep ablate`` proxy on it (the ablate ledger makes a search resumable), ``fit``
regresses each eval set's loss on the weights (log-linear ridge and a Gaussian process,
with leave-one-out errors), and ``search`` ties them together and proposes the mixture of
least predicted loss.
"""
