// kerneldsl's CPU device runtime: the launch entries (cuLaunchKernel's and cuLaunchKernelEx's
// ABI), the device's memory books (its allocations and pools), the thread pool that runs a grid's blocks on every core, the fibers a block's threads run
// on when its kernel has barriers or warp collectives, and the errors a launch reports. Compiled
// once per host compiler into a shared library that is loaded with RTLD_GLOBAL before any kernel
// module, which resolves the kd_host_*_v1 entries the shim (kd_host.h) declares. The contract is
// docs/cpu-device-abi.md.
//
// Execution model, and the rules the code below keeps:
// - A grid's blocks are taken in order, in chunks, from an atomic counter by a pool of OS threads
//   (the caller included); each runs a block to completion. So a block's predecessors have all
//   started and none is starved: the scans' decoupled look-back relies on it.
// - Fiber mode: a block's threads start in order, one after another, on stacks the block takes
//   from this OS thread's pool; one that finishes without blocking hands its stack to the next. A
//   thread that waits (barrier, collective) switches directly to the next runnable thread, or else
//   starts the next one by switching to the starter (a context armed on the block's next stack);
//   the last to arrive releases the waiters into a FIFO and carries on. The common cases (waiting,
//   and a thread's start and finish: the module's chain) run inline in the module (kd_host.h) on
//   the block state kept here; the rest is here.
//   Nothing runnable and threads still waiting is a deadlock, reported with where each waits.
// - Cooperative grids run every block on its own OS thread; clusters run a cluster's blocks at
//   once on a team of OS threads, cluster after cluster.
// - Errors (assert, __trap, a deadlock, a collective misused, a trap: see "Traps") end the block
//   at once: a fiber switches to the block's main context, a loop-mode kernel longjmps to its
//   chunk's landing. No C++ exception crosses a module.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csetjmp>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#define KD_EXPORT extern "C" __attribute__((visibility("default")))
// The runtime's own thread-locals are few and small: initial-exec, so the fiber paths read them
// with one instruction (the runtime is loaded once, into the static TLS reserve).
#define KD_TLS __attribute__((tls_model("initial-exec")))

// ---------------------------------------------------------------------------------------------
// The ABI, as kd_host.h declares it (keep the two identical).
namespace {
constexpr unsigned int kMagic = 0x4644484bu;
constexpr unsigned int kAbi = 5;
struct uint3 { unsigned int x, y, z; };
}  // namespace
struct kd_host_launch {
    unsigned int grid[3], block[3];
    unsigned int dynamic_shared;
    unsigned int cluster[3];
    void* reserved[2];
};
typedef struct kd_host_launch LaunchDims;  // the entry kd_host_launch hides the struct's name
struct kd_host_function {
    unsigned int magic, abi;
    const char* name;
    int (*run_blocks)(const kd_host_launch*, void**, unsigned long long, unsigned long long);
    unsigned int flags, nparams;
};
struct kd_host_context { void* sp; void* pc; void* fp; };
enum { KD_HOST_RUNNABLE, KD_HOST_WAIT_BARRIER, KD_HOST_WAIT_WARP, KD_HOST_WAIT_PENDING };
struct kd_host_site {
    const void* resume;
    const char* file;
    int line;
    unsigned int wait;
};
struct kd_host_warp;
struct alignas(64) kd_host_fiber {
    kd_host_context context;
    uint3 tid;
    unsigned int linear;
    kd_host_warp* warp;
    const char* file;
    int line;
    unsigned char wait, op, reserved[2];
};
struct alignas(16) kd_host_word { unsigned long long lo, hi; };
struct kd_host_warp {
    unsigned int existing, exited, arrived, mask, pending, op;
    unsigned long long operands[32];
    kd_host_word in[32], out[32];
};
struct kd_host_block {
    kd_host_fiber* next;
    kd_host_fiber* fibers;
    kd_host_warp* warps;
    kd_host_fiber** ring;
    kd_host_fiber** waiters;
    unsigned int head, tail, ring_mask;
    unsigned int arrived, n;
    kd_host_context start;
    void* args;
    void* const* tops;
    unsigned int next_start, arms, ntops, reserved;
};
struct kd_host_index {
    uint3 thread, block, block_dim, grid_dim, cluster_dim;
    kd_host_block* scheduler;
    kd_host_fiber* fiber;
    unsigned long long shared, shared_bytes, dynamic_shared, dynamic_shared_bytes;
};
// The running CUDA thread of this OS thread, which every module reads (kd_host.h).
extern "C" __attribute__((visibility("default"))) __thread kd_host_index kd_host_index_v1 KD_TLS;
__thread kd_host_index kd_host_index_v1 KD_TLS = {};
enum {
    KD_HOST_WARP_SYNC, KD_HOST_SHFL_IDX, KD_HOST_SHFL_UP, KD_HOST_SHFL_DOWN, KD_HOST_SHFL_BFLY,
    KD_HOST_VOTE_ANY, KD_HOST_VOTE_ALL, KD_HOST_VOTE_UNI, KD_HOST_VOTE_BALLOT, KD_HOST_MATCH_ANY,
    KD_HOST_MATCH_ALL, KD_HOST_REDUCE_ADD, KD_HOST_REDUCE_MIN_U, KD_HOST_REDUCE_MIN_S,
    KD_HOST_REDUCE_MAX_U, KD_HOST_REDUCE_MAX_S, KD_HOST_REDUCE_AND, KD_HOST_REDUCE_OR, KD_HOST_REDUCE_XOR
};
enum { KD_HOST_SPLIT_EXITED = 8 };
struct kd_host_split_site {
    const char* name;
    const char* file;
    int line;
    int mode;
};
struct kd_host_split {
    unsigned char* wait;
    unsigned int* resume;
    unsigned int* masks;
    int* values;
    kd_host_warp* warps;
    const uint3* tids;
    char* storage;
    const kd_host_index* index;
    const kd_host_split_site* sites;
    unsigned int n, nwarps, running, exited;
    unsigned int recording, predicates, reserved[2];
};
// The same assertion as kd_host.h's: the two copies of the layout cannot drift apart.
static_assert(sizeof(kd_host_launch) == 56 && sizeof(kd_host_function) == 32 && sizeof(kd_host_context) == 24 &&
                  sizeof(kd_host_fiber) == 64 && sizeof(kd_host_warp) == 1312 && sizeof(kd_host_block) == 120 &&
                  sizeof(kd_host_index) == 112 && __builtin_offsetof(kd_host_index, scheduler) == 64,
              "the host ABI's layout (KD_HOST_ABI 5)");
static_assert(sizeof(kd_host_site) == 24, "the host ABI's layout (KD_HOST_ABI 5)");
static_assert(sizeof(kd_host_split_site) == 24 && sizeof(kd_host_split) == 104,
              "the host ABI's layout (KD_HOST_ABI 5)");

// CUresult codes a launch returns.
enum {
    kInvalidValue = 1,
    kIllegalAddress = 700,
    kAssert = 710,
    kIllegalInstruction = 715,
    kLaunchFailed = 719,
    kNotSupported = 801
};

// ---------------------------------------------------------------------------------------------
// Context switches. Rule: a suspended thread of execution is its stack pointer, where its code
// resumes and its frame pointer (kd_host_context, shared with the shim, whose kd_host_switch is
// the same switch inline in kernels); the switch is inline assembly that declares every other
// register clobbered, so the compiler saves only what is live around it, and it writes nothing on
// the stack. No system call, no ucontext.
//   switch_to(from, to): suspend into *from, resume *to.
//   jump_to(to): resume *to, abandoning this thread of execution.
// A fresh context (the starter's) resumes at a function's entry with its stack pointer kEntrySlot
// below a 16-byte aligned top, as a call leaves it; that function never returns.
namespace {
#if defined(__x86_64__)
#define KD_CLOBBERS \
    "rax", "rbx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", \
        "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
__attribute__((always_inline)) inline void switch_to(kd_host_context* from, const kd_host_context* to) {
    __asm__ __volatile__(
        "leaq 1f(%%rip), %%rax\n\tmovq %%rsp, (%%rdx)\n\tmovq %%rax, 8(%%rdx)\n\tmovq %%rbp, 16(%%rdx)\n\t"
        "movq 16(%%rsi), %%rbp\n\tmovq (%%rsi), %%rsp\n\tjmpq *8(%%rsi)\n1:"
        : "+d"(from), "+S"(to)
        :
        : "rcx", "rdi", KD_CLOBBERS);
}
constexpr size_t kEntrySlot = 8;  // the return address a call pushes
// (`to` in a fixed register: one the compiler picked could be %rbp, which the first move overwrites.)
[[noreturn]] __attribute__((always_inline)) inline void jump_to(const kd_host_context* to) {
    __asm__ __volatile__("movq 16(%0), %%rbp\n\tmovq (%0), %%rsp\n\tjmpq *8(%0)" : : "d"(to) : "memory");
    __builtin_unreachable();
}
#elif defined(__aarch64__)
#if defined(__APPLE__)
#define KD_X18  // the platform register: never touched
#else
#define KD_X18 "x18",
#endif
#define KD_CLOBBERS \
    "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", KD_X18 "x19", "x20", "x21", "x22", "x23", "x24", "x25", \
        "x26", "x27", "x28", "x30", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", \
        "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", \
        "v27", "v28", "v29", "v30", "v31"
__attribute__((always_inline)) inline void switch_to(kd_host_context* from, const kd_host_context* to) {
    register kd_host_context* x0 __asm__("x0") = from;
    register const kd_host_context* x1 __asm__("x1") = to;
    __asm__ __volatile__(
        "adr x9, 1f\n\tmov x10, sp\n\tstp x10, x9, [x0]\n\tstr x29, [x0, #16]\n\t"
        "ldr x29, [x1, #16]\n\tldp x10, x9, [x1]\n\tmov sp, x10\n\tbr x9\n1:"
        : "+r"(x0), "+r"(x1)
        :
        : "x2", "x3", "x4", "x5", "x6", "x7", "x8", KD_CLOBBERS);
}
constexpr size_t kEntrySlot = 0;  // a call leaves the return address in x30
[[noreturn]] __attribute__((always_inline)) inline void jump_to(const kd_host_context* to) {
    register const kd_host_context* x1 __asm__("x1") = to;  // not x29, which the first load overwrites
    __asm__ __volatile__("ldr x29, [%0, #16]\n\tldp x10, x9, [%0]\n\tmov sp, x10\n\tbr x9" : : "r"(x1) : "x9", "x10", "memory");
    __builtin_unreachable();
}
#else
#error "kd_host_runtime.cpp: fibers need a context switch for this CPU (x86_64 and aarch64 have one)"
#endif
}  // namespace

namespace {

// ---------------------------------------------------------------------------------------------
// Errors. Rule: a message names the kernel, the block, the thread(s) and the body's line; it is
// kept per OS thread (the launch copies a failed grid's first message to its caller's thread).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    char buffer[512];
    va_list args;
    va_start(args, fmt);
    const int n = std::vsnprintf(buffer, sizeof buffer, fmt, args);
    va_end(args);
    if (n < (int)sizeof buffer) return std::string(buffer, n < 0 ? 0 : (size_t)n);
    std::string out((size_t)n + 1, '\0');
    va_start(args, fmt);
    std::vsnprintf(&out[0], out.size(), fmt, args);
    va_end(args);
    out.resize((size_t)n);
    return out;
}

// Linear thread ids as ranges ("0-31, 64, 96-127"), at most a few, then how many more.
std::string ranges(const std::vector<unsigned int>& ids) {
    std::string out;
    size_t shown = 0, i = 0;
    while (i < ids.size()) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (shown == 6) {
            out += format(", ... (%zu threads in all)", ids.size());
            break;
        }
        out += shown ? ", " : "";
        out += j == i ? format("%u", ids[i]) : format("%u-%u", ids[i], ids[j]);
        ++shown;
        i = j + 1;
    }
    return out;
}

// Threads grouped by where they wait (in the order first met), for a block where none can proceed.
typedef std::vector<std::pair<std::string, std::vector<unsigned int>>> WaitGroups;
void group_waiting(WaitGroups& groups, const std::string& at, unsigned int thread) {
    size_t g = 0;
    while (g < groups.size() && groups[g].first != at) ++g;
    if (g == groups.size()) groups.emplace_back(at, std::vector<unsigned int>());
    groups[g].second.push_back(thread);
}
// What follows "kernel 'k' block (x,y,z)" when no thread can proceed: the one barrier some threads
// never reach, or each place threads wait; then the threads that exited.
std::string no_progress(const WaitGroups& groups, bool barrier_only, const std::vector<unsigned int>& exited) {
    std::string message;
    if (groups.size() == 1 && barrier_only) {
        message = format(": %s is not reached by every thread of the block: threads %s wait there",
                         groups[0].first.c_str(), ranges(groups[0].second).c_str());
    } else {
        message = ": no thread can proceed:";
        for (size_t g = 0; g < groups.size(); ++g)
            message += format("%s threads %s wait at %s", g ? ";" : "", ranges(groups[g].second).c_str(),
                              groups[g].first.c_str());
    }
    if (!exited.empty()) message += format("; threads %s exited", ranges(exited).c_str());
    return message;
}

// ---------------------------------------------------------------------------------------------
// Fiber stacks. Rule: the runtime owns them (a module never does: thousands get loaded), pooled
// per OS thread and reused across launches and modules; each has a guard page below it (while
// the kernel allows the mappings); the tops are coloured by 64-byte steps over 4 KiB, so the
// hot frames of a thousand fibers do not all fall on the same L1 sets.
// A stack holds CUDA's local memory a thread (512 KiB: the host compile refuses a larger frame)
// and the shim's and runtime's own frames.
constexpr size_t kStackBytes = (512 + 64) << 10;
constexpr size_t kSignalStackBytes = 64 << 10;  // where a thread that runs blocks handles a fault (see "Traps")
constexpr unsigned int kStacksPerMap = 16;
constexpr unsigned int kColours = 64;
constexpr size_t kDynamicSharedBytes = 1 << 20;
constexpr unsigned int kMaxBlockThreads = 1024;
constexpr unsigned long long kMaxCooperativeBlocks = 1024;
constexpr unsigned int kMaxClusterBlocks = 16;  // CUDA's non-portable maximum

struct Stack {
    char* top;  // 16-byte aligned, coloured
    char* low;  // the lowest usable byte (above the guard page)
};

// AddressSanitizer (checks="address" preloads it): its fiber annotations, so it follows the
// switches between fibers' stacks, and unpoisoning for the stacks of abandoned threads (their
// frames' redzones would stay poisoned). Weak: without ASan in the process they are null.
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size) __attribute__((weak));
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old)
    __attribute__((weak));
void __asan_unpoison_memory_region(const volatile void* address, size_t size) __attribute__((weak));
}

class SpareStacks {  // stacks of OS threads that exited, for the next ones
public:
    static SpareStacks& get() {
        static SpareStacks* spare = new SpareStacks;  // never destroyed: threads may outlive exit
        return *spare;
    }
    void give(std::vector<Stack*>& stacks) {
        std::lock_guard<std::mutex> hold(lock_);
        spare_.insert(spare_.end(), stacks.begin(), stacks.end());
        stacks.clear();
    }
    bool take(std::vector<Stack*>& into, size_t count) {
        std::lock_guard<std::mutex> hold(lock_);
        if (spare_.empty()) return false;
        for (; count && !spare_.empty(); --count) {
            into.push_back(spare_.back());
            spare_.pop_back();
        }
        return true;
    }
    unsigned int colour() { return colour_.fetch_add(1, std::memory_order_relaxed) % kColours; }

private:
    std::mutex lock_;
    std::vector<Stack*> spare_;
    std::atomic<unsigned int> colour_{0};
};

class StackPool {
public:
    ~StackPool() { SpareStacks::get().give(free_); }
    Stack* get() {
        if (__builtin_expect(free_.empty(), 0) && !refill()) return nullptr;
        Stack* s = free_.back();
        free_.pop_back();
        return s;
    }
    void put(Stack* s) { free_.push_back(s); }

private:
    bool refill() {
        if (SpareStacks::get().take(free_, kStacksPerMap)) return true;
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        const size_t each = kStackBytes + page;
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
        flags |= MAP_NORESERVE;
#endif
#ifdef MAP_STACK
        flags |= MAP_STACK;
#endif
        void* region = mmap(nullptr, each * kStacksPerMap, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (region == MAP_FAILED) return false;
        free_.reserve(free_.size() + kStacksPerMap);
        for (unsigned int i = 0; i < kStacksPerMap; ++i) {
            char* low = static_cast<char*>(region) + i * each;
            mprotect(low, page, PROT_NONE);  // the guard; without it (the map count is spent) the stack still works
            char* top = low + each - 64u * SpareStacks::get().colour();
            free_.push_back(new Stack{reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(top) & ~(uintptr_t)15), low + page});
        }
        return true;
    }
    std::vector<Stack*> free_;
};

// ---------------------------------------------------------------------------------------------
// A block's threads as fibers. Rule: see the top of this file. The block's state is the
// kd_host_block the shim's inline fast paths also use: a thread that waits records where, joins
// the waiters (barrier) or its warp's collective in flight, and switches to the head of the ring
// of runnable threads; the last to arrive releases the others into the ring and carries on.
enum { kClusterBarrier = 4 };  // the barrier mode of kd_host_cluster_sync
const char* const kBarrierNames[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                                     "kd_host_cluster_sync"};
const char* const kWarpNames[] = {
    "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__any_sync", "__all_sync",
    "__uni_sync", "__ballot_sync", "__match_any_sync", "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_min_sync", "__reduce_max_sync", "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync",
    "__reduce_xor_sync"};

const char* warp_name(unsigned int op) { return op < sizeof kWarpNames / sizeof *kWarpNames ? kWarpNames[op] : "a warp collective"; }

// PTX shfl.sync: the source lane of `lane` for mode, b and c (segment mask c[12:8], clamp c[4:0]);
// a source outside the lane's segment gives the lane its own value.
inline unsigned int shuffle_source(unsigned int mode, unsigned int lane, unsigned int b, unsigned int c) {
    const unsigned int seg = (c >> 8) & 31u, clamp = c & 31u;
    const int max_lane = (int)((lane & seg) | (clamp & ~seg)), min_lane = (int)(lane & seg);
    int j;
    bool inside;
    switch (mode) {
    case KD_HOST_SHFL_UP: j = (int)lane - (int)b; inside = j >= max_lane; break;
    case KD_HOST_SHFL_DOWN: j = (int)(lane + b); inside = j <= max_lane; break;
    case KD_HOST_SHFL_BFLY: j = (int)(lane ^ b); inside = j <= max_lane; break;
    default: j = min_lane | (int)(b & ~seg); inside = j <= max_lane; break;
    }
    return inside ? (unsigned int)j : lane;
}

[[noreturn]] void fiber_start();
struct ThreadContext;

class Scheduler {
public:
    explicit Scheduler(ThreadContext* owner) : owner_(owner) {}

