// What a path that is not a regular file is, for errors that refuse it
// ("it is a FIFO (named pipe)"): config, model and data files must be
// regular files, so a device cannot fill memory and a FIFO cannot block.
#pragma once

#include <sys/stat.h>

namespace dst {

inline const char *NonRegularFileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace dst
