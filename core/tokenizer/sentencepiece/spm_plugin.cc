// libdstrain_sentencepiece.so: libsentencepiece behind spm_api.h's table.
#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/tokenizer/sentencepiece/spm_api.h"

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

Processor *Of(void *model) {
  return static_cast<Processor *>(model);
}

void *Open(const char *path, char *err, size_t err_len) {
  auto *sp = new Processor();
  const auto st = sp->Load(path);
  if (st.ok()) return sp;
  std::snprintf(err, err_len, "%s", st.ToString().c_str());
  delete sp;
  return nullptr;
}

void Close(void *model) {
  delete Of(model);
}

int32_t PieceSize(void *model) {
  return Of(model)->GetPieceSize();
}

int32_t Bos(void *model) {
  return Of(model)->bos_id();
}

int32_t Eos(void *model) {
  return Of(model)->eos_id();
}

int64_t Encode(void *model, const char *text, size_t len, const int32_t **out) {
  thread_local std::vector<int> ids;
  ids.clear();
  (void)Of(model)->Encode(std::string_view(text, len), &ids);  // fails only unloaded
  static_assert(sizeof(int) == sizeof(int32_t));
  *out = reinterpret_cast<const int32_t *>(ids.data());
  return int64_t(ids.size());
}

int64_t Decode(void *model, const int32_t *ids, size_t n, const char **out) {
  thread_local std::string text;
  std::vector<int> in(ids, ids + n);
  text.clear();
  (void)Of(model)->Decode(in, &text);
  *out = text.c_str();
  return int64_t(text.size());
}

const DstSpmApi kApi = {1, Open, Close, PieceSize, Bos, Eos, Encode, Decode};

}  // namespace

extern "C" __attribute__((visibility("default"))) const DstSpmApi *dst_sentencepiece_plugin(void) {
  return &kApi;
}
