// Private to src/video: what the mixed-scale session (session.cpp) and the windows session
// (windows_session.cpp) share: the copy of a frame's dirty tiles into the reference frame, and
// the query comparison behind the layout's hysteresis.
#pragma once

#include <cstdint>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"

namespace fovea::video_detail {

// Copies the dirty tiles of `src` into `dst` (same size and channels).
void copy_tiles(const ImageU8& src, ImageU8& dst, const TileGrid& g, const std::vector<uint8_t>& dirty, Executor& exec);

// Every fixation, region and the embedding equal.
bool same_query(const Query& a, const Query& b);

}  // namespace fovea::video_detail
