"""A training step's stream as a recorded program (the guarded stand-in with
DSTRAIN_TEST_DEVICE_TRACE): each kernel, collective, stream wait, queued
copy and host wait of every rank, in order. What it shows is what a GPU run
would do with its host: the gradient reductions (ZeRO 2's to their owners),
the pipeline's exchanges and the tensor-parallel collectives are waited for
by the compute stream, never by the host, between two backward kernels (a
micro-batch's forward reads its loss, which is a host wait of its own); ZeRO-Offload's gradients are queued for the host as the
backward's reductions complete, before the step's first host wait after it
(the gradient norm), on a copy stream of their own (no backward kernel
waits for them), and the step waits for them before its update; and the
micro-batches' losses are summed on the device and read once a step."""
import json
import os

import pytest

import test_cli as cli_tests
from test_cli import dstrain, job  # noqa: F401  (fixtures)
import test_data_parallel as dp_tests
from test_device_standin import run, write_config

# Every test here drives a test hook (DSTRAIN_TEST_DEVICE or DSTRAIN_INJECT_*).
pytestmark = pytest.mark.test_hooks

BACKWARD = "Backward"  # every backward kernel's name has it (LinearBackward, ...)


# Two ranks as data parallelism at ZeRO 2, tensor parallelism, a 1F1B pipeline.
LAYOUTS = [
    (2, {}, 2),
    (2, {"tensor_parallel": {"tp_size": 2}}, 0),
    (2, {"pipeline_parallel": {"pp_size": 2}, "train_batch_size": 16}, 0),
]
LAYOUT_IDS = ["dp2-zero2", "tp2", "pp2-1f1b"]


def traced_run(dstrain, job, tmp_path, monkeypatch, ranks, layout, stage=0):  # noqa: F811
    config = json.loads(write_config(tmp_path, "dev.json", "cuda", stage, 4).read_text())
    config.update(layout)
    (tmp_path / "dev.json").write_text(json.dumps(config))
    job["dev"] = tmp_path / "dev.json"
    monkeypatch.setenv("DSTRAIN_TEST_DEVICE_TRACE", str(tmp_path / "trace"))
    launched = run(dstrain, "launch", "--nproc-per-node", str(ranks), "--master-port",
                   dp_tests.free_port(), "--", dstrain, *cli_tests.train_args(job, "dev", 2))
    assert launched.returncode == 0, launched.stderr + launched.stdout
    traces = []
    for rank in range(ranks):
        path = tmp_path / f"trace.{rank}"
        assert path.exists(), os.listdir(tmp_path)
        traces.append(path.read_text().splitlines())
    return traces


def first_backward_window(trace):
    """Indices (first, last) of the first training step's backward kernels."""
    backward = [i for i, line in enumerate(trace)
                if line.startswith("kernel ") and BACKWARD in line]
    assert backward, "no backward kernel in the trace"
    first = backward[0]
    # The step's backward ends before its gradient norm (gradient_clipping is set).
    end = next((i for i in range(first, len(trace)) if trace[i] == "kernel SumOfSquaresRange"),
               len(trace))
    last = max(i for i in backward if i < end)
    return first, last


def host_waits(trace, first, last):
    return [(i, trace[i]) for i in range(first, last + 1)
            if trace[i].startswith("host-wait") or trace[i].startswith("host-drain")]


def waits_inside_backward_passes(trace, first, last):
    """Host waits between two backward kernels with no forward kernel between
    them (a micro-batch's forward reads its loss: a host wait of its own)."""
    backward = [i for i in range(first, last + 1)
                if trace[i].startswith("kernel ") and BACKWARD in trace[i]]
    found = []
    for a, b in zip(backward, backward[1:]):
        if not any("Forward" in trace[i] for i in range(a, b)):
            found += host_waits(trace, a, b)
    return found


@pytest.mark.parametrize("ranks,layout,stage", LAYOUTS, ids=LAYOUT_IDS)
def test_the_host_never_waits_for_a_collective_during_the_backward(
        dstrain, job, tmp_path, monkeypatch, ranks, layout, stage):  # noqa: F811
    traces = traced_run(dstrain, job, tmp_path, monkeypatch, ranks, layout, stage)
    for rank, trace in enumerate(traces):
        first, last = first_backward_window(trace)
        collectives = [line for line in trace[first:last + 1] if line.startswith("collective")]
        assert collectives, f"rank {rank}: no collective during the backward"
        assert any(line == "stream-wait " for line in trace[first:last + 1]), rank
        assert waits_inside_backward_passes(trace, first, last) == [], rank


LOSS_KERNELS = ("kernel SoftmaxCrossEntropyForwardInto", "kernel NormalizeAndNllInto")


@pytest.mark.parametrize("ranks,layout,stage", LAYOUTS, ids=LAYOUT_IDS)
def test_the_loss_is_read_once_per_step(
        dstrain, job, tmp_path, monkeypatch, ranks, layout, stage):  # noqa: F811
    """Each micro-batch's loss goes into the step's sum on the device: from the
    step's first forward kernel to its last backward kernel the rank that
    computes the loss never waits on the host (no read-back per micro-batch)."""
    traces = traced_run(dstrain, job, tmp_path, monkeypatch, ranks, layout, stage)
    loss_ranks = [ranks - 1] if "pipeline_parallel" in layout else range(ranks)
    for rank in loss_ranks:
        trace = traces[rank]
        first, last = first_backward_window(trace)
        start = next(i for i, line in enumerate(trace)
                     if line.startswith("kernel ") and "Forward" in line)
        losses = [i for i in range(start, last + 1) if trace[i] in LOSS_KERNELS]
        assert len(losses) >= 2, (rank, "expected several micro-batches' losses in the step")
        assert host_waits(trace, start, last) == [], rank


def test_offloaded_gradients_are_queued_during_the_backward(
        dstrain, job, tmp_path, monkeypatch):  # noqa: F811
    layout = {"zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5000,
                                    "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    for rank, trace in enumerate(traced_run(dstrain, job, tmp_path, monkeypatch, 2, layout, 2)):
        first, last = first_backward_window(trace)
        # The step's first host wait after its backward: the gradient norm.
        norm = next(i for i in range(last, len(trace)) if trace[i].startswith("host-drain"))
        wait = next(i for i in range(last, len(trace)) if trace[i].startswith("copy-wait"))
        queued = [i for i in range(first, wait) if trace[i].startswith("copy-queued")]
        assert queued, f"rank {rank}: no gradient copy queued before the step's wait"
        assert max(queued) < norm < wait, (rank, queued, norm, wait)
        # The step waits for the last of them.
        assert trace[wait] == "copy-wait " + trace[max(queued)].split()[1], (rank, trace[wait])
        # They run on the copy stream: no backward kernel queued after one
        # waits for it (on one stream, each would run before the next kernel).
        ran = [i for i, line in enumerate(trace) if line.startswith("copy-run")]
        assert ran and min(ran) > last, (rank, [trace[i] for i in ran if i <= last])
        assert waits_inside_backward_passes(trace, first, last) == [], rank
