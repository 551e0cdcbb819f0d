#include "fovea/error.hpp"

namespace fovea {

std::string_view to_string(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return "invalid argument";
    case Errc::io: return "i/o error";
    case Errc::corrupt_data: return "corrupt data";
    case Errc::unsupported: return "unsupported";
    case Errc::limit_exceeded: return "limit exceeded";
    case Errc::out_of_memory: return "out of memory";
    case Errc::device: return "device error";
    case Errc::internal: return "internal error";
  }
  return "unknown error";
}

}  // namespace fovea
