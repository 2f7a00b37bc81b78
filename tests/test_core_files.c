/* test_core_files.c - reading users' files (core/regular.h: only regular files, never
 * blocking) and writing them whole or not at all (core/tmpfile.h: failures, the file
 * size limit, and the signal handler in front of the default action, of an ignored
 * signal and of a handler like stoke train's). Signal cases run in a forked child, so
 * the process that dies is never the test's. */
#include "check.h"
#include "core/regular.h"
#include "core/tmpfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

static char dir[256];

/* A path in the test directory, in one of four rotating buffers: copy it to keep it. */
static const char *in_dir(const char *name)
{
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The whole file as text ("" if missing), in a static buffer. */
static const char *get(const char *path)
{
    static char buf[8192];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

static int count_tmp(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".stoke-tmp-"))
            n++;
    if (d)
        closedir(d);
    return n;
}

/* ---- regular.h ------------------------------------------------------------------- */

static void test_open_regular(void)
{
    char file[1024];
    snprintf(file, sizeof file, "%s", in_dir("plain.txt"));
    put(file, "hello");
    int fd = -2;
    struct stat st;
    CHECK_INT_EQ(stoke_open_regular(file, &fd, &st), STOKE_OK);
    CHECK(fd >= 0);
    CHECK_INT_EQ(st.st_size, 5);
    /* Blocking again: code reading through it must not see EAGAIN. */
    CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
    CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    if (fd >= 0)
        close(fd);

    CHECK_INT_EQ(stoke_open_regular(in_dir("missing"), &fd, NULL), STOKE_ERR_NOTFOUND);
    CHECK_INT_EQ(fd, -1);
    CHECK_STR_CONTAINS(stoke_last_error(), "/missing: cannot open: No such file");

    CHECK_INT_EQ(stoke_open_regular(dir, &fd, NULL), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), ": is a directory, not a regular file");

    /* A FIFO with no writer: open() without O_NONBLOCK would wait forever (ctest's
     * timeout would catch it). */
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s", in_dir("fifo"));
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_INT_EQ(stoke_open_regular(fifo, &fd, NULL), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/fifo: is a FIFO (named pipe), not a regular file");
    CHECK_INT_EQ(stoke_open_regular("/dev/null", &fd, NULL), STOKE_ERR_IO);
    CHECK_STR_EQ(stoke_last_error(), "/dev/null: is a character device, not a regular file");

    FILE *f = NULL;
    CHECK_INT_EQ(stoke_fopen_regular(file, NULL, &f), STOKE_OK);
    char b[8] = "";
    CHECK(f && fgets(b, sizeof b, f));
    CHECK_STR_EQ(b, "hello");
    if (f)
        fclose(f);
    CHECK_INT_EQ(stoke_fopen_regular(fifo, "not a preset", &f), STOKE_ERR_IO);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "/fifo: not a preset: is a FIFO (named pipe)");
    CHECK_INT_EQ(stoke_fopen_regular(in_dir("missing"), "not a preset", &f), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "/missing: not a preset: cannot open: No such");
    unlink(fifo);
    unlink(file);

    CHECK_STR_EQ(stoke_file_kind(S_IFSOCK), "a socket");
    CHECK_STR_EQ(stoke_file_kind(S_IFBLK), "a block device");
    CHECK_STR_EQ(stoke_file_kind(S_IFLNK), "a symbolic link");
    CHECK_STR_EQ(stoke_file_kind(S_IFREG | 0644), "a regular file");
}

