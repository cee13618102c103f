// MPI behind dist::init and the tensor collectives (kiln/dist/process_group.h).
#include "kiln/dist/process_group.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kiln/core/error.h"
#include "src/dist/mpi_util.h"

namespace kiln::dist {

namespace {

std::mutex init_mutex;
bool initialized_by_us = false;
bool multiple = false;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

void check_tensor(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "the tensor is undefined");
  KILN_CHECK(t.device() == kCPU, op, "tensors must be on the CPU, got one on {}", t.device().str());
  KILN_CHECK(t.is_contiguous(), op, "the tensor of shape {} must be contiguous", to_string(t.shape()));
}

}  // namespace

namespace detail {

MPI_Datatype mpi_type(DType dtype, const char* op, bool arithmetic) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8:
    case DType::boolean: return MPI_UINT8_T;
    case DType::bf16:
      KILN_CHECK(!arithmetic, op, "bf16 tensors cannot be reduced (MPI has no bf16 arithmetic); cast to f32");
      return MPI_UINT16_T;
  }
  KILN_FAIL(op, "unsupported dtype {}", name(dtype));
}

void check_mpi(int code, const char* op) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  KILN_FAIL(op, "MPI error on {}: {}", describe(), std::string(text, size_t(len)));
}

void require_init(const char* op) {
  KILN_CHECK(is_initialized(), op, "dist::init() has not been called (or dist::finalize() already was)");
}

}  // namespace detail

void init(int* argc, char*** argv) {
  std::lock_guard lock(init_mutex);
  int done = 0;
  MPI_Initialized(&done);
  if (done) return;
  int provided = 0;
  detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "dist.init");
  multiple = provided >= MPI_THREAD_MULTIPLE;
  initialized_by_us = true;
  // Errors come back as codes (turned into kiln::Error) instead of aborting
  // the job from inside MPI, so the caller sees which op failed.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // A process that returns from main without finalize() still finalizes:
  // OpenMPI reports an unfinalized exit as an error of the whole job.
  std::atexit([] { finalize(); });
}

void finalize() {
  std::lock_guard lock(init_mutex);
  int done = 0, fin = 0;
  MPI_Initialized(&done);
  MPI_Finalized(&fin);
  if (!done || fin || !initialized_by_us) return;
  MPI_Finalize();
}

bool is_initialized() {
  int done = 0, fin = 0;
  MPI_Initialized(&done);
  MPI_Finalized(&fin);
  return done && !fin;
}

int rank() {
  if (!is_initialized()) return env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0));
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!is_initialized()) return env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

bool thread_multiple() { return is_initialized() && multiple; }

std::string describe() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return fmt::format("rank {} of {} on {}", rank(), world_size(), host);
}

void all_reduce(Tensor& t, ReduceOp op) {
  constexpr const char* name_ = "dist.all_reduce";
  detail::require_init(name_);
  check_tensor(t, name_);
  const bool boolean = t.dtype() == kBool || t.dtype() == kU8;
  KILN_CHECK(!(boolean && (op == ReduceOp::Sum || op == ReduceOp::Mean)), name_,
             "{} tensors can be reduced with Max or Min only", name(t.dtype()));
  KILN_CHECK(op != ReduceOp::Mean || is_floating(t.dtype()), name_, "Mean needs a floating dtype, got {}",
             name(t.dtype()));
  MPI_Op mop = op == ReduceOp::Max ? MPI_MAX : op == ReduceOp::Min ? MPI_MIN : MPI_SUM;
  detail::all_reduce_raw(t.data_ptr(), t.numel(), detail::mpi_type(t.dtype(), name_, true), mop, MPI_COMM_WORLD,
                         name_);
  if (op == ReduceOp::Mean && world_size() > 1) detail::scale(t, 1.0 / world_size());
}

void broadcast(Tensor& t, int root) {
  constexpr const char* op = "dist.broadcast";
  detail::require_init(op);
  check_tensor(t, op);
  KILN_CHECK(root >= 0 && root < world_size(), op, "root {} is not a rank of a world of {}", root, world_size());
  detail::chunked(t.data_ptr(), t.numel(), t.itemsize(), op, [&](void* p, int n) {
    return MPI_Bcast(p, n, detail::mpi_type(t.dtype(), op, false), root, MPI_COMM_WORLD);
  });
}

Tensor all_gather(const Tensor& t) {
  constexpr const char* op = "dist.all_gather";
  detail::require_init(op);
  check_tensor(t, op);
  Shape shape = t.shape();
  shape.insert(0, world_size());
  Tensor out = Tensor::empty(shape, t.dtype());
  const int64_t bytes = t.nbytes();
  KILN_CHECK(bytes <= int64_t(std::numeric_limits<int>::max()), op,
             "a tensor of {} bytes is beyond MPI's int count; gather it in pieces", bytes);
  detail::check_mpi(MPI_Allgather(t.data_ptr(), int(bytes), MPI_BYTE, out.data_ptr(), int(bytes), MPI_BYTE,
                                  MPI_COMM_WORLD),
                    op);
  return out;
}

void barrier() {
  detail::require_init("dist.barrier");
  detail::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "dist.barrier");
}

void abort_run(const std::string& what, int code) {
  std::fprintf(stderr, "[dist] %s failed: %s\n", describe().c_str(), what.c_str());
  std::fflush(stderr);
  if (is_initialized() && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kiln::dist
