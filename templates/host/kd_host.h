// kerneldsl's CPU device shim: force-included (`-include kd_host.h`) before every rendered CUDA
// source, which the host C++ compiler then builds into a shared library that the host runtime
// (kd_host_runtime.cpp, loaded first with RTLD_GLOBAL) launches. The contract between the two,
// the compile commands and the execution model are in docs/cpu-device-abi.md.
//
// The rule for the whole file: no #include, not even of a compiler header. The prelude that
// follows typedefs int64_t as `long long`, which clashes with glibc's, and libc++'s headers drag in
// <math.h>. Whatever the shim needs of libc and libm it declares itself; the rest comes from
// compiler builtins (__builtin_*, __atomic_*), which GCC and Clang both provide.
#ifndef KD_HOST_H
#define KD_HOST_H

#ifdef __CUDA_ARCH__
#error "kd_host.h compiles CUDA sources for the host: __CUDA_ARCH__ must stay undefined"
#endif
#ifndef KD_HOST_EMULATION
#define KD_HOST_EMULATION 1
#endif
// 1: barriers and warp collectives run on fibers; 0: a block's threads are a plain loop, and a
// collective that executes anyway fails the launch. The Python side decides per source.
#ifndef KD_HOST_FIBERS
#define KD_HOST_FIBERS 1
#endif
// 1: the kernel's text has warp collectives, which read which lanes have exited, so each thread
// records its exit; 0: only block barriers, and a warp collective that executes anyway fails the
// launch. The Python side decides per source.
#ifndef KD_HOST_WARPS
#define KD_HOST_WARPS 1
#endif
// 1 (with KD_HOST_FIBERS 0): the Python side split the kernel's body at its barriers and warp
// collectives (kerneldsl/jit/host_split.py): the kernel runs once a block, as passes over the
// block's threads, each thread resuming where it waited (see "Split blocks").
#ifndef KD_HOST_SPLIT
#define KD_HOST_SPLIT 0
#endif
// Checked execution (docs/checks.md): a bit set of the checks this module runs (1 bounds, 2 races,
// 4 init, 8 sync, 16 address, 32 undefined; 0 in the usual build) and the seed of its thread
// schedule (0: threads in order). The Python side defines them with the instrumentation flags.
#ifndef KD_CHECKS
#define KD_CHECKS 0
#endif
#ifndef KD_CHECK_SEED
#define KD_CHECK_SEED 0
#endif
// 1: the kernel was built with --use_fast_math, whose accuracy CUDA's fast intrinsics bound: the
// float exp is then the shim's vectorizable one (see "The CUDA math API"). The Python side defines it.
#ifndef KD_HOST_FAST_MATH
#define KD_HOST_FAST_MATH 0
#endif
// 1: a module whose loops the compiler vectorizes (kd.ops' flat plan) calls glibc's vector math
// library, libmvec, for the float functions (see "The CUDA math API"). The Python side defines it,
// and links libmvec.so.1, where GCC targets x86-64 glibc with libmvec.
#ifndef KD_HOST_SIMD_MATH
#define KD_HOST_SIMD_MATH 0
#endif
// 0: array parameters stay raw pointers in a bounds-checked build (the Python side's fallback for a
// body that uses them in a way the checked pointer cannot follow).
#ifndef KD_CHECK_POINTERS
#define KD_CHECK_POINTERS 1
#endif
#define KD_HOST_ABI 5
#define KD_HOST_MAGIC 0x4644484bu

// ---------------------------------------------------------------------------------------------
// Basic types. Rule: only what NVRTC has built in (size_t, ptrdiff_t); the prelude brings the
// fixed-width names.
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;

// ---------------------------------------------------------------------------------------------
// CUDA's declaration keywords. Rule: each becomes its host meaning or nothing. `__shared__` is
// one instance per OS thread, which runs one block at a time (its fibers share it).
#define __global__
#define __device__
#define __host__
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __grid_constant__
#define __constant__
#define __managed__
#define __shared__ static thread_local
// `extern __shared__ T x[];` cannot be thread_local: the Python side rewrites it to this. The
// buffer is the OS thread's, never moves (so a namespace-scope pointer stays right) and holds at
// least the launch's dynamic_shared bytes, 128-byte aligned.
// (A checked build makes it a stateless object that converts to the buffer's address: a thread-local
// pointer would look like shared memory, written by an earlier block, to the init check.)
#if KD_CHECKS
#define KD_DYNAMIC_SHARED(T, x) [[maybe_unused]] static const kd_host::dynamic_shared<T> x{}
#else
#define KD_DYNAMIC_SHARED(T, x) static thread_local T* const x = reinterpret_cast<T*>(kd_host_dynamic_shared_v1())
#endif

// ---------------------------------------------------------------------------------------------
// Vector types and dim3. Rule: CUDA's layouts and alignments (vector_types.h), make_* helpers.
#define KD_HOST_VEC1(T, N, A) \
    struct __attribute__((aligned(A))) N##1 { T x; }; \
    __forceinline__ constexpr N##1 make_##N##1(T x) { return N##1{x}; }
#define KD_HOST_VEC2(T, N, A) \
    struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    __forceinline__ constexpr N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define KD_HOST_VEC3(T, N, A) \
    struct __attribute__((aligned(A))) N##3 { T x, y, z; }; \
    __forceinline__ constexpr N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define KD_HOST_VEC4(T, N, A) \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    __forceinline__ constexpr N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define KD_HOST_VECS(T, N, A1, A2, A3, A4) KD_HOST_VEC1(T, N, A1) KD_HOST_VEC2(T, N, A2) KD_HOST_VEC3(T, N, A3) KD_HOST_VEC4(T, N, A4)
KD_HOST_VECS(signed char, char, 1, 2, 1, 4)
KD_HOST_VECS(unsigned char, uchar, 1, 2, 1, 4)
KD_HOST_VECS(short, short, 2, 4, 2, 8)
KD_HOST_VECS(unsigned short, ushort, 2, 4, 2, 8)
KD_HOST_VECS(int, int, 4, 8, 4, 16)
KD_HOST_VECS(unsigned int, uint, 4, 8, 4, 16)
KD_HOST_VECS(long, long, sizeof(long), 2 * sizeof(long), sizeof(long), 16)
KD_HOST_VECS(unsigned long, ulong, sizeof(long), 2 * sizeof(long), sizeof(long), 16)
KD_HOST_VECS(long long, longlong, 8, 16, 8, 16)
KD_HOST_VECS(unsigned long long, ulonglong, 8, 16, 8, 16)
KD_HOST_VECS(float, float, 4, 8, 4, 16)
KD_HOST_VECS(double, double, 8, 16, 8, 16)
#undef KD_HOST_VECS
#undef KD_HOST_VEC1
#undef KD_HOST_VEC2
#undef KD_HOST_VEC3
#undef KD_HOST_VEC4
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---------------------------------------------------------------------------------------------
// The ABI shared with the runtime (kd_host_runtime.cpp keeps an identical copy). Rule: C layout,
// and every runtime entry point carries the ABI version in its name.
struct kd_host_launch {  // filled by the runtime per launch
    unsigned int grid[3], block[3];
    unsigned int dynamic_shared;  // bytes of `extern __shared__` memory per block
    unsigned int cluster[3];      // thread block cluster dimensions (1, 1, 1 without clusters)
    void* reserved[2];
};
struct kd_host_function {  // exported by each kernel module as kd_host_fn_<entry>
    unsigned int magic;    // KD_HOST_MAGIC
    unsigned int abi;      // KD_HOST_ABI
    const char* name;      // the entry name, for errors
    int (*run_blocks)(const kd_host_launch* launch, void** params, unsigned long long first_block,
                      unsigned long long end_block);
    unsigned int flags;    // bit 0: fibers
    unsigned int nparams;  // how many parameters the kernel takes
};
// Fibers: a suspended thread of execution is where its stack and code resume and its frame
// pointer. The runtime keeps a block's threads and warps in these records and the block's
// scheduling state in kd_host_block, so that the common cases run inline in the module: a barrier
// or a collective (wait, switch to the next runnable thread), and a thread's start and finish (the
// module's chain runs the block's threads one after another on a stack, the kernel inlined). The
// rest (the last to arrive, arming the starter, the block's end, errors) calls the runtime.
struct kd_host_context { void* sp; void* pc; void* fp; };
enum { KD_HOST_RUNNABLE, KD_HOST_WAIT_BARRIER, KD_HOST_WAIT_WARP, KD_HOST_WAIT_PENDING };
// Where a thread that waits inline waits, for the runtime's errors. Rule: an optimized GCC build
// on x86-64 (KD_HOST_SITES) records each inline wait once, at compile time: its switch's resume
// address, file, line and kind, in the module's section kd_host_sites, which kd_host_sites_v1
// spans; the runtime looks a waiting thread's resume address up there, so a wait writes nothing.
// Other builds write the thread's record (file, line, wait) at each wait, as the runtime does for
// the waits it runs.
struct kd_host_site {
    const void* resume;
    const char* file;
    int line;
    unsigned int wait;
};
#if defined(__x86_64__) && defined(__ELF__) && defined(__OPTIMIZE__) && defined(__GNUC__) && !defined(__clang__)
#define KD_HOST_SITES 1
#else
#define KD_HOST_SITES 0
#endif
struct kd_host_warp;
struct alignas(64) kd_host_fiber {  // a thread of the running block
    kd_host_context context;  // while it waits
    uint3 tid;
    unsigned int linear;  // x + blockDim.x * (y + blockDim.y * z)
    kd_host_warp* warp;
    const char* file;  // where it waits, for errors
    int line;
    unsigned char wait, op, reserved[2];  // (an inline wait writes line to reserved in one store)
};
struct __attribute__((aligned(16))) kd_host_word { unsigned long long lo, hi; };  // a collective's value
struct kd_host_warp {  // the collective in flight in a warp
    unsigned int existing, exited, arrived, mask, pending, op;  // lane masks; the operation
    unsigned long long operands[32];                            // each lane's b | control << 32
    kd_host_word in[32], out[32];                               // each lane's value and result
};
struct kd_host_block {  // the running block's scheduling state
    kd_host_fiber* next;    // the thread at the head of the ring, or null when none is runnable
    kd_host_fiber* fibers;  // by linear thread id
    kd_host_warp* warps;
    kd_host_fiber** ring;     // runnable threads in FIFO order: [head, tail) under ring_mask, then a null
    kd_host_fiber** waiters;  // threads waiting at the block barrier, in arrival order: [0, arrived)
    unsigned int head, tail, ring_mask;
    unsigned int arrived, n;  // threads waiting at the block barrier; threads in the block
    kd_host_context start;    // the starter: switched to, it starts the next thread on a fresh stack (pc null: none)
    void* args;               // the kernel's parameters, as the module's trampoline unpacked them
    void* const* tops;        // where the starter's code enters on each of the block's stacks, in the order it takes them
    unsigned int next_start;  // how many of the block's threads have started (the next one's linear id, in a chain)
    unsigned int arms, ntops;  // stacks the starter has taken in this block; entries in tops
    unsigned int reserved;
};
// The running CUDA thread. Fiber mode: the runtime's, one per OS thread (initial-exec TLS, two
// instructions from any module), whose `fiber` it and the inline paths write at every switch
// (threadIdx is the record's; `thread` is written too where the checks read it). Loop mode: the
// module's own, which its loop writes (see "Thread and block indices").
// The running block's own shared memory ([shared, + shared_bytes): its module's thread-locals
// on this OS thread; [dynamic_shared, + dynamic_shared_bytes): the launch's dynamic shared bytes),
// which the module's trampoline writes before its blocks run: an atomic there is a plain
// read-modify-write (see "Atomics"). Empty where another OS thread may touch it (a cluster).
struct kd_host_index {
    uint3 thread, block, block_dim, grid_dim, cluster_dim;
    kd_host_block* scheduler;  // fiber mode: the running block's state,
    kd_host_fiber* fiber;      // and the running thread's record
    unsigned long long shared, shared_bytes, dynamic_shared, dynamic_shared_bytes;
};
// A split block (KD_HOST_SPLIT): the kernel runs passes over the block's threads, warp by warp; a
// thread runs from where it waits until it reaches a barrier or warp collective (its site: a
// number, the index of the module's table) or exits; the runtime completes what every thread it
// names has reached, a warp's collective as soon as the warp's lanes have run.
enum { KD_HOST_SPLIT_EXITED = 8 };  // a wait[] value beside KD_HOST_RUNNABLE and the waits
struct kd_host_split_site {  // a wait in the body, for errors
    const char* name;
    const char* file;
    int line;
    int mode;  // a block barrier's (0: __syncthreads, 1 _count, 2 _and, 3 _or); -1: a warp collective
};
struct kd_host_split {
    unsigned char* wait;          // by linear thread id: KD_HOST_RUNNABLE, a wait, or KD_HOST_SPLIT_EXITED
    unsigned int* resume;         // the site where each thread resumes (0: the start of the body)
    unsigned int* masks;          // a thread's warp collective's mask (its operation: warps[].operands)
    int* values;                  // a thread's barrier predicate, then the barrier's result
    kd_host_warp* warps;          // by warp: its lanes' values and results
    const uint3* tids;            // each thread's threadIdx
    char* storage;                // the columns of the variables that live across a wait
    const kd_host_index* index;   // the module's, for errors
    const kd_host_split_site* sites;
    unsigned int n, nwarps, running, exited;  // threads; warps; the thread running; threads that exited
    unsigned int recording;                   // 1 from a thread's arrival at a wait until its call records
    unsigned int predicates, reserved[2];     // whether the body has __syncthreads_count/_and/_or
};
// Warp collectives: the operation in the low byte of `control`, PTX's shfl `c` operand above it.
enum {
    KD_HOST_WARP_SYNC, KD_HOST_SHFL_IDX, KD_HOST_SHFL_UP, KD_HOST_SHFL_DOWN, KD_HOST_SHFL_BFLY,
    KD_HOST_VOTE_ANY, KD_HOST_VOTE_ALL, KD_HOST_VOTE_UNI, KD_HOST_VOTE_BALLOT, KD_HOST_MATCH_ANY,
    KD_HOST_MATCH_ALL, KD_HOST_REDUCE_ADD, KD_HOST_REDUCE_MIN_U, KD_HOST_REDUCE_MIN_S,
    KD_HOST_REDUCE_MAX_U, KD_HOST_REDUCE_MAX_S, KD_HOST_REDUCE_AND, KD_HOST_REDUCE_OR, KD_HOST_REDUCE_XOR
};
// The runtime asserts the same: its copy of these structures cannot drift from this one.
static_assert(sizeof(kd_host_launch) == 56 && sizeof(kd_host_function) == 32 && sizeof(kd_host_context) == 24 &&
                  sizeof(kd_host_fiber) == 64 && sizeof(kd_host_warp) == 1312 && sizeof(kd_host_block) == 120 &&
                  sizeof(kd_host_index) == 112 && __builtin_offsetof(kd_host_index, scheduler) == 64,
              "the host ABI's layout (KD_HOST_ABI 5)");
static_assert(sizeof(kd_host_split_site) == 24 && sizeof(kd_host_split) == 104,
              "the host ABI's layout (KD_HOST_ABI 5)");
static_assert(sizeof(kd_host_site) == 24, "the host ABI's layout (KD_HOST_ABI 5)");
// Suspends into *from and resumes *to. Every register but the stack and frame pointers (which the
// context holds) is declared clobbered, so the compiler keeps only what is live, and nothing is
// written to the stack (a leaf kernel may keep locals below its stack pointer).
#if defined(__x86_64__)
#ifdef __AVX512F__
#define KD_HOST_CLOBBERS_AVX512 , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", \
    "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"
#else
#define KD_HOST_CLOBBERS_AVX512
#endif
#define KD_HOST_CLOBBERS \
    "rax", "rbx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc", "xmm0", "xmm1", "xmm2", \
        "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", \
        "xmm15" KD_HOST_CLOBBERS_AVX512
#define KD_HOST_SWITCH_ASM \
    "leaq 1f(%%rip), %%rax\n\tmovq %%rsp, (%%rdx)\n\tmovq %%rax, 8(%%rdx)\n\tmovq %%rbp, 16(%%rdx)\n\t" \
    "movq 16(%%rsi), %%rbp\n\tmovq (%%rsi), %%rsp\n\tjmpq *8(%%rsi)\n1:"
__forceinline__ void kd_host_switch(kd_host_context* from, const kd_host_context* to) {
    __asm__ __volatile__(KD_HOST_SWITCH_ASM : "+d"(from), "+S"(to) : : "rcx", "rdi", KD_HOST_CLOBBERS);
}
// Resumes *to, abandoning this thread of execution (`to` in a fixed register: one the compiler
// picked could be %rbp, which the first move overwrites).
[[noreturn]] __forceinline__ void kd_host_jump(const kd_host_context* to) {
    __asm__ __volatile__("movq 16(%0), %%rbp\n\tmovq (%0), %%rsp\n\tjmpq *8(%0)" : : "d"(to) : "memory");
    __builtin_unreachable();
}
#if KD_HOST_SITES
// The switch of a thread that waits inline, its site recorded (see kd_host_site).
template <unsigned char Wait>
__forceinline__ void kd_host_switch_at(kd_host_context* from, const kd_host_context* to, const char* file, int line) {
    __asm__ __volatile__(
        KD_HOST_SWITCH_ASM "\n\t.pushsection kd_host_sites,\"aw\"\n\t.balign 8\n\t.quad 1b, %c2\n\t.long %c3, %c4\n\t"
        ".popsection"
        : "+d"(from), "+S"(to)
        : "i"(file), "i"(line), "i"(Wait)
        : "rcx", "rdi", KD_HOST_CLOBBERS);
}
#endif
#elif defined(__aarch64__)
#if defined(__APPLE__)
#define KD_HOST_X18  // the platform register: never touched
#else
#define KD_HOST_X18 "x18",
#endif
#define KD_HOST_CLOBBERS \
    "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", KD_HOST_X18 "x19", "x20", "x21", "x22", "x23", \
        "x24", "x25", "x26", "x27", "x28", "x30", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", \
        "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", \
        "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31"
__forceinline__ void kd_host_switch(kd_host_context* from, const kd_host_context* to) {
    register kd_host_context* x0 __asm__("x0") = from;
    register const kd_host_context* x1 __asm__("x1") = to;
    __asm__ __volatile__(
        "adr x9, 1f\n\tmov x10, sp\n\tstp x10, x9, [x0]\n\tstr x29, [x0, #16]\n\t"
        "ldr x29, [x1, #16]\n\tldp x10, x9, [x1]\n\tmov sp, x10\n\tbr x9\n1:"
        : "+r"(x0), "+r"(x1)
        :
        : "x2", "x3", "x4", "x5", "x6", "x7", "x8", KD_HOST_CLOBBERS);
}
[[noreturn]] __forceinline__ void kd_host_jump(const kd_host_context* to) {
    register const kd_host_context* x1 __asm__("x1") = to;  // not x29, which the first load overwrites
    __asm__ __volatile__("ldr x29, [%0, #16]\n\tldp x10, x9, [%0]\n\tmov sp, x10\n\tbr x9" : : "r"(x1) : "x9", "x10", "memory");
    __builtin_unreachable();
}
#else
#error "kd_host.h: fibers need a context switch for this CPU (x86_64 and aarch64 have one)"
#endif

