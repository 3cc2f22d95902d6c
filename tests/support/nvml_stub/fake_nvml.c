/*
 * fake_nvml.c - a small stand-in for libnvidia-ml.so.1, for tests on machines without a GPU.
 *
 * Built against NVML's own header (nvml.h from the nvidia-nvml-dev wheel) so every function
 * below has exactly the prototype the real library exports, and loaded by the real pynvml
 * bindings through its soname.  See tests/nvmlstub.py for how to build it and for the
 * scenario file format; this file only implements what the format describes.
 *
 * The scenario file is named by $COSTGUARD_FAKE_NVML_SCENARIO and is re-read whenever its
 * path, inode, size or mtime changes, so a test can change what the "GPUs" report while a
 * process that uses the library keeps running.
 *
 * Behaviour worth knowing:
 *  - nvmlInit* with the variable unset or the file missing returns NVML_ERROR_DRIVER_NOT_LOADED
 *    (what a machine with the library but no loaded kernel driver answers).  A file that does
 *    not parse makes nvmlInit* and every later call return NVML_ERROR_UNKNOWN (and says why on
 *    stderr) until it is fixed.  A file that disappears after a successful init leaves the last
 *    scenario in force.
 *  - Init is reference counted like the real library; every device call before init (or after
 *    the matching nvmlShutdown) returns NVML_ERROR_UNINITIALIZED.
 *  - All calls are serialised by one mutex, so the library is safe to use from many threads.
 *  - Two extra, non-NVML symbols help tests: fake_nvml_reset() and fake_nvml_call_count().
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nvml.h>

#define MAX_GPUS 64
#define MAX_MIG 8
#define MAX_PROCS 4096
#define STR_LEN 96
#define MAX_FILE (1 << 20)
#define NO_INSTANCE 0xFFFFFFFFu

/* Calls that a scenario can make fail with "fail=<call>:<ERROR>,...". */
enum call_id {
    C_HANDLE, C_UUID, C_NAME, C_INDEX, C_MEMORY, C_UTIL, C_POWER, C_COMPUTE, C_GRAPHICS,
    C_MIG_MODE, C_MIG_COUNT, C_MIG_HANDLE, N_CALLS
};
static const char *const call_names[N_CALLS] = {
    "handle", "uuid", "name", "index", "memory", "util", "power", "compute", "graphics",
    "mig_mode", "mig_count", "mig_handle",
};

typedef struct {
    int present;
    char uuid[STR_LEN];
    char name[STR_LEN];
    unsigned long long mem_total, mem_used, mem_reserved;
    nvmlReturn_t fail[N_CALLS];
} mig_t;

typedef struct {
    int present;
    char uuid[STR_LEN];
    char name[STR_LEN];
    unsigned long long mem_total, mem_used, mem_reserved;
    unsigned int util, mem_util, power_mw;
    unsigned int mig_mode, max_mig;
    int max_mig_set;
    int lost;
    nvmlReturn_t fail[N_CALLS];
    mig_t migs[MAX_MIG];
} gpu_t;

typedef struct {
    unsigned int gpu;
    int mig; /* -1: on the whole GPU */
    unsigned int pid;
    unsigned long long mem;
    int graphics;
} proc_t;

typedef struct {
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_version;
    nvmlReturn_t init_error;
    unsigned int ngpus;
    gpu_t gpus[MAX_GPUS];
    unsigned int nprocs;
    proc_t procs[MAX_PROCS];
} scenario_t;

/* A handle is the address of one of these; they never move, so handles survive reloads. */
struct nvmlDevice_st {
    unsigned int gpu;
    int mig; /* -1 for a whole GPU */
};
static struct nvmlDevice_st gpu_handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_MIG];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static scenario_t current, parsing;
static int loaded;        /* `current` holds a parsed scenario */
static int broken;        /* the file as it is now does not parse */
static int refcount;
static char key_path[4096];
static struct stat key_stat;
static int key_valid;
static unsigned long call_counts[64];

enum { FILE_OK, FILE_MISSING, FILE_BROKEN };

/* ---------------------------------------------------------------- error names */

