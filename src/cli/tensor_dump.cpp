#include "cli/tensor_dump.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace strata::cli {

TensorDumper::TensorDumper(const std::string& dir, const std::string& filter) : dir_(dir), all_(filter.empty()) {
  try {
    if (!all_) filter_ = std::regex(filter);
  } catch (const std::regex_error& e) {
    fail("--dump-filter '{}' is not a valid regular expression ({})", filter, e.what());
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  STRATA_CHECK(!ec, "{}: cannot create the folder ({})", dir_, ec.message());
  index_ = std::fopen((dir_ + "/index.csv").c_str(), "w");
  STRATA_CHECK(index_ != nullptr, "{}/index.csv: cannot create", dir_);
  std::fprintf(index_, "pass,name,layer,rows,cols,file\n");
}

TensorDumper::~TensorDumper() {
  if (index_) std::fclose(index_);
}

bool TensorDumper::wants(const char* name, int layer) {
  return all_ || std::regex_match(fmt::format("{}-{}", name, layer), filter_);
}

void TensorDumper::on_tensor(const char* name, int layer, const float* data, int rows, int cols) {
  std::string key = fmt::format("{}-{}", name, layer);
  if (!seen_.insert(key).second) {  // every point fires once per pass
    ++pass_;
    seen_.clear();
    seen_.insert(key);
  }
  const std::string file = fmt::format("p{}.{}.f32", pass_, key);
  const std::string path = dir_ + "/" + file;
  FILE* f = std::fopen(path.c_str(), "wb");
  STRATA_CHECK(f != nullptr, "{}: cannot create", path);
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  const size_t wrote = std::fwrite(data, sizeof(float), n, f);
  const bool closed = std::fclose(f) == 0;
  STRATA_CHECK(wrote == n && closed, "{}: write failed", path);
  std::fprintf(index_, "%d,%s,%d,%d,%d,%s\n", pass_, name, layer, rows, cols, file.c_str());
  std::fflush(index_);
  ++files_;
}

}  // namespace strata::cli