    // Sizes the records for a launch's blocks and binds the module's index and thread entries:
    // the starter runs the module's chain, or (a seeded schedule, the checks, AddressSanitizer in
    // the process, which the runtime's own switches annotate) fiber_start, which calls the kernel
    // once a thread.
    void prepare(const kd_host_launch* launch, void (*entry)(void*), void (*chain)(void), void* args) {
        kd_host_index* ix = &kd_host_index_v1;
        ix_ = ix;
        entry_ = entry;
        b_.args = args;
        const bool chains = chain != nullptr && (checks_ | seed_) == 0 && __sanitizer_start_switch_fiber == nullptr;
        starter_ = chains ? reinterpret_cast<void*>(chain) : reinterpret_cast<void*>(&fiber_start);
        bx_ = launch->block[0];
        by_ = launch->block[1];
        const unsigned int n = launch->block[0] * launch->block[1] * launch->block[2], warps = (n + 31) / 32;
        if (fibers_.size() < n) {
            fibers_.resize(n);
            stacks_.resize(n);
            masks_.resize(n);
        }
        if (warps_.size() < warps) warps_.resize(warps);
        if (n != shaped_n_ || bx_ != shaped_x_ || by_ != shaped_y_ || warps_.data() != shaped_warps_) {
            // Each thread's record: its ids and warp, the same in every block of the launch.
            for (unsigned int linear = 0; linear < n; ++linear) {
                kd_host_fiber& f = fibers_[linear];
                f.linear = linear;
                f.tid = uint3{linear % bx_, linear / bx_ % by_, linear / bx_ / by_};
                f.warp = &warps_[linear >> 5];
                f.wait = KD_HOST_RUNNABLE;
            }
            shaped_n_ = n;
            shaped_x_ = bx_;
            shaped_y_ = by_;
            shaped_warps_ = warps_.data();
        }
        if (checks_ && warp_epochs_.size() < warps) warp_epochs_.resize(warps);
        unsigned int capacity = 1;  // (room for every thread and the null after the last)
        while (capacity < n + 1) capacity <<= 1;
        if (ring_a_.size() < capacity) {
            ring_a_.resize(capacity);
            ring_b_.resize(capacity);
        }
        for (unsigned int w = 0; w < warps; ++w) {
            const unsigned int lanes = n - 32 * w;
            warps_[w].existing = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1u;
        }
        b_.fibers = fibers_.data();
        b_.warps = warps_.data();
        b_.ring_mask = capacity - 1;
        b_.n = n;
        nwarps_ = warps;
        ix->scheduler = &b_;
    }

    // Runs one block's threads to completion; 0, or the error code (the message is the owner's).
    int run_block();

    bool active() const { return active_; }

    // Checked execution: which checks run, the schedule's seed (0: threads in order), and the
    // ordering facts the race check reads (barriers the block passed, collectives each warp completed).
    void set_checks(unsigned int checks, unsigned long long seed) {
        checks_ = checks;
        seed_ = seed;
    }
    unsigned int epoch() const { return gen_; }
    unsigned int warp_epoch(unsigned int warp) const { return warp < warp_epochs_.size() ? warp_epochs_[warp] : 0; }

    int barrier(int mode, int predicate, const char* file, int line) {
        kd_host_fiber* f = ix_->fiber;
        const unsigned int g = gen_;
        count_[g & 1] += predicate != 0;
        if (b_.arrived + 1 == b_.n) {  // the last thread: release the others and carry on
            if (mode == kClusterBarrier) cluster_barrier();  // once every block of the cluster is there
            if (__builtin_expect((checks_ | seed_) != 0, 0)) checked_release(f, file, line);
            gen_ = g + 1;
            count_[(g + 1) & 1] = 0;
            release_waiters();
            return result(mode, count_[g & 1]);
        }
        wait_at(f, KD_HOST_WAIT_BARRIER, (unsigned int)mode, 0, file, line);
        b_.waiters[b_.arrived++] = f;
        suspend(f);
        return result(mode, count_[g & 1]);
    }

    unsigned int warp(unsigned int control, unsigned int mask, kd_host_word* value, unsigned int b, const char* file,
                      int line) {
        kd_host_fiber* f = ix_->fiber;
        const unsigned int lane = f->linear & 31u, bit = 1u << lane, op = control & 0xffu;
        kd_host_warp& w = b_.warps[f->linear >> 5];
        const unsigned int m = mask & w.existing;
        if (__builtin_expect(!(m & bit), 0)) collective_error(f, op, mask, file, line, "its mask does not name the calling lane");
        for (;;) {
            if (__builtin_expect(m & w.exited, 0)) collective_error(f, op, mask, file, line, "lanes named in the mask have exited");
            if (w.arrived == 0 || w.mask == m) break;
            w.pending |= bit;  // a collective over other lanes is in flight: wait for it to complete
            wait_at(f, KD_HOST_WAIT_PENDING, op, m, file, line);
            suspend(f);
        }
        if (__builtin_expect(w.arrived != 0 && w.op != op, 0))
            collective_error(f, op, mask, file, line, "other lanes of its warp are at another collective");
        w.in[lane] = *value;
        w.operands[lane] = b | (unsigned long long)control << 32;
        w.arrived |= bit;
        w.mask = m;
        w.op = op;
        if (w.arrived == m) {
            complete(w, f->linear & ~31u, lane);
        } else {
            wait_at(f, KD_HOST_WAIT_WARP, op, m, file, line);
            suspend(f);
        }
        *value = w.out[lane];
        return (unsigned int)w.out[lane].lo;
    }

    unsigned int activemask() const {
        const kd_host_warp& w = *ix_->fiber->warp;
        return w.existing & ~w.exited;
    }

    // Lets the others run: the next runnable thread, else the next to start, else the OS.
    void yield() {
        kd_host_fiber* f = ix_->fiber;
        f->wait = KD_HOST_RUNNABLE;
        if (b_.head != b_.tail) {
            kd_host_fiber* next = pop();
            push(f);
            resume(f, next);
        } else if (b_.next_start < b_.n) {
            push(f);
            start_next(&f->context);
        } else {
            sched_yield();
        }
    }

    [[noreturn]] void fail(int code);

    // The module's chain, arrived on the starter's stack: the starter is spent, and armed again
    // (with the block's next stack) while threads remain to start after the one the chain starts now.
    void chain_arm() {
        b_.start.pc = nullptr;
        if (b_.next_start + 1 < b_.n) arm();  // (none: start_next reports it)
    }
    // A chain's thread returned from the kernel with no thread runnable, or with a collective in
    // flight in its warp: returns when the chain starts the next thread.
    void chain_end() { finish(ix_->fiber); }

private:
    friend void fiber_start();

    // What __syncthreads_count (1), _and (2) and _or (3) return, from how many predicates were true.
    int result(int mode, int count) const {
        switch (mode) {
        case 1: return count;
        case 2: return count == (int)b_.n;
        case 3: return count != 0;
        default: return 0;
        }
    }

    void wait_at(kd_host_fiber* f, unsigned char kind, unsigned int op, unsigned int mask, const char* file, int line) {
        f->context.pc = nullptr;  // (until it switches away: no inline site of an earlier wait names this one)
        f->wait = kind;
        f->op = (unsigned char)op;
        f->file = file;
        f->line = line;
        masks_[f->linear] = mask;
    }

    // The ring of runnable threads; b_.next caches the thread at its head for the inline paths.
    // Rule: the entry after the last is null (the inline pop reads the next head without comparing
    // it with the tail); the ring has room for every thread and that null.
    void push(kd_host_fiber* f) {
        if (b_.head == b_.tail) b_.next = f;
        b_.ring[b_.tail++ & b_.ring_mask] = f;
        b_.ring[b_.tail & b_.ring_mask] = nullptr;
    }
    kd_host_fiber* pop() {
        kd_host_fiber* f = b_.next;
        b_.next = b_.ring[++b_.head & b_.ring_mask];
        return f;
    }

    void release_waiters() {
        const unsigned int count = b_.arrived;
        if (b_.head == b_.tail) {  // the usual case: nothing else is runnable, so the waiters become the ring
            kd_host_fiber** t = b_.ring;
            b_.waiters[count] = nullptr;
            b_.ring = b_.waiters;
            b_.waiters = t;
            b_.head = 0;
            b_.tail = count;
            b_.next = b_.ring[0];
        } else {
            for (unsigned int i = 0; i < count; ++i) push(b_.waiters[i]);
        }
        b_.arrived = 0;
    }

    void select(kd_host_fiber* to) {  // the running thread, as the kernel and the inline paths see it
        ix_->thread = to->tid;  // (an unchecked module's inline switches write only the record)
        ix_->fiber = to;
    }

    void resume(kd_host_fiber* from, kd_host_fiber* to) {
        select(to);
        leave(stacks_[to->linear], false);
        switch_to(&from->context, &to->context);
        arrive();
    }

    // Starts the next thread: a switch to the starter (armed with a fresh stack first if it is not).
    void start_next(kd_host_context* from) {
        if (b_.start.pc == nullptr && !arm()) out_of_stacks();
        leave(starter_stack_, false);
        switch_to(from, &b_.start);
        arrive();
    }

public:
    // The starter: a context on a fresh stack whose code is fiber_start, armed while threads remain
    // to start, so that a waiting thread starts the next one by a switch (inline in the kernel).
    bool arm();
    // Gives the armed stack back (the OS thread is exiting).
    void disarm();

    // Whether `address` is in the guard page below one of the block's stacks: a stack overflowed.
    bool guards(uintptr_t address) const {
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        for (const Stack* stack : own_) {
            const uintptr_t low = reinterpret_cast<uintptr_t>(stack->low);
            if (address < low && address + page >= low) return true;
        }
        return false;
    }

private:

    // ASan's annotations around a switch to `to`'s stack (null: the OS thread's), and on arrival.
    void leave(const Stack* to, bool dying) {
        if (__builtin_expect(__sanitizer_start_switch_fiber != nullptr, 0))
            __sanitizer_start_switch_fiber(dying ? nullptr : &fake_stack_, to ? to->low : main_bottom_,
                                           to ? (size_t)(to->top - to->low) : main_size_);
    }
    void arrive() {
        if (__builtin_expect(__sanitizer_finish_switch_fiber != nullptr, 0)) {
            const void* bottom = nullptr;
            size_t size = 0;
            __sanitizer_finish_switch_fiber(fake_stack_, &bottom, &size);
            if (from_main_) {  // the first switch of a block comes from the OS thread's stack
                main_bottom_ = bottom;
                main_size_ = size;
                from_main_ = false;
            }
        }
    }

    // The waiting thread f switches to the next runnable one, or starts the next thread; with
    // neither, no thread can ever proceed.
    void suspend(kd_host_fiber* f) {
        if (b_.head != b_.tail) resume(f, pop());
        else if (b_.next_start < b_.n) start_next(&f->context);
        else deadlock();
    }

    // A thread returned from the kernel. Returns when the next thread should start on its stack;
    // otherwise switches away for good.
    void finish(kd_host_fiber* f) {
        kd_host_warp& w = *f->warp;
        const unsigned int bit = 1u << (f->linear & 31u);
        w.exited |= bit;
        if (__builtin_expect(w.arrived != 0 && (w.mask & bit) != 0, 0)) exited_in_collective(f, w);
        if (b_.head != b_.tail) {
            kd_host_fiber* next = pop();
            select(next);
            leave(stacks_[next->linear], true);
            jump_to(&next->context);
        }
        if (b_.next_start < b_.n) return;
        if (none_waits()) {
            leave(nullptr, true);
            jump_to(&main_);
        }
        deadlock();
    }
    // With every thread started and none runnable, whether all have exited: none waits at the
    // barrier or a collective (a module without warp collectives records no exits).
    bool none_waits() const {
        if (b_.arrived != 0) return false;
        for (unsigned int w = 0; w < nwarps_; ++w)
            if ((warps_[w].arrived | warps_[w].pending) != 0) return false;
        return true;
    }

    void complete(kd_host_warp& w, unsigned int first, unsigned int self);
    void cluster_barrier();
    void checked_release(kd_host_fiber* last, const char* file, int line);
    template <class T> void shuffle_order(T* ids, unsigned int n);
    // The error paths, kept out of line so the hot paths' frames stay small.
    [[noreturn]] __attribute__((noinline, cold)) void deadlock();
    [[noreturn]] __attribute__((noinline, cold)) void exited_in_collective(kd_host_fiber* f, const kd_host_warp& w);
    [[noreturn]] __attribute__((noinline, cold)) void collective_error(kd_host_fiber* f, unsigned int op, unsigned int mask,
                                                                       const char* file, int line, const char* why);
    [[noreturn]] __attribute__((noinline, cold)) void out_of_stacks();
    std::string where() const;
    std::string sync_tag() const;

    kd_host_block b_ = {};  // first: what the shim reads
    ThreadContext* owner_;
    kd_host_index* ix_ = nullptr;
    void (*entry_)(void*) = nullptr;
    void* starter_ = nullptr;  // the code the starter runs: the module's chain, or fiber_start
    unsigned int nwarps_ = 0, bx_ = 1, by_ = 1;
    std::vector<kd_host_fiber> fibers_;
    std::vector<Stack*> stacks_;         // the stack each started thread runs on (ASan's annotations)
    std::vector<Stack*> own_;            // the stacks the starter is armed with, in turn: [0, b_.arms) this block's
    std::vector<void*> tops_;            // where the starter's code enters on each (b_.tops)
    unsigned int shaped_n_ = 0, shaped_x_ = 0, shaped_y_ = 0;  // the launch shape the records were written for
    const kd_host_warp* shaped_warps_ = nullptr;
    std::vector<unsigned int> masks_;    // the mask each thread waiting for its turn at a collective has
    std::vector<kd_host_warp> warps_;
    std::vector<kd_host_fiber*> ring_a_, ring_b_;
    unsigned int gen_ = 0;
    int count_[2] = {0, 0};
    Stack* starter_stack_ = nullptr;  // the armed starter's
    kd_host_context main_ = {nullptr, nullptr, nullptr};  // the OS thread's context, which runs the block
    bool active_ = false;
    int code_ = 0;
    void* fake_stack_ = nullptr;  // ASan's, while switched away
    const void* main_bottom_ = nullptr;
    size_t main_size_ = 0;
    bool from_main_ = false;
    unsigned int checks_ = 0;
    unsigned long long seed_ = 0, rng_ = 0;
    std::vector<unsigned int> order_;        // a seeded schedule: the order threads start in
    std::vector<unsigned int> warp_epochs_;  // collectives each warp completed in this block
};

// ---------------------------------------------------------------------------------------------
// Thread block clusters. Rule: a cluster's blocks run at once, one on each OS thread of a team;
// the team meets at a barrier before each cluster's blocks start (every block's shared memory is
// known) and after they finish (none is reused while another block may still read it), and at
// each cluster barrier of the kernel. A member waits with a short spin, then yields; it gives up
// when the grid has failed, so a failed block never leaves the others waiting.
void pause_briefly() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct Team {
    unsigned int size = 0;
    std::atomic<unsigned int> arrived{0}, gen{0};
    struct Member {
        std::atomic<char*> tls_anchor{nullptr}, dynamic_shared{nullptr};
    } members[kMaxClusterBlocks];

    // Every member arrives; false when the grid failed while waiting.
    bool meet(const std::atomic<int>& failed) {
        const unsigned int g = gen.load(std::memory_order_acquire);
        if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == size) {
            arrived.store(0, std::memory_order_relaxed);
            gen.store(g + 1, std::memory_order_release);
            return true;
        }
        for (unsigned int spins = 0; gen.load(std::memory_order_acquire) == g; ++spins) {
            if (failed.load(std::memory_order_relaxed)) return false;
            if (spins < 256) pause_briefly();
            else sched_yield();
        }
        return true;
    }
};

