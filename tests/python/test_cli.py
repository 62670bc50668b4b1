"""The `dstrain` command driven as a user would: report, version, a tiny
training job, its errors and exit codes, checkpoint resume and Ctrl-C.

Needs $DSTRAIN_BUILD_DIR (a CMake build holding the `dstrain` binary); skips
when it is unset."""

import json
import os
import pathlib
import re
import signal
import subprocess
import threading

import pytest

TIMEOUT = 300  # seconds for any one dstrain call

TINY_MODEL = {
    "type": "gpt",
    "vocab_size": 256,
    "n_ctx": 16,
    "n_layer": 1,
    "n_head": 2,
    "d_model": 32,
    "seed": 7,
}


def tiny_config(total_num_steps="auto"):
    return {
        "train_batch_size": 8,
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
        "scheduler": {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": total_num_steps,
                "warmup_num_steps": 2,
                "warmup_type": "linear",
            },
        },
        "gradient_clipping": 1.0,
        "steps_per_print": 5,
    }


# A small, very regular text: a byte-level model learns it within a few steps.
TEXT = "".join(
    f"the quick brown fox {i % 7} jumps over the lazy dog number {i % 5}.\n" for i in range(400)
)


@pytest.fixture(scope="module")
def dstrain():
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    if not value:
        pytest.skip("DSTRAIN_BUILD_DIR is not set (point it at a CMake build of dstrain)")
    binary = pathlib.Path(value) / "dstrain"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"{binary} is missing: build the dstrain_cli target")
    return binary


@pytest.fixture
def job(tmp_path):
    """Writes the tiny model, config and text file; returns their paths."""
    paths = {
        "model": tmp_path / "model.json",
        "config": tmp_path / "ds_config.json",
        "fixed_config": tmp_path / "ds_config_fixed.json",
        "data": tmp_path / "text.txt",
    }
    paths["model"].write_text(json.dumps(TINY_MODEL))
    paths["config"].write_text(json.dumps(tiny_config()))
    paths["fixed_config"].write_text(json.dumps(tiny_config(total_num_steps=20)))
    paths["data"].write_text(TEXT)
    return paths


def run(binary, *args):
    return subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT
    )


def train_args(job, config="config", steps=20, *extra):
    return (
        "train", "--config", job[config], "--model", job["model"], "--data", job["data"],
        "--steps", steps, "--eval-interval", 10, "--eval-batches", 4, *extra,
    )


def final_line(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("final:")]
    assert len(lines) == 1, stdout
    return lines[0]


def validation_losses(stdout):
    """(first, last) validation loss from the summary line."""
    match = re.search(r"validation loss ([\d.]+) \(step \d+\) -> ([\d.]+) \(step \d+\)", stdout)
    assert match, stdout
    return float(match.group(1)), float(match.group(2))


# ---------------------------------------------------------------------------
# version, help, report
# ---------------------------------------------------------------------------


def test_version_prints_the_library_version(dstrain):
    result = run(dstrain, "--version")
    assert result.returncode == 0, result.stderr
    assert re.search(r"dstrain \d+\.\d+\.\d+", result.stdout), result.stdout


def test_help_lists_the_commands(dstrain):
    result = run(dstrain, "--help")
    assert result.returncode == 0, result.stderr
    for command in ("train", "report"):
        assert command in result.stdout


def test_report_shows_build_and_machine(dstrain):
    result = run(dstrain, "report")
    assert result.returncode == 0, result.stderr
    for field in ("version", "build type", "compiler", "cores", "features", "avx2",
                  "compiled for", "OpenBLAS", "threads", "OpenMP", "CUDA compiled in",
                  "NCCL compiled in", "devices", "kernel backend", "NVMe I/O engine",
                  "CPU-Adam path",
                  "default corpus"):
        assert field in result.stdout, f"report lacks {field!r}:\n{result.stdout}"


