// Storage: allocation through the device's allocator.
#include "kiln/core/storage.h"

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  KILN_CHECK(device.type == DeviceType::cpu, "Storage", "device {} is not built into this kiln", device.str());
  data_ = detail::cpu_allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, void (*deleter)(void*, void*), void* ctx)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), deleter_ctx_(ctx), owned_(false) {}

Storage::~Storage() {
  if (owned_) detail::cpu_deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_, deleter_ctx_);
}

}  // namespace kiln
