#include "apps/kiln/distributed_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "kiln/core/error.h"
#if KILN_HAVE_DIST
#include "kiln/dist/data_parallel.h"
#include "kiln/dist/process_group.h"
#endif

namespace kiln::app {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

struct JobDistribution::Impl {
#if KILN_HAVE_DIST
  std::unique_ptr<dist::DataParallel> ddp;
#endif
};

JobDistribution::JobDistribution(std::string op) : op_(std::move(op)), impl_(std::make_unique<Impl>()) {
  const int world = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
  if (world <= 1) return;
#if KILN_HAVE_DIST
  dist::init();
  rank_ = dist::rank();
  world_ = dist::world_size();
#else
  KILN_FAIL(op_, "started as {} ranks by mpirun, but this kiln was built without MPI (KILN_WITH_MPI)", world);
#endif
}

JobDistribution::~JobDistribution() = default;  // MPI finalizes at exit (dist::init registers it)

int64_t JobDistribution::rank_batch(int64_t global_batch) const {
  KILN_CHECK(global_batch % world_ == 0, op_,
             "--batch-size {} is the global batch and must divide by the {} ranks (each rank takes an equal share)",
             global_batch, world_);
  return global_batch / world_;
}

std::shared_ptr<train::DistributedHooks> JobDistribution::wrap(nn::Module& model) {
  if (!active()) return nullptr;
#if KILN_HAVE_DIST
  impl_->ddp = std::make_unique<dist::DataParallel>(model);
  return dist::trainer_hooks(*impl_->ddp);
#else
  return nullptr;
#endif
}

void abort_other_ranks() {
#if KILN_HAVE_DIST
  if (dist::is_initialized() && dist::world_size() > 1) dist::abort_run("the error above");
#endif
}

int64_t JobDistribution::from_primary(int64_t value) const {
  if (!active()) return value;
#if KILN_HAVE_DIST
  Tensor t = Tensor::empty({1}, kI64);
  t.data<int64_t>()[0] = value;
  dist::broadcast(t, 0);
  return t.data<int64_t>()[0];
#else
  return value;
#endif
}

int JobDistribution::local_size() const {
  if (!active()) return 1;
  return std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", world_)));
}

std::string JobDistribution::describe() const { return active() ? fmt::format(" · {} ranks", world_) : ""; }

}  // namespace kiln::app
