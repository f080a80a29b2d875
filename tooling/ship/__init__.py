"""The submission: `tinyperf package` (assemble, check, pack, verify). Imports the stages below it."""