def test_report_json_is_the_build_info(dstrain):
    result = run(dstrain, "report", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["blas"]["library"] == "OpenBLAS"
    assert isinstance(info["cuda"]["devices"], list)
    # A device is named, or why none is seen (no CUDA build, no plugin, no driver, no device).
    assert info["cuda"]["devices"] or info["cuda"]["why_no_device"]
    if info["cuda"]["compiled"] and not info["cuda"]["devices"]:
        assert "CUDA" in info["cuda"]["why_no_device"] or "plugin" in info["cuda"]["why_no_device"]
    # The CUDA kernel backend's table loads from a CUDA build's plugin without a device.
    if info["cuda"]["compiled"]:
        assert "kernel table is complete" in info["cuda"]["kernel_backend"], info["cuda"]
    else:
        assert info["cuda"]["kernel_backend"].startswith("not available"), info["cuda"]
    assert info["gemm"]["backend"] in ("oneDNN", "OpenBLAS") and info["gemm"]["target"]
    assert info["gemm"]["bf16_compute"] in ("bf16", "fp32") and info["gemm"]["bf16_compute_reason"]
    assert info["gemm"]["elementwise"] in ("avx512", "avx2")
    assert {"version", "compiler", "build_type", "cpu", "openmp", "default_corpus"} <= info.keys()


# ---------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------


def test_tiny_job_trains_and_prints_a_summary(dstrain, job):
    result = run(dstrain, *train_args(job))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # Not a terminal: one plain line every steps_per_print (5) steps and every eval.
    for step in (5, 10, 15, 20):
        assert re.search(rf"^step {step}/20  loss [\d.]+  lr ", out, re.M), out
    assert re.search(r"^step 10/20  val loss [\d.]+$", out, re.M), out
    assert re.search(r"^summary: 20 steps \(0 -> 20\) in .*tok/s mean$", out, re.M), out
    assert final_line(out).startswith("final: step 20  loss ")
    first, last = validation_losses(out)
    assert last < first - 0.5, f"validation loss did not fall: {first} -> {last}"


@pytest.mark.parametrize("steps", [1, 10])
def test_the_built_in_job_accepts_any_step_count(dstrain, steps):
    """The default job's warm-up (100 steps) shrinks to a third of a shorter
    run: `bash scripts/setup.sh --steps 10` works."""
    result = run(dstrain, "train", "--steps", str(steps), "--quiet", "--eval-batches", "1")
    assert result.returncode == 0, result.stderr
    assert f"final: step {steps}" in result.stdout, result.stdout


def test_save_dir_is_checked_before_the_first_step(dstrain, job, tmp_path):
    """An unusable --save fails at once, not after the whole run."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = run(dstrain, *train_args(job, "config", 20), "--save", str(not_a_dir / "ckpt"))
    assert result.returncode == 1, result.stdout
    assert f"--save {not_a_dir / 'ckpt'}: cannot create the directory" in result.stderr
    assert not re.search(r"^step \d", result.stdout, re.M), result.stdout  # nothing trained
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        result = run(dstrain, *train_args(job, "config", 20), "--save", str(disk))
        assert result.returncode == 1, result.stdout
        assert "MiB free, but one checkpoint of this rank needs about" in result.stderr
        assert not re.search(r"^step \d", result.stdout, re.M), result.stdout
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_memory_status_prints_rank_0s_memory_at_the_start_and_every_n_steps(dstrain, job):
    """--memory-status N: DeepSpeed's see_memory_usage, per category (now/peak),
    the process's RSS and the machine's available memory."""
    result = run(dstrain, *train_args(job, "config", 4, "--memory-status", 2))
    assert result.returncode == 0, result.stderr
    lines = re.findall(r"^step (\d+) memory \(MiB, now/peak\): (.*)$", result.stdout, re.M)
    assert [int(step) for step, _ in lines] == [0, 2, 4], result.stdout
    for _, text in lines:
        assert re.search(r"optimizer_state [\d.]+/[\d.]+ .*\| total [\d.]+/[\d.]+ \| "
                         r"RSS [\d.]+/[\d.]+ \| system available [\d.]+ of [\d.]+$", text), text


def test_quiet_prints_only_the_summary(dstrain, job):
    result = run(dstrain, *train_args(job, "config", 10, "--quiet"))
    assert result.returncode == 0, result.stderr
    assert not re.search(r"^step ", result.stdout, re.M), result.stdout
    assert "final: step 10" in result.stdout


def test_resume_from_a_checkpoint_matches_the_uninterrupted_run(dstrain, job, tmp_path):
    # The schedule length is fixed in the config, so that --steps 10 and
    # --steps 20 train on the same LR curve.
    ckpt = tmp_path / "ckpt"
    whole = run(dstrain, *train_args(job, "fixed_config", 20))
    assert whole.returncode == 0, whole.stderr

    first = run(dstrain, *train_args(job, "fixed_config", 10, "--save", ckpt))
    assert first.returncode == 0, first.stderr
    assert (ckpt / "latest").read_text().strip() == "global_step10"
    assert f"checkpoint: {ckpt / 'global_step10'}" in first.stdout

    resumed = run(dstrain, *train_args(job, "fixed_config", 20, "--load", ckpt))
    assert resumed.returncode == 0, resumed.stderr
    assert "summary: 10 steps (10 -> 20)" in resumed.stdout
    assert final_line(resumed.stdout) == final_line(whole.stdout)


def test_resume_by_tag_from_a_periodic_save(dstrain, job, tmp_path):
    ckpt = tmp_path / "ckpt"
    whole = run(dstrain, *train_args(job, "config", 20, "--save", ckpt, "--save-interval", 10))
    assert whole.returncode == 0, whole.stderr
    assert (ckpt / "global_step10").is_dir() and (ckpt / "global_step20").is_dir()

    resumed = run(dstrain, *train_args(job, "config", 20, "--load", ckpt, "--tag", "global_step10"))
    assert resumed.returncode == 0, resumed.stderr
    assert final_line(resumed.stdout) == final_line(whole.stdout)


def test_ctrl_c_finishes_the_step_saves_and_exits_130(dstrain, job, tmp_path):
    ckpt = tmp_path / "ckpt"
    args = train_args(job, "config", 100000, "--save", ckpt)
    with subprocess.Popen([str(dstrain), *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        watchdog = threading.Timer(TIMEOUT, process.kill)  # the line loop has no timeout
        watchdog.start()
        try:
            for line in process.stdout:
                if line.startswith("step 5/"):
                    process.send_signal(signal.SIGINT)
                    break
            stdout, stderr = process.communicate(timeout=TIMEOUT)
        finally:
            watchdog.cancel()
            if process.poll() is None:
                process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted after step" in stderr
    latest = (ckpt / "latest").read_text().strip()
    assert re.fullmatch(r"global_step\d+", latest)
    assert f"checkpoint: {ckpt / latest}" in stdout


# ---------------------------------------------------------------------------
# errors and exit codes
# ---------------------------------------------------------------------------


def test_malformed_config_exits_2_naming_the_file(dstrain, job, tmp_path):
    bad = tmp_path / "broken_config.json"
    bad.write_text('{"train_batch_size": 8,,}')
    result = run(dstrain, "train", "--config", bad, "--model", job["model"],
                 "--data", job["data"], "--steps", 5)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("dstrain: error: "), result.stderr
    assert str(bad) in result.stderr


def test_missing_data_file_fails_naming_it(dstrain, job, tmp_path):
    missing = tmp_path / "no_such_text.txt"
    result = run(dstrain, "train", "--config", job["config"], "--model", job["model"],
                 "--data", missing, "--steps", 5)
    assert result.returncode != 0
    assert str(missing) in result.stderr, result.stderr
    assert "No such file" in result.stderr


def test_seq_len_longer_than_the_context_exits_2(dstrain, job):
    result = run(dstrain, *train_args(job, "config", 5, "--seq-len", 17))
    assert result.returncode == 2, result.stderr
    assert "n_ctx 16" in result.stderr


@pytest.mark.parametrize("args", [
    ("train", "--tag", "global_step1"),     # --tag needs --load
    ("train", "--steps", "0"),               # not a positive number
    ("train", "--no-such-option"),
    (),                                      # a subcommand is required
])
def test_usage_errors_exit_2(dstrain, args):
    result = run(dstrain, *args)
    assert result.returncode == 2, (args, result.stdout, result.stderr)


@pytest.mark.parametrize("command,typed,meant", [
    ("train", "--stpes", "--steps"),              # a transposition
    ("train", "--sav-interval=2", "--save-interval"),
    ("estimate", "--modle", "--model"),
    ("launch", "--nproc-per-nod", "--nproc-per-node"),
])
def test_an_unknown_option_names_the_nearest(dstrain, command, typed, meant):
    result = run(dstrain, command, typed, *(["--", "true"] if command == "launch" else []))
    assert result.returncode == 2, result.stderr
    assert f"{typed.split('=')[0]}: did you mean {meant}?" in result.stderr, result.stderr
    assert f"(see dstrain {command} --help)" in result.stderr


COMMANDS = [["train"], ["estimate"], ["generate"], ["eval"], ["tokenize"], ["ckpt", "inspect"],
            ["ckpt", "export"], ["io-probe"], ["comm-bench"], ["autotune"], ["report"],
            ["launch"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_commands_help_ends_with_an_example_of_its_own_options(dstrain, command):
    """Each example line runs a dstrain command whose options that command has."""
    help_text = run(dstrain, *command, "--help").stdout
    assert "Example" in help_text, help_text
    examples = help_text.split("Example", 1)[1].splitlines()[1:]
    helps = {}
    for line in examples:
        words = line.split("#")[0].split()
        while "dstrain" in words:  # dstrain launch ... -- dstrain train ...: each invocation
            words = words[words.index("dstrain") + 1:]
            sub = words[:2] if words[:1] == ["ckpt"] else words[:1]
            rest = words[len(sub):]
            own = rest[:rest.index("dstrain")] if "dstrain" in rest else rest
            options = [w.split("=")[0] for w in own if w.startswith("--") and w != "--"]
            key = " ".join(sub)
            if key not in helps:
                # the options' part, not the example itself
                helps[key] = run(dstrain, *sub, "--help").stdout.split("\nExample")[0]
            for option in options:
                assert re.search(rf"(^|[ ,]){re.escape(option)}\b", helps[key], re.M), \
                    (line, option)
            words = rest


def test_an_unknown_option_far_from_any_gets_no_guess(dstrain):
    result = run(dstrain, "train", "--bogusxyz")
    assert result.returncode == 2 and "--bogusxyz" in result.stderr
    assert "did you mean" not in result.stderr


def test_a_model_too_large_for_the_host_names_the_bytes_and_the_fix(dstrain, tmp_path):
    with open("/proc/sys/vm/overcommit_memory") as f:
        if f.read().strip() == "1":  # every allocation succeeds; the test would page 146 GiB in
            pytest.skip("vm.overcommit_memory = 1: an impossible allocation is not refused")
    model = tmp_path / "huge.json"
    # ~39 G parameters: 146 GiB of fp32 weights, more than any CI host has.
    model.write_text(json.dumps({"type": "gpt", "vocab_size": 50304, "block_size": 1024,
                                 "n_embd": 8192, "n_layer": 48, "n_head": 64}))
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps(tiny_config()))
    result = run(dstrain, "train", "--config", config, "--model", model, "--steps", 10)
    assert result.returncode != 0
    assert "out of memory: cannot allocate 145.59 GiB for parameters in host memory" in \
        result.stderr, result.stderr
    assert "available" in result.stderr and "dstrain estimate" in result.stderr, result.stderr
