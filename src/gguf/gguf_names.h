#pragma once
// Names as tables: the GGUF metadata keys and tensor names Strata reads or writes, spelled once
// (llama.cpp's spelling). The architecture files, the model summary, inspect, the tokenizer, chat
// templates and synth use these instead of string literals.
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata {

// Metadata keys.
namespace key {

// General keys (full names).
inline constexpr const char* kArchitecture = "general.architecture";
inline constexpr const char* kName = "general.name";
inline constexpr const char* kDescription = "general.description";
inline constexpr const char* kAlignment = "general.alignment";
inline constexpr const char* kQuantizationVersion = "general.quantization_version";
inline constexpr const char* kFileType = "general.file_type";
inline constexpr const char* kSplitCount = "split.count";
inline constexpr const char* kSplitNo = "split.no";

// Per-architecture keys: the full key is "<arch>." + name (arch_key; MetaReader adds the prefix).
inline constexpr const char* kVocabSize = "vocab_size";
inline constexpr const char* kContextLength = "context_length";
inline constexpr const char* kEmbeddingLength = "embedding_length";
inline constexpr const char* kBlockCount = "block_count";
inline constexpr const char* kFeedForwardLength = "feed_forward_length";
inline constexpr const char* kLeadingDenseBlockCount = "leading_dense_block_count";
inline constexpr const char* kExpertCount = "expert_count";
inline constexpr const char* kExpertUsedCount = "expert_used_count";
inline constexpr const char* kExpertFeedForwardLength = "expert_feed_forward_length";
inline constexpr const char* kExpertSharedFeedForwardLength = "expert_shared_feed_forward_length";
inline constexpr const char* kExpertSharedCount = "expert_shared_count";
inline constexpr const char* kExpertGroupCount = "expert_group_count";
inline constexpr const char* kExpertGroupUsedCount = "expert_group_used_count";
inline constexpr const char* kExpertGatingFunc = "expert_gating_func";
inline constexpr const char* kExpertWeightsNorm = "expert_weights_norm";
inline constexpr const char* kExpertWeightsScale = "expert_weights_scale";
inline constexpr const char* kSwigluLimit = "swiglu_limit";
inline constexpr const char* kSwigluClampExp = "swiglu_clamp_exp";
inline constexpr const char* kSwigluClampShexp = "swiglu_clamp_shexp";
inline constexpr const char* kHashLayerCount = "hash_layer_count";
inline constexpr const char* kNextnPredictLayers = "nextn_predict_layers";
inline constexpr const char* kAttnHeadCount = "attention.head_count";
inline constexpr const char* kAttnHeadCountKv = "attention.head_count_kv";
inline constexpr const char* kAttnKeyLength = "attention.key_length";
inline constexpr const char* kAttnValueLength = "attention.value_length";
inline constexpr const char* kAttnKeyLengthMla = "attention.key_length_mla";
inline constexpr const char* kAttnValueLengthMla = "attention.value_length_mla";
inline constexpr const char* kAttnRmsEps = "attention.layer_norm_rms_epsilon";
inline constexpr const char* kAttnQLoraRank = "attention.q_lora_rank";
inline constexpr const char* kAttnKvLoraRank = "attention.kv_lora_rank";
inline constexpr const char* kAttnSlidingWindow = "attention.sliding_window";
inline constexpr const char* kAttnOutputGroupCount = "attention.output_group_count";
inline constexpr const char* kAttnOutputLoraRank = "attention.output_lora_rank";
inline constexpr const char* kAttnCompressRatios = "attention.compress_ratios";
inline constexpr const char* kAttnCompressRopeFreqBase = "attention.compress_rope_freq_base";
inline constexpr const char* kAttnIndexerHeadCount = "attention.indexer.head_count";
inline constexpr const char* kAttnIndexerKeyLength = "attention.indexer.key_length";
inline constexpr const char* kAttnIndexerTopK = "attention.indexer.top_k";
inline constexpr const char* kRopeDimensionCount = "rope.dimension_count";
inline constexpr const char* kRopeFreqBase = "rope.freq_base";
inline constexpr const char* kRopeScalingType = "rope.scaling.type";
inline constexpr const char* kRopeScalingFactor = "rope.scaling.factor";
inline constexpr const char* kRopeScalingOrigCtx = "rope.scaling.original_context_length";
inline constexpr const char* kRopeScalingYarnLogMul = "rope.scaling.yarn_log_multiplier";
inline constexpr const char* kRopeScalingYarnBetaFast = "rope.scaling.yarn_beta_fast";
inline constexpr const char* kRopeScalingYarnBetaSlow = "rope.scaling.yarn_beta_slow";
inline constexpr const char* kRopeDimensionSections = "rope.dimension_sections";  // M-RoPE
inline constexpr const char* kFullAttentionInterval = "full_attention_interval";   // hybrid models (Qwen3.5)
inline constexpr const char* kAttnRecurrentLayers = "attention.recurrent_layers";  // per-layer bool: linear attention
inline constexpr const char* kSsmConvKernel = "ssm.conv_kernel";
inline constexpr const char* kSsmStateSize = "ssm.state_size";
inline constexpr const char* kSsmGroupCount = "ssm.group_count";
inline constexpr const char* kSsmTimeStepRank = "ssm.time_step_rank";
inline constexpr const char* kSsmInnerSize = "ssm.inner_size";
inline constexpr const char* kHcCount = "hyper_connection.count";
inline constexpr const char* kHcSinkhornIterations = "hyper_connection.sinkhorn_iterations";
inline constexpr const char* kHcEpsilon = "hyper_connection.epsilon";

// "<arch>.<name>", e.g. arch_key("qwen3moe", kBlockCount) = "qwen3moe.block_count".
inline std::string arch_key(std::string_view arch, std::string_view name) { return fmt::format("{}.{}", arch, name); }

// Tokenizer keys (full names).
inline constexpr const char* kTokModel = "tokenizer.ggml.model";
inline constexpr const char* kTokPre = "tokenizer.ggml.pre";
inline constexpr const char* kTokTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kTokTokenType = "tokenizer.ggml.token_type";
inline constexpr const char* kTokScores = "tokenizer.ggml.scores";
inline constexpr const char* kTokMerges = "tokenizer.ggml.merges";
inline constexpr const char* kTokAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr const char* kTokAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr const char* kTokAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr const char* kTokBosId = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kTokEosId = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kTokEotId = "tokenizer.ggml.eot_token_id";
inline constexpr const char* kTokEomId = "tokenizer.ggml.eom_token_id";
inline constexpr const char* kTokUnknownId = "tokenizer.ggml.unknown_token_id";
inline constexpr const char* kTokSeparatorId = "tokenizer.ggml.seperator_token_id";  // sic (llama.cpp's spelling)
inline constexpr const char* kTokPaddingId = "tokenizer.ggml.padding_token_id";
inline constexpr const char* kTokMaskId = "tokenizer.ggml.mask_token_id";
inline constexpr const char* kTokFimPreId = "tokenizer.ggml.fim_pre_token_id";
inline constexpr const char* kTokFimSufId = "tokenizer.ggml.fim_suf_token_id";
inline constexpr const char* kTokFimMidId = "tokenizer.ggml.fim_mid_token_id";
inline constexpr const char* kTokFimPadId = "tokenizer.ggml.fim_pad_token_id";
inline constexpr const char* kTokFimRepId = "tokenizer.ggml.fim_rep_token_id";
inline constexpr const char* kTokFimSepId = "tokenizer.ggml.fim_sep_token_id";
inline constexpr const char* kChatTemplate = "tokenizer.chat_template";

}  // namespace key

// Tensor names.
namespace tn {

// Whole-model tensors (full names).
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";  // Llama 3.1 rope scaling factors
inline constexpr const char* kOutputHc = "output_hc";  // prefix of the hyper-connection tensors (kHc*)

// Per-block tensors: the full name is "blk.<layer>." + name (blk()).
inline constexpr std::string_view kBlockPrefix = "blk.";
// Attention.
inline constexpr const char* kAttnNorm = "attn_norm.weight";
inline constexpr const char* kAttnQ = "attn_q.weight";
inline constexpr const char* kAttnK = "attn_k.weight";
inline constexpr const char* kAttnV = "attn_v.weight";
inline constexpr const char* kAttnOutput = "attn_output.weight";
inline constexpr const char* kAttnQBias = "attn_q.bias";
inline constexpr const char* kAttnKBias = "attn_k.bias";
inline constexpr const char* kAttnVBias = "attn_v.bias";
inline constexpr const char* kAttnOutputBias = "attn_output.bias";
inline constexpr const char* kAttnQNorm = "attn_q_norm.weight";
inline constexpr const char* kAttnKNorm = "attn_k_norm.weight";
inline constexpr const char* kAttnSinks = "attn_sinks.weight";
inline constexpr const char* kPostAttnNorm = "post_attention_norm.weight";
// Multi-head latent attention (DeepSeek-V2/V3) and DeepSeek-V4's shared key/value.
inline constexpr const char* kAttnQA = "attn_q_a.weight";
inline constexpr const char* kAttnQANorm = "attn_q_a_norm.weight";
inline constexpr const char* kAttnQB = "attn_q_b.weight";
inline constexpr const char* kAttnKvAMqa = "attn_kv_a_mqa.weight";
inline constexpr const char* kAttnKvANorm = "attn_kv_a_norm.weight";
inline constexpr const char* kAttnKB = "attn_k_b.weight";
inline constexpr const char* kAttnVB = "attn_v_b.weight";
inline constexpr const char* kAttnKvB = "attn_kv_b.weight";  // older MLA layout: k_b and v_b unsplit
inline constexpr const char* kAttnKv = "attn_kv.weight";
inline constexpr const char* kAttnOutputA = "attn_output_a.weight";
inline constexpr const char* kAttnOutputB = "attn_output_b.weight";
inline constexpr const char* kIndexerProj = "indexer.proj.weight";
inline constexpr const char* kIndexerQB = "indexer.attn_q_b.weight";
inline constexpr const char* kIndexerAttnK = "indexer.attn_k.weight";  // DeepSeek-V3.2: one indexer key per token
inline constexpr const char* kIndexerKNorm = "indexer.k_norm.weight";
inline constexpr const char* kIndexerKNormBias = "indexer.k_norm.bias";
// DeepSeek-V4 tensor groups: prefix + suffix.
inline constexpr const char* kHcAttn = "hc_attn";
inline constexpr const char* kHcFfn = "hc_ffn";
inline constexpr const char* kHcFn = "_fn.weight";
inline constexpr const char* kHcBase = "_base.weight";
inline constexpr const char* kHcScale = "_scale.weight";
inline constexpr const char* kAttnCompressor = "attn_compressor";
inline constexpr const char* kIndexerCompressor = "indexer_compressor";
inline constexpr const char* kCompressorKv = "_kv.weight";
inline constexpr const char* kCompressorGate = "_gate.weight";
inline constexpr const char* kCompressorApe = "_ape.weight";
inline constexpr const char* kCompressorNorm = "_norm.weight";
// Gated DeltaNet (linear attention, Qwen3.5).
inline constexpr const char* kAttnQkv = "attn_qkv.weight";
inline constexpr const char* kAttnGate = "attn_gate.weight";
inline constexpr const char* kSsmConv1d = "ssm_conv1d.weight";
inline constexpr const char* kSsmDtBias = "ssm_dt.bias";
inline constexpr const char* kSsmA = "ssm_a";  // no ".weight" suffix
inline constexpr const char* kSsmBeta = "ssm_beta.weight";
inline constexpr const char* kSsmAlpha = "ssm_alpha.weight";
inline constexpr const char* kSsmNorm = "ssm_norm.weight";
inline constexpr const char* kSsmOut = "ssm_out.weight";
// Feed-forward.
inline constexpr const char* kFfnNorm = "ffn_norm.weight";
inline constexpr const char* kFfnGate = "ffn_gate.weight";
inline constexpr const char* kFfnUp = "ffn_up.weight";
inline constexpr const char* kFfnDown = "ffn_down.weight";
inline constexpr const char* kFfnGateInp = "ffn_gate_inp.weight";  // router
inline constexpr const char* kFfnGateInpBias = "ffn_gate_inp.bias";
inline constexpr const char* kFfnGateExps = "ffn_gate_exps.weight";
inline constexpr const char* kFfnUpExps = "ffn_up_exps.weight";
inline constexpr const char* kFfnDownExps = "ffn_down_exps.weight";
inline constexpr const char* kFfnGateExpsBias = "ffn_gate_exps.bias";
inline constexpr const char* kFfnUpExpsBias = "ffn_up_exps.bias";
inline constexpr const char* kFfnDownExpsBias = "ffn_down_exps.bias";
inline constexpr const char* kFfnGateShexp = "ffn_gate_shexp.weight";
inline constexpr const char* kFfnUpShexp = "ffn_up_shexp.weight";
inline constexpr const char* kFfnDownShexp = "ffn_down_shexp.weight";
inline constexpr const char* kFfnGateInpShexp = "ffn_gate_inp_shexp.weight";  // per-token sigmoid gate of the shared expert
inline constexpr const char* kExpProbsBias = "exp_probs_b.bias";
inline constexpr const char* kFfnGateTid2eid = "ffn_gate_tid2eid.weight";
// NextN / MTP block (GLM-4.5).
inline constexpr const char* kNextnEhProj = "nextn.eh_proj.weight";
inline constexpr const char* kNextnEnorm = "nextn.enorm.weight";
inline constexpr const char* kNextnHnorm = "nextn.hnorm.weight";
inline constexpr const char* kNextnEmbedTokens = "nextn.embed_tokens.weight";
inline constexpr const char* kNextnSharedHeadHead = "nextn.shared_head_head.weight";
inline constexpr const char* kNextnSharedHeadNorm = "nextn.shared_head_norm.weight";
// Routed expert tensors ([n_expert, rows, cols]) have this in their name.
inline constexpr std::string_view kRoutedExpertsMark = "_exps.";

// "blk.<layer>.<name>".
inline std::string blk(int layer, std::string_view name) { return fmt::format("{}{}.{}", kBlockPrefix, layer, name); }

}  // namespace tn

}  // namespace strata
