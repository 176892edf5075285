/* kerneldsl._fastlaunch: the warm launch path of @kd.kernel, in C.
 *
 * A kernel call first runs the Python reference path (dispatch.py, the generated adapter,
 * Session.launch). Once a call with DeviceArrays and scalars has launched, fastpath.py
 * registers that specialization's launch table here as a Launch, guarded by what selected it:
 * the arrays' dispatch tags and the scalars' types. A later call that passes the guards is
 * validated, packed and launched here without a Python frame.
 *
 * Anything unusual -- keyword arguments other than out= / stream= / alpha= / beta= where the
 * entry takes them, another stream than the entry's, a failed check, a scalar that does not fit, a
 * session that is closing, has queued frees or is capturing -- falls back to the Python path,
 * which raises the precise error. This file never judges user input on its own; it only
 * recognises the common case the Python path has already accepted.
 *
 * The GIL is held across cuLaunchKernel, so Session.close() in another thread cannot tear the
 * context down between the checks and the launch; the parameters live on the C stack.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Pack2 _PyFloat_Pack2
#define PyFloat_Pack4 _PyFloat_Pack4
#define PyFloat_Pack8 _PyFloat_Pack8
#endif

typedef int (*launch_fn)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                         void **extra);

/* cuLaunchKernelEx and the parts of cuda.h's CUlaunchConfig / CUlaunchAttribute it reads: the
 * layout is the driver ABI (an attribute is its 4-byte id, padding to 8, a 64-byte value). */
typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int cooperative;
        struct { unsigned x, y, z; } cluster;
    } value;
} launch_attribute;
typedef struct {
    unsigned grid[3], block[3], shared;
    void *stream;
    launch_attribute *attrs;
    unsigned nattrs;
} launch_config;
typedef int (*launch_ex_fn)(const launch_config *config, void *function, void **params, void **extra);
#define ATTRIBUTE_COOPERATIVE 2
#define ATTRIBUTE_CLUSTER_DIMENSION 4

#define MAX_ARGS 64
#define MAX_ARRAYS 16
#define MAX_NDIM 8
#define MAX_SYMS 16
#define MAX_CHECKS 64
#define MAX_ALIASES 64
#define MAX_PROGRAM 128
#define MAX_STACK 16
#define MAX_SLOTS 64
#define MAX_ENTRIES 8
#define MAX_ARRAY_SLOTS 32
#define INVALID_CONTEXT 201

/* What cuLaunchKernel takes without an opt-in, and what a 32-bit index_t numbers: kerneldsl's
 * runtime/limits.py, handed over by set_launch_limits(). Until then every limit is 0, so every
 * launch is the Python path's to judge. */
static struct {
    unsigned long long grid[3], block[3], block_threads, shared, index32_threads;
} limits;

/* Launch-dimension programs: postfix over int64, one program per grid/block axis and shared, then
 * one per computed extent (a check whose symbol is CHECK_COMPUTED compares with the value of the
 * program its value numbers). */
#define CHECK_COMPUTED -2
enum { OP_END, OP_INT, OP_SYM, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_CDIV, OP_MIN, OP_MAX };

/* What goes in each 8-byte parameter slot (mirrors the adapter's struct format). */
enum {
    SLOT_PTR, SLOT_SYM32, SLOT_SYM64, SLOT_BOOL,
    SLOT_I8, SLOT_I16, SLOT_I32, SLOT_I64, SLOT_U8, SLOT_U16, SLOT_U32, SLOT_U64,
    SLOT_F16, SLOT_F32, SLOT_F64, SLOT_KINDS
};

/* Where DeviceArray keeps what a launch reads: its __slots__ offsets, read by configure(). A
 * Layout never changes once made; every entry and allocator holds the one current when it was
 * made and reads arrays only through it, so a configure() from Python code that a call runs (a
 * scalar's __float__, allocate()) cannot change the offsets a call in progress reads with. */
typedef struct {
    PyObject_HEAD
    PyTypeObject *type;
    Py_ssize_t session, closed, shape, ptr, nbytes, tag, raw, ref;
    /* Every object slot of the class (its own and its bases'): what an array made here copies
     * from a template; none (count 0) when the class keeps anything in a __dict__. */
    Py_ssize_t slots[MAX_ARRAY_SLOTS];
    int count;
    PyObject *kind; /* DeviceArray.kind: how the session's registry and queue name its memory */
} Layout;

static void layout_dealloc(Layout *Y)
{
    Py_XDECREF(Y->type);
    Py_XDECREF(Y->kind);
    Py_TYPE(Y)->tp_free((PyObject *)Y);
}

static PyTypeObject LayoutType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kerneldsl._fastlaunch.Layout",
    .tp_doc = "Where DeviceArray keeps its fields, as configure() found them.",
    .tp_basicsize = sizeof(Layout),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)layout_dealloc,
};

static Layout *layout = NULL; /* the current one: what new entries and allocators take */
static PyObject *str_ok, *str_call, *str_launch_failed, *str_alpha, *str_beta, *str_out, *str_stream;
static PyObject *str_acquire, *str_release, *str_popleft, *str_appendleft;

typedef int (*pool_alloc_fn)(unsigned long long *ptr, size_t bytes, void *pool, void *stream);
typedef int (*async_free_fn)(unsigned long long ptr, void *stream);
typedef int (*current_context_fn)(void **context);
typedef int (*copy_to_device_fn)(unsigned long long dst, const void *src, size_t bytes, void *stream);
typedef int (*copy_to_host_fn)(void *dst, unsigned long long src, size_t bytes, void *stream);
typedef int (*stream_query_fn)(void *stream);
#define NOT_READY 600

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* What every remembered entry starts with: its attempt at a call. 1: done, *result set (new
 * reference); 0: not this entry's call, nothing done; -1: failed, exception set. */
typedef int (*attempt_fn)(PyObject *entry, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          PyObject **result);

#define ENTRY_HEAD PyObject_HEAD attempt_fn attempt;

typedef struct {
    ENTRY_HEAD
} Entry;

/* What allocating from a session's pool here takes: the entry points and objects of
 * Session.fast_allocation() (a FastAllocation, read by attribute once), and the queues
 * session_ready watches. enabled 0: the driver lacks an entry point (or DeviceArray cannot be
 * copied), every array comes from the Python path. */
typedef struct {
    PyObject_HEAD
    PyObject *session, *deferred, *captures, *lock, *handles, *dropped, *streams;
    Layout *layout;
    pool_alloc_fn pool_alloc;
    async_free_fn async_free;
    current_context_fn current_context;
    void *pool, *context, *stream;
    int enabled;
    /* Host transfers (upload/download): cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuStreamQuery, and
     * how long a copy's wait may spin here (ns); copies 0: some entry point is missing. */
    copy_to_device_fn copy_to_device;
    copy_to_host_fn copy_to_host;
    stream_query_fn stream_query;
    unsigned long long spin_ns;
    int copies;
} Allocator;

static PyTypeObject AllocatorType;

typedef struct {
    ENTRY_HEAD
    Layout *layout;
    PyObject *session;
    PyObject *deferred; /* session.fast_path_watch()[0]: frees queued by finalizers */
    PyObject *captures; /* session.fast_path_watch()[1]: graphs being captured */
    PyObject *guards;   /* per argument: the dispatch tag (arrays) or the type (scalars) */
    launch_fn launch;
    void *function;
    void *stream;
    PyObject *stream_object; /* what stream= must be: None (the session stream) or the Stream itself */
    int out_keyword; /* the last parameter comes as out=..., and is what the call returns */
    PyObject *allocate; /* or, with out_keyword, calls without out= get allocate()'s new array (NULL: no) */
    /* Or an array made here like template, by the session's Allocator; NULL: always allocate(). */
    PyObject *allocator, *template;
    int index_bits;  /* the specialization's indexing: 32-bit builds cannot address more threads */
    /* Cooperative and cluster launches (cuLaunchKernelEx; NULL: cuLaunchKernel). Their block and
     * shared memory are constants, so what the Python path checked once holds for every call but
     * the grid: a cooperative grid of more than co_resident blocks, or one that is not a multiple
     * of cluster (0: none), is the Python path's to refuse. */
    launch_ex_fn launch_ex;
    int cooperative;
    unsigned cluster[3];
    unsigned long long co_resident;
    int nargs, narrays, nbinds, nchecks, naliases, nprogram, nslots, nextents;
    char is_array[MAX_ARGS];
    int array_arg[MAX_ARRAYS], array_ndim[MAX_ARRAYS];
    int bind_sym[MAX_SYMS], bind_array[MAX_SYMS], bind_axis[MAX_SYMS];
    int check_array[MAX_CHECKS], check_axis[MAX_CHECKS], check_sym[MAX_CHECKS];
    long long check_value[MAX_CHECKS];
    int alias_a[MAX_ALIASES], alias_b[MAX_ALIASES];
    int program_op[MAX_PROGRAM];
    long long program_arg[MAX_PROGRAM];
    int slot_kind[MAX_SLOTS], slot_index[MAX_SLOTS];
} Launch;

/* The session is open, has no frees queued by finalizers (not checked when deferred is NULL) and
 * is not capturing a graph. */