#pragma GCC visibility push(default)
extern "C" {
extern __thread kd_host_index kd_host_index_v1 __attribute__((tls_model("initial-exec")));
int kd_host_run_fibers_v1(const kd_host_launch* launch, unsigned long long first_block, unsigned long long end_block,
                          void (*entry)(void*), void (*chain)(void), void* args, void* tls_anchor);
void kd_host_chain_arm_v1(void);
void kd_host_chain_end_v1(void);
void* kd_host_cluster_map_v1(void* shared, unsigned int rank);
int kd_host_barrier_v1(int mode, int predicate, const char* file, int line);
unsigned int kd_host_warp_v1(unsigned int control, unsigned int mask, kd_host_word* value, unsigned int b,
                             const char* file, int line);
unsigned int kd_host_activemask_v1(void);
void kd_host_yield_v1(void);
void* kd_host_dynamic_shared_v1(void);
unsigned long long kd_host_thread_locals_v1(const void* inside, unsigned long long* bytes);
[[noreturn]] void kd_host_fail_v1(int code, const char* what, const char* detail, const char* file, int line,
                                  const kd_host_index* index);
void kd_host_check_begin_v1(const kd_host_launch* launch, unsigned int checks, unsigned long long seed, void* tls_anchor);
void kd_host_check_array_v1(const void* base, unsigned long long bytes, unsigned int elem, const char* name);
const unsigned int* kd_host_check_order_v1(unsigned long long seed, unsigned long long block, unsigned int n);
kd_host_split* kd_host_split_begin_v1(const kd_host_index* index, unsigned long long storage_bytes,
                                      const kd_host_split_site* sites, unsigned int predicates);
int kd_host_split_warp_v1(kd_host_split* split, unsigned int warp);
int kd_host_split_resolve_v1(kd_host_split* split);
[[noreturn]] void kd_host_bounds_fail_v1(const char* name, long long index, unsigned long long extent, const long long* dims,
                                         unsigned int ndim, const kd_host_index* thread);
}
#pragma GCC visibility pop

// ---------------------------------------------------------------------------------------------
// Thread and block indices. Rule: read-only views of the kd_host_index that holds the running
// CUDA thread's (fiber mode: the OS thread's, in the runtime; loop mode: the module's own, which
// its loop writes); warpSize is 32 as on every NVIDIA GPU.
#if KD_HOST_FIBERS || KD_CHECKS || KD_HOST_SPLIT
// (A checked module's loop also writes the runtime's: its checks read the running thread there;
// a split block's too: a trap names the thread that made it.)
#define kd_host_ix kd_host_index_v1
#else
// Loop mode: the module's own copy, written by its loop; the compiler keeps it in registers.
static thread_local kd_host_index kd_host_ix;
#endif
#if (KD_CHECKS & (2 | 4)) && (defined(__x86_64__) || defined(__aarch64__))
// Under the race and init instrumentation the indices are read with inline assembly, which the
// instrumentation does not see: they are the runtime's, never shared memory, and read often.
namespace kd_host {
__forceinline__ unsigned int peek(const unsigned int& v) {
    unsigned int r;
#if defined(__x86_64__)
    __asm__("movl %1, %0" : "=r"(r) : "m"(v));
#else
    __asm__("ldr %w0, %1" : "=r"(r) : "m"(v));
#endif
    return r;
}
__forceinline__ uint3 peek(const uint3& v) { return uint3{peek(v.x), peek(v.y), peek(v.z)}; }
// The loop's writes of the indices, likewise unseen (else three calls into the checks a thread).
__forceinline__ void poke(unsigned int& v, unsigned int x) {
#if defined(__x86_64__)
    __asm__ __volatile__("movl %1, %0" : "=m"(v) : "r"(x));
#else
    __asm__ __volatile__("str %w1, %0" : "=m"(v) : "r"(x));
#endif
}
__forceinline__ void set_index(uint3& field, const uint3& v) {
    poke(field.x, v.x);
    poke(field.y, v.y);
    poke(field.z, v.z);
}
}  // namespace kd_host
#define threadIdx (kd_host::peek(kd_host_ix.thread))
#define blockIdx (kd_host::peek(kd_host_ix.block))
#define blockDim (kd_host::peek(kd_host_ix.block_dim))
#define gridDim (kd_host::peek(kd_host_ix.grid_dim))
#else
namespace kd_host {
__forceinline__ void set_index(uint3& field, const uint3& v) { field = v; }
}  // namespace kd_host
#if KD_HOST_FIBERS && !KD_CHECKS && !KD_CHECK_SEED
#define threadIdx (static_cast<const uint3&>(kd_host_ix.fiber->tid))  // (a switch writes one pointer)
#else
#define threadIdx (static_cast<const uint3&>(kd_host_ix.thread))
#endif
#define blockIdx (static_cast<const uint3&>(kd_host_ix.block))
#define blockDim (static_cast<const uint3&>(kd_host_ix.block_dim))
#define gridDim (static_cast<const uint3&>(kd_host_ix.grid_dim))
#endif
#define warpSize 32

// ---------------------------------------------------------------------------------------------
// A little of <type_traits> and <utility>. Rule: only what the shim's own overloads need.
namespace kd_host {
template <bool B, class T = int> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class T> struct is_integral { static constexpr bool value = false; };
template <class T> struct is_floating { static constexpr bool value = false; };
#define KD_HOST_TRAIT(trait, T) template <> struct trait<T> { static constexpr bool value = true; };
KD_HOST_TRAIT(is_integral, bool)
KD_HOST_TRAIT(is_integral, char)
KD_HOST_TRAIT(is_integral, signed char)
KD_HOST_TRAIT(is_integral, unsigned char)
KD_HOST_TRAIT(is_integral, short)
KD_HOST_TRAIT(is_integral, unsigned short)
KD_HOST_TRAIT(is_integral, int)
KD_HOST_TRAIT(is_integral, unsigned int)
KD_HOST_TRAIT(is_integral, long)
KD_HOST_TRAIT(is_integral, unsigned long)
KD_HOST_TRAIT(is_integral, long long)
KD_HOST_TRAIT(is_integral, unsigned long long)
KD_HOST_TRAIT(is_floating, float)
KD_HOST_TRAIT(is_floating, double)
#undef KD_HOST_TRAIT
template <class T> struct is_arithmetic { static constexpr bool value = is_integral<T>::value || is_floating<T>::value; };
template <class A, class B> using if_arithmetic =
    typename enable_if<is_arithmetic<A>::value && is_arithmetic<B>::value, int>::type;
template <class T> using if_integral = typename enable_if<is_integral<T>::value, int>::type;
template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> { typedef seq<I...> type; };
template <class To, class From> __forceinline__ constexpr To bit_cast(const From& v) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
    return __builtin_bit_cast(To, v);
}
template <class T> __forceinline__ constexpr unsigned long long bits64(const T& v) {  // a 4- or 8-byte value's bits
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "a match takes 32- or 64-bit values");
    if constexpr (sizeof(T) == 4) return bit_cast<unsigned int>(v);
    else return bit_cast<unsigned long long>(v);
}
// N values of T as `count` native vectors of `width` lanes (GCC's vector extension, which Clang
// shares), for the host templates' folds that the compiler's vectorizer would leave in memory.
// Native: a wider generic vector is lowered lane by lane where its comparisons are concerned; and
// 32 bytes with AVX-512 too, the width GCC and Clang vectorize loops at there, so that a vector
// read from what such a loop stored is forwarded from its stores.
#if defined(__AVX__)
constexpr int vector_bytes = 32;
#else
constexpr int vector_bytes = 16;
#endif
template <class T, int N> struct simd {
    static constexpr int bytes = (int)sizeof(T) * N < vector_bytes ? (int)sizeof(T) * N : vector_bytes;
    typedef T type __attribute__((vector_size(bytes)));
    typedef decltype(type{} < type{}) mask;  // a comparison's lanes: all ones or zero
    static constexpr int width = bytes / (int)sizeof(T), count = N / width;
};
// Whether any lane of a comparison's result is set.
template <class M> __forceinline__ bool any(M m) {
#if defined(__AVX2__)
    typedef char bytes32 __attribute__((vector_size(32)));
    if constexpr (sizeof(M) == 32) return __builtin_ia32_pmovmskb256((bytes32)m) != 0;
#endif
#if defined(__SSE2__)
    typedef char bytes16 __attribute__((vector_size(16)));
    if constexpr (sizeof(M) == 16) return __builtin_ia32_pmovmskb128((bytes16)m) != 0;
#endif
    unsigned long long words[sizeof(M) / 8], all = 0;
    __builtin_memcpy(words, &m, sizeof m);
    for (unsigned int i = 0; i < sizeof(M) / 8; ++i) all |= words[i];
    return all != 0;
}
}  // namespace kd_host

// ---------------------------------------------------------------------------------------------
// Split blocks. Rule: a split kernel (KD_HOST_SPLIT) runs once a block: passes over the block's
// threads, warp by warp in linear order, each runnable thread resuming at its `resume` site with
// the variables that live across waits in per-thread columns, until it reaches a barrier or warp
// collective or exits. A barrier statement is two stores. A collective's call runs once, to
// record what the thread brings, then the thread waits; once the runtime has completed it (when
// the warp's lanes have run, or the block's threads all wait), the thread's statement runs with
// the call's result in its place (split_result, split_barrier_result). Threads never switch stacks.
#if KD_HOST_SPLIT
namespace kd_host {
static thread_local kd_host_split* split_running;
template <class T> struct split_slot { typedef T type; };
template <class T> struct split_slot<const T> { typedef typename split_slot<T>::type type; };
template <class T> struct split_slot<volatile T> { typedef typename split_slot<T>::type type; };
template <class T, unsigned long long N> struct split_slot<T[N]> { typedef typename split_slot<T>::type type[N]; };
// A variable's slot type: its declared type without top-level const (the statement assigns it).
template <class T> using split_slot_t = typename split_slot<T>::type;
// Bytes of one column of `n` slots, 64-byte aligned (a column never shares a line with the next).
template <class T> constexpr unsigned long long split_bytes(unsigned long long n) {
    return (sizeof(split_slot_t<T>) * n + 63) & ~63ull;
}
template <class... T> __forceinline__ unsigned long long split_storage(unsigned long long n) {
    return (0ull + ... + split_bytes<T>(n));
}
__forceinline__ kd_host_split* split_begin(unsigned long long storage_bytes, const kd_host_split_site* sites,
                                           unsigned int predicates) {
    kd_host_split* const s = kd_host_split_begin_v1(&kd_host_ix, storage_bytes, sites, predicates);
    split_running = s;
    return s;
}
template <class T> __forceinline__ split_slot_t<T>* split_column(kd_host_split* s, unsigned long long& at) {
    split_slot_t<T>* const column = reinterpret_cast<split_slot_t<T>*>(s->storage + at);
    at += split_bytes<T>(s->n);
    return column;
}
__forceinline__ void split_enter(kd_host_split* s, unsigned int t) {
    set_index(kd_host_ix.thread, s->tids[t]);
    s->running = t;
}
// Thread t reaches the wait `site`: the call that follows records what it brings.
__forceinline__ void split_arrive(kd_host_split* s, unsigned int t, unsigned int site) {
    s->resume[t] = site;
    s->recording = 1;
}
// A collective call records once, right after its thread arrives: any other (a second in one
// statement, or one the splitter did not see) fails the launch rather than run past a wait.
__forceinline__ void split_record(kd_host_split* s, const char* file, int line) {
    if (__builtin_expect(!s->recording, 0))
        kd_host_fail_v1(719, "a barrier or warp collective",
                        "a split kernel made a collective call it did not expect (a second in one statement?)", file,
                        line, &kd_host_ix);
    s->recording = 0;
}
// What thread t's completed barrier gives its statement in place of the call (never made again;
// a warp collective's: split_result, below).
__forceinline__ int split_barrier_result(kd_host_split* s, unsigned int t) { return s->values[t]; }
// After warp w's lanes ran: whether a collective of theirs completed (they can run again).
__forceinline__ bool split_warp_ready(kd_host_split* s, unsigned int w) {
    return kd_host_split_warp_v1(s, w) != 0;
}
__forceinline__ void split_exit(kd_host_split* s, unsigned int t) {
    s->wait[t] = KD_HOST_SPLIT_EXITED;
    ++s->exited;
}
__forceinline__ int split_barrier(int predicate, const char* file, int line) {
    kd_host_split* const s = split_running;
    split_record(s, file, line);
    s->values[s->running] = predicate;
    s->wait[s->running] = KD_HOST_WAIT_BARRIER;
    return 0;
}
__forceinline__ kd_host_word split_warp(unsigned int control, unsigned int mask, kd_host_word value, unsigned int b,
                                        const char* file, int line) {
    kd_host_split* const s = split_running;
    const unsigned int t = s->running, lane = t & 31u;
    kd_host_warp& w = s->warps[t >> 5];
    split_record(s, file, line);
    w.in[lane] = value;
    w.operands[lane] = b | (unsigned long long)control << 32;
    s->masks[t] = mask;
    s->wait[t] = KD_HOST_WAIT_WARP;
    return value;
}
}  // namespace kd_host
#endif

// ---------------------------------------------------------------------------------------------
// Barriers and warp collectives. Rule: in fiber mode a thread that waits switches directly to the
// next runnable thread of its block, inline in the kernel in the common case and through the
// runtime otherwise; the call site's file and line (default arguments, so the prelude's overloads
// keep their signatures) name where threads wait in errors. In loop mode each fails the launch.
#if KD_HOST_FIBERS
#define KD_HOST_COLLECTIVE(name, call) call
#else
#define KD_HOST_COLLECTIVE(name, call) \
    (kd_host_fail_v1(719, name, "the module was compiled without fibers (KD_HOST_FIBERS=0)", file, line, &kd_host_ix), call)
#endif
// A warp collective in a module built without them (KD_HOST_WARPS=0) fails the launch.
#define KD_HOST_WITHOUT_WARPS(name) \
    kd_host_fail_v1(719, name, "the module was compiled without warp collectives (KD_HOST_WARPS=0)", file, line, &kd_host_ix)
