#pragma once
// Slot files: one sequence slot's state on disk, so that a prompt's KV rows outlive a request and a
// restart (the server's POST /slots/{id}?action=save|restore, server/slot_actions.cpp). A restored
// slot holds the same tokens, rows and reuse record as the slot that was saved, so it continues with
// the same logits bit for bit and a later prompt that starts with its tokens reuses its rows.
//
// Layout (little-endian), kSlotHeaderBytes of header then the body:
//   "STRSLOT1" | u32 version | u32 header bytes | u64 model key (experts/warm_stats.h's
//   model_identity: the tensor table's names, types, shapes, offsets) | u32 type_k | u32 type_v |
//   u32 n_ctx | u32 n_layer | u32 n_vocab | u32 n_tokens | u32 n_chunked | u32 0 |
//   u64 row bytes per position (every layer's K and V) | u64 state bytes |
//   char arch[32] | char state kind[32] (KvCacheExt::slot_kind, "" for none) | u64 hash of the header before it
//   body: i32 tokens[n_tokens] | per layer: its K rows [n_tokens], then its V rows [n_tokens], in
//   the cache's own type | the architecture's per-sequence state (KvCacheExt::seq_regions) |
//   u64 hash of every byte of the file before it
// Reading checks the header against the engine (model, cache types, context, architecture, state
// kind), the file's size against the header before it allocates or writes anything, every token id,
// then the body's hash: a foreign, truncated or corrupt file is a SlotFileError and never a crash.
// Only the tokens vector is allocated (n_tokens <= n_ctx); rows go straight into the cache.
#include <cstdint>
#include <string>

#include "core/error.h"

namespace strata {

class Engine;

inline constexpr uint32_t kSlotFileVersion = 1;
inline constexpr size_t kSlotHeaderBytes = 8 + 4 * 2 + 8 + 4 * 8 + 8 * 2 + 32 * 2 + 8;

// A file that cannot be restored (foreign, truncated, corrupt), a name that is not allowed, or an
// engine whose state slot files cannot hold: the request's fault or a refusal (HTTP 400), not an I/O
// failure of the server.
class SlotFileError : public Error {
 public:
  explicit SlotFileError(const std::string& msg) : Error(msg) {}
};

struct SlotFileCounts {
  int n_tokens = 0;    // tokens (positions) saved or restored
  uint64_t bytes = 0;  // bytes written or read
};

// Why slot files cannot hold this engine's sequences ("" when they can): KV rows on a device
// (the Vulkan executor), or per-sequence state of a kind that cannot be saved yet (DeepSeek-V4).
std::string slot_file_unsupported(Engine& eng);

// Writes slot `seq` to `fd` (open for writing, at offset 0). Throws SlotFileError where the engine
// is not supported, Error on I/O errors.
SlotFileCounts write_slot_file(Engine& eng, int seq, int fd);
// Restores slot `seq` from `fd` (open for reading, at offset 0). Throws SlotFileError for a file
// this engine cannot take (the slot is untouched while the header, size and tokens are checked; a
// body whose hash then fails leaves the slot empty), Error on I/O errors.
SlotFileCounts read_slot_file(Engine& eng, int seq, int fd);

// A directory of slot files (--slot-save-path). Names are plain file names inside it: no '/', no
// '\', no control characters, not starting with '.', at most 255 bytes; a name that is a symbolic
// link (or anything but a regular file) is refused.
class SlotDir {
 public:
  // Creates the directory (and its parents) when missing and keeps it open. Throws Error.
  explicit SlotDir(const std::string& path);
  ~SlotDir();
  SlotDir(const SlotDir&) = delete;
  SlotDir& operator=(const SlotDir&) = delete;

  const std::string& path() const { return path_; }
  // Throws SlotFileError naming what is wrong with `name`.
  static void check_name(const std::string& name);
  // Atomically: a temporary file in the directory, written, fsynced, renamed over `name`, the
  // directory fsynced. A failed save leaves no temporary file and any older `name` as it was.
  SlotFileCounts save(Engine& eng, int seq, const std::string& name);
  // Opens `name` without following links; a missing file is a SlotFileError.
  SlotFileCounts restore(Engine& eng, int seq, const std::string& name);

 private:
  std::string path_;
  int fd_ = -1;  // the directory
};

}  // namespace strata
