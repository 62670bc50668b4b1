"""The optimizer's NVMe tier (zero_optimization.offload_optimizer.device
"nvme"): master weights and optimizer state in a swap file per rank, moved
through a few sub-group buffers.

Oracle: an offloaded run reproduces the resident run's losses bit for bit
(the update is the same arithmetic on the same numbers, only where the state
rests differs), at ZeRO 1, 2, 3, fp32 / fp16 / bf16, dp 1 and 2, with the
pipelined reads and writes on and off. Faults injected into the I/O end in a
named error and leave the weights as they were before the failed step.
"""
import json
import os
import pathlib
import subprocess

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

STEPS = 6
SUB_GROUP = 4000  # elements per piece: the tiny GPT's shard is cut into several


def offload_job(tmp_path, stage, dp, name, precision="fp32", pipeline=False, buffers=4,
                device="nvme", sub_group=SUB_GROUP, aio=True):
    # 4 samples a step in every layout (accumulation makes up for dp), so
    # that a checkpoint moves between layouts.
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 2 // dp, dp, name)
    config = json.loads(cfg.read_text())
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    if device:
        swap = tmp_path / f"swap_{name}"
        swap.mkdir(exist_ok=True)
        config["zero_optimization"]["sub_group_size"] = sub_group
        config["zero_optimization"]["offload_optimizer"] = {
            "device": device, "nvme_path": str(swap), "buffer_count": buffers,
            "pipeline_read": pipeline, "pipeline_write": pipeline}
        if aio:  # else the engine probes the drive at start-up
            config["aio"] = {"block_size": 1048576, "queue_depth": 8}
    cfg.write_text(json.dumps(config))
    return cfg, model


def losses(results):
    return [r["losses"] for r in results]


def estimated_model_state(build_dir, cfg, model, dp):
    """`dstrain estimate`'s model-state bytes of one rank."""
    import subprocess
    out = subprocess.run([os.path.join(build_dir, "dstrain"), "estimate", "--config", str(cfg),
                          "--model", str(model), "--world-size", str(dp), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["per_rank"]["model_state_bytes"]


def kill_mid_step(tool, cfg, model, steps=10, killed_at=7, args=()):
    """Two ranks; rank 1 stops before step `killed_at` and rank 0 waits for it
    inside that step's collectives when both get SIGKILL."""
    import secrets
    import signal
    import subprocess
    import time
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = []
    for rank in range(2):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DSTRAIN_JOB_TOKEN=token)
        procs.append(subprocess.Popen(
            [tool, "--model", str(model), "--config", str(cfg), "--steps", str(steps),
             "--progress", "1", "--sleep", f"1:{killed_at}:60", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    try:
        for line in procs[0].stderr:
            if line.startswith(f"step {killed_at - 1}"):
                break
        time.sleep(0.3)  # rank 0 is in step `killed_at`'s collectives now
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == -signal.SIGKILL for p in procs)


@pytest.mark.parametrize("stage,dp,precision,pipeline", [
    (1, 1, "fp32", False), (1, 2, "fp32", True), (2, 2, "fp32", False), (3, 2, "fp32", True),
    (3, 1, "fp32", False), (1, 2, "bf16", True), (2, 1, "fp16", False), (3, 2, "bf16", False),
    (3, 2, "fp16", True),
])
def test_offloaded_run_reproduces_the_resident_run_bit_for_bit(tmp_path, tool, stage, dp,
                                                                precision, pipeline):
    cfg, model = offload_job(tmp_path, stage, dp, "resident", precision, device=None)
    resident = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS)
    cfg, model = offload_job(tmp_path, stage, dp, "nvme", precision, pipeline)
    offloaded = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS)
    assert losses(offloaded) == losses(resident)
    for r in offloaded:
        m = r["metrics"]
        o = m["offload"]["optimizer"]
        assert o["device"] == "nvme" and o["moved"] and o["committed_step"] == STEPS
        # Nothing of the optimizer tier stays in memory but its piece buffers.
        assert m["memory"]["optimizer_state"]["bytes"] == 0
        assert o["buffers"] == min(4, o["pieces"]) and o["pieces"] > 1
        piece_bytes = m["memory"]["offload"]["bytes"] // o["buffers"]
        # Every step reads and writes every piece once (and so did the
        # initial master weights); the rest of the writes are the header and
        # one commit record per pass. With pipeline_read the next step's
        # first pieces (2 of them with 4 buffers) are being read already.
        passes = piece_bytes * o["pieces"] * (STEPS + 1)
        assert passes <= o["read_bytes"] <= passes + (2 * piece_bytes if pipeline else 0)
        records = o["write_bytes"] - passes
        assert 0 < records < piece_bytes and o["short_transfers"] == 0
    # A clean shutdown removes the swap files.
    assert list((tmp_path / "swap_nvme").iterdir()) == []


def test_one_buffer_and_one_piece_still_train(tmp_path, tool):
    cfg, model = offload_job(tmp_path, 2, 1, "resident", device=None)
    resident = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)
    for name, buffers, sub_group in (("one_buffer", 2, 1000), ("one_piece", 4, 10**9)):
        cfg, model = offload_job(tmp_path, 2, 1, name, buffers=buffers, sub_group=sub_group)
        assert losses(dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)) == losses(resident)


