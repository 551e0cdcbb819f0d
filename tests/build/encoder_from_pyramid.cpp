// Compiled against the pyramid stage's include tree by build.layering.encoder_from_pyramid,
// which expects it NOT to compile: the encoder is downstream of the pyramid.
#include "fovea/pyramid.hpp"
#include "fovea/encoder.hpp"
