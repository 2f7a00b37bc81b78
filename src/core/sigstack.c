/* sigstack.c - an alternate signal stack per thread (sigstack.h says why). */
#include "core/sigstack.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

static pthread_key_t key;
static int key_ok;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* 64 KiB, or four times the kernel's minimum where that is more: a frame with AMX's
 * tile state is about 11 KiB, and a handler may call what it likes within reason. */
unsigned long stoke_sigstack_bytes(void)
{
    unsigned long size = 64UL << 10;
    long min = sysconf(_SC_MINSIGSTKSZ);
    if (min > 0 && 4UL * (unsigned long)min > size)
        size = 4UL * (unsigned long)min;
    return size;
}

/* At the thread's exit: the stack is switched off before it is unmapped. */
static void release(void *p)
{
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    munmap(p, stoke_sigstack_bytes());
}

static void make_key(void) { key_ok = pthread_key_create(&key, release) == 0; }

int stoke_sigstack_ensure(void)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE))
        return 0;
    pthread_once(&once, make_key);
    unsigned long size = stoke_sigstack_bytes();
    /* mmap, not malloc: the main thread's stack lives to the end of the process, and a
     * leak checker should not report it */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    stack_t ss = {.ss_sp = p, .ss_size = size};
    if (sigaltstack(&ss, NULL) != 0) {
        munmap(p, size);
        return -1;
    }
    if (key_ok)
        pthread_setspecific(key, p);
    return 0;
}
