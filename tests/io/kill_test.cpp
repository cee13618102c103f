// The kill test of issue 6 item 2: a child process saves versions 1, 2, 3, ...
// of a ~1 MB state dict to one path and is SIGKILLed at a random moment; the
// file on disk must then be one whole version (never a mix, never a torn file),
// never an older one than before, and the only debris a save may leave is its
// temporary file `.<name>.tmp-<pid>-<n>`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "kiln/io/safetensors.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---- version n of the saved tensors: every element is a function of (n, i) ----

/// One tensor of the saved state dict and how its element i depends on the version n.
struct Spec {
  const char* name;
  Shape shape;
  DType dtype;
  std::function<void(void* data, int64_t numel, int64_t n)> fill;
};

template <class T, class F>
auto filler(F f) {
  return [f](void* data, int64_t numel, int64_t n) {
    T* p = static_cast<T*>(data);
    for (int64_t i = 0; i < numel; ++i) p[i] = f(n, i);
  };
}

/// ~1.07 MB in all: one 1 MiB tensor (so a kill often lands mid-write) and small
/// ones of every dtype, a 0-d one and an empty one.
const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      {"weight", {512, 512}, kF32, filler<float>([](int64_t n, int64_t i) { return float((n * 131 + i) % (1 << 24)); })},
      {"bias", {3000}, kF64, filler<double>([](int64_t n, int64_t i) { return double(n) + 0.25 * double(i); })},
      {"steps", {1500}, kI64, filler<int64_t>([](int64_t n, int64_t i) { return n * 1000000 + i; })},
      {"counts", {2048}, kI32, filler<int32_t>([](int64_t n, int64_t i) { return int32_t(n - i); })},
      // raw bf16 bits of finite numbers in [1, 2)
      {"emb", {64, 96}, kBF16, filler<uint16_t>([](int64_t n, int64_t i) { return uint16_t(0x3f80 + (n + i) % 128); })},
      {"mask", {4096}, kBool, filler<bool>([](int64_t n, int64_t i) { return (n + i) % 3 == 0; })},
      {"bytes", {777}, kU8, filler<uint8_t>([](int64_t n, int64_t i) { return uint8_t((n * 7 + i) % 256); })},
      {"version", {}, kI64, filler<int64_t>([](int64_t n, int64_t) { return n; })},
      {"empty", {0, 4}, kF32, filler<float>([](int64_t, int64_t) { return 0.0f; })},
  };
  return s;
}

/// Memory shared with the children (MAP_SHARED): neither side pays a
/// copy-on-write fault per page after a fork when it writes there (in a VM a
/// fault costs up to ~100 us; 1 MB of them is tens of ms per fork).
class SharedMemory {
 public:
  explicit SharedMemory(size_t nbytes) : size_(nbytes) {
    void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("KillTest", "mmap of shared memory failed");
    base_ = static_cast<char*>(p);
  }
  ~SharedMemory() { ::munmap(base_, size_); }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  /// The next `nbytes`, 64-byte aligned.
  void* take(size_t nbytes) {
    used_ = (used_ + 63) / 64 * 64;
    if (used_ + nbytes > size_) throw Error("KillTest", "shared memory exhausted");
    void* p = base_ + used_;
    used_ += nbytes;
    return p;
  }

 private:
  char* base_;
  size_t size_, used_ = 0;
};

/// The tensors of a save, their memory taken from `mem`.
nn::StateDict allocate(SharedMemory& mem) {
  nn::StateDict sd;
  for (const Spec& s : specs()) {
    size_t nbytes = size_t(numel(s.shape)) * size_t(itemsize(s.dtype));
    auto storage = std::make_shared<Storage>(mem.take(nbytes), nbytes, kCPU, nullptr, nullptr);
    sd.insert(s.name, Tensor::make_view(storage, s.shape, contiguous_strides(s.shape), 0, s.dtype));
  }
  return sd;
}

/// Overwrites the tensors of `sd` (from allocate()) with version n, in place:
/// the child allocates nothing of its own between saves.
void fill(nn::StateDict& sd, int64_t n) {
  for (const Spec& s : specs()) {
    const Tensor& t = sd.at(s.name);
    s.fill(t.data_ptr(), t.numel(), n);
  }
}

