"""Processes by parent or by command line, read from /proc (what pgrep -P and
pgrep -f do). The tests do not run pgrep itself: under the sanitizer pass its
environment carries LD_PRELOAD of the sanitizer runtime (for python), with
which pgrep hung in a futex while the ranks it was to find filled their pipes."""
import pathlib


def _stat_fields(pid):
    text = (pathlib.Path("/proc") / str(pid) / "stat").read_text()
    # The command name is in parentheses and may hold spaces or parentheses.
    return text[text.rindex(")") + 2:].split()


def children(pid, name=None):
    """PIDs whose parent is `pid` (and whose executable's name is `name`), ascending."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat_fields(entry.name)[1]) != pid:
                continue
            if name is not None and (entry / "comm").read_text().strip() != name[:15]:
                continue
        except (OSError, ValueError, IndexError):  # exited meanwhile
            continue
        found.append(int(entry.name))
    return sorted(found)


def with_argument(text):
    """PIDs of the processes one of whose arguments contains `text`, ascending."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(text.encode() in arg for arg in args):
            found.append(int(entry.name))
    return sorted(found)
