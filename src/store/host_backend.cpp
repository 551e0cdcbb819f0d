// The host backend: a RAM pool of physical pages and a page table, translated in software.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

#include "fovea/error.hpp"
#include "fovea/store.hpp"

namespace fovea {
namespace {

class HostBackend final : public StoreBackend {
 public:
  std::string_view name() const override { return "host"; }
  int64_t page_granularity_bytes() const override { return 4096; }

  void init(const StoreLayout& layout) override {
    layout_ = layout;
    pool_ = aligned_alloc_bytes(size_t(layout.pool_pages * layout.page_bytes));
    table_.assign(size_t(layout.virtual_pages), PageBind::kUnbound);
  }

  void bind(std::span<const PageBind> binds) override {
    for (const PageBind& b : binds)
      for (int64_t i = 0; i < b.count; ++i) {
        assert(b.virt_page + i < layout_.virtual_pages);
        table_[size_t(b.virt_page + i)] = b.phys_page == PageBind::kUnbound ? PageBind::kUnbound : b.phys_page + i;
      }
  }

  void write(int64_t virt_byte, const std::byte* src, int64_t bytes) override {
    for_pages(virt_byte, bytes, [&](std::byte* p, int64_t n) {
      std::memcpy(p, src, size_t(n));
      src += n;
    });
  }

  void fill_zero(std::span<const ByteRun> runs) override {
    for (const ByteRun& r : runs) for_pages(r.virt_byte, r.bytes, [](std::byte* p, int64_t n) { std::memset(p, 0, size_t(n)); });
  }

  void gather(std::span<const ByteRun> runs, std::byte* dst) const override {
    for (const ByteRun& r : runs)
      const_cast<HostBackend*>(this)->for_pages(r.virt_byte, r.bytes, [&](std::byte* p, int64_t n) {
        std::memcpy(dst, p, size_t(n));
        dst += n;
      });
  }

 private:
  // Calls f(physical pointer, bytes) for each page-sized piece of the virtual range.
  template <typename F> void for_pages(int64_t at, int64_t bytes, F&& f) {
    const int64_t pb = layout_.page_bytes;
    while (bytes > 0) {
      const int64_t vp = at / pb, off = at % pb;
      const int64_t n = std::min(bytes, pb - off);
      const int64_t pp = table_[size_t(vp)];
      if (pp < 0) throw Error(Errc::internal, "host token store: virtual page " + std::to_string(vp) + " is not bound");
      f(pool_.get() + pp * pb + off, n);
      at += n;
      bytes -= n;
    }
  }

  StoreLayout layout_;
  std::unique_ptr<std::byte[], AlignedFree> pool_;
  std::vector<int64_t> table_;
};

}  // namespace

std::unique_ptr<StoreBackend> make_host_store_backend() { return std::make_unique<HostBackend>(); }

std::unique_ptr<StoreBackend> make_store_backend(std::string_view name, const VulkanStoreOptions& options) {
  if (name == "host") return make_host_store_backend();
  if (name == "vulkan" || name == "vulkan-image") {
    std::string why;
    auto b = name == "vulkan" ? make_vulkan_store_backend(&why, options) : make_vulkan_image_store_backend(&why, options);
    if (!b) throw Error(Errc::device, "token store: the " + std::string(name) + " backend is not available: " + why);
    return b;
  }
  throw Error(Errc::invalid_argument,
              "token store: unknown backend '" + std::string(name) + "' (host, vulkan, vulkan-image)");
}

}  // namespace fovea
