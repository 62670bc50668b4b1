"""Constants shared by the SDK tests (imported as `sdk_support`; the module
name is unique so it cannot collide with other test directories' helpers).
Importing it puts sdk-python/src first on sys.path."""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Dict

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
SDK_SRC = REPO / "sdk-python" / "src"
EXAMPLES = REPO / "examples" / "python"
HEADER = REPO / "capi" / "include" / "dstrain" / "dstrain.h"

for path in (str(SDK_SRC), str(HERE), str(HERE.parent)):  # HERE.parent: free_ports
    if path not in sys.path:
        sys.path.insert(0, path)

# A tiny GPT and its config: a step takes about a millisecond.
TINY_GPT = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1, "n_head": 2,
            "d_model": 16, "seed": 5}


def tiny_config(**extra: Any) -> Dict[str, Any]:
    config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
        "dstrain": {"num_threads": 1},
    }
    config.update(extra)
    return config


# A small, regular text: a byte-level model learns it within a few steps.
TEXT = "".join(
    f"the quick brown fox {i % 7} jumps over the lazy dog number {i % 5}.\n" for i in range(300)
)
