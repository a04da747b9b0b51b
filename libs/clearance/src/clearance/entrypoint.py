"""How a Clearance service command starts: ``--help``, no arguments, settings, logging, run.

Configuration comes only from the environment, so a command takes no argument but ``--help``.
:func:`run_command` is each service's ``main``: ``--help`` prints the usage, every setting
(:func:`~clearance.settings.render_help`) and the OpenTelemetry variables and exits 0; any
other argument, or a setting that does not parse, is reported on stderr with exit code 2 and
no traceback; otherwise the event loop is chosen (``CLEARANCE_EVENT_LOOP``), logging is set
up from the settings and the service runs, its result being the exit code. The order and the
exit codes are shared; the words are each command's own, kept in its :class:`Command`.
:func:`load_settings` is the same parse for a command that raises :class:`SystemExit` instead
of returning a code.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TypeVar

from clearance.settings import OTEL_HELP, CommonSettings, Settings, SettingsError, render_help
from clearance.telemetry import setup_logging

__all__ = [
    "Command",
    "freeze_startup_heap",
    "load_settings",
    "parse_command_line",
    "run_command",
    "use_event_loop",
]

S = TypeVar("S", bound=Settings)
C = TypeVar("C", bound=CommonSettings)


@dataclass(frozen=True, slots=True)
class Command:
    """A command's own words. The messages are templates over ``{prog}``, ``{usage}``,
    ``{args}`` (the arguments, a list), ``{words}`` (the arguments joined by spaces) and
    ``{error}``; each is written as one line (or more) ending in a newline."""

    prog: str
    usage: str
    """What ``--help`` prints first, before the settings (no trailing newline)."""
    unexpected: str = "{prog}: unexpected arguments {args!r}; see --help"
    """What stderr says to arguments other than ``--help``."""
    invalid: str = "{prog}: {error}"
    """What stderr says to settings that do not parse; ``{error}`` names every problem."""
    invalid_each: bool = False
    """Say ``invalid`` once per problem instead, ``{error}`` being that problem's line."""
    title: str | None = None
    """The heading of the settings in ``--help`` (default: the settings class's own)."""

    def say(self, template: str, *, args: Sequence[str] = (), error: str = "") -> str:
        words = " ".join(args)
        return template.format(
            prog=self.prog, usage=self.usage, args=list(args), words=words, error=error
        )


def parse_command_line(
    command: Command,
    cls: type[S],
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> S | int:
    """The settings to run with, or the exit code when there is nothing to run."""
    args = list(sys.argv[1:] if argv is None else argv)
    stdout = out if out is not None else sys.stdout
    stderr = err if err is not None else sys.stderr
    if any(arg in ("-h", "--help") for arg in args):
        settings_help = render_help(cls, title=command.title)
        stdout.write(f"{command.usage}\n\n{settings_help}\n{OTEL_HELP}")
        return 0
    if args:
        stderr.write(command.say(command.unexpected, args=args) + "\n")
        return 2
    try:
        return cls.from_env(environ)
    except SettingsError as exc:
        for error in exc.problems if command.invalid_each else [str(exc)]:
            stderr.write(command.say(command.invalid, error=error) + "\n")
        return 2


def run_command(
    command: Command,
    cls: type[C],
    serve: Callable[[C], int],
    argv: Sequence[str] | None = None,
) -> int:
    """A service's ``main``: parse, set up logging, ``serve(settings)``; the exit code."""
    parsed = parse_command_line(command, cls, argv)
    if isinstance(parsed, int):
        return parsed
    try:
        use_event_loop(parsed.event_loop)
    except ImportError as exc:
        sys.stderr.write(
            f"{command.prog}: CLEARANCE_EVENT_LOOP={parsed.event_loop} cannot be used here "
            f"({exc}); set CLEARANCE_EVENT_LOOP=asyncio\n"
        )
        return 2
    setup_logging(parsed.log_level, fmt=parsed.log_format)
    freeze_startup_heap()
    return serve(parsed)


def use_event_loop(name: str) -> None:
    """Make ``asyncio.run`` start `name`'s loop: ``uvloop`` (libuv) or ``asyncio``'s own.

    Every hop of the requeue path (a watch line, a JetStream delivery, an API round trip) is
    a few event-loop callbacks and socket calls; uvloop does them in C."""
    if name == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    else:
        asyncio.set_event_loop_policy(None)


def freeze_startup_heap() -> None:
    """Move every object alive after start-up out of the garbage collector's sight.

    A service imports ~87,000 long-lived objects (kubernetes-asyncio's models, nats-py,
    OpenTelemetry); every full collection walked all of them, ~25 ms of a quiet core, and in
    the clearance benchmark those pauses were the tail of the redispatch latency. Frozen,
    a full collection looks only at what was allocated since (CPython's ``gc.freeze``).

    Called before the service runs, and again by each service once it is ready: what it
    builds while starting (API and NATS clients, modules imported on first use, the state
    it loaded) lives as long as the process, and a full collection of it took 12-30 ms in
    the first seconds of the clearance benchmark (docs/DECISIONS.md, "Collector pauses").
    Objects are still freed by reference counting when dropped; only a reference cycle among
    frozen objects that becomes garbage later is never reclaimed."""
    gc.collect()
    gc.freeze()


def load_settings(
    cls: type[S],
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    description: str = "",
    environ: Mapping[str, str] | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> S:
    """The settings of a command that exits (:class:`SystemExit`) instead of returning:
    0 after ``--help``, 2 for arguments or a bad value."""
    command = Command(
        prog=prog,
        usage=f"usage: {prog} [--help]" + (f"\n\n{description}" if description else ""),
        unexpected="{prog}: unexpected arguments {words!r}; "
        "configuration comes from environment variables (see {prog} --help)",
        invalid="{prog}: {error}\n(see {prog} --help)",
        title=f"{prog} is configured by these variables:",
    )
    parsed = parse_command_line(command, cls, argv, environ=environ, out=out, err=err)
    if isinstance(parsed, int):
        raise SystemExit(parsed)
    return parsed