// ---------------------------------------------------------------------------------------------
// Checked execution's state (the checks themselves are further down). Rule: a launch's shadow
// memory records, per 4-byte granule of a tracked range, the last write and the last read: which
// block (with the launch) and thread, at which barrier epoch and warp epoch, which bytes, and where
// (the access's return address, mapped to file:line from the module's line table by the Python
// side). Tracked ranges: the module's __shared__ variables (its thread-local block on this OS
// thread), the dynamic shared buffer, and the array parameters the kernel registers. An array's
// records also say which OS thread made them and how many fences it had passed then (a block's
// writes are published to other blocks by a __threadfence after them), and whether they were
// volatile (strong accesses, which never race with each other's blocks).
enum { kCheckRaces = 2, kCheckInit = 4, kCheckSync = 8 };  // KD_CHECKS's bits the runtime reads
enum { kVolatileWrite = 1, kVolatileRead = 2 };             // Cell::flags
struct Cell {
    uint32_t wtag, wsite, rtag, rsite;  // (launch, block) and (epoch, warp epoch, thread) of the last write and read
    uint8_t wmask, imask, rmask;  // the bytes of the granule the last writer wrote, any thread wrote, the last reader read
    uint8_t wworker, wfence, rworker, rfence, flags;  // the last writer's and reader's OS thread and fence count; kVolatile*
    uint32_t wpc, rpc;  // the last writer's and reader's code address in the running module (code_offset)
};
static_assert(sizeof(Cell) == 32, "a shadow cell stays 32 bytes (two a cache line)");
// A block's fences, counted per OS thread that runs blocks (the low 8 bits are kept in a record).
constexpr unsigned int kWorkers = 256;
std::atomic<uint32_t> worker_fences[kWorkers];
unsigned int next_worker() {
    static std::atomic<unsigned int> workers{0};
    return workers.fetch_add(1, std::memory_order_relaxed) % kWorkers;
}
inline bool published(uint8_t worker, uint8_t fence) {
    return (uint8_t)worker_fences[worker].load(std::memory_order_relaxed) != fence;
}
// A record's code address is kept as its offset into the running module plus one (0: none, or
// outside the module): a launch's records are only ever compared with the same launch's, whose
// accesses all come from one module.
inline uint32_t code_offset(uintptr_t module_base, const void* pc) {
    const uintptr_t offset = (uintptr_t)pc - module_base;
    return pc != nullptr && offset < 0xffffffffu ? (uint32_t)offset + 1u : 0u;
}
inline const void* code_at(uintptr_t module_base, uint32_t offset) {
    return offset ? (const void*)(module_base + offset - 1u) : nullptr;
}
// An array's records are read and written by the OS threads running its blocks at once: a record
// another block of the launch holds is read and updated under one of these locks, so a check
// across blocks does not see half of one (a record only this block touched needs none). A lock covers
// 16 neighbouring granules (64 bytes of the array, what one thread's neighbours touch) and has its
// own cache line (two OS threads on different blocks do not share one).
struct alignas(64) CellLockWord {
    std::atomic_flag flag = ATOMIC_FLAG_INIT;
};
CellLockWord cell_locks[1024];
struct CellLock {
    std::atomic_flag& flag;
    explicit CellLock(uintptr_t granule) : flag(cell_locks[granule / 16 % 1024].flag) {
        while (flag.test_and_set(std::memory_order_acquire)) pause_briefly();
    }
    ~CellLock() { flag.clear(std::memory_order_release); }
};
// A buffer made by empty() in a session with the init check: which of its bytes anything (a
// kernel's store, a copy, a fill) has written since. Reads of the rest are reported.
struct Fresh {
    uintptr_t base;
    size_t size;
    std::unique_ptr<std::atomic<uint8_t>[]> written;  // a bit per byte
    std::atomic<size_t> unwritten;
    Fresh(uintptr_t b, size_t n) : base(b), size(n), written(new std::atomic<uint8_t>[(n + 7) / 8]()), unwritten(n) {}
};
typedef std::vector<std::shared_ptr<Fresh>> FreshList;  // by base address
struct FreshRegistry {
    std::mutex lock;
    FreshList all;
    std::shared_ptr<const FreshList> open = std::make_shared<const FreshList>();  // those not yet written whole
    std::atomic<bool> stale{false};  // one was written whole since `open` was made
    void refresh() {  // (lock held)
        auto next = std::make_shared<FreshList>();
        for (const std::shared_ptr<Fresh>& f : all)
            if (f->unwritten.load(std::memory_order_relaxed)) next->push_back(f);
        open = next;
        stale.store(false, std::memory_order_relaxed);
    }
};
FreshRegistry& fresh_registry() {
    static FreshRegistry* registry = new FreshRegistry;  // never destroyed: launches may outlive exit
    return *registry;
}
// Marks [offset, offset + n) of `f` written; the buffer leaves the open list once written whole.
void mark_written(Fresh& f, size_t offset, size_t n) {
    size_t fresh_bits = 0;
    for (size_t b = offset, end = offset + n; b < end;) {
        const size_t byte = b >> 3, lo = b & 7, hi = end - (b - lo) < 8 ? end - (b - lo) : 8;
        const uint8_t mask = (uint8_t)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
        std::atomic<uint8_t>& cell = f.written[byte];
        if ((cell.load(std::memory_order_relaxed) & mask) != mask)
            fresh_bits += (size_t)__builtin_popcount(mask & ~cell.fetch_or(mask, std::memory_order_relaxed));
        b = (b - lo) + 8;
    }
    if (fresh_bits && f.unwritten.fetch_sub(fresh_bits, std::memory_order_relaxed) == fresh_bits)
        fresh_registry().stale.store(true, std::memory_order_relaxed);
}
// The first byte of [offset, offset + n) of `f` nothing wrote, or n when all were.
size_t first_unwritten(const Fresh& f, size_t offset, size_t n) {
    for (size_t b = offset; b < offset + n; ++b)
        if (!(f.written[b >> 3].load(std::memory_order_relaxed) & (1u << (b & 7)))) return b - offset;
    return n;
}
enum { kStaticShared, kDynamicShared, kGlobal };
struct Range {
    uintptr_t base, size;
    Cell* shadow;
    const char* name;  // a global array's parameter name
    unsigned int elem;  // its element size
    unsigned char kind;
};
size_t shadow_bytes(size_t size) { return (size + 3) / 4 * sizeof(Cell); }
struct ArrayRegistry {  // a grid's registered arrays: every OS thread of the grid shares their shadows
    std::mutex lock;
    std::vector<Range> arrays;
    ~ArrayRegistry();  // gives the shadows back to the cache
};
// Arrays' shadows outlive launches (a launch's records carry its id, so older ones never match):
// the next launch over the same array pays no page faults. A shadow is cleared when its records
// could be mistaken for the current launch's (the id's 12 bits wrapped since its last use), and all
// not in use by a running launch are dropped when all hold more than kShadowCacheBytes. An array whose shadow would exceed
// kArrayShadowBytes (eight times its size) is not tracked: its races go unchecked, its bounds not.
constexpr size_t kShadowCacheBytes = size_t(1) << 30;
constexpr size_t kArrayShadowBytes = size_t(256) << 20;
class ShadowCache {
public:
    static ShadowCache& get() {
        static ShadowCache* cache = new ShadowCache;  // never destroyed: launches may outlive exit
        return *cache;
    }
    // The shadow of the array at `base` for a launch, which gives it back (release) when it ends.
    Cell* shadow(uintptr_t base, size_t size, unsigned int launch) {
        std::lock_guard<std::mutex> hold(lock_);
        for (Entry& e : entries_) {
            if (e.base == base && e.size >= size && (e.users == 0 || e.launch == launch)) {
                if (launch - e.launch >= 0x1000u) madvise(e.shadow, shadow_bytes(e.size), MADV_DONTNEED);  // zeroed
                e.launch = launch;
                ++e.users;
                return e.shadow;
            }
        }
        if (bytes_ + shadow_bytes(size) > kShadowCacheBytes) {
            size_t kept = 0;
            for (const Entry& e : entries_) {
                if (e.users) {
                    entries_[kept++] = e;
                } else {
                    munmap(e.shadow, shadow_bytes(e.size));
                    bytes_ -= shadow_bytes(e.size);
                }
            }
            entries_.resize(kept);
        }
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
        flags |= MAP_NORESERVE;
#endif
        void* p = mmap(nullptr, shadow_bytes(size), PROT_READ | PROT_WRITE, flags, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        entries_.push_back(Entry{base, size, static_cast<Cell*>(p), launch, 1});
        bytes_ += shadow_bytes(size);
        return static_cast<Cell*>(p);
    }
    void release(const Cell* shadow) {
        std::lock_guard<std::mutex> hold(lock_);
        for (Entry& e : entries_)
            if (e.shadow == shadow && e.users) --e.users;
    }

private:
    struct Entry {
        uintptr_t base;
        size_t size;
        Cell* shadow;
        unsigned int launch, users;  // the last launch that used it; the launches using it now
    };
    std::mutex lock_;
    std::vector<Entry> entries_;
    size_t bytes_ = 0;
};
ArrayRegistry::~ArrayRegistry() {
    for (const Range& r : arrays) ShadowCache::get().release(r.shadow);
}
struct CheckState {
    bool active = false;  // races or init: accesses are checked
    unsigned int bits = 0, launch = 0;
    std::vector<Range> ranges;  // an access is checked against the first that holds it (add_range)
    bool overlapping = false;   // two of them overlap (aliased array parameters): find_range takes no guess
    // The range each access site (its code address, hashed) hit last: a site reads one array, and a
    // kernel's sites alternate between arrays. A stale entry is harmless: ranges that do not overlap
    // hold an address in one of them only.
    struct SiteRange {
        const void* pc;
        unsigned int range;
    };
    SiteRange site_ranges[64] = {};
    ArrayRegistry* registry = nullptr;
    std::vector<Cell> static_shadow, dynamic_shadow;
    const char* tls_anchor = nullptr;  // the last module's thread-locals on this OS thread: where they start and end
    char* tls = nullptr;
    size_t tls_size = 0;
    uintptr_t module_base = 0;
    std::vector<std::pair<size_t, size_t>> ignored;  // [offset, end) of the module's thread-locals that are not shared memory
    std::vector<unsigned int> order;  // loop mode's seeded order of a block's threads
    std::shared_ptr<const FreshList> fresh;  // the init check's fresh buffers not yet written whole (null: none)
    unsigned int worker = next_worker();     // this OS thread's fence counter
};

// ---------------------------------------------------------------------------------------------
// What each OS thread that runs blocks keeps. Rule: created on first use, destroyed at the
// thread's exit (its stacks go to the spare list, its dynamic shared memory is unmapped).
struct ThreadContext {
    ThreadContext() : scheduler(this) {
        pthread_attr_t attributes;
        if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
            void* low = nullptr;
            size_t size = 0;
            if (pthread_attr_getstack(&attributes, &low, &size) == 0) os_stack_low = reinterpret_cast<uintptr_t>(low);
            pthread_attr_destroy(&attributes);
        }
        // An alternate signal stack, unless the thread has one (Python's faulthandler gives one).
        stack_t current;
        if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
        void* stack = mmap(nullptr, kSignalStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) return;
        stack_t alternate = {};
        alternate.ss_sp = stack;
        alternate.ss_size = kSignalStackBytes;
        if (sigaltstack(&alternate, nullptr) == 0) signal_stack = stack;
        else munmap(stack, kSignalStackBytes);
    }
    ~ThreadContext() {
        scheduler.disarm();  // (before the pool gives its stacks to the spare list)
        if (dynamic_shared) munmap(dynamic_shared, kDynamicSharedBytes);
        if (signal_stack) {
            stack_t off = {};
            off.ss_flags = SS_DISABLE;
            sigaltstack(&off, nullptr);
            munmap(signal_stack, kSignalStackBytes);
        }
    }
    Scheduler scheduler;
    StackPool stacks;
    std::jmp_buf* landing = nullptr;            // where a loop-mode failure returns to
    const kd_host_function* function = nullptr;  // the kernel running, for messages
    const std::atomic<int>* abandoned = nullptr;  // set when another block of the grid failed
    int code = 0;                                // this thread's failure
    std::string error;
    std::string last_error;  // the last failed launch's message, for kd_host_last_error
    void* dynamic_shared = nullptr;
    void* signal_stack = nullptr;  // the alternate signal stack this thread was given, if any
    uintptr_t os_stack_low = 0;    // the lowest address of the OS thread's own stack (0: unknown)
    struct Team* team = nullptr;  // a cluster launch: this thread's cluster team, its rank,
    unsigned int rank = 0;
    void* tls_anchor = nullptr;   // and where the running module's thread-locals start here
    bool split = false;           // a split block runs here (kd_host.h "Split blocks")
    CheckState check;             // checked execution (a checked module's launch)
};

thread_local ThreadContext* tls_context KD_TLS = nullptr;
thread_local std::unique_ptr<ThreadContext> tls_owner;

__attribute__((noinline)) ThreadContext* make_context() {
    tls_owner.reset(new ThreadContext);
    tls_context = tls_owner.get();
    return tls_context;
}
inline ThreadContext& context() {
    ThreadContext* c = tls_context;
    return __builtin_expect(c != nullptr, 1) ? *c : *make_context();
}

std::string block_name(const kd_host_index* ix) {
    return format("block (%u,%u,%u)", ix->block.x, ix->block.y, ix->block.z);
}
const char* kernel_name(const ThreadContext& c) { return c.function ? c.function->name : "?"; }

// A block arms the starter with its stacks in turn, never one twice: the stack of a thread that
// finished is not needed again, so nothing goes back to the pool until the OS thread exits. (A
// thread runs on the stack the starter had when it started, or when the thread it follows did:
// each armed stack carries one chain of threads, which ends when a thread of it waits.)
inline bool Scheduler::arm() {
    if (__builtin_expect(b_.arms == own_.size(), 0)) {
        Stack* fresh = owner_->stacks.get();
        if (fresh == nullptr) return false;
        own_.push_back(fresh);
        tops_.push_back(fresh->top - kEntrySlot);
        b_.tops = tops_.data();
        b_.ntops = (unsigned int)tops_.size();
    }
    starter_stack_ = own_[b_.arms];
    b_.start = kd_host_context{tops_[b_.arms++], starter_, nullptr};
    return true;
}

void Scheduler::disarm() {
    for (Stack* stack : own_) owner_->stacks.put(stack);
    own_.clear();
    tops_.clear();
    b_.tops = nullptr;
    b_.arms = b_.ntops = 0;
    starter_stack_ = nullptr;
    b_.start = kd_host_context{nullptr, nullptr, nullptr};
}

// The starter's code, on the stack it was armed with: starts the block's next thread there, and
// the next after it whenever one finishes without waiting; arms the starter again (another stack)
// for the thread after that.
void fiber_start() {
    Scheduler* s = &tls_context->scheduler;
    s->arrive();
    Stack* const stack = s->starter_stack_;
    s->b_.start.pc = nullptr;
    for (;;) {
        const unsigned int k = s->b_.next_start++;
        const unsigned int linear = s->seed_ ? s->order_[k] : k;
        kd_host_fiber* f = &s->b_.fibers[linear];
        s->stacks_[linear] = stack;
        if (s->b_.start.pc == nullptr && s->b_.next_start < s->b_.n) s->arm();  // (none: start_next reports it)
        s->select(f);
        s->entry_(s->b_.args);
        s->finish(f);
    }
}

int Scheduler::run_block() {
    b_.head = b_.tail = b_.arrived = 0;
    b_.next = nullptr;
    b_.ring = ring_a_.data();
    b_.ring[0] = nullptr;
    b_.waiters = ring_b_.data();
    b_.next_start = gen_ = 0;
    count_[0] = count_[1] = 0;
    code_ = 0;
    for (unsigned int w = 0; w < nwarps_; ++w) warps_[w].exited = warps_[w].arrived = warps_[w].pending = 0;
    if (checks_ | seed_) {
        for (unsigned int w = 0; w < nwarps_ && w < warp_epochs_.size(); ++w) warp_epochs_[w] = 0;
        if (seed_) {
            const uint3 bk = ix_->block;
            rng_ = seed_ * 0x9e3779b97f4a7c15ull ^ (bk.x + 0x10000ull * (bk.y + 0x10000ull * bk.z));
            order_.resize(b_.n);
            for (unsigned int i = 0; i < b_.n; ++i) order_[i] = i;
            shuffle_order(order_.data(), b_.n);
        }
    }
    b_.arms = 0;
    if (!arm()) {
        owner_->error = format("kernel '%s' %s: out of memory for fiber stacks", kernel_name(*owner_), block_name(ix_).c_str());
        return kLaunchFailed;
    }
    active_ = true;
    from_main_ = true;
    leave(starter_stack_, false);
    switch_to(&main_, &b_.start);
    arrive();
    active_ = false;
    if (code_ && __asan_unpoison_memory_region) {  // abandoned threads' frames keep their redzones
        for (unsigned int i = 0; i < b_.arms; ++i) __asan_unpoison_memory_region(own_[i]->low, own_[i]->top - own_[i]->low);
    }
    return code_;
}

void Scheduler::fail(int code) {
    code_ = code;
    leave(nullptr, true);
    jump_to(&main_);
}

void Scheduler::cluster_barrier() {
    if (owner_->team && !owner_->team->meet(*owner_->abandoned)) {
        owner_->error = "abandoned at a cluster barrier: another block of the grid failed";
        fail(kLaunchFailed);
    }
}

// Two 64-bit lanes at once (SSE2 and NEON registers; plain code elsewhere): the per-warp loops
// of a completed collective run once for every 32 threads' shuffles.
typedef unsigned long long Pair __attribute__((vector_size(16)));
inline Pair load_pair(const void* at) {
    Pair v;
    std::memcpy(&v, at, sizeof v);
    return v;
}

// Every lane's shuffle result, for one mode (the switch hoisted out of the lanes' loop). The usual
// shuffle, a whole warp's with the same operands, is a plain loop over the lanes.
template <unsigned int Mode> void shuffle_all(kd_host_warp& w, unsigned int m) {
    const unsigned long long same = w.operands[0];
    const Pair both = {same, same};
    Pair differ = {0, 0};
    for (unsigned int l = 0; l < 32; l += 2) differ |= load_pair(&w.operands[l]) ^ both;
    if (m == 0xffffffffu && (differ[0] | differ[1]) == 0) {  // (every source lane is in the collective)
        const unsigned int b = (unsigned int)same, c = (unsigned int)(same >> 40);
        // Width 32: two block copies (memmove: the C library's, which beats an inlined `rep movs`
        // at these sizes).
        if (Mode == KD_HOST_SHFL_DOWN && c == 0x1fu && b < 32) {
            std::memmove(w.out, w.in + b, (32 - b) * sizeof *w.in);
            std::memmove(w.out + (32 - b), w.in + (32 - b), b * sizeof *w.in);
        } else if (Mode == KD_HOST_SHFL_UP && c == 0 && b < 32) {
            std::memmove(w.out + b, w.in, (32 - b) * sizeof *w.in);
            std::memmove(w.out, w.in, b * sizeof *w.in);
        } else {
            for (unsigned int l = 0; l < 32; ++l) w.out[l] = w.in[shuffle_source(Mode, l, b, c)];
        }
        return;
    }
    for (unsigned int bits = m; bits; bits &= bits - 1) {
        const unsigned int l = (unsigned int)__builtin_ctz(bits);
        const unsigned long long operands = w.operands[l];
        unsigned int j = shuffle_source(Mode, l, (unsigned int)operands, (unsigned int)(operands >> 40));
        if (!((m >> j) & 1u)) j = l;  // a lane outside the collective: the caller's own value
        w.out[l] = w.in[j];
    }
}

// Every lane's result of the warp collective `w` holds (its lanes `w.mask`, operation `w.op`).
void warp_results(kd_host_warp& w) {
    const unsigned int m = w.mask, op = w.op;
    if (op == KD_HOST_SHFL_IDX) {
        shuffle_all<KD_HOST_SHFL_IDX>(w, m);
    } else if (op == KD_HOST_SHFL_UP) {
        shuffle_all<KD_HOST_SHFL_UP>(w, m);
    } else if (op == KD_HOST_SHFL_DOWN) {
        shuffle_all<KD_HOST_SHFL_DOWN>(w, m);
    } else if (op == KD_HOST_SHFL_BFLY) {
        shuffle_all<KD_HOST_SHFL_BFLY>(w, m);
    } else if (op != KD_HOST_WARP_SYNC) {
        unsigned int ballot = 0, reduced = 0;
        bool same = true;
        const unsigned int lead = (unsigned int)__builtin_ctz(m);
        switch (op) {
        case KD_HOST_REDUCE_MIN_U: case KD_HOST_REDUCE_AND: reduced = ~0u; break;
        case KD_HOST_REDUCE_MIN_S: reduced = 0x7fffffffu; break;
        case KD_HOST_REDUCE_MAX_S: reduced = 0x80000000u; break;
        default: break;
        }
        for (unsigned int bits = m; bits; bits &= bits - 1) {
            const unsigned int l = (unsigned int)__builtin_ctz(bits);
            const unsigned int v = (unsigned int)w.in[l].lo;
            ballot |= (w.in[l].lo != 0) << l;
            same = same && w.in[l].lo == w.in[lead].lo;
            switch (op) {
            case KD_HOST_REDUCE_ADD: reduced += v; break;
            case KD_HOST_REDUCE_MIN_U: reduced = v < reduced ? v : reduced; break;
            case KD_HOST_REDUCE_MAX_U: reduced = v > reduced ? v : reduced; break;
            case KD_HOST_REDUCE_MIN_S: reduced = (int)v < (int)reduced ? v : reduced; break;
            case KD_HOST_REDUCE_MAX_S: reduced = (int)v > (int)reduced ? v : reduced; break;
            case KD_HOST_REDUCE_AND: reduced &= v; break;
            case KD_HOST_REDUCE_OR: reduced |= v; break;
            case KD_HOST_REDUCE_XOR: reduced ^= v; break;
            default: break;
            }
        }
        switch (op) {
        case KD_HOST_VOTE_ANY: reduced = ballot != 0; break;
        case KD_HOST_VOTE_ALL: reduced = ballot == m; break;
        case KD_HOST_VOTE_UNI: reduced = ballot == 0 || ballot == m; break;
        case KD_HOST_VOTE_BALLOT: reduced = ballot; break;
        case KD_HOST_MATCH_ALL: reduced = same ? m : 0u; break;
        default: break;
        }
        for (unsigned int bits = m; bits; bits &= bits - 1) {
            const unsigned int l = (unsigned int)__builtin_ctz(bits);
            unsigned int r = reduced;
            if (op == KD_HOST_MATCH_ANY) {
                r = 0;
                for (unsigned int other = m; other; other &= other - 1) {
                    const unsigned int k = (unsigned int)__builtin_ctz(other);
                    r |= (unsigned int)(w.in[k].lo == w.in[l].lo) << k;
                }
            }
            w.out[l].lo = r;
            w.out[l].hi = 0;
        }
    }
}

void Scheduler::complete(kd_host_warp& w, unsigned int first, unsigned int self) {
    if (checks_) ++warp_epochs_[first >> 5];
    warp_results(w);
    const unsigned int wake = (w.arrived & ~(1u << self)) | w.pending;  // in lane order
    w.arrived = 0;
    w.pending = 0;
    if (wake == 0) return;
    kd_host_fiber* const lanes = b_.fibers + first;
    if (b_.head == b_.tail) b_.next = lanes + __builtin_ctz(wake);
    unsigned int tail = b_.tail;
    if (wake == ~(1u << self) && (tail & b_.ring_mask) + 31 <= b_.ring_mask) {  // the usual: a whole warp's other lanes
        // All 32 lanes two at a time, then the lanes after `self` a place down (none when the last
        // lane completes); the 32nd entry lies past the ring's tail.
        kd_host_fiber** const at = b_.ring + (tail & b_.ring_mask);
        static_assert(sizeof(kd_host_fiber*) == sizeof(unsigned long long), "a ring entry is one 64-bit lane");
        const unsigned long long base = reinterpret_cast<uintptr_t>(lanes);
        Pair entries = {base, base + sizeof(kd_host_fiber)};
        const Pair step = {2 * sizeof(kd_host_fiber), 2 * sizeof(kd_host_fiber)};
        for (unsigned int l = 0; l < 32; l += 2, entries += step) std::memcpy(at + l, &entries, sizeof entries);
        for (unsigned int l = self + 1; l < 32; ++l) at[l - 1] = lanes + l;
        tail += 31;
    } else {
        for (unsigned int bits = wake; bits; bits &= bits - 1) b_.ring[tail++ & b_.ring_mask] = lanes + __builtin_ctz(bits);
    }
    b_.ring[tail & b_.ring_mask] = nullptr;
    b_.tail = tail;
}

