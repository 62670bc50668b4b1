// Tokenizers: text to the token ids a model was trained on, and back.
//   SentencePiece  a `tokenizer.model` (LLaMA 1/2, Mistral), through Debian's
//                  libsentencepiece (the library that wrote the file).
//   byte-level BPE a Hugging Face `tokenizer.json` (GPT-2, LLaMA 3, BLOOM)
//                  or GPT-2's `vocab.json` + `merges.txt`: written here, as
//                  no packaged C/C++ library reads them (bpe_tokenizer.cc),
//                  over ICU's regular expressions for their pre-tokenizers.
// Text is UTF-8; invalid sequences are read as U+FFFD (one per maximal
// invalid subpart, as Python's errors="replace" and JavaScript's decoders).
// Encoding and decoding are const and safe from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/status.h"

namespace dst {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Opens a tokenizer file: `tokenizer.model` (SentencePiece), `tokenizer.json`
  // (Hugging Face), or a directory holding one of them (first
  // tokenizer.json, then tokenizer.model) or vocab.json + merges.txt.
  // Components not built are named (kNotSupported).
  static Result<std::unique_ptr<Tokenizer>> Open(const std::string &path);

  // "sentencepiece" or "bpe".
  virtual const char *kind() const = 0;
  // Ids [0, vocab_size).
  virtual int64_t vocab_size() const = 0;
  // Appends the ids of `text` to `ids`. `add_special`: the model's own
  // additions (a SentencePiece model's BOS; a tokenizer.json's post-processor
  // template, e.g. LLaMA 3's <|begin_of_text|>), as transformers' encode()
  // adds them by default.
  virtual void Encode(std::string_view text, bool add_special, std::vector<int32_t> *ids) const = 0;
  // The text of `ids` (special tokens included as their text).
  virtual std::string Decode(const int32_t *ids, size_t n) const = 0;
  // Whether text cut between a letter and a space before a letter encodes,
  // piece by piece, as the whole text does (`dstrain tokenize` cuts there):
  // a byte-level BPE's pre-tokenizers start a piece at such a space; a
  // SentencePiece model only when it drops leading whitespace (spm_train's
  // default), not when it keeps it (LLaMA's: a leading space would gain the
  // dummy prefix).
  virtual bool CutBeforeSpaceIsSafe() const { return true; }
  // The end-of-sequence / beginning-of-sequence ids, or -1.
  virtual int32_t eos_id() const = 0;
  virtual int32_t bos_id() const = 0;
};

}  // namespace dst
