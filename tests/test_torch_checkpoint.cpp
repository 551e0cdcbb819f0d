// The PyTorch checkpoint reader (fovea/torch_checkpoint.hpp) on the files
// scripts/make_torch_checkpoints.py wrote with Debian's torch (tests/data/torch/): names, dtypes,
// views and values as torch saved them, the shapes of checkpoint users bring (training
// checkpoints, DataParallel names, whole pickled modules), the formats refused by name, and
// damaged or hostile archives giving one fovea::Error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/torch_checkpoint.hpp"
#include "test_util.hpp"

using namespace fovea;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& file) { return test::source_dir() + "/tests/data/torch/" + file; }

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.bytes(), b.bytes(), a.size_bytes()) == 0;
}

Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::internal;  // (no error)
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A stored ZIP archive of `files` (name, bytes), as torch.save lays one out (CRCs left 0: the
// reader does not check them).
std::vector<uint8_t> zip_of(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<uint8_t> out, central;
  auto put = [](std::vector<uint8_t>& v, uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(uint8_t(x >> (8 * i)));
  };
  for (const auto& [name, body] : files) {
    const uint64_t offset = out.size();
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, 0, 4);
    put(out, body.size(), 4), put(out, body.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), body.begin(), body.end());
    put(central, 0x02014b50, 4), put(central, 20, 2), put(central, 20, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, 0, 4), put(central, body.size(), 4), put(central, body.size(), 4);
    put(central, name.size(), 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, offset, 4);
    central.insert(central.end(), name.begin(), name.end());
  }
  const uint64_t cd = out.size();
  out.insert(out.end(), central.begin(), central.end());
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, files.size(), 2), put(out, files.size(), 2);
  put(out, central.size(), 4), put(out, cd, 4), put(out, 0, 2);
  return out;
}

}  // namespace

// Hostile pickles that would exhaust time or memory, not the rules: each ends fast with one
// error (a budget or "no tensors"), never a hang, a stack overflow or gigabytes allocated.
TEST(TorchCheckpoint, HostilePicklesAreBounded) {
  using namespace std::string_literals;  // (the pickles hold NUL bytes)
  auto open_pickle = [](const std::string& pkl) {
    const std::vector<uint8_t> z = zip_of({{"a/data.pkl", pkl}});
    return code_of([&] { TorchCheckpoint::from_bytes(z, "hostile.pt"); });
  };
  // A list of 100,000 (k, v) pairs, then OrderedDict(that list) 2000 times through the memo:
  // 400 M items copied without the budget.
  std::string p = "\x80\x02(";
  for (int i = 0; i < 100000; ++i) p += "NN\x86";  // (None, None)
  p += "l";                                           // LIST
  p += "q\x00"s;                                      // memo 0 = the list
  p += "ccollections\nOrderedDict\nq\x01";         // memo 1 = OrderedDict
  p += "(";
  for (int i = 0; i < 2000; ++i) p += "h\x01h\x00\x85R"s;  // OrderedDict((list,))
  p += "l.";
  EXPECT_EQ(open_pickle(p), Errc::limit_exceeded);
  // 200,000 nested lists: the machine is iterative, the walk bounded.
  std::string deep = "\x80\x02";
  for (int i = 0; i < 200000; ++i) deep += "]";
  for (int i = 0; i < 199999; ++i) deep += "a";
  deep += ".";
  EXPECT_EQ(open_pickle(deep), Errc::corrupt_data);  // no tensors
  // A dict that holds itself: the search ends.
  EXPECT_EQ(open_pickle("\x80\x02}q\x00X\x01\x00\x00\x00"s + "a" + "h\x00s."s), Errc::corrupt_data);
  // Reading a memo that was never written, an unknown opcode, a truncated pickle.
  EXPECT_EQ(open_pickle("\x80\x02h\x05."), Errc::corrupt_data);
  EXPECT_EQ(open_pickle("\x80\x02\xff."), Errc::corrupt_data);
  EXPECT_EQ(open_pickle("\x80\x02X\xff\xff\x00\x00"s + "ab"), Errc::corrupt_data);
}

// A plain state dict: every tensor of the safetensors file the weights came from, same names,
// shapes and bytes, F32 and contiguous, so data() is the tensor where it lies.
TEST(TorchCheckpoint, StateDictHoldsTheSafetensorsTensors) {
  const TorchCheckpoint ck = TorchCheckpoint::open(data("torchvision/vit.pth"));
  const SafetensorsFile st = SafetensorsFile::open(test::source_dir() + "/tests/data/encoder/torchvision/model.safetensors");
  EXPECT_EQ(ck.object_kind(), "state dict");
  EXPECT_EQ(ck.root_key(), "");
  ASSERT_EQ(ck.entries().size(), st.entries().size());
  for (const auto& e : st.entries()) {
    const TorchCheckpoint::Entry* t = ck.find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dtype_name, "F32") << e.name;
    EXPECT_TRUE(t->contiguous) << e.name;
    EXPECT_TRUE(same_values(ck.load(*t), st.load(e))) << e.name;
    const auto raw = ck.data(*t);
    ASSERT_EQ(raw.size(), st.data(e).size()) << e.name;
    EXPECT_EQ(std::memcmp(raw.data(), st.data(e).data(), raw.size()), 0) << e.name;
  }
  EXPECT_EQ(ck.find("no.such.tensor"), nullptr);
}

