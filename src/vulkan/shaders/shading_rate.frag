// Writes the shading rate this fragment was shaded at (GL_EXT_fragment_shading_rate's
// gl_ShadingRateEXT: gl_ShadingRateFlag{2,4}{Vertical,Horizontal}PixelsEXT = 1, 2, 4, 8, i.e.
// (log2 w << 2) | log2 h, the attachment's own encoding) to an R8_UINT colour attachment. A
// multi-pixel fragment writes every pixel it covers, so each pixel ends up holding the rate
// of the fragment that covered it.
#version 450
#extension GL_EXT_fragment_shading_rate : require
layout(location = 0) out uint rate;

void main() { rate = uint(gl_ShadingRateEXT); }
