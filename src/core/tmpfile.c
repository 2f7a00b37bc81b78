/* tmpfile.c - finished files through a temporary file, removed on failure and on the
 * signals that end the process (tmpfile.h). */
#include "core/tmpfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/regular.h"
#include "core/rng.h"
#include "core/test_seam.h"

/* ---- what the signal handler sees ------------------------------------------------ */

/* A slot's life: FREE -> FILLING (a writer claimed it and is writing dirfd and name)
 * -> ARMED (the handler may unlink it) -> FREE when the file is renamed or removed,
 * or -> REMOVING when the handler took it (the process is ending). The handler reads
 * dirfd and name only after winning ARMED -> REMOVING, so it never sees them half
 * written, and a writer never reuses a slot the handler holds. */
enum { SLOT_FREE, SLOT_FILLING, SLOT_ARMED, SLOT_REMOVING };

static struct {
    atomic_int state;
    int dirfd;
    char name[256];
} slots[STOKE_TMPFILE_MAX_OPEN];

static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
#define N_SIGNALS (sizeof cleanup_signals / sizeof cleanup_signals[0])

/* The disposition each signal had before the handler was put in front of it (or the
 * one a chained handler changed it to since), and whether the handler is there. */
static struct sigaction passed_on[N_SIGNALS];
static bool in_front[N_SIGNALS];

/* Signals the handler has seen: only the test seam reads it. */
static atomic_uint signals_seen;

/* The test seam (core/test_seam.h): NULL outside tests. */
static stoke_tmpfile_chunk_hook chunk_hook;

void stoke_tmpfile_set_chunk_hook(stoke_tmpfile_chunk_hook hook) { chunk_hook = hook; }

unsigned stoke_tmpfile_signals_seen(void) { return atomic_load(&signals_seen); }

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static int registered; /* slots not FREE, under install_lock */

static void on_signal(int sig, siginfo_t *info, void *uc);

static int signal_index(int sig)
{
    for (size_t k = 0; k < N_SIGNALS; k++)
        if (cleanup_signals[k] == sig)
            return (int)k;
    return -1;
}

static bool is_ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_signal;
}

static bool is_function(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) || (sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN);
}

/* The handler's own disposition in front of `behind`: the other cleanup signals are
 * blocked while it runs, and interrupted system calls restart only if they did for
 * the handler behind it. */
static void ours_in_front_of(const struct sigaction *behind, struct sigaction *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sa_sigaction = on_signal;
    /* SA_ONSTACK: core/sigstack.h */
    sa->sa_flags = SA_SIGINFO | SA_ONSTACK | (behind->sa_flags & SA_RESTART);
    sigemptyset(&sa->sa_mask);
    for (size_t k = 0; k < N_SIGNALS; k++)
        sigaddset(&sa->sa_mask, cleanup_signals[k]);
}

/* Async-signal-safe: atomics and unlinkat only. */
static void remove_all(void)
{
    for (int i = 0; i < STOKE_TMPFILE_MAX_OPEN; i++) {
        int armed = SLOT_ARMED;
        if (atomic_compare_exchange_strong(&slots[i].state, &armed, SLOT_REMOVING))
            unlinkat(slots[i].dirfd, slots[i].name, 0);
    }
}

static void on_signal(int sig, siginfo_t *info, void *uc)
{
    int saved_errno = errno;
    atomic_fetch_add(&signals_seen, 1);
    int k = signal_index(sig);
    if (k < 0) {
        errno = saved_errno;
        return;
    }
    struct sigaction behind = passed_on[k];
    if (is_function(&behind)) {
        if (behind.sa_flags & SA_RESETHAND) { /* the kernel would have reset it */
            memset(&passed_on[k], 0, sizeof passed_on[k]);
            passed_on[k].sa_handler = SIG_DFL;
        }
        if (behind.sa_flags & SA_SIGINFO)
            behind.sa_sigaction(sig, info, uc);
        else
            behind.sa_handler(sig);
        /* A handler that changed its own disposition (stoke train's resets it to
         * SIG_DFL, so that a second Ctrl-C ends the run) replaced this one: adopt its
         * choice as what to pass on, and stand in front of it again, so a second
         * signal during the write still removes the temporary file. */
        struct sigaction now;
        if (sigaction(sig, NULL, &now) == 0 && !is_ours(&now)) {
            passed_on[k] = now;
            struct sigaction ours;
            ours_in_front_of(&now, &ours);
            sigaction(sig, &ours, NULL);
        }
    } else if (behind.sa_handler == SIG_DFL) {
        /* The signal ends the process: remove the temporary files, then let it end as
         * it would have, with the same status (128 + sig in a shell). */
        remove_all();
        sigaction(sig, &behind, NULL);
        raise(sig);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    } /* else ignored: the write goes on */
    errno = saved_errno;
}

