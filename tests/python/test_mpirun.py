"""Jobs started by a real Open MPI `mpirun` (Debian's openmpi-bin), not only
by its environment variables: the ranks train and reproduce the
single-process losses, and a rank killed under mpirun is named by the
survivor, which exits, and mpirun's job ends."""
import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

import proc_tree
import test_data_parallel as dp_tests
import test_faults as faults

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")


def mpirun(*args, world=2):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMIX_",
                                "DSTRAIN_JOB_TOKEN"))}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    # --allow-run-as-root: CI runs as root; --oversubscribe: 2 ranks may exceed
    # the slots Open MPI counts on a small machine.
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(world),
            "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", *map(str, args)], env


def test_mpirun_ranks_reproduce_the_single_process_losses(tmp_path, build_dir):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    single_cfg, model = dp_tests.write_job(tmp_path, 0, 2, 2, 1, "single")
    reference = dp_tests.run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    cfg, _ = dp_tests.write_job(tmp_path, 1, 2, 1, 2, "mpi")
    cmd, env = mpirun(tool, "--model", model, "--config", cfg, "--steps", dp_tests.STEPS,
                      "--metrics", "0")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith('{"rank"')]
    assert len(lines) == 2, result.stdout
    for line in lines:
        losses = [float(x) for x in line.split('"losses":[')[1].split("]")[0].split(",")]
        assert dp_tests.relative_gap(losses, reference) < 1e-5


def test_a_rank_killed_under_mpirun_is_named_and_the_job_ends(tmp_path, build_dir):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    cfg, model = faults.job_files(tmp_path, 2)
    cmd, env = mpirun(tool, "--model", model, "--config", cfg, "--steps", 100000,
                      "--progress", "1")
    job = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        faults.wait_for_progress(job, steps=3)
        ranks = proc_tree.children(job.pid, "dst_dp_tool")
        assert len(ranks) == 2, f"expected two ranks under mpirun, found {ranks}"
        # Which one is rank 1: Open MPI exports its rank to each child.
        victim = None
        for pid in ranks:
            environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"OMPI_COMM_WORLD_RANK=1" in environ:
                victim = int(pid)
        assert victim, "no process with OMPI_COMM_WORLD_RANK=1"
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        _, err = job.communicate(timeout=faults.COMM_TIMEOUT + 60)
        elapsed = time.monotonic() - killed_at
        assert job.returncode != 0, "mpirun reported success after a rank was killed"
        assert elapsed < faults.COMM_TIMEOUT + 30, f"the job took {elapsed:.0f} s to end"
        assert "rank 1 died first" in err, f"the survivor did not name rank 1:\n{err}"
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
