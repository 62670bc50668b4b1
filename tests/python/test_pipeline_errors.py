"""Pipeline parallelism: clear errors instead of hangs or silent surprises.

A stage killed mid-training is named, with the operation, by every survivor
within the timeout; ranks started with different pipeline sizes are refused
at start-up; a layout the model cannot fill, a partition that matches no
layer, and what is not built yet (the zero-bubble schedule) are errors that
name the setting and the way out.
"""
import json
import secrets

import pytest

import pipeline_support as ps
import test_data_parallel as dp_tests
import test_faults as faults

COMM_TIMEOUT = 15


def write(tmp_path, name, value):
    path = tmp_path / name
    path.write_text(json.dumps(value))
    return path


@pytest.fixture(scope="module")
def tool(build_dir):
    return str(build_dir / "tests" / "dst_dp_tool")


def test_killed_stage_is_named_by_every_survivor(tmp_path, tool):
    cfg = write(tmp_path, "cfg.json", ps.make_config(pp=3, accum=4, timeout=COMM_TIMEOUT))
    model = write(tmp_path, "model.json", ps.GPT)
    faults.kill_rank_1_and_check_survivors(tool, cfg, model, 3, ("recv", "send", "allreduce"))


def test_ranks_with_different_pipeline_sizes_are_refused(tmp_path, tool):
    model = write(tmp_path, "model.json", ps.GPT)
    cfg_a = write(tmp_path, "a.json", ps.make_config(pp=2, accum=4, timeout=COMM_TIMEOUT))
    cfg_b = write(tmp_path, "b.json", ps.make_config(pp=1, accum=2, timeout=COMM_TIMEOUT))
    token = secrets.token_hex(8)
    outs = faults.run_pair(tool, [cfg_a, cfg_b], model, [token, token], dp_tests.free_port())
    assert all(code != 0 for code, _ in outs)
    assert any("different config" in err for _, err in outs), outs


def one_rank_error(tmp_path, build_dir, config, model, world=2):
    with pytest.raises(AssertionError) as failure:
        ps.run_job(tmp_path, config, model, world, "bad", steps=1, build_dir=build_dir)
    return str(failure.value)


def test_more_stages_than_layers_names_the_numbers(tmp_path, build_dir):
    tiny = dict(ps.GPT, n_layer=1)  # embedding, one block, head: 3 layers
    err = one_rank_error(tmp_path, build_dir, ps.make_config(pp=4, accum=4), tiny, world=4)
    assert "3 layers" in err and "4 pipeline stages" in err, err


def test_partition_matching_no_layer_lists_the_kinds(tmp_path, build_dir):
    err = one_rank_error(tmp_path, build_dir,
                         ps.make_config(pp=2, accum=4, partition="type:conv"), ps.GPT)
    assert "matches none of the model's layers" in err and "gpt_transformer_block" in err, err


def test_zero_bubble_is_refused_by_name(tmp_path, build_dir):
    err = one_rank_error(tmp_path, build_dir, ps.make_config(pp=2, accum=4, schedule="zb-h1"),
                         ps.GPT)
    assert 'pipeline.schedule "zb-h1"' in err and "not built yet" in err, err
