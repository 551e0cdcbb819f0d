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

namespace fovea::video_detail {

// A camera shift by whole patches: the (dx, dy), multiples of `step` px, |dx|, |dy| ≤
// max_steps × step and not both 0, with cur(x, y) = prev(x + dx, y + dy) on most of the overlap
// (three channels within 2 levels, on every 4th pixel of every 4th row), or false. Only such
// a shift lines up patches of the two frames' grids; whether a patch is really the same is for
// the caller to check, byte for byte.
bool estimate_patch_shift(const ImageU8& prev, const ImageU8& cur, int step, int max_steps, int& dx, int& dy);

}  // namespace fovea::video_detail
