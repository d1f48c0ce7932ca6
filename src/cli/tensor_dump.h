#pragma once
// strata run --dump-tensors DIR [--dump-filter REGEX]: the model's named intermediate tensors
// (TensorObserver) written as raw float32 files, one per tensor per pass, plus DIR/index.csv
// (pass,name,layer,rows,cols,file; passes counted from 0 in order, a prompt cut into
// several passes included). The filter is matched against "name-layer" (e.g. l_out-3,
// result_norm--1 for the output head's tensors), the names llama.cpp's eval callback reports.
#include <cstdio>
#include <regex>
#include <set>
#include <string>

#include "model/model.h"

namespace strata::cli {

class TensorDumper : public TensorObserver {
 public:
  // Creates DIR and DIR/index.csv; an empty filter matches everything.
  TensorDumper(const std::string& dir, const std::string& filter);
  ~TensorDumper() override;
  TensorDumper(const TensorDumper&) = delete;
  TensorDumper& operator=(const TensorDumper&) = delete;

  bool wants(const char* name, int layer) override;
  void on_tensor(const char* name, int layer, const float* data, int rows, int cols) override;
  int files() const { return files_; }

 private:
  std::string dir_;
  std::regex filter_;
  bool all_ = true;
  FILE* index_ = nullptr;
  int pass_ = 0, files_ = 0;
  std::set<std::string> seen_;  // "name-layer" reported in this pass: seen again = the next pass
};

}  // namespace strata::cli
