// Storage: allocation through the allocator of the storage's device
// (detail::allocate in allocator.cpp).
#include "kiln/core/storage.h"

#include "kiln/core/allocator.h"
#include "kiln/core/backends.h"
#include "kiln/core/error.h"
#include "kiln/core/replay.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  data_ = detail::allocate(nbytes, device);
  if (replay::recording()) [[unlikely]] replay::detail::state().rec->note_born();
}

Storage::Storage(void* data, size_t nbytes, Device device, void (*deleter)(void*, void*), void* ctx)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), deleter_ctx_(ctx), owned_(false) {}

Storage::~Storage() {
  if (owned_) detail::deallocate(data_, nbytes_, device_);
  else if (deleter_) deleter_(data_, deleter_ctx_);
}

}  // namespace kiln
