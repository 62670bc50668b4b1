"""`dstrain autotune` and `dstrain launch --autotuning`: DeepSpeed's autotuner.

Where a timing would be flaky the trials run a stand-in program (a user's own
program, as DeepSpeed's autotuner runs the user's script) whose metric is a
fixed function of the trial's ds_config: the tuner must then pick what a
brute-force sweep of the same space measures best. Real trials of
`dstrain train` check the engine's metric file and that the best config
trains. Needs $DSTRAIN_BUILD_DIR; every subprocess has a timeout."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

TIMEOUT = 240
MODEL = pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs" / "gpt_tiny.json"

# A trial program: reads its ds_config from --deepspeed_config; as a trial
# (autotuning.metric_path set) writes a metric that is a fixed function of the
# ZeRO stage and micro-batch; as the final run writes what it got to final.json.
# Stage 2 fails when FAIL_STAGE_2 is among its arguments.
PROGRAM = r"""
import json, math, os, pathlib, sys
args = sys.argv[1:]
config = json.loads(pathlib.Path(args[args.index("--deepspeed_config") + 1]).read_text())
stage = config["zero_optimization"]["stage"]
mbs = config["train_micro_batch_size_per_gpu"]
tuning = config.get("autotuning", {})
if "RECORD_ARGS" in args:  # every rank, on every host, notes the arguments it got
    with open(pathlib.Path(tuning.get("metric_path", ".")).parent / "args.log", "a") as log:
        log.write(json.dumps(args) + "\n")
if "FAIL_STAGE_2" in args and stage == 2 and tuning.get("metric_path"):
    print("boom: stage 2 is broken here", file=sys.stderr)
    sys.exit(3)
if tuning.get("metric_path"):
    throughput = mbs * [1.0, 1.3, 0.9, 0.7][stage] * math.exp(-((mbs - 5) ** 2) / 18.0)
    zero = config["zero_optimization"]
    assert not any(isinstance(v, list) for v in zero.values()), zero
    throughput *= {1000: 0.9, 4000: 1.2}.get(zero.get("reduce_bucket_size"), 1.0)
    throughput *= 1.1 if zero.get("overlap_comm") is False else 1.0
    throughput *= 1.05 if zero.get("stage3_param_persistence_threshold") == 1e5 else 1.0
    pathlib.Path(tuning["metric_path"]).write_text(json.dumps(
        {"throughput": throughput, "latency": 1000.0 / throughput, "FLOPS_per_gpu": throughput}))
else:
    out = pathlib.Path(args[args.index("--out") + 1])
    out.write_text(json.dumps({"args": args, "config": config}))