static int session_ready(PyObject *session, PyObject *deferred, PyObject *captures)
{
    PyObject *ok = PyObject_GetAttr(session, str_ok);
    if (ok == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(ok);
    if (ok != Py_True || PyList_GET_SIZE(captures) != 0)
        return 0;
    if (deferred == NULL)
        return 1;
    Py_ssize_t queued = PyObject_Length(deferred);
    if (queued < 0)
        PyErr_Clear();
    return queued == 0;
}

/* Take the release queue and the capture list session.fast_path_watch() names, for
 * session_ready; -1 with an exception if odd. */
static int take_session_queues(PyObject *session, PyObject **deferred, PyObject **captures)
{
    *deferred = *captures = NULL;
    PyObject *watch = PyObject_CallMethod(session, "fast_path_watch", NULL);
    if (watch == NULL)
        return -1;
    if (!PyTuple_Check(watch) || PyTuple_GET_SIZE(watch) != 2 || !PyList_CheckExact(PyTuple_GET_ITEM(watch, 1))) {
        Py_DECREF(watch);
        PyErr_SetString(PyExc_TypeError, "session.fast_path_watch() must return (queue, list)");
        return -1;
    }
    *deferred = Py_NewRef(PyTuple_GET_ITEM(watch, 0));
    *captures = Py_NewRef(PyTuple_GET_ITEM(watch, 1));
    Py_DECREF(watch);
    return 0;
}

static int launch_attempt(PyObject *entry, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          PyObject **result);

/* Whether a call's stream= is the entry's: None for the session stream, else the very Stream the
 * entry was made for, still open. A Stream is a Handle like DeviceArray, so its _closed slot sits
 * at the offset configure() read (fastpath checks that both classes share the member). Read it
 * after the last conversion that may run Python code. */
static int stream_matches(const Layout *Y, PyObject *given, PyObject *expected)
{
    if (given != expected)
        return 0;
    return given == Py_None || SLOT(given, Y->closed) == Py_False;
}

static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset);

/* What an entry's stream_object may be: None, or an object whose _closed member sits where a
 * DeviceArray's does (a Stream), so that stream_matches reads a real slot; -1 with TypeError if not. */
static int check_stream_object(const Layout *Y, PyObject *obj)
{
    Py_ssize_t offset;
    if (obj == Py_None)
        return 0;
    if (slot_offset(Py_TYPE(obj), "_closed", &offset) < 0 || offset != Y->closed) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "stream_object must be None or a Stream");
        return -1;
    }
    return 0;
}

/* A keyword name against an interned one: the pointers agree for every literal spelling. */
static int is_name(PyObject *name, PyObject *interned)
{
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

static int exact_int(PyObject *v, long long *out);

/* A new DeviceArray owning ptr: the template's slots, then what Handle._own and the constructor
 * set (the address as _raw and ptr, a weak reference whose callback is the session's finalizer,
 * the entry in the session's handle registry), open. NULL with an exception when Python is out
 * of memory: the address then stays reserved in the pool until the session closes. */
static PyObject *adopt(Allocator *A, PyObject *template, unsigned long long ptr)
{
    const Layout *Y = A->layout;
    PyObject *raw = PyLong_FromUnsignedLongLong(ptr);
    if (raw == NULL)
        return NULL;
    PyObject *a = Y->type->tp_alloc(Y->type, 0);
    if (a == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    for (int i = 0; i < Y->count; i++)
        SLOT(a, Y->slots[i]) = Py_XNewRef(SLOT(template, Y->slots[i]));
    Py_XSETREF(SLOT(a, Y->closed), Py_NewRef(Py_False));
    Py_XSETREF(SLOT(a, Y->ptr), Py_NewRef(raw));
    Py_XSETREF(SLOT(a, Y->raw), raw);
    PyObject *ref = PyWeakref_NewRef(a, A->dropped);
    PyObject *key = ref == NULL ? NULL : PyLong_FromVoidPtr(ref);
    PyObject *owned = key == NULL ? NULL : PyTuple_Pack(3, ref, Y->kind, raw);
    int registered = owned != NULL && PyDict_SetItem(A->handles, key, owned) == 0;
    Py_XDECREF(key);
    Py_XDECREF(owned);
    if (!registered) {
        Py_XDECREF(ref);
        Py_DECREF(a);
        return NULL;
    }
    Py_XSETREF(SLOT(a, Y->ref), ref);
    return a;
}

/* Free, on the session stream, the device memory finalizers queued, as Session._drain_deferred
 * would: 1 once the queue is empty. 0 when it holds another kind, the session has a second
 * stream (frees must then wait for it), or a free fails (the entry goes back to the front): the
 * Python path then frees the rest and reports. */
static int drain_here(Allocator *A)
{
    if (PyObject_Length(A->deferred) == 0)
        return 1;
    if (PyObject_Length(A->streams) != 1) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t queued;
    while ((queued = PyObject_Length(A->deferred)) > 0) {
        PyObject *item = PyObject_CallMethodNoArgs(A->deferred, str_popleft);
        if (item == NULL) /* emptied meanwhile (a drain in another thread) */
            break;
        unsigned long long ptr = 0;
        int ours = PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2 &&
                   is_name(PyTuple_GET_ITEM(item, 0), A->layout->kind) && PyLong_CheckExact(PyTuple_GET_ITEM(item, 1));
        if (ours) {
            ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
            ours = !PyErr_Occurred();
        }
        if (!ours || A->async_free(ptr, A->stream) != 0) {
            PyErr_Clear();
            Py_XDECREF(PyObject_CallMethodOneArg(A->deferred, str_appendleft, item));
            Py_DECREF(item);
            PyErr_Clear();
            return 0;
        }
        Py_DECREF(item);
    }
    PyErr_Clear();
    return queued <= 0;
}

/* Take the session lock without waiting, as an activation would: 1 when taken (no exception either way). */
static int lock_here(Allocator *A)
{
    PyObject *taken = PyObject_CallMethodOneArg(A->lock, str_acquire, Py_False);
    if (taken == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(taken);
    return taken == Py_True;
}

/* Release what lock_here took, keeping the exception being raised, if any; -1 only when releasing
 * fails, which cannot happen: this thread holds the RLock. */
static int unlock_here(Allocator *A)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *released = PyObject_CallMethodNoArgs(A->lock, str_release);
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, tb);
    return 0;
}

/* With the lock held: a new array like template (nbytes > 0) at *ptr, when the session's context
 * is current on this thread, the queued frees are done and cuMemAllocFromPoolAsync on the session
 * stream grants it; else NULL, with an exception only when Python is out of memory. */
static PyObject *allocate_locked(Allocator *A, PyObject *template, long long nbytes, unsigned long long *ptr)
{
    PyObject *made = NULL;
    void *current = NULL;
    *ptr = 0;
    if (A->current_context(&current) == 0 && current == A->context && drain_here(A) &&
        A->pool_alloc(ptr, (size_t)nbytes, A->pool, A->stream) == 0) {
        made = adopt(A, template, *ptr);
        if (made != NULL && *ptr % 16 != 0) /* the template's dispatch tag says aligned: drop it (a queued free) */
            Py_CLEAR(made);
    }
    return made;
}

/* A new array like template, made here: holding the session lock (taken without waiting,
 * as an activation would), allocate_locked. NULL without an exception when any of it
 * is not so or the driver refuses (out of memory included): the Python path (DeviceArray's
 * constructor) then decides (trims and retries, raises OutOfMemoryError, poisons). NULL with an exception only when
 * Python is out of memory. The caller checked that the session is usable and not capturing; the
 * GIL is held throughout, so neither changes before the lock is taken. */
static PyObject *allocate_here(Allocator *A, PyObject *template)
{
    long long nbytes;
    unsigned long long ptr;
    if (Py_TYPE(template) != A->layout->type || !exact_int(SLOT(template, A->layout->nbytes), &nbytes) || nbytes <= 0)
        return NULL;
    if (!lock_here(A))
        return NULL;
    PyObject *made = allocate_locked(A, template, nbytes, &ptr);
    if (unlock_here(A) < 0) {
        Py_XDECREF(made);
        return NULL;
    }
    return made;
}

/* Called without the GIL, the lock held: poll cuStreamQuery for at most spin_ns until the session
 * stream has done its work. 1 when it has; 0 when it has not yet, or the query failed (the Python
 * path's interruptible wait then waits, or reports the error). */
static int spin_until_done(const Allocator *A)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int err = A->stream_query(A->stream);
        if (err != NOT_READY)
            return err == 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long spent = (long long)(now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec);
        if (spent < 0 || (unsigned long long)spent >= A->spin_ns)
            return 0;
    }
}

/* What a copy made here returns: (array, done) for an upload, done for a download (True: the copy
 * has finished; False: it may still run, the caller waits for the stream keeping the host memory
 * alive); the CUresult as an int when the driver refused the copy (an upload's array is dropped,
 * a queued free); None when the Python path should do it all (nothing was done). */
static PyObject *copy_result(PyObject *made, int err, int done)
{
    if (err != 0) {
        Py_XDECREF(made);
        return PyLong_FromLong(err);
    }
    PyObject *flag = Py_NewRef(done ? Py_True : Py_False);
    if (made == NULL)
        return flag;
    PyObject *pair = PyTuple_Pack(2, made, flag);
    Py_DECREF(made);
    Py_DECREF(flag);
    return pair;
}

/* upload(template, host): a new array like template (a DeviceArray.template of the session) with
 * host's bytes (an object exporting a C-contiguous buffer of the template's size), made and
 * filled here under one hold of the session lock: allocate_locked, then cuMemcpyHtoDAsync on the
 * session stream and spin_until_done, both without the GIL. See copy_result. */