// Where a waiting thread waits: the kind of wait, the barrier's mode, and the call's file and line.
struct Waiting {
    unsigned int wait, op;
    const char* file;
    int line;
};
// A thread that waited inline switched away from a site its module recorded (kd_host_site): its
// resume address is looked up in the module's kd_host_sites_v1. One that waited in the runtime
// (or in a module that records no sites) has its record written (wait_at, or the shim's stores).
Waiting waiting_at(const kd_host_fiber& f) {
    Dl_info info;
    if (f.context.pc != nullptr && dladdr(f.context.pc, &info) != 0 && info.dli_fname != nullptr) {
        if (void* module = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
            const auto* sites = static_cast<const kd_host_site* const*>(dlsym(module, "kd_host_sites_v1"));
            dlclose(module);
            for (const kd_host_site* at = sites ? sites[0] : nullptr; at && at < sites[1]; ++at)
                if (at->resume == f.context.pc) return Waiting{at->wait, 0, at->file, at->line};
        }
    }
    return Waiting{f.wait, f.op, f.file, f.line};
}

// "__syncthreads at f.body:5" / "__shfl_down_sync (mask 0xffffffff) at f.body:9"; a thread at its
// warp's collective in flight has that collective's operation and mask.
std::string site(const kd_host_fiber& f, const kd_host_warp& w, unsigned int pending_mask) {
    const Waiting at = waiting_at(f);
    const bool block = at.wait == KD_HOST_WAIT_BARRIER, in_flight = at.wait == KD_HOST_WAIT_WARP;
    const unsigned int op = in_flight ? w.op : at.op, mask = in_flight ? w.mask : pending_mask;
    const char* name = block ? kBarrierNames[at.op <= kClusterBarrier ? at.op : 0] : warp_name(op);
    std::string s = block ? std::string(name) : format("%s (mask 0x%08x)", name, mask);
    s += format(" at %s:%d", at.file ? at.file : "?", at.line);
    if (at.wait == KD_HOST_WAIT_PENDING) s += ", waiting for its warp's collective over other lanes";
    return s;
}

std::string Scheduler::where() const {
    std::string s = format("kernel '%s' %s", kernel_name(*owner_), block_name(ix_).c_str());
    if (by_ > 1 || b_.n > bx_) s += format(" (threads by linear id x + %u * (y + %u * z))", bx_, by_);
    return s;
}

void Scheduler::deadlock() {
    // Group the started threads by where they wait, and name the others as exited (a module
    // without warp collectives records no exits: a thread exited when it waits nowhere).
    enum : unsigned char { kExited, kAtBarrier, kAtWarp };
    std::vector<unsigned char> state(b_.n, kExited);
    for (unsigned int i = 0; i < b_.arrived; ++i) state[b_.waiters[i]->linear] = kAtBarrier;
    for (unsigned int w = 0; w < nwarps_; ++w)
        for (unsigned int bits = warps_[w].arrived | warps_[w].pending; bits; bits &= bits - 1)
            state[32 * w + (unsigned int)__builtin_ctz(bits)] = kAtWarp;
    std::vector<unsigned int> started(b_.next_start);
    for (unsigned int k = 0; k < b_.next_start; ++k) started[k] = seed_ ? order_[k] : k;
    std::sort(started.begin(), started.end());
    WaitGroups groups;
    std::vector<unsigned int> exited;
    bool barrier_only = true;
    for (unsigned int i : started) {
        if (state[i] == kExited) {
            exited.push_back(i);
            continue;
        }
        barrier_only = barrier_only && state[i] == kAtBarrier;
        group_waiting(groups, site(b_.fibers[i], b_.warps[i >> 5], masks_[i]), i);
    }
    owner_->error = sync_tag() + where() + no_progress(groups, barrier_only, exited);
    fail(kLaunchFailed);
}

void Scheduler::exited_in_collective(kd_host_fiber* f, const kd_host_warp& w) {
    std::vector<unsigned int> waiting;
    for (unsigned int bits = w.arrived; bits; bits &= bits - 1)
        waiting.push_back((f->linear & ~31u) + (unsigned int)__builtin_ctz(bits));
    const kd_host_fiber& first = b_.fibers[waiting.front()];
    owner_->error = sync_tag() + format("%s: thread %u exited while threads %s wait for it at %s", where().c_str(), f->linear,
                           ranges(waiting).c_str(), site(first, w, masks_[first.linear]).c_str());
    fail(kLaunchFailed);
}

void Scheduler::collective_error(kd_host_fiber* f, unsigned int op, unsigned int mask, const char* file, int line,
                                 const char* why) {
    const kd_host_warp& w = b_.warps[f->linear >> 5];
    std::string detail = why;
    if (!(mask & w.existing & (1u << (f->linear & 31u)))) detail += format(" (lane %u)", f->linear & 31u);
    else if (mask & w.existing & w.exited) detail = format("lanes 0x%08x named in the mask have exited", mask & w.existing & w.exited);
    else if (w.arrived) detail = format("lanes 0x%08x of its warp are at %s instead", w.arrived, warp_name(w.op));
    owner_->error = sync_tag() + format("%s thread %u: %s (mask 0x%08x) at %s:%d: %s", where().c_str(), f->linear, warp_name(op),
                           mask, file ? file : "?", line, detail.c_str());
    fail(kLaunchFailed);
}

void Scheduler::out_of_stacks() {
    owner_->error = format("kernel '%s' %s: out of memory for the stacks of its %u threads", kernel_name(*owner_),
                           block_name(ix_).c_str(), b_.n);
    fail(kLaunchFailed);
}

// ---------------------------------------------------------------------------------------------
// A grid: its blocks in chunks over the participating OS threads. Rule: the first failure wins
// and stops the others taking chunks; a chunk runs under a setjmp landing for loop-mode failures.
struct Grid {
    const kd_host_function* function;
    LaunchDims launch;
    void** params;
    unsigned long long total, chunk;
    alignas(64) std::atomic<unsigned long long> next{0};
    std::atomic<int> failed{0};
    std::mutex lock;
    int code = 0;
    std::string error;
    unsigned int id = next_launch_id();  // tells one launch's shadow records from another's
    ArrayRegistry arrays;                 // a checked launch's registered arrays

    static unsigned int next_launch_id() {
        static std::atomic<unsigned int> ids{0};
        unsigned int id = ids.fetch_add(1, std::memory_order_relaxed) + 1;
        return (id & 0xfffu) ? id : ids.fetch_add(1, std::memory_order_relaxed) + 1;  // a zero tag is "never"
    }

    void record(int rc, const std::string& message) {
        std::lock_guard<std::mutex> hold(lock);
        if (!code) {
            code = rc;
            error = message;
        }
        failed.store(1, std::memory_order_relaxed);
    }
};

__attribute__((noinline)) int run_range(ThreadContext& c, Grid& grid, unsigned long long first, unsigned long long end) {
    std::jmp_buf landing;
    c.landing = &landing;
    c.code = 0;
    c.check.launch = grid.id;
    c.check.registry = &grid.arrays;
    int rc;
    if (setjmp(landing) == 0) rc = grid.function->run_blocks(&grid.launch, grid.params, first, end);
    else rc = c.code;
    c.landing = nullptr;
    c.split = false;
    c.check.active = false;  // a checked module turns checking on for its blocks only
    c.check.bits = 0;
    c.scheduler.set_checks(0, 0);
    return rc;
}

// Runs chunks of the grid's blocks until none is left; returns how many blocks this thread ran.
unsigned long long run_chunks(Grid& grid) {
    ThreadContext& c = context();
    c.function = grid.function;
    c.abandoned = &grid.failed;
    unsigned long long ran = 0;
    while (!grid.failed.load(std::memory_order_relaxed)) {
        const unsigned long long first = grid.next.fetch_add(grid.chunk, std::memory_order_relaxed);
        if (first >= grid.total) break;
        const unsigned long long end = first + grid.chunk < grid.total ? first + grid.chunk : grid.total;
        const int rc = run_range(c, grid, first, end);
        if (rc) {
            grid.record(rc, c.error);
            break;
        }
        ran += end - first;
    }
    c.function = nullptr;
    c.abandoned = nullptr;
    return ran;
}

// What a block of a kernel cost when the launching thread last ran some, per launching thread
// (direct-mapped by the kernel's descriptor; a collision only costs a launch's guess). Rule: a
// grid whose blocks, at that cost, take less than kInlineGridNs in all runs on the launching
// thread alone, as waking the pool's helpers costs about as much as such a grid; the first launch
// of a kernel, and every larger one, uses the pool. `kerneldsl bench cpu --only sweep` checks it
// (its small sizes).
constexpr double kInlineGridNs = 20000.0;
struct BlockCost {
    const kd_host_function* function = nullptr;
    double ns = 0.0;
};
thread_local BlockCost block_costs[64];

BlockCost& block_cost(const kd_host_function* f) {
    return block_costs[(reinterpret_cast<uintptr_t>(f) >> 4) & 63u];
}

bool small_grid(const Grid& grid) {
    const BlockCost& cost = block_cost(grid.function);
    return cost.function == grid.function && cost.ns * (double)grid.total < kInlineGridNs;
}

// Runs chunks as run_chunks does and remembers what a block cost.
void run_chunks_timed(Grid& grid) {
    const auto start = std::chrono::steady_clock::now();
    const unsigned long long ran = run_chunks(grid);
    if (ran == 0) return;
    const double ns = (double)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    block_cost(grid.function) = BlockCost{grid.function, ns / (double)ran};
}

int online_cpus() {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    const unsigned int n = std::thread::hardware_concurrency();
    return n ? (int)n : 1;
}

// ---------------------------------------------------------------------------------------------
// The pool. Rule: one grid at a time shares it (a concurrent launch from another thread runs its
// grid on its own thread); helpers wait for the next grid (kSleepAfter) before sleeping, so launches in
// a row do not pay a wake-up; a helper joins a grid only while the launcher keeps it open, and
// the launcher returns once every helper that joined has left.
class Pool {
public:
    static Pool& get() { return *instance_; }
    static void after_fork() { instance_ = new Pool; }  // the child has none of the parent's threads

    void run(Grid& grid) {
        const int helpers = wanted_.load(std::memory_order_relaxed);
        const unsigned long long participants =
            grid.total < (unsigned long long)helpers + 1 ? grid.total : (unsigned long long)helpers + 1;
        grid.chunk = grid.total / (participants * 8);
        if (grid.chunk == 0) grid.chunk = 1;
        if (participants <= 1 || small_grid(grid) || !launch_.try_lock()) {
            run_chunks_timed(grid);
            return;
        }
        spawn(helpers);
        grid_ = &grid;
        const unsigned long long gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
        state_.store((gen << 32) | kOpen, std::memory_order_seq_cst);
        if (sleepers_.load(std::memory_order_seq_cst) > 0) {
            std::lock_guard<std::mutex> hold(lock_);
            wake_.notify_all();
        }
        run_chunks_timed(grid);
        state_.fetch_and(~kOpen, std::memory_order_acq_rel);
        for (unsigned int spins = 0; state_.load(std::memory_order_acquire) & kActive; ++spins) {
            if (spins < 2000) pause();
            else std::this_thread::yield();
        }
        launch_.unlock();
    }