"""


def cost(stage, mbs):
    return mbs * [1.0, 1.3, 0.9, 0.7][stage] * math.exp(-((mbs - 5) ** 2) / 18.0)


@pytest.fixture
def dstrain(build_dir):
    return build_dir / "dstrain"


def run(cmd, cwd, check=True):
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def write_config(tmp_path, autotuning, **top):
    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "autotuning": {"enabled": True, **autotuning},
    }
    config.update(top)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return path


def tune_program(dstrain, tmp_path, autotuning, extra=(), top=None, **kw):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    config = write_config(tmp_path, autotuning, **(top or {}))
    cmd = [dstrain, "autotune", "--config", config, "--model", MODEL, *kw.get("options", [])]
    cmd += ["--", sys.executable, program, "--deepspeed_config", config, *extra]
    return run(cmd, tmp_path, check=kw.get("check", True))


def results(tmp_path):
    return json.loads((tmp_path / "autotuning_results" / "results.json").read_text())


SPACE = {"max_train_micro_batch_size_per_gpu": 8, "num_tuning_micro_batch_sizes": 8}


@pytest.mark.parametrize("tuner", ["gridsearch", "random"])
def test_the_tuner_finds_what_a_brute_force_sweep_measures_best(dstrain, tmp_path, tuner):
    tune_program(
        dstrain, tmp_path, {**SPACE, "tuner_type": tuner, "tuner_early_stopping": 100}
    )
    brute = max(((s, m) for s in range(4) for m in range(1, 9)), key=lambda p: cost(*p))
    got = results(tmp_path)
    ran = [t for t in got["trials"] if t["ran"]]
    assert len(ran) == 32  # every stage x micro-batch 1..8
    assert got["best"] == f"z{brute[0]}_mbs{brute[1]}_gas1"
    optimal = json.loads((tmp_path / "autotuning_results" / "ds_config_optimal.json").read_text())
    assert optimal["zero_optimization"]["stage"] == brute[0]
    assert optimal["train_micro_batch_size_per_gpu"] == brute[1]
    assert "metric_path" not in optimal["autotuning"]
    summary = (tmp_path / "autotuning_results" / "summary.txt").read_text()
    assert "<- best" in summary and summary.count("\n") == 33


def test_the_model_based_tuner_finds_the_best_in_fewer_trials(dstrain, tmp_path):
    tune_program(
        dstrain, tmp_path, {**SPACE, "tuner_type": "model_based", "tuner_early_stopping": 6}
    )
    got = results(tmp_path)
    ran = [t for t in got["trials"] if t["ran"]]
    brute = max(((s, m) for s in range(4) for m in range(1, 9)), key=lambda p: cost(*p))
    assert got["best"] == f"z{brute[0]}_mbs{brute[1]}_gas1"
    assert len(ran) < 32


def test_early_stopping_and_the_trial_cap(dstrain, tmp_path):
    tune_program(dstrain, tmp_path, {**SPACE, "tuner_num_trials": 5})
    assert sum(t["ran"] for t in results(tmp_path)["trials"]) == 5
    # gridsearch: stage 0's metric rises up to micro-batch 6, then falls;
    # stopping after 2 trials without a better one ends with micro-batch 8.
    tune_program(dstrain, tmp_path, {**SPACE, "tuner_early_stopping": 2})
    ran = [t["name"] for t in results(tmp_path)["trials"] if t["ran"]]
    assert ran == [f"z0_mbs{m}_gas1" for m in range(1, 9)]


def test_zero_knobs_listed_in_the_config_are_tuned_at_the_best_point(dstrain, tmp_path):
    # DeepSpeed's user-defined space: lists in zero_optimization. gpt_tiny has
    # 118,528 parameters: 1e9 and 2e9 both reduce it in one bucket (2e9 is
    # not tried); contiguous_gradients changes nothing in dstrain.
    zero = {"stage": 2, "reduce_bucket_size": [1000, 4000, 16000, 1e9, 2e9],
            "overlap_comm": [True, False], "contiguous_gradients": [True, False]}
    proc = tune_program(dstrain, tmp_path, {**SPACE, "tuner_early_stopping": 100},
                        top={"zero_optimization": zero}, options=["--world-size", "2"])
    got = results(tmp_path)
    first = [t for t in got["trials"] if "zero_optimization" not in t]
    knobs = [t for t in got["trials"] if "zero_optimization" in t]
    assert [t["name"] for t in first] == [f"z2_mbs{m}_gas1" for m in range(1, 9)]
    assert len(knobs) == 8 and all(t["ran"] for t in knobs)  # 4 bucket sizes x 2
    assert all(t["name"].startswith("z2_mbs6_gas1_oc") for t in knobs)
    assert got["best"] == "z2_mbs6_gas1_oc0_rbs4000"
    optimal = json.loads((tmp_path / "autotuning_results" / "ds_config_optimal.json").read_text())
    assert optimal["zero_optimization"] == {"stage": 2, "overlap_comm": False,
                                            "reduce_bucket_size": 4000}
    assert "contiguous_gradients: accepted by dstrain but changes nothing" in proc.stdout
    assert "reduce_bucket_size 2e9: holds a rank's 118528 gradient elements" in proc.stdout
    assert "overlap_comm (2) x reduce_bucket_size (4) = 8 points" in proc.stdout


def test_the_full_tuner_tries_the_stage_default_knobs_that_act(dstrain, tmp_path):
    # "fast": false without lists: DeepSpeed's default space for the best
    # stage, less what cannot act (one rank: no reduction to tune).
    proc = tune_program(
        dstrain, tmp_path,
        {"fast": False, "max_train_micro_batch_size_per_gpu": 6, "num_tuning_micro_batch_sizes": 2,
         "tuner_early_stopping": 100},
        top={"zero_optimization": {"stage": 3}})
    got = results(tmp_path)
    knobs = [t for t in got["trials"] if "zero_optimization" in t]
    assert {tuple(sorted(t["zero_optimization"])) for t in knobs} == {
        ("stage3_param_persistence_threshold", "stage3_prefetch_bucket_size")}
    assert sorted((t["zero_optimization"]["stage3_prefetch_bucket_size"],
                   t["zero_optimization"]["stage3_param_persistence_threshold"]) for t in knobs) == [
        (0, 1e4), (0, 1e5), (0, 1e6), (5e7, 1e4), (5e7, 1e5), (5e7, 1e6)]
    assert "_ppt1e5_" in got["best"]
    assert "overlap_comm: acts across data-parallel ranks; the best point has one" in proc.stdout


def test_a_failing_trial_is_reported_and_skipped(dstrain, tmp_path):
    proc = tune_program(
        dstrain, tmp_path, {**SPACE, "tuner_early_stopping": 100}, extra=["FAIL_STAGE_2"]
    )
    got = results(tmp_path)
    failed = [t for t in got["trials"] if "failure" in t]
    assert [t["zero_stage"] for t in failed] == [2] * 8
    assert all("exit status 3: boom: stage 2 is broken here" in t["failure"] for t in failed)
    assert "failed: exit status 3" in proc.stdout
    assert got["best"] == "z1_mbs6_gas1"


def test_no_trial_measured_is_an_error_naming_the_logs(dstrain, tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import sys; print('cannot start', file=sys.stderr); sys.exit(5)")
    config = write_config(tmp_path, {"max_train_micro_batch_size_per_gpu": 2})
    proc = run(
        [dstrain, "autotune", "--config", config, "--model", MODEL, "--",
         sys.executable, program, "--deepspeed_config", config],
        tmp_path,
        check=False,
    )
    assert proc.returncode == 1
    assert "no trial was measured" in proc.stderr and "autotuning_exps" in proc.stderr
    assert "exit status 5: cannot start" in proc.stdout


def test_memory_prunes_micro_batches_over_the_budget(dstrain, tmp_path):
    # The budget: exactly what stage 0 needs at micro-batch 4.
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4,
                                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    estimate = json.loads(run([dstrain, "estimate", "--config", probe, "--model", MODEL,
                               "--json"], tmp_path).stdout)
    budget = estimate["per_rank"]["total_bytes"]
    tune_program(dstrain, tmp_path,
                 {**SPACE, "tuner_early_stopping": 100},
                 **{"options": ["--memory-per-rank", str(budget)]})
    trials = results(tmp_path)["trials"]
    stage0 = [t for t in trials if t["zero_stage"] == 0]
    assert max(t["train_micro_batch_size_per_gpu"] for t in stage0 if t["ran"]) == 4
    over = [t for t in stage0 if "pruned" in t]
    assert over and all("over the budget" in t["pruned"] for t in over)
    assert all(t["estimated_bytes_per_rank"] <= budget for t in trials if t["ran"])


def test_dstrain_train_trials_measure_and_the_best_config_trains(dstrain, tmp_path):
    config = write_config(
        tmp_path,
        {"start_profile_step": 1, "end_profile_step": 2,
         "max_train_micro_batch_size_per_gpu": 4, "num_tuning_micro_batch_sizes": 2},
        zero_optimization={"stage": [1, 3], "reduce_bucket_size": [20000, 1e9]},
    )
    proc = run([dstrain, "autotune", "--config", config, "--model", MODEL, "--world-size", "2"],
               tmp_path)
    got = results(tmp_path)
    names = [t["name"] for t in got["trials"]]
    assert names[:4] == ["z1_mbs1_gas1", "z1_mbs4_gas1", "z3_mbs1_gas1", "z3_mbs4_gas1"]
    # then the bucket sizes at the best of those, each trial's config carrying its own
    best = max(got["trials"][:4], key=lambda t: t["throughput"])["name"]
    assert names[4:] == [best + "_rbs2e4", best + "_rbs1e9"]
    for name, size in zip(names[4:], [20000, 1e9]):
        trial = json.loads((tmp_path / "autotuning_exps" / name / "ds_config.json").read_text())
        assert trial["zero_optimization"]["reduce_bucket_size"] == size
    for t in got["trials"]:
        assert t["ran"] and "failure" not in t, t
        metric = json.loads((tmp_path / "autotuning_exps" / t["name"] / "metric.json").read_text())
        assert metric["steps"] == 2 and metric["start_profile_step"] == 1
        assert metric["throughput"] > 0 and metric["latency"] > 0 and metric["FLOPS_per_gpu"] > 0
        # samples per step = mbs x dp; the throughput is that over the mean step time
        batch = t["train_micro_batch_size_per_gpu"] * 2
        assert metric["throughput"] == pytest.approx(batch / (metric["latency"] / 1000), rel=1e-6)
    assert "best:" in proc.stdout
    optimal = tmp_path / "autotuning_results" / "ds_config_optimal.json"
    run([dstrain, "launch", "--nproc-per-node", "2", "--master-port", "29655", "--",
         dstrain, "train", "--config", optimal, "--model", MODEL, "--steps", "2", "--quiet"],
        tmp_path)


def test_the_zero_knobs_example_tunes_its_lists(dstrain, tmp_path):
    example = MODEL.parent / "autotuning_zero_knobs.json"
    proc = run([dstrain, "autotune", "--config", example, "--model", MODEL, "--world-size", "2"],
               tmp_path)
    got = results(tmp_path)
    assert all(t["ran"] and "failure" not in t for t in got["trials"]), got["trials"]
    knobs = [t["zero_optimization"] for t in got["trials"] if "zero_optimization" in t]
    assert sorted((k["overlap_comm"], k["reduce_bucket_size"]) for k in knobs) == [
        (False, 20000), (False, 5e8), (True, 20000), (True, 5e8)]
    assert "overlap_comm (2) x reduce_bucket_size (2) = 4 points" in proc.stdout


def test_launch_autotuning_run_launches_the_program_with_the_best_config(dstrain, tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    config = write_config(
        tmp_path,
        {**SPACE, "arg_mappings": {"train_micro_batch_size_per_gpu ":
                                   "--per_device_train_batch_size"}},
        zero_optimization={"stage": 1},
    )
    final = tmp_path / "final.json"
    run([dstrain, "launch", "--nproc-per-node", "1", "--autotuning", "run", "--",
         sys.executable, program, "--deepspeed_config", config,
         "--per_device_train_batch_size", "99", "--out", final], tmp_path)
    got = json.loads(final.read_text())
    assert got["config"]["train_micro_batch_size_per_gpu"] == 6
    assert got["config"]["zero_optimization"]["stage"] == 1
    args = got["args"]
    assert args[args.index("--per_device_train_batch_size") + 1] == "6"
    assert args[args.index("--deepspeed_config") + 1].endswith("ds_config_optimal.json")
    # tune: no final run
    final.unlink()
    run([dstrain, "launch", "--nproc-per-node", "1", "--autotuning", "tune", "--",
         sys.executable, program, "--deepspeed_config", config, "--out", final], tmp_path)
    assert not final.exists()


def test_launch_autotuning_needs_the_programs_config(dstrain, tmp_path):
    proc = run([dstrain, "launch", "--autotuning", "tune", "--", sys.executable, "-c", "0"],
               tmp_path, check=False)
    assert proc.returncode == 2 and "--deepspeed_config FILE" in proc.stderr


def test_the_autotuning_section_is_checked_and_train_runs_it_as_written(dstrain, tmp_path):
    bad = write_config(tmp_path, {"tuner_typ": "random"})
    proc = run([dstrain, "train", "--config", bad, "--model", MODEL, "--steps", "1"],
               tmp_path, check=False)
    assert proc.returncode == 2 and "tuner_typ" in proc.stderr and "tuner_type" in proc.stderr
    bad = write_config(tmp_path, {"start_profile_step": 4, "end_profile_step": 2})
    proc = run([dstrain, "autotune", "--config", bad, "--model", MODEL], tmp_path, check=False)
    assert proc.returncode == 2 and "end_profile_step 2 is before" in proc.stderr
    # DeepSpeed's example configs (an autotuning section, "auto" micro-batch)
    # train as written under `dstrain train`.
    good = tmp_path / "ds_tune.json"
    good.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2,
        "autotuning": {"enabled": True, "overwrite": False, "max_train_batch_size": 4096,
                       "arg_mappings": {"gradient_accumulation_steps ":
                                        "--gradient_accumulation_steps"}}}))
    run([dstrain, "train", "--config", good, "--model", MODEL, "--steps", "2", "--quiet"],
        tmp_path)
    assert not (tmp_path / "autotuning_results").exists()


# A stand-in for ssh: runs the command line it is given here (the host is
# recorded), as `ssh HOST 'COMMAND'` runs it on HOST.
FAKE_SSH = 'echo "$1" >> "$(dirname "$0")/hosts.log"; shift; exec sh -c "$*"\n'


def hostfile_options(tmp_path, text="node0 slots=1  # the tuner's host\nnode1 slots=1\n"):
    (tmp_path / "fake_ssh").write_text(FAKE_SSH)
    (tmp_path / "hosts").write_text(text)
    return ["--hostfile", tmp_path / "hosts", "--master-addr", "127.0.0.1",
            "--remote", f"sh {tmp_path / 'fake_ssh'} {{host}}"]


def test_trials_span_the_hosts_of_a_hostfile(dstrain, tmp_path):
    proc = tune_program(dstrain, tmp_path, {**SPACE, "max_train_micro_batch_size_per_gpu": 3,
                                            "tuner_early_stopping": 100},
                        top={"zero_optimization": {"stage": 1}},
                        options=hostfile_options(tmp_path),
                        extra=["RECORD_ARGS", "it's $HOME and \"x\" `y` \\z", "", "--a=[1,2]"])
    assert "2 ranks on 2 hosts" in proc.stdout
    # The remote command line carries every argument byte for byte.
    logged = (tmp_path / "autotuning_exps" / "z1_mbs1_gas1" / "args.log").read_text().splitlines()
    assert len(logged) == 2 and logged[0] == logged[1], logged
    assert json.loads(logged[0])[-4:] == ["RECORD_ARGS", "it's $HOME and \"x\" `y` \\z", "",
                                          "--a=[1,2]"]
    got = results(tmp_path)
    assert [t["name"] for t in got["trials"]] == [f"z1_mbs{m}_gas1" for m in (1, 2, 3)]
    assert all(t["ran"] and t["dp"] == 2 for t in got["trials"])
    assert (tmp_path / "hosts.log").read_text().split() == ["node1"] * 3
    comment, local, remote = (tmp_path / "autotuning_exps" / "z1_mbs1_gas1" / "cmd.txt") \
        .read_text().splitlines()
    assert comment.startswith("# export DSTRAIN_JOB_TOKEN=")
    for line, rank in ((local, 0), (remote, 1)):
        assert f"--nnodes 2 --node-rank {rank} --master-addr 127.0.0.1" in line
    assert "DSTRAIN_JOB_TOKEN" not in local
    optimal = (tmp_path / "autotuning_results" / "cmd_optimal.txt").read_text().splitlines()
    assert len(optimal) == 3 and optimal[0] == comment
    # No token is written: the remote line passes on the reader's own, and a
    # shell reads it back as the ssh words with that token in the command.
    for line in (remote, optimal[2]):
        words = subprocess.run(["bash", "-c", f"set -- {line}; printf '%s\\n' \"$@\""],
                               env={"DSTRAIN_JOB_TOKEN": "cafe01", "PATH": os.environ["PATH"]},
                               capture_output=True, text=True, check=True).stdout.splitlines()
        assert words[-1].startswith("env DSTRAIN_JOB_TOKEN=cafe01 "), words


def test_dstrain_train_trials_rendezvous_across_the_hosts(dstrain, tmp_path):
    # Two launchers (node 0 here, node 1 through the remote command) make
    # one 2-rank job of each trial.
    config = write_config(
        tmp_path,
        {"start_profile_step": 1, "end_profile_step": 2,
         "max_train_micro_batch_size_per_gpu": 2, "num_tuning_micro_batch_sizes": 2},
        zero_optimization={"stage": 2},
    )
    run([dstrain, "autotune", "--config", config, "--model", MODEL,
         *hostfile_options(tmp_path)], tmp_path)
    got = results(tmp_path)
    assert [t["name"] for t in got["trials"]] == ["z2_mbs1_gas1", "z2_mbs2_gas1"]
    for t in got["trials"]:
        assert t["ran"] and "failure" not in t and t["dp"] == 2, t
        metric = json.loads((tmp_path / "autotuning_exps" / t["name"] / "metric.json").read_text())
        batch = t["train_micro_batch_size_per_gpu"] * 2  # both hosts' ranks took part
        assert metric["throughput"] == pytest.approx(batch / (metric["latency"] / 1000), rel=1e-6)


@pytest.mark.parametrize("text,message", [
    ("a slots=1\nb slots=2\n", "b has 2 slots, the hosts before it 1"),
    ("a slots=1\na slots=1\n", "host a is listed twice"),
    ("a slots=two\n", 'expected "HOST slots=N"'),
    ("# nobody\n", "lists no host"),
])
def test_a_bad_hostfile_is_named(dstrain, tmp_path, text, message):
    config = write_config(tmp_path, {})
    proc = run([dstrain, "autotune", "--config", config, "--model", MODEL,
                *hostfile_options(tmp_path, text)], tmp_path, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = run([dstrain, "autotune", "--config", config, "--model", MODEL, "--world-size", "3",
                *hostfile_options(tmp_path)], tmp_path, check=False)
    assert proc.returncode == 2 and "--world-size 3 but the hostfile lists 2 ranks" in proc.stderr


def test_a_host_that_cannot_be_reached_fails_the_trial_at_once(dstrain, tmp_path):
    # The stand-in ssh refuses host "down" as ssh does; node 0's ranks would
    # otherwise wait for the missing ranks until the timeout.
    options = hostfile_options(tmp_path, "node0 slots=1\ndown slots=1\n")
    (tmp_path / "fake_ssh").write_text(
        'if [ "$1" = down ]; then echo "ssh: connect to host down port 22: Connection refused"'
        ' >&2; exit 255; fi\n' + FAKE_SSH)
    config = write_config(tmp_path, {"max_train_micro_batch_size_per_gpu": 1},
                          zero_optimization={"stage": 0})
    proc = run([dstrain, "autotune", "--config", config, "--model", MODEL, *options], tmp_path,
               check=False)
    assert proc.returncode == 1 and "no trial was measured" in proc.stderr, proc.stderr
    assert ("failed: the launcher on down exited with status 255: ssh: connect to host down "
            "port 22: Connection refused") in proc.stdout, proc.stdout