static PyObject *allocator_upload(Allocator *A, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || Py_TYPE(args[0]) != A->layout->type || SLOT(args[0], A->layout->session) != A->session) {
        PyErr_SetString(PyExc_TypeError, "upload() takes a DeviceArray.template of the allocator's session and a host buffer");
        return NULL;
    }
    PyObject *template = args[0], *size = SLOT(template, A->layout->nbytes);
    long long nbytes;
    if (!A->copies || size == NULL || !exact_int(size, &nbytes) || nbytes <= 0 ||
        !session_ready(A->session, NULL, A->captures))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *made = NULL;
    unsigned long long ptr = 0;
    int err = 0, done = 0, locked = view.len == nbytes && lock_here(A);
    if (locked && session_ready(A->session, NULL, A->captures)) /* again, now that close() cannot run */
        made = allocate_locked(A, template, nbytes, &ptr);
    if (made != NULL) {
        const void *src = view.buf;
        Py_BEGIN_ALLOW_THREADS
        err = A->copy_to_device(ptr, src, (size_t)nbytes, A->stream);
        done = err == 0 && spin_until_done(A);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = made == NULL ? NULL : copy_result(made, err, done);
    if (locked && unlock_here(A) < 0)
        Py_CLEAR(result);
    PyBuffer_Release(&view);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* Copy between array (an open DeviceArray of the session, which the caller checked is contiguous)
 * and host (an object exporting a C-contiguous buffer of its size, writable for a download) here,
 * under the session lock with the context current: cuMemcpyHtoDAsync (to_device) or
 * cuMemcpyDtoHAsync on the session stream, after the work queued there, and spin_until_done, both
 * without the GIL. See copy_result. */
static PyObject *copy_existing(Allocator *A, PyObject *const *args, Py_ssize_t nargs, int to_device)
{
    const Layout *Y = A->layout;
    if (nargs != 2 || Py_TYPE(args[0]) != Y->type) {
        PyErr_SetString(PyExc_TypeError, "download() and upload_into() take a DeviceArray and a host buffer");
        return NULL;
    }
    PyObject *array = args[0];
    if (!A->copies || SLOT(array, Y->session) != A->session || !session_ready(A->session, NULL, A->captures))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, to_device ? PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    if (lock_here(A)) { /* read the array under the lock: no other thread closes it meanwhile */
        PyObject *address = SLOT(array, Y->ptr), *size = SLOT(array, Y->nbytes);
        long long nbytes;
        unsigned long long ptr = 0;
        void *current = NULL;
        if (session_ready(A->session, NULL, A->captures) && SLOT(array, Y->closed) == Py_False && address != NULL &&
            PyLong_CheckExact(address) && size != NULL &&
            exact_int(size, &nbytes) && nbytes > 0 && nbytes == view.len &&
            A->current_context(&current) == 0 && current == A->context) {
            ptr = PyLong_AsUnsignedLongLong(address);
            if (ptr == (unsigned long long)-1 && PyErr_Occurred())
                PyErr_Clear();
            else {
                void *buf = view.buf;
                int err, done;
                Py_BEGIN_ALLOW_THREADS
                err = to_device ? A->copy_to_device(ptr, buf, (size_t)nbytes, A->stream)
                                : A->copy_to_host(buf, ptr, (size_t)nbytes, A->stream);
                done = err == 0 && spin_until_done(A);
                Py_END_ALLOW_THREADS
                result = copy_result(NULL, err, done);
            }
        }
        if (unlock_here(A) < 0)
            Py_CLEAR(result);
    }
    PyBuffer_Release(&view);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* download(array, out): copy_existing from the device into out. */
static PyObject *allocator_download(Allocator *A, PyObject *const *args, Py_ssize_t nargs)
{
    return copy_existing(A, args, nargs, 0);
}

/* upload_into(array, host): copy_existing from host into the array. */
static PyObject *allocator_upload_into(Allocator *A, PyObject *const *args, Py_ssize_t nargs)
{
    return copy_existing(A, args, nargs, 1);
}

/* --- Allocator: a session's pool, allocated from here ------------------------------------------- */

/* given.name, an address as an unsigned integer; -1 with an exception if missing or not one. */
static int read_address(PyObject *given, const char *name, unsigned long long *out)
{
    PyObject *value = PyObject_GetAttrString(given, name);
    if (value == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *allocator_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"session", NULL};
    PyObject *session;
    if (layout == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.configure(DeviceArray) was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Allocator", names, &session))
        return NULL;
    PyObject *given = PyObject_CallMethod(session, "fast_allocation", NULL);
    if (given == NULL)
        return NULL;
    unsigned long long alloc, free_, current, pool, context, stream, htod, dtoh, query, spin_ns;
    PyObject *lock = NULL, *handles = NULL, *dropped = NULL, *streams = NULL;
    Allocator *A = NULL;
    if (read_address(given, "alloc", &alloc) == 0 && read_address(given, "free", &free_) == 0 &&
        read_address(given, "current", &current) == 0 && read_address(given, "pool", &pool) == 0 &&
        read_address(given, "context", &context) == 0 && read_address(given, "stream", &stream) == 0 &&
        read_address(given, "copy_to_device", &htod) == 0 && read_address(given, "copy_to_host", &dtoh) == 0 &&
        read_address(given, "stream_query", &query) == 0 && read_address(given, "spin_ns", &spin_ns) == 0 &&
        (lock = PyObject_GetAttrString(given, "lock")) != NULL &&
        (handles = PyObject_GetAttrString(given, "handles")) != NULL &&
        (dropped = PyObject_GetAttrString(given, "dropped")) != NULL &&
        (streams = PyObject_GetAttrString(given, "streams")) != NULL) {
        if (!PyDict_Check(handles))
            PyErr_SetString(PyExc_TypeError, "session.fast_allocation().handles must be a dict");
        else
            A = (Allocator *)type->tp_alloc(type, 0);
    }
    if (A != NULL) {
        A->session = Py_NewRef(session);
        A->layout = (Layout *)Py_NewRef(layout);
        A->lock = Py_NewRef(lock);
        A->handles = Py_NewRef(handles);
        A->dropped = Py_NewRef(dropped);
        A->streams = Py_NewRef(streams);
        A->enabled = alloc && free_ && current && A->layout->count;
        A->pool_alloc = (pool_alloc_fn)(uintptr_t)alloc;
        A->async_free = (async_free_fn)(uintptr_t)free_;
        A->current_context = (current_context_fn)(uintptr_t)current;
        A->pool = (void *)(uintptr_t)pool;
        A->context = (void *)(uintptr_t)context;
        A->stream = (void *)(uintptr_t)stream;
        A->copies = A->enabled && htod && dtoh && query;
        A->copy_to_device = (copy_to_device_fn)(uintptr_t)htod;
        A->copy_to_host = (copy_to_host_fn)(uintptr_t)dtoh;
        A->stream_query = (stream_query_fn)(uintptr_t)query;
        A->spin_ns = spin_ns;
        if (take_session_queues(session, &A->deferred, &A->captures) < 0)
            Py_CLEAR(A);
    }
    Py_XDECREF(lock);
    Py_XDECREF(handles);
    Py_XDECREF(dropped);
    Py_XDECREF(streams);
    Py_DECREF(given);
    return (PyObject *)A;
}

static int allocator_traverse(Allocator *A, visitproc visit, void *arg)
{
    Py_VISIT(A->session);
    Py_VISIT(A->deferred);
    Py_VISIT(A->captures);
    Py_VISIT(A->lock);
    Py_VISIT(A->handles);
    Py_VISIT(A->dropped);
    Py_VISIT(A->streams);
    return 0;
}

static int allocator_clear(Allocator *A)
{
    Py_CLEAR(A->session);
    Py_CLEAR(A->deferred);
    Py_CLEAR(A->captures);
    Py_CLEAR(A->lock);
    Py_CLEAR(A->handles);
    Py_CLEAR(A->dropped);
    Py_CLEAR(A->streams);
    Py_CLEAR(A->layout);
    return 0;
}

static void allocator_dealloc(Allocator *A)
{
    PyObject_GC_UnTrack(A);
    allocator_clear(A);
    Py_TYPE(A)->tp_free((PyObject *)A);
}

/* make(template): a new array like template (a DeviceArray.template of the session), or None
 * when the Python path should make it (see allocate_here). */
static PyObject *allocator_make(Allocator *A, PyObject *template)
{
    if (Py_TYPE(template) != A->layout->type || SLOT(template, A->layout->session) != A->session) {
        PyErr_SetString(PyExc_TypeError, "make() takes a DeviceArray.template of the allocator's session");
        return NULL;
    }
    PyObject *made = NULL;
    if (A->enabled && session_ready(A->session, NULL, A->captures))
        made = allocate_here(A, template);
    if (made == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return made;
}

static PyMethodDef allocator_methods[] = {
    {"make", (PyCFunction)allocator_make, METH_O, "A new array like the template, or None: the Python path makes it."},
    {"upload", (PyCFunction)(void (*)(void))allocator_upload, METH_FASTCALL,
     "A new array like the template holding the host buffer's bytes: (array, done), a CUresult, or None."},
    {"download", (PyCFunction)(void (*)(void))allocator_download, METH_FASTCALL,
     "Copy the array into the host buffer: done (a bool), a CUresult, or None."},
    {"upload_into", (PyCFunction)(void (*)(void))allocator_upload_into, METH_FASTCALL,
     "Copy the host buffer into the array: done (a bool), a CUresult, or None."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef allocator_members[] = {
    {"enabled", T_INT, offsetof(Allocator, enabled), READONLY, "Whether the driver has the entry points it calls."},
    {"copies", T_INT, offsetof(Allocator, copies), READONLY, "Whether it has those upload() and download() call too."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject AllocatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kerneldsl._fastlaunch.Allocator",
    .tp_doc = "A session's memory pool, allocated from in C (see Session.fast_allocation).",
    .tp_basicsize = sizeof(Allocator),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = allocator_new,
    .tp_dealloc = (destructor)allocator_dealloc,
    .tp_traverse = (traverseproc)allocator_traverse,
    .tp_clear = (inquiry)allocator_clear,
    .tp_methods = allocator_methods,
    .tp_members = allocator_members,
};

/* --- building a Launch from its table ---------------------------------------------------------- */

/* Read a tuple of equal-length int tuples into column arrays; -1 with ValueError if malformed. */
static int read_table(PyObject *table, int columns, int max_rows, long long *out, int *rows)
{
    if (!PyTuple_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "launch tables are tuples of int tuples");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(table);
    if (n > max_rows) {
        PyErr_SetString(PyExc_ValueError, "launch table too large for the C launch path");
        return -1;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *row = PyTuple_GET_ITEM(table, r);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != columns) {
            PyErr_SetString(PyExc_ValueError, "launch table row of the wrong width");
            return -1;
        }
        for (int c = 0; c < columns; c++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(row, c));
            if (v == -1 && PyErr_Occurred())
                return -1;
            out[r * columns + c] = v;
        }
    }
    *rows = (int)n;
    return 0;
}

static int in_range(long long v, long long lo, long long hi, const char *what)
{
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "launch table %s %lld out of range", what, v);
        return 0;
    }
    return 1;
}

static int load_table(Launch *L, PyObject *table)
{
    PyObject *arrays, *binds, *checks, *aliases, *program, *slots;
    if (!PyArg_ParseTuple(table, "iO!O!O!O!O!O!i:table", &L->nargs, &PyTuple_Type, &arrays,
                          &PyTuple_Type, &binds, &PyTuple_Type, &checks, &PyTuple_Type, &aliases,
                          &PyTuple_Type, &program, &PyTuple_Type, &slots, &L->index_bits))
        return -1;
    if (!in_range(L->nargs, 0, MAX_ARGS, "argument count"))
        return -1;
    if (L->index_bits != 32 && L->index_bits != 64) {
        PyErr_SetString(PyExc_ValueError, "launch table index width is 32 or 64");
        return -1;
    }
    long long t[MAX_PROGRAM * 4];
    int n;
    if (read_table(arrays, 2, MAX_ARRAYS, t, &L->narrays) < 0)
        return -1;
    for (n = 0; n < L->narrays; n++) {
        if (!in_range(t[2 * n], 0, L->nargs - 1, "array argument") || !in_range(t[2 * n + 1], 0, MAX_NDIM, "ndim"))
            return -1;
        L->array_arg[n] = (int)t[2 * n];
        L->array_ndim[n] = (int)t[2 * n + 1];
        L->is_array[L->array_arg[n]] = 1;
    }
    if (read_table(binds, 3, MAX_SYMS, t, &L->nbinds) < 0)
        return -1;
    for (n = 0; n < L->nbinds; n++) {
        if (!in_range(t[3 * n], n, n, "symbol") || !in_range(t[3 * n + 1], 0, L->narrays - 1, "bind array") ||
            !in_range(t[3 * n + 2], 0, L->array_ndim[t[3 * n + 1]] - 1, "bind axis"))
            return -1;
        L->bind_sym[n] = (int)t[3 * n];
        L->bind_array[n] = (int)t[3 * n + 1];
        L->bind_axis[n] = (int)t[3 * n + 2];
    }
    if (read_table(checks, 4, MAX_CHECKS, t, &L->nchecks) < 0)
        return -1;
    for (n = 0; n < L->nchecks; n++) {
        if (!in_range(t[4 * n], 0, L->narrays - 1, "check array") ||
            !in_range(t[4 * n + 1], 0, L->array_ndim[t[4 * n]] - 1, "check axis") ||
            !in_range(t[4 * n + 2], CHECK_COMPUTED, L->nbinds - 1, "check symbol"))
            return -1;
        L->check_array[n] = (int)t[4 * n];
        L->check_axis[n] = (int)t[4 * n + 1];
        L->check_sym[n] = (int)t[4 * n + 2];
        L->check_value[n] = t[4 * n + 3];
    }
    if (read_table(aliases, 2, MAX_ALIASES, t, &L->naliases) < 0)
        return -1;
    for (n = 0; n < L->naliases; n++) {
        if (!in_range(t[2 * n], 0, L->narrays - 1, "alias") || !in_range(t[2 * n + 1], 0, L->narrays - 1, "alias"))
            return -1;
        L->alias_a[n] = (int)t[2 * n];
        L->alias_b[n] = (int)t[2 * n + 1];
    }
    if (read_table(program, 2, MAX_PROGRAM, t, &L->nprogram) < 0)
        return -1;
    int depth = 0, ends = 0;
    for (n = 0; n < L->nprogram; n++) {
        int op = (int)t[2 * n];
        if (!in_range(op, OP_END, OP_MAX, "opcode"))
            return -1;
        if (op == OP_SYM && !in_range(t[2 * n + 1], 0, L->nbinds - 1, "program symbol"))
            return -1;
        depth += (op == OP_INT || op == OP_SYM) ? 1 : -1;
        if (op == OP_END) {
            if (depth != 0) {
                PyErr_SetString(PyExc_ValueError, "launch table program leaves the stack unbalanced");
                return -1;
            }
            ends++;
        } else if (depth < 1 || depth > MAX_STACK) {
            PyErr_SetString(PyExc_ValueError, "launch table program stack out of range");
            return -1;
        }
        L->program_op[n] = op;
        L->program_arg[n] = t[2 * n + 1];
    }
    if (ends < 7 || ends > 7 + MAX_CHECKS) {
        PyErr_SetString(PyExc_ValueError, "launch table needs 7 programs (grid, block, shared), then computed extents");
        return -1;
    }
    L->nextents = ends - 7;
    for (n = 0; n < L->nchecks; n++)
        if (L->check_sym[n] == CHECK_COMPUTED && !in_range(L->check_value[n], 0, L->nextents - 1, "computed extent"))
            return -1;
    if (read_table(slots, 2, MAX_SLOTS, t, &L->nslots) < 0)
        return -1;
    for (n = 0; n < L->nslots; n++) {
        int kind = (int)t[2 * n];
        long long limit = kind == SLOT_PTR ? L->narrays - 1 : (kind == SLOT_SYM32 || kind == SLOT_SYM64) ? L->nbinds - 1 : L->nargs - 1;
        if (!in_range(kind, SLOT_PTR, SLOT_KINDS - 1, "slot kind") || !in_range(t[2 * n + 1], 0, limit, "slot index"))
            return -1;
        if (kind > SLOT_SYM64 && L->is_array[t[2 * n + 1]]) {
            PyErr_SetString(PyExc_ValueError, "launch table packs an array argument as a scalar");
            return -1;
        }
        L->slot_kind[n] = kind;
        L->slot_index[n] = (int)t[2 * n + 1];
    }
    return 0;
}

static PyObject *launch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"table",    "session",  "guards",    "launch",   "function",
                            "stream",   "out_keyword", "stream_object", "allocate", "template",
                            "allocator", "extended", NULL};
    PyObject *table, *session, *guards, *stream_object = Py_None, *allocate = Py_None, *template = Py_None,
             *allocator = Py_None, *extended = Py_None;
    unsigned long long launch, function, stream;
    int out_keyword = 0;
    if (layout == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.configure(DeviceArray) was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO!KKK|pOOOOO:Launch", names, &PyTuple_Type, &table, &session,
                                     &PyTuple_Type, &guards, &launch, &function, &stream, &out_keyword,
                                     &stream_object, &allocate, &template, &allocator, &extended))
        return NULL;
    unsigned long long launch_ex = 0, co_resident = 0;
    int cooperative = 0;
    unsigned cluster[3] = {0, 0, 0};
    if (extended != Py_None &&
        (!PyTuple_Check(extended) ||
         !PyArg_ParseTuple(extended, "KpIIIK:extended", &launch_ex, &cooperative, &cluster[0], &cluster[1],
                           &cluster[2], &co_resident) ||
         launch_ex == 0 || (cluster[0] == 0) != (cluster[1] == 0) || (cluster[0] == 0) != (cluster[2] == 0) ||
         (!cooperative && cluster[0] == 0))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "extended= is (cuLaunchKernelEx, cooperative, cluster x, y, z, co-resident blocks): "
                            "an entry point, and a cooperative launch or a cluster (all three, or all 0)");
        return NULL;
    }
    Layout *Y = (Layout *)Py_NewRef(layout); /* after parsing (p runs __bool__): the one this entry reads by */
    if (check_stream_object(Y, stream_object) < 0) {
        Py_DECREF(Y);
        return NULL;
    }
    if (launch == 0) {
        PyErr_SetString(PyExc_ValueError, "no cuLaunchKernel entry point");
        Py_DECREF(Y);
        return NULL;
    }
    if (allocate != Py_None && (!out_keyword || stream_object != Py_None || !PyCallable_Check(allocate))) {
        PyErr_SetString(PyExc_ValueError, "allocate= is a callable for out_keyword entries on the session stream");
        Py_DECREF(Y);
        return NULL;
    }
    if ((template == Py_None) != (allocator == Py_None) ||
        (template != Py_None && (allocate == Py_None || Py_TYPE(template) != Y->type ||
                                 SLOT(template, Y->session) != session || !Py_IS_TYPE(allocator, &AllocatorType) ||
                                 ((Allocator *)allocator)->session != session))) {
        PyErr_SetString(PyExc_ValueError,
                        "template= (a DeviceArray) and allocator= (an Allocator) of the session go with allocate=");
        Py_DECREF(Y);
        return NULL;
    }
    Launch *L = (Launch *)type->tp_alloc(type, 0);
    if (L == NULL) {
        Py_DECREF(Y);
        return NULL;
    }
    L->layout = Y;
    L->attempt = launch_attempt;
    L->launch_ex = (launch_ex_fn)(uintptr_t)launch_ex;
    L->cooperative = cooperative;
    memcpy(L->cluster, cluster, sizeof cluster);
    L->co_resident = co_resident;
    memset(L->is_array, 0, sizeof L->is_array);
    if (load_table(L, table) < 0)
        goto fail;
    if (PyTuple_GET_SIZE(guards) != L->nargs) {
        PyErr_SetString(PyExc_ValueError, "one guard per argument");
        goto fail;
    }
    if (take_session_queues(session, &L->deferred, &L->captures) < 0)
        goto fail;
    Py_INCREF(session);
    L->session = session;
    Py_INCREF(guards);
    L->guards = guards;
    L->launch = (launch_fn)(uintptr_t)launch;
    L->function = (void *)(uintptr_t)function;
    L->stream = (void *)(uintptr_t)stream;
    L->stream_object = Py_NewRef(stream_object);
    L->out_keyword = out_keyword;
    L->allocate = allocate == Py_None ? NULL : Py_NewRef(allocate);
    /* an allocator of another layout makes arrays of another class: the Python path allocates */
    if (template != Py_None && ((Allocator *)allocator)->enabled && ((Allocator *)allocator)->layout == Y) {
        L->allocator = Py_NewRef(allocator);
        L->template = Py_NewRef(template);
    }
    return (PyObject *)L;
