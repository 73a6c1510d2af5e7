#pragma once
/// \file
/// \brief Tensor: a contiguous row-major view of accounted storage on one device.
#include <cstring>
#include <memory>
#include <span>

#include "epl/core/dtype.hpp"
#include "epl/core/memory.hpp"
#include "epl/core/shape.hpp"

namespace epl {
inline namespace v0 {

/// \brief Bytes on one device, charged to one memory category while they live.
class Storage {
 public:
  // An empty tensor's storage is charged nothing; it still holds an address (one byte of the allocator's).
  Storage(Allocator& alloc, std::size_t bytes, MemoryCategory category)
      : alloc_(&alloc), bytes_(bytes), category_(category), ptr_(alloc.allocate(bytes > 0 ? bytes : 1)) {
    memory_account(alloc.device()).charge(category_, static_cast<std::int64_t>(bytes_));
  }
  /// \brief Bytes someone else owns and accounts for, seen as storage of device d (a second
  /// mapping of a device's memory: device::Isolated's kernels read its tensors through one).
  Storage(void* p, std::size_t bytes, DeviceId d, MemoryCategory category) noexcept
      : alloc_(nullptr), bytes_(bytes), category_(category), ptr_(p), device_(d) {}
  ~Storage() {
    if (!alloc_) return;
    memory_account(alloc_->device()).charge(category_, -static_cast<std::int64_t>(bytes_));
    alloc_->deallocate(ptr_, bytes_ > 0 ? bytes_ : 1);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] MemoryCategory category() const noexcept { return category_; }
  [[nodiscard]] DeviceId device() const noexcept { return alloc_ ? alloc_->device() : device_; }
  [[nodiscard]] Allocator& allocator() const {
    EPL_CHECK(alloc_ != nullptr, "a borrowed tensor (a view of memory it does not own, on ", device_.str(), ") has no allocator");
    return *alloc_;
  }

 private:
  Allocator* alloc_;
  std::size_t bytes_;
  MemoryCategory category_;
  void* ptr_;
  DeviceId device_{};
};

/// \brief A contiguous, row-major tensor of run-time dtype on one device.
///
/// Copying a Tensor shares its storage (like a shared_ptr); views (reshape, slice of the
/// first dimension) share it too. Element access on the host goes through data<T>(), which
/// checks the dtype.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Allocator& alloc, Shape shape, DType dtype, MemoryCategory category)
      : storage_(storage_for(alloc, shape, dtype, category)), shape_(shape), dtype_(dtype) {}

  /// \brief A tensor over `bytes` at p that it neither owns nor accounts for, on device d: it must
  /// not outlive the memory.
  static Tensor borrowed(void* p, Shape shape, DType dtype, DeviceId d, MemoryCategory category = MemoryCategory::kWorkspace) {
    Tensor t;
    t.storage_ = std::make_shared<Storage>(p, bytes_for(shape, dtype), d, category);
    t.shape_ = shape;
    t.dtype_ = dtype;
    return t;
  }

  [[nodiscard]] bool defined() const noexcept { return storage_ != nullptr; }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::int64_t numel() const noexcept { return shape_.numel(); }
  [[nodiscard]] std::int64_t dim(int i) const { return shape_[i]; }
  [[nodiscard]] int rank() const noexcept { return shape_.rank(); }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * size_of(dtype_); }
  [[nodiscard]] DeviceId device() const { return require().device(); }
  [[nodiscard]] MemoryCategory category() const { return require().category(); }
  [[nodiscard]] Allocator& allocator() const { return require().allocator(); }

  [[nodiscard]] void* raw() const {
    return static_cast<char*>(require().data()) + offset_;
  }
  /// \brief Typed pointer to the first element; T must be the tensor's dtype.
  template <class T>
  [[nodiscard]] T* data() const {
    EPL_CHECK(dtype_v<T> == dtype_, "tensor of dtype ", name_of(dtype_), " read as ", name_of(dtype_v<T>));
    return static_cast<T*>(raw());
  }
  /// \brief The elements as a span; host tensors only.
  template <class T>
  [[nodiscard]] std::span<T> span() const {
    EPL_CHECK(host_reachable(device().kind), "span() of a tensor on ", device().str(),
              ", whose memory host code cannot read; copy it to the host first (download)");
    return {data<T>(), static_cast<std::size_t>(numel())};
  }

  /// \brief The same elements under another shape of equal element count.
  [[nodiscard]] Tensor view(Shape shape) const {
    EPL_CHECK(shape.numel() == numel(), "cannot view ", shape_, " (", numel(), " elements) as ", shape);
    Tensor t = *this;
    t.shape_ = shape;
    return t;
  }
  /// \brief Rows [begin, end) of the first dimension, sharing storage.
  [[nodiscard]] Tensor slice(std::int64_t begin, std::int64_t end) const {
    EPL_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
              "slice [", begin, ", ", end, ") out of range for shape ", shape_);
    Tensor t = *this;
    auto row = static_cast<std::size_t>(numel() / (shape_[0] ? shape_[0] : 1)) * size_of(dtype_);
    t.offset_ += static_cast<std::size_t>(begin) * row;
    t.shape_[0] = end - begin;
    return t;
  }
  /// \brief True when both tensors are the same view of the same storage.
  [[nodiscard]] bool same_as(const Tensor& o) const noexcept {
    return storage_ == o.storage_ && offset_ == o.offset_ && shape_ == o.shape_;
  }

 private:
  // A new tensor's storage; an allocation that fails names the tensor as well.
  static std::shared_ptr<Storage> storage_for(Allocator& alloc, const Shape& shape, DType dtype, MemoryCategory category) {
    try {
      return std::make_shared<Storage>(alloc, bytes_for(shape, dtype), category);
    } catch (const Error& e) {
      EPL_FAIL("a ", name_of(dtype), " ", shape, " tensor of ", name_of(category), ": ", e.detail());
    }
  }
  static std::size_t bytes_for(const Shape& s, DType t) {
    return static_cast<std::size_t>(s.numel()) * size_of(t);
  }
  const Storage& require() const {
    EPL_CHECK(storage_ != nullptr, "use of an undefined (empty) tensor (a parameter this rank does not hold is one: another "
              "pipeline stage's, or, under ZeRO stage 3, any parameter outside its layer's forward and backward until "
              "trainer.gather_parameters() gathers them)");
    return *storage_;
  }
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

/// \brief Fails with a message naming `what` unless t has the expected shape.
inline void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  EPL_CHECK(t.shape() == expected, what, " has shape ", t.shape(), ", expected ", expected);
}

}  // namespace v0
}  // namespace epl
