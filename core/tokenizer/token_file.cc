#include "core/tokenizer/token_file.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace dst {

namespace fs = std::filesystem;

namespace {

bool Letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A cut before position i: "x| y" with x, y ASCII letters.
bool CutsAt(const std::string &t, size_t i) {
  return i >= 1 && i + 1 < t.size() && Letter(t[i - 1]) && t[i] == ' ' && Letter(t[i + 1]);
}

// One output file: header, ids, then the count written back.
class TokenWriter {
 public:
  Status Open(const std::string &path, int version) {
    path_ = path;
    temp_ = path + ".partial";
    version_ = version;
    out_.open(temp_, std::ios::binary | std::ios::trunc);
    if (!out_) return IoError("cannot write " + temp_);
    std::vector<char> header(kTokenFileHeaderBytes, 0);
    out_.write(header.data(), std::streamsize(header.size()));
    return Check();
  }
  Status Write(const std::vector<int32_t> &ids) {
    if (version_ == 1) {
      buf16_.assign(ids.begin(), ids.end());
      out_.write(reinterpret_cast<const char *>(buf16_.data()), std::streamsize(2 * ids.size()));
    } else {
      out_.write(reinterpret_cast<const char *>(ids.data()), std::streamsize(4 * ids.size()));
    }
    count_ += int64_t(ids.size());
    return Check();
  }
  Status Close() {
    if (count_ > INT32_MAX)
      return InvalidArgument(path_ + ": " + std::to_string(count_) +
                             " tokens exceed the format's int32 count; tokenize fewer files per "
                             "output");
    const int32_t header[3] = {kTokenFileMagic, version_, int32_t(count_)};
    out_.seekp(0);
    out_.write(reinterpret_cast<const char *>(header), sizeof header);
    out_.close();
    if (!out_) return IoError("cannot write " + temp_ + " (disk full?)");
    std::error_code ec;
    fs::rename(temp_, path_, ec);
    if (ec) return IoError("cannot rename " + temp_ + " to " + path_ + ": " + ec.message());
    return Status::Ok();
  }
  void Abandon() {
    out_.close();
    std::error_code ec;
    fs::remove(temp_, ec);
  }
  int64_t count() const { return count_; }

 private:
  Status Check() {
    return out_ ? Status::Ok() : IoError("cannot write " + temp_ + " (disk full?)");
  }
  std::string path_, temp_;
  int version_ = 1;
  std::ofstream out_;
  std::vector<uint16_t> buf16_;
  int64_t count_ = 0;
};

// A piece of text to tokenize, in output order.
struct Chunk {
  std::string text;
  bool val = false;
  bool last_of_part = false;  // append the end-of-sequence id after it
  bool first_of_part = false;
  int64_t bytes = 0;  // input bytes it accounts for
};

}  // namespace

size_t ChunkCut(const std::string &text, size_t begin, size_t target, size_t end) {
  if (target >= end) return end;
  for (size_t i = target; i > begin; --i)
    if (CutsAt(text, i)) return i;
  for (size_t i = target + 1; i < end; ++i)
    if (CutsAt(text, i)) return i;
  return end;
}