@pytest.mark.parametrize("engine", ["pread", "io_uring"])
def test_both_io_engines_give_the_same_run(tmp_path, tool, engine):
    cfg, model = offload_job(tmp_path, 1, 1, "resident", device=None)
    resident = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)
    cfg, model = offload_job(tmp_path, 1, 1, "nvme", pipeline=True)
    run = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS,
                             extra_env={"DSTRAIN_IO_ENGINE": engine})
    assert losses(run) == losses(resident)


def run_with_fault(tool, tmp_path, kind, precision="fp32", stage=1, step=3, piece=2):
    """Trains 5 steps with `kind` injected once at `step`, piece `piece`; the
    tool retries a failed step once (the injected fault has struck then)."""
    cfg, model = offload_job(tmp_path, stage, 1, "nvme", precision, pipeline=True)
    return dp_tests.start_ranks(tool, cfg, model, 1, steps=5, args=("--retry-failed", "1"),
                                extra_env={"DSTRAIN_INJECT_IO_FAULT": f"0:{step}:{piece}:{kind}"})[0]


def resident_losses(tool, tmp_path, precision="fp32", stage=1):
    cfg, model = offload_job(tmp_path, stage, 1, "resident", precision, device=None)
    return dp_tests.run_ranks(tool, cfg, model, 1, steps=5)[0]["losses"]


@pytest.mark.test_hooks
@pytest.mark.parametrize("kind,errno_text,precision,stage", [
    ("write-error", "Input/output error (errno 5)", "fp32", 1),
    ("read-error", "Input/output error (errno 5)", "bf16", 2),
    ("write-short", "No space left on device (errno 28)", "fp16", 3),
])
def test_an_io_fault_is_a_named_error_and_the_step_changes_nothing(tmp_path, tool, kind,
                                                                   errno_text, precision, stage):
    """The failed step names the file, offset and errno and changes nothing:
    retried, it gives the resident run's losses bit for bit (weights,
    optimizer state and step count were all as before it)."""
    code, out, err = run_with_fault(tool, tmp_path, kind, precision, stage)
    assert code == 0, err
    assert errno_text in err and "dstrain_optimizer_rank0.swap" in err, err
    assert "optimizer step 3 failed; nothing changed" in err, err
    assert "at offset" in err and "piece 2" in err, err
    assert json.loads(out.strip().splitlines()[-1])["losses"] == resident_losses(
        tool, tmp_path, precision, stage)


@pytest.mark.test_hooks
def test_a_short_write_is_continued(tmp_path, tool):
    code, out, err = run_with_fault(tool, tmp_path, "write-short-once")
    assert code == 0 and "failed" not in err, err
    assert json.loads(out.strip().splitlines()[-1])["losses"] == resident_losses(tool, tmp_path)


def test_a_missing_nvme_path_is_named(tmp_path, tool):
    cfg, model = offload_job(tmp_path, 1, 1, "nvme")
    config = json.loads(cfg.read_text())
    config["zero_optimization"]["offload_optimizer"]["nvme_path"] = str(tmp_path / "nowhere")
    cfg.write_text(json.dumps(config))
    code, _, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=1)[0]
    assert code != 0 and "is not a directory" in err and "nowhere" in err, err


