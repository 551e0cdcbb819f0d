// fovea/viz.hpp — pictures that explain an allocation.
//
//   fovea::Executor exec;
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), {}, {}, exec);
//   fovea::ImageU8 o = fovea::render_overlay(t.pyramid.level(0), t.relevance, t.batch);
//   fovea::save_png(o, "overlay.png");
//
// Thread safety: pure functions.
#pragma once

#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/relevance.hpp"
#include "fovea/view.hpp"

namespace fovea {

// The image in gray, tinted by a heat map of the relevance score (RelevanceMap::score, what the
// allocation follows: blue = low, red = high, on a log scale between the image's lowest and
// highest tile, since measured detail spans orders of magnitude), with every
// token's border drawn in its level's colour: 0 red, 1 orange, 2 yellow, 3 green, 4 cyan,
// 5 blue, 6 violet, 7+ white.
ImageU8 render_overlay(const ImageViewU8& image, const RelevanceMap& relevance, const TokenBatch& batch);

// RGB colour of a level in the overlay.
void level_colour(int level, uint8_t rgb[3]);

}  // namespace fovea
