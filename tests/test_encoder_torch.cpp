// The encoder on PyTorch checkpoints (tests/data/torch/, written by
// scripts/make_torch_checkpoints.py from the encoder fixtures' weights): a .pth state dict, a
// training checkpoint, a pickled module and an HF directory of sharded pytorch_model.bin files
// encode exactly as the safetensors files they came from, through the CLI as users run it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/torch_checkpoint.hpp"
#include "test_util.hpp"

using namespace fovea;

namespace {

std::string torch_data(const std::string& f) { return test::source_dir() + "/tests/data/torch/" + f; }
std::string encoder_data(const std::string& f) { return test::source_dir() + "/tests/data/encoder/" + f; }

// `fovea encode IMAGE --uniform --model M`: the written tensors.
SafetensorsFile encode_cli(const std::string& model, const std::string& image, const std::string& out) {
  const auto r = test::run_cli({"encode", image, "--uniform", "--model", model, "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return SafetensorsFile::open(out);
}

void expect_same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const auto& e : a.entries()) {
    const auto* f = b.find(e.name);
    ASSERT_NE(f, nullptr) << e.name;
    ASSERT_EQ(a.data(e).size(), b.data(*f).size()) << e.name;
    EXPECT_EQ(std::memcmp(a.data(e).data(), b.data(*f).data(), a.data(e).size()), 0) << e.name;
  }
}

}  // namespace

TEST(EncoderTorch, PthFilesEncodeAsTheirSafetensors) {
  const std::string dir = test::temp_dir("enc_torch");
  const std::string image = encoder_data("torchvision/image.png");
  const SafetensorsFile want = encode_cli(encoder_data("torchvision/model.safetensors"), image, dir + "/want.safetensors");
  int n = 0;
  for (const char* file : {"torchvision/vit.pth", "torchvision/checkpoint.pth", "torchvision/module.pt",
                           "torchvision/vit_legacy.pth"}) {
    SCOPED_TRACE(file);
    const SafetensorsFile got = encode_cli(torch_data(file), image, dir + "/got" + std::to_string(n++) + ".safetensors");
    expect_same_tensors(want, got);
    EXPECT_EQ(got.metadata().at("model_naming"), "torchvision");
  }
  // The weights are used where they lie in the archive (no copy), as a safetensors file's.
  const VitModel m = VitModel::load(torch_data("torchvision/vit.pth"));
  EXPECT_EQ(m.config().naming, "torchvision");
  EXPECT_EQ(m.config().heads, 4);  // config.json beside the .pth
}

// An HF directory with only pytorch_model-0000N-of-00002.bin shards and their index.
TEST(EncoderTorch, HfDirectoryOfShardedBinFiles) {
  const std::string dir = test::temp_dir("enc_torch_hf");
  const std::string image = encoder_data("hf_vit/image.png");
  const SafetensorsFile want = encode_cli(encoder_data("hf_vit/model.safetensors"), image, dir + "/want.safetensors");
  const SafetensorsFile got = encode_cli(torch_data("hf_vit"), image, dir + "/got.safetensors");
  expect_same_tensors(want, got);
  EXPECT_EQ(VitModel::load(torch_data("hf_vit")).config().input.source, "preprocessor_config.json");
}

TEST(EncoderTorch, RefusedFilesAreOneLineAndNoOutput) {
  const std::string dir = test::temp_dir("enc_torch_bad");
  for (const char* file : {"script.pt", "tensors.pt", "evil.pt"}) {
    SCOPED_TRACE(file);
    const auto r = test::run_cli({"encode", encoder_data("torchvision/image.png"), "--uniform", "--model", torch_data(file),
                                  "-o", dir + "/e.safetensors"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/e.safetensors"));
  }
}

// A model inside a wrapper (a PyTorch Lightning module's "model.", a task model's
// "model.backbone.", with a loss's tensor beside it): found under its prefix, encoded as the bare
// checkpoint; the other tensors are counted as ignored.
TEST(EncoderTorch, AModelInsideAWrapperIsFoundUnderItsPrefix) {
  const std::string dir = test::temp_dir("enc_torch_wrapped");
  const std::string image = encoder_data("torchvision/image.png");
  const SafetensorsFile want = encode_cli(encoder_data("torchvision/model.safetensors"), image, dir + "/want.safetensors");
  const TorchCheckpoint src = TorchCheckpoint::open(torch_data("torchvision/vit.pth"));
  for (const std::string prefix : {"model.", "model.backbone."}) {
    SCOPED_TRACE(prefix);
    std::vector<Tensor> keep;
    std::vector<std::string> names;
    for (const auto& e : src.entries()) keep.push_back(src.load(e)), names.push_back(prefix + e.name);
    keep.emplace_back(DType::f32, std::vector<int64_t>{3}), names.push_back("criterion.pos_weight");
    std::vector<NamedTensor> ts;
    for (size_t i = 0; i < keep.size(); ++i) ts.push_back({names[i], &keep[i]});
    const std::string sub = dir + "/" + std::to_string(prefix.size());
    std::filesystem::create_directories(sub);
    std::filesystem::copy_file(torch_data("torchvision/config.json"), sub + "/config.json");
    save_safetensors(sub + "/model.safetensors", ts);
    const SafetensorsFile got = encode_cli(sub + "/model.safetensors", image, sub + "/got.safetensors");
    expect_same_tensors(want, got);
    const VitModel m = VitModel::load(sub + "/model.safetensors");
    EXPECT_EQ(m.config().naming, "torchvision");
  }
  // No prefix holds a model: the error names what fovea looked for.
  Tensor t(DType::f32, {2, 2});
  save_safetensors(dir + "/none.safetensors", {{"model.a.weight", &t}, {"model.b.weight", &t}});
  try {
    VitModel::load(dir + "/none.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no ViT naming recognised"), std::string::npos) << e.what();
  }
}