@pytest.mark.parametrize("precision,saved_dp,loaded_dp,offload_saves", [
    ("bf16", 2, 1, True),   # an offloaded dp 2 checkpoint resumes resident on one rank
    ("fp32", 1, 2, False),  # a resident checkpoint resumes offloaded on two ranks
    ("fp16", 2, 2, True),   # offloaded to offloaded
    ("bf16", 1, 1, True),   # one process: its weights consolidated from the store (was missing)
])
def test_checkpoints_move_between_offloaded_and_resident_runs(tmp_path, tool, precision, saved_dp,
                                                               loaded_dp, offload_saves):
    """The offloaded run's checkpoint is a normal checkpoint: any layout,
    with or without offload, continues it as the uninterrupted run does."""
    ckpt = tmp_path / "ckpt"
    stage = 2
    cfg, model = offload_job(tmp_path, stage, saved_dp, "nvme" if offload_saves else "resident",
                             precision, pipeline=True, device="nvme" if offload_saves else None)
    full = dp_tests.run_ranks(tool, cfg, model, saved_dp, steps=8,
                              args=["--ckpt", str(ckpt), "--save-at", "4"])
    assert all(r["save"]["status"] == "ok" for r in full), full[0]["save"]
    loads_offloaded = not offload_saves or loaded_dp == saved_dp
    cfg, model = offload_job(tmp_path, stage, loaded_dp, "loader", precision, pipeline=False,
                             device="nvme" if loads_offloaded else None)
    resumed = dp_tests.run_ranks(tool, cfg, model, loaded_dp, steps=8,
                                 args=["--ckpt", str(ckpt), "--resume"])
    for r in resumed:
        assert r["load"]["status"] == "ok", r["load"]
        # Bit for bit on the same layout; across dp sizes the gradients are
        # summed in another order (and, in 16 bits, rounded on the wire).
        tolerance = 0 if saved_dp == loaded_dp else 1e-6 if precision == "fp32" else 1e-4
        assert dp_tests.relative_gap(r["losses"], full[0]["losses"][4:]) <= tolerance
        if loads_offloaded:
            assert r["metrics"]["memory"]["optimizer_state"]["bytes"] == 0


BIG = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 4, "n_head": 4, "d_model": 512,
       "seed": 3}  # 12.7M parameters: 146 MiB of fp32 master weights and Adam moments


def memory_cgroup(name, limit_bytes):
    """A child memory cgroup limited to `limit_bytes` (v2 memory.max or v1
    memory.limit_in_bytes with swapping off), or None where none can be made."""
    for root, limit_file in (("/sys/fs/cgroup", "memory.max"),
                             ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")):
        if not os.path.exists(os.path.join(root, limit_file if root.endswith("memory")
                                           else "cgroup.controllers")):
            continue
        path = os.path.join(root, f"dstrain_test_{name}_{os.getpid()}")
        try:
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, limit_file), "w") as f:
                f.write(str(limit_bytes))
            if limit_file == "memory.limit_in_bytes":
                with open(os.path.join(path, "memory.swappiness"), "w") as f:
                    f.write("0")
            return path
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
    return None


def run_in_cgroup(cgroup, cmd):
    import subprocess

    def enter():
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, preexec_fn=enter, capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.parametrize("stage", [1, 2])
def test_a_model_whose_states_exceed_the_memory_budget_trains_offloaded(tmp_path, tool, stage):
    """bf16 ZeRO 1 (2) on one rank: 251 MB peak resident, 151 MB with the
    optimizer tier on NVMe. Under a 200 MB cgroup limit the resident run is
    killed and the offloaded one trains, with the resident run's losses
    (ZeRO 3 with the parameters on NVMe too: test_param_offload.py)."""
    if "ASAN_OPTIONS" in os.environ:  # scripts/test-sanitizers.sh
        pytest.skip("a memory budget means nothing under AddressSanitizer: its shadow memory "
                    "and quarantine outgrow the 200 MB limit")
    model = tmp_path / "big.json"
    model.write_text(json.dumps(BIG))
    configs = {}
    for device in (None, "nvme"):
        cfg, _ = offload_job(tmp_path, stage, 1, device or "resident", "bf16", pipeline=True,
                             device=device, sub_group=1_000_000)
        configs[device] = cfg
    free_run = dp_tests.run_ranks(tool, configs[None], model, 1, steps=3)[0]
    state = free_run["metrics"]["memory"]["optimizer_state"]["bytes"]
    limit = 200 << 20
    cgroup = memory_cgroup(f"offload{stage}", limit)
    cmd = lambda cfg: [tool, "--model", str(model), "--config", str(cfg), "--steps", "3"]
    if cgroup is None:  # no cgroup here: the resident size the offloaded run does not reach
        run = dp_tests.run_ranks(tool, configs["nvme"], model, 1, steps=3)[0]
        assert run["losses"] == free_run["losses"]
        saved = free_run["metrics"]["process_rss_bytes"] - run["metrics"]["process_rss_bytes"]
        assert saved > state - run["metrics"]["memory"]["offload"]["bytes"] - (16 << 20)
        return
    try:
        offloaded = run_in_cgroup(cgroup, cmd(configs["nvme"]))
        assert offloaded.returncode == 0, offloaded.stderr
        run = json.loads(offloaded.stdout.strip().splitlines()[-1])
        assert run["losses"] == free_run["losses"]
        assert run["metrics"]["memory"]["optimizer_state"]["bytes"] == 0
        with open("/proc/meminfo") as f:
            swap = [int(line.split()[1]) for line in f if line.startswith("SwapTotal")][0]
        if swap == 0:  # with swap the resident run could page instead of dying
            resident = run_in_cgroup(cgroup, cmd(configs[None]))
            assert resident.returncode != 0, "the resident run fit in the limit: raise the model"
    finally:
        os.rmdir(cgroup)


