"""`dstrain train` under `dstrain launch`: every rank trains its slice of each
global batch, only rank 0 prints, and the job ends with the single-process
run's losses."""
import json

import test_cli as cli_tests
from test_cli import dstrain, job  # noqa: F401  (fixtures)
import test_data_parallel as dp_tests


def test_two_ranks_end_where_one_does(dstrain, job, tmp_path):  # noqa: F811
    config = cli_tests.tiny_config(total_num_steps=20)
    config["train_micro_batch_size_per_gpu"] = 4  # accumulation = 8 / (4 x ranks)
    del config["gradient_accumulation_steps"]
    config["zero_optimization"] = {"stage": 1, "overlap_comm": True}
    path = tmp_path / "dp.json"
    path.write_text(json.dumps(config))
    job["dp"] = path
    single = cli_tests.run(dstrain, *cli_tests.train_args(job, "dp"))
    assert single.returncode == 0, single.stderr
    launched = cli_tests.run(dstrain, "launch", "--nproc-per-node", "2", "--master-port",
                             dp_tests.free_port(), "--", dstrain,
                             *cli_tests.train_args(job, "dp"))
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.count("final:") == 1  # rank 1 is silent
    assert "(2 ranks)" in launched.stdout
    final_one = cli_tests.final_line(single.stdout).split()
    final_two = cli_tests.final_line(launched.stdout).split()
    assert final_one[:3] == final_two[:3]  # "final: step 20"
    for a, b in zip(final_one[3:], final_two[3:]):
        if a.replace(".", "").isdigit():
            assert abs(float(a) - float(b)) <= 2e-4, (single.stdout, launched.stdout)
