"""Hugging Face model directories written the way transformers writes them,
for the import and export tests: config.json, and the weights as
model.safetensors or shards with model.safetensors.index.json, in F32, F16
or BF16. The safetensors files are written here from the format's
specification (an 8-byte little-endian header length, a JSON header of
{name: {dtype, shape, data_offsets}} padded with spaces to 8 bytes, the
tensors' bytes back to back), independent of dstrain's writer."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}

# GPT-2's Conv1D projections, stored [in, out].
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def tensor_bytes(t, dtype):
    """`t` rounded to the file dtype, and its little-endian bytes."""
    t = t.detach().to(DTYPES[dtype]).contiguous()
    if dtype == "BF16":  # numpy has no bfloat16: its bits as int16
        return t, t.view(torch.int16).numpy().tobytes()
    return t, t.numpy().tobytes()


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """tensors: {name: torch tensor} in file order. Returns {name: the
    tensor as stored (rounded to dtype)}."""
    header, blobs, stored, offset = {}, [], {}, 0
    for name, t in tensors.items():
        rounded, data = tensor_bytes(t, dtype)
        stored[name] = rounded
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    return stored


def hf_state_dict(model, gpt2=False, prefix_dropped=False):
    """The twin's parameters under Hugging Face's names and layouts: GPT-2's
    Conv1D weights transposed to [in, out]; `prefix_dropped`: saved from the
    base model (no "transformer." / "model." prefix)."""
    out = {}
    for name, p in model.named_parameters():
        t = p.detach()
        if gpt2 and name.endswith(CONV1D):
            t = t.t().contiguous()
        if prefix_dropped:
            for prefix in ("transformer.", "model."):
                if name.startswith(prefix):
                    name = name[len(prefix):]
        out[name] = t
    return out


def write_model_dir(directory, config, state, dtype="F32", shards=1):
    """config.json and the weights (one file, or `shards` files and the
    index). Returns {name: the tensor as stored}."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    names = list(state)
    if shards == 1:
        return write_safetensors(directory / "model.safetensors", state, dtype, {"format": "pt"})
    stored, weight_map = {}, {}
    per = -(-len(names) // shards)
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[k * per:(k + 1) * per]}
        stored.update(write_safetensors(directory / file, part, dtype, {"format": "pt"}))
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * t.element_size() for t in stored.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return stored


def randomize_(model, seed, scale=0.2):
    """Every parameter N(0, scale^2) (norm weights around 1), so that unit
    norms and zero biases hide nothing."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * scale
            p.copy_(noise + 1.0 if ("ln" in name or "norm" in name) and name.endswith("weight")
                    else noise)
    return model


def as_numpy(t):
    return np.ascontiguousarray(t.detach().float().numpy())
