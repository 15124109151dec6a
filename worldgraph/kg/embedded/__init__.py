"""The embedded store: SQLite files, no server (episodes, world, leases, forgetting, SQL text)
and Cypher on a per-tenant LadybugDB projection."""
