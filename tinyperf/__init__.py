"""tinyperf, the one import package: tinyperf.benchmarks is benchmarks/ and tinyperf.tooling is tooling/, folders that
stay at the repository root because the MLPerf submission layout puts benchmarks/<bm>/implementations/ there. The
wheel copies them into this package (setup.py); a checkout or a packaged implementation keeps them beside it."""
import os

# a checkout: benchmarks/ and tooling/ sit beside this folder, not in it, so their parent joins the package's path
if not os.path.isdir(os.path.join(__path__[0], "tooling")): __path__.append(os.path.dirname(__path__[0]))
