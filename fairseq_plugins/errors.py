"""The plugin's own errors on the command line: one line, no traceback.

Every error the plugin raises for something its user can fix (an option, a checkpoint, a data
folder) is also a :class:`PluginError`; it keeps its ordinary base (``ValueError``...), so code
that calls the plugin in-process catches it as before.  fairseq's commands (``fairseq-generate``,
``-interactive``, ``-train``) call into the task without catching anything, so such an error
reaches the interpreter's top level: :func:`install_excepthook` (run when the plugin is imported)
prints it there as ``fairseq-generate: error: <message>`` on stderr, exit status 1, like argparse's
own errors.  Every other exception keeps its traceback (the hook before it prints it).
"""
import os
import sys


class PluginError(Exception):
    """A mistake in what the user gave (its message says how to fix it); printed as one line at top level."""


def one_line(error) -> str:
    """``<command>: error: <message>``, the message's lines joined (one line on the terminal)."""
    command = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{command}: error: " + " ".join(str(error).split("\n"))


def install_excepthook():
    """Print an uncaught :class:`PluginError` as one line; leave every other exception to the hook before."""
    previous = sys.excepthook
    if getattr(previous, "_plugin_errors", False):
        return

    def excepthook(kind, value, traceback):
        if isinstance(value, PluginError):
            print(one_line(value), file=sys.stderr, flush=True)
        else:
            previous(kind, value, traceback)

    excepthook._plugin_errors = True
    sys.excepthook = excepthook


class OptionError(PluginError, ValueError):
    """An option the plugin refuses (its value or its combination with others): the message says what to change."""