static const struct { const char *name; nvmlReturn_t code; const char *text; } errors[] = {
    {"SUCCESS", NVML_SUCCESS, "Success"},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND, "Not Found"},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {"TIMEOUT", NVML_ERROR_TIMEOUT, "Timeout"},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM,
     "The operating system has blocked the request."},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH,
     "RM has detected an NVML/RM version mismatch."},
    {"IN_USE", NVML_ERROR_IN_USE, "In use by another client"},
    {"MEMORY", NVML_ERROR_MEMORY, "Insufficient Memory"},
    {"NO_DATA", NVML_ERROR_NO_DATA, "No data"},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES, "Insufficient resources"},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
     "Argument version mismatch"},
    {"NOT_READY", NVML_ERROR_NOT_READY, "Not ready"},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND, "No GPUs found"},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE, "Invalid state"},
    {"UNKNOWN", NVML_ERROR_UNKNOWN, "Unknown Error"},
};

static int error_by_name(const char *s, nvmlReturn_t *out)
{
    if (strncmp(s, "NVML_ERROR_", 11) == 0)
        s += 11;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        if (strcmp(errors[i].name, s) == 0) {
            *out = errors[i].code;
            return 0;
        }
    }
    return -1;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == result)
            return errors[i].text;
    return "Unknown Error";
}

/* ---------------------------------------------------------------- scenario parsing */

static char parse_error[256];

static int fail_parse(int lineno, const char *what, const char *detail)
{
    snprintf(parse_error, sizeof(parse_error), "line %d: %s%s%s", lineno, what,
             detail ? ": " : "", detail ? detail : "");
    return -1;
}