/// The version a loaded file claims in its metadata, after checking that every
/// tensor is exactly that version's (`want` is scratch space from allocate()).
::testing::AssertionResult is_one_version(const std::string& path, nn::StateDict& want, int64_t& version) {
  nn::StateDict got;
  std::map<std::string, std::string> meta;
  try {
    got = load_safetensors(path);
    meta = read_safetensors_metadata(path);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << "does not load: " << e.what();
  }
  if (meta.size() != 1 || !meta.count("version"))
    return ::testing::AssertionFailure() << "metadata is not {\"version\": n}";
  version = std::stoll(meta.at("version"));
  fill(want, version);
  if (got.keys() != want.keys()) return ::testing::AssertionFailure() << "not the tensors of a save";
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    if (g.shape() != w.shape() || g.dtype() != w.dtype())
      return ::testing::AssertionFailure() << "tensor '" << name << "' has another shape or dtype";
    if (std::memcmp(g.data_ptr(), w.data_ptr(), size_t(w.nbytes())) != 0)
      return ::testing::AssertionFailure() << "tensor '" << name << "' is not entirely version " << version
                                           << " (the metadata's)";
  }
  return ::testing::AssertionSuccess();
}

// ---- the child and the shared counters ----

/// Lives in a MAP_SHARED page: the child writes, the parent reads after the kill.
struct Shared {
  std::atomic<int64_t> saves{0};           // saves completed, over all children
  std::atomic<int64_t> last_completed{0};  // the version of the newest save that returned
  static constexpr int kStamps = 16;
  std::atomic<int64_t> done_at_us[kStamps] = {};  // when the child's first saves returned (steady clock)
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "the counters must work across processes");

/// Where the saves go. kMemory: a tmpfs (/dev/shm), where a save costs ~0.5 ms
/// and thousands of kills fit in seconds; the page cache survives a SIGKILL, so
/// what a kill can leave behind does not depend on the file system. kDisk:
/// testing::TempDir(), with real fsyncs (5-15 ms each here), where kills also
/// land mid-fsync; fewer of them, for time.
enum class Folder { kMemory, kDisk };

class KillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = new (memory_.take(sizeof(Shared))) Shared;
    tensors_ = allocate(memory_);
    want_ = allocate(memory_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  /// Makes a fresh folder for this test (a tmpfs falls back to TempDir() where there is none).
  void use(Folder where) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("kiln_kill_{}_{}", ::getpid(), info->name());
    std::error_code ec;
    if (where == Folder::kMemory) {
      dir_ = fs::path("/dev/shm") / name;
      fs::remove_all(dir_, ec);
      if (fs::create_directories(dir_, ec) && !ec) return;
    }
    dir_ = fs::path(::testing::TempDir()) / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  std::string target() const { return (dir_ / "kill.safetensors").string(); }

  static int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
  }

  /// How long a child takes from fork() to its first completed save (startup
  /// after fork is several times one save: copy-on-write faults), and one save
  /// after that: medians of three children that save 8 times each here.
  struct Pace {
    int64_t first_us, save_us;
  };
  Pace calibrate() {
    std::vector<int64_t> first, save;
    for (int child = 0; child < 3; ++child) {
      int64_t forked = now_us();
      fill(tensors_, 1);
      pid_t pid = spawn(1, 8);
      int status = 0;
      EXPECT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a calibration save failed";
      first.push_back(shared_->done_at_us[0] - forked);
      for (int k = 1; k < 8; ++k) save.push_back(shared_->done_at_us[k] - shared_->done_at_us[k - 1]);
    }
    fs::remove(target());
    shared_->saves.store(0);
    std::sort(first.begin(), first.end());
    std::sort(save.begin(), save.end());
    return {first[first.size() / 2], std::max<int64_t>(save[save.size() / 2], 1)};
  }

  /// Forks a child that saves versions first, first + 1, ... to target(): `count`
  /// of them, then _exit(0); or until it is killed.
  pid_t spawn(int64_t first, int64_t count) {
    std::string path = target();
    for (auto& t : shared_->done_at_us) t.store(0);
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid != 0) {
      if (pid > 0) children_.insert(pid);
      return pid;
    }
    // The child: only saves, then _exit; nothing of gtest runs here. It dies
    // with the parent (a test killed by a timeout leaves no process saving forever).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(4);
    try {
      for (int64_t k = 0; k < count; ++k) {
        int64_t n = first + k;
        if (k > 0) fill(tensors_, n);
        save_safetensors(path, tensors_, {{"version", std::to_string(n)}});
        shared_->last_completed.store(n);
        shared_->saves.fetch_add(1);
        if (k < Shared::kStamps) shared_->done_at_us[k].store(now_us());
      }
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }

  /// A child saving versions first, first + 1, ... to target(), SIGKILLed
  /// `delay_us` after its fork, or with `after_a_save`, `delay_us` after its
  /// first save returned; then reaped.
  void save_and_kill(int64_t first, int64_t delay_us, bool after_a_save = false) {
    const int64_t saves_before = shared_->saves.load();
    // The first version is filled before the fork: the child starts saving at once.
    fill(tensors_, first);
    pid_t pid = spawn(first, std::numeric_limits<int64_t>::max());
    ASSERT_GE(pid, 0) << "fork failed";
    int status = 0;
    if (after_a_save) {
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (shared_->saves.load() == saves_before) {
        if (::waitpid(pid, &status, WNOHANG) == pid) FAIL() << "the child ended by itself (status " << status << ")";
        if (Clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          FAIL() << "the child's first save took over 10 s";
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended by itself (status " << status << "): a save threw";
  }

  /// Checks every file in the folder: the target (if any) is a regular file and
  /// every other one a temporary of one of our children's saves, which is
  /// then removed. Returns the number of temporaries.
  int check_and_clear_strays() {
    static const std::regex temp_name(R"(\.kill\.safetensors\.tmp-(\d+)-(\d+))");
    int strays = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name == "kill.safetensors") {
        EXPECT_TRUE(e.is_regular_file() && !e.is_symlink()) << "the target is not a plain file";
        continue;
      }
      std::smatch m;
      EXPECT_TRUE(std::regex_match(name, m, temp_name)) << "stray file '" << name << "' is not a save's temporary";
      if (!m.empty()) {
        EXPECT_TRUE(children_.count(pid_t(std::stoll(m[1].str())))) << "temporary '" << name << "' of another process";
      }
      fs::remove(e.path());  // a killed save leaves it for good; ~1 MB each
      ++strays;
    }
    return strays;
  }

  /// Overwriting an existing file: kills children until `saves` saves completed
  /// or `kills` kills happened, whichever comes first. After every kill the file
  /// is whole, it is the newest save that returned or the one the kill
  /// interrupted right after its rename, and versions never go backwards.
  void kill_overwriting_saves(int64_t saves, int kills, int saves_per_kill) {
    const Pace pace = calibrate();
    // A quarter of the kills come 0 to 1.5x the startup after the fork: before
    // the child's first save or during it. The others come 0 to `saves_per_kill`
    // saves (a few ms) after the child's first save returned, so they land at a
    // uniformly random point of a save: mid-write, mid-fsync, around the rename.
    const int64_t max_early_us = pace.first_us * 3 / 2, max_late_us = saves_per_kill * pace.save_us;
    std::mt19937_64 rng(20261130);
    std::uniform_int_distribution<int64_t> early(0, max_early_us), late(0, max_late_us);
    std::bernoulli_distribution is_early(0.25);

    fill(tensors_, 0);
    save_safetensors(target(), tensors_, {{"version", "0"}});
    int64_t on_disk = 0;
    int rounds = 0, killed_mid_save = 0, killed_after_rename = 0;
    const auto start = Clock::now();
    while (shared_->saves.load() < saves && rounds < kills) {
      ASSERT_LT(Clock::now() - start, std::chrono::seconds(120)) << "too slow: " << shared_->saves.load() << " saves";
      shared_->last_completed.store(on_disk);
      if (is_early(rng)) {
        save_and_kill(on_disk + 1, early(rng));
      } else {
        save_and_kill(on_disk + 1, late(rng), /*after_a_save=*/true);
      }
      ASSERT_FALSE(HasFatalFailure());
      ++rounds;
      const int64_t completed = shared_->last_completed.load();

      int64_t version = -1;
      ASSERT_TRUE(fs::exists(target())) << "kill " << rounds << ": the file is gone";
      ASSERT_TRUE(is_one_version(target(), want_, version)) << "kill " << rounds;
      ASSERT_GE(version, on_disk) << "kill " << rounds << ": the file went back to an older version";
      // The newest save that returned is on disk, or the next one got past its rename.
      ASSERT_TRUE(version == completed || version == completed + 1)
          << "kill " << rounds << ": version " << version << " on disk, last completed save " << completed;
      if (version == completed + 1) ++killed_after_rename;
      if (check_and_clear_strays() > 0) ++killed_mid_save;
      if (HasFailure()) return;
      on_disk = version;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("[ KillTest ] %s: %lld saves, %d kills in %.1f s; fork to first save %lld us, one save %lld us; "
                "delays 0..%lld us after the fork or 0..%lld us after a save; killed mid-save (temporary left) %d, "
                "right after the rename %d\n",
                dir_.c_str(), (long long)shared_->saves.load(), rounds, seconds, (long long)pace.first_us,
                (long long)pace.save_us, (long long)max_early_us, (long long)max_late_us, killed_mid_save,
                killed_after_rename);
    // Not vacuous: some kills interrupted a save half-way, and saves went on.
    EXPECT_GT(killed_mid_save, 0);
    EXPECT_GT(on_disk, 0);
  }

  /// The first save of a file: killed at any moment, the file is absent (and
  /// no save has returned) or whole.
  void kill_first_saves(int kills) {
    const Pace pace = calibrate();
    // Delays from 0 to about twice the time to the first save, so that about
    // half of the kills land before it returns. That time drifts with the
    // machine's load, so the range follows the outcomes: it grows after a kill
    // that left no file and shrinks after one that left a file.
    std::mt19937_64 rng(61);
    double max_delay_us = 2.0 * double(pace.first_us);
    int absent = 0, present = 0;
    for (int round = 1; round <= kills; ++round) {
      shared_->last_completed.store(0);
      save_and_kill(1, std::uniform_int_distribution<int64_t>(0, int64_t(max_delay_us))(rng));
      ASSERT_FALSE(HasFatalFailure());
      const int64_t completed = shared_->last_completed.load();
      if (fs::exists(target())) {
        int64_t version = -1;
        ASSERT_TRUE(is_one_version(target(), want_, version)) << "kill " << round;
        ASSERT_TRUE(version == completed || version == completed + 1)
            << "kill " << round << ": version " << version << ", last completed save " << completed;
        ASSERT_GE(version, 1);
        ++present;
        max_delay_us *= 0.9;
      } else {
        ASSERT_EQ(completed, 0) << "kill " << round << ": a save returned but there is no file";
        ++absent;
        max_delay_us *= 1.1;
      }
      check_and_clear_strays();
      fs::remove(target());
      if (HasFailure()) return;
    }
    std::printf("[ KillTest ] %s: first save, %d kills: no file %d, a whole file %d (fork to first save %lld us)\n",
                dir_.c_str(), kills, absent, present, (long long)pace.first_us);
    EXPECT_GT(absent, 0);
    EXPECT_GT(present, 0);
  }

  fs::path dir_;
  SharedMemory memory_{4 << 20};
  Shared* shared_ = nullptr;
  nn::StateDict tensors_;  // what the children save
  nn::StateDict want_;     // what the parent expects
  std::set<pid_t> children_;
};

TEST_F(KillTest, KilledSaveLeavesTheOldFileOrTheNewOne) {
  use(Folder::kMemory);
  kill_overwriting_saves(/*saves=*/2000, /*kills=*/1000000, /*saves_per_kill=*/20);
  EXPECT_GE(shared_->saves.load(), 2000);
}

TEST_F(KillTest, KilledSaveOnDiskLeavesTheOldFileOrTheNewOne) {
  use(Folder::kDisk);
  kill_overwriting_saves(/*saves=*/1000000, /*kills=*/40, /*saves_per_kill=*/3);
}

TEST_F(KillTest, KilledFirstSaveLeavesNoFileOrAWholeOne) {
  use(Folder::kMemory);
  kill_first_saves(100);
}

TEST_F(KillTest, KilledFirstSaveOnDiskLeavesNoFileOrAWholeOne) {
  use(Folder::kDisk);
  kill_first_saves(30);
}

}  // namespace
}  // namespace kiln::io