#define KD_HOST_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()
namespace kd_host {
// The index's address, computed afresh at each use in the fiber paths: the compiler cannot keep
// it in the one register a switch restores from the context (%rbp), whose load would chain each
// thread's bookkeeping to the one before.
__forceinline__ kd_host_index& fresh_index() {
#if defined(__x86_64__) && defined(__ELF__) && !(KD_CHECKS & (2 | 4))
    kd_host_index* p;
    __asm__ __volatile__("movq %%fs:0, %0\n\taddq kd_host_index_v1@gottpoff(%%rip), %0" : "=r"(p));
    return *p;
#elif defined(__aarch64__) && defined(__ELF__) && !(KD_CHECKS & (2 | 4))
    kd_host_index* p;
    unsigned long long offset;
    __asm__ __volatile__("mrs %0, tpidr_el0\n\tadrp %1, :gottprel:kd_host_index_v1\n\t"
                         "ldr %1, [%1, #:gottprel_lo12:kd_host_index_v1]\n\tadd %0, %0, %1"
                         : "=&r"(p), "=r"(offset));
    return *p;
#else
    return kd_host_ix;
#endif
}
// Makes `f` the running thread, as the kernel and the inline paths see it.
__forceinline__ void select(kd_host_fiber* f) {
#if KD_CHECKS || KD_CHECK_SEED
    kd_host_ix.thread = f->tid;  // (the checks read the running thread there)
#endif
    kd_host_ix.fiber = f;
}
// Takes the thread at the head of the ring of runnable threads (`next`: s->next, not null) off it
// and makes it the running one. The entry after the ring's last is null (the runtime's rule), so
// the new head is read without a comparison with the tail.
__forceinline__ kd_host_fiber* pop_next(kd_host_block* s, kd_host_fiber* next) {
    const unsigned int head = s->head + 1;
    s->head = head;
    s->next = s->ring[head & s->ring_mask];
    select(next);
    return next;
}
#if KD_HOST_FIBERS
// Whether a waiting thread can switch away inline: a thread is runnable (`next`, the block's
// s->next, read before the waiting thread's stores), or the starter is armed.
__forceinline__ bool can_switch(const kd_host_block* s, const kd_host_fiber* next) {
    return next != nullptr || s->start.pc != nullptr;
}
// `me`, waiting (`Wait`) at file:line, switches to `to`: the site recorded (see kd_host_site).
template <unsigned char Wait>
__forceinline__ void switch_waiting(kd_host_fiber* me, const kd_host_context* to, const char* file, int line) {
#if KD_HOST_SITES
    kd_host_switch_at<Wait>(&me->context, to, file, line);
#else
    me->file = file;  // (constants: the compiler merges the line, the kind and the rest into one store)
    me->line = line;
    me->wait = Wait;
    me->op = 0;
    me->reserved[0] = me->reserved[1] = 0;
    kd_host_switch(&me->context, to);
#endif
}
// The waiting thread `me` switches to the next runnable thread of its block (`next`), or else to
// the starter, which starts the next thread (and makes it the running one).
template <unsigned char Wait>
__forceinline__ void switch_to_next(kd_host_block* s, kd_host_fiber* me, kd_host_fiber* next, const char* file, int line) {
    if (next == nullptr) {
        switch_waiting<Wait>(me, &s->start, file, line);
        return;
    }
    switch_waiting<Wait>(me, &pop_next(s, next)->context, file, line);
}
// __syncthreads: inline while this thread waits and another can run; the runtime otherwise.
__forceinline__ void barrier(const char* file, int line) {
    kd_host_index& ix = fresh_index();
    kd_host_block* const s = ix.scheduler;
    const unsigned int arrived = s->arrived;
    kd_host_fiber* const next = s->next;
    // (Under AddressSanitizer, or the race and init instrumentation, every switch goes through the
    // runtime: it annotates switches for ASan, and its bookkeeping is not instrumented.)
    if (__builtin_expect(!(KD_CHECKS & (2 | 4 | 16)) && arrived + 1 < s->n && can_switch(s, next), 1)) {
        kd_host_fiber* const me = ix.fiber;
        s->waiters[arrived] = me;
        s->arrived = arrived + 1;
        switch_to_next<KD_HOST_WAIT_BARRIER>(s, me, next, file, line);
    } else {
        kd_host_barrier_v1(0, 1, file, line);
    }
}
#endif
// A warp collective: inline when this lane joins the collective in flight (or starts one)
// without completing it and another thread can run; the runtime otherwise, which also computes
// every lane's result when the last one arrives. Values travel in registers (a 16-byte word;
// `wide`: the value is over 8 bytes, so its high half is read too).
__forceinline__ kd_host_word warp(const char* name, unsigned int control, unsigned int mask, kd_host_word value,
                                  bool wide, unsigned int b, const char* file, int line) {
    (void)name;
    (void)wide;
#if KD_HOST_FIBERS && !KD_HOST_WARPS
    (void)control, (void)mask, (void)b, (void)value;
    KD_HOST_WITHOUT_WARPS(name);
#elif KD_HOST_FIBERS
    kd_host_block* const s = kd_host_ix.scheduler;
    kd_host_fiber* const me = kd_host_ix.fiber;
    kd_host_fiber* const next = s->next;
    kd_host_warp* const w = me->warp;
    const unsigned int lane = me->linear & 31u, bit = 1u << lane, op = control & 0xffu;
    const unsigned int m = mask & w->existing, arrived = w->arrived;
    if (__builtin_expect(!(KD_CHECKS & (2 | 4 | 16)) && (m & bit) != 0 && (m & w->exited) == 0 && (arrived | bit) != m &&
                             (arrived == 0 || (w->mask == m && w->op == op)) && can_switch(s, next), 1)) {
        w->in[lane].lo = value.lo;  // field by field: a whole-word copy would go through memory
        if (wide) w->in[lane].hi = value.hi;  // (a narrower value's receivers read .lo alone)
        w->operands[lane] = b | (unsigned long long)control << 32;
        w->arrived = arrived | bit;
        if (arrived == 0) {  // (a later lane's mask and operation are the same: the test above)
            w->mask = m;
            w->op = op;
        }
        switch_to_next<KD_HOST_WAIT_WARP>(s, me, next, file, line);  // (the warp holds its op and mask)
        return w->out[lane];
    }
    kd_host_word word;  // the runtime's copy: the fast path's value stays in registers
    word.lo = value.lo;
    word.hi = value.hi;
    kd_host_warp_v1(control, mask, &word, b, file, line);
    return word;
#elif KD_HOST_SPLIT
    return split_warp(control, mask, value, b, file, line);
#else
    return KD_HOST_COLLECTIVE(name, value);
#endif
}
}  // namespace kd_host
__forceinline__ void __syncthreads(KD_HOST_SITE) {
#if KD_HOST_FIBERS
    kd_host::barrier(file, line);
#elif KD_HOST_SPLIT
    kd_host::split_barrier(1, file, line);
#else
    KD_HOST_COLLECTIVE("__syncthreads", 0);
#endif
}
// A barrier that also reduces `predicate` over the block (mode 1 count, 2 and, 3 or).
#if KD_HOST_SPLIT
#define KD_HOST_PREDICATE_BARRIER(name, mode) kd_host::split_barrier(predicate, file, line)
#else
#define KD_HOST_PREDICATE_BARRIER(name, mode) KD_HOST_COLLECTIVE(name, kd_host_barrier_v1(mode, predicate, file, line))
#endif
__forceinline__ int __syncthreads_count(int predicate, KD_HOST_SITE) {
    return KD_HOST_PREDICATE_BARRIER("__syncthreads_count", 1);
}
__forceinline__ int __syncthreads_and(int predicate, KD_HOST_SITE) {
    return KD_HOST_PREDICATE_BARRIER("__syncthreads_and", 2);
}
__forceinline__ int __syncthreads_or(int predicate, KD_HOST_SITE) {
    return KD_HOST_PREDICATE_BARRIER("__syncthreads_or", 3);
}
namespace kd_host {
__forceinline__ unsigned int vote(const char* name, int op, unsigned int mask, unsigned long long v, const char* file,
                                  int line) {
    return (unsigned int)warp(name, (unsigned int)op, mask, kd_host_word{v, 0}, false, 0, file, line).lo;
}
// A value of up to 16 bytes as a word and back, in registers for the usual sizes.
template <class T> __forceinline__ kd_host_word to_word(const T& v) {
    if constexpr (sizeof(T) == 16) return __builtin_bit_cast(kd_host_word, v);
    else if constexpr (sizeof(T) == 8) return kd_host_word{__builtin_bit_cast(unsigned long long, v), 0};
    else if constexpr (sizeof(T) == 4) return kd_host_word{__builtin_bit_cast(unsigned int, v), 0};
    else if constexpr (sizeof(T) == 2) return kd_host_word{__builtin_bit_cast(unsigned short, v), 0};
    else if constexpr (sizeof(T) == 1) return kd_host_word{__builtin_bit_cast(unsigned char, v), 0};
    else {
        kd_host_word w = {0, 0};
        __builtin_memcpy(&w, &v, sizeof(T));
        return w;
    }
}
template <class T> __forceinline__ T from_word(const kd_host_word& w) {
    if constexpr (sizeof(T) == 16) return __builtin_bit_cast(T, w);
    else if constexpr (sizeof(T) == 8) return __builtin_bit_cast(T, w.lo);
    else if constexpr (sizeof(T) == 4) return __builtin_bit_cast(T, (unsigned int)w.lo);
    else if constexpr (sizeof(T) == 2) return __builtin_bit_cast(T, (unsigned short)w.lo);
    else if constexpr (sizeof(T) == 1) return __builtin_bit_cast(T, (unsigned char)w.lo);
    else {
        alignas(T) unsigned char out[sizeof(T)];
        __builtin_memcpy(out, &w, sizeof(T));
        return *reinterpret_cast<T*>(out);
    }
}
#if KD_HOST_SPLIT
// What thread t's completed warp collective gives its statement in place of the call (see "Split
// blocks").
template <class T> __forceinline__ T split_result(kd_host_split* s, unsigned int t) {
    return from_word<T>(s->warps[t >> 5].out[t & 31u]);
}
#endif
// A shuffle moves any trivially copyable value of up to 16 bytes; `c` is PTX's shfl operand:
// the segment mask (32 - width) << 8, and the clamp lane.
template <class T> __forceinline__ T shuffle(const char* name, int mode, unsigned int mask, const T& var, unsigned int b,
                                             int width, const char* file, int line) {
    static_assert(sizeof(T) <= sizeof(kd_host_word), "a warp shuffle moves at most 16 bytes on the CPU device");
    static_assert(__is_trivially_copyable(T), "a warp shuffle moves trivially copyable values");
    const unsigned int c = ((32u - (unsigned int)width) << 8) | (mode == KD_HOST_SHFL_UP ? 0u : 0x1fu);
    return from_word<T>(warp(name, (unsigned int)mode | (c << 8), mask, to_word(var), sizeof(T) > 8, b & 31u, file, line));
}
}  // namespace kd_host
__forceinline__ void __syncwarp(unsigned int mask = 0xffffffffu, KD_HOST_SITE) {
    kd_host::warp("__syncwarp", KD_HOST_WARP_SYNC, mask, kd_host_word{0, 0}, false, 0, file, line);
}
template <class T> __forceinline__ T __shfl_sync(unsigned int mask, T var, int srcLane, int width = 32, KD_HOST_SITE) {
    return kd_host::shuffle("__shfl_sync", KD_HOST_SHFL_IDX, mask, var, (unsigned int)srcLane, width, file, line);
}
template <class T> __forceinline__ T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32, KD_HOST_SITE) {
    return kd_host::shuffle("__shfl_up_sync", KD_HOST_SHFL_UP, mask, var, delta, width, file, line);
}
template <class T> __forceinline__ T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32, KD_HOST_SITE) {
    return kd_host::shuffle("__shfl_down_sync", KD_HOST_SHFL_DOWN, mask, var, delta, width, file, line);
}
template <class T> __forceinline__ T __shfl_xor_sync(unsigned int mask, T var, int laneMask, int width = 32, KD_HOST_SITE) {
    return kd_host::shuffle("__shfl_xor_sync", KD_HOST_SHFL_BFLY, mask, var, (unsigned int)laneMask, width, file, line);
}
__forceinline__ unsigned int __ballot_sync(unsigned int mask, int predicate, KD_HOST_SITE) {
    return kd_host::vote("__ballot_sync", KD_HOST_VOTE_BALLOT, mask, predicate != 0, file, line);
}
__forceinline__ int __any_sync(unsigned int mask, int predicate, KD_HOST_SITE) {
    return (int)kd_host::vote("__any_sync", KD_HOST_VOTE_ANY, mask, predicate != 0, file, line);
}
__forceinline__ int __all_sync(unsigned int mask, int predicate, KD_HOST_SITE) {
    return (int)kd_host::vote("__all_sync", KD_HOST_VOTE_ALL, mask, predicate != 0, file, line);
}
__forceinline__ int __uni_sync(unsigned int mask, int predicate, KD_HOST_SITE) {
    return (int)kd_host::vote("__uni_sync", KD_HOST_VOTE_UNI, mask, predicate != 0, file, line);
}
template <class T> __forceinline__ unsigned int __match_any_sync(unsigned int mask, T value, KD_HOST_SITE) {
    return kd_host::vote("__match_any_sync", KD_HOST_MATCH_ANY, mask, kd_host::bits64(value), file, line);
}
template <class T> __forceinline__ unsigned int __match_all_sync(unsigned int mask, T value, int* pred, KD_HOST_SITE) {
    const unsigned int all = kd_host::vote("__match_all_sync", KD_HOST_MATCH_ALL, mask, kd_host::bits64(value), file, line);
    *pred = all != 0;
    return all;
}
#define KD_HOST_REDUCE(name, T, op) \
    __forceinline__ T name(unsigned int mask, T value, KD_HOST_SITE) { \
        return (T)kd_host::vote(#name, op, mask, (unsigned int)value, file, line); \
    }
KD_HOST_REDUCE(__reduce_add_sync, unsigned int, KD_HOST_REDUCE_ADD)
KD_HOST_REDUCE(__reduce_add_sync, int, KD_HOST_REDUCE_ADD)
KD_HOST_REDUCE(__reduce_min_sync, unsigned int, KD_HOST_REDUCE_MIN_U)
KD_HOST_REDUCE(__reduce_min_sync, int, KD_HOST_REDUCE_MIN_S)
KD_HOST_REDUCE(__reduce_max_sync, unsigned int, KD_HOST_REDUCE_MAX_U)
KD_HOST_REDUCE(__reduce_max_sync, int, KD_HOST_REDUCE_MAX_S)
KD_HOST_REDUCE(__reduce_and_sync, unsigned int, KD_HOST_REDUCE_AND)
KD_HOST_REDUCE(__reduce_or_sync, unsigned int, KD_HOST_REDUCE_OR)
KD_HOST_REDUCE(__reduce_xor_sync, unsigned int, KD_HOST_REDUCE_XOR)
#undef KD_HOST_REDUCE
// The lanes of the caller's warp that have not exited (fibers cannot tell which are converged).
__forceinline__ unsigned int __activemask(KD_HOST_SITE) {
#if KD_HOST_FIBERS && !KD_HOST_WARPS
    KD_HOST_WITHOUT_WARPS("__activemask");
#elif KD_HOST_FIBERS
    (void)file, (void)line;
    return kd_host_activemask_v1();
#else
    const unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned int first = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & ~31u;
    return threads - first >= 32 ? 0xffffffffu : (1u << (threads - first)) - 1u;
#endif
}
// __nanosleep lets the other threads of the block run: a spin-wait with it makes progress.
__forceinline__ void __nanosleep(unsigned int) { kd_host_yield_v1(); }
// Thread block clusters, for templates' host branches of PTX's %cluster_ctarank and
// %cluster_nctarank, barrier.cluster.arrive + wait (every thread of every block of the cluster;
// the runtime runs a cluster's blocks at once, each on its own OS thread) and mapa (a shared
// memory address's counterpart in the block of another rank). Without clusters: rank 0 of 1.
__forceinline__ unsigned int kd_host_cluster_size() {
    return kd_host_ix.cluster_dim.x * kd_host_ix.cluster_dim.y * kd_host_ix.cluster_dim.z;
}
__forceinline__ unsigned int kd_host_cluster_rank() {
    const uint3 c = kd_host_ix.cluster_dim, b = kd_host_ix.block;
    return b.x % c.x + c.x * (b.y % c.y + c.y * (b.z % c.z));
}
__forceinline__ void kd_host_cluster_sync(KD_HOST_SITE) {
    KD_HOST_COLLECTIVE("kd_host_cluster_sync", kd_host_barrier_v1(4, 1, file, line));
}
template <class T> __forceinline__ T* kd_host_cluster_map(T* shared, unsigned int rank, KD_HOST_SITE) {
    KD_HOST_COLLECTIVE("kd_host_cluster_map", 0);  // without fibers no cluster barrier orders the access
    return (T*)kd_host_cluster_map_v1((void*)shared, rank);
}
#undef KD_HOST_COLLECTIVE
#undef KD_HOST_WITHOUT_WARPS

// ---------------------------------------------------------------------------------------------
// Atomics, fences and cache hints. Rule: sequentially consistent host atomics (on x86 the same
// instructions as relaxed ones; on weakly ordered CPUs the reductions' "fence, ticket, read the
// partials" pattern then needs nothing more); types without a native RMW use a CAS loop on their
// bits; the _block and _system spellings are the same operations. An atomic on the running
// block's own shared memory (kd_host_index's ranges) is a plain read-modify-write: only the
// block's threads touch it, they run on this OS thread, and none switches inside an atomic, so the
// plain one is exact and skips the locked instruction. (Not under the race and init checks, whose
// instrumentation tells atomics from plain accesses: there every atomic is a real one.)
#if (KD_CHECKS & (2 | 4))
#define KD_HOST_PLAIN_SHARED_ATOMICS 0
#else
#define KD_HOST_PLAIN_SHARED_ATOMICS 1
#endif
namespace kd_host {
template <class T, int N = sizeof(T)> struct word { static_assert(N == 2 || N == 4 || N == 8, "atomics take 2, 4 or 8 bytes on the CPU device"); };
template <class T> struct word<T, 2> { typedef unsigned short type; };
template <class T> struct word<T, 4> { typedef unsigned int type; };
template <class T> struct word<T, 8> { typedef unsigned long long type; };
// Whether p lies in the running block's own shared memory.
__forceinline__ bool own_shared(const void* p) {
#if KD_HOST_PLAIN_SHARED_ATOMICS
    const unsigned long long at = (unsigned long long)(__UINTPTR_TYPE__)p;
    return at - kd_host_ix.shared < kd_host_ix.shared_bytes || at - kd_host_ix.dynamic_shared < kd_host_ix.dynamic_shared_bytes;
#else
    (void)p;
    return false;
#endif
}
// Replaces *p by f(*p) and returns the old value, plainly (for the block's own shared memory).
template <class T, class F> __forceinline__ T plain_update(T* p, F f) {
    const T old = *p;
    *p = f(old);
    return old;
}
// Replaces *p by f(*p) and returns the old value: atomically (a CAS loop on T's bits), or plainly
// in the block's own shared memory.
template <class T, class F> __forceinline__ T atomic_update(T* p, F f) {
    if (own_shared(p)) return plain_update(p, f);
    typedef typename word<T>::type W;
    W* const at = reinterpret_cast<W*>(p);
    W old = __atomic_load_n(at, __ATOMIC_RELAXED);
    for (;;) {
        T value;
        __builtin_memcpy(&value, &old, sizeof(T));
        const T next = f(value);
        W want;
        __builtin_memcpy(&want, &next, sizeof(T));
        if (__atomic_compare_exchange_n(at, &old, want, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return value;
    }
}
// An integer's native RMW: `plain` in the block's own shared memory, the locked `atomic` elsewhere.
template <class T, class P, class A> __forceinline__ T integer_update(T* p, P plain, A atomic) {
    return own_shared(p) ? plain_update(p, plain) : atomic();
}
template <class T> __forceinline__ T compare_exchange(T* p, T compare, T v) {
    if (own_shared(p)) return plain_update(p, [compare, v](T a) { return a == compare ? v : a; });
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;
}
// Two's-complement arithmetic for the signed types too (CUDA's atomics wrap).
template <class T> struct unsigned_of { typedef T type; };
template <> struct unsigned_of<int> { typedef unsigned int type; };
template <> struct unsigned_of<long long> { typedef unsigned long long type; };
template <class T> __forceinline__ constexpr T wrapping_add(T a, T b) {
    typedef typename unsigned_of<T>::type U;
    return (T)((U)a + (U)b);
}
template <class T> __forceinline__ constexpr T wrapping_sub(T a, T b) {
    typedef typename unsigned_of<T>::type U;
    return (T)((U)a - (U)b);
}
template <class T> __forceinline__ constexpr T fmin_(T a, T b) { return a != a ? b : b != b ? a : a < b ? a : b; }
template <class T> __forceinline__ constexpr T fmax_(T a, T b) { return a != a ? b : b != b ? a : a > b ? a : b; }
}  // namespace kd_host
#define KD_HOST_ATOMIC_INT_OP(name, T, plain, builtin) \
    __forceinline__ T name(T* p, T v) { \
        return kd_host::integer_update(p, [v](T a) { return plain; }, [p, v] { return builtin(p, v, __ATOMIC_SEQ_CST); }); \
    }
#define KD_HOST_ATOMIC_INT(T) \
    KD_HOST_ATOMIC_INT_OP(atomicAdd, T, kd_host::wrapping_add(a, v), __atomic_fetch_add) \
    KD_HOST_ATOMIC_INT_OP(atomicSub, T, kd_host::wrapping_sub(a, v), __atomic_fetch_sub) \
    KD_HOST_ATOMIC_INT_OP(atomicExch, T, ((void)a, v), __atomic_exchange_n) \
    KD_HOST_ATOMIC_INT_OP(atomicAnd, T, (T)(a & v), __atomic_fetch_and) \
    KD_HOST_ATOMIC_INT_OP(atomicOr, T, (T)(a | v), __atomic_fetch_or) \
    KD_HOST_ATOMIC_INT_OP(atomicXor, T, (T)(a ^ v), __atomic_fetch_xor) \
    __forceinline__ T atomicMin(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return a < v ? a : v; }); } \
    __forceinline__ T atomicMax(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return a > v ? a : v; }); } \
    __forceinline__ T atomicCAS(T* p, T compare, T v) { return kd_host::compare_exchange(p, compare, v); }
KD_HOST_ATOMIC_INT(int)
KD_HOST_ATOMIC_INT(unsigned int)
KD_HOST_ATOMIC_INT(long long)
KD_HOST_ATOMIC_INT(unsigned long long)
#undef KD_HOST_ATOMIC_INT
#undef KD_HOST_ATOMIC_INT_OP
__forceinline__ unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v) {
    return kd_host::compare_exchange(p, compare, v);
}
__forceinline__ unsigned int atomicInc(unsigned int* p, unsigned int v) {
    return kd_host::atomic_update(p, [v](unsigned int a) { return a >= v ? 0u : a + 1u; });
}
__forceinline__ unsigned int atomicDec(unsigned int* p, unsigned int v) {
    return kd_host::atomic_update(p, [v](unsigned int a) { return (a == 0u || a > v) ? v : a - 1u; });
}
#define KD_HOST_ATOMIC_FLOAT(T) \
    __forceinline__ T atomicAdd(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return a + v; }); } \
    __forceinline__ T atomicSub(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return a - v; }); } \
    __forceinline__ T atomicExch(T* p, T v) { return kd_host::atomic_update(p, [v](T) { return v; }); } \
    __forceinline__ T atomicMin(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return kd_host::fmin_(a, v); }); } \
    __forceinline__ T atomicMax(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return kd_host::fmax_(a, v); }); }