static int parse_ull(const char *s, unsigned long long *out)
{
    char *end;
    if (!*s || *s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_uint(const char *s, unsigned int *out)
{
    unsigned long long v;
    if (parse_ull(s, &v) || v > 0xFFFFFFFFull)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int copy_str(char *dst, const char *src)
{
    if (strlen(src) >= STR_LEN)
        return -1;
    strcpy(dst, src);
    return 0;
}

/* "call:ERROR,call:ERROR" */
static int parse_fail(const char *s, nvmlReturn_t *fail)
{
    char buf[1024];
    if (strlen(s) >= sizeof(buf))
        return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (!colon)
            return -1;
        *colon = '\0';
        int found = -1;
        for (int c = 0; c < N_CALLS; c++)
            if (strcmp(call_names[c], item) == 0)
                found = c;
        nvmlReturn_t code;
        if (found < 0 || error_by_name(colon + 1, &code) || code == NVML_SUCCESS)
            return -1;
        fail[found] = code;
    }
    return 0;
}

/* Split a line into "directive key=value key="quoted value" ..." tokens, in place. */
#define MAX_TOKENS 32
static int tokenize(char *line, char **keys, char **values, int *n)
{
    *n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (*n >= MAX_TOKENS)
            return -1;
        keys[*n] = p;
        while (*p && *p != '=' && *p != ' ' && *p != '\t')
            p++;
        if (*p == '=') {
            *p++ = '\0';
            if (*p == '"') {
                values[*n] = ++p;
                while (*p && *p != '"')
                    p++;
                if (*p != '"')
                    return -1;
                *p++ = '\0';
                if (*p && *p != ' ' && *p != '\t')
                    return -1;
            } else {
                values[*n] = p;
                while (*p && *p != ' ' && *p != '\t')
                    p++;
            }
        } else {
            values[*n] = NULL;
        }
        if (*p)
            *p++ = '\0';
        (*n)++;
    }
    return 0;
}

static const char *get(char **keys, char **values, int n, const char *key, int *used)
{
    for (int i = 1; i < n; i++) {
        if (values[i] && strcmp(keys[i], key) == 0) {
            used[i] = 1;
            return values[i];
        }
    }
    return NULL;
}

static int parse_line(scenario_t *sc, char *line, int lineno)
{
    char *keys[MAX_TOKENS], *values[MAX_TOKENS];
    int used[MAX_TOKENS] = {0};
    int n;
    const char *v;

    if (tokenize(line, keys, values, &n))
        return fail_parse(lineno, "cannot split into key=value tokens", NULL);
    if (n == 0)
        return 0;
    if (values[0])
        return fail_parse(lineno, "line must start with a directive", keys[0]);
    const char *directive = keys[0];
    used[0] = 1;

#define GET(k) get(keys, values, n, (k), used)
#define NEED_UINT(k, dst)                                                          \
    do {                                                                           \
        if (!(v = GET(k)) || parse_uint(v, (dst)))                                 \
            return fail_parse(lineno, "missing or bad unsigned integer", (k));     \
    } while (0)
#define OPT_UINT(k, dst)                                                           \
    do {                                                                           \
        if ((v = GET(k)) && parse_uint(v, (dst)))                                  \
            return fail_parse(lineno, "bad unsigned integer", (k));                \
    } while (0)
#define OPT_ULL(k, dst)                                                            \
    do {                                                                           \
        if ((v = GET(k)) && parse_ull(v, (dst)))                                   \
            return fail_parse(lineno, "bad unsigned integer", (k));                \
    } while (0)
#define NEED_STR(k, dst)                                                           \
    do {                                                                           \
        if (!(v = GET(k)) || copy_str((dst), v))                                   \
            return fail_parse(lineno, "missing or too long string", (k));          \
    } while (0)

    if (strcmp(directive, "driver") == 0) {
        if ((v = GET("version"))) {
            if (strlen(v) >= sizeof(sc->driver))
                return fail_parse(lineno, "driver version too long", NULL);
            strcpy(sc->driver, v);
        }
        unsigned int cuda;
        if ((v = GET("cuda"))) {
            if (parse_uint(v, &cuda))
                return fail_parse(lineno, "bad cuda version", v);
            sc->cuda_version = (int)cuda;
        }
    } else if (strcmp(directive, "init") == 0) {
        if (!(v = GET("error")) || error_by_name(v, &sc->init_error))
            return fail_parse(lineno, "init needs error=<NVML error name>", v);
    } else if (strcmp(directive, "gpu") == 0) {
        unsigned int index;
        NEED_UINT("index", &index);
        if (index >= MAX_GPUS)
            return fail_parse(lineno, "gpu index too large", NULL);
        gpu_t *g = &sc->gpus[index];
        if (g->present)
            return fail_parse(lineno, "duplicate gpu index", NULL);
        g->present = 1;
        NEED_STR("uuid", g->uuid);
        NEED_STR("name", g->name);
        if (!(v = GET("mem_total")) || parse_ull(v, &g->mem_total))
            return fail_parse(lineno, "missing or bad mem_total", NULL);
        OPT_ULL("mem_used", &g->mem_used);
        OPT_ULL("mem_reserved", &g->mem_reserved);
        OPT_UINT("util", &g->util);
        OPT_UINT("mem_util", &g->mem_util);
        OPT_UINT("power_mw", &g->power_mw);
        OPT_UINT("mig", &g->mig_mode);
        if ((v = GET("max_mig"))) {
            if (parse_uint(v, &g->max_mig) || g->max_mig > MAX_MIG)
                return fail_parse(lineno, "bad max_mig", v);
            g->max_mig_set = 1;
        }
        unsigned int lost = 0;
        OPT_UINT("lost", &lost);
        g->lost = lost != 0;
        if ((v = GET("fail")) && parse_fail(v, g->fail))
            return fail_parse(lineno, "bad fail list", v);
        if (g->mem_used + g->mem_reserved > g->mem_total)
            return fail_parse(lineno, "mem_used + mem_reserved exceeds mem_total", NULL);
        if (index + 1 > sc->ngpus)
            sc->ngpus = index + 1;
    } else if (strcmp(directive, "mig") == 0) {
        unsigned int gpu, slot;
        NEED_UINT("gpu", &gpu);
        NEED_UINT("slot", &slot);
        if (gpu >= MAX_GPUS || !sc->gpus[gpu].present)
            return fail_parse(lineno, "mig names a gpu not declared above", NULL);
        if (slot >= MAX_MIG)
            return fail_parse(lineno, "mig slot too large", NULL);
        mig_t *m = &sc->gpus[gpu].migs[slot];
        if (m->present)
            return fail_parse(lineno, "duplicate mig slot", NULL);
        m->present = 1;
        NEED_STR("uuid", m->uuid);
        NEED_STR("name", m->name);
        if (!(v = GET("mem_total")) || parse_ull(v, &m->mem_total))
            return fail_parse(lineno, "missing or bad mem_total", NULL);
        OPT_ULL("mem_used", &m->mem_used);
        OPT_ULL("mem_reserved", &m->mem_reserved);
        if ((v = GET("fail")) && parse_fail(v, m->fail))
            return fail_parse(lineno, "bad fail list", v);
        if (m->mem_used + m->mem_reserved > m->mem_total)
            return fail_parse(lineno, "mem_used + mem_reserved exceeds mem_total", NULL);
    } else if (strcmp(directive, "proc") == 0) {
        if (sc->nprocs >= MAX_PROCS)
            return fail_parse(lineno, "too many processes", NULL);
        proc_t *p = &sc->procs[sc->nprocs];
        NEED_UINT("gpu", &p->gpu);
        if (p->gpu >= MAX_GPUS || !sc->gpus[p->gpu].present)
            return fail_parse(lineno, "proc names a gpu not declared above", NULL);
        unsigned int slot;
        p->mig = -1;
        if ((v = GET("mig"))) {
            if (parse_uint(v, &slot) || slot >= MAX_MIG || !sc->gpus[p->gpu].migs[slot].present)
                return fail_parse(lineno, "proc names a mig slot not declared above", v);
            p->mig = (int)slot;
        }
        NEED_UINT("pid", &p->pid);
        v = GET("mem");
        if (!v || strcmp(v, "na") == 0)
            p->mem = NVML_VALUE_NOT_AVAILABLE; /* all bits set, as the real driver reports */
        else if (parse_ull(v, &p->mem))
            return fail_parse(lineno, "bad mem", v);
        v = GET("type");
        if (!v || strcmp(v, "compute") == 0)
            p->graphics = 0;
        else if (strcmp(v, "graphics") == 0)
            p->graphics = 1;
        else
            return fail_parse(lineno, "type must be compute or graphics", v);
        sc->nprocs++;
    } else {
        return fail_parse(lineno, "unknown directive", directive);
    }
    for (int i = 1; i < n; i++)
        if (!used[i])
            return fail_parse(lineno, "unknown or repeated key", keys[i]);
    return 0;
#undef GET
#undef NEED_UINT
#undef OPT_UINT
#undef OPT_ULL
#undef NEED_STR
}

static int parse_file(const char *path, scenario_t *sc)
{
    memset(sc, 0, sizeof(*sc));
    strcpy(sc->driver, "550.54.15");
    sc->cuda_version = 12040;
    FILE *f = fopen(path, "r");
    if (!f)
        return fail_parse(0, "cannot open", strerror(errno));
    static char buf[MAX_FILE + 1];
    size_t len = fread(buf, 1, MAX_FILE + 1, f);
    fclose(f);
    if (len > MAX_FILE)
        return fail_parse(0, "file too large", NULL);
    buf[len] = '\0';
    int lineno = 0;
    char *line = buf;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == '\r' || p[l - 1] == ' ' || p[l - 1] == '\t'))
            p[--l] = '\0';
        if (*p && *p != '#' && parse_line(sc, p, lineno))
            return -1;
        line = nl ? nl + 1 : NULL;
    }
    for (unsigned int i = 0; i < sc->ngpus; i++)
        if (!sc->gpus[i].present)
            return fail_parse(0, "gpu indices must be 0..n-1 without gaps", NULL);
    for (unsigned int i = 0; i < sc->ngpus; i++) {
        gpu_t *g = &sc->gpus[i];
        if (!g->max_mig_set)
            g->max_mig = g->mig_mode ? 7 : 0;
        for (unsigned int s = 0; s < MAX_MIG; s++)
            if (g->migs[s].present && (!g->mig_mode || s >= g->max_mig))
                return fail_parse(0, "mig instance on a gpu without mig=1 or beyond max_mig",
                                  g->uuid);
    }
    return 0;
}

