// The optional parts of the build (encoder, Vulkan), checked both ways: in a build that has the
// part it works, in a build without it the library and the CLI say so in one line and the rest
// works. CI runs this file in the full build and in the reduced one (scripts/test-reduced.sh).
#include <gtest/gtest.h>

#include <string>

#include "fovea/error.hpp"
#include "fovea/store.hpp"
#include "fovea/version_gen.hpp"
#include "fovea/vulkan.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

std::string sample() { return test::source_dir() + "/data/astronaut.jpg"; }

TEST(BuildParts, VersionHeaderRecordsTheParts) {
  EXPECT_EQ(vulkan_built(), FOVEA_BUILT_WITH_VULKAN == 1);
}

TEST(BuildParts, VulkanBackendPresentOrAStubThatSaysSo) {
  if (FOVEA_BUILT_WITH_VULKAN) {
    EXPECT_TRUE(vulkan_built());
    return;
  }
  EXPECT_FALSE(vulkan_built());
  EXPECT_FALSE(vulkan_available());
  EXPECT_TRUE(list_vulkan_devices().empty());
  try {
    (void)VulkanBackend::create({});
    FAIL() << "the stub created a backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unsupported);
    EXPECT_NE(std::string(e.what()).find("without the Vulkan backend"), std::string::npos) << e.what();
  }
  std::string why;
  EXPECT_EQ(make_vulkan_store_backend(&why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(BuildParts, CliBackendVulkanFallsBackToTheCpuWithANote) {
  const std::string out = test::temp_dir("build_parts") + "/t.safetensors";
  const auto r = test::run_cli({"tokenize", sample(), "--budget", "64", "--backend", "vulkan", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (!FOVEA_BUILT_WITH_VULKAN) {
    EXPECT_NE(r.out.find("\"backend\": \"cpu\""), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("Vulkan"), std::string::npos) << r.err;
  }
}

TEST(BuildParts, EncoderPresentOrAbsentWithOneLine) {
  const std::string dir = test::temp_dir("build_parts_enc");
  const auto r = test::run_cli({"encode", sample(), "--budget", "64", "--model", "random:vit-s16", "-o",
                                dir + "/e.safetensors"});
  if (FOVEA_BUILT_WITH_ENCODER) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
  } else {
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("fovea: error: unknown command 'encode'"), std::string::npos) << r.err;
    const auto q = test::run_cli({"tokenize", sample(), "--query-embedding", dir + "/q.npy", "--model",
                                  "random:vit-s16", "-o", dir + "/t.safetensors"});
    EXPECT_EQ(q.exit_code, 1);
    EXPECT_NE(q.err.find("built without it"), std::string::npos) << q.err;
  }
}

}  // namespace
}  // namespace fovea
