"""The production stack of docker-compose.yaml, run natively on one machine without Docker
(``./run.sh stack``): see stack.services and docs/cluster.md."""
