"""The judge of logs and trees on disk: `tinyperf check` and `tinyperf score`. Imports tooling.common only."""
