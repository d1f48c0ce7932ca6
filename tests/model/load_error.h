#pragma once
// The error Model::load gives for a hand-made file ("" if it loads); removes the file.
#include <filesystem>
#include <string>

#include "core/error.h"
#include "model/model.h"

namespace strata::test {

inline std::string load_error(const std::string& path) {
  std::string err;
  try {
    Model::load(path);
  } catch (const Error& e) {
    err = e.what();
  }
  std::filesystem::remove(path);
  return err;
}

}  // namespace strata::test
