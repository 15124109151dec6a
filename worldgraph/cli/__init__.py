"""Every ``worldgraph`` command: the parser and global options (``main``), one module per area
(``memory``, ``world``, ``admin``, ``serve``, ``view``, ``worker``), the console helpers and the demo."""

from worldgraph.cli.main import main

__all__ = ["main"]