/* Re-read the scenario if the file changed; caller holds the lock. */
static int refresh(void)
{
    const char *path = getenv("COSTGUARD_FAKE_NVML_SCENARIO");
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0)
        return FILE_MISSING;
    if (key_valid && strcmp(path, key_path) == 0 && st.st_dev == key_stat.st_dev &&
        st.st_ino == key_stat.st_ino && st.st_size == key_stat.st_size &&
        st.st_mtim.tv_sec == key_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == key_stat.st_mtim.tv_nsec)
        return broken ? FILE_BROKEN : FILE_OK;
    snprintf(key_path, sizeof(key_path), "%s", path);
    key_stat = st;
    key_valid = 1;
    if (parse_file(path, &parsing) != 0) {
        fprintf(stderr, "fake libnvidia-ml: cannot use scenario %s: %s\n", path, parse_error);
        broken = 1;
        return FILE_BROKEN;
    }
    memcpy(&current, &parsing, sizeof(current));
    loaded = 1;
    broken = 0;
    return FILE_OK;
}

/* ---------------------------------------------------------------- common checks */

/* Every NVML entry point below starts with ENTER(call-number) and leaves through RETURN. */
#define ENTER(n)                                                                  \
    pthread_mutex_lock(&lock);                                                    \
    call_counts[(n)]++;                                                           \
    nvmlReturn_t ret_ = NVML_SUCCESS;                                             \
    do {                                                                          \
        if (refcount == 0) {                                                      \
            ret_ = NVML_ERROR_UNINITIALIZED;                                      \
            goto out_;                                                            \
        }                                                                         \
        if (refresh() == FILE_BROKEN || !loaded) {                                \
            ret_ = NVML_ERROR_UNKNOWN;                                            \
            goto out_;                                                            \
        }                                                                         \
    } while (0)
