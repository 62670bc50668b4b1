"""gradient_compression at ZeRO 0 and 1 on two ranks (top-k with and without
Huffman-coded indices, 1-bit, 2-bit, all with error feedback).

The oracle: top-k with topk_ratio 1 sends every entry, so the compressed
reduction must equal the plain one bit for bit (two ranks: 0 + g0 + g1 is the
all-reduce's g0 + g1). The lossy settings: the encoded bytes are the codec's
size exactly (a few per cent of the fp32 bucket), the all-gathers carry
exactly those payloads, the ranks keep identical parameters, the residual is
the one extra optimizer-state buffer `dstrain estimate` also counts, and the
loss still falls.
"""
import json
import math

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture; build_dir is conftest's)

STEPS = 8
CHUNK = 2048  # kCodecChunk: one scale per chunk for 1-bit and 2-bit


def run(tmp_path, tool, stage, name, compression=None, dp=2, inspect=True):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, dp, name, overlap=True,
                                    bucket=20_000)
    config = json.loads(cfg.read_text())
    if compression is not None:
        config["gradient_compression"] = compression
    cfg.write_text(json.dumps(config))
    args = ("--inspect", "1") if inspect else ()
    return dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS, args=args), cfg, model


@pytest.mark.parametrize("stage", [0, 1])
@pytest.mark.parametrize("huffman", [False, True])
def test_top_k_of_everything_equals_the_plain_reduction(tmp_path, tool, stage, huffman):
    plain, _, _ = run(tmp_path, tool, stage, "plain")
    full, _, _ = run(tmp_path, tool, stage, "full",
                     {"algorithm": "topk", "topk_ratio": 1.0, "huffman_coding": huffman})
    for p, f in zip(plain, full):
        assert f["losses"] == p["losses"]
        assert f["param_norms"] == p["param_norms"]
        assert f["metrics"]["compression"]["buckets"] > 0


def bucket_sizes(padded, bucket, stage, dp):
    """The reducer's buckets, from the top of the buffer down (stage 1: none
    straddles two shards)."""
    sizes, end, shard = [], padded, padded // dp
    while end > 0:
        begin = max(0, end - bucket)
        if stage >= 1:
            begin = max(begin, (end - 1) // shard * shard)
        sizes.append(end - begin)
        end = begin
    return sizes


def payload_bytes(algorithm, ratio, n):
    if algorithm == "topk":
        return 8 * max(1, math.ceil(ratio * n))
    bits = 1 if algorithm == "1bit" else 2
    return 4 * -(-n // CHUNK) + (((n * bits + 7) // 8 + 3) // 4) * 4


CASES = [("topk", 0.01, False), ("topk", 0.01, True), ("1bit", None, False),
         ("2bit", None, False)]


@pytest.mark.parametrize("stage", [0, 1])
@pytest.mark.parametrize("algorithm,ratio,huffman", CASES)
def test_compressed_reduction_sends_the_codec_bytes_and_keeps_ranks_equal(
        tmp_path, build_dir, tool, stage, algorithm, ratio, huffman):  # noqa: F811
    plain, _, _ = run(tmp_path, tool, stage, "plain")
    compression = {"algorithm": algorithm, "huffman_coding": huffman}
    if ratio is not None:
        compression["topk_ratio"] = ratio
    runs, cfg, model = run(tmp_path, tool, stage, "gc", compression)
    # Every rank holds the same parameters (the decoded sums are equal).
    assert runs[0]["param_norms"] == runs[1]["param_norms"]
    assert runs[0]["losses"] != plain[0]["losses"]  # lossy: the run did change
    assert runs[0]["losses"][-1] < runs[0]["losses"][0]  # and still learns
    # 8 steps of 1% of the gradient (the rest delayed) learn more slowly.
    assert dp_tests.relative_gap(runs[0]["losses"], plain[0]["losses"]) < 0.15
    psi = runs[0]["metrics"]["num_parameters"]
    padded = -(-psi // 2) * 2
    sizes = bucket_sizes(padded, 20_000, stage, 2)
    passes = STEPS + 1  # the steps and --inspect's forward_backward
    for r, p in zip(runs, plain):
        c = r["metrics"]["compression"]
        assert c["algorithm"] == algorithm and c["enabled"]
        assert c["buckets"] == passes * len(sizes)
        assert c["dense_bytes"] == passes * 4 * padded
        if not huffman:
            assert c["payload_bytes"] == passes * sum(payload_bytes(algorithm, ratio, n)
                                                      for n in sizes)
        else:  # indices coded below their 4 bytes each
            raw = passes * sum(payload_bytes("topk", ratio, n) for n in sizes)
            assert c["payload_bytes"] < 0.85 * raw, (c["payload_bytes"], raw)
        expected_ratio = {"topk": 0.021, "1bit": 0.034, "2bit": 0.066}[algorithm]
        assert c["payload_ratio"] <= expected_ratio, c
        # The all-gathers carry the payloads (padded to the largest rank's
        # with Huffman, after one 4-byte size per rank and bucket).
        gathered = r["metrics"]["comm"]["allgather"]["bytes"] - \
            p["metrics"]["comm"]["allgather"]["bytes"]
        sizes_bytes = passes * len(sizes) * 2 * 4 if huffman else 0
        assert gathered == c["gathered_bytes"] + sizes_bytes
        # The gradient collective of the plain run is gone.
        op = "allreduce" if stage == 0 else "reduce"
        assert r["metrics"]["comm"][op]["bytes"] < p["metrics"]["comm"][op]["bytes"] / 100
        # One fp32 residual over the whole buffer, in the estimate too.
        plain_state = p["metrics"]["memory"]["optimizer_state"]["bytes"]
        assert r["metrics"]["memory"]["optimizer_state"]["bytes"] == plain_state + 4 * padded
    estimate = dp_tests.estimate_memory(build_dir, cfg, model, 2)[stage]
    assert estimate["optimizer_state_bytes"] == \
        runs[0]["metrics"]["memory"]["optimizer_state"]["bytes"]


def test_bf16_training_compresses_its_widened_gradients(tmp_path, tool):
    cfg_runs = {}
    for name, comp in (("plain", None), ("gc", {"algorithm": "1bit"})):
        cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, 2, name)
        config = json.loads(cfg.read_text())
        config["bf16"] = {"enabled": True}
        if comp:
            config["gradient_compression"] = comp
        cfg.write_text(json.dumps(config))
        cfg_runs[name] = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS,
                                            args=("--inspect", "1"))
    gc, plain = cfg_runs["gc"], cfg_runs["plain"]
    assert gc[0]["param_norms"] == gc[1]["param_norms"]
    assert gc[0]["losses"][-1] < gc[0]["losses"][0]
    assert dp_tests.relative_gap(gc[0]["losses"], plain[0]["losses"]) < 0.05
    assert gc[0]["metrics"]["compression"]["payload_ratio"] < 0.034


def test_one_rank_has_nothing_to_compress(tmp_path, tool):
    plain, _, _ = run(tmp_path, tool, 0, "plain", dp=1)
    one, _, _ = run(tmp_path, tool, 0, "gc", {"algorithm": "1bit"}, dp=1)
    assert one[0]["losses"] == plain[0]["losses"]
    assert one[0]["metrics"]["compression"]["buckets"] == 0