/* Puts the handler in front of each cleanup signal that is not ignored. Under
 * install_lock. */
static void install(void)
{
    for (size_t k = 0; k < N_SIGNALS; k++) {
        struct sigaction cur, ours;
        in_front[k] = false;
        if (sigaction(cleanup_signals[k], NULL, &cur) != 0 ||
            (!is_function(&cur) && cur.sa_handler == SIG_IGN))
            continue;
        if (is_ours(&cur)) { /* already in front */
            in_front[k] = true;
            continue;
        }
        passed_on[k] = cur;
        ours_in_front_of(&cur, &ours);
        in_front[k] = sigaction(cleanup_signals[k], &ours, NULL) == 0;
    }
}

/* Restores what the handler stood in front of, unless someone replaced the handler
 * meanwhile (theirs then stays). Under install_lock. */
static void uninstall(void)
{
    for (size_t k = 0; k < N_SIGNALS; k++) {
        struct sigaction cur;
        if (in_front[k] && sigaction(cleanup_signals[k], NULL, &cur) == 0 && is_ours(&cur))
            sigaction(cleanup_signals[k], &passed_on[k], NULL);
        in_front[k] = false;
    }
}

/* ---- the file --------------------------------------------------------------------- */

/* Six random letters or digits; uniqueness is enforced by O_EXCL, this only makes a
 * collision rare. */
static void random_suffix(char out[7])
{
    static atomic_uint_fast64_t counter;
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = stoke_fmix64(stoke_now_ns() ^ ((uint64_t)getpid() << 32) ^
                              (atomic_fetch_add(&counter, 1) * STOKE_GOLDEN64));
    for (int i = 0; i < 6; i++, x /= 62)
        out[i] = alphabet[x % 62];
    out[6] = '\0';
}

static void make_tmp_name(stoke_tmpfile *t)
{
    char r[7];
    random_suffix(r);
    /* Long names are cut so the whole stays within NAME_MAX (255). */
    snprintf(t->tmp, sizeof t->tmp, ".%.*s.stoke-tmp-%s", 237, t->base, r);
}

/* The cause of a failed write, fsync or close, for the message. */
static void describe(int e, uint64_t written, size_t pending, char *why, size_t size)
{
    struct rlimit rl;
    if (e == EFBIG && getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        written + pending > (uint64_t)rl.rlim_cur)
        snprintf(why, size, "the file size limit (ulimit -f) of %llu bytes is reached",
                 (unsigned long long)rl.rlim_cur);
    else if (e == EFBIG)
        snprintf(why, size, "the file would be larger than the file system allows");
    else if (e == ENOSPC)
        snprintf(why, size, "no space left on the device");
    else if (e == EDQUOT)
        snprintf(why, size, "the disk quota is exceeded");
    else if (e == 0)
        snprintf(why, size, "the write made no progress");
    else
        snprintf(why, size, "%s", strerror(e));
}

/* Leaves the signal handler's table and closes the directory. */
static void release(stoke_tmpfile *t)
{
    if (t->slot >= 0) {
        int s = atomic_load(&slots[t->slot].state);
        while (s != SLOT_REMOVING &&
               !atomic_compare_exchange_weak(&slots[t->slot].state, &s, SLOT_FREE))
            ;
        if (s == SLOT_REMOVING)
            return; /* a signal handler is removing it: the process is ending */
        t->slot = -1;
        pthread_mutex_lock(&install_lock);
        if (--registered == 0)
            uninstall();
        pthread_mutex_unlock(&install_lock);
    }
    if (t->dirfd >= 0) {
        close(t->dirfd);
        t->dirfd = -1;
    }
}

/* Claims a slot and puts the handler in place; -1 when all slots are taken. */
static int claim_slot(void)
{
    for (int i = 0; i < STOKE_TMPFILE_MAX_OPEN; i++) {
        int free_ = SLOT_FREE;
        if (atomic_compare_exchange_strong(&slots[i].state, &free_, SLOT_FILLING)) {
            pthread_mutex_lock(&install_lock);
            if (registered++ == 0)
                install();
            pthread_mutex_unlock(&install_lock);
            return i;
        }
    }
    return -1;
}

static void arm(stoke_tmpfile *t)
{
    slots[t->slot].dirfd = t->dirfd;
    memcpy(slots[t->slot].name, t->tmp, sizeof t->tmp);
    atomic_store(&slots[t->slot].state, SLOT_ARMED);
}