Result<TokenizeReport> TokenizeFiles(const Tokenizer &tok, const std::vector<std::string> &files,
                                     const std::string &out, const std::string &val_out,
                                     const TokenizeOptions &o, const TokenizeProgress &progress) {
  const auto start = std::chrono::steady_clock::now();
  if (files.empty()) return InvalidArgument("tokenize: no input files");
  if (!val_out.empty() && !(o.val_fraction > 0 && o.val_fraction < 1))
    return InvalidArgument("tokenize: a validation file needs a fraction in (0, 1)");
  int64_t total = 0;
  for (const std::string &f : files) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) return IoError("tokenize: " + f + " is not a readable file");
    total += int64_t(fs::file_size(f, ec));
  }
  TokenizeReport report;
  report.version = tok.vocab_size() <= 65536 ? 1 : 2;
  TokenWriter train, val;
  DST_RETURN_IF_ERROR(train.Open(out, report.version));
  if (!val_out.empty()) {
    Status st = val.Open(val_out, report.version);
    if (!st.ok()) {
      train.Abandon();
      return st;
    }
  }
  // Where a cut would change tokens, each file's part is one chunk.
  const size_t chunk_bytes =
      tok.CutBeforeSpaceIsSafe() ? o.chunk_bytes : std::numeric_limits<size_t>::max() / 4;
  const int threads = std::max(1, o.threads);
  const size_t in_flight = size_t(2 * threads);
  const int32_t eos = o.eos_after_files ? tok.eos_id() : -1;

  // Workers take chunks by index; the writer (this thread) writes them in order.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int64_t, Chunk>> queue;
  std::map<int64_t, std::pair<Chunk, std::vector<int32_t>>> done;
  bool closed = false;
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w)
    workers.emplace_back([&] {
      for (;;) {
        std::pair<int64_t, Chunk> job;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return closed || !queue.empty(); });
          if (queue.empty()) return;
          job = std::move(queue.front());
          queue.pop_front();
        }
        std::vector<int32_t> ids;
        tok.Encode(job.second.text, o.add_special && job.second.first_of_part, &ids);
        if (job.second.last_of_part && eos >= 0) ids.push_back(eos);
        job.second.text.clear();
        {
          std::lock_guard lock(mu);
          done.emplace(job.first, std::make_pair(std::move(job.second), std::move(ids)));
        }
        cv.notify_all();
      }
    });

  Status status;
  int64_t next_in = 0, next_out = 0, bytes_done = 0;
  // Writes the finished chunks that are next in order; waits until at most
  // `keep` are outstanding.
  const auto drain = [&](size_t keep) {
    std::unique_lock lock(mu);
    for (;;) {
      auto it = done.find(next_out);
      if (it != done.end()) {
        auto item = std::move(it->second);
        done.erase(it);
        ++next_out;
        lock.unlock();
        if (status.ok()) status = (item.first.val ? val : train).Write(item.second);
        bytes_done += item.first.bytes;
        if (progress) progress(bytes_done, total);
        lock.lock();
        continue;
      }
      if (size_t(next_in - next_out) <= keep) return;
      cv.wait(lock);
    }
  };
  const auto submit = [&](Chunk c) {
    {
      std::lock_guard lock(mu);
      queue.emplace_back(next_in++, std::move(c));
    }
    cv.notify_all();
    drain(in_flight);
  };

  for (const std::string &f : files) {
    if (!status.ok()) break;
    std::ifstream in(f, std::ios::binary);
    std::error_code ec;
    const size_t size = size_t(fs::file_size(f, ec));
    // The validation part starts at a cut near (1 - fraction) of the file.
    size_t val_begin = size;
    if (!val_out.empty()) {
      const size_t target = size_t(double(size) * (1 - o.val_fraction));
      const size_t from = target > o.chunk_bytes ? target - o.chunk_bytes : 0;
      std::string window(std::min(size - from, 2 * o.chunk_bytes), '\0');
      in.seekg(std::streamoff(from));
      in.read(window.data(), std::streamsize(window.size()));
      in.clear();
      in.seekg(0);
      const size_t local = ChunkCut(window, 0, target - from, window.size());
      val_begin = local == window.size() && from + local < size ? target : from + local;
    }
    std::string buf;  // text read and not yet submitted, from file offset `base`
    size_t base = 0, read = 0, want = 2 * std::min(chunk_bytes, size_t(1) << 26);
    bool part_first = true;
    while (status.ok() && base < size) {
      if (read < size && buf.size() < want) {
        const size_t n = std::min(want - buf.size(), size - read);
        const size_t at = buf.size();
        buf.resize(at + n);
        in.read(buf.data() + at, std::streamsize(n));
        if (size_t(in.gcount()) != n) {
          status = IoError("tokenize: reading " + f + " failed after " + std::to_string(read) +
                           " bytes (did it shrink?)");
          break;
        }
        read += n;
      }
      const bool in_val = base >= val_begin;
      const size_t part_end = in_val ? size : val_begin;
      const size_t avail = std::min(base + buf.size(), part_end) - base;
      size_t cut = avail;
      if (avail > chunk_bytes) cut = ChunkCut(buf, 0, chunk_bytes, avail);
      if (cut == avail && base + avail != part_end && read < size) {
        want *= 2;  // no cut in what is read (or the part's end not read yet): read more
        continue;
      }
      if (cut == 0) break;
      Chunk c;
      c.text = buf.substr(0, cut);
      c.val = in_val;
      c.bytes = int64_t(cut);
      c.first_of_part = part_first;
      c.last_of_part = base + cut == part_end;
      part_first = c.last_of_part;
      buf.erase(0, cut);
      base += cut;
      want = 2 * std::min(chunk_bytes, size_t(1) << 26);
      submit(std::move(c));
    }
  }
  drain(0);
  {
    std::lock_guard lock(mu);
    closed = true;
  }
  cv.notify_all();
  for (std::thread &t : workers) t.join();
  if (status.ok()) status = train.Close();
  if (status.ok() && !val_out.empty()) status = val.Close();
  if (!status.ok()) {
    train.Abandon();
    if (!val_out.empty()) val.Abandon();
    return status;
  }
  report.bytes = total;
  report.train_tokens = train.count();
  report.val_tokens = val_out.empty() ? 0 : val.count();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace dst
