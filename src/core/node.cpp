// Node bookkeeping.
#include "kiln/core/node.h"

#include <atomic>

#include "kiln/core/tensor.h"

namespace kiln {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node(const char* name) : name_(name), sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}
Node::~Node() = default;

}  // namespace kiln
