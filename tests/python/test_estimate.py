"""`dstrain estimate` prints exactly the per-rank model-state bytes a run measures."""
import json
import os
import subprocess

import pytest

import test_data_parallel as dp_tests


@pytest.fixture(scope="module")
def cli(build_dir):
    path = os.path.join(build_dir, "dstrain")
    assert os.path.exists(path), f"{path} is missing"
    return path


def estimate(cli, cfg, model, world_size):
    out = subprocess.run([cli, "estimate", "--config", str(cfg), "--model", str(model),
                          "--world-size", str(world_size), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("stage,world", [(0, 2), (1, 2), (1, 4)])
def test_estimate_equals_measured_memory(tmp_path, cli, stage, world):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, world, f"est{stage}{world}")
    est = estimate(cli, cfg, model, world)
    predicted = next(s for s in est["stages"] if s["stage"] == stage)
    assert predicted["supported"]
    tool = os.path.join(os.environ["DSTRAIN_BUILD_DIR"], "tests", "dst_dp_tool")
    for r in dp_tests.run_ranks(tool, cfg, model, world):
        mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
        assert r["metrics"]["num_parameters"] == est["num_parameters"]
        assert mem["parameters"] == predicted["parameters_bytes"]
        assert mem["gradients"] == predicted["gradients_bytes"]
        assert mem["optimizer_state"] == predicted["optimizer_state_bytes"]


@pytest.mark.parametrize("world,optimizer", [(2, "OneBitAdam"), (3, "OneBitAdam"),
                                              (2, "ZeroOneAdam"), (3, "OneBitLamb")])
def test_estimate_counts_one_bit_adams_error_feedback(tmp_path, cli, world, optimizer):
    """Each tensor padded to world x lcm(world, 8) for the worker's error, a
    world-th of that for the server's (and 0/1 Adam's accumulator): optimizer
    state, to the byte."""
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, world, f"onebit{world}")
    config = json.loads(cfg.read_text())
    params = {"var_freeze_step": 1} if optimizer == "ZeroOneAdam" else {"freeze_step": 2}
    config["optimizer"] = {"type": optimizer, "params": params}
    cfg.write_text(json.dumps(config))
    predicted = next(s for s in estimate(cli, cfg, model, world)["stages"] if s["stage"] == 0)
    assert predicted["supported"]
    tool = os.path.join(os.environ["DSTRAIN_BUILD_DIR"], "tests", "dst_dp_tool")
    for r in dp_tests.run_ranks(tool, cfg, model, world, steps=3):
        mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
        assert mem["optimizer_state"] == predicted["optimizer_state_bytes"]
        assert mem["optimizer_state"] > 8 * r["metrics"]["num_parameters"]


# ZeRO-Offload on a device (the guarded stand-in): the host copy of the
# reduced gradients, fp32's master weights beside the state on the host, the
# NVMe buffers (counted as offload) — the layout's model state to the byte.
@pytest.mark.test_hooks
@pytest.mark.parametrize("stage,world,precision,optimizer,params", [
    (2, 1, None, "cpu", None), (1, 2, "bf16", "cpu", None), (1, 1, None, "cpu", None),
    (3, 1, None, "cpu", "cpu"), (2, 1, None, "nvme", None)])
def test_estimate_counts_zero_offload_host_buffers_on_a_device(tmp_path, cli, stage, world,
                                                               precision, optimizer, params):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, world, "offload")
    config = json.loads(cfg.read_text())
    config["dstrain"]["device"] = "cuda"
    zero = config["zero_optimization"]
    zero["offload_optimizer"] = ({"device": "cpu", "pin_memory": True} if optimizer == "cpu" else
                                 {"device": "nvme", "nvme_path": str(tmp_path)})
    if params:
        zero["offload_param"] = {"device": params, "pin_memory": True}
    if precision:
        config[precision] = {"enabled": True}
    cfg.write_text(json.dumps(config))
    predicted = estimate(cli, cfg, model, world)["layouts"][0]["stages"][0]["model_state_bytes"]
    tool = os.path.join(os.environ["DSTRAIN_BUILD_DIR"], "tests", "dst_dp_tool")
    for r in dp_tests.run_ranks(tool, cfg, model, world, {"DSTRAIN_TEST_DEVICE": "guarded"},
                                steps=2):
        mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
        assert mem["device"] > 0  # it ran on the stand-in's device memory
        measured = sum(mem[k] for k in ("parameters", "gradients", "optimizer_state", "offload"))
        assert measured == predicted, mem


def test_estimate_reports_an_impossible_layout(tmp_path, cli):
    cfg = tmp_path / "fixed.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8}))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(dp_tests.MODEL))
    out = subprocess.run([cli, "estimate", "--config", str(cfg), "--model", str(model),
                          "--world-size", "4"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "data-parallel size 4" in out.stderr


def gpu_activation_bytes(tmp_path, cli, spec, micro, env=None):
    """The first stage's activation bytes of `spec` on "cpu" and "cuda"."""
    model = tmp_path / "model.json"
    model.write_text(json.dumps(spec))
    activations = {}
    for device in ("cpu", "cuda"):
        cfg = tmp_path / f"{device}.json"
        cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": micro,
                                   "dstrain": {"device": device, "num_threads": 1}}))
        out = subprocess.run([cli, "estimate", "--config", str(cfg), "--model", str(model),
                              "--world-size", "1", "--json"], capture_output=True, text=True,
                             timeout=60, env=dict(os.environ, **(env or {})))
        assert out.returncode == 0, out.stderr
        activations[device] = json.loads(out.stdout)["layouts"][0]["stages"][0]["activation_bytes"]
    return activations


def test_estimate_on_a_gpu_counts_attention_probabilities_by_the_chosen_kernel(tmp_path, cli):
    """With dstrain.device "cuda" the fused attention saves no B x H x T x T
    probabilities (nor sizes the backward's [threads, T, T] scratch, which
    counts where a block's scratch is the model's largest): the estimate drops
    those bytes where the fused kernel runs — BLOOM's layout, GPT's with
    DSTRAIN_CUDA_ATTENTION=fused, or GPT's whose probabilities would pass
    1 GiB a layer — and keeps them, as the CPU does, where GPT's layout takes
    the batched-GEMM attention."""
    gpt = dict(dp_tests.MODEL)  # 2 layers, 2 heads, d_model 32, context 16
    B, H, T, layers = 2, gpt["n_head"], gpt["n_ctx"], gpt["n_layer"]

    def dropped(spec, micro=B, env=None):
        activations = gpu_activation_bytes(tmp_path, cli, spec, micro, env)
        return activations["cpu"] - activations["cuda"]

    def within(got, probabilities, scratch):
        return probabilities <= got <= probabilities + scratch

    probabilities, scratch = layers * B * H * T * T * 4, T * T * 4
    assert dropped(gpt) == 0
    assert within(dropped(gpt, env={"DSTRAIN_CUDA_ATTENTION": "fused"}), probabilities, scratch)
    bloom = {"type": "bloom", "vocab_size": 256, "hidden_size": 32, "n_layer": layers,
             "n_head": H, "seq_length": T, "seed": 15}
    assert within(dropped(bloom), probabilities, scratch)
    # 2 heads x 8192^2 x 4 bytes x micro-batch 4 = 2 GiB a layer: the fused kernel.
    long, Tl = dict(gpt, n_ctx=8192), 8192
    assert within(dropped(long, micro=4), layers * 4 * H * Tl * Tl * 4, Tl * Tl * 4)
    assert dropped(long, micro=4, env={"DSTRAIN_CUDA_ATTENTION": "gemm"}) == 0