fail:
    Py_DECREF(L);
    return NULL;
}

static int launch_traverse(Launch *L, visitproc visit, void *arg)
{
    Py_VISIT(L->session);
    Py_VISIT(L->deferred);
    Py_VISIT(L->captures);
    Py_VISIT(L->guards);
    Py_VISIT(L->stream_object);
    Py_VISIT(L->allocate);
    Py_VISIT(L->allocator);
    Py_VISIT(L->template);
    return 0;
}

static int launch_clear(Launch *L)
{
    Py_CLEAR(L->session);
    Py_CLEAR(L->deferred);
    Py_CLEAR(L->captures);
    Py_CLEAR(L->guards);
    Py_CLEAR(L->stream_object);
    Py_CLEAR(L->allocate);
    Py_CLEAR(L->allocator);
    Py_CLEAR(L->template);
    Py_CLEAR(L->layout);
    return 0;
}

static void launch_dealloc(Launch *L)
{
    PyObject_GC_UnTrack(L);
    launch_clear(L);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

/* --- one call ----------------------------------------------------------------------------------- */

/* Python's floor division; 0 on a zero divisor or overflow (the Python path then decides). */
static int floordiv(long long a, long long b, long long *out)
{
    if (b == 0 || (a == LLONG_MIN && b == -1))
        return 0;
    long long q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q -= 1;
    *out = q;
    return 1;
}

/* Evaluate the 7 launch-dimension programs into dims, then the computed extents' into extents;
 * 0 if any step leaves what the fast path handles (a negative extent: the Python path says why). */
static int eval_dims(const Launch *L, const long long *syms, unsigned dims[7], long long *extents)
{
    long long stack[MAX_STACK];
    int sp = 0, which = 0;
    for (int i = 0; i < L->nprogram; i++) {
        long long a, b, r;
        switch (L->program_op[i]) {
        case OP_END:
            r = stack[--sp];
            if (r < 0 || (which < 7 && r > 0xFFFFFFFFLL))
                return 0;
            if (which < 7)
                dims[which] = (unsigned)r;
            else
                extents[which - 7] = r;
            which++;
            continue;
        case OP_INT:
            stack[sp++] = L->program_arg[i];
            continue;
        case OP_SYM:
            stack[sp++] = syms[L->program_arg[i]];
            continue;
        }
        b = stack[--sp];
        a = stack[--sp];
        switch (L->program_op[i]) {
        case OP_ADD:
            if (__builtin_add_overflow(a, b, &r))
                return 0;
            break;
        case OP_SUB:
            if (__builtin_sub_overflow(a, b, &r))
                return 0;
            break;
        case OP_MUL:
            if (__builtin_mul_overflow(a, b, &r))
                return 0;
            break;
        case OP_FLOORDIV:
            if (!floordiv(a, b, &r))
                return 0;
            break;
        case OP_CDIV: /* -(-a // b) */
            if (a == LLONG_MIN || !floordiv(-a, b, &r) || r == LLONG_MIN)
                return 0;
            r = -r;
            break;
        case OP_MIN:
            r = a < b ? a : b;
            break;
        default: /* OP_MAX */
            r = a > b ? a : b;
            break;
        }
        stack[sp++] = r;
    }
    return 1;
}

static size_t int_width(int kind)
{
    switch (kind) {
    case SLOT_I8: case SLOT_U8:
        return 1;
    case SLOT_I16: case SLOT_U16:
        return 2;
    case SLOT_I32: case SLOT_U32:
        return 4;
    default:
        return 8;
    }
}

/* Pack one scalar exactly as struct.pack_into would; 0 (error cleared) where struct would raise. */
static int pack_scalar(int kind, PyObject *v, unsigned char *slot)
{
    long long s;
    unsigned long long u;
    double x;
    PyObject *index;
    switch (kind) {
    case SLOT_BOOL: {
        int truth = PyObject_IsTrue(v);
        if (truth < 0)
            goto fail;
        slot[0] = (unsigned char)truth;
        return 1;
    }
    case SLOT_I8: case SLOT_I16: case SLOT_I32: case SLOT_I64:
        index = PyNumber_Index(v);
        if (index == NULL)
            goto fail;
        s = PyLong_AsLongLong(index);
        Py_DECREF(index);
        if (s == -1 && PyErr_Occurred())
            goto fail;
        if (kind == SLOT_I8 && (s < INT8_MIN || s > INT8_MAX))
            return 0;
        if (kind == SLOT_I16 && (s < INT16_MIN || s > INT16_MAX))
            return 0;
        if (kind == SLOT_I32 && (s < INT32_MIN || s > INT32_MAX))
            return 0;
        memcpy(slot, &s, int_width(kind)); /* little-endian: the low bytes are the narrow value */
        return 1;
    case SLOT_U8: case SLOT_U16: case SLOT_U32: case SLOT_U64:
        index = PyNumber_Index(v);
        if (index == NULL)
            goto fail;
        u = PyLong_AsUnsignedLongLong(index);
        Py_DECREF(index);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            goto fail;
        if ((kind == SLOT_U8 && u > UINT8_MAX) || (kind == SLOT_U16 && u > UINT16_MAX) ||
            (kind == SLOT_U32 && u > UINT32_MAX))
            return 0;
        memcpy(slot, &u, int_width(kind));
        return 1;
    default: /* floats */
        x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred())
            goto fail;
        if ((kind == SLOT_F16 ? PyFloat_Pack2(x, (char *)slot, 1)
             : kind == SLOT_F32 ? PyFloat_Pack4(x, (char *)slot, 1)
                                : PyFloat_Pack8(x, (char *)slot, 1)) < 0)
            goto fail;
        return 1;
    }
fail:
    PyErr_Clear();
    return 0;
}

