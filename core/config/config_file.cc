#include "core/config/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/file_kind.h"

namespace dst {

namespace {

// Closes a descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> ReadConfigFile(const std::string &path, const char *what) {
  const std::string file = std::string(what) + " file " + path;
  // O_NONBLOCK: opening a FIFO with no writer must not block; the type is
  // checked on the open descriptor, so it cannot change in between.
  Fd in{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (in.fd < 0) return IoError("cannot open " + file + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(in.fd, &st) != 0)
    return IoError("cannot read the " + file + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return IoError("cannot read the " + file + ": it is " + NonRegularFileKind(st.st_mode) +
                   "; pass a regular JSON file");
  if (int64_t(st.st_size) > kMaxConfigFileBytes)
    return ConfigError("the " + file + " is " + std::to_string(int64_t(st.st_size)) +
                       " bytes, more than the " + std::to_string(kMaxConfigFileBytes) +
                       " bytes a " + what + " file may have; is it the right file?");
  std::string text(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(in.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read the " + file + ": " + std::strerror(errno));
    if (n == 0) break;  // shrank while reading: keep what is there
    done += size_t(n);
  }
  text.resize(done);
  return text;
}

Result<std::string> TextOrFile(const std::string &text, const std::string &path, const char *what) {
  if (!text.empty() && !path.empty())
    return InvalidArgument(std::string("both a ") + what + " JSON string and a " + what +
                           " path were given; pass exactly one");
  if (text.empty() && path.empty())
    return InvalidArgument(std::string("no ") + what + " given; pass a " + what +
                           " JSON string or a path to one");
  if (!text.empty()) return text;
  return ReadConfigFile(path, what);
}

}  // namespace dst