#define RETURN(r)                                                                 \
    do {                                                                          \
        ret_ = (r);                                                               \
        goto out_;                                                                \
    } while (0)
#define LEAVE                                                                     \
    out_:                                                                         \
    pthread_mutex_unlock(&lock);                                                  \
    return ret_

/* Numbers for call_counts; fake_nvml_call_count() maps names to them. */
enum {
    F_INIT_FLAGS, F_INIT_V2, F_SHUTDOWN, F_DRIVER, F_COUNT, F_HANDLE_BY_INDEX, F_HANDLE_BY_UUID,
    F_UUID, F_NAME, F_INDEX, F_MEMORY, F_MEMORY_V2, F_UTIL, F_POWER, F_COMPUTE_V3, F_GRAPHICS_V3,
    F_COMPUTE_V2, F_GRAPHICS_V2, F_MIG_MODE, F_MAX_MIG, F_MIG_HANDLE, F_PARENT, F_IS_MIG,
    F_CUDA_VERSION, F_NVML_VERSION, N_FUNCS
};
static const char *const func_names[N_FUNCS] = {
    "nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetIndex", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceIsMigDeviceHandle", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetNVMLVersion",
};

/* Resolve a handle to its scenario records; NULL gpu means the handle is not ours. */
static nvmlReturn_t resolve(nvmlDevice_t device, gpu_t **gpu, mig_t **mig)
{
    *gpu = NULL;
    *mig = NULL;
    uintptr_t p = (uintptr_t)device;
    uintptr_t gpus = (uintptr_t)gpu_handles, migs = (uintptr_t)mig_handles;
    if (p >= gpus && p < gpus + sizeof(gpu_handles)) {
        if ((p - gpus) % sizeof(gpu_handles[0]))
            return NVML_ERROR_INVALID_ARGUMENT;
    } else if (p >= migs && p < migs + sizeof(mig_handles)) {
        if ((p - migs) % sizeof(mig_handles[0][0]))
            return NVML_ERROR_INVALID_ARGUMENT;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->gpu >= current.ngpus)
        return NVML_ERROR_GPU_IS_LOST; /* a GPU that vanished from the scenario */
    *gpu = &current.gpus[device->gpu];
    if (device->mig >= 0) {
        if (!(*gpu)->mig_mode || !(*gpu)->migs[device->mig].present)
            return NVML_ERROR_INVALID_ARGUMENT; /* the instance was destroyed */
        *mig = &(*gpu)->migs[device->mig];
    }
    return NVML_SUCCESS;
}