/* Launch dimensions cuLaunchKernel takes without an opt-in and, for a 32-bit build, that its
 * indexing can address; anything else (an empty grid, a block too large, shared memory past
 * 48 KiB, too many threads for 32-bit indices) is left to the Python path, which raises, opts
 * in or re-dispatches to a 64-bit build. */
static int dims_launchable(const Launch *L, const unsigned dims[7])
{
    unsigned long long gx = dims[0], gy = dims[1], gz = dims[2], bx = dims[3], by = dims[4], bz = dims[5];
    if (gx == 0 || gy == 0 || gz == 0 || gx > limits.grid[0] || gy > limits.grid[1] || gz > limits.grid[2])
        return 0;
    if (bx == 0 || by == 0 || bz == 0 || bx > limits.block[0] || by > limits.block[1] || bz > limits.block[2] ||
        bx * by * bz > limits.block_threads)
        return 0;
    if (dims[6] > limits.shared)
        return 0;
    unsigned long long most = limits.index32_threads;
    return L->index_bits == 64 || (gx * bx <= most && gy * by <= most && gz * bz <= most);
}

/* An exact int as a long long; 0 for anything else (whose conversion could run Python code). */
/* A cooperative or cluster launch of these dimensions, through cuLaunchKernelEx; -1 when the
 * grid is not one the Python path checked for (too many blocks to be co-resident, or not a
 * multiple of the cluster), so the caller declines and that path refuses it. */
static int launch_extended(const Launch *L, const unsigned dims[7], void **params)
{
    launch_attribute attrs[2];
    unsigned n = 0;
    memset(attrs, 0, sizeof attrs);
    if (L->cooperative) {
        if ((unsigned long long)dims[0] * dims[1] * dims[2] > L->co_resident)
            return -1;
        attrs[n].id = ATTRIBUTE_COOPERATIVE;
        attrs[n++].value.cooperative = 1;
    }
    if (L->cluster[0]) {
        if (dims[0] % L->cluster[0] || dims[1] % L->cluster[1] || dims[2] % L->cluster[2])
            return -1;
        attrs[n].id = ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.cluster.x = L->cluster[0];
        attrs[n].value.cluster.y = L->cluster[1];
        attrs[n++].value.cluster.z = L->cluster[2];
    }
    launch_config config = {{dims[0], dims[1], dims[2]}, {dims[3], dims[4], dims[5]}, dims[6], L->stream, attrs, n};
    return L->launch_ex(&config, L->function, params, NULL);
}

