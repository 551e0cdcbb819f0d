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
#include "fovea/video.hpp"

namespace fovea::video_detail {

// Copies the dirty tiles of `src` into `dst` (same size and channels).
void copy_tiles(const ImageU8& src, ImageU8& dst, const TileGrid& g, const std::vector<uint8_t>& dirty, Executor& exec);

// Every fixation, region and the embedding equal.
bool same_query(const Query& a, const Query& b);

// The change test and the refresh decision of a frame, as both sessions make them: a refresh
// (r.refresh, r.refresh_reason) for the first frame, a new size (`grid` made again for it),
// --reuse off and keyframes; otherwise the tiles that differ from `reference` (the previous
// frame) are `dirty`, and more of them than p.refresh_fraction is a scene cut. Sets r.tiles and
// r.dirty_tiles (0 on a refresh before the test: the caller counts every tile then). Returns
// whether the size changed.
bool change_test(const ImageU8& frame, const PyramidU8& reference, int64_t processed, const VideoParams& p,
                 TileGrid& grid, Executor& exec, FrameResult& r, std::vector<uint8_t>& dirty);

}  // namespace fovea::video_detail

namespace fovea::video_detail {

// A camera shift by whole patches: the (dx, dy), multiples of `step` px, |dx|, |dy| ≤
// max_steps × step and not both 0, with cur(x, y) = prev(x + dx, y + dy) on most of the overlap
// (three channels within 2 levels, on every 4th pixel of every 4th row), or false. Only such
// a shift lines up patches of the two frames' grids; whether a patch is really the same is for
// the caller to check, byte for byte.
bool estimate_patch_shift(const ImageU8& prev, const ImageU8& cur, int step, int max_steps, int& dx, int& dy);

}  // namespace fovea::video_detail
