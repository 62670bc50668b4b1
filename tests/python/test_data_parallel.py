"""Data parallelism and ZeRO: every layout reproduces the single-rank run.

Each rank is a separate process started with torchrun's environment contract
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, DSTRAIN_JOB_TOKEN),
running tests/tools/dst_dp_tool, which trains on its slice of each global
batch. Losses must match the single-rank losses within 1e-5 relative, and the
per-rank model-state memory must equal the ZeRO paper's formulas.
"""
import json
import os
import secrets
import subprocess

import pytest

import free_ports

MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 2, "n_head": 2,
         "d_model": 32, "seed": 11}
STEPS = 20
TIMEOUT = 180


def free_port():
    return free_ports.free_port()


def write_job(tmp_path, stage, micro, accum, dp, name, overlap=False, bucket=None,
              persistence=None, prefetch=None):
    config = {
        "train_batch_size": micro * accum * dp,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                                  "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage, "overlap_comm": overlap},
        "dstrain": {"num_threads": 1, "comm_timeout_seconds": 60},
    }
    if bucket:
        config["zero_optimization"]["reduce_bucket_size"] = bucket
    if persistence is not None:
        config["zero_optimization"]["stage3_param_persistence_threshold"] = persistence
    if prefetch is not None:
        config["zero_optimization"]["stage3_prefetch_bucket_size"] = prefetch
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    return cfg, model


def run_ranks(tool, cfg, model, world_size, extra_env=None, args=(), steps=STEPS):
    outcomes = start_ranks(tool, cfg, model, world_size, extra_env, args, steps)
    failed = [f"rank {r} exited {code}: {err.strip()}"
              for r, (code, _, err) in enumerate(outcomes) if code != 0]
    assert not failed, "\n".join(failed)
    return sorted((json.loads(out.strip().splitlines()[-1]) for _, out, _ in outcomes),
                  key=lambda r: r["rank"])


