"""`dstrain.device "cuda"` on the guarded stand-in (DSTRAIN_TEST_DEVICE=guarded):
the device path — every buffer of the model and the optimizer, the staged
batches, the step — runs with that memory closed to the host except inside
the (CPU) kernels, their copies and the collectives, so a host-side touch of
device memory kills the run with a message naming it. The kernels are the
CPU's, so the run must also be the CPU run bit for bit: the same printed
losses and the same checkpoint bytes, which a CPU engine then resumes."""
import json
import os
import pathlib
import re
import subprocess

import pytest

import test_cli as cli_tests
from test_cli import dstrain, job  # noqa: F401  (fixtures)
import test_data_parallel as dp_tests

# Every test here drives a test hook (DSTRAIN_TEST_DEVICE or DSTRAIN_INJECT_*).
pytestmark = pytest.mark.test_hooks


def run(binary, *args, standin=True):
    env = dict(os.environ)
    env.pop("DSTRAIN_TEST_DEVICE", None)
    if standin:
        env["DSTRAIN_TEST_DEVICE"] = "guarded"
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=cli_tests.TIMEOUT, env=env)


def write_config(tmp_path, name, device, stage, micro=8, wire=None, precision=None, offload=None,
                 params=None):
    config = cli_tests.tiny_config(total_num_steps=20)
    config["train_micro_batch_size_per_gpu"] = micro
    del config["gradient_accumulation_steps"]
    config["zero_optimization"] = {"stage": stage, "overlap_comm": True,
                                   "reduce_bucket_size": 5000}
    if stage == 3:  # every tensor gathered per layer (the tiny ones would stay whole)
        config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    if wire:
        config["communication_data_type"] = wire
    if precision:  # "bf16", or "bf16-layernorm": with that module type kept in fp32
        kind, _, module = precision.partition("-")
        config[kind] = {"enabled": True}
        if module:
            config[kind][kind + "_override_modules"] = [module]
    if offload == "cpu":
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    elif offload == "nvme":
        swap = tmp_path / ("swap_" + name)
        swap.mkdir()
        config["zero_optimization"]["offload_optimizer"] = {"device": "nvme",
                                                           "nvme_path": str(swap)}
    if params == "cpu":  # offload_param: the parameter shard in host memory
        config["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    elif params == "nvme":  # ... and beyond its first 64 elements on NVMe
        swap = tmp_path / ("params_" + name)
        swap.mkdir()
        config["zero_optimization"]["offload_param"] = {
            "device": "nvme", "nvme_path": str(swap), "max_in_cpu": 64, "buffer_count": 3}
    config["dstrain"] = {"device": device}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def train_both_and_compare(dstrain, job, tmp_path, steps):  # noqa: F811
    """One rank with job["cpu"] on the CPU (saved in c/) and job["dev"] on the
    stand-in (saved in d/), `steps` steps: the same final line, the same bytes."""
    cpu = run(dstrain, *cli_tests.train_args(job, "cpu", steps, "--save", tmp_path / "c"),
              standin=False)
    assert cpu.returncode == 0, cpu.stderr
    dev = run(dstrain, *cli_tests.train_args(job, "dev", steps, "--save", tmp_path / "d"))
    assert dev.returncode == 0, dev.stderr + dev.stdout
    assert cli_tests.final_line(dev.stdout) == cli_tests.final_line(cpu.stdout)
    files = checkpoint_bytes(tmp_path / "d" / f"global_step{steps}")
    assert files and files == checkpoint_bytes(tmp_path / "c" / f"global_step{steps}")


def checkpoint_bytes(directory):
    """Every tensor file of a checkpoint tag, by name."""
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(directory).glob("*.safetensors"))}


# ZeRO 0-3 in fp32/fp16/bf16, and ZeRO-Offload: the optimizer state and the
# master weights on the host (cpu) or on NVMe, the device holding the rest.
@pytest.mark.parametrize("stage,precision,offload", [
    (0, None, None), (1, None, None), (2, None, None), (3, None, None), (0, "bf16", None),
    (3, "fp16", None), (1, None, "cpu"), (2, "bf16", "cpu"), (3, "bf16", "nvme"),
    (2, "bf16-layernorm", None), (1, "fp16-layernorm", "cpu")])