// Dtypes, strided views, storage offsets, shared storages, 0-d and empty tensors and nested
// dicts, against the contiguous copies torch wrote beside them.
TEST(TorchCheckpoint, DtypesViewsAndNestingAsTorchSavedThem) {
  const TorchCheckpoint ck = TorchCheckpoint::open(data("tensors.pt"));
  const SafetensorsFile want = SafetensorsFile::open(data("tensors_expected.safetensors"));
  std::set<std::string> names;
  for (const auto& e : ck.entries()) names.insert(e.name);
  for (const auto& e : want.entries()) {
    SCOPED_TRACE(e.name);
    const TorchCheckpoint::Entry* t = ck.find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype_name, e.dtype_name);
    EXPECT_EQ(t->shape, e.shape);
    if (e.dtype_name == "BOOL") {  // no DType: refused by load(), as safetensors' reader does
      EXPECT_FALSE(t->dtype_known);
      EXPECT_EQ(code_of([&] { ck.load(*t); }), Errc::unsupported);
      continue;
    }
    EXPECT_TRUE(same_values(ck.load(*t), want.load(e)));
    EXPECT_TRUE(same_values(ck.load_f32(*t), want.load_f32(e)));
    names.erase(e.name);
  }
  names.erase("bool");
  EXPECT_TRUE(names.empty()) << *names.begin();  // nothing beyond what torch saved
  const TorchCheckpoint::Entry* tr = ck.find("transposed");
  EXPECT_FALSE(tr->contiguous);
  EXPECT_TRUE(ck.data(*tr).empty());  // no zero-copy view of a strided tensor
  EXPECT_EQ(tr->stride, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(ck.find("sliced")->storage_offset, 8u);
  EXPECT_EQ(ck.find("shared_a")->storage_key, ck.find("shared_b")->storage_key);
  EXPECT_TRUE(ck.find("scalar")->shape.empty());
  EXPECT_EQ(ck.find("nested.deeper.leaf")->shape, (std::vector<int64_t>{3}));
}

// An archive in ZIP64 form (as torch writes files over 4 GiB: sizes and offsets in the ZIP64
// extra fields, a ZIP64 end record): the same tensors as the plain archive it was rewritten from.
TEST(TorchCheckpoint, Zip64ArchivesReadAsPlainOnes) {
  const TorchCheckpoint plain = TorchCheckpoint::open(data("tensors.pt"));
  const TorchCheckpoint z64 = TorchCheckpoint::open(data("zip64.pt"));
  ASSERT_EQ(z64.entries().size(), plain.entries().size());
  for (const auto& e : plain.entries()) {
    SCOPED_TRACE(e.name);
    const TorchCheckpoint::Entry* t = z64.find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, e.shape);
    EXPECT_EQ(t->dtype_name, e.dtype_name);
    if (e.dtype_known) {
      EXPECT_TRUE(same_values(z64.load(*t), plain.load(e)));
    }
  }
}

// torch.save's legacy format (before PyTorch 1.6, or _use_new_zipfile_serialization=False): a
// sequence of pickles and raw storages, no ZIP. The same tensors as the archive.
TEST(TorchCheckpoint, LegacyFormatReadsAsTheZipOne) {
  const TorchCheckpoint zip = TorchCheckpoint::open(data("torchvision/vit.pth"));
  const TorchCheckpoint legacy = TorchCheckpoint::open(data("torchvision/vit_legacy.pth"));
  ASSERT_EQ(legacy.entries().size(), zip.entries().size());
  for (const auto& e : zip.entries()) {
    const TorchCheckpoint::Entry* t = legacy.find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_TRUE(same_values(legacy.load(*t), zip.load(e))) << e.name;
  }
  const TorchCheckpoint small = TorchCheckpoint::open(data("legacy.pt"));
  ASSERT_EQ(small.entries().size(), 1u);
  const Tensor w = small.load_f32(small.entries()[0]);
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.data<float>()[5], 1.0f);
  // Cut anywhere, it fails with one error.
  const std::vector<uint8_t> b = bytes_of(data("torchvision/vit_legacy.pth"));
  for (size_t cut : {size_t(3), size_t(20), size_t(200), b.size() / 2, b.size() - 1})
    EXPECT_EQ(code_of([&] { TorchCheckpoint::from_bytes(std::span(b.data(), cut), "cut.pth"); }), Errc::corrupt_data) << cut;
}