/* The error a call on this device should return, if any. */
static nvmlReturn_t device_check(nvmlDevice_t device, int call, gpu_t **gpu, mig_t **mig)
{
    nvmlReturn_t r = resolve(device, gpu, mig);
    if (r != NVML_SUCCESS)
        return r;
    if ((*gpu)->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if ((*gpu)->fail[call] && !*mig)
        return (*gpu)->fail[call];
    if (*mig && (*mig)->fail[call])
        return (*mig)->fail[call];
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- init and system */

static nvmlReturn_t do_init(int func)
{
    pthread_mutex_lock(&lock);
    call_counts[func]++;
    nvmlReturn_t r;
    switch (refresh()) {
    case FILE_MISSING:
        r = NVML_ERROR_DRIVER_NOT_LOADED;
        break;
    case FILE_BROKEN:
        r = NVML_ERROR_UNKNOWN;
        break;
    default:
        r = current.init_error;
    }
    if (r == NVML_SUCCESS)
        refcount++;
    pthread_mutex_unlock(&lock);
    return r;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(F_INIT_FLAGS);
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(F_INIT_V2);
}

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&lock);
    call_counts[F_SHUTDOWN]++;
    nvmlReturn_t r = NVML_SUCCESS;
    if (refcount == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else
        refcount--;
    pthread_mutex_unlock(&lock);
    return r;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER(F_DRIVER);
    RETURN(copy_out(version, length, current.driver));
    LEAVE;
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    ENTER(F_NVML_VERSION);
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE + 16];
    snprintf(v, sizeof(v), "%d.%s", current.cuda_version / 1000, current.driver);
    RETURN(copy_out(version, length, v));
    LEAVE;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    ENTER(F_CUDA_VERSION);
    if (!cudaDriverVersion)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = current.cuda_version;
    LEAVE;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---------------------------------------------------------------- devices */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    ENTER(F_COUNT);
    if (!deviceCount)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = current.ngpus;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER(F_HANDLE_BY_INDEX);
    if (!device || index >= current.ngpus)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (current.gpus[index].fail[C_HANDLE])
        RETURN(current.gpus[index].fail[C_HANDLE]);
    gpu_handles[index].gpu = index;
    gpu_handles[index].mig = -1;
    *device = &gpu_handles[index];
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    ENTER(F_HANDLE_BY_UUID);
    if (!uuid || !device)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < current.ngpus; i++) {
        gpu_t *g = &current.gpus[i];
        if (strcmp(g->uuid, uuid) == 0) {
            if (g->fail[C_HANDLE])
                RETURN(g->fail[C_HANDLE]);
            gpu_handles[i].gpu = i;
            gpu_handles[i].mig = -1;
            *device = &gpu_handles[i];
            RETURN(NVML_SUCCESS);
        }
        for (int s = 0; g->mig_mode && s < MAX_MIG; s++) {
            if (g->migs[s].present && strcmp(g->migs[s].uuid, uuid) == 0) {
                mig_handles[i][s].gpu = i;
                mig_handles[i][s].mig = s;
                *device = &mig_handles[i][s];
                RETURN(NVML_SUCCESS);
            }
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ENTER(F_UUID);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_UUID, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    RETURN(copy_out(uuid, length, m ? m->uuid : g->uuid));
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ENTER(F_NAME);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_NAME, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    RETURN(copy_out(name, length, m ? m->name : g->name));
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    ENTER(F_INDEX);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_INDEX, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!index)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* For a MIG handle NVML answers the MIG device index within its parent. */
    *index = device->mig >= 0 ? (unsigned int)device->mig : device->gpu;
    LEAVE;
}

static void memory_of(gpu_t *g, mig_t *m, unsigned long long *total, unsigned long long *used,
                      unsigned long long *reserved)
{
    *total = m ? m->mem_total : g->mem_total;
    *used = m ? m->mem_used : g->mem_used;
    *reserved = m ? m->mem_reserved : g->mem_reserved;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER(F_MEMORY);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_MEMORY, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!memory)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long total, used, reserved;
    memory_of(g, m, &total, &used, &reserved);
    /* v1 counts the driver's reserved memory as used. */
    memory->total = total;
    memory->used = used + reserved;
    memory->free = total - used - reserved;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    ENTER(F_MEMORY_V2);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_MEMORY, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!memory)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2)
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned long long total, used, reserved;
    memory_of(g, m, &total, &used, &reserved);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used - reserved;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    ENTER(F_UTIL);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_UTIL, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!utilization)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* "On MIG-enabled GPUs, querying device utilization rates is not currently supported." */
    if (m || g->mig_mode)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    utilization->gpu = g->util;
    utilization->memory = g->mem_util;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    ENTER(F_POWER);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_POWER, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!power)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (m)
        RETURN(NVML_ERROR_NOT_SUPPORTED); /* power is a property of the whole board */
    *power = g->power_mw;
    LEAVE;
}

