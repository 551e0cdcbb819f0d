// Compiled against the pyramid stage's include tree by build.layering.private_from_pyramid,
// which expects it NOT to compile (extract/batch.hpp is a private header of a downstream stage),
// and against the tokenize stage's tree by build.layering.control, which expects it to.
#include "fovea/pyramid.hpp"
#include "extract/batch.hpp"