def test_one_rank_on_the_device_is_the_cpu_run_and_its_checkpoint_resumes_on_the_cpu(
        dstrain, job, tmp_path, stage, precision, offload):  # noqa: F811
    job["cpu"] = write_config(tmp_path, "cpu.json", "cpu", stage, precision=precision,
                              offload=offload)
    job["dev"] = write_config(tmp_path, "dev.json", "cuda", stage, precision=precision,
                              offload=offload)
    train_both_and_compare(dstrain, job, tmp_path, 10)

    whole = run(dstrain, *cli_tests.train_args(job, "cpu", 20), standin=False)
    assert whole.returncode == 0, whole.stderr
    resumed = run(dstrain, *cli_tests.train_args(job, "cpu", 20, "--load", tmp_path / "d"),
                  standin=False)
    assert resumed.returncode == 0, resumed.stderr
    assert cli_tests.final_line(resumed.stdout) == cli_tests.final_line(whole.stdout)


# The LLaMA and BLOOM layers on the device: grouped-query attention with
# rotary embeddings, RMSNorm, the SiLU gate and an untied head; ALiBi with the
# interleaved fused projection and the embedding LayerNorm.
@pytest.mark.parametrize("family", ["llama", "bloom"])
def test_llama_and_bloom_on_the_device_are_the_cpu_run(dstrain, job, tmp_path, family):  # noqa: F811
    model = {"llama": {"type": "llama", "vocab_size": 256, "hidden_size": 32,
                       "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "max_position_embeddings": 16, "seed": 7},
             "bloom": {"type": "bloom", "vocab_size": 256, "hidden_size": 32, "n_layer": 1,
                       "n_head": 2, "seq_length": 16, "seed": 7}}[family]
    job["model"].write_text(json.dumps(model))
    job["cpu"] = write_config(tmp_path, "cpu.json", "cpu", 1, precision="bf16")
    job["dev"] = write_config(tmp_path, "dev.json", "cuda", 1, precision="bf16")
    train_both_and_compare(dstrain, job, tmp_path, 6)


# ZeRO-Offload's update in many chunks (1 KiB here): each chunk's gradients
# come down into a host staging buffer while the previous chunk is updated,
# its 16-bit weights go up while the next one is. The stand-in runs an
# asynchronous copy only at the next kernel, copy or wait for it, so a host
# read of a download before its wait, or a write into an upload's buffer
# before it has left, changes the bits.
@pytest.mark.parametrize("stage,precision", [(1, None), (2, "bf16"), (1, "fp16-layernorm")])
def test_offloaded_updates_stream_in_chunks_and_are_the_cpu_run(
        dstrain, job, tmp_path, monkeypatch, stage, precision):  # noqa: F811
    monkeypatch.setenv("DSTRAIN_TEST_DEVICE_CHUNK_BYTES", "1024")
    for name, device in (("cpu", "cpu"), ("dev", "cuda")):
        job[name] = write_config(tmp_path, name + ".json", device, stage, precision=precision,
                                 offload="cpu")
    cpu = run(dstrain, *cli_tests.train_args(job, "cpu", 6), standin=False)
    assert cpu.returncode == 0, cpu.stderr
    dev = run(dstrain, *cli_tests.train_args(job, "dev", 6))
    assert dev.returncode == 0, dev.stderr + dev.stdout
    assert cli_tests.final_line(dev.stdout) == cli_tests.final_line(cpu.stdout)


# ZeRO-Infinity on a device: the parameter shard in host memory (cpu) or
# mostly on NVMe (nvme, 64 elements kept), written by CPU-Adam on the host;
# each layer's gather copies this rank's pieces up before the device group's
# broadcasts. The CPU run's bits, and its checkpoint bytes.
@pytest.mark.parametrize("precision,offload,params,ranks", [
    (None, "cpu", "cpu", 1), ("bf16", "cpu", "cpu", 1), ("bf16", "nvme", "nvme", 1),
    (None, "cpu", "nvme", 1), ("bf16", "cpu", "cpu", 2), ("fp16-layernorm", "cpu", "nvme", 2)])
def test_offloaded_parameters_on_the_device_are_the_cpu_run(
        dstrain, job, tmp_path, precision, offload, params, ranks):  # noqa: F811
    for name, device in (("cpu", "cpu"), ("dev", "cuda")):
        job[name] = write_config(tmp_path, name + ".json", device, 3, 4, precision=precision,
                                 offload=offload, params=params)
    if ranks == 2:
        launch_both_and_compare(dstrain, job, tmp_path)
    else:
        train_both_and_compare(dstrain, job, tmp_path, 6)


def launch_both_and_compare(dstrain, job, tmp_path, ranks=2):  # noqa: F811
    """`ranks` ranks with job["cpu"] on the CPU and job["dev"] on the stand-in,
    10 steps each saved at the end: the same final line, the same bytes."""
    outputs = {}
    for name, standin in (("cpu", False), ("dev", True)):
        launched = run(dstrain, "launch", "--nproc-per-node", str(ranks), "--master-port",
                       dp_tests.free_port(), "--", dstrain,
                       *cli_tests.train_args(job, name, 10, "--save", tmp_path / name),
                       standin=standin)
        assert launched.returncode == 0, launched.stderr + launched.stdout
        outputs[name] = launched.stdout
    assert cli_tests.final_line(outputs["dev"]) == cli_tests.final_line(outputs["cpu"])
    files = checkpoint_bytes(tmp_path / "dev" / "global_step10")
    assert len(files) >= 2  # the model and the ranks' shards
    assert files == checkpoint_bytes(tmp_path / "cpu" / "global_step10")


# ZeRO 1; ZeRO 2's partitioned gradients reduced in fp16; ZeRO 0's buckets
# all-reduced in bf16 (the wire conversions run on the device too); ZeRO 3's
# gathered bf16 shards; fp16 at ZeRO 2.
# Gradient compression: the codec runs on the host, each bucket copied down
# and its sum back up (top-k with error feedback at ZeRO 1, 1-bit at ZeRO 0).
@pytest.mark.parametrize("compression", [{"algorithm": "topk", "topk_ratio": 0.25},
                                         {"algorithm": "1bit"}], ids=["topk", "1bit"])
def test_compressed_gradients_on_the_device_are_the_cpu_run(
        dstrain, job, tmp_path, compression):  # noqa: F811
    stage = 1 if compression["algorithm"] == "topk" else 0
    for name, device in (("cpu", "cpu"), ("dev", "cuda")):
        config = json.loads(write_config(tmp_path, name + ".json", device, stage, 4).read_text())
        config["gradient_compression"] = dict(compression, enabled=True)
        (tmp_path / (name + ".json")).write_text(json.dumps(config))
        job[name] = tmp_path / (name + ".json")
    launch_both_and_compare(dstrain, job, tmp_path)


# ZeRO-Offload copies each owned gradient piece down during the backward,
# once it holds the step's sum (ZeRO 2: reduced to its owner; ZeRO 1: its
# bucket reduced, here over a bf16 wire); fp32's averaging and clipping
# (gradient_clipping 1.0), applied on the device after those copies, are
# replayed on the host copy in the same order.
@pytest.mark.parametrize("stage,wire,precision,offload", [
    (1, None, None, None), (2, "fp16", None, None), (0, "bf16", None, None),
    (3, None, "bf16", None), (2, None, "fp16", None), (2, None, "bf16", "cpu"),
    (2, None, None, "cpu"), (1, "bf16", None, "cpu"), (3, None, "bf16-layernorm", None)])
def test_two_data_parallel_ranks_on_the_device_are_the_cpu_run(
        dstrain, job, tmp_path, stage, wire, precision, offload):  # noqa: F811
    job["cpu"] = write_config(tmp_path, "cpu.json", "cpu", stage, 4, wire, precision, offload)
    job["dev"] = write_config(tmp_path, "dev.json", "cuda", stage, 4, wire, precision, offload)
    launch_both_and_compare(dstrain, job, tmp_path)


# Tensor parallelism (with sequence parallelism), the pipeline (1F1B,
# zero-bubble with recomputation, 16 bits at ZeRO 1, interleaved): tensor
# parallelism's activations cross ranks in device memory; so do the
# pipeline's activations, gradients and tied-embedding gradients, in
# exchanges over the device group (NCCL's grouped send/receive on a GPU),
# regrouped so that they cannot hang in stream order. The stand-in's device
# group matches them by order alone, as NCCL does (no tags), and refuses a
# lone send or receive; the compute waits for each exchange on its stream.
# ZeRO-Offload under the pipeline: the tied embedding's gradients are summed
# on the device after the backward copied them down, so that step takes the
# device's copy instead.
@pytest.mark.parametrize("layout", [
    {"tensor_parallel": {"tp_size": 2}},
    {"tensor_parallel": {"tp_size": 2, "sequence_parallel": True}},
    {"pipeline_parallel": {"pp_size": 2}},
    {"pipeline_parallel": {"pp_size": 2}, "pipeline": {"schedule": "zb-h1"},
     "activation_checkpointing": {"partition_activations": False,
                                  "recompute_granularity": "full"}},
    {"pipeline_parallel": {"pp_size": 2}, "bf16": {"enabled": True},
     "zero_optimization": {"stage": 1}},
    {"pipeline_parallel": {"pp_size": 2},
     "pipeline": {"schedule": "interleaved", "virtual_stages": 2}},
    {"pipeline_parallel": {"pp_size": 2},
     "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
    {"tensor_parallel": {"tp_size": 2, "sequence_parallel": True},
     "pipeline_parallel": {"pp_size": 2}, "bf16": {"enabled": True},
     "zero_optimization": {"stage": 1}},
], ids=["tp2", "tp2-sp", "pp2", "pp2-zb", "pp2-bf16-zero1", "pp2-interleaved", "pp2-zero2-offload",
        "tp2-pp2-bf16"])
def test_model_parallel_layouts_on_the_device_are_the_cpu_run(
        dstrain, job, tmp_path, layout):  # noqa: F811
    model = dict(cli_tests.TINY_MODEL, n_layer=4 if "pipeline" in layout and
                 "virtual_stages" in layout["pipeline"] else 2)
    job["model"].write_text(json.dumps(model))
    for name, device in (("cpu", "cpu"), ("dev", "cuda")):
        config = json.loads(write_config(tmp_path, name + ".json", device, 0, micro=4).read_text())
        config.update(layout)
        (tmp_path / (name + ".json")).write_text(json.dumps(config))
        job[name] = tmp_path / (name + ".json")
    ranks = layout.get("tensor_parallel", {}).get("tp_size", 1) * \
        layout.get("pipeline_parallel", {}).get("pp_size", 1)
    launch_both_and_compare(dstrain, job, tmp_path, ranks=ranks)


def test_memory_reports_say_what_lives_on_the_device(dstrain, job, tmp_path):  # noqa: F811
    """--memory-status on a device: of the total, the bytes in its memory; on
    the CPU no device part. ZeRO-Offload's state is host memory, and with
    offload_param ZeRO 3's parameter shard too."""
    def status(name, device, offload=None, standin=True, stage=1, params=None):
        job[name] = write_config(tmp_path, name + ".json", device, stage, offload=offload,
                                 params=params)
        result = run(dstrain, *cli_tests.train_args(job, name, 2, "--memory-status", 2),
                     standin=standin)
        assert result.returncode == 0, result.stderr
        lines = re.findall(r"^step 2 memory \(MiB, now/peak\): (.*)$", result.stdout, re.M)
        assert len(lines) == 1, result.stdout
        return lines[0]

    def mib(text, label):
        match = re.search(label + r" ([\d.]+)/([\d.]+)", text)
        assert match, text
        return float(match.group(1))

    assert "| on " not in status("cpu", "cpu", standin=False)
    resident = status("dev", "cuda")
    assert 0 < mib(resident, r"\| on guarded") <= mib(resident, r"\| total")
    offloaded = status("off", "cuda", offload="cpu")
    # The optimizer state (and masters) left the device.
    assert mib(offloaded, r"\| on guarded") < mib(resident, r"\| on guarded")
    # ZeRO 3: the parameter shard leaves the device too (tracked as host bytes).
    optimizer_only = status("z3", "cuda", offload="cpu", stage=3)
    infinity = status("z3p", "cuda", offload="cpu", stage=3, params="cpu")
    assert mib(infinity, r"\| on guarded") < mib(optimizer_only, r"\| on guarded")
    assert mib(infinity, r"\| total") == mib(optimizer_only, r"\| total")


def test_a_layout_the_device_does_not_train_yet_is_named(dstrain, job, tmp_path):  # noqa: F811
    config = json.loads(write_config(tmp_path, "off.json", "cuda", 1).read_text())
    config["zero_optimization"]["stage"] = 3
    config["zero_optimization"]["offload_param"] = {"device": "cpu"}
    (tmp_path / "off.json").write_text(json.dumps(config))
    job["off"] = tmp_path / "off.json"
    result = run(dstrain, *cli_tests.train_args(job, "off", 2))
    assert result.returncode == 2, result.stdout
    assert ('dstrain.device "cuda" with zero_optimization.offload_param but no '
            'offload_optimizer') in result.stderr
    assert "is not supported yet" in result.stderr


def test_a_cuda_device_this_machine_lacks_is_named(dstrain, job, tmp_path):  # noqa: F811
    job["dev"] = write_config(tmp_path, "dev.json", "cuda", 0)
    result = run(dstrain, *cli_tests.train_args(job, "dev", 2), standin=False)
    if result.returncode == 0:
        pytest.skip("this machine has a CUDA device: the run trained on it")
    assert 'dstrain.device "cuda"' in result.stderr, result.stderr


def test_an_unknown_standin_is_named(dstrain, job, tmp_path, monkeypatch):  # noqa: F811
    job["dev"] = write_config(tmp_path, "dev.json", "cuda", 0)
    monkeypatch.setenv("DSTRAIN_TEST_DEVICE", "gpu")
    env = dict(os.environ)
    result = subprocess.run([str(dstrain), *map(str, cli_tests.train_args(job, "dev", 2))],
                            capture_output=True, text=True, timeout=cli_tests.TIMEOUT, env=env)
    assert result.returncode != 0
    assert 'the only stand-in device is "guarded"' in result.stderr, result.stderr
