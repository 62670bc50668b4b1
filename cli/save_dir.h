// `dstrain train --save DIR` is checked before the first step, not after the
// whole run: the directory is created, must be writable, and must have room
// for one checkpoint of this rank by the engine's own memory figures.
#pragma once

#include <string>

#include "dstrain/dstrain.h"

namespace dstrain_cli {

// Throws a CliError naming the directory and the problem.
void CheckSaveDir(const std::string &dir, dst_engine_t *engine, int64_t rank);

}  // namespace dstrain_cli