KD_HOST_ATOMIC_FLOAT(float)
KD_HOST_ATOMIC_FLOAT(double)
#undef KD_HOST_ATOMIC_FLOAT
// Any other 2-, 4- or 8-byte type (the prelude's 16-bit floats, a complex64): a CAS loop.
template <class T> __forceinline__ T atomicAdd(T* p, T v) { return kd_host::atomic_update(p, [v](T a) { return (T)(a + v); }); }
template <class T> __forceinline__ T atomicExch(T* p, T v) { return kd_host::atomic_update(p, [v](T) { return v; }); }
#define KD_HOST_ATOMIC_SCOPES(name) \
    template <class... A> __forceinline__ auto name##_block(A... a) -> decltype(name(a...)) { return name(a...); } \
    template <class... A> __forceinline__ auto name##_system(A... a) -> decltype(name(a...)) { return name(a...); }
KD_HOST_ATOMIC_SCOPES(atomicAdd)
KD_HOST_ATOMIC_SCOPES(atomicSub)
KD_HOST_ATOMIC_SCOPES(atomicExch)
KD_HOST_ATOMIC_SCOPES(atomicMin)
KD_HOST_ATOMIC_SCOPES(atomicMax)
KD_HOST_ATOMIC_SCOPES(atomicInc)
KD_HOST_ATOMIC_SCOPES(atomicDec)
KD_HOST_ATOMIC_SCOPES(atomicCAS)
KD_HOST_ATOMIC_SCOPES(atomicAnd)
KD_HOST_ATOMIC_SCOPES(atomicOr)
KD_HOST_ATOMIC_SCOPES(atomicXor)
#undef KD_HOST_ATOMIC_SCOPES
// A block's threads share one OS thread: ordering them needs only the compiler's fence.
__forceinline__ void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
__forceinline__ void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__forceinline__ void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> __forceinline__ T __ldg(const T* p) { return *p; }
template <class T> __forceinline__ T __ldca(const T* p) { return *p; }
template <class T> __forceinline__ T __ldcg(const T* p) { return *p; }
template <class T> __forceinline__ T __ldcs(const T* p) { return *p; }
template <class T> __forceinline__ T __ldlu(const T* p) { return *p; }
template <class T> __forceinline__ T __ldcv(const T* p) { return *p; }
template <class T> __forceinline__ void __stwb(T* p, T v) { *p = v; }
template <class T> __forceinline__ void __stcg(T* p, T v) { *p = v; }
template <class T> __forceinline__ void __stcs(T* p, T v) { *p = v; }
template <class T> __forceinline__ void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// libc. Rule: declared, not included; the process already has libc loaded.
#pragma GCC visibility push(default)
extern "C" {
int printf(const char* format, ...);
void* malloc(size_t size) noexcept;
void free(void* p) noexcept;
void* memcpy(void* to, const void* from, size_t n) noexcept;
void* memset(void* to, int value, size_t n) noexcept;
int abs(int x) noexcept;
long labs(long x) noexcept;
long long llabs(long long x) noexcept;
int fegetround(void) noexcept;
int fesetround(int mode) noexcept;
}
#pragma GCC visibility pop

// ---------------------------------------------------------------------------------------------
// The CUDA math API. Rule: glibc's libm for what it has (its float and double functions, with
// C++ float overloads as CUDA has them and integers going to double); the CUDA-only functions
// written here from libm; the fast intrinsics (__fdividef, __logf, ...) are the accurate
// functions, except __expf, and the float exp of a --use_fast_math build (KD_HOST_FAST_MATH): a
// branch-free polynomial the compiler inlines and vectorizes, where a libm call stays scalar;
// results match the GPU up to each function's ulp bound, not bit for bit.
//
// In a SIMD-math module (KD_HOST_SIMD_MATH), a float function's vectorized loop calls libmvec's
// 8- or 16-lane variant: of the float function itself where that stays within CUDA's ulp bound with
// room to spare (KD_HOST_MATH1_VF), else of the double function, rounded to float (KD_HOST_MATH1_VD:
// libmvec's double functions are within a few double ulp, so the float result is within 0.51 ulp).
// Where a double function of libmvec is slower than NumPy's float one by more than the CUDA
// device's two cores make up (the log family, expm1, atan, pow), the loop runs a polynomial of its
// own in double instead (kd_host::simd_*: no division or square root in double, relative error below
// 1e-9, so the float result is within 0.51 ulp too, pow's 0.55); exp is the float polynomial of
// `fast_exp` (1.01 ulp from the rounded result, CUDA's bound 2); hypot, which libmvec lacks, is the
// root of the exact squares' sum in double.
// The variants are reached through names of their own (kd_host_vector_<name>, bound to libm's symbols), so
// a double function a kernel calls itself keeps libm's scalar accuracy.
// tests/test_cpu_device_simd_math.py measures the bounds.
#pragma GCC visibility push(default)
#define KD_HOST_MATH1(name) KD_HOST_MATH1_V(name, name##f(x))
#define KD_HOST_MATH1_V(name, vector_call) \
    extern "C" double name(double) noexcept; \
    KD_HOST_MATH1_FLOAT(name, vector_call)
// A double function a SIMD-math module takes from the shim (kd_host::*_double, after exp's below):
// declared here, so that the integer overloads call it; libm's elsewhere.
#if KD_HOST_SIMD_MATH
#define KD_HOST_SIMD_DOUBLE(name) __forceinline__ double name(double) noexcept;
#else
#define KD_HOST_SIMD_DOUBLE(name) extern "C" double name(double) noexcept;
#endif
#define KD_HOST_MATH1_OWN_DOUBLE(name, vector_call) KD_HOST_SIMD_DOUBLE(name) KD_HOST_MATH1_FLOAT(name, vector_call)
#define KD_HOST_MATH1_FLOAT(name, vector_call) \
    extern "C" float name##f(float) noexcept; \
    __forceinline__ float name(float x) noexcept { \
        if constexpr (KD_HOST_SIMD_MATH) return vector_call; \
        return name##f(x); \
    } \
    template <class T, kd_host::if_integral<T> = 0> __forceinline__ double name(T x) noexcept { return name((double)x); }
// The shim's own function on every path: libm's float one misses CUDA's bound (log10f: 2.03 ulp at
// 1.0180689, against 2), and a kernel's `log10f` calls are taken to it too (below).
#define KD_HOST_MATH1_OWN(name, own_call) \
    KD_HOST_SIMD_DOUBLE(name) \
    extern "C" float name##f(float) noexcept; \
    __forceinline__ float name(float x) noexcept { return own_call; } \
    template <class T, kd_host::if_integral<T> = 0> __forceinline__ double name(T x) noexcept { return name((double)x); }
#define KD_HOST_VECTOR_FLOAT(name) \
    extern "C" __attribute__((simd("notinbranch"), const)) float kd_host_vector_##name##f(float) noexcept __asm__(#name "f");
#define KD_HOST_MATH1_VF(name) KD_HOST_VECTOR_FLOAT(name) KD_HOST_MATH1_V(name, kd_host_vector_##name##f(x))
#define KD_HOST_DOUBLE_VARIANT(name) \
    extern "C" __attribute__((simd("notinbranch"), const)) double kd_host_vector_##name(double) noexcept __asm__(#name);
#define KD_HOST_MATH1_VD(name) KD_HOST_DOUBLE_VARIANT(name) KD_HOST_MATH1_V(name, (float)kd_host_vector_##name((double)x))
#define KD_HOST_MATH2(name) KD_HOST_MATH2_V(name, name##f(x, y))
#define KD_HOST_MATH2_V(name, vector_call) \
    extern "C" double name(double, double) noexcept; \
    extern "C" float name##f(float, float) noexcept; \
    __forceinline__ float name(float x, float y) noexcept { \
        if constexpr (KD_HOST_SIMD_MATH) return vector_call; \
        return name##f(x, y); \
    } \
    template <class A, class B, kd_host::if_arithmetic<A, B> = 0> __forceinline__ double name(A x, B y) noexcept { \
        return name((double)x, (double)y); \
    }
namespace kd_host {
// The own SIMD math: branch-free, so the loop vectorizes (the selects become blends); each
// polynomial's coefficients are a least-squares fit on Chebyshev nodes, lowest degree first, its
// relative error over the reduced interval noted (tests/test_cpu_device_simd_math.py measures
// the float results against CUDA's bounds).
// a * b + c, fused where the CPU has FMA (one rounding), else two roundings.
template <class T> __forceinline__ T mad(T a, T b, T c) noexcept {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
    if constexpr (sizeof(T) == 4) return __builtin_fmaf(a, b, c);
    else return __builtin_fma(a, b, c);
#else
    return a * b + c;
#endif
}
// x^H for H a power of two, by squaring.
template <int H, class T> __forceinline__ T power_of_two_power(T x) noexcept {
    if constexpr (H == 1) return x;
    else {
        const T half = power_of_two_power<H / 2>(x);
        return half * half;
    }
}
constexpr int below_power_of_two(int n) { return n <= 2 ? 1 : 2 * below_power_of_two((n + 1) / 2); }
// The polynomial c[0] + c[1] x + ... by Estrin's scheme, c[0..H) + x^H c[H..N): a chain of log2(N)
// multiply-adds instead of Horner's N, which would bound the loop by their latency.
template <int N, class T> __forceinline__ T poly(T x, const T* c) noexcept {
    if constexpr (N == 1) return c[0];
    else {
        constexpr int H = below_power_of_two(N);
        return mad(power_of_two_power<H>(x), poly<N - H>(x, c + H), poly<H>(x, c));
    }
}
// log1p(f) / f on [sqrt(1/2) - 1, sqrt(2) - 1]: 1.0e-10.
constexpr double kLog1pOverF[12] = {1.0000000000337097, -0.5000000033168731, 0.3333333157546712, -0.2499993331852619,
                                    0.2000010840792752, -0.16670483179906223, 0.14285649476426268, -0.12410622110585579,
                                    0.11019350643880381, -0.10879439985460576, 0.10741801671905496, -0.05996999234966744};
// (log1p(f) - f + f^2/2) / f^3 on [sqrt(1/2) - 1, sqrt(2) - 1], in float: 8.4e-8.
constexpr float kLogTail[9] = {0.3333333134651184f, -0.2500000298023224f, 0.20000715553760529f, -0.16667377948760986f,
                               0.1424865573644638f, -0.12434924393892288f, 0.11699074506759644f, -0.11421497166156769f,
                               0.06862342357635498f};
// (asin(t) - t) / t^3 in z = t^2 on [0, 1/4], in float: 6.0e-8.
constexpr float kAsinTail[6] = {0.1666666567325592f, 0.07500094175338745f, 0.04459947347640991f,
                                0.031099839136004448f, 0.017153000459074974f, 0.033684831112623215f};
// (expm1(r) - r) / r^2 on [-0.35, 0.35]: 2.0e-13.
constexpr double kExpm1Tail[8] = {0.49999999999951417, 0.16666666666646804, 0.041666666793558994,
                                  0.008333333354959544, 0.0013888837107333615, 0.00019841206299746702,
                                  2.4869190929191472e-05, 2.7626452203717163e-06};
// (atan(t) / t - 1) / t^2 in z = t^2 on [0, 1]: 3.2e-10.
constexpr double kAtanTail[11] = {-0.33333333298807716, 0.19999991338081674, -0.1428535203398228, 0.11105133014170818,
                                  -0.09039460931240913, 0.07427486383624089, -0.05783113716048088, 0.03863882460277054,
                                  -0.019523064643194504, 0.006329437579184222, -0.0009605419496194701};
// e^s for |s| <= ln2 / 2: the Taylor polynomial to s^8 / 8!, 1.9e-10.
constexpr double kExpTaylor[9] = {1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320};
constexpr double kLn2 = 0.69314718055994530942, kHalfPi = 1.57079632679489661923;
// k = round(x / ln2), returned, and 2^(k + M) as two powers of two whose product it is (`first`,
// `second`): k reaches 1026, where 2^k alone overflows before a product that needs it does.
template <int M> __forceinline__ double nearest_ln2_multiple(double x, double& first, double& second) noexcept {
    const double shifter = 0x1.8p52, z = x * 0x1.71547652b82fep+0 + shifter;
    const long long n = (long long)(bit_cast<unsigned long long>(z) - bit_cast<unsigned long long>(shifter)), half = n >> 1;
    first = bit_cast<double>((unsigned long long)(half + 1023) << 52);
    second = bit_cast<double>((unsigned long long)(n - half + M + 1023) << 52);
    return z - shifter;
}
// log(d) for a positive finite normal double d (log1p's 1 + x): k ln2 + log(m) with m in
// [sqrt(1/2), sqrt(2)); log(m) = log1p(f), f = m - 1. Returns k and log(m).
__forceinline__ double log_reduced(double d, double* k) noexcept {
    const unsigned long long bits = bit_cast<unsigned long long>(d), shifted = bits - 0x3fe6a09e667f3bcdull;
    const long long e = (long long)shifted >> 52;
    const double f = bit_cast<double>(bits - ((unsigned long long)e << 52)) - 1.0;
    *k = (double)e;
    return f * poly<12>(f, kLog1pOverF);
}
// In float, 16 lanes a vector: x = 2^k m, m in [sqrt(1/2), sqrt(2)) (a subnormal x scaled up by
// 2^24 first), f = m - 1 (exact), and log(m) = f - f^2/2 + f^3 Q(f). Returns k; sets f and the
// tail f^3 Q(f). (Garbage for the special values, which log_special drops.)
__forceinline__ float log_reduced_float(float x, float* f, float* tail) noexcept {
    const bool tiny = x < 0x1p-126f;
    const float y = tiny ? x * 0x1p24f : x;
    const unsigned int bits = bit_cast<unsigned int>(y), shifted = bits - 0x3f3504f3u;
    const int e = (int)shifted >> 23;
    *f = bit_cast<float>(bits - ((unsigned int)e << 23)) - 1.0f;
    *tail = *f * *f * *f * poly<9>(*f, kLogTail);
    return (float)(tiny ? e - 24 : e);
}
// A log's value r, or CUDA's special values (0 -> -inf, inf -> inf, x < 0 -> NaN), picked in
// float: a compare of 16 lanes, where double takes two.
__forceinline__ float log_special(float x, float r) noexcept {
    return x > 0.0f && x < __builtin_inff() ? r : x == 0.0f ? -__builtin_inff() : x == __builtin_inff() ? x : __builtin_nanf("");
}
// log(x) / log(base) as float, `scale` = 1 / log(base): in double only the head and the sums, the
// float tail's error is at most 0.07 of its ulps in the result.
__forceinline__ float simd_log(float x, double scale) noexcept {
    float f, tail;
    const double k = log_reduced_float(x, &f, &tail), head = f;
    const double m = mad(-0.5 * head, head, head) + (double)tail;
    return log_special(x, (float)mad(k, kLn2 * scale, m * scale));
}
// log1p(x) = log(u) + (x - (u - 1)) for u = 1 + x in double (the rounding of u, which the log misses).
__forceinline__ float simd_log1p(float x) noexcept {
    double k;
    const double d = x, u = 1.0 + d;
    const double m = log_reduced(u, &k);
    const float r = (float)(mad(k, kLn2, m) + (d - (u - 1.0)));
    return x > -1.0f && x < __builtin_inff() && x != 0.0f ? r : x == -1.0f ? -__builtin_inff() : x < -1.0f ? __builtin_nanf("") : x;
}
// asin(t) = t + t^3 P(t^2) for t in [0, 1/2], in float (the tail is under 5% of the result);
// above, pi/2 - 2 asin(s), s = sqrt((1 - t) / 2) in float (exact but for the root's rounding), the
// sum in double. acos from the same parts. NaN outside [-1, 1].
__forceinline__ double asin_parts(float t, bool* big) noexcept {
    *big = t > 0.5f;
    const float u = *big ? __builtin_sqrtf((1.0f - t) * 0.5f) : t, z = u * u;
    return (double)u + (double)(u * z * poly<6>(z, kAsinTail));
}
__forceinline__ float simd_asin(float x) noexcept {
    bool big;
    const float t = __builtin_fabsf(x);
    const double p = asin_parts(t, &big);
    const float r = (float)(big ? kHalfPi - 2.0 * p : p);
    return t <= 1.0f ? __builtin_copysignf(r, x) : x != x ? x : __builtin_nanf("");
}
__forceinline__ float simd_acos(float x) noexcept {
    bool big;
    const double p = asin_parts(__builtin_fabsf(x), &big);
    const double r = big ? (x > 0.0f ? 2.0 * p : 2.0 * kHalfPi - 2.0 * p) : kHalfPi - (x < 0.0f ? -p : p);
    return __builtin_fabsf(x) <= 1.0f ? (float)r : x != x ? x : __builtin_nanf("");
}
// expm1(x) = 2^n (expm1(r) + 1) - 1, n = rint(x / ln2), r = x - n ln2; no cancellation for n = 0.
__forceinline__ float simd_expm1(float x) noexcept {
    const double d = x < -104.0f ? -104.0 : x > 104.0f ? 104.0 : x;  // (e^104 is past float's range)
    const double n = __builtin_rint(d * 1.44269504088896340736);
    const double r = mad(-n, 1.9082149292705877e-10, mad(-n, 0.6931471803691238, d));
    const double p = mad(r * r, poly<8>(r, kExpm1Tail), r);
    const double scale = bit_cast<double>((unsigned long long)((long long)n + 1023) << 52);
    return x != x || x == 0.0f ? x : (float)mad(scale, p, scale - 1.0);  // (NaN, and zero's sign)
}
// atan(u) for u in [0, 1].
__forceinline__ double atan_unit(double u) noexcept {
    const double z = u * u;
    return mad(u * z, poly<11>(z, kAtanTail), u);
}
// atan(t) for t in [0, 1]; for t > 1, pi/2 - atan(1/t), 1/t a float division refined by a Newton step.
__forceinline__ float simd_atan(float x) noexcept {
    const float tf = __builtin_fabsf(x);
    const double t = tf, inverse = (double)(1.0f / (tf > 1.0f ? tf : 1.0f));
    const double p = atan_unit(tf > 1.0f ? inverse * mad(-t, inverse, 2.0) : t);
    const double r = tf > 1.0f ? (tf == __builtin_inff() ? kHalfPi : kHalfPi - p) : p;
    return x != x ? x : (float)__builtin_copysign(r, (double)x);
}
// atan2(y, x) = atan(u) for u = min(|x|, |y|) / max(|x|, |y|), then pi/2 - it where |y| is the
// larger, pi - it where x is negative (or -0), with y's sign: C's special values follow (0 / 0
// and inf / inf taken as u = 0 and 1, x / inf as 0). The quotient is a float division with its
// residual, exact in double, added back.
__forceinline__ float simd_atan2(float y, float x) noexcept {
    const float a = __builtin_fabsf(x), b = __builtin_fabsf(y);
    const bool swap = b > a, tiny = (swap ? b : a) < 0x1p-100f;  // (scaled up, so 1 / den stays finite)
    const float num = (swap ? a : b) * (tiny ? 0x1p100f : 1.0f), den = (swap ? b : a) * (tiny ? 0x1p100f : 1.0f);
    const float inverse = 1.0f / den;
    const double quotient = (double)num * (double)inverse;
    double u = mad(mad(-quotient, (double)den, (double)num), (double)inverse, quotient);
    u = den == 0.0f ? 0.0 : den == __builtin_inff() ? (num == __builtin_inff() ? 1.0 : 0.0) : u;
    double p = atan_unit(u);
    p = swap ? kHalfPi - p : p;
    p = __builtin_signbit(x) ? 2.0 * kHalfPi - p : p;
    return x != x || y != y ? x + y : (float)__builtin_copysign(p, (double)y);
}
// pow for floats: |x|^y = e^t, t = y log|x|, in double with no division: log(m) = f P(f) within 1e-10
// of itself (t reaching 104 needs it), and e^s for t = n ln2 + s a degree-8 Taylor polynomial
// (1.9e-10); so within 0.55 ulp of the exact power (CUDA's bound: 4; libmvec's powf,
// 3 to 6x slower here, is not taken). Then C's cases: a negative base takes an odd integer
// exponent's sign (y / 2 is exactly n + 1/2) and gives NaN for a non-integer one (but -inf:
// |x|^y), x = 1 and y = 0 give 1 whatever the other, and so does x = -1 with an infinite y; a zero
// or infinite |x| has an infinite log, which the exp takes to 0 or infinity.
__forceinline__ float simd_pow(float x, float y) noexcept {
    const double a = __builtin_fabs((double)x);
    double k;
    const double m = log_reduced(a, &k);
    double l = mad(k, kLn2, m);
    l = a == 0.0 ? -__builtin_inf() : l;
    l = a == __builtin_inf() ? a : l;
    l = a != a ? a : l;
    double t = (double)y * l;  // (clamped where e^t is already 0 or infinite)
    t = t > 89.0 ? 89.0 : t;
    t = t < -104.0 ? -104.0 : t;
    double first, second;
    const double n = nearest_ln2_multiple<0>(t, first, second);
    const double s = (t - n * 0x1.62e42fefa3800p-1) - n * 0x1.ef35793c76730p-45;  // (n ln2's first part exact)
    float r = (float)(poly<9>(s, kExpTaylor) * first * second);
    const float half = y * 0.5f;
    r = __builtin_fabsf(half - __builtin_rintf(half)) == 0.5f ? __builtin_copysignf(r, x) : r;
    float negative = __builtin_rintf(y) != y ? __builtin_nanf("") : r;
    negative = x == -__builtin_inff() ? r : negative;
    r = x < 0.0f ? negative : r;
    const float unit = __builtin_fabsf(y) == __builtin_inff() ? 1.0f : r;
    r = x == -1.0f ? unit : r;
    r = x == 1.0f ? 1.0f : r;
    return y == 0.0f ? 1.0f : r;
}
// hypot(x, y) in double: the squares are exact and the sum and the root round once each (no overflow
// or underflow there), so the float result is within 0.51 ulp; an infinite part wins over a NaN.
__forceinline__ float simd_hypot(float x, float y) noexcept {
    const float r = (float)__builtin_sqrt((double)x * x + (double)y * y);
    return __builtin_isinf(x) || __builtin_isinf(y) ? __builtin_inff() : r;
}
}  // namespace kd_host
// A SIMD-math module's double functions vectorize too, calling libmvec's double variants, where
// those stay within CUDA's bound for the function (the CUDA Math API's double-precision table:
// the distance in ulps from the correctly rounded result), measured for the AVX-512 and AVX2
// variants on every binade: atan, asinh, acosh, pow and hypot 1 ulp (bounds 2 to 3); acos and
// sinh 2, atanh 2 and log 1 (at their bounds). exp, expm1, cosh, tanh, log1p, log2, log10 and asin
// are the shim's own (below: their variants are 2 to 3 ulp off, against 1, or 2 for asin). The
// others keep libm's scalar code: their variants miss the bound (exp2 2 against 1, tan 3 against 2,
// atan2 3 against 2), and libm's sin and cos already outrun NumPy's.
// tests/test_cpu_device_simd_math.py measures the bounds.
#if KD_HOST_SIMD_MATH
#define KD_HOST_VECTOR_DOUBLE(name) extern "C" __attribute__((simd("notinbranch"), const)) double name(double) noexcept;
#define KD_HOST_VECTOR_DOUBLE2(name) \
    extern "C" __attribute__((simd("notinbranch"), const)) double name(double, double) noexcept;