static int exact_int(PyObject *v, long long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    *out = PyLong_AsLongLong(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Read one DeviceArray's extents, address and size by Y (the caller checked that a is of Y's
 * class), if it is an open array of the session with the expected rank and plain int fields;
 * 0 otherwise. */
static int read_array(const Layout *Y, PyObject *a, PyObject *session, int ndim, long long *extents,
                      unsigned long long *ptr, long long *nbytes)
{
    PyObject *shape = SLOT(a, Y->shape), *address = SLOT(a, Y->ptr), *size = SLOT(a, Y->nbytes);
    if (SLOT(a, Y->session) != session || SLOT(a, Y->closed) != Py_False || shape == NULL || address == NULL ||
        size == NULL || !PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != ndim || !PyLong_CheckExact(address))
        return 0;
    for (int axis = 0; axis < ndim; axis++) {
        if (!exact_int(PyTuple_GET_ITEM(shape, axis), &extents[axis]))
            return 0;
    }
    *ptr = PyLong_AsUnsignedLongLong(address);
    if (*ptr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return exact_int(size, nbytes);
}

/* A kernel launch: positional arguments and stream=, the result is None; or an op: positional
 * operands, out= and stream=, the result is out; or an allocating op (L->allocate): positional
 * operands only, the result is a new array from allocate(), made once everything read before it
 * matched (it runs Python code, which frees what finalizers queued) and dropped when the call is
 * declined after all (a stream-ordered free, like any dropped array's). */
static int launch_attempt(PyObject *entry, PyObject *const *call_args, Py_ssize_t nargs, PyObject *kwnames,
                          PyObject **result)
{
    Launch *L = (Launch *)entry;
    const Layout *Y = L->layout;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *out = NULL, *stream = Py_None; /* borrowed from the caller, like call_args */
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (L->out_keyword && L->allocate == NULL && is_name(name, str_out))
            out = call_args[nargs + i];
        else if (is_name(name, str_stream))
            stream = call_args[nargs + i];
        else
            return 0;
    }
    int allocating = L->allocate != NULL;
    if (L->out_keyword ? (out == NULL && !allocating) || nargs + 1 != L->nargs : nargs != L->nargs)
        return 0;
    PyObject *argv[MAX_ARGS];
    memcpy(argv, call_args, (size_t)nargs * sizeof(PyObject *));
    if (out != NULL)
        argv[nargs] = out;
    PyObject *const *args = argv;
    PyObject *const *guards = &PyTuple_GET_ITEM(L->guards, 0);
    int given = L->nargs - allocating; /* the arguments the call passed */
    for (int i = 0; i < given; i++) { /* the arrays' guards again below, after the conversions */
        PyObject *a = args[i];
        if (L->is_array[i]) {
            if (Py_TYPE(a) != Y->type || SLOT(a, Y->tag) != guards[i])
                return 0;
        } else if ((PyObject *)Py_TYPE(a) != guards[i]) {
            return 0;
        }
    }

    /* Scalars first: converting one may run Python code (a subclass's __index__ or __float__) that
     * closes the session or an array, so everything else is read after the last conversion. */
    unsigned char buffer[MAX_SLOTS * 8];
    void *params[MAX_SLOTS];
    memset(buffer, 0, (size_t)L->nslots * 8);
    for (int s = 0; s < L->nslots; s++) {
        params[s] = buffer + 8 * s;
        if (L->slot_kind[s] > SLOT_SYM64 && !pack_scalar(L->slot_kind[s], args[L->slot_index[s]], buffer + 8 * s))
            return 0;
    }
    PyObject *fresh = NULL; /* the new result of an allocating call: owned until returned */
    if (allocating) {
        if (!session_ready(L->session, NULL, L->captures) || stream != Py_None)
            return 0;
        fresh = L->allocator == NULL ? NULL : allocate_here((Allocator *)L->allocator, L->template);
        if (fresh == NULL && !PyErr_Occurred())
            fresh = PyObject_CallNoArgs(L->allocate);
        if (fresh == NULL) /* the Python path's allocation raises the same (out of memory, ...) */
            return -1;
        argv[nargs] = fresh;
    }
    if (!session_ready(L->session, L->deferred, L->captures) || !stream_matches(Y, stream, L->stream_object))
        goto decline;

    long long extents[MAX_ARRAYS][MAX_NDIM], nbytes[MAX_ARRAYS], syms[MAX_SYMS];
    unsigned long long ptrs[MAX_ARRAYS];
    for (int j = 0; j < L->narrays; j++) {
        PyObject *a = args[L->array_arg[j]];
        if (Py_TYPE(a) != Y->type || SLOT(a, Y->tag) != guards[L->array_arg[j]] ||
            !read_array(Y, a, L->session, L->array_ndim[j], extents[j], &ptrs[j], &nbytes[j]))
            goto decline;
    }
    for (int b = 0; b < L->nbinds; b++)
        syms[L->bind_sym[b]] = extents[L->bind_array[b]][L->bind_axis[b]];
    unsigned dims[7];
    long long computed[MAX_CHECKS];
    if (!eval_dims(L, syms, dims, computed))
        goto decline;
    for (int c = 0; c < L->nchecks; c++) {
        int sym = L->check_sym[c];
        long long expected = sym >= 0 ? syms[sym] : sym == CHECK_COMPUTED ? computed[L->check_value[c]] : L->check_value[c];
        if (extents[L->check_array[c]][L->check_axis[c]] != expected)
            goto decline;
    }
    for (int k = 0; k < L->naliases; k++) {
        int a = L->alias_a[k], b = L->alias_b[k];
        if (ptrs[a] < ptrs[b] + (unsigned long long)nbytes[b] && ptrs[b] < ptrs[a] + (unsigned long long)nbytes[a])
            goto decline;
    }
    if (!dims_launchable(L, dims))
        goto decline;

    for (int s = 0; s < L->nslots; s++) {
        unsigned char *slot = buffer + 8 * s;
        long long v;
        switch (L->slot_kind[s]) {
        case SLOT_PTR:
            memcpy(slot, &ptrs[L->slot_index[s]], 8);
            break;
        case SLOT_SYM32:
            v = syms[L->slot_index[s]];
            if (v < INT32_MIN || v > INT32_MAX)
                goto decline;
            memcpy(slot, &v, 4);
            break;
        case SLOT_SYM64:
            memcpy(slot, &syms[L->slot_index[s]], 8);
            break;
        }
    }
    int err = L->launch_ex != NULL ? launch_extended(L, dims, params)
                                   : L->launch(L->function, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                                               dims[6], L->stream, params, NULL);
    if (err == -1)
        goto decline;
    if (err == 0) {
        *result = L->out_keyword ? args[L->nargs - 1] : Py_None;
        if (fresh == NULL)
            Py_INCREF(*result);
        return 1;
    }
    if (err == INVALID_CONTEXT) /* the Python path retries with the context made current */
        goto decline;
    Py_XDECREF(fresh);
    PyObject *code = PyLong_FromLong(err);
    if (code != NULL) { /* Session.launch_failed raises the typed error (and poisons on a sticky one) */
        Py_XDECREF(PyObject_CallMethodObjArgs(L->session, str_launch_failed, code, NULL));
        Py_DECREF(code);
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with CUresult %d", err);
    return -1;
decline:
    Py_XDECREF(fresh);
    return 0;
}

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kerneldsl._fastlaunch.Launch",
    .tp_doc = "One specialization's launch table bound to a session's function and stream.",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = launch_new,
    .tp_dealloc = (destructor)launch_dealloc,
    .tp_traverse = (traverseproc)launch_traverse,
    .tp_clear = (inquiry)launch_clear,
};

/* --- GemmLaunch: a remembered kd.blas.gemm(a, b, out) through cublasLtMatmul ------------------- */

typedef int (*lt_matmul_fn)(void *handle, void *desc, const void *alpha, const void *a, void *a_layout,
                            const void *b, void *b_layout, const void *beta, const void *c, void *c_layout,
                            void *d, void *d_layout, const void *algo, void *workspace, size_t workspace_bytes,
                            void *stream);

/* Operands in the order of the Python call: a, b, out (all 2-D). */
typedef struct {
    ENTRY_HEAD
    Layout *layout;
    PyObject *session;
    PyObject *deferred;
    PyObject *captures;
    PyObject *tags[3];
    long long shapes[3][2];
    unsigned long long alignment[3]; /* what the plan's algorithm was chosen for */
    lt_matmul_fn matmul;
    current_context_fn current_context;
    void *context, *handle, *desc, *layouts[3], *algo, *workspace, *stream;
    PyObject *stream_object; /* what stream= must be: None (the session stream) or the Stream itself */
    size_t workspace_bytes;
    int double_scale; /* alpha and beta as double (float64 compute) or float */
} GemmLaunch;

/* gemm(a, b, out) or gemm(a, b, out=out), with alpha=, beta= and stream= as keywords. */
static int gemm_attempt(PyObject *entry, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                        PyObject **result)
{
    GemmLaunch *G = (GemmLaunch *)entry;
    if (nargs != 2 && nargs != 3)
        return 0;
    PyObject *operands[3] = {args[0], args[1], nargs == 3 ? args[2] : NULL}; /* borrowed from the caller */
    PyObject *stream = Py_None, *scale[2] = {NULL, NULL};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (is_name(name, str_alpha))
            scale[0] = value;
        else if (is_name(name, str_beta))
            scale[1] = value;
        else if (is_name(name, str_stream))
            stream = value;
        else if (nargs == 2 && is_name(name, str_out))
            operands[2] = value;
        else
            return 0;
    }
    if (operands[2] == NULL)
        return 0;
    double alpha = 1.0, beta = 0.0;
    double *targets[2] = {&alpha, &beta};
    for (int i = 0; i < 2; i++) {
        if (scale[i] == NULL)
            continue;
        *targets[i] = PyFloat_AsDouble(scale[i]);
        if (*targets[i] == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    /* alpha and beta are converted above, before anything else is read: their __float__ may run
     * Python code that closes the session, the stream or an operand. */
    const Layout *Y = G->layout;
    if (!stream_matches(Y, stream, G->stream_object))
        return 0;
    unsigned long long ptrs[3];
    long long sizes[3], extents[2];
    for (int j = 0; j < 3; j++) {
        PyObject *a = operands[j];
        if (Py_TYPE(a) != Y->type || SLOT(a, Y->tag) != G->tags[j] ||
            !read_array(Y, a, G->session, 2, extents, &ptrs[j], &sizes[j]) || extents[0] != G->shapes[j][0] ||
            extents[1] != G->shapes[j][1] || (ptrs[j] & (G->alignment[j] - 1)) != 0)
            return 0;
    }
    for (int j = 0; j < 2; j++) { /* out may not overlap an input */
        if (ptrs[2] < ptrs[j] + (unsigned long long)sizes[j] && ptrs[j] < ptrs[2] + (unsigned long long)sizes[2])
            return 0;
    }
    if (!session_ready(G->session, G->deferred, G->captures))
        return 0;
    void *current = NULL;
    if (G->current_context(&current) != 0 || current != G->context) /* cuBLAS launches into the current one */
        return 0;
    double scales64[2] = {alpha, beta};
    float scales32[2] = {(float)alpha, (float)beta};
    const char *scales = G->double_scale ? (const char *)scales64 : (const char *)scales32;
    size_t width = G->double_scale ? sizeof(double) : sizeof(float);
    int status = G->matmul(G->handle, G->desc, scales, (void *)(uintptr_t)ptrs[1], G->layouts[1],
                           (void *)(uintptr_t)ptrs[0], G->layouts[0], scales + width, (void *)(uintptr_t)ptrs[2],
                           G->layouts[2], (void *)(uintptr_t)ptrs[2], G->layouts[2], G->algo, G->workspace,
                           G->workspace_bytes, G->stream);
    if (status != 0) /* the Python path makes the same call and raises the typed error */
        return 0;
    *result = Py_NewRef(operands[2]);
    return 1;
}

/* A tuple of n unsigned ints (addresses, alignments); -1 with an exception if it is not one. */
static int read_unsigned(PyObject *tuple, int n, unsigned long long *out)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != n) {
        PyErr_Format(PyExc_ValueError, "expected a tuple of %d unsigned ints", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        out[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, i));
        if (PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *gemm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"session", "tags", "shapes", "alignment", "matmul", "current_context", "context",
                            "handle", "desc", "layouts", "algo", "workspace", "workspace_bytes", "stream",
                            "double_scale", "stream_object", NULL};
    PyObject *session, *tags, *shapes, *alignment, *layouts, *stream_object = Py_None;
    unsigned long long matmul, current_context, context, handle, desc, algo, workspace, workspace_bytes, stream;
    int double_scale;
    if (layout == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastlaunch.configure(DeviceArray) was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!O!KKKKKO!KKKKp|O:GemmLaunch", names, &session,
                                     &PyTuple_Type, &tags, &PyTuple_Type, &shapes, &PyTuple_Type, &alignment,
                                     &matmul, &current_context, &context, &handle, &desc, &PyTuple_Type, &layouts,
                                     &algo, &workspace, &workspace_bytes, &stream, &double_scale, &stream_object))
        return NULL;
    Layout *Y = (Layout *)Py_NewRef(layout); /* after parsing (p runs __bool__): the one this entry reads by */
    if (check_stream_object(Y, stream_object) < 0) {
        Py_DECREF(Y);
        return NULL;
    }
    if (matmul == 0 || current_context == 0 || PyTuple_GET_SIZE(tags) != 3 || PyTuple_GET_SIZE(shapes) != 3) {
        PyErr_SetString(PyExc_ValueError, matmul == 0 || current_context == 0
                                              ? "no cublasLtMatmul or cuCtxGetCurrent entry point"
                                              : "a GemmLaunch has three operands");
        Py_DECREF(Y);
        return NULL;
    }
    GemmLaunch *G = (GemmLaunch *)type->tp_alloc(type, 0);
    if (G == NULL) {
        Py_DECREF(Y);
        return NULL;
    }
    G->layout = Y;
    G->attempt = gemm_attempt;
    long long table[6];
    int rows;
    unsigned long long layout_addresses[3];
    if (read_table(shapes, 2, 3, table, &rows) < 0 || read_unsigned(alignment, 3, G->alignment) < 0 ||
        read_unsigned(layouts, 3, layout_addresses) < 0 || take_session_queues(session, &G->deferred, &G->captures) < 0)
        goto fail;
    for (int j = 0; j < 3; j++) {
        unsigned long long align = G->alignment[j];
        if (align == 0 || (align & (align - 1)) != 0) {
            PyErr_SetString(PyExc_ValueError, "alignments are powers of two");
            goto fail;
        }
        G->layouts[j] = (void *)(uintptr_t)layout_addresses[j];
        G->shapes[j][0] = table[2 * j];
        G->shapes[j][1] = table[2 * j + 1];
        G->tags[j] = PyTuple_GET_ITEM(tags, j);
        Py_INCREF(G->tags[j]);
    }
    Py_INCREF(session);
    G->session = session;
    G->matmul = (lt_matmul_fn)(uintptr_t)matmul;
    G->current_context = (current_context_fn)(uintptr_t)current_context;
    G->context = (void *)(uintptr_t)context;
    G->handle = (void *)(uintptr_t)handle;
    G->desc = (void *)(uintptr_t)desc;
    G->algo = (void *)(uintptr_t)algo;
    G->workspace = (void *)(uintptr_t)workspace;
    G->workspace_bytes = (size_t)workspace_bytes;
    G->stream = (void *)(uintptr_t)stream;
    G->stream_object = Py_NewRef(stream_object);
    G->double_scale = double_scale;
    return (PyObject *)G;
fail:
    Py_DECREF(G);
    return NULL;
}

