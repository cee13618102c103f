// The MPI side of a training job (docs/distributed.md): `mpirun -np N kiln
// train fashion-mnist|lm ...` runs the same job on N ranks. Each rank trains
// on its slice of every global batch (--batch-size is the global batch, the
// same for any N, so a run resumes under another N), gradients are summed by
// dist::DataParallel, and only rank 0 prints, writes metrics.csv and
// checkpoints and serves the control socket. A plain `kiln train` (or
// mpirun -np 1) never touches MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/train/distributed.h"

namespace kiln::app {

class JobDistribution {
 public:
  /// Initialises MPI when mpirun started this process with more than one
  /// rank; otherwise a world of one. A build without the dist layer refuses
  /// a world of more than one ("[op] this kiln was built without MPI").
  explicit JobDistribution(std::string op);
  ~JobDistribution();
  JobDistribution(const JobDistribution&) = delete;
  JobDistribution& operator=(const JobDistribution&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  bool active() const { return world_ > 1; }
  bool primary() const { return rank_ == 0; }
  /// This rank's batch: global / world_size (an error unless it divides).
  int64_t rank_batch(int64_t global_batch) const;
  /// Wraps the model (rank 0's weights broadcast, gradients summed in
  /// buckets during backward); returns the Trainer's hooks (null when not active).
  std::shared_ptr<train::DistributedHooks> wrap(nn::Module& model);
  /// Rank 0's value on every rank (value itself in a world of one): what rank
  /// 0 alone decided, such as --memory-budget's batch.
  int64_t from_primary(int64_t value) const;
  /// The ranks on this machine (OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 when
  /// not active), which share its memory.
  int local_size() const;
  /// "" or " · 2 ranks" for the job's first line.
  std::string describe() const;

 private:
  struct Impl;
  std::string op_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Impl> impl_;
};

/// After a job's error was printed: in a run of several ranks, names this
/// rank and ends every rank (MPI_Abort), so none waits forever in a
/// collective; otherwise nothing.
void abort_other_ranks();

}  // namespace kiln::app
