// The `fovea` command: chooses the OpenMP and OpenBLAS wait policies, then becomes the CLI proper
// (fovea-main).
//
// libgomp reads OMP_WAIT_POLICY once, when it loads, before main() of any program that links
// it (the encoder's oneDNN does), so a program that wants a policy must have it in its
// environment at exec time. libgomp's default spins idle threads at every barrier for a while;
// the encoder crosses thousands of barriers, and on cores shared with other work the spinning
// threads take the time the others need (docs/explanation/encoder.md, "The OpenMP wait policy").
// So unless the caller already chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT), this launcher sets
// OMP_WAIT_POLICY=PASSIVE and executes fovea-main in the same process. It links nothing but
// libc (`ldd build/fovea`), so it adds one exec of a small program, where a fovea-main that
// re-executed itself would start twice: its own start loads its shared libraries (20 in a
// Debian 12 build, `ldd build/libexec/fovea/fovea-main`; FFmpeg's are loaded on first use) and
// runs their initialisers. The launcher's cost is below what a loaded machine lets one measure:
// 40 alternated runs of `fovea --version` and `fovea-main --version` on a 2-core Zen 4 at load
// average 13 took 183 and 195 ms (medians), 131 and 130 ms at best.
//
// OpenBLAS (FAISS's BLAS, linked for `compress`) has the same habit with its own threads: they
// start when the library loads and after every BLAS call spin on sched_yield for 2^28 cycles
// (~0.1 s) before they sleep. At start that spin takes one of two cores from the encoder for
// its first ~90 ms (one-shot fp32 encode on Zen 3: 0.44 -> 0.40 s wall, system time 0.12 ->
// 0.05 s); in `compress` it burnt ~10 s of system time per 23 s OPQ training, with no gain in
// wall time (docs/explanation/encoder.md, "Time to first embedding"). So unless the caller chose,
// OPENBLAS_THREAD_TIMEOUT=4 makes them sleep after 2^4 cycles, OpenBLAS's minimum.
//
// fovea-main lives in libexec/fovea/ beside this program in the build tree, and in
// <prefix>/libexec/fovea/ when installed (FOVEA_MAIN_BUILD_REL, FOVEA_MAIN_INSTALL_REL: paths
// relative to this program's folder). It can also be run directly; it then keeps libgomp's
// default policy.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// The folder of this program, with a trailing '/', or "" when it cannot be told.
void own_folder(const char* argv0, char* out, size_t size) {
  out[0] = '\0';
  ssize_t n = ::readlink("/proc/self/exe", out, size - 1);
  if (n > 0) {
    out[n] = '\0';
  } else if (argv0 && std::strchr(argv0, '/') && std::strlen(argv0) < size) {
    std::strcpy(out, argv0);
  } else {
    out[0] = '\0';
    return;
  }
  char* slash = std::strrchr(out, '/');
  if (slash) slash[1] = '\0';
  else out[0] = '\0';
}

// Whether the caller set this variable. An empty one is no choice: libgomp ignores it and
// spins, and OpenBLAS keeps its default timeout.
bool chosen(const char* name) {
  const char* value = std::getenv(name);
  return value && *value;
}

}  // namespace

int main(int argc, char** argv) {
  (void)argc;
  if (!chosen("OMP_WAIT_POLICY") && !chosen("GOMP_SPINCOUNT")) ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  if (!chosen("OPENBLAS_THREAD_TIMEOUT")) ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
  char folder[PATH_MAX];
  own_folder(argc > 0 ? argv[0] : nullptr, folder, sizeof folder);
  char path[PATH_MAX + 64];
  if (!folder[0]) {  // never resolve fovea-main against the working directory
    std::fprintf(stderr, "fovea: error: cannot tell where this program is (no /proc/self/exe); run %s directly\n",
                 FOVEA_MAIN_INSTALL_REL);
    return 1;
  }
  int err = ENOENT;
  const char* const candidates[] = {FOVEA_MAIN_BUILD_REL, FOVEA_MAIN_INSTALL_REL};
  for (const char* rel : candidates) {
    std::snprintf(path, sizeof path, "%s%s", folder, rel);
    ::execv(path, argv);
    if (errno != ENOENT) err = errno;  // the most telling failure
  }
  std::snprintf(path, sizeof path, "%s%s", folder, FOVEA_MAIN_INSTALL_REL);
  std::fprintf(stderr, "fovea: error: cannot run the CLI %s: %s (is fovea installed completely?)\n", path,
               std::strerror(err));
  return 1;
}
