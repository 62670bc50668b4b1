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


CASES = [("topk", 0.01, False), ("topk", 0.01, True), ("1bit", None, False),
         ("2bit", None, False)]


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
