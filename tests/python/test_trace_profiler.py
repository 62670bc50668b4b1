"""The step trace (dstrain.trace) and the flops profiler (flops_profiler) on
two ranks at ZeRO 1: each rank's Chrome trace holds, for exactly the traced
steps, every layer's forward and backward per micro-batch inside the
program's forward / backward spans, the gradient reduction's collectives
with the bytes the metrics count, and the optimizer step; the profile lists
every layer with the GPT FLOPs formula's figures; a trace path that cannot
be a directory is named when the engine is created."""
import json
import re

import test_cli as cli_tests
from test_cli import dstrain  # noqa: F401  (fixture)
import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (fixture)

STEPS = 4
TRACED = [1, 3]
LAYERS = ["0 gpt_embedding", "1 gpt_transformer_block", "2 gpt_transformer_block",
          "3 gpt_head"]


def job(tmp_path, accum=2, **extra):
    cfg, model = dp_tests.write_job(tmp_path, 1, 2, accum, 2, "trace")
    config = json.loads(cfg.read_text())
    config.update(extra)
    cfg.write_text(json.dumps(config))
    return cfg, model


def spans(events, cat):
    return [e for e in events if e.get("ph") == "X" and e["cat"] == cat]


def test_each_rank_traces_its_layers_collectives_and_optimizer(tmp_path, tool):
    trace_dir = tmp_path / "traces"
    cfg, model = job(tmp_path, dstrain={"num_threads": 1, "comm_timeout_seconds": 60,
                                        "trace": {"enabled": True, "steps": TRACED,
                                                  "path": str(trace_dir)}})
    runs = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS)
    for r in runs:
        doc = json.loads((trace_dir / f"dstrain_trace_rank{r['rank']}.json").read_text())
        assert doc["otherData"]["steps"] == TRACED
        events = doc["traceEvents"]
        assert {e["pid"] for e in events} == {r["rank"]}
        names = {e["args"]["name"] for e in events if e["ph"] == "M"}
        assert {"program", "layers", "comm dp", f"rank {r['rank']}"} <= names
        steps = spans(events, "step")
        assert [s["args"]["step"] for s in steps] == TRACED
        program, layers = spans(events, "program"), spans(events, "layer")
        # 2 micro-batches per step: every layer twice forward, twice backward.
        for step in steps:
            inside = [e for e in layers
                      if step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]]
            for layer in LAYERS:
                for pass_ in ("forward", "backward"):
                    assert sum(e["name"] == f"{pass_} {layer}" for e in inside) == 2, \
                        (pass_, layer)
            ops = [e["name"] for e in program if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
            assert ops.count("optimizer_step") == 1 and "reduce_gradients" in ops, ops
        # Each layer's forward lies inside a "forward mb k" instruction span.
        forwards = [e for e in program if e["name"].startswith("forward mb")]
        for e in layers:
            if e["name"].startswith("forward"):
                assert any(f["ts"] <= e["ts"] + 1 and e["ts"] + e["dur"] <= f["ts"] + f["dur"] + 1
                           for f in forwards), e
        # The reduction's bytes: the traced steps' share of the metrics' total.
        traced = sum(e["args"]["bytes"] for e in spans(events, "comm")
                     if e["name"] == "reduce (dp)")
        total = r["metrics"]["comm"]["reduce"]["bytes"]
        assert traced > 0 and traced * STEPS == total * len(TRACED)


def test_the_flops_profile_lists_every_layer(tmp_path, tool):
    out_file = tmp_path / "profile.txt"
    cfg, model = job(tmp_path, accum=1, flops_profiler={
        "enabled": True, "profile_step": 2, "module_depth": -1, "top_modules": 2,
        "detailed": True, "output_file": str(out_file)})
    dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS)
    text = out_file.read_text()
    assert "profile step:                      2" in text
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\s+(\d+)\s+(gpt_\w+\s+\S+\s+\S+(?: [KMG])?)", text, re.M)}
    assert sorted(rows) == ["0", "1", "2", "3"], text
    # GPT block: 24 N C^2 + 4 B T^2 C with N = B T = 2 x 16 tokens, C = 32.
    block = 24 * 32 * 32 * 32 + 4 * 2 * 16 * 16 * 32
    assert f"{block / 1e3:.2f} K" in text, text
    head = 2 * 32 * 32 * 256
    assert f"{head / 1e3:.2f} K" in text
    assert f"{3 * (2 * block + head) / 1e6:.2f} M" in text  # fwd+bwd of the step
    assert "top 2 layers by fwd+bwd latency" in text


def test_dstrain_train_prints_the_profile_and_a_bad_trace_path_is_named(dstrain, tmp_path):  # noqa: F811
    config = cli_tests.tiny_config(total_num_steps=4)
    config["flops_profiler"] = {"enabled": True, "profile_step": 1}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(config))
    out = cli_tests.run(dstrain, "train", "--config", path, "--steps", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("dstrain flops profiler") == 1
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    config["dstrain"] = {"trace": {"enabled": True, "path": str(blocker / "sub")}}
    path.write_text(json.dumps(config))
    bad = cli_tests.run(dstrain, "train", "--config", path, "--steps", "2")
    assert bad.returncode != 0
    assert "dstrain.trace.path" in bad.stderr and "writable directory" in bad.stderr, bad.stderr


def test_the_flops_profile_of_llama_and_bloom_follows_their_formulas(dstrain, tmp_path):  # noqa: F811
    """A decoder layer's forward FLOPs: 2 N C (W + Q + MLP columns) for its
    GEMMs (W the q, k and v heads' width, Q the query heads', the MLP's three
    SwiGLU or two GELU projections) + 4 B T^2 Q for its attention."""
    llama = {"type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 16}
    bloom = {"type": "bloom", "vocab_size": 256, "hidden_size": 32, "n_layer": 2, "n_head": 4,
             "seq_length": 16}
    B, T, C = 2, 16, 32
    expected = {"llama_transformer_layer": 2 * B * T * C * ((4 + 2 * 2) * 8 + 32 + 3 * 48),
                "bloom_transformer_block": 2 * B * T * C * (3 * 32 + 32 + 2 * 4 * 32)}
    for spec, kind in ((llama, "llama_transformer_layer"), (bloom, "bloom_transformer_block")):
        config = cli_tests.tiny_config(total_num_steps=4)
        config["train_micro_batch_size_per_gpu"] = B
        config.pop("train_batch_size", None)
        config["gradient_accumulation_steps"] = 1
        report = tmp_path / f"{kind}.txt"
        config["flops_profiler"] = {"enabled": True, "profile_step": 1, "module_depth": -1,
                                    "detailed": True, "output_file": str(report)}
        (tmp_path / "c.json").write_text(json.dumps(config))
        (tmp_path / "m.json").write_text(json.dumps(spec))
        out = cli_tests.run(dstrain, "train", "--config", tmp_path / "c.json", "--model",
                            tmp_path / "m.json", "--steps", "2", "--seq-len", str(T))
        assert out.returncode == 0, out.stderr
        text = report.read_text()
        layer = expected[kind] + 4 * B * T * T * 32
        assert kind in text and f"{layer / 1e3:.2f} K" in text, (layer, text)