/* A library's path before dlopen, which opens blocking: a FIFO would hang it. */
static void test_check_library(void)
{
    char file[1024], fifo[1024];
    snprintf(file, sizeof file, "%s", in_dir("lib.so"));
    snprintf(fifo, sizeof fifo, "%s", in_dir("lib.fifo"));
    put(file, "not ELF: dlopen says so, the check does not");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_INT_EQ(stoke_check_library("STOKE_X_LIBRARY", file), STOKE_OK);
    CHECK_INT_EQ(stoke_check_library("STOKE_X_LIBRARY", fifo), STOKE_ERR_IO);
    char want[1200];
    snprintf(want, sizeof want,
             "STOKE_X_LIBRARY=%s: is a FIFO (named pipe), not a regular file (a library is one)",
             fifo);
    CHECK_STR_EQ(stoke_last_error(), want);
    CHECK_INT_EQ(stoke_check_library(NULL, dir), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), ": is a directory, not a regular file");
    CHECK_INT_EQ(stoke_check_library("STOKE_X_LIBRARY", "/dev/null"), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "STOKE_X_LIBRARY=/dev/null: is a character device");
    /* missing: dlopen's own message says so; a bare soname: the loader's search */
    CHECK_INT_EQ(stoke_check_library("STOKE_X_LIBRARY", in_dir("missing.so")), STOKE_OK);
    CHECK_INT_EQ(stoke_check_library("STOKE_X_LIBRARY", "libnvidia-ml.so.1"), STOKE_OK);
    unlink(fifo);
    unlink(file);
}

/* ---- tmpfile.h: in this process ---------------------------------------------------- */

static void test_tmpfile_basics(void)
{
    char dst[1024];
    snprintf(dst, sizeof dst, "%s", in_dir("out.bin"));
    stoke_tmpfile t;
    CHECK_INT_EQ(stoke_tmpfile_open(&t, dst), STOKE_OK);
    CHECK_INT_EQ(count_tmp(), 1);
    CHECK(access(dst, F_OK) != 0); /* nothing under the name until commit */
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "abc", 3), STOKE_OK);
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "def", 3), STOKE_OK);
    CHECK_INT_EQ(t.written, 6);
    CHECK_INT_EQ(stoke_tmpfile_commit(&t), STOKE_OK);
    CHECK_STR_EQ(get(dst), "abcdef");
    CHECK_INT_EQ(count_tmp(), 0);
    stoke_tmpfile_abort(&t); /* after commit: nothing to do */
    CHECK_STR_EQ(get(dst), "abcdef");

    /* Giving up leaves the old file. */
    CHECK_INT_EQ(stoke_tmpfile_open(&t, dst), STOKE_OK);
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "xyz", 3), STOKE_OK);
    stoke_tmpfile_abort(&t);
    stoke_tmpfile_abort(&t);
    CHECK_STR_EQ(get(dst), "abcdef");
    CHECK_INT_EQ(count_tmp(), 0);
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "x", 1), STOKE_ERR_ARG);

    /* Destinations that are not regular files are never replaced. */
    char sub[1024];
    snprintf(sub, sizeof sub, "%s", in_dir("sub"));
    CHECK(mkdir(sub, 0755) == 0);
    CHECK_INT_EQ(stoke_tmpfile_open(&t, sub), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/sub: is a directory, not a regular file");
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s", in_dir("fifo"));
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_INT_EQ(stoke_tmpfile_open(&t, fifo), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/fifo: is a FIFO (named pipe), not a regular file");
    CHECK_INT_EQ(count_tmp(), 0);
    CHECK_INT_EQ(stoke_tmpfile_open(&t, in_dir("nodir/x")), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nodir/x: cannot create a temporary file beside it");
    CHECK_INT_EQ(stoke_tmpfile_open(&t, ""), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_tmpfile_open(&t, "dir/"), STOKE_ERR_ARG);
    rmdir(sub);
    unlink(fifo);

    /* A name at NAME_MAX still gets a temporary file (its name is cut). */
    char longname[256];
    memset(longname, 'n', 255);
    longname[255] = '\0';
    char lp[1024];
    snprintf(lp, sizeof lp, "%s", in_dir(longname));
    CHECK_INT_EQ(stoke_tmpfile_open(&t, lp), STOKE_OK);
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "L", 1), STOKE_OK);
    CHECK_INT_EQ(stoke_tmpfile_commit(&t), STOKE_OK);
    CHECK_STR_EQ(get(lp), "L");
    unlink(lp);

    /* Many at once, up to the table's size; the handler is restored once all are done. */
    struct sigaction before, after;
    sigaction(SIGTERM, NULL, &before);
    stoke_tmpfile many[STOKE_TMPFILE_MAX_OPEN + 1];
    char names[STOKE_TMPFILE_MAX_OPEN + 1][32];
    for (int i = 0; i < STOKE_TMPFILE_MAX_OPEN; i++) {
        snprintf(names[i], sizeof names[i], "m%d", i);
        CHECK_INT_EQ(stoke_tmpfile_open(&many[i], in_dir(names[i])), STOKE_OK);
    }
    CHECK_INT_EQ(stoke_tmpfile_open(&many[STOKE_TMPFILE_MAX_OPEN], in_dir("one-too-many")),
                 STOKE_ERR_UNAVAILABLE);
    sigaction(SIGTERM, NULL, &after);
    CHECK(after.sa_flags & SA_SIGINFO); /* the handler is in front */
    for (int i = 0; i < STOKE_TMPFILE_MAX_OPEN; i++) {
        CHECK_INT_EQ(stoke_tmpfile_write(&many[i], names[i], strlen(names[i])), STOKE_OK);
        CHECK_INT_EQ(i % 2 ? stoke_tmpfile_commit(&many[i]) : (stoke_tmpfile_abort(&many[i]), 0),
                     STOKE_OK);
    }
    sigaction(SIGTERM, NULL, &after);
    CHECK(after.sa_handler == before.sa_handler && after.sa_flags == before.sa_flags);
    for (int i = 0; i < STOKE_TMPFILE_MAX_OPEN; i++) {
        CHECK_STR_EQ(get(in_dir(names[i])), i % 2 ? names[i] : "");
        unlink(in_dir(names[i]));
    }
    CHECK_INT_EQ(count_tmp(), 0);
    unlink(dst);
}

