// NumPy .npy arrays (`dstrain train --inputs/--labels`): versions 1-3,
// header dictionaries, dtypes, shapes against the file size.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/cli_error.h"
#include "cli/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = dst::fuzz::WriteFile(
      "inputs.npy", std::string_view(reinterpret_cast<const char *>(data), size));
  try {
    (void)dstrain_cli::ReadNpy(path);
  } catch (const dstrain_cli::CliError &) {
    // the named refusal a user gets
  }
  return 0;
}
