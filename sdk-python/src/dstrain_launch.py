"""``dstrain-launch``: the console entry point equivalent to ``dstrain launch``.

This is a top-level module rather than part of the ``dstrain`` package so that
it works even where ``import dstrain`` cannot load libdstrain (the CLI finds
its library through its own RUNPATH): the package is imported only to look
for the CLI next to the library it loads.

It finds the ``dstrain`` command and replaces this process with
``dstrain launch ARGS...`` (same arguments, same environment, same exit code).
Lookup order: ``$DSTRAIN_CLI`` (used alone when set), ``dstrain`` next to the
loaded libdstrain (a CMake build directory) or in ``../bin`` beside it (an
installed prefix), then ``$PATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import List, Optional, Sequence, Tuple

__all__ = ["find_cli", "launch_command", "has_launch_subcommand", "main"]

_PROG = "dstrain-launch"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_cli() -> Tuple[Optional[str], List[str]]:
    """(path of the dstrain command or None, the places tried)."""
    tried: List[str] = []
    explicit = os.environ.get("DSTRAIN_CLI")
    if explicit:
        if _executable(explicit):
            return explicit, tried
        tried.append(f"DSTRAIN_CLI={explicit} (not an executable file)")
        return None, tried
    try:
        from dstrain._lib import library_path  # the library the package loads
    except ImportError as error:
        tried.append(f"next to libdstrain (the dstrain package did not load: "
                     f"{str(error).splitlines()[0]})")
        library_path = ""
    if library_path and os.path.isabs(library_path):
        lib_dir = os.path.dirname(library_path)
        for candidate in (
            os.path.join(lib_dir, "dstrain"),
            os.path.join(os.path.dirname(lib_dir), "bin", "dstrain"),
        ):
            if _executable(candidate):
                return candidate, tried
            tried.append(candidate)
    found = shutil.which("dstrain")
    if found:
        return found, tried
    tried.append("dstrain on PATH")
    return None, tried


def has_launch_subcommand(cli: str) -> bool:
    """Whether `cli --help` lists a `launch` subcommand."""
    try:
        result = subprocess.run(
            [cli, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"^\s+launch\b", result.stdout, re.MULTILINE) is not None


def launch_command(cli: str, args: Sequence[str]) -> List[str]:
    """The argv executed: ``[cli, "launch", *args]``."""
    return [cli, "launch", *args]


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{_PROG}: error: {message}\n")
    sys.stderr.flush()
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Execs ``dstrain launch`` with `argv` (default: sys.argv[1:]).

    Returns (without exec'ing) 127 when no dstrain command is found, 2 when
    the one found has no ``launch`` subcommand, 126 when it cannot be run.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    cli, tried = find_cli()
    if cli is None:
        return _fail(
            "cannot find the dstrain command. Tried:\n  " + "\n  ".join(tried)
            + "\nSet DSTRAIN_CLI to its path, or put it on PATH "
            "(it is built as `dstrain` in the CMake build directory).",
            127,
        )
    if not has_launch_subcommand(cli):
        return _fail(
            f"{cli} has no `launch` subcommand: this dstrain build predates the distributed "
            "launcher. Rebuild dstrain from a source tree that has `dstrain launch`, or set "
            "DSTRAIN_CLI to such a build.",
            2,
        )
    command = launch_command(cli, args)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cli, command)
    except OSError as error:
        return _fail(f"cannot run {cli}: {error}", 126)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
