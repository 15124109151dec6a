"""The Neo4j store: episodes, world, leases, forgetting, snapshot import, its Cypher text and
Cypher run with a deadline."""