@pytest.mark.parametrize("layout", [{"tensor_parallel": {"tp_size": 2}},
                                    {"pipeline": {"stages": 2}}])
def test_each_rank_of_a_tp_or_pp_layout_offloads_its_own_state(tmp_path, tool, layout):
    """Every rank of tp 2 or pp 2 keeps its own swap file; the run equals the
    resident run of the same layout bit for bit."""
    runs = []
    for device in (None, "nvme"):
        cfg, model = offload_job(tmp_path, 2, 1, device or "resident", "bf16", pipeline=True,
                                 device=device, sub_group=1500)
        config = json.loads(cfg.read_text())
        config.update(layout)
        cfg.write_text(json.dumps(config))
        runs.append(dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS))
    assert losses(runs[1]) == losses(runs[0])
    paths = {r["metrics"]["offload"]["optimizer"]["path"] for r in runs[1]}
    assert len(paths) == 2  # one file per rank


@pytest.mark.parametrize("stage,dp,precision", [(1, 1, "fp32"), (2, 2, "bf16"), (3, 2, "fp16")])
def test_the_estimate_counts_the_piece_buffers_to_the_byte(tmp_path, tool, build_dir, stage, dp,
                                                           precision):
    cfg, model = offload_job(tmp_path, stage, dp, "nvme", precision)
    run = dp_tests.run_ranks(tool, cfg, model, dp, steps=1)
    expected = estimated_model_state(build_dir, cfg, model, dp)
    for r in run:
        mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
        assert mem["optimizer_state"] == 0
        assert mem["parameters"] + mem["gradients"] + mem["offload"] == expected, mem


def test_io_probe_measures_and_suggests_the_aio_settings(tmp_path, build_dir):
    import subprocess
    cli = os.path.join(build_dir, "dstrain")
    out = subprocess.run([cli, "io-probe", str(tmp_path), "--size", str(32 << 20), "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["engine"] in ("io_uring", "pread/pwrite")
    assert len(report["results"]) == 9 and report["file_bytes"] == 32 << 20
    assert all(r["write_bytes_per_second"] > 0 and r["read_bytes_per_second"] > 0
               for r in report["results"])
    best = report["best"]
    assert best == max(report["results"],
                       key=lambda r: r["write_bytes_per_second"] + r["read_bytes_per_second"])
    assert report["suggested_config"] == {"aio": {"block_size": best["block_size"],
                                                  "queue_depth": best["queue_depth"]}}
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone
    table = subprocess.run([cli, "io-probe", str(tmp_path), "--size", str(32 << 20)],
                           capture_output=True, text=True, check=True).stdout
    assert "<- best" in table and 'ds_config: {"aio"' in table
    missing = subprocess.run([cli, "io-probe", str(tmp_path / "nowhere")], capture_output=True,
                             text=True)
    assert missing.returncode == 1 and "nowhere" in missing.stderr, missing.stderr


def test_without_an_aio_section_the_engine_measures_the_drive(tmp_path, tool):
    cfg, model = offload_job(tmp_path, 1, 1, "resident", device=None)
    resident = dp_tests.run_ranks(tool, cfg, model, 1, steps=3)
    cfg, model = offload_job(tmp_path, 1, 1, "nvme", pipeline=True, aio=False)
    run = dp_tests.run_ranks(tool, cfg, model, 1, steps=3)
    aio = run[0]["metrics"]["offload"]["optimizer"]["aio"]
    assert aio["probed"] and aio["block_size"] in (128 << 10, 1 << 20, 8 << 20)
    assert aio["queue_depth"] in (8, 32)
    assert losses(run) == losses(resident)
    assert list((tmp_path / "swap_nvme").iterdir()) == []  # nor is the probe's file left


@pytest.mark.parametrize("size,aio,trains", [("24m", False, True), ("256k", False, False),
                                            ("256k", True, False)])
def test_a_small_nvme_directory(tmp_path, tool, size, aio, trains):
    """Without an "aio" section the start-up probe writes 32 MiB: on a disk
    with room for the swap file but not the probe the run trains on the
    default settings (with a warning naming the aio section); on one without
    room for the swap file the start is refused by name and leaves no swap
    file behind."""
    cfg, model = offload_job(tmp_path, 1, 1, "small", aio=aio)
    config = json.loads(cfg.read_text())
    disk = pathlib.Path(config["zero_optimization"]["offload_optimizer"]["nvme_path"])
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        code, out, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=3)[0]
        if trains:
            assert code == 0, err
            assert "too few for the 32 MiB I/O probe" in err and "\"aio\"" in err, err
        else:
            assert code != 0
            assert "needs" in err and "free" in err and "nvme_path" in err, err
        assert not list(disk.glob("*.swap")), list(disk.iterdir())  # run over or refused
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
