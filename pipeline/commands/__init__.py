"""The ``prep`` command line: every click command, and the only code that turns library
errors into click errors. ``main`` holds the group and ``prep run``; each other module
holds one command (or one command group) and calls into the library rooms."""