    void set_workers(int count) {
        wanted_.store((count > 0 ? count : online_cpus()) - 1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> hold(lock_);
        wake_.notify_all();
    }
    int workers() const { return wanted_.load(std::memory_order_relaxed) + 1; }

private:
    static constexpr unsigned long long kOpen = 1ull << 31, kActive = kOpen - 1;
    // How long a helper waits for the next grid before it sleeps: it spins, then yields its core
    // between looks, as OpenMP runtimes do (GNU's spins about as long, LLVM's 200 ms). Waking a
    // sleeping helper costs more than a small grid (tens of microseconds in a VM), and a program
    // that launches in a loop does Python work between its launches (`kerneldsl bench cpu --only
    // sweep`, its small sizes, checks it).
    static constexpr std::chrono::microseconds kYieldAfter{50}, kSleepAfter{1000};

    Pool() : wanted_(online_cpus() - 1) {}

    static void pause() {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }

    void spawn(int helpers) {
        std::lock_guard<std::mutex> hold(lock_);
        for (; spawned_ < helpers; ++spawned_) {
            try {
                std::thread(&Pool::helper, this, spawned_).detach();
            } catch (...) {
                break;  // fewer helpers: the grid still runs
            }
        }
    }

    bool ready(unsigned long long s, unsigned long long seen, int id) const {
        return (s & kOpen) && (s >> 32) != seen && id < wanted_.load(std::memory_order_relaxed);
    }

    void helper(int id) {
        unsigned long long seen = state_.load(std::memory_order_relaxed) >> 32;
        for (;;) {
            unsigned long long s = state_.load(std::memory_order_acquire);
            const auto idle = std::chrono::steady_clock::now();
            for (unsigned int spins = 1; !ready(s, seen, id); ++spins) {
                if (spins % 64 != 0) {
                    pause();
                } else if (const auto waited = std::chrono::steady_clock::now() - idle; waited > kYieldAfter) {
                    if (waited > kSleepAfter) {
                        std::unique_lock<std::mutex> hold(lock_);
                        sleepers_.fetch_add(1, std::memory_order_seq_cst);
                        while (!ready(s = state_.load(std::memory_order_seq_cst), seen, id)) wake_.wait(hold);
                        sleepers_.fetch_sub(1, std::memory_order_relaxed);
                        break;
                    }
                    std::this_thread::yield();  // (a thread that has work on this core runs first)
                }
                s = state_.load(std::memory_order_acquire);
            }
            if (!state_.compare_exchange_strong(s, s + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) continue;
            seen = s >> 32;
            run_chunks(*grid_);
            state_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    static Pool* instance_;
    std::mutex lock_;
    std::condition_variable wake_;
    std::atomic<unsigned long long> state_{0};  // generation << 32 | open << 31 | helpers inside
    std::atomic<int> sleepers_{0};
    std::atomic<int> wanted_;
    int spawned_ = 0;
    Grid* grid_ = nullptr;
    std::mutex launch_;
};
Pool* Pool::instance_ = [] {
    pthread_atfork(nullptr, nullptr, [] { Pool::after_fork(); });
    return new Pool;
}();

// ---------------------------------------------------------------------------------------------
// Launch checks. Rule: CUDA's limits and cuLaunchKernel's error codes; the message says what.
int refuse(int code, const std::string& message) {
    context().last_error = message;
    return code;
}

const kd_host_function* descriptor(const void* function) {
    const kd_host_function* f = static_cast<const kd_host_function*>(function);
    if (f == nullptr || f->magic != kMagic || f->run_blocks == nullptr) return nullptr;
    return f;
}

int check(const kd_host_function* f, const unsigned int grid[3], const unsigned int block[3], unsigned int shared,
          void** params, void** extra) {
    if (f->abi != kAbi)
        return refuse(kInvalidValue, format("kernel '%s' was built for host ABI %u; this runtime speaks %u", f->name, f->abi, kAbi));
    if (!grid[0] || !grid[1] || !grid[2] || grid[0] > 0x7fffffffu || grid[1] > 65535u || grid[2] > 65535u)
        return refuse(kInvalidValue, format("kernel '%s': grid (%u,%u,%u) is outside CUDA's limits (1..2^31-1, 1..65535, 1..65535)",
                                            f->name, grid[0], grid[1], grid[2]));
    const unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (!threads || block[0] > 1024u || block[1] > 1024u || block[2] > 64u || threads > kMaxBlockThreads)
        return refuse(kInvalidValue, format("kernel '%s': block (%u,%u,%u) is outside CUDA's limits (at most 1024 threads; "
                                            "x, y <= 1024, z <= 64)", f->name, block[0], block[1], block[2]));
    if (shared > kDynamicSharedBytes)
        return refuse(kInvalidValue, format("kernel '%s': %u bytes of dynamic shared memory; the CPU device has %zu a block",
                                            f->name, shared, kDynamicSharedBytes));
    if (extra != nullptr && extra[0] != nullptr)
        return refuse(kInvalidValue, format("kernel '%s': parameters passed in `extra` (a packed buffer); the CPU device "
                                            "takes kernelParams", f->name));
    if (f->nparams && params == nullptr)
        return refuse(kInvalidValue, format("kernel '%s' takes %u parameters and kernelParams is NULL", f->name, f->nparams));
    return 0;
}

int finish_launch(Grid& grid) {
    std::fflush(stdout);  // kernels' printf, before the caller reads anything
    if (grid.code) context().last_error = grid.error;
    return grid.code;
}

// Cooperative grids: every block on its own OS thread, all started before any runs, so a grid
// barrier made of atomics and spin-waits makes progress.
int run_cooperative(Grid& grid) {
    if (grid.total > kMaxCooperativeBlocks)
        return refuse(kNotSupported, format("kernel '%s': a cooperative launch of %llu blocks; the CPU device runs each block "
                                            "of a cooperative grid on its own OS thread, at most %llu", grid.function->name,
                                            grid.total, kMaxCooperativeBlocks));
    grid.chunk = 1;
    std::mutex gate;
    std::condition_variable opened;
    int state = 0;  // 1: run, -1: give up (not every thread could start)
    std::vector<std::thread> threads;
    threads.reserve((size_t)grid.total - 1);
    for (unsigned long long b = 1; b < grid.total; ++b) {
        try {
            threads.emplace_back([&grid, &gate, &opened, &state] {
                {
                    std::unique_lock<std::mutex> hold(gate);
                    opened.wait(hold, [&state] { return state != 0; });
                    if (state < 0) return;
                }
                run_chunks(grid);
            });
        } catch (...) {
            break;
        }
    }
    const bool all = threads.size() + 1 == grid.total;
    {
        std::lock_guard<std::mutex> hold(gate);
        state = all ? 1 : -1;
    }
    opened.notify_all();
    if (all) run_chunks(grid);
    for (std::thread& t : threads) t.join();
    if (!all)
        return refuse(kNotSupported, format("kernel '%s': a cooperative launch of %llu blocks needs as many OS threads; "
                                            "only %zu could start", grid.function->name, grid.total, threads.size() + 1));
    return finish_launch(grid);
}

// Cluster grids: a team of as many OS threads as a cluster has blocks (the caller is rank 0) runs
// the clusters one after another, each member the block of its rank.
int run_clusters(Grid& grid) {
    const unsigned int* g = grid.launch.grid;
    const unsigned int* k = grid.launch.cluster;
    const unsigned int size = k[0] * k[1] * k[2];
    const unsigned long long clusters = grid.total / size;
    Team team;
    team.size = size;
    grid.chunk = 1;
    auto member = [&grid, &team, g, k, clusters](unsigned int rank) {
        ThreadContext& c = context();
        c.team = &team;
        c.rank = rank;
        const unsigned int rx = rank % k[0], ry = rank / k[0] % k[1], rz = rank / k[0] / k[1];
        const unsigned int ncx = g[0] / k[0], ncy = g[1] / k[1];
        c.function = grid.function;
        c.abandoned = &grid.failed;
        for (unsigned long long q = 0; q < clusters && !grid.failed.load(std::memory_order_relaxed); ++q) {
            const unsigned long long bx = q % ncx * k[0] + rx, by = q / ncx % ncy * k[1] + ry, bz = q / ncx / ncy * k[2] + rz;
            const unsigned long long b = bx + g[0] * (by + (unsigned long long)g[1] * bz);
            const int rc = run_range(c, grid, b, b + 1);
            if (rc) grid.record(rc, c.error);
        }
        c.team = nullptr;
        c.function = nullptr;
        c.abandoned = nullptr;
    };
    std::vector<std::thread> threads;
    try {
        for (unsigned int rank = 1; rank < size; ++rank) threads.emplace_back(member, rank);
    } catch (...) {
        grid.record(kNotSupported, format("kernel '%s': a cluster of %u blocks needs as many OS threads; only %zu could "
                                          "start", grid.function->name, size, threads.size() + 1));
    }
    if (!grid.failed.load()) member(0);
    for (std::thread& t : threads) t.join();
    return finish_launch(grid);
}

// cuLaunchKernelEx's configuration (cuda.h), as far as the CPU device reads it.
struct LaunchAttribute {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int cooperative;
        struct { unsigned int x, y, z; } cluster;
    } value;
};
struct LaunchConfig {
    unsigned int grid[3], block[3], shared;
    void* stream;
    const LaunchAttribute* attrs;
    unsigned int nattrs;
};
enum { kAttributeCooperative = 2, kAttributeClusterDimension = 4 };

}  // namespace

// ---------------------------------------------------------------------------------------------
// Checked execution (docs/checks.md). Rule: a module built with checks calls
// kd_host_check_begin_v1 before its blocks; the compiler's instrumentation of the module
// (-fsanitize=thread, compiled but not linked against libtsan) calls the __tsan_* entries below on
// every load and store, which check accesses to tracked ranges against the shadow; its atomics come
// as __tsan_atomic* (done here, and never races). A report fails the launch like an assert; its
// message starts with the check's tag ("[races] ") and names sites as {{site:BASE:OFFSET}} and
// shared variables as {{tls:BASE:OFFSET}}, which the Python side turns into file:line and names.
namespace {
std::string site_token(const void* pc) {
    Dl_info info;
    if (pc && dladdr(pc, &info) && info.dli_fbase)
        return format("{{site:%lx:%lx}}", (unsigned long)(uintptr_t)info.dli_fbase,
                      (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_fbase - 1));
    return "an unknown line";
}

// The running CUDA thread: in fiber mode its record's (an unchecked module's switches write only
// the record), else the index's own.
uint3 running_thread(const kd_host_index* ix) {
    const ThreadContext* c = tls_context;
    return c != nullptr && c->scheduler.active() && ix->fiber != nullptr ? ix->fiber->tid : ix->thread;
}

std::string thread_name(const kd_host_index* ix) {
    const uint3 t = running_thread(ix);
    return format("block (%u,%u,%u) thread (%u,%u,%u)", ix->block.x, ix->block.y, ix->block.z, t.x, t.y, t.z);
}

// Ends the running launch with `code` (its message in c.error): a fiber switches to the block's
// main context, a loop-mode kernel longjmps to its chunk's landing.
[[noreturn]] void fail_launch(ThreadContext& c, int code) {
    c.code = code;
    if (c.scheduler.active()) c.scheduler.fail(code);
    if (c.landing) std::longjmp(*c.landing, 1);
    std::fprintf(stderr, "kerneldsl CPU device: %s (outside a launch)\n", c.error.c_str());
    std::abort();
}

[[noreturn]] __attribute__((noinline, cold)) void check_fail(ThreadContext& c, const std::string& message) {
    c.error = message;
    c.check.active = false;
    fail_launch(c, kLaunchFailed);
}

struct TlsSearch {
    const char* anchor;
    char* data;
    size_t size;
    uintptr_t base;
};

// The thread-local block on this OS thread (a module's __shared__ variables) that holds `anchor`,
// and the module's load address; nothing found: data null.
TlsSearch search_tls(const char* anchor) {
    TlsSearch search = {anchor, nullptr, 0, 0};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* arg) -> int {
            TlsSearch* s = static_cast<TlsSearch*>(arg);
            if (info->dlpi_tls_data == nullptr) return 0;
            for (unsigned int i = 0; i < info->dlpi_phnum; ++i) {
                if (info->dlpi_phdr[i].p_type != PT_TLS) continue;
                char* data = static_cast<char*>(info->dlpi_tls_data);
                if (s->anchor >= data && s->anchor < data + info->dlpi_phdr[i].p_memsz) {
                    s->data = data;
                    s->size = info->dlpi_phdr[i].p_memsz;
                    s->base = (uintptr_t)info->dlpi_addr;
                    return 1;
                }
            }
            return 0;
        },
        &search);
    return search;
}

// The module's thread-local block on this OS thread, found from an address inside it.
void find_module_tls(CheckState& k, const char* anchor) {
    if (k.tls_anchor == anchor) return;
    const TlsSearch search = search_tls(anchor);
    k.tls_anchor = anchor;
    k.tls = search.data;
    k.tls_size = search.size;
    k.module_base = search.base;
}

inline unsigned int linear_thread(const kd_host_index* ix) {
    return ix->thread.x + ix->block_dim.x * (ix->thread.y + ix->block_dim.y * ix->thread.z);
}

constexpr uint32_t kManyThreads = 0x1fffu;
// (barrier epoch, warp epoch, thread): 11, 8 and 13 bits.
inline uint32_t site_of(unsigned int epoch, unsigned int warp_epoch, unsigned int thread) {
    return (epoch & 0x7ffu) << 21 | (warp_epoch & 0xffu) << 13 | (thread & kManyThreads);
}
inline unsigned int thread_of(uint32_t site) { return site & kManyThreads; }
// Two accesses of one block are ordered when a barrier separates them, or a collective of their warp.
__attribute__((always_inline)) inline bool concurrent(uint32_t a, uint32_t b) {
    if ((a >> 21) != (b >> 21)) return false;
    const unsigned int ta = thread_of(a), tb = thread_of(b);
    if (ta == kManyThreads || tb == kManyThreads) return true;
    return (ta >> 5) != (tb >> 5) || ((a >> 13) & 0xffu) == ((b >> 13) & 0xffu);
}

std::string what_at(const CheckState& k, const Range& r, uintptr_t address) {
    const uintptr_t offset = address - r.base;
    switch (r.kind) {
    case kStaticShared: return format("shared memory {{tls:%lx:%lx}}", (unsigned long)k.module_base, (unsigned long)offset);
    case kDynamicShared: return format("dynamic shared memory (extern __shared__) at byte %lu", (unsigned long)offset);
    default:
        return format("'%s'[%lu]", r.name, (unsigned long)(offset / (r.elem ? r.elem : 1)));
    }
}

[[noreturn]] __attribute__((noinline, cold)) void race(ThreadContext& c, const Range& r, uintptr_t address, uint32_t other,
                                                       const void* other_pc, bool other_writes, bool writes,
                                                       const void* pc) {
    const kd_host_index* ix = &kd_host_index_v1;
    const unsigned int me = linear_thread(ix), them = thread_of(other);
    const std::string who = them == kManyThreads ? std::string("other threads") : format("thread %u", them);
    const bool flat = ix->block_dim.y == 1 && ix->block_dim.z == 1;
    check_fail(c, format("[races] kernel '%s' block (%u,%u,%u): %s %s %s at %s and thread %u %s it at %s, with no "
                         "barrier between them%s",
                         kernel_name(c), ix->block.x, ix->block.y, ix->block.z, who.c_str(),
                         other_writes ? "writes" : "reads", what_at(c.check, r, address).c_str(),
                         site_token(other_pc).c_str(), me, writes ? "writes" : "reads", site_token(pc).c_str(),
                         flat ? "" : " (threads by linear id x + blockDim.x * (y + blockDim.y * z))"));
}

[[noreturn]] __attribute__((noinline, cold)) void uninitialized(ThreadContext& c, const Range& r, uintptr_t address,
                                                                const void* pc) {
    const kd_host_index* ix = &kd_host_index_v1;
    check_fail(c, format("[init] kernel '%s' %s reads %s at %s, which no thread of the block wrote", kernel_name(c),
                         thread_name(ix).c_str(), what_at(c.check, r, address).c_str(), site_token(pc).c_str()));
}

constexpr uint32_t kLaunchBits = 0xfff00000u, kManyBlocks = 0xfffffu;  // a record's tag: (launch, block)
inline uint32_t tag_of(const CheckState& k, const kd_host_index* ix) {
    const unsigned long long block =
        ix->block.x + (unsigned long long)ix->grid_dim.x * (ix->block.y + (unsigned long long)ix->grid_dim.y * ix->block.z);
    return (k.launch & 0xfffu) << 20 | (uint32_t)(block & kManyBlocks);
}

std::string other_block_name(const kd_host_index* ix, uint32_t tag, uint32_t site) {
    const unsigned int them = thread_of(site);
    if ((tag & kManyBlocks) == kManyBlocks) return "other blocks";
    const unsigned long long l = tag & kManyBlocks, gx = ix->grid_dim.x ? ix->grid_dim.x : 1,
                             gy = ix->grid_dim.y ? ix->grid_dim.y : 1;
    const std::string block = format("block (%llu,%llu,%llu)", l % gx, l / gx % gy, l / gx / gy);
    return them == kManyThreads ? block + " (several threads)" : format("%s thread %u", block.c_str(), them);
}

// Two blocks of one launch touched an array address, one of them writing, neither access atomic
// or volatile, and the writer passed no __threadfence after its access: blocks run in no order.
[[noreturn]] __attribute__((noinline, cold)) void block_race(ThreadContext& c, const Range& r, uintptr_t address,
                                                             uint32_t other_tag, uint32_t other_site,
                                                             const void* other_pc, bool other_writes, bool writes,
                                                             const void* pc) {
    const kd_host_index* ix = &kd_host_index_v1;
    const bool flat = ix->block_dim.y == 1 && ix->block_dim.z == 1;
    check_fail(c, format("[races] kernel '%s': %s %s %s at %s and block (%u,%u,%u) thread %u %s it at %s, in the same "
                         "launch (blocks run in no order: nothing but atomics, or a __threadfence before an atomic "
                         "the other block waits on, orders them)%s",
                         kernel_name(c), other_block_name(ix, other_tag, other_site).c_str(),
                         other_writes ? "writes" : "reads", what_at(c.check, r, address).c_str(),
                         site_token(other_pc).c_str(), ix->block.x, ix->block.y, ix->block.z, linear_thread(ix),
                         writes ? "writes" : "reads", site_token(pc).c_str(),
                         flat ? "" : " (threads by linear id x + blockDim.x * (y + blockDim.y * z))"));
}

// Whether a record's tag names another block of the launch whose tag is `tag`.
inline bool other_block(uint32_t recorded, uint32_t tag) {
    return recorded != tag && ((recorded ^ tag) & kLaunchBits) == 0;
}

// What an access found wrong with a record (decided under the record's lock, reported after it).
struct Finding {
    enum { kNone, kRace, kBlockRace, kUninitialized } what = kNone;
    uint32_t tag = 0, site = 0, pc = 0;
    bool other_writes = false;
    uintptr_t address = 0;
};

inline Finding check_cell(Cell& cell, uint32_t tag, uint32_t me, unsigned int t, uint8_t bytes,
                          bool write, bool strong, bool races, bool init, bool global, unsigned int worker,
                          uint32_t pc) {
    Finding found;
    const bool written_here = cell.wtag == tag;
    const uint32_t launch = tag & kLaunchBits;
    // Across blocks: volatile accesses are strong (they never race with each other's blocks).
    const bool wother = global && races && !strong && cell.wtag != tag && (cell.wtag & kLaunchBits) == launch &&
                        (cell.wmask & bytes) && !(cell.flags & kVolatileWrite) && !published(cell.wworker, cell.wfence);
    const bool rother = global && races && !strong && write && cell.rtag != tag && (cell.rtag & kLaunchBits) == launch &&
                        (cell.rmask & bytes) && !(cell.flags & kVolatileRead) && !published(cell.rworker, cell.rfence);
    if (wother) {
        found = Finding{Finding::kBlockRace, cell.wtag, cell.wsite, cell.wpc, true, 0};
    } else if (rother) {
        found = Finding{Finding::kBlockRace, cell.rtag, cell.rsite, cell.rpc, false, 0};
    } else if (write) {
        if (races && written_here && thread_of(cell.wsite) != t && (cell.wmask & bytes) && concurrent(cell.wsite, me))
            found = Finding{Finding::kRace, cell.wtag, cell.wsite, cell.wpc, true, 0};
        else if (races && cell.rtag == tag && thread_of(cell.rsite) != t && (cell.rmask & bytes) && concurrent(cell.rsite, me))
            found = Finding{Finding::kRace, cell.rtag, cell.rsite, cell.rpc, false, 0};
    } else {
        if (init && (!written_here || (cell.imask & bytes) != bytes))
            found.what = Finding::kUninitialized;
        else if (races && written_here && thread_of(cell.wsite) != t && (cell.wmask & bytes) && concurrent(cell.wsite, me))
            found = Finding{Finding::kRace, cell.wtag, cell.wsite, cell.wpc, true, 0};
    }
    if (found.what != Finding::kNone) return found;
    if (write) {
        const bool same = written_here && cell.wsite == me;
        cell.wmask = same ? (uint8_t)(cell.wmask | bytes) : bytes;
        cell.imask = written_here ? (uint8_t)(cell.imask | bytes) : bytes;
        cell.wtag = tag;
        cell.wsite = me;
        cell.wpc = pc;
        if (global) {  // what a check across blocks reads
            cell.wworker = (uint8_t)worker;
            cell.wfence = (uint8_t)worker_fences[worker].load(std::memory_order_relaxed);
            cell.flags = (uint8_t)((cell.flags & ~kVolatileWrite) | (strong ? kVolatileWrite : 0));
        }
        return found;
    }
    const bool read_here = cell.rtag == tag;
    if (global && cell.rtag != tag && (cell.rtag & kLaunchBits) == launch && (cell.rmask & bytes)) {
        cell.rtag = launch | kManyBlocks;  // several blocks read it: any block's write now races
        cell.rsite = site_of(0, 0, kManyThreads);
        cell.rmask |= bytes;
    } else if (read_here && thread_of(cell.rsite) != t && (cell.rmask & bytes) && concurrent(cell.rsite, me)) {
        cell.rsite = site_of(me >> 21, 0, kManyThreads);  // several threads read it: any write now races
        cell.rmask |= bytes;
    } else if (read_here && cell.rsite == me) {
        cell.rmask |= bytes;
    } else {
        cell.rtag = tag;
        cell.rsite = me;
        cell.rmask = bytes;
        cell.rpc = pc;
    }
    if (global) {
        cell.rworker = (uint8_t)worker;
        cell.rfence = (uint8_t)worker_fences[worker].load(std::memory_order_relaxed);
        cell.flags = (uint8_t)((cell.flags & ~kVolatileRead) | (strong ? kVolatileRead : 0));
    }
    return found;
}

__attribute__((noinline)) void check_access(ThreadContext& c, const Range& r, uintptr_t address, unsigned int size,
                                            bool write, bool strong, const void* pc) {
    const kd_host_index* ix = &kd_host_index_v1;
    CheckState& k = c.check;
    if (r.kind == kStaticShared) {  // a thread-local that is not __shared__ (a static's initialization guard)
        for (const std::pair<size_t, size_t>& skip : k.ignored)
            if (address - r.base >= skip.first && address - r.base < skip.second) return;
    }
    const unsigned int t = linear_thread(ix);
    const uint32_t tag = tag_of(k, ix);
    const bool fibers = c.scheduler.active();
    const uint32_t me = site_of(fibers ? c.scheduler.epoch() : 0, fibers ? c.scheduler.warp_epoch(t >> 5) : 0, t);
    const bool global = r.kind == kGlobal;
    const bool races = k.bits & kCheckRaces, init = (k.bits & kCheckInit) && !global;
    const uintptr_t offset = address - r.base, last = offset + size - 1 < r.size ? offset + size - 1 : r.size - 1;
    const uint32_t at = code_offset(k.module_base, pc);
    for (uintptr_t g = offset / 4; g <= last / 4; ++g) {
        const uintptr_t lo = g * 4 > offset ? g * 4 : offset, hi = g * 4 + 3 < last ? g * 4 + 3 : last;
        const uint8_t bytes = (uint8_t)(((1u << (hi - lo + 1)) - 1u) << (lo - g * 4));
        Finding found;
        Cell& cell = r.shadow[g];
        if (global && (other_block(cell.wtag, tag) || other_block(cell.rtag, tag))) {
            // Another block of this launch has a record here: decided under the record's lock.
            CellLock hold(r.base / 4 + g);
            found = check_cell(cell, tag, me, t, bytes, write, strong, races, init, true, k.worker, at);
        } else if (global) {
            found = check_cell(cell, tag, me, t, bytes, write, strong, races, init, true, k.worker, at);
        } else {
            found = check_cell(r.shadow[g], tag, me, t, bytes, write, strong, races, init, false, k.worker, at);
        }
        switch (found.what) {
        case Finding::kNone: break;
        case Finding::kRace: race(c, r, r.base + g * 4, found.site, code_at(k.module_base, found.pc), found.other_writes, write, pc);
        case Finding::kBlockRace:
            block_race(c, r, r.base + g * 4, found.tag, found.site, code_at(k.module_base, found.pc), found.other_writes,
                       write, pc);
        case Finding::kUninitialized: uninitialized(c, r, address, pc);
        }
    }
}

// A read of an array granule other blocks of this launch read (and none wrote), as check_cell
// records it, under the record's lock (false: a write came first, check_access decides).
__attribute__((noinline)) bool quick_shared_read(ThreadContext& c, const Range& r, Cell& cell, uintptr_t offset,
                                                 unsigned int size, uint32_t tag, bool strong, const void* pc) {
    const uint32_t launch = tag & kLaunchBits;
    const uint8_t bytes = (uint8_t)(((1u << size) - 1u) << (offset & 3));
    const unsigned int worker = c.check.worker;
    const uint8_t fence = (uint8_t)worker_fences[worker].load(std::memory_order_relaxed);
    const uint8_t flags = (uint8_t)((cell.flags & ~kVolatileRead) | (strong ? kVolatileRead : 0));
    // The record already is what this read leaves (several blocks read these bytes, this OS thread
    // last, no fence since): nothing changes, so no lock (a write racing with it finds the same record).
    if (cell.rtag == (launch | kManyBlocks) && (cell.rmask & bytes) == bytes && cell.rworker == (uint8_t)worker &&
        cell.rfence == fence && cell.flags == flags)
        return true;
    CellLock hold(r.base / 4 + offset / 4);
    if ((cell.wtag & kLaunchBits) == launch || !other_block(cell.rtag, tag)) return false;
    if (cell.rmask & bytes) {
        cell.rtag = launch | kManyBlocks;  // several blocks read it: any block's write now races
        cell.rsite = site_of(0, 0, kManyThreads);
        cell.rmask |= bytes;
    } else {
        const kd_host_index* ix = &kd_host_index_v1;
        const unsigned int t = linear_thread(ix);
        const bool fibers = c.scheduler.active();
        cell.rtag = tag;
        cell.rsite = site_of(fibers ? c.scheduler.epoch() : 0, fibers ? c.scheduler.warp_epoch(t >> 5) : 0, t);
        cell.rmask = bytes;
        cell.rpc = code_offset(c.check.module_base, pc);
    }
    cell.rworker = (uint8_t)worker;
    cell.rfence = fence;
    cell.flags = (uint8_t)((cell.flags & ~kVolatileRead) | (strong ? kVolatileRead : 0));
    return true;
}

// An array access inside one granule whose record holds no write of this launch, and for a write
// no read of it either: it can find nothing (an access races only with a write of the launch, a
// write also with a read), so it is recorded here as check_cell records it, without check_access's
// loop and findings (under the record's lock only where other blocks read it). Anything else
// returns false and goes to check_access. (Most accesses of a kernel that reads its inputs and
// writes each output element once are these.)
__attribute__((always_inline)) inline bool quick_global(ThreadContext& c, const Range& r, uintptr_t address,
                                                        unsigned int size, bool write, bool strong, const void* pc) {
    const uintptr_t offset = address - r.base;
    if ((offset & 3) + size > 4 || offset + size > r.size) return false;
    CheckState& k = c.check;
    Cell& cell = r.shadow[offset / 4];
    __builtin_prefetch(&cell + 16, 1);  // the records of a run of accesses ahead (a prefetch never faults)
    const uint32_t launch = (k.launch & 0xfffu) << 20;
    if ((cell.wtag & kLaunchBits) == launch) return false;
    const kd_host_index* ix = &kd_host_index_v1;
    const uint32_t tag = tag_of(k, ix);
    const bool read_earlier = (cell.rtag & kLaunchBits) == launch;
    if (read_earlier && write) return false;
    if (read_earlier && cell.rtag != tag) return write ? false : quick_shared_read(c, r, cell, offset, size, tag, strong, pc);
    const unsigned int t = linear_thread(ix);
    const bool fibers = c.scheduler.active();
    const uint32_t me = site_of(fibers ? c.scheduler.epoch() : 0, fibers ? c.scheduler.warp_epoch(t >> 5) : 0, t);
    const uint8_t bytes = (uint8_t)(((1u << size) - 1u) << (offset & 3));
    const uint8_t worker = (uint8_t)k.worker, fence = (uint8_t)worker_fences[k.worker].load(std::memory_order_relaxed);
    if (write) {
        cell.wmask = bytes;
        cell.imask = bytes;
        cell.wtag = tag;
        cell.wsite = me;
        cell.wpc = code_offset(k.module_base, pc);
        cell.wworker = worker;
        cell.wfence = fence;
        cell.flags = (uint8_t)((cell.flags & ~kVolatileWrite) | (strong ? kVolatileWrite : 0));
        return true;
    }
    if (read_earlier && thread_of(cell.rsite) != t && (cell.rmask & bytes) && concurrent(cell.rsite, me)) {
        cell.rsite = site_of(me >> 21, 0, kManyThreads);
        cell.rmask |= bytes;
    } else if (read_earlier && cell.rsite == me) {
        cell.rmask |= bytes;
    } else {
        cell.rtag = tag;
        cell.rsite = me;
        cell.rmask = bytes;
        cell.rpc = code_offset(k.module_base, pc);
    }
    cell.rworker = worker;
    cell.rfence = fence;
    cell.flags = (uint8_t)((cell.flags & ~kVolatileRead) | (strong ? kVolatileRead : 0));
    return true;
}

// init, on a buffer made by empty(): a store marks its bytes written, a load of bytes nothing wrote
// fails the launch, naming the array parameter that reached it (`named`: a kernel's registered
// array holding the address) or else the buffer's byte.
[[noreturn]] __attribute__((noinline, cold)) void unwritten_read(ThreadContext& c, const Fresh& f, const Range* named,
                                                                 uintptr_t address, const void* pc) {
    const kd_host_index* ix = &kd_host_index_v1;
    const std::string what = named ? what_at(c.check, *named, address)
                                   : format("byte %lu of a %lu-byte buffer", (unsigned long)(address - f.base),
                                            (unsigned long)f.size);
    check_fail(c, format("[init] kernel '%s' %s reads %s at %s, which nothing wrote: the buffer was made by empty() and "
                         "no kernel, copy or fill has written this element (checks='init=nan' fills such buffers with "
                         "signalling NaNs instead)",
                         kernel_name(c), thread_name(ix).c_str(), what.c_str(), site_token(pc).c_str()));
}

__attribute__((noinline)) void check_fresh(ThreadContext& c, const Range* named, uintptr_t address, unsigned int size,
                                           bool write, const void* pc) {
    const FreshList& open = *c.check.fresh;
    auto after = std::upper_bound(open.begin(), open.end(), address,
                                  [](uintptr_t a, const std::shared_ptr<Fresh>& f) { return a < f->base; });
    if (after == open.begin()) return;
    Fresh& f = **(after - 1);
    if (address - f.base >= f.size) return;
    const size_t offset = address - f.base, n = size < f.size - offset ? size : f.size - offset;
    if (write) {
        mark_written(f, offset, n);
        return;
    }
    const size_t missing = first_unwritten(f, offset, n);
    if (missing < n) unwritten_read(c, f, named && named->kind == kGlobal ? named : nullptr, address + missing, pc);
}

// An atomic on a tracked range initializes what it writes and never races.
__attribute__((noinline)) void note_atomic(ThreadContext& c, const Range& r, uintptr_t address, unsigned int size) {
    const uint32_t tag = tag_of(c.check, &kd_host_index_v1);
    const uintptr_t offset = address - r.base;
    for (uintptr_t g = offset / 4; g <= (offset + size - 1) / 4 && g * 4 < r.size; ++g) {
        auto note = [&](Cell& cell) {
            if (cell.wtag != tag) {
                cell.wtag = tag;
                cell.wsite = site_of(0, 0, kManyThreads);
                cell.wmask = 0;
                cell.imask = 0;
            }
            cell.imask = 0xf;
        };
        if (r.kind == kGlobal) {
            CellLock hold(r.base / 4 + g);
            note(r.shadow[g]);
        } else {
            note(r.shadow[g]);
        }
    }
}

// The first tracked range holding `a` (null: none), accessed from code address `pc`; the one that
// site hit last is tried first, unless two ranges overlap.
__attribute__((always_inline)) inline const Range* find_range(CheckState& k, uintptr_t a, const void* pc) {
    const Range* ranges = k.ranges.data();
    const size_t n = k.ranges.size();
    CheckState::SiteRange& site = k.site_ranges[((uintptr_t)pc >> 2) & 63u];
    if (site.pc == pc && site.range < n && a - ranges[site.range].base < ranges[site.range].size && !k.overlapping)
        return &ranges[site.range];
    for (size_t i = 0; i < n; ++i) {
        if (a - ranges[i].base < ranges[i].size) {
            site = CheckState::SiteRange{pc, (unsigned int)i};
            return &ranges[i];
        }
    }
    return nullptr;
}

__attribute__((always_inline)) inline void on_access(const void* p, unsigned int size, bool write, bool strong,
                                                     const void* pc) {
    ThreadContext* c = tls_context;
    if (__builtin_expect(c == nullptr || !c->check.active, 1)) return;
    const uintptr_t a = (uintptr_t)p;
    const Range* hit = find_range(c->check, a, pc);
    if (hit != nullptr && hit->shadow != nullptr &&
        !(hit->kind == kGlobal && quick_global(*c, *hit, a, size, write, strong, pc)))
        check_access(*c, *hit, a, size, write, strong, pc);
    if (c->check.fresh && (hit == nullptr || hit->kind == kGlobal)) check_fresh(*c, hit, a, size, write, pc);
}

__attribute__((always_inline)) inline void on_atomic(const volatile void* p, unsigned int size) {
    ThreadContext* c = tls_context;
    if (__builtin_expect(c == nullptr || !c->check.active, 1)) return;
    const uintptr_t a = (uintptr_t)p;
    const Range* hit = find_range(c->check, a, __builtin_return_address(0));
    if (hit != nullptr && hit->shadow != nullptr) note_atomic(*c, *hit, a, size);
    if (c->check.fresh && (hit == nullptr || hit->kind == kGlobal)) check_fresh(*c, hit, a, size, true, nullptr);
}

void add_range(CheckState& k, const Range& r) {
    for (const Range& other : k.ranges)
        if (r.base < other.base + other.size && other.base < r.base + r.size) k.overlapping = true;
    k.ranges.push_back(r);
}

void resize_shadow(std::vector<Cell>& shadow, size_t bytes) {
    const size_t cells = (bytes + 3) / 4;
    if (shadow.size() < cells) shadow.resize(cells, Cell{});
}

// A seeded permutation of n thread ids (xorshift64*, Fisher-Yates).
template <class T> void shuffle_ids(unsigned long long& state, T* ids, unsigned int n) {
    for (unsigned int i = n; i > 1; --i) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        const unsigned int j = (unsigned int)((state * 0x2545f4914f6cdd1dull) >> 33) % i;
        const T t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
}
}  // namespace

