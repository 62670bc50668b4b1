"""The seeds' pipeline example from the command line: a PipelineModule-style
Linear/ReLU stack with MSE, `pipeline_parallel {pp_size: 2, micro_batches: 4}`
and fp16, trained by `dstrain train --data synthetic` under
`dstrain launch --nproc-per-node 2`; the pipelined run ends where one process
does (fp32), also on .npy inputs and labels and on a safetensors file of both (MSE and
cross-entropy);
`dstrain estimate` prints the partition."""
import json
import pathlib
import re

import pytest

import test_cli as cli_tests
from test_cli import dstrain  # noqa: F401  (fixture)
import test_data_parallel as dp_tests

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pipeline"


def launch(dstrain, *args, ranks=2):  # noqa: F811
    return cli_tests.run(dstrain, "launch", "--nproc-per-node", str(ranks), "--master-port",
                         dp_tests.free_port(), "--", dstrain, *args)


def val_losses(out):
    return [float(v) for v in re.findall(r"val loss ([0-9.]+)", out)]


def test_seeds_pipeline_example_trains_under_launch(dstrain):  # noqa: F811
    result = launch(dstrain, "train", "--config", EXAMPLES / "ds_config.json", "--model",
                    EXAMPLES / "linear_relu.json", "--data", "synthetic", "--steps", "40",
                    "--eval-interval", "20")
    assert result.returncode == 0, result.stderr
    assert "2 pipeline stages x 1 data-parallel" in result.stdout, result.stdout
    assert "samples/s" in result.stdout
    losses = val_losses(result.stdout)
    assert losses[-1] < 0.6 * losses[0], result.stdout


def test_pipelined_cli_run_ends_where_one_process_does(dstrain, tmp_path):  # noqa: F811
    config = json.loads((EXAMPLES / "ds_config.json").read_text())
    del config["fp16"]
    single = dict(config)
    del single["pipeline_parallel"]
    single["gradient_accumulation_steps"] = 4
    for name, value in (("pp.json", config), ("single.json", single)):
        (tmp_path / name).write_text(json.dumps(value))
    args = ["--model", str(EXAMPLES / "linear_relu.json"), "--data", "synthetic", "--steps", "10",
            "--eval-interval", "10"]
    one = cli_tests.run(dstrain, "train", "--config", tmp_path / "single.json", *args)
    two = launch(dstrain, "train", "--config", tmp_path / "pp.json", *args)
    assert one.returncode == 0 and two.returncode == 0, (one.stderr, two.stderr)
    a, b = cli_tests.final_line(one.stdout).split(), cli_tests.final_line(two.stdout).split()
    assert a[:3] == b[:3]
    for x, y in zip(a[3:], b[3:]):
        if x.replace(".", "").isdigit():
            assert abs(float(x) - float(y)) <= 1e-5 * max(1.0, abs(float(x))), (one.stdout,
                                                                                 two.stdout)


def test_sequential_model_needs_synthetic_data(dstrain):  # noqa: F811
    result = cli_tests.run(dstrain, "train", "--model", EXAMPLES / "linear_relu.json",
                           "--steps", "1")
    assert result.returncode != 0
    assert "--data synthetic" in result.stderr and "--labels LABELS.npy" in result.stderr
    assert "DATA.safetensors" in result.stderr


def test_estimate_prints_the_partition(dstrain):  # noqa: F811
    result = cli_tests.run(dstrain, "estimate", "--config", EXAMPLES / "ds_config.json",
                           "--model", EXAMPLES / "linear_relu.json", "--world-size", "2")
    assert result.returncode == 0, result.stderr
    assert "pipeline: 2 stages x 1 virtual, schedule 1f1b, partition parameters" in result.stdout
    rows = [line for line in result.stdout.splitlines() if re.match(r"^[01]\s+\d+-\d+", line)]
    assert len(rows) == 2, result.stdout
    estimate = json.loads(cli_tests.run(dstrain, "estimate", "--config",
                                        EXAMPLES / "ds_config.json", "--model",
                                        EXAMPLES / "linear_relu.json", "--world-size", "2",
                                        "--json").stdout)
    ranks = estimate["pipeline"]["ranks"]
    assert sum(r["parameters"] for r in ranks) == estimate["num_parameters"]
    assert [r["micro_batches_in_flight"] for r in ranks] == [2, 1]  # 1F1B: p - rank


def write_arrays(tmp_path, rows=64, features=16, outputs=4, classes=False):
    import numpy as np
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    w = rng.standard_normal((features, outputs)).astype(np.float32)
    y = (x @ w).argmax(axis=1).astype(np.int64) if classes else (x @ w).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return tmp_path / "x.npy", tmp_path / "y.npy"


