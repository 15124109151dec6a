"""``python -m worldgraph.cli ...``: the ``worldgraph`` command without its console script."""

from worldgraph.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