template <class T> void Scheduler::shuffle_order(T* ids, unsigned int n) { shuffle_ids(rng_, ids, n); }

std::string Scheduler::sync_tag() const { return checks_ & kCheckSync ? "[sync] " : ""; }

// The last thread at a block barrier: with the sync check, every waiter must wait at the same
// barrier (a __syncthreads in divergent code is undefined on a GPU even when every thread reaches
// one); with a seeded schedule, the waiters resume in a shuffled order.
void Scheduler::checked_release(kd_host_fiber* last, const char* file, int line) {
    if (checks_ & kCheckSync) {
        std::vector<unsigned int> here(1, last->linear), elsewhere;
        const kd_host_fiber* other = nullptr;
        for (unsigned int i = 0; i < b_.arrived; ++i) {
            const kd_host_fiber& f = *b_.waiters[i];
            const bool same = f.line == line && (f.file == file || (f.file && file && std::strcmp(f.file, file) == 0));
            (same ? here : elsewhere).push_back(f.linear);
            if (!same && other == nullptr) other = &f;
        }
        if (other != nullptr) {
            std::sort(here.begin(), here.end());
            std::sort(elsewhere.begin(), elsewhere.end());
            owner_->error = format("[sync] %s: a barrier in divergent code: threads %s are at __syncthreads at %s:%d while "
                                   "threads %s are at another one at %s:%d (every thread must reach the same barrier)",
                                   where().c_str(), ranges(here).c_str(), file ? file : "?", line,
                                   ranges(elsewhere).c_str(), other->file ? other->file : "?", other->line);
            fail(kLaunchFailed);
        }
    }
    if (seed_) shuffle_order(b_.waiters, b_.arrived);
}

// The thread-locals of checked modules that are not shared memory, by module (the Python side
// names them from the module's symbols when it loads it: the guards of statics' initialization).
struct IgnoredTls {
    uintptr_t module;
    size_t offset, size;
};
static std::mutex ignored_lock;
static std::vector<IgnoredTls> ignored_tls;

// ---------------------------------------------------------------------------------------------
// The entries checked modules call (declared in kd_host.h under KD_CHECKS).
KD_EXPORT void* kd_host_dynamic_shared_v1(void);
KD_EXPORT void kd_host_check_begin_v1(const kd_host_launch* launch, unsigned int checks, unsigned long long seed,
                                      void* tls_anchor) {
    ThreadContext& c = context();
    CheckState& k = c.check;
    k.bits = checks;
    c.scheduler.set_checks(checks, seed);
    k.ranges.clear();
    k.overlapping = false;
    k.active = (checks & (kCheckRaces | kCheckInit)) != 0;
    if (!k.active) return;
    find_module_tls(k, static_cast<const char*>(tls_anchor));
    k.ignored.clear();
    {
        std::lock_guard<std::mutex> hold(ignored_lock);
        for (const IgnoredTls& i : ignored_tls)
            if (i.module == k.module_base) k.ignored.emplace_back(i.offset, i.offset + i.size);
    }
    if (k.tls) {
        resize_shadow(k.static_shadow, k.tls_size);
        add_range(k, Range{(uintptr_t)k.tls, k.tls_size, k.static_shadow.data(), nullptr, 1, kStaticShared});
    }
    if (launch->dynamic_shared) {
        resize_shadow(k.dynamic_shadow, launch->dynamic_shared);
        add_range(k, Range{(uintptr_t)kd_host_dynamic_shared_v1(), launch->dynamic_shared, k.dynamic_shadow.data(),
                                 nullptr, 1, kDynamicShared});
    }
    if (k.registry) {
        std::lock_guard<std::mutex> hold(k.registry->lock);
        for (const Range& r : k.registry->arrays) add_range(k, r);
    }
    k.fresh.reset();
    if (checks & kCheckInit) {
        FreshRegistry& fresh = fresh_registry();
        std::lock_guard<std::mutex> hold(fresh.lock);
        if (fresh.stale.load(std::memory_order_relaxed)) fresh.refresh();
        if (!fresh.open->empty()) k.fresh = fresh.open;
    }
}

// A kernel's array parameter, registered by every thread's prologue (the first of the launch
// makes its shadow); races on it are checked from then on.
KD_EXPORT void kd_host_check_array_v1(const void* base, unsigned long long bytes, unsigned int elem, const char* name) {
    ThreadContext* c = tls_context;
    if (c == nullptr || !(c->check.bits & (kCheckRaces | kCheckInit)) || bytes == 0 || base == nullptr) return;
    const bool races = c->check.bits & kCheckRaces;  // else registered for its name (init's reports) only
    if (races && shadow_bytes(bytes) > kArrayShadowBytes) return;
    CheckState& k = c->check;
    for (const Range& r : k.ranges)
        if (r.base == (uintptr_t)base && r.kind == kGlobal) return;
    if (k.registry == nullptr) return;
    std::lock_guard<std::mutex> hold(k.registry->lock);
    for (const Range& r : k.registry->arrays) {
        if (r.base == (uintptr_t)base) {
            add_range(k, r);
            return;
        }
    }
    Cell* shadow = races ? ShadowCache::get().shadow((uintptr_t)base, bytes, k.launch) : nullptr;
    if (races && shadow == nullptr) return;  // unchecked rather than failed: the kernel itself is fine
    const Range r = {(uintptr_t)base, (uintptr_t)bytes, shadow, name, elem, kGlobal};
    k.registry->arrays.push_back(r);
    add_range(k, r);
}

// Loop mode under a seeded schedule: the order in which block `block`'s n threads run.
KD_EXPORT const unsigned int* kd_host_check_order_v1(unsigned long long seed, unsigned long long block, unsigned int n) {
    CheckState& k = context().check;
    k.order.resize(n);
    for (unsigned int i = 0; i < n; ++i) k.order[i] = i;
    unsigned long long state = seed * 0x9e3779b97f4a7c15ull ^ (block + 1);
    shuffle_ids(state, k.order.data(), n);
    return k.order.data();
}

// bounds: an index outside an array parameter's extent (`dims`: its shape, for the message).
KD_EXPORT __attribute__((noreturn, noinline)) void kd_host_bounds_fail_v1(const char* name, long long index,
                                                                          unsigned long long extent, const long long* dims,
                                                                          unsigned int ndim, const kd_host_index* ix) {
    const void* pc = __builtin_return_address(0);
    ThreadContext& c = context();
    std::string shape;
    if (ndim > 1 && index >= 0) {
        std::string axes, at;
        long long rest = index;
        std::vector<long long> coords(ndim);
        for (unsigned int a = ndim; a-- > 0;) {
            const long long d = dims[a] > 0 ? dims[a] : 1;
            coords[a] = a ? rest % d : rest;
            rest = a ? rest / d : rest;
        }
        for (unsigned int a = 0; a < ndim; ++a) {
            axes += format("%s%lld", a ? ", " : "", dims[a]);
            at += format("%s%lld", a ? ", " : "", coords[a]);
        }
        shape = format(" (shape (%s): index (%s))", axes.c_str(), at.c_str());
    }
    check_fail(c, format("[bounds] kernel '%s' %s: %s[%lld] is outside its extent %llu%s at %s", kernel_name(c),
                         thread_name(ix).c_str(), name, index, extent, shape.c_str(), site_token(pc).c_str()));
}

// init: [base, base + bytes) was made by empty() in a session with the init check; nothing has
// written it yet.
KD_EXPORT void kd_host_check_fresh_v1(const void* base, unsigned long long bytes) {
    if (base == nullptr || bytes == 0) return;
    FreshRegistry& fresh = fresh_registry();
    std::lock_guard<std::mutex> hold(fresh.lock);
    const uintptr_t at = (uintptr_t)base;
    auto place = std::lower_bound(fresh.all.begin(), fresh.all.end(), at,
                                  [](const std::shared_ptr<Fresh>& f, uintptr_t a) { return f->base < a; });
    if (place != fresh.all.end() && (*place)->base == at) place = fresh.all.erase(place);
    fresh.all.insert(place, std::make_shared<Fresh>(at, (size_t)bytes));
    fresh.refresh();
}

// init: the host wrote [base, base + bytes) (a copy or a fill into device memory).
KD_EXPORT void kd_host_check_written_v1(const void* base, unsigned long long bytes) {
    FreshRegistry& fresh = fresh_registry();
    std::lock_guard<std::mutex> hold(fresh.lock);
    const uintptr_t lo = (uintptr_t)base, hi = lo + (uintptr_t)bytes;
    for (const std::shared_ptr<Fresh>& f : *fresh.open) {
        const uintptr_t start = f->base > lo ? f->base : lo, end = f->base + f->size < hi ? f->base + f->size : hi;
        if (start < end) mark_written(*f, start - f->base, end - start);
    }
    if (fresh.stale.load(std::memory_order_relaxed)) fresh.refresh();
}

// init: the buffer at `base` was freed (null: forget every buffer, after host code that may have
// written any of them).
KD_EXPORT void kd_host_check_forget_v1(const void* base) {
    FreshRegistry& fresh = fresh_registry();
    std::lock_guard<std::mutex> hold(fresh.lock);
    if (base == nullptr) fresh.all.clear();
    else
        fresh.all.erase(std::remove_if(fresh.all.begin(), fresh.all.end(),
                                       [base](const std::shared_ptr<Fresh>& f) { return f->base == (uintptr_t)base; }),
                        fresh.all.end());
    fresh.refresh();
}

// ---------------------------------------------------------------------------------------------
// Contexts. Rule: each OS thread has its stack of current contexts, as the CUDA driver keeps one
// (the CPU device has one context, its primary); the driver's Python calls and the C launch
// path's cuCtxGetCurrent entry share it.
namespace {
std::vector<void*>& context_stack() {
    static thread_local std::vector<void*> stack;
    return stack;
}
}  // namespace

KD_EXPORT int kd_host_ctx_get_current_v1(void** out) {
    const std::vector<void*>& stack = context_stack();
    *out = stack.empty() ? nullptr : stack.back();
    return 0;
}
KD_EXPORT void kd_host_ctx_push_v1(void* ctx) { context_stack().push_back(ctx); }
KD_EXPORT void* kd_host_ctx_pop_v1(void) {
    std::vector<void*>& stack = context_stack();
    if (stack.empty()) return nullptr;
    void* top = stack.back();
    stack.pop_back();
    return top;
}
KD_EXPORT void kd_host_ctx_set_current_v1(void* ctx) {
    std::vector<void*>& stack = context_stack();
    if (stack.empty()) stack.push_back(ctx);
    else stack.back() = ctx;
}

