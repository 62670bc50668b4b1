"""gradient_compression at ZeRO 2 and 3: the sparse reduce-scatter (each piece
of staged gradients another rank owns is encoded with this rank's error
feedback and sent to the owner alone; the owner sums the decodings with its
own values).

The oracles: top-k with topk_ratio 1 sends every entry, so on two ranks the
owner's 0 + g0 + g1 is the plain reduction's sum bit for bit (and on four
ranks the same within fp32 rounding). The lossy settings: what each rank
sends is exactly the payloads the compression metrics count; every element
of the model is sent once per pass by every rank but its owner; the owner
receives exactly what its peer sent; the plain reduction's collectives are
gone; the ranks stay identical; the residual (the ranges a rank sends) is the
one extra optimizer-state buffer, in `dstrain estimate` too; the loss falls.
"""
import json

import pytest

import test_data_parallel as dp_tests
from test_grad_compression import CASES  # the codecs ZeRO 0/1 are checked with
from test_data_parallel import tool  # noqa: F401  (the fixture; build_dir is conftest's)

STEPS = 8


def run(tmp_path, tool, stage, name, compression=None, dp=2, accum=1, bf16=False):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, accum, dp, name, overlap=True,
                                    bucket=3_000)
    config = json.loads(cfg.read_text())
    if compression is not None:
        config["gradient_compression"] = compression
    if bf16:
        config["bf16"] = {"enabled": True}
    cfg.write_text(json.dumps(config))
    runs = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS, args=("--inspect", "1"))
    return runs, cfg, model


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("huffman", [False, True])
def test_top_k_of_everything_equals_the_plain_reduce_scatter(tmp_path, tool, stage, huffman):
    plain, _, _ = run(tmp_path, tool, stage, "plain")
    full, _, _ = run(tmp_path, tool, stage, "full",
                     {"algorithm": "topk", "topk_ratio": 1.0, "huffman_coding": huffman})
    for p, f in zip(plain, full):
        assert f["losses"] == p["losses"]
        assert f["param_norms"] == p["param_norms"]
        assert f["metrics"]["compression"]["buckets"] > 0


