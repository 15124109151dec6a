"""The ``worldgraph`` subcommands, one module per area; ``worldgraph.cli`` builds the parser and
runs them. Each module has ``add_*_commands(sub, add)`` registering its commands and ``cmd_*``
handlers taking the parsed ``argparse.Namespace``."""
