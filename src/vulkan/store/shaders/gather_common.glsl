// Shared by gather_buffer.comp and gather_image.comp: copy byte runs of the store's virtual
// space into a packed output, 32-bit output words in chunks per invocation (grid-stride loop).
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
// Copies n output words from w on, taken from source words s, s+1, ... shifted right by sh bits
// (sh in 0, 8, 16, 24: the stretch starts mid-word) with the next word's low bytes on top.
void copy_stretch(uint w, uint s, uint sh, uint n);

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

// Each invocation copies kChunk consecutive output words: one binary search per chunk, then
// whole stretches of a run in a tight loop (a shifted stretch reuses the previous word).
const uint kChunk = 32u;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x * kChunk;
  const uint last = pc.run_first + pc.run_count;
  for (uint w0 = pc.word_first + gl_GlobalInvocationID.x * kChunk; w0 < pc.word_end; w0 += stride) {
    uint r = find_run(4u * w0);
    const uint w1 = min(w0 + kChunk, pc.word_end);
    uint w = w0;
    while (w < w1) {
      const uint o = 4u * w;
      while (r + 1u < last && runs[r + 1u].z <= o) ++r;
      uvec4 run = runs[r];
      if (o >= run.z && o + 4u <= run.z + run.w) {  // a stretch of words inside one run
        const uint n = min(w1 - w, (run.z + run.w - o) >> 2);
        const uint b = run.y + (o - run.z);
        copy_stretch(w, run.x + (b >> 2), 8u * (b & 3u), n);
        w += n;
        continue;
      }
      // A word across run boundaries (or the dispatch's first/last partial word): by bytes.
      uint value = 0u, mask = 0u;
      uint q = r;
      for (uint k = 0u; k < 4u; ++k) {
        const uint ob = o + k;
        while (q < last && ob >= runs[q].z + runs[q].w) ++q;
        if (q == last) break;
        run = runs[q];
        if (ob < run.z) continue;
        value |= src_byte(run, ob - run.z) << (8u * k);
        mask |= 0xffu << (8u * k);
      }
      dst[w] = mask == 0xffffffffu ? value : (dst[w] & ~mask) | value;
      ++w;
    }
  }
}