KD_HOST_VECTOR_DOUBLE(atan) KD_HOST_VECTOR_DOUBLE(asinh) KD_HOST_VECTOR_DOUBLE(acosh) KD_HOST_VECTOR_DOUBLE(acos)
KD_HOST_VECTOR_DOUBLE(sinh) KD_HOST_VECTOR_DOUBLE(atanh) KD_HOST_VECTOR_DOUBLE(log) KD_HOST_VECTOR_DOUBLE2(pow)
KD_HOST_VECTOR_DOUBLE2(hypot)
#undef KD_HOST_VECTOR_DOUBLE
#undef KD_HOST_VECTOR_DOUBLE2
#endif
KD_HOST_MATH1_V(acos, kd_host::simd_acos(x)) KD_HOST_MATH1_OWN_DOUBLE(asin, kd_host::simd_asin(x))
KD_HOST_MATH1_V(atan, kd_host::simd_atan(x)) KD_HOST_MATH1_VF(acosh)
KD_HOST_MATH1_VF(asinh) KD_HOST_MATH1_VF(atanh) KD_HOST_MATH1_VD(cos) KD_HOST_MATH1_VD(sin)
KD_HOST_MATH1_VD(tan) KD_HOST_MATH1_VF(sinh)
KD_HOST_VECTOR_FLOAT(tanh) KD_HOST_MATH1_OWN_DOUBLE(tanh, kd_host_vector_tanhf(x))
KD_HOST_DOUBLE_VARIANT(cosh) KD_HOST_MATH1_OWN_DOUBLE(cosh, (float)kd_host_vector_cosh((double)x))
KD_HOST_MATH1_VF(exp2) KD_HOST_MATH1_OWN_DOUBLE(expm1, kd_host::simd_expm1(x)) KD_HOST_MATH1_V(log, kd_host::simd_log(x, 1.0))
KD_HOST_MATH1_OWN_DOUBLE(log2, kd_host::simd_log(x, 1.44269504088896340736))
KD_HOST_MATH1_OWN(log10, kd_host::simd_log(x, 0.43429448190325182765))
KD_HOST_MATH1_OWN_DOUBLE(log1p, kd_host::simd_log1p(x)) KD_HOST_MATH1(logb)
KD_HOST_MATH1(sqrt) KD_HOST_MATH1_VD(cbrt) KD_HOST_MATH1_VD(erf) KD_HOST_MATH1_VF(erfc) KD_HOST_MATH1(lgamma)
KD_HOST_MATH1(tgamma) KD_HOST_MATH1(floor) KD_HOST_MATH1(ceil) KD_HOST_MATH1(trunc) KD_HOST_MATH1(round)
KD_HOST_MATH1(rint) KD_HOST_MATH1(nearbyint) KD_HOST_MATH1(fabs) KD_HOST_MATH1(j0) KD_HOST_MATH1(j1)
KD_HOST_MATH1(y0) KD_HOST_MATH1(y1)
KD_HOST_MATH2_V(atan2, kd_host::simd_atan2(x, y)) KD_HOST_MATH2_V(pow, kd_host::simd_pow(x, y)) KD_HOST_MATH2(fmod) KD_HOST_MATH2(remainder) KD_HOST_MATH2(copysign)
KD_HOST_MATH2_V(hypot, kd_host::simd_hypot(x, y)) KD_HOST_MATH2(fmin) KD_HOST_MATH2(fmax) KD_HOST_MATH2(fdim) KD_HOST_MATH2(nextafter)
#undef KD_HOST_MATH1
#undef KD_HOST_MATH1_V
#undef KD_HOST_MATH1_VF
#undef KD_HOST_MATH1_VD
#undef KD_HOST_MATH2
#undef KD_HOST_MATH2_V
#undef KD_HOST_MATH1_OWN
#undef KD_HOST_MATH1_OWN_DOUBLE
#undef KD_HOST_SIMD_DOUBLE
#undef KD_HOST_MATH1_FLOAT
#undef KD_HOST_VECTOR_FLOAT
#undef KD_HOST_DOUBLE_VARIANT
#define log10f(x) log10((float)(x))
#if !KD_HOST_SIMD_MATH
extern "C" double exp(double) noexcept;
#endif
extern "C" float expf(float) noexcept;
#pragma GCC visibility pop
#if KD_HOST_SIMD_MATH
namespace kd_host {
// A SIMD-math module's double exp (libmvec's is 3 ulp off, against CUDA's 1), branch-free and
// without a table (GCC does not gather on every x86-64) so a loop vectorizes: x = k ln2 + s with
// |s| <= ln2 / 2 (k by the round to nearest of adding 1.5 * 2^52; ln2 in two parts, the first of
// 42 bits, so k times it is exact); exp(s) = 1 + s + s^2 h(s), h the Taylor polynomial to s^13
// (what it leaves is below 2^-55 of exp(s)), which its evaluation keeps within 1.02 ulp; 2^k as two
// powers of two, so that every result from overflow down to the denormals scales exactly (a
// denormal is rounded once more). So within 1 ulp of the correctly rounded exp, CUDA's bound; x is
// clamped where exp is already 0 or infinite, and a NaN passes through.
// tests/test_cpu_device_simd_math.py measures it.
// h(s) = (exp(s) - 1 - s) / s^2, for |s| <= ln2 / 2: the Taylor polynomial, 1/2! to 1/13!.
__forceinline__ double exp_tail(double s) noexcept {
    double h = 0x1.6124613a86d09p-33;  // 1/13!, then down to 1/2!
    h = h * s + 0x1.1eed8eff8d898p-29;
    h = h * s + 0x1.ae64567f544e4p-26;
    h = h * s + 0x1.27e4fb7789f5cp-22;
    h = h * s + 0x1.71de3a556c734p-19;
    h = h * s + 0x1.a01a01a01a01ap-16;
    h = h * s + 0x1.a01a01a01a01ap-13;
    h = h * s + 0x1.6c16c16c16c17p-10;
    h = h * s + 0x1.1111111111111p-7;
    h = h * s + 0x1.5555555555555p-5;
    h = h * s + 0x1.5555555555555p-3;
    return h * s + 0.5;
}
// e^x 2^M for M <= 0 (cosh's e^x / 2 is finite past where e^x is not).
template <int M> __forceinline__ double exp_times_power(double x) noexcept {
    x = x > 711.0 ? 711.0 : x;
    x = x < -746.0 ? -746.0 : x;
    double first, second;
    const double k = nearest_ln2_multiple<M>(x, first, second);
    const double s = (x - k * 0x1.62e42fefa3800p-1) - k * 0x1.ef35793c76730p-45;
    const double e = (s * s * exp_tail(s) + s) + 1.0;
    return e * first * second;
}
__forceinline__ double exp_double(double x) noexcept { return exp_times_power<0>(x); }
// expm1, cosh, tanh, the log family and asin of the shim's own too (libmvec's are 2 ulp off,
// against CUDA's 1): each within 1 ulp of the correctly rounded result, with every case computed
// and the right one selected (no branch), so a module's double loop over them vectorizes.
// expm1: x = k ln2 + r + c (r, c: the reduced argument and its rounding), p = expm1(r) = r + r^2 h(r)
// as exp's, then 2^k (1 + p)(1 + c) - 1 = 2^k (p + c (1 + p)) + (2^k - 1), 2^k - 1 exact for
// |k| <= 53; past that the 1 is below the last bit. For k = 1 and r < -1/4 the sum would cancel:
// r + 1/2 is exact there and goes first (fdlibm's rule).
__forceinline__ double expm1_double(double x) noexcept {
    const double ln2_hi = 0x1.62e42feep-1, ln2_lo = 0x1.a39ef35793c76p-33;  // ln2_hi times any k here: exact
    const double clamped = x > 710.0 ? 710.0 : x < -40.0 ? -40.0 : x;  // (beyond: inf, or -1 once rounded)
    double first, second;
    const double k = nearest_ln2_multiple<0>(clamped, first, second);
    const double hi = clamped - k * ln2_hi, lo = k * ln2_lo, r = hi - lo, c = (hi - r) - lo;
    const double tail = r * r * exp_tail(r), p = r + tail, cp = c + c * p, power = first * second;
    const double near = (p + cp) * power + (power - 1.0);
    const double at_one = r < -0.25 ? 2.0 * ((r + 0.5) + (tail + cp)) : near;
    const double far = ((p + cp) + 1.0) * first * second - 1.0;
    // (one condition a select: GCC vectorizes a chain of them, not a select on a combined condition)
    double y = k > 53.0 ? far : near;
    y = k < -53.0 ? far : y;
    y = k == 1.0 ? at_one : y;
    y = __builtin_fabs(x) < 0x1p-54 ? x : y;  // (zeros keep their sign)
    y = x < -40.0 ? -1.0 : y;
    y = x > 0x1.62e42fefa39efp+9 ? __builtin_inf() : y;
    return x != x ? x : y;
}
// tanh: x + x^3 p(x^2) below 0.98 (p: a Chebyshev fit, 2.7e-18 from (tanh(x) - x) / x^3 on
// [0, 0.98^2]); above, 1 - 2 / (exp(2|x|) + 1), whose second term is then below 1/4, so its error
// costs less than an ulp of the result (fdlibm's form through expm1 is 2 ulp off below 1); 1 past 22.
constexpr double kTanhTail[16] = {
    -0x1.5555555555555p-2,  0x1.11111111110dcp-3,  -0x1.ba1ba1ba170ccp-5, 0x1.664f48817e359p-6,
    -0x1.226e352f991dep-7,  0x1.d6d3c8a2a2890p-9,  -0x1.7da2e9c609de9p-10, 0x1.3553327fe069dp-11,
    -0x1.f533f6ff6067cp-13, 0x1.94ec434273a95p-14, -0x1.4316e874b94f4p-15, 0x1.eeec2215621a9p-17,
    -0x1.5665119419999p-18, 0x1.825a399bd291fp-20, -0x1.2ede3f198217fp-22, 0x1.dd663c0bb289cp-26};
__forceinline__ double tanh_double(double x) noexcept {
    const double a = __builtin_fabs(x), z = a * a;
    const double p = poly<16>(z, kTanhTail);
    const double e = exp_double(2.0 * (a > 22.0 ? 22.0 : a));
    double t = a < 0.98 ? a + a * (z * p) : 1.0 - 2.0 / (e + 1.0);
    t = a > 22.0 ? 1.0 : t;
    t = __builtin_copysign(t, x);
    return x != x ? x : t;
}
// cosh: its Taylor polynomial in x^2 below ln2 / 2 (to x^14 / 14!: what it leaves is below
// 2^-57); e^|x| / 2 + 1 / (2 e^|x|) below 22; e^|x| / 2 above, scaled by the exponent (no overflow
// before cosh's own).
constexpr double kCoshTail[7] = {0x1p-1, 0x1.5555555555555p-5, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-16,
                                 0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29, 0x1.93974a8c07c9dp-37};
__forceinline__ double cosh_double(double x) noexcept {
    const double a = __builtin_fabs(x), z = a * a, half = exp_times_power<-1>(a);
    double y = a < 22.0 ? half + 0.25 / half : half;
    y = a < 0x1.62e42fefa39efp-2 ? 1.0 + z * poly<7>(z, kCoshTail) : y;
    return x != x ? x : y;
}
// The log family's reduction: u (positive, normal) = 2^k m with m in [sqrt(1/2), sqrt(2)); returns
// f = m - 1 (exact) and k.
__forceinline__ double log_reduced(double u, double& k) noexcept {
    const unsigned long long bits = bit_cast<unsigned long long>(u) + (0x95f62ull << 32);  // (1 - sqrt(1/2)'s high word)
    k = bit_cast<double>(bit_cast<unsigned long long>(0x1.8p52) + ((bits >> 52) - 0x3ff)) - 0x1.8p52;
    return bit_cast<double>((bits & 0x000fffffffffffffull) + (0x3fe6a09eull << 32)) - 1.0;
}
// log1p(f) - f + f^2 / 2 (`half_square`) for f = m - 1: fdlibm's series in s = f / (2 + f).
__forceinline__ double log1p_tail(double f, double half_square) noexcept {
    const double s = f / (2.0 + f), z = s * s, w = z * z;
    const double odd = w * (0x1.999999997fa04p-2 + w * (0x1.c71c51d8e78afp-3 + w * 0x1.39a09d078c69fp-3));
    const double even = z * (0x1.5555555555593p-1 + w * (0x1.2492494229359p-2 + w * (0x1.7466496cb03dep-3 + w * 0x1.2f112df3e5244p-3)));
    return s * (half_square + (even + odd));
}
// log1p: fdlibm's. u = 1 + x = 2^k m, c the rounding of u divided by u (none when 1 + x needs no
// scaling: f = x), log(m) = log1p(f).
__forceinline__ double log1p_double(double x) noexcept {
    const double ln2_hi = 0x1.62e42feep-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const double u = 1.0 + x;
    double scaled_k;
    const double m = log_reduced(u, scaled_k);
    double c = scaled_k >= 2.0 ? 1.0 - (u - x) : x - (u - 1.0);
    c = scaled_k < 54.0 ? c / u : 0.0;
    const bool near = x >= -0x1.2bec4p-2 && x < 0x1.a827ap-2;  // 1 + x in [sqrt(1/2), sqrt(2)]
    const double f = near ? x : m, k = near ? 0.0 : scaled_k;
    c = near ? 0.0 : c;
    const double hfsq = 0.5 * f * f;
    const double y = log1p_tail(f, hfsq) + (k * ln2_lo + c) - hfsq + f + k * ln2_hi;
    const double kept = __builtin_fabs(x) < 0x1p-53 || !(x < __builtin_inf()) ? x : y;  // tiny, zeros, inf, NaN
    return x < -1.0 ? __builtin_nan("") : x == -1.0 ? -__builtin_inf() : kept;
}
// log2 and log10: FreeBSD's. log(m) = f - f^2 / 2 + tail as hi + lo, hi with its low 32 bits
// cleared, so hi times the high part of 1 / ln(base) (`over_hi`, 32 bits) is exact; k log_base(2)
// likewise in two parts (`two_hi`, `two_lo`); the sum of the high parts first, its rounding kept.
__forceinline__ double log_base_double(double x, double over_hi, double over_lo, double two_hi, double two_lo) noexcept {
    const bool denormal = x < 0x1p-1022;
    double k;
    const double f = log_reduced(denormal ? x * 0x1p54 : x, k), hfsq = 0.5 * f * f, tail = log1p_tail(f, hfsq);
    k = denormal ? k - 54.0 : k;
    const double hi = bit_cast<double>(bit_cast<unsigned long long>(f - hfsq) & 0xffffffff00000000ull);
    const double lo = (f - hi) - hfsq + tail;
    const double high = hi * over_hi, scaled_k = k * two_hi, sum = scaled_k + high;
    const double low = (k * two_lo + (lo + hi) * over_lo + lo * over_hi) + ((scaled_k - sum) + high);
    double y = low + sum;
    y = x == 0.0 ? -__builtin_inf() : y;
    y = x < 0.0 ? __builtin_nan("") : y;
    return x < __builtin_inf() ? y : x;  // (inf and NaN)
}
__forceinline__ double log2_double(double x) noexcept {
    return log_base_double(x, 0x1.7154765200000p+0, 0x1.705fc2eefa200p-33, 1.0, 0.0);
}
__forceinline__ double log10_double(double x) noexcept {
    return log_base_double(x, 0x1.bcb7b15200000p-2, 0x1.b9438ca9aadd5p-36, 0x1.34413509f6000p-2, 0x1.9fef311f12b36p-42);
}
// asin: fdlibm's. Below 1/2, x + x R(x^2) (R rational); above, with t = (1 - |x|) / 2 and s its
// root, pi/2 - 2 (s + s R(t)), where near 1 the root's rounding is carried (s in a 32-bit high part
// and a correction) so that it costs less than an ulp.
__forceinline__ double asin_double(double x) noexcept {
    const double pio2_hi = 0x1.921fb54442d18p+0, pio2_lo = 0x1.1a62633145c07p-54, pio4_hi = 0x1.921fb54442d18p-1;
    const double a = __builtin_fabs(x), t = a < 0.5 ? x * x : (1.0 - a) * 0.5;
    const double p = t * (0x1.5555555555555p-3 +
                          t * (-0x1.4d61203eb6f7dp-2 +
                               t * (0x1.9c1550e884455p-3 +
                                    t * (-0x1.48228b5688f3bp-5 + t * (0x1.9efe07501b288p-11 + t * 0x1.23de10dfdf709p-15)))));
    const double q = 1.0 + t * (-0x1.33a271c8a2d4bp+1 + t * (0x1.02ae59c598ac8p+1 + t * (-0x1.6066c1b8d0159p-1 + t * 0x1.3b8c5b12e9282p-4)));
    const double r = p / q, s = __builtin_sqrt(t);
    const double near_one = pio2_hi - (2.0 * (s + s * r) - pio2_lo);
    const double w = bit_cast<double>(bit_cast<unsigned long long>(s) & 0xffffffff00000000ull);
    const double c = (t - w * w) / (s + w);
    const double middle = pio4_hi - ((2.0 * s * r - (pio2_lo - 2.0 * c)) - (pio4_hi - 2.0 * w));
    double y = a < 0.975 ? middle : near_one;
    y = __builtin_copysign(y, x);
    y = a < 0.5 ? x + x * r : y;
    y = a < 0x1p-26 ? x : y;
    y = a == 1.0 ? x * pio2_hi + x * pio2_lo : y;
    return a > 1.0 ? __builtin_nan("") : y;  // (and a NaN stays one)
}
}  // namespace kd_host
__forceinline__ double exp(double x) noexcept { return kd_host::exp_double(x); }
__forceinline__ double expm1(double x) noexcept { return kd_host::expm1_double(x); }
__forceinline__ double tanh(double x) noexcept { return kd_host::tanh_double(x); }
__forceinline__ double cosh(double x) noexcept { return kd_host::cosh_double(x); }
__forceinline__ double log1p(double x) noexcept { return kd_host::log1p_double(x); }
__forceinline__ double log2(double x) noexcept { return kd_host::log2_double(x); }
__forceinline__ double log10(double x) noexcept { return kd_host::log10_double(x); }
__forceinline__ double asin(double x) noexcept { return kd_host::asin_double(x); }
#endif
namespace kd_host {
// exp(x) within 1.01 ulp of the rounded result for every float (CUDA's expf allows 2 ulp, __expf
// 2 + 1.17|x|): x = k ln2 + r (k by the round-to-nearest of adding 1.5 * 2^23, ln2 in two parts),
// Cephes's degree-7 polynomial for exp(r), times 2^k as two powers of two so that every k from
// underflow to overflow scales exactly (results round to denormals, zero and infinity as expf's
// do). x is clamped first where exp is already 0 or infinite; a NaN passes the clamps and the polynomial.
__forceinline__ float fast_exp(float x) noexcept {
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    const float shifter = 12582912.0f;
    const float j = mad(x, 1.44269504088896341f, shifter), k = j - shifter;
    const float r = mad(k, -1.428606765330187045e-06f, mad(k, -0.693145751953125f, x));
    float p = 1.9875691500e-4f;
    p = mad(p, r, 1.3981999507e-3f);
    p = mad(p, r, 8.3334519073e-3f);
    p = mad(p, r, 4.1665795894e-2f);
    p = mad(p, r, 1.6666665459e-1f);
    p = mad(p, r, 5.0000001201e-1f);
    p = mad(p, r * r, r) + 1.0f;
    const int n = (int)(bit_cast<unsigned int>(j) - bit_cast<unsigned int>(shifter)), half = n >> 1;
    return p * bit_cast<float>((unsigned int)(half + 127) << 23) * bit_cast<float>((unsigned int)(n - half + 127) << 23);
}
// Float functions for a result rounded to a 16-bit float (kd.ops' float16 and bfloat16 nodes take
// them in place of the accurate ones: element.cuh.j2). Their error, a few float ulps at most, is far
// below a 16-bit float's ulp, and they stay in float where the accurate ones sum in double.
namespace half_result {
__forceinline__ float log_scaled(float x, float scale) noexcept {
    float f, tail;
    const float k = log_reduced_float(x, &f, &tail);
    const float m = mad(-0.5f * f, f, f) + tail;
    return log_special(x, mad(k, 0.693147181f * scale, m * scale));
}
__forceinline__ float log(float x) noexcept { return log_scaled(x, 1.0f); }
__forceinline__ float log2(float x) noexcept { return log_scaled(x, 1.44269504f); }
__forceinline__ float log10(float x) noexcept { return log_scaled(x, 0.434294482f); }
__forceinline__ float exp(float x) noexcept { return fast_exp(x); }
// (atan(u) / u - 1) / u^2 in z = u^2 on [0, 1], in float: 5.9e-7.
constexpr float kAtanTailHalf[7] = {-0.33333274722099304f, 0.19994069635868073f, -0.14183199405670166f,
                                    0.10422378033399582f,  -0.06742211431264877f, 0.030317042022943497f,
                                    -0.0064969127997756f};
// atan(t) for t = |x| <= 1 as t + t^3 P(t^2), above as pi/2 - atan(1/t), all in float (the accurate
// one's polynomial is in double); a NaN stays one, an infinity takes 1/t = 0.
__forceinline__ float atan(float x) noexcept {
    const float t = __builtin_fabsf(x), u = t > 1.0f ? 1.0f / t : t, z = u * u;
    const float p = mad(u * z, poly<7>(z, kAtanTailHalf), u);
    return __builtin_copysignf(t > 1.0f ? 1.57079637f - p : p, x);
}
// In a SIMD-math module, libmvec's float variants (a few float ulps), where the accurate functions
// take its double ones and round: twice the lanes a vector.
#define KD_HOST_HALF_RESULT_VF(name) \
    extern "C" __attribute__((simd("notinbranch"), const)) float kd_host_half_##name##f(float) noexcept __asm__(#name "f"); \
    __forceinline__ float name(float x) noexcept { \
        if constexpr (KD_HOST_SIMD_MATH) return kd_host_half_##name##f(x); \
        return ::name##f(x); \
    }
KD_HOST_HALF_RESULT_VF(sin) KD_HOST_HALF_RESULT_VF(cos) KD_HOST_HALF_RESULT_VF(tan) KD_HOST_HALF_RESULT_VF(cosh)
#undef KD_HOST_HALF_RESULT_VF
}  // namespace half_result
}  // namespace kd_host
#if KD_HOST_FAST_MATH
__forceinline__ float exp(float x) noexcept { return kd_host::fast_exp(x); }
#define expf(x) kd_host::fast_exp(x)
#elif KD_HOST_SIMD_MATH
__forceinline__ float exp(float x) noexcept { return kd_host::fast_exp(x); }
#else
__forceinline__ float exp(float x) noexcept { return expf(x); }
#endif
template <class T, kd_host::if_integral<T> = 0> __forceinline__ double exp(T x) noexcept { return exp((double)x); }
#pragma GCC visibility push(default)
extern "C" {
double fma(double, double, double) noexcept;
float fmaf(float, float, float) noexcept;
double ldexp(double, int) noexcept;
float ldexpf(float, int) noexcept;
double frexp(double, int*) noexcept;
float frexpf(float, int*) noexcept;
double modf(double, double*) noexcept;
float modff(float, float*) noexcept;
double scalbn(double, int) noexcept;
float scalbnf(float, int) noexcept;
double scalbln(double, long) noexcept;
float scalblnf(float, long) noexcept;
int ilogb(double) noexcept;
int ilogbf(float) noexcept;
long lrint(double) noexcept;
long lrintf(float) noexcept;
long long llrint(double) noexcept;
long long llrintf(float) noexcept;
long lround(double) noexcept;
long lroundf(float) noexcept;
long long llround(double) noexcept;
long long llroundf(float) noexcept;
double remquo(double, double, int*) noexcept;
float remquof(float, float, int*) noexcept;
double jn(int, double) noexcept;
float jnf(int, float) noexcept;
double yn(int, double) noexcept;
float ynf(int, float) noexcept;
double nan(const char*) noexcept;
float nanf(const char*) noexcept;
}
#pragma GCC visibility pop
__forceinline__ float fma(float x, float y, float z) noexcept { return fmaf(x, y, z); }
__forceinline__ float ldexp(float x, int e) noexcept { return ldexpf(x, e); }
__forceinline__ float frexp(float x, int* e) noexcept { return frexpf(x, e); }
__forceinline__ float modf(float x, float* i) noexcept { return modff(x, i); }
__forceinline__ float scalbn(float x, int e) noexcept { return scalbnf(x, e); }
__forceinline__ float scalbln(float x, long e) noexcept { return scalblnf(x, e); }
__forceinline__ int ilogb(float x) noexcept { return ilogbf(x); }
__forceinline__ long lrint(float x) noexcept { return lrintf(x); }
__forceinline__ long long llrint(float x) noexcept { return llrintf(x); }
__forceinline__ long lround(float x) noexcept { return lroundf(x); }
__forceinline__ long long llround(float x) noexcept { return llroundf(x); }
__forceinline__ float remquo(float x, float y, int* q) noexcept { return remquof(x, y, q); }
__forceinline__ float jn(int n, float x) noexcept { return jnf(n, x); }
__forceinline__ float yn(int n, float x) noexcept { return ynf(n, x); }
__forceinline__ float pow(float x, int y) noexcept { return pow(x, (float)y); }
__forceinline__ double pow(double x, int y) noexcept { return pow(x, (double)y); }
__forceinline__ long abs(long x) noexcept { return labs(x); }
__forceinline__ long long abs(long long x) noexcept { return llabs(x); }
__forceinline__ float abs(float x) noexcept { return fabsf(x); }
__forceinline__ double abs(double x) noexcept { return fabs(x); }
// Classification, for floating types and (as <cmath> has them) integers.
__forceinline__ constexpr bool isnan(float x) noexcept { return __builtin_isnan(x); }
__forceinline__ constexpr bool isnan(double x) noexcept { return __builtin_isnan(x); }
__forceinline__ constexpr bool isinf(float x) noexcept { return __builtin_isinf(x); }
__forceinline__ constexpr bool isinf(double x) noexcept { return __builtin_isinf(x); }
__forceinline__ constexpr bool isfinite(float x) noexcept { return __builtin_isfinite(x); }
__forceinline__ constexpr bool isfinite(double x) noexcept { return __builtin_isfinite(x); }
__forceinline__ constexpr bool isnormal(float x) noexcept { return __builtin_isnormal(x); }
__forceinline__ constexpr bool isnormal(double x) noexcept { return __builtin_isnormal(x); }
__forceinline__ constexpr bool signbit(float x) noexcept { return __builtin_bit_cast(unsigned int, x) >> 31; }
__forceinline__ constexpr bool signbit(double x) noexcept { return __builtin_bit_cast(unsigned long long, x) >> 63; }
template <class T, kd_host::if_integral<T> = 0> __forceinline__ constexpr bool isnan(T) noexcept { return false; }
template <class T, kd_host::if_integral<T> = 0> __forceinline__ constexpr bool isinf(T) noexcept { return false; }
template <class T, kd_host::if_integral<T> = 0> __forceinline__ constexpr bool isfinite(T) noexcept { return true; }
template <class T, kd_host::if_integral<T> = 0> __forceinline__ constexpr bool signbit(T x) noexcept { return x < (T)0; }
__forceinline__ constexpr int __isnanf(float x) noexcept { return __builtin_isnan(x); }
__forceinline__ constexpr int __isinff(float x) noexcept { return __builtin_isinf(x); }
__forceinline__ constexpr int __finitef(float x) noexcept { return __builtin_isfinite(x); }
__forceinline__ constexpr int __signbitf(float x) noexcept { return signbit(x); }
__forceinline__ constexpr int __isnan(double x) noexcept { return __builtin_isnan(x); }
__forceinline__ constexpr int __isinf(double x) noexcept { return __builtin_isinf(x); }
__forceinline__ constexpr int __finite(double x) noexcept { return __builtin_isfinite(x); }
__forceinline__ constexpr int __signbit(double x) noexcept { return signbit(x); }
// min and max: CUDA's overloads for every pair of arithmetic types, with the usual arithmetic
// conversions; floating ones ignore a NaN operand, as fminf/fmaxf do.
template <class A, class B, kd_host::if_arithmetic<A, B> = 0> __forceinline__ constexpr auto min(A a, B b) -> decltype(a + b) {
    typedef decltype(a + b) R;
    if constexpr (kd_host::is_floating<R>::value) return kd_host::fmin_((R)a, (R)b);
    else return (R)a < (R)b ? (R)a : (R)b;
}
template <class A, class B, kd_host::if_arithmetic<A, B> = 0> __forceinline__ constexpr auto max(A a, B b) -> decltype(a + b) {
    typedef decltype(a + b) R;
    if constexpr (kd_host::is_floating<R>::value) return kd_host::fmax_((R)a, (R)b);
    else return (R)a > (R)b ? (R)a : (R)b;
}
__forceinline__ constexpr unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
__forceinline__ constexpr unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
__forceinline__ constexpr long long llmin(long long a, long long b) { return a < b ? a : b; }
__forceinline__ constexpr long long llmax(long long a, long long b) { return a > b ? a : b; }
__forceinline__ constexpr unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
__forceinline__ constexpr unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
// CUDA-only functions, from libm.
namespace kd_host {
constexpr double pi = 3.141592653589793238462643383279502884;
// sin(pi x) with an exact reduction: x - 2 round(x / 2) and the fold into [-1/2, 1/2] are exact.
__forceinline__ double sinpi(double x) {
    if (__builtin_isinf(x)) return x - x;
    double r = x - 2.0 * __builtin_rint(0.5 * x);
    if (r > 0.5) r = 1.0 - r;
    else if (r < -0.5) r = -1.0 - r;
    return r == 0.0 ? 0.0 * x : ::sin(pi * r);  // an integer gives a zero with x's sign
}
__forceinline__ double cospi(double x) {
    if (__builtin_isinf(x)) return x - x;
    double r = __builtin_fabs(x - 2.0 * __builtin_rint(0.5 * x));  // in [0, 1]
    const double sign = r > 0.5 ? -1.0 : 1.0;
    if (r > 0.5) r = 1.0 - r;  // cos(pi r) = -cos(pi (1 - r))
    if (r == 0.5) return 0.0;
    return sign * (r > 0.25 ? ::sin(pi * (0.5 - r)) : ::cos(pi * r));
}
// The inverse error function: a rational first guess (Giles), then Halley steps on erf/erfc.
__forceinline__ double erfinv(double y) {
    if (y != y || y < -1.0 || y > 1.0) return __builtin_nan("");
    if (y == 1.0) return __builtin_inf();
    if (y == -1.0) return -__builtin_inf();
    const double w0 = -::log((1.0 - y) * (1.0 + y));
    double x;
    if (w0 < 6.25) {
        const double w = w0 - 3.125;
        double p = -3.6444120640178196996e-21;
        p = -1.685059138182016589e-19 + p * w; p = 1.2858480715256400167e-18 + p * w;
        p = 1.115787767802518096e-17 + p * w; p = -1.333171662854620906e-16 + p * w;
        p = 2.0972767875968561637e-17 + p * w; p = 6.6376381343583238325e-15 + p * w;
        p = -4.0545662729752068639e-14 + p * w; p = -8.1519341976054721522e-14 + p * w;
        p = 2.6335093153082322977e-12 + p * w; p = -1.2975133253453532498e-11 + p * w;
        p = -5.4154120542946279317e-11 + p * w; p = 1.051212273321532285e-09 + p * w;
        p = -4.1126339803469836976e-09 + p * w; p = -2.9070369957882005086e-08 + p * w;
        p = 4.2347877827932403518e-07 + p * w; p = -1.3654692000834678645e-06 + p * w;
        p = -1.3882523362786468719e-05 + p * w; p = 0.0001867342080340571352 + p * w;
        p = -0.00074070253416626697512 + p * w; p = -0.0060336708714301490533 + p * w;
        p = 0.24015818242558961693 + p * w; p = 1.6536545626831027356 + p * w;
        x = p * y;
    } else if (w0 < 16.0) {
        const double w = ::sqrt(w0) - 3.25;
        double p = 2.2137376921775787049e-09;
        p = 9.0756561938885390979e-08 + p * w; p = -2.7517406297064545428e-07 + p * w;
        p = 1.8239629214389227755e-08 + p * w; p = 1.5027403968909827627e-06 + p * w;
        p = -4.013867526981545969e-06 + p * w; p = 2.9234449089955446044e-06 + p * w;
        p = 1.2475304481671778723e-05 + p * w; p = -4.7318229009055733981e-05 + p * w;
        p = 6.8284851459573175448e-05 + p * w; p = 2.4031110387097893999e-05 + p * w;
        p = -0.0003550375203628474796 + p * w; p = 0.00095328937973738049703 + p * w;
        p = -0.0016882755560235047313 + p * w; p = 0.0024914420961078508066 + p * w;
        p = -0.0037512085075692412107 + p * w; p = 0.005370914553590063617 + p * w;
        p = 1.0052589676941592334 + p * w; p = 3.0838856104922207635 + p * w;
        x = p * y;
    } else {
        const double w = ::sqrt(w0) - 5.0;
        double p = -2.7109920616438573243e-11;
        p = -2.5556418169965252055e-10 + p * w; p = 1.5076572693500548083e-09 + p * w;
        p = -3.7894654401267369937e-09 + p * w; p = 7.6157012080783393804e-09 + p * w;
        p = -1.4960026627149240478e-08 + p * w; p = 2.9147953450901080826e-08 + p * w;
        p = -6.7711997758452339498e-08 + p * w; p = 2.2900482228026654717e-07 + p * w;
        p = -9.9298272942317002539e-07 + p * w; p = 4.5260625972231537039e-06 + p * w;
        p = -1.9681778105531670567e-05 + p * w; p = 7.5995277030017761139e-05 + p * w;
        p = -0.00021503011930044477347 + p * w; p = -0.00013871931833623122026 + p * w;
        p = 1.0103004648645343977 + p * w; p = 4.8499064014085844221 + p * w;
        x = p * y;
    }
    for (int step = 0; step < 2; ++step) {  // Halley on f(x) = erf(x) - y, through erfc in the tails
        const double f = __builtin_fabs(y) > 0.5 ? (y > 0 ? (1.0 - y) - ::erfc(x) : ::erfc(-x) - (1.0 + y)) : ::erf(x) - y;
        const double d = 1.1283791670955126 * ::exp(-x * x);
        if (d == 0.0) break;
        const double e = f / d;
        x -= e / (1.0 + x * e);
    }
    return x;
}
// erfcinv(z) = erfinv(1 - z), computed near z = 0 and 2 without losing z's digits.
__forceinline__ double erfcinv(double z) {
    if (z != z || z < 0.0 || z > 2.0) return __builtin_nan("");
    if (z == 0.0) return __builtin_inf();
    if (z == 2.0) return -__builtin_inf();
    if (z > 1e-3 && z < 2.0 - 1e-3) return erfinv(1.0 - z);
    const bool upper = z > 1.0;
    const double t = upper ? 2.0 - z : z;  // erfcinv(2 - t) = -erfcinv(t)
    double x = ::sqrt(-::log(t * 0.5 * 1.7724538509055159)) ;  // asymptotic start
    for (int step = 0; step < 8; ++step) {  // Halley on erfc(x) - t
        const double f = ::erfc(x) - t;
        const double d = -1.1283791670955126 * ::exp(-x * x);
        if (d == 0.0) break;
        const double e = f / d;
        const double next = x - e / (1.0 + x * e);
        if (next == x) break;
        x = next;
    }
    return upper ? -x : x;
}
// exp(x^2) erfc(x): x^2 split exactly into h + l (exp(l) = 1 + l to the last bit), and the
// asymptotic series where erfc underflows.
__forceinline__ double erfcx(double x) {
    if (x < 25.0) {
        const double h = x * x, l = ::fma(x, x, -h);
        return ::exp(h) * ::erfc(x) * (1.0 + l);
    }
    const double r = 0.5 / (x * x);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 12; ++k) {
        term *= -(2 * k - 1) * r;
        sum += term;
    }
    return 0.56418958354775628695 / x * sum;  // 1 / sqrt(pi)
}
}  // namespace kd_host
__forceinline__ double sinpi(double x) { return kd_host::sinpi(x); }
__forceinline__ double cospi(double x) { return kd_host::cospi(x); }
__forceinline__ float sinpif(float x) { return (float)kd_host::sinpi(x); }
__forceinline__ float cospif(float x) { return (float)kd_host::cospi(x); }
__forceinline__ float sinpi(float x) { return sinpif(x); }
__forceinline__ float cospi(float x) { return cospif(x); }
__forceinline__ void sincospi(double x, double* s, double* c) { *s = kd_host::sinpi(x); *c = kd_host::cospi(x); }
__forceinline__ void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
__forceinline__ void sincospi(float x, float* s, float* c) { sincospif(x, s, c); }
__forceinline__ void sincos(double x, double* s, double* c) { *s = sin(x); *c = cos(x); }
__forceinline__ void sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
__forceinline__ void sincos(float x, float* s, float* c) { sincosf(x, s, c); }
__forceinline__ double exp10(double x) { return pow(10.0, x); }
__forceinline__ float exp10f(float x) { return (float)pow(10.0, (double)x); }
__forceinline__ float exp10(float x) { return exp10f(x); }
__forceinline__ double rsqrt(double x) { return 1.0 / sqrt(x); }
__forceinline__ float rsqrtf(float x) { return (float)(1.0 / sqrt((double)x)); }
__forceinline__ float rsqrt(float x) { return rsqrtf(x); }
__forceinline__ double rcbrt(double x) { return 1.0 / cbrt(x); }
__forceinline__ float rcbrtf(float x) { return (float)(1.0 / cbrt((double)x)); }
__forceinline__ float rcbrt(float x) { return rcbrtf(x); }
__forceinline__ double erfinv(double x) { return kd_host::erfinv(x); }
__forceinline__ float erfinvf(float x) { return (float)kd_host::erfinv(x); }
__forceinline__ float erfinv(float x) { return erfinvf(x); }
__forceinline__ double erfcinv(double x) { return kd_host::erfcinv(x); }
__forceinline__ float erfcinvf(float x) { return (float)kd_host::erfcinv(x); }
__forceinline__ float erfcinv(float x) { return erfcinvf(x); }
__forceinline__ double erfcx(double x) { return kd_host::erfcx(x); }
__forceinline__ float erfcxf(float x) { return (float)kd_host::erfcx(x); }
__forceinline__ float erfcx(float x) { return erfcxf(x); }
// 0.5 erfc(-x / sqrt(2)), the argument's rounding error dt corrected to first order (erfc's
// slope is -2/sqrt(pi) exp(-t^2)): in the far tail it would cost x^2/2 ulp.
__forceinline__ double normcdf(double x) {
    const double hi = 0.7071067811865476, lo = -4.833646656726457e-17;  // 1/sqrt(2) = hi + lo
    const double t = -x * hi, dt = fma(-x, hi, -t) - x * lo;
    return 0.5 * (erfc(t) - 1.1283791670955126 * exp(-t * t) * dt);
}
__forceinline__ float normcdff(float x) { return (float)normcdf((double)x); }
__forceinline__ float normcdf(float x) { return normcdff(x); }
__forceinline__ double normcdfinv(double p) { return -1.41421356237309504880 * kd_host::erfcinv(2.0 * p); }
__forceinline__ float normcdfinvf(float p) { return (float)normcdfinv((double)p); }
__forceinline__ float normcdfinv(float p) { return normcdfinvf(p); }
__forceinline__ double rhypot(double x, double y) { return 1.0 / hypot(x, y); }
__forceinline__ float rhypotf(float x, float y) { return (float)(1.0 / hypot((double)x, (double)y)); }
__forceinline__ double norm3d(double a, double b, double c) { return hypot(hypot(a, b), c); }
__forceinline__ float norm3df(float a, float b, float c) { return (float)norm3d(a, b, c); }
__forceinline__ double rnorm3d(double a, double b, double c) { return 1.0 / norm3d(a, b, c); }
__forceinline__ float rnorm3df(float a, float b, float c) { return (float)rnorm3d(a, b, c); }
__forceinline__ double norm4d(double a, double b, double c, double d) { return hypot(hypot(a, b), hypot(c, d)); }
__forceinline__ float norm4df(float a, float b, float c, float d) { return (float)norm4d(a, b, c, d); }
__forceinline__ double rnorm4d(double a, double b, double c, double d) { return 1.0 / norm4d(a, b, c, d); }
__forceinline__ float rnorm4df(float a, float b, float c, float d) { return (float)rnorm4d(a, b, c, d); }
__forceinline__ double norm(int n, const double* a) { double s = 0; for (int i = 0; i < n; ++i) s = hypot(s, a[i]); return s; }
__forceinline__ float normf(int n, const float* a) { double s = 0; for (int i = 0; i < n; ++i) s = hypot(s, (double)a[i]); return (float)s; }
__forceinline__ double rnorm(int n, const double* a) { return 1.0 / norm(n, a); }
__forceinline__ float rnormf(int n, const float* a) { return 1.0f / normf(n, a); }
__forceinline__ float fdividef(float x, float y) { return x / y; }
__forceinline__ double fdivide(double x, double y) { return x / y; }
// The fast intrinsics: the accurate functions, but for __expf (see "The CUDA math API").
__forceinline__ float __expf(float x) { return kd_host::fast_exp(x); }
__forceinline__ float __exp10f(float x) { return exp10f(x); }
__forceinline__ float __logf(float x) { return logf(x); }
__forceinline__ float __log2f(float x) { return log2f(x); }
__forceinline__ float __log10f(float x) { return log10f(x); }
__forceinline__ float __powf(float x, float y) { return powf(x, y); }
__forceinline__ float __sinf(float x) { return sinf(x); }
__forceinline__ float __cosf(float x) { return cosf(x); }
__forceinline__ float __tanf(float x) { return tanf(x); }
__forceinline__ void __sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
__forceinline__ float __fdividef(float x, float y) { return x / y; }
__forceinline__ float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }  // a NaN gives 0

