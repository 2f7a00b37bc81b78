/* alloc_seam.h - the CPU backend's allocator as a table a test can replace: the one
 * seam for injecting allocation failures into the CPU backend (docs/testing.md, "The
 * CPU allocator seam"). Only the backend's memory.c and tests include this header;
 * nothing in src/ installs another table. */
#ifndef STOKE_NN_CPU_ALLOC_SEAM_H
#define STOKE_NN_CPU_ALLOC_SEAM_H

#include <stddef.h>

typedef struct cpu_alloc_ops {
    /* A block for a request of `bytes` (0 included): 64-byte aligned, its size rounded
     * up to 64 bytes; NULL when refused. The backend zeroes what it gets. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
} cpu_alloc_ops;

/* posix_memalign and free: what a test's table calls for the blocks it allows. */
const cpu_alloc_ops *cpu_alloc_default_ops(void);

/* Every CPU context's alloc and free entries go through ops from now on (NULL: the
 * default); returns the table replaced. Not synchronized: install it before the
 * models whose allocations it should see are created, and restore the previous one
 * after they are freed (a block goes back to the table that allocated it). */
const cpu_alloc_ops *cpu_alloc_set_ops(const cpu_alloc_ops *ops);

#endif
