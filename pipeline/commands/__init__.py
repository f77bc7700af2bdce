"""The ``prep`` command line: every click command, and the only code that turns library
errors into click errors. ``main`` holds the group and ``prep run``; each other module
holds one command (or one command group) and calls into the library rooms. Two modules
are the commands' own reading of a finished folder, library code that raises ordinary
exceptions: ``document_lookup`` (a document by id, the ledger's rejects: ``prep show``,
``prep rejects``) and ``shard_inspect`` (a shard described and decoded: ``prep shards
inspect``)."""
