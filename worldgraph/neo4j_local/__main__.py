"""``python -m worldgraph.neo4j_local start|stop|status|build``."""

from worldgraph.neo4j_local import main

if __name__ == "__main__":
    raise SystemExit(main())
