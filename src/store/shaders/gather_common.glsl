// Shared by gather_buffer.comp and gather_image.comp: copy byte runs of the store's virtual
// space into a packed output, one 32-bit output word per invocation (grid-stride loop).
//
// Runs (std430 uvec4): x = first source word, y = byte shift within it (0..3), z = first output
// byte, w = bytes. A dispatch's runs are contiguous in the output. Runs and outputs are byte
// granular (f16 tokens of odd D are 2 mod 4 bytes), so a word is either inside one run (two
// shifted source words) or assembled byte by byte; a word the dispatch covers only partly is
// read-modified-written: dispatches sharing a word are separated by a barrier on the host.
// Requires `uint src_word(uint i)` defined before inclusion.

layout(local_size_x = 64) in;
layout(std430, binding = 1) buffer Dst { uint dst[]; };
layout(std430, binding = 2) readonly buffer Runs { uvec4 runs[]; };
layout(push_constant) uniform Push {
  uint run_first, run_count;  // this dispatch's runs
  uint word_first, word_end;  // output words it touches
  uint block_w, block_h;      // image only: texels per block
  uint blocks_x, blocks_y;    // image only: blocks per row, rows per layer
} pc;

uint src_word(uint i);

uint src_byte(uvec4 r, uint k) {  // byte k of run r (k < r.w)
  const uint b = r.y + k;
  return (src_word(r.x + (b >> 2)) >> (8u * (b & 3u))) & 0xffu;
}

// The last run whose first output byte is <= o.
uint find_run(uint o) {
  uint lo = pc.run_first, hi = pc.run_first + pc.run_count - 1u;
  while (lo < hi) {
    const uint mid = (lo + hi + 1u) >> 1;
    if (runs[mid].z <= o) lo = mid;
    else hi = mid - 1u;
  }
  return lo;
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint w = pc.word_first + gl_GlobalInvocationID.x; w < pc.word_end; w += stride) {
    const uint o = 4u * w;
    uint r = find_run(o);
    uvec4 run = runs[r];
    if (o >= run.z && o + 4u <= run.z + run.w) {  // inside one run: two shifted words at most
      const uint b = run.y + (o - run.z);
      const uint s = run.x + (b >> 2), sh = 8u * (b & 3u);
      dst[w] = sh == 0u ? src_word(s) : (src_word(s) >> sh) | (src_word(s + 1u) << (32u - sh));
      continue;
    }
    uint value = 0u, mask = 0u;
    const uint last = pc.run_first + pc.run_count;
    for (uint k = 0u; k < 4u; ++k) {
      const uint ob = o + k;
      while (r < last && ob >= runs[r].z + runs[r].w) ++r;
      if (r == last) break;
      run = runs[r];
      if (ob < run.z) continue;
      value |= src_byte(run, ob - run.z) << (8u * k);
      mask |= 0xffu << (8u * k);
    }
    dst[w] = mask == 0xffffffffu ? value : (dst[w] & ~mask) | value;
  }
}
