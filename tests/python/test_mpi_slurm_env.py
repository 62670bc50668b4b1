"""Ranks started by mpirun or Slurm's srun (neither is installed here, so the
test gives each process exactly the environment those launchers set) join the
job and reproduce the single-rank losses."""
import os
import subprocess

import pytest

import test_data_parallel as dp_tests


def launcher_env(kind, rank, world, port, job_id):
    if kind == "mpirun":
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(world),
                "OMPI_MCA_ess_base_jobid": job_id, "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port)}
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": str(world),
            "SLURM_JOB_ID": job_id, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


@pytest.mark.parametrize("kind", ["mpirun", "slurm"])
def test_ranks_from_mpirun_and_srun_reproduce_single_rank(tmp_path, build_dir, kind):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    single_cfg, model = dp_tests.write_job(tmp_path, 0, 2, 2, 1, "single")
    reference = dp_tests.run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    cfg, _ = dp_tests.write_job(tmp_path, 1, 2, 1, 2, kind)
    port = dp_tests.free_port()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "OMPI_", "SLURM_",
                                 "DSTRAIN_JOB_TOKEN"))}
    base.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = [subprocess.Popen([tool, "--model", str(model), "--config", str(cfg), "--steps",
                               str(dp_tests.STEPS)],
                              env=dict(base, **launcher_env(kind, r, 2, port, f"{port}77")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
            losses = [float(x) for x in out.split('"losses":[')[1].split("]")[0].split(",")]
            assert dp_tests.relative_gap(losses, reference) < 1e-5
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