@pytest.mark.parametrize("stage,accum", [(2, 2), (3, 1)])
def test_four_ranks_and_accumulation_sum_every_peer(tmp_path, tool, stage, accum):
    plain, _, _ = run(tmp_path, tool, stage, "plain", dp=4, accum=accum)
    full, _, _ = run(tmp_path, tool, stage, "full", {"algorithm": "topk", "topk_ratio": 1.0},
                     dp=4, accum=accum)
    # The owner adds in rank order, the reduction in its own: fp32 rounding apart.
    assert dp_tests.relative_gap(full[0]["losses"], plain[0]["losses"]) < 1e-5
    for f in full:
        assert f["param_norms"] == full[0]["param_norms"]


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("algorithm,ratio,huffman", CASES)
def test_each_rank_sends_its_encodings_to_the_owners_alone(
        tmp_path, build_dir, tool, stage, algorithm, ratio, huffman):  # noqa: F811
    plain, _, _ = run(tmp_path, tool, stage, "plain")
    compression = {"algorithm": algorithm, "huffman_coding": huffman}
    if ratio is not None:
        compression["topk_ratio"] = ratio
    runs, cfg, model = run(tmp_path, tool, stage, "gc", compression)
    assert runs[0]["param_norms"] == runs[1]["param_norms"]
    assert runs[0]["losses"] != plain[0]["losses"]
    assert runs[0]["losses"][-1] < runs[0]["losses"][0]
    assert dp_tests.relative_gap(runs[0]["losses"], plain[0]["losses"]) < 0.15
    psi = runs[0]["metrics"]["num_parameters"]
    padded = -(-psi // 2) * 2
    passes = STEPS + 1  # the steps and --inspect's forward_backward
    totals = [r["metrics"]["compression"] for r in runs]
    # Every element goes once per pass from the rank that does not own it.
    assert sum(c["dense_bytes"] for c in totals) == passes * 4 * psi
    size_words = [0, 0]
    for rank, (r, p, c) in enumerate(zip(runs, plain, totals)):
        assert c["algorithm"] == algorithm and c["enabled"]
        comm = r["metrics"]["comm"]
        # What the rank sent is its payloads (and one size word per piece with Huffman).
        assert comm["send"]["bytes"] == c["payload_bytes"]
        if huffman:
            size_words[rank] = 4 * c["buckets"]
        expected_ratio = {"topk": 0.021, "1bit": 0.034, "2bit": 0.066}[algorithm]
        assert (c["payload_bytes"] - size_words[rank]) <= expected_ratio * c["dense_bytes"], c
        # The plain run's reductions to the owners are gone.
        assert comm.get("reduce", {}).get("bytes", 0) < p["metrics"]["comm"]["reduce"]["bytes"] / 100
        # The residual covers the half of the buffer the rank sends.
        plain_state = p["metrics"]["memory"]["optimizer_state"]["bytes"]
        assert r["metrics"]["memory"]["optimizer_state"]["bytes"] == plain_state + 4 * padded // 2
    # Each owner received exactly the payloads its peer sent.
    for rank in (0, 1):
        peer = 1 - rank
        assert totals[rank]["gathered_bytes"] == totals[peer]["payload_bytes"] - size_words[peer]
        assert runs[rank]["metrics"]["comm"]["recv"]["bytes"] == totals[peer]["payload_bytes"]
    estimate = dp_tests.estimate_memory(build_dir, cfg, model, 2)[stage]
    assert estimate["optimizer_state_bytes"] == \
        runs[0]["metrics"]["memory"]["optimizer_state"]["bytes"]


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_shards_receive_compressed_fp32_sums(tmp_path, tool, stage):
    plain, _, _ = run(tmp_path, tool, stage, "plain", bf16=True)
    gc, _, _ = run(tmp_path, tool, stage, "gc", {"algorithm": "2bit"}, bf16=True)
    assert gc[0]["param_norms"] == gc[1]["param_norms"]
    assert gc[0]["losses"][-1] < gc[0]["losses"][0]
    assert dp_tests.relative_gap(gc[0]["losses"], plain[0]["losses"]) < 0.1
    assert gc[0]["metrics"]["compression"]["payload_ratio"] < 0.066


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_warm_up_steps_reduce_uncompressed(tmp_path, tool, stage):
    """Deep Gradient Compression's warm-up: the first warmup_steps steps are
    the plain run's bit for bit; compression (and its counters) starts after."""
    warm = 3
    plain, _, _ = run(tmp_path, tool, stage, "plain")
    gc, _, _ = run(tmp_path, tool, stage, "gc",
                   {"algorithm": "topk", "topk_ratio": 0.01, "warmup_steps": warm})
    cold, _, _ = run(tmp_path, tool, stage, "cold", {"algorithm": "topk", "topk_ratio": 0.01})
    for g, p in zip(gc, plain):
        # The loss of step warm + 1 is computed from weights that only dense steps moved.
        assert g["losses"][:warm + 1] == p["losses"][:warm + 1]
        assert g["losses"][warm + 1:] != p["losses"][warm + 1:]
    assert gc[0]["param_norms"] == gc[1]["param_norms"]
    # The compressed passes: the steps after the warm-up and --inspect's pass.
    compressed = STEPS - warm + 1
    for g, c in zip(gc, cold):
        assert g["metrics"]["compression"]["buckets"] * (STEPS + 1) == \
            c["metrics"]["compression"]["buckets"] * compressed


def run_sgd(tmp_path, tool, stage, name, compression=None, momentum=0.9, accum=1, dp=2):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, accum, dp, name, overlap=True,
                                    bucket=3_000)
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "SGD", "params": {"lr": 0.05, "momentum": momentum}}
    config["gradient_clipping"] = 0.0  # momentum correction reduces velocities
    if compression is not None:
        config["gradient_compression"] = compression
    cfg.write_text(json.dumps(config))
    runs = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS, args=("--inspect", "1"))
    return runs, cfg, model


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_momentum_correction_moves_sgds_momentum_to_the_ranks(tmp_path, build_dir, tool, stage):
    """Deep Gradient Compression's momentum correction. Reduced plainly (the
    warm-up), each rank's velocity u = 0.9 u + g summed is momentum SGD on the
    summed gradient (the optimizer steps without momentum). With top-k of
    everything, momentum factor masking zeroes each velocity once it is sent:
    momentum-free SGD bit for bit. Compressed, the state is the residual and
    the velocity instead of the optimizer's momentum buffer, in the estimate too."""
    momentum_sgd, _, _ = run_sgd(tmp_path, tool, stage, "momentum")
    plain_sgd, _, _ = run_sgd(tmp_path, tool, stage, "plain", momentum=0.0)
    warm, _, _ = run_sgd(tmp_path, tool, stage, "warm",
                         {"algorithm": "2bit", "momentum_correction": True,
                          "warmup_steps": STEPS + 1})
    assert dp_tests.relative_gap(warm[0]["losses"], momentum_sgd[0]["losses"]) < 1e-5
    assert warm[0]["losses"] != plain_sgd[0]["losses"]
    masked, _, _ = run_sgd(tmp_path, tool, stage, "masked",
                           {"algorithm": "topk", "topk_ratio": 1.0, "momentum_correction": True})
    for m, p in zip(masked, plain_sgd):
        assert m["losses"] == p["losses"]
        assert m["param_norms"] == p["param_norms"]
    dgc, cfg, model = run_sgd(tmp_path, tool, stage, "dgc",
                              {"algorithm": "topk", "topk_ratio": 0.01,
                               "momentum_correction": True})
    assert dgc[0]["param_norms"] == dgc[1]["param_norms"]
    assert dgc[0]["losses"][-1] < dgc[0]["losses"][0]
    psi = dgc[0]["metrics"]["num_parameters"]
    padded = -(-psi // 2) * 2
    shard = padded if stage == 0 else padded // 2  # the momentum buffer it replaces
    residual = padded if stage <= 1 else padded // 2
    state = dgc[0]["metrics"]["memory"]["optimizer_state"]["bytes"]
    momentum_state = momentum_sgd[0]["metrics"]["memory"]["optimizer_state"]["bytes"]
    assert state == momentum_state - 4 * shard + 4 * residual + 4 * padded
    estimate = dp_tests.estimate_memory(build_dir, cfg, model, 2)[stage]
    assert estimate["optimizer_state_bytes"] == state


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_resumed_run_keeps_each_ranks_residual_and_velocity(tmp_path, tool, stage):
    """A checkpoint holds each rank's residual and velocity (its own state
    file): resumed in the same layout, top-k 1% with momentum correction
    continues bit for bit."""
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, 2, "dgc", overlap=True, bucket=3_000)
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}}
    config["gradient_clipping"] = 0.0
    config["gradient_compression"] = {"algorithm": "topk", "topk_ratio": 0.01,
                                      "momentum_correction": True}
    cfg.write_text(json.dumps(config))
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS,
                              args=["--ckpt", str(ckpt), "--save-at", "4", "--inspect", "1"])
    meta = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())
    assert sorted(e["rank"] for e in meta["own_states"]) == [0, 1]
    for e in meta["own_states"]:
        assert set(e["tensors"]) == {"grad_compression.residual", "grad_compression.velocity"}
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS,
                                 args=["--ckpt", str(ckpt), "--resume", "--inspect", "1"])
    for r, f in zip(resumed, full):
        assert r["load"]["status"] == "ok", r["load"]
        assert r["losses"] == f["losses"][4:]
        assert r["param_norms"] == f["param_norms"]


def test_momentum_correction_refusals(tmp_path, tool):
    cases = [({"type": "AdamW", "params": {"lr": 1e-3}}, 0, 1, "needs optimizer \"SGD\""),
             ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": True}}, 0, 1,
              "nesterov"),
             ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}, 2, 2,
              "gradient_accumulation_steps 2"),
             ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}, 0, 1,
              "gradient_clipping")]
    for optimizer, stage, accum, words in cases:
        cfg, model = dp_tests.write_job(tmp_path, stage, 2, accum, 2, "refused")
        config = json.loads(cfg.read_text())
        config["optimizer"] = optimizer
        config["gradient_compression"] = {"momentum_correction": True}
        if words != "gradient_clipping":
            config["gradient_clipping"] = 0.0
        cfg.write_text(json.dumps(config))
        outcomes = dp_tests.start_ranks(tool, cfg, model, 2, steps=1)
        for code, _, err in outcomes:
            assert code != 0 and "momentum_correction" in err and words in err, err