// ---------------------------------------------------------------------------------------------
// Rounded arithmetic and conversions (__fadd_rz, __float2int_rn, ...). Rule: _rn is the host's
// default rounding; a directed rounding sets the FPU's mode around one operation on volatile
// operands (fesetround is libm's; its mode values are the ABI's); float-to-integer conversions
// saturate and take a NaN to 0, as PTX's cvt does.
namespace kd_host {
#if defined(__x86_64__) || defined(__i386__)
enum { round_nearest = 0, round_down = 0x400, round_up = 0x800, round_zero = 0xc00 };
#elif defined(__aarch64__)
enum { round_nearest = 0, round_up = 0x400000, round_down = 0x800000, round_zero = 0xc00000 };
#else
#error "kd_host.h: directed rounding modes are not known for this CPU"
#endif
template <class F> __attribute__((noinline)) auto rounded(int mode, F op) -> decltype(op()) {
    const int saved = fegetround();
    fesetround(mode);
    volatile decltype(op()) r = op();
    fesetround(saved);
    return r;
}
template <class T> __forceinline__ T volatile_copy(T x) { volatile T v = x; return v; }
template <class I> __forceinline__ I saturate(double v) {  // v already rounded to an integer
    constexpr bool is_signed = (I)-1 < (I)0;
    constexpr double top = sizeof(I) == 8 ? (is_signed ? 9223372036854775808.0 : 18446744073709551616.0)
                                          : (is_signed ? 2147483648.0 : 4294967296.0);
    constexpr double bottom = is_signed ? -top : 0.0;
    constexpr unsigned long long ones = ~0ull >> (64 - 8 * sizeof(I));
    if (v != v) return 0;
    if (v >= top) return (I)(is_signed ? ones >> 1 : ones);
    if (v <= bottom) return is_signed ? (I)(ones ^ (ones >> 1)) : (I)0;
    return (I)v;
}
}  // namespace kd_host
#define KD_HOST_ROUNDED(suffix, mode) \
    __forceinline__ float __fadd_##suffix(float a, float b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) + b; }); } \
    __forceinline__ float __fsub_##suffix(float a, float b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) - b; }); } \
    __forceinline__ float __fmul_##suffix(float a, float b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) * b; }); } \
    __forceinline__ float __fdiv_##suffix(float a, float b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) / b; }); } \
    __forceinline__ float __frcp_##suffix(float a) { return kd_host::rounded(mode, [=] { return 1.0f / kd_host::volatile_copy(a); }); } \
    __forceinline__ float __fsqrt_##suffix(float a) { return kd_host::rounded(mode, [=] { return sqrtf(kd_host::volatile_copy(a)); }); } \
    __forceinline__ float __fmaf_##suffix(float a, float b, float c) { return kd_host::rounded(mode, [=] { return fmaf(kd_host::volatile_copy(a), b, c); }); } \
    __forceinline__ double __dadd_##suffix(double a, double b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) + b; }); } \
    __forceinline__ double __dsub_##suffix(double a, double b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) - b; }); } \
    __forceinline__ double __dmul_##suffix(double a, double b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) * b; }); } \
    __forceinline__ double __ddiv_##suffix(double a, double b) { return kd_host::rounded(mode, [=] { return kd_host::volatile_copy(a) / b; }); } \
    __forceinline__ double __drcp_##suffix(double a) { return kd_host::rounded(mode, [=] { return 1.0 / kd_host::volatile_copy(a); }); } \
    __forceinline__ double __dsqrt_##suffix(double a) { return kd_host::rounded(mode, [=] { return sqrt(kd_host::volatile_copy(a)); }); } \
    __forceinline__ double __fma_##suffix(double a, double b, double c) { return kd_host::rounded(mode, [=] { return fma(kd_host::volatile_copy(a), b, c); }); } \
    __forceinline__ float __int2float_##suffix(int a) { return kd_host::rounded(mode, [=] { return (float)kd_host::volatile_copy(a); }); } \
    __forceinline__ float __uint2float_##suffix(unsigned int a) { return kd_host::rounded(mode, [=] { return (float)kd_host::volatile_copy(a); }); } \
    __forceinline__ float __ll2float_##suffix(long long a) { return kd_host::rounded(mode, [=] { return (float)kd_host::volatile_copy(a); }); } \
    __forceinline__ float __ull2float_##suffix(unsigned long long a) { return kd_host::rounded(mode, [=] { return (float)kd_host::volatile_copy(a); }); } \
    __forceinline__ double __ll2double_##suffix(long long a) { return kd_host::rounded(mode, [=] { return (double)kd_host::volatile_copy(a); }); } \
    __forceinline__ double __ull2double_##suffix(unsigned long long a) { return kd_host::rounded(mode, [=] { return (double)kd_host::volatile_copy(a); }); } \
    __forceinline__ float __double2float_##suffix(double a) { return kd_host::rounded(mode, [=] { return (float)kd_host::volatile_copy(a); }); }