static int gemm_traverse(GemmLaunch *G, visitproc visit, void *arg)
{
    Py_VISIT(G->session);
    Py_VISIT(G->deferred);
    Py_VISIT(G->captures);
    Py_VISIT(G->stream_object);
    for (int j = 0; j < 3; j++)
        Py_VISIT(G->tags[j]);
    return 0;
}

static int gemm_clear(GemmLaunch *G)
{
    Py_CLEAR(G->session);
    Py_CLEAR(G->deferred);
    Py_CLEAR(G->captures);
    Py_CLEAR(G->stream_object);
    for (int j = 0; j < 3; j++)
        Py_CLEAR(G->tags[j]);
    Py_CLEAR(G->layout);
    return 0;
}

static void gemm_dealloc(GemmLaunch *G)
{
    PyObject_GC_UnTrack(G);
    gemm_clear(G);
    Py_TYPE(G)->tp_free((PyObject *)G);
}

static PyTypeObject GemmLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kerneldsl._fastlaunch.GemmLaunch",
    .tp_doc = "A gemm plan (cuBLASLt descriptors and algorithm) bound to a session, its stream and workspace.",
    .tp_basicsize = sizeof(GemmLaunch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = gemm_new,
    .tp_dealloc = (destructor)gemm_dealloc,
    .tp_traverse = (traverseproc)gemm_traverse,
    .tp_clear = (inquiry)gemm_clear,
};

/* --- FastPathCallable: the callable base class of Kernel, ops and gemm ------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int count;
    Entry *entries[MAX_ENTRIES];
} FastPathCallable;

static PyObject *callable_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastPathCallable *f = (FastPathCallable *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    for (int i = 0; i < f->count; i++) {
        PyObject *result = NULL;
        Entry *entry = f->entries[i];
        Py_INCREF(entry); /* an argument's __index__ may forget the launches: keep this one alive meanwhile */
        int done = entry->attempt((PyObject *)entry, args, nargs, kwnames, &result);
        Py_DECREF(entry);
        if (done > 0)
            return result;
        if (done < 0)
            return NULL;
    }
    PyObject *slow = PyObject_GetAttr(self, str_call);
    if (slow == NULL)
        return NULL;
    PyObject *result = PyObject_Vectorcall(slow, args, nargs, kwnames);
    Py_DECREF(slow);
    return result;
}

static PyObject *callable_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    FastPathCallable *f = (FastPathCallable *)type->tp_alloc(type, 0);
    if (f != NULL)
        f->vectorcall = callable_vectorcall;
    return (PyObject *)f;
}

static PyObject *callable_remember(FastPathCallable *f, PyObject *launch)
{
    if (!PyObject_TypeCheck(launch, &LaunchType) && !PyObject_TypeCheck(launch, &GemmLaunchType)) {
        PyErr_SetString(PyExc_TypeError, "expected a Launch or a GemmLaunch");
        return NULL;
    }
    for (int i = 0; i < f->count; i++) {
        if ((PyObject *)f->entries[i] == launch) { /* already known: move it to the front */
            memmove(&f->entries[1], &f->entries[0], sizeof(Entry *) * (size_t)i);
            f->entries[0] = (Entry *)launch;
            Py_RETURN_NONE;
        }
    }
    if (f->count == MAX_ENTRIES) /* the oldest goes */
        Py_DECREF(f->entries[--f->count]);
    memmove(&f->entries[1], &f->entries[0], sizeof(Entry *) * (size_t)f->count);
    Py_INCREF(launch);
    f->entries[0] = (Entry *)launch;
    f->count++;
    Py_RETURN_NONE;
}

static int callable_clear(FastPathCallable *f)
{
    while (f->count > 0) {
        f->count--;
        Py_CLEAR(f->entries[f->count]);
    }
    return 0;
}