/* Shared body of the four process-list calls (v2 and v3 use the same struct layout). */
static nvmlReturn_t processes(nvmlDevice_t device, int graphics, unsigned int *infoCount,
                              nvmlProcessInfo_t *infos)
{
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, graphics ? C_GRAPHICS : C_COMPUTE, &g, &m);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (unsigned int i = 0; i < current.nprocs; i++) {
        proc_t *p = &current.procs[i];
        /* The parent handle of a MIG GPU lists every instance's processes (as root would). */
        if (p->gpu == device->gpu && p->graphics == graphics &&
            (device->mig < 0 || p->mig == device->mig))
            n++;
    }
    if (n == 0) {
        *infoCount = 0;
        return NVML_SUCCESS;
    }
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (!infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int k = 0;
    for (unsigned int i = 0; i < current.nprocs; i++) {
        proc_t *p = &current.procs[i];
        if (p->gpu == device->gpu && p->graphics == graphics &&
            (device->mig < 0 || p->mig == device->mig)) {
            infos[k].pid = p->pid;
            infos[k].usedGpuMemory = p->mem;
            infos[k].gpuInstanceId = p->mig >= 0 ? (unsigned int)p->mig : NO_INSTANCE;
            infos[k].computeInstanceId = p->mig >= 0 ? 0 : NO_INSTANCE;
            k++;
        }
    }
    *infoCount = k;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_V3_PROCESSES
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    ENTER(F_COMPUTE_V3);
    RETURN(processes(device, 0, infoCount, infos));
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    ENTER(F_GRAPHICS_V3);
    RETURN(processes(device, 1, infoCount, infos));
    LEAVE;
}
#endif

/* Older drivers (before R510) only have these; nvml.h declares them only for old callers. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos);

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    ENTER(F_COMPUTE_V2);
    RETURN(processes(device, 0, infoCount, infos));
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    ENTER(F_GRAPHICS_V2);
    RETURN(processes(device, 1, infoCount, infos));
    LEAVE;
}

/* ---------------------------------------------------------------- MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    ENTER(F_MIG_MODE);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_MIG_MODE, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (m || !currentMode || !pendingMode)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *currentMode = g->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = *currentMode;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    ENTER(F_MAX_MIG);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_MIG_COUNT, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (m || !count)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *count = g->mig_mode ? g->max_mig : 0;
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    ENTER(F_MIG_HANDLE);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = device_check(device, C_MIG_HANDLE, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (m || !migDevice)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->mig_mode)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    if (index >= g->max_mig)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->migs[index].present)
        RETURN(NVML_ERROR_NOT_FOUND);
    mig_handles[device->gpu][index].gpu = device->gpu;
    mig_handles[device->gpu][index].mig = (int)index;
    *migDevice = &mig_handles[device->gpu][index];
    LEAVE;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    ENTER(F_PARENT);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = resolve(migDevice, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!m || !device)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    gpu_handles[migDevice->gpu].gpu = migDevice->gpu;
    gpu_handles[migDevice->gpu].mig = -1;
    *device = &gpu_handles[migDevice->gpu];
    LEAVE;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    ENTER(F_IS_MIG);
    gpu_t *g;
    mig_t *m;
    nvmlReturn_t r = resolve(device, &g, &m);
    if (r != NVML_SUCCESS)
        RETURN(r);
    if (!isMigDevice)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = m != NULL;
    LEAVE;
}

/* ---------------------------------------------------------------- test helpers (not NVML) */

void fake_nvml_reset(void);
long fake_nvml_call_count(const char *name);
int fake_nvml_refcount(void);

/* Forget the init count and the loaded scenario, as if the process had just started. */
void fake_nvml_reset(void)
{
    pthread_mutex_lock(&lock);
    refcount = 0;
    loaded = 0;
    broken = 0;
    key_valid = 0;
    memset(call_counts, 0, sizeof(call_counts));
    pthread_mutex_unlock(&lock);
}

/* How often the named NVML function was called since load or the last reset; -1 if unknown. */
long fake_nvml_call_count(const char *name)
{
    long r = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < N_FUNCS; i++)
        if (name && strcmp(func_names[i], name) == 0)
            r = (long)call_counts[i];
    pthread_mutex_unlock(&lock);
    return r;
}

/* Current init reference count, so tests can check that readers shut NVML down. */
int fake_nvml_refcount(void)
{
    pthread_mutex_lock(&lock);
    int r = refcount;
    pthread_mutex_unlock(&lock);
    return r;
}
