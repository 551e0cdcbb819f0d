// The WebDataset shard reader (fovea/tar.hpp, src/io/tar.cpp) on fuzzed archives, read from memory
// (fmemopen): ustar, GNU and pax headers, long-name records, base-256 sizes. Every member is
// visited, in two passes as the batch CLI makes them: names only (its count of images), then
// with the bytes (the read). Findings: a crash, ASan/UBSan report, leak, a non-fovea exception,
// a member whose bytes exceed the archive, or a read that does not end (a timeout: a loop).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_util.hpp"
#include "fovea/tar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;  // fmemopen refuses an empty buffer; an empty shard is a file of 0 bytes
  std::vector<uint8_t> copy(data, data + size);  // fmemopen wants a writable buffer
  // Odd sizes: every 512-byte block gets a correct header checksum, as a CRC-fixing image fuzzer
  // does, so mutations of sizes, types and names reach the code behind the checksum test
  // (a random change of a header almost never keeps its checksum). Even sizes are kept as they
  // are, so the checksum test itself is fuzzed too.
  if (size % 2)
    for (size_t at = 0; at + 512 <= size; at += 512) {
      uint8_t* h = copy.data() + at;
      unsigned sum = 0;
      for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? unsigned(' ') : h[i];
      std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum & 0777777u);
      h[155] = ' ';
    }
  for (const bool read_bytes : {false, true}) {
    fovea::fuzz::expect_only_fovea_errors([&] {
      FILE* f = fmemopen(copy.data(), copy.size(), "rb");
      if (!f) return;
      fovea::TarReader r(f, "fuzz.tar");
      fovea::TarMember m;
      size_t members = 0, bytes = 0;
      while (r.next(m, [](const std::string&) { return true; }, read_bytes)) {
        bytes += m.bytes.size();
        if (bytes > size || ++members > size / 512) __builtin_trap();  // more than the archive holds
      }
    });
  }
  return 0;
}
