"""User-facing failures of the CLI. Anything raised as UserError (or any InputError, e.g. a bad config or dataset) becomes
one paragraph on stderr and exit code 2, no traceback."""
from benchmarks.common.io import InputError, write_atomic  # noqa: F401  (re-exported for tooling modules)


class UserError(InputError):
  """Bad input or environment met by a tinyperf verb."""


class ToolError(UserError):
  """An MLCommons tool crashed, hung or printed nothing we can read: exit 2, never a verdict."""
