"""Pipeline parallelism: clear errors instead of hangs or silent surprises.

A stage killed mid-training is named, with the operation, by every survivor
within the timeout, and so is a stage stopped by SIGSTOP (from its heartbeat);
ranks started with different pipeline sizes are refused at start-up; a layout
the model cannot fill and a partition that matches no layer are errors that
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


def test_stopped_stage_is_named_within_the_timeout(tmp_path, tool):
    """A stage stopped by SIGSTOP (alive, silent) while its neighbours wait on
    it in point-to-point receives (or still in a step's final sends to it,
    stage 1 being each one's only peer): they name it from its missing
    heartbeat and exit within about the timeout, not after a Gloo timeout per
    posted receive."""
    import signal
    import time

    import test_stalls as stalls
    cfg = write(tmp_path, "cfg.json", ps.make_config(pp=3, accum=4, timeout=stalls.TIMEOUT))
    model = write(tmp_path, "model.json", ps.GPT)
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = [stalls.spawn(tool, cfg, model, r, 3, port, token) for r in range(3)]
    try:
        faults.wait_for_progress(procs[0], steps=3)
        stopped_at = time.monotonic()
        procs[1].send_signal(signal.SIGSTOP)
        for rank in (0, 2):
            _, err = procs[rank].communicate(timeout=stalls.TIMEOUT + 60)
            elapsed = time.monotonic() - stopped_at
            assert procs[rank].returncode != 0, f"rank {rank} survived silently"
            assert elapsed < stalls.TIMEOUT + stalls.SLACK, f"rank {rank} took {elapsed:.1f} s"
            assert "rank 1 has stalled" in err and "pp_p2p" in err, err
            waited = ("receiving the" in err and "from stage 1" in err) or (
                "finishing the pipeline's sends" in err)
            assert waited, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()


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
