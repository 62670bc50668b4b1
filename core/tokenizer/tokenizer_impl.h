// The tokenizer kinds Tokenizer::Open chooses between.
#pragma once

#include "core/tokenizer/tokenizer.h"

namespace dst {

Result<std::unique_ptr<Tokenizer>> OpenSentencePiece(const std::string &path);
// A Hugging Face tokenizer.json.
Result<std::unique_ptr<Tokenizer>> OpenHfTokenizerJson(const std::string &path);
// GPT-2's vocab.json + merges.txt.
Result<std::unique_ptr<Tokenizer>> OpenVocabMerges(const std::string &vocab,
                                                   const std::string &merges);

}  // namespace dst
