// compress/plot.hpp — the rate–distortion picture of `fovea compress --report --plot`.
#pragma once

#include <string>
#include <vector>

#include "fovea/image.hpp"

namespace fovea::compress {

struct PlotPoint {
  std::string label;
  double bytes_per_token = 0;
  double cosine = 0;
};

// Bytes per token (log2 axis, up to fp32's `fp32_bytes`) against mean cosine; one labelled
// marker per codec; guide lines at cosine 0.95 and 0.999. RGB, 960×640.
ImageU8 plot_rate_distortion(const std::vector<PlotPoint>& points, double fp32_bytes, const std::string& title);

}  // namespace fovea::compress
