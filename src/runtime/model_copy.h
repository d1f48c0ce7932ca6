#pragma once
// Copies of a model on other drives (--model-copy) and expert parallelism's ranks must hold the same
// file: the same tensor table (names, types, shapes, sizes, offsets), file sizes and header bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "experts/disk_probe.h"

namespace strata {

class GgufModel;
class ExpertTier;
struct TierOptions;

// One line per tensor ("name type shape bytes @part:offset"), then the parts' sizes, then a hash of
// each part's header (metadata and tensor table, the bytes before its data region).
std::vector<std::string> tensor_table_lines(const GgufModel& m);
// "" when equal; else which entry differs first, the tensor named, with both sides' lines ("a" and
// "b" name the two sides).
std::string first_table_difference(const std::vector<std::string>& a, const std::vector<std::string>& b, const std::string& a_name,
                                   const std::string& b_name);
// The parts' paths of `copy` after checking it against `model`; throws naming the first difference.
std::vector<std::string> checked_model_copy(const GgufModel& model, const std::string& copy);

// The disk probe over a streaming tier's drives: its file, then each --model-copy (opt.model_copies),
// each alone and all at once (experts/disk_probe.h). Only for a tier that streams (tier.cache()).
DriveProbe measure_tier_drives(const ExpertTier& tier, const TierOptions& opt, int depth, uint64_t bytes);

}  // namespace strata