/* ---- tmpfile.h: signals, in children ------------------------------------------------ */

/* Runs fn in a child; returns its wait status. The child exits 0 when its checks held. */
static int in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* SIGXFSZ's default action dumps core */
        fn();
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    return st;
}

static void expect_killed(int st, int sig, const char *what)
{
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == sig, "%s: status %#x, wanted death by %s", what,
              st, strsignal(sig));
    CHECK_MSG(count_tmp() == 0, "%s: a temporary file was left", what);
    CHECK_MSG(strcmp(get(in_dir("keep")), "old") == 0, "%s: the destination changed", what);
}

static void expect_exit0(int st, const char *what)
{
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x", what, st);
}

/* Opens a temporary file for "keep" with some bytes in it. */
static void start_write(stoke_tmpfile *t)
{
    CHECK_INT_EQ(stoke_tmpfile_open(t, in_dir("keep")), STOKE_OK);
    CHECK_INT_EQ(stoke_tmpfile_write(t, "new", 3), STOKE_OK);
    CHECK_INT_EQ(count_tmp(), 1);
}

static void child_default(void)
{
    signal(SIGTERM, SIG_DFL);
    stoke_tmpfile t;
    start_write(&t);
    raise(SIGTERM);
    _exit(3); /* not reached */
}

/* stoke train's handler: the first signal only sets a flag, and resets the
 * disposition so that a second one ends the process. */
static volatile sig_atomic_t train_flag;
static void train_like(int sig)
{
    train_flag++;
    signal(sig, SIG_DFL);
}

static void child_train_second_signal(void)
{
    struct sigaction sa = {.sa_handler = train_like};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    stoke_tmpfile t;
    start_write(&t);
    raise(SIGINT);
    CHECK_INT_EQ(train_flag, 1);
    CHECK_INT_EQ(count_tmp(), 1); /* the write goes on */
    CHECK_INT_EQ(stoke_tmpfile_write(&t, "more", 4), STOKE_OK);
    raise(SIGINT); /* the second one ends it, without the temporary file */
    _exit(3);
}