def small_model(tmp_path, loss="mse", outputs=4):
    model = {"type": "sequential", "input_dim": 16, "loss": loss, "seed": 2,
             "layers": [{"type": "linear", "out_features": 32}, {"type": "relu"},
                        {"type": "linear", "out_features": 32}, {"type": "relu"},
                        {"type": "linear", "out_features": outputs}]}
    path = tmp_path / f"model_{loss}.json"
    path.write_text(json.dumps(model))
    return path


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_npy_arrays_train_and_pipeline_matches_one_process(dstrain, tmp_path, loss):  # noqa: F811
    x, y = write_arrays(tmp_path, classes=loss == "cross_entropy")
    model = small_model(tmp_path, loss)
    base = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW",
                                                              "params": {"lr": 0.003}}}
    single = dict(base, gradient_accumulation_steps=4)
    piped = dict(base, pipeline_parallel={"pp_size": 2, "micro_batches": 4})
    for name, value in (("one.json", single), ("pp.json", piped)):
        (tmp_path / name).write_text(json.dumps(value))
    args = ["--model", model, "--data", x, "--labels", y, "--steps", "20",
            "--eval-interval", "10", "--eval-batches", "2"]
    one = cli_tests.run(dstrain, "train", "--config", tmp_path / "one.json", *args)
    two = launch(dstrain, "train", "--config", tmp_path / "pp.json", *args)
    assert one.returncode == 0 and two.returncode == 0, (one.stderr, two.stderr)
    assert "x.npy / " in one.stdout and "(64 samples)" in one.stdout, one.stdout
    losses = val_losses(one.stdout)
    assert losses[-1] < losses[0], one.stdout
    a, b = cli_tests.final_line(one.stdout).split(), cli_tests.final_line(two.stdout).split()
    for p, q in zip(a[3:], b[3:]):
        if p.replace(".", "").isdigit():
            assert abs(float(p) - float(q)) <= 1e-5 * max(1.0, abs(float(p))), (one.stdout,
                                                                                 two.stdout)


def test_npy_arrays_that_do_not_fit_the_model_are_named(dstrain, tmp_path):  # noqa: F811
    x, y = write_arrays(tmp_path, features=8)
    model = small_model(tmp_path)
    result = cli_tests.run(dstrain, "train", "--model", model, "--data", x, "--labels", y,
                           "--steps", "1")
    assert result.returncode != 0 and "float32 [samples, 16]" in result.stderr, result.stderr
    x, y = write_arrays(tmp_path)
    result = cli_tests.run(dstrain, "train", "--model", model, "--data", x, "--steps", "1")
    assert result.returncode != 0 and "needs --labels" in result.stderr, result.stderr
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    result = cli_tests.run(dstrain, "train", "--model", model, "--data", tmp_path / "bad.npy",
                           "--labels", y, "--steps", "1")
    assert result.returncode != 0 and "no .npy magic" in result.stderr, result.stderr


def write_safetensors(path, tensors):
    """A safetensors file written by hand (the format: an 8-byte little-endian
    header length, the JSON header, the bytes), as safetensors.numpy.save_file
    writes it."""
    import numpy as np
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        dtype = {"float32": "F32", "int32": "I32", "int64": "I64"}[str(array.dtype)]
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    return path


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_safetensors_file_trains_as_the_npy_pair_does(dstrain, tmp_path, loss):  # noqa: F811
    """--data DATA.safetensors (tensors "inputs" and "labels") feeds exactly
    the rows the .npy pair does: the same losses to the last digit."""
    import numpy as np
    x, y = write_arrays(tmp_path, classes=loss == "cross_entropy")
    data = write_safetensors(tmp_path / "data.safetensors",
                             {"inputs": np.load(x), "labels": np.load(y)})
    model = small_model(tmp_path, loss)
    (tmp_path / "c.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
         "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}))
    common = ["train", "--config", tmp_path / "c.json", "--model", model, "--steps", "6",
              "--eval-interval", "3", "--eval-batches", "2"]
    npy = cli_tests.run(dstrain, *common, "--data", x, "--labels", y)
    st = cli_tests.run(dstrain, *common, "--data", data)
    assert npy.returncode == 0 and st.returncode == 0, (npy.stderr, st.stderr)
    assert 'data.safetensors tensor "inputs"' in st.stdout, st.stdout
    assert val_losses(st.stdout) == val_losses(npy.stdout), (st.stdout, npy.stdout)
    assert cli_tests.final_line(st.stdout).split()[3:] == \
        cli_tests.final_line(npy.stdout).split()[3:]


def test_safetensors_file_that_does_not_fit_is_named(dstrain, tmp_path):  # noqa: F811
    import numpy as np
    model = small_model(tmp_path)
    x = np.zeros((8, 16), np.float32)

    def error(tensors, *extra):
        path = write_safetensors(tmp_path / "bad.safetensors", tensors)
        result = cli_tests.run(dstrain, "train", "--model", model, "--data", path, "--steps",
                               "1", *extra)
        assert result.returncode != 0
        return result.stderr

    assert 'no tensor "labels"' in error({"inputs": x})
    assert "float32 [samples, 16]" in error({"inputs": np.zeros((8, 3), np.float32),
                                             "labels": np.zeros((8, 4), np.float32)})
    assert "has 7 rows" in error({"inputs": x, "labels": np.zeros((7, 4), np.float32)})
    assert "holds the labels itself" in error(
        {"inputs": x, "labels": np.zeros((8, 4), np.float32)}, "--labels", tmp_path / "y.npy")
    (tmp_path / "cut.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    result = cli_tests.run(dstrain, "train", "--model", model, "--data",
                           tmp_path / "cut.safetensors", "--steps", "1")
    assert result.returncode != 0 and "a header of 16 bytes" in result.stderr, result.stderr
