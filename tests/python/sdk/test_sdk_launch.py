"""`dstrain-launch` (dstrain_launch:main) execs `dstrain launch ARGS...`.

A stand-in CLI (a shell script that lists a `launch` subcommand in --help and
echoes its argv) checks the exec path and argument passing; the real CLI of
the build checks the message while it has no `launch` subcommand yet."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

FAKE_CLI = """#!/bin/sh
if [ "$1" = "--help" ]; then
  printf 'Usage: dstrain SUBCOMMAND\\n\\nSubcommands:\\n  launch    Run a job on N ranks\\n  train     Train\\n'
  exit 0
fi
for arg in "$@"; do printf '[%s]\\n' "$arg"; done
exit 7
"""


def launch(env, *args):
    return subprocess.run([sys.executable, "-m", "dstrain_launch", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def fake_cli(tmp_path):
    path = tmp_path / "bin" / "dstrain"
    path.parent.mkdir()
    path.write_text(FAKE_CLI)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_arguments_pass_through(subprocess_env, fake_cli):
    env = dict(subprocess_env, DSTRAIN_CLI=str(fake_cli))
    args = ["--nproc", "2", "--", "train", "--steps", "3", "a b", "", "--x=*"]
    out = launch(env, *args)
    assert out.returncode == 7, out.stderr  # the CLI's own exit code: exec'd
    assert out.stdout.splitlines() == [f"[{a}]" for a in ["launch", *args]]


def test_works_without_the_library(subprocess_env, fake_cli, tmp_path):
    """The launcher does not need `import dstrain` to succeed: the CLI finds
    its own library."""
    env = dict(subprocess_env, DSTRAIN_CLI=str(fake_cli),
               DSTRAIN_LIBRARY=str(tmp_path / "missing.so"))
    out = launch(env, "-n", "2")
    assert out.returncode == 7 and out.stdout.splitlines() == ["[launch]", "[-n]", "[2]"]
    env.pop("DSTRAIN_CLI")
    env["PATH"] = str(tmp_path / "empty")
    out = launch(env)
    assert out.returncode == 127 and "the dstrain package did not load" in out.stderr


def test_cli_found_on_path(subprocess_env, fake_cli, tmp_path):
    env = dict(subprocess_env, PATH=f"{fake_cli.parent}{os.pathsep}{subprocess_env['PATH']}")
    env.pop("DSTRAIN_CLI", None)
    # The build directory's own dstrain (next to the library) comes first.
    if os.path.exists(os.path.join(env["DSTRAIN_BUILD_DIR"], "dstrain")):
        pytest.skip("the build directory has a dstrain binary, which takes precedence")
    out = launch(env, "-n", "1")
    assert out.returncode == 7 and out.stdout.splitlines() == ["[launch]", "[-n]", "[1]"]


def test_missing_cli_is_reported(subprocess_env, tmp_path):
    env = dict(subprocess_env, DSTRAIN_CLI=str(tmp_path / "no-such-dstrain"))
    out = launch(env, "-n", "2")
    assert out.returncode == 127
    assert "cannot find the dstrain command" in out.stderr
    assert f"DSTRAIN_CLI={tmp_path / 'no-such-dstrain'} (not an executable file)" in out.stderr
    env = dict(subprocess_env, PATH=str(tmp_path))
    env.pop("DSTRAIN_CLI", None)
    out = launch(env)
    if out.returncode != 127:
        pytest.skip("a dstrain command is next to the library")
    assert "dstrain on PATH" in out.stderr and "Set DSTRAIN_CLI" in out.stderr


def test_cli_without_launch_subcommand(subprocess_env, tmp_path):
    old = tmp_path / "dstrain"
    old.write_text("#!/bin/sh\nprintf 'Subcommands:\\n  report\\n  train\\n'\nexit 0\n")
    old.chmod(0o755)
    out = launch(dict(subprocess_env, DSTRAIN_CLI=str(old)), "-n", "2")
    assert out.returncode == 2
    assert "has no `launch` subcommand" in out.stderr


def test_real_cli(subprocess_env, sdk_build_dir):
    """The build's dstrain: until it has `launch`, a clear message; after, the
    launcher's own --help."""
    cli = sdk_build_dir / "dstrain"
    if not cli.exists():
        pytest.skip(f"{cli} is not built")
    env = dict(subprocess_env, DSTRAIN_CLI=str(cli))
    out = launch(env, "--help")
    helped = subprocess.run([str(cli), "--help"], capture_output=True, text=True, timeout=60)
    if "launch" in helped.stdout:
        assert out.returncode == 0 and "launch" in out.stdout.lower()
    else:
        assert out.returncode == 2 and "has no `launch` subcommand" in out.stderr


def test_launch_command(dst):
    from dstrain_launch import launch_command

    assert launch_command("/x/dstrain", ["-n", "2", "train"]) == ["/x/dstrain", "launch", "-n", "2",
                                                                 "train"]