static void child_train_one_signal(void)
{
    struct sigaction sa = {.sa_handler = train_like};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    stoke_tmpfile t;
    start_write(&t);
    raise(SIGINT);
    CHECK_INT_EQ(train_flag, 1);
    CHECK_INT_EQ(stoke_tmpfile_commit(&t), STOKE_OK);
    CHECK_STR_EQ(get(in_dir("keep")), "new");
    /* What train chose (SIG_DFL) is what remains once the write is done. */
    struct sigaction now;
    sigaction(SIGINT, NULL, &now);
    CHECK(!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL);
}

static void child_train_signal_before(void)
{
    signal(SIGINT, train_like);
    raise(SIGINT); /* during training: the flag, and SIG_DFL from now on */
    CHECK_INT_EQ(train_flag, 1);
    stoke_tmpfile t;
    start_write(&t); /* the checkpoint written on the way out */
    raise(SIGINT);
    _exit(3);
}

static void child_ignored(void)
{
    signal(SIGHUP, SIG_IGN);
    stoke_tmpfile t;
    start_write(&t);
    raise(SIGHUP);
    CHECK_INT_EQ(stoke_tmpfile_commit(&t), STOKE_OK);
    struct sigaction now;
    sigaction(SIGHUP, NULL, &now);
    CHECK(now.sa_handler == SIG_IGN);
}

static volatile sig_atomic_t info_pid;
static void with_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    info_pid = si ? si->si_pid : -1;
}

static void child_siginfo(void)
{
    struct sigaction sa = {.sa_sigaction = with_info, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    stoke_tmpfile t;
    start_write(&t);
    kill(getpid(), SIGTERM);
    CHECK_INT_EQ(info_pid, getpid()); /* the handler behind got the siginfo */
    stoke_tmpfile_abort(&t);
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    CHECK((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == with_info);
}

static void limit_size(rlim_t bytes)
{
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = bytes;
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
}

/* As `stoke` runs: SIGXFSZ ignored, so the limit is an error with a message. */
static void child_fsize_ignored(void)
{
    signal(SIGXFSZ, SIG_IGN);
    limit_size(4096);
    stoke_tmpfile t;
    start_write(&t);
    char big[10000];
    memset(big, 'x', sizeof big);
    CHECK_INT_EQ(stoke_tmpfile_write(&t, big, sizeof big), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/keep: write failed after 4096 bytes: the file "
                                           "size limit (ulimit -f) of 4096 bytes is reached");
    CHECK_INT_EQ(count_tmp(), 0);
    CHECK_STR_EQ(get(in_dir("keep")), "old");
}

/* A library caller that left SIGXFSZ alone: the process dies of it, but cleanly. */
static void child_fsize_default(void)
{
    signal(SIGXFSZ, SIG_DFL);
    limit_size(4096);
    stoke_tmpfile t;
    start_write(&t);
    char big[10000];
    memset(big, 'x', sizeof big);
    stoke_tmpfile_write(&t, big, sizeof big);
    _exit(3);
}

static void test_tmpfile_signals(void)
{
    put(in_dir("keep"), "old");
    expect_killed(in_child(child_default), SIGTERM, "default SIGTERM");
    expect_killed(in_child(child_train_second_signal), SIGINT, "second SIGINT (train)");
    expect_killed(in_child(child_train_signal_before), SIGINT, "SIGINT before and during");
    expect_killed(in_child(child_fsize_default), SIGXFSZ, "SIGXFSZ left default");
    expect_exit0(in_child(child_fsize_ignored), "SIGXFSZ ignored");
    expect_exit0(in_child(child_siginfo), "SA_SIGINFO handler");
    expect_exit0(in_child(child_ignored), "ignored SIGHUP");
    CHECK_STR_EQ(get(in_dir("keep")), "new");
    put(in_dir("keep"), "old");
    expect_exit0(in_child(child_train_one_signal), "one SIGINT (train)");
    CHECK_INT_EQ(count_tmp(), 0);
    unlink(in_dir("keep"));
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-files-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_open_regular();
    test_check_library();
    test_tmpfile_basics();
    test_tmpfile_signals();
    CHECK_MSG(rmdir(dir) == 0, "%s: %s (files left in it?)", dir, strerror(errno));
    return CHECK_DONE();
}