KD_HOST_ROUNDED(rz, kd_host::round_zero)
KD_HOST_ROUNDED(ru, kd_host::round_up)
KD_HOST_ROUNDED(rd, kd_host::round_down)
#undef KD_HOST_ROUNDED
__forceinline__ float __fadd_rn(float a, float b) { return a + b; }
__forceinline__ float __fsub_rn(float a, float b) { return a - b; }
__forceinline__ float __fmul_rn(float a, float b) { return a * b; }
__forceinline__ float __fdiv_rn(float a, float b) { return a / b; }
__forceinline__ float __frcp_rn(float a) { return 1.0f / a; }
__forceinline__ float __fsqrt_rn(float a) { return sqrtf(a); }
__forceinline__ float __frsqrt_rn(float a) { return rsqrtf(a); }
__forceinline__ float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ float __fmaf_ieee_rn(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ double __dadd_rn(double a, double b) { return a + b; }
__forceinline__ double __dsub_rn(double a, double b) { return a - b; }
__forceinline__ double __dmul_rn(double a, double b) { return a * b; }
__forceinline__ double __ddiv_rn(double a, double b) { return a / b; }
__forceinline__ double __drcp_rn(double a) { return 1.0 / a; }
__forceinline__ double __dsqrt_rn(double a) { return sqrt(a); }
__forceinline__ double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
__forceinline__ float __int2float_rn(int a) { return (float)a; }
__forceinline__ float __uint2float_rn(unsigned int a) { return (float)a; }
__forceinline__ float __ll2float_rn(long long a) { return (float)a; }
__forceinline__ float __ull2float_rn(unsigned long long a) { return (float)a; }
__forceinline__ double __ll2double_rn(long long a) { return (double)a; }
__forceinline__ double __ull2double_rn(unsigned long long a) { return (double)a; }
__forceinline__ double __int2double_rn(int a) { return (double)a; }
__forceinline__ double __uint2double_rn(unsigned int a) { return (double)a; }
__forceinline__ float __double2float_rn(double a) { return (float)a; }
#define KD_HOST_TO_INT(from, F, to, T) \
    __forceinline__ T __##from##2##to##_rn(F x) { return kd_host::saturate<T>(__builtin_nearbyint((double)x)); } \
    __forceinline__ T __##from##2##to##_rz(F x) { return kd_host::saturate<T>(__builtin_trunc((double)x)); } \
    __forceinline__ T __##from##2##to##_ru(F x) { return kd_host::saturate<T>(__builtin_ceil((double)x)); } \
    __forceinline__ T __##from##2##to##_rd(F x) { return kd_host::saturate<T>(__builtin_floor((double)x)); }
KD_HOST_TO_INT(float, float, int, int)
KD_HOST_TO_INT(float, float, uint, unsigned int)
KD_HOST_TO_INT(float, float, ll, long long)
KD_HOST_TO_INT(float, float, ull, unsigned long long)
KD_HOST_TO_INT(double, double, int, int)
KD_HOST_TO_INT(double, double, uint, unsigned int)
KD_HOST_TO_INT(double, double, ll, long long)
KD_HOST_TO_INT(double, double, ull, unsigned long long)
#undef KD_HOST_TO_INT

// ---------------------------------------------------------------------------------------------
// Reinterpretation and integer intrinsics. Rule: CUDA's documented results, edge cases
// included (__clz(0) = 32, shifts of funnelshift wrap or clamp, ...).
__forceinline__ constexpr int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__forceinline__ constexpr unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__forceinline__ constexpr float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__forceinline__ constexpr float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
__forceinline__ constexpr long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
__forceinline__ constexpr double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
__forceinline__ constexpr int __double2hiint(double x) { return (int)(__builtin_bit_cast(unsigned long long, x) >> 32); }
__forceinline__ constexpr int __double2loint(double x) { return (int)(unsigned int)__builtin_bit_cast(unsigned long long, x); }
__forceinline__ constexpr double __hiloint2double(int hi, int lo) {
    return __builtin_bit_cast(double, ((unsigned long long)(unsigned int)hi << 32) | (unsigned int)lo);
}
__forceinline__ constexpr int __popc(unsigned int x) { return __builtin_popcount(x); }
__forceinline__ constexpr int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__forceinline__ constexpr int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
__forceinline__ constexpr int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
__forceinline__ constexpr int __ffs(int x) { return __builtin_ffs(x); }
__forceinline__ constexpr int __ffsll(long long x) { return __builtin_ffsll(x); }
__forceinline__ constexpr unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
__forceinline__ constexpr unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned int)x) << 32) | __brev((unsigned int)(x >> 32));
}
__forceinline__ constexpr unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long bytes = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned int)((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}
__forceinline__ constexpr unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)(((((unsigned long long)hi << 32) | lo) << (shift & 31u)) >> 32);
}
__forceinline__ constexpr unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int shift) {
    return shift >= 32u ? lo : __funnelshift_l(lo, hi, shift);
}
__forceinline__ constexpr unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
__forceinline__ constexpr unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int shift) {
    return shift >= 32u ? hi : __funnelshift_r(lo, hi, shift);
}
__forceinline__ constexpr int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
__forceinline__ constexpr unsigned int __umulhi(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long long)x * y) >> 32);
}
__forceinline__ constexpr long long __mul64hi(long long x, long long y) { return (long long)(((__int128)x * y) >> 64); }
__forceinline__ constexpr unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
__forceinline__ constexpr int __mul24(int x, int y) {
    return (int)((unsigned int)(((int)((unsigned int)x << 8) >> 8) * ((int)((unsigned int)y << 8) >> 8)));
}
__forceinline__ constexpr unsigned int __umul24(unsigned int x, unsigned int y) { return (x & 0xffffffu) * (y & 0xffffffu); }
__forceinline__ constexpr unsigned int __sad(int x, int y, unsigned int z) {
    return (x > y ? (unsigned int)x - (unsigned int)y : (unsigned int)y - (unsigned int)x) + z;
}
__forceinline__ constexpr unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) { return (x > y ? x - y : y - x) + z; }
__forceinline__ constexpr int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
__forceinline__ constexpr int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
__forceinline__ constexpr unsigned int __uhadd(unsigned int x, unsigned int y) { return (unsigned int)(((unsigned long long)x + y) >> 1); }
__forceinline__ constexpr unsigned int __urhadd(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long long)x + y + 1) >> 1);
}

