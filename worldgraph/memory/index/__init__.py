"""The LanceDB sidecar: tables, writes, search, maintenance and the object store."""
