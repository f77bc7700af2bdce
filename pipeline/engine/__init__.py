"""The engine: turns a config into a finished output folder.

``config`` reads and checks the TOML, ``plan`` lays out the units of work, ``run`` drives
them through an executor (``executor`` on one machine, ``ray_executor`` on a cluster),
``unit`` runs one input file through the stages and ``sinks`` writes what it keeps and
drops, ``manifest``/``cost``/``progress`` record and show the run, ``storage`` and
``runlock`` reach local or object-storage folders safely. Stages never import from here.
"""
