"""Before a run: the data check, the images, the rendered implementation files and compose services. Imports
tooling.common only."""
