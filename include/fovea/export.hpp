// fovea/export.hpp — what the shared library exports: every declaration in a public header.
// A public header includes it and puts its namespace between FOVEA_API_BEGIN and FOVEA_API_END
// (a declaration elsewhere may be marked FOVEA_API).
//
// The library is compiled with hidden visibility (-fvisibility=hidden,
// -fvisibility-inlines-hidden), so a function or class is exported from the shared library
// only when it is declared between FOVEA_API_BEGIN and FOVEA_API_END, as every public header
// (include/fovea/*.hpp) does with its contents, or is marked FOVEA_API; the Impl classes and
// detail types those headers name are marked FOVEA_INTERNAL. Internal code lives in
// private headers (src/<stage>/*.hpp), which are not installed: what they declare stays inside
// the library. The shared library's linker script (cmake/fovea.version) exports nothing
// outside namespace fovea, and the test build.symbols checks the exported list against
// tests/build/fovea.symbols (docs/reference/api-stability.md).
//
// The same attributes are harmless in a program that includes the headers or links the static
// libraries: default visibility is what a declaration has without them.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define FOVEA_API __attribute__((visibility("default")))
// An internal type a public header has to name (a class's Impl, a friend in a detail
// namespace): hidden, with all its members, although it is declared in the exported region.
#define FOVEA_INTERNAL __attribute__((visibility("hidden")))
#define FOVEA_API_BEGIN _Pragma("GCC visibility push(default)")
#define FOVEA_API_END _Pragma("GCC visibility pop")
#else
#define FOVEA_API
#define FOVEA_INTERNAL
#define FOVEA_API_BEGIN
#define FOVEA_API_END
#endif