// cuStreamQuery: a stream's work is done when it is enqueued.
KD_EXPORT int kd_host_stream_query_v1(void* stream) {
    (void)stream;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Memory. Rule: the CPU device's allocations are host memory aligned as cudaMalloc's (256 bytes),
// kept in one set of books here, which the driver's Python calls and the C launch path's
// cuMemAllocFromPoolAsync / cuMemFreeAsync entries (these, called for every result an op
// allocates) share without a call into Python. A pool keeps its freed blocks for its next
// allocations of the same size, as a CUDA pool keeps freed memory below its release threshold
// (kerneldsl's: all of it) until trimmed; a block freed on a stream being captured is freed with
// the graph instead (a replay may still use it). 0 on success, else a CUresult.
namespace {
enum { kOutOfMemory = 2 };
constexpr size_t kAlignment = 256;
struct Allocation {
    size_t bytes;
    uintptr_t pool;  // 0: not a pool's
};
struct MemoryBooks {
    std::mutex lock;
    std::unordered_map<uintptr_t, Allocation> allocations;
    std::unordered_map<uintptr_t, size_t> pools;  // pool -> bytes in use
    std::unordered_map<uintptr_t, std::unordered_map<size_t, std::vector<uintptr_t>>> kept;  // pool -> size -> blocks
    std::unordered_map<uintptr_t, std::vector<uintptr_t>> freed_in_capture;  // capturing stream -> blocks
    bool tracking_unwritten = false;  // a session's init check tracks buffers made by empty()
};
MemoryBooks& books() {
    static MemoryBooks* b = new MemoryBooks;  // never destroyed: arrays may be freed during exit
    return *b;
}
}  // namespace

// Allocates n bytes (of `pool`, 0 for none), reusing a block the pool keeps.
KD_EXPORT int kd_host_mem_alloc_v1(unsigned long long* out, size_t n, uintptr_t pool, void* stream) {
    (void)stream;
    MemoryBooks& m = books();
    std::unique_lock<std::mutex> hold(m.lock);
    void* ptr = nullptr;
    auto sizes = pool != 0 ? m.kept.find(pool) : m.kept.end();
    if (sizes != m.kept.end()) {
        auto blocks = sizes->second.find(n);
        if (blocks != sizes->second.end() && !blocks->second.empty()) {
            ptr = (void*)blocks->second.back();
            blocks->second.pop_back();
        }
    }
    if (ptr == nullptr) {  // a fresh block, allocated outside the lock
        hold.unlock();
        if (n == 0 || posix_memalign(&ptr, kAlignment, n) != 0 || ptr == nullptr) return kOutOfMemory;
        hold.lock();
    }
    m.allocations[(uintptr_t)ptr] = Allocation{n, pool};
    if (pool != 0) m.pools[pool] += n;
    *out = (unsigned long long)(uintptr_t)ptr;
    return 0;
}

// Frees `ptr` (keep: a pool's block stays with its pool); a pointer it did not allocate is invalid.
KD_EXPORT int kd_host_mem_release_v1(unsigned long long ptr, int keep) {
    MemoryBooks& m = books();
    bool kept = false, tracking;
    {
        std::lock_guard<std::mutex> hold(m.lock);
        auto found = m.allocations.find((uintptr_t)ptr);
        if (found == m.allocations.end()) return kInvalidValue;
        const Allocation a = found->second;
        m.allocations.erase(found);
        auto pool = a.pool != 0 ? m.pools.find(a.pool) : m.pools.end();
        if (pool != m.pools.end()) {
            pool->second -= a.bytes;
            kept = keep != 0;
            if (kept) m.kept[a.pool][a.bytes].push_back((uintptr_t)ptr);
        }
        tracking = m.tracking_unwritten;
    }
    if (tracking) kd_host_check_forget_v1((const void*)(uintptr_t)ptr);
    if (!kept) std::free((void*)(uintptr_t)ptr);
    return 0;
}

// cuMemFreeAsync: a pool's block stays with its pool; on a stream being captured, freed with the graph.
KD_EXPORT int kd_host_mem_free_async_v1(unsigned long long ptr, void* stream) {
    MemoryBooks& m = books();
    {
        std::lock_guard<std::mutex> hold(m.lock);
        auto capture = m.freed_in_capture.find((uintptr_t)stream);
        if (capture != m.freed_in_capture.end()) {
            capture->second.push_back((uintptr_t)ptr);
            return 0;
        }
    }
    return kd_host_mem_release_v1(ptr, 1);
}

// The bytes of the allocation at ptr (0: none), and how many freed blocks of n bytes `pool` keeps.
KD_EXPORT size_t kd_host_mem_size_v1(unsigned long long ptr) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    auto found = m.allocations.find((uintptr_t)ptr);
    return found == m.allocations.end() ? 0 : found->second.bytes;
}
KD_EXPORT size_t kd_host_mem_kept_v1(uintptr_t pool, size_t n) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    auto sizes = m.kept.find(pool);
    if (sizes == m.kept.end()) return 0;
    auto blocks = sizes->second.find(n);
    return blocks == sizes->second.end() ? 0 : blocks->second.size();
}

// Pools: made (no bytes in use), the bytes one has in use, its kept blocks freed largest first
// until it keeps at most `keep` bytes, and destroyed (its kept blocks freed).
KD_EXPORT void kd_host_mem_pool_create_v1(uintptr_t pool) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    m.pools[pool] = 0;
}
KD_EXPORT size_t kd_host_mem_pool_used_v1(uintptr_t pool) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    auto found = m.pools.find(pool);
    return found == m.pools.end() ? 0 : found->second;
}
KD_EXPORT void kd_host_mem_pool_trim_v1(uintptr_t pool, size_t keep) {
    MemoryBooks& m = books();
    std::vector<uintptr_t> released;
    {
        std::lock_guard<std::mutex> hold(m.lock);
        auto sizes = m.kept.find(pool);
        if (sizes == m.kept.end()) return;
        std::vector<std::pair<size_t, uintptr_t>> blocks;
        size_t total = 0;
        for (const auto& size : sizes->second)
            for (uintptr_t ptr : size.second) {
                blocks.emplace_back(size.first, ptr);
                total += size.first;
            }
        std::sort(blocks.rbegin(), blocks.rend());
        for (const auto& block : blocks) {
            if (total <= keep) break;
            std::vector<uintptr_t>& same = sizes->second[block.first];
            same.erase(std::find(same.begin(), same.end(), block.second));
            total -= block.first;
            released.push_back(block.second);
        }
    }
    for (uintptr_t ptr : released) std::free((void*)ptr);
}
KD_EXPORT void kd_host_mem_pool_destroy_v1(uintptr_t pool) {
    {
        MemoryBooks& m = books();
        std::lock_guard<std::mutex> hold(m.lock);
        m.pools.erase(pool);
    }
    kd_host_mem_pool_trim_v1(pool, 0);
}

// A stream's capture begins (its frees are deferred) or ends: the blocks freed during it, copied
// to `out` (up to `capacity`); their count. Ends only when `out` is given.
KD_EXPORT size_t kd_host_mem_capture_v1(void* stream, int begin, unsigned long long* out, size_t capacity) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    if (begin) {
        m.freed_in_capture[(uintptr_t)stream].clear();
        return 0;
    }
    auto found = m.freed_in_capture.find((uintptr_t)stream);
    if (found == m.freed_in_capture.end()) return 0;
    const size_t count = found->second.size();
    if (out != nullptr) {
        for (size_t i = 0; i < count && i < capacity; ++i) out[i] = found->second[i];
        m.freed_in_capture.erase(found);
    }
    return count;
}

// The init check tracks buffers: a freed one is forgotten.
KD_EXPORT void kd_host_mem_track_unwritten_v1(void) {
    MemoryBooks& m = books();
    std::lock_guard<std::mutex> hold(m.lock);
    m.tracking_unwritten = true;
}

// A checked module's thread-local at [offset, offset + size) of its TLS block is not shared memory.
KD_EXPORT void kd_host_check_ignore_v1(unsigned long module_base, unsigned long offset, unsigned long size) {
    std::lock_guard<std::mutex> hold(ignored_lock);
    ignored_tls.push_back(IgnoredTls{(uintptr_t)module_base, (size_t)offset, (size_t)size});
}

// The module a code address belongs to (its load address), for the Python side's line tables.
KD_EXPORT unsigned long kd_host_module_base_v1(const void* address) {
    Dl_info info;
    return address && dladdr(address, &info) ? (unsigned long)(uintptr_t)info.dli_fbase : 0;
}

// The instrumentation's entries (GCC's and Clang's -fsanitize=thread ABI).
#define KD_TSAN_SIZE(n) \
    KD_EXPORT void __tsan_read##n(void* p) { on_access(p, n, false, false, __builtin_return_address(0)); } \
    KD_EXPORT void __tsan_write##n(void* p) { on_access(p, n, true, false, __builtin_return_address(0)); } \
    KD_EXPORT void __tsan_unaligned_read##n(void* p) { on_access(p, n, false, false, __builtin_return_address(0)); } \
    KD_EXPORT void __tsan_unaligned_write##n(void* p) { on_access(p, n, true, false, __builtin_return_address(0)); } \
    KD_EXPORT void __tsan_volatile_read##n(void* p) { on_access(p, n, false, true, __builtin_return_address(0)); } \
    KD_EXPORT void __tsan_volatile_write##n(void* p) { on_access(p, n, true, true, __builtin_return_address(0)); }
KD_TSAN_SIZE(1)
KD_TSAN_SIZE(2)
KD_TSAN_SIZE(4)
KD_TSAN_SIZE(8)
KD_TSAN_SIZE(16)
#undef KD_TSAN_SIZE
KD_EXPORT void __tsan_read_range(void* p, unsigned long n) {
    for (unsigned long i = 0; i < n; i += 16) on_access((char*)p + i, n - i < 16 ? (unsigned int)(n - i) : 16, false, false, __builtin_return_address(0));
}
KD_EXPORT void __tsan_write_range(void* p, unsigned long n) {
    for (unsigned long i = 0; i < n; i += 16) on_access((char*)p + i, n - i < 16 ? (unsigned int)(n - i) : 16, true, false, __builtin_return_address(0));
}
KD_EXPORT void __tsan_func_entry(void*) {}
KD_EXPORT void __tsan_func_exit(void) {}
KD_EXPORT void __tsan_init(void) {}
KD_EXPORT void __tsan_vptr_update(void**, void*) {}
KD_EXPORT void __tsan_vptr_read(void**) {}
#define KD_TSAN_ATOMIC(bits, T) \
    KD_EXPORT T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    KD_EXPORT void __tsan_atomic##bits##_store(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) { on_atomic(a, sizeof(T)); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    KD_EXPORT int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { \
        on_atomic(a, sizeof(T)); \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    } \
    KD_EXPORT int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { \
        on_atomic(a, sizeof(T)); \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    } \
    KD_EXPORT T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) { \
        on_atomic(a, sizeof(T)); \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        return c; \
    }
KD_TSAN_ATOMIC(8, unsigned char)
KD_TSAN_ATOMIC(16, unsigned short)
KD_TSAN_ATOMIC(32, unsigned int)
KD_TSAN_ATOMIC(64, unsigned long long)
#undef KD_TSAN_ATOMIC
// A fence publishes what the running block wrote before it to other blocks (see `published`).
KD_EXPORT void __tsan_atomic_thread_fence(int) {
    ThreadContext* c = tls_context;
    if (c != nullptr && c->check.active) worker_fences[c->check.worker].fetch_add(1, std::memory_order_relaxed);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
KD_EXPORT void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// UndefinedBehaviorSanitizer's handlers (-fsanitize=undefined and -fsanitize=bounds, compiled but
// not linked against libubsan): every handler's data starts with the source location, which the
// #line directives make the user's; the launch fails there.
namespace {
struct UbsanLocation {
    const char* file;
    unsigned int line, column;
};
struct UbsanType {
    unsigned short kind, info;
    char name[1];
};
[[noreturn]] void ubsan_fail(const void* data, const char* tag, const std::string& what) {
    const UbsanLocation* at = static_cast<const UbsanLocation*>(data);
    ThreadContext& c = context();
    check_fail(c, format("[%s] kernel '%s' %s: %s at %s:%u", tag, kernel_name(c), thread_name(&kd_host_index_v1).c_str(),
                         what.c_str(), at && at->file ? at->file : "?", at ? at->line : 0));
}
}  // namespace
#define KD_UBSAN(name, tag, what) \
    KD_EXPORT void __ubsan_handle_##name(void* data, ...) { ubsan_fail(data, tag, what); } \
    KD_EXPORT void __ubsan_handle_##name##_abort(void* data, ...) { ubsan_fail(data, tag, what); }
KD_UBSAN(add_overflow, "undefined", "signed integer overflow in +")
KD_UBSAN(sub_overflow, "undefined", "signed integer overflow in -")
KD_UBSAN(mul_overflow, "undefined", "signed integer overflow in *")
KD_UBSAN(negate_overflow, "undefined", "signed integer overflow in unary -")
KD_UBSAN(divrem_overflow, "undefined", "integer division by zero or overflow")
KD_UBSAN(shift_out_of_bounds, "undefined", "a shift by a negative amount or past the type's width")
KD_UBSAN(vla_bound_not_positive, "undefined", "a variable-length array of non-positive size")
KD_UBSAN(float_cast_overflow, "undefined", "a floating value that does not fit the integer type it is converted to")
KD_UBSAN(load_invalid_value, "undefined", "a load of a value invalid for its type (bool or enum)")
KD_UBSAN(missing_return, "undefined", "the end of a value-returning function without a return")
KD_UBSAN(nonnull_arg, "undefined", "a null pointer passed as a nonnull argument")
KD_UBSAN(nonnull_return_v1, "undefined", "a null pointer returned from a returns_nonnull function")
KD_UBSAN(pointer_overflow, "undefined", "pointer arithmetic that overflows")
KD_UBSAN(invalid_builtin, "undefined", "a builtin called with an invalid argument (__builtin_clz(0) or ctz(0))")
KD_UBSAN(builtin_unreachable, "undefined", "__builtin_unreachable reached")
#undef KD_UBSAN
namespace {
[[noreturn]] void ubsan_out_of_bounds(void* data, unsigned long index) {
    struct Data {
        UbsanLocation at;
        const UbsanType* array;
        const UbsanType* index;
    };
    const Data* d = static_cast<const Data*>(data);
    const bool is_signed = d->index && (d->index->info & 1);
    const unsigned int bits = d->index ? 1u << (d->index->info >> 1) : 64;
    const long long value = is_signed && bits < 64 ? (long long)(index << (64 - bits)) >> (64 - bits) : (long long)index;
    ubsan_fail(data, "bounds", format("index %lld is outside the array of type %s", value, d->array ? d->array->name : "?"));
}
}  // namespace
namespace {
// A null or misaligned pointer, or (object-size) an access past the end of the object it points into.
[[noreturn]] void ubsan_type_mismatch(void* data, unsigned long pointer) {
    struct Data {
        UbsanLocation at;
        const UbsanType* type;
        unsigned char log_alignment, kind;
    };
    const Data* d = static_cast<const Data*>(data);
    const char* type = d->type ? d->type->name : "?";
    if (pointer == 0) ubsan_fail(data, "undefined", format("a null pointer to %s dereferenced", type));
    if (pointer & ((1ul << d->log_alignment) - 1))
        ubsan_fail(data, "undefined", format("a pointer to %s misaligned for its type (address 0x%lx)", type, pointer));
    ubsan_fail(data, "bounds", format("an access to %s past the end of the object it points into", type));
}
}  // namespace
KD_EXPORT void __ubsan_handle_type_mismatch_v1(void* data, unsigned long pointer) { ubsan_type_mismatch(data, pointer); }
KD_EXPORT void __ubsan_handle_type_mismatch_v1_abort(void* data, unsigned long pointer) { ubsan_type_mismatch(data, pointer); }
KD_EXPORT void __ubsan_handle_out_of_bounds(void* data, unsigned long index) { ubsan_out_of_bounds(data, index); }
KD_EXPORT void __ubsan_handle_out_of_bounds_abort(void* data, unsigned long index) { ubsan_out_of_bounds(data, index); }

namespace {
}  // namespace

// ---------------------------------------------------------------------------------------------
// The entries kernel modules call (declared in kd_host.h).
KD_EXPORT void* kd_host_dynamic_shared_v1(void);
KD_EXPORT int kd_host_run_fibers_v1(const kd_host_launch* launch, unsigned long long first, unsigned long long end,
                                    void (*entry)(void*), void (*chain)(void), void* args, void* tls_anchor) {
    ThreadContext& c = context();
    Scheduler& s = c.scheduler;
    kd_host_index* ix = &kd_host_index_v1;
    s.prepare(launch, entry, chain, args);
    const unsigned int gx = launch->grid[0], gy = launch->grid[1];
    ix->block_dim = uint3{launch->block[0], launch->block[1], launch->block[2]};
    ix->grid_dim = uint3{gx, gy, launch->grid[2]};
    ix->cluster_dim = uint3{launch->cluster[0], launch->cluster[1], launch->cluster[2]};
    c.tls_anchor = static_cast<char*>(tls_anchor);
    if (c.team) {  // a cluster's block: its shared memory is known to the team before any block runs
        // (and the other blocks may update it: its atomics stay atomic)
        ix->shared_bytes = ix->dynamic_shared_bytes = 0;
        Team::Member& me = c.team->members[c.rank];
        me.tls_anchor.store(static_cast<char*>(tls_anchor), std::memory_order_relaxed);
        me.dynamic_shared.store(static_cast<char*>(kd_host_dynamic_shared_v1()), std::memory_order_relaxed);
        if (!c.team->meet(*c.abandoned)) return 0;  // the grid failed: its first error is reported
    }
    uint3 block = {(unsigned int)(first % gx), (unsigned int)(first / gx % gy), (unsigned int)(first / gx / gy)};
    for (unsigned long long b = first; b < end; ++b) {
        if (c.abandoned && c.abandoned->load(std::memory_order_relaxed)) break;
        ix->block = block;
        const int rc = s.run_block();
        if (rc) return rc;
        if (c.team && !c.team->meet(*c.abandoned)) return 0;
        if (++block.x == gx) {
            block.x = 0;
            if (++block.y == gy) {
                block.y = 0;
                ++block.z;
            }
        }
    }
    return 0;
}

KD_EXPORT void kd_host_chain_arm_v1(void) { tls_context->scheduler.chain_arm(); }
KD_EXPORT void kd_host_chain_end_v1(void) { tls_context->scheduler.chain_end(); }

KD_EXPORT int kd_host_barrier_v1(int mode, int predicate, const char* file, int line) {
    ThreadContext* c = tls_context;
    // A cluster barrier (mode 4) orders the cluster's blocks: it publishes what this block wrote
    // before it, as a fence does (the race check's `published`).
    if (mode == 4 && c->check.active) worker_fences[c->check.worker].fetch_add(1, std::memory_order_relaxed);
    return c->scheduler.barrier(mode, predicate, file, line);
}

KD_EXPORT unsigned int kd_host_warp_v1(unsigned int control, unsigned int mask, kd_host_word* value, unsigned int b,
                                       const char* file, int line) {
    return tls_context->scheduler.warp(control, mask, value, b, file, line);
}

KD_EXPORT unsigned int kd_host_activemask_v1(void) {
    ThreadContext* c = tls_context;
    return c && c->scheduler.active() ? c->scheduler.activemask() : 0xffffffffu;
}

// __nanosleep: a spin-wait's pause. When another block of the grid has failed, what this one waits
// for may never come (a grid barrier, a look-back): the block ends instead of spinning on.
KD_EXPORT void kd_host_yield_v1(void) {
    ThreadContext* c = tls_context;
    if (c && c->abandoned && c->abandoned->load(std::memory_order_relaxed)) {
        c->error = "abandoned: another block of the grid failed";
        fail_launch(*c, kLaunchFailed);
    }
    if (c && c->scheduler.active()) c->scheduler.yield();
    else sched_yield();
}

// A module's thread-locals on this OS thread (its __shared__ variables), from an address inside
// them: where they start, and their size in *bytes (0 when not found).
KD_EXPORT unsigned long long kd_host_thread_locals_v1(const void* inside, unsigned long long* bytes) {
    const TlsSearch search = search_tls(static_cast<const char*>(inside));
    *bytes = search.data ? search.size : 0;
    return (unsigned long long)(uintptr_t)search.data;
}

KD_EXPORT void* kd_host_dynamic_shared_v1(void) {
    ThreadContext& c = context();
    if (!c.dynamic_shared) {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
        flags |= MAP_NORESERVE;
#endif
        void* p = mmap(nullptr, kDynamicSharedBytes, PROT_READ | PROT_WRITE, flags, -1, 0);
        c.dynamic_shared = p == MAP_FAILED ? nullptr : p;
    }
    return c.dynamic_shared;
}

// mapa: a __shared__ variable's or the dynamic shared buffer's counterpart in the block of `rank`
// of the caller's cluster (every thread's copy of a module's thread-locals has the same layout).
KD_EXPORT void* kd_host_cluster_map_v1(void* shared, unsigned int rank) {
    ThreadContext& c = context();
    if (c.team == nullptr || rank >= c.team->size) return rank == 0 ? shared : nullptr;
    const Team::Member& other = c.team->members[rank];
    char* const p = static_cast<char*>(shared);
    char* const dynamic = static_cast<char*>(c.dynamic_shared);
    if (dynamic && p >= dynamic && p < dynamic + kDynamicSharedBytes)
        return other.dynamic_shared.load(std::memory_order_relaxed) + (p - dynamic);
    return other.tls_anchor.load(std::memory_order_relaxed) + (p - static_cast<char*>(c.tls_anchor));
}

namespace {
// Traps. Rule: a trap in a kernel fails its launch, naming the kernel (and, in fiber mode, the
// block and thread: a loop-mode module keeps its indices to itself), instead of ending the
// process, as a GPU fails a launch. An integer division by zero, or of the most negative value by
// -1, traps on x86-64 (SIGFPE) where a GPU yields an unspecified value (checks="undefined" names
// the line); an access to unmapped memory (SIGSEGV, SIGBUS) is a GPU's illegal address
// (checks="bounds" names the line of an array's), and one in a guard page below a fiber's stack is
// its stack overflowing; an illegal instruction (SIGILL: __builtin_trap, or a path the compiler
// knew to be undefined behavior) is a GPU's illegal instruction. A fault is handled on an
// alternate signal stack, which every thread that runs blocks has. A signal that is not a kernel's (no launch on this thread, or sent by kill)
// goes to the action installed before the runtime's. With AddressSanitizer in the process (which
// reports faults itself) memory faults are left to it.
const int kTraps[] = {SIGFPE, SIGILL, SIGSEGV, SIGBUS};
constexpr int kTrapCount = sizeof kTraps / sizeof *kTraps;
struct sigaction previous_actions[kTrapCount];

void pass_on(int sig, siginfo_t* info, void* context_of_signal) {
    int i = 0;
    while (kTraps[i] != sig) ++i;
    const struct sigaction& previous = previous_actions[i];
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context_of_signal);
    } else if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        sigaction(sig, &previous, nullptr);
        raise(sig);  // (pending until this handler returns; a trapping instruction traps again)
    } else {
        previous.sa_handler(sig);
    }
}

