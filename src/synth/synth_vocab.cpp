// Byte-level BPE vocabulary for synthetic models: the 256 byte tokens in GPT-2's byte-to-unicode
// form, generated merges (each "a b" references existing tokens and its result is a token), and
// the architecture's special tokens. Loadable by llama.cpp's "gpt2" tokenizer.
#include "synth/synth_vocab.h"

#include <unordered_set>

#include "core/error.h"
#include "gguf/gguf_names.h"
#include "gguf/gguf_writer.h"
#include "synth/synth_blocks.h"

namespace strata {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to 256 + k in byte order.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[b] = utf8(printable ? b : next++);
  }
  return out;
}

constexpr int32_t kNormal = 1, kControl = 3;

struct ArchTok {
  const char* pre;
  std::vector<const char*> specials;
  int bos, eos, pad, eot;  // indices into specials
  bool add_bos;
  const char* chat_template;
};

const ArchTok& arch_tok(SynthArch a) {
  static const ArchTok qwen{
      "qwen2",
      {"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
      0, 2, 0, 2, false,
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"};
  static const ArchTok deepseek{
      "deepseek-v3",
      {"<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "<\xEF\xBD\x9CUser\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"},
      0, 1, 1, 1, true,
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '<\xEF\xBD\x9CUser\xEF\xBD\x9C>' + message['content'] }}"
      "{% else %}{{ '<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>' + message['content'] + '<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>' }}"
      "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>' }}{% endif %}"};
  static const ArchTok qwen35 = [] {  // Qwen3.5's pre-tokenizer (combining marks count as letters)
    ArchTok t = qwen;
    t.pre = "qwen35";
    return t;
  }();
  switch (a) {
    case SynthArch::Qwen3Moe:
    case SynthArch::Glm4Moe:
    case SynthArch::MinimaxM2: return qwen;  // GLM and MiniMax files get the ChatML vocabulary
    case SynthArch::Qwen35Moe: return qwen35;
    case SynthArch::Deepseek2:
    case SynthArch::Deepseek32: break;
  }
  return deepseek;
}

}  // namespace

SynthVocab synth_vocab(SynthArch arch, int n_vocab, uint64_t seed) {
  const ArchTok& at = arch_tok(arch);
  const int n_special = static_cast<int>(at.specials.size());
  STRATA_CHECK(n_vocab >= 256 + n_special, "synth: vocab {} cannot hold 256 byte tokens and {} special tokens", n_vocab, n_special);
  SynthVocab v;
  v.pre = at.pre;
  v.chat_template = at.chat_template;
  v.add_bos = at.add_bos;
  v.tokens = byte_tokens();
  v.types.assign(256, kNormal);
  std::unordered_set<std::string> have(v.tokens.begin(), v.tokens.end());
  // Merge alphabet: space (as 'Ġ'), letters, digits and a little punctuation, so merges look like
  // sub-words and ordinary text tokenizes into multi-byte pieces.
  std::vector<int> alpha;
  for (int b = 'a'; b <= 'z'; ++b) alpha.push_back(b);
  for (int b = 'A'; b <= 'Z'; ++b) alpha.push_back(b);
  for (int b = '0'; b <= '9'; ++b) alpha.push_back(b);
  for (int b : {' ', ' ', ' ', ' ', '.', ',', '\n'}) alpha.push_back(b);
  const int n_merges = n_vocab - 256 - n_special;
  v.merges.reserve(static_cast<size_t>(n_merges));
  SynthRng r(synth_mix(seed, 0x766F636162ull));
  int tries = 0;
  while (static_cast<int>(v.merges.size()) < n_merges) {
    STRATA_CHECK(++tries < 64 * n_merges + 100000, "synth: could not generate {} distinct merges", n_merges);
    // A merged token or a single character (more often on the right, so words grow left to right).
    auto pick = [&](uint64_t single_in_8) -> const std::string& {
      const uint64_t merged = v.tokens.size() - 256;
      if (merged == 0 || (r.next() & 7) < single_in_8) return v.tokens[static_cast<size_t>(alpha[r.next() % alpha.size()])];
      return v.tokens[256 + static_cast<size_t>(r.next() % merged)];
    };
    const std::string& a = pick(4);
    const std::string& b = pick(6);
    if (a.size() + b.size() > 16) continue;
    std::string m = a + b;
    if (have.count(m)) continue;
    v.merges.push_back(a + " " + b);
    have.insert(m);
    v.tokens.push_back(std::move(m));
    v.types.push_back(kNormal);
  }
  const int first_special = static_cast<int>(v.tokens.size());
  for (const char* s : at.specials) {
    v.tokens.emplace_back(s);
    v.types.push_back(kControl);
  }
  v.bos = first_special + at.bos;
  v.eos = first_special + at.eos;
  v.pad = first_special + at.pad;
  v.eot = first_special + at.eot;
  return v;
}

void synth_write_vocab(GgufWriter& w, const SynthVocab& v) {
  w.set_string(key::kTokModel, "gpt2");
  w.set_string(key::kTokPre, v.pre);
  w.set_array_string(key::kTokTokens, v.tokens);
  w.set_array_i32(key::kTokTokenType, v.types);
  w.set_array_string(key::kTokMerges, v.merges);
  w.set_u32(key::kTokBosId, static_cast<uint32_t>(v.bos));
  w.set_u32(key::kTokEosId, static_cast<uint32_t>(v.eos));
  w.set_u32(key::kTokPaddingId, static_cast<uint32_t>(v.pad));
  w.set_u32(key::kTokEotId, static_cast<uint32_t>(v.eot));
  w.set_bool(key::kTokAddBos, v.add_bos);
  w.set_bool(key::kTokAddEos, false);
  if (!v.chat_template.empty()) w.set_string(key::kChatTemplate, v.chat_template);
}

}  // namespace strata
