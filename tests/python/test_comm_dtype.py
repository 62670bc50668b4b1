"""16-bit gradient communication under fp32 training
(communication_data_type "bf16"/"fp16", or the articles'
compress_communication: true): each rank rounds its fp32 gradients to 16
bits for the wire, the reduction sums them in 16 bits, and the sum is
widened back into the fp32 gradients. Half the bytes of every gradient
reduction go over the wire; the run stays within the 16-bit rounding of the
fp32-reduced run, at every ZeRO stage.
"""
import json

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

STEPS = 8
# The collective that carries the gradients: stage 0 all-reduces them, 1-3
# reduce each piece to its owner.
GRADIENT_OP = {0: "allreduce", 1: "reduce", 2: "reduce", 3: "reduce"}


def run(tmp_path, tool, stage, name, **keys):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, 2, name)
    config = json.loads(cfg.read_text())
    config.update(keys)
    cfg.write_text(json.dumps(config))
    return dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("wire", ["bf16", "fp16", "compress"])
def test_16_bit_gradient_communication_halves_the_bytes_and_tracks_fp32(tmp_path, tool, stage,
                                                                        wire):
    reference = run(tmp_path, tool, stage, "fp32", communication_data_type="fp32")
    keys = ({"compress_communication": True} if wire == "compress"
            else {"communication_data_type": wire})
    sixteen = run(tmp_path, tool, stage, wire, **keys)
    # bf16 keeps 8 bits of mantissa: the gradients move by ~0.4% at most,
    # the loss of a few AdamW steps far less.
    assert dp_tests.relative_gap(sixteen[0]["losses"], reference[0]["losses"]) <= 1e-3
    assert sixteen[0]["losses"] != reference[0]["losses"]  # the rounding did happen
    for r16, r32 in zip(sixteen, reference):
        c16, c32 = r16["metrics"]["comm"], r32["metrics"]["comm"]
        op = GRADIENT_OP[stage]
        # Half, but for a few fp32 scalars per step (stage 0's all-reduces
        # also carry the loss and the norm).
        scalars = 2 * c16[op]["bytes"] - c32[op]["bytes"]
        assert c32[op]["bytes"] > 100_000 and 0 <= scalars <= 64 * STEPS, (c16[op], c32[op])
        for other in c32:  # every other collective as before
            if other != op and isinstance(c32[other], dict) and "bytes" in c32[other]:
                assert c16[other]["bytes"] == c32[other]["bytes"], other
        resolved = r16["metrics"].get("communication_data_type")
        if resolved is not None:
            assert resolved == ("bf16" if wire == "compress" else wire)