def start_ranks(tool, cfg, model, world_size, extra_env=None, args=(), steps=STEPS):
    """Runs the ranks to completion: [(returncode, stdout, stderr)] by rank."""
    port = free_port()
    token = secrets.token_hex(8)
    procs = []
    for rank in range(world_size):
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        if world_size > 1:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world_size),
                        "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "DSTRAIN_JOB_TOKEN": token})
        env.update(extra_env or {})
        procs.append(subprocess.Popen(
            [tool, "--model", str(model), "--config", str(cfg), "--steps", str(steps), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outcomes = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            outcomes.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outcomes


@pytest.fixture(scope="module")
def tool(build_dir):
    path = os.path.join(build_dir, "tests", "dst_dp_tool")
    assert os.path.exists(path), f"{path} is missing: build the dst_dp_tool target"
    return path


def relative_gap(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


GLOBAL_BATCHES = [(2, 8), (2, 16)]  # (micro, global samples): accumulation 1 and 2 at dp 4


# Stage 3 keeps tensors of at most this many elements whole on every rank
# (DeepSpeed's stage3_param_persistence_threshold): with d_model 32 that is the
# LayerNorm weights and biases and the 32/96-wide biases; the matrices and the
# 128-wide c_fc bias are partitioned.
PERSISTENCE = 100


def zero_options(stage, dp):
    """Exercises both code paths: dp 2 overlaps communication (two staging
    buffers, stage-3 prefetch); dp 4 runs them one at a time."""
    options = {"overlap": dp == 2, "bucket": 1000}
    if stage == 3:
        options.update(persistence=PERSISTENCE, prefetch=50000 if dp == 2 else 0)
    return options


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("micro,global_batch", GLOBAL_BATCHES)
def test_every_dp_layout_reproduces_single_rank(tmp_path, tool, stage, micro, global_batch):
    single_cfg, model = write_job(tmp_path, 0, micro, global_batch // micro, 1, "single")
    reference = run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    assert len(reference) == STEPS and reference[-1] < reference[0]
    for dp in (2, 4):
        accum = global_batch // (micro * dp)
        cfg, _ = write_job(tmp_path, stage, micro, accum, dp, f"s{stage}_dp{dp}",
                           **zero_options(stage, dp))
        results = run_ranks(tool, cfg, model, dp)
        for r in results:
            gap = relative_gap(r["losses"], reference)
            assert gap < 1e-5, (f"stage {stage} dp {dp} accum {accum} rank {r['rank']}: "
                                f"losses differ by {gap:.2e} relative\n{r['losses']}\nvs\n"
                                f"{reference}")


@pytest.mark.parametrize("stage", [2, 3])
def test_one_rank_at_stages_2_and_3_matches_stage_0(tmp_path, tool, stage):
    """dp 1: the shard is the whole buffer, and the staging path still runs."""
    single_cfg, model = write_job(tmp_path, 0, 2, 2, 1, "single")
    reference = run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    cfg, _ = write_job(tmp_path, stage, 2, 2, 1, f"s{stage}_dp1", **zero_options(stage, 1))
    losses = run_ranks(tool, cfg, model, 1)[0]["losses"]
    assert relative_gap(losses, reference) < 1e-5


def persistent_elements(m, threshold):
    """Elements of the tensors stage 3 keeps whole: numel <= threshold."""
    C, V, T, L = m["d_model"], m["vocab_size"], m["n_ctx"], m["n_layer"]
    block = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    sizes = [V * C, T * C] + block * L + [C, C]
    return sum(n for n in sizes if n <= threshold)


# Per-rank model-state bytes, fp32 AdamW, P = parameters padded to a multiple of
# N = dp (padded - P < N), S = persistent elements at stage 3:
#   stage 0: 16P   stage 1: 8P + 8P/N   stage 2: 4P + 12P/N   stage 3: 16P/N + 4S
MEMORY_LAYOUTS = [(0, 2, None), (1, 2, None), (1, 4, None), (2, 2, None), (2, 4, None),
                  (3, 2, 0), (3, 4, 0), (3, 4, PERSISTENCE)]


@pytest.mark.parametrize("stage,dp,persistence", MEMORY_LAYOUTS)
def test_model_state_memory_matches_zero_formulas(tmp_path, build_dir, tool, stage, dp,
                                                  persistence):
    cfg, model = write_job(tmp_path, stage, 2, 1, dp, f"mem{stage}{dp}", persistence=persistence)
    persistent = persistent_elements(MODEL, persistence) if stage == 3 else 0
    if persistence:
        assert persistent > 0
    estimate = estimate_memory(build_dir, cfg, model, dp)[stage]
    for r in run_ranks(tool, cfg, model, dp):
        m = r["metrics"]
        psi = m["num_parameters"]
        padded = -(-psi // dp) * dp  # dstrain pads the flat buffers to a multiple of dp
        assert padded - psi < dp
        shard = padded // dp
        mem = {k: v["bytes"] for k, v in m["memory"].items()}
        assert mem["parameters"] == 4 * (shard + persistent if stage == 3 else padded)
        assert mem["gradients"] == 4 * (shard if stage >= 2 else padded)
        assert mem["optimizer_state"] == 8 * (padded if stage == 0 else shard)
        model_state = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
        # `dstrain estimate` prints exactly what the run measures.
        assert (mem["parameters"], mem["gradients"], mem["optimizer_state"]) == (
            estimate["parameters_bytes"], estimate["gradients_bytes"],
            estimate["optimizer_state_bytes"])
        assert estimate["supported"]
        # The ZeRO paper's formulas (fp32 AdamW), plus the documented persistent tensors.
        formula = {0: 16 * psi, 1: 8 * psi + 8 * psi / dp, 2: 4 * psi + 12 * psi / dp,
                   3: 16 * psi / dp}[stage] + 4 * persistent
        assert abs(model_state - formula) / formula < 0.01


def estimate_memory(build_dir, cfg, model, dp):
    """What `dstrain estimate --json` prints for each stage."""
    out = subprocess.run([os.path.join(build_dir, "dstrain"), "estimate", "--config", str(cfg),
                          "--model", str(model), "--world-size", str(dp), "--json"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["stages"]


# (save layout) -> (load layout), as (dp, ZeRO stage). The global batch is the
# same (8 samples) in every layout, so each resumed run must continue the
# single-rank reference: the optimizer state is resharded on load, with no
# conversion step.
RESHARD_MATRIX = [
    ((4, 3), (2, 1)), ((4, 3), (1, 0)), ((2, 1), (4, 3)), ((2, 1), (1, 2)),
    ((1, 0), (2, 2)), ((2, 0), (4, 1)), ((4, 2), (2, 3)), ((2, 3), (2, 3)),
]
RESHARD_STEPS, RESHARD_SAVE_AT = 8, 4


def reshard_job(tmp_path, dp, stage, name):
    options = zero_options(stage, dp) if dp > 1 else {}
    return write_job(tmp_path, stage, 2, 4 // dp, dp, name, **options)


@pytest.fixture(scope="module")
def reshard_reference(tmp_path_factory, tool):
    tmp = tmp_path_factory.mktemp("reshard_ref")
    cfg, model = reshard_job(tmp, 1, 0, "ref")
    return run_ranks(tool, cfg, model, 1, steps=RESHARD_STEPS)[0]["losses"]


@pytest.mark.parametrize("saved,loaded", RESHARD_MATRIX,
                         ids=[f"dp{a}s{b}-to-dp{c}s{d}" for (a, b), (c, d) in RESHARD_MATRIX])
def test_checkpoints_reshard_to_any_layout(tmp_path, tool, reshard_reference, saved, loaded):
    """Saved under one (dp, stage), loaded under another, training continues
    with the single-rank losses (fp32 tolerance 1e-5, as for the layouts)."""
    ckpt = tmp_path / "ckpt"
    cfg, model = reshard_job(tmp_path, *saved, "save")
    first = run_ranks(tool, cfg, model, saved[0], steps=RESHARD_SAVE_AT,
                      args=["--ckpt", str(ckpt), "--save-at", str(RESHARD_SAVE_AT)])
    for r in first:
        assert r["save"]["status"] == "ok", r["save"]
    assert relative_gap(first[0]["losses"], reshard_reference[:RESHARD_SAVE_AT]) < 1e-5
    shards = sorted(p.name for p in next(ckpt.glob("*/")).glob("zero_rank_*.safetensors"))
    owners = saved[0] if saved[1] >= 1 else 1  # stage 0: rank 0 writes the replicated state
    assert len(shards) == owners, shards
    cfg, model = reshard_job(tmp_path, *loaded, "load")
    second = run_ranks(tool, cfg, model, loaded[0], steps=RESHARD_STEPS,
                       args=["--ckpt", str(ckpt), "--resume"])
    for r in second:
        assert r["load"]["status"] == "ok", r["load"]
        assert len(r["losses"]) == RESHARD_STEPS - RESHARD_SAVE_AT
        assert relative_gap(r["losses"], reshard_reference[RESHARD_SAVE_AT:]) < 1e-5, (
            r["losses"], reshard_reference[RESHARD_SAVE_AT:])


def test_a_rank_that_skips_the_save_is_named_and_nothing_is_committed(tmp_path, tool):
    """Rank 1 never calls save: the others report it by rank once the timeout
    expires (no hang, no collective mismatched with training), and no tag is
    written. (Rank 1 itself then meets a communication timeout in its next
    step, since the others were saving: a clear error too.)"""
    cfg, model = write_job(tmp_path, 2, 2, 1, 3, "skip")
    config = json.loads(cfg.read_text())
    config["dstrain"]["comm_timeout_seconds"] = 3
    cfg.write_text(json.dumps(config))
    ckpt = tmp_path / "ckpt"
    outcomes = start_ranks(tool, cfg, model, 3, steps=4,
                           args=["--ckpt", str(ckpt), "--save-at", "2", "--skip-save-rank", "1"])

    def save_status(err):
        line = next(l for l in err.splitlines() if l.startswith("save: "))
        return json.loads(line[len("save: "):])

    assert save_status(outcomes[1][2])["status"] == "skipped"
    for code, _, err in (outcomes[0], outcomes[2]):
        saved = save_status(err)
        assert saved["status"] == "communication error", saved
        assert "rank 1 did not take part in save_checkpoint" in saved["error"], saved
    for code, _, err in outcomes:  # every rank ends, in error or not, within the timeouts
        assert code in (0, 1), err
    if ckpt.exists():
        assert not (ckpt / "latest").exists()
        assert not [p.name for p in ckpt.iterdir()], "a partial checkpoint was left behind"


@pytest.mark.parametrize("stage", [2, 3])
def test_one_rank_checkpoint_at_stages_2_and_3_resumes_bit_identically(tmp_path, tool, stage):
    """On one rank the shard is everything: save -> load -> continue reproduces
    the uninterrupted run (stage 3 refreshes its persistent copies on load)."""
    cfg, model = write_job(tmp_path, stage, 2, 2, 1, f"resume{stage}", **zero_options(stage, 1))
    ckpt = tmp_path / "ckpt"
    full = run_ranks(tool, cfg, model, 1, args=["--ckpt", str(ckpt), "--save-at", "4"], steps=8)[0]
    assert full["save"]["status"] == "ok", full["save"]
    resumed = run_ranks(tool, cfg, model, 1, args=["--ckpt", str(ckpt), "--resume"], steps=8)[0]
    assert resumed["load"]["status"] == "ok", resumed["load"]
    assert resumed["losses"] == full["losses"][4:]


@pytest.mark.parametrize("stage", [2, 3])
def test_full_tensors_are_readable_at_stages_2_and_3(tmp_path, tool, stage):
    """get_param gathers a stage-3 tensor from its owners; get_grad after
    forward_backward returns the full averaged gradient (gathered from the
    shards), and after train_batch says the gradient is only sharded."""
    steps = 4
    single_cfg, model = write_job(tmp_path, 0, 2, 4, 1, "single")  # global batch 8
    reference = run_ranks(tool, single_cfg, model, 1, args=["--inspect", "1"], steps=steps)[0]
    assert reference["grad_after_step"]["status"] == "ok"
    for dp in (2, 4):
        cfg, _ = write_job(tmp_path, stage, 2, 8 // (2 * dp), dp, f"inspect{stage}{dp}",
                           **zero_options(stage, dp))
        for r in run_ranks(tool, cfg, model, dp, args=["--inspect", "1"], steps=steps):
            after_step = r["grad_after_step"]
            assert after_step["status"] == "call out of order", after_step
            assert f"ZeRO stage {stage}" in after_step["error"]
            assert "forward_backward" in after_step["error"]
            for key in ("param_norms", "grad_norms"):
                assert len(r[key]) == len(reference[key])
                assert relative_gap(r[key], reference[key]) < 1e-5, (key, r[key], reference[key])


def test_throughput_figures_have_one_meaning_each(tmp_path, tool):
    """tokens_per_second is this rank's share (as Prometheus' dstrain_tokens_per_second);
    job_tokens_per_sec, and the metrics JSON's tokens_per_sec kept for older callers,
    count every data-parallel rank's tokens."""
    cfg, model = write_job(tmp_path, 1, 2, 1, 2, "tps")
    for r in run_ranks(tool, cfg, model, 2):
        m = r["metrics"]
        assert m["tokens_per_second"] > 0
        assert m["job_tokens_per_sec"] == m["tokens_per_sec"]
        assert m["job_tokens_per_sec"] == pytest.approx(2 * m["tokens_per_second"], rel=1e-9)
        assert m["job_samples_per_sec"] == pytest.approx(2 * m["samples_per_second"], rel=1e-9)
        assert m["samples"] == 2 * 2 * STEPS  # micro 2 x dp 2 per step, every rank's
