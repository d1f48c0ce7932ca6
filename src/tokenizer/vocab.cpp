#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"
#include "tokenizer/pretokenizer.h"

namespace strata::tok {

namespace {

struct SpecialKey {
  const char* key;
  int32_t SpecialIds::*field;
};
constexpr SpecialKey kSpecialKeys[] = {
    {key::kTokBosId, &SpecialIds::bos},         {key::kTokEosId, &SpecialIds::eos},
    {key::kTokEotId, &SpecialIds::eot},         {key::kTokEomId, &SpecialIds::eom},
    {key::kTokUnknownId, &SpecialIds::unk},     {key::kTokSeparatorId, &SpecialIds::sep},
    {key::kTokPaddingId, &SpecialIds::pad},     {key::kTokMaskId, &SpecialIds::mask},
    {key::kTokFimPreId, &SpecialIds::fim_pre}, {key::kTokFimSufId, &SpecialIds::fim_suf},
    {key::kTokFimMidId, &SpecialIds::fim_mid}, {key::kTokFimPadId, &SpecialIds::fim_pad},
    {key::kTokFimRepId, &SpecialIds::fim_rep}, {key::kTokFimSepId, &SpecialIds::fim_sep},
};

// Token texts llama.cpp recognizes when the metadata does not name the token.
struct DetectByText {
  int32_t SpecialIds::*field;
  std::initializer_list<const char*> texts;
};
const DetectByText kDetect[] = {
    {&SpecialIds::eot,
     {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>"}},
    {&SpecialIds::eom, {"<|eom_id|>"}},
    {&SpecialIds::fim_pre,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>"}},
    {&SpecialIds::fim_suf,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>"}},
    {&SpecialIds::fim_mid,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>"}},
    {&SpecialIds::fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>"}},
    {&SpecialIds::fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {&SpecialIds::fim_sep, {"<|file_sep|>", "<file_sep>"}},
};
// Texts of end-of-generation tokens.
constexpr const char* kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
                                      "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
                                      "<end_of_utterance>", "[EOT]", "[EOS]"};  // the last two: Kimi K2
// gpt-oss (harmony) tokens that are always rendered (llama.cpp marks them user-defined).
constexpr const char* kHarmonyRendered[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

uint32_t attr_from_type(int64_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::Unknown: return kAttrUnknown;
    case TokenType::Unused: return kAttrUnused;
    case TokenType::Normal: return kAttrNormal;
    case TokenType::Control: return kAttrControl;
    case TokenType::UserDefined: return kAttrUserDefined;
    case TokenType::Byte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

const GgufValue& require_array(const GgufModel& m, const char* k, GgufType elem, size_t count) {
  const GgufValue* v = m.find(k);
  if (!v) fail("{}: missing {}", m.path(), k);
  if (!v->is_array() || v->elem_type != elem) fail("{}: {} is {}, expected an array of {}", m.path(), k, v->to_string(), gguf_type_name(elem));
  if (count != SIZE_MAX && v->count != count) fail("{}: {} has {} entries, expected {} (one per token)", m.path(), k, v->count, count);
  return *v;
}

}  // namespace

const char* vocab_type_name(VocabType t) { return t == VocabType::Spm ? "spm" : "bpe"; }

std::unique_ptr<Vocab> Vocab::from_gguf(const GgufModel& m) {
  auto v = std::make_unique<Vocab>();
  const auto model = m.get_string(key::kTokModel);
  if (!model) fail("{}: missing {} (no tokenizer in this file)", m.path(), key::kTokModel);
  if (*model == "gpt2") {
    v->type = VocabType::Bpe;
  } else if (*model == "llama") {
    v->type = VocabType::Spm;
  } else {
    fail("{}: unsupported {} '{}' (supported: gpt2, llama)", m.path(), key::kTokModel, *model);
  }

  const GgufValue& toks = require_array(m, key::kTokTokens, GgufType::STRING, SIZE_MAX);
  const size_t n = toks.count;
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) fail("{}: {} has {} entries", m.path(), key::kTokTokens, n);
  const GgufValue* types = m.find(key::kTokTokenType) ? &require_array(m, key::kTokTokenType, GgufType::I32, n) : nullptr;
  const GgufValue* scores = m.find(key::kTokScores) ? &require_array(m, key::kTokScores, GgufType::F32, n) : nullptr;
  v->tokens.resize(n);
  v->token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v->tokens[i];
    t.text = std::string(toks.strings[i]);
    if (t.text.empty()) t.text = fmt::format("[EMPTY_{}]", i);
    if (scores) std::memcpy(&t.score, scores->raw + 4 * i, 4);
    if (types) {
      int32_t type = 0;
      std::memcpy(&type, types->raw + 4 * i, 4);
      t.attr = attr_from_type(type);
    }
    v->token_to_id_[t.text] = static_cast<int32_t>(i);
  }

  if (v->type == VocabType::Bpe) {
    const GgufValue& merges = require_array(m, key::kTokMerges, GgufType::STRING, SIZE_MAX);
    v->merge_ranks_.reserve(merges.count);
    for (size_t i = 0; i < merges.count; ++i) {
      std::string_view mg = merges.strings[i];
      const size_t sp = mg.find(' ', 1);
      if (sp == std::string_view::npos) fail("{}: merge {} '{}' has no space", m.path(), i, mg);
      v->merge_ranks_.emplace(std::string(mg), static_cast<int32_t>(i));  // first occurrence wins
    }
    v->pre = m.get_string(key::kTokPre).value_or("");
    const PreTokenizerSpec& spec = find_pretokenizer(v->pre);
    v->special.bos = spec.no_default_bos ? kNoToken : 11;
    v->special.eos = 11;
    v->add_space_prefix = false;
    v->clean_spaces = spec.clean_spaces;
    v->ignore_merges = spec.ignore_merges;
    v->add_bos = spec.add_bos;
    v->add_eos = false;
  } else {
    v->special.bos = 1;
    v->special.eos = 2;
    v->special.unk = 0;
    v->add_space_prefix = true;
    v->clean_spaces = true;
    v->add_bos = true;
    v->add_eos = false;
  }
  if (auto b = m.get_bool(key::kTokAddSpacePrefix)) v->add_space_prefix = *b;
  if (auto b = m.get_bool(key::kTokAddBos)) v->add_bos = *b;
  if (auto b = m.get_bool(key::kTokAddEos)) v->add_eos = *b;

  for (const auto& sk : kSpecialKeys) {
    const auto id = m.get_int(sk.key);
    if (!id) continue;
    if (*id < 0 || *id >= static_cast<int64_t>(n)) continue;  // llama.cpp keeps the default for a bad id
    v->special.*sk.field = static_cast<int32_t>(*id);
  }
  v->finish_specials(m);
  if (v->add_bos && !v->valid(v->special.bos)) fail("{}: add_bos_token is set but the BOS id is invalid", m.path());
  if (v->add_eos && !v->valid(v->special.eos)) fail("{}: add_eos_token is set but the EOS id is invalid", m.path());
  return v;
}

void Vocab::finish_specials(const GgufModel&) {
  const int32_t n = n_tokens();
  auto force_control = [&](int32_t id) {
    if (!(tokens[id].attr & kAttrControl)) tokens[id].attr = kAttrControl;
  };
  // Unnamed end-of-turn / FIM tokens, found by text (the lowest id wins, for determinism).
  for (const auto& d : kDetect) {
    if (special.*d.field != kNoToken) continue;
    int32_t best = kNoToken;
    for (const char* t : d.texts)
      if (const int32_t id = find(t); id != kNoToken && (best == kNoToken || id < best)) best = id;
    if (best == kNoToken) continue;
    special.*d.field = best;
    force_control(best);
  }
  eog.clear();
  for (int32_t id : {special.fim_pad, special.fim_rep, special.fim_sep})
    if (id != kNoToken) eog.insert(id);
  for (const char* t : kEogTexts)
    if (const int32_t id = find(t); id != kNoToken) {
      eog.insert(id);
      force_control(id);
    }
  for (int32_t id : {special.eos, special.eot, special.eom})
    if (valid(id)) eog.insert(id);
  for (const char* t : kHarmonyRendered)
    if (int32_t id = find(t); id != kNoToken) tokens[id].attr = kAttrUserDefined;
  // Harmony: "<|end|>" ends a message, not the generation, when "<|return|>" and "<|call|>" exist.
  const int32_t ret = find("<|return|>"), call = find("<|call|>"), end = find("<|end|>");
  if (ret != kNoToken && call != kNoToken && end != kNoToken && eog.count(ret) && eog.count(call)) eog.erase(end);

  special_tokens.clear();
  for (int32_t id = 0; id < n; ++id)
    if (tokens[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens.push_back(id);
  std::stable_sort(special_tokens.begin(), special_tokens.end(),
                   [&](int32_t a, int32_t b) { return tokens[a].text.size() > tokens[b].text.size(); });
}

const TokenData& Vocab::token(int32_t id) const {
  if (!valid(id)) fail("token id {} out of range [0, {})", id, n_tokens());
  return tokens[static_cast<size_t>(id)];
}

int32_t Vocab::find(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNoToken : it->second;
}

int32_t Vocab::merge_rank(std::string_view left, std::string_view right) const {
  thread_local std::string k;
  k.assign(left);
  k += ' ';
  k += right;
  auto it = merge_ranks_.find(k);
  return it == merge_ranks_.end() ? -1 : it->second;
}

int32_t Vocab::byte_token(uint8_t b) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
  if (int32_t id = find(std::string_view(buf, 6)); id != kNoToken) return id;
  if (int32_t id = find(std::string_view(reinterpret_cast<const char*>(&b), 1)); id != kNoToken) return id;
  fail("vocab has no token for byte 0x{:02X} (neither <0x{:02X}> nor the byte itself)", b, b);
}

uint8_t Vocab::token_byte(int32_t id) const {
  const std::string& t = token(id).text;
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') fail("token {} '{}' is not a byte token <0xXX>", id, t);
  return static_cast<uint8_t>(std::stoul(t.substr(3, 2), nullptr, 16));
}

}  // namespace strata::tok
