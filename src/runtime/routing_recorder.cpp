#include "runtime/routing_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"

namespace strata {

RoutingRecorder::RoutingRecorder(int n_layer, int n_expert, std::string run_name) : n_layer_(n_layer), n_expert_(n_expert) {
  trace_.n_layer = n_layer;
  trace_.n_expert = n_expert;
  trace_.runs.emplace_back();
  trace_.runs.back().name = std::move(run_name);
  counts_.assign(static_cast<size_t>(n_layer) * n_expert, 0);
}

void RoutingRecorder::on_route(int layer, int token, const int32_t* ids, int k) {
  trace_.top_k = std::max(trace_.top_k, k);
  // Prefill rows carry the prompt position, decode rows the decode step (pos0 - prompt length).
  const uint32_t t = pos0_ + static_cast<uint32_t>(token);
  trace_.runs.back().add(t, layer, phase_, std::span<const int32_t>(ids, static_cast<size_t>(k)));
  for (int j = 0; j < k; ++j)
    if (ids[j] >= 0 && ids[j] < n_expert_) counts_[static_cast<size_t>(layer) * n_expert_ + ids[j]]++;
}

void RoutingRecorder::on_predict(int layer, const int32_t* ids, int n) {
  trace_.runs.back().add(pos0_, layer, phase_, std::span<const int32_t>(ids, static_cast<size_t>(n)), /*predicted=*/true);
}

void RoutingRecorder::write_trace(const std::string& path) const { strata::write_trace(trace_, path); }

void RoutingRecorder::write_heatmap(const std::string& svg_path) const {
  uint64_t mx = 1;
  for (uint64_t c : counts_) mx = std::max(mx, c);
  const int cell = n_expert_ > 128 ? 4 : n_expert_ > 32 ? 8 : 16, left = 60, top = 40;
  const int w = left + n_expert_ * cell + 20, h = top + n_layer_ * cell + 40;
  std::ofstream svg(svg_path);
  STRATA_CHECK(svg.good(), "{}: cannot create", svg_path);
  svg << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"monospace\" font-size=\"10\">\n", w, h);
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << fmt::format("<text x=\"{}\" y=\"16\" font-size=\"12\">expert selections per layer (max {} per cell)</text>\n", left, mx);
  svg << fmt::format("<text x=\"{}\" y=\"{}\">experts 0..{}</text>\n", left, h - 12, n_expert_ - 1);
  for (int l = 0; l < n_layer_; ++l) {
    if (l % std::max(1, n_layer_ / 16) == 0) svg << fmt::format("<text x=\"4\" y=\"{}\">L{}</text>\n", top + l * cell + cell - 2, l);
    for (int e = 0; e < n_expert_; ++e) {
      const double v = std::sqrt(static_cast<double>(count(l, e)) / static_cast<double>(mx));
      const int r = static_cast<int>(255 * v), g = static_cast<int>(255 * (1 - std::abs(v - 0.5) * 2) * 0.6), b = static_cast<int>(255 * (1 - v));
      svg << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\"><title>layer {} expert {}: {}</title></rect>\n", left + e * cell,
                         top + l * cell, cell, cell, r, g, b, l, e, count(l, e));
    }
  }
  svg << "</svg>\n";
  STRATA_CHECK(svg.good(), "{}: write failed", svg_path);
  std::string csv_path = svg_path;
  if (csv_path.size() > 4 && csv_path.substr(csv_path.size() - 4) == ".svg") csv_path.resize(csv_path.size() - 4);
  csv_path += ".csv";
  std::ofstream csv(csv_path);
  STRATA_CHECK(csv.good(), "{}: cannot create", csv_path);
  csv << "layer";
  for (int e = 0; e < n_expert_; ++e) csv << ",e" << e;
  csv << "\n";
  for (int l = 0; l < n_layer_; ++l) {
    csv << l;
    for (int e = 0; e < n_expert_; ++e) csv << "," << count(l, e);
    csv << "\n";
  }
}

}  // namespace strata
