"""Before a run: the data check, the images, `tinyperf render` and `tinyperf compose`. Imports tinyperf.tooling.common only."""