stoke_status stoke_tmpfile_open(stoke_tmpfile *t, const char *path)
{
    memset(t, 0, sizeof *t);
    t->fd = t->dirfd = t->slot = -1;
    if (!path || !*path)
        return stoke_fail(STOKE_ERR_ARG, "no file name to write to");
    if (strlen(path) >= sizeof t->path)
        return stoke_fail(STOKE_ERR_ARG, "%.64s...: path too long", path);
    snprintf(t->path, sizeof t->path, "%s", path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base)
        return stoke_fail(STOKE_ERR_ARG, "%s: names a directory, not a file to write", path);
    if (strlen(base) >= sizeof t->base)
        return stoke_fail(STOKE_ERR_ARG, "%s: file name too long", path);
    snprintf(t->base, sizeof t->base, "%s", base);
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    t->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->dirfd < 0)
        return stoke_fail(STOKE_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstatat(t->dirfd, t->base, &st, 0) == 0 && !S_ISREG(st.st_mode)) {
        release(t);
        return stoke_fail(STOKE_ERR_IO,
                          "%s: is %s, not a regular file: stoke does not "
                          "replace it",
                          path, stoke_file_kind(st.st_mode));
    }
    t->slot = claim_slot();
    if (t->slot < 0) {
        release(t);
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "%s: more than %d files are being written "
                          "at once",
                          path, STOKE_TMPFILE_MAX_OPEN);
    }
    /* The name is armed before the file exists, so no moment passes where a signal
     * could end the process and leave an unregistered file. */
    int e = 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        make_tmp_name(t);
        arm(t);
        t->fd = openat(t->dirfd, t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (t->fd >= 0)
            break;
        e = errno;
        int armed = SLOT_ARMED;
        if (e != EEXIST ||
            !atomic_compare_exchange_strong(&slots[t->slot].state, &armed, SLOT_FILLING))
            break;
    }
    if (t->fd < 0) {
        release(t);
        return stoke_fail(STOKE_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                          strerror(e));
    }
    t->hook = chunk_hook;
    return STOKE_OK;
}

size_t stoke_write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t left = n - done;
        ssize_t w = write(fd, p + done, left > (1u << 30) ? (1u << 30) : left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = 0;
            return done;
        }
        done += (size_t)w;
    }
    return done;
}

stoke_status stoke_tmpfile_write(stoke_tmpfile *t, const void *buf, size_t n)
{
    if (t->fd < 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: written after it was closed", t->path);
    size_t w = stoke_write_all(t->fd, buf, n);
    int e = errno;
    t->written += (uint64_t)w;
    if (w < n) {
        char why[160];
        describe(e, t->written, n - w, why, sizeof why);
        stoke_status s = stoke_fail(STOKE_ERR_IO,
                                    "%s: write failed after %llu bytes: "
                                    "%s; %s is unchanged",
                                    t->path, (unsigned long long)t->written, why, t->path);
        stoke_tmpfile_abort(t);
        return s;
    }
    t->chunks++;
    if (t->hook && !t->hook(t->chunks))
        t->hook = NULL;
    return STOKE_OK;
}

stoke_status stoke_tmpfile_commit(stoke_tmpfile *t)
{
    if (t->fd < 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: committed after it was closed", t->path);
    char why[160];
    const char *what = NULL;
    int e = 0;
    int r;
    while ((r = fsync(t->fd)) != 0 && errno == EINTR)
        ;
    if (r != 0) {
        what = "fsync";
        e = errno;
    }
    /* On Linux the descriptor is released even when close reports EINTR, and the data
     * is already on disk: only another error means the file may be incomplete. */
    r = close(t->fd);
    t->fd = -1;
    if (r != 0 && errno != EINTR && !what) {
        what = "close";
        e = errno;
    }
    if (what) {
        describe(e, t->written, 0, why, sizeof why);
        stoke_status s = stoke_fail(STOKE_ERR_IO,
                                    "%s: %s failed after %llu bytes: %s; %s "
                                    "is unchanged",
                                    t->path, what, (unsigned long long)t->written, why, t->path);
        stoke_tmpfile_abort(t);
        return s;
    }
    if (renameat(t->dirfd, t->tmp, t->dirfd, t->base) != 0) {
        stoke_status s = stoke_fail(STOKE_ERR_IO,
                                    "%s: cannot rename the finished file into "
                                    "place: %s",
                                    t->path, strerror(errno));
        stoke_tmpfile_abort(t);
        return s;
    }
    /* Makes the rename itself durable. Not checked: the new file is in place and
     * complete, and reporting a failure now would say it was not written. */
    fsync(t->dirfd);
    release(t);
    return STOKE_OK;
}

void stoke_tmpfile_abort(stoke_tmpfile *t)
{
    if (t->fd >= 0) {
        close(t->fd);
        t->fd = -1;
    }
    if (t->slot >= 0)
        unlinkat(t->dirfd, t->tmp, 0);
    release(t);
}

stoke_status stoke_tmpfile_check(const char *path)
{
    stoke_tmpfile t;
    stoke_status s = stoke_tmpfile_open(&t, path);
    if (s == STOKE_OK)
        stoke_tmpfile_abort(&t);
    return s;
}
