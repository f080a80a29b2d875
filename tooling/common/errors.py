"""User-facing failures of the CLI. Anything raised as UserError (or any InputError, e.g. a bad config or dataset) becomes
one paragraph on stderr and exit code 2, no traceback; a verb stopped by a signal (stop_on_signals) ends with one line and
exit 130."""
import signal

from tinyperf.benchmarks.common.io import InputError, write_atomic  # noqa: F401  (re-exported for tooling modules)


class UserError(InputError):
  """Bad input or environment met by a tinyperf verb."""


class ToolError(UserError):
  """An MLCommons tool crashed, hung or printed nothing we can read: exit 2, never a verdict."""


STOPPED_BY = {signal.SIGTERM: "SIGTERM (scancel, a Slurm time limit, or kill)",
              signal.SIGHUP: "SIGHUP (its terminal or SSH session closed)"}


def _stop(signum, frame):
  # a second one would cut short the cleanup the first started (stopping the child processes, a last save). A handler
  # that does nothing, not SIG_IGN: a process started during the cleanup would inherit SIG_IGN and ignore SIGTERM too
  for sig in STOPPED_BY: signal.signal(sig, _already_stopping)
  raise KeyboardInterrupt(f"stopped by {STOPPED_BY.get(signum, signal.Signals(signum).name)}")


def _already_stopping(signum, frame): pass


def stop_on_signals():
  """SIGTERM and SIGHUP end a verb as Ctrl-C does: a KeyboardInterrupt, so its finally and except blocks stop what it
  started and save what it must (their default ends the process at once, leaving its children and temp files), and
  tooling/cli.py ends it with one line and exit 130."""
  for sig in STOPPED_BY: signal.signal(sig, _stop)