// ---------------------------------------------------------------------------------------------
// printf, assert, __trap, clocks. Rule: printf is libc's (the runtime flushes stdout after each
// launch); assert, __trap and __brkpt fail the launch (code 710) naming the kernel, the block, the
// thread and the body's line, and the rest of the grid is abandoned.
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : kd_host_fail_v1(710, "assertion '" #e "' failed", nullptr, __FILE__, __LINE__, &kd_host_ix))
#endif
[[noreturn]] __forceinline__ void __trap(KD_HOST_SITE) { kd_host_fail_v1(710, "__trap()", nullptr, file, line, &kd_host_ix); }
[[noreturn]] __forceinline__ void __brkpt(KD_HOST_SITE) { kd_host_fail_v1(710, "__brkpt()", nullptr, file, line, &kd_host_ix); }
__forceinline__ long long clock64() {
#if defined(__x86_64__) || defined(__i386__)
    return (long long)__builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    unsigned long long ticks;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(ticks));
    return (long long)ticks;
#endif
}
__forceinline__ long clock() { return (long)clock64(); }
#undef KD_HOST_SITE

// ---------------------------------------------------------------------------------------------
// Checked array parameters. Rule: in a checked build the kernel's prologue (kernel.cu.j2) passes
// each array parameter through kd_host::check_array, which registers it for the race check and,
// with the bounds check, returns a pointer that knows its name, extent and shape and checks every
// access through it (index, dereference, ->); arithmetic keeps the knowledge, and it converts to
// the raw pointer wherever one is needed (which then goes unchecked). A failure names the access's
// site by its return address, which the Python side maps to file:line with the line table.
namespace kd_host {
struct shape {  // an array parameter's extents, held by value (no memory traffic on the hot path)
    long long dims[8];
    unsigned int ndim;
};
template <class T> struct checked {
    T* p;
    T* base;
    unsigned long long extent;
    const char* name;
    shape axes;

    __forceinline__ void at(long long k) const {
        if (__builtin_expect((unsigned long long)k >= extent, 0)) fail(k);
    }
    [[noreturn]] __forceinline__ void fail(long long k) const {
        const shape copy = axes;
        kd_host_bounds_fail_v1(name, k, extent, copy.dims, copy.ndim, &kd_host_ix);
    }
    template <class I, if_integral<I> = 0> __forceinline__ T& operator[](I i) const {
        at((long long)(p - base) + (long long)i);
        return p[i];
    }
    __forceinline__ T& operator*() const {
        at(p - base);
        return *p;
    }
    __forceinline__ T* operator->() const {
        at(p - base);
        return p;
    }
    __forceinline__ operator T*() const { return p; }
    template <class U> __forceinline__ explicit operator U*() const { return (U*)p; }
    template <class I, if_integral<I> = 0> __forceinline__ checked operator+(I i) const { return moved(p + i); }
    template <class I, if_integral<I> = 0> __forceinline__ friend checked operator+(I i, const checked& c) { return c.moved(c.p + i); }
    template <class I, if_integral<I> = 0> __forceinline__ checked operator-(I i) const { return moved(p - i); }
    __forceinline__ ptrdiff_t operator-(const checked& o) const { return p - o.p; }
    __forceinline__ ptrdiff_t operator-(const T* o) const { return p - o; }
    template <class I, if_integral<I> = 0> __forceinline__ checked& operator+=(I i) { p += i; return *this; }
    template <class I, if_integral<I> = 0> __forceinline__ checked& operator-=(I i) { p -= i; return *this; }
    __forceinline__ checked& operator++() { ++p; return *this; }
    __forceinline__ checked& operator--() { --p; return *this; }
    __forceinline__ checked operator++(int) { checked old = *this; ++p; return old; }
    __forceinline__ checked operator--(int) { checked old = *this; --p; return old; }
    __forceinline__ checked moved(T* to) const { checked c = *this; c.p = to; return c; }
};
// reinterpret_cast in a bounds-checked build (the shim defines it to this at its end): a checked
// array reinterpreted as another pointer type stays checked, its extent in the new type's units
// (a vectorized load through float4 is checked in float4s); anything else is the plain cast.
template <class T> struct is_checked { static constexpr bool value = false; };
template <class T> struct is_checked<checked<T>> { static constexpr bool value = true; };
template <class T> struct remove_cvref { typedef T type; };
template <class T> struct remove_cvref<T&> { typedef typename remove_cvref<T>::type type; };
template <class T> struct remove_cvref<T&&> { typedef typename remove_cvref<T>::type type; };
template <class T> struct remove_cvref<const T> { typedef T type; };
template <class To, class From, typename enable_if<!is_checked<typename remove_cvref<From>::type>::value, int>::type = 0>
__forceinline__ To reinterpret(From&& value) {
    return reinterpret_cast<To>(value);
}
template <class To> struct pointee_of;
template <class V> struct pointee_of<V*> { typedef V type; };
template <class To, class U, typename enable_if<!is_integral<To>::value, int>::type = 0>
__forceinline__ checked<typename pointee_of<To>::type> reinterpret(const checked<U>& c) {
    typedef typename pointee_of<To>::type V;
    const unsigned long long bytes = c.extent * sizeof(U);
    return checked<V>{reinterpret_cast<V*>(c.p), reinterpret_cast<V*>(c.base), bytes / sizeof(V), c.name, shape{{0}, 0}};
}
template <class To, class U, typename enable_if<is_integral<To>::value, int>::type = 0>
__forceinline__ To reinterpret(const checked<U>& c) {
    return reinterpret_cast<To>(c.p);
}
template <class T> struct dynamic_shared {
    __forceinline__ operator T*() const { return reinterpret_cast<T*>(kd_host_dynamic_shared_v1()); }
};
template <class T> __forceinline__ auto check_array(T* p, const char* name, const shape& axes) {
    unsigned long long extent = 1;
    for (unsigned int a = 0; a < axes.ndim; ++a) extent *= axes.dims[a] > 0 ? (unsigned long long)axes.dims[a] : 0ull;
#if KD_CHECKS & (2 | 4)
    // Registered by a block's first thread: thread 0, unless a seeded schedule shuffles them (for
    // the race check's records, and to name the array in the init check's reports).
    if (KD_CHECK_SEED || (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0))
        kd_host_check_array_v1((const void*)p, extent * sizeof(T), (unsigned int)sizeof(T), name);
#endif
#if (KD_CHECKS & 1) && KD_CHECK_POINTERS
    return checked<T>{p, p, extent, name, axes};
#else
    (void)name;
    return p;
#endif
}
}  // namespace kd_host
// The cache-hinted loads and stores take a checked array as they take a pointer (and check it).
#define KD_HOST_CHECKED_LOAD(name) \
    template <class T> __forceinline__ T name(const kd_host::checked<T>& p) { return *p; } \
    template <class T> __forceinline__ T name(const kd_host::checked<const T>& p) { return *p; }
KD_HOST_CHECKED_LOAD(__ldg)
KD_HOST_CHECKED_LOAD(__ldca)
KD_HOST_CHECKED_LOAD(__ldcg)
KD_HOST_CHECKED_LOAD(__ldcs)
KD_HOST_CHECKED_LOAD(__ldlu)
KD_HOST_CHECKED_LOAD(__ldcv)
#undef KD_HOST_CHECKED_LOAD
#define KD_HOST_CHECKED_STORE(name) \
    template <class T> __forceinline__ void name(const kd_host::checked<T>& p, T v) { *p = v; }
KD_HOST_CHECKED_STORE(__stwb)
KD_HOST_CHECKED_STORE(__stcg)
KD_HOST_CHECKED_STORE(__stcs)
KD_HOST_CHECKED_STORE(__stwt)
#undef KD_HOST_CHECKED_STORE
#if KD_CHECKS
// Marks a checked module: the Python side keeps its image, whose line table names report sites.
extern "C" __attribute__((visibility("default"), used)) const unsigned int kd_host_checks_v1 = KD_CHECKS;
#endif

// ---------------------------------------------------------------------------------------------
// Refused constructs. Rule: fail at compile time naming the construct. Inline PTX has no host
// meaning (the shim itself spells GNU asm `__asm__`).
#define asm static_assert(false, "inline PTX (asm) has no host equivalent: the CPU device cannot run it");

// ---------------------------------------------------------------------------------------------
// The launch trampoline. Rule: KD_HOST_KERNEL(entry, parameter types...) follows each kernel and
// exports `kd_host_fn_<entry>`, whose run_blocks unpacks the kernel's parameters once per call
// and runs blocks [first, end) of the grid: as a loop over the block's threads calling the
// kernel inlined, or through the runtime's fibers. The kernel's address is taken with its exact
// type, since its name may also name prelude overloads.
namespace kd_host {
// Where this module's thread-locals (its __shared__ variables) start on the running OS thread:
// mapping a shared address to another block of a cluster is an offset between two threads' copies.
// Aligned beyond the static TLS block's alignment (64 bytes on x86-64 and AArch64 glibc), so the
// module's thread-locals are never placed in the static TLS block: glibc places a small block that
// TLS descriptors reach there when it fits, and a few dozen modules would then spend the surplus
// that libraries loaded later with initial-exec TLS need (PyTorch's libgomp: "cannot allocate
// memory in static TLS block").
alignas(256) static thread_local char tls_anchor;
// The running block's own shared memory, written into the index before a chunk of blocks runs:
// this module's thread-locals on this OS thread (found once per OS thread) and the launch's
// dynamic shared bytes. Out of line, and before any of the kernel's code: the first access to a
// module's thread-locals on an OS thread may take the dynamic linker's slow path (it allocates
// them), which some glibc versions run without preserving the vector registers that TLS
// descriptors promise to keep; made here, with nothing live, it leaves the kernel the fast path.
struct thread_locals {
    unsigned long long base, bytes;
    bool known;
};
static thread_local thread_locals own_thread_locals;
__attribute__((noinline)) static void bind_shared(const kd_host_launch* launch) {
#if KD_HOST_PLAIN_SHARED_ATOMICS
    kd_host_index& ix = kd_host_ix;
    thread_locals& t = own_thread_locals;
    if (__builtin_expect(!t.known, 0)) {
        t.base = kd_host_thread_locals_v1(&tls_anchor, &t.bytes);
        t.known = true;
    }
    ix.shared = t.base;
    ix.shared_bytes = t.bytes;
    ix.dynamic_shared = launch->dynamic_shared ? (unsigned long long)(__UINTPTR_TYPE__)kd_host_dynamic_shared_v1() : 0;
    ix.dynamic_shared_bytes = ix.dynamic_shared ? launch->dynamic_shared : 0;
#else
    (void)launch;
    __asm__ __volatile__("" : : "r"(&tls_anchor));  // the first access, made here
#endif
}
template <unsigned I, class T> struct slot { T value; };
template <class S, class... A> struct pack;
template <unsigned... I, class... A> struct pack<seq<I...>, A...> : slot<I, A>... {
    explicit pack(void** p) : slot<I, A>{*static_cast<A*>(p[I])}... { (void)p; }
    template <void (*F)(A...)> __forceinline__ void call() { F(static_cast<slot<I, A>&>(*this).value...); }
};
template <class Sig> struct signature;
template <class... A> struct signature<void(A...)> {
    typedef pack<typename make_seq<sizeof...(A)>::type, A...> args;
    static constexpr unsigned int count = sizeof...(A);
};
#if KD_HOST_FIBERS && !KD_CHECKS && !KD_CHECK_SEED
// A thread of the chain returned from the kernel: its exit recorded where warp collectives read
// it (a module without them records none: the runtime ends a block when no thread waits); true
// when the runtime must see it, as it may have left a collective of its warp waiting.
__forceinline__ bool exit_needs_runtime() {
#if KD_HOST_WARPS
    const kd_host_fiber* const f = kd_host_ix.fiber;
    kd_host_warp* const w = f->warp;
    w->exited |= 1u << (f->linear & 31u);
    return w->arrived != 0;
#else
    return false;
#endif
}
#endif
template <class Sig, Sig* F> struct kernel {
    typedef typename signature<Sig>::args args;
    // A thread on a fiber, for the runtime's own starter (checked builds, a seeded schedule,
    // AddressSanitizer in the process).
    static void fiber(void* a) { static_cast<args*>(a)->template call<F>(); }
#if KD_HOST_FIBERS && !KD_CHECKS && !KD_CHECK_SEED
    // The chain: entered from the starter on a fresh stack, it runs the block's next threads there
    // one after another, the kernel inlined, until a thread waits (it switches away inside the
    // kernel; the starter, armed on another stack, starts the next), a thread finishes while
    // another is runnable (it resumes that one: this stack is done), or no thread is left to start
    // (the runtime ends the block, or reports what the others wait for).
    [[noreturn]] __attribute__((flatten)) static void chain() {
        kd_host_block* const s = kd_host_ix.scheduler;
        // The starter brought this chain here, on its stack: armed again, with the block's next
        // stack, while threads remain to start after the one this chain starts now.
        if (s->next_start + 1 >= s->n) s->start.pc = nullptr;
        else if (__builtin_expect(s->arms < s->ntops, 1)) s->start.sp = s->tops[s->arms++];
        else kd_host_chain_arm_v1();  // (the runtime maps more stacks)
        for (;;) {
            // (The block and the running thread are read again after the kernel, not kept in the
            // frame that a waiting thread's resumption reads back: the smaller it is, the fewer
            // cache lines each of the block's waiting threads keeps.)
            kd_host_block* const b = kd_host_ix.scheduler;
            select(&b->fibers[b->next_start++]);
            static_cast<args*>(b->args)->template call<F>();
            kd_host_block* const e = kd_host_ix.scheduler;
            if (__builtin_expect(!exit_needs_runtime(), 1)) {
                if (kd_host_fiber* const next = e->next) kd_host_jump(&pop_next(e, next)->context);
                if (e->next_start < e->n) continue;
            }
            kd_host_chain_end_v1();
        }
    }
    static constexpr void (*chain_entry)(void) = &chain;
#else
    static constexpr void (*chain_entry)(void) = nullptr;
#endif
    static int run_fibers(const kd_host_launch* launch, void** params, unsigned long long first, unsigned long long end) {
        bind_shared(launch);
        args a(params);
        return kd_host_run_fibers_v1(launch, first, end, &fiber, chain_entry, &a, &tls_anchor);
    }
    __attribute__((flatten)) static int run_loop(const kd_host_launch* launch, void** params, unsigned long long first,
                                                 unsigned long long end) {
        bind_shared(launch);
        kd_host_index& ix = kd_host_ix;
        args a(params);
        const unsigned int bx = launch->block[0], by = launch->block[1], bz = launch->block[2];
        const unsigned int gx = launch->grid[0], gy = launch->grid[1];
        set_index(ix.block_dim, uint3{bx, by, bz});
        set_index(ix.grid_dim, uint3{gx, gy, launch->grid[2]});
        set_index(ix.cluster_dim, uint3{launch->cluster[0], launch->cluster[1], launch->cluster[2]});
        uint3 block = {(unsigned int)(first % gx), (unsigned int)(first / gx % gy), (unsigned int)(first / gx / gy)};
        for (unsigned long long b = first; b < end; ++b) {
            set_index(ix.block, block);
#if KD_CHECK_SEED
            const unsigned int n = bx * by * bz;
            const unsigned int* order = kd_host_check_order_v1(KD_CHECK_SEED, b, n);
            for (unsigned int k = 0; k < n; ++k) {
                const unsigned int l = order[k];
                set_index(ix.thread, uint3{l % bx, l / bx % by, l / bx / by});
                a.template call<F>();
            }
#elif KD_HOST_SPLIT
            (void)bx, (void)by, (void)bz;
            a.template call<F>();  // (a split kernel loops over its block's threads itself: "Split blocks")
#else
            for (unsigned int z = 0; z < bz; ++z)
                for (unsigned int y = 0; y < by; ++y)
                    for (unsigned int x = 0; x < bx; ++x) {
                        set_index(ix.thread, uint3{x, y, z});
                        a.template call<F>();
                    }
#endif
            if (++block.x == gx) {
                block.x = 0;
                if (++block.y == gy) { block.y = 0; ++block.z; }
            }
        }
        return 0;
    }
    // A checked build tells the runtime its checks (and where its __shared__ variables live) first.
    static int run_checked(const kd_host_launch* launch, void** params, unsigned long long first, unsigned long long end) {
        bind_shared(launch);
        kd_host_check_begin_v1(launch, KD_CHECKS, KD_CHECK_SEED, &tls_anchor);
        return KD_HOST_FIBERS ? run_fibers(launch, params, first, end) : run_loop(launch, params, first, end);
    }
    static constexpr int (*run)(const kd_host_launch*, void**, unsigned long long, unsigned long long) =
        KD_CHECKS || KD_CHECK_SEED ? &run_checked : KD_HOST_FIBERS ? &run_fibers : &run_loop;
};
}  // namespace kd_host
// The module's inline wait sites (see kd_host_site), for the runtime: [begin, end).
#if KD_HOST_SITES
extern "C" {
extern const kd_host_site __start_kd_host_sites[] __attribute__((weak, visibility("hidden")));
extern const kd_host_site __stop_kd_host_sites[] __attribute__((weak, visibility("hidden")));
}
extern "C" __attribute__((visibility("default"), used)) const kd_host_site* const kd_host_sites_v1[2] = {
    __start_kd_host_sites, __stop_kd_host_sites};
#endif
#define KD_HOST_KERNEL(entry, ...) \
    extern "C" __attribute__((visibility("default"), used)) const kd_host_function kd_host_fn_##entry = { \
        KD_HOST_MAGIC, KD_HOST_ABI, #entry, kd_host::kernel<void(__VA_ARGS__), &entry>::run, KD_HOST_FIBERS, \
        kd_host::signature<void(__VA_ARGS__)>::count};

#if (KD_CHECKS & 1) && KD_CHECK_POINTERS
#define reinterpret_cast kd_host::reinterpret
#endif

// Everything after the shim (the prelude, the user's code, the kernels) is private to its module,
// so the compiler may inline kernels and device functions: modules are built with
// -fvisibility=hidden (a #pragma here would not survive the precompiled shim), and only what is
// marked visibility("default") above is exported.
#endif  // KD_HOST_H