// What users bring besides a bare state dict: a training checkpoint (the model under "model",
// DataParallel's "module." names, an argparse Namespace and a numpy scalar beside it) and a
// whole pickled nn.Module; both give the state dict's names and values.
TEST(TorchCheckpoint, TrainingCheckpointsAndPickledModulesGiveTheStateDict) {
  const TorchCheckpoint sd = TorchCheckpoint::open(data("torchvision/vit.pth"));
  for (const char* file : {"torchvision/checkpoint.pth", "torchvision/module.pt"}) {
    SCOPED_TRACE(file);
    const TorchCheckpoint ck = TorchCheckpoint::open(data(file));
    ASSERT_EQ(ck.entries().size(), sd.entries().size());
    for (const auto& e : sd.entries()) {
      const TorchCheckpoint::Entry* t = ck.find(e.name);
      ASSERT_NE(t, nullptr) << e.name;
      EXPECT_TRUE(same_values(ck.load(*t), sd.load(e))) << e.name;
    }
  }
  EXPECT_EQ(TorchCheckpoint::open(data("torchvision/checkpoint.pth")).root_key(), "model");
  EXPECT_EQ(TorchCheckpoint::open(data("torchvision/module.pt")).object_kind(),
            "nn.Module torchvision.models.vision_transformer.VisionTransformer");
}

// A pickle that would run a command under pickle.load: its tensor is read, the object stays an
// inert placeholder, and nothing runs.
TEST(TorchCheckpoint, AHostileGlobalIsNeverCalled) {
  const std::string marker = "/tmp/fovea-torch-checkpoint-pwned";
  fs::remove(marker);
  const TorchCheckpoint ck = TorchCheckpoint::open(data("evil.pt"));
  ASSERT_EQ(ck.entries().size(), 1u);
  EXPECT_EQ(ck.entries()[0].name, "weight");
  EXPECT_FALSE(fs::exists(marker));
  // The bytes in memory say os.system: proof the fixture is the hostile one.
  const std::vector<uint8_t> b = bytes_of(data("evil.pt"));
  const std::string s(b.begin(), b.end());
  EXPECT_NE(s.find("system"), std::string::npos);
}

TEST(TorchCheckpoint, OtherFormatsAreRefusedByName) {
  const std::string script = message_of([&] { TorchCheckpoint::open(data("script.pt")); });
  EXPECT_NE(script.find("TorchScript"), std::string::npos) << script;
  const std::string st = message_of([&] { TorchCheckpoint::open(data("tensors_expected.safetensors")); });
  EXPECT_NE(st.find("not a PyTorch checkpoint"), std::string::npos) << st;
  EXPECT_TRUE(looks_like_torch_checkpoint(data("legacy.pt")));
  EXPECT_TRUE(looks_like_torch_checkpoint(data("torchvision/vit_legacy.pth")));
  EXPECT_TRUE(looks_like_torch_checkpoint(data("torchvision/vit.pth")));
  EXPECT_FALSE(looks_like_torch_checkpoint(data("tensors_expected.safetensors")));
  EXPECT_FALSE(looks_like_torch_checkpoint(data("no-such-file.pt")));
}

// Every truncation of a checkpoint, and seeded random damage to its bytes, gives a
// fovea::Error or a checkpoint whose every tensor loads: never a crash or another exception
// (ASan and UBSan check the reads in the sanitizer job; fuzz_torch goes further).
TEST(TorchCheckpoint, DamagedArchivesGiveOneError) {
  for (const char* file : {"tensors.pt", "evil.pt", "torchvision/vit.pth"}) {
    SCOPED_TRACE(file);
    const std::vector<uint8_t> good = bytes_of(data(file));
    auto check = [&](const std::vector<uint8_t>& b) {
      try {
        const TorchCheckpoint ck = TorchCheckpoint::from_bytes(b, "damaged.pt");
        for (const auto& e : ck.entries())
          if (e.dtype_known) (void)ck.load_f32(e);
      } catch (const Error&) {
      }
    };
    int truncated_errors = 0;
    for (size_t cut = 0; cut < good.size(); cut += std::max<size_t>(1, good.size() / 97)) {
      std::vector<uint8_t> b(good.begin(), good.begin() + long(cut));
      if (code_of([&] { TorchCheckpoint::from_bytes(b, "cut.pt"); }) != Errc::internal) ++truncated_errors;
      check(b);
    }
    EXPECT_GT(truncated_errors, 0);
    std::mt19937 rng(7);
    for (int round = 0; round < 300; ++round) {
      std::vector<uint8_t> b = good;
      const int flips = 1 + int(rng() % 8);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
      check(b);
    }
  }
  // A truncated archive says so (its directory is gone): corrupt_data, naming the file.
  const std::vector<uint8_t> good = bytes_of(data("torchvision/vit.pth"));
  const std::vector<uint8_t> half(good.begin(), good.begin() + long(good.size() / 2));
  const std::string why = message_of([&] { TorchCheckpoint::from_bytes(half, "half.pth"); });
  EXPECT_NE(why.find("'half.pth'"), std::string::npos) << why;
  EXPECT_EQ(code_of([&] { TorchCheckpoint::from_bytes(half, "half.pth"); }), Errc::corrupt_data);
}
