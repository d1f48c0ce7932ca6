// strata-export-gguf: writes the GGUF of a model trained by tools/train/train_moe.py (qwen3moe, or
// the dense qwen3 draft) through
// Strata's own GgufWriter. Input: the script's export folder (manifest.json: architecture,
// hyperparameters, tokenizer and tensor list with ggml ne order; tensors.f32: raw little-endian
// f32). Matrices are quantized with round-to-nearest (synth_quantize), norms and routers stay F32.
//
//   strata-export-gguf EXPORT_DIR OUT.gguf [--type q8_0|f32|f16|q4_0|q4_K|q6_K]
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf_names.h"
#include "gguf/gguf_writer.h"
#include "synth/synth_blocks.h"
#include "synth/synth_vocab.h"

using namespace strata;
using nlohmann::json;

namespace {

// The model is not trained on chat turns: the template joins the messages with newlines and adds
// nothing for the reply, so a chat continues the text.
constexpr const char* kPlainTemplate =
    "{% for message in messages %}{{ message['content'] }}{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}";

uint32_t file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q4_K: return 15;
    case GgmlType::Q6_K: return 18;
    default: return 0;
  }
}

int run(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: strata-export-gguf EXPORT_DIR OUT.gguf [--type q8_0|f32|f16|q4_0|q4_K|q6_K]\n");
    return 2;
  }
  const std::string dir = argv[1], out = argv[2];
  GgmlType wtype = GgmlType::Q8_0;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--type" && i + 1 < argc) {
      auto t = ggml_type_from_name(argv[++i]);
      if (!t || !synth_quantize_supported(*t)) throw std::runtime_error(fmt::format("unsupported --type {}", argv[i]));
      wtype = *t;
    } else {
      throw std::runtime_error(fmt::format("unknown argument {}", a));
    }
  }
  json m;
  {
    std::ifstream f(dir + "/manifest.json");
    if (!f) throw std::runtime_error("cannot open " + dir + "/manifest.json");
    f >> m;
  }
  std::ifstream data(dir + "/tensors.f32", std::ios::binary);
  if (!data) throw std::runtime_error("cannot open " + dir + "/tensors.f32");

  const std::string arch = m.at("arch");
  if (arch != "qwen3moe" && arch != "qwen3") throw std::runtime_error("only qwen3moe and qwen3 manifests are supported, got " + arch);
  const json& c = m.at("config");
  auto k = [&](const char* name) { return key::arch_key(arch, name); };
  GgufWriter w;
  w.set_string(key::kArchitecture, arch);
  w.set_string(key::kName, m.at("name").get<std::string>());
  w.set_string(key::kDescription, "trained by tools/train/train_moe.py on English text from Debian packages (bible-kjv, fortunes)");
  w.set_u32(key::kQuantizationVersion, 2);
  w.set_u32(key::kFileType, file_type_of(wtype));
  w.set_u32(k(key::kVocabSize), c.at("vocab").get<uint32_t>());
  w.set_u32(k(key::kContextLength), c.at("ctx").get<uint32_t>());
  w.set_u32(k(key::kEmbeddingLength), c.at("d").get<uint32_t>());
  w.set_u32(k(key::kBlockCount), c.at("n_layer").get<uint32_t>());
  w.set_f32(k(key::kAttnRmsEps), c.at("rms_eps").get<float>());
  w.set_f32(k(key::kRopeFreqBase), c.at("rope_base").get<float>());
  if (arch == "qwen3") {  // dense: one FFN per layer (the draft model)
    w.set_u32(k(key::kFeedForwardLength), c.at("n_ff_exp").get<uint32_t>());
  } else {
    w.set_u32(k(key::kExpertFeedForwardLength), c.at("n_ff_exp").get<uint32_t>());
    w.set_u32(k(key::kExpertCount), c.at("n_expert").get<uint32_t>());
    w.set_u32(k(key::kExpertUsedCount), c.at("n_expert_used").get<uint32_t>());
  }
  w.set_u32(k(key::kAttnHeadCount), c.at("n_head").get<uint32_t>());
  w.set_u32(k(key::kAttnHeadCountKv), c.at("n_head_kv").get<uint32_t>());
  w.set_u32(k(key::kAttnKeyLength), c.at("head_dim").get<uint32_t>());
  w.set_u32(k(key::kAttnValueLength), c.at("head_dim").get<uint32_t>());
  if (arch == "qwen3moe") w.set_bool(k(key::kExpertWeightsNorm), true);  // trained with top-k weights renormalized to sum 1

  const json& t = m.at("tokenizer");
  SynthVocab v;
  v.pre = t.at("pre");
  v.tokens = t.at("tokens").get<std::vector<std::string>>();
  v.types = t.at("types").get<std::vector<int32_t>>();
  v.merges = t.at("merges").get<std::vector<std::string>>();
  v.bos = t.at("bos");
  v.eos = t.at("eos");
  v.pad = t.at("pad");
  v.eot = t.at("eot");
  v.add_bos = t.at("add_bos");
  v.chat_template = kPlainTemplate;
  synth_write_vocab(w, v);

  for (const json& jt : m.at("tensors")) {
    const std::string name = jt.at("name");
    const auto ne = jt.at("ne").get<std::vector<uint64_t>>();
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<float> src(n);
    data.seekg(static_cast<std::streamoff>(jt.at("offset").get<uint64_t>()));
    if (!data.read(reinterpret_cast<char*>(src.data()), static_cast<std::streamsize>(n * 4)))
      throw std::runtime_error("tensors.f32 is short at " + name);
    // 1-D tensors (norms) and the routers stay F32, as llama.cpp's quantizer leaves them.
    const bool keep_f32 = ne.size() == 1 || name.find("ffn_gate_inp") != std::string::npos;
    GgmlType ty = keep_f32 ? GgmlType::F32 : wtype;
    if (ne[0] % static_cast<uint64_t>(ggml_info(ty).block_size) != 0) ty = GgmlType::F16;
    const auto& info = ggml_info(ty);
    std::vector<uint8_t> dst(n / static_cast<uint64_t>(info.block_size) * static_cast<uint64_t>(info.type_size));
    // Rows are quantized one by one (blocks never straddle rows).
    const uint64_t rows = n / ne[0], row_bytes = dst.size() / rows;
    for (uint64_t r = 0; r < rows; ++r)
      synth_quantize(ty, src.data() + r * ne[0], dst.data() + r * row_bytes, static_cast<int64_t>(ne[0]));
    w.add_tensor(name, ty, ne, dst.data(), dst.size());
  }
  w.write(out);
  fmt::print("wrote {} ({} tensors, weights {})\n", out, m.at("tensors").size(), ggml_type_name(wtype));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata-export-gguf: {}\n", e.what());
    return 1;
  }
}
