// The processes of a data-parallel run (SPECS X6): MPI's world, as launched
// by `mpirun -np N prog`, and collectives on tensors.
//
//   dist::init(&argc, &argv);            // or dist::init(): MPI reads its own environment
//   int r = dist::rank(), n = dist::world_size();
//   dist::all_reduce(t);                 // in place, sum over ranks (ReduceOp::Mean divides by n)
//   dist::broadcast(t, /*root=*/0);      // in place: every rank gets root's values
//   Tensor all = dist::all_gather(t);    // [n, ...t.shape]: rank i's t at index i
//   dist::barrier();
//   dist::finalize();                    // or let the process exit: finalized at exit
//
// A program started without mpirun is a world of one process (singleton MPI
// init), so the same binary runs alone or under mpirun. Collectives take
// contiguous CPU tensors of the same shape and dtype on every rank (f32, f64,
// i32, i64, u8 and bool; bf16 only for broadcast and all_gather, since MPI
// has no bf16 sum); shapes are checked on the calling rank only, as MPI's are.
//
// Every collective is a blocking call on MPI_COMM_WORLD from the caller's
// thread. MPI is initialised with MPI_THREAD_MULTIPLE when the library
// offers it, so that dist::DataParallel can reduce gradients from its own
// thread on its own communicator while the caller trains.
#pragma once

#include <string>

#include "kiln/core/tensor.h"

namespace kiln::dist {

enum class ReduceOp { Sum, Mean, Max, Min };

/// Initialises MPI once (later calls do nothing). argc/argv may be null.
/// Installs an error handler that turns MPI errors into kiln::Error.
void init(int* argc = nullptr, char*** argv = nullptr);
/// Finalises MPI (after a barrier-free MPI_Finalize). Safe to call twice.
void finalize();
/// Whether init() ran and finalize() did not.
bool is_initialized();
/// This process' rank in [0, world_size()), and the number of processes.
/// Before init(): rank 0 of a world of 1 (the environment's OMPI_COMM_WORLD_RANK
/// / _SIZE when mpirun started us, so that a program can decide before init).
int rank();
int world_size();
/// Whether MPI granted MPI_THREAD_MULTIPLE (gradient reduction on a thread).
bool thread_multiple();
/// "rank 1 of 2 on host" for error messages.
std::string describe();

/// In place over every rank: t = op(t of rank 0, ..., t of rank n-1).
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
/// In place: every rank's t takes root's values.
void broadcast(Tensor& t, int root = 0);
/// Every rank's t stacked along a new first dim: [world_size, ...t.shape].
Tensor all_gather(const Tensor& t);
void barrier();

/// A failed rank stops the whole run: prints "[dist] rank R of N failed: <what>"
/// to stderr and calls MPI_Abort, so that mpirun ends every rank (within
/// seconds) with a non-zero exit; before init() or in a world of one it only
/// prints. Returns never.
[[noreturn]] void abort_run(const std::string& what, int code = 1);

}  // namespace kiln::dist