static PyObject *callable_forget(FastPathCallable *f, PyObject *unused)
{
    callable_clear(f);
    Py_RETURN_NONE;
}

static PyObject *callable_remembered(FastPathCallable *f, void *unused)
{
    return PyLong_FromLong(f->count);
}

static int callable_traverse(FastPathCallable *f, visitproc visit, void *arg)
{
    for (int i = 0; i < f->count; i++)
        Py_VISIT(f->entries[i]);
    return 0;
}

static void callable_dealloc(FastPathCallable *f)
{
    PyObject_GC_UnTrack(f);
    callable_clear(f);
    Py_TYPE(f)->tp_free((PyObject *)f); /* a heap subclass's dealloc drops its type reference */
}

static PyMethodDef callable_methods[] = {
    {"_remember_launch", (PyCFunction)callable_remember, METH_O, "Add a Launch to try first on later calls."},
    {"_forget_launches", (PyCFunction)callable_forget, METH_NOARGS, "Drop every remembered Launch."},
    {NULL},
};

static PyGetSetDef callable_getset[] = {
    {"_remembered_launches", (getter)callable_remembered, NULL, "How many Launches the fast path tries.", NULL},
    {NULL},
};

static PyTypeObject FastPathCallableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kerneldsl._fastlaunch.FastPathCallable",
    .tp_doc = "Callable base of Kernel and kd.blas.gemm: remembered entries first, then self._call(*args, **kwargs).",
    .tp_basicsize = sizeof(FastPathCallable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FastPathCallable, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = callable_new,
    .tp_dealloc = (destructor)callable_dealloc,
    .tp_traverse = (traverseproc)callable_traverse,
    .tp_clear = (inquiry)callable_clear,
    .tp_methods = callable_methods,
    .tp_getset = callable_getset,
};

/* --- module --------------------------------------------------------------------------------------- */

/* The offset of a __slots__ member of type (declared by it or a base); -1 with TypeError if
 * name is something else, e.g. a member descriptor of an unrelated class. */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL)
        return -1;
    int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
             PyType_IsSubtype(type, ((PyMemberDescrObject *)descr)->d_common.d_type);
    if (ok)
        *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    if (!ok)
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
    return ok ? 0 : -1;
}

/* The offsets of every __slots__ member of type and its bases, into slots; how many, or 0 when
 * an array made by copying them would miss something (a __dict__, more members than fit). */
static int object_slots(PyTypeObject *type, Py_ssize_t *slots)
{
    int count = 0;
    if (type->tp_dictoffset != 0)
        return 0;
    PyObject *mro = type->tp_mro;
    for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(mro); t++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, t);
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE) || base->tp_members == NULL)
            continue;
        for (PyMemberDef *m = base->tp_members; m->name != NULL; m++) {
            if (m->type != T_OBJECT_EX || m->offset == type->tp_weaklistoffset)
                continue;
            if (count == MAX_ARRAY_SLOTS)
                return 0;
            slots[count++] = m->offset;
        }
    }
    return count;
}

/* Read every offset into a new Layout and make it the current one whole: a class missing one
 * member leaves the previous configuration (mixed offsets would read past the end of the
 * arrays), and entries made before keep theirs. */
static PyObject *configure(PyObject *module, PyObject *type)
{
    static const char *const names[] = {"session", "_closed", "shape", "ptr", "nbytes", "dispatch_tag", "_raw", "_ref"};
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes the DeviceArray class");
        return NULL;
    }
    Layout *Y = PyObject_New(Layout, &LayoutType);
    if (Y == NULL)
        return NULL;
    Y->type = NULL;
    Y->kind = NULL;
    Py_ssize_t *const targets[] = {&Y->session, &Y->closed, &Y->shape, &Y->ptr, &Y->nbytes, &Y->tag, &Y->raw, &Y->ref};
    for (int i = 0; i < 8; i++) {
        if (slot_offset((PyTypeObject *)type, names[i], targets[i]) < 0) {
            Py_DECREF(Y);
            return NULL;
        }
    }
    Y->count = object_slots((PyTypeObject *)type, Y->slots);
    Y->kind = PyObject_GetAttrString(type, "kind");
    if (Y->kind == NULL) {
        Py_DECREF(Y);
        return NULL;
    }
    Y->type = (PyTypeObject *)Py_NewRef(type);
    Py_XSETREF(layout, Y);
    Py_RETURN_NONE;
}

/* Read runtime/limits.py's LaunchLimits (grid, block, block_threads, shared, index32_threads)
 * whole before any of it is used: a malformed one leaves the previous limits. */
static PyObject *set_launch_limits(PyObject *module, PyObject *given)
{
    static const char *const names[] = {"grid", "block", "block_threads", "shared", "index32_threads"};
    unsigned long long values[9];
    int n = 0;
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyObject_GetAttrString(given, names[i]);
        if (v == NULL)
            return NULL;
        int axes = i < 2 ? 3 : 1;
        if (axes == 3 && (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 3)) {
            Py_DECREF(v);
            return PyErr_Format(PyExc_TypeError, "launch limit %s must be a 3-tuple", names[i]);
        }
        for (int a = 0; a < axes; a++) {
            values[n] = PyLong_AsUnsignedLongLong(axes == 3 ? PyTuple_GET_ITEM(v, a) : v);
            if (values[n] == (unsigned long long)-1 && PyErr_Occurred()) {
                Py_DECREF(v);
                return NULL;
            }
            n++;
        }
        Py_DECREF(v);
    }
    memcpy(limits.grid, values, sizeof limits.grid);
    memcpy(limits.block, values + 3, sizeof limits.block);
    limits.block_threads = values[6];
    limits.shared = values[7];
    limits.index32_threads = values[8];
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_O, "Tell the launch path where DeviceArray keeps its fields."},
    {"set_launch_limits", set_launch_limits, METH_O, "Hand the launch path runtime.limits.LAUNCH_LIMITS."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kerneldsl._fastlaunch", "The warm launch path of @kd.kernel, in C.", -1, module_methods,
};

/* The table limits, which fastpath.launch_table checks so that making a Launch cannot fail. */
static int add_limits(PyObject *m)
{
    return PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_ARRAYS", MAX_ARRAYS) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_NDIM", MAX_NDIM) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_SYMS", MAX_SYMS) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_CHECKS", MAX_CHECKS) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_ALIASES", MAX_ALIASES) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_PROGRAM", MAX_PROGRAM) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_STACK", MAX_STACK) < 0 ||
                   PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS) < 0 ||
                   PyModule_AddIntConstant(m, "CHECK_COMPUTED", CHECK_COMPUTED) < 0
               ? -1
               : 0;
}

/* The opcode and slot-kind numbers, as dicts fastpath.py's tables are checked against. */
static int add_enum(PyObject *m, const char *attr, const char *const *names, int count)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
    for (int i = 0; i < count; i++) {
        PyObject *v = PyLong_FromLong(i);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    if (PyModule_AddObject(m, attr, d) < 0) {
        Py_DECREF(d);
        return -1;
    }
    return 0;
}

static int add_enums(PyObject *m)
{
    static const char *const opcodes[] = {"end", "int", "sym", "add", "sub", "mul", "floordiv", "cdiv", "min", "max"};
    static const char *const slot_kinds[] = {"ptr", "sym32", "sym64", "bool", "int8", "int16", "int32", "int64",
                                             "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"};
    _Static_assert(sizeof opcodes / sizeof *opcodes == OP_MAX + 1, "one name per opcode");
    _Static_assert(sizeof slot_kinds / sizeof *slot_kinds == SLOT_KINDS, "one name per slot kind");
    if (add_enum(m, "OPCODES", opcodes, OP_MAX + 1) < 0)
        return -1;
    return add_enum(m, "SLOT_KINDS", slot_kinds, SLOT_KINDS);
}

PyMODINIT_FUNC PyInit__fastlaunch(void)
{
    str_ok = PyUnicode_InternFromString("usable");
    str_call = PyUnicode_InternFromString("_call");
    str_launch_failed = PyUnicode_InternFromString("launch_failed");
    str_alpha = PyUnicode_InternFromString("alpha");
    str_beta = PyUnicode_InternFromString("beta");
    str_out = PyUnicode_InternFromString("out");
    str_stream = PyUnicode_InternFromString("stream");
    str_acquire = PyUnicode_InternFromString("acquire");
    str_release = PyUnicode_InternFromString("release");
    str_popleft = PyUnicode_InternFromString("popleft");
    str_appendleft = PyUnicode_InternFromString("appendleft");
    if (str_acquire == NULL || str_release == NULL || str_popleft == NULL || str_appendleft == NULL)
        return NULL;
    if (str_ok == NULL || str_call == NULL || str_launch_failed == NULL || str_alpha == NULL || str_beta == NULL ||
        str_out == NULL || str_stream == NULL)
        return NULL;
    if (PyType_Ready(&LayoutType) < 0 || PyType_Ready(&AllocatorType) < 0 || PyType_Ready(&LaunchType) < 0 || PyType_Ready(&GemmLaunchType) < 0 || PyType_Ready(&FastPathCallableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&AllocatorType);
    Py_INCREF(&LaunchType);
    Py_INCREF(&GemmLaunchType);
    Py_INCREF(&FastPathCallableType);
    if (PyModule_AddObject(m, "Allocator", (PyObject *)&AllocatorType) < 0 ||
        PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0 ||
        PyModule_AddObject(m, "GemmLaunch", (PyObject *)&GemmLaunchType) < 0 ||
        PyModule_AddObject(m, "FastPathCallable", (PyObject *)&FastPathCallableType) < 0 ||
        add_limits(m) < 0 || add_enums(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
