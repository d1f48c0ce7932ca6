// Writes the fuzzer's seed corpus: a few small valid GGUF files that cover every metadata value
// type, nested and string arrays, several alignments and ggml types, and an MoE-shaped layer.
// Usage: fuzz_make_corpus OUT_DIR
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_writer.h"

using namespace strata;

namespace {

std::string bytes_of(uint64_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (uint64_t k = 0; k < n; ++k) s[k] = static_cast<char>(seed + k * 7);
  return s;
}

void add(GgufWriter& w, const std::string& name, GgmlType t, std::vector<uint64_t> ne, uint8_t seed) {
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  const auto& i = ggml_info(t);
  const std::string b = bytes_of(n / i.block_size * i.type_size, seed);
  w.add_tensor(name, t, ne, b.data(), b.size());
}

std::string nested_array() {
  std::string e;
  auto put32 = [&](uint32_t v) { e.append(reinterpret_cast<const char*>(&v), 4); };
  auto put64 = [&](uint64_t v) { e.append(reinterpret_cast<const char*>(&v), 8); };
  put32(static_cast<uint32_t>(GgufType::ARRAY));
  put64(2);
  for (int k = 0; k < 2; ++k) {
    put32(static_cast<uint32_t>(GgufType::I32));
    put64(3);
    for (int j = 0; j < 3; ++j) put32(static_cast<uint32_t>(k * 10 + j));
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    {  // every metadata type, no tensors
      GgufWriter w;
      w.set_u8("t.u8", 200);
      w.set_i8("t.i8", -5);
      w.set_u16("t.u16", 60000);
      w.set_i16("t.i16", -3000);
      w.set_u32("t.u32", 4000000000u);
      w.set_i32("t.i32", -7);
      w.set_u64("t.u64", 1ull << 40);
      w.set_i64("t.i64", -(1ll << 40));
      w.set_f32("t.f32", 1.5f);
      w.set_f64("t.f64", -2.25);
      w.set_bool("t.bool", true);
      w.set_string("general.architecture", "llama");
      w.set_array_i32("t.ai32", {1, -2, 3});
      w.set_array_u32("t.au32", {7, 8});
      w.set_array_f32("t.af32", {0.5f, 1e9f});
      w.set_array_bool("t.abool", {true, false, true});
      w.set_array_string("t.astr", {"a", "", "ß∂"});
      w.set_raw("t.nested", GgufType::ARRAY, nested_array());
      w.write(dir + "/metadata_only.gguf");
    }
    {  // a tiny MoE-shaped model: dense + routed expert tensors in two layers
      GgufWriter w;
      w.set_string("general.architecture", "qwen3moe");
      w.set_u32("qwen3moe.block_count", 2);
      w.set_u32("qwen3moe.expert_count", 4);
      w.set_u32("qwen3moe.expert_used_count", 2);
      w.set_array_string("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"});
      add(w, "token_embd.weight", GgmlType::Q8_0, {32, 4}, 1);
      add(w, "output.weight", GgmlType::F16, {32, 4}, 2);
      for (int l = 0; l < 2; ++l) {
        add(w, fmt::format("blk.{}.attn_q.weight", l), GgmlType::Q4_0, {32, 32}, 3);
        add(w, fmt::format("blk.{}.ffn_norm.weight", l), GgmlType::F32, {32}, 4);
        add(w, fmt::format("blk.{}.ffn_up_exps.weight", l), GgmlType::Q4_K, {256, 2, 4}, 5);
        add(w, fmt::format("blk.{}.ffn_down_exps.weight", l), GgmlType::Q6_K, {256, 1, 4}, 6);
      }
      w.write(dir + "/moe_tiny.gguf");
    }
    {  // alignment 64, many ggml types
      GgufWriter w(64);
      w.set_string("general.architecture", "test");
      const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,  GgmlType::Q4_1,  GgmlType::Q5_0, GgmlType::Q5_1,
                                GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,  GgmlType::Q5_K,  GgmlType::Q8_K, GgmlType::IQ4_NL,
                                GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::I8, GgmlType::I32, GgmlType::F64, GgmlType::TQ2_0};
      int k = 0;
      for (GgmlType t : types) add(w, fmt::format("t{}.{}", k++, ggml_type_name(t)), t, {256}, static_cast<uint8_t>(k));
      w.write(dir + "/types_align64.gguf");
    }
    {  // the low-bit types of "dynamic" quants, two patterned rows each
      GgufWriter w;
      w.set_string("general.architecture", "test");
      const GgmlType types[] = {GgmlType::IQ1_S,   GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                                GgmlType::IQ3_S,   GgmlType::TQ1_0, GgmlType::TQ2_0,   GgmlType::Q2_K,   GgmlType::Q3_K,  GgmlType::IQ4_XS};
      int k = 0;
      for (GgmlType t : types) add(w, fmt::format("blk.{}.ffn_down_exps.weight", k), t, {256, 2, 1}, static_cast<uint8_t>(0xF0 + k)), ++k;
      w.write(dir + "/types_lowbit.gguf");
    }
    {  // split-style metadata, alignment 32, 4-d tensor
      GgufWriter w;
      w.set_u16("split.no", 0);
      w.set_u16("split.count", 1);
      w.set_i32("split.tensors.count", 1);
      add(w, "blk.0.ffn_gate_exps.weight", GgmlType::F16, {2, 3, 4, 5}, 9);
      w.write(dir + "/split_meta.gguf");
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