void on_trap(int sig, siginfo_t* info, void* context_of_signal) {
    ThreadContext* c = tls_context;
    if (c == nullptr || c->landing == nullptr || info->si_code <= 0) {
        pass_on(sig, info, context_of_signal);
        return;
    }
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, sig);
    pthread_sigmask(SIG_UNBLOCK, &trap, nullptr);  // (the handler leaves by a jump, not a return)
    const std::string who = c->scheduler.active() || c->split ? " " + thread_name(&kd_host_index_v1) : "";
    if (sig == SIGFPE) {
        // (x86-64 raises one trap for both; Linux names it FPE_INTDIV)
        const char* what = info->si_code == FPE_INTDIV || info->si_code == FPE_INTOVF
                               ? "integer division by zero, or of the most negative value by -1"
                               : "an arithmetic trap (SIGFPE)";
        c->error = format("kernel '%s'%s: %s (on a GPU its result is unspecified; checks=\"undefined\" names the line)",
                          kernel_name(*c), who.c_str(), what);
        fail_launch(*c, kLaunchFailed);
    }
    if (sig == SIGILL) {
        c->error = format("kernel '%s'%s: illegal instruction (a __builtin_trap, or a path the compiler found to be "
                          "undefined behavior; checks=\"undefined\" names the line of the latter)",
                          kernel_name(*c), who.c_str());
        fail_launch(*c, kIllegalInstruction);
    }
    const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
    // (Below the OS thread's stack: the page probes of -fstack-clash-protection land just below it.)
    const bool below_os_stack = address < c->os_stack_low && address + kSignalStackBytes >= c->os_stack_low;
    if (c->scheduler.guards(address) || below_os_stack)
        c->error = format("kernel '%s'%s: stack overflow: a thread's frames outgrew its stack (deep recursion, or large "
                          "local arrays in nested calls; a fiber thread's stack is %zu KiB)",
                          kernel_name(*c), who.c_str(), kStackBytes >> 10);
    else
        c->error = format("kernel '%s'%s: illegal memory access at address 0x%lx (checks=\"bounds\" names the line of an "
                          "array's)",
                          kernel_name(*c), who.c_str(), (unsigned long)address);
    fail_launch(*c, kIllegalAddress);
}

__attribute__((constructor)) void install_trap_handlers() {
    struct sigaction action = {};
    action.sa_sigaction = on_trap;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    const bool sanitized = __sanitizer_start_switch_fiber != nullptr;
    for (int i = 0; i < kTrapCount; ++i)
        if (!sanitized || (kTraps[i] != SIGSEGV && kTraps[i] != SIGBUS)) sigaction(kTraps[i], &action, &previous_actions[i]);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Split blocks (kd_host.h "Split blocks"). Rule: the module runs a block's threads in passes;
// a warp's collective completes when every lane its mask names waits in it (the module asks
// once the warp's lanes have run), the block barrier once every thread that has not exited waits
// at one (after each pass); otherwise the error names what the threads wait for, as the fiber
// scheduler's errors do.
namespace {
struct SplitState {
    kd_host_split view = {};
    std::vector<unsigned char> wait;
    std::vector<unsigned int> resume;
    std::vector<unsigned int> masks;
    std::vector<int> values;
    std::vector<kd_host_warp> warps;
    std::vector<uint3> tids;
    std::unique_ptr<char, void (*)(void*)> storage{nullptr, &std::free};
    unsigned long long storage_bytes = 0;
    unsigned int bx = 0, by = 0, bz = 0;
};
thread_local SplitState split_state;

kd_host_split* split_begin(const kd_host_index* ix, unsigned long long storage_bytes, const kd_host_split_site* sites,
                           unsigned int predicates) {
    SplitState& st = split_state;
    context().split = true;
    const unsigned int bx = ix->block_dim.x, by = ix->block_dim.y, bz = ix->block_dim.z, n = bx * by * bz;
    const unsigned int nwarps = (n + 31) / 32;
    if (bx != st.bx || by != st.by || bz != st.bz) {
        st.tids.resize(n);
        for (unsigned int t = 0; t < n; ++t) st.tids[t] = uint3{t % bx, t / bx % by, t / bx / by};
        st.wait.resize(n);
        st.resume.resize(n);
        st.masks.resize(n);
        st.values.resize(n);
        st.warps.assign(nwarps, kd_host_warp{});
        for (unsigned int w = 0; w < nwarps; ++w) st.warps[w].existing = n - 32 * w >= 32 ? ~0u : (1u << (n - 32 * w)) - 1u;
        st.bx = bx, st.by = by, st.bz = bz;
    }
    if (storage_bytes > st.storage_bytes) {
        void* fresh = std::aligned_alloc(64, (storage_bytes + 63) & ~63ull);
        if (fresh == nullptr) {
            ThreadContext& c = context();
            c.error = format("kernel '%s' %s: out of memory for the %llu bytes its threads keep across waits",
                             kernel_name(c), block_name(ix).c_str(), storage_bytes);
            fail_launch(c, kLaunchFailed);
        }
        st.storage.reset(static_cast<char*>(fresh));
        st.storage_bytes = storage_bytes;
    }
    std::memset(st.wait.data(), KD_HOST_RUNNABLE, n);
    std::memset(st.resume.data(), 0, n * sizeof(unsigned int));
    st.view = kd_host_split{st.wait.data(), st.resume.data(), st.masks.data(), st.values.data(), st.warps.data(), st.tids.data(),
                            st.storage.get(), ix, sites, n, nwarps, 0, 0, 0, predicates, {0, 0}};
    return &st.view;
}

std::string split_where(const kd_host_split& s) {
    std::string where = format("kernel '%s' %s", kernel_name(context()), block_name(s.index).c_str());
    const uint3 dim = s.index->block_dim;
    if (dim.y > 1 || dim.z > 1) where += format(" (threads by linear id x + %u * (y + %u * z))", dim.x, dim.y);
    return where;
}

std::string split_site(const kd_host_split& s, unsigned int t) {
    const kd_host_split_site& site = s.sites[s.resume[t]];
    if (site.mode >= 0) return format("%s at %s:%d", site.name, site.file, site.line);
    return format("%s (mask 0x%08x) at %s:%d", site.name, s.masks[t], site.file, site.line);
}

[[noreturn]] void split_fail(const std::string& message) {
    ThreadContext& c = context();
    c.error = message;
    fail_launch(c, kLaunchFailed);
}

// No collective can complete: every thread that has not exited waits for one that cannot.
[[noreturn]] void split_deadlock(const kd_host_split& s) {
    WaitGroups groups;
    std::vector<unsigned int> exited;
    bool barrier_only = true;
    for (unsigned int t = 0; t < s.n; ++t) {
        if (s.wait[t] == KD_HOST_SPLIT_EXITED) {
            exited.push_back(t);
            continue;
        }
        barrier_only = barrier_only && s.wait[t] == KD_HOST_WAIT_BARRIER;
        group_waiting(groups, split_site(s, t), t);
    }
    split_fail(split_where(s) + no_progress(groups, barrier_only, exited));
}

// Completes the collective of warp `wi`'s lanes `m` and lets them run again.
void split_complete(kd_host_split& s, unsigned int wi, unsigned int m) {
    kd_host_warp& w = s.warps[wi];
    w.mask = m;
    w.op = (unsigned int)(w.operands[__builtin_ctz(m)] >> 32) & 0xffu;
    warp_results(w);
    unsigned char* const wait = s.wait + 32 * wi;
    if (m == ~0u) std::memset(wait, KD_HOST_RUNNABLE, 32);
    else for (unsigned int bits = m; bits; bits &= bits - 1) wait[__builtin_ctz(bits)] = KD_HOST_RUNNABLE;
}

// Completes the collectives of warp `wi` whose lanes all wait in them; whether any completed. The
// usual case first: a whole warp in one collective with a full mask.
bool split_warp(kd_host_split& s, unsigned int wi) {
    const unsigned int first = 32 * wi, lanes = s.n - first < 32 ? s.n - first : 32;
    const unsigned int* const masks = s.masks + first;
    const unsigned long long* const operands = s.warps[wi].operands;
    const auto op = [&](unsigned int lane) { return (unsigned int)(operands[lane] >> 32) & 0xffu; };
    if (lanes == 32) {
        unsigned long long words[4];
        std::memcpy(words, s.wait + first, sizeof words);
        const unsigned long long all_warp = 0x0101010101010101ull * KD_HOST_WAIT_WARP;
        if (words[0] == all_warp && words[1] == all_warp && words[2] == all_warp && words[3] == all_warp) {
            unsigned int partial = 0;
            unsigned long long ops = 0;
            for (unsigned int l = 0; l < 32; ++l) {
                partial |= ~masks[l];
                ops |= (operands[l] ^ operands[0]) & (0xffull << 32);
            }
            if (partial == 0 && ops == 0) {
                split_complete(s, wi, ~0u);
                return true;
            }
        }
    }
    unsigned int waiting = 0, exited = 0;
    for (unsigned int l = 0; l < lanes; ++l) {
        waiting |= (unsigned int)(s.wait[first + l] == KD_HOST_WAIT_WARP) << l;
        exited |= (unsigned int)(s.wait[first + l] == KD_HOST_SPLIT_EXITED) << l;
    }
    const unsigned int existing = s.warps[wi].existing;
    bool completed = false;
    for (unsigned int pending = waiting; pending;) {
        const unsigned int lead = (unsigned int)__builtin_ctz(pending);
        const unsigned int group = (masks[lead] & existing) | (1u << lead);
        if (group & exited) {
            const kd_host_split_site& site = s.sites[s.resume[first + lead]];
            split_fail(format("kernel '%s' %s thread %u: %s (mask 0x%08x) at %s:%d: lanes 0x%08x named in the mask "
                              "have exited",
                              kernel_name(context()), block_name(s.index).c_str(), first + lead, site.name,
                              masks[lead], site.file, site.line, group & exited));
        }
        bool same = (group & waiting) == group;
        for (unsigned int bits = group; same && bits; bits &= bits - 1) {
            const unsigned int l = (unsigned int)__builtin_ctz(bits);
            same = op(l) == op(lead) && ((masks[l] & existing) | (1u << l)) == group;
        }
        pending &= ~group;
        if (!same) continue;  // (lanes of the mask wait elsewhere: a deadlock unless they come)
        split_complete(s, wi, group);
        completed = true;
    }
    return completed;
}

// After a pass, in which every thread ran until it waits or exits: 1 when threads can run again,
// 0 when every thread has exited.
int split_resolve(kd_host_split& s) {
    const unsigned int live = s.n - s.exited;
    if (live == 0) return 0;
    const bool in_warps = std::memchr(s.wait, KD_HOST_WAIT_WARP, s.n) != nullptr;
    bool progress = false;
    if (in_warps)
        for (unsigned int wi = 0; wi < s.nwarps; ++wi) progress = split_warp(s, wi) || progress;
    if (progress) return 1;
    if (in_warps || s.exited) split_deadlock(s);  // (names who waits where, and who exited)
    // Every thread waits at a block barrier: the predicates of __syncthreads_count/_and/_or, where
    // the body has them.
    if (s.predicates) {
        unsigned int count = 0;
        for (unsigned int t = 0; t < s.n; ++t) count += s.sites[s.resume[t]].mode == 0 || s.values[t] != 0;
        for (unsigned int t = 0; t < s.n; ++t) {
            const int mode = s.sites[s.resume[t]].mode;
            s.values[t] = mode == 1 ? (int)count : mode == 2 ? (int)(count == s.n) : mode == 3 ? (int)(count != 0) : 0;
        }
    }
    std::memset(s.wait, KD_HOST_RUNNABLE, s.n);
    return 1;
}
}  // namespace

KD_EXPORT kd_host_split* kd_host_split_begin_v1(const kd_host_index* index, unsigned long long storage_bytes,
                                                const kd_host_split_site* sites, unsigned int predicates) {
    return split_begin(index, storage_bytes, sites, predicates);
}

KD_EXPORT int kd_host_split_warp_v1(kd_host_split* split, unsigned int warp) { return split_warp(*split, warp); }

KD_EXPORT int kd_host_split_resolve_v1(kd_host_split* split) { return split_resolve(*split); }

KD_EXPORT __attribute__((noreturn)) void kd_host_fail_v1(int code, const char* what, const char* detail, const char* file,
                                                         int line, const kd_host_index* ix) {
    ThreadContext& c = context();
    c.error = format("kernel '%s' %s: %s at %s:%d%s%s", kernel_name(c), thread_name(ix).c_str(), what, file ? file : "?",
                     line, detail ? ": " : "", detail ? detail : "");
    fail_launch(c, code);
}

// ---------------------------------------------------------------------------------------------
// The launch entries and the pool's settings (docs/cpu-device-abi.md).
KD_EXPORT int kd_host_launch(const void* function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int dynamic_shared, void* stream, void** params,
                             void** extra) {
    (void)stream;  // host launches are synchronous: every stream is in order with the caller
    const kd_host_function* f = descriptor(function);
    if (f == nullptr) return refuse(kInvalidValue, "not a kernel of the CPU device (no kd_host_function descriptor)");
    const unsigned int grid_dims[3] = {gx, gy, gz}, block_dims[3] = {bx, by, bz};
    if (const int rc = check(f, grid_dims, block_dims, dynamic_shared, params, extra)) return rc;
    Grid grid;
    grid.function = f;
    grid.launch = LaunchDims{{gx, gy, gz}, {bx, by, bz}, dynamic_shared, {1, 1, 1}, {}};
    grid.params = params;
    grid.total = (unsigned long long)gx * gy * gz;
    Pool::get().run(grid);
    return finish_launch(grid);
}

KD_EXPORT int kd_host_launch_ex(const void* config, const void* function, void** params, void** extra) {
    const LaunchConfig* cfg = static_cast<const LaunchConfig*>(config);
    const kd_host_function* f = descriptor(function);
    if (cfg == nullptr) return refuse(kInvalidValue, "cuLaunchKernelEx without a launch configuration");
    if (f == nullptr) return refuse(kInvalidValue, "not a kernel of the CPU device (no kd_host_function descriptor)");
    if (const int rc = check(f, cfg->grid, cfg->block, cfg->shared, params, extra)) return rc;
    bool cooperative = false;
    unsigned int cluster[3] = {1, 1, 1};
    for (unsigned int i = 0; i < cfg->nattrs; ++i) {
        const LaunchAttribute& a = cfg->attrs[i];
        if (a.id == kAttributeCooperative) cooperative = a.value.cooperative != 0;
        if (a.id == kAttributeClusterDimension) {
            cluster[0] = a.value.cluster.x ? a.value.cluster.x : 1;
            cluster[1] = a.value.cluster.y ? a.value.cluster.y : 1;
            cluster[2] = a.value.cluster.z ? a.value.cluster.z : 1;
        }
        // Other attributes are scheduling hints with no meaning for a synchronous host launch.
    }
    const unsigned long long cluster_size = (unsigned long long)cluster[0] * cluster[1] * cluster[2];
    if (cluster_size > kMaxClusterBlocks)
        return refuse(kNotSupported, format("kernel '%s': a cluster of %llu blocks; the CPU device runs at most %u", f->name,
                                            cluster_size, kMaxClusterBlocks));
    if (cfg->grid[0] % cluster[0] || cfg->grid[1] % cluster[1] || cfg->grid[2] % cluster[2])
        return refuse(kInvalidValue, format("kernel '%s': grid (%u,%u,%u) is not a multiple of cluster (%u,%u,%u)", f->name,
                                            cfg->grid[0], cfg->grid[1], cfg->grid[2], cluster[0], cluster[1], cluster[2]));
    if (cooperative && cluster_size > 1)
        return refuse(kNotSupported, format("kernel '%s': a cooperative launch with clusters", f->name));
    Grid grid;
    grid.function = f;
    grid.launch = LaunchDims{{cfg->grid[0], cfg->grid[1], cfg->grid[2]}, {cfg->block[0], cfg->block[1], cfg->block[2]},
                             cfg->shared, {cluster[0], cluster[1], cluster[2]}, {}};
    grid.params = params;
    grid.total = (unsigned long long)cfg->grid[0] * cfg->grid[1] * cfg->grid[2];
    if (cooperative) return run_cooperative(grid);
    if (cluster_size > 1) return run_clusters(grid);
    Pool::get().run(grid);
    return finish_launch(grid);
}

KD_EXPORT size_t kd_host_last_error(char* buffer, size_t size) {
    const std::string& e = context().last_error;
    if (buffer && size) {
        const size_t n = e.size() < size - 1 ? e.size() : size - 1;
        std::memcpy(buffer, e.data(), n);
        buffer[n] = '\0';
    }
    return e.size();
}

KD_EXPORT void kd_host_set_workers(int count) { Pool::get().set_workers(count); }

KD_EXPORT int kd_host_workers(void) { return Pool::get().workers(); }
