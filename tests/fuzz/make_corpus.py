#!/usr/bin/python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/<target>/) from the
project's example configs and model specs and from small files in each
format the readers take. Run again after a format changes; the files are
committed so that every build replays them (ctest fuzz_replay_*)."""
import json
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fuzz/corpus"


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes)"""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


configs = sorted((ROOT / "examples/configs").glob("*.json"))
for path in configs:
    text = path.read_text()
    spec = json.loads(text)
    is_model = "type" in spec or "model_type" in spec
    if is_model:
        put("fuzz_model_spec", path.stem, text)
    else:
        put("fuzz_config", path.stem, b"\x01" + text.encode())
        put("fuzz_config", path.stem + "_world4_steps", b"\x0b" + text.encode())

hf_configs = {
    "gpt2": {"model_type": "gpt2", "vocab_size": 64, "n_positions": 16, "n_embd": 8,
             "n_layer": 1, "n_head": 2, "layer_norm_epsilon": 1e-5},
    "llama": {"model_type": "llama", "vocab_size": 64, "hidden_size": 8, "intermediate_size": 16,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8}},
    "bloom": {"model_type": "bloom", "vocab_size": 64, "hidden_size": 8, "n_layer": 1,
              "n_head": 2, "layer_norm_epsilon": 1e-5},
}
for name, cfg in hf_configs.items():
    put("fuzz_model_spec", "hf_" + name, json.dumps(cfg))

weights = safetensors({"model.norm.weight": ("F32", [2], f32(1, 2)),
                       "lm_head.weight": ("BF16", [2, 1], b"\x80\x3f\x00\x40")},
                      {"format": "pt"})
put("fuzz_safetensors", "f32_bf16", weights)
put("fuzz_safetensors", "f16_i64", safetensors({"a": ("F16", [1, 2], b"\x00\x3c\x00\x40"),
                                               "b": ("I64", [1], struct.pack("<q", 7))}))
put("fuzz_safetensors", "empty", safetensors({}))

# A real checkpoint of a tiny sequential model (tests/fuzz/seeds: `dstrain train
# --model seq.json --data synthetic --steps 2 --save DIR`).
seeds = ROOT / "tests/fuzz/seeds/checkpoint"
put("fuzz_checkpoint_meta", "global_step2",
    b"global_step2\n--\n" + (seeds / "meta.json").read_bytes() + b"\n--\n" +
    (seeds / "model.safetensors").read_bytes())
put("fuzz_checkpoint_meta", "no_sum",
    b"!global_step2\n--\n" + (seeds / "meta.json").read_bytes() + b"\n--\n" +
    (seeds / "model.safetensors").read_bytes())
put("fuzz_safetensors", "checkpoint_model", (seeds / "model.safetensors").read_bytes())
put("fuzz_safetensors", "checkpoint_zero", (seeds / "zero_rank_0.safetensors").read_bytes())

index = {"metadata": {"total_size": 12},
         "weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors",
                        "lm_head.weight": "model-00001-of-00001.safetensors"}}
for name, cfg in hf_configs.items():
    put("fuzz_hf_checkpoint", name + "_single",
        json.dumps(cfg).encode() + b"\n--\n\n--\n" + weights)
    put("fuzz_hf_checkpoint", name + "_sharded",
        json.dumps(cfg).encode() + b"\n--\n" + json.dumps(index).encode() + b"\n--\n" + weights)

header = struct.pack("<3i", 20240520, 1, 6) + bytes(4 * 253)
put("fuzz_token_file", "llmc_v1", header + struct.pack("<6H", 1, 2, 3, 4, 5, 6))
header2 = struct.pack("<3i", 20240520, 2, 5) + bytes(4 * 253)
put("fuzz_token_file", "llmc_v2", header2 + struct.pack("<5I", 70000, 1, 2, 3, 4))
put("fuzz_token_file", "nanogpt_raw", struct.pack("<8H", 5, 6, 7, 8, 9, 10, 11, 12))
put("fuzz_token_file", "text", "Hello, fuzzer.\nA second line of text for windows.\n")


def frame(payload):
    return b"DSTF" + struct.pack(">I", len(payload)) + payload


def s(text):
    raw = text.encode()
    return struct.pack(">I", len(raw)) + raw


put("fuzz_store_wire", "hello", frame(b"\x01" + struct.pack(">II", 0x64737431, 2) + s("token") +
                                      struct.pack(">qq", 1, 2)))
put("fuzz_store_wire", "set", frame(b"\x02" + s("key") + s("value")))
put("fuzz_store_wire", "get", frame(b"\x03" + s("key") + struct.pack(">q", 500)))
put("fuzz_store_wire", "wait", frame(b"\x04" + struct.pack(">I", 2) + s("a") + s("b") +
                                     struct.pack(">q", 250)))
put("fuzz_store_wire", "add", frame(b"\x05" + s("counter") + struct.pack(">q", 1)))
put("fuzz_store_wire", "reply_value", frame(b"\x02" + s("value")))
put("fuzz_store_wire", "reply_timeout", frame(b"\x04" + struct.pack(">I", 1) + s("missing")))
put("fuzz_store_wire", "reply_error", frame(b"\x05" + s("job token mismatch")))

for name, request in {
    "metrics": "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz-token\r\n\r\n",
    "head": "HEAD /api/v1/snapshot HTTP/1.0\r\n\r\n",
    "dotdot": "GET /%2e%2e/etc/passwd?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    "post": "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    "bare_lf": "GET / HTTP/1.1\nHost: x\n\n",
    "unfinished": "GET /metrics HTTP/1.1\r\nHost: x\r\n",
}.items():
    put("fuzz_http", name, request)


def npy(descr, shape, raw, version=1):
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    size_bytes = 2 if version == 1 else 4
    total = 6 + 2 + size_bytes + len(header) + 1
    header += b" " * (-total % 64) + b"\n"
    size = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header + raw


put("fuzz_npy", "f4_2x2", npy("<f4", (2, 2), f32(1, 2, 3, 4)))
put("fuzz_npy", "i4_3", npy("<i4", (3,), struct.pack("<3i", 0, 1, 2)))
put("fuzz_npy", "i8_v2", npy("<i8", (2, 1), struct.pack("<2q", 5, 6), version=2))
print(f"wrote the corpus under {OUT}")
