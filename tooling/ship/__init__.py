"""The submission: `tinyperf package` (assemble, check, pack, verify) and `tinyperf report`. Imports tinyperf.tooling.common only."""
