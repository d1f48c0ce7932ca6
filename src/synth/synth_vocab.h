#pragma once
// Tokenizer metadata for synthetic models (byte-level BPE, llama.cpp "gpt2" model).
#include <cstdint>
#include <string>
#include <vector>

#include "synth/synth.h"

namespace strata {

class GgufWriter;

struct SynthVocab {
  std::string pre;                  // tokenizer.ggml.pre
  std::vector<std::string> tokens;  // [n_vocab]: 256 byte tokens, merge results, special tokens
  std::vector<int32_t> types;       // [n_vocab]: 1 normal, 3 control
  std::vector<std::string> merges;  // "left right", ranked
  int bos = 0, eos = 0, pad = 0, eot = 0;
  bool add_bos = false;
  std::string chat_template;
};

// Exactly n_vocab tokens (deterministic in seed).
SynthVocab synth_vocab(SynthArch arch, int n_vocab, uint64_t seed);
void synth_write_vocab(GgufWriter& w, const SynthVocab& v);

}  // namespace strata
